"""A real performance history, end to end: a scratch branch of commits in a throwaway
clone of this repository, one of them planting a slowdown (an extra copy of K and V in
every decode step), a decode-speed run measured at each commit with that commit's code,
every run added to a history database, then `history changes` and `history plot`: the
runs measure each commit's code, the changes are listed and drawn by this checkout's (its
uncommitted edits too, so that a change to the plot shows in history-trend.png at once).

    .venv/bin/python scripts/history_demo.py [--commits 12] [--planted 7] [--out docs/]

It prints the changes found and writes history-trend.png into --out. About 10 s per
commit on a 2-core CPU.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from planting import KV_COPY_LINE, STEP_LINE

ROOT = Path(__file__).resolve().parent.parent
ATTNBENCH = [sys.executable, "-m", "attnbench"]
#: One thread: with two on a 2-core machine, any other process on the second core stalls
#: every parallel region of the step (its threads wait for a descheduled peer), and a
#: history of such runs shows the neighbours, not the code.
SWEEP = [
    "--d-model",
    "1024",
    "--heads",
    "16",
    "--kv-heads",
    "16,1",
    "--prompt-len",
    "2048",
    "--batch",
    "4",
    "--mode",
    "cache",
    "--no-prefill",
    "--max-time",
    "1",
    "--threads",
    "1",
]


def git(clone: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(clone), *args], check=True, capture_output=True, text=True
    )
    return done.stdout.strip()


def attnbench(clone: Path, *args: str, code: Path | None = None) -> str:
    """attnbench from the clone's own code, in the clone (so HEAD is its commit); or from
    `code`'s, in `code` (`python -m` finds attnbench in its working directory first)."""
    where = code or clone
    env = {**os.environ, "PYTHONPATH": str(where), "COLUMNS": "100", "NO_COLOR": "1"}
    done = subprocess.run([*ATTNBENCH, *args], cwd=where, env=env, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        sys.exit(f"attnbench {' '.join(args)} failed:\n{done.stderr}")
    return done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=12)
    parser.add_argument("--planted", type=int, default=7, help="The commit that slows down.")
    parser.add_argument("--out", type=Path, default=ROOT / "docs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        clone = Path(scratch) / "attnbench"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        git(clone, "checkout", "-q", "-b", "history-demo")
        git(clone, "config", "user.name", "history demo")
        git(clone, "config", "user.email", "demo@localhost")
        db = Path(scratch) / "history.sqlite"
        attention = clone / "attnbench" / "modules" / "attention.py"
        for number in range(1, args.commits + 1):
            if number == args.planted:
                source = attention.read_text()
                assert source.count(STEP_LINE) == 1, "the decode step changed: update the demo"
                attention.write_text(source.replace(STEP_LINE, KV_COPY_LINE))
                git(clone, "commit", "-q", "-am", "Attend copies of the cached K and V")
            else:
                git(clone, "commit", "-q", "--allow-empty", "-m", f"Commit {number} of the demo")
            results = Path(scratch) / f"run{number}.json"
            attnbench(clone, "decode-speed", *SWEEP, "--json", str(results), "--quiet")
            attnbench(clone, "history", "add", str(results), "--db", str(db), "--quiet")
            planted = " (planted slowdown)" if number == args.planted else ""
            sha = git(clone, "rev-parse", "--short=10", "HEAD")
            print(f"commit {number}: {sha}{planted}", flush=True)
        changes = ["history", "changes", "--db", str(db), "--metric", "step_ms_median"]
        print(attnbench(clone, *changes, code=ROOT), end="")
        out = (args.out / "history-trend.png").resolve()
        plot = ["history", "plot", "--db", str(db), "--out", str(out), "--quiet"]
        attnbench(clone, *plot, code=ROOT)
        print(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")


if __name__ == "__main__":
    main()
