"""Re-run every example session of README.md and write its real output into the page.

A session is a fenced block whose first line is `$ attnbench ...` (or `$ python scripts/...`,
one of this repository's scripts, or `$ torchrun ...`); each `$ ` line is run
(in a scratch directory holding the repository's configs/ and scripts/examples/), and
the lines after it, up to the next `$ ` line or the end of the block, become what it
printed (stdout and stderr, in order, without the progress lines, and with the exit code
when it is not 0). Tables render at COLUMNS=100, the width of the page. Run it after any
change to what a command prints:

    .venv/bin/python scripts/readme_examples.py
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
WIDTH = "100"
FENCE = re.compile(r"^```")
SESSION = re.compile(r"^\$ (attnbench|python scripts/|torchrun )")
#: The one line per point a command prints off a terminal while it runs.
PROGRESS = re.compile(r"^\[\d+/\d+\] ")


def run(command: str, cwd: Path) -> list[str]:
    """What `command` (an attnbench command line, or a script of this repository run
    from its root) prints, as lines."""
    args = shlex.split(command)
    env = {**os.environ, "COLUMNS": WIDTH, "NO_COLOR": "1", "TERM": "dumb"}
    if args[0] == "python":
        assert args[1].startswith("scripts/"), command
        args, cwd = [sys.executable, *args[1:]], ROOT
    elif args[0] == "torchrun":  # ranks of one machine, as the README shows them
        args = [str(Path(sys.executable).parent / "torchrun"), *args[1:]]
        env["OMP_NUM_THREADS"] = "1"  # torchrun's own default, set so it does not warn
    else:
        assert args[0] == "attnbench", command
        args = [str(Path(sys.executable).parent / "attnbench"), *args[1:]]
    done = subprocess.run(args, cwd=cwd, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    lines = [line.rstrip() for line in done.stdout.rstrip("\n").splitlines()]
    lines = [line for line in lines if not PROGRESS.match(line)]
    return lines + ([f"(exit code {done.returncode})"] if done.returncode else [])


def regenerate(lines: list[str], cwd: Path) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        if not FENCE.match(line) or i >= len(lines) or not SESSION.match(lines[i]):
            continue
        while i < len(lines) and not FENCE.match(lines[i]):  # the session, up to its fence
            command = lines[i]
            i += 1
            while i < len(lines) and not FENCE.match(lines[i]) and not lines[i].startswith("$ "):
                i += 1  # the old output
            print(command, file=sys.stderr)
            out += [command, *run(command[2:], cwd)]
    return out


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        cwd = Path(scratch)
        shutil.copytree(ROOT / "configs", cwd / "configs")
        for example in (ROOT / "scripts" / "examples").iterdir():
            shutil.copy(example, cwd / example.name)
        lines = README.read_text().splitlines()
        README.write_text("\n".join(regenerate(lines, cwd)) + "\n")
        plot = cwd / "results" / "default" / "decode_latency.png"
        if plot.is_file():  # the plot the README shows, from the run it shows
            shutil.copy(plot, ROOT / "docs" / "decode_latency.png")


if __name__ == "__main__":
    main()
