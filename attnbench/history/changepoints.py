"""Change points of one metric's series of per-commit values.

Method: E-Divisive with means (Matteson and James 2014, "A Nonparametric Approach for
Multiple Change Point Analysis of Multivariate Data", JASA 109(505)), in the form MongoDB's
signal processing uses (Daly et al. 2020, "The Use of Change Point Detection to Identify
Software Performance Regressions in a Continuous Integration System", ICPE) and Hunter
started from (Fleming et al. 2023, "Hunter: Using Change Point Detection to Hunt for
Performance Regressions", ICPE). Hierarchical bisection: at each step every current segment
is split where the divergence statistic (exponent 1)

    Q(X, Y) = mn/(m+n) * (2/(mn) sum|x-y| - sum_pairs|x-x'|/C(m,2) - sum_pairs|y-y'|/C(n,2))

is largest, the second part running to the segment's end, with at least `min_size` values
on either side; the best split over all segments is accepted when a permutation test gives
p < alpha. The test permutes the values within each current segment and takes the same
maximum over all splits and segments, so it accounts for the search: p = (1 + #{permuted
maximum >= observed}) / (1 + permutations).

Why permutations and not Hunter's Student t-test on the chosen split: the t-test's p-value
ignores that the split was picked as the best of many, so its false rate grows with the
series' length. Measured on flat series of bootstrap medians of real CPU samples (the noise
model of scripts/history_simulation.py), the share of series given a false change point at
30, 100 and 200 commits was 6.8%, 11% and 17% for the t-test at p < 0.01, 0.5%, 1.2% and 4%
at p < 0.001, and 0.5%, 0.8% and 1.0% for the permutation test at 0.01. The two caught
steps and drifts equally often (at a false rate held alike); the t-test is only faster.
999 permutations rather than 199: with 199, p < 0.01 needs no permutation at all to reach
the observed statistic, and with a 5% run-to-run shift added that test caught 72% of 10%
steps, against 83% with 999 (85% for the t-test at 0.001). The defaults (alpha 0.01;
min_size 3, so a new level must hold for three commits; 999 permutations) are the ones
scripts/history_simulation.py holds to its targets. 200 values take well under a second;
the cost grows with the square of the length.

Scale: the detector works on log(values), so a change is judged by its ratio (a 10% step
is the same at 0.1 ms and at 100 ms, and a 10% slowdown weighs as much as the speedup that
undoes it). What it reports is on the values' own scale: the arithmetic means of the
segments either side, their relative change, and a 95% percentile bootstrap interval of
that change (each segment resampled on its own). Deterministic for a given seed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..measure.stats import bootstrap_bounds

#: Bootstrap resamples behind each change point's interval.
BOOTSTRAP = 2000
#: The test's defaults: the p-value a split must reach, the fewest values either side of
#: it, and the permutations that estimate its p-value (see the module docstring).
ALPHA, MIN_SIZE, PERMUTATIONS = 0.01, 3, 999
#: Most float64 elements one block of permuted distance matrices may hold.
_BLOCK = 250_000


@dataclass(frozen=True)
class ChangePoint:
    """A shift of a series' level: where the new level starts and how big the step is."""

    index: int  # position in the series of the first value of the new regime
    before: float  # mean of the segment before it (from the previous change point)
    after: float  # mean of the segment after it (up to the next change point)
    change_pct: float  # 100 * (after / before - 1)
    ci_low_pct: float  # 95% interval of change_pct (bootstrap over the two segments' values)
    ci_high_pct: float
    p_value: float  # of the significance test that accepted it


def change_points(
    values: Sequence[float],
    *,
    alpha: float = ALPHA,
    min_size: int = MIN_SIZE,
    permutations: int = PERMUTATIONS,
    seed: int = 0,
) -> list[ChangePoint]:
    """Change points of `values` (one per commit, oldest first), sorted by index."""
    array = _validated(values)
    logs = np.log(array)
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), not {alpha}")
    if min_size < 2:
        raise ValueError(f"min_size must be at least 2, not {min_size}")
    if alpha * (permutations + 1) <= 1:
        raise ValueError(
            f"alpha {alpha} is out of reach with {permutations} permutations "
            f"(the smallest p-value is 1/{permutations + 1})"
        )
    test_seed, bootstrap_seed = np.random.SeedSequence(seed).spawn(2)
    rng = np.random.default_rng(test_seed)
    bounds = [0, len(logs)]
    p_values: dict[int, float] = {}
    best: dict[tuple[int, int], tuple[float, int]] = {}  # segment -> (statistic, split)
    while True:
        segments = list(zip(bounds, bounds[1:], strict=False))
        for start, end in segments:
            if (start, end) not in best and end - start >= 2 * min_size:
                q = _statistics(logs[start:end][None, :], min_size)[0]
                best[start, end] = (float(q.max()), start + min_size + int(q.argmax()))
        candidates = [best[s] for s in segments if s in best]
        if not candidates:
            break
        observed, split = max(candidates)
        p = _p_value(logs, segments, observed, min_size, permutations, rng)
        if p >= alpha:
            break
        p_values[split] = p
        bounds = sorted([*bounds, split])
    return _describe(array, bounds, p_values, bootstrap_seed)


def fewest_values(alpha: float = ALPHA, min_size: int = MIN_SIZE) -> int:
    """The fewest values in which the test can find a change at p < `alpha`, however large
    the change. The statistic of a split depends on which values lie on either side of it,
    not on their order, and not on which side is which: a permutation that puts the same
    values on either side, or the two sides' values swapped, reaches it. So the p-value
    of a split of n values at k is at least 2 / C(n, k), at the least 2 / C(n, n // 2);
    in fewer values than this, that is `alpha` or more (with the defaults, 10: at 9 values
    it is 2/126 = 0.016)."""
    n = 2 * min_size
    while 2 / math.comb(n, n // 2) >= alpha:
        n += 1
    return n


def _validated(values: Sequence[float]) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    if array.ndim != 1:
        raise ValueError(f"values must be one-dimensional, not of shape {array.shape}")
    bad = np.flatnonzero(~(np.isfinite(array) & (array > 0)))
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"values[{i}] is {values[i]!r}: every value must be a positive finite number"
        )
    return array


def _statistics(z: np.ndarray, min_size: int) -> np.ndarray:
    """Q for every split of every row of `z` (shape (rows, n)): column j is the split that
    puts the first min_size + j values on the left."""
    n = z.shape[1]
    d = z[:, :, None] - z[:, None, :]
    np.abs(d, out=d)
    before = np.tril(np.ones((n, n)), -1)
    left_rows = np.einsum("rij,ij->ri", d, before)  # row k: distances from value k to earlier ones
    right_rows = d.sum(axis=2) - left_rows  # ... and to later ones
    within_left = np.cumsum(left_rows, axis=1)  # column t-1: pairs inside [0, t)
    within_right = np.cumsum(right_rows[:, ::-1], axis=1)[:, ::-1]  # column t: inside [t, n)
    splits = np.arange(min_size, n - min_size + 1)
    left, right = splits, n - splits
    w_left, w_right = within_left[:, splits - 1], within_right[:, splits]
    across = within_left[:, -1:] - w_left - w_right
    divergence = (
        2 * across / (left * right)
        - w_left / (left * (left - 1) / 2)
        - w_right / (right * (right - 1) / 2)
    )
    return left * right / n * divergence


def _p_value(
    logs: np.ndarray,
    segments: list[tuple[int, int]],
    observed: float,
    min_size: int,
    permutations: int,
    rng: np.random.Generator,
) -> float:
    """Share of permutations (the values shuffled within each segment) whose best split over
    all segments is at least as strong as the observed one, counting the observed one."""
    maxima = np.zeros(permutations)
    for start, end in segments:
        n = end - start
        if n < 2 * min_size:
            continue
        shuffled = rng.permuted(np.tile(logs[start:end], (permutations, 1)), axis=1)
        rows = max(1, _BLOCK // (n * n))
        for first in range(0, permutations, rows):
            block = _statistics(shuffled[first : first + rows], min_size).max(axis=1)
            np.maximum(maxima[first : first + rows], block, out=maxima[first : first + rows])
    # A permutation that reproduces the observed order must count as reaching it, despite
    # rounding in the sums.
    reached = np.count_nonzero(maxima >= observed - 1e-9 * abs(observed))
    return float((1 + reached) / (1 + permutations))


def _describe(
    values: np.ndarray, bounds: list[int], p_values: dict[int, float], seed: np.random.SeedSequence
) -> list[ChangePoint]:
    rng = np.random.default_rng(seed)
    found = []
    for start, split, end in zip(bounds, bounds[1:], bounds[2:], strict=False):
        before, after = values[start:split], values[split:end]
        resampled_before = rng.choice(before, (BOOTSTRAP, len(before))).mean(axis=1)
        resampled_after = rng.choice(after, (BOOTSTRAP, len(after))).mean(axis=1)
        low, high = bootstrap_bounds(100 * (resampled_after / resampled_before - 1), 0.025, 0.975)
        found.append(
            ChangePoint(
                index=split,
                before=float(before.mean()),
                after=float(after.mean()),
                change_pct=float(100 * (after.mean() / before.mean() - 1)),
                ci_low_pct=low,
                ci_high_pct=high,
                p_value=p_values[split],
            )
        )
    return found
