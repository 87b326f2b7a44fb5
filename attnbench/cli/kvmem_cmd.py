"""`attnbench kvmem`: KV-cache memory per token, per layer and per model, measured too."""

from __future__ import annotations

from ..experiments.kvmem import KIND_RECORDS
from ..render.columns import kvmem_columns, layer_kind_columns
from .common import (
    console,
    model_notes,
    run_section,
    section_command,
    show_table,
    show_written,
)
from .group import app
from .options import ConfigOpt, CsvOpt, HfConfigOpt, JsonOpt, ModelOpt, QuietOpt, WideOpt

#: Where this module's commands come in `attnbench --help`, and each one's line there
#: (cli/__init__.py).
ORDER = 30
SHORT_HELP = {"kvmem": "KV-cache bytes per token, per layer and per model, measured"}


@section_command(app, "kvmem", before=("config", "model", "hf_config"))
def kvmem_command(
    overrides,
    config: ConfigOpt = None,
    model: ModelOpt = None,
    hf_config: HfConfigOpt = None,
    csv: CsvOpt = None,
    json: JsonOpt = None,
    wide: WideOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """KV-cache bytes (K and V) per token, per layer and for the whole model; measured by
    allocating the real cache, which must equal the formula exactly. A hybrid model's
    state layers (Mamba, linear attention) keep a fixed-size state beside it: shown per
    layer kind, and in the total."""
    outputs = {"csv": csv, "json": json}
    plan, result, written = run_section("kvmem", config, overrides, model, hf_config, outputs)
    if not quiet:
        rows = result.section_records("kvmem")
        where = result.environment["device"]  # the device measured on, else the CPU's
        show_table(f"KV-cache memory on {where}", rows, kvmem_columns(rows), wide)
        kinds = result.records.get(KIND_RECORDS, [])
        if kinds:
            show_table("Layer kinds (one sequence)", kinds, layer_kind_columns(kinds), wide)
        if any(r.tp > 1 and r.state_layers for r in result.records["kvmem"]):
            console.print(
                "note: under tensor parallelism each state layer's state splits evenly over "
                "the ranks, with its heads",
                markup=False,
            )
        seq_lens = [r.seq_len for r in result.records["kvmem"]]
        model_notes(plan.sections["kvmem"].models, seq_lens)
    show_written(written, quiet)
