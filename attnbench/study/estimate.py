"""A rough time for each point of a study, from the analytic bytes and FLOPs: what the
progress bar paces itself by and a dry run prints. Nothing measured uses it. A decode
point's sampling is bounded by its time budget (measure.timing), so its estimate is that
budget unless one memory layout of its least work takes longer."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..experiments.decode import DecodeOptions, DecodePoint, step_counts
from ..measure.timing import WARM_BELOW, Sampling, layout_plan
from ..model.formulas import decode_totals, prefill_flops


@dataclass(frozen=True)
class Speeds:
    """Rough device speeds. A CPU's FLOP/s are one core's with AVX2: two 8-wide float32
    FMAs a cycle at about 3 GHz, 1e11."""

    flops: float
    bytes_per_s: float
    call_s: float  # fixed cost of one timed call: Python, dispatch, kernel launch
    peak_s: float  # the peak probes (copy and matmul) before the timed points and after


SPEEDS = {"cpu": Speeds(1e11, 1e10, 2e-4, 3.0), "cuda": Speeds(5e13, 2e12, 5e-5, 1.0)}
#: Half precision on the CPU runs through slow paths.
CPU_HALF_SLOWDOWN = 8.0
#: Samples adaptive sampling typically takes before its interval is narrow enough.
TYPICAL_SAMPLES = 50
#: Params (a module on the meta device), kvmem (allocate, count, free) and fit points.
CHEAP_POINT_S = 2e-3


def point_seconds(point: object, device: torch.device | None, options: object) -> float:
    """A rough time for one point on `device`, with its section's typed options: for a
    decode point, at most what its time budget lets its sampling take (its share of its
    group's budget, max_time per point) unless its least work takes longer, plus its
    prefill and its generations."""
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
    step_s = seconds(counts.bytes, counts.flops, 1)
    sampling = opts.sampling(device)
    total = _step_seconds(step_s, REFERENCE_CALLS.get(opts.reference, 1), sampling)
    if p.times_prefill:
        total += _measurement_seconds(
            seconds(0, prefill_flops(shape, p.batch, p.prompt_len), 1), sampling
        )
    if p.gen_len:
        totals = decode_totals(shape, p.batch, p.prompt_len, p.gen_len, p.dtype, p.cached)
        total += _measurement_seconds(seconds(*totals, p.gen_len), sampling)
    return total


#: Calls timed beside a step, by its `reference`: its kernels each alone, none, or
#: (any other) one provider's step.
REFERENCE_CALLS = {"kernels": 5, "none": 0}
#: A layout's allocation and check, in calls of the step: weights, inputs and a cache
#: written once, the step and its reference run once to compare their outputs.
LAYOUT_CALLS = 4


def _step_seconds(step_s: float, beside: int, sampling: Sampling) -> float:
    """The step's sampling over memory layouts (measure.timing.layout_plan), one sample
    of it and of each of `beside` reference calls (that together cost about a step) per
    round: a fixed count of rounds, or adaptively the time budget, unless one layout
    takes longer."""
    round_s = _sample_seconds(step_s, sampling, switched=True)
    if beside:
        round_s += beside * _sample_seconds(step_s / beside, sampling)
    least, rounds, _ = layout_plan(sampling)
    layout_s = rounds * round_s + (LAYOUT_CALLS + sampling.warmup) * step_s
    if sampling.repeats is not None:
        return least * layout_s
    return max(sampling.max_time_s, layout_s)


def _sample_seconds(call_s: float, sampling: Sampling, switched: bool = False) -> float:
    """One sample of calls of `call_s` sampled in turn: at least min_sample_ms, after as
    many untimed calls when under WARM_BELOW x that, or for a unit's first call
    (`switched`) after untimed calls spanning WARM_BELOW x that (Timer.block_of)."""
    least = sampling.min_sample_ms / 1e3
    span = WARM_BELOW * least
    sample_s = max(call_s, least)
    if sample_s >= span:
        return sample_s
    return sample_s + (span if switched else sample_s)


def _measurement_seconds(call_s: float, sampling: Sampling) -> float:
    """One measurement of calls of `call_s` each, alone in one layout (a prefill, a
    generation), as `sampling` takes it (samples of at least min_sample_ms): warm-up,
    then a fixed count of samples, or adaptive sampling that typically converges within
    TYPICAL_SAMPLES and stops by its time budget (after its minimum count)."""
    sample_s = max(call_s, sampling.min_sample_ms / 1e3)
    warmup = sampling.warmup * call_s
    if sampling.repeats is not None:
        return warmup + sampling.repeats * sample_s
    budget = min(sampling.max_time_s, TYPICAL_SAMPLES * sample_s)
    return warmup + max(budget, sampling.min_repeats * sample_s)


def peak_seconds(device: torch.device) -> float:
    """The peak probes of a timed study: before its timed points, and again after."""
    return SPEEDS.get(device.type, SPEEDS["cpu"]).peak_s
