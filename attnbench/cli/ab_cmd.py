"""`attnbench ab`: the decode steps of a study timed by two revisions in turn, in one job,
and gated like `attnbench compare` gates two results files."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from ..ab.sides import Side, default_cache_dir, directory_side, repository_root, revision_side
from ..ab.workers import SIDES, existing_logs, log_path
from ..errors import FieldError, Problems, UsageError
from ..gate.rules import Thresholds
from ..model.capacity import positive_int
from ..model.files import bad_name, refuse_empty, shown_path
from ..study.output import write_json_atomic
from ..study.schema import parse_number
from .common import (
    check_writable,
    console,
    fail,
    handles_errors,
    progress_iter,
    timestamped_dir,
)
from .compare_cmd import check_format, emit_comparison, parse_percent
from .group import app
from .options import (
    TIME_THRESHOLD,
    AbFailOnImprovementOpt,
    AbJsonOpt,
    BaseOpt,
    CacheDirOpt,
    FormatOpt,
    HeadDirOpt,
    HeadOpt,
    LogsOpt,
    OutputOpt,
    ReplaceLogsOpt,
    ReportQuietOpt,
    RoundsOpt,
    StudyArg,
    StudyDeviceOpt,
    ThreadsOpt,
    ThresholdOpt,
    VisitTimeOpt,
    WideOpt,
)

#: The most rounds a comparison takes: at the default visit time, 10,000 rounds of four
#: visits sample one point for nearly three hours.
MAX_ROUNDS = 10_000

if TYPE_CHECKING:
    from ..ab.runner import AbResult
    from ..study.plan import Task


#: Where this module's commands come in `attnbench --help`, and each one's line there
#: (cli/__init__.py).
ORDER = 90
SHORT_HELP = {"ab": "Gate two revisions by timing them in turn, in one job"}


def _as_visit_time(error: UsageError, visit_time: str) -> UsageError:
    """A problem of the study's max_time, which ab sets from --visit-time, as that flag's
    (its reason's 'repeats' is the study's field); any other as it is."""
    if not isinstance(error, FieldError) or error.field != "max_time":
        return error
    reason = error.reason_with().replace("beside repeats", "beside the study's repeats")
    return FieldError("visit_time", visit_time, reason)


def _number(field: str, text: str, kind: type[int] | type[float]) -> Any:
    """An integer or number flag's value, written as every flag's is (study.schema's
    parse_number); FieldError naming the flag and what was typed otherwise."""
    value = parse_number(text, kind)
    if value is None:
        raise FieldError(field, text, f"expected {'an integer' if kind is int else 'a number'}")
    return value


@app.command("ab")
@handles_errors
def ab_command(
    study: StudyArg,
    base: BaseOpt,
    head: HeadOpt = None,
    head_dir: HeadDirOpt = None,
    rounds: RoundsOpt = "5",
    visit_time: VisitTimeOpt = "0.25",
    threshold: ThresholdOpt = TIME_THRESHOLD,
    threads: ThreadsOpt = None,
    device: StudyDeviceOpt = None,
    cache_dir: CacheDirOpt = None,
    out: LogsOpt = None,
    json_path: AbJsonOpt = None,
    fmt: FormatOpt = "table",
    output: OutputOpt = None,
    fail_on_improvement: AbFailOnImprovementOpt = False,
    force: ReplaceLogsOpt = False,
    quiet: ReportQuietOpt = False,
    wide: WideOpt = False,
) -> None:
    """Time the decode steps of STUDY.yaml with two revisions in one job: each side in its
    own worktree and venv, in a long-lived worker; per point, rounds of visits in ABBA
    order, gated by a paired test of the neighbouring visits. Exit 0: no regression;
    1: a regression, or a point head could not time; 2: bad input or a failed side."""
    from ..ab.runner import plan_points, run_ab  # torch
    from ..study.sections import describe_decode
    from ..study.sweep import check_value

    if head is not None and head_dir is not None:
        raise UsageError("--head and --head-dir: give one or the other, not both")
    check_format(fmt)
    rounds_n = positive_int("rounds", _number("rounds", rounds, int))
    if rounds_n > MAX_ROUNDS:
        raise FieldError("rounds", rounds, f"must be at most {MAX_ROUNDS:,}")
    visit_s = _number("visit_time", visit_time, float)
    if cache_dir is not None:
        check_cache_dir(cache_dir)
    threads_n = None if threads is None else _number("threads", threads, int)
    if threads_n is not None and (reason := check_value("threads", threads_n)):
        raise FieldError("threads", threads, reason)
    thresholds = Thresholds(time=parse_percent("--threshold", threshold))
    check_writable({"json": json_path, "output": output}, {"study": study})
    try:
        plan = plan_points(study, visit_s, device, threads_n)
    except Problems as exc:  # max_time is the visits' time, which --visit-time sets here
        raise Problems([_as_visit_time(e, visit_time) for e in exc.errors], exc.limit) from None
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
        return progress_iter(tasks, lambda t: describe_decode(t.point), quiet)

    result = run_ab(plan, *sides, rounds_n, logs, progress)
    comparison = result.comparison(thresholds, fail_on_improvement)
    if json_path:
        _write_json(json_path, {**comparison.to_dict(), "ab": result.to_dict()})
    emit_comparison(comparison, fmt, False, output, wide)
    raise _exit(comparison.exit_code(), result)


def check_cache_dir(cache_dir: str) -> None:
    """--cache-dir names a directory, or a place where one can be made."""
    refuse_empty("cache_dir", cache_dir)
    path = Path(cache_dir)
    if problem := bad_name(cache_dir):
        raise FieldError("cache_dir", shown_path(path), problem)
    above = next((p for p in (path, *path.parents) if p.exists()), None)
    if above is not None and not above.is_dir():
        what = "is a file" if above == path else f"lies under {shown_path(above)}, a file"
        raise FieldError("cache_dir", shown_path(path), f"{what}, not a directory")


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
