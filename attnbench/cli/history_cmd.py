"""`attnbench history`: runs kept in a database over commits, their trends and the commits
where a metric changed."""

from __future__ import annotations

import datetime
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer

from ..errors import FieldError, typed
from ..history.series import (
    ANY_ENVIRONMENT,
    Series,
    build_series,
    parse_where,
    series_changes,
)
from ..history.store import DEFAULT_DB, Commit, HistoryBackend, open_history
from ..model.files import shown_path
from ..records import Kind
from ..render.history import changes_markdown, changes_rows, plot_series, series_rows
from ..render.table import Column
from ..study.documents import Document, load_document
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


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def current_commit() -> Commit | None:
    """HEAD of the git checkout here: its sha, branch (None when detached) and commit
    date; None outside a checkout."""
    sha = _git("rev-parse", "HEAD")
    if sha is None:
        return None
    branch = _git("rev-parse", "--abbrev-ref", "HEAD")
    return Commit(sha, None if branch == "HEAD" else branch, _git("show", "-s", "--format=%cI"))


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def stamp_of(
    document: Document,
    head: Commit | None,
    commit: str | None = None,
    branch: str | None = None,
    date: str | None = None,
) -> Commit | None:
    """The commit a run is filed under: `commit`, else the one its environment names
    (`git_commit`: the file may come from another checkout or an archive), else `head`'s;
    dated `date`, else when the file was written (`created`). A run of HEAD's commit also
    gets HEAD's branch, and HEAD's commit date when the file has none. None when
    nothing names a commit."""
    sha = commit or _text((document.environment or {}).get("git_commit"))
    if sha is None and head is not None:
        sha = head.sha
    if sha is None:
        return None
    known = head if head is not None and head.sha == sha else Commit(sha)
    created = _text((document.raw or {}).get("created"))
    return Commit(sha, branch or known.branch, date or created or known.date)


def parse_date(text: str) -> str:
    """An ISO 8601 date, or date and time, in its extended form ('20261005' ->
    '2026-10-05'): the series are ordered by these dates as text."""
    try:
        return datetime.date.fromisoformat(text).isoformat()
    except ValueError:
        pass
    try:
        return datetime.datetime.fromisoformat(text).isoformat()
    except ValueError:
        raise FieldError(
            "date",
            typed(text),
            "expected an ISO 8601 date, e.g. 2026-10-05 or 2026-10-05T12:00:00+00:00",
        ) from None


def check_name(field: str, text: str | None) -> None:
    """--commit and --branch name a commit or a branch: one word, never empty."""
    if text is None or (text.isprintable() and text and " " not in text):
        return
    reason = (
        f"empty; name the {field}"
        if not text.strip()
        else (f"a {field} is one word, without spaces or control characters")
    )
    raise FieldError(field, typed(text), reason)


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
    check_name("commit", commit)
    check_name("branch", branch)
    date = parse_date(date) if date is not None else None
    documents = [load_document(path) for path in results]  # every file checked first
    for document in documents:
        document.require_environment(
            "and the history files timings by environment; add the "
            "JSON the command writes with --json"
        )
    stamps = _stamps(results, documents, commit, branch, date)
    history = open_history(db, create=True)
    try:
        for path, document, stamp in zip(results, documents, stamps, strict=True):
            run_id, new = history.add(document, stamp)
            if not quiet:
                console.print(f"{path}: {_added(history, run_id, new, stamp)}", markup=False)
    finally:
        history.close()


def _stamps(
    results: Sequence[str],
    documents: Sequence[Document],
    commit: str | None,
    branch: str | None,
    date: str | None,
) -> list[Commit]:
    """The commit each results file is filed under (stamp_of), HEAD's read once."""
    head = current_commit()
    stamps = []
    for path, document in zip(results, documents, strict=True):
        stamp = stamp_of(document, head, commit, branch, date)
        if stamp is None:
            reason = f"not in a git checkout: name the commit measured ({path} names none)"
            raise FieldError("commit", None, reason)
        stamps.append(stamp)
    return stamps


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


def _series(db: str | None, metric: str, where: str | None) -> list[Series]:
    history = open_history(db)
    try:
        kinds = history.metric_kinds()
        if metric not in kinds:
            known = ", ".join(k for k, kind in kinds.items() if kind in ("timing", "exact"))
            raise FieldError(
                "metric", typed(metric), f"not in the history; it holds {known or 'no runs'}"
            )
        found = build_series(metric, history.points(metric), parse_where(where))
    finally:
        history.close()
    if not found and where is None:
        raise FieldError("metric", typed(metric), "no run in the history has a value of it")
    if not found:
        raise FieldError("where", typed(where), f"no series of {metric} matches")
    return found


def _series_or_none(db: str | None, metric: str, where: str | None) -> list[Series]:
    try:
        return _series(db, metric, where)
    except FieldError:
        return []


def _environments(series: Sequence[Series]) -> dict[str, list[Series]]:
    by_env: dict[str, list[Series]] = {}
    for s in series:
        by_env.setdefault(s.environment_id, []).append(s)
    return by_env


def environment_label(series: Series) -> str:
    if series.environment_id == ANY_ENVIRONMENT:
        return "every environment (an exact metric)"
    env = series.environment
    torch, threads = env.get("torch_version"), env.get("num_threads")
    parts = [
        env.get("device_name"),
        torch and f"torch {torch}",
        threads and f"{threads} thread{'s' * (threads != 1)}",
    ]
    known = ", ".join(str(p) for p in parts if p) or "not recorded"
    return f"environment {series.environment_id} ({known})"


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
    for members in _environments(_series(db, metric, where)).values():
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
    series = _series(db, metric, where)
    changes = [c for s in series for c in series_changes(s)]
    try:
        plot_series(series, changes, path, environment_label)
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
    history = open_history(db)
    try:
        kinds = history.metric_kinds()
    finally:
        history.close()
    if not kinds:
        shown = shown_path(DEFAULT_DB if db is None else db)
        raise FieldError("db", shown, "holds no runs; add some with `attnbench history add`")
    wanted = metric or [m for m, k in kinds.items() if _followed(m, k)]
    found: list[Series] = []
    for name in wanted:  # every metric named; of the others, those with a series to search
        found += _series(db, name, where) if metric else _series_or_none(db, name, where)
    if not found and where is not None:  # a --where that matches nothing finds no change
        raise FieldError("where", typed(where), "no series of any metric matches")
    changes = [c for s in found for c in series_changes(s)]
    if fmt == "markdown":
        console.print(changes_markdown(changes), markup=False, soft_wrap=True)
        return
    if not changes:
        console.print(f"No change found in {len(wanted)} metric(s).", markup=False)
        return
    show_table(
        "Changes over commits",
        changes_rows(changes, environment_label),
        CHANGE_COLUMNS,
        wide,
        hint=None,
    )


def _followed(metric: str, kind: str) -> bool:
    """A gated timing (not its statistics) or an exact metric."""
    if kind == Kind.EXACT.value:
        return True
    return kind == Kind.TIMING.value and metric.endswith("_median")
