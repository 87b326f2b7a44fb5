"""Write the real output of every example of README.md and docs/*.md into the page.

An example is one of three things:

- a shell session: a fenced block whose first command line is `$ attnbench ...`,
  `$ python scripts/...` (a script of this repository, run from its root) or
  `$ torchrun ...`. Every `$ ` line is run (a later one may also be `$ cat FILE`, to show
  a file an earlier command wrote), and the lines after it, up to the next `$ ` line or
  the end of the block, become what it printed: stdout and stderr in order, without the
  progress lines, and with the exit code when it is not 0;
- a Python session: a fenced block whose first line is `>>> `. Its statements (a `>>> `
  line and the `... ` lines that continue it) run one after another in one interpreter,
  each followed by what it printed, as the interactive interpreter shows it;
- a Markdown output: the lines between `<!-- output: COMMAND -->` and
  `<!-- end output -->` are what COMMAND (as in a shell session) printed, rendered as
  Markdown: the tables that scripts print.

Each example runs in its own scratch directory holding configs/, results/baselines/,
results/bench/, docs/architectures/ and the files of scripts/examples/, with COLUMNS=100
(rich tables fit the content column of the site in a desktop browser) and no colour.

Exact examples print no timing: their output depends only on the code (parameter counts,
bytes, fits, presets, help texts, errors). Timed examples, whose output depends on the
machine (timings, numerical errors, the environment), are marked: a shell session by a
first line `# ran on`, a Markdown output by `<!-- timed output: COMMAND -->`. They are
regenerated only with --timed, which writes the machine and the date on the page.

    python scripts/docs_examples.py                # regenerate the exact examples
    python scripts/docs_examples.py --check        # exit 1, with a diff, if a page differs
    python scripts/docs_examples.py --timed        # also every timed example
    python scripts/docs_examples.py --timed fit    # also the timed ones whose command has 'fit'

Examples with the same commands run once and show the same output. The exact examples'
`attnbench` commands and scripts run in forks of this process, which loads attnbench
(its command line and what its commands load) once: each is a process of its own, with
the same code and inputs as a new interpreter, without seconds of start-up per command.
It is an error, and nothing is written, when an example prints a traceback; it is an
error too when a plain text block (```text, or ``` alone) is no session (every output
shown comes from a run), when a command of `attnbench --help` has no page in
docs/commands/, when a relative link of README.md leads nowhere, and when README.md is
over 10,240 bytes.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import difflib
import io
import os
import re
import runpy
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WIDTH = 100
#: Tables at the width of the page, no colour, and stdout and stderr in the order printed.
ENV = {"COLUMNS": str(WIDTH), "NO_COLOR": "1", "TERM": "dumb", "PYTHONUNBUFFERED": "1"}
FENCE = re.compile(r"^```")
TEXT_FENCE = re.compile(r"^```(text)?\s*$")  # what opens an output block
SESSION = re.compile(r"^\$ (attnbench|python scripts/|torchrun )")
PYTHON = re.compile(r"^>>> ")
TIMED = "# ran on"
TRACEBACK = "Traceback (most recent call last):"
MARKDOWN = re.compile(r"^<!-- (timed )?output: (.+) -->$")
MARKDOWN_END = "<!-- end output -->"
#: The last line of a command's output when it exits with another code than 0 (lines_of).
EXIT_CODE = re.compile(r"^\(exit code \d+\)$")
#: The one line per point a command prints off a terminal while it runs.
PROGRESS = re.compile(r"^\[\d+/\d+\] ")
#: Plots of the default study the pages show, from the run whose summary they show.
STUDY = "results/default"
PLOTS = ("decode_latency.png", "kv_memory_context.png")
SEPARATOR = "\x1e"  # between the outputs of the statements of a Python session
PYTHON_DRIVER = f"""
import code, sys
sys.stderr = sys.stdout
console = code.InteractiveInterpreter({{"__name__": "__main__"}})
for statement in sys.stdin.read().split({SEPARATOR!r}):
    console.runsource(statement, "<example>", "single")
    print({SEPARATOR!r}, flush=True)
"""


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def scratch_dir(parent: str) -> Path:
    """A fresh directory holding the repository's configs/, baselines, recorded benchmark
    data, example inputs and the corpus of config.json files (docs/architectures/)."""
    cwd = Path(tempfile.mkdtemp(dir=parent))
    shutil.copytree(ROOT / "configs", cwd / "configs")
    shutil.copytree(ROOT / "docs" / "architectures", cwd / "docs" / "architectures")
    for kept in ("baselines", "bench"):
        shutil.copytree(ROOT / "results" / kept, cwd / "results" / kept)
    for example in (ROOT / "scripts" / "examples").iterdir():
        shutil.copy(example, cwd / example.name)
    return cwd


#: Held while this process writes to its stderr or forks, so that no fork copies a lock
#: another thread holds.
FORKING = threading.Lock()


def say(text: str) -> None:
    with FORKING:
        print(text, file=sys.stderr)


def load_cli() -> None:
    """Load attnbench's command line, and what its commands load when they run (the
    commands import them as they need them), into this process (with the examples'
    environment, which its consoles read as they are made)."""
    os.environ.update(ENV)
    import attnbench.cli  # noqa: F401
    import attnbench.gate.compare  # noqa: F401
    import attnbench.history.series  # noqa: F401
    import attnbench.render.history  # noqa: F401
    import attnbench.render.plots  # noqa: F401
    import attnbench.render.report  # noqa: F401
    import attnbench.study.runner  # noqa: F401

    with contextlib.suppress(ImportError):  # what counts a model type without formulas
        import transformers.models.auto.modeling_auto  # noqa: F401


def run_main() -> int:
    """attnbench's `main` in this process, and the exit code a process running it would
    end with."""
    from attnbench.__main__ import main

    return exit_code_of(main)


def run_script(script: str, args: list[str]) -> int:
    """`python SCRIPT ARGS` (a script of this repository) in this process, as a new
    interpreter runs it: from the root, its folder first on sys.path; its exit code."""
    os.chdir(ROOT)
    sys.argv = [script, *args]
    sys.path.insert(0, str((ROOT / script).parent))
    return exit_code_of(lambda: runpy.run_path(str(ROOT / script), run_name="__main__"))


def exit_code_of(run: Callable[[], object]) -> int:
    """The exit code a process running `run` would end with (a traceback printed, as
    Python prints it, for an exception it lets out)."""
    try:
        run()
    except SystemExit as exc:
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
        return exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


def forked(run: Callable[[], int], cwd: Path) -> tuple[str, int]:
    """What `run` prints in `cwd` and its exit code, run in a fork of this process
    (load_cli first): stdout and stderr into one pipe, unbuffered, as a new process would
    write them."""
    read, write = os.pipe()
    with FORKING:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
    if pid == 0:  # the child never returns: whatever happens, it ends here
        code = 1
        try:
            os.close(read)
            os.dup2(write, 1)
            os.dup2(write, 2)
            os.chdir(cwd)
            sys.stdout, sys.stderr = (
                io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), write_through=True, errors=e)
                for fd, e in ((1, "strict"), (2, "backslashreplace"))
            )
            code = run()
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        printed = pipe.read().decode()
    return printed, os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def run_command(command: str, cwd: Path, in_fork: bool = False) -> list[str]:
    """What one command line prints, as lines; an `attnbench` command or a script in a fork
    of this process when `in_fork` (see forked), else in a new one."""
    args = shlex.split(command)
    env = {**os.environ, **ENV}
    bin_dir = Path(sys.executable).parent
    if args[0] == "cat":
        return (cwd / args[1]).read_text().rstrip("\n").splitlines()
    if args[0] == "python":
        assert args[1].startswith("scripts/"), command
    if args[0] == "attnbench" and in_fork:

        def attnbench() -> int:
            sys.argv = args
            return run_main()

        return lines_of(*forked(attnbench, cwd))
    if args[0] == "python" and in_fork:
        return lines_of(*forked(lambda: run_script(args[1], args[2:]), ROOT))
    if args[0] == "python":
        args, cwd = [sys.executable, *args[1:]], ROOT
    elif args[0] == "torchrun":  # ranks of one machine
        args = [str(bin_dir / "torchrun"), *args[1:]]
        env["OMP_NUM_THREADS"] = "1"  # torchrun's own default, set so it does not warn
    else:
        assert args[0] == "attnbench", command
        args = [str(bin_dir / "attnbench"), *args[1:]]
    done = subprocess.run(
        args, cwd=cwd, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    return lines_of(done.stdout, done.returncode)


def lines_of(printed: str, code: int) -> list[str]:
    """A command's output as the page shows it: no progress lines, the exit code if not 0."""
    lines = [line.rstrip() for line in printed.rstrip("\n").splitlines()]
    lines = [line for line in lines if not PROGRESS.match(line)]
    return lines + ([f"(exit code {code})"] if code else [])


def run_python(statements: list[list[str]], cwd: Path) -> list[list[str]]:
    """What each statement of a Python session prints, as lines per statement."""
    source = SEPARATOR.join(
        "\n".join(line[4:] for line in statement) + "\n\n" for statement in statements
    )
    done = subprocess.run(
        [sys.executable, "-c", PYTHON_DRIVER],
        input=source,
        cwd=cwd,
        env={**os.environ, **ENV},
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    outputs = done.stdout.split(SEPARATOR + "\n")
    assert done.returncode == 0 and len(outputs) == len(statements) + 1, done.stdout
    return [[line.rstrip() for line in out.rstrip("\n").splitlines()] for out in outputs[:-1]]


@dataclass
class Example:
    """One example: `page`'s lines [start:end] are what it writes (a block's body, or the
    lines between a Markdown output's markers)."""

    page: Path
    start: int
    end: int
    kind: str  # "shell", "python" or "markdown"
    timed: bool
    commands: list[str] = field(default_factory=list)
    statements: list[list[str]] = field(default_factory=list)

    def key(self) -> tuple:
        return (self.kind == "python", *self.commands, *map(tuple, self.statements))

    def run(self, parent: str) -> list[list[str]]:
        """The output: per command of a session, per statement of a Python one."""
        cwd = scratch_dir(parent)
        if self.kind == "python":
            return run_python(self.statements, cwd)
        outputs = []
        for command in self.commands:
            say(f"{self.page.relative_to(ROOT)}: $ {command}")
            printed = run_command(command, cwd, in_fork=not self.timed)
            if self.kind == "markdown" and printed and EXIT_CODE.match(printed[-1]):
                # a session may show a command failing; a Markdown output is a generator's
                raise SystemExit(f"docs_examples.py: `{command}` failed: {' '.join(printed)}")
            outputs.append(printed)
        if self.timed:  # the plots of the default study, from the run the pages show
            for name in PLOTS:
                if (cwd / STUDY / name).is_file():
                    shutil.copy(cwd / STUDY / name, ROOT / "docs" / name)
        return outputs

    def render(self, outputs: list[list[str]], stamp: str) -> list[str]:
        """The example's new lines."""
        if self.kind == "python":
            return [
                line for s, out in zip(self.statements, outputs, strict=True) for line in (*s, *out)
            ]
        if self.kind == "markdown":
            ran = [f"*Ran on {stamp}.*", ""] if self.timed else []
            return ["", *ran, *paragraphs(outputs[0]), ""]
        body = [f"{TIMED} {stamp}"] if self.timed else []
        for command, output in zip(self.commands, outputs, strict=True):
            body += [f"$ {command}", *output]
        return body


def paragraphs(lines: list[str]) -> list[str]:
    """Markdown that a script printed, with its lines of text kept apart: a blank line
    after each, but within a table or a list (Markdown would join them into one)."""
    out: list[str] = []
    for line, after in zip(lines, [*lines[1:], ""], strict=True):
        out.append(line)
        together = any(line.startswith(p) and after.startswith(p) for p in ("|", "- "))
        if line and after and not together:
            out.append("")
    return out


def find_examples(page: Path, lines: list[str]) -> tuple[list[Example], list[str]]:
    """The examples of a page, and a problem for each plain text block no run writes."""
    examples, problems = [], []
    where = page.relative_to(ROOT)
    i = 0
    while i < len(lines):
        if marker := MARKDOWN.match(lines[i]):
            end = lines.index(MARKDOWN_END, i + 1)
            examples.append(
                Example(page, i + 1, end, "markdown", bool(marker[1]), commands=[marker[2]])
            )
            i = end + 1
            continue
        if not FENCE.match(lines[i]):
            i += 1
            continue
        start = end = i + 1
        while end < len(lines) and not FENCE.match(lines[end]):
            end += 1
        body = lines[start:end]
        timed = bool(body) and body[0].startswith(TIMED)
        first = body[int(timed)] if len(body) > timed else ""
        if SESSION.match(first):
            commands = [line[2:] for line in body if line.startswith("$ ")]
            examples.append(Example(page, start, end, "shell", timed, commands=commands))
        elif PYTHON.match(first):
            statements: list[list[str]] = []
            for line in body:
                if line.startswith(">>> "):
                    statements.append([line])
                elif line.startswith("... ") or line == "...":
                    statements[-1].append(line)
            examples.append(Example(page, start, end, "python", False, statements=statements))
        elif TEXT_FENCE.match(lines[i]) or timed:
            problems.append(f"{where}:{i + 1}: an output block that no run writes")
        i = end + 1
    return examples, problems


def machine() -> str:
    """This machine as `attnbench env` names it, with its CPUs on a CPU host and its load
    (the 1-minute load average as the timed examples start), torch's version and today's
    date. The CPUs, not torch's threads: an example may run on fewer
    threads than the host has CPUs (the default study's decode runs on one, as its
    report records), and the header names the host, not a run."""
    env = dict(line.partition(": ")[::2] for line in run_command("attnbench env", ROOT))
    device = env.get("device_name", "?")
    if env.get("device") == "cpu":
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        device += f", {cpus} CPU{'s' * (cpus != 1)}"
    if hasattr(os, "getloadavg"):  # how busy the host was: the timings are its as well
        device += f", load {os.getloadavg()[0]:.1f}"
    today = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    return f"{device}, torch {env.get('torch_version')}, {today}"


def missing_command_pages() -> list[str]:
    """A problem for each command `attnbench --help` lists without a page in docs/commands/."""
    lines = run_command("attnbench --help", ROOT)
    listed = lines[lines.index("Commands:") + 1 :] if "Commands:" in lines else []
    names = [line.split()[0] for line in listed if line.startswith("  ") and line.split()]
    pages = ROOT / "docs" / "commands"
    return [
        f"docs/commands/{name}.md: no page for the command `attnbench {name}`"
        for name in names
        if not (pages / f"{name}.md").is_file()
    ]


def broken_readme_links() -> list[str]:
    """A problem for each relative link of README.md to a file that does not exist (the
    site's build checks the links of docs/)."""
    text = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    return [
        f"README.md: a link to {target}, which does not exist"
        for target in targets
        if "://" not in target and not (ROOT / target).exists()
    ]


#: The most bytes README.md may hold: a newcomer reads it in two minutes.
README_BYTES = 10_240


def long_readme() -> list[str]:
    """A problem when README.md is longer than README_BYTES (as committed, before this run
    writes new outputs into it)."""
    size = len((ROOT / "README.md").read_bytes())
    if size <= README_BYTES:
        return []
    return [f"README.md: {size:,} bytes, more than {README_BYTES:,}; move detail into docs/"]


def regenerate(check: bool, timed: str | None) -> int:
    texts = {page: page.read_text().splitlines() for page in pages()}
    examples, problems = [], missing_command_pages() + broken_readme_links() + long_readme()
    for page, lines in texts.items():
        found, bad = find_examples(page, lines)
        examples += found
        problems += bad
    pattern = re.compile(timed) if timed is not None else None
    chosen = [
        e
        for e in examples
        if not e.timed or (pattern and any(pattern.search(c) for c in e.commands))
    ]
    stamp = machine() if any(e.timed for e in chosen) else ""
    outputs: dict[tuple, list[list[str]]] = {}
    with tempfile.TemporaryDirectory() as parent:
        for example in chosen:  # the timed ones one at a time, with nothing else running
            if example.timed and example.key() not in outputs:
                outputs[example.key()] = example.run(parent)
        exact = {e.key(): e for e in chosen if not e.timed}
        load_cli()
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            ran = pool.map(lambda e: e.run(parent), exact.values())
            outputs.update(zip(exact, ran, strict=True))
    crashed = {
        " ".join(e.commands)
        for e in chosen
        if any(TRACEBACK in line for out in outputs[e.key()] for line in out)
    }
    if crashed:  # a crash is no example: write nothing
        for commands in sorted(crashed):
            print(f"a traceback instead of an output: {commands}", file=sys.stderr)
        return 1
    changed = []
    for page, lines in texts.items():
        new = list(lines)
        # from the last example up, so that the line numbers of the earlier ones hold
        for example in sorted((e for e in chosen if e.page == page), key=lambda e: -e.start):
            new[example.start : example.end] = example.render(outputs[example.key()], stamp)
        if new == lines:
            continue
        changed.append(str(page.relative_to(ROOT)))
        if check:
            sys.stdout.writelines(
                difflib.unified_diff(
                    [line + "\n" for line in lines],
                    [line + "\n" for line in new],
                    f"{changed[-1]} (committed)",
                    f"{changed[-1]} (regenerated)",
                )
            )
        else:
            page.write_text("\n".join(new) + "\n")
    for problem in problems:
        print(problem, file=sys.stderr)
    if check and changed:
        print(
            f"out of date: {', '.join(changed)}; regenerate them with "
            "python scripts/docs_examples.py",
            file=sys.stderr,
        )
    return 1 if problems or (check and changed) else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check",
        action="store_true",
        help="regenerate the exact examples in memory; exit 1 if a page differs",
    )
    parser.add_argument(
        "--timed",
        nargs="?",
        const="",
        metavar="REGEX",
        help="also regenerate the timed examples (whose command matches REGEX)",
    )
    args = parser.parse_args()
    if args.check and args.timed is not None:
        parser.error("--check regenerates the exact examples only")
    sys.exit(regenerate(args.check, args.timed))


if __name__ == "__main__":
    main()
