"""`attnbench kvmem`: KV-cache memory per token, per layer and per model, measured too."""

from __future__ import annotations

from collections.abc import Callable

import typer

from ..errors import UsageError
from ..experiments.kvmem import KvmemRecord, kvmem_points, kvmem_record
from ..measure.devices import resolve_device
from ..measure.environment import collect_environment
from ..model.capacity import KV_DTYPES, SCALE_DTYPES, parse_seq_lens
from ..model.formulas import MODEL_DTYPES
from ..study.output import fmt_int, fmt_pct, fmt_plain, format_bytes
from ..study.sweep import load_config, resolve
from . import app
from .common import (
    Column,
    ConfigOpt,
    CsvOpt,
    DModelOpt,
    HeadDimOpt,
    HeadsOpt,
    HfConfigOpt,
    JsonOpt,
    KvHeadsOpt,
    ModelOpt,
    QuietOpt,
    console,
    handles_errors,
    model_refs,
    parse_choice_list,
    parse_int_list,
    render_table,
    shape_overrides,
    write_outputs,
)

COLUMNS = [
    ("Model", "model", fmt_plain),
    ("Variant", "variant", fmt_plain),
    ("layers", "num_layers", fmt_int),
    ("heads", "num_heads", fmt_int),
    ("kv heads", "num_kv_heads", fmt_int),
    ("head_dim", "head_dim", fmt_int),
    ("batch", "batch", fmt_int),
    ("seq_len", "seq_len", fmt_int),
    ("dtype", "dtype", fmt_plain),
    ("per token", "bytes_per_token", format_bytes),
    ("per layer", "kv_bytes_per_layer", format_bytes),
    ("whole model", "kv_bytes", format_bytes),
    ("measured", "measured_bytes", format_bytes),
    ("vs MHA", "ratio_vs_mha", fmt_pct),
    ("Status", "status", fmt_plain),
]


def fmt_pct(v) -> str:
    return "-" if v is None else f"{v:.2f}%"


#: Extra columns, each shown when some record uses the option it describes.
OPTION_COLUMNS: list[tuple[Callable[[KvmemRecord], bool], list[Column]]] = [
    (lambda r: r.kv_dtype != r.dtype or r.scale_bytes > 0,
     [("kv dtype", "kv_dtype", fmt_plain), ("scales", "scale_bytes", format_bytes)]),
    (lambda r: r.windowed_layers > 0,
     [("window", "sliding_window", fmt_int), ("windowed", "windowed_layers", fmt_int)]),
    (lambda r: r.tp > 1,
     [("tp", "tp", fmt_int), ("per GPU", "kv_bytes_per_gpu", format_bytes),
      ("all GPUs", "kv_bytes_all_gpus", format_bytes)]),
    (lambda r: r.used_bytes is not None,
     [("page", "page_size", fmt_int), ("used", "used_bytes", format_bytes),
      ("paged", "paged_bytes", format_bytes), ("paged waste", "paged_waste_pct", fmt_pct),
      ("contiguous", "contiguous_bytes", format_bytes),
      ("contig. waste", "contiguous_waste_pct", fmt_pct),
      ("measured paged", "measured_paged_bytes", format_bytes)]),
]  # fmt: skip


def table_columns(records: list[KvmemRecord]) -> list[Column]:
    """COLUMNS, with each option's columns before Status when some record uses it."""
    extra = [c for used, cols in OPTION_COLUMNS if any(map(used, records)) for c in cols]
    return COLUMNS[:-1] + extra + COLUMNS[-1:]


def none_as_zero(text: str | None) -> str | None:
    """--sliding-window items: `none` is 0 (no window)."""
    if text is None:
        return None
    return ",".join("0" if t.strip().lower() == "none" else t for t in text.split(","))


@app.command("kvmem")
@handles_errors
def kvmem_command(
    config: ConfigOpt = None,
    model: ModelOpt = None,
    hf_config: HfConfigOpt = None,
    d_model: DModelOpt = None,
    heads: HeadsOpt = None,
    kv_heads: KvHeadsOpt = None,
    head_dim: HeadDimOpt = None,
    layers: str = typer.Option(None, "--layers", help="Layers (default: the model's, else 1)."),
    batch: str = typer.Option(None, "--batch", help="Batch sizes, comma-separated."),
    seq_len: str = typer.Option(None, "--seq-len", help="Cached tokens, comma-separated."),
    dtype: str = typer.Option(
        None,
        "--dtype",
        help="float32, float16 or bfloat16 (default: the model's, else float16).",
    ),
    kv_dtype: str = typer.Option(
        None, "--kv-dtype", help=f"Cache dtypes: {', '.join(KV_DTYPES)} (default: --dtype)."
    ),
    kv_scale_group: str = typer.Option(
        None, "--kv-scale-group", help="Elements per scale of quantised caches (default: a head)."
    ),
    scale_dtype: str = typer.Option(None, "--scale-dtype", help="Scales' dtype (float16)."),
    sliding_window: str = typer.Option(
        None, "--sliding-window", help="Windows of the windowed layers; 0 or none: no window."
    ),
    page_size: str = typer.Option(None, "--page-size", help="Paged blocks of P tokens."),
    seq_lens: str = typer.Option(
        None, "--seq-lens", help="One batch's lengths: 100,50,200 or 8x512 or linspace:1:4096:64."
    ),
    tp: str = typer.Option(None, "--tp", help="Tensor-parallel ranks, comma-separated."),
    measure: bool = typer.Option(
        None, "--measure/--no-measure", help="Allocate the real cache and count it (default on)."
    ),
    device: str = typer.Option(None, "--device", help="auto, cpu, cuda or cuda:i (default auto)."),
    csv: CsvOpt = None,
    json: JsonOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """KV-cache bytes (K and V) per token, per layer and for the whole model; measured by
    allocating the real cache, which must equal the formula exactly."""
    overrides = {
        **shape_overrides(d_model, heads, kv_heads, head_dim),
        "num_layers": parse_int_list("--layers", layers),
        "batch": parse_int_list("--batch", batch),
        "seq_len": parse_int_list("--seq-len", seq_len),
        "dtype": parse_choice_list("--dtype", dtype, MODEL_DTYPES),
        "kv_dtype": parse_choice_list("--kv-dtype", kv_dtype, KV_DTYPES),
        "kv_scale_group": parse_int_list("--kv-scale-group", kv_scale_group),
        "scale_dtype": parse_choice_list("--scale-dtype", scale_dtype, SCALE_DTYPES),
        "sliding_window": parse_int_list("--sliding-window", none_as_zero(sliding_window), 0),
        "page_size": parse_int_list("--page-size", page_size),
        "tp": parse_int_list("--tp", tp),
        "measure": measure,
        "device": device,
    }  # fmt: skip
    lengths = parse_seq_lens(seq_lens) if seq_lens is not None else None
    if lengths and (batch or seq_len):
        raise UsageError("--seq-lens: replaces --batch and --seq-len; give one or the other")
    study = resolve(load_config(config), "kvmem", overrides, model_refs(model, hf_config))
    dev = resolve_device(study.options["device"])
    measure_on = dev if study.options["measure"] else None
    records = [kvmem_record(p, measure_on, spec) for p, spec in kvmem_points(study, lengths)]
    if not quiet:
        title = f"KV-cache memory on {dev}"
        console.print(render_table(title, records, table_columns(records)))
    write_outputs("kvmem", records, study.to_dict(), collect_environment(dev), csv, json, quiet)
