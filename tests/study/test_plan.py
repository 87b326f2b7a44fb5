"""Rules about a planned study as a whole."""

from __future__ import annotations

from dataclasses import replace

import pytest

from attnbench.cli import app
from attnbench.errors import CombinationError, FieldError, Problems
from attnbench.study import plan as planning
from attnbench.study.plan import check_one_rank_per_point, plan_study
from tests.helpers import one_error, runner

DECODE = """\
decode:
  d_model: 64
  num_heads: 4
  num_kv_heads: 4
  tp: {tp}
  prompt_len: 16
  gen_len: 4
"""


def command(tp: int) -> str:
    return f"time-it {tp}"


def planned(tmp_path, tp: str) -> tuple:
    path = tmp_path / "study.yaml"
    path.write_text(DECODE.format(tp=tp))
    return plan_study(path, "cpu"), str(path)


def test_a_study_of_points_on_one_rank_each_passes(tmp_path):
    plan, source = planned(tmp_path, "1")
    assert check_one_rank_per_point(plan, source, command) is None


def test_a_tensor_parallel_decode_point_is_refused_at_its_field(tmp_path):
    plan, source = planned(tmp_path, "4")
    with pytest.raises(FieldError) as caught:
        check_one_rank_per_point(plan, None, command)
    error = caught.value
    assert (error.field, error.value, error.location) == ("tp", 4, None)
    assert error.reason == (
        "a study runs each decode point on one rank; time a layer split over 4 ranks with time-it 4"
    )
    with pytest.raises(FieldError) as caught:
        check_one_rank_per_point(plan, source, command)
    assert str(caught.value) == f"decode.tp: 4 ({source}): {error.reason}"


def test_a_section_whose_points_its_run_order_all_leaves_out_says_so(tmp_path, monkeypatch):
    """Whatever leaves them out (decode's checks name their own reasons first): never a
    run of 0 points."""
    kinds = dict(planning.KINDS)
    kinds["decode"] = replace(kinds["decode"], order=lambda points, options: [])
    monkeypatch.setattr(planning, "KINDS", kinds)
    path = tmp_path / "study.yaml"
    path.write_text(DECODE.format(tp=1))
    with pytest.raises(Problems) as caught:
        plan_study(path, "cpu")
    assert str(caught.value) == (
        f"{path}: nothing to run for decode: its 2 points are all left out of the run "
        "(a point its other values do not time)"
    )


def test_a_combination_from_a_sweep_file_names_the_file(tmp_path):
    path = tmp_path / "study.yaml"
    path.write_text(DECODE.format(tp=1) + "  prefill: false\n  prefill_memory: true\n")
    with pytest.raises(Problems) as caught:
        plan_study(path, "cpu")
    (error,) = caught.value.errors
    assert isinstance(error, CombinationError) and error.source == str(path)
    assert str(error).startswith(f"{path}: invalid combination prefill_memory=True prefill=False")


def test_a_section_resolves_its_device_only_where_it_uses_it(monkeypatch, tmp_path):
    """kvmem without measuring uses no device: a device a sweep file gives is checked by
    name, but not whether it is here (resolving it needs torch, a second of start-up), and
    its points run on none; a --device flag then has no effect, which is an error (a
    file's device may serve the mode a flag picks: --measure)."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    shape = {"d_model": [64], "num_heads": [4], "num_kv_heads": [1]}
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text("sweep: {device: cuda}\nkvmem: {d_model: 64, num_heads: 4, measure: false}\n")
    computed = planning.plan_command("kvmem", str(sweep), {})
    assert computed.devices == {} and computed.context("kvmem").device is None
    assert not computed.uses_torch
    with pytest.raises(Problems, match="device: cuda: has no effect: the kvmem section uses no"):
        planning.plan_command("kvmem", None, {**shape, "measure": False, "device": "cuda"})
    own = tmp_path / "own.yaml"
    own.write_text("kvmem: {d_model: 64, num_heads: 4, measure: false, device: cuda}\n")
    assert planning.plan_command("kvmem", str(own), {}).devices == {}
    with pytest.raises(Problems, match="unknown device"):
        planning.plan_command("kvmem", None, {**shape, "measure": False, "device": "gpu"})
    with pytest.raises(Problems, match="CUDA is not available"):
        planning.plan_command("kvmem", None, {**shape, "measure": True, "device": "cuda"})
    measured = planning.plan_command("kvmem", None, {**shape, "measure": True, "device": "auto"})
    assert measured.devices == {"kvmem": torch.device("cpu")} and measured.uses_torch


@pytest.mark.parametrize(
    ("command", "flags", "named"),
    [
        ("kvmem", ["--kv-scale-group", "32"], "--kv-scale-group 32: has no effect: the cache"),
        ("kvmem", ["--kv-dtype", "float16,bfloat16", "--kv-scale-group", "32"], "the cache"),
        ("predict", ["--gpu", "h100-sxm", "--weights-group", "64"], "--weights-group 64"),
        ("fit", ["--gpu", "h100-sxm", "--seq-len", "4096", "--weights-group", "64"], "weights"),
        ("fit", ["--gpu", "h100-sxm", "--seq-len", "4096", "--kv-scale-group", "8"], "cache"),
        ("kvmem", ["--scale-dtype", "float32"], "--scale-dtype float32: has no effect"),
    ],
)
def test_a_scale_group_for_a_format_left_unquantised_is_refused(command, flags, named):
    """A scale group sizes the scales of quantised weights or caches: where no point of the
    sweep quantises them it would change nothing, and is refused as a flag without effect."""
    line = one_error(runner.invoke(app, [command, "--model", "llama-2-7b", *flags]))
    assert named in line and "not quantised" in line


def test_a_scale_dtype_for_a_float8_cache_scaled_per_tensor_is_refused():
    """float8's cache is scaled per tensor by default: it stores no scales, so their dtype
    changes nothing unless a group puts scales in the cache."""
    flags = ["--model", "llama-2-7b", "--kv-dtype", "fp8", "--scale-dtype", "float32"]
    line = one_error(runner.invoke(app, ["kvmem", *flags]))
    assert "--scale-dtype float32: has no effect: the cache stores no scales" in line
    assert "--kv-scale-group vector or a group size stores them" in line
    vector = runner.invoke(app, ["kvmem", *flags, "--kv-scale-group", "vector", "--no-measure"])
    assert vector.exit_code == 0, vector.output
    planned = planning.plan_command(
        "kvmem",
        None,
        {"kv_dtype": ["int8", "float8_e4m3fn"], "scale_dtype": ["float32"]},
        ["llama-2-7b"],
    )
    # int8's scales are in its cache: the dtype serves it, float8's point keeps the default
    assert [t.point.scale_dtype for t in planned.tasks] == ["float32", "float16"]


def test_a_scale_group_serves_the_quantised_points_of_a_sweep(tmp_path):
    """One quantised dtype of a sweep takes the group; a group the file shares among its
    sections may serve another, and is not refused where it has no effect."""
    mixed = {"kv_dtype": ["float16", "int8"], "kv_scale_group": [32]}
    planned = planning.plan_command("kvmem", None, mixed, ["llama-2-7b"])
    # float16's point has no group to take: it keeps the default
    assert [t.point.kv_scale_group for t in planned.tasks] == [None, 32]
    shared = tmp_path / "study.yaml"
    shared.write_text(
        "sweep: {kv_scale_group: 32}\nkvmem: {models: [llama-2-7b]}\n"
        "fit: {models: [llama-2-7b], kv_dtype: int8, seq_len: 4096, gpu: h100-sxm}\n"
    )
    assert planning.plan_command("kvmem", str(shared), {}).tasks
    own = tmp_path / "own.yaml"
    own.write_text("kvmem: {models: [llama-2-7b], kv_scale_group: 32}\n")
    with pytest.raises(Problems, match=r"kvmem.kv_scale_group: 32 \(.*own.yaml\): has no effect"):
        planning.plan_command("kvmem", str(own), {})


def test_a_sweep_keeps_each_distinct_point_once_and_every_model(tmp_path):
    """Options a point's formats do not take are reset and its duplicates dropped: a head
    tied to the embeddings is not quantised (gemma-7b), 16-bit weights keep no attention
    apart; two models of one name (a preset and a config.json of another depth), whose
    points hold the same fields, both run."""
    study = tmp_path / "study.yaml"

    def points(section: str) -> list:
        study.write_text(f"predict: {{gpu: h100-sxm, seq_len: 64, {section}}}\n")
        return [t.point for t in planning.plan_command("predict", str(study), {}).tasks]

    found = points(
        "models: [gemma-7b, llama-2-7b], weights_dtype: int4, quantize_head: [false, true]"
    )
    assert [(p.model, p.quantize_head) for p in found] == [
        ("gemma-7b", False),
        ("llama-2-7b", False),
        ("llama-2-7b", True),
    ]
    found = points(
        "models: [llama-2-7b], weights_dtype: [bfloat16, int4], keep_attention: [false, true]"
    )
    assert [(p.weights_dtype, p.keep_attention) for p in found] == [
        ("bfloat16", False),
        ("int4", False),
        ("int4", True),
    ]
    own = tmp_path / "llama-2-7b"
    own.mkdir()
    (own / "config.json").write_text(
        '{"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, '
        '"num_key_value_heads": 32, "num_hidden_layers": 16, "intermediate_size": 11008, '
        '"vocab_size": 32000, "max_position_embeddings": 4096, "torch_dtype": "float16"}'
    )
    found = points("models: [llama-2-7b, llama-2-7b/config.json]")
    assert [p.spec.num_layers for p in found] == [32, 16]


@pytest.mark.parametrize(
    ("text", "lines"),
    [
        ("", ["nothing to run for params, kvmem and decode: give d_model and num_heads or model"]),
        (
            "params: {}\nkvmem: {}\ndecode: {}\nfit: {}\n",
            [
                "nothing to run for params, kvmem and decode: give d_model and num_heads or model",
                "nothing to run for fit: give model",
            ],
        ),
    ],
)
def test_sections_with_nothing_to_run_for_want_of_the_same_fields_are_one_line(
    tmp_path, text, lines
):
    path = tmp_path / "study.yaml"
    path.write_text(text)
    result = runner.invoke(app, ["run", str(path), "--dry-run"])
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [f"error: {path}: {line}" for line in lines]
