"""Parameter counts: the formula against real modules, and the `attnbench params` command."""

from __future__ import annotations

import csv
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnbench.cli import app
from attnbench.experiments.params import ParamsPoint, count_module_params, run
from attnbench.experiments.whole_model import ModelPartRecord, whole_model_records
from attnbench.model.formulas import AttentionShape, attention_params, projection_params
from attnbench.modules.attention import GroupedQueryAttention
from attnbench.records import as_dict
from attnbench.study.output import write_csv
from attnbench.study.runner import plan_study, run_study
from tests.helpers import runner


def params_record(shape: AttentionShape):
    """The record of one layer shape, as a params point of that shape runs."""
    fields = ("d_model", "num_heads", "num_kv_heads", "head_dim", "bias")
    return run(ParamsPoint(**{name: getattr(shape, name) for name in fields}))


COLUMNS = [
    "variant",
    "d_model",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "bias",
    "biases",
    "q_params",
    "k_params",
    "v_params",
    "o_params",
    "total_params",
    "module_params",
    "ratio_vs_mha",
    "published_kv_heads",
]
LLAMA_TOTALS = {32: 67_108_864, 8: 41_943_040, 4: 37_748_736, 1: 34_603_008}


@st.composite
def shapes(draw) -> AttentionShape:
    """Small attention shapes: with head_dim derived from d_model, or given explicitly."""
    kv_heads = draw(st.integers(1, 4))
    heads = kv_heads * draw(st.integers(1, 4))
    bias = draw(st.booleans())
    if draw(st.booleans()):
        return AttentionShape(heads * draw(st.integers(1, 8)), heads, kv_heads, bias=bias)
    return AttentionShape(
        draw(st.integers(1, 48)), heads, kv_heads, head_dim=draw(st.integers(1, 12)), bias=bias
    )


@settings(max_examples=50, deadline=None)
@given(shapes())
def test_formula_equals_module_params(shape):
    d, q_dim = shape.d_model, shape.num_heads * shape.head_dim
    kv_dim = shape.num_kv_heads * shape.head_dim
    # written out here: four weight matrices, plus bias vectors of their output sizes
    expected = 2 * d * q_dim + 2 * d * kv_dim + int(shape.bias) * (q_dim + 2 * kv_dim + d)
    assert attention_params(shape) == expected
    assert count_module_params(shape) == expected
    module = GroupedQueryAttention(
        shape.d_model, shape.num_heads, shape.num_kv_heads, head_dim=shape.head_dim, bias=shape.bias
    )
    assert sum(p.numel() for p in module.parameters()) == expected
    record = params_record(shape)
    assert record.total_params == record.module_params == expected
    assert (record.q_params + record.k_params + record.v_params + record.o_params) == expected
    assert record.variant == shape.variant
    assert record.bias is shape.bias
    if shape.num_kv_heads == shape.num_heads:
        assert record.ratio_vs_mha == 1.0
    else:
        assert 0.0 < record.ratio_vs_mha < 1.0


@pytest.mark.parametrize("bias", [False, True])
def test_params_record_llama(bias):
    for kv_heads, total in LLAMA_TOTALS.items():
        rec = params_record(AttentionShape(4096, 32, kv_heads, bias=bias))
        # bias adds q 4096 + k, v kv_heads * 128 each + o 4096
        expected = total + (2 * 4096 + 2 * kv_heads * 128 if bias else 0)
        assert rec.total_params == rec.module_params == expected
        assert rec.head_dim == 128
        assert rec.q_params == rec.o_params == 16_777_216 + (4096 if bias else 0)
        parts = projection_params(AttentionShape(4096, 32, kv_heads, bias=bias))
        assert (rec.q_params, rec.k_params, rec.v_params, rec.o_params) == tuple(parts.values())
    rec = params_record(AttentionShape(4096, 32, 8))
    assert rec.ratio_vs_mha == 41_943_040 / 67_108_864 == 0.625


# ---------------------------------------------------------------------------- CLI


def invoke(*args: str):
    result = runner.invoke(app, list(args))
    # typer's CliRunner puts stderr into result.output along with stdout
    assert "Traceback" not in result.output, result.output
    return result


def test_cli_params_llama_totals():
    result = invoke(
        "params", "--d-model", "4096", "--heads", "32", "--kv-heads", "32,8,4,1", "--no-bias"
    )
    assert result.exit_code == 0, result.output
    for label in ("MHA", "GQA-8", "GQA-4", "MQA"):
        assert label in result.output
    for total in LLAMA_TOTALS.values():
        assert f"{total:,}" in result.output  # printed with thousands separators
    assert "62.50%" in result.output  # GQA-8 vs MHA


def test_cli_params_csv_and_json(tmp_path):
    csv_path, json_path = tmp_path / "out" / "params.csv", tmp_path / "params.json"
    result = invoke(
        "params",
        "--d-model",
        "4096",
        "--heads",
        "32",
        "--kv-heads",
        "32,8,4,1",
        "--no-bias",
        "--csv",
        str(csv_path),
        "--json",
        str(json_path),
    )
    assert result.exit_code == 0, result.output
    assert str(csv_path) in result.output and str(json_path) in result.output

    with csv_path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        assert reader.fieldnames == COLUMNS
        rows = list(reader)
    document = json.loads(json_path.read_text())
    records = document["records"]
    assert document["command"] == "params"
    assert len(rows) == len(records) == 4
    for row, rec in zip(rows, records, strict=True):
        assert list(rec) == COLUMNS
        assert row["variant"] == rec["variant"]
        assert row["bias"] == str(rec["bias"]) == "False"
        assert row["biases"] == rec["biases"] == "no bias"
        for col in COLUMNS[1:5] + COLUMNS[7:13]:
            assert int(row[col]) == rec[col], col
        assert float(row["ratio_vs_mha"]) == rec["ratio_vs_mha"]
    assert [r["variant"] for r in records] == ["MHA", "GQA-8", "GQA-4", "MQA"]
    assert [r["num_kv_heads"] for r in records] == [32, 8, 4, 1]
    assert [r["total_params"] for r in records] == list(LLAMA_TOTALS.values())
    assert [r["module_params"] for r in records] == list(LLAMA_TOTALS.values())
    assert records[1]["ratio_vs_mha"] == 0.625


def test_cli_params_bias_and_quiet(tmp_path):
    json_path = tmp_path / "p.json"
    result = invoke(
        "params",
        "--d-model",
        "64",
        "--heads",
        "4",
        "--kv-heads",
        "4,2,1",
        "--bias",
        "--quiet",
        "--json",
        str(json_path),
    )
    assert result.exit_code == 0, result.output
    assert result.output == ""
    records = json.loads(json_path.read_text())["records"]
    # 64 * 64 * 2 + 64 * kv_dim * 2 + bias (64 + 2 * kv_dim + 64), kv_dim = kv_heads * 16
    assert [r["total_params"] for r in records] == [16_640, 12_480, 10_400]
    assert all(r["bias"] is True for r in records)


def test_a_study_s_parts_are_those_params_writes(tmp_path):
    """The runner makes a preset model's whole-model parts beside the params records, and
    `params --json/--csv` writes those same records."""
    config = tmp_path / "model.yaml"
    config.write_text("models: [llama-3-8b]\nparams: {}\n")
    plan = plan_study(config)
    (spec,) = plan.sections["params"].models
    parts = whole_model_records(spec)
    assert run_study(plan).records["model_parts"] == parts
    json_path, csv_path = tmp_path / "p.json", tmp_path / "p.csv"
    result = invoke(
        "params", "--model", "llama-3-8b", "--json", str(json_path), "--csv", str(csv_path)
    )
    assert result.exit_code == 0, result.output
    assert json.loads(json_path.read_text())["model_parts"] == [as_dict(r) for r in parts]
    write_csv(tmp_path / "parts.csv", parts, ModelPartRecord)
    side = (tmp_path / "p.model_parts.csv").read_text()
    assert side == (tmp_path / "parts.csv").read_text()


def test_cli_params_model_preset():
    result = invoke("params", "--model", "Gemma-7B")
    assert result.exit_code == 0, result.output
    assert "50,331,648" in result.output  # 4 * 3072 * 4096


@pytest.mark.parametrize(
    "args, words",
    [
        (["--d-model", "4096", "--heads", "30"], ["num_heads 30", "d_model 4096"]),
        (
            ["--d-model", "4096", "--heads", "32", "--kv-heads", "3"],
            ["num_kv_heads 3", "num_heads 32"],
        ),
        (["--d-model", "0", "--heads", "32"], ["--d-model", "0"]),
        (["--d-model", "-4", "--heads", "32"], ["--d-model", "-4"]),
        (["--d-model", "abc", "--heads", "32"], ["--d-model", "--d-model abc:"]),
        (["--d-model", "64", "--heads", "4", "--kv-heads", "8,,4"], ["--kv-heads 8,,4:"]),
        (["--model", "lama-2-7b"], ["--model", "--model lama-2-7b:", "did you mean 'llama-2-7b'"]),
    ],
    ids=[
        "heads-30",
        "kv-heads-3",
        "d-model-0",
        "d-model-neg",
        "d-model-abc",
        "kv-heads-empty",
        "unknown-model",
    ],
)
def test_cli_params_usage_errors(args, words):
    result = invoke("params", *args)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith("error: ")
    for word in words:
        assert word in lines[0], lines[0]


def test_a_models_layer_has_the_models_biases() -> None:
    """Qwen2's q, k and v carry biases, its o none; GPT-3's all four: a model's layer is
    counted with them, whatever the bias setting of synthetic shapes says."""
    from attnbench.errors import FieldError
    from attnbench.experiments.params import check
    from attnbench.model.presets import get_preset

    qwen, gpt3 = get_preset("qwen2.5-7b"), get_preset("gpt3-175b")
    fields = {"d_model": 3584, "num_heads": 28, "num_kv_heads": 4, "head_dim": 128}
    record = run(ParamsPoint(**fields, model=qwen.name, spec=qwen))
    assert record.biases == "q/k/v bias"
    assert record.q_params == 3584 * 3584 + 3584
    assert record.o_params == 3584 * 3584  # no bias on o
    assert record.module_params == record.total_params
    gpt = {"d_model": 12288, "num_heads": 96, "num_kv_heads": 96, "head_dim": 128}
    assert run(ParamsPoint(**gpt, model=gpt3.name, spec=gpt3)).biases == "bias"
    check(ParamsPoint(**gpt, bias=True, model=gpt3.name, spec=gpt3))
    with pytest.raises(FieldError, match="q/k/v bias"):
        check(ParamsPoint(**fields, bias=True, model=qwen.name, spec=qwen))


def test_params_shows_a_models_biases() -> None:
    result = runner.invoke(app, ["params", "--model", "qwen2.5-7b"])
    assert result.exit_code == 0, result.output
    assert "q/k/v bias" in result.output
    refused = runner.invoke(app, ["params", "--model", "llama-3-8b", "--bias"])
    assert refused.exit_code == 2
    assert refused.stderr.startswith("error: --bias: llama-3-8b's projections have no bias")


def test_params_of_a_config_shows_its_biases(tmp_path) -> None:
    config = {
        "model_type": "qwen2",
        "hidden_size": 256,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": 2,
        "intermediate_size": 512,
        "vocab_size": 1000,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    result = runner.invoke(app, ["params", "--hf-config", str(path)])
    assert result.exit_code == 0, result.output
    assert "q/k/v bias" in result.output
