"""Planted regressions: real code changes on scratch commits, for the scripts that check
the gates catch them (ab_tries.py, instruction_runs.py, history_demo.py)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ATTENTION = "attnbench/modules/attention.py"
#: The step attends copies of the cached K and V.
STEP_LINE = "return o_proj(attend(q, keys, values).reshape(batch, 1, width))"
KV_COPY_LINE = "return o_proj(attend(q, keys.clone(), values.clone()).reshape(batch, 1, width))"
#: The step copies its query once more (well under 5% of its time).
QUERY_LINE = "q = q_proj(x).view(batch, heads, 1, dim)"
QUERY_COPY_LINE = "q = q_proj(x).view(batch, heads, 1, dim).clone()"


def git(*args: str, cwd: Path = ROOT) -> str:
    done = subprocess.run(
        ["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True
    )
    return done.stdout.strip()


def planted_commit(line: str, planted: str, message: str) -> str:
    """A commit on top of HEAD whose attention module has `planted` for `line` (which must
    be there once), made in a scratch worktree; its sha. The commit stays unreferenced."""
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "planted"
        git("worktree", "add", "-q", "-d", str(tree), "HEAD")
        try:
            source = tree / ATTENTION
            text = source.read_text()
            if text.count(line) != 1:
                sys.exit(f"{ATTENTION}: the line to plant into is not there once: {line}")
            source.write_text(text.replace(line, planted))
            git(
                "-c",
                "user.name=planted",
                "-c",
                "user.email=planted@localhost",
                "commit",
                "-q",
                "-am",
                f"planted: {message}",
                cwd=tree,
            )
            return git("rev-parse", "HEAD", cwd=tree)
        finally:
            git("worktree", "remove", "--force", str(tree))
