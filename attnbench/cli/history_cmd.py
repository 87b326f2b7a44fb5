"""`attnbench history`: runs kept in a database over commits, their trends and the commits
where a metric changed."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..errors import FieldError, typed
from ..history.series import all_changes, by_environment, find_changes, find_series
from ..history.stamps import check_name, parse_date, stamps_of
from ..history.store import DEFAULT_DB, Commit, HistoryBackend, open_history
from ..model.files import shown_path
from ..render.history import (
    changes_markdown,
    changes_rows,
    environment_label,
    plot_series,
    series_rows,
)
from ..render.table import Column
from . import app
from .common import check_writable, console, show_table
from .flags import handles_errors
from .options import QuietOpt

history_app = typer.Typer(
    help="Keep every run in a database; show trends over commits and where they changed.",
    no_args_is_help=True,
)
app.add_typer(history_app, name="history")

DbOpt = typer.Option(
    None, "--db", metavar="PATH", help=f"The history database (default {DEFAULT_DB})."
)
MetricOpt = typer.Option("step_ms_median", "--metric", metavar="NAME", help="The metric to follow.")
WhereOpt = typer.Option(
    None,
    "--where",
    metavar="KEY=VALUE,...",
    help="Only series whose keys match: variant=GQA-8,prompt_len=2048; a key given twice "
    "matches either value: variant=MHA,variant=MQA.",
)
FORMATS = ("table", "markdown")
#: The picture formats `history plot --out` writes, by extension.
PICTURES = ("png", "svg", "pdf")


ResultsFilesArg = Annotated[
    list[str], typer.Argument(metavar="RESULTS.json", help="Results files to add, one or more.")
]
CommitOpt = Annotated[
    str | None,
    typer.Option(
        "--commit",
        metavar="REV",
        help="The commit measured (default: the file's git_commit, else HEAD of the "
        "current checkout).",
    ),
]
BranchOpt = Annotated[
    str | None,
    typer.Option(
        "--branch", metavar="NAME", help="Its branch (default: HEAD's, for a run of HEAD's commit)."
    ),
]
DateOpt = Annotated[
    str | None,
    typer.Option(
        "--date",
        metavar="DATE",
        help="Its date, ISO 8601 (default: when the file was written; else HEAD's commit date).",
    ),
]


@history_app.command("add")
@handles_errors
def add_command(
    results: ResultsFilesArg,
    db: str | None = DbOpt,
    commit: CommitOpt = None,
    branch: BranchOpt = None,
    date: DateOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Store runs (results.json of run, or --json of decode-speed and the other commands)
    with their commit: the one each file's environment names, else HEAD. Adding the same
    results again changes nothing."""
    from ..study.documents import load_document  # the record types: torch

    check_name("commit", commit)
    check_name("branch", branch)
    date = parse_date(date) if date is not None else None
    documents = [load_document(path) for path in results]  # every file checked first
    for document in documents:
        document.require_environment(
            "and the history files timings by environment; add the "
            "JSON the command writes with --json"
        )
    stamps = stamps_of(results, documents, commit, branch, date)
    history = open_history(db, create=True)
    try:
        for path, document, stamp in zip(results, documents, stamps, strict=True):
            run_id, new = history.add(document, stamp)
            if not quiet:
                console.print(f"{path}: {_added(history, run_id, new, stamp)}", markup=False)
    finally:
        history.close()


def _added(history: HistoryBackend, run_id: int, new: bool, stamp: Commit) -> str:
    """What adding a run did: 'added as run 3, commit 0123456789', or that it was there
    already, maybe under another commit."""
    if new:
        return f"added as run {run_id}, commit {stamp.sha[:10]}"
    stored = next(r.commit for r in history.runs() if r.id == run_id).sha
    if stored == stamp.sha:
        return f"already there (run {run_id}), commit {stored[:10]}"
    width = 10 if stored[:10] != stamp.sha[:10] else None
    return (
        f"already there (run {run_id}), stored under commit "
        f"{stored[:width]}, not {stamp.sha[:width]}"
    )


def _cell(value: object) -> str:
    return "-" if value is None else str(value)


SHOW_COLUMNS = [
    Column("Series", "series", _cell, rank=0, kind="text"),
    Column("commit", "commit", _cell, rank=0, kind="label"),
    Column("date", "date", _cell, rank=2, kind="label"),
    Column("branch", "branch", _cell, rank=3, kind="label", setting=True),
    Column("median", "median", _cell, rank=1),
    Column("IQR/median", "spread", _cell, rank=4),
    Column("runs", "runs", _cell, rank=5),
]


@history_app.command("show")
@handles_errors
def show_command(
    db: str | None = DbOpt,
    metric: str = MetricOpt,
    where: str | None = WhereOpt,
    wide: bool = typer.Option(False, "--wide", help="Every column, whatever the width."),
) -> None:
    """A metric over commits: one table per environment, a row per series and commit."""
    for members in by_environment(find_series(db, metric, where)).values():
        title = f"{metric} over commits · {environment_label(members[0])}"
        if where and len(members) == 1:
            title += f" · where {where}"
        show_table(title, series_rows(members), SHOW_COLUMNS, wide, hint=None)


@history_app.command("plot")
@handles_errors
def plot_command(
    out: str = typer.Option(
        ..., "--out", metavar="PATH", help="The picture to write (.png, .svg, .pdf)."
    ),
    db: str | None = DbOpt,
    metric: str = MetricOpt,
    where: str | None = WhereOpt,
    quiet: QuietOpt = False,
) -> None:
    """Draw a metric over commits: each series' median with its p25..p75 band, and its
    change points marked. Series of several environments get one panel each."""
    path = _picture(out)
    series = find_series(db, metric, where)
    changes = all_changes(series)
    try:
        plot_series(series, changes, path)
    except OSError as exc:
        raise FieldError("out", shown_path(out), f"cannot write it: {exc.strerror}") from None
    if not quiet:
        console.print(f"wrote {typed(out)}", markup=False)


def _picture(out: str) -> Path:
    """--out checked before anything is drawn: its extension names a format plot writes
    (no extension is refused, not guessed), and the file can be written there."""
    path = Path(out)
    extension = path.suffix.lower().removeprefix(".")
    if extension not in PICTURES:
        what = f"unknown picture format .{extension}" if extension else "no extension"
        raise FieldError("out", shown_path(out), f"{what}; end the name in .png, .svg or .pdf")
    check_writable({"out": out}, {})
    return path


CHANGE_COLUMNS = [
    Column("Metric", "metric", _cell, rank=0, kind="label"),
    Column("Series", "series", _cell, rank=1, kind="text"),
    Column("commit", "commit", _cell, rank=0, kind="label"),
    Column("change", "change", _cell, rank=0),
    Column("95% interval", "interval", _cell, rank=2),
    Column("before", "before", _cell, rank=3),
    Column("after", "after", _cell, rank=3),
    Column("environment", "environment", _cell, rank=4, kind="label", setting=True, title_text=str),
]


@history_app.command("changes")
@handles_errors
def changes_command(
    db: str | None = DbOpt,
    metric: list[str] = typer.Option(
        [],
        "--metric",
        metavar="NAME",
        help="Metrics to search (default: every timing and exact metric).",
    ),
    where: str | None = WhereOpt,
    fmt: str = typer.Option("table", "--format", metavar="FORMAT", help=f"{' or '.join(FORMATS)}."),
    wide: bool = typer.Option(False, "--wide", help="Every column, whatever the width."),
) -> None:
    """The commits where a metric changed: change points of each timing series (one
    environment at a time), and every change of an exact metric (a formula changed)."""
    if fmt not in FORMATS:
        raise FieldError("format", fmt, f"unknown value; choose from {', '.join(FORMATS)}")
    wanted, changes = find_changes(db, metric, where)
    if fmt == "markdown":
        console.print(changes_markdown(changes), markup=False, soft_wrap=True)
        return
    if not changes:
        console.print(f"No change found in {len(wanted)} metric(s).", markup=False)
        return
    show_table("Changes over commits", changes_rows(changes), CHANGE_COLUMNS, wide, hint=None)
