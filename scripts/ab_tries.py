"""`attnbench ab` tried N times: A/A (the committed HEAD against itself) and against a
planted slowdown (a commit on a scratch branch whose decode step attends copies of the
cached K and V, a real code change). Prints how many tries failed the gate (exit 1) and
which points regressed; every A/A failure is a false alarm, every planted try that
passes is a miss.

Each try's paired visits are kept in one JSON file that scripts/gate_simulation.py --ab
resamples. The working tree's attnbench/ must be committed (A/A times HEAD against the
working tree, which must be HEAD).

    python scripts/ab_tries.py [--tries 10] [--planted] [--rounds 5] [--visit-time 0.25]
        [--threads N]
        [--config configs/ab.yaml] [--out results/bench/ab-tries-cpu.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

from planting import KV_COPY_LINE, ROOT, STEP_LINE, git, planted_commit


def one_try(config: str, head: list[str], options: list[str], folder: Path, index: int) -> dict:
    """One `attnbench ab` run in its own process: its exit code and every point's visits."""
    out = folder / f"try-{index}.json"
    command = [
        sys.executable,
        "-m",
        "attnbench",
        "ab",
        "--base",
        "HEAD",
        *head,
        config,
        *options,
        "--json",
        str(out),
        "--out",
        str(folder / f"logs-{index}"),
        "--quiet",
    ]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        sys.exit(f"ab exited {done.returncode}: {done.stderr.strip()}")
    report = json.loads(out.read_text())
    regressed = [r["config"] for r in report["rows"] if r["verdict"] == "regressed"]
    return {
        "exit_code": done.returncode,
        "regressed": regressed,
        "counts": report["summary"]["counts"],
        "points": report["ab"]["points"],
    }


def summary(tries: list[dict], what: str) -> list[str]:
    failed = sum(t["exit_code"] == 1 for t in tries)
    points = Counter(
        f"{c.get('variant')} S={c.get('prompt_len')} {c.get('mode')}"
        for t in tries
        for c in t["regressed"]
    )
    lines = [f"{what}: {failed} of {len(tries)} tries failed the gate (exit 1)"]
    lines += [f"- {label}: regressed in {n} tries" for label, n in points.most_common()]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tries", type=int, default=10)
    parser.add_argument("--planted", action="store_true", help="head: the planted commit")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--visit-time", type=float, default=0.25)
    parser.add_argument("--threads", type=int, help="default: the study's")
    parser.add_argument("--config", default="configs/ab.yaml")
    parser.add_argument("--out", type=Path, default=ROOT / "results/bench/ab-tries-cpu.json")
    args = parser.parse_args()
    if git("status", "--porcelain", "--", "attnbench"):
        sys.exit("attnbench/ has uncommitted changes: commit them, so that A/A is HEAD vs HEAD")
    head = []
    if args.planted:
        message = "the decode step attends copies of K and V"
        head = ["--head", planted_commit(STEP_LINE, KV_COPY_LINE, message)]
    what = "planted" if args.planted else "aa"
    with tempfile.TemporaryDirectory() as tmp:
        options = ["--rounds", str(args.rounds), "--visit-time", str(args.visit_time)]
        if args.threads is not None:
            options += ["--threads", str(args.threads)]
        tries = [one_try(args.config, head, options, Path(tmp), i) for i in range(args.tries)]
    saved = json.loads(args.out.read_text()) if args.out.exists() else {}
    saved[what] = {
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "commit": git("rev-parse", "HEAD"),
        "config": args.config,
        "rounds": args.rounds,
        "visit_time_s": args.visit_time,
        "threads": args.threads,
        "tries": tries,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(saved, separators=(",", ":")) + "\n")
    print("\n".join(summary(tries, what)))


if __name__ == "__main__":
    main()
