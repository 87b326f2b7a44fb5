"""A rough time for each point of a study, from the analytic bytes and FLOPs: what the
progress bar paces itself by and a dry run prints. Nothing measured uses it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..experiments.decode import DecodeOptions, DecodePoint
from ..model.formulas import decode_totals, forward_flops


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
#: Params (a module on the meta device), kvmem (allocate, count, free) and fit points.
CHEAP_POINT_S = 2e-3


def point_seconds(point: object, device: torch.device | None, options: dict) -> float:
    """A rough time for one point on `device`."""
    if not isinstance(point, DecodePoint) or device is None:
        return CHEAP_POINT_S
    speed = SPEEDS.get(device.type, SPEEDS["cpu"])
    opts, p = DecodeOptions.from_options(options), point
    shape = p.shape
    nbytes, flops = decode_totals(shape, p.batch, p.prompt_len, p.gen_len, p.dtype, p.cached)
    if p.cached and opts.prefill:
        flops += forward_flops(shape, p.batch, p.prompt_len, p.prompt_len, causal=True)
    generation = max(flops / speed.flops, nbytes / speed.bytes_per_s) + p.gen_len * speed.call_s
    if device.type == "cpu" and p.dtype != "float32":
        generation *= CPU_HALF_SLOWDOWN
    return (opts.warmup + opts.repeats) * generation


def peak_seconds(device: torch.device) -> float:
    """The peak-bandwidth probe a timed study starts with."""
    return SPEEDS.get(device.type, SPEEDS["cpu"]).peak_s


def total_seconds(estimates: Sequence[float], probe: float) -> float:
    return probe + sum(estimates)
