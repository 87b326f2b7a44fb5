"""`attnbench history`: runs kept in a database over commits, their trends and the commits
where a metric changed."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from ..errors import FieldError, UsageError, typed
from ..history.series import Search, by_environment, find_changes, find_series, search_changes
from ..history.stamps import check_name, named_elsewhere, parse_date, stamps_of
from ..history.store import (
    DEFAULT_DB,
    Commit,
    HistoryBackend,
    check_timings,
    database_failures,
    open_history,
)
from ..model.files import shown_path
from ..render.history import (
    changes_markdown,
    changes_rows,
    environment_label,
    left_out,
    plot_series,
    series_rows,
)
from ..render.table import Column, markdown_text
from ..study.documents import load_document
from .common import (
    NOTE,
    check_writable,
    console,
    err_console,
    handles_errors,
    print_items,
    show_table,
)
from .group import app
from .options import (
    HISTORY_FORMATS,
    AnyWidthOpt,
    BranchOpt,
    CommitOpt,
    DateOpt,
    DbOpt,
    HistoryFormatOpt,
    MetricOpt,
    MetricsOpt,
    PictureOpt,
    QuietOpt,
    ResultsFilesArg,
    WhereOpt,
)

#: Where this module's commands come in `attnbench --help`, and each one's line there
#: (cli/__init__.py).
ORDER = 100
SHORT_HELP = {
    "history": "Store runs; show trends and changes over commits",
    "history add": "Store results files with their commit",
    "history show": "A metric over commits, as tables",
    "history plot": "Draw a metric over commits, its change points marked",
    "history changes": "The commits where a metric changed",
}


history_app = typer.Typer(
    help="Keep every run in a database; show trends over commits and where they changed.",
    no_args_is_help=True,
)
app.add_typer(history_app, name="history")

#: The picture formats `history plot --out` writes, by extension.
PICTURES = ("png", "svg", "pdf")


def database_errors(fn: Callable) -> Callable:
    """A history command whose database fails under it (a damaged file, a table gone, a
    file the system will not let it write) as one error naming --db, not a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with database_failures("db", kwargs.get("db")):
            return fn(*args, **kwargs)

    return wrapper


@history_app.command("add")
@handles_errors
@database_errors
def add_command(
    results: ResultsFilesArg,
    db: DbOpt = None,
    commit: CommitOpt = None,
    branch: BranchOpt = None,
    date: DateOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Store runs (results.json of run, or --json of decode-speed and the other commands)
    with their commit: the one each file's environment names, else HEAD. Adding the same
    results again changes nothing."""
    from ..gate.compare import check_measurements  # numpy

    check_name("commit", commit)
    check_name("branch", branch)
    date = parse_date(date) if date is not None else None
    documents = [load_document(path) for path in results]  # every file checked first
    for document in documents:
        if not any(document.sections.values()):  # a run of nothing would read as one
            raise UsageError(f"{document.path}: no records to store")
        document.require_environment(
            "and the history files timings by environment; add the "
            "JSON the command writes with --json"
        )
        check_measurements(document)  # what compare --history would refuse to read back
        check_timings(document)  # what the search for changes could not search
    stamps = stamps_of(results, documents, commit, branch, date)
    # a run stored before keeps its commit: the note is for one filed now
    label = commit is not None and not quiet and named_elsewhere(commit)
    history = open_history(db, create=True)
    try:
        for path, document, stamp in zip(results, documents, stamps, strict=True):
            run_id, new = history.add(document, stamp)
            if new and label:
                note = f"note: --commit {commit}: no branch, tag or commit of this checkout; "
                err_console.print(note + "filed under that name as given", markup=False)
                label = False
            if not quiet:
                said = _added(history, run_id, new, stamp, {"date": date, "branch": branch})
                console.print(f"{path}: {said}", markup=False)
    finally:
        history.close()


def _added(
    history: HistoryBackend, run_id: int, new: bool, stamp: Commit, given: dict[str, object]
) -> str:
    """What adding a run did: 'added as run 3, commit 0123456789', or that it was there
    already, maybe under another commit, and keeps the date and branch it was stored with
    where `given` (the --date and --branch of this add) names others."""
    if new:
        return f"added as run {run_id}, commit {stamp.sha[:10]}"
    kept = next(r.commit for r in history.runs() if r.id == run_id)
    stored = kept.sha
    if stored == stamp.sha:
        said = f"already there (run {run_id}), commit {stored[:10]}"
    else:
        width = 10 if stored[:10] != stamp.sha[:10] else None
        said = (
            f"already there (run {run_id}), stored under commit "
            f"{stored[:width]}, not {stamp.sha[:width]}"
        )
    # the date and branch it keeps, where this add was given others: nothing is changed
    for what, was, now in (("date", kept.date, stamp.date), ("branch", kept.branch, stamp.branch)):
        if given[what] is not None and was != now:
            said += f"; its {what} stays {was or 'none'}, not {now}"
    return said


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
@database_errors
def show_command(
    db: DbOpt = None,
    metric: MetricOpt = "step_ms_median",
    where: WhereOpt = None,
    wide: AnyWidthOpt = False,
) -> None:
    """A metric over commits: one table per environment, a row per series and commit."""
    for members in by_environment(find_series(db, metric, where)).values():
        title = f"{metric} over commits · {environment_label(members[0])}"
        if where:  # what every series shares, which their labels leave out
            title += f" · where {where}"
        show_table(title, series_rows(members), SHOW_COLUMNS, wide, hint=None)


#: How to pick the series a panel of history plot leaves out.
CHOOSE = "choose with --where"


@history_app.command("plot")
@handles_errors
@database_errors
def plot_command(
    out: PictureOpt,
    db: DbOpt = None,
    metric: MetricOpt = "step_ms_median",
    where: WhereOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Draw a metric over commits: each series' median with its p25..p75 band, and its
    change points marked. Series of several environments get one panel each."""
    path = _picture(out, db)
    series = find_series(db, metric, where)
    search = search_changes(series)
    try:
        plot_series(series, search.changes, path, choose=CHOOSE)
    except OSError as exc:
        raise FieldError("out", shown_path(out), f"cannot write it: {exc.strerror}") from None
    if not quiet:
        console.print(f"wrote {typed(out)}", markup=False)
        print_items([f"{n}: {CHOOSE}" for n in left_out(series)] + search.notes(), bullet=NOTE)


def _picture(out: str, db: str | None) -> Path:
    """--out checked before anything is drawn: its extension names a format plot writes
    (no extension is refused, not guessed), and the file can be written there, and is not
    the history `db` it draws (history.svg, say)."""
    path = Path(out)
    extension = path.suffix.lower().removeprefix(".")
    if extension not in PICTURES:
        what = f"unknown picture format .{extension}" if extension else "no extension"
        raise FieldError("out", shown_path(out), f"{what}; end the name in .png, .svg or .pdf")
    check_writable({"out": out}, {"db": str(db or DEFAULT_DB)})
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
@database_errors
def changes_command(
    db: DbOpt = None,
    metric: MetricsOpt = [],  # noqa: B006  (typer copies it)
    where: WhereOpt = None,
    fmt: HistoryFormatOpt = "table",
    wide: AnyWidthOpt = False,
) -> None:
    """The commits where a metric changed: change points of each timing series (one
    environment at a time), and every change of an exact metric (a formula changed)."""
    if fmt not in HISTORY_FORMATS:
        raise FieldError("format", fmt, f"unknown value; choose from {', '.join(HISTORY_FORMATS)}")
    wanted, search = find_changes(db, metric, where)
    if fmt == "markdown":
        console.print(_markdown(search), markup=False, soft_wrap=True)
        return
    if not search.changes:
        console.print(f"No change found in {len(wanted)} metric(s).", markup=False)
    else:
        rows = changes_rows(search.changes)
        show_table("Changes over commits", rows, CHANGE_COLUMNS, wide, hint=None)
    print_items(search.notes(), bullet=NOTE)


def _markdown(search: Search) -> str:
    """The changes as Markdown (a CI job's summary), then what the search left out."""
    notes = "".join(f"\n\nNote: {markdown_text(note)}" for note in search.notes())
    return changes_markdown(search.changes) + notes
