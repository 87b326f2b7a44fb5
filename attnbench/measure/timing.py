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
import random
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace

import torch

from ..model.formulas import matmul_flops
from .stats import CONVERGED, FIXED, MOST_SAMPLES, OUT_OF_TIME, Measurement, in_run_ratio

#: The most consecutive calls one sample times.
MAX_BLOCK = 10_000
#: Calls timed alone to size a block of calls; the block is sized by the fastest.
PROBES = 3
#: A call to time and the set-up that runs, untimed, before each of its samples (or None).
TimedCall = tuple[Callable[[], object], Callable[[], object] | None]


#: A sample interleaved with others is preceded by untimed calls when it spans less than
#: this many times `min_sample_ms` (see Timer.block_of).
WARM_BELOW = 4


@dataclass(frozen=True)
class Block:
    """One sample's calls: `number` consecutive calls timed together, after as many
    untimed ones when `warm`."""

    number: int = 1
    warm: bool = False


@dataclass(frozen=True)
class Unit:
    """Calls sampled one after the other in every round, inside `context()` when given
    (a provider's pinned kernel): a step and what it is timed against."""

    calls: Sequence[TimedCall]
    context: Callable[[], AbstractContextManager] | None = None

    def entered(self) -> AbstractContextManager:
        return self.context() if self.context is not None else nullcontext()


def _run(call: Callable[[], object] | None) -> None:
    if call is not None:
        call()


@dataclass(frozen=True)
class Sampling:
    """How many samples to take: `repeats` fixed, or adaptively (repeats None) at least
    `min_repeats`, until the 95% interval of the median is within `target_rel_ci` of it
    or `max_time_s` seconds of sampling are spent, and never more than `max_repeats`.
    A sample times one call, or as many consecutive calls as span `min_sample_ms` (their
    mean): a call much shorter than that is mostly the machine's jitter, which a block of
    calls averages out, as torch.utils.benchmark and pyperf time loops of calls.
    `calls_per_sample` fixes that number instead: processes that time in lockstep must
    agree on it (see measure.lockstep). A study's values, defaults included, come from
    its options (study.schema); left out here, a field asks nothing of the sampling: no
    warm-up, no least count beyond one sample, no width to reach, no time limit."""

    warmup: int = 0
    repeats: int | None = None
    min_repeats: int = 1
    max_time_s: float = math.inf
    target_rel_ci: float = 0.0
    max_repeats: int = 10_000
    min_sample_ms: float = 0.0
    calls_per_sample: int | None = None


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
            self._flush_buffer = torch.empty(max(2 * l2, 1 << 20), dtype=torch.uint8, device=device)

    def time_blocks(
        self,
        call: Callable[[], object],
        count: int,
        number: int = 1,
        setup: Callable[[], object] | None = None,
    ) -> list[float]:
        """`count` samples, each the mean time in milliseconds of `number` consecutive
        calls; `setup` runs before each sample, untimed."""
        return self.time_rounds([Unit([(call, setup)])], [[Block(number)]], count)[0][0]

    def time_rounds(
        self,
        units: Sequence[Unit],
        blocks: Sequence[Sequence[Block]],
        rounds: int,
        order: random.Random | None = None,
    ) -> list[list[list[float]]]:
        """`rounds` rounds of one sample of each call of each unit, a sample being the mean
        time in milliseconds of its block's `number` consecutive calls after the call's
        set-up (and, for a `warm` block, as many untimed calls): the samples of each call of
        each unit. Within a round the units come in a new order drawn from `order` (when
        given), and the calls of a unit one after the other, inside its context. On CUDA
        every sample is bracketed by events, read after one synchronize at the end, so the
        host runs ahead of the device as it would."""
        times: list[list[list]] = [[[] for _ in unit.calls] for unit in units]
        turns = list(range(len(units)))
        if self.cuda:
            torch.cuda.synchronize(self.device)
        for _ in range(rounds):
            if order is not None:
                order.shuffle(turns)
            for u in turns:
                with units[u].entered():
                    for (call, setup), block, taken in zip(
                        units[u].calls, blocks[u], times[u], strict=True
                    ):
                        if block.warm:
                            _run(setup)
                            for _ in range(block.number):
                                call()
                        _run(setup)
                        taken.append(self._one_sample(call, block.number))
        if not self.cuda:
            return times
        torch.cuda.synchronize(self.device)
        for unit_times, unit_blocks in zip(times, blocks, strict=True):
            for i, (events, block) in enumerate(zip(unit_times, unit_blocks, strict=True)):
                unit_times[i] = [start.elapsed_time(end) / block.number for start, end in events]
        return times

    def _one_sample(self, call: Callable[[], object], number: int) -> float | tuple:
        """`number` consecutive calls: their mean time in ms on the CPU, their events on
        CUDA."""
        if self.cuda:
            return self._cuda_sample(call, number)
        start = time.perf_counter_ns()
        for _ in range(number):
            call()
        return (time.perf_counter_ns() - start) / 1e6 / number

    def _cuda_sample(self, call: Callable[[], object], number: int) -> tuple:
        """The (start, end) events around `number` calls, after the L2 flush if any."""
        if self._flush_buffer is not None:
            self._flush_buffer.zero_()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(number):
            call()
        end.record()
        return start, end

    def measure(self, call: Callable[[], object], warmup: int, repeats: int) -> Measurement:
        """`warmup` untimed calls, then `repeats` timed ones, one call per sample."""
        return self.sample(call, Sampling(warmup=warmup, repeats=repeats))

    def block_of(
        self,
        call: Callable[[], object],
        sampling: Sampling,
        setup: Callable[[], object] | None,
        interleaved: bool = False,
    ) -> Block:
        """How one sample of `call` is taken. Its calls: enough to span `min_sample_ms`
        (from the fastest of PROBES calls), or one where something must happen between
        calls (a set-up, an L2 flush); the count `sampling` fixes, if any. `interleaved`
        with other calls, a call finds the caches holding what ran before it, and the
        first calls after a switch are slower than the rest: a sample spanning under
        WARM_BELOW x `min_sample_ms` is then preceded by as many untimed calls, so that it
        times the calls' steady state whatever their number (a long call pays its own
        start; a flushed L2 is cold on purpose)."""
        if sampling.calls_per_sample is not None:
            return Block(sampling.calls_per_sample)
        if sampling.min_sample_ms <= 0 or setup is not None or self._flush_buffer is not None:
            return Block(1)
        probe = min(self.time_blocks(call, PROBES, 1))  # the fastest: a stall is no cost
        number = max(1, min(math.ceil(sampling.min_sample_ms / max(probe, 1e-6)), MAX_BLOCK))
        return Block(number, interleaved and number * probe < WARM_BELOW * sampling.min_sample_ms)

    def sample(
        self,
        call: Callable[[], object],
        sampling: Sampling,
        setup: Callable[[], object] | None = None,
    ) -> Measurement:
        """Warm up, then time `call` as `sampling` says (see Sampling), with Python's
        garbage collector paused (as timeit does): a collection is not the call's cost."""
        return self.sample_interleaved([(call, setup)], sampling)[0]

    def sample_interleaved(
        self, calls: Sequence[TimedCall], sampling: Sampling
    ) -> list[Measurement]:
        """Samples of several (call, setup) pairs taken in turn, one sample of each per
        round, so the i-th samples of all of them were taken within one round: a slow
        phase of the machine (another tenant, a clock change) then weighs on all of them
        alike, and cancels in their ratios (see `in_run_ratio`). Adaptive sampling stops
        when the first call's interval, and that of its ratio to the sum of the others,
        are within the target; the time budget covers all of them."""
        return self.sample_units([Unit(calls)], sampling)[0]

    def sample_units(
        self,
        units: Sequence[Unit],
        sampling: Sampling,
        width: Callable[[list[list[Measurement]]], float] | None = None,
        max_time_s: float | None = None,
        seed: int = 0,
    ) -> list[list[Measurement]]:
        """Round-robin sampling of several units (each a step and what it is timed
        against): one sample of every call of every unit per round, the units in a new
        seeded order each round, so that every unit meets the same mix of the machine's
        states and none always runs first or last. Adaptive sampling stops when
        `width(measurements)`, the widest relative interval that matters, is within the
        target (default: each unit's, as `sample_interleaved` converges), or after
        `max_time_s` (default `sampling.max_time_s`) for all of them together. Python's
        garbage collector is paused meanwhile (as timeit does): a collection is not the
        calls' cost."""
        collecting = gc.isenabled()
        gc.disable()
        try:
            if max_time_s is not None:
                sampling = replace(sampling, max_time_s=max_time_s)
            return self._sample(units, sampling, width or _widest_unit, random.Random(seed))
        finally:
            if collecting:
                gc.enable()

    def _sample(
        self,
        units: Sequence[Unit],
        sampling: Sampling,
        width: Callable[[list[list[Measurement]]], float],
        order: random.Random,
    ) -> list[list[Measurement]]:
        if not units:
            return []
        interleaved = sum(len(unit.calls) for unit in units) > 1
        blocks = []
        for unit in units:
            with unit.entered():
                for call, setup in unit.calls:
                    self.time_blocks(call, sampling.warmup, 1, setup)
                blocks.append([self.block_of(c, sampling, s, interleaved) for c, s in unit.calls])
        samples: list[list[list[float]]] = [[[] for _ in unit.calls] for unit in units]

        def more(count: int) -> None:
            new = self.time_rounds(units, blocks, count, order)
            for unit_taken, unit_new in zip(samples, new, strict=True):
                for taken, added in zip(unit_taken, unit_new, strict=True):
                    taken += added

        def measured(stop: str) -> list[list[Measurement]]:
            return [
                [Measurement(s, stop, b.number) for s, b in zip(unit, unit_blocks, strict=True)]
                for unit, unit_blocks in zip(samples, blocks, strict=True)
            ]

        if sampling.repeats is not None:
            more(sampling.repeats)
            return measured(FIXED)
        started = time.perf_counter()
        more(sampling.min_repeats)
        while True:
            taken, spent = len(samples[0][0]), time.perf_counter() - started
            if width(measured(FIXED)) <= sampling.target_rel_ci:
                return measured(CONVERGED)
            if spent >= sampling.max_time_s:
                return measured(OUT_OF_TIME)
            if taken >= sampling.max_repeats:
                return measured(MOST_SAMPLES)
            # the next batch: up to half as many again, within the time left
            left = int((sampling.max_time_s - spent) / max(spent / taken, 1e-9)) + 1
            more(min(max(taken // 2, 1), left, sampling.max_repeats - taken))


def _widest_unit(units: list[list[Measurement]]) -> float:
    """The widest relative interval over the units (see `_ci_rel`)."""
    return max(_ci_rel(unit) for unit in units)


def _ci_rel(measurements: list[Measurement]) -> float:
    """What adaptive sampling converges: the first measurement's interval and, with
    others beside it, that of its ratio to their sum."""
    if len(measurements) == 1:
        return measurements[0].ci_rel
    return max(measurements[0].ci_rel, in_run_ratio(measurements).ci_rel)


#: The least share of the wall time a process sampling with one thread should run for:
#: one that ran for less waited while another process held the CPU, and its times are
#: the host's as much as its own.
BUSY_CPU_SHARE = 0.8


class CpuShare:
    """How much of the wall time since it was made this process ran on the CPU (its CPU
    time over the wall time, at most 1), while torch computes on one thread: the rest of
    the time another process held the CPU (a busy neighbour, a hypervisor's steal).
    `share()` is None with more threads, whose parallel regions leave some idle by design,
    and on a GPU, where the host waits for the device."""

    def __init__(self, device: torch.device) -> None:
        self.counts = device.type == "cpu" and torch.get_num_threads() == 1
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def share(self) -> float | None:
        wall = time.perf_counter() - self.wall
        if not self.counts or wall <= 0:
            return None
        return min((time.process_time() - self.cpu) / wall, 1.0)


#: Timed copies (and matmuls) of a peak probe: the first probe of a run, and each later
#: probe (measure_peak_gbps(..., repeats=REPROBE_REPEATS)), which only has to tell whether
#: the host's speed moved since the first.
PEAK_REPEATS, PEAK_MATMUL_REPEATS, REPROBE_REPEATS = 30, 15, 5


def measure_peak_gbps(
    device: torch.device, nbytes: int | None = None, repeats: int = PEAK_REPEATS
) -> float:
    """Memory bandwidth of a large device copy, in GB/s (1e9 bytes/s), counting the bytes
    read plus the bytes written: the roofline a memory-bound step is held against; the
    median of `repeats` timed copies after a warm-up."""
    if nbytes is None:
        nbytes = (1 << 30) if device.type == "cuda" else (256 << 20)
    src = torch.randn(nbytes // 4, device=device)
    dst = torch.empty_like(src)
    warmup = min(3, max(1, repeats // 5))  # a later, shorter probe: one
    timing = Timer(device).measure(lambda: dst.copy_(src), warmup=warmup, repeats=repeats)
    return 2 * src.nbytes / (timing.median_ms * 1e-3) / 1e9


def measure_peak_tflops(
    device: torch.device,
    dtype: torch.dtype,
    n: int | None = None,
    repeats: int = PEAK_MATMUL_REPEATS,
) -> float:
    """Throughput of a square matmul (n x n by n x n) in `dtype`, in TFLOPS (1e12 FLOPs
    per second): the roofline a compute-bound prefill is held against; the median of
    `repeats` timed matmuls after a warm-up."""
    if n is None:
        n = 8192 if device.type == "cuda" else 1024
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    out = torch.empty(n, n, device=device, dtype=dtype)
    warmup = min(3, max(1, repeats // 5))  # a later, shorter probe: one
    timing = Timer(device).measure(lambda: torch.mm(a, b, out=out), warmup=warmup, repeats=repeats)
    return matmul_flops(n, n, n) / (timing.median_ms * 1e-3) / 1e12


def drift(values: Sequence[float]) -> float | None:
    """How far apart a run's probes of one peak read: the largest over the smallest
    (1.0 for probes that agree), or None with fewer than two positive readings."""
    readings = [v for v in values if isinstance(v, (int, float)) and v > 0]
    return max(readings) / min(readings) if len(readings) >= 2 else None
