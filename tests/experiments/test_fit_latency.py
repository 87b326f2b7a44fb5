"""`fit` under latency targets: the memory's answer is today's, a loose target leaves it,
a tight one lowers it to the last batch whose predicted step meets it (the roofline's
prediction, called here directly), one row per tensor-parallel degree, and the refusals."""

from __future__ import annotations

import dataclasses
import json
from fractions import Fraction

import pytest

from attnbench.errors import FieldError
from attnbench.experiments.fit import (
    LATENCY_BOUND,
    MEMORY_BOUND,
    OK,
    TOO_SLOW,
    FitPoint,
    FitRecord,
    check,
    latency_batch,
    plan_for,
    run,
)
from attnbench.model.devices import DEVICES
from attnbench.model.presets import PRESETS
from attnbench.model.roofline import DEFAULT_MODEL, decode_counts, predict_counts, prefill_counts
from attnbench.records import Kind, csv_fields, field_kinds

SEQ_LEN = 8192
H100 = DEVICES["h100-sxm"]


def point(model: str = "llama-3-70b", **given) -> FitPoint:
    values = {"reserve": "10%", "scale_dtype": "float16", "gpus": 8, "seq_len": SEQ_LEN}
    return FitPoint(model=model, spec=PRESETS[model], **{**values, **given})


def tpot_s(model: str, per_replica: int, tp: int, device=H100, perf=DEFAULT_MODEL) -> float:
    """The roofline's time per output token, called as the brief says fit calls it: the
    weights' dtype for the step, the cache's for the KV cache, one rank of tp."""
    spec = PRESETS[model]
    counts = decode_counts(spec, per_replica, SEQ_LEN, spec.dtype, spec.dtype, tp)
    return predict_counts(counts, device, spec.dtype, tp, perf).time_s


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_the_memory_column_is_todays_fit_at_the_gpus_memory(tp):
    today = run(point(memory="80GB", tp=tp))
    within = run(point(gpu="h100-sxm", tp=tp, tpot="10s"))
    assert within.memory_batch == today.batch > 0 and today.memory_batch == today.batch
    assert within.memory_bytes_per_gpu == H100.memory_bytes == 80 * 10**9
    assert today.bound is None and today.tpot_ms is None and today.gpu is None


def test_a_loose_target_leaves_memory_binding():
    rec = run(point(gpu="h100-sxm", tp=8, tpot="10s"))
    assert (rec.status, rec.bound) == (OK, MEMORY_BOUND)
    assert rec.batch == rec.memory_batch == 162  # today's answer at 80GB, tp 8
    predicted = tpot_s("llama-3-70b", rec.batch_per_replica, 8)
    assert rec.tpot_ms == pytest.approx(predicted * 1e3, rel=1e-12)
    assert rec.tokens_per_s_per_gpu == pytest.approx(rec.batch_per_replica / predicted / 8)
    assert rec.tpot_target_ms == 10_000.0 and rec.ttft_target_ms is None and rec.ttft_ms is None
    assert rec.gpu == "h100-sxm" and rec.perf_model == DEFAULT_MODEL.describe()


@pytest.mark.parametrize("gpus, tp", [(8, 8), (8, 4), (4, 4)])
def test_a_tight_target_binds_at_the_last_batch_that_meets_it(gpus, tp):
    memory = run(point(gpu="h100-sxm", gpus=gpus, tp=tp, tpot="10s")).batch_per_replica
    fastest, slowest = tpot_s("llama-3-70b", 1, tp), tpot_s("llama-3-70b", memory, tp)
    target_ms = Fraction(round((fastest + slowest) / 2 * 1e6), 1000)  # a whole microsecond
    rec = run(point(gpu="h100-sxm", gpus=gpus, tp=tp, tpot=f"{float(target_ms)}ms"))
    assert (rec.status, rec.bound) == (OK, LATENCY_BOUND)
    b = rec.batch_per_replica
    assert 0 < b < memory and rec.batch == b * (gpus // tp) < rec.memory_batch
    assert tpot_s("llama-3-70b", b, tp) <= target_ms / 1000 < tpot_s("llama-3-70b", b + 1, tp)
    assert rec.tpot_ms <= float(target_ms)
    # the memory table of the answer holds its batch, not the memory's
    assert rec.kv_bytes_per_gpu == b * rec.kv_bytes_per_sequence_per_gpu
    assert rec.free_bytes_per_gpu > run(point(gpu="h100-sxm", gpus=gpus, tp=tp)).free_bytes_per_gpu


def test_no_batch_meets_a_target_below_one_sequences_step():
    rec = run(point(gpu="h100-sxm", tp=8, tpot="1ms"))
    assert rec.batch == rec.batch_per_replica == 0 and rec.bound == LATENCY_BOUND
    assert rec.status.startswith(f"{TOO_SLOW}: no batch meets tpot 1ms: one sequence takes ")
    assert rec.tpot_ms == pytest.approx(tpot_s("llama-3-70b", 1, 8) * 1e3)
    assert rec.tokens_per_s_per_gpu is None and rec.memory_batch == 162


def test_ttft_is_the_prefill_of_one_sequence_and_does_not_depend_on_the_batch():
    spec = PRESETS["llama-3-70b"]
    counts = prefill_counts(spec, 1, SEQ_LEN, spec.dtype, spec.dtype, 8)
    prefill = predict_counts(counts, H100, spec.dtype, 8).time_s
    met = run(point(gpu="h100-sxm", tp=8, ttft="10s"))  # ttft alone: allowed
    assert (met.status, met.bound, met.batch) == (OK, MEMORY_BOUND, met.memory_batch)
    assert met.ttft_ms == pytest.approx(prefill * 1e3) and met.tpot_target_ms is None
    missed = run(point(gpu="h100-sxm", tp=8, tpot="10s", ttft="1ms"))
    assert (missed.batch, missed.bound) == (0, LATENCY_BOUND)
    assert missed.status.startswith(f"{TOO_SLOW}: no batch meets ttft 1ms: the prefill")


def test_memory_that_leaves_no_batch_is_said_under_targets_too():
    rec = run(point(gpu="h100-sxm", tp=1, tpot="50ms"))
    assert rec.status.startswith("weights alone do not fit") and rec.batch == 0
    assert (rec.memory_batch, rec.bound, rec.tpot_ms) == (0, MEMORY_BOUND, None)
    assert rec.tpot_target_ms == 50.0


def test_a_calibration_file_sets_the_model_and_is_stated(tmp_path):
    slow = {"efficiency_bw": 0.4, "efficiency_flops": 0.3, "overhead_s": 2e-5, "source": "lab"}
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(slow))
    rec = run(point(gpu="h100-sxm", tp=8, tpot="10s", calibration=str(path)))
    perf = dataclasses.replace(DEFAULT_MODEL, **slow)
    assert rec.perf_model == perf.describe() and "(lab)" in rec.perf_model
    assert rec.tpot_ms == pytest.approx(
        tpot_s("llama-3-70b", rec.batch_per_replica, 8, perf=perf) * 1e3
    )
    path.write_text(json.dumps({**slow, "efficiency_bw": 3}))
    with pytest.raises(FieldError, match="efficiency_bw 3: must be a number") as error:
        check(point(gpu="h100-sxm", tp=8, tpot="10s", calibration=str(path)))
    assert error.value.field == "calibration"
    path.write_text(json.dumps({**slow, "gpu": "a100-80gb"}))  # fitted on another GPU
    with pytest.raises(FieldError, match="fitted against a100-80gb's peaks, not h100-sxm's"):
        check(point(gpu="h100-sxm", tp=8, tpot="10s", calibration=str(path)))


def test_the_binary_search_finds_the_last_batch_that_meets_the_target():
    """A step of b sequences taking b units of 1/1024 s (exact in floats): the answer is
    the target's whole units, at most the memory's batch; a step is seen at most log2 of
    the memory's batch times, plus one."""
    seen = []

    def step(batch):
        seen.append(batch)
        return type("Prediction", (), {"time_s": batch / 1024})()

    assert latency_batch(1000, Fraction(105, 10 * 1024), step) == (10, LATENCY_BOUND)
    assert len(seen) <= 11
    assert latency_batch(1000, Fraction(10, 1024), step) == (10, LATENCY_BOUND)  # == meets
    assert latency_batch(5, Fraction(105, 10 * 1024), step) == (5, MEMORY_BOUND)
    assert latency_batch(5, Fraction(5, 10 * 1024), step) == (0, LATENCY_BOUND)
    assert latency_batch(5, None, step) == (5, MEMORY_BOUND)


@pytest.mark.parametrize(
    "given, field, reason",
    [
        ({"gpu": "this", "memory": "80GB"}, "gpu", "fit needs a named GPU"),
        ({"memory": "80GB", "tpot": "50ms"}, "tpot", "needs gpu"),
        ({"memory": "80GB", "ttft": "2s"}, "ttft", "needs gpu"),
        ({"gpu": "h100-sxm", "tpot": "50"}, "tpot", "expected a time with its unit"),
        ({"gpu": "h100-sxm", "ttft": "-2s"}, "ttft", "must be a time above 0"),
        (
            {"gpu": "h100-sxm", "tpot": "50ms", "seq_len": None, "batch": 8},
            "tpot",
            "latency targets answer the largest batch at seq_len; give seq_len, not batch",
        ),
        (
            {"gpu": "a100-80gb", "tpot": "50ms", "weights_dtype": "float8_e4m3fn"},
            "weights_dtype",
            "a100-80gb has no float8 peak",
        ),
    ],
)
def test_questions_that_cannot_be_asked(given, field, reason):
    with pytest.raises(FieldError, match=reason) as error:
        check(point(**{"tp": 8, **given}))
    assert error.value.field == field


def test_mla_models_are_timed_by_their_latent_cache():
    given = point("deepseek-v3", gpu="h200", tp=8, tpot="50ms", weights_dtype="float8_e4m3fn")
    check(given)
    plan = plan_for(given)
    assert plan.memory_bytes == 141 * 10**9 and plan.dtype == "bfloat16"
    record = run(given)
    assert 0 < record.tpot_ms <= 50 and record.batch > 0


def test_the_new_fields_come_after_the_old_ones_with_their_kinds():
    names = csv_fields(FitRecord)
    new = [
        "gpu",
        "tpot_target_ms",
        "ttft_target_ms",
        "memory_batch",
        "tpot_ms",
        "ttft_ms",
        "tokens_per_s_per_gpu",
        "bound",
        "perf_model",
    ]
    assert names[-len(new) :] == new and names[-len(new) - 1] == "status"
    kinds = field_kinds(FitRecord)
    assert [kinds[n] for n in new[:3]] == [Kind.KEY] * 3 and kinds["memory_batch"] is Kind.EXACT
    assert {kinds[n] for n in new[4:]} == {Kind.INFO}
