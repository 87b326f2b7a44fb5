"""`attnbench ab`: the decode steps of a study timed by two revisions in turn, in one job,
and gated like `attnbench compare` gates two results files."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..ab.sides import Side, default_cache_dir, directory_side, repository_root, revision_side
from ..ab.workers import SIDES, existing_logs, log_path
from ..errors import FieldError, UsageError
from ..gate.rules import Thresholds
from ..model.capacity import positive_int
from ..model.files import shown_path
from ..study.output import write_json_atomic
from ..study.schema import DEVICE_CHOICES
from . import app
from .common import check_writable, console, fail, progress_iter, timestamped_dir
from .compare_cmd import check_format, emit_comparison, parse_percent
from .decode_cmd import describe
from .flags import handles_errors
from .options import TIME_HELP, TIME_THRESHOLD, FormatOpt, OutputOpt

if TYPE_CHECKING:
    from ..ab.runner import AbResult
    from ..study.plan import Task

StudyArg = Annotated[
    str, typer.Argument(metavar="STUDY.yaml", help="Sweep file: its decode points are timed.")
]
BaseOpt = Annotated[
    str,
    typer.Option(
        "--base", metavar="REV", help="The revision to gate against: a git revision here."
    ),
]
HeadOpt = Annotated[
    str | None,
    typer.Option("--head", metavar="REV", help="The revision to gate (default: see --head-dir)."),
]
HeadDirOpt = Annotated[
    str | None,
    typer.Option(
        "--head-dir",
        metavar="DIR",
        help="A source tree to gate, as it is on disk (default: this working tree).",
    ),
]
RoundsOpt = Annotated[
    int, typer.Option("--rounds", help="Rounds of ABBA visits of each point (two pairs each).")
]
VisitTimeOpt = Annotated[
    float,
    typer.Option("--visit-time", metavar="S", help="Seconds of sampling per visit at the most."),
]
ThresholdOpt = Annotated[str, typer.Option("--threshold", metavar="PERCENT", help=TIME_HELP)]
ThreadsOpt = Annotated[
    int | None,
    typer.Option(
        "--threads", help="torch threads of each side (default: the study's, or torch's)."
    ),
]
DeviceOpt = Annotated[
    str | None, typer.Option("--device", help=f"{DEVICE_CHOICES} (overrides the study).")
]
CacheDirOpt = Annotated[
    str | None,
    typer.Option(
        "--cache-dir",
        metavar="DIR",
        help="Worktrees and venvs of the sides (default $XDG_CACHE_HOME/attnbench/ab, "
        "else ~/.cache/attnbench/ab).",
    ),
]
LogsOpt = Annotated[
    str | None,
    typer.Option("--out", metavar="DIR", help="The workers' logs (default results/ab-<time>/)."),
]
ForceOpt = Annotated[
    bool,
    typer.Option("--force", help="Replace base.log and head.log where --out holds them already."),
]
JsonOpt = Annotated[
    str | None,
    typer.Option("--json", metavar="PATH", help="Write the comparison and every visit as JSON."),
]
FailOnImprovementOpt = Annotated[
    bool, typer.Option("--fail-on-improvement", help="Fail on improvements too.")
]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="Print only the report and errors.")]


@app.command("ab")
@handles_errors
def ab_command(
    study: StudyArg,
    base: BaseOpt,
    head: HeadOpt = None,
    head_dir: HeadDirOpt = None,
    rounds: RoundsOpt = 5,
    visit_time: VisitTimeOpt = 0.25,
    threshold: ThresholdOpt = TIME_THRESHOLD,
    threads: ThreadsOpt = None,
    device: DeviceOpt = None,
    cache_dir: CacheDirOpt = None,
    out: LogsOpt = None,
    json_path: JsonOpt = None,
    fmt: FormatOpt = "table",
    output: OutputOpt = None,
    fail_on_improvement: FailOnImprovementOpt = False,
    force: ForceOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Time the decode steps of STUDY.yaml with two revisions in one job: each side in its
    own worktree and venv, in a long-lived worker; per point, rounds of visits in ABBA
    order, gated by a paired test of the neighbouring visits. Exit 0: no regression;
    1: a regression, or a point head could not time; 2: bad input or a failed side."""
    from ..ab.runner import plan_points, run_ab  # torch
    from ..study.sweep import check_value

    if head is not None and head_dir is not None:
        raise UsageError("--head and --head-dir: give one or the other, not both")
    check_format(fmt)
    positive_int("rounds", rounds)
    if threads is not None and (reason := check_value("threads", threads)):
        raise FieldError("threads", threads, reason)
    thresholds = Thresholds(time=parse_percent("--threshold", threshold))
    check_writable({"json": json_path, "output": output}, {"study": study})
    try:
        plan = plan_points(study, visit_time, device, threads)
    except FieldError as exc:  # the study is an argument here, not a flag
        raise (exc.located(study) if exc.field == "config" else exc) from None
    logs = Path(out) if out else timestamped_dir("ab-")
    there = existing_logs(logs, SIDES)
    if there and not force:
        raise FieldError(
            "out",
            shown_path(logs),
            f"holds {' and '.join(there)} already, which the workers' logs would replace: "
            "give an empty or new directory, or --force",
        )
    for side in SIDES:  # a log is never the study it times
        check_writable({"out": str(log_path(logs, side))}, {"study": study})
    sides = _sides(base, head, head_dir, cache_dir)
    if not quiet:
        base_side, head_side = sides
        console.print(
            f"base {base_side.label} ({base_side.source}), head {head_side.label}; logs in {logs}/",
            markup=False,
        )

    def progress(tasks: Sequence[Task]) -> Iterable[Task]:
        return progress_iter(tasks, lambda t: describe(t.point), quiet)

    result = run_ab(plan, *sides, rounds, logs, progress)
    comparison = result.comparison(thresholds, fail_on_improvement)
    if json_path:
        _write_json(json_path, {**comparison.to_dict(), "ab": result.to_dict()})
    emit_comparison(comparison, fmt, False, output)
    raise _exit(comparison.exit_code(), result)


def _sides(
    base: str, head: str | None, head_dir: str | None, cache_dir: str | None
) -> tuple[Side, Side]:
    """The base revision's side and head's: a revision, or a tree as it is on disk (this
    working tree by default)."""
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    repo = repository_root(Path.cwd())
    if repo is None:
        raise FieldError("base", base, f"{Path.cwd()} is in no git working tree")
    base_side = revision_side("base", repo, base, cache, "base")
    if head is not None:
        return base_side, revision_side("head", repo, head, cache, "head")
    tree = Path(head_dir) if head_dir is not None else repo
    return base_side, directory_side("head", tree, cache, "head_dir")


def _write_json(path: str, document: dict) -> None:
    try:
        write_json_atomic(path, document)
    except OSError as exc:
        raise FieldError("json", path, f"cannot write: {exc.strerror}") from None


def _exit(code: int, result: AbResult) -> typer.Exit:
    """The comparison's exit; 1 where it passed but head could not time some points."""
    broken = result.head_failures()
    if code == 0 and broken:
        return fail(
            f"{len(broken)} of {len(result.points)} points did not complete on head: "
            + "; ".join(sorted(set(broken))),
            code=1,
        )
    return typer.Exit(code)
