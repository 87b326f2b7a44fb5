"""The inputs of a calibration and of its check, validated whole: a results file's timed
decode records (what a sample needs present, in range and consistent, or one line naming
the file, the record and the field), its environment's peaks, and a calibration file,
read through the one loader of user files (no pipe, device, directory or huge file)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from attnbench.errors import FieldError, UsageError
from attnbench.experiments.calibrate import (
    MAX_COUNT,
    calibrate_run,
    check_run,
    samples_from_results,
)
from attnbench.model.calibration import (
    MAX_CALIBRATION_BYTES,
    MAX_OVERHEAD_S,
    MIN_TIME_S,
    STEP,
    Sample,
    calibrate,
    load_calibration,
    model_dict,
)
from attnbench.model.devices import device_spec
from attnbench.model.roofline import DEFAULT_MODEL
from tests.model.test_files import in_thread, memory_guard, sparse_file

ENVIRONMENT = {"device": "cpu", "peak_gbps": 10.0, "peak_tflops": {"float32": 0.1}}


def record(**fields):
    """A timed cached step of a uniform batch, its counts consistent with its shape."""
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
        "kv_bytes_per_gpu": 16_384,
    }
    return {**base, **fields}


def run_doc(*records) -> dict:
    return {"command": "decode-speed", "records": list(records), "environment": ENVIRONMENT}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"head_dim": None}, "run.json: decode record 1: head_dim: missing"),
        ({"num_kv_heads": 3}, "run.json: decode record 1: num_kv_heads 3 does not divide"),
        ({"batch": 0}, "decode record 1: batch: 0 is not an integer from 1"),
        ({"d_model": 2**64}, "d_model: 18446744073709551616 is not an integer from 1 to"),
        ({"bytes_per_step": None}, "bytes_per_step: missing (a timed step needs its bytes"),
        ({"bytes_per_step": 10**30}, f"bytes_per_step: {10**30} is not an integer from 1 to"),
        ({"flops_per_step": 1000}, "flops_per_step: 1,000 is less than its part, the atten"),
        ({"kv_bytes_per_gpu": 50_000}, "bytes_per_step: 40,000 is less than its part, kv_by"),
        ({"prefill_ms_median": 1.0}, "decode record 1: prefill_flops: missing"),
        ({"prefill_ms_median": 1.0, "prefill_flops": 5}, "prefill_flops: 5 is less than its"),
        ({"dtype": 3}, "decode record 1: dtype: 3 is not a dtype's name"),
    ],
)
def test_a_timed_record_is_checked_whole_and_named(fields, message):
    doc = run_doc(record(), record(**fields))
    with pytest.raises(UsageError) as error:
        samples_from_results(doc, name="run.json")
    assert message in str(error.value)
    assert str(error.value).startswith("run.json: decode record 1: ")
    assert "\n" not in str(error.value)


def test_records_that_are_no_samples_are_not_checked():
    """A record without a step time, without the cache or under tensor parallelism is no
    sample: what it lacks is not refused."""
    others = [
        record(step_ms_median=None, head_dim=None),
        record(mode="no_cache", num_kv_heads=3),
        record(tp=2, bytes_per_step=None),
    ]
    assert len(samples_from_results(run_doc(record(), *others))) == 1


def test_a_step_of_zero_is_no_sample_and_never_divides():
    """The floor MIN_TIME_S applies whatever floor is asked for (0 by default)."""
    doc = run_doc(record(step_ms_median=0.0), record(step_ms_median=0.0, prompt_len=64))
    with pytest.raises(UsageError, match=r"run.json: no timed decode samples to check against"):
        check_run(doc, None, None, 0.0, "run.json")
    with pytest.raises(UsageError, match=r"run.json: no timed decode samples of 2 ms or more"):
        check_run(doc, None, None, 0.002, "run.json")
    samples = [Sample(10**9, 10**9, t, "float32", STEP) for t in (0.0, 1e-300, 1e-9)]
    with pytest.raises(UsageError, match="needs at least 4 timed samples, got 0"):
        calibrate(samples, 1e12, {"float32": 1e14}, 0.0)
    with pytest.raises(UsageError, match="timed samples of 1 s or more, got 0"):
        calibrate(samples, 1e12, {"float32": 1e14}, 1.0)
    report = check_run(run_doc(record(), record(step_ms_median=0.0, prompt_len=64)), None, None)
    assert len(report.rows) == 1 and report.median_abs_error >= 0
    assert MIN_TIME_S == 1e-6


def test_paged_steps_are_checked_apart_and_fit_nothing():
    paged = record(block_size=16, step_ms_median=0.9)
    samples = samples_from_results(run_doc(record(), paged))
    assert [s.label for s in samples] == ["step d64 h4/2 b2 s128", "step d64 h4/2 b2 s128 block 16"]
    assert [s.paged for s in samples] == [False, True]
    steps = [Sample(b, b, b / 1e12 + 1e-6, "float32", STEP) for b in (10**7, 10**8, 10**9)]
    with pytest.raises(UsageError, match="at least 4 timed samples"):
        calibrate([*steps, Sample(10**6, 10**6, 1e-3, "float32", STEP, paged=True)], 1e12, {})


def test_a_batch_spec_is_labelled_by_its_spec():
    spec = record(batch_spec="2q1s129", batch=2, prompt_len=128)
    (sample,) = samples_from_results(run_doc(spec))
    assert sample.label == "step d64 h4/2 2q1s129" and sample.attention_flops == 0


@pytest.mark.parametrize(
    ("environment", "message"),
    [
        ({}, "run.json: no peaks measured in its environment (peak_gbps, peak_tflops)"),
        ({**ENVIRONMENT, "peak_gbps": "fast"}, "environment.peak_gbps: 'fast' is not a"),
        ({**ENVIRONMENT, "peak_tflops": {"float32": 1e308}}, "environment.peak_tflops: "),
        ({**ENVIRONMENT, "peak_gbps_probes": [1, -1]}, "environment.peak_gbps_probes: "),
    ],
)
def test_the_peaks_a_run_measured_are_checked(environment, message):
    doc = {**run_doc(record()), "environment": environment}
    with pytest.raises(UsageError) as error:
        check_run(doc, None, None, name="run.json")
    assert message in str(error.value) and "--gpu" not in str(error.value)


def test_a_check_on_another_gpu_than_its_calibration_is_refused():
    h100 = load_calibration({**model_dict(DEFAULT_MODEL), "gpu": "h100-sxm"})
    with pytest.raises(FieldError, match="fitted against h100-sxm's peaks, not a100-80gb's"):
        check_run(run_doc(record()), h100, device_spec("a100-80gb"))
    assert check_run(run_doc(record()), h100, device_spec("h100-sxm")).device.name == "h100-sxm"


def test_a_fit_no_calibration_file_may_hold_is_refused():
    """Steps of five seconds each: an overhead above MAX_OVERHEAD_S, refused with its reason
    before anything is written."""
    steps = [
        record(batch=b, prompt_len=s, bytes_per_step=40_000 * b + 100 * s, kv_bytes_per_gpu=None)
        for b in (1, 2)
        for s in (64, 128)
    ]
    timed = [
        {**r, "flops_per_step": 10**6 * r["batch"] ** 2 + r["prompt_len"], "step_ms_median": 5e3}
        for r in steps
    ]
    doc = run_doc(*timed)
    with pytest.raises(UsageError, match="run.json: the fit is refused: overhead_s .*at most 1 s"):
        calibrate_run(doc, None, "run.json")


@pytest.mark.parametrize("overhead", [1e308, MAX_OVERHEAD_S * 2])
def test_an_overhead_beyond_a_second_per_layer_is_refused(overhead):
    with pytest.raises(FieldError, match="overhead_s .*must be at most 1 s per layer"):
        load_calibration({**model_dict(DEFAULT_MODEL), "overhead_s": overhead})


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"gpu": 7}, "gpu"),
        ({"gpu": "this", "peak_gbps": 1e300, "peak_tflops": {"float32": 1}}, "peak_gbps"),
        ({"gpu": "this", "peak_gbps": 10, "peak_tflops": {"float32": [1, 2]}}, "peak_tflops"),
        ({"gpu": "this", "peak_gbps": 10, "peak_tflops": {}}, "peak_tflops"),
    ],
)
def test_the_device_of_a_calibration_file_is_checked(fields, field):
    with pytest.raises(FieldError) as error:
        load_calibration({**model_dict(DEFAULT_MODEL), **fields})
    assert error.value.field == field


def test_a_calibration_file_is_read_by_the_one_loader(tmp_path):
    folder = tmp_path / "folder"
    folder.mkdir()
    big = sparse_file(tmp_path / "big.json", MAX_CALIBRATION_BYTES + 1)
    latin = tmp_path / "latin.json"
    latin.write_bytes(b'{"source": "caf\xe9"}')
    cases = [
        (folder, "is a directory, not a file"),
        (big, "file too large (1.0 MiB; the limit is 1 MiB)"),
        (latin, "not UTF-8 text (byte 15)"),
        (tmp_path / "none.json", "no such file"),
    ]
    for path, reason in cases:
        with pytest.raises(FieldError) as error:
            load_calibration(path)
        assert (error.value.field, error.value.reason) == ("calibration", reason)


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero")
def test_dev_zero_as_a_calibration_is_refused_at_once():
    with memory_guard():
        outcome = in_thread(lambda: load_calibration("/dev/zero"))
    assert "not a regular file" in str(outcome["error"])


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_as_a_calibration_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    outcome = in_thread(lambda: load_calibration(fifo), fifo=fifo)
    assert isinstance(outcome["error"], FieldError)
    assert outcome["error"].reason == "not a regular file (a device, pipe or socket)"


def test_counts_up_to_the_largest_are_taken(tmp_path):
    """MAX_COUNT is SQLite's INTEGER: a count there is a sample still."""
    big = record(bytes_per_step=MAX_COUNT, kv_bytes_per_gpu=MAX_COUNT)
    (sample,) = samples_from_results(run_doc(big))
    assert sample.bytes == sample.kv_bytes == MAX_COUNT
    path = Path(tmp_path / "cal.json")
    path.write_text(json.dumps(model_dict(DEFAULT_MODEL)))
    assert load_calibration(path).path == str(path)


def test_a_calibration_file_giving_a_key_twice_is_refused(tmp_path):
    """As a config.json is: json.loads would keep the last value, silently."""
    path = tmp_path / "cal.json"
    path.write_text('{"efficiency_bw": 0.9, "efficiency_flops": 1, "efficiency_bw": 0.5}')
    with pytest.raises(UsageError, match=r"cal.json: duplicate key 'efficiency_bw'"):
        load_calibration(path)
