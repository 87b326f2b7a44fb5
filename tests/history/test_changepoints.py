"""history.changepoints: E-Divisive change points of a series of per-commit timings."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from attnbench.history.changepoints import _statistics, change_points, fewest_values


def noisy(levels: np.ndarray, sigma: float = 0.01, seed: int = 1) -> list[float]:
    """Timings around `levels` (ms), with lognormal noise of `sigma`."""
    rng = np.random.default_rng(seed)
    return list(levels * np.exp(rng.normal(0.0, sigma, len(levels))))


def step(n: int = 30, at: int = 15, factor: float = 1.10, base: float = 0.5) -> np.ndarray:
    return np.where(np.arange(n) >= at, base * factor, base)


def test_clean_step_found_at_its_index_with_its_size():
    (found,) = change_points(noisy(step()))
    assert found.index == 15
    assert 8 < found.change_pct < 12
    assert found.ci_low_pct < 10 < found.ci_high_pct
    assert found.before == pytest.approx(0.5, rel=0.02)
    assert found.after == pytest.approx(0.55, rel=0.02)
    assert found.change_pct == pytest.approx(100 * (found.after / found.before - 1))
    assert found.p_value < 0.01


def test_speedup_is_a_negative_change():
    (found,) = change_points(noisy(step(factor=0.9)))
    assert found.index == 15
    assert -12 < found.change_pct < -8


def test_relative_scale_same_result_at_any_magnitude():
    small = change_points(noisy(step(base=0.1)))
    large = change_points(noisy(step(base=100.0)))
    assert [c.index for c in small] == [c.index for c in large] == [15]
    assert small[0].change_pct == pytest.approx(large[0].change_pct)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_flat_noisy_series_has_none(seed):
    assert change_points(noisy(np.full(40, 2.0), sigma=0.02, seed=seed)) == []


def test_drift_over_five_commits_found_with_its_total():
    levels = 0.5 * 1.03 ** np.clip(np.arange(30) - 14, 0, 5)  # commits 15..19 3% slower each
    found = change_points(noisy(levels))
    assert any(13 <= c.index <= 22 and c.change_pct > 0 for c in found)
    total = math.prod(1 + c.change_pct / 100 for c in found) - 1
    assert 0.12 < total < 0.20  # 1.03**5 - 1 = 15.9%


def test_two_steps_give_two_change_points():
    levels = 0.5 * np.where(np.arange(36) >= 12, 1.1, 1.0) * np.where(np.arange(36) >= 24, 1.1, 1.0)
    found = change_points(noisy(levels))
    assert [c.index for c in found] == [12, 24]
    assert all(8 < c.change_pct < 12 for c in found)
    assert found[0].after == pytest.approx(found[1].before)


def test_deterministic_for_a_seed():
    values = noisy(step(), sigma=0.03)
    assert change_points(values, seed=7) == change_points(values, seed=7)


def test_constant_series_has_none():
    assert change_points([1.25] * 20) == []


@pytest.mark.parametrize("min_size", [2, 3, 5])
def test_shorter_than_two_segments_has_none(min_size):
    values = [1.0] * min_size + [2.0] * (min_size - 1)
    assert change_points(values, min_size=min_size) == []


def test_empty_series_has_none():
    assert change_points([]) == []


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf])
def test_non_positive_or_non_finite_value_named_by_position(bad):
    with pytest.raises(ValueError, match=r"values\[2\]"):
        change_points([1.0, 1.0, bad, 1.0])


@pytest.mark.parametrize(
    "options",
    [{"alpha": 0.0}, {"alpha": 1.0}, {"min_size": 1}, {"alpha": 0.01, "permutations": 99}],
)
def test_invalid_options_rejected(options):
    with pytest.raises(ValueError):
        change_points([1.0] * 10, **options)


@pytest.mark.parametrize(("alpha", "min_size"), [(0.01, 3), (0.05, 3), (0.01, 2), (0.002, 4)])
def test_the_fewest_values_a_change_can_be_found_in_bound_every_splits_p_value(alpha, min_size):
    """Counted over every arrangement of a perfect step of n values at k (each as likely
    under the permutation test): the exact p-value of the best split reaches `alpha` at
    fewest_values, and never below it."""
    fewest = fewest_values(alpha, min_size)
    assert fewest_values() == 10  # the defaults: 0.01 and 3

    def least_p(n: int) -> float:
        return min(exact_p(n, k, min_size) for k in range(min_size, n - min_size + 1))

    assert least_p(fewest - 1) >= alpha > least_p(fewest)


def exact_p(n: int, k: int, min_size: int) -> float:
    """The permutation p-value of k values of 0 then n - k of 1, from every arrangement."""
    arrangements = []
    for low in itertools.combinations(range(n), k):
        row = np.ones(n)
        row[list(low)] = 0.0
        arrangements.append(row)
    maxima = _statistics(np.array(arrangements), min_size).max(axis=1)
    observed = _statistics(np.where(np.arange(n) < k, 0.0, 1.0)[None, :], min_size).max()
    return float(np.mean(maxima >= observed - 1e-9))
