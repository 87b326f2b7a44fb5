"""`attnbench kvmem`: KV-cache memory per token, per layer and per model, measured too."""

from __future__ import annotations

import typer

from ..analytic import MODEL_DTYPES
from ..devices import resolve_device
from ..environment import collect_environment
from ..kvmem import kvmem_record
from ..output import format_bytes
from ..sweep import load_config, resolve
from . import app
from .common import (
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
    fmt_int,
    fmt_plain,
    fmt_ratio,
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
    ("vs MHA", "ratio_vs_mha", fmt_ratio),
    ("Status", "status", fmt_plain),
]


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
        "measure": measure,
        "device": device,
    }
    study = resolve(load_config(config), "kvmem", overrides, model_refs(model, hf_config))
    dev = resolve_device(study.options["device"])
    records = [kvmem_record(p, dev if study.options["measure"] else None) for p in study.points()]
    if not quiet:
        title = f"KV-cache memory (K and V) on {dev}"
        console.print(render_table(title, records, COLUMNS))
    write_outputs("kvmem", records, study.to_dict(), collect_environment(dev), csv, json, quiet)
