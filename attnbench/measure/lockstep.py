"""Timing in lockstep over a process group: every rank makes the same calls, in the same
number, so a call that holds a collective (a tensor-parallel step's all-reduce) never
waits for a rank that has stopped sampling.

Adaptive sampling cannot be used as it is: each rank would stop at its own time. The
ranks instead agree, after the warm-up, on the slowest rank's probe of one call, derive
one fixed plan from it (calls per sample, samples within the time budget) and take
exactly that. Each sample of the result is the slowest rank's: the elementwise maximum
of the ranks' samples, which is what the step costs when every rank must finish it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import torch
import torch.distributed as dist

from .stats import Measurement
from .timing import MAX_BLOCK, Sampling, Timer


def _slowest(
    values: list[float], group: dist.ProcessGroup | None, device: torch.device
) -> list[float]:
    """The elementwise maximum of every rank's `values` (the same length on each); the
    tensor lives on `device` (NCCL reduces only GPU tensors)."""
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=group)
    return tensor.tolist()


def lockstep_plan(probe_ms: float, sampling: Sampling, setup: bool) -> Sampling:
    """The fixed sampling every rank takes for a call whose slowest probe took `probe_ms`:
    calls per sample to span `min_sample_ms` (one with a `setup` between calls), and the
    fixed count asked for, else as many samples as fit `max_time_s`, within
    [min_repeats, max_repeats]."""
    probe_ms = max(probe_ms, 1e-6)
    number = 1
    if sampling.min_sample_ms > 0 and not setup:
        number = max(1, min(math.ceil(sampling.min_sample_ms / probe_ms), MAX_BLOCK))
    repeats = sampling.repeats
    if repeats is None:
        fit = int(sampling.max_time_s * 1e3 / (number * probe_ms))
        repeats = max(sampling.min_repeats, min(fit, sampling.max_repeats))
    return replace(sampling, warmup=0, repeats=repeats, calls_per_sample=number)


def lockstep_sample(
    timer: Timer,
    call: Callable[[], object],
    sampling: Sampling,
    setup: Callable[[], object] | None = None,
    group: dist.ProcessGroup | None = None,
) -> Measurement:
    """`call` timed on every rank of `group` with one agreed plan (see lockstep_plan);
    the samples are the slowest rank's."""
    timer.time_blocks(call, sampling.warmup, 1, setup)
    probe = timer.time_blocks(call, 1, 1, setup)[0]
    [slowest] = _slowest([probe], group, timer.device)
    measured = timer.sample(call, lockstep_plan(slowest, sampling, setup is not None), setup)
    samples = _slowest(measured.samples_ms, group, timer.device)
    return Measurement(samples, measured.stop_reason, measured.calls_per_sample)
