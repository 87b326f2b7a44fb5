"""What-if variants: a model rebuilt with other KV-head counts, beside its own, in params,
kvmem, fit, decode-speed and studies; the words mha and mqa; the errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnbench.cli import app
from attnbench.errors import FieldError
from attnbench.model.model_params import part_params, total_params
from attnbench.model.presets import get_preset
from attnbench.model.what_if import is_own, kv_heads_count, what_if_specs
from attnbench.study.sweep import load_config, resolve
from tests.helpers import runner

DEFAULT_STUDY = Path(__file__).parents[2] / "attnbench" / "configs" / "default.yaml"
LLAMA_70B = get_preset("llama-3-70b")  # 80 layers, d 8192, 64 heads, 8 KV heads of 128


def flat(text: str) -> str:
    return " ".join(text.split())


def test_words_and_counts():
    assert kv_heads_count("mha", 64) == 64
    assert kv_heads_count("mqa", 64) == 1
    assert kv_heads_count(16, 64) == 16
    with pytest.raises(FieldError, match="does not divide llama's 64 query heads"):
        kv_heads_count(3, 64, "llama")


def test_the_models_own_count_is_kept_once_in_the_order_given():
    specs = what_if_specs(LLAMA_70B, ["mha", 8, "mqa", 64])
    assert [s.num_kv_heads for s in specs] == [64, 8, 1]  # 64 is mha: once
    assert {s.published_kv_heads for s in specs} == {8}
    assert [is_own(s.num_kv_heads, s.published_kv_heads) for s in specs] == [False, True, False]
    # the model's own count leads when the list leaves it out
    assert [s.num_kv_heads for s in what_if_specs(LLAMA_70B, ["mqa"])] == [8, 1]


def test_a_rebuilt_model_changes_only_its_k_and_v_projections():
    own, mha = what_if_specs(LLAMA_70B, [8, "mha"])
    parts, parts_mha = part_params(own), part_params(mha)
    k_and_v_mha = 80 * 2 * 8192 * 64 * 128
    k_and_v_own = 80 * 2 * 8192 * 8 * 128
    assert parts_mha["attention"] - parts["attention"] == k_and_v_mha - k_and_v_own
    assert {k: v for k, v in parts_mha.items() if k != "attention"} == {
        k: v for k, v in parts.items() if k != "attention"
    }
    assert total_params(own) == 70_553_706_496  # the published Llama-3-70B


def test_params_prints_each_variant_with_the_models_own_marked(tmp_path):
    out = tmp_path / "p.json"
    result = runner.invoke(
        app, ["params", "--model", "llama-3-70b", "--kv-heads", "mha,8,mqa", "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    variants = [line.split("│")[1].strip() for line in lines if line.startswith("│ M")]
    assert "GQA-8 (own)" in result.output
    assert variants[:2] == ["MHA", "MQA"]  # the per-layer table
    doc = json.loads(out.read_text())
    assert [r["num_kv_heads"] for r in doc["records"]] == [64, 8, 1]
    totals = {r["num_kv_heads"]: r["params"] for r in doc["model_parts"] if r["part"] == "total"}
    assert totals == {64: 79_948_947_456, 8: 70_553_706_496, 1: 69_379_301_376}
    assert "Whole model per KV-head count" in result.output
    assert "+13.3%" in result.output and "-1.7%" in result.output


def records_of(args: list[str], tmp_path: Path) -> list[dict]:
    out = tmp_path / "out.json"
    result = runner.invoke(app, [*args, "--json", str(out), "-q"])
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text())["records"]


def test_kvmem_gives_each_variants_cache(tmp_path):
    args = ["kvmem", "--model", "llama-3-70b", "--kv-heads", "64,8,1", "--seq-len", "8192"]
    records = records_of([*args, "--no-measure"], tmp_path)
    tokens = 8192
    assert {r["num_kv_heads"]: r["kv_bytes"] for r in records} == {
        k: 2 * 80 * k * 128 * 2 * tokens for k in (64, 8, 1)
    }
    assert {r["published_kv_heads"] for r in records} == {8}


def test_fit_answers_for_each_variant_and_says_why_mqa_saves_nothing_under_tp8():
    args = ["fit", "--model", "llama-3-70b", "--memory", "80GiB", "--gpus", "8"]
    result = runner.invoke(app, [*args, "--seq-len", "8192", "--kv-heads", "mha,8,mqa"])
    assert result.exit_code == 0, result.output
    text = flat(result.output)
    assert "Largest batch at 8,192 tokens: 177 sequences" in text  # the model's own answer
    assert "GQA-8 (own)" in text and "MHA │ 2.50 GiB │ 18.62 GiB │ 21 │ 0.12x" in text
    assert "MQA │ 320.00 MiB │ 16.43 GiB │ 177 │ 1.00x" in text
    assert "MQA: 1 KV head on 8 ranks: each rank keeps a copy" in text


def test_fit_shows_a_variant_that_does_not_fit_and_exits_1(tmp_path):
    out = tmp_path / "fit.csv"
    args = ["fit", "--model", "llama-3-70b", "--memory", "80GiB", "--gpus", "2", "--wide"]
    result = runner.invoke(
        app, [*args, "--seq-len", "8192", "--kv-heads", "mha,8,mqa", "--csv", str(out)]
    )
    assert result.exit_code == 1, result.output
    text = flat(result.output)
    assert "no room for a KV cache" in text and "MQA │ 320.00 MiB │ 64.77 GiB │ 23 │ 4.60x" in text
    assert "note: MHA: no room for a KV cache: weights 74.46 GiB" in text
    assert out.exists()  # the answers that exist are written


def test_decode_speed_samples_the_variants_of_a_model_in_turn(tmp_path):
    config = tmp_path / "small.json"
    config.write_text(
        json.dumps(
            {
                "model_type": "llama",
                "hidden_size": 64,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "num_hidden_layers": 2,
                "torch_dtype": "float32",
            }
        )
    )
    args = ["decode-speed", "--hf-config", str(config), "--kv-heads", "mha,mqa"]
    timing = ["--prompt-len", "16", "--mode", "cache", "--max-time", "0.05", "--min-repeats", "3"]
    records = records_of([*args, *timing], tmp_path)
    assert [r["num_kv_heads"] for r in records] == [2, 4, 1]
    assert {r["sampling"] for r in records} == {"interleaved"}
    assert len({r["sampling_group"] for r in records}) == 1
    assert {r["published_kv_heads"] for r in records} == {2}


def test_errors_name_the_model_and_its_heads(tmp_path):
    result = runner.invoke(app, ["kvmem", "--model", "llama-3-8b", "--kv-heads", "3"])
    assert result.exit_code == 2
    assert "--kv-heads 3: does not divide llama-3-8b's 32 query heads" in flat(result.output)
    result = runner.invoke(app, ["params", "--model", "deepseek-v3", "--kv-heads", "mqa"])
    assert result.exit_code == 2
    assert "deepseek-v3 uses MLA" in result.output
    result = runner.invoke(app, ["fit", "--model", "llama-3-8b", "--kv-heads", "many"])
    assert result.exit_code == 2
    assert "--kv-heads many: expected integers, comma-separated, or mha or mqa" in flat(
        result.output
    )
    study = tmp_path / "s.yaml"
    study.write_text("models: [llama-3-8b]\nkvmem:\n  num_kv_heads: [mha, 3]\n")
    result = runner.invoke(app, ["kvmem", "--config", str(study), "--no-measure"])
    assert result.exit_code == 2
    assert f"kvmem.num_kv_heads: 3 ({study}): does not divide" in flat(result.output)


def test_a_study_rebuilds_its_models_only_without_a_layer_shape(tmp_path):
    study = tmp_path / "s.yaml"
    study.write_text("models: [llama-3-8b]\nkvmem:\n  num_kv_heads: [MHA, mqa]\n")
    models = resolve(load_config(study), "kvmem").models
    assert [m.num_kv_heads for m in models] == [8, 32, 1]
    # The default study's num_kv_heads are its layer shape's: its presets stay as published
    default = resolve(load_config(DEFAULT_STUDY), "kvmem")
    assert [(m.name, m.num_kv_heads, m.published_kv_heads) for m in default.models] == [
        ("llama-2-7b", 32, None),
        ("llama-3-8b", 8, None),
    ]


def test_words_on_a_layer_shape(tmp_path):
    args = ["params", "--d-model", "64", "--heads", "4", "--kv-heads", "mha,2,mqa"]
    records = records_of(args, tmp_path)
    assert [(r["variant"], r["published_kv_heads"]) for r in records] == [
        ("MHA", None),
        ("GQA-2", None),
        ("MQA", None),
    ]


# --- a model's own shape: only its KV heads change ------------------------------------------

TINY_LLAMA = {
    "model_type": "llama",
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "torch_dtype": "float32",
}


@pytest.mark.parametrize(
    "command, flags, message",
    [
        ("params", ["--head-dim", "64"], "--head-dim 64: llama-2-7b has its own head_dim 128"),
        ("kvmem", ["--layers", "4"], "--layers 4: llama-2-7b has its own 32 layers"),
        ("kvmem", ["--d-model", "64"], "--d-model 64: llama-2-7b has its own width 4,096"),
        ("decode-speed", ["--heads", "8"], "--heads 8: llama-2-7b has its own 32 query heads"),
    ],
)
def test_a_models_shape_given_by_flags_is_refused(command, flags, message):
    extra = ["--no-measure"] if command == "kvmem" else []
    result = runner.invoke(app, [command, "--model", "llama-2-7b", *flags, *extra, "-q"])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: {message}; ") and "only its KV heads can change" in line


def test_every_shape_flag_given_with_a_config_json_is_named(tmp_path):
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY_LLAMA))
    args = ["kvmem", "--hf-config", str(config), "--head-dim", "8", "--layers", "3,4"]
    result = runner.invoke(app, [*args, "--kv-heads", "mqa", "--no-measure", "-q"])
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert [line.split(":")[0] for line in lines] == ["error", "error"]
    assert lines[0].startswith("error: --head-dim 8: tiny has its own head_dim 16")
    assert lines[1].startswith("error: --layers 3,4: tiny has its own 2 layers")


def test_a_models_shape_in_a_study_is_named_by_its_key(tmp_path):
    study = tmp_path / "s.yaml"
    study.write_text("models: [llama-3-8b]\ndefaults:\n  num_layers: 4\nparams:\n  head_dim: 64\n")
    for command, where in (("kvmem", "defaults.num_layers: 4"), ("params", "params.head_dim: 64")):
        result = runner.invoke(app, [command, "--config", str(study), "-q"])
        assert result.exit_code == 2, result.output
        (line,) = result.stderr.splitlines()
        assert line.startswith(f"error: {where} ({study}): llama-3-8b has its own")


def test_shape_values_beside_a_layer_shape_are_that_shapes(tmp_path):
    args = [
        "kvmem",
        "--model",
        "llama-2-7b",
        "--d-model",
        "64",
        "--heads",
        "4",
        "--layers",
        "2",
        "--head-dim",
        "8",
        "--seq-len",
        "16",
        "--no-measure",
    ]
    shape, model = records_of(args, tmp_path)
    assert (shape["model"], shape["num_layers"], shape["head_dim"]) == (None, 2, 8)
    assert (model["model"], model["num_layers"], model["head_dim"]) == ("llama-2-7b", 32, 128)


def test_a_model_flag_replaces_the_layers_of_the_files_shape(tmp_path):
    # the default study's kvmem gives its layer shape 32 layers: they go with the shape
    args = ["kvmem", "--config", str(DEFAULT_STUDY), "--model", "llama-2-13b", "--seq-len", "16"]
    (record,) = records_of([*args, "--no-measure"], tmp_path)
    assert (record["model"], record["num_layers"]) == ("llama-2-13b", 40)
