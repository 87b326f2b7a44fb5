"""A rough time for each point of a study, from the analytic bytes and FLOPs: what the
progress bar paces itself by and a dry run prints. Nothing measured uses it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..experiments.decode import DecodeOptions, DecodePoint, step_counts
from ..measure.timing import Sampling
from ..model.formulas import decode_totals, prefill_flops


@dataclass(frozen=True)
class Speeds:
    """Rough device speeds."""

    flops: float
    bytes_per_s: float
    call_s: float  # fixed cost of one timed call: Python, dispatch, kernel launch
    peak_s: float  # the peak-bandwidth copy measured before decode


SPEEDS = {"cpu": Speeds(2e10, 1e10, 2e-4, 1.5), "cuda": Speeds(5e13, 2e12, 5e-5, 0.5)}
#: Half precision on the CPU runs through slow paths.
CPU_HALF_SLOWDOWN = 8.0
#: Samples adaptive sampling typically takes before its interval is narrow enough.
TYPICAL_SAMPLES = 50
#: Params (a module on the meta device), kvmem (allocate, count, free) and fit points.
CHEAP_POINT_S = 2e-3


def point_seconds(point: object, device: torch.device | None, options: object) -> float:
    """A rough time for one point on `device`, with its section's typed options."""
    if not isinstance(point, DecodePoint) or device is None:
        return CHEAP_POINT_S
    assert isinstance(options, DecodeOptions)
    speed = SPEEDS.get(device.type, SPEEDS["cpu"])
    opts, p = options, point
    shape = p.shape
    slowdown = CPU_HALF_SLOWDOWN if device.type == "cpu" and p.dtype != "float32" else 1.0

    def seconds(nbytes: int, flops: int, calls: int) -> float:
        return (
            slowdown * max(flops / speed.flops, nbytes / speed.bytes_per_s) + calls * speed.call_s
        )

    counts = step_counts(p)
    calls = [seconds(counts.bytes, counts.flops, 1)]
    if p.times_prefill:
        calls.append(seconds(0, prefill_flops(shape, p.batch, p.prompt_len), 1))
    if p.gen_len:
        totals = decode_totals(shape, p.batch, p.prompt_len, p.gen_len, p.dtype, p.cached)
        calls.append(seconds(*totals, p.gen_len))
    sampling = opts.sampling(device)
    return sum(_measurement_seconds(call, sampling) for call in calls)


def _measurement_seconds(call_s: float, sampling: Sampling) -> float:
    """One measurement of calls of `call_s` each, as `sampling` takes it (samples of at
    least min_sample_ms): warm-up, then a fixed count of samples, or adaptive sampling
    that typically converges within TYPICAL_SAMPLES and stops by its time budget (after
    its minimum count)."""
    sample_s = max(call_s, sampling.min_sample_ms / 1e3)
    warmup = sampling.warmup * call_s
    if sampling.repeats is not None:
        return warmup + sampling.repeats * sample_s
    budget = min(sampling.max_time_s, TYPICAL_SAMPLES * sample_s)
    return warmup + max(budget, sampling.min_repeats * sample_s)


def peak_seconds(device: torch.device) -> float:
    """The peak-bandwidth probe a timed study starts with."""
    return SPEEDS.get(device.type, SPEEDS["cpu"]).peak_s


def total_seconds(estimates: Sequence[float], probe: float) -> float:
    return probe + sum(estimates)
