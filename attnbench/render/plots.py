"""PNG plots of a study's results (the `results.json` document of `attnbench run`).

Figures are drawn on matplotlib's Agg canvas without pyplot, so nothing needs a display
and no global state changes; text is drawn as written (`literal_text`), never as
mathtext. Every plot names its device, dtype (a KV-memory plot: the cache's) and batch
(or puts what varies in the legend), in a subtitle wrapped to the figure's width, labels
its axes with units, and switches an axis to a log scale when its values span a decade or
more. Memory is shown in binary units. Series differ by colour and marker (series_style),
lines with identical points are drawn once and named by each, and a legend of series goes
beside the axes, where it hides no line.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path

from matplotlib import rc_context
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogFormatter, NullLocator

from ..measure.stats import MIN_SPREAD_SAMPLES, NOISY_IQR_FRACTION
from ..model.units import binary_unit
from ..study.output import named, replace_with, writable_target
from .columns import legend_label
from .comparisons import RESOLVED_WIDTH, judge
from .selection import (
    context,
    joint_label,
    merge_identical,
    ok_records,
    one_provider,
    providers_of,
    same_points,
    series,
    unsteady,
)


class PlainLogFormatter(LogFormatter):
    """Labels the minor ticks LogFormatter would (some when an axis spans up to two decades,
    none when it spans more) as plain numbers: 0.6 rather than 6e-01."""

    def __call__(self, x: float, pos: int | None = None) -> str:
        return f"{x:g}" if super().__call__(x, pos) else ""


def scaled_axis(ax: Axes, axis: str, values: Sequence[float]) -> None:
    """A log scale when the values span a decade or more; on x, ticks at the data."""
    values = [v for v in values if v is not None]
    log = bool(values) and min(values) > 0 and max(values) / min(values) >= 10
    target = ax.xaxis if axis == "x" else ax.yaxis
    if log:
        (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
        target.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        minor = PlainLogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5))
        target.set_minor_formatter(minor)
    if axis == "x":
        ax.set_xticks(sorted(set(values)))
        target.set_minor_locator(NullLocator())


def literal_text():
    """A context in which the texts made (a model named `a$x$`, a variant) are drawn as
    they are written: matplotlib would read `$...$` in them as mathtext, and fail on what
    is no formula."""
    return rc_context({"text.parse_math": False})


#: Characters per line of a subtitle: what fits over the axes of _figure's 8-inch figure
#: at 9 points, with a legend beside them or not (about 6.5 pixels a character at 100 dpi).
SUBTITLE_WIDTH = 90


def wrapped(text: str, width: int) -> str:
    """Each line of `text` wrapped to `width` characters, evenly (_balanced)."""
    return "\n".join(_balanced(line, width) for line in text.splitlines())


def _balanced(line: str, width: int) -> str:
    """`line` in as few lines of up to `width` characters as it needs, of even lengths:
    the narrowest wrap into that many lines, so that no word or two is left alone on
    the last. Lines break after a comma where the items between commas fit ('provider
    attnbench' stays whole), at a space otherwise, never at a name's hyphens."""
    items = line.split(", ")
    whole = len(items) > 1 and max(map(len, items)) <= width
    if whole:  # no break inside an item: its spaces are no whitespace to textwrap
        line = ", ".join(item.replace(" ", NO_BREAK) for item in items)
    fill = textwrap.TextWrapper(width, break_long_words=False, break_on_hyphens=False)
    count = len(fill.wrap(line))
    if count > 1:
        while fill.width > 1:
            fill.width -= 1
            if len(fill.wrap(line)) != count:
                fill.width += 1
                break
    return fill.fill(line).replace(NO_BREAK, " ")


#: Stands for a space no line may break at, while _balanced wraps a line.
NO_BREAK = "\u00a0"


def _figure(title: str, subtitle: str, xlabel: str, ylabel: str) -> tuple[Figure, Axes]:
    fig = Figure(figsize=(8, 5), layout="constrained")
    ax = fig.add_subplot()
    fig.suptitle(title, fontsize=13, fontweight="bold")
    ax.set_title(wrapped(subtitle, SUBTITLE_WIDTH), fontsize=9)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="major", alpha=0.3)
    return fig, ax


#: Markers of successive series, with the colours C0 to C9: seven markers against ten
#: colours, so that no two of the first 70 series share both, and lines drawn one over
#: the other (or nearly) still show each one's markers.
MARKERS = ("o", "s", "^", "D", "v", "P", "X")


def series_style(index: int) -> dict:
    """The colour and marker of a plot's series number `index` (from 0)."""
    return {"color": f"C{index % 10}", "marker": MARKERS[index % len(MARKERS)]}


#: Characters per line of a legend entry: a legend beside the axes leaves them room.
LEGEND_WIDTH = 48


def _legend_text(label: str) -> str:
    """A series' label as its legend entry shows it: each line wrapped to LEGEND_WIDTH
    (before ' = ' where lines drawn as one are named together), safe to show
    (legend_label)."""
    lines = []
    for line in label.splitlines():
        if len(line) > LEGEND_WIDTH and " = " in line:
            first, *rest = line.split(" = ")
            lines.extend([first, *(f"= {part}" for part in rest)])
        else:
            lines.append(line)
    return legend_label("\n".join(_balanced(line, LEGEND_WIDTH) for line in lines))


def _legend_beside(ax: Axes, handles=None, labels=None, **options) -> None:
    """The legend of `ax` beside it, at its top right, where it hides no line."""
    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
    ax.legend(
        handles,
        labels,
        fontsize=8,
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        handlelength=3,
        title_fontsize=8,
        **options,
    )


#: The x axis of every decode plot.
CONTEXT_LABEL = "Context (tokens cached)"
#: The settings a decode plot's subtitle names when every line shares them: the layer
#: (its query heads; its KV heads tell the lines apart), the dtype, the batch.
DECODE_SHARED = ("d_model", "num_heads", "dtype", "batch", "gen_len", "cuda_graph")


#: How a plot marks a point it cannot vouch for: hollow.
HOLLOW = {"markerfacecolor": "white", "markeredgewidth": 1.5}
#: The legend's words for a hollow step (decode_latency, decode_bandwidth) and for a
#: hollow comparison (decode_speedup, decode_variants).
NOISY_LABEL = (
    f"hollow: noisy (p25 to p75 over {NOISY_IQR_FRACTION:.0%} of the median, under "
    f"{MIN_SPREAD_SAMPLES} samples, or sampled while another process held the CPU)"
)
UNRESOLVED_LABEL = (
    f"hollow: too uncertain to call (95% interval over ±{RESOLVED_WIDTH:.0%}, or over a "
    f"third of the ratio's gap to 1x where that is wider; under {MIN_SPREAD_SAMPLES} rounds; "
    "or the host's speed moved, or another process held the CPU)"
)
#: The legend's title where the bars are a step's p25 to p75.
BARS_IQR = "bars: p25 to p75"


def _decode_lines(
    ax: Axes,
    records: Sequence[dict],
    y: str,
    spread: tuple[str, str] | None = None,
    modes: Sequence[str] = ("cache", "no_cache"),
    legend_title: str | None = None,
    unsure: Callable[[dict], bool] | None = None,
    unsure_label: str = NOISY_LABEL,
) -> None:
    """One line per configuration and mode (solid with the cache, dashed without), in the
    configuration's series_style, with `spread` (low, high fields) as error bars; the
    points `unsure` says are not to be relied on (noisy, not resolved) hollow, with
    `unsure_label` in the legend; lines of one mode with identical points drawn as one,
    under a joint label; the legend beside the axes."""
    configs = series(records, "prompt_len", exclude=("mode",))

    def hollow(r: dict) -> bool:
        return bool(unsure and unsure(r))

    def points(rows: list[dict]) -> tuple:
        return tuple(
            (r["prompt_len"], r[y], *(r[f] for f in spread or ()), hollow(r)) for r in rows
        )

    drawn: dict[tuple[int, str], str] = {}  # (configuration, mode) -> its line's label
    for mode in modes:
        lines = [(label, [r for r in rows if r["mode"] == mode]) for label, rows in configs]
        for group in same_points(lines, points):
            if lines[group[0]][1]:
                drawn[group[0], mode] = joint_label([lines[i][0] for i in group])
    marked = False
    for index, (_, rows) in enumerate(configs):
        style = series_style(index)
        for mode in modes:
            if (index, mode) not in drawn:
                continue
            line = [r for r in rows if r["mode"] == mode]
            xs, ys = [r["prompt_len"] for r in line], [r[y] for r in line]
            errors = None
            if spread:
                errors = [
                    [v - r[spread[0]] for v, r in zip(ys, line, strict=True)],
                    [r[spread[1]] - v for v, r in zip(ys, line, strict=True)],
                ]
            label = drawn[index, mode]
            text = label if len(modes) == 1 else f"{label}, {mode.replace('_', ' ')}"
            ax.errorbar(
                xs,
                ys,
                yerr=errors,
                linestyle="-" if mode == "cache" else "--",
                capsize=3,
                label=_legend_text(text),
                **style,
            )
            unsure_points = [(x, v) for x, v, r in zip(xs, ys, line, strict=True) if hollow(r)]
            if unsure_points:
                over = {"linestyle": "none", **style, "zorder": 3}
                ax.plot(*zip(*unsure_points, strict=True), **over, **HOLLOW)
                marked = True
    handles, labels = ax.get_legend_handles_labels()
    if marked:  # last in the legend, after the lines
        text = textwrap.fill(unsure_label, LEGEND_TITLE_WIDTH)
        (key,) = ax.plot([], [], linestyle="none", marker="o", color="grey", **HOLLOW)
        handles, labels = [*handles, key], [*labels, text]
    _legend_beside(ax, handles, labels, title=legend_title)


def _unresolved(stem: str, doc: dict) -> Callable[[dict], bool]:
    """Whether a record's comparison `stem` is not resolved (render.comparisons)."""
    records = _records(doc, "decode")
    return lambda r: not judge(r, stem, records, doc.get("environment")).resolved


def decode_latency(doc: dict) -> Figure | None:
    needed = ("step_ms_median", "step_ms_p25", "step_ms_p75", "prompt_len", "mode")
    records = one_provider(ok_records(_records(doc, "decode"), *needed))
    if not records:
        return None
    fig, ax = _figure(
        "Decode step latency, with and without the KV cache",
        context(records, doc["environment"], ("provider", *DECODE_SHARED))
        + _uncached_cut(doc, records),
        CONTEXT_LABEL,
        "Time per decode step, median (ms)",
    )
    bars = ("step_ms_p25", "step_ms_p75")
    _decode_lines(ax, records, "step_ms_median", bars, legend_title=BARS_IQR, unsure=unsteady)
    scaled_axis(ax, "x", [r["prompt_len"] for r in records])
    scaled_axis(ax, "y", [r["step_ms_p25"] for r in records] + [r["step_ms_p75"] for r in records])
    return fig


def _uncached_cut(doc: dict, records: Sequence[dict]) -> str:
    """A subtitle's line saying why the dashed (no cache) lines stop short of the cached
    ones, when the study's no_cache_max_prompt_len cut them: '' otherwise."""
    longest = doc["sections"].get("decode", {}).get("config", {}).get("no_cache_max_prompt_len")
    cached = [r["prompt_len"] for r in records if r["mode"] == "cache"]
    uncached = [r["prompt_len"] for r in records if r["mode"] == "no_cache"]
    if longest is None or not cached or not uncached or max(cached) <= longest:
        return ""
    return f"\nno cache (dashed) only up to {longest:,} tokens: the study's no_cache_max_prompt_len"


def _ratio_records(doc: dict, stem: str) -> list[dict]:
    """The decode records (of one provider) with a comparison `stem` and its interval."""
    needed = (f"{stem}_median", f"{stem}_ci_lo", f"{stem}_ci_hi")
    return one_provider(ok_records(_records(doc, "decode"), *needed, "prompt_len", "mode"))


def _ratio_figure(
    doc: dict,
    records: Sequence[dict],
    stem: str,
    value: str,
    spread: tuple[str, str],
    titles: tuple[str, str, str],
) -> Figure:
    """A cached step's ratio (`value`, with its interval `spread`, from comparison `stem`)
    against context, a dotted line at 1x; `titles`: the figure's, the y axis's and the
    line's."""
    title, ylabel, one = titles
    fig, ax = _figure(
        title,
        context(records, doc["environment"], ("provider", *DECODE_SHARED)),
        CONTEXT_LABEL,
        ylabel,
    )
    ax.axhline(1.0, color="grey", linewidth=1, linestyle=":", label=one)
    _decode_lines(
        ax,
        records,
        value,
        spread=spread,
        modes=("cache",),
        legend_title=INTERVAL_BARS,
        unsure=_unresolved(stem, doc),
        unsure_label=UNRESOLVED_LABEL,
    )
    scaled_axis(ax, "x", [r["prompt_len"] for r in records])
    shown = _bar_span([1.0, *(r[value] for r in records)], records, spread)
    scaled_axis(ax, "y", shown)
    ax.set_ylim(shown[0] / BAR_MARGIN, shown[1] * BAR_MARGIN)
    return fig


#: How far beyond the medians' span an interval bar widens the y axis, as a factor: an
#: unresolved comparison's interval can span decades (it is marked unresolved), and would
#: flatten every line; its bar is cut at the axis instead.
BAR_REACH = 3.0
#: The room left above and below what is shown, as a factor.
BAR_MARGIN = 1.1


def _bar_span(
    medians: Sequence[float], records: Sequence[dict], spread: tuple[str, str]
) -> tuple[float, float]:
    """The y range a ratio plot shows: its medians, and their intervals up to BAR_REACH
    times beyond them."""
    low, high = min(medians), max(medians)
    lows = [r[spread[0]] for r in records if r[spread[0]] is not None and r[spread[0]] > 0]
    highs = [r[spread[1]] for r in records if r[spread[1]] is not None]
    return (
        max(min([low, *lows]), low / BAR_REACH),
        min(max([high, *highs]), high * BAR_REACH),
    )


def decode_speedup(doc: dict) -> Figure | None:
    rows = _ratio_records(doc, "x_of_no_cache")
    if not rows:
        return None
    records = [
        {
            **r,
            "speedup": 1 / r["x_of_no_cache_median"],
            "speedup_lo": 1 / r["x_of_no_cache_ci_hi"],
            "speedup_hi": 1 / r["x_of_no_cache_ci_lo"],
        }
        for r in rows
    ]
    titles = (
        "Cached decode speed-up over recomputing the prefix",
        "Speed-up (no-cache step time / cached step time, x)",
        "no speed-up (1x)",
    )
    return _ratio_figure(
        doc, records, "x_of_no_cache", "speedup", ("speedup_lo", "speedup_hi"), titles
    )


#: The legend's title where the bars are a comparison's interval.
INTERVAL_BARS = "bars: 95% interval, sampled in turn"


def decode_variants(doc: dict) -> Figure | None:
    """Each variant's cached step over the narrowest-KV variant's, against context, with
    the comparison's 95% interval."""
    stem = "x_of_narrowest"
    records = _ratio_records(doc, stem)
    if not records:
        return None
    narrowest = " or ".join(sorted({r["narrowest_variant"] for r in records}))
    titles = (
        f"Cached decode step over {narrowest}'s",
        f"Step time / {narrowest}'s step time, per round (x)",
        f"{narrowest} (1x)",
    )
    return _ratio_figure(
        doc, records, stem, f"{stem}_median", (f"{stem}_ci_lo", f"{stem}_ci_hi"), titles
    )


def decode_bandwidth(doc: dict) -> Figure | None:
    records = ok_records(
        _records(doc, "decode"), "pct_of_peak_bw", "peak_gbps", "prompt_len", "mode"
    )
    records = one_provider(records)
    if not records:
        return None
    peak = max(r["peak_gbps"] for r in records)
    subtitle = context(records, doc["environment"], ("provider", *DECODE_SHARED))
    subtitle += _uncached_cut(doc, records)
    over = any(r["pct_of_peak_bw"] > 100 for r in records)
    cached = "\nover 100%: a step whose bytes a cache holds reads them faster than memory" * over
    fig, ax = _figure(
        "Achieved memory bandwidth of a decode step",
        f"{subtitle}\nagainst the measured peak copy bandwidth, {peak:.1f} GB/s (1e9 bytes/s)"
        f"{cached}",
        CONTEXT_LABEL,
        "Achieved bandwidth (% of measured peak)",
    )
    ax.axhline(100.0, color="grey", linewidth=1, linestyle=":", label="measured peak (100%)")
    _decode_lines(ax, records, "pct_of_peak_bw", unsure=unsteady)
    scaled_axis(ax, "x", [r["prompt_len"] for r in records])
    scaled_axis(ax, "y", [100.0, *(r["pct_of_peak_bw"] for r in records)])
    return fig


#: Panels per row of the providers plot.
PANELS_PER_ROW = 3
#: Characters per line of its legend's title (the settings every line shares).
LEGEND_TITLE_WIDTH = 30


def decode_providers(doc: dict) -> Figure | None:
    """Cached step latency vs context, one line per provider (the baseline first, thick)
    and one panel per configuration (variant, and what else varies), sharing log axes;
    when the cached steps hold two providers or more."""
    needed = ("step_ms_median", "step_ms_p25", "step_ms_p75", "prompt_len", "provider")
    records = [r for r in ok_records(_records(doc, "decode"), *needed) if r.get("mode") == "cache"]
    providers = providers_of(records)
    if len(providers) < 2:
        return None
    panels = series(records, "prompt_len", exclude=("mode", "provider"))
    cols = min(len(panels), PANELS_PER_ROW)
    rows = math.ceil(len(panels) / cols)
    fig = Figure(figsize=(3.6 * cols + 2.2, 3.2 * rows + 1.0), layout="constrained")
    axes = fig.subplots(rows, cols, sharex=True, sharey=True, squeeze=False).ravel()
    fig.suptitle("Cached decode step latency by provider", fontsize=13, fontweight="bold")
    where = context(records, doc["environment"], DECODE_SHARED)
    fig.supxlabel(CONTEXT_LABEL)
    fig.supylabel("Time per decode step, median (ms)")
    values = [v for r in records for v in (r["step_ms_p25"], r["step_ms_p75"])]
    for ax, (label, rows_) in zip(axes, panels, strict=False):
        ax.set_title(label, fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
        for color, name in enumerate(providers):
            line = [r for r in rows_ if r["provider"] == name]
            if not line:
                continue
            xs, ys = [r["prompt_len"] for r in line], [r["step_ms_median"] for r in line]
            errors = [
                [y - r["step_ms_p25"] for y, r in zip(ys, line, strict=True)],
                [r["step_ms_p75"] - y for y, r in zip(ys, line, strict=True)],
            ]
            base = color == 0
            ax.errorbar(
                xs,
                ys,
                yerr=errors,
                **series_style(color),
                capsize=3,
                linewidth=2.5 if base else 1.5,
                zorder=3 if base else 2,
                label=legend_label(f"{name} (baseline)" if base else name),
            )
        scaled_axis(ax, "x", [r["prompt_len"] for r in records])
        scaled_axis(ax, "y", values)
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    handles, labels = axes[0].get_legend_handles_labels()
    for ax in axes[1 : len(panels)]:  # a provider missing from the first panel
        for handle, text in zip(*ax.get_legend_handles_labels(), strict=True):
            if text not in labels:
                handles.append(handle)
                labels.append(text)
    order = sorted(range(len(labels)), key=lambda i: providers.index(labels[i].split(" ")[0]))
    fig.legend(
        [handles[i] for i in order],
        [labels[i] for i in order],
        loc="outside right upper",
        fontsize=8,
        title=_balanced(where, LEGEND_TITLE_WIDTH) + "\nbars: p25 to p75",
        title_fontsize=8,
    )
    return fig


def _memory_lines(ax: Axes, lines: Sequence[tuple[str, list[dict]]], x: str) -> None:
    """KV-cache bytes over field `x`, a line per series in its series_style, in a binary
    unit that suits them, the y axis scaled to them, the legend beside the axes. Series
    whose points are identical are one line, named by each (merge_identical). A model
    whose layers are not all alike has its layer kinds in its label; a hybrid's line is
    its K/V and its state together, its state alone (fixed whatever the context) dashed
    beneath it."""
    records = [r for _, rows in lines for r in rows]
    hybrid = any(r.get("state_bytes") for r in records)

    def cache(r: dict) -> int:
        return r.get("total_bytes") or r["kv_bytes"] if hybrid else r["kv_bytes"]

    def kinds(rows: list[dict]) -> str | None:
        named = rows[0].get("layer_kinds")
        return named if named and ("," in named or rows[0].get("state_layers")) else None

    def points(rows: list[dict]) -> tuple:
        return kinds(rows), tuple((r[x], cache(r), r.get("state_bytes") or 0) for r in rows)

    divisor, unit = binary_unit(max(cache(r) for r in records))
    ax.set_ylabel(f"KV cache + state ({unit})" if hybrid else f"KV cache, K and V ({unit})")
    for index, (label, rows) in enumerate(merge_identical(lines, points)):
        xs = [r[x] for r in rows]
        if kinds(rows):
            label = f"{label}\n{kinds(rows)}"
        style = series_style(index)
        ys = [cache(r) / divisor for r in rows]
        ax.plot(xs, ys, **style, label=_legend_text(label))
        if any(r.get("state_bytes") for r in rows):
            states = [(r.get("state_bytes") or 0) / divisor for r in rows]
            ax.plot(xs, states, linestyle="--", color=style["color"], label="its state alone")
    scaled_axis(ax, "y", [cache(r) / divisor for r in records])
    _legend_beside(ax)


#: The settings of a cache's format that a KV-memory plot names: its bytes are the KV
#: dtype's (and its scales'), not the model dtype's.
KV_FORMAT = ("kv_dtype", "scale_dtype")


def kv_context(records: Sequence[dict], environment: dict, fields: Sequence[str]) -> str:
    """The subtitle of a KV-memory plot, two lines: the settings every line shares, then
    where the bytes come from. They are the formula's, the same on any machine, so a
    machine is named only where the run allocated the caches to check them ('checked by
    allocation on Intel Xeon (cpu)'); 'computed by the formula' otherwise."""
    settings = context(records, environment, fields, machine=None)
    checked = sum(r.get("measured_bytes") is not None for r in records)
    if not checked:
        return f"{settings}\ncomputed by the formula (no cache allocated)"
    words = (
        "checked by allocation on"
        if checked == len(records)
        else (f"{checked} of {len(records)} points checked by allocation on")
    )
    return f"{settings}\n{context(records, environment, (), words)}"


def kv_memory_vs_heads(doc: dict) -> Figure | None:
    """Lines over the number of KV heads, for shapes measured at two or more of them: one
    line per shape, at the longest context the study has of it (the bytes are in
    proportion to the context, which kv_memory_context.png shows), so that the legend
    names shapes, not every context."""
    records = ok_records(_records(doc, "kvmem"), "kv_bytes", "num_kv_heads")
    shapes = [
        rows
        for _, rows in series(records, "num_kv_heads", exclude=("model", "seq_len"), named=False)
        if len({r["num_kv_heads"] for r in rows}) > 1
    ]
    if not shapes:
        return None
    longest = [
        r for rows in shapes for r in rows if r["seq_len"] == max(x["seq_len"] for x in rows)
    ]
    lines = series(longest, "num_kv_heads", exclude=("model",), named=False)
    contexts = {r["seq_len"] for r in longest}
    fields = ("num_layers", "num_heads", "head_dim", *KV_FORMAT, "batch", "seq_len")
    subtitle = kv_context(longest, doc["environment"], fields)
    if len({r["seq_len"] for rows in shapes for r in rows}) > len(contexts):
        which = "the longest" if len(contexts) == 1 else "each shape's longest"
        settings, _, where = subtitle.partition("\n")
        subtitle = f"{settings} ({which}; the bytes grow in proportion to it)\n{where}"
    fig, ax = _figure(
        "KV-cache memory vs number of KV heads",
        subtitle,
        "KV heads (MHA has as many as query heads; MQA has 1)",
        "",
    )
    _memory_lines(ax, lines, "num_kv_heads")
    heads = sorted({r["num_kv_heads"] for r in longest})
    scaled_axis(ax, "x", heads)
    ax.set_xticklabels(_heads_ticks(heads, longest))
    return fig


def _heads_ticks(heads: Sequence[int], records: Sequence[dict]) -> list[str]:
    """Ticks at `heads` KV heads, each over the variant it is (8 over GQA-8); counts alone
    where the lines call a count differently (8 KV heads is MHA with 8 query heads and
    GQA-8 with 32), which the x axis's label explains."""
    names = [
        {r["variant"] for r in records if r["num_kv_heads"] == h and r.get("variant")}
        for h in heads
    ]
    if any(len(n) > 1 for n in names):
        return [str(h) for h in heads]
    return ["\n".join([str(h), *n]) for h, n in zip(heads, names, strict=True)]


def kv_memory_vs_context(doc: dict) -> Figure | None:
    """Lines over context length: the model presets when the study has any, else shapes."""
    records = ok_records(_records(doc, "kvmem"), "kv_bytes", "seq_len")
    presets = [r for r in records if r.get("model")]
    records = presets or records
    lines = [
        (label, rows)
        for label, rows in series(records, "seq_len")
        if len({r["seq_len"] for r in rows}) > 1
    ]
    if not lines:
        return None
    records = [r for _, rows in lines for r in rows]
    fig, ax = _figure(
        "KV-cache memory vs context length" + (" for the model presets" if presets else ""),
        kv_context(records, doc["environment"], ("num_layers", *KV_FORMAT, "batch")),
        "Context length (tokens cached)",
        "",
    )
    _memory_lines(ax, lines, "seq_len")
    scaled_axis(ax, "x", [r["seq_len"] for r in records])
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    return fig


def _records(doc: dict, section: str) -> list[dict]:
    return doc["sections"].get(section, {}).get("records", [])


#: File name -> (caption, figure maker), in the order the report shows them.
PLOTS: dict[str, tuple[str, Callable[[dict], Figure | None]]] = {
    "decode_latency.png": ("Decode step latency vs context", decode_latency),
    "decode_providers.png": ("Cached decode step latency by provider", decode_providers),
    "decode_speedup.png": ("Cached-decode speed-up vs context", decode_speedup),
    "decode_variants.png": ("Cached decode step over the narrowest-KV variant's", decode_variants),
    "kv_memory_heads.png": ("KV-cache memory vs number of KV heads", kv_memory_vs_heads),
    "kv_memory_context.png": ("KV-cache memory vs context length", kv_memory_vs_context),
    "decode_bandwidth.png": ("Achieved bandwidth vs measured peak", decode_bandwidth),
}


def render_plots(doc: dict, out_dir: str | Path) -> list[Path]:
    """Write every plot the records allow into `out_dir`; return the files written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, (_, make) in PLOTS.items():
        with literal_text():
            fig = make(doc)
            if fig is None:
                continue
            write_figure(fig, out / name)
        written.append(out / name)
    return written


def write_figure(fig: Figure, out: Path) -> None:
    """Save `fig` to `out` at 120 dpi, in the format its extension names, atomically: a
    failure midway (a full disk, a drawing error, Ctrl-C) leaves the file there whole.
    An OSError names `out`."""
    fmt = out.suffix.lower().lstrip(".")
    try:
        target = writable_target(out)
        replace_with(target, lambda fh: fig.savefig(fh, dpi=120, format=fmt), binary=True)
    except OSError as exc:
        raise named(exc, out) from None
