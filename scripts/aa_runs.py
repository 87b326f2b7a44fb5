"""A/A runs: the same code run N times in a row, every pair of runs gated against each
other. Each run is its own process (`attnbench decode-speed --config STUDY --json`), as
two CI jobs would be. Prints, per gated metric (the step time and its in-run ratio),
how many point comparisons regressed, improved or could not be compared; every one of
them is a false alarm, since nothing changed.

The runs' decode rows are kept, trimmed to their keys, the step and the ratio with
their raw samples, in one small JSON file that scripts/gate_simulation.py --runs
resamples.

    python scripts/aa_runs.py [--runs 10] [--config attnbench/configs/default.yaml]
        [--out results/bench/aa-runs-cpu.json]
    python scripts/aa_runs.py --report results/bench/aa-runs-cpu.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import tempfile
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

from attnbench.experiments.decode import DecodeRecord
from attnbench.gate.compare import Verdict, compare_documents
from attnbench.records import Kind, field_kinds
from attnbench.study.documents import parse_document

#: The metrics gated, and the fields a trimmed record keeps besides its keys.
METRICS = ("step_ms_median", "x_of_reference_median")
KEPT = ("step_ms_median", "step_ms_p25", "step_ms_p75", "samples_ms", "reference",
        "x_of_reference_median", "x_of_reference_p25", "x_of_reference_p75",
        "x_of_reference_samples", "status")  # fmt: skip
DEFAULT_CONFIG = Path("attnbench/configs/default.yaml")


def one_run(config: Path, folder: Path, index: int) -> dict:
    """One decode-speed run in its own process, its document trimmed."""
    out = folder / f"run-{index}.json"
    subprocess.run([sys.executable, "-m", "attnbench", "decode-speed", "--config", str(config),
                    "--json", str(out), "--quiet"], check=True)  # fmt: skip
    return trimmed(json.loads(out.read_text()))


def trimmed(doc: dict) -> dict:
    """The document with its records cut to their keys and KEPT, samples to 4 digits."""
    keys = [f for f, kind in field_kinds(DecodeRecord).items() if kind is Kind.KEY]

    def short(value):
        return [float(f"{v:.4g}") for v in value] if isinstance(value, list) else value

    records = [{f: short(r[f]) for f in (*keys, *KEPT) if f in r} for r in doc["records"]]
    return {**doc, "records": records}


def gate_pairs(runs: list[dict]) -> dict[str, Counter]:
    """Every pair of runs (earlier as the baseline) compared: the verdicts per metric."""
    counts = {metric: Counter() for metric in METRICS}
    docs = [parse_document(run, f"run {i}") for i, run in enumerate(runs)]
    for base, cur in itertools.combinations(docs, 2):
        for f in compare_documents(base, cur).findings:
            if f.metric in counts:
                counts[f.metric][f.verdict] += 1
    return counts


def report(saved: dict) -> list[str]:
    runs = saved["runs"]
    env = runs[0]["environment"]
    peaks = [r["environment"].get("peak_gbps") or 0 for r in runs]
    lines = [
        f"{len(runs)} runs of {saved['config']}, measured {saved['created']}: "
        f"{env['cpu_model']}, {env['num_threads']} threads, torch {env['torch_version']}",
        f"copy peak per run: {' / '.join(f'{p:.1f}' for p in peaks)} GB/s",
        "",
        "| metric | comparisons | regressed | improved | inconclusive | not compared |",
        "|---|---|---|---|---|---|",
    ]
    for metric, counted in gate_pairs(runs).items():
        total = sum(counted.values())
        false = counted[Verdict.REGRESSED]
        lines.append(
            f"| {metric} | {total} | {false} ({false / total:.1%}) | "
            f"{counted[Verdict.IMPROVED]} | {counted[Verdict.INCONCLUSIVE]} | "
            f"{counted[Verdict.INCOMPARABLE]} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    parser.add_argument("--out", type=Path, default=Path("results/bench/aa-runs-cpu.json"))
    parser.add_argument("--report", type=Path, help="gate the runs of a saved file again")
    args = parser.parse_args()
    if args.report is not None:
        print("\n".join(report(json.loads(args.report.read_text()))))
        return
    with tempfile.TemporaryDirectory() as tmp:
        runs = [one_run(args.config, Path(tmp), i) for i in range(args.runs)]
    created = datetime.now(timezone.utc).isoformat(timespec="seconds")
    saved = {"created": created, "config": str(args.config), "runs": runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(saved, separators=(",", ":")) + "\n")
    print("\n".join(report(saved)))


if __name__ == "__main__":
    main()
