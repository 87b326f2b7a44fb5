"""Cell formatters and every command's table columns, shared by the terminal and the report.

Each list of `Column`s says which record fields a table shows, how a cell reads (in full,
and compact where a shorter form exists), which fields are settings of the sweep (they go
to the title when every row shares them) and what to hide first in a narrow terminal
(highest rank first). Every formatter shows None as "-".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..model.units import format_bytes
from .table import Column, as_row

NONE_TEXT = "-"
SI_UNITS = ("k", "M", "G", "T", "P")
#: Counts below this are shown in full by fmt_si.
SI_FROM = 10_000


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
#: A speed-up: 11.2 -> '11.2x'.
fmt_x = _formatter(".1f", "x")


def fmt_yes_no(v: Any) -> str:
    """A flag: True -> 'yes', False -> 'no'."""
    return NONE_TEXT if v is None else ("yes" if v else "no")


def fmt_si(v: Any) -> str:
    """A count, compact: three significant digits and an SI suffix from 10,000 up
    (67108864 -> '67.1 M', 6738415616 -> '6.74 G', 12345 -> '12.3 k'); smaller counts in
    full with thousands separators (4,096)."""
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
    """A status, compact: its first word ('error: ValueError: ...' -> 'error')."""
    return NONE_TEXT if v is None else str(v).split(":", 1)[0].strip()


def iqr_cell(
    median: str = "step_ms_median", p25: str = "step_ms_p25", p75: str = "step_ms_p75"
) -> Callable[[Mapping[str, Any]], str]:
    """A cell maker for the spread of a timing: half the interquartile range relative to
    the median, in percent, one decimal: '±' + 100 * (p75 - p25) / 2 / median, so a median
    of 2.0 ms with p25 1.9 and p75 2.1 reads '±5.0%'. '-' when a value is missing or the
    median is not positive."""

    def cell(row: Mapping[str, Any]) -> str:
        mid, low, high = row.get(median), row.get(p25), row.get(p75)
        if mid is None or low is None or high is None or mid <= 0:
            return NONE_TEXT
        return f"±{100 * (high - low) / 2 / mid:.1f}%"

    return cell


# --- column helpers ------------------------------------------------------------------------


def _label(header: str, field: str, rank: int, **kw: Any) -> Column:
    return Column(header, field, fmt_plain, rank=rank, kind="label", **kw)


def _count(header: str, field: str, rank: int, **kw: Any) -> Column:
    return Column(header, field, fmt_int, rank=rank, compact=fmt_si, **kw)


def _bytes(header: str, field: str, rank: int, **kw: Any) -> Column:
    return Column(header, field, format_bytes, rank=rank, **kw)


def _setting_int(header: str, field: str, rank: int, title: Callable[[Any], str]) -> Column:
    return Column(header, field, fmt_int, rank=rank, setting=True, title_text=title)


def _status(rank: int) -> Column:
    return Column("Status", "status", fmt_plain, rank=rank, kind="status", compact=fmt_status)


def _model(rank: int = 0) -> Column:
    return _label("Model", "model", rank, setting=True, title_text=str)


# Settings as the title names them.
def _d_model(rank: int) -> Column:
    return _setting_int("d_model", "d_model", rank, lambda v: f"d_model {v:,}")


def _heads(rank: int) -> Column:
    return _setting_int("heads", "num_heads", rank, lambda v: f"{v:,} heads")


def _kv_heads(rank: int) -> Column:
    return _setting_int("kv heads", "num_kv_heads", rank, lambda v: f"{v:,} kv heads")


def _head_dim(rank: int) -> Column:
    return _setting_int("head_dim", "head_dim", rank, lambda v: f"head_dim {v:,}")


def _dtype(rank: int) -> Column:
    return _label("dtype", "dtype", rank, setting=True, title_text=str)


def _batch(rank: int) -> Column:
    return _setting_int("batch", "batch", rank, lambda v: f"batch {v:,}")


# --- params: one attention layer per variant ------------------------------------------------

PARAMS: list[Column] = [
    _model(0),
    _label("Variant", "variant", 0),
    _d_model(10),
    _heads(11),
    _kv_heads(45),  # when it varies, the variant's name says it too
    _head_dim(13),
    Column("bias", "bias", fmt_yes_no, rank=14, kind="label", setting=True,
           title_text=lambda v: "bias" if v else "no bias"),
    _count("q_proj", "q_params", 40),
    _count("k_proj", "k_params", 40),
    _count("v_proj", "v_params", 40),
    _count("o_proj", "o_params", 40),
    _count("total", "total_params", 1),
    _count("module", "module_params", 30),
    Column("vs MHA", "ratio_vs_mha", fmt_pct, rank=2),
]  # fmt: skip


# --- kvmem: KV-cache memory -----------------------------------------------------------------

KVMEM: list[Column] = [
    _model(0),
    _label("Variant", "variant", 0),
    _setting_int("layers", "num_layers", 12, lambda v: f"{v:,} layer{'' if v == 1 else 's'}"),
    _heads(13),
    _kv_heads(11),
    _head_dim(14),
    _batch(5),
    _setting_int("context", "seq_len", 3, lambda v: f"context {v:,}"),
    _dtype(16),
    _bytes("per token", "bytes_per_token", 10),
    _bytes("per layer", "kv_bytes_per_layer", 30),
    _bytes("whole model", "kv_bytes", 1),
    _bytes("measured", "measured_bytes", 20),
    Column("vs MHA", "ratio_vs_mha", fmt_pct, rank=2),
    _status(4),
]


def _uses_kv_dtype(r: Mapping[str, Any]) -> bool:
    kv_dtype = r.get("kv_dtype")
    return (kv_dtype is not None and kv_dtype != r.get("dtype")) or (r.get("scale_bytes") or 0) > 0


#: Option columns of kvmem, each group shown when some row uses the option it describes.
KVMEM_OPTIONS: list[tuple[Callable[[Mapping[str, Any]], bool], list[Column]]] = [
    (_uses_kv_dtype, [
        _label("kv dtype", "kv_dtype", 15, setting=True, title_text=lambda v: f"kv cache {v}"),
        _bytes("scales", "scale_bytes", 27),
    ]),
    (lambda r: (r.get("windowed_layers") or 0) > 0, [
        Column("window", "sliding_window", fmt_int, rank=22),
        Column("windowed", "windowed_layers", fmt_int, rank=24),
    ]),
    (lambda r: (r.get("tp") or 1) > 1, [
        _setting_int("tp", "tp", 16, lambda v: f"tp {v:,}"),
        _bytes("per GPU", "kv_bytes_per_gpu", 15),
        _bytes("all GPUs", "kv_bytes_all_gpus", 31),
    ]),
    (lambda r: r.get("used_bytes") is not None, [
        _setting_int("page", "page_size", 26, lambda v: f"page {v:,} tokens"),
        _bytes("used", "used_bytes", 25),
        _bytes("paged", "paged_bytes", 18),
        Column("paged waste", "paged_waste_pct", fmt_pct_value, rank=19),
        _bytes("contiguous", "contiguous_bytes", 32),
        Column("contig. waste", "contiguous_waste_pct", fmt_pct_value, rank=33),
        _bytes("measured paged", "measured_paged_bytes", 35),
    ]),
]  # fmt: skip


def kvmem_columns(rows: Sequence[Mapping[str, Any]]) -> list[Column]:
    """KVMEM, with each option group some row uses (quantised cache, sliding windows,
    tensor parallel, paging, in that order) before Status."""
    records = [as_row(r) for r in rows]
    extra = [c for used, cols in KVMEM_OPTIONS if any(used(r) for r in records) for c in cols]
    return [*KVMEM[:-1], *extra, KVMEM[-1]]


# --- decode-speed ---------------------------------------------------------------------------

DECODE: list[Column] = [
    _model(0),
    _label("Variant", "variant", 0),
    _label("backend", "backend", 9, setting=True, title_text=str),
    _label("device", "device", 12, setting=True, title_text=str),
    _dtype(10),
    _batch(11),
    _d_model(13),
    _heads(14),
    _kv_heads(15),
    _head_dim(16),
    _label("projection", "projection_path", 18, setting=True,
           title_text=lambda v: f"{v} projections"),
    _label("Mode", "mode", 1),
    _setting_int("context", "prompt_len", 2, lambda v: f"context {v:,}"),
    _setting_int("gen", "gen_len", 17, lambda v: f"gen {v:,}"),
    Column("prefill ms", "prefill_ms", fmt_ms, rank=20),
    Column("step ms", "step_ms_median", fmt_ms, rank=3),
    Column("±IQR", "step_ms_median", fmt_plain, rank=4, cell=iqr_cell()),
    Column("p25", "step_ms_p25", fmt_ms, rank=21),
    Column("p75", "step_ms_p75", fmt_ms, rank=22),
    Column("total ms", "total_ms", fmt_ms, rank=23),
    Column("tok/s", "tokens_per_s", fmt_f1, rank=5),
    Column("speed-up", "speedup_vs_no_cache", fmt_x, rank=6),
    Column("GB/s", "achieved_gbps", fmt_f1, rank=24),
    Column("% peak", "pct_of_peak_bw", fmt_f1, rank=7),
    Column("noisy", "noisy", fmt_yes_no, rank=25, kind="label"),
    _status(8),
]  # fmt: skip


# --- whole model (the params of a model) and the model presets --------------------------

WHOLE_MODEL: list[Column] = [
    _model(0),
    _label("Part", "part", 0),
    _count("params", "params", 1),
    _count("meta-device", "meta_params", 2),
    _bytes("weights", "weight_bytes", 3),
]

MODELS: list[Column] = [
    _label("Name", "name", 0),
    Column("layers", "num_layers", fmt_int, rank=3),
    Column("d_model", "d_model", fmt_int, rank=5),
    Column("heads", "num_heads", fmt_int, rank=4),
    Column("kv heads", "num_kv_heads", fmt_int, rank=2),
    Column("head_dim", "head_dim", fmt_int, rank=7),
    _label("Variant", "variant", 1),
    _label("dtype", "dtype", 6),
    Column("Source", "source", fmt_plain, rank=90, kind="text"),
]


FIT: list[Column] = [
    _model(0),
    _label("Question", "question", 0),
    Column("context", "seq_len", fmt_int, rank=1),
    Column("batch", "batch", fmt_int, rank=1),
    Column("GPUs", "gpus", fmt_int, rank=3, setting=True),
    Column("tp", "tp", fmt_int, rank=3, setting=True),
    _label("kv dtype", "kv_dtype", 4, setting=True),
    _bytes("KV per sequence", "kv_bytes_per_sequence_per_gpu", 2),
    _bytes("weights", "weights_bytes_per_gpu", 5),
    _bytes("KV cache", "kv_bytes_per_gpu", 5),
    _bytes("free", "free_bytes_per_gpu", 6),
]

SECTION_COLUMNS: dict[str, list[Column]] = {
    "params": PARAMS,
    "decode": DECODE,
    "fit": FIT,
    "model_parts": WHOLE_MODEL,
}


def columns_for(section: str, rows: Sequence[Mapping[str, Any]]) -> list[Column]:
    """The columns of a study section's table: kvmem's depend on the options its rows use."""
    if section == "kvmem":
        return kvmem_columns(rows)
    try:
        return SECTION_COLUMNS[section]
    except KeyError:
        known = ", ".join(["kvmem", *SECTION_COLUMNS])
        raise KeyError(f"no table columns for section {section!r}; known: {known}") from None
