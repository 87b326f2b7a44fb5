"""Print the timing gate's simulated false-regression and detection rates.

The first line is the configuration tests/test_compare.py asserts on (500 pairs, seed 0,
the default noise); the tables below show how the rates move with the step-to-step noise
and with the shift between two runs (which the gate's statistics cannot see: hence running
baseline and candidate in one job).

    python scripts/gate_simulation.py [--pairs 500] [--seed 0]
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from attnbench.gate_sim import Noise, simulate

SIGMAS = (0.01, 0.02, 0.03, 0.05, 0.08)
SLOWDOWNS = (1.1, 1.2, 1.5)
RUN_SIGMAS = (0.01, 0.03, 0.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    noise = Noise()
    result = simulate(pairs=500, slowdown=1.2, noise=noise, seed=0)
    print(f"default noise {noise}")
    print(
        f"500 A/A pairs: {result.false_rate:.1%} false regressions; "
        f"20% slowdown caught in {result.detection_rate:.1%} of pairs"
    )
    print()
    header = " | ".join(f"caught at {s:.1f}x" for s in SLOWDOWNS)
    print(f"| sigma | relative IQR | false regressions | {header} |")
    print("|---" * (3 + len(SLOWDOWNS)) + "|")
    for sigma in SIGMAS:
        level = replace(noise, sigma=sigma)
        runs = [simulate(args.pairs, s, level, seed=args.seed) for s in SLOWDOWNS]
        caught = " | ".join(f"{r.detection_rate:.1%}" for r in runs)
        iqr = 2 * 0.6745 * sigma  # of a lognormal with small sigma, before outliers
        print(f"| {sigma:.0%} | {iqr:.1%} | {runs[0].false_rate:.1%} | {caught} |")
    print()
    print("| run-to-run shift | false regressions | caught at 1.2x |")
    print("|---|---|---|")
    for run_sigma in RUN_SIGMAS:
        r = simulate(args.pairs, 1.2, replace(noise, run_sigma=run_sigma), seed=args.seed)
        print(f"| {run_sigma:.0%} | {r.false_rate:.1%} | {r.detection_rate:.1%} |")


if __name__ == "__main__":
    main()
