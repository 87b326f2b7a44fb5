"""A Monte-Carlo check of the timing gate: how often pairs of runs of the same code are
flagged (false regressions), and how often a planted slowdown is caught.

Two sources of timings, judged by the gate's own `judge_timing`:

- synthetic (`simulate`): lognormal step jitter, a whole-run shift and one-sided
  hiccups (`Noise`);
- real (`simulate_document` per timing, `simulate_rows` per row as compare judges it,
  both as a `Resampling` says): the raw samples of a results document's decode rows.
  Each run of a pair is a bootstrap draw of as many samples as the row took, from the
  row's own samples; a slowdown multiplies the current run's samples. A pair of such draws
  differs only as two runs under the conditions of that one run would: what it
  measures is the gate against the sampling noise within a run. The shift between two
  runs (another process, clocks, a busy machine between baseline and candidate) is not
  in the samples of one run, and on a shared machine it is much larger; these rates say
  nothing about it.

- recorded runs (`simulate_sampled`, `simulate_paired`, `simulate_counts`): every gating
  mode (absolute timings, in-run ratios, interleaved A/B, instruction counts) on what
  real consecutive runs recorded, each comparison between two different runs, so that
  the shift between runs is the machine's own.

Shared by tests/gate/test_compare.py and scripts/gate_simulation.py, so the figures quoted in
the docs come from the code the tests hold to account.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import numpy as np

from ..measure.stats import Measurement, layout_chunks
from ..records import gated_timing
from ..study.documents import Document, kinds_of
from ..study.sections import record_type
from .compare import (
    OK,
    Mismatch,
    Thresholds,
    Verdict,
    environment_differences,
    judge_count,
    judge_timing,
    status_word,
    timing_rule,
)
from .paired import judge_paired


@dataclass(frozen=True)
class Noise:
    """Decode-step timing noise: lognormal jitter per step, a shift of a whole run against
    another (job-to-job variation), and rare one-sided hiccups (preemption, clock drops)."""

    sigma: float = 0.03
    run_sigma: float = 0.01
    outlier_rate: float = 0.03
    outlier_max: float = 3.0
    samples: int = 30
    median_ms: float = 0.25


def draw_timing(rng: np.random.Generator, noise: Noise, slowdown: float = 1.0) -> Measurement:
    """One run's samples, and the median, p25 and p75 a record would carry."""
    run_shift = rng.lognormal(0.0, noise.run_sigma)
    x = noise.median_ms * slowdown * run_shift * rng.lognormal(0.0, noise.sigma, noise.samples)
    hit = rng.random(noise.samples) < noise.outlier_rate
    x[hit] *= rng.uniform(1.2, noise.outlier_max, hit.sum())
    return Measurement.of_samples(x.tolist())


@dataclass(frozen=True)
class SimulationResult:
    pairs: int
    false_regressions: int
    detections: int

    @property
    def false_rate(self) -> float:
        return self.false_regressions / self.pairs if self.pairs else 0.0

    @property
    def detection_rate(self) -> float:
        return self.detections / self.pairs if self.pairs else 0.0

    def __add__(self, other: SimulationResult) -> SimulationResult:
        return SimulationResult(
            self.pairs + other.pairs,
            self.false_regressions + other.false_regressions,
            self.detections + other.detections,
        )


NO_PAIRS = SimulationResult(0, 0, 0)


def simulate(
    pairs: int = 500,
    slowdown: float = 1.2,
    noise: Noise = Noise(),
    thresholds: Thresholds = Thresholds(),
    seed: int = 0,
) -> SimulationResult:
    """Judge `pairs` A/A pairs and `pairs` pairs whose current run is `slowdown` x slower."""
    rng = np.random.default_rng(seed)
    return judge_pairs(
        lambda factor: draw_timing(rng, noise, factor),
        pairs,
        slowdown,
        timing_regressed(thresholds),
    )


def timing_regressed(thresholds: Thresholds) -> Callable[[Measurement, Measurement], bool]:
    """Whether the gate calls a timing regressed, baseline against current."""
    return lambda base, cur: judge_timing(base, cur, thresholds).verdict is Verdict.REGRESSED


def judge_pairs(
    draw: Callable[[float], Any],
    pairs: int,
    slowdown: float,
    regressed: Callable[[Any, Any], bool],
) -> SimulationResult:
    """`pairs` times: a baseline run, a run of the same code and one `slowdown` x slower,
    each from `draw(factor)`; count the pairs `regressed(base, current)` flags."""
    false_regressions = detections = 0
    for _ in range(pairs):
        base, same, slower = draw(1.0), draw(1.0), draw(slowdown)
        false_regressions += regressed(base, same)
        detections += regressed(base, slower)
    return SimulationResult(pairs, false_regressions, detections)


# --- real samples ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Series:
    """The raw samples of one gated timing of one decode row."""

    provider: str
    metric: str
    label: str
    samples: tuple[float, ...]


@dataclass(frozen=True)
class Row:
    """The raw samples of the gated timings of one decode row, by metric."""

    provider: str
    label: str
    samples: dict[str, tuple[float, ...]]


def real_rows(
    document: Document, provider: str | None = None, metrics: Sequence[str] | None = None
) -> list[Row]:
    """Every decode row that ran (status ok) and kept the raw samples of a gated timing (of
    one of `metrics`, when given), of `provider` only when given."""
    rtype = record_type("decode")
    timings = gated_timing(rtype) if rtype else {}
    rows = []
    for rec in document.sections.get("decode", []):
        if status_word(rec) != OK or (provider is not None and rec.get("provider") != provider):
            continue
        samples = {
            metric: tuple(rec[stats["samples"]])
            for metric, stats in timings.items()
            if (metrics is None or metric in metrics) and rec.get(stats.get("samples", ""))
        }
        if samples:
            rows.append(Row(str(rec.get("provider")), _label(rec), samples))
    return rows


def real_series(
    document: Document, provider: str | None = None, metrics: Sequence[str] | None = None
) -> list[Series]:
    """The samples of every gated timing of `real_rows`, one series each."""
    return [
        Series(row.provider, metric, row.label, samples)
        for row in real_rows(document, provider, metrics)
        for metric, samples in row.samples.items()
    ]


def _label(rec: dict) -> str:
    return (
        f"{rec.get('variant')} {rec.get('provider')} S={rec.get('prompt_len')} "
        f"{rec.get('mode')} b={rec.get('batch')} {rec.get('dtype')}"
    )


def resampled(
    samples: np.ndarray, rng: np.random.Generator, factor: float = 1.0, layouts: int = 1
) -> Measurement:
    """One simulated run: as many samples as `samples` holds, drawn from them with
    replacement, each `factor` x slower; samples over several memory `layouts` are drawn
    layouts first, then the rounds of each (as stats.bootstrap_medians draws them)."""
    chunks = layout_chunks(samples.tolist(), layouts)
    if len(chunks) == 1:
        drawn = rng.choice(samples, size=samples.size, replace=True) * factor
        return Measurement.of_samples(drawn.tolist())
    x = np.asarray(chunks, dtype=float)[rng.integers(0, len(chunks), size=len(chunks))]
    picked = np.take_along_axis(x, rng.integers(0, x.shape[1], size=x.shape), axis=1)
    return Measurement((picked * factor).ravel().tolist(), layouts=len(chunks))


def simulate_series(
    samples: Sequence[float],
    pairs: int = 100,
    slowdown: float = 1.2,
    thresholds: Thresholds = Thresholds(),
    seed: int | Sequence[int] = 0,
) -> SimulationResult:
    """Judge `pairs` A/A pairs and `pairs` slowed pairs resampled from one row's samples."""
    rng = np.random.default_rng(seed)
    x = np.asarray(samples, dtype=float)
    return judge_pairs(
        lambda factor: resampled(x, rng, factor), pairs, slowdown, timing_regressed(thresholds)
    )


def judge_halves(
    samples: Sequence[float], slowdown: float = 1.2, thresholds: Thresholds = Thresholds()
) -> SimulationResult:
    """One pair without resampling: the row's first half of samples (in the order they were
    taken) against its second half, and against its second half slowed. Drift within the
    run (warming caches, clocks) shows here; each run has half the samples."""
    half = len(samples) // 2
    if half < 1:
        return NO_PAIRS
    first, second = Measurement.of_samples(samples[:half]), samples[half : 2 * half]
    regressed = timing_regressed(thresholds)
    same = regressed(first, Measurement.of_samples(second))
    caught = regressed(first, Measurement.of_samples([s * slowdown for s in second]))
    return SimulationResult(1, int(same), int(caught))


#: A series or a row of a document's real samples.
_Of = TypeVar("_Of", Series, Row)


@dataclass(frozen=True)
class Resampling:
    """How the real samples of a document are judged: `pairs` A/A pairs and `pairs` pairs
    `slowdown` x slower per series (or row), of the rows of `provider` only and the gated
    timings in `metrics` only (when given), under `thresholds`, from `seed`."""

    pairs: int = 100
    slowdown: float = 1.2
    provider: str | None = None
    metrics: Sequence[str] | None = None
    thresholds: Thresholds = Thresholds()
    seed: int = 0

    def seeded(self, items: Sequence[_Of]) -> Iterator[tuple[_Of, tuple[int, int]]]:
        """The items (series or rows) of `provider`, each with its own seed, from `seed`
        and its place among all the items: filtering by provider leaves the others'
        figures as they were."""
        for i, item in enumerate(items):
            if self.provider is None or item.provider == self.provider:
                yield item, (self.seed, i)


@dataclass(frozen=True)
class SeriesResult:
    series: Series
    resampled: SimulationResult
    halves: SimulationResult


def simulate_document(document: Document, how: Resampling = Resampling()) -> list[SeriesResult]:
    """`simulate_series` and `judge_halves` on every series of `real_series`, as `how`
    says."""
    rules = timing_rules(how.thresholds)
    return [
        SeriesResult(
            s,
            simulate_series(s.samples, how.pairs, how.slowdown, rules[s.metric], seed),
            judge_halves(s.samples, how.slowdown, rules[s.metric]),
        )
        for s, seed in how.seeded(real_series(document, None, how.metrics))
    ]


def timing_rules(thresholds: Thresholds) -> dict[str, Thresholds]:
    """The thresholds each gated timing of a decode row is judged with (its kind's rule)."""
    kinds, rtype = kinds_of("decode"), record_type("decode")
    return {m: timing_rule(kinds[m], thresholds) for m in (gated_timing(rtype) if rtype else {})}


#: Gated timings sampled round by round with another (metric -> that one): the i-th
#: sample of the in-run ratio is the step's i-th over its reference's in that round.
SAME_ROUNDS = {"x_of_reference_median": "step_ms_median"}


def draw_row(row: Row, rng: np.random.Generator, factor: float = 1.0) -> dict[str, Measurement]:
    """One simulated run of a row: each timing a bootstrap draw of as many samples as it
    took, `factor` x slower; a timing sampled in the same rounds as another (SAME_ROUNDS)
    draws the same rounds, so the two move together as they did in the run."""
    picked: dict[str, np.ndarray] = {}
    run = {}
    for metric, samples in row.samples.items():
        x = np.asarray(samples, dtype=float)
        rounds = SAME_ROUNDS.get(metric, metric)
        idx = picked.get(rounds)
        if idx is None or idx.size != x.size:
            idx = picked[rounds] = rng.integers(0, x.size, x.size)
        run[metric] = Measurement.of_samples((x[idx] * factor).tolist())
    return run


@dataclass(frozen=True)
class RowResult:
    row: Row
    resampled: SimulationResult


def simulate_rows(document: Document, how: Resampling = Resampling()) -> list[RowResult]:
    """Every row of `real_rows` judged as compare judges it, as `how` says: regressed when
    any of its gated timings is (each by its kind's rule). A slowed run has every timing of
    the row `slowdown` x slower, its in-run ratio included: the slowdown is planted in the
    row's own step, not in the reference it is timed against (torch's kernels, another
    provider's step)."""
    judged = {m: timing_regressed(rule) for m, rule in timing_rules(how.thresholds).items()}

    def regressed(base: dict[str, Measurement], cur: dict[str, Measurement]) -> bool:
        return any(judged[m](base[m], cur[m]) for m in base)

    results = []
    for row, seed in how.seeded(real_rows(document, None, how.metrics)):
        draw = partial(draw_row, row, np.random.default_rng(seed))
        results.append(RowResult(row, judge_pairs(draw, how.pairs, how.slowdown, regressed)))
    return results


def totals(results: Sequence[SeriesResult], by: str | None = None) -> dict[tuple, tuple]:
    """The summed (resampled, halves) results by metric, or by (metric, provider) when
    `by` is 'provider'."""
    out: dict[tuple, tuple] = {}
    for r in results:
        key = (r.series.metric, r.series.provider) if by == "provider" else (r.series.metric,)
        resampled_sum, halves_sum = out.get(key, (NO_PAIRS, NO_PAIRS))
        out[key] = (resampled_sum + r.resampled, halves_sum + r.halves)
    return out


# --- recorded runs: every gating mode on the noise of real consecutive runs ----------------


@dataclass(frozen=True)
class ModeResult:
    """A gating mode over simulated comparisons: how many A/A comparisons regressed (false
    alarms), how many slowed ones regressed, per slowdown, and how many were not gated
    (the environments of the two runs differ for this kind of metric)."""

    mode: str
    comparisons: int
    false_alarms: int
    caught: dict[float, int]
    not_gated: int = 0

    @property
    def false_rate(self) -> float:
        return self.false_alarms / self.comparisons if self.comparisons else 0.0

    def caught_rate(self, slowdown: float) -> float:
        return self.caught[slowdown] / self.comparisons if self.comparisons else 0.0


#: Judges one comparison: (baseline draw, current draw) -> verdict.
Judge = Callable[[Any, Any], Verdict]


def simulate_recorded(
    mode: str,
    runs: Sequence[Mapping[str, Any]],
    draw: Callable[[Any, np.random.Generator, float], Any],
    judge_between: Callable[[int, int], Judge | None],
    trials: int = 2000,
    slowdowns: Sequence[float] = (1.1, 1.2),
    seed: int = 0,
) -> ModeResult:
    """`trials` comparisons, each of one point between two distinct recorded runs picked
    at random (so the shift between runs is real, not modelled): `draw(recorded, rng,
    factor)` makes a run's value from what a run recorded for the point (a bootstrap of
    its samples, say), `factor` x slower; `judge_between(i, j)` judges runs i and j (by
    their environments), or is None where the gate does not compare them. `runs` maps
    each point's label to what it recorded."""
    rng = np.random.default_rng(seed)
    labels = sorted(set.intersection(*(set(r) for r in runs)))
    false_alarms = not_gated = 0
    caught = dict.fromkeys(slowdowns, 0)
    for _ in range(trials):
        i, j = rng.choice(len(runs), size=2, replace=False)
        label = labels[rng.integers(len(labels))]
        judge = judge_between(int(i), int(j))
        if judge is None:
            not_gated += 1
            continue
        base = draw(runs[i][label], rng, 1.0)
        false_alarms += judge(base, draw(runs[j][label], rng, 1.0)) is Verdict.REGRESSED
        for slowdown in slowdowns:
            caught[slowdown] += (
                judge(base, draw(runs[j][label], rng, slowdown)) is Verdict.REGRESSED
            )
    return ModeResult(mode, trials, false_alarms, caught, not_gated)


def recorded_samples(
    documents: Sequence[Document], metric: str
) -> list[dict[str, tuple[np.ndarray, int]]]:
    """Per run, the raw samples of `metric` (a gated timing or ratio) of every decode row
    that ran, with the memory layouts they span, by the row's label."""
    stats = gated_timing(record_type("decode"))[metric]  # type: ignore[arg-type]
    return [
        {
            _label(rec): (
                np.asarray(rec[stats["samples"]], dtype=float),
                rec.get("layouts") or 1,
            )
            for rec in doc.sections.get("decode", [])
            if status_word(rec) == OK and rec.get(stats["samples"])
        }
        for doc in documents
    ]


def simulate_sampled(
    documents: Sequence[Document],
    metric: str,
    thresholds: Thresholds = Thresholds(),
    trials: int = 2000,
    seed: int = 0,
) -> ModeResult:
    """The gate on a timing or an in-run ratio (`metric`) across recorded runs: each run of
    a comparison is a bootstrap draw from one recorded run's samples of the point, the two
    from two different runs, judged as compare judges them: pairs of runs from different
    machines are not gated, and a timing's threshold widens to the peaks' move."""
    kind = kinds_of("decode")[metric]
    envs = [doc.environment for doc in documents]

    def judge_between(i: int, j: int) -> Judge | None:
        mismatch = Mismatch.of(environment_differences(envs[i], envs[j]))
        if mismatch.fields:
            return None
        rule = mismatch.rule(kind, thresholds)
        return lambda base, cur: judge_timing(base, cur, rule).verdict

    return simulate_recorded(
        metric,
        recorded_samples(documents, metric),
        lambda recorded, rng, factor: resampled(recorded[0], rng, factor, recorded[1]),
        judge_between,
        trials,
        seed=seed,
    )


def simulate_counts(
    runs: Sequence[Mapping[str, int]],
    thresholds: Thresholds = Thresholds(),
    trials: int = 2000,
    seed: int = 0,
) -> ModeResult:
    """The gate on instruction counts across recorded runs (point label -> count): a
    slowdown is as many more instructions."""
    return simulate_recorded(
        "instructions_per_step",
        runs,
        lambda count, rng, factor: count * factor,
        lambda i, j: lambda base, cur: judge_count(base, cur, thresholds).verdict,
        trials=trials,
        seed=seed,
    )


def simulate_paired(
    tries: Sequence[Sequence[Sequence[tuple[float, float]]]],
    thresholds: Thresholds = Thresholds(),
    trials: int = 2000,
    slowdowns: Sequence[float] = (1.1, 1.2),
    seed: int = 0,
) -> ModeResult:
    """The interleaved A/B gate on recorded A/A tries of `attnbench ab` (per try, per
    point, its (base, head) pairs): a comparison resamples one point's pairs of one try
    with replacement, and judges them as they are (A/A) and with head `slowdown` x
    slower. What the machine did between the tries is in no pair: each is one job."""
    rng = np.random.default_rng(seed)
    points = [np.asarray(pairs, dtype=float) for t in tries for pairs in t if len(pairs)]
    false_alarms = 0
    caught = dict.fromkeys(slowdowns, 0)
    for _ in range(trials):
        pairs = points[rng.integers(len(points))]
        drawn = pairs[rng.integers(0, len(pairs), size=len(pairs))]
        base, head = drawn[:, 0].tolist(), drawn[:, 1]
        false_alarms += judge_paired(base, head.tolist(), thresholds).verdict is Verdict.REGRESSED
        for s in slowdowns:
            verdict = judge_paired(base, (head * s).tolist(), thresholds).verdict
            caught[s] += verdict is Verdict.REGRESSED
    return ModeResult("paired", trials, false_alarms, caught)
