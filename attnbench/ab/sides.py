"""The two sides of an A/B run: a source tree of attnbench each, and a virtual environment
whose python imports that tree's attnbench and shares every other package (torch...)
with the python running now, so nothing is installed.

The cache holds, per revision, ``<sha>/src`` (a detached git worktree), ``<sha>/venv`` and
``<sha>/ready``; per source directory, ``dir-<hash of its path>/venv`` and ``ready``.
`ready` is written last and records what the environment was made for: a later run
reuses everything when it matches, and remakes the environment when it does not (another
interpreter, say).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import venv
from dataclasses import dataclass
from pathlib import Path

from ..errors import FieldError, UsageError

#: The .pth files of a side's environment. Each line of a .pth joins sys.path in the
#: order of the files' names: the side's source first, then the shared packages.
SOURCE_PTH = "00-attnbench-src.pth"
SHARED_PTH = "10-attnbench-shared.pth"
READY = "ready"
SHA = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")  # SHA-1, or SHA-256 repositories


@dataclass(frozen=True)
class Side:
    """One side: `source` holds its `attnbench` package, `python` imports it from there;
    `sha` is the revision checked out, None for a directory taken as it is."""

    name: str
    source: Path
    python: Path
    sha: str | None = None

    @property
    def label(self) -> str:
        """The revision's short sha, or the directory."""
        return self.sha[:12] if self.sha else str(self.source)


def default_cache_dir() -> Path:
    """$XDG_CACHE_HOME/attnbench/ab, else ~/.cache/attnbench/ab."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "attnbench" / "ab"


def last_line(text: str) -> str | None:
    """The last line of `text` that is not blank, stripped: what a failed program said
    last. None when every line is blank."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else None


def run_tool(args: list[str], what: str, cwd: Path | None = None) -> str:
    """The stdout of a command; a UsageError naming `what` failed, with the last line it
    wrote on stderr, when it cannot start or exits non-zero."""
    try:
        done = subprocess.run(args, cwd=cwd, capture_output=True, text=True)
    except OSError as exc:
        raise UsageError(f"{what}: cannot run {args[0]}: {exc.strerror}") from None
    if done.returncode != 0:
        said = last_line(done.stderr) or f"exit code {done.returncode}"
        raise UsageError(f"{what} failed: {said}")
    return done.stdout


def repository_root(start: Path) -> Path | None:
    """The top of the git working tree holding `start`: the nearest folder upwards with a
    .git entry (a folder, or the file of a worktree); None outside one."""
    start = start.resolve()
    return next((d for d in (start, *start.parents) if (d / ".git").exists()), None)


def resolve_revision(repo: Path, rev: str, field: str) -> str:
    """The full sha of the commit `rev` names in `repo`; a FieldError of `field` when it
    names none."""
    if rev.startswith("-") or not rev.strip():
        raise FieldError(field, rev, "not a revision")
    try:
        sha = run_tool(
            ["git", "-C", str(repo), "rev-parse", f"{rev}^{{commit}}"], f"git rev-parse {rev}"
        ).strip()
    except UsageError:
        raise FieldError(field, rev, f"not a commit of the repository {repo}") from None
    if not SHA.match(sha):
        raise FieldError(field, rev, f"not a commit of the repository {repo}")
    return sha


def shared_site_dirs() -> list[str]:
    """The site-packages folders the running python imports from (its venv's, and the
    system's when that venv shares them): where torch and the rest are found."""
    names = ("site-packages", "dist-packages")
    return [p for p in sys.path if Path(p).name in names and Path(p).is_dir()]


def revision_side(name: str, repo: Path, rev: str, cache: Path, field: str) -> Side:
    """Side `name` at revision `rev` of `repo` (a FieldError of `field` when it names no
    commit): its worktree and environment under `cache`, made or reused."""
    sha = resolve_revision(repo, rev, field)
    root = cache.resolve() / sha  # absolute: git and the .pth files read it from elsewhere
    source = root / "src"
    recipe = _recipe(source)
    if not _ready(root, recipe):
        _checkout(repo, sha, source)
        _make_environment(root, recipe)
    return Side(name, source, python_of(root / "venv"), sha)


def directory_side(name: str, directory: Path, cache: Path, field: str) -> Side:
    """Side `name` running the attnbench of `directory` as it is on disk (a FieldError of
    `field` when it holds none); its environment under `cache`, keyed by the path."""
    source = directory.resolve()
    if not (source / "attnbench" / "__init__.py").is_file():
        raise FieldError(field, directory, "holds no attnbench package (attnbench/__init__.py)")
    digest = hashlib.sha256(str(source).encode()).hexdigest()[:16]
    root = cache.resolve() / f"dir-{digest}"
    recipe = _recipe(source)
    if not _ready(root, recipe):
        _make_environment(root, recipe)
    return Side(name, source, python_of(root / "venv"), None)


def python_of(env: Path) -> Path:
    return env / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _recipe(source: Path) -> dict:
    """What an environment is made of: the source it imports attnbench from, and the
    interpreter and packages it shares."""
    return {
        "source": str(source),
        "python": getattr(sys, "_base_executable", sys.executable),
        "version": list(sys.version_info[:2]),
        "shared": shared_site_dirs(),
    }


def _ready(root: Path, recipe: dict) -> bool:
    """The environment under `root` was completed for `recipe`, and is still there."""
    try:
        done = json.loads((root / READY).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    present = python_of(root / "venv").exists() and Path(recipe["source"]).is_dir()
    return done == recipe and present


def _checkout(repo: Path, sha: str, source: Path) -> None:
    """A detached worktree of `repo` at `sha` in `source`; one left by an interrupted
    run is reset to the commit instead, or made again when git no longer knows it."""
    what = f"checking out {sha[:12]} into {source}"
    if (source / ".git").exists():
        try:
            run_tool(["git", "-C", str(source), "checkout", "-q", "-f", sha], what)
            return
        except UsageError:
            pass  # a worktree git has forgotten (pruned): made again below
    try:
        if source.exists():  # what an interrupted checkout left
            shutil.rmtree(source)
        source.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{what} failed: {exc.filename or source}: {exc.strerror}") from None
    # -f: a worktree whose folder was deleted stays registered, and add refuses it otherwise;
    # -d: detached, so no branch is checked out twice.
    run_tool(
        ["git", "-C", str(repo), "worktree", "add", "-q", "-f", "-d", str(source), sha],
        f"git worktree add ({what})",
    )


def _make_environment(root: Path, recipe: dict) -> None:
    """A fresh virtual environment in `root`/venv (what `python -m venv` makes, without
    pip) whose .pth files put the source first on sys.path, then the shared packages;
    then the `ready` marker."""
    env = root / "venv"
    (root / READY).unlink(missing_ok=True)
    try:
        venv.EnvBuilder(clear=True, symlinks=os.name != "nt", with_pip=False).create(env)
        base = {"base": str(env), "platbase": str(env)}
        site = Path(sysconfig.get_path("purelib", vars=base))
        site.mkdir(parents=True, exist_ok=True)
        (site / SOURCE_PTH).write_text(recipe["source"] + "\n", encoding="utf-8")
        (site / SHARED_PTH).write_text(
            "".join(f"{p}\n" for p in recipe["shared"]), encoding="utf-8"
        )
        (root / READY).write_text(json.dumps(recipe, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        where = exc.filename or env
        raise UsageError(
            f"making the virtual environment {env} failed: {where}: {exc.strerror}"
        ) from None
