"""The one timing harness: every timed number in attnbench comes through `Timer`.

Rules (see REFERENCE.md, "Measuring time honestly"): warm-up is never counted; raw samples
are kept; the summary is the median with the p25..p75 interval, and a result whose
IQR/median exceeds 10% is flagged noisy (torch.utils.benchmark's rule). On CUDA each call
is bracketed by a pair of CUDA events and read after a synchronize; on the CPU by
time.perf_counter_ns.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

#: IQR / median above which a measurement is flagged noisy.
NOISY_IQR_FRACTION = 0.10


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between order statistics
    (numpy's default method)."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass
class Measurement:
    """Raw samples in milliseconds and their robust summary."""

    samples_ms: list[float]

    @property
    def median_ms(self) -> float:
        return percentile(self.samples_ms, 50)

    @property
    def p25_ms(self) -> float:
        return percentile(self.samples_ms, 25)

    @property
    def p75_ms(self) -> float:
        return percentile(self.samples_ms, 75)

    @property
    def iqr_ms(self) -> float:
        return self.p75_ms - self.p25_ms

    @property
    def noisy(self) -> bool:
        return self.iqr_ms > NOISY_IQR_FRACTION * self.median_ms


class Timer:
    """Times calls one by one on `device`; `flush_l2` writes a buffer twice the L2 size
    before each timed call on CUDA, so a call never finds its inputs already in L2."""

    def __init__(self, device: torch.device, flush_l2: bool = False) -> None:
        self.device = device
        self.cuda = device.type == "cuda"
        self._flush_buffer = None
        if self.cuda and flush_l2:
            l2 = torch.cuda.get_device_properties(device).L2_cache_size
            self._flush_buffer = torch.empty(max(2 * l2, 1 << 20), dtype=torch.uint8,
                                             device=device)  # fmt: skip

    def time_calls(self, calls: Sequence[Callable[[], object]]) -> list[float]:
        """Run `calls` in order and return the time of each, in milliseconds."""
        if self.cuda:
            return self._time_cuda(calls)
        times = []
        for call in calls:
            start = time.perf_counter_ns()
            call()
            times.append((time.perf_counter_ns() - start) / 1e6)
        return times

    def _time_cuda(self, calls: Sequence[Callable[[], object]]) -> list[float]:
        events = []
        torch.cuda.synchronize(self.device)
        for call in calls:
            if self._flush_buffer is not None:
                self._flush_buffer.zero_()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            events.append((start, end))
        torch.cuda.synchronize(self.device)
        return [start.elapsed_time(end) for start, end in events]

    def measure(self, call: Callable[[], object], warmup: int, repeats: int) -> Measurement:
        """`warmup` untimed calls, then `repeats` timed ones."""
        self.time_calls([call] * warmup)
        return Measurement(self.time_calls([call] * repeats))


def measure_peak_gbps(device: torch.device, nbytes: int | None = None) -> float:
    """Memory bandwidth of a large device copy, in GB/s (1e9 bytes/s), counting the bytes
    read plus the bytes written: the roofline a memory-bound step is held against."""
    if nbytes is None:
        nbytes = (1 << 30) if device.type == "cuda" else (256 << 20)
    src = torch.randn(nbytes // 4, device=device)
    dst = torch.empty_like(src)
    timing = Timer(device).measure(lambda: dst.copy_(src), warmup=3, repeats=30)
    return 2 * src.nbytes / (timing.median_ms * 1e-3) / 1e9
