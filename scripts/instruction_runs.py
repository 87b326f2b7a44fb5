"""Instruction counts of the default study's cached decode steps, N times in a row, and
once more with a planted extra copy of the query in every step (a real code change, in a
scratch worktree of HEAD): how identical the counts are from run to run, and whether
`compare` flags the planted copy on every point. Each run is one
`attnbench decode-speed --instructions` process (all points in one valgrind process).

    python scripts/instruction_runs.py [--runs 5] [--config attnbench/configs/default.yaml]
        [--out results/bench/instructions-cpu.json]
    python scripts/instruction_runs.py --report results/bench/instructions-cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from attnbench.gate.compare import Verdict, judge_count

ROOT = Path(__file__).resolve().parent.parent
#: The planted change: the step copies its query once more (well under 5% of its time).
QUERY_LINE = "q = q_proj(x).view(batch, heads, 1, dim)"
PLANTED_LINE = "q = q_proj(x).view(batch, heads, 1, dim).clone()"
ATTENTION = "attnbench/modules/attention.py"
#: Only the counts matter here: cached steps, timed briefly, no reference.
FLAGS = ["--mode", "cache", "--no-prefill", "--gen-len", "0", "--reference", "none",
         "--max-time", "0.05", "--instructions", "--quiet"]  # fmt: skip


def counted(config: str, folder: Path, name: str, source: Path = ROOT) -> dict:
    """One decode-speed run of `source`'s code: each cached point's instructions per step."""
    out = folder / f"{name}.json"
    env = {**os.environ, "PYTHONPATH": str(source)}
    where = subprocess.run([sys.executable, "-c", "import attnbench; print(attnbench.__file__)"],
                           env=env, capture_output=True, text=True, check=True).stdout  # fmt: skip
    if not Path(where.strip()).is_relative_to(source):
        sys.exit(f"{name}: attnbench imports from {where.strip()}, not from {source}")
    command = [sys.executable, "-m", "attnbench", "decode-speed", "--config", config,
               *FLAGS, "--json", str(out)]  # fmt: skip
    subprocess.run(command, env=env, check=True, cwd=ROOT)
    records = json.loads(out.read_text())["records"]
    return {
        f"{r['variant']} S={r['prompt_len']}": r["instructions_per_step"]
        for r in records
        if r["mode"] == "cache"
    }


def planted_tree(folder: Path) -> Path:
    """A scratch worktree of HEAD whose decode step copies its query once more."""
    tree = folder / "planted"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "-d", str(tree), "HEAD"],
                   check=True)  # fmt: skip
    source = tree / ATTENTION
    text = source.read_text()
    if text.count(QUERY_LINE) != 1:
        sys.exit(f"{ATTENTION}: the query line to plant into is not there once")
    source.write_text(text.replace(QUERY_LINE, PLANTED_LINE))
    return tree


def report(saved: dict) -> list[str]:
    runs, planted = saved["runs"], saved["planted"]
    labels = list(runs[0])
    lines = [f"{len(runs)} runs, measured {saved['created']}, commit {saved['commit'][:10]}",
             "", "| point | instructions per step | spread over the runs | planted query copy |",
             "|---|---|---|---|"]  # fmt: skip
    flagged = 0
    for label in labels:
        counts = [run[label] for run in runs]
        spread = max(counts) / min(counts) - 1
        judged = judge_count(counts[0], planted[label])
        flagged += judged.verdict is Verdict.REGRESSED
        change = planted[label] / counts[0] - 1
        lines.append(f"| {label} | {counts[0]:,} | {spread:.2%} | {change:+.2%} "
                     f"({judged.verdict.value}) |")  # fmt: skip
    lines += ["", f"planted query copy flagged on {flagged} of {len(labels)} points"]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--config", default="attnbench/configs/default.yaml")
    parser.add_argument("--out", type=Path, default=ROOT / "results/bench/instructions-cpu.json")
    parser.add_argument("--report", type=Path, help="print the report of a saved file")
    args = parser.parse_args()
    if args.report is not None:
        print("\n".join(report(json.loads(args.report.read_text()))))
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        runs = [counted(args.config, folder, f"run-{i}") for i in range(args.runs)]
        tree = planted_tree(folder)
        try:
            planted = counted(args.config, folder, "planted", tree)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                           check=True)  # fmt: skip
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                            text=True, check=True).stdout.strip()  # fmt: skip
    saved = {"created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
             "commit": commit, "config": args.config, "runs": runs, "planted": planted}  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(saved, indent=1) + "\n")
    print("\n".join(report(saved)))


if __name__ == "__main__":
    main()
