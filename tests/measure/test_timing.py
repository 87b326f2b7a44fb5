"""The timing harness's sampling: the median's interval, adaptive repeats and their stops,
and the untimed set-up before each call."""

from __future__ import annotations

import itertools
import math
import os
import time
from dataclasses import replace

import pytest
import torch

from attnbench.measure import timing
from attnbench.measure.stats import (
    CONVERGED,
    OUT_OF_TIME,
    Measurement,
    bootstrap_interval,
    in_run_ratio,
    median,
    median_interval,
)
from attnbench.measure.timing import PROBES, Block, Sampling, Timer, Unit, layout_plan

CPU = torch.device("cpu")


def test_median_interval_uses_the_order_statistics_around_the_median():
    values = list(range(1, 101))  # 1..100, shuffled order must not matter
    values = values[::2] + values[1::2]
    lo, hi = median_interval(values)
    # n = 100: ranks 50 -+ 1.96 * sqrt(100) / 2 = 50 -+ 9.8 -> 40 and 61 (1-based)
    assert (lo, hi) == (40, 61)
    assert median_interval([3.0, 1.0, 2.0]) == (1.0, 3.0)  # few values: all of them


def test_interval_narrows_with_more_samples_and_ci_rel_is_its_larger_side():
    def spread(n: int) -> float:
        # the same distribution, sampled evenly: the interval shrinks like 1/sqrt(n)
        return Measurement([1.0 + (i % 100) / 100 for i in range(n)]).ci_rel

    assert spread(100) > spread(400) > spread(1600)
    m = Measurement([1.0] * 10 + [2.0] * 1)
    lo, hi = median_interval(m.samples_ms)
    assert m.ci_rel == pytest.approx(max(m.median_ms - lo, hi - m.median_ms) / m.median_ms)


def test_fixed_repeats_take_exactly_that_many_samples():
    m = Timer(CPU).sample(lambda: None, Sampling(warmup=1, repeats=7))
    assert len(m.samples_ms) == 7 and m.stop_reason == "repeats"


def test_steady_calls_stop_once_the_interval_is_within_the_target():
    def steady() -> None:
        time.sleep(0.002)  # sleeps overshoot by a fairly steady amount

    m = Timer(CPU).sample(
        steady, Sampling(warmup=1, min_repeats=5, max_time_s=5.0, target_rel_ci=0.25)
    )
    assert m.stop_reason == "target_ci"
    assert m.ci_rel <= 0.25 and len(m.samples_ms) >= 5


def test_noisy_calls_stop_at_the_time_budget():
    lengths = itertools.cycle([0.0005, 0.004])  # half short, half 8x longer

    def noisy() -> None:
        time.sleep(next(lengths))

    started = time.perf_counter()
    m = Timer(CPU).sample(
        noisy, Sampling(warmup=0, min_repeats=5, max_time_s=0.3, target_rel_ci=0.001)
    )
    assert m.stop_reason == "max_time"
    assert m.ci_rel > 0.001
    assert 0.3 <= time.perf_counter() - started < 1.0  # the budget, overrun by one batch at most


def test_sampling_never_passes_its_most_samples():
    m = Timer(CPU).sample(
        lambda: None,
        Sampling(warmup=0, min_repeats=5, max_time_s=60, target_rel_ci=1e-12, max_repeats=40),
    )
    assert len(m.samples_ms) == 40
    assert m.stop_reason in ("max_repeats", "target_ci")


def test_setup_runs_before_every_call_and_is_not_timed():
    log: list[str] = []

    def setup() -> None:
        log.append("setup")
        time.sleep(0.02)

    def call() -> None:
        log.append("call")

    m = Timer(CPU).sample(call, Sampling(warmup=2, repeats=3), setup=setup)
    assert log == ["setup", "call"] * 5  # warm-up calls get it too
    assert max(m.samples_ms) < 10  # the 20 ms set-up is outside every sample


def test_an_infinite_interval_never_counts_as_converged():
    assert math.isinf(Measurement([0.0, 0.0, 0.0]).ci_rel)


def test_interleaved_calls_are_sampled_in_rounds_and_their_ratio_is_per_round():
    """One sample of each call per round, in order; the ratio's i-th sample is the first
    call's i-th over the sum of the others' i-th."""
    order: list[str] = []
    calls = [(lambda name=name: order.append(name), None) for name in "abc"]
    measured = Timer(torch.device("cpu")).sample_interleaved(calls, Sampling(warmup=0, repeats=4))
    assert order == list("abc") * 4
    assert [len(m.samples_ms) for m in measured] == [4, 4, 4]
    ratio = in_run_ratio(measured)
    for i, r in enumerate(ratio.samples_ms):
        a, b, c = (m.samples_ms[i] for m in measured)
        assert r == pytest.approx(a / (b + c))


def test_a_ratio_cancels_a_slow_phase_the_timings_share():
    """A machine that slows down 2x for half the rounds spreads both timings over 2x, but
    not their ratio: the point of timing a step in rounds with its reference."""
    a = Measurement([1.0, 1.0, 2.0, 2.0, 1.0, 2.0])
    b = Measurement([0.5, 0.5, 1.0, 1.0, 0.5, 1.0])
    assert a.noisy and b.noisy
    ratio = in_run_ratio([a, b])
    assert ratio.samples_ms == [2.0] * 6 and not ratio.noisy


def test_units_take_turns_in_a_new_order_each_round_their_calls_together():
    order: list[str] = []

    def unit(*names: str) -> Unit:
        return Unit([(lambda name=name: order.append(name), None) for name in names])

    units = [unit("a", "a2"), unit("b"), unit("c")]
    measured = Timer(torch.device("cpu")).sample_units(units, Sampling(warmup=0, repeats=30))
    assert [[len(m.samples_ms) for m in u] for u in measured] == [[30, 30], [30], [30]]
    rounds = [order[i : i + 4] for i in range(0, len(order), 4)]
    assert len(rounds) == 30
    for calls in rounds:
        assert sorted(calls) == ["a", "a2", "b", "c"]
        assert calls[calls.index("a") + 1] == "a2"  # a unit's calls one after the other
    firsts = {calls[0] for calls in rounds}
    assert firsts == {"a", "b", "c"}  # no unit always runs first
    again: list[str] = []
    order, kept = again, order
    Timer(torch.device("cpu")).sample_units(units, Sampling(warmup=0, repeats=30))
    assert again == kept  # the order is seeded: the same every run


def test_a_short_sample_beside_others_starts_after_its_blocks_untimed_calls(monkeypatch):
    counts = {"short": 0, "other": 0}
    blocks: list[Block] = []
    sized = Timer.block_of

    def spied(self: Timer, *args, **kwargs) -> Block:
        blocks.append(sized(self, *args, **kwargs))
        return blocks[-1]

    def short() -> None:
        counts["short"] += 1

    def other() -> None:
        counts["other"] += 1
        time.sleep(0.002)  # far beyond min_sample_ms: one call a sample, not warmed

    monkeypatch.setattr(Timer, "block_of", spied)
    sampling = Sampling(warmup=0, repeats=5, min_sample_ms=0.2)
    units = [Unit([(short, None)]), Unit([(other, None)])]
    (s,), (o,) = Timer(torch.device("cpu")).sample_units(units, sampling)
    assert s.calls_per_sample > 1 and o.calls_per_sample == 1
    assert blocks[0].warm > s.calls_per_sample and blocks[1] == Block(1)
    assert counts == {
        "short": PROBES + 5 * (blocks[0].warm + s.calls_per_sample),
        "other": PROBES + 5,
    }
    counts["short"] = 0
    (alone,) = Timer(torch.device("cpu")).sample_interleaved([(short, None)], sampling)
    assert counts["short"] == PROBES + 5 * alone.calls_per_sample  # alone: nothing to warm


@pytest.mark.parametrize(
    ("probe_ms", "number", "warm"),
    [(1.01, 2, 8), (0.99, 3, 9), (0.3, 7, 27), (3.0, 1, 3), (9.0, 1, 0)],
)
def test_a_units_first_call_is_warmed_for_a_span_of_time_not_a_count(
    monkeypatch, probe_ms: float, number: int, warm: int
):
    """A step near a block's threshold (2 calls of 1.01 ms, 3 of 0.99 ms, for 2 ms a
    sample) is warmed after a switch from another unit for the same span of time,
    WARM_BELOW x 2 ms, not for as many calls as it times: counted, its first calls after
    the switch weighed 15% more in blocks of 2 than of 3. A later call of the unit finds
    the unit's own buffers and is warmed by count; alone, nothing is warmed."""
    timer = Timer(torch.device("cpu"))
    monkeypatch.setattr(timer, "time_blocks", lambda *args, **kwargs: [probe_ms] * PROBES)
    sampling = Sampling(min_sample_ms=2.0)
    switched = timer.block_of(lambda: None, sampling, None, interleaved=True, switched=True)
    assert switched == Block(number, warm)
    counted = Block(number, number if warm else 0)
    assert timer.block_of(lambda: None, sampling, None, interleaved=True) == counted
    assert timer.block_of(lambda: None, sampling, None) == Block(number)


def test_sampling_in_turn_stops_on_the_width_it_is_given():
    units = [Unit([(lambda: None, None)]), Unit([(lambda: None, None)])]
    sampling = Sampling(warmup=0, min_repeats=5, max_time_s=30.0)
    timer = Timer(torch.device("cpu"))
    done = timer.sample_units(units, sampling, width=lambda measured: 0.0)
    assert [len(u[0].samples_ms) for u in done] == [5, 5]
    assert done[0][0].stop_reason == CONVERGED
    started = time.perf_counter()
    slow = [Unit([(lambda: time.sleep(0.001), None)]) for _ in range(2)]
    late = timer.sample_units(slow, sampling, width=lambda measured: 1.0, max_time_s=0.2)
    assert late[0][0].stop_reason == OUT_OF_TIME and time.perf_counter() - started < 5
    assert len(late[0][0].samples_ms) == len(late[1][0].samples_ms) > 5


def test_bootstrap_interval_is_seeded_and_holds_the_median():
    values = [1.0, 1.1, 0.9, 1.05, 0.95, 1.2, 0.8, 1.0, 1.02, 0.98]
    lo, hi = bootstrap_interval(values)
    assert lo <= median(values) <= hi and lo < hi
    assert bootstrap_interval(values) == (lo, hi)
    narrow = bootstrap_interval(values * 10)
    assert narrow[1] - narrow[0] < hi - lo


def test_a_fixed_count_splits_into_equal_layouts_and_adaptive_sampling_adds_layouts():
    """(least layouts, rounds each, most layouts)."""
    assert layout_plan(Sampling(repeats=20, layouts=4, max_layouts=16)) == (4, 5, 4)
    assert layout_plan(Sampling(repeats=6, layouts=4, max_layouts=16)) == (1, 6, 1)
    assert layout_plan(Sampling(repeats=22, layouts=4, max_layouts=16)) == (2, 11, 2)
    assert layout_plan(Sampling(min_repeats=20, layouts=4, max_layouts=16)) == (4, 5, 16)
    assert layout_plan(Sampling(min_repeats=5, layouts=4, max_layouts=16)) == (4, 5, 16)
    assert layout_plan(Sampling(min_repeats=7)) == (1, 7, 1)


def test_each_layout_is_built_afresh_after_the_last_is_dropped_and_sampled_in_turn():
    built, alive = [], []

    class Buffer:
        def __init__(self, layout: int) -> None:
            self.layout = layout
            alive.append(layout)

        def __del__(self) -> None:
            alive.remove(self.layout)

    def build(layout: int) -> list[Unit]:
        built.append((layout, list(alive)))
        buffers = [Buffer(layout) for _ in range(2)]
        return [Unit([(lambda b=b: b, None)]) for b in buffers]

    timer = Timer(CPU)
    fixed = Sampling(repeats=15, layouts=3, max_layouts=8)
    done = timer.sample_layouts(build, fixed)
    assert [layout for layout, _ in built] == [0, 1, 2]
    assert all(not before for _, before in built)  # nothing of the last layout was alive
    assert [len(u[0].samples_ms) for u in done] == [15, 15]
    assert done[0][0].layouts == 3 and done[0][0].stop_reason == "repeats"
    built.clear()
    adaptive = Sampling(min_repeats=10, layouts=2, max_layouts=5, max_time_s=30.0)
    wide = timer.sample_layouts(build, adaptive, width=lambda measured: 1.0)
    assert len(built) == 5 and wide[0][0].layouts == 5 and len(wide[0][0].samples_ms) == 25
    built.clear()
    narrow = timer.sample_layouts(build, adaptive, width=lambda measured: 0.0)
    assert len(built) == 2 and narrow[0][0].stop_reason == CONVERGED


def test_layouts_stop_before_one_that_would_not_fit_the_time_left(monkeypatch):
    """A layout's 5 rounds take 0.1 s and building a later one 0.05 s, of a 0.45 s budget
    (a clock that moves as calls run and layouts are built): the fourth would end past
    it, at the mean cost of the three taken. The first layout's building (its copies: a
    second here) is not counted."""
    clock = [0.0]
    monkeypatch.setattr(timing.time, "perf_counter", lambda: clock[0])

    def call() -> None:
        clock[0] += 0.02

    def build(layout: int) -> list[Unit]:
        clock[0] += 0.05 if layout else 1.0
        return [Unit([(call, None)])]

    sampling = Sampling(min_repeats=5, layouts=2, max_layouts=100, max_time_s=0.45)
    done = Timer(CPU).sample_layouts(build, sampling, width=lambda measured: 1.0)
    assert (done[0][0].stop_reason, done[0][0].layouts) == (OUT_OF_TIME, 3)
    assert clock[0] == pytest.approx(1.0 + 0.1 + 2 * 0.15)
    clock[0] = 0.0
    short = replace(sampling, max_time_s=0.15)  # the first layout's rounds are most of it
    assert Timer(CPU).sample_layouts(build, short, width=lambda m: 1.0)[0][0].layouts == 1
    clock[0] = 0.0
    floor = replace(short, min_repeats=12)  # 6 rounds a layout: the floor wants 2
    done = Timer(CPU).sample_layouts(build, floor, width=lambda m: 1.0)[0][0]
    assert (done.layouts, len(done.samples_ms), done.stop_reason) == (2, 12, OUT_OF_TIME)


def test_a_rotating_call_runs_each_copy_in_turn():
    """Every call runs the next copy; with set-ups, the set-up moves on and prepares the
    copy the call then runs; `start` begins part of the way round. One copy is itself."""
    ran: list[str] = []
    plain = [(lambda i=i: ran.append(f"call {i}"), None) for i in range(3)]
    call, setup = timing.rotating(plain)
    assert setup is None
    for _ in range(4):
        call()
    assert ran == ["call 1", "call 2", "call 0", "call 1"]
    ran.clear()
    prepared = [
        (lambda i=i: ran.append(f"call {i}"), lambda i=i: ran.append(f"setup {i}"))
        for i in range(2)
    ]
    call, setup = timing.rotating(prepared, start=1)
    for _ in range(2):
        setup()
        call()
    assert ran == ["setup 0", "call 0", "setup 1", "call 1"]
    assert timing.rotating(plain[:1]) is plain[0]


class Clock:
    """Wall, process and host busy seconds a test moves by hand."""

    def __init__(self) -> None:
        self.wall, self.own, self.busy = 100.0, 10.0, 1000.0

    def run(self, wall: float, own: float, others: float) -> None:
        self.wall, self.own, self.busy = self.wall + wall, self.own + own, self.busy + own + others


@pytest.fixture
def clock(monkeypatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(timing.time, "perf_counter", lambda: clock.wall)
    monkeypatch.setattr(timing.time, "process_time", lambda: clock.own)
    monkeypatch.setattr(timing, "_busy_seconds", lambda cpus: clock.busy)
    monkeypatch.setattr(timing, "_usable_cpus", lambda: [0, 1])
    return clock


@pytest.mark.parametrize(
    ("threads", "own", "others", "share"),
    [
        (2, 4.0, 0.0, 1.0),  # its two threads had both CPUs
        (2, 3.0, 0.0, 1.0),  # a parallel region's idle thread: no other process took it
        (2, 2.0, 2.0, 0.5),  # a neighbour held one CPU throughout
        (2, 0.4, 3.6, 0.1),  # ... nearly both
        (4, 4.0, 0.0, 1.0),  # more threads than CPUs: what two CPUs could give
        (4, 2.0, 2.0, 0.5),
        (2, 4.0, 0.3, 0.925),  # the hypervisor's steal, counted as busy, is another's
        (1, 1.0, 2.0, 0.5),  # one thread: its own CPU time over the wall time, 1 of 2 s
    ],
)
def test_the_cpu_share_of_many_threads_is_what_other_processes_left_them(
    clock, threads, own, others, share
):
    torch_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        probe = timing.CpuShare(torch.device("cpu"))
    finally:
        torch.set_num_threads(torch_threads)
    clock.run(wall=2.0, own=own if threads > 1 else 1.0, others=others)
    assert probe.share() == pytest.approx(share)


def test_no_many_thread_share_over_a_short_wall_or_without_the_hosts_busy_time(clock, monkeypatch):
    torch_threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        short = timing.CpuShare(torch.device("cpu"))
        clock.run(wall=0.2, own=0.01, others=0.39)  # held nearly throughout, but 0.2 s
        assert short.share() is None
        monkeypatch.setattr(timing, "_busy_seconds", lambda cpus: None)
        unread = timing.CpuShare(torch.device("cpu"))
        clock.run(wall=2.0, own=0.1, others=3.9)
        assert unread.share() is None
    finally:
        torch.set_num_threads(torch_threads)
    assert timing.CpuShare(torch.device("meta")).share() is None  # not a CPU


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="reads Linux's /proc/stat")
def test_the_hosts_busy_seconds_count_its_cpus_and_only_those():
    cpus = timing._usable_cpus()
    before = timing._busy_seconds(cpus)
    deadline = time.perf_counter() + 0.1
    while time.perf_counter() < deadline:
        pass
    after = timing._busy_seconds(cpus)
    assert before is not None and after >= before + 0.05  # this loop's 0.1 s, 10 ms ticks
    assert timing._busy_seconds([*cpus, 100_000]) is None  # a CPU /proc/stat lacks
