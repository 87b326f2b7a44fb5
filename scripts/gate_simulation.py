"""Print the timing gate's false-regression and detection rates, as Markdown.

Synthetic (the default): the first line is the configuration tests/gate/test_compare.py asserts
on (500 pairs, seed 0, the default noise); the tables below show how the rates move with
the step-to-step noise and with the shift between two runs (which the gate's statistics
cannot see: hence running baseline and candidate in one job).

Real (--results): the raw samples of the decode rows of a results JSON (`decode-speed
--json` or `run`'s results.json). Every run of a pair is a bootstrap draw from one row's
own samples, so a pair differs as two runs under that one run's conditions would: the
rates hold for the noise within a run. The shift between two separate runs (another
process, clocks, a busy machine) is not in those samples; on a shared machine it is much
larger, and these figures say nothing about it. A second figure per row judges the first
half of its samples, in the order they were taken, against the second half (one pair per
row, half the samples each): drift within the run shows there. The first table judges
each row as compare does: regressed when any of its gated timings is. With several
results files, one line each of that table's totals.

Recorded runs (--runs, with --ab and --instructions): every gating mode on the noise of
real consecutive runs of this machine, run-to-run shifts included. A comparison takes
one point from two different recorded runs (absolute timings, in-run ratios: each a
bootstrap draw of that run's samples; instruction counts: the counts), or resamples the
paired visits of one recorded `attnbench ab` try; it is judged as is (a false alarm when
it regresses) and with the current side 10% and 20% slower (caught when it regresses).
Pairs of runs whose environments differ for the metric are not gated, as compare has it.
The data files come from scripts/aa_runs.py, scripts/ab_tries.py and
scripts/instruction_runs.py.

    python scripts/gate_simulation.py [--pairs 500] [--seed 0]
    python scripts/gate_simulation.py --results results.json [--provider sdpa-math]
        [--pairs 100] [--slowdown 1.2] [--metric step_ms_median] [--noise-factor 3]
    python scripts/gate_simulation.py --results a.json b.json [--metric ...]
    python scripts/gate_simulation.py --runs results/bench/aa-runs-cpu.json
        [--ab results/bench/ab-tries-cpu.json]
        [--instructions results/bench/instructions-cpu.json] [--pairs 2000]
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from attnbench.errors import UsageError
from attnbench.gate.compare import Thresholds
from attnbench.gate.paired import abba_pairs
from attnbench.gate.simulation import (
    NO_PAIRS,
    Noise,
    Resampling,
    RowResult,
    SeriesResult,
    SimulationResult,
    simulate,
    simulate_counts,
    simulate_document,
    simulate_paired,
    simulate_rows,
    simulate_sampled,
    totals,
)
from attnbench.measure.stats import Measurement, median
from attnbench.study.documents import load_document, parse_document

SIGMAS = (0.01, 0.02, 0.03, 0.05, 0.08)
SLOWDOWNS = (1.1, 1.2, 1.5)
RUN_SIGMAS = (0.01, 0.03, 0.05)
#: The rates the gate is held to: at most this many false regressions, at least this
#: many planted slowdowns caught.
MAX_FALSE, MIN_CAUGHT = 0.01, 0.95
#: Series listed one by one when they miss either rate.
WORST_SHOWN = 15


def synthetic(pairs: int, seed: int) -> None:
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
        runs = [simulate(pairs, s, level, seed=seed) for s in SLOWDOWNS]
        caught = " | ".join(f"{r.detection_rate:.1%}" for r in runs)
        iqr = 2 * 0.6745 * sigma  # of a lognormal with small sigma, before outliers
        print(f"| {sigma:.0%} | {iqr:.1%} | {runs[0].false_rate:.1%} | {caught} |")
    print()
    print("| run-to-run shift | false regressions | caught at 1.2x |")
    print("|---|---|---|")
    for run_sigma in RUN_SIGMAS:
        r = simulate(pairs, 1.2, replace(noise, run_sigma=run_sigma), seed=seed)
        print(f"| {run_sigma:.0%} | {r.false_rate:.1%} | {r.detection_rate:.1%} |")


def _thresholds(th: Thresholds) -> str:
    if th == Thresholds():
        return "default thresholds"
    return f"time threshold {th.time:.0%}, noise factor {th.noise_factor:g} x IQR/median"


def _rates(r: SimulationResult) -> str:
    return f"{r.false_rate:.1%} | {r.detection_rate:.1%}"


def _halves(r: SimulationResult) -> str:
    return f"{r.false_regressions} of {r.pairs} | {r.detections} of {r.pairs}"


def _spread(results: list[SeriesResult]) -> str:
    """Median sample count and median relative IQR of the series."""
    counts = [len(r.series.samples) for r in results]
    iqrs = [Measurement.of_samples(r.series.samples).rel_iqr for r in results]
    return f"{median(counts):g} | {median(iqrs):.1%}"


def real(path: str, how: Resampling) -> None:
    document = load_document(path)
    results = simulate_document(document, how)
    provider, pairs, slowdown, seed = how.provider, how.pairs, how.slowdown, how.seed
    thresholds = how.thresholds
    only = f", provider {provider}" if provider else ""
    print(f"**Gate on real samples: {path}{only}**")
    print()
    print(
        f"{len(results)} timings of decode rows that ran, {pairs} A/A pairs and {pairs} pairs "
        f"slowed {slowdown:g}x each, seed {seed}, {_thresholds(thresholds)}. Each run of a pair is "
        "a bootstrap draw from one row's own samples: the rates hold for the noise within "
        "one run. The shift between two separate runs is not in these samples (on a shared "
        "machine it is much larger): see the run-to-run table of the synthetic mode."
    )
    print()
    if not results:
        print("No decode row that ran kept raw samples" + (f" of {provider}." if provider else "."))
        return
    slow = f"{slowdown:g}x"
    rows(simulate_rows(document, how), slow)
    print("Each timing on its own:")
    print()
    head = (
        f"series | median samples | median IQR/median | false regressions | caught at {slow} "
        "| halves: false | halves: caught |"
    )
    print(f"| metric | {head}")
    print("|---" * 8 + "|")
    for (metric,), (res, halves) in totals(results).items():
        these = [r for r in results if r.series.metric == metric]
        print(f"| {metric} | {len(these)} | {_spread(these)} | {_rates(res)} | {_halves(halves)} |")
    print()
    print(f"| metric | provider | {head}")
    print("|---" * 9 + "|")
    for (metric, name), (res, halves) in totals(results, by="provider").items():
        these = [r for r in results if (r.series.metric, r.series.provider) == (metric, name)]
        print(
            f"| {metric} | {name} | {len(these)} | {_spread(these)} | {_rates(res)} "
            f"| {_halves(halves)} |"
        )
    worst = [
        r
        for r in results
        if r.resampled.false_rate > MAX_FALSE or r.resampled.detection_rate < MIN_CAUGHT
    ]
    worst.sort(key=lambda r: (r.resampled.detection_rate, -r.resampled.false_rate))
    print()
    print(
        f"{len(worst)} of {len(results)} timings miss <= {MAX_FALSE:.0%} false regressions "
        f"or >= {MIN_CAUGHT:.0%} caught" + (":" if worst else ".")
    )
    if worst:
        print()
        print(f"| row | metric | samples | IQR/median | false regressions | caught at {slow} |")
        print("|---" * 6 + "|")
        for r in worst[:WORST_SHOWN]:
            s = r.series
            iqr = Measurement.of_samples(s.samples).rel_iqr
            print(
                f"| {s.label} | {s.metric} | {len(s.samples)} | {iqr:.1%} | {_rates(r.resampled)} |"
            )
        if len(worst) > WORST_SHOWN:
            print(f"\n({len(worst) - WORST_SHOWN} more not shown)")


def _by_provider(results: list[RowResult]) -> dict[str, list[RowResult]]:
    """The rows' results by provider, in the order the providers first come."""
    grouped: dict[str, list[RowResult]] = {}
    for r in results:
        grouped.setdefault(r.row.provider, []).append(r)
    return grouped


def _total(results: list[RowResult]) -> SimulationResult:
    return sum((r.resampled for r in results), NO_PAIRS)


def rows(results: list[RowResult], slow: str) -> None:
    """The rates of the rows as compare judges them: a row regresses when any of its gated
    timings does."""
    metrics = ", ".join(f"`{m}`" for m in dict.fromkeys(m for r in results for m in r.row.samples))
    print(
        f"As `compare` judges a row: it regresses when any of its gated timings does ({metrics}). "
        "A slowed run has all of them slower, the in-run ratio too: the slowdown is in the "
        "row's own step, not in the kernels it is timed against."
    )
    print()
    print(f"| provider | rows | timings per row | false regressions | caught at {slow} |")
    print("|---" * 5 + "|")
    for label, these in [*_by_provider(results).items(), ("**all**", results)]:
        low, high = min(len(r.row.samples) for r in these), max(len(r.row.samples) for r in these)
        per_row = f"{low}" if low == high else f"{low} to {high}"
        print(f"| {label} | {len(these)} | {per_row} | {_rates(_total(these))} |")
    missed = sum(
        r.resampled.false_rate > MAX_FALSE or r.resampled.detection_rate < MIN_CAUGHT
        for r in results
    )
    print()
    print(
        f"{missed} of {len(results)} rows miss <= {MAX_FALSE:.0%} false regressions or "
        f">= {MIN_CAUGHT:.0%} caught."
    )
    print()


def several(paths: list[str], how: Resampling) -> None:
    """One line per results file: its rows judged as compare judges them."""
    pairs, slowdown, seed, metrics = how.pairs, how.slowdown, how.seed, how.metrics
    only = f" ({', '.join(f'`{m}`' for m in metrics)})" if metrics else ""
    print(
        f"Rows judged as `compare` judges them, on the gated timings of each row{only}; "
        f"{pairs} A/A pairs and {pairs} pairs slowed {slowdown:g}x per row, seed {seed}."
    )
    print()
    print(
        f"| results | threads | rows | false regressions | caught at {slowdown:g}x "
        "| least caught provider |"
    )
    print("|---" * 6 + "|")
    for path in paths:
        document = load_document(path)
        results = simulate_rows(document, how)
        providers = {name: _total(these) for name, these in _by_provider(results).items()}
        least = min(providers, key=lambda name: providers[name].detection_rate, default=None)
        worst = f"{least} {providers[least].detection_rate:.1%}" if least else "-"
        threads = (document.environment or {}).get("num_threads")
        total = _rates(_total(results))
        print(f"| {Path(path).name} | {threads} | {len(results)} | {total} | {worst} |")


def recorded(runs: str, ab: str | None, instructions: str | None, trials: int, seed: int) -> None:
    saved = json.loads(Path(runs).read_text())
    docs = [parse_document(run, f"{runs} run {i}") for i, run in enumerate(saved["runs"])]
    results = [
        (
            "absolute timing (`step_ms_median`)",
            simulate_sampled(docs, "step_ms_median", trials=trials, seed=seed),
        ),
        (
            "in-run ratio (`x_of_reference_median`)",
            simulate_sampled(docs, "x_of_reference_median", trials=trials, seed=seed),
        ),
    ]
    sources = [f"{len(docs)} runs of {saved['config']} ({saved['created'][:10]})"]
    if ab is not None:
        tries = json.loads(Path(ab).read_text())["aa"]
        pairs = [
            [
                abba_pairs([(v["round"], v["side"], v["step_ms_median"]) for v in p["visits"]])
                for p in t["points"]
            ]
            for t in tries["tries"]
        ]
        results.append(
            ("interleaved A/B (`attnbench ab`)", simulate_paired(pairs, trials=trials, seed=seed))
        )
        sources.append(f"{len(pairs)} A/A tries of `attnbench ab`, {tries['rounds']} rounds")
    if instructions is not None:
        counted = json.loads(Path(instructions).read_text())
        results.append(
            (
                "instructions (`instructions_per_step`)",
                simulate_counts(counted["runs"], trials=trials, seed=seed),
            )
        )
        sources.append(f"{len(counted['runs'])} instruction-count runs")
    env = docs[0].environment or {}
    print(
        f"Recorded on {env.get('cpu_model')}, {env.get('num_threads')} threads, torch "
        f"{env.get('torch_version')}: {'; '.join(sources)}. {trials} comparisons per mode, "
        f"seed {seed}."
    )
    print()
    print("| gating mode | not gated | false alarms | caught at 1.1x | caught at 1.2x |")
    print("|---|---|---|---|---|")
    for name, r in results:
        print(
            f"| {name} | {r.not_gated / r.comparisons:.1%} | {r.false_rate:.2%} | "
            f"{r.caught_rate(1.1):.1%} | {r.caught_rate(1.2):.1%} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--pairs", type=int, default=None, help="per cell (default 500), or per timing (100)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--results",
        nargs="+",
        help="a results JSON whose decode samples to resample; several: one line each",
    )
    parser.add_argument("--runs", help="recorded A/A runs (scripts/aa_runs.py)")
    parser.add_argument("--ab", help="with --runs: recorded ab tries (scripts/ab_tries.py)")
    parser.add_argument(
        "--instructions", help="with --runs: recorded counts (scripts/instruction_runs.py)"
    )
    parser.add_argument("--provider", help="with --results: only this provider's rows")
    parser.add_argument("--slowdown", type=float, default=1.2, help="with --results")
    parser.add_argument(
        "--metric", action="append", help="with --results: only this timing (repeatable)"
    )
    parser.add_argument(
        "--noise-factor",
        type=float,
        default=Thresholds.noise_factor,
        help="with --results: the gate's IQR multiple (what-if; compare uses the default)",
    )
    args = parser.parse_args()
    if args.runs is not None:
        recorded(args.runs, args.ab, args.instructions, args.pairs or 2000, args.seed)
        return
    if args.ab or args.instructions:
        parser.error("--ab and --instructions need --runs")
    if args.results is None:
        if args.provider or args.metric or args.noise_factor != Thresholds.noise_factor:
            parser.error("--provider, --metric and --noise-factor need --results")
        synthetic(args.pairs or 500, args.seed)
    else:
        if len(args.results) > 1 and args.provider:
            parser.error("--provider takes one --results file")
        how = Resampling(
            args.pairs or 100,
            args.slowdown,
            args.provider,
            args.metric,
            Thresholds(noise_factor=args.noise_factor),
            args.seed,
        )
        try:
            if len(args.results) > 1:
                several(args.results, how)
            else:
                real(args.results[0], how)
        except UsageError as exc:
            parser.error(str(exc))


if __name__ == "__main__":
    main()
