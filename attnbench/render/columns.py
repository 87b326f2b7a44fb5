"""Cell formatters and every command's table columns, shared by the terminal and the report.

Each list of `Column`s says which record fields a table shows, how a cell reads (in full,
and compact where a shorter form exists), which fields are settings of the sweep (they go
to the title when every row shares them) and what to hide first in a narrow terminal
(highest rank first). Every formatter shows None as "-".

A study section declares its table's columns with its kind, as plain data (its
experiment's COLUMNS, of records.ColumnSpec: header, field, unit), which
`declared_columns` makes Columns of, with one formatter per unit; a section whose columns
depend on its rows (kvmem, decode) has them made here (ROW_COLUMNS).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..measure.stats import MIN_SPREAD_SAMPLES
from ..model.capacity import DEFAULT_SCALE_DTYPE, KvFormat
from ..model.units import format_bytes
from ..model.what_if import OWN_MARK, is_own
from ..records import ColumnSpec, Status
from .table import UNRESOLVED, Column, as_row

NONE_TEXT = "-"
SI_UNITS = ("k", "M", "G", "T", "P")
#: Counts below this are shown in full by fmt_si (the same digits in either form).
SI_FROM = 1_000


# --- formatters ----------------------------------------------------------------------------


def known(value: Any) -> bool:
    """A value to show: not None, and finite when it is a float (a NaN or an infinity is
    no value to draw or to write down)."""
    return value is not None and not (isinstance(value, float) and not math.isfinite(value))


def fmt_plain(v: Any) -> str:
    return NONE_TEXT if v is None else str(v)


def _formatter(spec: str, suffix: str = "") -> Callable[[Any], str]:
    """A cell formatter: `format(v, spec)` plus `suffix`, and NONE_TEXT for None."""

    def fmt(v: Any) -> str:
        return NONE_TEXT if v is None else format(v, spec) + suffix

    return fmt


#: Thousands separators: 4096 -> '4,096'.
fmt_int = _formatter(",")
#: A fraction as a percentage: 0.25 -> '25.00%'.
fmt_pct = _formatter(".2%")
#: A value already in percent: 12.5 -> '12.50%'.
fmt_pct_value = _formatter(".2f", "%")
#: Milliseconds, three decimals: 1.23456 -> '1.235'.
fmt_ms = _formatter(".3f")
#: One decimal: 1234.56 -> '1234.6'.
fmt_f1 = _formatter(".1f")


def fmt_x(v: Any) -> str:
    """A speed-up: one decimal (11.2 -> '11.2x'), two significant digits below 0.1
    (0.0213 -> '0.021x'), never '0.0x'."""
    if v is None:
        return NONE_TEXT
    return f"{v:.2g}x" if abs(v) < 0.1 else f"{v:.1f}x"


def fmt_yes_no(v: Any) -> str:
    """A flag: True -> 'yes', False -> 'no'."""
    return NONE_TEXT if v is None else ("yes" if v else "no")


def fmt_si(v: Any) -> str:
    """A count, compact: three significant digits and an SI suffix from 1,000 up
    (67108864 -> '67.1 M', 6738415616 -> '6.74 G', 4096 -> '4.10 k'); smaller counts as
    they are (512), so a column reads in one form."""
    if v is None:
        return NONE_TEXT
    if abs(v) < SI_FROM:
        return f"{v:,}"
    for power, unit in enumerate(SI_UNITS, 1):
        text = f"{v / 1000**power:#.3g}".rstrip(".")
        if "e" not in text and (abs(float(text)) < 1000 or unit == SI_UNITS[-1]):
            return f"{text} {unit}"
    return f"{v:.3g}"  # beyond the largest unit


def fmt_status(v: Any) -> str:
    """A status, compact: what precedes its first colon ('error: ValueError: ...' ->
    'error')."""
    return NONE_TEXT if v is None else Status.of(v).word


#: The spread cell of a timing with too few samples to judge their spread.
TOO_FEW = "too few"


def iqr_cell(
    median: str = "step_ms_median",
    p25: str = "step_ms_p25",
    p75: str = "step_ms_p75",
    count: str = "step_repeats",
) -> Callable[[Mapping[str, Any]], str]:
    """A cell maker for the spread of a timing: half the interquartile range relative to
    the median, in percent, one decimal: '±' + 100 * (p75 - p25) / 2 / median, so a median
    of 2.0 ms with p25 1.9 and p75 2.1 reads '±5.0%'. '-' when a value is missing or the
    median is not positive; TOO_FEW when `count` (its samples) is under
    MIN_SPREAD_SAMPLES, too few to judge the spread (a few samples that met the same
    stall would read ±0.0%)."""

    def cell(row: Mapping[str, Any]) -> str:
        mid, low, high = row.get(median), row.get(p25), row.get(p75)
        if mid is None or low is None or high is None or mid <= 0:
            return NONE_TEXT
        samples = row.get(count)
        if isinstance(samples, int) and samples < MIN_SPREAD_SAMPLES:
            return TOO_FEW
        return spread_text((high - low) / 2 / mid)

    return cell


#: The largest relative spread written as a number: a wider one (an interval of a
#: comparison that did not settle, quartiles of a stalled step) reads as over it.
MAX_SHOWN_SPREAD = 10.0


def spread_text(share: float, digits: int = 1) -> str:
    """A spread around a median, relative to it: '±4.2%', or 'over ±1,000%' beyond
    MAX_SHOWN_SPREAD, where the digits would say nothing more."""
    if share > MAX_SHOWN_SPREAD:
        return f"over ±{MAX_SHOWN_SPREAD:,.0%}"
    return f"±{share:.{digits}%}"


# --- column helpers ------------------------------------------------------------------------


def _label(header: str, field: str, rank: int, **kw: Any) -> Column:
    return Column(header, field, fmt_plain, rank=rank, kind="label", **kw)


#: The group of a table's counts: all in full, or all compact ('16.8 M' beside '4.19 M',
#: never beside '4,194,304').
COUNTS = "counts"


def _count(header: str, field: str, rank: int, **kw: Any) -> Column:
    return Column(header, field, fmt_int, rank=rank, compact=fmt_si, group=COUNTS, **kw)


def _bytes(header: str, field: str, rank: int, **kw: Any) -> Column:
    return Column(header, field, format_bytes, rank=rank, **kw)


def _setting_int(
    header: str,
    field: str,
    rank: int,
    title: Callable[[Any], str],
    column: type[Column] = Column,
) -> Column:
    return column(header, field, fmt_int, rank=rank, setting=True, title_text=title)


def _status(rank: int) -> Column:
    return Column("Status", "status", fmt_plain, rank=rank, kind="status", compact=fmt_status)


def variant_cell(row: Mapping[str, Any]) -> str:
    """The variant's name, marked on the model's own row of a what-if set: 'GQA-8 (own)'."""
    variant = fmt_plain(row.get("variant"))
    return (
        variant + OWN_MARK
        if is_own(row.get("num_kv_heads"), row.get("published_kv_heads"))
        else variant
    )


def _variant(rank: int) -> Column:
    return Column("Variant", "variant", fmt_plain, rank=rank, kind="label", cell=variant_cell)


def _model(rank: int = 0) -> Column:
    return _label("Model", "model", rank, setting=True, title_text=str)


# Settings as the title names them.
def _d_model(rank: int) -> Column:
    return _setting_int("d_model", "d_model", rank, lambda v: f"d_model {v:,}")


def _heads(rank: int) -> Column:
    return _setting_int("heads", "num_heads", rank, lambda v: f"{v:,} heads")


def _kv_heads(rank: int, column: type[Column] = Column) -> Column:
    return _setting_int("kv heads", "num_kv_heads", rank, lambda v: f"{v:,} kv heads", column)


def _head_dim(rank: int, column: type[Column] = Column) -> Column:
    return _setting_int("head_dim", "head_dim", rank, lambda v: f"head_dim {v:,}", column)


def _dtype(rank: int) -> Column:
    return _label("dtype", "dtype", rank, setting=True, title_text=str)


def _batch(rank: int) -> Column:
    return _setting_int("batch", "batch", rank, lambda v: f"batch {v:,}")


# --- kvmem: KV-cache memory -----------------------------------------------------------------

#: How kvmem's status reads where the allocation that checks the formula was skipped (too
#: little free memory): the bytes computed stand, so the row says what did not run rather
#: than 'skipped', which reads as a failure of the whole row.
NOT_ALLOCATED = "not allocated"


def kvmem_status(status: Any) -> Any:
    """'skipped: needs 40.00 GiB, 22.62 GiB free' -> 'not allocated: more than the 22.62
    GiB free (the bytes are computed; only their check by allocation was skipped)': what
    it needed is the row's bytes, so that the rows skipped at one free size share one
    note; any other status as it is."""
    found = Status.of(status)
    if status is None or found.word != "skipped":
        return status
    reason = found.reason
    if over := re.fullmatch(r"needs .+, (.+) free", reason):
        reason = f"more than the {over[1]} free"
    return (
        f"{NOT_ALLOCATED}: {reason} (the bytes are computed; only their check by "
        "allocation was skipped)"
    )


@dataclass(frozen=True)
class RewordedColumn(Column):
    """A column whose value is the record's field as `reword` says it (kvmem's status)."""

    reword: Callable[[Any], Any] = lambda v: v

    def value(self, row: Mapping[str, Any]) -> Any:
        return self.reword(row.get(self.field))


@dataclass(frozen=True)
class CachedShapeColumn(Column):
    """A setting of the K and V a row caches (kv heads, head_dim), which an MLA row does
    not cache (one latent a token): none there, so that neither its cell nor the title
    gives DeepSeek-V3 '128 kv heads · head_dim 128'."""

    def value(self, row: Mapping[str, Any]) -> Any:
        return None if row.get("variant") == "MLA" else super().value(row)


KVMEM: list[Column] = [
    _model(0),
    _variant(0),
    _setting_int("layers", "num_layers", 12, lambda v: f"{v:,} layer{'' if v == 1 else 's'}"),
    _heads(13),
    _kv_heads(11, CachedShapeColumn),
    _head_dim(14, CachedShapeColumn),
    _batch(5),
    _setting_int("context", "seq_len", 3, lambda v: f"context {v:,}"),
    _dtype(16),
    _bytes(
        "per token",
        "bytes_per_token",
        10,
        setting=True,  # the same at every context and batch: said once, in the title
        title_text=lambda v: f"{format_bytes(v)} per token",
    ),
    _bytes("per layer", "kv_bytes_per_layer", 30),
    _bytes("whole model", "kv_bytes", 1),
    _bytes("measured", "measured_bytes", 20),
    Column("vs MHA", "ratio_vs_mha", fmt_pct, rank=2),
    RewordedColumn(
        "Status",
        "status",
        fmt_plain,
        rank=4,
        kind="status",
        compact=fmt_status,
        reword=kvmem_status,
    ),
]


def fmt_some_bytes(v: Any) -> str:
    """Bytes, or '-' for none (a layer kind that caches no K/V, or keeps no state)."""
    return NONE_TEXT if not v else format_bytes(v)


#: The layer kinds of a model whose layers are not all alike (kvmem.LayerKindRecord).
LAYER_KINDS: list[Column] = [
    _model(0),
    _setting_int("sliding window", "sliding_window", 2, lambda v: f"sliding window {v:,}"),
    _label("layer pattern", "layer_pattern", 2, setting=True, title_text="layer pattern {}".format),
    _label("Kind", "kind", 0),
    _dtype(6),
    Column("layers", "layers", fmt_int, rank=0),
    Column("window", "window", fmt_int, rank=4),
    Column("KV per token", "kv_bytes_per_token", fmt_some_bytes, rank=1),
    Column("state per sequence", "state_bytes", fmt_some_bytes, rank=1),
    _label("state shapes (one layer)", "state_shapes", 5),
]


def layer_kind_columns(rows: Sequence[Mapping[str, Any]]) -> list[Column]:
    """LAYER_KINDS, without the state's columns when no layer keeps a state, with the
    cache's dtype after the model's where a row's differs."""
    records = [as_row(r) for r in rows]
    columns = list(LAYER_KINDS)
    if not any(r.get("state_bytes") for r in records):
        columns = [c for c in columns if c.field not in ("state_bytes", "state_shapes")]
    if any(r.get("kv_dtype") not in (None, r.get("dtype")) for r in records):
        at = next(i for i, c in enumerate(columns) if c.field == "dtype") + 1
        columns[at:at] = [
            _label("kv dtype", "kv_dtype", 5, setting=True, title_text="kv cache {}".format),
            _label("scales", "kv_scale_group", 5, setting=True, title_text="scales {}".format),
            _label("scale dtype", "scale_dtype", 5, setting=True, title_text="{} scales".format),
        ]
    return columns


def _uses_kv_dtype(r: Mapping[str, Any]) -> bool:
    kv_dtype = r.get("kv_dtype")
    return (kv_dtype is not None and kv_dtype != r.get("dtype")) or (r.get("scale_bytes") or 0) > 0


def kv_format_text(row: Mapping[str, Any]) -> str:
    """A kvmem row's cache in words (KvFormat.describe): 'int8 in groups of 32, float32
    scales', so that the rows of a sweep over groups or scale dtypes are told apart."""
    if row.get("kv_dtype") is None:
        return NONE_TEXT
    scale_dtype = row.get("scale_dtype") or DEFAULT_SCALE_DTYPE  # None: not quantised
    return KvFormat(row["kv_dtype"], row.get("kv_scale_group"), scale_dtype).describe()


@dataclass(frozen=True)
class KvFormatColumn(Column):
    """The cache's format (kv_format_text), in its cells and, the same in every row, in
    the title."""

    def text(self, row: Mapping[str, Any]) -> str:
        return kv_format_text(row)

    def title_part(self, row: Mapping[str, Any]) -> str:
        return f"kv cache {kv_format_text(row)}"


#: Option columns of kvmem, each group shown when some row uses the option it describes.
KVMEM_OPTIONS: list[tuple[Callable[[Mapping[str, Any]], bool], list[Column]]] = [
    (
        _uses_kv_dtype,
        [
            KvFormatColumn("kv dtype", "kv_dtype", fmt_plain, rank=5, kind="label", setting=True),
            _bytes("scales", "scale_bytes", 27),
        ],
    ),
    (
        lambda r: (r.get("state_layers") or 0) > 0,
        [_bytes("state", "state_bytes", 2), _bytes("KV + state", "total_bytes", 1)],
    ),
    (
        lambda r: (r.get("windowed_layers") or 0) > 0,
        [
            Column("window", "sliding_window", fmt_int, rank=22),
            Column("windowed", "windowed_layers", fmt_int, rank=24),
        ],
    ),
    (
        lambda r: (r.get("tp") or 1) > 1,
        [
            _setting_int("tp", "tp", 16, lambda v: f"tp {v:,}"),
            _bytes("per GPU", "kv_bytes_per_gpu", 9),
            _bytes("all GPUs", "kv_bytes_all_gpus", 31),
        ],
    ),
    (
        lambda r: r.get("used_bytes") is not None,
        [
            _setting_int("page", "page_size", 26, lambda v: f"page {v:,} tokens"),
            _bytes("used", "used_bytes", 25),
            _bytes("paged", "paged_bytes", 18),
            Column("paged waste", "paged_waste_pct", fmt_pct_value, rank=19),
            _bytes("contiguous", "contiguous_bytes", 32),
            Column("contig. waste", "contiguous_waste_pct", fmt_pct_value, rank=33),
            _bytes("measured paged", "measured_paged_bytes", 35),
        ],
    ),
]


def kvmem_columns(rows: Sequence[Mapping[str, Any]]) -> list[Column]:
    """KVMEM, with each option group some row uses (quantised cache, sliding windows,
    tensor parallel, paging, in that order) before Status."""
    records = [as_row(r) for r in rows]
    extra = [c for used, cols in KVMEM_OPTIONS if any(used(r) for r in records) for c in cols]
    return [*KVMEM[:-1], *extra, KVMEM[-1]]


# --- decode-speed ---------------------------------------------------------------------------


def fmt_graph(v: Any) -> str:
    """How a step is launched: True -> 'graph' (a CUDA graph replay), False -> 'eager'."""
    return NONE_TEXT if v is None else ("graph" if v else "eager")


def fmt_block(v: Any) -> str:
    """A KV cache's block size: None -> 'contiguous' (not paged), else its tokens."""
    return "contiguous" if v is None else f"{v:,}"


def fmt_tflops(v: Any) -> str:
    """TFLOPS: three decimals below 10 (0.080), one from there (312.4)."""
    return NONE_TEXT if v is None else format(v, ".3f" if abs(v) < 10 else ".1f")


def join_words(items: Sequence[str], apart: bool = False) -> str:
    """'a', 'a and b', 'a, b and c'; `apart`, 'a (x, y); b (z) and c' where an item holds
    a comma of its own, so that long items stay told apart."""
    if len(items) == 1:
        return items[0]
    comma = "; " if apart and any("," in item for item in items) else ", "
    return comma.join(items[:-1]) + " and " + items[-1]


def ratio_cell(field: str, interval: str) -> Callable[[Mapping[str, Any]], str]:
    """A cell maker for a ratio of two steps sampled in turn: fmt_x2 of `field`, marked
    UNRESOLVED where its 95% interval (`interval`_ci_lo to _ci_hi, in either orientation)
    spans 1: the two are as fast within it."""

    def cell(row: Mapping[str, Any]) -> str:
        text = fmt_x2(row.get(field))
        low, high = row.get(f"{interval}_ci_lo"), row.get(f"{interval}_ci_hi")
        spans = known(low) and known(high) and low <= 1 <= high
        return text + UNRESOLVED if spans and row.get(field) is not None else text

    return cell


#: What a ratio's UNRESOLVED mark means, under the table.
RATIO_LEGEND = (
    f"{UNRESOLVED}: not resolved: the ratio's 95% interval spans 1x, the two as fast within "
    "it (its bounds are in the CSV and the JSON)"
)


def fmt_x2(v: Any) -> str:
    """A speed-up between providers, which may differ by a few percent or by a thousand
    times: two decimals (1.1234 -> '1.12x'), two significant digits below 0.1
    (0.0042 -> '0.0042x')."""
    if v is None:
        return NONE_TEXT
    return f"{v:.2g}x" if abs(v) < 0.1 else f"{v:.2f}x"


#: A rate without decimals: 4568.8 -> '4569'.
fmt_f0 = _formatter(".0f")

#: The header of the speed-up over the baseline provider when the rows name no single one.
VS_BASELINE = "vs base"
#: The header of the cached step over the narrowest-KV variant's, when the rows name no
#: single one.
X_OF_NARROWEST = "x narrowest"
#: The header of the step's in-run ratio when the rows name no single reference.
X_OF_REFERENCE = "x of ref"
#: The Status column's rank when some row is not ok: just after the step time, since a row
#: without a time is read by its status.
STATUS_RANK_NOT_OK = 4


def decode_status_cell(row: Mapping[str, Any]) -> str:
    """A decode row's status, its first word: 'noisy' for a row that ran but whose
    spread flags it noisy, though its status says 'ok'."""
    status = fmt_status(row.get("status"))
    return "noisy" if status == "ok" and row.get("noisy") else status


DECODE: list[Column] = [
    _model(0),
    _variant(0),
    _label("provider", "provider", 1, setting=True, title_text=lambda v: f"provider {v}"),
    _label("Mode", "mode", 2),
    _setting_int("context", "prompt_len", 3, lambda v: f"context {v:,}"),
    _label("sequences", "batch_spec", 3, setting=True, title_text=lambda v: f"sequences {v}"),
    Column(
        "block",
        "block_size",
        fmt_block,
        rank=3,
        kind="label",
        setting=True,
        title_text=lambda v: f"block {fmt_block(v)}",
    ),
    Column("step ms", "step_ms_median", fmt_ms, rank=4),
    Column("±IQR", "step_ms_median", fmt_plain, rank=5, cell=iqr_cell()),
    _setting_int("tp", "tp", 5, lambda v: f"tp {v}"),
    Column("all-reduce ms", "allreduce_ms_median", fmt_ms, rank=5),
    _bytes("KV/GPU", "kv_bytes_per_gpu", 6),
    Column("tok/s", "tokens_per_s", fmt_f1, rank=6, compact=fmt_f0),
    Column(
        X_OF_NARROWEST,
        "x_of_narrowest_median",
        fmt_x2,
        rank=11,
        cell=ratio_cell("x_of_narrowest_median", "x_of_narrowest"),
        legend=RATIO_LEGEND,
    ),
    Column("speed-up", "speedup_vs_no_cache", fmt_x, rank=7),
    Column(
        "x contiguous",
        "x_of_contiguous_median",
        fmt_x2,
        rank=7,
        cell=ratio_cell("x_of_contiguous_median", "x_of_contiguous"),
        legend=RATIO_LEGEND,
    ),
    Column("waste %", "kv_waste_pct", fmt_f1, rank=20),
    _bytes("prefill peak", "prefill_peak_bytes", 21),
    _bytes("scores", "score_matrix_bytes", 21),
    Column(
        VS_BASELINE,
        "speedup_vs_baseline",
        fmt_x2,
        rank=8,
        cell=ratio_cell("speedup_vs_baseline", "x_of_baseline"),
        legend=RATIO_LEGEND,
    ),
    Column("% peak", "pct_of_peak_bw", fmt_f1, rank=9),
    Column(X_OF_REFERENCE, "x_of_reference_median", fmt_x2, rank=11),
    # the first word only: the reasons are long, and go under the table, by provider
    Column(
        "Status",
        "status",
        fmt_status,
        rank=10,
        kind="status",
        cell=decode_status_cell,
        reason_by="provider",
    ),
    _dtype(11),
    _batch(12),
    _label("device", "device", 13, setting=True, title_text=str),
    _d_model(14),
    _heads(15),
    _kv_heads(16),
    _head_dim(17),
    _setting_int("gen", "gen_len", 18, lambda v: f"gen {v:,}"),
    Column(
        "graph",
        "cuda_graph",
        fmt_graph,
        rank=19,
        kind="label",
        setting=True,
        title_text=lambda v: "CUDA graphs" if v else "eager",
    ),
    _label(
        "projection", "projection_path", 20, setting=True, title_text=lambda v: f"{v} projections"
    ),
    Column("prefill ms", "prefill_ms_median", fmt_ms, rank=21),
    Column("prefill TFLOPS", "achieved_tflops", fmt_tflops, rank=22),
    Column("% peak flops", "pct_of_peak_flops", fmt_f1, rank=23),
    Column("p25", "step_ms_p25", fmt_ms, rank=24),
    Column("p75", "step_ms_p75", fmt_ms, rank=25),
    Column("samples", "step_repeats", fmt_int, rank=26),
    _label("stop", "step_stop", 27),
    Column("gen tok/s", "gen_tokens_per_s", fmt_f1, rank=28, compact=fmt_f0),
    Column("GB/s", "achieved_gbps", fmt_f1, rank=29),
    Column("noisy", "noisy", fmt_yes_no, rank=30, kind="label"),
    Column("instr/step", "instructions_per_step", fmt_int, rank=8),
]


def decode_columns(rows: Sequence[Mapping[str, Any]]) -> list[Column]:
    """DECODE for these rows: the speed-up over the baseline provider only when the rows
    hold more than one provider, headed by the baseline's name ("vs attnbench") when they
    share one; gen and graph only when some row generates tokens or replays a CUDA graph
    (not "gen 0 · eager" in every title); the step's in-run ratio when some row has one,
    headed by its reference ("x kernels"), and its ratio to the narrowest-KV variant's,
    headed by that variant ("x MQA"); the instruction count when counted; tp, the
    all-reduce and the KV bytes per GPU only for tensor-parallel rows; and the Status
    just after the step time when some row is not ok (noisy included)."""
    records = [as_row(r) for r in rows]
    providers = {r.get("provider") for r in records}
    baselines = {
        r.get("baseline_provider") for r in records if r.get("speedup_vs_baseline") is not None
    }
    references = {r.get("reference") for r in records if r.get("x_of_reference_median")}
    narrowest = {r.get("narrowest_variant") for r in records if r.get("x_of_narrowest_median")}
    shown_when_set = (
        "cuda_graph",
        "gen_len",
        "instructions_per_step",
        "batch_spec",
        "block_size",
        "x_of_contiguous_median",
        "kv_waste_pct",
        "prefill_peak_bytes",
        "score_matrix_bytes",
    )
    used = {f: any(r.get(f) for r in records) for f in shown_when_set}
    split = any((r.get("tp") or 1) > 1 or r.get("allreduce_ms_median") for r in records)
    used.update(dict.fromkeys(("tp", "allreduce_ms_median", "kv_bytes_per_gpu"), split))
    not_ok = any(r.get("status", "ok") != "ok" or r.get("noisy") for r in records)
    columns = []
    for c in DECODE:
        if c.field == "speedup_vs_baseline":
            if len(providers) < 2:
                continue
            if len(baselines) == 1:
                c = replace(c, header=f"vs {next(iter(baselines))}")
        elif c.field == "x_of_reference_median":
            if not references:
                continue
            if len(references) == 1:
                c = replace(c, header=f"x {next(iter(references))}")
        elif c.field == "x_of_narrowest_median":
            if not narrowest:
                continue
            if len(narrowest) == 1:
                c = replace(c, header=f"x {next(iter(narrowest))}")
        elif c.field in used and not used[c.field]:
            continue
        elif c.field == "status" and not_ok:
            c = replace(c, rank=STATUS_RANK_NOT_OK)
        columns.append(c)
    return columns


# --- whole model (the params of a model) and the model presets --------------------------

WHOLE_MODEL: list[Column] = [
    _model(0),
    _label("Part", "part", 0),
    _count("params", "params", 1),
    _count("counted", "meta_params", 2),  # on a skeleton of the model, as torch builds it
    _bytes("weights", "weight_bytes", 3),
]
#: The same for a model counted by transformers: its count is the only one.
WHOLE_MODEL_COUNTED: list[Column] = [c for c in WHOLE_MODEL if c.field != "meta_params"]

MODELS: list[Column] = [
    _label("Name", "name", 0),
    Column("layers", "num_layers", fmt_int, rank=3),
    Column("d_model", "d_model", fmt_int, rank=6),
    Column("heads", "num_heads", fmt_int, rank=4),
    Column("kv heads", "num_kv_heads", fmt_int, rank=2),
    # the KV cache's width: not always d_model over the heads (Gemma-2's 256 for 224)
    Column("head_dim", "head_dim", fmt_int, rank=5),
    _variant(1),
    _label("dtype", "dtype", 7),
    Column("Source", "source", fmt_plain, rank=90, kind="text"),
]


def fmt_4sig(v: Any) -> str:
    """Four significant digits, never an exponent: 0.05384, 6.322, 222.6, 87,620 (times,
    and intensities)."""
    if v is None:
        return NONE_TEXT
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"


def fmt_rate(v: Any) -> str:
    """Tokens/s: whole numbers, two digits below 10 (0.043, 2.5, 158)."""
    if v is None:
        return NONE_TEXT
    return f"{v:,.0f}" if abs(v) >= 10 else f"{v:.2g}"


# --- the columns a section declares (records.ColumnSpec) ----------------------------------

#: The table column of each unit (records.UNITS), but for what a declaration gives it
#: (declared_columns): its header, field, rank and title; an aligned one's cells read in
#: the decimals its rows need.
UNIT_COLUMNS: dict[str, Column] = {
    "label": Column("", "", fmt_plain, kind="label"),
    "variant": Column("", "", fmt_plain, kind="label", cell=variant_cell),
    "flag": Column("", "", fmt_yes_no, kind="label"),
    "int": Column("", "", fmt_int),
    "count": Column("", "", fmt_int, compact=fmt_si, group=COUNTS),
    "bytes": Column("", "", format_bytes),
    "pct": Column("", "", fmt_pct),
    "rate": Column("", "", fmt_rate),
    "aligned": Column("", "", fmt_4sig),
}


def title_text(declared: ColumnSpec) -> Callable[[Any], str] | None:
    """How the title names a declared setting that every row shares (ColumnSpec.title)."""
    title = declared.title
    if title is None:
        return None
    if declared.unit == "flag":
        return lambda v: title if v else f"no {title}"
    return title.format


def declared_columns(
    declared: Sequence[ColumnSpec], rows: Sequence[Mapping[str, Any]]
) -> list[Column]:
    """The table columns of a section's declared ones, each read by its unit's formatter,
    the aligned ones in one format for `rows` (aligned_columns)."""
    columns = [
        replace(
            UNIT_COLUMNS[d.unit],
            header=d.header,
            field=d.field,
            rank=d.rank,
            setting=d.setting,
            title_text=title_text(d),
        )
        for d in declared
    ]
    aligned = {d.field for d in declared if d.unit == "aligned"}
    return aligned_columns(columns, [as_row(r) for r in rows], aligned)


#: The record sets written beside a section's records whose columns are the same for any
#: rows: params' whole-model parts.
BESIDE_COLUMNS: dict[str, list[Column]] = {"model_parts": WHOLE_MODEL}


#: The sections whose columns depend on their rows (the providers, kinds and measures
#: they hold).
ROW_COLUMNS: dict[str, Callable[[Sequence[Mapping[str, Any]]], list[Column]]] = {
    "kvmem": kvmem_columns,
    "decode": decode_columns,
    "layer_kinds": layer_kind_columns,
}


#: The columns whose numbers read in one format down the column (aligned_columns).
ALIGNED = (
    "time_ms",
    "intensity",
    "measured_ms",
    "predicted_ms",
)
#: Significant digits the smallest number of an aligned column keeps, and the most
#: decimals any column has.
ALIGNED_DIGITS, MOST_DECIMALS = 3, 3


def decimals_for(values: Sequence[Any]) -> int:
    """The decimals that give the smallest of `values` ALIGNED_DIGITS significant digits,
    at most MOST_DECIMALS and none for whole numbers of 100 and up (0.2305 -> 3,
    7.768 -> 2, 2857 -> 0)."""
    known = [abs(v) for v in values if isinstance(v, (int, float)) and v and math.isfinite(v)]
    if not known:
        return 0
    return max(0, min(MOST_DECIMALS, ALIGNED_DIGITS - 1 - math.floor(math.log10(min(known)))))


def _fixed(decimals: int):
    return lambda v: NONE_TEXT if v is None else f"{v:,.{decimals}f}"


def aligned_columns(
    columns: Sequence[Column], rows: Sequence[Mapping[str, Any]], fields: Collection[str] = ALIGNED
) -> list[Column]:
    """`columns` with each of `fields` in one format for `rows`: the same decimals down
    the column, enough for its smallest number (decimals_for), so that 0.2305, 21.23 and
    2,857 read 0.231, 21.232 and 2,857.109, not in three forms."""
    return [
        replace(c, fmt=_fixed(decimals_for([r.get(c.field) for r in rows])), compact=None)
        if c.field in fields
        else c
        for c in columns
    ]


def columns_for(section: str, rows: Sequence[Mapping[str, Any]]) -> list[Column]:
    """The columns of a study section's table, or of a record set written beside one:
    made for its rows (ROW_COLUMNS), else the same for any rows (BESIDE_COLUMNS), else
    those its section kind declares (study.sections.SectionKind.columns), in one format
    for `rows` where aligned."""
    if section in ROW_COLUMNS:
        return ROW_COLUMNS[section](rows)
    if section in BESIDE_COLUMNS:
        return list(BESIDE_COLUMNS[section])
    from ..study.sections import KINDS  # here: `--help` loads this module, not the kinds

    declared = KINDS[section].columns if section in KINDS else ()
    if not declared:
        named = [n for n, kind in KINDS.items() if kind.columns]
        known = ", ".join(dict.fromkeys([*ROW_COLUMNS, *BESIDE_COLUMNS, *named]))
        raise KeyError(f"no table columns for section {section!r}; known: {known}")
    return declared_columns(declared, rows)


def legend_label(name: str) -> str:
    """A line's label as the legend shows it: matplotlib leaves out of its legend a label
    that starts with '_' (its mark of an unlabelled artist), which a model's or a file's
    name may; such a label starts with a zero-width space instead, which shows nothing."""
    return f"\u200b{name}" if name.startswith("_") else name
