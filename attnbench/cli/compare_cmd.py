"""`attnbench compare` (the regression gate) and `attnbench baseline save`."""

from __future__ import annotations

import math
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import typer

from ..errors import FieldError, UsageError
from ..gate.baseline import (
    default_baseline_path,
    load_baseline,
    save_exact_baseline,
    write_baseline,
)
from ..gate.rules import Thresholds
from ..render.gate import Spelling, print_table, report_text, summary_line
from ..render.table import plain_console, terminal_width
from ..study.documents import Document, load_document
from ..study.output import replace_with
from ..study.schema import parse_number
from ..study.sections import KINDS
from .common import check_writable, console, fail, handles_errors
from .group import app
from .options import (
    COUNT_THRESHOLD,
    EXACT_BASELINE,
    FORMATS,
    MEM_THRESHOLD,
    TIME_THRESHOLD,
    AllowEnvMismatchOpt,
    BaselineArg,
    BaselineToOpt,
    ConfigArg,
    CountThresholdOpt,
    CurrentArg,
    ExactToOpt,
    FailOnImprovementOpt,
    FailOnMissingOpt,
    FormatOpt,
    HistoryOpt,
    MemThresholdOpt,
    OnlyChangedOpt,
    OutputOpt,
    SavedResultsArg,
    ShowAllOpt,
    TimeThresholdOpt,
    WideOpt,
)

if TYPE_CHECKING:
    from ..gate.compare import Comparison

#: Where this module's commands come in `attnbench --help`, and each one's line there
#: (cli/__init__.py).
ORDER = 50
SHORT_HELP = {
    "compare": "Gate results against a baseline: exit 1 on a regression",
    "baseline": "Keep the results `attnbench compare` gates against",
    "baseline save": "Validate a results file and save it as a baseline",
    "baseline exact": "Write a study's exact metrics as a baseline (what CI gates)",
}

#: The flags compare's report points to.
SPELLING = Spelling(show_all="--all", other_formats="--wide, or --format markdown or json")


def history_baseline_of(db: str, head: Document) -> Document:
    """The baseline `head` is gated against from the history at `db` (history.baseline)."""
    from ..history.baseline import history_baseline
    from ..history.store import database_failures, open_history

    try:
        store = open_history(db)
    except FieldError as exc:  # the database is given as --history here
        raise FieldError("history", exc.value, exc.reason) from None
    try:
        with database_failures("history", db):
            return history_baseline(store, head, db)
    finally:
        store.close()


def parse_percent(flag: str, text: str) -> float:
    """'10%' or a bare '10' (also percent) as the fraction 0.1; the number written as
    every flag's (study.schema.FLOAT_TEXT)."""
    value = parse_number(text.strip().removesuffix("%"), float)
    if value is None:
        raise UsageError(f"{flag}: expected a percentage such as 10% or 10, got {text!r}")
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"{flag} {text}: must be a finite percentage >= 0")
    return value / 100


def emit_comparison(
    result: Comparison, fmt: str, only_changed: bool, output: str | None, wide: bool = False
) -> None:
    """Print the report (a table of every column where `wide`), or write it to `output`
    and say where it went."""
    if output is None:
        if fmt == "table":
            width = terminal_width(console)
            print_table(console, result, only_changed, width, SPELLING, wide)
        else:
            typer.echo(report_text(result, fmt, only_changed, SPELLING), nl=False)
        return
    path = Path(output)

    def write(fh: IO[Any]) -> None:
        if fmt == "table":
            wide = plain_console(file=fh, width=200, color_system=None)
            print_table(wide, result, only_changed, 200, SPELLING)
        else:
            fh.write(report_text(result, fmt, only_changed, SPELLING))

    try:  # through a file beside it: a failed write leaves the one there as it was
        replace_with(path, write)
    except OSError as exc:
        raise FieldError("output", path, f"cannot write: {exc.strerror}") from None
    console.print(f"wrote {path}: {summary_line(result)}", highlight=False, markup=False)


def check_format(fmt: str) -> None:
    """--format names one of FORMATS."""
    if fmt not in FORMATS:
        raise FieldError("format", fmt, f"unknown value; choose from {', '.join(FORMATS)}")


def _check_inputs(
    history: str | None, current: str | None, show_all: bool, only_changed: bool
) -> None:
    """One way to give the results to gate, and one way to list the findings."""
    if show_all and only_changed:
        raise UsageError("--all and --only-changed: give one or the other")
    if history is not None and current is not None:
        raise FieldError("history", history, "gates one results file: give CURRENT alone")
    if history is None and current is None:
        raise UsageError("missing CURRENT: give BASELINE and CURRENT, or --history DB CURRENT")


def _documents(baseline: str, current: str | None, history: str | None) -> tuple[Document, ...]:
    """The baseline and current documents: two files, or (--history) one file and the
    baseline its history gives."""
    if history is None:
        return load_document(baseline), load_document(current)  # type: ignore[arg-type]
    head = load_document(baseline)
    return history_baseline_of(history, head), head


def exit_with(code: int) -> typer.Exit:
    """The Exit of a comparison's code; for 3, after saying why timings were not compared."""
    if code == 3:
        return fail(
            "environments differ, timings not compared; run both on one machine, or pass "
            "--allow-env-mismatch to show them without gating",
            code,
        )
    return typer.Exit(code)


@app.command("compare")
@handles_errors
def compare_command(
    baseline: BaselineArg,
    current: CurrentArg = None,
    history: HistoryOpt = None,
    time_threshold: TimeThresholdOpt = TIME_THRESHOLD,
    mem_threshold: MemThresholdOpt = MEM_THRESHOLD,
    count_threshold: CountThresholdOpt = COUNT_THRESHOLD,
    fmt: FormatOpt = "table",
    output: OutputOpt = None,
    fail_on_improvement: FailOnImprovementOpt = False,
    fail_on_missing: FailOnMissingOpt = False,
    allow_env_mismatch: AllowEnvMismatchOpt = False,
    show_all: ShowAllOpt = False,
    only_changed: OnlyChangedOpt = False,
    wide: WideOpt = False,
) -> None:
    """Gate CURRENT against BASELINE, or (--history DB) one results file against the
    recent runs of its environment. Lists what changed or did not pass, worst first, and
    counts the unchanged findings (--all lists them). Exit 0: no regression; 1: a
    regression; 2: bad input; 3: timings from different environments (see
    --allow-env-mismatch)."""
    from ..gate.compare import compare_documents  # numpy

    check_format(fmt)
    _check_inputs(history, current, show_all, only_changed)
    inputs = {"baseline": baseline, "current": current, "history": history}
    check_writable({"output": output}, inputs)
    thresholds = Thresholds(
        time=parse_percent("--time-threshold", time_threshold),
        mem=parse_percent("--mem-threshold", mem_threshold),
        count=parse_percent("--count-threshold", count_threshold),
    )
    base, head = _documents(baseline, current, history)
    result = compare_documents(
        base,
        head,
        thresholds,
        allow_env_mismatch=allow_env_mismatch,
        fail_on_improvement=fail_on_improvement,
        fail_on_missing=fail_on_missing,
    )
    # unchanged findings are counted, not listed, but with --all; json lists them all
    # unless --only-changed (as it did before the table left them out by default)
    emit_comparison(result, fmt, only_changed if fmt == "json" else not show_all, output, wide)
    raise exit_with(result.exit_code())


baseline_app = typer.Typer(
    help="Keep the results `attnbench compare` gates against.", no_args_is_help=True
)
app.add_typer(baseline_app, name="baseline")


@baseline_app.command("save")
@handles_errors
def baseline_save_command(
    results: SavedResultsArg,
    to: BaselineToOpt = None,
) -> None:
    """Validate RESULTS.json and save it as a baseline, replacing any file there."""
    doc = load_baseline(results)
    path = Path(to) if to else default_baseline_path(doc)
    check_writable({"to": str(path)}, {})  # over the results file itself is harmless
    replaced = " (replaced the previous baseline)" if path.exists() else ""
    write_baseline(doc, path)
    counts = []
    for name, records in doc.sections.items():
        samples = sum(bool(r.get("samples_ms")) for r in records)
        counts.append(
            f"{name}: {len(records)} record{'s' * (len(records) != 1)}"
            + (f", {samples} with raw samples" if name in KINDS and KINDS[name].timed else "")
        )
    console.print(f"wrote {path}{replaced}: {'; '.join(counts)}", highlight=False, markup=False)


@baseline_app.command("exact")
@handles_errors
def baseline_exact_command(
    config: ConfigArg = None,
    to: ExactToOpt = EXACT_BASELINE,
) -> None:
    """Write the exact metrics of a study (parameter counts, and KV-cache bytes computed
    without measuring) as a baseline: what CI gates every change against."""
    check_writable({"to": to}, {"config": config})
    path = save_exact_baseline(config, to)
    console.print(f"wrote {path}", highlight=False, markup=False)
