"""The regression gate: compare two result documents row by row and metric by metric.

Each field of a record has the kind its record type declares (records.py): rows are
matched on their `key` fields, and every metric of a matched row gets a verdict under the
rule of its kind:

- exact (parameter counts, analytic bytes, FLOPs): any change, either way, is a regression;
- measured memory: a change beyond max(1 MiB, the memory threshold) regresses or improves;
- counts (CPU instructions): a change beyond the count threshold (1%) either way is a
  verdict;
- timings and in-run ratios: a change needs an effect beyond the time threshold, evidence
  and (timings) more than 5 us;
  an effect without evidence is `inconclusive`. With raw samples on both sides (independent
  draws of one quantity: fixed-context timing), the evidence is a seeded bootstrap bound
  of the ratio of medians beyond the threshold (resampling the record's memory layouts,
  then the rounds of each, when it spans several: a layout's rounds share where its
  buffers landed, which the other run's do not). Without them, p25..p75 intervals that do
  not overlap, and an effect beyond 3 x the relative IQR too. Every gated timing of a
  record (a decode row's step, prefill and generation) is judged with its own percentiles
  and raw samples;
- a timing sampled while another process held the CPU (a `cpu_share` under 80% on
  either side, which the record's status calls noisy) is at most `inconclusive`: what a
  neighbour did to it, one run's rounds cannot tell from what the code did;
- a point's status (`judge_status`): a row that is `wrong: ...` now (its output disagrees
  with the reference) and was not is a regression, in any environment, like an exact
  metric; one that ran in the baseline and is `unsupported: ...` now is a regression too
  (a provider that stops taking a point has lost coverage, and an unexpected error in a
  provider reads as a refusal), gated like a timing since what a kernel takes depends on
  the environment. The reverse changes are improvements. Such rows carry no timings: their
  timing metrics are `missing` (or `new`) beside the status verdict. A row with the same
  kind of status in both files (wrong in both, unsupported in both) gets no status
  verdict; an `oom` or `skipped` point keeps showing as its `missing` metrics.

Timings, in-run ratios and counts are gated only between runs of one machine: the same
device model, library versions and threads (`GATING_ENV_FIELDS`). The peaks each run
measured of its machine (copy bandwidth, matmul throughput) are no part of its identity:
on a shared machine they move with the load from one run to the next. A peak that moved
is that noise, and timings are judged against it: their threshold widens to the peak's
move (`Mismatch.rule`). In-run ratios and counts keep their threshold: a ratio's two
timings shared the load, and a count does not see it. In a merged study (study.merge)
each row is held to the environment of the share that ran it.

A run also probes its peaks after its timed points (`peak_gbps_probes`,
`peak_tflops_probes`: the probe before them, then the one after). When one run's probes
read further apart than the time threshold (measure.timing.drift, the one measure of it
the run's own summary and predict use too), the host's speed moved during that run: its
timings hold for neither moment, so the gate cannot say they moved by less than the
threshold. Such a move is the load as well and gets the rule of a move between the runs
(the timings' threshold widens to it); and no timing of such a run is `unchanged`: what
the widened threshold leaves unchanged is `inconclusive` (`Mismatch.unsettle`). A run
that probed once (an older file) is compared as before. Exact metrics, memory, in-run
ratios and counts are not affected.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from enum import Enum
from typing import Any

import numpy as np

from ..errors import UsageError, brief
from ..measure.stats import BUSY_CPU_SHARE, Measurement, bootstrap_bounds, bootstrap_medians
from ..model.units import ratio_text
from ..records import SAMPLED, Kind, Status, gated_timing, ratio_against
from ..study.documents import Document, hashable, is_number, kinds_of
from ..study.output import SCHEMA_VERSION
from ..study.sections import record_type
from .rules import GATING_ENV_FIELDS, PEAK_FIELDS, Thresholds

#: The kinds of metric that get a verdict.
GATED = (Kind.EXACT, Kind.MEMORY, Kind.TIMING, Kind.RATIO, Kind.COUNT)
#: The info field that says what counts were measured with: counts by different counters
#: (valgrind versions) are not compared. What an in-run ratio was taken against is
#: declared with the ratio (records.ratio_against): ratios to different references are
#: not compared either.
COUNTED_WITH = "instructions_counter"
#: The range of a timing (ms) or an in-run ratio the gate takes, besides 0 (a point that
#: measured nothing: a verdict of its own). Far beyond any measurement on either side, and
#: narrow enough that no ratio, sum or logarithm of two such values overflows or loses its
#: precision in a subnormal float.
MEASURED_RANGE = (1e-9, 1e9)


def is_measured(value: Any) -> bool:
    """Whether `value` can be a timing or a ratio of two: a number within MEASURED_RANGE
    (not None, NaN or a boolean)."""
    return is_number(value) and MEASURED_RANGE[0] <= value <= MEASURED_RANGE[1]


def ratio_of(cur: float, base: float) -> float | None:
    """cur / base, or None when base is 0 or the quotient is not a finite number."""
    ratio = cur / base if base else math.inf
    return ratio if math.isfinite(ratio) else None


class Verdict(str, Enum):
    REGRESSED = "regressed"
    INCOMPARABLE = "incomparable"
    MISSING = "missing"
    INCONCLUSIVE = "inconclusive"
    IMPROVED = "improved"
    NEW = "new"
    UNCHANGED = "unchanged"


#: Display order, most severe first (the member order above).
SEVERITY = {v: i for i, v in enumerate(Verdict)}


# --- verdicts ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Judgement:
    """One metric's verdict. `ratio` is current / baseline; `interval` bounds it."""

    verdict: Verdict
    reason: str
    ratio: float | None = None
    interval: tuple[float, float] | None = None
    evidence: str | None = None


def judge_exact(base: float, cur: float) -> Judgement:
    if base == cur:
        return Judgement(Verdict.UNCHANGED, "equal", 1.0 if base else None)
    delta = cur - base
    change = f"{delta:+,}" if float(delta).is_integer() else f"{delta:+,.6g}"
    return Judgement(Verdict.REGRESSED, f"exact metric changed by {change}", ratio_of(cur, base))


def judge_count(base: float, cur: float, th: Thresholds) -> Judgement:
    """A count up by more than the count threshold regresses; down by as much improves.
    One of no ratio to the baseline (a baseline of 0) is judged as an exact metric."""
    ratio = ratio_of(cur, base)
    if ratio is None:
        return judge_exact(base, cur)
    change = f"{cur - base:+,.0f} ({ratio - 1:+.2%})"
    limit = f"{th.count * 100:g}%"
    if ratio > 1 + th.count:
        return Judgement(Verdict.REGRESSED, f"{change} is above +{limit}", ratio)
    if ratio < 1 - th.count:
        return Judgement(Verdict.IMPROVED, f"{change} is beyond -{limit}", ratio)
    return Judgement(Verdict.UNCHANGED, f"{change} is within {limit}", ratio)


def judge_memory(base: float, cur: float, th: Thresholds) -> Judgement:
    """An increase beyond max(1 MiB, mem x baseline) regresses; a like decrease improves."""
    limit = max(th.mem_floor_bytes, th.mem * abs(base))
    delta = cur - base
    ratio = ratio_of(cur, base)
    change = f"{delta / 2**20:+.2f} MiB"
    if delta > limit:
        return Judgement(Verdict.REGRESSED, f"{change} is above {limit / 2**20:.2f} MiB", ratio)
    if -delta > limit:
        return Judgement(Verdict.IMPROVED, f"{change} is beyond {limit / 2**20:.2f} MiB", ratio)
    return Judgement(Verdict.UNCHANGED, f"{change} is within {limit / 2**20:.2f} MiB", ratio)


def bootstrap_ratio_interval(
    base: Sequence[float],
    cur: Sequence[float],
    th: Thresholds,
    layouts: tuple[int, int] = (1, 1),
) -> tuple[float, float] | None:
    """Two one-sided `confidence` bounds on median(cur) / median(base), from a seeded
    percentile bootstrap that resamples each side (over its memory `layouts`, base's and
    cur's, and the rounds of each: stats.bootstrap_medians); None when a resampled median
    is not above 0 (samples of 0 ms): no ratio, or one of 0, which no speed-up reads."""
    rng = np.random.default_rng(th.seed)
    cur_medians = bootstrap_medians(cur, rng, th.resamples, layouts[1])
    base_medians = bootstrap_medians(base, rng, th.resamples, layouts[0])
    if min(cur_medians.min(), base_medians.min()) <= 0:
        return None
    return bootstrap_bounds(cur_medians / base_medians, 1 - th.confidence, th.confidence)


#: The evidence of a timing without raw samples: its p25..p75 interval.
INTERVALS = "p25..p75"
#: Fewer raw samples than this make a bootstrap meaningless; fall back to p25..p75.
MIN_BOOTSTRAP_SAMPLES = 5


def _evidence(
    base: Measurement, cur: Measurement, th: Thresholds
) -> tuple[tuple[float, float] | None, str | None]:
    """An interval on the ratio and how it was made: a bootstrap over the samples, else
    (too few samples, or some of 0 ms) the ratio range the p25..p75 intervals allow (it
    excludes 1 exactly when they don't overlap), when none of them is 0 either."""
    if min(len(base.samples_ms), len(cur.samples_ms)) >= MIN_BOOTSTRAP_SAMPLES:
        layouts = (base.layouts, cur.layouts)
        interval = bootstrap_ratio_interval(base.samples_ms, cur.samples_ms, th, layouts)
        if interval is not None:
            return interval, "bootstrap"
    quartiles = (base.p25_ms, base.p75_ms, cur.p25_ms, cur.p75_ms)
    if None not in quartiles and min(quartiles) > 0:
        return (cur.p25_ms / base.p75_ms, cur.p75_ms / base.p25_ms), INTERVALS
    return None, None


def timing_rule(kind: Kind, th: Thresholds) -> Thresholds:
    """The thresholds a timing or an in-run ratio is judged with: a ratio has no unit, so
    no floor in microseconds under its change."""
    return th if kind is Kind.TIMING else replace(th, time_floor_ms=0.0)


def judge_timing(base: Measurement, cur: Measurement, th: Thresholds) -> Judgement:
    """Regressed (or improved) needs the effect, the evidence and the absolute floor; an
    effect the noise or the missing evidence cannot support is inconclusive. Slowdowns and
    speedups are judged symmetrically on the ratio's log scale. A current median that is not
    a positive time fails (the measurement is broken); such a baseline is inconclusive.
    The evidence (a bootstrap, the costly part) is only drawn for an effect the floor and
    the threshold leave open: an unchanged verdict they settle carries no interval."""
    b, c = base.median_ms, cur.median_ms
    if not (math.isfinite(c) and c > 0):  # the head measured nothing
        reason = f"the current median is {c:g} ms: a time must be above 0"
        return Judgement(Verdict.REGRESSED, reason)
    if not (math.isfinite(b) and b > 0):
        reason = f"the baseline median is {b:g} ms: nothing to compare against"
        return Judgement(Verdict.INCONCLUSIVE, reason)
    below_floor = abs(c - b) <= th.time_floor_ms
    settled = _settled_by_effect(c / b, th, below_floor=below_floor)
    if settled is not None:
        return settled
    interval, evidence = _evidence(base, cur, th)
    # Raw samples are independent draws of one quantity (fixed-context timing): the
    # bootstrap bound weighs their noise. Without them the IQR is all there is to go by.
    spread = None if evidence == "bootstrap" else max(base.rel_iqr, cur.rel_iqr)
    return judge_effect(
        c / b,
        interval,
        evidence,
        th,
        below_floor=below_floor,
        spread=spread,
        without_interval="no samples or p25..p75 to test it",
    )


def times(ratio: float) -> str:
    """A ratio of times (current / baseline) in words, never a 'slower' below 1:
    1.25 -> '1.25x slower', 0.8 -> '1.25x faster', 1.0 -> 'the same'. Two decimals, three
    where two would read 1.00x."""
    if ratio == 1:
        return "the same"
    change, word = (ratio, "slower") if ratio > 1 else (1 / ratio, "faster")
    text = f"{change:.2f}"
    return f"{change:.3f}x {word}" if text == "1.00" else f"{text}x {word}"


def span(lo: float, hi: float) -> str:
    """Bounds on a ratio of times in words, the smaller change first when both are on one
    side: '1.12x to 1.35x slower', '1.05x to 1.20x faster'; the faster end first when they
    are not: '1.05x faster to 1.09x slower'."""
    if lo >= 1:
        return f"{times(lo).removesuffix(' slower')} to {times(hi)}"
    if hi <= 1:
        return f"{times(hi).removesuffix(' faster')} to {times(lo)}"
    return f"{times(lo)} to {times(hi)}"


#: What starts the reason of an effect the evidence does not support.
NOT_RESOLVED = "not resolved"


def _settled_by_effect(ratio: float, th: Thresholds, *, below_floor: bool) -> Judgement | None:
    """The verdict on a timing ratio that needs no evidence: unchanged under the absolute
    floor or within the threshold; None for an effect beyond them."""
    if below_floor:
        reason = f"the medians differ by under {th.time_floor_ms * 1000:g} us"
        return Judgement(Verdict.UNCHANGED, reason, ratio)
    if max(ratio, 1 / ratio) <= 1 + th.time:
        return Judgement(Verdict.UNCHANGED, f"{times(ratio)}, within {_threshold(th)}", ratio)
    return None


def _threshold(th: Thresholds) -> str:
    return f"the {1 + th.time:.2f}x threshold"


def judge_effect(
    ratio: float,
    interval: tuple[float, float] | None,
    evidence: str | None,
    th: Thresholds,
    *,
    below_floor: bool,
    spread: float | None,
    without_interval: str,
) -> Judgement:
    """The verdict on a timing ratio (current / baseline) and its evidence, by the timing
    rule: unchanged under the floor or within the threshold; inconclusive within
    `noise_factor` x `spread` (the larger relative IQR, when no bootstrap weighs the
    noise) or without an `interval` (`without_interval` says why); else regressed or
    improved when the interval supports it: both confidence bounds of a bootstrap beyond
    the threshold on the same side, or p25..p75 intervals apart (`evidence` 'p25..p75').

    Every reason reads the ratio in words, a ratio below 1 as faster ('1.02x faster,
    within the 1.10x threshold'), and the bounds too ('1.35x slower; 99% bounds 1.20x to
    1.50x slower, beyond the 1.10x threshold'); an inconclusive one says 'not resolved'
    and why."""
    settled = _settled_by_effect(ratio, th, below_floor=below_floor)
    if settled is not None:
        return replace(settled, interval=interval, evidence=evidence)
    slower = ratio > 1
    change = ratio if slower else 1 / ratio
    clear = 1 + th.time
    threshold = _threshold(th)

    def verdict(v: Verdict, reason: str) -> Judgement:
        return Judgement(v, reason, ratio, interval, evidence)

    effect = times(ratio)
    if spread is not None and change <= 1 + max(th.time, th.noise_factor * spread):
        noise = f"{th.noise_factor:g} x IQR/median = {1 + th.noise_factor * spread:.2f}x"
        return verdict(Verdict.INCONCLUSIVE, f"{effect}, {NOT_RESOLVED}: within the noise, {noise}")
    if interval is None:
        return verdict(Verdict.INCONCLUSIVE, f"{effect}, {NOT_RESOLVED}: {without_interval}")
    lo, hi = interval
    if evidence == INTERVALS:
        if (lo <= 1) if slower else (hi >= 1):
            reason = f"{effect}, {NOT_RESOLVED}: the p25..p75 ranges overlap"
            return verdict(Verdict.INCONCLUSIVE, reason)
        support = f"p25..p75 ranges apart: {span(lo, hi)}"
    else:
        bound = lo if slower else 1 / hi  # the bound nearer no change
        bounds = f"{th.confidence:.0%} bounds {span(lo, hi)}"
        if bound <= clear:
            reason = f"{effect}, {NOT_RESOLVED}: {bounds} reach within {threshold}"
            return verdict(Verdict.INCONCLUSIVE, reason)
        support = f"{bounds}, beyond {threshold}"
    return verdict(Verdict.REGRESSED if slower else Verdict.IMPROVED, f"{effect}; {support}")


# --- comparison --------------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    """One verdict: a metric of a matched row, or a whole row only one file has."""

    section: str
    config: dict
    metric: str | None
    kind: Kind | None
    baseline: float | None
    current: float | None
    verdict: Verdict
    reason: str
    ratio: float | None = None
    interval: tuple[float, float] | None = None
    evidence: str | None = None
    gating: bool = True


@dataclass(frozen=True)
class EnvDifference:
    """`gating`: a field of the machine's identity, across which nothing measured gates;
    `drift`: by how much a measured peak moved (see `peak_move`), 0 for other fields."""

    field: str
    baseline: Any
    current: Any
    gating: bool
    drift: float = 0.0


#: The probes of a run's peaks (study.runner): the copy bandwidth's readings (GB/s), and
#: the matmul throughput's by dtype ({dtype: [TFLOPS, ...]}), before and after its timed
#: points. The first reading of each is the peak the run names (PEAK_FIELDS).
PROBE_FIELDS = {"peak_gbps_probes": "GB/s", "peak_tflops_probes": "TFLOPS"}


@dataclass(frozen=True)
class RunDrift:
    """How far one run's own probes of a peak read apart during the run: `run`
    ('baseline' or 'current'), the probes' `field` (PROBE_FIELDS) and `dtype` (a matmul
    peak's), the `probes` in the order taken, and `drift`, the largest over the smallest
    less 1 (measure.timing.drift: 1.0 for probes 2x apart), as EnvDifference.drift."""

    run: str
    field: str
    dtype: str | None
    probes: tuple[float, ...]
    drift: float

    def text(self, threshold: float | None = None) -> str:
        """'the current run's copy peak moved 2.03x during the run (14.0, then 6.9 GB/s)',
        its ratio told apart from a `threshold` ratio it is held against (ratio_text)."""
        peak = "copy peak" if self.dtype is None else f"{self.dtype} matmul peak"
        readings = ", then ".join(f"{v:.4g}" for v in self.probes)
        return (
            f"the {self.run} run's {peak} moved {ratio_text(1 + self.drift, threshold)} "
            "during the run "
            f"({readings} {PROBE_FIELDS[self.field]})"
        )


def run_drifts(environment: dict | None, run: str) -> list[RunDrift]:
    """How far each peak `run`'s environment probed moved during the run, largest first:
    by measure.timing.drift, the rule the run's own summary (render.comparisons) and the
    calibration hold its probes to; none for a peak probed once (a file older than the
    probes, or a run stopped before its second probe) or not at all."""
    from ..measure.timing import drift  # torch: loaded by then (the records' types)

    found = []
    env = environment or {}
    readings = [("peak_gbps_probes", None, env.get("peak_gbps_probes"))]
    by_dtype = env.get("peak_tflops_probes")
    if isinstance(by_dtype, dict):
        readings += [("peak_tflops_probes", dtype, v) for dtype, v in by_dtype.items()]
    for name, dtype, probes in readings:
        if not isinstance(probes, list):
            continue
        kept = tuple(v for v in probes if is_number(v))
        moved = drift(kept)
        if moved is not None:
            found.append(RunDrift(run, name, dtype, kept, moved - 1))
    return sorted(found, key=lambda d: -d.drift)


def runs_drifts(base: dict | None, cur: dict | None) -> list[RunDrift]:
    """How each of two runs' probes moved during it (run_drifts); a baseline that is the
    current run's own environment (the history's) moved as the current run did, and is
    not counted twice."""
    return [*([] if base is cur else run_drifts(base, "baseline")), *run_drifts(cur, "current")]


@dataclass(frozen=True)
class Mismatch:
    """How the environments of two measurements differ: the identity fields that differ
    (`fields`: timings, in-run ratios and counts do not gate across them), the largest
    move of a peak both measured (`drift`, 0.2 for 1.2x): the machine's load, and how far
    each run's own probes moved during it (`during`, RunDrift): the load too."""

    fields: list[str] = field(default_factory=list)
    drift: float = 0.0
    during: tuple[RunDrift, ...] = ()

    @classmethod
    def of(cls, diffs: list[EnvDifference], during: Iterable[RunDrift] = ()) -> Mismatch:
        return cls(
            [d.field for d in diffs if d.gating],
            max((d.drift for d in diffs), default=0.0),
            tuple(during),
        )

    @classmethod
    def between(cls, base: dict | None, cur: dict | None) -> Mismatch:
        """How two runs' environments differ, and how each run's probes moved during it
        (runs_drifts)."""
        return cls.of(environment_differences(base, cur), runs_drifts(base, cur))

    def moved_during(self, th: Thresholds) -> list[RunDrift]:
        """The runs' probes that moved during their run by more than the time threshold,
        largest first: those runs' timings hold at no threshold as narrow."""
        return sorted((d for d in self.during if d.drift > th.time), key=lambda d: -d.drift)

    def rule(self, kind: Kind, th: Thresholds) -> Thresholds:
        """The thresholds a timing or an in-run ratio is judged with: a timing's threshold
        at least the drift (a change the machine's load made in both runs alike is no
        evidence of the code), and at least how far a run's probes moved during it, a
        ratio's as it is (its two sides shared the load)."""
        th = timing_rule(kind, th)
        if kind is not Kind.TIMING:
            return th
        moved = max((d.drift for d in self.during), default=0.0)
        return replace(th, time=max(th.time, self.drift, moved))

    def unsettle(self, judgement: Judgement, th: Thresholds) -> Judgement:
        """A timing's `unchanged` verdict, `inconclusive` when a run's probes moved during
        it by more than the time threshold (`th`, the one asked for): the run's timings
        hold for neither moment, so no change within the threshold is shown. A regression
        or an improvement beyond the widened threshold (`rule`) keeps its verdict."""
        moved = self.moved_during(th)
        if judgement.verdict is not Verdict.UNCHANGED or not moved:
            return judgement
        ratio = judgement.ratio
        effect = judgement.reason
        if ratio is not None and not effect.startswith(times(ratio)):  # under the floor
            effect = f"{times(ratio)} ({effect})"
        elif ratio is not None:
            effect = times(ratio)
        more = f" (and {len(moved) - 1} more moves)" if len(moved) > 1 else ""
        runs = {d.run for d in moved}
        whose = "both runs'" if len(runs) > 1 else f"the {moved[0].run} run's"
        held = f"{whose} timings hold for neither moment"
        reason = f"{effect}, {NOT_RESOLVED}: {moved[0].text(1 + th.time)}{more}: {held}"
        return replace(judgement, verdict=Verdict.INCONCLUSIVE, reason=reason)


#: The kinds of metric measured on a machine that do not gate across two machines (a
#: timing, an in-run ratio, a count of instructions); exact counts and allocations do.
MACHINE_BOUND = (Kind.TIMING, Kind.RATIO, Kind.COUNT)


@dataclass
class Comparison:
    baseline: str
    current: str
    thresholds: Thresholds
    fail_on_improvement: bool
    findings: list[Finding] = field(default_factory=list)
    #: A row or metric only the baseline has fails too (a current run cut short).
    fail_on_missing: bool = False
    env_differences: list[EnvDifference] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: How far each run's own probes moved during it (RunDrift), largest first.
    run_drifts: list[RunDrift] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """Findings per verdict, most severe first, verdicts with none left out."""
        counted = Counter(f.verdict for f in self.findings)
        return {v.value: counted[v] for v in Verdict if counted[v]}

    def timing_ratios(self) -> list[float]:
        return [
            f.ratio
            for f in self.findings
            if f.kind is Kind.TIMING and f.ratio and f.verdict is not Verdict.INCOMPARABLE
        ]

    def machine_bound(self) -> bool:
        """Whether a finding is of a metric that two machines leave incomparable: where
        none is, how the environments differ changes no verdict."""
        return any(f.kind in MACHINE_BOUND for f in self.findings)

    def drift(self) -> float:
        """The largest move of a peak both runs measured (0.2 for 1.2x)."""
        return Mismatch.of(self.env_differences).drift

    def mismatch(self) -> Mismatch:
        """How the two files' environments differ, their runs' own moves included."""
        return Mismatch.of(self.env_differences, self.run_drifts)

    def moved_during(self) -> list[RunDrift]:
        """The runs' probes that moved during their run by more than the time threshold:
        those runs' timings are at best inconclusive (Mismatch.unsettle)."""
        return self.mismatch().moved_during(self.thresholds)

    def timing_threshold(self) -> float:
        """The threshold the timings are held to: the time threshold, widened to the
        peaks' move between the runs and during each (Mismatch.rule); 0.1 for 1.1x."""
        return self.mismatch().rule(Kind.TIMING, self.thresholds).time

    def geomean_timing_ratio(self) -> float | None:
        ratios = self.timing_ratios()
        return math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None

    def failures(self) -> list[Finding]:
        """The findings that fail the gate."""
        failing = {Verdict.REGRESSED} | ({Verdict.IMPROVED} if self.fail_on_improvement else set())
        missing = Verdict.MISSING if self.fail_on_missing else None
        return [
            f for f in self.findings if (f.gating and f.verdict in failing) or f.verdict is missing
        ]

    def exit_code(self) -> int:
        """1 on a failure (it outranks 3: exact metrics gate whatever the environment),
        3 when timings were left incomparable by the environments (or counters), else 0."""
        if self.failures():
            return 1
        left = (f.verdict is Verdict.INCOMPARABLE and f.gating for f in self.findings)
        return 3 if any(left) else 0

    def sorted_findings(self, only_changed: bool = False) -> list[Finding]:
        """By severity, then by the size of the change (largest first)."""
        shown = [f for f in self.findings if not (only_changed and f.verdict is Verdict.UNCHANGED)]
        return sorted(shown, key=lambda f: (SEVERITY[f.verdict], -_change(f.ratio)))

    def to_dict(self, only_changed: bool = False) -> dict:
        return {
            "schema_version": SCHEMA_VERSION,
            "baseline": self.baseline,
            "current": self.current,
            "exit_code": self.exit_code(),
            "thresholds": asdict(self.thresholds),
            "fail_on_improvement": self.fail_on_improvement,
            "fail_on_missing": self.fail_on_missing,
            "summary": {
                "counts": self.counts(),
                "failures": len(self.failures()),
                "timings": len(self.timing_ratios()),
                "geomean_timing_ratio": self.geomean_timing_ratio(),
                "peak_drift": self.drift(),
                "peak_drift_during_runs": [asdict(d) for d in self.moved_during()],
            },
            "environment_differences": [asdict(d) for d in self.env_differences],
            "notes": self.notes,
            "rows": [
                {**asdict(f), "kind": f.kind and f.kind.value, "verdict": f.verdict.value}
                for f in self.sorted_findings(only_changed)
            ],
        }


def _change(ratio: float | None) -> float:
    """How far a finding's ratio (current over baseline) is from even, to list the largest
    first: its log's size; no size without one, and the most where the value went to 0 or
    changed sign (a signed field: free memory that is now short)."""
    if not ratio:
        return 0.0 if ratio is None else math.inf
    return abs(math.log(ratio)) if ratio > 0 else math.inf


def environment_differences(base: dict | None, cur: dict | None) -> list[EnvDifference]:
    """Every environment field that differs: the identity fields first, then the peaks
    that moved, largest move first."""
    if base is None or cur is None:
        return []
    gating = set(GATING_ENV_FIELDS)
    if any(str(env.get("device") or "cpu").startswith("cpu") for env in (base, cur)):
        gating.add("cpu_model")
    diffs = []
    for k in dict.fromkeys([*base, *cur]):
        b, c = base.get(k), cur.get(k)
        if b != c:
            drift = peak_move(b, c) if k in PEAK_FIELDS else 0.0
            diffs.append(EnvDifference(k, b, c, k in gating, drift))
    return sorted(diffs, key=lambda d: (not d.gating, -d.drift))


def peak_move(base: Any, cur: Any) -> float:
    """How far a measured peak moved between two runs, max(cur/base, base/cur) - 1: the
    copy bandwidth (GB/s), or the largest move of the matmul throughput of a dtype both
    runs measured ({dtype: TFLOPS}); 0 where no value is on both sides."""
    pairs = [(base, cur)]
    if isinstance(base, dict) and isinstance(cur, dict):
        pairs = [(base[dtype], cur[dtype]) for dtype in base if dtype in cur]
    moves = [
        max(c / b, b / c) - 1 for b, c in pairs if is_number(b) and is_number(c) and b > 0 and c > 0
    ]
    return max(moves, default=0.0)


def compare_documents(
    base: Document,
    cur: Document,
    thresholds: Thresholds = Thresholds(),
    *,
    allow_env_mismatch: bool = False,
    fail_on_improvement: bool = False,
    fail_on_missing: bool = False,
) -> Comparison:
    """Compare the sections both documents have; raise UsageError when they share none or
    no row matches (the files then come from different commands or sweeps)."""
    shared = [s for s in base.sections if s in cur.sections]
    if not shared:
        raise UsageError(
            f"{base.path} ({base.command}) and {cur.path} ({cur.command}) come from different "
            "commands; compare two results of the same command"
        )
    for doc in (base, cur):
        check_measurements(doc)
    result = Comparison(
        base.path, cur.path, thresholds, fail_on_improvement, fail_on_missing=fail_on_missing
    )
    for doc in (base, cur):
        result.notes += [
            f"section {s} is only in {doc.path}; not compared"
            for s in doc.sections
            if s not in shared
        ]
    result.env_differences = environment_differences(base.environment, cur.environment)
    result.run_drifts = runs_drifts(base.environment, cur.environment)
    env_mismatch = result.mismatch()
    if base.environment is None or cur.environment is None:
        result.notes.append("no environment recorded (CSV input): timings gate unchecked")
    matched = 0
    for name in shared:
        kinds = kinds_of(name)
        if not kinds:
            result.notes.append(f"section {name} is not known to this version; not compared")
            continue
        rows, notes = match_rows(
            base.sections[name], cur.sections[name], (base.path, cur.path), kinds
        )
        result.notes += [f"{name}: {note}" for note in notes]
        envs = (base.environments_of(name), cur.environments_of(name))
        for key, b, c in rows:
            matched += b is not None and c is not None
            mismatch = env_mismatch
            if b is not None and c is not None and (id(b) in envs[0] or id(c) in envs[1]):
                mismatch = _row_mismatch(
                    envs[0].get(id(b), base.environment), envs[1].get(id(c), cur.environment)
                )
            result.findings += compare_rows(
                name, key, b, c, thresholds, mismatch, allow_env_mismatch
            )
    if not matched:
        raise UsageError(
            f"{base.path} and {cur.path} have no row in common; they come from different sweeps"
        )
    return result


def check_measurements(doc: Document) -> None:
    """Refuse a timing or in-run ratio (a median, a percentile, a sample) that is neither 0
    nor within MEASURED_RANGE: no run measures it, and its ratios would overflow."""
    low, high = MEASURED_RANGE
    for name, records in doc.sections.items():
        fields = [f for f, kind in kinds_of(name).items() if kind in (Kind.TIMING, Kind.RATIO)]
        for i, record in enumerate(records):
            for at, value in (pair for f in fields for pair in _values(f, record.get(f))):
                if is_number(value) and value != 0 and not is_measured(value):
                    raise UsageError(
                        f"{doc.path}: {name} record {i}: {at}: {brief(value)} "
                        f"is out of range: a timing or ratio is 0 or from "
                        f"{low:g} to {high:g}"
                    )


def _values(name: str, value: Any) -> list[tuple[str, Any]]:
    """(where, value) of a field's value, or of each of its values: 'samples_ms[3]'."""
    if isinstance(value, list):
        return [(f"{name}[{j}]", v) for j, v in enumerate(value)]
    return [(name, value)]


def _row_mismatch(base: dict | None, cur: dict | None) -> Mismatch:
    """How the environments two rows were measured in differ (a merged study's rows each
    carry their share's), and how each share's probes moved during its run."""
    return Mismatch.between(base, cur)


def match_rows(
    base: list[dict], cur: list[dict], paths: tuple[str, str], kinds: dict[str, Kind]
) -> tuple[list[tuple[dict, dict | None, dict | None]], list[str]]:
    """Pair rows on the key fields (`kinds`) both sides have (a field only one side has,
    say one added in a later version, is left out, with a note). Baseline order first."""
    fields = [
        [k for k in dict.fromkeys(k for r in rows for k in r) if kinds.get(k) is Kind.KEY]
        for rows in (base, cur)
    ]
    union = list(dict.fromkeys(fields[0] + fields[1]))
    keys = [k for k in fields[0] if k in fields[1]] if base and cur else union
    dropped = [k for k in union if k not in keys]
    notes = [f"config field {k} is only in one file; rows are matched without it" for k in dropped]
    indexed = []
    for rows, path in zip((base, cur), paths, strict=True):
        index: dict[tuple, dict] = {}
        for rec in rows:
            key = tuple(hashable(rec.get(k)) for k in keys)
            if index.get(key) == rec:
                continue  # the same row twice (two models with one layer shape)
            if key in index:
                config = {k: rec.get(k) for k in keys}
                unmatched = f" (not matched on {', '.join(dropped)})" if dropped else ""
                raise UsageError(f"{path}: two rows share the configuration {config}{unmatched}")
            index[key] = rec
        indexed.append(index)
    b_index, c_index = indexed
    pairs = []
    for key in dict.fromkeys([*b_index, *c_index]):
        rec = b_index[key] if key in b_index else c_index[key]
        pairs.append(({k: rec.get(k) for k in keys}, b_index.get(key), c_index.get(key)))
    return pairs, notes


def compare_rows(
    section: str,
    config: dict,
    base: dict | None,
    cur: dict | None,
    th: Thresholds,
    env_mismatch: Mismatch,
    allow_env_mismatch: bool,
) -> list[Finding]:
    """The findings of one row: one per metric, or a single new/missing one."""
    if base is None or cur is None:
        verdict, where = (Verdict.NEW, "baseline") if base is None else (Verdict.MISSING, "current")
        return [Finding(section, config, None, None, None, None, verdict, f"row not in {where}")]
    kinds = kinds_of(section)
    rtype = record_type(section)
    timings = gated_timing(rtype) if rtype else {}
    against = ratio_against(rtype) if rtype else {}
    findings = []
    status = judge_status(base, cur)
    if status is not None:
        judgement, by_environment = status
        gating = True
        mismatch = env_mismatch.fields
        if by_environment and mismatch and not allow_env_mismatch:
            judgement = _incomparable(mismatch)
        elif by_environment and mismatch:
            judgement, gating = _ungated(judgement), False
        findings.append(
            Finding(
                section, config, "status", Kind.INFO, None, None, **asdict(judgement), gating=gating
            )
        )
    for name in dict.fromkeys([*base, *cur]):
        kind = kinds.get(name)
        if kind not in GATED:
            continue
        if kind in SAMPLED and name not in timings:
            continue  # a statistic of a timing (p25, raw samples): judged with it
        b, c = base.get(name), cur.get(name)
        if b is None and c is None:
            continue
        gating = True
        mismatch = env_mismatch.fields
        measured_with = COUNTED_WITH if kind is Kind.COUNT else against.get(name)
        if measured_with and base.get(measured_with) != cur.get(measured_with):
            mismatch = [*mismatch, measured_with]  # another reference, another counter
        if b is None or c is None:
            judgement = _one_sided(b is None, base if b is None else cur)
        elif kind is Kind.EXACT:
            judgement = judge_exact(b, c)
        elif kind is Kind.MEMORY:
            judgement = judge_memory(b, c, th)
        elif mismatch and not allow_env_mismatch:
            judgement = _incomparable(mismatch, ratio_of(c, b), against.values())
            # a ratio to another reference (a sweep that added a narrower variant) is no
            # other environment: shown, but it neither gates nor makes the exit 3
            gating = env_mismatch.fields != [] or measured_with == COUNTED_WITH
        else:
            if kind is Kind.COUNT:
                judgement = judge_count(b, c, th)
            else:
                stats = timings[name]
                judgement = judge_timing(
                    Measurement.of_record(base, name, stats),
                    Measurement.of_record(cur, name, stats),
                    env_mismatch.rule(kind, th),
                )
                judgement = _held(judgement, base, cur)
                if kind is Kind.TIMING:  # a ratio's two sides shared the run's moves
                    judgement = env_mismatch.unsettle(judgement, th)
            if mismatch:
                judgement, gating = _ungated(judgement), False
        findings.append(
            Finding(section, config, name, kind, b, c, **asdict(judgement), gating=gating)
        )
    return findings


def _held(judgement: Judgement, base: dict, cur: dict) -> Judgement:
    """A timing's regression or improvement, inconclusive where either side was sampled
    while another process held the CPU (its `cpu_share` under BUSY_CPU_SHARE: the
    record's own status says noisy): what a neighbour did to it, the rounds and layouts of
    one run cannot tell from what the code did. A median that is no positive time keeps
    its verdict."""
    shares = [r.get("cpu_share") for r in (base, cur)]
    least = min((s for s in shares if is_measured(s)), default=None)
    moved = judgement.verdict in (Verdict.REGRESSED, Verdict.IMPROVED)
    if not moved or least is None or least >= BUSY_CPU_SHARE or judgement.ratio is None:
        return judgement
    reason = f"{judgement.reason}; sampled while another process held the CPU ({least:.0%})"
    return replace(judgement, verdict=Verdict.INCONCLUSIVE, reason=reason)


def _incomparable(
    env_mismatch: list[str], ratio: float | None = None, references: Iterable[str] = ()
) -> Judgement:
    """The verdict on an environment-dependent metric between differing environments
    (`references`: the fields that say what a ratio was taken against)."""
    what = "environments differ"
    if env_mismatch == [COUNTED_WITH]:
        what = "counters differ"
    elif len(env_mismatch) == 1 and env_mismatch[0] in set(references):
        what = "references differ"
    return Judgement(Verdict.INCOMPARABLE, f"{what} ({', '.join(env_mismatch)})", ratio)


def _ungated(judgement: Judgement) -> Judgement:
    """A verdict shown, not gated (timings across differing environments, when the gate
    is told to allow them)."""
    return replace(judgement, reason=f"{judgement.reason}; not gated")


#: Status words (before the colon) of a point that ran but has no timings.
WRONG, UNSUPPORTED, OK = "wrong", "unsupported", "ok"


#: Statuses of a point that ran and holds its measurement, flagged for its spread or its
#: host: of the kind 'ok' here.
RAN = ("noisy",)


def status_word(record: dict) -> str:
    """The kind of a record's status: 'wrong' for 'wrong: max abs error 0.3', 'ok' for a
    record without a status and for a noisy one ('noisy: under 11 samples'), which ran."""
    word = Status.of(record.get("status")).word
    return OK if word in RAN else word


def judge_status(base: dict, cur: dict) -> tuple[Judgement, bool] | None:
    """The verdict on a row whose status changed, and whether it depends on the
    environment; None when the status did not change its kind, or changed in a way the
    row's missing metrics already show (ok -> oom, say).

    - now wrong, and not before: regressed, in any environment (an output is right or not);
    - ok before, unsupported now: regressed, an environment's verdict (kernels differ);
    - wrong before, ok now: improved; unsupported before, ok now: improved, by environment.
    """
    b, c = status_word(base), status_word(cur)
    if b == c:
        return None
    change = f"status {base.get('status') or OK!r} -> {cur.get('status') or OK!r}"
    if c == WRONG:
        return Judgement(Verdict.REGRESSED, f"{change}: the output is wrong now"), False
    if b == OK and c == UNSUPPORTED:
        return Judgement(Verdict.REGRESSED, f"{change}: the point no longer runs"), True
    if c == OK and b in (WRONG, UNSUPPORTED):
        return Judgement(Verdict.IMPROVED, f"{change}: the point runs now"), b == UNSUPPORTED
    return None


def _one_sided(is_new: bool, lacking: dict) -> Judgement:
    """A metric with a value on one side only: a new metric, or a failed point (whose
    status, say `oom`, the record lacking the value gives)."""
    status = f" (status: {lacking['status']})" if lacking.get("status") else ""
    if is_new:
        return Judgement(Verdict.NEW, f"no value in the baseline{status}")
    return Judgement(Verdict.MISSING, f"no value in the current results{status}")
