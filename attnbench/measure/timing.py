"""The one timing harness: every timed number in attnbench comes through `Timer`.

Rules (see docs/methodology.md, "How time is measured"): warm-up is never counted; raw samples
are kept; the summary is the median with the p25..p75 interval, and a result whose
IQR/median exceeds 10% is flagged noisy (torch.utils.benchmark's rule). On CUDA each call
is bracketed by a pair of CUDA events and read after a synchronize; on the CPU by
time.perf_counter_ns. A `setup` callable runs before each timed call, outside the timed
region (resetting a cache's length, say).

How many samples: a fixed count, or adaptively (torch.utils.benchmark's
adaptive_autorange idea): sample until the 95% confidence interval of the median is
within a target fraction of it, or a time budget is spent, never fewer than a minimum.
The interval is the distribution-free one from order statistics, so it needs no
assumption about the shape of the noise.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from ..model.formulas import matmul_flops

#: IQR / median above which a measurement is flagged noisy.
NOISY_IQR_FRACTION = 0.10
#: z of a two-sided 95% interval.
Z_95 = 1.959963984540054
#: The most consecutive calls one sample times.
MAX_BLOCK = 10_000
#: Why sampling stopped: the interval reached its target, the time budget ran out, the
#: most samples allowed were taken, or a fixed count was asked for.
CONVERGED, OUT_OF_TIME, MOST_SAMPLES, FIXED = "target_ci", "max_time", "max_repeats", "repeats"


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


def median_interval(values: Sequence[float], z: float = Z_95) -> tuple[float, float]:
    """The confidence interval of the median from order statistics: the sorted values at
    ranks n/2 -+ z*sqrt(n)/2 (the normal approximation of the binomial, widened to whole
    ranks). With few values it spans them all."""
    ordered = sorted(values)
    n = len(ordered)
    half = z * math.sqrt(n) / 2
    lo = max(math.floor(n / 2 - half), 1)
    hi = min(math.ceil(n / 2 + half) + 1, n)
    return ordered[lo - 1], ordered[hi - 1]


@dataclass(frozen=True)
class Sampling:
    """How many samples to take: `repeats` fixed, or adaptively (repeats None) at least
    `min_repeats`, until the 95% interval of the median is within `target_rel_ci` of it
    or `max_time_s` seconds of sampling are spent, and never more than `max_repeats`.
    A sample times one call, or as many consecutive calls as span `min_sample_ms` (their
    mean): a call much shorter than that is mostly the machine's jitter, which a block of
    calls averages out, as torch.utils.benchmark and pyperf time loops of calls.
    `calls_per_sample` fixes that number instead: processes that time in lockstep must
    agree on it (see measure.lockstep)."""

    warmup: int = 2
    repeats: int | None = None
    min_repeats: int = 5
    max_time_s: float = 2.0
    target_rel_ci: float = 0.02
    max_repeats: int = 10_000
    min_sample_ms: float = 0.0
    calls_per_sample: int | None = None


@dataclass
class Measurement:
    """Raw samples in milliseconds (each the mean of `calls_per_sample` consecutive
    calls), their robust summary, and why sampling stopped."""

    samples_ms: list[float]
    stop_reason: str = FIXED
    calls_per_sample: int = 1

    @property
    def ci_rel(self) -> float:
        """Half-width of the 95% interval of the median, relative to the median (its
        larger side)."""
        median = self.median_ms
        lo, hi = median_interval(self.samples_ms)
        return max(median - lo, hi - median) / median if median > 0 else math.inf

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
    """Times calls on `device`, a block of consecutive calls per sample; `flush_l2`
    writes a buffer twice the L2 size before each timed call on CUDA, so a call never
    finds its inputs already in L2."""

    def __init__(self, device: torch.device, flush_l2: bool = False) -> None:
        self.device = device
        self.cuda = device.type == "cuda"
        self._flush_buffer = None
        if self.cuda and flush_l2:
            l2 = torch.cuda.get_device_properties(device).L2_cache_size
            self._flush_buffer = torch.empty(max(2 * l2, 1 << 20), dtype=torch.uint8,
                                             device=device)  # fmt: skip

    def time_blocks(
        self,
        call: Callable[[], object],
        count: int,
        number: int = 1,
        setup: Callable[[], object] | None = None,
    ) -> list[float]:
        """`count` samples, each the mean time in milliseconds of `number` consecutive
        calls; `setup` runs before each sample, untimed."""
        if self.cuda:
            return self._time_cuda(call, count, number, setup)
        times = []
        for _ in range(count):
            if setup is not None:
                setup()
            start = time.perf_counter_ns()
            for _ in range(number):
                call()
            times.append((time.perf_counter_ns() - start) / 1e6 / number)
        return times

    def _time_cuda(
        self,
        call: Callable[[], object],
        count: int,
        number: int,
        setup: Callable[[], object] | None,
    ) -> list[float]:
        events = []
        torch.cuda.synchronize(self.device)
        for _ in range(count):
            if setup is not None:
                setup()
            if self._flush_buffer is not None:
                self._flush_buffer.zero_()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(number):
                call()
            end.record()
            events.append((start, end))
        torch.cuda.synchronize(self.device)
        return [start.elapsed_time(end) / number for start, end in events]

    def measure(self, call: Callable[[], object], warmup: int, repeats: int) -> Measurement:
        """`warmup` untimed calls, then `repeats` timed ones, one call per sample."""
        return self.sample(call, Sampling(warmup=warmup, repeats=repeats))

    def calls_per_sample(
        self, call: Callable[[], object], sampling: Sampling, setup: Callable[[], object] | None
    ) -> int:
        """How many consecutive calls one sample times: enough to span `min_sample_ms`
        (from one probe call), or one where something must happen between calls (a
        set-up, an L2 flush); the count `sampling` fixes, if any."""
        if sampling.calls_per_sample is not None:
            return sampling.calls_per_sample
        if sampling.min_sample_ms <= 0 or setup is not None or self._flush_buffer is not None:
            return 1
        probe = self.time_blocks(call, 1, 1)[0]
        return max(1, min(math.ceil(sampling.min_sample_ms / max(probe, 1e-6)), MAX_BLOCK))

    def sample(
        self,
        call: Callable[[], object],
        sampling: Sampling,
        setup: Callable[[], object] | None = None,
    ) -> Measurement:
        """Warm up, then time `call` as `sampling` says (see Sampling), with Python's
        garbage collector paused (as timeit does): a collection is not the call's cost."""
        collecting = gc.isenabled()
        gc.disable()
        try:
            return self._sample(call, sampling, setup)
        finally:
            if collecting:
                gc.enable()

    def _sample(
        self, call: Callable[[], object], sampling: Sampling, setup: Callable[[], object] | None
    ) -> Measurement:
        self.time_blocks(call, sampling.warmup, 1, setup)
        number = self.calls_per_sample(call, sampling, setup)

        def more(count: int) -> list[float]:
            return self.time_blocks(call, count, number, setup)

        if sampling.repeats is not None:
            return Measurement(more(sampling.repeats), FIXED, number)
        started = time.perf_counter()
        samples = more(sampling.min_repeats)
        while True:
            measurement = Measurement(samples, calls_per_sample=number)
            spent = time.perf_counter() - started
            if measurement.ci_rel <= sampling.target_rel_ci:
                measurement.stop_reason = CONVERGED
            elif spent >= sampling.max_time_s:
                measurement.stop_reason = OUT_OF_TIME
            elif len(samples) >= sampling.max_repeats:
                measurement.stop_reason = MOST_SAMPLES
            else:
                # the next batch: up to half as many again, within the time left
                per_sample = max(spent / len(samples), 1e-9)
                left = int((sampling.max_time_s - spent) / per_sample) + 1
                batch = min(max(len(samples) // 2, 1), left, sampling.max_repeats - len(samples))
                samples += more(batch)
                continue
            return measurement


def measure_peak_gbps(device: torch.device, nbytes: int | None = None) -> float:
    """Memory bandwidth of a large device copy, in GB/s (1e9 bytes/s), counting the bytes
    read plus the bytes written: the roofline a memory-bound step is held against."""
    if nbytes is None:
        nbytes = (1 << 30) if device.type == "cuda" else (256 << 20)
    src = torch.randn(nbytes // 4, device=device)
    dst = torch.empty_like(src)
    timing = Timer(device).measure(lambda: dst.copy_(src), warmup=3, repeats=30)
    return 2 * src.nbytes / (timing.median_ms * 1e-3) / 1e9


def measure_peak_tflops(device: torch.device, dtype: torch.dtype, n: int | None = None) -> float:
    """Throughput of a square matmul (n x n by n x n) in `dtype`, in TFLOPS (1e12 FLOPs
    per second): the roofline a compute-bound prefill is held against."""
    if n is None:
        n = 8192 if device.type == "cuda" else 1024
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    out = torch.empty(n, n, device=device, dtype=dtype)
    timing = Timer(device).measure(lambda: torch.mm(a, b, out=out), warmup=3, repeats=15)
    return matmul_flops(n, n, n) / (timing.median_ms * 1e-3) / 1e12
