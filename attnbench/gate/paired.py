"""The paired timing test of `attnbench ab`: base and head measured in turn, in one job.

Timings of two separate runs on a shared machine differ by more than most regressions
(its load, clocks and neighbours change from one minute to the next). Measured in turn,
each head visit next to a base visit, the two share that state, and the ratio of a pair
cancels most of it. The effect is the median of the pairs' ratios head / base, and its
evidence a seeded bootstrap that resamples whole pairs (so what a pair shares stays
cancelled). The verdict follows compare.judge_timing's rules with that bound.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..measure.stats import bootstrap_bounds, median
from .compare import (
    MEASURED_RANGE,
    MIN_BOOTSTRAP_SAMPLES,
    Judgement,
    Thresholds,
    Verdict,
    is_measured,
    judge_effect,
)

#: How a paired judgement's interval was obtained (Finding.evidence).
EVIDENCE = "paired bootstrap"
#: The sides of one round, in the order they are visited.
ABBA = ("base", "head", "head", "base")
#: The round of the warm-up visits, which are never paired.
WARMUP = 0


def abba_pairs(visits: Sequence[tuple[int, str, float | None]]) -> list[tuple[float, float]]:
    """(base, head) values measured next to each other, from (round, side, value) visits:
    of each complete round's ABBA visits, the first with the second and the fourth with
    the third."""
    rounds: dict[int, list[tuple[str, float | None]]] = {}
    for round_, side, value in visits:
        if round_ != WARMUP:
            rounds.setdefault(round_, []).append((side, value))
    found = []
    for sides in rounds.values():
        if [side for side, _ in sides] == list(ABBA):
            (_, a1), (_, b1), (_, b2), (_, a2) = sides
            found += [(a1, b1), (a2, b2)]
    return found  # type: ignore[return-value]


def log_ratios(base: Sequence[float], head: Sequence[float]) -> np.ndarray:
    """log(head / base) of each pair; the i-th base and head values are one pair."""
    if len(base) != len(head) or not base:
        raise ValueError(
            f"expected as many base as head values, and some: {len(base)}, {len(head)}"
        )
    return np.log(np.asarray(head, dtype=float)) - np.log(np.asarray(base, dtype=float))


def median_ratio_interval(logs: np.ndarray, th: Thresholds) -> tuple[float, float]:
    """Two one-sided `th.confidence` bounds on the median paired ratio, from a seeded
    percentile bootstrap that draws `th.resamples` resamples of the pairs (the median of
    each, np.median's rows: measure.stats.median vectorised)."""
    rng = np.random.default_rng(th.seed)
    picks = rng.integers(0, logs.size, size=(th.resamples, logs.size))
    lo, hi = bootstrap_bounds(np.median(logs[picks], axis=1), 1 - th.confidence, th.confidence)
    return math.exp(lo), math.exp(hi)


def judge_paired(
    base: Sequence[float], head: Sequence[float], th: Thresholds = Thresholds()
) -> Judgement:
    """The verdict on pairs of (base, head) timings in ms, by compare.judge_timing's rules:
    unchanged under the absolute floor (between the medians of each side) or within the
    threshold; regressed (improved) when the median paired ratio is beyond the threshold
    and so is its confidence bound; inconclusive otherwise, and, as compare has it, with
    fewer than MIN_BOOTSTRAP_SAMPLES pairs to bootstrap (the bound of two pairs is the
    smaller ratio: one slow phase of the machine on both head visits passes it). A head
    time that is not a measured time (compare.MEASURED_RANGE: above 0, and neither a
    subnormal float nor one whose ratios overflow) regresses; such a base time is
    inconclusive."""
    low, high = MEASURED_RANGE
    if bad := [t for t in head if not is_measured(t)]:
        reason = f"a head time is {bad[0]:g} ms: a time must be from {low:g} to {high:g} ms"
        return Judgement(Verdict.REGRESSED, reason)
    if bad := [t for t in base if not is_measured(t)]:
        reason = f"a base time is {bad[0]:g} ms: nothing to compare against"
        return Judgement(Verdict.INCONCLUSIVE, reason)
    logs = log_ratios(base, head)
    enough = logs.size >= MIN_BOOTSTRAP_SAMPLES
    return judge_effect(
        math.exp(median(logs.tolist())),
        median_ratio_interval(logs, th) if enough else None,
        EVIDENCE if enough else None,
        th,
        below_floor=abs(median(head) - median(base)) <= th.time_floor_ms,
        spread=None,
        without_interval=f"{logs.size} pairs, too few for bounds ({MIN_BOOTSTRAP_SAMPLES} needed)",
    )
