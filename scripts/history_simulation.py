"""How well history.changepoints finds changes, under noise taken from real CPU samples.

    .venv/bin/python scripts/history_simulation.py [--trials N] [--seed S] [--run-shift PCT]
        [--format markdown]

Noise model: each trial picks one measured point of results/bench/gate-samples-cpu.json
(records with status "ok" and raw samples) and builds a series of COMMITS commits from it.
A commit's value is one run: the median of n samples drawn with replacement from that
point's samples (n = how many it has), times the commit's true level. So consecutive
commits differ as two runs under the conditions of that one real run would.

--run-shift PCT adds the drift between runs that those samples cannot show (another
process, clocks, a busy VM): each commit's value is also multiplied by exp(N(0, sigma)),
a lognormal factor with sigma = PCT/100 (about PCT% either way). The table then shows
every rate without the shift and with it, from the same seeds, so the difference is what
the shift does.

Scenarios, each over --trials series, searched with change_points' defaults:
  step   a 10% slowdown from commit STEP_AT on; found when a change point with a positive
         change lies within +-2 commits of it;
  drift  3% slower per commit over commits STEP_AT..STEP_AT+4 (about 16% in all), flat after;
         found when a change point with a positive change lies in [STEP_AT-2, STEP_AT+7];
  flat   no change (A/A): every change point is false; reported per 100 commits.
Rates come with 95% Wilson intervals (false change points: k of trials x COMMITS commits).
Exit status 1 when any rate shown misses its target (detection >= 90%, false change
points <= 1 per 100 commits).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attnbench.history.changepoints import change_points

SAMPLES = Path(__file__).resolve().parent.parent / "results" / "bench" / "gate-samples-cpu.json"
COMMITS, STEP_AT = 30, 15
STEP, DRIFT, DRIFT_COMMITS = 1.10, 1.03, 5
STEP_WINDOW = 2  # commits either side of STEP_AT where a found step may lie
DRIFT_WINDOW = (STEP_AT - 2, STEP_AT + DRIFT_COMMITS + 2)
MIN_DETECTION, MAX_FALSE_PER_100 = 0.90, 1.0
SCENARIOS = {
    "step": f"{STEP - 1:.0%} step at commit {STEP_AT} found",
    "drift": f"{DRIFT - 1:.0%}/commit drift over commits {STEP_AT}-"
    f"{STEP_AT + DRIFT_COMMITS - 1} found",
    "flat": "false change points per 100 commits (A/A)",
}


@dataclass
class Rate:
    """Events counted out of a number of chances, with a 95% Wilson interval."""

    label: str
    count: int
    total: int
    scale: float  # 1 for a share, 100 for a count per 100 commits
    target: float
    at_least: bool  # whether the target is a floor (detection) or a ceiling (false alarms)

    @property
    def value(self) -> float:
        return self.scale * self.count / self.total

    @property
    def interval(self) -> tuple[float, float]:
        z, n = 1.96, self.total
        p = self.count / n
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
        return self.scale * max(0.0, centre - half), self.scale * min(1.0, centre + half)

    @property
    def met(self) -> bool:
        return self.value >= self.target if self.at_least else self.value <= self.target

    def cells(self) -> list[str]:
        low, high = self.interval
        if self.scale == 1:
            shown = [f"{self.value:.1%}", f"{low:.1%} - {high:.1%}", f">= {self.target:.0%}"]
        else:
            shown = [f"{self.value:.2f}", f"{low:.2f} - {high:.2f}", f"<= {self.target:g}"]
        return [self.label, f"{self.count}/{self.total}", *shown, "yes" if self.met else "NO"]


def load_points(path: Path) -> list[np.ndarray]:
    """The raw step times of every usable record."""
    records = json.loads(path.read_text())["records"]
    return [
        np.asarray(r["samples_ms"], dtype=float)
        for r in records
        if r.get("status") == "ok" and r.get("samples_ms")
    ]


def levels(scenario: str) -> np.ndarray:
    """Each commit's true level, relative to the first."""
    commits = np.arange(COMMITS)
    if scenario == "step":
        return np.where(commits >= STEP_AT, STEP, 1.0)
    if scenario == "drift":
        return DRIFT ** np.clip(commits - STEP_AT + 1, 0, DRIFT_COMMITS)
    return np.ones(COMMITS)


def series(
    samples: np.ndarray, level: np.ndarray, run_shift: float, rng: np.random.Generator
) -> np.ndarray:
    """One run per commit: a bootstrap median of the point's samples, times the commit's
    level and a lognormal run factor of sigma `run_shift` (exactly 1 when it is 0)."""
    runs = np.median(rng.choice(samples, (len(level), len(samples))), axis=1)
    return runs * level * np.exp(rng.normal(0.0, run_shift, len(level)))


def found(scenario: str, rising: list[int]) -> bool:
    """Whether the change points with a positive change (their indices) catch the change."""
    if scenario == "step":
        return any(abs(i - STEP_AT) <= STEP_WINDOW for i in rising)
    low, high = DRIFT_WINDOW
    return any(low <= i <= high for i in rising)


def simulate(points: list[np.ndarray], trials: int, seed: int, run_shift: float) -> list[Rate]:
    """The three rates, each from `trials` series searched with change_points' defaults."""
    rates = []
    for code, (scenario, label) in enumerate(SCENARIOS.items()):
        level, hits = levels(scenario), 0
        for trial in range(trials):
            rng = np.random.default_rng([seed, code, trial])
            samples = points[rng.integers(len(points))]
            cps = change_points(series(samples, level, run_shift, rng))
            if scenario == "flat":
                hits += len(cps)
            else:
                hits += found(scenario, [c.index for c in cps if c.change_pct > 0])
        if scenario == "flat":
            rate = Rate(label, hits, trials * COMMITS, 100, MAX_FALSE_PER_100, at_least=False)
        else:
            rate = Rate(label, hits, trials, 1, MIN_DETECTION, at_least=True)
        rates.append(rate)
    return rates


def table(rows: list[list[str]], markdown: bool) -> str:
    header = ["run shift", "rate", "count", "value", "95% interval", "target", "met"]
    if markdown:
        lines = [header, ["---"] * len(header), *rows]
        return "\n".join("| " + " | ".join(line) + " |" for line in lines)
    widths = [max(len(line[i]) for line in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in [header, *rows]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1000, help="series per scenario")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--run-shift",
        type=float,
        default=0.0,
        metavar="PCT",
        help="lognormal run-to-run shift: sigma in percent",
    )
    parser.add_argument("--format", choices=("text", "markdown"), default="text")
    args = parser.parse_args()
    if args.trials < 1 or args.run_shift < 0:
        parser.error("--trials must be at least 1 and --run-shift at least 0")
    points = load_points(SAMPLES)
    defaults = change_points.__kwdefaults__
    started = time.perf_counter()
    rows, missed = [], False
    for shift in sorted({0.0, args.run_shift}):
        for rate in simulate(points, args.trials, args.seed, shift / 100):
            rows.append([f"{shift:g}%", *rate.cells()])
            missed |= not rate.met
    settings = ", ".join(f"{k}={v}" for k, v in defaults.items())
    print(
        f"change_points({settings}); seed {args.seed}, {args.trials} trials per scenario, "
        f"{COMMITS} commits per series; noise: bootstrap medians of {len(points)} real points "
        f"({SAMPLES.name}); {time.perf_counter() - started:.0f} s"
    )
    print()
    print(table(rows, args.format == "markdown"))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
