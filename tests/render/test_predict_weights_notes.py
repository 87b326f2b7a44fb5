"""The weights line of predict's notes: a model's quantised weights keep its embeddings
and head in dtype; a layer shape has neither, only its projections, quantised."""

from __future__ import annotations

import json

import pytest

from attnbench.cli import app
from attnbench.render.predict import source_notes
from tests.helpers import runner


def records(tmp_path, *args: str) -> list[dict]:
    out = tmp_path / "p.json"
    common = ["predict", "--gpu", "h100-sxm", "--seq-len", "512", "-q", "--json", str(out)]
    result = runner.invoke(app, [*common, *args])
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text())["records"]


def weights_notes(tmp_path, model: str, shape_weights: tuple, model_weights: tuple) -> list:
    """The weights lines of the notes of a layer shape's records and a model's."""
    shape = records(tmp_path, "--d-model", "4096", "--heads", "32", *shape_weights)
    found = records(tmp_path, "--model", model, *model_weights)
    return [line for line in source_notes([*shape, *found]) if line.startswith("weights:")]


def test_a_layer_shape_s_weights_are_its_projections_a_model_s_keep_its_head(tmp_path):
    weights = ("--weights-dtype", "int8,float8_e4m3fn")
    assert weights_notes(tmp_path, "llama-2-7b", weights, weights) == [
        "weights: int8 per channel, the layer's projections (scales counted, dequantised on "
        "the CUDA cores at the device's float32 rate); matmuls at the 794.5 TFLOP/s of "
        "bfloat16",
        "weights: float8_e4m3fn per channel, the layer's projections (scales counted); "
        "matmuls at the 1,403 TFLOP/s of float8",
        "weights: int8 per channel (scales counted; the embeddings and the output head stay "
        "float16); matmuls at the 794.5 TFLOP/s of float16",
        "weights: float8_e4m3fn per channel (scales counted; the embeddings and the output "
        "head stay float16); matmuls at the 1,403 TFLOP/s of float8",
    ]


def test_kept_attention_and_mxfp4_s_dequantisation_are_said(tmp_path):
    mxfp4 = ("--weights-dtype", "mxfp4")
    assert weights_notes(tmp_path, "llama-3-8b", mxfp4, (*mxfp4, "--keep-attention")) == [
        "weights: mxfp4 in blocks of 32, the layer's projections (scales counted, dequantised "
        "on the CUDA cores at the device's float32 rate); matmuls at the 794.5 TFLOP/s of "
        "bfloat16",
        "weights: mxfp4 in blocks of 32, the attention kept (scales counted; the embeddings and "
        "the output head stay bfloat16, as do the attention's projections, at its rate); "
        "matmuls at the 794.5 TFLOP/s of bfloat16",
    ]


def test_nvfp4_weights_name_the_float4_peak_they_run_at(tmp_path):
    out = tmp_path / "b200.json"
    args = ["predict", "--gpu", "b200", "--model", "llama-3-8b", "-q", "--json", str(out)]
    result = runner.invoke(app, [*args, "--weights-dtype", "nvfp4,mxfp4"])
    assert result.exit_code == 0, result.output
    found = json.loads(out.read_text())["records"]
    lines = [line for line in source_notes(found) if line.startswith("weights:")]
    assert lines == [
        "weights: nvfp4 in blocks of 16 (scales counted; the embeddings and the output head "
        "stay bfloat16); matmuls at the 6,980 TFLOP/s of float4",
        "weights: mxfp4 in blocks of 32 (scales counted; the embeddings and the output head "
        "stay bfloat16); matmuls at the 1,745 TFLOP/s of bfloat16",
    ]


@pytest.mark.parametrize(
    "edit",
    [
        lambda r: r.pop("perf_model"),
        lambda r: r.update(perf_model=None),
        lambda r: r.pop("tokens_per_s"),
        lambda r: r.update(layer_step_ms=None, tpot_ms=None),
        lambda r: (r.pop("layer_step_bound"), r.pop("step_bound", None)),
    ],
)
def test_a_predict_finding_leaves_out_a_row_edited_without_what_it_states(edit):
    """The results reader lets a hand-edited file leave out these fields: report must
    not crash on it (it did: KeyError, TypeError), the row just has no finding."""
    from attnbench.render.predict import predict_findings

    row = {
        "model": None,
        "variant": "MHA",
        "d_model": 64,
        "num_heads": 4,
        "num_kv_heads": 4,
        "gpu": "h100-sxm",
        "batch": 1,
        "seq_len": 64,
        "tp": 1,
        "perf_model": "efficiency_bw 1 (defaults)",
        "tokens_per_s": 1000.0,
        "layer_step_ms": 0.01,
        "layer_step_bound": "memory",
    }
    assert len(predict_findings([row])) == 1
    edited = dict(row)
    edit(edited)
    assert predict_findings([edited]) == []


def test_points_apart_only_in_their_output_or_vocabulary_are_found_apart():
    """Each finding names what sets its point apart: two output lengths, or a replicated
    vocabulary beside a split one, are two findings, not one line said twice."""
    from attnbench.render.predict import predict_findings

    row = {
        "model": "llama-2-7b",
        "variant": "MHA",
        "gpu": "h100-sxm",
        "batch": 4,
        "seq_len": 512,
        "tp": 2,
        "perf_model": "efficiency_bw 1 (defaults)",
        "tokens_per_s": 500.0,
        "tpot_ms": 8.0,
        "step_bound": "memory",
    }
    outputs = [
        {**row, "output_len": n, "generation_ms": 900.0, "serving_itl_ms": 9.0} for n in (64, 128)
    ]
    found = predict_findings(outputs)
    assert len(found) == 2
    assert "64 tokens out" in found[0] and "128 tokens out" in found[1]
    assert "the whole generation 0.9 s, 9 ms between tokens in flight" in found[0]
    vocabularies = predict_findings([row, {**row, "vocab": "replicated"}])
    assert len(vocabularies) == 2 and "the vocabulary replicated" in vocabularies[1]
    no_itl = {**outputs[0]}
    del no_itl["serving_itl_ms"]  # one token out, or a hand-edited file's row
    (said,) = predict_findings([no_itl])
    assert "the whole generation 0.9 s)" in said and "between tokens" not in said


def test_a_weight_only_kernel_on_the_tensor_cores_is_said_and_refused_without_one(tmp_path):
    """--weight-only-kernel tensor-cores goes to the weight-only points of a sweep alone, is
    said in their weights, and is refused where no point has weight-only weights."""
    marlin = ("--weights-dtype", "int4,float8_e4m3fn", "--weight-only-kernel", "tensor-cores")
    found = records(tmp_path, "--model", "llama-2-7b", *marlin)
    assert [r["weights"] for r in found] == [
        "int4 in groups of 128, on the tensor cores",
        "float8_e4m3fn per channel",
    ]
    notes = [line for line in source_notes(found) if line.startswith("weights: int4")]
    assert notes == [
        "weights: int4 in groups of 128, on the tensor cores (scales counted; the embeddings "
        "and the output head stay float16; the weight-only kernel multiplies on the tensor "
        "cores in tiles of 16 tokens, as Marlin's mma.sync m16n8k16 does); matmuls at the "
        "794.5 TFLOP/s of float16"
    ]
    gemv = records(tmp_path, "--model", "llama-2-7b", "--weights-dtype", "int4")[0]
    assert found[0]["padding_ms"] > gemv["padding_ms"] and found[0]["tpot_ms"] > gemv["tpot_ms"]
    args = ["predict", "--gpu", "h100-sxm", "--model", "llama-2-7b", "-q"]
    result = runner.invoke(app, [*args, "--weight-only-kernel", "tensor-cores"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == (
        "error: --weight-only-kernel tensor-cores: has no effect: no weights are weight-only "
        "(set --weights-dtype to int8, int4 or mxfp4)"
    )


def test_a_fit_with_no_time_target_refuses_a_weight_only_kernel():
    """fit times the weights' kernels only against --tpot or --ttft."""
    args = ["fit", "--model", "llama-2-7b", "--gpu", "h20", "--weights-dtype", "int4"]
    args += ["--weight-only-kernel", "tensor-cores", "--seq-len", "4096"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == (
        "error: --weight-only-kernel tensor-cores: has no effect without --tpot or --ttft: "
        "only they time the weights' kernels"
    )
    assert runner.invoke(app, [*args, "--tpot", "20ms"]).exit_code == 0
