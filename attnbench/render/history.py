"""The history's series and changes as table rows, Markdown and a trend plot."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..history.series import ANY_ENVIRONMENT, Change, Series, by_environment
from ..records import Kind
from .columns import legend_label
from .table import markdown_code, markdown_text

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

#: Series drawn in one panel at the most: as many as a legend beside it holds, each of a
#: colour and marker of its own (plots.series_style); the title counts those left out.
MAX_LINES = 20


def _varying(series: Sequence[Series]) -> list[str]:
    """The keys whose values differ among `series` (what labels them apart)."""
    keys = list(dict.fromkeys(k for s in series for k in s.keys))
    return [k for k in keys if len({str(s.keys.get(k)) for s in series}) > 1]


def environment_label(series: Series) -> str:
    """The series' environment as its id and what it recorded of device, torch and
    threads: 'environment 0123456789 (NVIDIA H100, torch 2.4.0, 8 threads)'."""
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


def value_text(kind: str, value: float) -> str:
    if kind == Kind.TIMING.value:
        return f"{value:.4g} ms"
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.6g}"


def _date(commit) -> str:
    return (commit.date or "")[:10]


def series_rows(series: Sequence[Series]) -> list[dict]:
    """A row per series and commit, for `history show`; the series named by the keys
    that tell them apart (none when there is one)."""
    varying = _varying(series)
    rows = []
    for s in series:
        name = s.label(varying) if varying else None
        for v in s.values:
            spread = f"{100 * (v.p75 - v.p25) / v.median:.1f}%" if v.median else None
            rows.append(
                {
                    "series": name,
                    "commit": v.commit.sha[:10],
                    "date": _date(v.commit),
                    "branch": v.commit.branch,
                    "median": value_text(s.kind, v.median),
                    "spread": spread,
                    "runs": str(v.runs),
                }
            )
    return rows


def _interval(change: Change) -> str:
    if change.low_pct is None or change.high_pct is None:
        return "exact"
    return f"{change.low_pct:+.1f}%..{change.high_pct:+.1f}%"


def change_text(change: Change) -> str:
    """A timing's change in percent; an exact metric's as the difference itself (a
    count of bytes or parameters that moved by 2 is not '+0.0%')."""
    if change.series.kind == Kind.EXACT.value:
        return f"{change.after - change.before:+,.0f}"
    return f"{change.change_pct:+.1f}%"


def changes_rows(changes: Sequence[Change]) -> list[dict]:
    """A row per change, for `history changes`; each series named by the keys that tell
    it from the others (all its keys when there is one)."""
    series = [c.series for c in changes]
    varying = _varying(series) or list(dict.fromkeys(k for s in series for k in s.keys))
    return [
        {
            "metric": c.series.metric,
            "series": c.series.label(varying),
            "commit": c.commit.sha[:10],
            "change": change_text(c),
            "interval": _interval(c),
            "before": value_text(c.series.kind, c.before),
            "after": value_text(c.series.kind, c.after),
            "environment": environment_label(c.series),
        }
        for c in changes
    ]


def changes_markdown(changes: Sequence[Change]) -> str:
    """The changes as Markdown: a heading and a table (for a CI job's summary)."""
    if not changes:
        return "### Performance history\n\nNo change found."
    series = [c.series for c in changes]
    varying = _varying(series) or list(dict.fromkeys(k for s in series for k in s.keys))
    lines = [
        "### Performance history: changes",
        "",
        "| Metric | Series | Commit | Change | 95% interval | Before | After | Environment |",
        "|---|---|---|---:|---|---:|---:|---|",
    ]
    for c in changes:
        cells = [
            markdown_text(c.series.metric),
            markdown_text(c.series.label(varying)),
            markdown_code(c.commit.sha[:10]),
            change_text(c),
            _interval(c),
            value_text(c.series.kind, c.before),
            value_text(c.series.kind, c.after),
            c.series.environment_id,
        ]
        lines.append(f"| {' | '.join(cells)} |")
    return "\n".join(lines)


def plot_series(
    series: Sequence[Series], changes: Sequence[Change], out: Path, choose: str = ""
) -> Path:
    """Each series' median per commit with its p25..p75 band, change points marked with
    a dashed line and their size; one panel per environment, of MAX_LINES series at the
    most, its title saying how many it drew where it left some out, and `choose` (how to
    pick them). Writes `out` (its folder made if need be), in the format its extension
    names; every text drawn as written."""
    from .plots import literal_text, write_figure  # matplotlib

    with literal_text():
        write_figure(_trend_figure(series, changes, choose), out)
    return out


def left_out(series: Sequence[Series]) -> list[str]:
    """Per panel that cannot draw all its series, how many it draws: '20 of 32 series
    drawn (environment 0123456789 ...)'."""
    return [
        f"{_drawn(members)} ({environment_label(members[0])})"
        for members in by_environment(series).values()
        if len(members) > MAX_LINES
    ]


def _drawn(members: Sequence[Series]) -> str:
    """How many of a panel's series it draws: '20 of 32 series drawn'."""
    return f"{min(len(members), MAX_LINES)} of {len(members)} series drawn"


def _trend_figure(series: Sequence[Series], changes: Sequence[Change], choose: str = "") -> Figure:
    """The figure `plot_series` writes."""
    from matplotlib.figure import Figure

    from .plots import scaled_axis, series_style, wrapped

    by_env = by_environment(series)
    lines = max(min(len(members), MAX_LINES) for members in by_env.values())
    panel = max(4.2, 1.2 + LEGEND_ENTRY_INCHES * lines)  # the legend beside it fits
    fig = Figure(figsize=(9, panel * len(by_env)), layout="constrained")
    axes = fig.subplots(len(by_env), 1, squeeze=False)[:, 0]
    metric = series[0].metric
    fig.suptitle(f"{metric} over commits", fontsize=13, fontweight="bold")
    for ax, members in zip(axes, by_env.values(), strict=True):
        drawn = members[:MAX_LINES]
        commits = list(dict.fromkeys(v.commit.sha for s in members for v in s.values))
        where = {sha: i for i, sha in enumerate(commits)}
        varying = _varying(members)
        for index, s in enumerate(drawn):
            xs = [where[v.commit.sha] for v in s.values]
            label = legend_label(s.label(varying) or metric)
            style = series_style(index)
            ax.plot(xs, [v.median for v in s.values], **style, ms=4, label=label)
            ax.fill_between(
                xs,
                [v.p25 for v in s.values],
                [v.p75 for v in s.values],
                color=style["color"],
                alpha=0.2,
                linewidth=0,
            )
        at: dict[str, list[float]] = {}  # the changes drawn, by commit
        for c in changes:
            if any(c.series is s for s in drawn):
                at.setdefault(c.commit.sha, []).append(c.change_pct)
        marks = [(where[sha] - 0.5, sizes, sha) for sha, sizes in at.items()]  # between commits
        rows = _annotate_changes(ax, marks, len(commits))
        title = wrapped(environment_label(members[0]), PANEL_TITLE_WIDTH)
        if len(members) > len(drawn):
            title += f"\n{_drawn(members)}" + (f": {choose}" if choose else "")
        # the changes' texts in rows of their own between the title and the axes
        ax.set_title(title, fontsize=9, pad=6 + ANNOTATION_ROW * rows)
        ax.set_xticks(
            range(len(commits)), [sha[:7] for sha in commits], rotation=45, fontsize=8, ha="right"
        )
        ax.set_xlabel("commit (oldest first)")
        ax.set_ylabel("ms" if members[0].kind == Kind.TIMING.value else metric)
        values = [x for s in drawn for v in s.values for x in (v.p25, v.p75)]
        scaled_axis(ax, "y", values)  # a log scale where they span a decade or more
        if ax.get_yscale() == "linear":
            ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # on no line
    return fig


#: The height a legend entry of 8 points takes, in inches.
LEGEND_ENTRY_INCHES = 0.19
#: Characters per line of a panel's title: what fits over the axes of the 9-inch figure,
#: its legend beside them, at 9 points.
PANEL_TITLE_WIDTH = 75
#: The height of a row of change texts over a panel, in points.
ANNOTATION_ROW = 12
#: The share of a panel's commits one character of a change's text spans, about (8-point
#: text over a panel of the 9-inch figure, its legend beside it): a text that would
#: overlap an earlier one goes a row higher.
CHAR_SHARE = 0.012


def _annotate_changes(
    ax: Axes, changes: Sequence[tuple[float, list[float], str]], commits: int
) -> int:
    """Mark each change (x between commits, its sizes in percent, its commit) on a panel
    of `commits` commits: a dashed line across the panel, and its size in a text above
    the panel, where no line of data crosses it, beside the dashed line's top (to its
    left in the right half of the panel), a row higher where it would overlap an earlier
    text. Returns the rows of texts drawn."""
    rows: list[list[tuple[float, float]]] = []  # per row, the spans its texts take
    for x, sizes, sha in sorted(changes):
        size = f"{sizes[0]:+.1f}%"
        if len(sizes) > 1:
            size = f"{min(sizes):+.1f}%..{max(sizes):+.1f}% ({len(sizes)} series)"
        text = f"{size} at {sha[:7]}"
        width = len(text) * CHAR_SHARE * commits
        left = x > (commits - 1) / 2
        span = (x - width, x) if left else (x, x + width)
        row = next(
            (
                i
                for i, taken in enumerate(rows)
                if all(span[1] < a or b < span[0] for a, b in taken)
            ),
            len(rows),
        )
        if row == len(rows):
            rows.append([])
        rows[row].append(span)
        ax.axvline(x, color="crimson", linestyle="--", linewidth=1)
        ax.annotate(
            text,
            (x, 1),
            xycoords=("data", "axes fraction"),
            xytext=(-3 if left else 3, 3 + ANNOTATION_ROW * row),
            textcoords="offset points",
            ha="right" if left else "left",
            va="bottom",
            fontsize=8,
            color="crimson",
            annotation_clip=False,
        )
    return len(rows)
