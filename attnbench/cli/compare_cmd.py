"""`attnbench compare` (the regression gate) and `attnbench baseline save`."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import typer
from rich.console import Console

from ..errors import FieldError, UsageError
from ..gate.baseline import default_baseline_path, save_baseline, save_exact_baseline
from ..gate.compare import Comparison, Finding, Thresholds, Verdict, compare_documents
from ..history.baseline import history_baseline
from ..history.store import open_history
from ..model.units import format_bytes
from ..records import SAMPLED, Kind
from ..render.columns import known
from ..render.table import (
    Column,
    build_table,
    markdown_text,
    plain_console,
    print_view,
    terminal_width,
)
from ..study.documents import Document, load_document
from ..study.schema import parse_number
from . import app
from .common import check_writable, console, fail
from .flags import handles_errors

FORMATS = ("table", "markdown", "json")
STATUS = {0: "PASS", 1: "FAIL", 3: "INCOMPARABLE"}
HEADERS = (
    "Verdict",
    "Section",
    "Row",
    "Metric",
    "Baseline",
    "Current",
    "Change",
    "Interval",
    "Reason",
)
#: How each cell of HEADERS shows in the terminal: its kind and rank (see render.table).
#: The verdict and its reason are never hidden: when the table is too narrow, the interval,
#: the values, the section and the change go first, then the reason folds onto more lines
#: (before the metric or the row would go).
CELLS = (
    ("status", 0),
    ("label", 5),
    ("text", 1),
    ("label", 2),
    ("number", 6),
    ("number", 4),
    ("number", 3),
    ("number", 8),
    ("text", 2),
)
#: The columns the table keeps at any width.
KEPT = ("Reason",)


def history_baseline_of(db: str, head: Document) -> Document:
    """The baseline `head` is gated against from the history at `db` (history.baseline)."""
    try:
        store = open_history(db)
    except FieldError as exc:  # the database is given as --history here
        raise FieldError("history", exc.value, exc.reason) from None
    try:
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
        raise UsageError(f"{flag}: expected a percentage >= 0, got {text!r}")
    return value / 100


# --- cells -------------------------------------------------------------------------------


def _value(f: Finding, v: float | None) -> str:
    if not known(v):
        return "-"
    if f.kind is Kind.TIMING:
        return f"{v:.4g} ms"
    if f.kind is Kind.RATIO:
        return f"{v:.3f}x"
    if f.kind is Kind.MEMORY:
        return format_bytes(v)
    return f"{v:,}" if float(v).is_integer() else f"{v:,.6g}"


def _change(f: Finding) -> str:
    if not (known(f.baseline) and known(f.current)):
        return "-"
    if f.kind in SAMPLED:
        return f"{f.ratio:.3f}x" if known(f.ratio) else "-"
    delta = f.current - f.baseline
    if not delta:
        return "0"
    if f.kind is Kind.COUNT:
        return (
            f"{delta:+,.0f} ({f.ratio - 1:+.2%})" if f.ratio and known(f.ratio) else f"{delta:+,}"
        )
    if f.kind is Kind.MEMORY:
        pct = f" ({f.ratio - 1:+.1%})" if f.ratio and known(f.ratio) else ""
        return f"{'+' if delta >= 0 else '-'}{format_bytes(abs(delta))}{pct}"
    return f"{delta:+,}" if float(delta).is_integer() else f"{delta:+,.6g}"


def _interval(f: Finding) -> str:
    if f.interval is None or not all(map(known, f.interval)):
        return "-"
    return f"{f.interval[0]:.3f}x..{f.interval[1]:.3f}x"


def _varying(findings: list[Finding]) -> set[tuple[str, str]]:
    """(section, field) pairs whose value differs between rows: what tells rows apart."""
    values: dict[tuple[str, str], set] = {}
    for f in findings:
        for k, v in f.config.items():
            values.setdefault((f.section, k), set()).add(json.dumps(v))
    return {key for key, seen in values.items() if len(seen) > 1}


def _label(f: Finding, varying: set[tuple[str, str]]) -> str:
    """A row named by its varying config fields (`variant` always, and bare)."""
    named = "variant" in f.config  # the variant names the KV heads
    parts = [
        str(v) if k == "variant" else f"{k}={v}"
        for k, v in f.config.items()
        if k == "variant" or ((f.section, k) in varying and not (named and k == "num_kv_heads"))
    ]
    return " ".join(parts) or "-"


def _cells(result: Comparison, only_changed: bool) -> list[tuple[Finding, list[str]]]:
    """The findings to show, each with its row of cells (in HEADERS order)."""
    varying = _varying(result.findings)
    rows = []
    for f in result.sorted_findings(only_changed):
        label, metric = _label(f, varying), f.metric or "(row)"
        values = [_value(f, f.baseline), _value(f, f.current), _change(f), _interval(f)]
        rows.append((f, [f.verdict.value, f.section, label, metric, *values, f.reason]))
    return rows


# --- formats -----------------------------------------------------------------------------


def summary_line(result: Comparison) -> str:
    """'FAIL (exit 1): 1 regressed, 20 unchanged; geometric-mean timing ratio 1.031x (12)'."""
    code = result.exit_code()
    ungated = Counter(f.verdict.value for f in result.findings if not f.gating)
    counts = ", ".join(
        f"{n} {verdict}" + (f" ({ungated[verdict]} not gated)" if ungated[verdict] else "")
        for verdict, n in result.counts().items()
    )
    geomean = result.geomean_timing_ratio()
    timing = (
        f"geometric-mean timing ratio {geomean:.3f}x over {len(result.timing_ratios())} timings"
        if geomean
        else "no timings compared"
    )
    return f"{STATUS[code]} (exit {code}): {counts or 'no metrics'}; {timing}"


def _env_value(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _context_lines(result: Comparison) -> list[str]:
    """The gating environment differences and the notes, one line each."""
    lines = []
    diffs = [d for d in result.env_differences if d.gating]
    if diffs:
        changes = ", ".join(
            f"{d.field} {_env_value(d.baseline)} -> {_env_value(d.current)}" for d in diffs
        )
        lines.append(f"Environments differ ({changes}): timings do not gate.")
    return lines + [f"Note: {note}." for note in result.notes]


def unchanged_line(result: Comparison, only_changed: bool, markdown: bool = False) -> str | None:
    """'18 unchanged findings not shown: --all shows them', when the unchanged ones are
    left out and there are some; None otherwise."""
    if not only_changed:
        return None
    count = sum(f.verdict is Verdict.UNCHANGED for f in result.findings)
    if not count:
        return None
    noun = "finding" if count == 1 else "findings"
    flag = "`--all`" if markdown else "--all"
    return f"{count} unchanged {noun} not shown: {flag} shows them."


def render_markdown(result: Comparison, only_changed: bool) -> str:
    rows = _cells(result, only_changed)
    hidden = unchanged_line(result, only_changed, markdown=True)

    def row(cells) -> str:
        return "| " + " | ".join(markdown_text(str(c)) for c in cells) + " |"

    lines = [f"**attnbench compare: {summary_line(result)}**", ""]
    context = _context_lines(result)
    lines += [f"{markdown_text(line)}  " for line in context] + ([""] if context else [])
    opened = " open" if result.exit_code() else ""
    if not rows:
        return "\n".join([*lines, *([hidden] if hidden else [])]).rstrip() + "\n"
    lines += [
        f"<details{opened}><summary>Details: {len(rows)} of {len(result.findings)} "
        f"findings, {markdown_text(str(result.baseline))} vs "
        f"{markdown_text(str(result.current))}</summary>",
        "",
        row(HEADERS),
        row(["---"] * len(HEADERS)),
    ]
    lines += [row(cells) for _, cells in rows]
    lines += ["", *([hidden, ""] if hidden else []), "</details>"]
    return "\n".join(lines) + "\n"


def _print_table(out: Console, result: Comparison, only_changed: bool, width: int) -> None:
    """The findings as a table that fits `width`: when it is too narrow the interval goes
    first, then the other columns, but never the verdict or its reason, which folds
    (--format markdown or json keep everything); then how many unchanged findings were
    left out, and the summary."""
    rows = [dict(zip(HEADERS, cells, strict=True)) for _, cells in _cells(result, only_changed)]
    if rows:
        columns = [
            Column(h, h, str, rank=rank, kind=kind, keep=h in KEPT)
            for h, (kind, rank) in zip(HEADERS, CELLS, strict=True)
        ]
        title = f"attnbench compare: {result.baseline} -> {result.current}"
        view = build_table(title, rows, columns, width, hint="--format markdown or json")
        print_view(out, view)
    hidden = unchanged_line(result, only_changed)
    for line in [*([hidden] if hidden else []), *_context_lines(result), summary_line(result)]:
        out.print(line, highlight=False, markup=False)


def _text(result: Comparison, fmt: str, only_changed: bool) -> str:
    if fmt == "markdown":
        return render_markdown(result, only_changed)
    return json.dumps(result.to_dict(only_changed), indent=2) + "\n"


def emit_comparison(result: Comparison, fmt: str, only_changed: bool, output: str | None) -> None:
    """Print the report, or write it to `output` and say where it went."""
    if output is None:
        if fmt == "table":
            _print_table(console, result, only_changed, terminal_width(console))
        else:
            typer.echo(_text(result, fmt, only_changed), nl=False)
        return
    path = Path(output)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w") as fh:
            if fmt == "table":
                wide = plain_console(file=fh, width=200, color_system=None)
                _print_table(wide, result, only_changed, 200)
            else:
                fh.write(_text(result, fmt, only_changed))
    except OSError as exc:
        raise FieldError("output", path, f"cannot write: {exc.strerror}") from None
    console.print(f"wrote {path}: {summary_line(result)}", highlight=False, markup=False)


@app.command("compare")
@handles_errors
def compare_command(
    baseline: str = typer.Argument(
        ...,
        metavar="BASELINE",
        help="Baseline results (JSON from --json, or CSV); with --history, the current ones.",
    ),
    current: str | None = typer.Argument(
        None, metavar="CURRENT", help="Current results of the same command."
    ),
    history: str | None = typer.Option(
        None,
        "--history",
        metavar="DB",
        help="Gate the one results file given against the recent runs of its environment "
        "in this history database (attnbench history add), not against one baseline.",
    ),
    time_threshold: str = typer.Option(
        "10%",
        "--time-threshold",
        metavar="PERCENT",
        help="Smallest timing change that counts, e.g. 10%.",
    ),
    mem_threshold: str = typer.Option(
        "1%",
        "--mem-threshold",
        metavar="PERCENT",
        help="Measured-memory change that counts (at least 1 MiB).",
    ),
    count_threshold: str = typer.Option(
        "1%",
        "--count-threshold",
        metavar="PERCENT",
        help="Instruction-count change that counts, either way (counts are near-exact).",
    ),
    fmt: str = typer.Option("table", "--format", metavar="FORMAT", help="table, markdown or json."),
    output: str | None = typer.Option(
        None, "--output", metavar="PATH", help="Write the report here."
    ),
    fail_on_improvement: bool = typer.Option(
        False, "--fail-on-improvement", help="Fail on improvements too (refresh the baseline)."
    ),
    allow_env_mismatch: bool = typer.Option(
        False, "--allow-env-mismatch", help="Show timings from differing environments, ungated."
    ),
    show_all: bool = typer.Option(
        False,
        "--all",
        help="List the unchanged findings too (the table and markdown count them; json "
        "lists every finding).",
    ),
    only_changed: bool = typer.Option(
        False, "--only-changed", hidden=True, help="Leave the unchanged findings out of json too."
    ),
) -> None:
    """Gate CURRENT against BASELINE, or (--history DB) one results file against the
    recent runs of its environment. Lists what changed or did not pass, worst first, and
    counts the unchanged findings (--all lists them). Exit 0: no regression; 1: a
    regression; 2: bad input; 3: timings from different environments (see
    --allow-env-mismatch)."""
    if fmt not in FORMATS:
        raise FieldError("format", fmt, f"unknown value; choose from {', '.join(FORMATS)}")
    if show_all and only_changed:
        raise UsageError("--all and --only-changed: give one or the other")
    if history is not None and current is not None:
        raise FieldError("history", history, "gates one results file: give CURRENT alone")
    if history is None and current is None:
        raise UsageError("missing CURRENT: give BASELINE and CURRENT, or --history DB CURRENT")
    check_writable({"output": output}, {"baseline": baseline, "current": current})
    thresholds = Thresholds(
        time=parse_percent("--time-threshold", time_threshold),
        mem=parse_percent("--mem-threshold", mem_threshold),
        count=parse_percent("--count-threshold", count_threshold),
    )
    if history is not None:
        head = load_document(baseline)
        base = history_baseline_of(history, head)
    else:
        base, head = load_document(baseline), load_document(current)  # type: ignore[arg-type]
    result = compare_documents(
        base,
        head,
        thresholds,
        allow_env_mismatch=allow_env_mismatch,
        fail_on_improvement=fail_on_improvement,
    )
    # unchanged findings are counted, not listed, but with --all; json lists them all
    # unless --only-changed (as it did before the table left them out by default)
    emit_comparison(result, fmt, only_changed if fmt == "json" else not show_all, output)
    code = result.exit_code()
    if code == 3:
        raise fail(
            "environments differ, timings not compared; run both on one machine, or pass "
            "--allow-env-mismatch to show them without gating",
            code,
        )
    raise typer.Exit(code)


baseline_app = typer.Typer(
    help="Keep the results `attnbench compare` gates against.", no_args_is_help=True
)
app.add_typer(baseline_app, name="baseline")


@baseline_app.command("save")
@handles_errors
def baseline_save_command(
    results: str = typer.Argument(..., metavar="RESULTS.json", help="JSON written by --json."),
    to: str | None = typer.Option(
        None,
        "--to",
        metavar="PATH",
        help="Where to write it (default results/baselines/<stem>.json).",
    ),
) -> None:
    """Validate RESULTS.json and save it as a baseline, replacing any file there."""
    dest = Path(to) if to else default_baseline_path(results)
    check_writable({"to": str(dest)}, {})  # over the results file itself is harmless
    replaced = " (replaced the previous baseline)" if dest.exists() else ""
    path, doc = save_baseline(results, dest)
    counts = []
    for name, records in doc.sections.items():
        samples = sum(bool(r.get("samples_ms")) for r in records)
        counts.append(
            f"{name}: {len(records)} records"
            + (f", {samples} with raw samples" if name == "decode" else "")
        )
    console.print(f"wrote {path}{replaced}: {'; '.join(counts)}", highlight=False, markup=False)


@baseline_app.command("exact")
@handles_errors
def baseline_exact_command(
    config: str | None = typer.Argument(
        None, metavar="CONFIG", help="Sweep file (default: the packaged default study)."
    ),
    to: str = typer.Option(
        "results/baselines/cpu-exact.json",
        "--to",
        metavar="PATH",
        help="Where to write the baseline.",
    ),
) -> None:
    """Write the exact metrics of a study (parameter counts, and KV-cache bytes computed
    without measuring) as a baseline: what CI gates every change against."""
    check_writable({"to": to}, {"config": config})
    path = save_exact_baseline(config, to)
    console.print(f"wrote {path}", highlight=False, markup=False)
