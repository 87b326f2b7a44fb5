"""A checkpoint is predicted and planned as an engine serves it: one stored in float32
(OLMo-2's, Gemma-2's config.json) in bfloat16, a quantised one's weights as its
quantization_config stores them, by `predict` on a named GPU and by `fit`, unless a flag
says otherwise, and each says so; `predict` on this machine keeps the model's own dtype,
as it runs here."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from attnbench.cli import app
from attnbench.experiments.predict import model_defaults
from attnbench.model.architecture import StoredWeights
from attnbench.model.dtypes import served_dtype
from attnbench.model.presets import get_preset
from tests.helpers import one_error, runner

LLAMA = {
    "model_type": "llama",
    "hidden_size": 512,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "num_hidden_layers": 4,
    "intermediate_size": 1024,
    "vocab_size": 1000,
    "max_position_embeddings": 4096,
}
NOTE = "its checkpoint is float32;"


def config(tmp_path, dtype: str, **more):
    path = tmp_path / f"{dtype}-{len(more)}.json"
    path.write_text(json.dumps({**LLAMA, "torch_dtype": dtype, **more}))
    return path


def invoke(*args):
    result = runner.invoke(app, list(map(str, args)), env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result


def records(path):
    return json.loads(path.read_text())["records"]


def test_served_dtype_changes_float32_alone():
    assert served_dtype("float32") == "bfloat16"
    assert [served_dtype(d) for d in ("float16", "bfloat16")] == ["float16", "bfloat16"]


@pytest.mark.parametrize(("gpu", "dtype"), [("h100-sxm", "bfloat16"), ("this", "float32")])
def test_predict_serves_a_float32_model_on_a_named_gpu_only(gpu, dtype):
    spec = get_preset("llama-2-7b")
    assert model_defaults(replace(spec, dtype="float32"), {"gpu": gpu}) == {"dtype": dtype}
    assert model_defaults(spec, {"gpu": gpu}) == {"dtype": "float16"}


def test_predict_takes_the_stored_weights_on_a_named_gpu_unless_weights_are_given():
    stored = StoredWeights("int4", 64, keep_attention=True)
    spec = replace(get_preset("llama-2-7b"), stored_weights=stored)
    weights = {"weights_dtype": "int4", "weights_group": 64, "keep_attention": True}
    assert model_defaults(spec, {"gpu": "h100-sxm"}) == {"dtype": "float16", **weights}
    given = {"gpu": "h100-sxm", "weights_dtype": "int8"}
    assert model_defaults(spec, given) == {"dtype": "float16"}
    assert model_defaults(spec, {"gpu": "this"}) == {"dtype": "float16"}


def test_predict_on_a_named_gpu_says_it_predicts_bfloat16(tmp_path):
    out = tmp_path / "p.json"
    result = invoke(
        "predict", "--gpu", "h100-sxm", "--hf-config", config(tmp_path, "float32"), "--json", out
    )
    (row,) = records(out)
    assert (row["dtype"], row["kv_dtype"]) == ("bfloat16", "bfloat16")
    notes = [line for line in result.stdout.splitlines() if NOTE in line]
    assert len(notes) == 1
    assert "predicted on the named GPUs in bfloat16" in notes[0]
    assert notes[0].endswith("--dtype float32 keeps float32")


def test_predict_keeps_a_dtype_given_and_a_16_bit_checkpoint(tmp_path):
    out = tmp_path / "p.json"
    path = config(tmp_path, "float32")
    result = invoke(
        "predict", "--gpu", "h100-sxm", "--hf-config", path, "--dtype", "float32", "--json", out
    )
    assert records(out)[0]["dtype"] == "float32"
    assert NOTE not in result.stdout
    result = invoke(
        "predict", "--gpu", "h100-sxm", "--hf-config", config(tmp_path, "float16"), "--json", out
    )
    assert records(out)[0]["dtype"] == "float16"
    assert "its checkpoint is" not in result.stdout


def test_fit_plans_a_float32_model_in_bfloat16_unless_told(tmp_path):
    path = config(tmp_path, "float32")
    served, kept = tmp_path / "served.json", tmp_path / "kept.json"
    args = ["fit", "--gpu", "h100-sxm", "--hf-config", path, "--seq-len", "4096"]
    result = invoke(*args, "--json", served)
    (row,) = records(served)
    assert (row["weights_dtype"], row["kv_dtype"]) == ("bfloat16", "bfloat16")
    assert any(
        NOTE in line and "planned in bfloat16" in line for line in result.stdout.splitlines()
    )
    result = invoke(*args, "--weights-dtype", "float32", "--kv-dtype", "float32", "--json", kept)
    (whole,) = records(kept)
    assert (whole["weights_dtype"], whole["kv_dtype"]) == ("float32", "float32")
    assert whole["weights_bytes_per_gpu"] == 2 * row["weights_bytes_per_gpu"]
    assert whole["kv_bytes_per_sequence_per_gpu"] == 2 * row["kv_bytes_per_sequence_per_gpu"]
    assert NOTE not in result.stdout


AWQ = {"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm"}
FP8 = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}


def test_predict_and_fit_count_a_quantised_checkpoint_as_stored(tmp_path):
    path = config(tmp_path, "float16", quantization_config=AWQ)
    out = tmp_path / "p.json"
    result = invoke("predict", "--gpu", "h100-sxm", "--hf-config", path, "--json", out)
    (row,) = records(out)
    assert (row["dtype"], row["weights"]) == ("float16", "int4 in groups of 128")
    assert "count the weights as the checkpoint stores them, weights_dtype int4" in result.stdout
    args = ["--gpu", "h100-sxm", "--hf-config", path, "--weights-dtype", "float16"]
    invoke("predict", *args, "--json", out)
    assert records(out)[0]["weights"] is None  # in dtype: the checkpoint's group not applied
    fitted = tmp_path / "f.json"
    invoke("fit", "--gpu", "h100-sxm", "--hf-config", path, "--seq-len", "4096", "--json", fitted)
    (plan,) = records(fitted)
    assert (plan["weights_dtype"], plan["weights"]) == ("int4", "int4 in groups of 128")


def test_a_checkpoint_format_the_gpu_cannot_multiply_is_refused_saying_whose(tmp_path):
    nvfp4 = {"quant_algo": "NVFP4", "exclude_modules": ["lm_head"]}
    path = config(tmp_path, "bfloat16", quantization_config=nvfp4)
    for command in (["predict"], ["fit", "--seq-len", "4096", "--tpot", "50ms"]):
        result = runner.invoke(app, [*command, "--gpu", "h100-sxm", "--hf-config", str(path)])
        line = one_error(result)
        assert line.startswith("error: --weights-dtype nvfp4: h100-sxm has no float4")
        assert line.endswith(
            "(the checkpoint's, its quantization_config; weights_dtype bfloat16 counts the "
            "weights unquantised)"
        )


def test_float8_weights_run_weight_only_on_a_gpu_without_float8(tmp_path):
    """vLLM's FP8 Marlin: a float8 checkpoint on an A100 reads its 8-bit weights and
    dequantises them, as int8 weights; beside it an H100 multiplies them in float8."""
    path = config(tmp_path, "bfloat16", quantization_config=FP8)
    out = tmp_path / "p.json"
    result = invoke("predict", "--gpu", "h100-sxm,a100-80gb", "--hf-config", path, "--json", out)
    weights = {row["gpu"]: row["weights"] for row in records(out)}
    assert weights == {"h100-sxm": "float8_e4m3fn per channel", "a100-80gb": "int8 per channel"}
    assert "on a GPU without float8 as 8-bit weights alone" in " ".join(result.stdout.split())
    fitted = tmp_path / "f.json"
    invoke(
        "fit",
        "--gpu",
        "a100-80gb",
        "--hf-config",
        path,
        "--seq-len",
        "4096",
        "--tpot",
        "50ms",
        "--json",
        fitted,
    )
    assert records(fitted)[0]["weights_dtype"] == "int8"


def test_a_flag_overrides_each_setting_the_checkpoint_gives(tmp_path):
    """gpt-oss's MXFP4 keeps the attention's projections: counted so by default, and
    --no-keep-attention or --weights-group set their own."""
    mxfp4 = {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn"]}
    path = config(tmp_path, "bfloat16", quantization_config=mxfp4)
    out = tmp_path / "f.json"
    args = ["fit", "--gpu", "h100-sxm", "--hf-config", path, "--seq-len", "4096"]
    invoke(*args, "--json", out)
    kept = records(out)[0]
    assert kept["weights"] == "mxfp4 in blocks of 32, the attention kept"
    invoke(*args, "--no-keep-attention", "--json", out)
    assert records(out)[0]["weights"] == "mxfp4 in blocks of 32"
    assert records(out)[0]["weights_bytes_per_gpu"] < kept["weights_bytes_per_gpu"]
    awq = config(tmp_path, "float16", quantization_config=AWQ)
    invoke(
        "predict", "--gpu", "h100-sxm", "--hf-config", awq, "--weights-group", "64", "--json", out
    )
    assert records(out)[0]["weights"] == "int4 in groups of 64"


def test_deepseek_v3_is_served_as_its_float8_checkpoint_and_a_miss_of_memory_leads():
    """DeepSeek-V3's preset stores its weights in float8, as its config.json's
    quantization_config does: predict on a named GPU serves them so (on an A100, without
    float8, weight-only), and a point that does not fit says so right under the table,
    before the device's sources."""
    assert get_preset("deepseek-v3").stored_weights == StoredWeights("float8_e4m3fn")
    assert get_preset("deepseek-v2").stored_weights is None
    served = model_defaults(get_preset("deepseek-v3"), {"gpu": "h200"})
    assert served["weights_dtype"] == "float8_e4m3fn"
    assert (
        model_defaults(get_preset("deepseek-v3"), {"gpu": "a100-80gb"})["weights_dtype"] == "int8"
    )
    flags = ["predict", "--model", "deepseek-v3", "--gpu", "h200", "--tp", "8"]
    lines = invoke(*flags).output.splitlines()
    assert "weights float8_e4m3fn" in " ".join(lines[:4])
    assert not any("does not fit" in line for line in lines)
    lines = invoke(*flags, "--weights-dtype", "bfloat16").output.splitlines()
    table_end = next(i for i, line in enumerate(lines) if line.startswith("└"))
    assert "deepseek-v3 does not fit on h200" in lines[table_end + 1]
    assert "the default: --seq-len sets it" in lines[table_end + 2]
    assert lines[table_end + 3].lstrip().startswith("- h200 (NVIDIA H200")
