"""`attnbench ab`: the decode steps of a study timed by two revisions in turn, in one job,
and gated like `attnbench compare` gates two results files."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path

import typer

from ..ab.runner import AbResult, plan_points, run_ab
from ..ab.sides import default_cache_dir, directory_side, repository_root, revision_side
from ..errors import FieldError, UsageError
from ..gate.compare import Thresholds
from ..model.capacity import positive_int
from ..records import failed
from ..study.output import write_json_atomic
from ..study.plan import Task
from ..study.sweep import check_value
from . import app
from .common import check_writable, console, fail, progress_iter
from .compare_cmd import FORMATS, emit_comparison, parse_percent
from .decode_cmd import describe
from .flags import handles_errors


@app.command("ab")
@handles_errors
def ab_command(
    study: str = typer.Argument(
        ..., metavar="STUDY.yaml", help="Sweep file: its decode points are timed."
    ),
    base: str = typer.Option(
        ..., "--base", metavar="REV", help="The revision to gate against: a git revision here."
    ),
    head: str | None = typer.Option(
        None, "--head", metavar="REV", help="The revision to gate (default: see --head-dir)."
    ),
    head_dir: str | None = typer.Option(
        None,
        "--head-dir",
        metavar="DIR",
        help="A source tree to gate, as it is on disk (default: this working tree).",
    ),
    rounds: int = typer.Option(
        5, "--rounds", help="Rounds of ABBA visits of each point (two pairs each)."
    ),
    visit_time: float = typer.Option(
        0.25, "--visit-time", metavar="S", help="Seconds of sampling per visit at the most."
    ),
    threshold: str = typer.Option(
        "10%", "--threshold", help="Smallest timing change that counts, e.g. 10%."
    ),
    threads: int | None = typer.Option(
        None, "--threads", help="torch threads of each side (default: the study's, or torch's)."
    ),
    device: str | None = typer.Option(
        None, "--device", help="auto, cpu, cuda or cuda:i (overrides the study)."
    ),
    cache_dir: str | None = typer.Option(
        None,
        "--cache-dir",
        metavar="DIR",
        help="Worktrees and venvs of the sides (default $XDG_CACHE_HOME/attnbench/ab, "
        "else ~/.cache/attnbench/ab).",
    ),
    out: str | None = typer.Option(
        None, "--out", metavar="DIR", help="The workers' logs (default results/ab-<time>/)."
    ),
    json_path: str | None = typer.Option(
        None, "--json", metavar="PATH", help="Write the comparison and every visit as JSON."
    ),
    fmt: str = typer.Option("table", "--format", help="table, markdown or json."),
    output: str | None = typer.Option(None, "--output", help="Write the report here."),
    fail_on_improvement: bool = typer.Option(
        False, "--fail-on-improvement", help="Fail on improvements too."
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only the report and errors."),
) -> None:
    """Time the decode steps of STUDY.yaml with two revisions in one job: each side in its
    own worktree and venv, in a long-lived worker; per point, rounds of visits in ABBA
    order, gated by a paired test of the neighbouring visits. Exit 0: no regression;
    1: a regression, or a point head could not time; 2: bad input or a failed side."""
    if head is not None and head_dir is not None:
        raise UsageError("--head and --head-dir: give one or the other, not both")
    if fmt not in FORMATS:
        raise FieldError("format", fmt, f"unknown value; choose from {', '.join(FORMATS)}")
    positive_int("rounds", rounds)
    if threads is not None and (reason := check_value("threads", threads)):
        raise FieldError("threads", threads, reason)
    thresholds = Thresholds(time=parse_percent("--threshold", threshold))
    check_writable({"json": json_path, "output": output}, {"study": study})
    try:
        plan = plan_points(study, visit_time, device, threads)
    except FieldError as exc:  # the study is an argument here, not a flag
        raise (exc.located(study) if exc.field == "config" else exc) from None
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    repo = repository_root(Path.cwd())
    if repo is None:
        raise FieldError("base", base, f"{Path.cwd()} is in no git working tree")
    base_side = revision_side("base", repo, base, cache, "base")
    if head is not None:
        head_side = revision_side("head", repo, head, cache, "head")
    else:
        tree = Path(head_dir) if head_dir is not None else repo
        head_side = directory_side("head", tree, cache, "head_dir")
    logs = Path(out) if out else Path("results") / datetime.now().strftime("ab-%Y%m%d-%H%M%S")
    if not quiet:
        console.print(
            f"base {base_side.label} ({base_side.source}), head {head_side.label}; logs in {logs}/",
            markup=False,
        )

    def progress(tasks: Sequence[Task]) -> Iterable[Task]:
        return progress_iter(tasks, lambda t: describe(t.point), quiet)

    result = run_ab(plan, base_side, head_side, rounds, logs, progress)
    comparison = result.comparison(thresholds, fail_on_improvement)
    if json_path:
        try:
            write_json_atomic(json_path, {**comparison.to_dict(), "ab": result.to_dict()})
        except OSError as exc:
            raise FieldError("json", json_path, f"cannot write: {exc.strerror}") from None
    emit_comparison(comparison, fmt, False, output)
    code = comparison.exit_code()
    broken = _head_failures(result)
    if code == 0 and broken:
        raise fail(
            f"{len(broken)} of {len(result.points)} points did not complete on head: "
            + "; ".join(sorted(set(broken))),
            code=1,
        )
    raise typer.Exit(code)


def _head_failures(result: AbResult) -> list[str]:
    """The statuses of the points head ran out of memory or failed on (compare shows
    their step as missing, which does not fail a gate on its own)."""
    statuses = [p.status("head") for p in result.points]
    return [s for s in statuses if failed({"status": s})]
