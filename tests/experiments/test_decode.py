"""decode-speed: the harness's statistics, cached == uncached outputs, formulas, failures."""

from __future__ import annotations

import csv
import functools
import json
import statistics
import time

import pytest
import torch

import attnbench.cli.decode_cmd
from attnbench.cli import app
from attnbench.experiments import decode
from attnbench.experiments.context import Context
from attnbench.experiments.decode import DecodePoint, build_layer, decode_outputs
from attnbench.measure.stats import Measurement, percentile
from attnbench.measure.timing import Timer
from attnbench.model.formulas import (
    cached_step_bytes,
    decode_totals,
    forward_flops,
    prefill_flops,
    step_totals,
    uncached_step_bytes,
)
from attnbench.model.shapes import AttentionShape
from attnbench.study import runner as study
from attnbench.study.runner import DirectoryStore, plan_command, run_experiment, run_study
from tests.experiments.options import decode_options, decode_point, with_options
from tests.helpers import runner

TINY = [
    "--d-model",
    "32",
    "--heads",
    "4",
    "--kv-heads",
    "4,1",
    "--batch",
    "1",
    "--prompt-len",
    "4",
    "--gen-len",
    "3",
    "--warmup",
    "0",
    "--repeats",
    "1",
]


def tiny_with(args: list[str]) -> list[str]:
    """TINY's flags with those of `args` in place of its own (an option is given once);
    a flag of `args` without a value (--no-prefill) is kept as it is."""
    given: dict[str, list[str]] = {}
    for tokens in (TINY, args):
        for i, token in enumerate(tokens):
            if token.startswith("--"):
                value = tokens[i + 1 : i + 2]
                given[token] = value if value and not value[0].startswith("--") else []
    return [token for flag, value in given.items() for token in (flag, *value)]


DECODE_COLUMNS = [
    "variant",
    "provider",
    "device",
    "dtype",
    "batch",
    "d_model",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "prompt_len",
    "gen_len",
    "mode",
    "cuda_graph",
    "tp",
    "step_ms_median",
    "step_ms_p25",
    "step_ms_p75",
    "step_repeats",
    "step_calls_per_sample",
    "step_stop",
    "step_ci_pct",
    "tokens_per_s",
    "speedup_vs_no_cache",
    "baseline_provider",
    "speedup_vs_baseline",
    "bytes_per_step",
    "achieved_gbps",
    "peak_gbps",
    "pct_of_peak_bw",
    "flops_per_step",
    "kv_bytes_per_gpu",
    "allreduce_ms_median",
    "allreduce_ms_p25",
    "allreduce_ms_p75",
    "prefill_ms_median",
    "prefill_ms_p25",
    "prefill_ms_p75",
    "prefill_flops",
    "achieved_tflops",
    "peak_tflops",
    "pct_of_peak_flops",
    "gen_ms_median",
    "gen_ms_p25",
    "gen_ms_p75",
    "gen_tokens_per_s",
    "reference",
    "x_of_reference_median",
    "x_of_reference_p25",
    "x_of_reference_p75",
    "sampling",
    "sampling_group",
    "layouts",
    "copies",
    "cpu_share",
    "narrowest_variant",
    "x_of_narrowest_median",
    "x_of_narrowest_p25",
    "x_of_narrowest_p75",
    "x_of_narrowest_ci_lo",
    "x_of_narrowest_ci_hi",
    "x_of_no_cache_median",
    "x_of_no_cache_p25",
    "x_of_no_cache_p75",
    "x_of_no_cache_ci_lo",
    "x_of_no_cache_ci_hi",
    "x_of_baseline_median",
    "x_of_baseline_p25",
    "x_of_baseline_p75",
    "x_of_baseline_ci_lo",
    "x_of_baseline_ci_hi",
    "instructions_per_step",
    "instructions_counter",
    "noisy",
    "status",
    "model",
    "published_kv_heads",
    "projection_path",
    "batch_spec",
    "block_size",
    "kv_allocated_bytes",
    "kv_used_bytes",
    "kv_waste_pct",
    "x_of_contiguous_median",
    "x_of_contiguous_p25",
    "x_of_contiguous_p75",
    "x_of_contiguous_ci_lo",
    "x_of_contiguous_ci_hi",
    "prefill_peak_bytes",
    "prefill_peak_method",
    "score_matrix_bytes",
    "prefill_analytic_bytes",
]


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

TINY_POINT = {
    "d_model": 32,
    "num_heads": 4,
    "num_kv_heads": 4,
    "batch": 1,
    "prompt_len": 4,
    "gen_len": 3,
    "provider": "attnbench",
    "mode": "cache",
    "dtype": "float32",
}
POINT = decode_point(**{**TINY_POINT, "num_kv_heads": 2})
CPU = torch.device("cpu")
#: Field values of a tiny decode study (what the decode-speed flags would give).
TINY_VALUES = {
    "d_model": [32],
    "num_heads": [4],
    "num_kv_heads": [4, 1],
    "batch": [1],
    "prompt_len": [4],
    "gen_len": [3],
    "warmup": 0,
    "repeats": 1,
    "device": "cpu",
}


def tiny_plan(**values) -> study.Plan:
    """A planned decode study of TINY_VALUES, with `values` replacing some of them."""
    return plan_command("decode", None, {**TINY_VALUES, **values})


def raising(exc: BaseException, when=lambda point: True):
    """An executor that raises `exc` for the points `when` picks and runs the others."""

    def execute(task: study.Task, context: Context):
        if when(task.point):
            raise exc
        return run_experiment(task, context)

    return execute


def test_record_fields_are_consistent():
    context = Context(CPU, peak_gbps=10.0, peak_tflops={"float32": 0.5})
    rec = decode.run(with_options(POINT, {"warmup": 0, "repeats": 4}), context)
    assert decode.timed(rec)
    assert len(rec.samples_ms) == rec.step_repeats == 4 and rec.step_stop == "repeats"
    assert rec.step_ms_p25 <= rec.step_ms_median <= rec.step_ms_p75
    assert rec.tokens_per_s == pytest.approx(1 / (rec.step_ms_median * 1e-3))
    assert rec.achieved_gbps == pytest.approx(rec.bytes_per_step / rec.step_ms_median / 1e6)
    assert rec.pct_of_peak_bw == pytest.approx(10 * rec.achieved_gbps)
    assert rec.peak_gbps == 10.0
    assert rec.projection_path in ("onednn-packed", "torch")
    # the fixed-context step: S = 4 cached tokens, the new one attends 5 keys
    assert (rec.bytes_per_step, rec.flops_per_step) == step_totals(
        AttentionShape(32, 4, 2), 1, 4, "float32", cached=True
    )
    # the prefill, held against the matmul peak
    assert len(rec.prefill_samples_ms) == 4 and rec.prefill_ms_median > 0
    assert rec.prefill_flops == prefill_flops(AttentionShape(32, 4, 2), 1, 4)
    assert rec.achieved_tflops == pytest.approx(rec.prefill_flops / rec.prefill_ms_median / 1e9)
    assert rec.peak_tflops == 0.5
    assert rec.pct_of_peak_flops == pytest.approx(100 * rec.achieved_tflops / 0.5)
    # whole generations: one sample per generation of gen_len tokens
    assert len(rec.gen_samples_ms) == 4
    assert rec.gen_tokens_per_s == pytest.approx(3 / (rec.gen_ms_median * 1e-3))
    assert rec.gen_ms_median > 0  # not above the step's: a stall of a busy host can flip them


def test_no_prefill_and_no_generation_leave_their_metrics_empty():
    point = decode_point(**{**TINY_POINT, "gen_len": 0})
    rec = decode.run(
        with_options(point, {"warmup": 0, "repeats": 2, "prefill": False}, CPU), Context(CPU)
    )
    assert decode.timed(rec) and len(rec.samples_ms) == 2
    assert rec.prefill_ms_median is None and rec.prefill_samples_ms == []
    assert rec.prefill_flops is None and rec.achieved_tflops is None
    assert rec.gen_ms_median is None and rec.gen_samples_ms == [] and rec.gen_tokens_per_s is None
    assert rec.pct_of_peak_bw is None  # no peak was given


def test_status_tells_a_steady_step_from_a_noisy_one_and_from_too_few_samples():
    """ok: p25 to p75 within 10% of the median over enough samples; noisy: wider; too few
    samples to judge the spread (a few that all met one stall read as no spread at all):
    noisy too, saying why. Every one of them is timed."""
    steady = Measurement([10.0 + 0.01 * i for i in range(11)])
    assert (steady.spread_known, decode.step_status(steady)) == (True, decode.OK)
    loud = Measurement([10.0, 8.0, 12.0, 9.0, 11.0] * 3)
    assert decode.step_status(loud) == decode.WIDE
    assert decode.WIDE == "noisy: p25 to p75 over 10% of the median (±IQR over ±5%)"
    stalled = Measurement([40.0] * 10)  # ten samples of one 40 ms stall: IQR 0
    assert not stalled.noisy and not stalled.spread_known
    assert decode.step_status(stalled) == decode.FEW_SAMPLES
    assert decode.FEW_SAMPLES == "noisy: under 11 samples, too few to judge the spread"
    timed = (decode.OK, decode.WIDE, decode.FEW_SAMPLES, decode.BUSY, decode.bimodal([1], [2]))
    assert all(decode.timed({"status": s}) for s in timed)
    assert not decode.timed({"status": "oom"}) and not decode.timed({"status": "wrong: x"})
    rec = decode.run(
        with_options(POINT, {"warmup": 0, "repeats": 3, "prefill": False}, CPU), Context(CPU)
    )
    assert (rec.status, rec.noisy) == (decode.FEW_SAMPLES, True)  # 3 samples: not ±0.0%


@pytest.mark.parametrize("reference", ["none", "kernels"])
def test_adaptive_sampling_is_the_default_and_records_why_it_stopped(reference):
    """Sampling stops when the step's interval, and with a reference its ratio's too,
    is within 2%, or when the time is up."""
    options = {"warmup": 1, "max_time": 0.5, "prefill": False, "reference": reference}
    rec = decode.run(with_options(POINT, options, CPU), Context(CPU))
    assert decode.timed(rec)
    assert rec.step_stop in ("target_ci", "max_time")
    assert rec.step_repeats == len(rec.samples_ms) >= 5
    ci = rec.step_ci_pct
    if reference != "none":
        ratio = Measurement(rec.x_of_reference_samples)
        assert len(ratio.samples_ms) == rec.step_repeats
        ci = max(ci, 100 * ratio.ci_rel)
    assert (ci <= 2.0) == (rec.step_stop == "target_ci")


def test_out_of_memory_becomes_a_status():
    plan = tiny_plan(num_kv_heads=[2], mode=["cache"])
    oom = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")
    result = run_study(plan, execute=raising(oom))
    (rec,) = result.records["decode"]
    assert rec.status == "oom" and rec.step_ms_median is None and rec.samples_ms == []
    # the analytic columns are still filled: one step at a context of 4 cached tokens
    step_bytes, step_flops = step_totals(AttentionShape(32, 4, 2), 1, 4, "float32", True)
    assert (rec.bytes_per_step, rec.flops_per_step) == (step_bytes, step_flops)
    assert result.section_records("decode")[0]["status"] == "oom"
    assert result.ran == 1 and not result.interrupted


@pytest.mark.parametrize(
    ("exc", "status"),
    [
        (RuntimeError("[enforce fail] DefaultCPUAllocator: can't allocate memory"), "oom"),
        (ValueError("bad thing"), "error: ValueError: bad thing"),
    ],
)
def test_cpu_allocator_failure_is_an_oom_and_other_errors_are_recorded(exc, status):
    result = run_study(tiny_plan(num_kv_heads=[2], mode=["cache"]), execute=raising(exc))
    (rec,) = result.records["decode"]
    assert rec.status == status and rec.step_ms_median is None


def is_mqa(point: DecodePoint) -> bool:
    return point.num_kv_heads == 1


def test_sweep_goes_on_after_an_oom(tmp_path):
    plan = tiny_plan()
    oom = torch.OutOfMemoryError("out of memory")
    result = run_study(plan, DirectoryStore(tmp_path), execute=raising(oom, when=is_mqa))
    assert result.ran == result.total == 4 and not result.interrupted
    rows = list(csv.DictReader((tmp_path / "decode.csv").open()))
    assert len(rows) == 4  # 2 variants x 2 modes, all recorded, no_cache first
    assert [(r["num_kv_heads"], r["mode"], timed_or(r["status"])) for r in rows] == [
        ("4", "no_cache", "timed"),
        ("4", "cache", "timed"),
        ("1", "no_cache", "oom"),
        ("1", "cache", "oom"),
    ]
    # run one by one (an injected executor), the points have no comparisons
    assert all(r.speedup_vs_no_cache is None for r in result.records["decode"])


def timed_or(status: str) -> str:
    """'timed' for the status of a point that was timed (ok or noisy), else the status."""
    return "timed" if decode.timed({"status": status}) else status


def with_executor(monkeypatch, module, execute) -> None:
    """Make the command in `module` run its study through the public runner with
    `execute` (the injection point run_study offers for tests): the commands import the
    runner's run_study as they run."""
    monkeypatch.setattr(
        "attnbench.study.runner.run_study", functools.partial(run_study, execute=execute)
    )


def test_decode_speed_exits_1_when_a_point_did_not_complete(monkeypatch, tmp_path):
    oom = torch.OutOfMemoryError("out of memory")
    with_executor(monkeypatch, attnbench.cli.decode_cmd, raising(oom, when=is_mqa))
    out = tmp_path / "d.csv"
    result = runner.invoke(app, ["decode-speed", *TINY, "--device", "cpu", "--csv", str(out)])
    assert result.exit_code == 1
    assert "2 of 4 points did not complete: oom" in result.stderr
    rows = list(csv.DictReader(out.open()))
    assert sorted(timed_or(r["status"]) for r in rows) == ["oom", "oom", "timed", "timed"]


def test_decode_points_put_the_baseline_and_no_cache_first():
    points = [
        decode_point(**{**TINY_POINT, "prompt_len": n, "mode": m, "provider": p})
        for n in (4, 8)
        for p in ("naive", "attnbench")
        for m in ("cache", "no_cache")
    ]
    order = [
        (p.prompt_len, p.provider, p.mode) for p in decode.run_order(points, decode_options({}))
    ]
    assert order == [
        (4, "attnbench", "no_cache"),
        (4, "attnbench", "cache"),
        (4, "naive", "no_cache"),
        (4, "naive", "cache"),
        (8, "attnbench", "no_cache"),
        (8, "attnbench", "cache"),
        (8, "naive", "no_cache"),
        (8, "naive", "cache"),
    ]
    naive_first = decode.run_order(points, decode_options({"baseline_provider": "naive"}))
    assert [p.provider for p in naive_first[:4]] == ["naive", "naive", "attnbench", "attnbench"]
    planned = [(t.point.num_kv_heads, t.point.mode) for t in tiny_plan().tasks]
    assert planned == [(4, "no_cache"), (4, "cache"), (1, "no_cache"), (1, "cache")]


def test_speedups_link_each_row_to_its_no_cache_and_baseline_rows():
    plan = tiny_plan(num_kv_heads=[2], provider=["naive", "attnbench"])
    records = run_study(plan).records["decode"]
    by = {(r.provider, r.mode): r for r in records}
    assert [(r.provider, r.mode) for r in records][0] == ("attnbench", "no_cache")
    for r in records:
        base = by[("attnbench", r.mode)]
        assert r.baseline_provider == "attnbench"
        assert r.speedup_vs_baseline == pytest.approx(base.step_ms_median / r.step_ms_median)
    naive = by[("naive", "cache")]
    expected = by[("naive", "no_cache")].step_ms_median / naive.step_ms_median
    assert naive.speedup_vs_no_cache == pytest.approx(expected)
    assert by[("attnbench", "cache")].speedup_vs_baseline == 1.0


# --- the command -------------------------------------------------------------------------


def test_csv_and_json_hold_the_same_records(tmp_path):
    csv_path, json_path = tmp_path / "d.csv", tmp_path / "d.json"
    result = runner.invoke(
        app,
        [
            "decode-speed",
            *TINY,
            "--device",
            "cpu",
            "--quiet",
            "--csv",
            str(csv_path),
            "--json",
            str(json_path),
        ],
    )
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(csv_path.open()))
    doc = json.loads(json_path.read_text())
    assert doc["command"] == "decode-speed"
    assert doc["environment"]["peak_gbps"] == 10.0  # the stubbed probe (conftest)
    assert doc["environment"]["num_threads"] == torch.get_num_threads()
    assert list(rows[0]) == DECODE_COLUMNS
    assert "samples_ms" not in rows[0]
    assert len(rows) == len(doc["records"]) == 4
    assert [r["mode"] for r in rows] == ["no_cache", "cache"] * 2  # the runner's order
    for row, rec in zip(rows, doc["records"], strict=True):
        assert len(rec["samples_ms"]) == len(rec["gen_samples_ms"]) == 1  # --repeats 1
        assert float(row["step_ms_median"]) == pytest.approx(rec["step_ms_median"])
        assert int(row["bytes_per_step"]) == rec["bytes_per_step"]
        assert rec["step_ms_median"] == pytest.approx(statistics.median(rec["samples_ms"]))
        assert rec["peak_gbps"] == 10.0
        assert rec["projection_path"] == row["projection_path"] != ""
        if rec["mode"] == "cache":
            assert rec["speedup_vs_no_cache"] > 0
        else:
            assert rec["speedup_vs_no_cache"] is None and row["speedup_vs_no_cache"] == ""


@pytest.mark.parametrize(
    ("columns", "flags", "hidden"),
    [("80", [], True), ("250", [], False), ("80", ["--wide"], False)],
    ids=["narrow", "wide terminal", "--wide"],
)
def test_table_fits_the_width_or_shows_every_column(columns, flags, hidden):
    result = runner.invoke(
        app, ["decode-speed", *TINY, "--device", "cpu", *flags], env={"COLUMNS": columns}
    )
    assert result.exit_code == 0, result.output
    (head,) = [line for line in result.stdout.splitlines() if "┃ Variant" in line]
    headers = [h.strip() for h in head.strip("┃").split("┃")]
    assert {"Variant", "Mode", "step ms", "speed-up", "Status"} <= set(headers)
    for header in ("p25", "p75"):
        assert (header not in headers) is hidden
    assert ("columns hidden (" in result.stdout) is hidden
    assert ("--wide, or --csv" in result.stdout) is hidden
    # settings every row shares are in the title, not columns
    title = " ".join(result.stdout.split("┏")[0].split())
    assert "peak copy bandwidth 10.0 GB/s" in title
    for setting in ("attnbench", "cpu", "float32", "batch 1", "d_model 32", "4 heads", "gen 3"):
        assert setting in title


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--device", "cuda"], "--device cuda: "),
        (["--mode", "fast"], "--mode fast: unknown value 'fast'"),
        (["--backend", "flash"], "--provider flash: unknown value 'flash'"),
        (["--provider", "sdpa-fast"], "--provider sdpa-fast: unknown value 'sdpa-fast'"),
        (["--backend", "naive", "--provider", "naive"], "--backend naive: is the old name"),
        (["--target-rel-ci", "0"], "--target-rel-ci 0: must be a number above 0"),
        (["--max-time", "-2.5"], "--max-time -2.5: must be a number above 0"),
        (["--max-time", "soon"], "--max-time soon: expected a number"),
        (["--gen-len", "-1"], "--gen-len -1: must be >= 0"),
        (["--prompt-len", "0"], "--prompt-len 0: must be >= 1"),
        (["--repeats", "x"], "--repeats x: expected an integer"),
        (["--dtype", "float64"], "--dtype float64: unknown dtype 'float64'"),
    ],
)
def test_bad_flags_exit_2_with_one_line(args, needle):
    if args == ["--device", "cuda"] and torch.cuda.is_available():
        pytest.skip("CUDA is present")
    result = runner.invoke(app, ["decode-speed", *tiny_with(args)])
    assert result.exit_code == 2
    assert "Traceback" not in result.output and result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: {needle}"), line


def test_cuda_graphs_on_the_cpu_are_unsupported_rows():
    point = decode_point(**{**TINY_POINT, "cuda_graph": True})
    rec = decode.run(with_options(point, {"warmup": 0, "repeats": 1}, CPU), Context(CPU))
    assert rec.status == "unsupported: CUDA graphs need a CUDA device"
    assert rec.step_ms_median is None and rec.samples_ms == []


@pytest.mark.cuda
@pytest.mark.parametrize("graph", [False, True])
def test_cuda_graph_and_eager_steps_side_by_side(graph):
    point = decode_point(
        **{
            **TINY_POINT,
            "num_kv_heads": 2,
            "dtype": "bfloat16",
            "prompt_len": 64,
            "gen_len": 4,
            "cuda_graph": graph,
        }
    )
    rec = decode.run(
        with_options(point, {"warmup": 1, "repeats": 5}, torch.device("cuda")),
        Context(torch.device("cuda")),
    )
    assert decode.timed(rec) and len(rec.samples_ms) == 5 and rec.cuda_graph is graph


def test_no_cache_longest_context_below_every_context_is_refused():
    flags = ["--d-model", "64", "--heads", "4", "--prompt-len", "64,128", "--mode", "no_cache"]
    result = runner.invoke(app, ["decode-speed", *flags, "--no-cache-max-prompt-len", "32"])
    assert result.exit_code == 2
    reason = "is below every context (64, 128): no point would run"
    assert result.output.strip() == f"error: --no-cache-max-prompt-len 32: {reason}"


def _record(**fields) -> decode.DecodeRecord:
    shape = dict(variant="MQA", provider="attnbench", device="cpu", dtype="float32", batch=1)
    shape |= dict(d_model=64, num_heads=4, num_kv_heads=1, head_dim=16, prompt_len=8)
    return decode.DecodeRecord(**shape, gen_len=1, mode="cache", **fields)


def test_a_step_read_faster_than_its_own_kernels_is_noisy():
    stalled = _record(status="ok", reference="kernels", x_of_reference_median=0.027)
    decode.below_kernels(stalled)
    assert stalled.noisy and stalled.status.startswith("noisy: the step read 0.027x its own")
    steady = _record(status="ok", reference="kernels", x_of_reference_median=1.07)
    other = _record(status="ok", reference="sdpa", x_of_reference_median=0.5)  # a provider
    for record in (steady, other):
        decode.below_kernels(record)
        assert record.status == "ok" and not record.noisy
    busy = _record(status=decode.BUSY, reference="kernels", x_of_reference_median=0.5)
    decode.below_kernels(busy)
    assert busy.status == decode.BUSY and busy.noisy  # the first reason stands


def test_a_models_rows_say_they_time_one_layer_of_it(tmp_path):
    """A row of a named model reads like the model's own speed: a note says it is one
    attention layer of it. Rows of a bare shape need no such note."""
    config = tmp_path / "tiny-llama.json"
    dims = {"hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2}
    config.write_text(
        json.dumps({"model_type": "llama", **dims, "num_hidden_layers": 2, "intermediate_size": 64})
    )
    quick = ["--prompt-len", "8", "--mode", "cache", "--no-prefill", "--repeats", "2"]
    quick += ["--warmup", "0", "--reference", "none", "--device", "cpu"]
    result = runner.invoke(app, ["decode-speed", "--hf-config", str(config), *quick])
    assert result.exit_code == 0, result.output
    assert "one attention layer of tiny-llama" in " ".join(result.stdout.split())
    bare = runner.invoke(app, ["decode-speed", *tiny_with(quick)])
    assert bare.exit_code == 0 and "attention layer of" not in bare.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--repeats", "3", "--max-time", "0.2"], "--max-time 0.2: has no effect beside --repeats"),
        (["--repeats", "3", "--min-repeats", "9"], "--min-repeats 9: has no effect beside"),
        (["--repeats", "3", "--target-rel-ci", "0.1"], "--target-rel-ci 0.1: has no effect"),
        (
            ["--mode", "cache", "--no-cache-max-prompt-len", "8"],
            "--no-cache-max-prompt-len 8: has no effect: no point runs without the cache",
        ),
        (
            ["--provider", "attnbench", "--reference", "attnbench"],
            "--reference attnbench: is the provider timed",
        ),
    ],
)
def test_options_nothing_would_read_are_refused(args, message):
    result = runner.invoke(app, ["decode-speed", *tiny_with(args)])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {message}"), result.stderr


@pytest.mark.parametrize("flag", ["--cuda-graph", "--flush-l2"])
def test_a_cuda_switch_from_a_flag_on_the_cpu_is_refused(flag, tmp_path):
    """From the command line it would change nothing but a row's status; a sweep file's
    may serve a run on a GPU, and is kept (its points say 'unsupported')."""
    result = runner.invoke(app, ["decode-speed", *tiny_with(["--device", "cpu"]), flag])
    assert result.exit_code == 2
    assert result.stderr == f"error: {flag}: has no effect on cpu: it needs a CUDA device\n"
    study = tmp_path / "s.yaml"
    key = flag[2:].replace("-", "_")
    study.write_text(f"defaults: {{d_model: 32, num_heads: 4}}\ndecode: {{{key}: true}}\n")
    assert runner.invoke(app, ["run", str(study), "--dry-run", "--device", "cpu"]).exit_code == 0
