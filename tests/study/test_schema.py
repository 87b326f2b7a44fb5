"""Limits on what a user can ask for: every integer field has an upper bound (so no size
computed from it overflows or takes a list nobody can hold), threads are bounded by the
CPUs, a decode point that cannot fit is skipped with the bytes it needs, and a study has a
largest number of points, counted before any point is built. Each refusal is one line,
exit 2, at once."""

from __future__ import annotations

import json
import time

import pytest
import torch
import yaml

import attnbench.experiments.decode as decode_mod
from attnbench.cli import app
from attnbench.cli.flags import parse_field
from attnbench.errors import FieldError, Problems
from attnbench.experiments.context import Context
from attnbench.experiments.decode import DecodePoint, decode_bytes
from attnbench.model.architecture import ModelSpec
from attnbench.model.capacity import (
    MAX_SEQUENCES,
    KvFormat,
    cache_bytes,
    cache_slots,
    kv_cache_bytes,
    parse_seq_lens,
    token_layout,
    window_summary,
)
from attnbench.model.formulas import attention_params
from attnbench.model.units import format_bytes
from attnbench.study import schema
from attnbench.study.plan import (
    MAX_POINTS,
    TooManyPoints,
    plan_command,
    plan_sections,
    plan_study,
    point_count,
)
from attnbench.study.schema import FIELDS, above_maximum, canonical_value, max_threads
from attnbench.study.sweep import Section, check_value, load_config, resolve
from tests.experiments.options import decode_point, with_options
from tests.helpers import runner


def invoke(*args: object):
    start = time.perf_counter()
    result = runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})
    return result, time.perf_counter() - start


def one_error(result) -> str:
    """The single `error:` line a refused command prints (and nothing else)."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: ")
    return line[len("error: ") :]


# --- 1. every integer field has an upper bound ------------------------------------------


def test_every_integer_field_has_a_maximum_shown_in_its_help():
    ints = [name for name, spec in FIELDS.items() if spec.type is int]
    assert ints
    for name in ints:
        upper = FIELDS[name].upper
        assert isinstance(upper, int) and upper >= (FIELDS[name].minimum or 0) + 1, name
        assert f"at most {upper:,}" in FIELDS[name].help_text(), name
    result, _ = invoke("params", "--help")
    assert "(at most 1,048,576)" in " ".join(result.stdout.split())


def test_the_suggested_bounds():
    upper = {name: FIELDS[name].upper for name in FIELDS if FIELDS[name].type is int}
    assert upper["d_model"] == 1_048_576
    assert upper["num_heads"] == upper["num_kv_heads"] == upper["head_dim"] == 65_536
    assert upper["num_layers"] == 100_000
    for name in (
        "batch",
        "seq_len",
        "prompt_len",
        "page_size",
        "kv_scale_group",
        "sliding_window",
        "seq_lens",
    ):
        assert upper[name] == 10**9, name
    assert upper["gen_len"] == 1_000_000
    assert upper["warmup"] == upper["repeats"] == 10_000
    assert upper["tp"] == upper["gpus"] == 1_000_000
    assert upper["threads"] == max_threads()


@pytest.mark.parametrize("name", [n for n, f in FIELDS.items() if f.type is int])
def test_one_above_the_maximum_is_refused_naming_the_field(name):
    upper = FIELDS[name].upper
    assert parse_field(name, str(upper)) in (upper, [upper])
    with pytest.raises(FieldError) as info:
        parse_field(name, str(upper + 1))
    assert info.value.field == name
    assert info.value.reason.startswith(f"must be <= {upper}")
    assert above_maximum(name, upper) is None


def test_a_huge_width_is_refused_before_any_tensor_is_built():
    result, seconds = invoke("params", "--d-model", 10**12, "--heads", 8)
    assert one_error(result) == "--d-model 1000000000000: must be <= 1048576"
    assert "overflow" not in result.output.lower()
    assert seconds < 5


def test_a_huge_layer_count_is_refused_not_a_memory_error():
    result, seconds = invoke("kvmem", "--layers", 10**12)
    assert one_error(result) == "--layers 1000000000000: must be <= 100000"
    assert seconds < 5


def test_a_billion_sequences_are_sized_at_once_in_exact_integers(tmp_path):
    out = tmp_path / "kv.json"
    result, seconds = invoke(
        "kvmem",
        "--d-model",
        512,
        "--heads",
        8,
        "--batch",
        10**9,
        "--seq-len",
        4096,
        "--no-measure",
        "--json",
        out,
        "-q",
    )
    assert result.exit_code == 0, result.output
    assert seconds < 5
    (record,) = json.loads(out.read_text())["records"]
    assert record["kv_bytes"] == 2 * 10**9 * 4096 * 8 * 64 * 2  # K and V, float16
    assert record["kv_bytes"] == kv_cache_bytes(1, 10**9, 4096, 8, 64, "float16")


def test_the_largest_model_is_sized_with_counts_per_window_not_per_layer():
    layout = token_layout(8, 8, 64, KvFormat("float16"))
    layers = FIELDS["num_layers"].upper
    counted = cache_bytes(layout, {None: layers - 2, 4096: 2}, {10**9: 10**9})
    listed = cache_bytes(layout, (None,) * (layers - 2) + (4096, 4096), {10**9: 10**9})
    assert counted == listed
    assert cache_slots({None: 3}, [5, 7]) == 3 * 12
    assert window_summary({None: 5, 128: 2, 64: 1}) == (128, 3)
    assert window_summary({None: 5}) == (None, 0)
    assert kv_cache_bytes(layers, 1, 1, 1, 1, "float16") == 2 * layers * 2


def test_a_value_above_its_maximum_in_a_sweep_file_is_named_where_it_is(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "study.yaml").write_text("kvmem:\n  d_model: 2000000\n  num_heads: 8\n")
    result, _ = invoke("run", "study.yaml", "--dry-run")
    assert one_error(result) == "kvmem.d_model: 2000000 (study.yaml): must be <= 1048576"


def test_the_planner_bounds_what_a_model_brings():
    config = load_config(None)
    sec = resolve(config, "params", {"d_model": [64], "num_heads": [4]})
    wide = ModelSpec(
        name="wide",
        d_model=2**21,
        num_heads=8,
        num_kv_heads=8,
        head_dim=64,
        num_layers=2,
        dtype="float16",
        source="a test",
    )
    sec.models.append(wide)
    with pytest.raises(Problems) as info:
        plan_sections(config, {"params": sec})
    assert str(info.value) == "wide: d_model 2097152: must be <= 1048576"


def test_seq_lens_are_counted_before_they_are_built():
    with pytest.raises(FieldError) as info:
        parse_seq_lens("4x8,1000000000000x512")
    assert info.value.field == "seq_lens"
    assert "more than 1,000,000 sequences in one batch" in info.value.reason
    with pytest.raises(FieldError):
        parse_seq_lens("linspace:1:4096:100000000000")
    assert len(parse_seq_lens(f"{MAX_SEQUENCES}x1")) == MAX_SEQUENCES
    result, seconds = invoke(
        "kvmem", "--d-model", 64, "--heads", 4, "--seq-lens", "1000000000000x5"
    )
    assert one_error(result).startswith("--seq-lens 1000000000000x5: more than 1,000,000")
    assert seconds < 5
    result, _ = invoke("kvmem", "--d-model", 64, "--heads", 4, "--seq-lens", "3,2000000000")
    assert one_error(result) == "--seq-lens 2000000000: must be <= 1000000000"


# --- 2. threads --------------------------------------------------------------------------


def test_threads_are_bounded_by_the_cpus_on_the_command_line():
    bound = max_threads()
    result, seconds = invoke("decode-speed", "--d-model", 64, "--heads", 4, "--threads", 100000)
    message = one_error(result)
    assert message.startswith(f"--threads 100000: must be <= {bound} (4 per CPU")
    assert seconds < 5


def test_threads_are_bounded_in_planning_as_a_field_error(monkeypatch):
    monkeypatch.setattr(schema.os, "cpu_count", lambda: 2)
    assert max_threads() == 8
    overrides = {"d_model": [64], "num_heads": [4], "threads": 9}
    with pytest.raises(Problems) as info:
        plan_command("decode", None, overrides)
    (error,) = info.value.errors
    assert isinstance(error, FieldError) and error.field == "threads"
    assert error.reason == "must be <= 8 (4 per CPU, 2 CPUs)"
    plan = plan_command("decode", None, {**overrides, "threads": 8})
    assert plan.threads == 8


# --- 3. a decode point that cannot fit ---------------------------------------------------


def point(**kw) -> DecodePoint:
    base = dict(
        d_model=64,
        num_heads=4,
        num_kv_heads=2,
        batch=3,
        dtype="float32",
        prompt_len=10,
        gen_len=5,
        provider="attnbench",
        mode="cache",
    )
    return decode_point(**{**base, **kw})


def test_decode_bytes_counts_input_cache_weights_and_scores():
    b, total = 4, 15
    weights = attention_params(point().shape) * b
    x = 3 * total * 64 * b
    cache = 2 * 3 * 2 * total * 16 * b
    prefill = 3 * 10 * (2 * 64 + 2 * 32 + 64) * b  # q, new K/V, attention out, out
    assert decode_bytes(point()) == weights + x + cache + prefill
    assert decode_bytes(point(), prefill=False) == weights + x + cache + 3 * 1 * 256 * b
    uncached = 3 * total * 256 * b
    assert decode_bytes(point(mode="no_cache")) == weights + x + uncached
    expanded = 2 * 3 * 4 * total * 16 * b
    # the ones that hold every score: so many bytes of each at once
    for provider, per_score in (("naive", 12), ("sdpa-math", 9)):
        scores = 3 * 4 * total * total * per_score
        assert decode_bytes(point(mode="no_cache", provider=provider)) == (
            weights + x + uncached + scores + expanded
        )
    # hf holds a StaticCache for its step and another for its generations
    assert decode_bytes(point(provider="hf")) == weights + x + 3 * cache + prefill
    assert decode_bytes(point(provider="hf", gen_len=0)) == (
        weights + 3 * 11 * 64 * b + 2 * (2 * 3 * 2 * 11 * 16 * b) + prefill
    )
    huge = point(
        d_model=2**20,
        num_heads=2**16,
        num_kv_heads=2**16,
        head_dim=2**16,
        batch=10**9,
        prompt_len=10**9,
        gen_len=10**6,
        mode="no_cache",
        provider="naive",
    )
    assert decode_bytes(huge) > 2**63  # exact in Python integers, far past any int64


def test_a_decode_point_larger_than_free_memory_is_skipped_with_what_it_needs(monkeypatch):
    def no_layer(*args, **kwargs):
        raise AssertionError("a point that does not fit must allocate nothing")

    monkeypatch.setattr(decode_mod, "build_layer", no_layer)
    p = with_options(point(), {"warmup": 0, "repeats": 1})
    needed = decode_bytes(p)
    context = Context(torch.device("cpu"))
    record = decode_mod.run(p, context, free_bytes=lambda device: needed - 1)
    assert (
        record.status == f"skipped: needs {format_bytes(needed)}, {format_bytes(needed - 1)} free"
    )
    assert record.step_ms_median is None and record.bytes_per_step is not None


def test_a_decode_point_that_fits_runs():
    p = with_options(point(prompt_len=4, gen_len=2), {"warmup": 0, "repeats": 1})
    context = Context(torch.device("cpu"))
    record = decode_mod.run(p, context, free_bytes=lambda device: decode_bytes(p))
    assert decode_mod.timed(record) and record.step_ms_median is not None


def test_a_decode_too_large_for_memory_is_recorded_not_run(tmp_path):
    out = tmp_path / "d.json"
    result, seconds = invoke(
        "decode-speed",
        "--d-model",
        4096,
        "--heads",
        32,
        "--batch",
        10**6,
        "--prompt-len",
        10**5,
        "--gen-len",
        1,
        "--mode",
        "cache",
        "--json",
        out,
        "-q",
    )
    assert seconds < 10
    assert "Traceback" not in result.output
    (record,) = json.loads(out.read_text())["records"]
    assert record["status"].startswith("skipped: needs ")
    assert record["status"].endswith(" free")


def test_a_huge_generation_is_refused_at_once():
    result, seconds = invoke("decode-speed", "--d-model", 64, "--heads", 4, "--gen-len", 10**12)
    assert one_error(result) == "--gen-len 1000000000000: must be <= 1000000"
    assert seconds < 5


# --- 4. the number of points -------------------------------------------------------------


def billion_points(path):
    axis = list(range(1, 1001))
    body = {"d_model": 512, "num_heads": 8, "batch": axis, "seq_len": axis, "page_size": axis}
    path.write_text(yaml.safe_dump({"kvmem": body}))


def never_expand(monkeypatch):
    def refuse(self):
        raise AssertionError("points were built past the limit")

    monkeypatch.setattr(Section, "points", refuse)


def test_a_billion_point_study_is_refused_before_it_is_built(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    billion_points(tmp_path / "study.yaml")
    never_expand(monkeypatch)
    for limit in ([], ["--max-points", "100,000"]):  # the default is the most there is
        result, seconds = invoke("run", "study.yaml", "--dry-run", *limit)
        assert one_error(result) == (
            "study.yaml: 1,000,000,000 points in kvmem, more than the limit of 100,000 "
            "(give fewer values)"
        )
        assert seconds < 5


def test_the_library_names_the_field_not_the_flag(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    billion_points(tmp_path / "study.yaml")
    never_expand(monkeypatch)
    with pytest.raises(TooManyPoints) as info:
        plan_study("study.yaml", max_points=1000)
    assert str(info.value) == (
        "study.yaml: 1,000,000,000 points in kvmem, more than the limit of 1,000 "
        "(raise it with max_points)"
    )
    assert MAX_POINTS == 100_000
    with pytest.raises(FieldError, match="max_points: 100001: must be <= 100,000"):
        plan_study("study.yaml", max_points=MAX_POINTS + 1)


def test_max_points_raises_the_limit(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text(
        "kvmem:\n  d_model: 64\n  num_heads: 4\n  batch: [1, 2, 3]\n  seq_len: [8, 16]\n"
        "  measure: false\n"
    )
    result, _ = invoke("run", "s.yaml", "--dry-run", "--max-points", 5)
    assert one_error(result) == (
        "s.yaml: 6 points in kvmem, more than the limit of 5 (raise it with --max-points)"
    )
    result, _ = invoke("run", "s.yaml", "--dry-run", "--max-points", 6)
    assert result.exit_code == 0, result.output
    assert "6 points" in result.stdout
    for bad, message in (
        ("0", "--max-points 0: must be >= 1"),
        ("-3", "--max-points -3: must be >= 1"),
        ("many", "--max-points many: expected an integer"),
        ("1e5", "--max-points 1e5: expected an integer"),
        ("100001", "--max-points 100001: must be <= 100,000"),
        ("1,000,000,000", "--max-points 1,000,000,000: must be <= 100,000"),
        ("9" * 5000, f"--max-points '{'9' * 56}...: must be <= 100,000"),
    ):
        result, seconds = invoke("run", "s.yaml", "--dry-run", "--max-points", bad)
        assert one_error(result) == message
        assert seconds < 5
    result, _ = invoke("run", "s.yaml", "--dry-run", "--max-points", " 100,000 ")
    assert result.exit_code == 0, result.output


def test_the_most_points_are_stated_in_the_help():
    result, _ = invoke("run", "--help")
    assert "1 to 100,000" in " ".join(result.stdout.split())


def test_the_limit_holds_for_every_section_together(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    study = {
        "defaults": {"d_model": 64, "num_heads": 4},
        "params": {"num_kv_heads": [4, 2, 1]},
        "kvmem": {"batch": [1, 2], "measure": False},
    }
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(study))
    with pytest.raises(TooManyPoints) as info:
        plan_study("s.yaml", max_points=4)
    assert str(info.value) == (
        "s.yaml: 5 points in params and kvmem, more than the limit of 4 (raise it with max_points)"
    )
    assert len(plan_study("s.yaml", max_points=5).tasks) == 5


def test_a_command_keeps_the_default_limit(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    billion_points(tmp_path / "study.yaml")
    never_expand(monkeypatch)
    result, seconds = invoke("kvmem", "--config", "study.yaml", "--no-measure")
    assert one_error(result) == (
        "study.yaml: 1,000,000,000 points in kvmem, more than the limit of 100,000 "
        "(give fewer values)"
    )
    assert seconds < 5
    axis = ",".join(map(str, range(1, 1001)))
    result, _ = invoke(
        "kvmem", "--d-model", 64, "--heads", 4, "--batch", axis, "--seq-len", axis, "--no-measure"
    )
    assert one_error(result) == (
        "1,000,000 points in kvmem, more than the limit of 100,000 (give fewer values)"
    )


@pytest.mark.parametrize(
    ("section", "overrides", "models"),
    [
        ("params", {"d_model": [64, 128], "num_heads": [4], "num_kv_heads": [4, 2, 1]}, None),
        ("kvmem", {"batch": [1, 2], "seq_len": [8, 16, 32], "tp": [1, 2]}, ["llama-2-7b"]),
        ("kvmem", {"d_model": [64], "num_heads": [4], "seq_lens": [3, 5, 9]}, None),
        (
            "decode",
            {
                "d_model": [64],
                "num_heads": [4],
                "num_kv_heads": [4, 1],
                "prompt_len": [4, 8],
                "backend": ["sdpa", "naive"],
            },
            None,
        ),
        ("fit", {"seq_len": [1024, 2048], "memory": "80GiB"}, ["llama-2-7b", "mistral-7b"]),
    ],
)
def test_the_count_is_the_number_of_points_built(section, overrides, models):
    sec = resolve(load_config(None), section, overrides, models)
    assert point_count(sec) == len(sec.points()) > 0


@pytest.mark.parametrize(
    ("name", "given", "value"),
    [
        ("gpu", "H100-SXM", "h100-sxm"),
        ("gpu", " MI300X", "mi300x"),
        ("dtype", "bf16", "bfloat16"),
        ("dtype", "FP16", "float16"),
        ("kv_dtype", "fp8", "float8_e4m3fn"),
        ("kv_dtype", "FP8_E5M2", "float8_e5m2"),
        ("weights_dtype", "fp8", "float8_e4m3fn"),
        ("weights_dtype", "Float8", "float8_e4m3fn"),  # as vLLM's and torchao's float8
        ("dtype", "fp8", "fp8"),  # not a choice of an activations' dtype: refused as given
        ("gpu", "h100", "h100"),
    ],
)
def test_a_value_is_read_in_any_case_and_under_its_common_spellings(name, given, value):
    assert canonical_value(name, given) == value
    assert (check_value(name, given) is None) == (value != given)
