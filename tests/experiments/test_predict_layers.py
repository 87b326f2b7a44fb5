"""predict's layer rows: the model's own attention layer (an MLA model's MLA layer, not a
128-head layer with a per-head cache), its projections in the point's weights format as
the model rows' are, and a layer shape's projections quantised on their own."""

from __future__ import annotations

import json

import pytest

from attnbench.cli import app
from attnbench.errors import FieldError
from attnbench.experiments.predict import PredictPoint, check, run
from attnbench.model.devices import DEVICES, flops_for
from tests.helpers import predict_point, runner


def shape_point(**given) -> PredictPoint:
    fields = {"gpu": "h100-sxm", "batch": 1, "seq_len": 2048, "dtype": "bfloat16"}
    fields |= {"d_model": 4096, "num_heads": 32, "num_kv_heads": 32, "head_dim": 128}
    return PredictPoint(**{**fields, **given})


def test_an_mla_model_s_layer_rows_are_one_of_its_mla_layers():
    """`predict --model deepseek-v3 --gpu h200 --tp 8`: the layer decode row read 128.05
    MiB, a 128-head layer's 16 heads a rank with a per-head cache."""
    record = run(predict_point("deepseek-v3", gpu="h200", tp=8))
    assert record.variant == "MLA"
    # the latent, (512 + 64) * 2 bytes a token on every rank: 2,049 read, 1 written
    assert record.layer_step_kv_bytes == 2050 * 1152 == 2_361_600
    # 61 layers of it are the model's cache (no state layers)
    assert 61 * record.layer_step_kv_bytes == record.step_kv_bytes
    # weights: q_a 7168*1536 + 1536 + q_b 1536*16*192, kv_a 7168*576 + 512 + kv_b
    # 512*16*256, o 16*128*7168 = 36,636,672 * 2 bytes; activations (2*7168 + 16*320) * 2
    weights = 2 * (7168 * 1536 + 1536 + 1536 * 16 * 192 + 7168 * 576 + 512)
    weights += 2 * (512 * 16 * 256 + 16 * 128 * 7168)
    assert weights == 73_273_344
    assert record.layer_step_bytes == weights + 2_361_600 + 38_912 == 75_673_856
    # absorbed attention: 2 * (2 * 512 + 64) * 16 heads * 2,049 keys, projections 2 a weight
    assert record.layer_step_flops == 2 * 1088 * 16 * 2049 + weights  # 2 FLOPs, 2 bytes
    # the prefill: 2,048 latents read and written, the latents expanded
    assert record.layer_prefill_bytes - record.layer_step_bytes == (
        (2048 + 2048 - 2050) * 1152 + 2047 * 38_912
    )


def test_a_model_s_layer_rows_are_in_its_weights_format():
    """`predict --model llama-2-7b --gpu h100-sxm --weights-dtype int8`: the layer decode
    row was 160.06 MiB (128 MiB of float16 projections) whatever the weights."""
    full = run(predict_point("llama-2-7b"))
    int8 = run(predict_point("llama-2-7b", weights_dtype="int8"))
    # 4 * 4096 * 4096 weights: 2 bytes each, or 1 and a 16-bit scale a row of 4096
    params = 4 * 4096 * 4096
    assert full.layer_step_bytes - int8.layer_step_bytes == 2 * params - (params + 4 * 4096 * 2)
    assert int8.layer_step_bytes == 100_761_600  # 96.09 MiB
    assert int8.layer_step_kv_bytes == full.layer_step_kv_bytes
    assert int8.layer_step_ms < full.layer_step_ms


def test_a_model_s_float8_layer_prefill_runs_at_the_float8_rate():
    full = run(predict_point("llama-2-7b"))
    fp8 = run(predict_point("llama-2-7b", weights_dtype="float8_e4m3fn"))
    device = DEVICES["h100-sxm"]
    # the prefill's projections, 2 * 2048 tokens * 4 * 4096^2 weights: compute-bound, at
    # float8's rate (1,403 TFLOP/s) where float16's (794.5) timed them
    projections = 2 * 2048 * 4 * 4096 * 4096
    saved = projections / flops_for(device, "float16") - projections / flops_for(device, "float8")
    assert saved > 0.1e-3
    assert fp8.layer_prefill_ms < full.layer_prefill_ms - 0.5 * saved * 1e3
    assert fp8.layer_prefill_flops == full.layer_prefill_flops


def test_a_layer_shape_s_projections_can_be_quantised():
    """A layer shape was refused its weights dtype ("needs a whole model"): its four
    projections are quantised as a model's are."""
    point = shape_point(weights_dtype="int8")
    check(point)
    record = run(point)
    assert record.weights == "int8 per channel"
    # 67,108,864 int8 weights and 16,384 row scales, 32 MiB of bfloat16 cache, 32 KiB of
    # activations: 96.09 MiB (160.06 MiB in bfloat16)
    assert record.layer_step_bytes == 67_108_864 + 16_384 * 2 + 33_587_200 + 32_768
    assert record.tpot_ms is None and record.dequant_ms is None  # no model rows
    group = run(shape_point(weights_dtype="int4", weights_group=64))
    # half a byte a weight, a 16-bit scale and zero point per 64 inputs
    assert group.layer_step_bytes == 67_108_864 // 2 + 67_108_864 // 64 * 4 + 33_587_200 + 32_768


def test_a_layer_shape_s_float8_weights_need_the_gpu_s_float8_rate():
    with pytest.raises(FieldError, match="no float8 peak") as error:
        check(shape_point(gpu="a100-80gb", weights_dtype="float8_e4m3fn"))
    assert error.value.field == "weights_dtype"
    with pytest.raises(FieldError, match="exceeds the 4096 inputs") as error:
        check(shape_point(weights_dtype="int4", weights_group=8192))
    assert error.value.field == "weights_group"


def test_cli_a_layer_shape_with_quantised_weights(tmp_path):
    out = tmp_path / "p.json"
    args = ["predict", "--d-model", "4096", "--heads", "32", "--gpu", "h100-sxm"]
    result = runner.invoke(
        app, [*args, "--weights-dtype", "int8", "--json", str(out)], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    (record,) = json.loads(out.read_text())["records"]
    assert record["weights"] == "int8 per channel"
    assert "weights: int8 per channel, the layer's projections" in result.output
    assert "embeddings" not in result.output.split("weights: ")[1].split("\n")[0]
    # a group without a quantised dtype changes nothing, for a layer as for a model
    alone = runner.invoke(app, [*args, "--weights-group", "64"])
    assert alone.exit_code == 2
    assert alone.stderr.startswith("error: --weights-group 64: has no effect"), alone.stderr


def test_float8_weights_on_this_machine_name_the_weights_flag():
    """This machine's rates are known once measured: a float8 rate it lacks is blamed on
    --weights-dtype, as a named GPU's is, not on --dtype (bfloat16, which it has)."""
    result = runner.invoke(
        app,
        ["predict", "--model", "llama-3-8b", "--gpu", "this", "--weights-dtype", "float8_e4m3fn"],
    )
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: --weights-dtype float8_e4m3fn: this has no float8")
