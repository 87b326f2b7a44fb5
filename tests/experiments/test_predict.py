"""Predictions on a named GPU or this machine: one attention layer counted as decode-speed
counts it, a whole model from the same counts as params, the roofline's times, the
sources stated; the calibration and check of the command; bad input in one line."""

from __future__ import annotations

import json

import pytest
import torch

import attnbench.experiments.target as target_module
from attnbench.cli import app
from attnbench.errors import FieldError
from attnbench.experiments.context import Context
from attnbench.experiments.predict import PredictPoint, check, run, wants_peaks
from attnbench.model.capacity import kv_cache_bytes
from attnbench.model.devices import DEVICES
from attnbench.model.formulas import (
    cached_step_bytes,
    forward_flops,
    step_traffic_bytes,
    weight_bytes,
)
from attnbench.model.model_params import weight_bytes_per_rank
from attnbench.model.presets import get_preset
from attnbench.model.roofline import (
    DEFAULT_MODEL,
    PerfModel,
    decode_counts,
    layer_counts,
    predict,
    predict_counts,
)
from attnbench.model.shapes import AttentionShape
from tests.helpers import predict_point, runner

SHAPE = AttentionShape(4096, 32, 8, 128)


@pytest.mark.parametrize("batch,context", [(1, 512), (4, 4096)])
def test_a_layer_step_is_counted_as_decode_speed_counts_it(batch, context):
    counts = layer_counts(SHAPE, batch, 1, context + 1, "bfloat16")
    assert counts.bytes == cached_step_bytes(SHAPE, batch, context, "bfloat16")
    assert counts.flops == forward_flops(SHAPE, batch, 1, context + 1, causal=True)
    assert counts.kv_bytes == 2 * batch * 8 * 128 * (context + 2) * 2  # read, and one written
    prefill = layer_counts(SHAPE, batch, context, context, "bfloat16")
    traffic = step_traffic_bytes(SHAPE, batch, context, context, "bfloat16")
    assert prefill.bytes == weight_bytes(SHAPE, "bfloat16") + traffic


def test_a_layer_under_tensor_parallelism_is_one_rank_s_share():
    whole = layer_counts(SHAPE, 2, 1, 1025, "bfloat16")
    rank = layer_counts(SHAPE, 2, 1, 1025, "bfloat16", tp=8)
    assert rank.weight_bytes * 8 == whole.weight_bytes
    assert rank.kv_bytes * 8 == whole.kv_bytes
    assert (rank.allreduces, rank.allreduce_bytes) == (1, 2 * 4096 * 2)


def point(**given) -> PredictPoint:
    """llama-2-7b at context 8,192 in float16 (predict_point's, with these)."""
    return predict_point("llama-2-7b", **{"seq_len": 8192, "dtype": "float16", **given})


def test_a_model_s_decode_step_is_the_roofline_of_its_counts():
    record = run(point())
    counts = decode_counts(get_preset("llama-2-7b"), 1, 8192, "float16")
    expected = predict_counts(counts, DEVICES["h100-sxm"], "float16")
    assert record.tpot_ms == pytest.approx(expected.time_s * 1e3)
    assert record.step_bytes == counts.bytes
    assert record.step_kv_bytes == 2 * 32 * 4096 * 8193 * 2 + 2 * 32 * 4096 * 2
    assert record.tokens_per_s == pytest.approx(1 / expected.time_s)
    assert record.step_bound == "memory" and record.prefill_bound == "compute"
    # the measured figures: a BabelStream triad, the float16 GEMM rate
    assert record.peak_gbps == 2970 and record.peak_tflops == pytest.approx(794.5)
    assert "nvidia" in record.peaks_source and "BabelStream" in record.device_figures
    assert record.perf_model == DEFAULT_MODEL.describe()
    # 13.5 GB of weights and 4.3 GB of cache at 2.97 TB/s, 32 layers' launches, and the
    # tensor cores' 63 zero rows of each 64-row tile: 2 * 63 * 6.7e9 FLOPs, 1.1 ms
    assert record.launch_ms == pytest.approx(expected.launch_s * 1e3)
    # each kernel waits a pointer chase's 342.7 ns (the GH200's) for its first bytes
    latency = DEVICES["h100-sxm"].memory_latency_s
    assert latency == pytest.approx(342.7e-9, rel=1e-3)
    assert record.memory_latency_ms == pytest.approx(counts.kernels * latency * 1e3)
    assert expected.padding_s == pytest.approx(2 * 63 * 6.7e9 / 794.5e12, rel=0.02)
    assert 7.0 < record.tpot_ms < 8.0
    assert record.weights is None  # in dtype


def test_quantised_weights_shrink_the_step_and_are_stated():
    int4 = run(point(weights_dtype="int4", weights_group=32))
    full = run(point())
    assert int4.weights == "int4 in groups of 32"
    assert int4.step_weight_bytes < full.step_weight_bytes / 3
    # the 4.3 GB cache stays, and dequantising the weights costs a share of the step
    assert 0 < int4.dequant_ms < 0.2 * int4.tpot_ms and full.dequant_ms is None
    assert int4.tpot_ms - int4.dequant_ms < 0.6 * full.tpot_ms
    assert int4.memory_bytes_needed_per_gpu < full.memory_bytes_needed_per_gpu
    with pytest.raises(FieldError, match="float8") as error:
        check(point(gpu="a100-80gb", weights_dtype="float8_e4m3fn"))
    assert error.value.field == "weights_dtype"


def test_a_generation_is_its_prefill_then_its_steps_at_the_mean_context():
    """8 prompts of 1,024 tokens, 512 out: the prefill of all 8, then 511 steps each at
    1,024 + 256 cached; kept in flight, each token also waits for 7 replacements'
    prompts (one prefilled alone) over a request's 511 steps."""
    record = run(point(batch=8, seq_len=1024, output_len=512))
    spec, device = get_preset("llama-2-7b"), DEVICES["h100-sxm"]
    step = predict_counts(decode_counts(spec, 8, 1280, "float16"), device, "float16").time_s
    assert record.generation_tpot_ms == pytest.approx(step * 1e3)
    assert record.generation_ms == pytest.approx(record.ttft_ms + 511 * step * 1e3)
    assert record.output_tokens_per_s == pytest.approx(8 * 512 / (record.generation_ms / 1e3))
    itl = step * 1e3 + 7 * record.request_ttft_ms / 511
    assert record.serving_itl_ms == pytest.approx(itl)
    assert record.output_len == 512
    # the step at the context given stands as it was; the cache is held to the end
    alone = run(point(batch=8, seq_len=1024))
    assert record.tpot_ms == alone.tpot_ms and alone.generation_ms is None
    cache = kv_cache_bytes(32, 8, 512, 32, 128, "float16")
    assert record.memory_bytes_needed_per_gpu - alone.memory_bytes_needed_per_gpu == cache


def test_one_request_in_flight_waits_for_no_other_prompt():
    record = run(point(seq_len=1024, output_len=512))
    assert record.serving_itl_ms == pytest.approx(record.generation_tpot_ms)


def test_a_one_token_generation_is_its_prefill_with_nothing_between_tokens():
    record = run(point(batch=4, seq_len=1024, output_len=1))
    assert record.generation_ms == pytest.approx(record.ttft_ms)
    assert record.serving_itl_ms is None and record.generation_tpot_ms is None


def test_a_layer_shape_has_no_whole_generation():
    spec = dict(d_model=4096, num_heads=32, num_kv_heads=8, head_dim=128, model=None, spec=None)
    with pytest.raises(FieldError, match="needs a model") as error:
        check(point(output_len=128, **spec))
    assert error.value.field == "output_len"


def test_a_layer_shape_has_no_model_rows():
    spec = dict(d_model=4096, num_heads=32, num_kv_heads=8, head_dim=128, model=None, spec=None)
    record = run(point(**spec))
    assert record.tpot_ms is None and record.ttft_ms is None
    assert record.layer_step_bytes == cached_step_bytes(SHAPE, 1, 8192, "float16")
    assert record.tokens_per_s == pytest.approx(1e3 / record.layer_step_ms)


def test_a_named_gpu_is_resolved_once_for_a_points_check_and_its_run(monkeypatch):
    looked_up = []
    monkeypatch.setattr(
        target_module, "device_spec", lambda name: looked_up.append(name) or DEVICES[name]
    )
    here = point()
    check(here)
    run(here)
    assert looked_up == ["h100-sxm"]


def test_this_machine_is_predicted_on_the_peaks_the_run_measured():
    here = point(gpu="this")
    assert wants_peaks(here) and not wants_peaks(point())
    context = Context(torch.device("cpu"), 20.0, {"float16": 0.5})
    record = run(here, context)
    assert record.peak_gbps == 20.0 and record.peak_tflops == 0.5
    assert record.peaks_source.startswith("measured: copy 20.0 GB/s")


def test_this_machine_is_the_run_recorded_it_not_collected_again(monkeypatch):
    """The environment reaches a prediction through its context, as the runner recorded
    it: nothing is collected again (collecting runs git), and the later probes leave the
    peaks the point was held against alone."""
    import attnbench.measure.environment as environment

    def collect(*args, **kwargs):
        raise AssertionError("the environment was collected again")

    monkeypatch.setattr(environment, "collect_environment", collect)
    recorded = {"device": "cpu", "device_name": "the recorded CPU", "num_threads": 3}
    recorded |= {"peak_gbps_probes": [20.0, 40.0], "peak_tflops_probes": {"float16": [0.5, 9]}}
    context = Context(torch.device("cpu"), 20.0, {"float16": 0.5}, environment=recorded)
    record = run(point(gpu="this"), context)
    assert record.device_title == "the recorded CPU, 3 thread(s)"
    assert record.peak_gbps == 20.0 and record.peak_tflops == 0.5


def test_a_calibration_of_this_machine_applies_to_the_peaks_it_measures_now(tmp_path):
    path = tmp_path / "cal.json"
    doc = {
        "efficiency_bw": 0.5,
        "efficiency_kv": 0.25,
        "efficiency_flops": 0.5,
        "overhead_s": 0.0,
        "gpu": "this",
        "peak_gbps": 10.0,
        "peak_tflops": {"float16": 1.0},
        "environment": {"device": "cpu", "device_name": "a CPU", "num_threads": 1},
    }
    path.write_text(json.dumps(doc))
    here = point(gpu="this", calibration=str(path), spec=None, model=None)
    assert wants_peaks(here)
    record = run(here, Context(torch.device("cpu"), 20.0, {"float16": 2.0}))
    shape = AttentionShape(4096, 32, 32, 128)
    counts = layer_counts(shape, 1, 1, 8193, "float16")
    model = PerfModel(0.5, 0.5, 0.0, "t", efficiency_kv=0.25)
    roof = predict(
        counts.bytes,
        counts.flops,
        20e9,
        2e12,
        model,
        kv_bytes=counts.kv_bytes,
        attention_flops=counts.attention_flops,
    )
    assert record.layer_step_ms == pytest.approx(roof.time_s * 1e3)
    assert record.efficiency_kv == 0.25 and record.peak_gbps == 20.0


def predict_cli(*args: str):
    return runner.invoke(app, ["predict", *args])


def test_cli_whole_models_on_named_gpus_with_their_sources(tmp_path):
    out = tmp_path / "p.json"
    args = ["--model", "llama-3-70b", "--gpu", "h100-sxm", "--tp", "8", "--seq-len", "8192"]
    result = predict_cli(*args, "--json", str(out))
    assert result.exit_code == 0, result.output
    (record,) = json.loads(out.read_text())["records"]
    assert record["tp"] == 8 and record["allreduce_ms"] > 0
    assert "model TPOT" in result.output and "defaults" in result.output
    assert "nccl-tests" in result.output and "BabelStream" in result.output
    assert "resources.nvidia.com" in result.output


def test_cli_q_and_k_norms_across_the_heads_add_their_all_reduce_to_layer_and_model(tmp_path):
    """OLMo-2's q and k norms span the heads: at TP 2 each of its 32 layers, and the layer
    rows with them, all-reduce the norms' statistics, and the collectives' note says so."""
    out = tmp_path / "p.json"
    config = "docs/architectures/olmo-2-7b.json"
    args = ["--hf-config", config, "--gpu", "h100-sxm", "--tp", "2", "--seq-len", "512"]
    result = predict_cli(*args, "--json", str(out), "--wide")
    assert result.exit_code == 0, result.output
    (record,) = json.loads(out.read_text())["records"]
    assert record["norm_allreduces"] == 32
    assert "1 more in each attention layer for its q and k norms" in " ".join(result.output.split())
    shape = AttentionShape(4096, 32, 32, 128)
    layer = layer_counts(shape, 1, 1, 513, "bfloat16", tp=2, qk_norm_across_heads=True)
    expected = predict_counts(layer, DEVICES["h100-sxm"], "bfloat16", tp=2).time_s * 1e3
    assert record["layer_step_ms"] == pytest.approx(expected)


def test_cli_a_replicated_vocabulary_beside_a_split_one(tmp_path):
    """Each rank of gpt-fast's tensor parallelism reads the whole head and gathers no
    logits: the table names each layout, and the collectives' note drops the gather."""
    out = tmp_path / "p.json"
    args = ["--model", "llama-3.1-8b", "--gpu", "a100-80gb", "--tp", "8", "--seq-len", "8"]
    result = predict_cli(*args, "--vocab-layout", "replicated,split", "--json", str(out))
    assert result.exit_code == 0, result.output
    replicated, split = json.loads(out.read_text())["records"]
    assert (replicated["vocab"], split["vocab"]) == ("replicated", None)
    head = 128256 * 4096 * 2
    assert replicated["step_weight_bytes"] - split["step_weight_bytes"] == head - head // 8
    assert replicated["tpot_ms"] > split["tpot_ms"]
    assert replicated["allreduce_ms"] < split["allreduce_ms"]
    lines = result.output.splitlines()
    notes = [line for line in lines if "the model's collectives" in line]
    assert len(notes) == 2
    assert "each rank holding the whole vocabulary" in notes[0]
    assert "gather" not in notes[0] and "the logits' gather" in notes[1]
    assert any(line.startswith("│ replicated") for line in lines)
    assert any(line.startswith("│ split") for line in lines)


@pytest.mark.parametrize(
    "args,message",
    [
        (["--gpu", "h100"], "--gpu h100: unknown value"),
        (["--gpu", "this", "--seq-len", "64", "--tp", "2"], "--tp 2: needs a named GPU"),
        (["--gpu", "h100-sxm", "--seq-len", "64", "--tp", "3"], "--tp 3: does not divide"),
    ],
)
def test_cli_bad_input_is_one_line(args, message):
    result = predict_cli("--model", "llama-2-7b", *args)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: {message}"), result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_cli_a_generation_beside_the_step_alone(tmp_path):
    """Two output lengths: a row each for the generation and the serving ITL, the finding
    of each point said apart."""
    out = tmp_path / "p.json"
    args = ["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--batch", "4", "--seq-len", "512"]
    result = predict_cli(*args, "--output-len", "128,1024", "--json", str(out))
    assert result.exit_code == 0, result.output
    short, long = json.loads(out.read_text())["records"]
    assert (short["output_len"], long["output_len"]) == (128, 1024)
    assert short["generation_tpot_ms"] < long["generation_tpot_ms"]  # 576 cached, 1,024
    assert short["serving_itl_ms"] > long["serving_itl_ms"]  # prefills over fewer steps
    rows = [line for line in result.output.splitlines() if "│ generation" in line]
    assert len(rows) == 2 and "serving ITL" in result.output
    assert "each at the mean context, context + output / 2" in result.output


def test_cli_without_a_context_predicts_at_kvmem_s_default(tmp_path):
    out = tmp_path / "p.json"
    result = predict_cli("--model", "llama-2-7b", "--gpu", "a100-80gb", "--json", str(out))
    assert result.exit_code == 0, result.output
    (record,) = json.loads(out.read_text())["records"]
    assert record["seq_len"] == 2048 and "context 2,048" in result.output
    assert "context 2,048 tokens, the default: --seq-len sets it" in result.output
    given = predict_cli("--model", "llama-2-7b", "--gpu", "a100-80gb", "--seq-len", "2048")
    assert "the default: --seq-len" not in given.output


def test_cli_a_negative_efficiency_in_a_calibration_file(tmp_path):
    path = tmp_path / "cal.json"
    path.write_text(json.dumps({"efficiency_bw": -0.8, "efficiency_flops": 0.6, "overhead_s": 0}))
    result = predict_cli("--model", "llama-2-7b", "--seq-len", "64", "--calibration", str(path))
    assert result.exit_code == 2
    assert result.stderr == f"error: {path}: efficiency_bw -0.8: must be a number in (0, 1.5]\n"
    assert len(result.stderr.splitlines()) == 1


def test_cli_a_calibration_for_another_gpu_is_refused(tmp_path):
    path = tmp_path / "cal.json"
    doc = {"efficiency_bw": 0.8, "efficiency_flops": 0.6, "overhead_s": 0, "gpu": "a100-80gb"}
    path.write_text(json.dumps(doc))
    args = ["--seq-len", "64", "--gpu", "h100-sxm", "--calibration", str(path)]
    result = predict_cli("--model", "llama-2-7b", *args)
    assert result.exit_code == 2
    assert "fitted against a100-80gb's peaks, not h100-sxm's" in result.stderr


@pytest.fixture(scope="module")
def measured_run(tmp_path_factory):
    """A real decode-speed results file whose step times are set by a known model (on
    the peaks the run measured): what --calibrate must find back."""
    path = tmp_path_factory.mktemp("run") / "run.json"
    args = ["decode-speed", "--d-model", "256", "--heads", "4", "--kv-heads", "4,1"]
    args += ["--batch", "1,4", "--prompt-len", "64,512", "--mode", "cache", "--no-prefill"]
    args += ["--reference", "none", "--repeats", "2", "--warmup", "0", "--quiet"]
    result = runner.invoke(app, [*args, "--json", str(path)])
    assert result.exit_code == 0, result.output
    doc = json.loads(path.read_text())
    env = doc["environment"]
    truth = PerfModel(0.9, 0.5, 20e-6, "truth", efficiency_kv=0.3)
    for r in doc["records"]:
        roof = predict(
            r["bytes_per_step"],
            r["flops_per_step"],
            env["peak_gbps"] * 1e9,
            env["peak_tflops"]["float32"] * 1e12,
            truth,
            kv_bytes=r["kv_bytes_per_gpu"],
        )
        step_ms = roof.time_s * 1e3
        r.update(step_ms_median=step_ms, step_ms_p25=step_ms, step_ms_p75=step_ms)
        r["samples_ms"] = [step_ms] * len(r["samples_ms"])  # a median among its samples
    path.write_text(json.dumps(doc))
    return path


def test_cli_calibrates_on_a_run_and_checks_another(measured_run, tmp_path):
    to = tmp_path / "cal.json"
    result = predict_cli("--calibrate", str(measured_run), "--to", str(to))
    assert result.exit_code == 0, result.output
    written = json.loads(to.read_text())
    assert written["efficiency_kv"] == pytest.approx(0.3, rel=1e-6)
    assert written["gpu"] == "this" and written["environment"]["device"] == "cpu"
    assert "calibrated on 8 steps of run.json" in written["source"]
    result = predict_cli("--check", str(measured_run), "--calibration", str(to))
    assert result.exit_code == 0, result.output
    assert "median |error| 0.0% over 8 samples" in result.output
    result = predict_cli("--check", str(measured_run))  # the defaults: some error
    assert "median |error| 0.0%" not in result.output and "(defaults)" in result.output


def test_cli_a_what_if_set_names_each_variant_and_the_model_s_own():
    args = ["--model", "llama-3-70b", "--kv-heads", "mha,8", "--gpu", "h100-sxm"]
    result = runner.invoke(app, ["predict", *args, "--seq-len", "8192"], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    assert "GQA-8 (own)" in result.output and "MHA " in result.output


def test_cli_a_config_json_is_predicted_like_its_preset(tmp_path):
    """scripts/examples/config.json is Llama-3-8B's: the same counts and times."""
    out = [tmp_path / "preset.json", tmp_path / "config.json"]
    common = ["--gpu", "a100-80gb", "--seq-len", "4096", "-q", "--json"]
    path = "scripts/examples/config.json"
    assert predict_cli("--model", "llama-3-8b", *common, str(out[0])).exit_code == 0
    assert predict_cli("--hf-config", path, *common, str(out[1])).exit_code == 0
    preset, config = (json.loads(p.read_text())["records"][0] for p in out)
    for field in ("step_bytes", "step_flops", "prefill_bytes", "tpot_ms", "ttft_ms"):
        assert config[field] == preset[field], field


def test_a_model_that_does_not_fit_is_said_and_predicted_all_the_same():
    spec = get_preset("mixtral-8x7b")
    shape = {"d_model": spec.d_model, "num_heads": spec.num_heads, "head_dim": spec.head_dim}
    mixtral = dict(model=spec.name, spec=spec, num_kv_heads=spec.num_kv_heads, **shape)
    one, two = (
        run(point(**mixtral, dtype="bfloat16")),
        run(point(**mixtral, tp=2, dtype="bfloat16")),
    )
    weights = weight_bytes_per_rank(spec, "bfloat16", 1)
    cache = kv_cache_bytes(32, 1, 8192, 8, 128, "bfloat16")  # no window at 8,192 tokens
    assert one.memory_bytes_needed_per_gpu == weights + cache
    assert one.fits_memory is False and two.fits_memory is True and one.tpot_ms > 0
    layer = run(point(model=None, spec=None))
    assert layer.fits_memory is None and layer.memory_bytes_needed_per_gpu is None


def test_a_layer_shape_takes_a_cache_dtype_of_its_own():
    shape = dict(d_model=4096, num_heads=32, num_kv_heads=8, head_dim=128, model=None, spec=None)
    half = run(point(**shape, dtype="bfloat16"))
    int8 = run(point(**shape, dtype="bfloat16", kv_dtype="int8"))
    assert int8.kv_dtype == "int8" and int8.layer_step_kv_bytes < half.layer_step_kv_bytes
    assert int8.layer_step_ms < half.layer_step_ms


def test_cli_an_efficiency_too_small_to_predict_with(tmp_path):
    """A share of the peaks under a billionth is refused in one line: far under it a
    step's time would be no number (1e-308: infinite) and could not be written."""
    path = tmp_path / "cal.json"
    doc = {"efficiency_bw": 1.1e-308, "efficiency_flops": 1.0, "overhead_s": 0}
    path.write_text(json.dumps(doc))
    args = ("--model", "llama-2-7b", "--seq-len", "64", "--calibration", str(path))
    result = predict_cli(*args, "--json", str(tmp_path / "o.json"))
    assert result.exit_code == 2
    assert (
        result.stderr
        == f"error: {path}: efficiency_bw 1.1e-308: is below 1e-09, a billionth of the peaks\n"
    )
    assert not (tmp_path / "o.json").exists()
