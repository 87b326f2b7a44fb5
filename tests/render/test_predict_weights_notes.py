"""The weights line of predict's notes: a model's quantised weights keep its embeddings
and head in dtype; a layer shape has neither, only its projections, quantised."""

from __future__ import annotations

import json

from attnbench.cli import app
from attnbench.render.predict import source_notes
from tests.helpers import runner


def records(tmp_path, *args: str) -> list[dict]:
    out = tmp_path / "p.json"
    common = ["predict", "--gpu", "h100-sxm", "--seq-len", "512", "-q", "--json", str(out)]
    result = runner.invoke(app, [*common, *args])
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text())["records"]


def test_a_layer_shape_s_weights_are_its_projections_a_model_s_keep_its_head(tmp_path):
    weights = ("--weights-dtype", "int8,float8_e4m3fn")
    shape = records(tmp_path, "--d-model", "4096", "--heads", "32", *weights)
    model = records(tmp_path, "--model", "llama-2-7b", *weights)
    lines = [line for line in source_notes([*shape, *model]) if line.startswith("weights:")]
    assert lines == [
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
