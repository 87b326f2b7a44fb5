"""Instruction counts of the default study's cached decode steps, N times in a row, and
once more with a planted extra copy of the query in every step (a real code change, in a
scratch worktree of HEAD): how identical the counts are from run to run, and whether
`compare` flags the planted copy: on which points, at the default count threshold (1%)
and at a stricter one. Each run is one
`attnbench decode-speed --instructions` process (all points in one valgrind process).

    python scripts/instruction_runs.py [--runs 5] [--config attnbench/configs/default.yaml]
        [--out results/bench/instructions-cpu.json]
    python scripts/instruction_runs.py --report results/bench/instructions-cpu.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from planting import QUERY_COPY_LINE, QUERY_LINE, ROOT, git, planted_commit

from attnbench.ab.sides import default_cache_dir, revision_side
from attnbench.gate.compare import Thresholds, Verdict, judge_count
from attnbench.study.plan import DEFAULT_CONFIG

#: The stricter count threshold the report also judges at.
STRICT = Thresholds(count=0.005)

#: Only the counts matter here: cached steps, timed briefly, no reference.
FLAGS = [
    "--mode",
    "cache",
    "--no-prefill",
    "--gen-len",
    "0",
    "--reference",
    "none",
    "--max-time",
    "0.05",
    "--instructions",
    "--quiet",
]


def counted(config: str, folder: Path, name: str, python: Path = Path(sys.executable)) -> dict:
    """One decode-speed run by `python` (whose attnbench it imports): each cached point's
    instructions per step."""
    out = folder / f"{name}.json"
    command = [
        str(python),
        "-m",
        "attnbench",
        "decode-speed",
        "--config",
        config,
        *FLAGS,
        "--json",
        str(out),
    ]
    subprocess.run(command, check=True, cwd=ROOT)
    records = json.loads(out.read_text())["records"]
    return {
        f"{r['variant']} S={r['prompt_len']}": r["instructions_per_step"]
        for r in records
        if r["mode"] == "cache"
    }


def planted_python() -> Path:
    """The interpreter of a side (as `attnbench ab` makes one: a worktree and a venv) of a
    commit on top of HEAD whose decode step copies its query once more."""
    sha = planted_commit(QUERY_LINE, QUERY_COPY_LINE, "the decode step copies its query once more")
    return revision_side("planted", ROOT, sha, default_cache_dir(), "planted").python


def report(saved: dict) -> list[str]:
    runs, planted = saved["runs"], saved["planted"]
    labels = list(runs[0])
    default = Thresholds()
    header = (
        "| point | instructions per step | spread over the runs | planted query copy "
        f"| at {default.count:.1%} | at {STRICT.count:.1%} |"
    )
    lines = [
        f"{len(runs)} runs, measured {saved['created']}, commit {saved['commit'][:10]}",
        "",
        header,
        "|---|---|---|---|---|---|",
    ]
    flagged = {default: 0, STRICT: 0}
    for label in labels:
        counts = [run[label] for run in runs]
        spread = max(counts) / min(counts) - 1
        change = planted[label] / counts[0] - 1
        verdicts = []
        for th in flagged:
            verdict = judge_count(counts[0], planted[label], th).verdict
            flagged[th] += verdict is Verdict.REGRESSED
            verdicts.append(verdict.value)
        lines.append(
            f"| {label} | {counts[0]:,} | {spread:.2%} | {change:+.2%} | {' | '.join(verdicts)} |"
        )
    lines.append("")
    for th, n in flagged.items():
        gate = "fails" if n else "passes"
        lines.append(
            f"count threshold {th.count:.1%}: the planted run {gate} the gate "
            f"({n} of {len(labels)} points regressed)"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--config", default=str(DEFAULT_CONFIG))
    parser.add_argument("--out", type=Path, default=ROOT / "results/bench/instructions-cpu.json")
    parser.add_argument("--report", type=Path, help="print the report of a saved file")
    args = parser.parse_args()
    if args.report is not None:
        print("\n".join(report(json.loads(args.report.read_text()))))
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        python = planted_python()  # first: a failure here loses no run
        runs = [counted(args.config, folder, f"run-{i}") for i in range(args.runs)]
        planted = counted(args.config, folder, "planted", python)
    commit = git("rev-parse", "HEAD")
    saved = {
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "commit": commit,
        "config": args.config,
        "runs": runs,
        "planted": planted,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(saved, indent=1) + "\n")
    print("\n".join(report(saved)))


if __name__ == "__main__":
    main()
