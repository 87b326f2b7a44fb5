"""The report of `attnbench compare` and `attnbench ab`: a comparison's findings as a
table that fits the terminal, or as markdown, and its one-line summary."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.console import Console

from ..model.units import format_bytes, ratio_text
from ..records import SAMPLED, Kind
from .columns import known
from .table import Column, build_table, markdown_text, print_view

if TYPE_CHECKING:  # the gate itself loads numpy and the record types (torch)
    from ..gate.compare import Comparison, EnvDifference, Finding

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
    """A row named by its varying config fields (`variant` always, and bare; a field a
    row leaves out, as '-')."""
    named = "variant" in f.config  # the variant names the KV heads
    parts = [
        str(v) if k == "variant" else f"{k}={'-' if v is None else v}"
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
    """A float to 4 significant digits, a {dtype: peak} mapping as 'float32 0.02878'."""
    if isinstance(v, dict):
        return ", ".join(f"{k} {_env_value(x)}" for k, x in v.items())
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _changes(diffs: list[EnvDifference]) -> str:
    return ", ".join(
        f"{d.field} {_env_value(d.baseline)} -> {_env_value(d.current)}" for d in diffs
    )


def _context_lines(result: Comparison) -> list[str]:
    """The machines' differences where a metric measured on them is compared, the peaks
    that moved between the runs and during a run by more than the threshold (noise: the
    threshold it sets on timings, and a run's timings that are then never unchanged) and
    the notes, one line each."""
    lines = []
    diffs = [d for d in result.env_differences if d.gating]
    if diffs and result.machine_bound():
        lines.append(f"Environments differ ({_changes(diffs)}): timings do not gate.")
    moved = [d for d in result.env_differences if d.drift]
    during = result.moved_during()
    if moved or during:
        held_to, threshold = result.timing_threshold(), result.thresholds.time
        held = (
            f"timings are held to a {ratio_text(1 + held_to, 1 + threshold)} threshold, "
            f"not {1 + threshold:.2f}x"
            if held_to > threshold
            else f"within the {1 + threshold:.2f}x timing threshold"
        )
        between = f"{_changes(moved)}; {1 + result.drift():.2f}x" if moved else ""
        if during:
            between += " between the runs; " if moved else ""
            between += "; ".join(d.text(1 + threshold) for d in during)
            runs = list(dict.fromkeys(d.run for d in during))
            whose = f"the {runs[0]} run's" if len(runs) == 1 else "both runs'"
            held += f", and none is unchanged: {whose} timings hold for neither moment"
        lines.append(
            f"Measured peaks moved ({between}): the machine's load, not another machine; {held}."
        )
    return lines + [f"Note: {note}." for note in result.notes]


@dataclass(frozen=True)
class Spelling:
    """What the report points the reader to, as the command line spells it (only the
    command line knows its flags): the flag that shows every finding, and the formats
    that keep every column."""

    show_all: str
    other_formats: str


def unchanged_line(
    result: Comparison, only_changed: bool, spelling: Spelling, markdown: bool = False
) -> str | None:
    """'18 unchanged findings not shown: <show_all> shows them', when the unchanged ones
    are left out and there are some; None otherwise."""
    from ..gate.compare import Verdict

    if not only_changed:
        return None
    count = sum(f.verdict is Verdict.UNCHANGED for f in result.findings)
    if not count:
        return None
    noun = "finding" if count == 1 else "findings"
    flag = f"`{spelling.show_all}`" if markdown else spelling.show_all
    return f"{count} unchanged {noun} not shown: {flag} shows them."


def render_markdown(result: Comparison, only_changed: bool, spelling: Spelling) -> str:
    rows = _cells(result, only_changed)
    hidden = unchanged_line(result, only_changed, spelling, markdown=True)

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


def print_table(
    out: Console,
    result: Comparison,
    only_changed: bool,
    width: int,
    spelling: Spelling,
    wide: bool = False,
) -> None:
    """The findings as a table that fits `width` (unless `wide`: every column): when it is
    too narrow the interval goes first, then the other columns, but never the verdict or
    its reason, which folds (the other formats keep everything); then how many unchanged
    findings were left out, and the summary."""
    rows = [dict(zip(HEADERS, cells, strict=True)) for _, cells in _cells(result, only_changed)]
    if rows:
        columns = [
            Column(h, h, str, rank=rank, kind=kind, keep=h in KEPT)
            for h, (kind, rank) in zip(HEADERS, CELLS, strict=True)
        ]
        title = f"attnbench compare: {result.baseline} -> {result.current}"
        view = build_table(title, rows, columns, width, wide, hint=spelling.other_formats)
        print_view(out, view)
    hidden = unchanged_line(result, only_changed, spelling)
    for line in [*([hidden] if hidden else []), *_context_lines(result), summary_line(result)]:
        out.print(line, highlight=False, markup=False)


def report_text(result: Comparison, fmt: str, only_changed: bool, spelling: Spelling) -> str:
    """The report as `fmt` says: markdown, else JSON (every finding, or only the changed)."""
    if fmt == "markdown":
        return render_markdown(result, only_changed, spelling)
    return json.dumps(result.to_dict(only_changed), indent=2) + "\n"
