"""A Monte-Carlo check of the timing gate: how often pairs of runs of the same code are
flagged (false regressions), and how often a planted slowdown is caught.

Shared by tests/test_compare.py and scripts/gate_simulation.py, so the figures quoted in
the docs come from the code the tests hold to account.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..measure.timing import percentile
from .compare import Thresholds, TimingStats, Verdict, judge_timing


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


def draw_timing(rng: np.random.Generator, noise: Noise, slowdown: float = 1.0) -> TimingStats:
    """One run's samples and the median, p25 and p75 a record would carry."""
    run_shift = rng.lognormal(0.0, noise.run_sigma)
    x = noise.median_ms * slowdown * run_shift * rng.lognormal(0.0, noise.sigma, noise.samples)
    hit = rng.random(noise.samples) < noise.outlier_rate
    x[hit] *= rng.uniform(1.2, noise.outlier_max, hit.sum())
    samples = tuple(x.tolist())
    p25, median, p75 = (percentile(samples, q) for q in (25, 50, 75))
    return TimingStats(median, p25, p75, samples)


@dataclass(frozen=True)
class SimulationResult:
    pairs: int
    false_regressions: int
    detections: int

    @property
    def false_rate(self) -> float:
        return self.false_regressions / self.pairs

    @property
    def detection_rate(self) -> float:
        return self.detections / self.pairs


def simulate(
    pairs: int = 500,
    slowdown: float = 1.2,
    noise: Noise = Noise(),
    thresholds: Thresholds = Thresholds(),
    seed: int = 0,
) -> SimulationResult:
    """Judge `pairs` A/A pairs and `pairs` pairs whose current run is `slowdown` x slower."""
    rng = np.random.default_rng(seed)
    false_regressions = detections = 0
    for _ in range(pairs):
        base = draw_timing(rng, noise)
        same = draw_timing(rng, noise)
        slower = draw_timing(rng, noise, slowdown)
        false_regressions += judge_timing(base, same, thresholds).verdict is Verdict.REGRESSED
        detections += judge_timing(base, slower, thresholds).verdict is Verdict.REGRESSED
    return SimulationResult(pairs, false_regressions, detections)
