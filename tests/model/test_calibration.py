"""Calibrating the roofline on samples: recovering known parameters, checking a model,
reading samples from results and models from calibration files."""

from __future__ import annotations

import json

import numpy as np
import pytest

from attnbench.errors import FieldError, UsageError
from attnbench.experiments.calibrate import samples_from_results
from attnbench.model.calibration import (
    PREFILL,
    STEP,
    Sample,
    calibrate,
    check,
    load_calibration,
    median_abs_error,
    model_dict,
)
from attnbench.model.capacity import kv_cache_bytes
from attnbench.model.formulas import step_traffic_bytes, weight_bytes
from attnbench.model.roofline import DEFAULT_MODEL, MAX_EFFICIENCY, PerfModel, predict
from attnbench.model.shapes import AttentionShape

BANDWIDTH = 1e12
PEAKS = {"bfloat16": 1e14, "float32": 2.5e13}
TRUE = PerfModel(0.7, 0.55, 8e-6, "the truth")


def synthetic(model: PerfModel, noise: float = 0.0, memory_only: bool = False) -> list[Sample]:
    """Samples timed by `model`: memory-bound steps (1 to 10 FLOPs a byte) and
    compute-bound prefills (500 to 5000), from 1 MB to 1 GB, times off by `noise`."""
    rng = np.random.default_rng(0)
    samples = []
    for i, size in enumerate(np.logspace(6, 9, 12)):
        dtype = ("bfloat16", "float32")[i % 2]
        kinds = [(STEP, 1 + i % 10)] + ([] if memory_only else [(PREFILL, 500 * (1 + i))])
        for kind, intensity in kinds:
            b, f = int(size), int(size * intensity)
            t = predict(b, f, BANDWIDTH, PEAKS[dtype], model).time_s
            samples.append(Sample(b, f, t * float(np.exp(rng.normal(0, noise))), dtype, kind))
    return samples


def test_calibration_recovers_the_model_from_noisy_samples():
    fit = calibrate(synthetic(TRUE, noise=0.02), BANDWIDTH, PEAKS)
    assert fit.efficiency_bw == pytest.approx(TRUE.efficiency_bw, rel=0.03)
    assert fit.efficiency_flops == pytest.approx(TRUE.efficiency_flops, rel=0.03)
    assert fit.overhead_s == pytest.approx(TRUE.overhead_s, rel=0.15)
    assert fit.source == "calibrated on 12 steps and 12 prefills of the samples"


def test_check_of_exact_samples_has_no_error():
    samples = synthetic(TRUE)
    assert median_abs_error(check(samples, BANDWIDTH, PEAKS, TRUE)) == 0.0
    fit = calibrate(samples, BANDWIDTH, PEAKS, source="exact samples")
    rows = check(samples, BANDWIDTH, PEAKS, fit)
    assert median_abs_error(rows) < 1e-9
    assert {r.bound for r in rows} == {"memory", "compute"}
    assert rows[0].measured_s == samples[0].time_s


def test_the_attention_core_is_fitted_and_checked_at_the_attention_rate():
    """Samples whose attention core ran at half the matmul rate (an attention kernel's, as
    a named GPU's figures give it): told that rate, the fit recovers the truth and the
    check has no error; at the matmul rate the core's time would be halved."""
    attention = {"bfloat16": 5e13, "float32": 1.25e13}
    samples = []
    for i, size in enumerate(np.logspace(6, 9, 12)):
        dtype = ("bfloat16", "float32")[i % 2]
        for kind, intensity in ((STEP, 1 + i % 10), (PREFILL, 500 * (1 + i))):
            b, f = int(size), int(size * intensity)
            core = f // 4
            t = predict(
                b, f, BANDWIDTH, PEAKS[dtype], TRUE, 1, 0, core, None, core, attention[dtype]
            ).time_s
            samples.append(Sample(b, f, t, dtype, kind, attention_flops=core))
    assert median_abs_error(check(samples, BANDWIDTH, PEAKS, TRUE, attention)) < 1e-12
    assert median_abs_error(check(samples, BANDWIDTH, PEAKS, TRUE)) > 0.01
    fit = calibrate(samples, BANDWIDTH, PEAKS, attention_flops_by_dtype=attention)
    assert fit.efficiency_flops == pytest.approx(TRUE.efficiency_flops, rel=1e-6)
    assert fit.efficiency_bw == pytest.approx(TRUE.efficiency_bw, rel=1e-6)


def test_check_reports_the_relative_error():
    (row,) = check([Sample(10**9, 0, 2e-3, "bfloat16", STEP)], BANDWIDTH, PEAKS, TRUE)
    assert row.predicted_s == pytest.approx(1 / 0.7 * 1e-3 + 8e-6)
    assert row.rel_error == pytest.approx(row.predicted_s / 2e-3 - 1)


def test_memory_bound_steps_alone_tell_both_shares_apart():
    """Bytes and FLOPs add: steps of 1 to 10 FLOPs a byte carry both terms."""
    fit = calibrate(synthetic(TRUE, memory_only=True), BANDWIDTH, PEAKS)
    assert fit.efficiency_bw == pytest.approx(0.7)
    assert fit.efficiency_flops == pytest.approx(0.55)


def test_flops_that_follow_the_bytes_leave_the_flops_efficiency_at_its_default():
    samples = [Sample(b, 3 * b, b / 0.5e12 + 1e-6, "bfloat16", STEP) for b in (10**6, 10**8)]
    samples += [Sample(b, 3 * b, b / 0.5e12 + 1e-6, "float32", STEP) for b in (10**7, 10**9)]
    fit = calibrate(samples, BANDWIDTH, {"bfloat16": 1e14, "float32": 1e14})
    assert fit.efficiency_flops == DEFAULT_MODEL.efficiency_flops
    assert "efficiency_flops left at its default: the FLOPs follow the bytes" in fit.source


def test_an_overhead_below_zero_is_fitted_at_zero():
    samples = [
        Sample(b, b * i, b / 0.5e12 * (0.9 if b < 10**7 else 1.0), "bfloat16", STEP)
        for i, b in enumerate((10**6, 10**7 + 1, 10**8, 10**9), 1)
    ]
    fit = calibrate(samples, BANDWIDTH, PEAKS)
    assert fit.overhead_s == 0.0


def kv_samples(model: PerfModel) -> list[Sample]:
    """Memory-bound steps whose KV-cache share of the bytes varies from none to most."""
    samples = []
    for weights in (10**7, 10**8, 10**9):
        for i, kv in enumerate((0, weights // 4, weights, 4 * weights), 1):
            b, f = weights + kv, weights * i * i
            t = predict(b, f, BANDWIDTH, PEAKS["bfloat16"], model, kv_bytes=kv).time_s
            samples.append(Sample(b, f, t, "bfloat16", STEP, kv))
    return samples


def test_calibration_tells_the_cache_s_bandwidth_from_the_weights():
    truth = PerfModel(0.9, 0.6, 5e-6, "the truth", efficiency_kv=0.3)
    fit = calibrate(kv_samples(truth), BANDWIDTH, PEAKS)
    assert fit.efficiency_bw == pytest.approx(0.9)
    assert fit.efficiency_kv == pytest.approx(0.3)
    assert fit.overhead_s == pytest.approx(5e-6)
    assert median_abs_error(check(kv_samples(truth), BANDWIDTH, PEAKS, fit)) < 1e-9


def test_samples_without_a_cache_leave_its_efficiency_unset():
    fit = calibrate(synthetic(TRUE), BANDWIDTH, PEAKS)
    assert fit.efficiency_kv is None
    assert fit.kv_efficiency == fit.efficiency_bw


def test_too_few_samples_are_refused():
    samples = synthetic(TRUE)[:2]
    with pytest.raises(UsageError, match="at least 4"):
        calibrate(samples, BANDWIDTH, PEAKS)
    with pytest.raises(UsageError, match="got 0"):
        calibrate(synthetic(TRUE), BANDWIDTH, PEAKS, min_time_s=10.0)


def test_a_degenerate_fit_is_refused():
    same = [Sample(10**9, 10**9, 2e-3, "bfloat16", STEP)] * 5
    with pytest.raises(UsageError, match="degenerate"):
        calibrate(same, BANDWIDTH, PEAKS)


def test_samples_faster_than_the_peaks_allow_are_fitted_at_the_limit_and_said():
    fit = calibrate(synthetic(TRUE), BANDWIDTH / 10, PEAKS)  # 7x faster than the peak
    assert fit.efficiency_bw == MAX_EFFICIENCY
    assert "efficiency_bw held at the limit 1.5: the samples ran faster" in fit.source


def test_steps_at_the_ridge_are_fitted_exactly():
    """At the ridge the bytes' time and the FLOPs' are alike; the model adds them."""
    truth = PerfModel(0.8, 0.5, 2e-6, "the truth")
    samples = [
        Sample(b, int(b * r), predict(b, int(b * r), 1e12, 1e14, truth).time_s, "bfloat16", STEP)
        for b in (10**7, 10**8, 10**9)
        for r in (80.0, 100.0, 120.0)
    ]
    fit = calibrate(samples, BANDWIDTH, PEAKS)
    assert (fit.efficiency_bw, fit.efficiency_flops) == pytest.approx((0.8, 0.5))
    assert median_abs_error(check(samples, BANDWIDTH, PEAKS, fit)) < 1e-9


def test_a_dtype_without_a_peak_is_named():
    with pytest.raises(FieldError, match="float32"):
        calibrate(synthetic(TRUE), BANDWIDTH, {"bfloat16": 1e14})


def _record(**fields):
    base = {
        "provider": "attnbench",
        "dtype": "float32",
        "batch": 2,
        "d_model": 64,
        "num_heads": 4,
        "num_kv_heads": 2,
        "head_dim": 16,
        "prompt_len": 128,
        "mode": "cache",
        "tp": 1,
        "status": "ok",
        "step_ms_median": 0.5,
        "bytes_per_step": 40_000,
        "flops_per_step": 90_000,
        "prefill_ms_median": None,
        "prefill_flops": None,
    }
    return {**base, **fields}


def test_samples_from_results_take_the_timed_cached_steps_and_prefills():
    records = [
        _record(prefill_ms_median=2.0, prefill_flops=5_000_000),
        _record(mode="no_cache"),
        _record(status="oom", step_ms_median=None),
        _record(tp=2),
        _record(provider="other", step_ms_median=0.25),
    ]
    doc = {"sections": {"decode": {"records": records}}, "environment": {}}
    samples = samples_from_results(doc)
    assert [(s.kind, s.time_s) for s in samples] == [
        (STEP, 0.5e-3),
        (PREFILL, 2e-3),
        (STEP, 0.25e-3),
    ]
    kv = samples[0].kv_bytes
    label = "step d64 h4/2 b2 s128"
    core = 4 * 2 * 4 * 16 * 129  # QK^T and PV of 4 heads of 16 over 129 keys, batch 2
    assert samples[0] == Sample(40_000, 90_000, 0.5e-3, "float32", STEP, kv, label, core)
    assert samples[2].label == "step d64 h4/2 b2 s128 other"
    shape = AttentionShape(64, 4, 2, 16)
    expected = weight_bytes(shape, "float32") + step_traffic_bytes(shape, 2, 128, 128, "float32")
    assert (samples[1].bytes, samples[1].flops) == (expected, 5_000_000)
    # the prompt's K/V written, then read back by the attention
    assert samples[1].kv_bytes == 2 * kv_cache_bytes(1, 2, 128, 2, 16, "float32")
    assert len(samples_from_results(doc, provider="other")) == 1
    assert samples_from_results({}) == []
    speed = {"command": "decode-speed", "records": records, "environment": {}}
    assert samples_from_results(speed) == samples


def test_a_calibration_file_round_trips(tmp_path):
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(model_dict(TRUE)))
    assert load_calibration(path).model == TRUE
    assert load_calibration(str(path)).model == TRUE


def test_a_file_without_source_says_where_it_came_from():
    doc = {k: v for k, v in model_dict(TRUE).items() if k != "source"}
    assert load_calibration(doc).model.source == "loaded from calibration"


def test_a_source_with_a_line_break_or_an_escape_is_shown_quoted():
    """The source is shown in predict's notes: the file cannot write a line of its own
    (a fake 'error:') or colour the terminal."""
    source = "x\x1b[31mred\nerror: a line the file wrote"
    shown = load_calibration({**model_dict(TRUE), "source": source}).model.source
    assert shown == repr(source) and shown.isprintable()
    assert load_calibration(model_dict(TRUE)).model.source == TRUE.source


@pytest.mark.parametrize(
    ("field", "value", "shown"),
    [
        ("efficiency_bw", -0.5, "-0.5"),
        ("efficiency_kv", -0.2, "-0.2"),
        ("efficiency_flops", "fast", "'fast'"),
        ("overhead_s", -1, "-1"),
        ("source", 3, "3"),
        ("efficiency_bw", None, "null"),
        ("source", True, "true"),
    ],
)
def test_a_bad_field_of_a_calibration_file_is_named(field, value, shown):
    """Named with its value as the file spells it: text quoted, null and true as JSON's."""
    with pytest.raises(FieldError) as err:
        load_calibration({**model_dict(TRUE), field: value})
    assert err.value.field == field
    assert str(err.value).startswith(f"calibration: {field} {shown}: ")
    assert "\n" not in str(err.value)


def test_a_missing_or_unknown_field_is_refused(tmp_path):
    doc = model_dict(TRUE)
    with pytest.raises(UsageError, match="missing field 'overhead_s'"):
        load_calibration({k: v for k, v in doc.items() if k != "overhead_s"})
    with pytest.raises(UsageError, match="did you mean 'efficiency_bw'"):
        load_calibration({**doc, "efficiency_bws": 0.5})
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(FieldError, match=r"^calibration: .*bad.json: not valid JSON \(expecting"):
        load_calibration(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(UsageError, match="a JSON object"):
        load_calibration(bad)


def test_calibration_finds_the_parts_of_steps_whose_attention_is_compute_bound():
    """Steps whose attention core is memory-bound (MHA-like) beside ones whose core is
    compute-bound (MQA-like): the two parts add, and the fit finds every share."""
    truth = PerfModel(0.9, 0.6, 5e-6, "the truth", efficiency_kv=0.3)
    samples = []
    for weights in (10**7, 10**8, 10**9):
        for kv, core in ((weights, weights // 2), (weights // 64, 50 * weights), (0, 0)):
            b, f = weights + kv, weights + core
            t = predict(b, f, BANDWIDTH, PEAKS["bfloat16"], truth, 1, kv, core).time_s
            samples.append(Sample(b, f, t, "bfloat16", STEP, kv, "", core))
    fit = calibrate(samples, BANDWIDTH, PEAKS)
    assert fit.efficiency_bw == pytest.approx(0.9)
    assert fit.efficiency_kv == pytest.approx(0.3)
    assert fit.efficiency_flops == pytest.approx(0.6)
    assert fit.overhead_s == pytest.approx(5e-6)


def test_a_results_file_given_as_a_calibration_says_so(tmp_path):
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"schema_version": 1, "command": "predict", "records": []}))
    with pytest.raises(UsageError, match="a results file, not a calibration file"):
        load_calibration(results)
