"""decode-speed: the harness's statistics, cached == uncached outputs, formulas, failures."""

import csv
import json
import statistics
import time

import pytest
import torch
from typer.testing import CliRunner

from attnbench.cli import app
from attnbench.experiments import decode
from attnbench.experiments.decode import DecodeOptions, build_layer, decode_outputs, decode_record
from attnbench.measure.timing import Measurement, Timer, percentile
from attnbench.model.formulas import (
    AttentionShape,
    cached_step_bytes,
    decode_totals,
    forward_flops,
    uncached_step_bytes,
)

runner = CliRunner()
TINY = ["--d-model", "32", "--heads", "4", "--kv-heads", "4,1", "--batch", "1",
        "--prompt-len", "4", "--gen-len", "3", "--warmup", "0", "--repeats", "1"]  # fmt: skip

DECODE_COLUMNS = [
    "variant", "backend", "device", "dtype", "batch", "d_model", "num_heads", "num_kv_heads",
    "head_dim", "prompt_len", "gen_len", "mode", "prefill_ms", "step_ms_median", "step_ms_p25",
    "step_ms_p75", "total_ms", "tokens_per_s", "speedup_vs_no_cache", "bytes_per_step",
    "achieved_gbps", "peak_gbps", "pct_of_peak_bw", "flops_per_step", "achieved_tflops",
    "noisy", "status",
]  # fmt: skip


# --- the harness -------------------------------------------------------------------------


def test_percentiles_match_linear_interpolation():
    values = [5.0, 1.0, 4.0, 2.0, 3.0, 10.0]
    # sorted: 1 2 3 4 5 10; p25 at position 1.25 -> 2.25; median at 2.5 -> 3.5; p75 at 3.75
    assert percentile(values, 25) == pytest.approx(2.25)
    assert percentile(values, 50) == pytest.approx(3.5)
    assert percentile(values, 75) == pytest.approx(4.75)
    assert percentile([7.0], 50) == 7.0


def test_measurement_summary_and_noisy_flag():
    quiet = Measurement([10.0, 10.1, 10.2, 10.3, 10.4])
    assert quiet.median_ms == pytest.approx(10.2)
    assert quiet.iqr_ms == pytest.approx(0.2)
    assert not quiet.noisy  # 0.2 / 10.2 < 10%
    loud = Measurement([10.0, 8.0, 12.0, 9.0, 11.0])
    assert loud.iqr_ms == pytest.approx(2.0)
    assert loud.noisy  # 2 / 10 > 10%
    edge = Measurement([9.5, 10.0, 10.5])  # IQR 0.5 on median 10: 5%, not noisy
    assert not edge.noisy


def test_warmup_calls_are_run_but_not_counted():
    calls = []

    def call():
        calls.append(None)
        if len(calls) <= 2:
            time.sleep(0.05)  # a slow first-time path, as allocator and kernel set-up are

    m = Timer(torch.device("cpu")).measure(call, warmup=2, repeats=4)
    assert len(calls) == 6
    assert len(m.samples_ms) == 4
    assert max(m.samples_ms) < 40  # the 50 ms warm-up calls are not among the samples


# --- the two modes agree -----------------------------------------------------------------


@pytest.mark.parametrize("kv_heads", [4, 2, 1])
@pytest.mark.parametrize("backend", ["sdpa", "naive"])
def test_cached_and_uncached_decode_give_the_same_outputs(kv_heads, backend):
    shape = AttentionShape(32, 4, kv_heads)
    layer = build_layer(shape, backend, torch.float64, "cpu")
    x = torch.randn(2, 9, 32, dtype=torch.float64)
    cached = decode_outputs(layer, x, prompt_len=5, gen_len=4, cached=True)
    uncached = decode_outputs(layer, x, prompt_len=5, gen_len=4, cached=False)
    assert cached.shape == (2, 4, 32)
    torch.testing.assert_close(cached, uncached, rtol=1e-10, atol=1e-12)
    # and both equal the last 4 rows of one causal pass over the whole sequence
    with torch.inference_mode():
        full = layer(x, is_causal=True)[:, 5:]
    torch.testing.assert_close(cached, full, rtol=1e-10, atol=1e-12)


# --- formulas ----------------------------------------------------------------------------


def test_cached_step_bytes_by_hand():
    shape = AttentionShape(64, 8, 2)  # head_dim 8, kv_dim 16, q_dim 64
    # weights: q 64*64 + k 64*16 + v 64*16 + o 64*64 = 10240 params * 4 B = 40960
    # KV read: 2 * batch 3 * 16 * (100 + 1 tokens) * 4 B = 38784
    # new K/V written: 2 * 3 * 16 * 4 = 384; activations: 3 * (2*64 + 2*64) * 4 = 3072
    assert cached_step_bytes(shape, 3, 100, "float32") == 40960 + 38784 + 384 + 3072


def test_uncached_step_bytes_by_hand():
    shape = AttentionShape(64, 8, 2)
    # weights 40960 (fp32); 3 sequences of 10 tokens = 30 tokens
    # K/V written and read: 2*2*16*30*4 = 7680; q and attention out: 2*2*64*30*4 = 30720
    # x in and layer out: 2*64*30*4 = 15360
    assert uncached_step_bytes(shape, 3, 10, "float32") == 40960 + 7680 + 30720 + 15360


def test_decode_flops_by_hand():
    shape = AttentionShape(64, 8, 2)
    # one cached step, batch 1, 11 keys: projections 2*(64*64*2 + 64*16*2) = 20480
    # attention 4 * 8 heads * 8 head_dim * 11 pairs = 2816
    assert forward_flops(shape, 1, 1, 11, causal=True) == 20480 + 2816
    total_bytes, total_flops = decode_totals(shape, 1, 10, 2, "float32", cached=True)
    assert total_flops == forward_flops(shape, 1, 1, 11, True) + forward_flops(
        shape, 1, 1, 12, True
    )
    assert total_bytes == cached_step_bytes(shape, 1, 10, "float32") + cached_step_bytes(
        shape, 1, 11, "float32"
    )
    # uncached: step over 11 then 12 tokens, causal: pairs 11*12/2 = 66 and 12*13/2 = 78
    _, uncached_flops = decode_totals(shape, 1, 10, 2, "float32", cached=False)
    projections = 2 * (64 * 64 * 2 + 64 * 16 * 2) * (11 + 12)
    assert uncached_flops == projections + 4 * 8 * 8 * (66 + 78)


# --- records and failures ----------------------------------------------------------------

POINT = {"d_model": 32, "num_heads": 4, "num_kv_heads": 2, "batch": 1, "prompt_len": 4,
         "gen_len": 3, "backend": "sdpa", "mode": "cache", "dtype": "float32"}  # fmt: skip


def test_record_fields_are_consistent():
    rec = decode_record(POINT, torch.device("cpu"), DecodeOptions(warmup=0, repeats=2), 10.0)
    assert rec.status == "ok"
    assert len(rec.samples_ms) == 2 * 3  # repeats x gen_len per-step samples
    assert rec.step_ms_p25 <= rec.step_ms_median <= rec.step_ms_p75
    assert rec.prefill_ms is not None and rec.prefill_ms > 0
    assert rec.tokens_per_s == pytest.approx(1 / (rec.step_ms_median * 1e-3))
    assert rec.achieved_gbps == pytest.approx(rec.bytes_per_step / rec.step_ms_median / 1e6)
    assert rec.pct_of_peak_bw == pytest.approx(10 * rec.achieved_gbps)
    assert rec.total_ms >= rec.prefill_ms


def test_no_prefill_leaves_prefill_empty():
    options = DecodeOptions(warmup=0, repeats=1, prefill=False)
    rec = decode_record(POINT, torch.device("cpu"), options, None)
    assert rec.status == "ok" and rec.prefill_ms is None and rec.pct_of_peak_bw is None


def test_out_of_memory_becomes_a_status(monkeypatch):
    def boom(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")

    monkeypatch.setattr(decode, "time_decode", boom)
    rec = decode_record(POINT, torch.device("cpu"), DecodeOptions(), None)
    assert rec.status == "oom" and rec.step_ms_median is None
    assert rec.bytes_per_step is not None  # the analytic columns are still filled


def test_cpu_allocator_failure_is_an_oom_and_other_errors_are_recorded(monkeypatch):
    cpu_oom = RuntimeError("[enforce fail] DefaultCPUAllocator: can't allocate memory")
    monkeypatch.setattr(decode, "time_decode", _raiser(cpu_oom))
    assert decode_record(POINT, torch.device("cpu"), DecodeOptions(), None).status == "oom"
    monkeypatch.setattr(decode, "time_decode", _raiser(ValueError("bad thing")))
    status = decode_record(POINT, torch.device("cpu"), DecodeOptions(), None).status
    assert status == "error: ValueError: bad thing"


def _raiser(exc):
    def raise_it(*args, **kwargs):
        raise exc

    return raise_it


def test_sweep_goes_on_after_an_oom_and_exits_nonzero(monkeypatch, tmp_path):
    real = decode.time_decode

    def fail_mqa(shape, *args, **kwargs):
        if shape.num_kv_heads == 1:
            raise torch.OutOfMemoryError("out of memory")
        return real(shape, *args, **kwargs)

    monkeypatch.setattr(decode, "time_decode", fail_mqa)
    out = tmp_path / "d.csv"
    result = runner.invoke(app, ["decode-speed", *TINY, "--device", "cpu", "--csv", str(out)])
    assert result.exit_code == 1
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 4  # 2 variants x 2 modes, all recorded
    assert sorted(r["status"] for r in rows) == ["ok", "ok", "oom", "oom"]


# --- the command -------------------------------------------------------------------------


def test_csv_and_json_hold_the_same_records(tmp_path):
    csv_path, json_path = tmp_path / "d.csv", tmp_path / "d.json"
    result = runner.invoke(app, ["decode-speed", *TINY, "--device", "cpu", "--quiet",
                                 "--csv", str(csv_path), "--json", str(json_path)])  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(csv_path.open()))
    doc = json.loads(json_path.read_text())
    assert doc["command"] == "decode-speed"
    assert doc["environment"]["peak_gbps"] > 0
    assert doc["environment"]["num_threads"] == torch.get_num_threads()
    assert list(rows[0])[: len(DECODE_COLUMNS)] == DECODE_COLUMNS
    assert "samples_ms" not in rows[0]
    assert len(rows) == len(doc["records"]) == 4
    for row, rec in zip(rows, doc["records"], strict=True):
        assert len(rec["samples_ms"]) == 3
        assert float(row["step_ms_median"]) == pytest.approx(rec["step_ms_median"])
        assert int(row["bytes_per_step"]) == rec["bytes_per_step"]
        assert rec["step_ms_median"] == pytest.approx(statistics.median(rec["samples_ms"]))
        if rec["mode"] == "cache":
            assert rec["speedup_vs_no_cache"] > 0
        else:
            assert rec["speedup_vs_no_cache"] is None and row["speedup_vs_no_cache"] == ""


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--device", "cuda"], "--device"),
        (["--mode", "fast"], "--mode"),
        (["--backend", "flash"], "--backend"),
        (["--prompt-len", "0"], "--prompt-len"),
        (["--repeats", "x"], "--repeats"),
        (["--dtype", "float64"], "--dtype"),
    ],
)
def test_bad_flags_exit_2_with_one_line(args, needle):
    if args == ["--device", "cuda"] and torch.cuda.is_available():
        pytest.skip("CUDA is present")
    result = runner.invoke(app, ["decode-speed", *TINY, *args])
    assert result.exit_code == 2
    assert needle in result.output and "Traceback" not in result.output


@pytest.mark.cuda
def test_cuda_graph_replays_match_eager_timing_shape():
    point = {**POINT, "dtype": "bfloat16", "prompt_len": 64, "gen_len": 4}
    options = DecodeOptions(warmup=1, repeats=2, cuda_graph=True)
    rec = decode_record(point, torch.device("cuda"), options, None)
    assert rec.status == "ok" and len(rec.samples_ms) == 8
