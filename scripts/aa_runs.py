"""A/A runs: the same study run N times in a row, each its own process (`attnbench run
STUDY`), as N CI jobs would be; optionally with one busy core beside them.
Nothing changes between the runs, so the report shows what a user can rely on:

- how far each comparison of the study (its decode points sampled in turn: each variant's
  cached step over the narrowest-KV variant's, cache over no cache, a provider over the
  baseline) moved across the runs, as max over min, and the worst of them;
- MHA over MQA (cached, longest context) in each run, and whether GQA lies between;
- how often a run's stated 95% intervals (every step time, as its median -+ step_ci_pct,
  and every comparison, as its ci_lo..ci_hi) hold the next run's value, and how often
  two consecutive runs' intervals do not overlap (a finding the next run contradicts);
- every pair of runs gated on the comparisons and the in-run ratios (the earlier run as
  the baseline): every `regressed` is a false alarm;
- a planted 20% slowdown of one variant's cached step in the later run of each pair of
  consecutive runs (its samples scaled by 1.2, and with them every comparison it is part
  of): how many pairs the gate fails, per variant, as `attnbench compare` exits (1 on any
  regressed metric) and on a comparison alone.

Each run records the host's load as it started and each row its cpu_share and memory
layouts. The runs' decode rows are kept, trimmed to their keys, timings, ratios and comparisons
with their raw samples, in one small JSON file that scripts/gate_simulation.py --runs
resamples.

    python scripts/aa_runs.py [--runs 10] [--busy] [--config attnbench/configs/default.yaml]
        [--out results/bench/aa-runs-cpu.json]
    python scripts/aa_runs.py --report results/bench/aa-runs-cpu.json
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

from attnbench.experiments.decode import DecodeRecord
from attnbench.gate.compare import Verdict, compare_documents
from attnbench.measure.stats import layout_chunks, median
from attnbench.records import Kind, field_kinds
from attnbench.study.documents import parse_document
from attnbench.study.plan import DEFAULT_CONFIG as STUDY_CONFIG

#: The comparisons of points sampled in turn, and the in-run ratio to the step's kernels.
COMPARISONS = ("x_of_narrowest_median", "x_of_no_cache_median", "x_of_baseline_median")
METRICS = (*COMPARISONS, "x_of_reference_median", "step_ms_median")
#: The statistics kept with each gated metric, and the other fields a trimmed row keeps.
STATS = ("median", "p25", "p75", "samples", "ci_lo", "ci_hi")
RATIOS = ("x_of_reference", "x_of_narrowest", "x_of_no_cache", "x_of_baseline")
KEPT = (
    *("step_ms_median", "step_ms_p25", "step_ms_p75", "samples_ms", "step_repeats"),
    *("reference", "narrowest_variant", "baseline_provider", "sampling", "sampling_group"),
    *("status", "layouts", "step_ci_pct", "cpu_share"),
    *(f"{stem}_{s}" for stem in RATIOS for s in STATS),
)
DEFAULT_CONFIG = STUDY_CONFIG
DEFAULT_OUT = Path("results/bench/aa-runs-cpu.json")
#: The planted slowdown of one variant's cached step.
PLANTED = 1.2


def one_run(config: Path, folder: Path, index: int) -> dict:
    """One `attnbench run` in its own process, its document trimmed to the decode rows,
    with its wall time and the host's load (1-minute average) as it started."""
    out = folder / f"run-{index}"
    load = os.getloadavg()[0]
    started = time.perf_counter()
    command = ["run", str(config), "--out", str(out), "--quiet"]
    subprocess.run([sys.executable, "-m", "attnbench", *command], check=True)
    seconds = time.perf_counter() - started
    doc = trimmed(json.loads((out / "results.json").read_text()))
    return {**doc, "wall_s": seconds, "load": load}


def trimmed(doc: dict) -> dict:
    """The document's decode section, its records cut to their keys and KEPT, samples to
    4 significant digits."""
    keys = [f for f, kind in field_kinds(DecodeRecord).items() if kind is Kind.KEY]

    def short(value):
        return [float(f"{v:.4g}") for v in value] if isinstance(value, list) else value

    decode = doc["sections"]["decode"]
    records = [{f: short(r[f]) for f in (*keys, *KEPT) if f in r} for r in decode["records"]]
    head = {k: v for k, v in doc.items() if k != "sections"}
    return {**head, "sections": {"decode": {"config": decode["config"], "records": records}}}


def rows(run: dict) -> list[dict]:
    return run["sections"]["decode"]["records"]


def label(r: dict) -> str:
    return f"{r['variant']} {r['mode']} {r['prompt_len']}"


def gate_pairs(runs: list[dict], metrics=METRICS) -> dict[str, Counter]:
    """Every pair of runs (earlier as the baseline) compared: the verdicts per metric."""
    counts = {metric: Counter() for metric in metrics}
    docs = [parse_document(run, f"run {i}") for i, run in enumerate(runs)]
    for base, cur in itertools.combinations(docs, 2):
        for f in compare_documents(base, cur).findings:
            if f.metric in counts:
                counts[f.metric][f.verdict] += 1
    return counts


def slowed(run: dict, variant: str, factor: float) -> dict:
    """The run with `variant`'s cached step `factor` x slower in every round: its step
    samples, and every comparison it is part of (over it, or it over another)."""
    run = copy.deepcopy(run)
    records = rows(run)
    for r in records:
        slow = r["variant"] == variant and r["mode"] == "cache"
        own = factor if slow else 1.0
        scale = {"x_of_no_cache": own, "x_of_baseline": 1.0, "x_of_reference": own}
        if r["mode"] == "cache" and r.get("x_of_narrowest_median") is not None:
            scale["x_of_narrowest"] = factor if slow else 1.0
            if r.get("narrowest_variant") == variant:
                scale["x_of_narrowest"] = 1 / factor
        for stem, by in scale.items():
            for s in STATS:
                value = r.get(f"{stem}_{s}")
                if isinstance(value, list):
                    r[f"{stem}_{s}"] = [v * by for v in value]
                elif value is not None:
                    r[f"{stem}_{s}"] = value * by
        if slow:
            for f in ("step_ms_median", "step_ms_p25", "step_ms_p75"):
                r[f] = r[f] * factor if r.get(f) is not None else None
            r["samples_ms"] = [v * factor for v in r.get("samples_ms", [])]
    return run


def failures(base: dict, cur: dict) -> tuple[bool, bool]:
    """Whether the gate fails the pair, as `attnbench compare` exits 1, and whether it
    does on a comparison: some comparison regressed."""
    result = compare_documents(parse_document(base, "base"), parse_document(cur, "head"))
    regressed = (
        f.metric in COMPARISONS and f.verdict is Verdict.REGRESSED for f in result.findings
    )
    return result.exit_code() == 1, any(regressed)


def moves(runs: list[dict]) -> list[tuple[str, str, list[float]]]:
    """Each comparison of the first run's rows, with its value in every run."""
    found = []
    for i, r in enumerate(rows(runs[0])):
        for metric in COMPARISONS:
            values = [rows(run)[i].get(metric) for run in runs]
            if all(v is not None for v in values):
                found.append((label(r), metric.removesuffix("_median"), values))
    return found


def report(saved: dict) -> list[str]:
    runs = saved["runs"]
    env = runs[0]["environment"]
    peaks = [r["environment"].get("peak_gbps") or 0 for r in runs]
    busy = " with one busy core beside them" if saved.get("busy") else ""
    lines = [
        f"{len(runs)} runs of {saved['config']}{busy}, measured {saved['created']}: "
        f"{env['cpu_model']}, {env['num_threads']} threads, torch {env['torch_version']}",
        f"copy peak per run: {' / '.join(f'{p:.1f}' for p in peaks)} GB/s",
    ]
    if all("wall_s" in r for r in runs):
        walls = " / ".join(f"{r['wall_s']:.1f}" for r in runs)
        lines.append(f"wall time per run: {walls} s")
    if all("load" in r for r in runs):
        loads = " / ".join(f"{r['load']:.2f}" for r in runs)
        lines.append(f"load as each run started: {loads}")
    shares = [[x["cpu_share"] for x in rows(r) if x.get("cpu_share") is not None] for r in runs]
    if all(shares):
        lines.append(f"least cpu_share per run: {' / '.join(f'{min(s):.2f}' for s in shares)}")
    layouts = sorted({x["layouts"] for r in runs for x in rows(r) if x.get("layouts")})
    if layouts:
        lines.append(f"memory layouts per point: {layouts[0]} to {layouts[-1]}")
    lines += ["", *variant_lines(runs), "", *move_lines(runs), "", *coverage_lines(runs)]
    return [*lines, "", *gate_lines(runs)]


def stated(row: dict, metric: str) -> tuple[float, float, float] | None:
    """A row's value of `metric` (a comparison's stem or `step_ms`) with the 95% interval
    the run stated for it: a comparison's bounds, or a step's median -+ step_ci_pct."""
    if metric == "step_ms":
        value, pct = row.get("step_ms_median"), row.get("step_ci_pct")
        if value is None or pct is None:
            return None
        return value, value * (1 - pct / 100), value * (1 + pct / 100)
    found = tuple(row.get(f"{metric}_{s}") for s in ("median", "ci_lo", "ci_hi"))
    return None if None in found else found  # type: ignore[return-value]


def coverage(runs: list[dict]) -> dict[str, list[tuple[bool, bool]]]:
    """For each metric, every stated interval of one run against the next run's row:
    (it holds the next run's value, it overlaps the next run's interval)."""
    found: dict[str, list[tuple[bool, bool]]] = {}
    for run, after in itertools.pairwise(runs):
        for row, next_row in zip(rows(run), rows(after), strict=True):
            for metric in ("step_ms", *(m.removesuffix("_median") for m in COMPARISONS)):
                now, then = stated(row, metric), stated(next_row, metric)
                if now is None or then is None:
                    continue
                holds = now[1] <= then[0] <= now[2]
                overlaps = now[1] <= then[2] and then[1] <= now[2]
                found.setdefault(metric, []).append((holds, overlaps))
    return found


def spread_ratios(runs: list[dict]) -> list[float]:
    """For every step time and comparison of the runs' rows sampled over several memory
    layouts: how far its value moved from run to run (the standard deviation of its log
    over the runs) over how far one layout's median moves within a run (the standard
    deviation of the layouts' log medians, averaged over the runs). About 1 where a run
    moves as one more layout would, as stats.next_run_interval takes it; about 1/sqrt(L)
    where a run is the mean of L independent layouts."""
    found = []
    fields = ("samples_ms", *(f"{m.removesuffix('_median')}_samples" for m in COMPARISONS))
    for i in range(len(rows(runs[0]))):
        for field in fields:
            values, errors = [], []
            for run in runs:
                row = rows(run)[i]
                chunks = layout_chunks(row.get(field) or [], row.get("layouts") or 1)
                if len(chunks) < 2:
                    break
                logs = [math.log(median(c)) for c in chunks]
                errors.append(statistics.stdev(logs))
                values.append(math.log(median(row[field])))
            else:
                if len(values) > 2 and statistics.mean(errors) > 0:
                    found.append(statistics.stdev(values) / statistics.mean(errors))
    return found


def coverage_lines(runs: list[dict]) -> list[str]:
    """How often a run's stated 95% intervals held the next run's value, and how often
    two consecutive runs' intervals did not overlap (a finding the next run contradicts)."""
    lines = [
        "| stated | intervals | hold the next run's value | contradicted by the next run |",
        "|---|---|---|---|",
    ]
    everything = []
    for metric, found in coverage(runs).items():
        everything += found
        held = sum(h for h, _ in found)
        apart = sum(not o for _, o in found)
        lines.append(f"| {metric} | {len(found)} | {held} ({held / len(found):.1%}) | {apart} |")
    if everything:
        held = sum(h for h, _ in everything)
        apart = sum(not o for _, o in everything)
        lines.append(
            f"| **all** | {len(everything)} | {held} ({held / len(everything):.1%}) | {apart} |"
        )
    ratios = spread_ratios(runs)
    if ratios:
        lines += [
            "",
            f"Moved from run to run, over how far one memory layout moves within a run: "
            f"{statistics.median(ratios):.2f}x on median ({min(ratios):.2f}x to "
            f"{max(ratios):.2f}x) over {len(ratios)} step times and comparisons.",
        ]
    return lines


def variant_lines(runs: list[dict]) -> list[str]:
    """MHA over MQA at the longest cached context in each run, and GQA between."""
    lines = ["| run | context | MHA / MQA | GQA / MQA | GQA between |", "|---|---|---|---|---|"]
    for i, run in enumerate(runs):
        cached = [r for r in rows(run) if r["mode"] == "cache" and r.get("x_of_narrowest_median")]
        if not cached:
            continue
        longest = max(r["prompt_len"] for r in cached)
        at = {
            r["variant"]: r["x_of_narrowest_median"] for r in cached if r["prompt_len"] == longest
        }
        mha = at.get("MHA")
        gqa = {v: x for v, x in at.items() if v.startswith("GQA")}
        between = all(1 < x < (mha or 0) for x in gqa.values())
        others = ", ".join(f"{v} {x:.2f}x" for v, x in gqa.items())
        answer = "yes" if between else "no"
        lines.append(f"| {i + 1} | {longest:,} | {mha:.2f}x | {others} | {answer} |")
    return lines


def move_lines(runs: list[dict]) -> list[str]:
    found = moves(runs)
    lines = ["| point | comparison | per run | max / min |", "|---|---|---|---|"]
    for where, metric, values in found:
        per_run = " / ".join(f"{v:.3g}" for v in values)
        lines.append(f"| {where} | {metric} | {per_run} | {max(values) / min(values):.3f} |")
    if found:
        where, metric, values = max(found, key=lambda m: max(m[2]) / min(m[2]))
        moved = max(values) / min(values) - 1
        lines += ["", f"The worst comparison, {metric} at {where}, moved by {moved:.1%}."]
    return lines


def gate_lines(runs: list[dict]) -> list[str]:
    lines = [
        "| metric | comparisons | regressed | improved | inconclusive | not compared |",
        "|---|---|---|---|---|---|",
    ]
    for metric, counted in gate_pairs(runs).items():
        total = sum(counted.values())
        if not total:
            continue
        false = counted[Verdict.REGRESSED]
        lines.append(
            f"| {metric} | {total} | {false} ({false / total:.1%}) | "
            f"{counted[Verdict.IMPROVED]} | {counted[Verdict.INCONCLUSIVE]} | "
            f"{counted[Verdict.INCOMPARABLE]} |"
        )
    pairs = list(zip(runs, runs[1:] + runs[:1], strict=True)) if len(runs) > 2 else []
    if pairs:
        variants = list(dict.fromkeys(r["variant"] for r in rows(runs[0])))
        lines += ["", f"Pairs of consecutive runs (and the last with the first): {len(pairs)}."]
        # each pair gated once as it is, and once per variant slowed: (gate, comparison)
        as_they_are = [failures(a, b) for a, b in pairs]
        planted = {v: [failures(a, slowed(b, v, PLANTED)) for a, b in pairs] for v in variants}
        for which, how in ((0, "by the gate (exit 1)"), (1, "on a comparison")):
            false = sum(f[which] for f in as_they_are)
            found = ", ".join(
                f"{v} {sum(f[which] for f in fs)} of {len(pairs)}" for v, fs in planted.items()
            )
            lines.append(
                f"Failed {how} as they are: {false}; with one variant's cached step "
                f"{PLANTED:g}x slower in the later run: {found}."
            )
    return lines


def busy_neighbour() -> subprocess.Popen:
    """A process that keeps one core busy."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def refuse_beside_report(
    parser: argparse.ArgumentParser, args: argparse.Namespace, why: str
) -> None:
    """Exit with parser's usage error if a flag other than --report was given beside it:
    reporting a saved file takes none of them."""
    given = [
        "--" + name.replace("_", "-")
        for name, value in vars(args).items()
        if name != "report" and value not in (None, False)
    ]
    if given:
        parser.error(f"{given[0]} has no effect with --report, which {why}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, help="how many runs (default 10)")
    parser.add_argument("--config", type=Path, help=f"the study (default {DEFAULT_CONFIG})")
    parser.add_argument("--busy", action="store_true", help="one busy core beside the runs")
    parser.add_argument("--out", type=Path, help=f"where to keep the runs (default {DEFAULT_OUT})")
    parser.add_argument("--report", type=Path, help="report the runs of a saved file again")
    args = parser.parse_args()
    if args.report is not None:
        refuse_beside_report(parser, args, "runs nothing")
        print("\n".join(report(json.loads(args.report.read_text()))))
        return
    args.runs = 10 if args.runs is None else args.runs
    args.config, args.out = as_given(args.config or DEFAULT_CONFIG), args.out or DEFAULT_OUT
    neighbour = busy_neighbour() if args.busy else None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            runs = [one_run(args.config, Path(tmp), i) for i in range(args.runs)]
    finally:
        if neighbour is not None:
            neighbour.kill()
    created = datetime.now(timezone.utc).isoformat(timespec="seconds")
    saved = {"created": created, "config": str(args.config), "busy": args.busy, "runs": runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(saved, separators=(",", ":")) + "\n")
    print("\n".join(report(saved)))


def as_given(path: Path) -> Path:
    """`path` relative to the working directory when it lies under it (the packaged
    study, from the repository's root): the runs and the saved file name it as a user
    of the repository would, not by this machine's absolute path."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        return path


if __name__ == "__main__":
    main()
