"""The regression gate against a planted bug: the classic mistake of KV-cache calculators,
the cache sized with the query heads instead of the KV heads.

Writes the exact metrics of a study (`attnbench baseline exact`) as the code computes
them, then again with the bug planted in this process only (the code on disk is
untouched), and gates the second against the first as CI gates a change against the
committed baseline (`attnbench compare`, with the flags given here). Exits with the
gate's exit code: 1 when the bug is caught.

    python scripts/planted_kv_bug.py [STUDY.yaml] [compare flags, e.g. --only-changed]
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
from pathlib import Path

import attnbench.model.capacity as capacity
from attnbench.cli import main as attnbench

correct = capacity.kv_heads_per_rank


def planted(num_heads: int, num_kv_heads: int, tp: int) -> int:
    """The bug: every query head gets its own K and V in the cache."""
    return correct(num_heads, num_heads, tp)


def run(args: list[str]) -> int:
    """`attnbench ARGS` in this process; its exit code."""
    sys.argv = ["attnbench", *args]
    try:
        attnbench()
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else 1
    return 0


def exact(study: list[str], to: str) -> None:
    with contextlib.redirect_stdout(io.StringIO()):  # "wrote ...": said below
        if run(["baseline", "exact", *study, "--to", to]):
            sys.exit(2)


def main() -> None:
    args = sys.argv[1:]
    study = [str(Path(args.pop(0)).resolve())] if args and not args[0].startswith("-") else []
    with tempfile.TemporaryDirectory() as scratch:
        os.chdir(scratch)  # short file names in the report
        exact(study, "baseline.json")
        capacity.kv_heads_per_rank = planted
        exact(study, "planted.json")
        sys.exit(run(["compare", "baseline.json", "planted.json", *args]))


if __name__ == "__main__":
    main()
