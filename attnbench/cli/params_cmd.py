"""`attnbench params`: parameter counts per variant, analytic and counted on a module."""

from __future__ import annotations

import typer

from ..experiments.params import ModelMismatchError, params_record
from ..measure.environment import collect_environment
from ..study.output import fmt_int, fmt_pct, fmt_plain
from ..study.sweep import load_config, point_shape, resolve
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
    fail,
    handles_errors,
    model_refs,
    render_table,
    shape_overrides,
    write_outputs,
)
from .whole_model import print_whole_models

COLUMNS = [
    ("Variant", "variant", fmt_plain),
    ("d_model", "d_model", fmt_int),
    ("heads", "num_heads", fmt_int),
    ("kv heads", "num_kv_heads", fmt_int),
    ("head_dim", "head_dim", fmt_int),
    ("bias", "bias", fmt_plain),
    ("q_proj", "q_params", fmt_int),
    ("k_proj", "k_params", fmt_int),
    ("v_proj", "v_params", fmt_int),
    ("o_proj", "o_params", fmt_int),
    ("total", "total_params", fmt_int),
    ("module", "module_params", fmt_int),
    ("vs MHA", "ratio_vs_mha", fmt_pct),
]


@app.command("params")
@handles_errors
def params_command(
    config: ConfigOpt = None,
    model: ModelOpt = None,
    hf_config: HfConfigOpt = None,
    d_model: DModelOpt = None,
    heads: HeadsOpt = None,
    kv_heads: KvHeadsOpt = None,
    head_dim: HeadDimOpt = None,
    bias: bool = typer.Option(
        None, "--bias/--no-bias", help="Projections with bias (default off)."
    ),
    csv: CsvOpt = None,
    json: JsonOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Parameter counts of one attention layer per variant: analytic, and counted on a
    module built on the meta device (a mismatch is a bug and fails)."""
    overrides = {**shape_overrides(d_model, heads, kv_heads, head_dim), "bias": bias}
    study = resolve(load_config(config), "params", overrides, model_refs(model, hf_config))
    try:
        records = [params_record(point_shape(p)) for p in study.points()]
    except ModelMismatchError as exc:
        raise fail(f"internal error: {exc}", code=1) from None
    if not quiet:
        console.print(render_table("Attention parameters per layer", records, COLUMNS))
        print_whole_models(study.models)
    write_outputs("params", records, study.to_dict(), collect_environment(),
                  csv, json, quiet)  # fmt: skip
