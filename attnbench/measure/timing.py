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
import os
import random
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace

import torch

from ..model.formulas import matmul_flops
from .stats import (
    CONVERGED,
    FIXED,
    MOST_SAMPLES,
    OUT_OF_TIME,
    Measurement,
    in_run_ratio,
)

#: The most consecutive calls one sample times.
MAX_BLOCK = 10_000
#: Calls timed alone to size a block of calls; the block is sized by the fastest.
PROBES = 3
#: A call to time and the set-up that runs, untimed, before each of its samples (or None).
TimedCall = tuple[Callable[[], object], Callable[[], object] | None]


def rotating(copies: Sequence[TimedCall], start: int = 0) -> TimedCall:
    """One (call, setup) over copies of a call, each on buffers of its own: every call
    runs the next copy (after its set-up, where it has one: each sample is then one call,
    see Timer.block_of), from copy `start` on, so that a copy is touched again only after
    all the others. The one call itself when there is one copy."""
    if len(copies) == 1:
        return copies[0]
    at = [start % len(copies)]

    def advance() -> int:
        at[0] = (at[0] + 1) % len(copies)
        return at[0]

    if copies[0][1] is None:
        return (lambda: copies[advance()][0]()), None
    return (lambda: copies[at[0]][0]()), (lambda: copies[advance()][1]())  # type: ignore[misc]


#: A sample interleaved with others is preceded by untimed calls when it spans less than
#: this many times `min_sample_ms`; a unit's first call, by calls spanning that long
#: (see Timer.block_of).
WARM_BELOW = 4


@dataclass(frozen=True)
class Block:
    """One sample's calls: `number` consecutive calls timed together, after `warm`
    untimed ones."""

    number: int = 1
    warm: int = 0


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
    #: Memory layouts to sample over where the caller can build them anew
    #: (Timer.sample_layouts): at least `layouts`, adaptively up to `max_layouts`.
    layouts: int = 1
    max_layouts: int = 1


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
        set-up (after its block's `warm` untimed calls): the samples of each call of
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
                            for _ in range(block.warm):
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
        switched: bool = False,
    ) -> Block:
        """How one sample of `call` is taken. Its calls: enough to span `min_sample_ms`
        (from the fastest of PROBES calls), or one where something must happen between
        calls (a set-up, an L2 flush); the count `sampling` fixes, if any. `interleaved`
        with other calls, a call finds the caches holding what ran before it, and the
        first calls after a switch are slower than the rest: a sample spanning under
        WARM_BELOW x `min_sample_ms` is then preceded by as many untimed calls. The first
        call of a unit sampled in turn with other units (`switched`: it finds their
        buffers in the caches, not its own) is preceded by untimed calls spanning at least
        WARM_BELOW x `min_sample_ms`, since the caches refill for milliseconds, not for a
        count of calls: a step the probe puts near a block's threshold is then timed
        alike in blocks of 2 calls or 3. A long call pays its own start; a flushed L2 is
        cold on purpose."""
        if sampling.calls_per_sample is not None:
            return Block(sampling.calls_per_sample)
        if sampling.min_sample_ms <= 0 or setup is not None or self._flush_buffer is not None:
            return Block(1)
        probe = max(min(self.time_blocks(call, PROBES, 1)), 1e-6)  # the fastest: no stall
        number = max(1, min(math.ceil(sampling.min_sample_ms / probe), MAX_BLOCK))
        span = WARM_BELOW * sampling.min_sample_ms
        if not interleaved or number * probe >= span:
            return Block(number)
        return Block(number, min(math.ceil(span / probe), MAX_BLOCK) if switched else number)

    def warm_up(
        self, units: Sequence[Unit], sampling: Sampling, sized: bool = True
    ) -> list[list[Block]]:
        """Every call of `units` warmed up (`sampling.warmup` calls, inside its unit's
        context) and, when `sized`, its block sized right after (block_of) as units sampled
        in turn take them: interleaved when there is more than one call in all, a unit's
        first call `switched` when there is more than one unit. The blocks ([] unsized)."""
        interleaved = sum(len(unit.calls) for unit in units) > 1
        switching = len(units) > 1
        blocks = []
        for unit in units:
            with unit.entered():
                for call, setup in unit.calls:
                    self.time_blocks(call, sampling.warmup, 1, setup)
                if sized:
                    blocks.append(
                        [
                            self.block_of(c, sampling, s, interleaved, switching and not i)
                            for i, (c, s) in enumerate(unit.calls)
                        ]
                    )
        return blocks

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
        calls' cost. The units are sampled in the one memory layout they were built in."""
        one = replace(sampling, layouts=1, max_layouts=1)
        return self.sample_layouts(lambda layout: units, one, width, max_time_s, seed)

    def sample_layouts(
        self,
        build: Callable[[int], Sequence[Unit]],
        sampling: Sampling,
        width: Callable[[list[list[Measurement]]], float] | None = None,
        max_time_s: float | None = None,
        seed: int = 0,
    ) -> list[list[Measurement]]:
        """`sample_units` over several memory layouts, one after another: `build(i)`
        allocates the i-th layout's units afresh (weights, inputs, caches), after the
        previous layout's are dropped. Rounds within one process share where its buffers
        landed, and the next process's land elsewhere: sampling layouts puts that
        variation in the samples (see layout_plan for how many, and
        stats.next_run_interval for the interval it gives). Each layout takes the same
        number of rounds, so its samples are the measurement's consecutive equal chunks."""
        collecting = gc.isenabled()
        gc.disable()
        try:
            if max_time_s is not None:
                sampling = replace(sampling, max_time_s=max_time_s)
            rounds = _Rounds(self, sampling, random.Random(seed))
            return rounds.run(build, width or _widest_unit)
        finally:
            if collecting:
                gc.enable()


#: The fewest rounds one memory layout takes.
MIN_LAYOUT_ROUNDS = 5


def layout_plan(sampling: Sampling) -> tuple[int, int, int]:
    """How a sampling spans memory layouts: (the least layouts, rounds per layout, the
    most layouts). A fixed count of rounds is split into as many layouts of equal rounds
    (at least MIN_LAYOUT_ROUNDS each) as `layouts` allows, else taken in one; adaptive
    sampling takes `layouts` layouts of enough rounds for `min_repeats` in all, then more
    layouts up to `max_layouts`. One layout: rounds are added as the interval asks."""
    if sampling.repeats is not None:
        fits = [
            n
            for n in range(1, max(sampling.layouts, 1) + 1)
            if sampling.repeats % n == 0 and sampling.repeats // n >= MIN_LAYOUT_ROUNDS
        ]
        count = max(fits, default=1)
        return count, sampling.repeats // count, count
    least = max(sampling.layouts, 1)
    if least == 1 and sampling.max_layouts <= 1:
        return 1, sampling.min_repeats, 1
    rounds = max(MIN_LAYOUT_ROUNDS, math.ceil(sampling.min_repeats / least))
    return least, rounds, max(least, sampling.max_layouts)


class _Rounds:
    """The samples of one sampling (Timer.sample_layouts), as they are taken."""

    def __init__(self, timer: Timer, sampling: Sampling, order: random.Random) -> None:
        self.timer, self.sampling, self.order = timer, sampling, order
        self.samples: list[list[list[float]]] = []
        self.blocks: list[list[Block]] = []
        self.layouts = 0

    def run(
        self,
        build: Callable[[int], Sequence[Unit]],
        width: Callable[[list[list[Measurement]]], float],
    ) -> list[list[Measurement]]:
        least, rounds, most = layout_plan(self.sampling)
        units = self.start(build, 0)
        if not units:
            return []
        if most == 1:
            return self.one_layout(units, width)
        started = time.perf_counter()  # the first layout built: its copies are not sampling
        while True:
            self.more(units, rounds)
            self.layouts += 1
            stop = self.stop(width, time.perf_counter() - started, least, most)
            if stop is not None:
                return self.measured(stop)
            del units  # the previous layout's buffers go before the next one's come
            units = self.start(build, self.layouts)

    def stop(
        self,
        width: Callable[[list[list[Measurement]]], float],
        spent: float,
        least: int,
        most: int,
    ) -> str | None:
        """Why to take no further layout, or None: a fixed count is taken; `least` layouts
        are and the interval is narrow enough; the next layout (at the mean cost of those
        taken, its allocation and warm-up included; `spent` is the time since the first
        was built) would not fit the time left, even short of `least` (not short of
        min_repeats rounds); or the most layouts or samples are taken."""
        sampling = self.sampling
        if sampling.repeats is not None:
            return FIXED if self.layouts >= most else None
        if self.layouts >= least and width(self.measured(FIXED)) <= sampling.target_rel_ci:
            return CONVERGED
        short = len(self.samples[0][0]) < sampling.min_repeats  # a floor under the time
        if not short and spent * (self.layouts + 1) / self.layouts > sampling.max_time_s:
            return OUT_OF_TIME
        if self.layouts >= most or len(self.samples[0][0]) >= sampling.max_repeats:
            return MOST_SAMPLES
        return None

    def start(self, build: Callable[[int], Sequence[Unit]], layout: int) -> Sequence[Unit]:
        """Layout `layout`'s units, built and warmed up; the first layout's also sizes
        every call's block (the later layouts keep them, so that every sample spans as
        many calls)."""
        units = build(layout)
        first = not self.layouts
        blocks = self.timer.warm_up(units, self.sampling, sized=first)
        if first:
            self.blocks = blocks
            self.samples = [[[] for _ in unit.calls] for unit in units]
        return units

    def more(self, units: Sequence[Unit], count: int) -> None:
        new = self.timer.time_rounds(units, self.blocks, count, self.order)
        for unit_taken, unit_new in zip(self.samples, new, strict=True):
            for taken, added in zip(unit_taken, unit_new, strict=True):
                taken += added

    def measured(self, stop: str) -> list[list[Measurement]]:
        layouts = max(self.layouts, 1)
        return [
            [
                Measurement(s, stop, b.number, layouts=layouts)
                for s, b in zip(unit, unit_blocks, strict=True)
            ]
            for unit, unit_blocks in zip(self.samples, self.blocks, strict=True)
        ]

    def one_layout(
        self, units: Sequence[Unit], width: Callable[[list[list[Measurement]]], float]
    ) -> list[list[Measurement]]:
        """Rounds in one layout: a fixed count, or adaptively (see Sampling)."""
        sampling = self.sampling
        if sampling.repeats is not None:
            self.more(units, sampling.repeats)
            return self.measured(FIXED)
        started = time.perf_counter()
        self.more(units, sampling.min_repeats)
        while True:
            taken, spent = len(self.samples[0][0]), time.perf_counter() - started
            if width(self.measured(FIXED)) <= sampling.target_rel_ci:
                return self.measured(CONVERGED)
            if spent >= sampling.max_time_s:
                return self.measured(OUT_OF_TIME)
            if taken >= sampling.max_repeats:
                return self.measured(MOST_SAMPLES)
            # the next batch: up to half as many again, within the time left
            left = int((sampling.max_time_s - spent) / max(spent / taken, 1e-9)) + 1
            self.more(units, min(max(taken // 2, 1), left, sampling.max_repeats - taken))


def _widest_unit(units: list[list[Measurement]]) -> float:
    """The widest relative interval over the units (see `_ci_rel`)."""
    return max(_ci_rel(unit) for unit in units)


def _ci_rel(measurements: list[Measurement]) -> float:
    """What adaptive sampling converges: the first measurement's interval and, with
    others beside it, that of its ratio to their sum."""
    if len(measurements) == 1:
        return measurements[0].ci_rel
    return max(measurements[0].ci_rel, in_run_ratio(measurements).ci_rel)


class CpuShare:
    """How much of the CPU time its threads needed this process had, over the wall time
    since it was made (at most 1); the rest another process held (a busy neighbour, a
    hypervisor's steal), which slows every sample alike and so shows in no spread.

    On one thread: the process's CPU time over the wall time. On more (Linux): the CPUs
    the process may run on, less what other processes and the hypervisor took of them
    (/proc/stat's busy and steal time, less this process's own), over what its threads
    could use; a parallel region's idle threads count as the process's, since no other
    process took their CPU. None on a GPU, where the host waits for the device, where
    /proc/stat cannot be read, and over under MIN_WALL_S (its clock ticks 10 ms apart)."""

    #: The shortest wall time a many-thread share is read over.
    MIN_WALL_S = 0.5

    def __init__(self, device: torch.device) -> None:
        self.threads = torch.get_num_threads() if device.type == "cpu" else 0
        self.cpus = _usable_cpus()
        self.busy = _busy_seconds(self.cpus) if self.threads > 1 else None
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def share(self) -> float | None:
        wall = time.perf_counter() - self.wall
        own = time.process_time() - self.cpu
        if self.threads == 1 and wall > 0:
            return min(own / wall, 1.0)
        busy = _busy_seconds(self.cpus) if self.busy is not None else None
        if busy is None or self.busy is None or wall < self.MIN_WALL_S:
            return None
        others = max(busy - self.busy - own, 0.0)
        left = len(self.cpus) * wall - others
        return min(max(left / (min(self.threads, len(self.cpus)) * wall), 0.0), 1.0)


#: /proc/stat's fields after the CPU's name: user, nice, system, idle, iowait, irq,
#: softirq, steal (then guest time, already in user). Busy: all but idle and iowait.
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)


def _usable_cpus() -> list[int]:
    """The CPUs this process may run on (all of them where the OS cannot say)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def _busy_seconds(cpus: Sequence[int]) -> float | None:
    """The seconds `cpus` have run anything since boot, steal included (/proc/stat), or
    None where it cannot be read."""
    wanted = {f"cpu{c}" for c in cpus}
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            lines = [fields for line in stat if (fields := line.split())[0] in wanted]
        if len(lines) != len(wanted):  # a CPU it does not list: no share rather than 1
            return None
        ticks = sum(int(fields[1 + i]) for fields in lines for i in _BUSY_FIELDS)
        return ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


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
