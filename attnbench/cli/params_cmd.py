"""`attnbench params`: parameter counts per variant, analytic and counted on a module."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..experiments.whole_model import PART_RECORDS
from ..model.model_params import COUNT_HINT, has_whole_model, whole_model_source
from ..model.what_if import is_what_if
from ..records import as_dict
from ..render.columns import WHOLE_MODEL, WHOLE_MODEL_COUNTED, columns_for
from ..render.what_if import WHOLE_MODEL_WHAT_IF, whole_model_rows
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

if TYPE_CHECKING:
    from ..experiments.whole_model import ModelPartRecord


#: Where this module's commands come in `attnbench --help`, and each one's line there
#: (cli/__init__.py).
ORDER = 20
SHORT_HELP = {"params": "Parameter counts per variant: one layer, and the whole model"}


def present_parts(rows: list[ModelPartRecord]) -> list[ModelPartRecord]:
    """The parts a model has: a part of no parameters (the experts and router of a dense
    model) is none of it, and is left out of the table (the records keep it)."""
    return [r for r in rows if r.params or r.meta_params]


@section_command(app, "params", before=("config", "model", "hf_config"))
def params_command(
    overrides,
    config: ConfigOpt = None,
    model: ModelOpt = None,
    hf_config: HfConfigOpt = None,
    csv: CsvOpt = None,
    json: JsonOpt = None,
    wide: WideOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Parameter counts of one attention layer per variant: analytic, and counted on a
    module built on the meta device (a mismatch is a bug and fails). With a model, also
    its whole-model count per part it has (column `counted`: on a skeleton of the model
    built on the meta device)."""
    outputs = {"csv": csv, "json": json}
    plan, result, written = run_section("params", config, overrides, model, hf_config, outputs)
    records = result.records["params"]
    models = plan.sections["params"].models
    parts: list[ModelPartRecord] = result.records.get(PART_RECORDS, [])
    what_if_rows = whole_model_rows([as_dict(r) for r in parts])
    if not quiet:
        show_table("Attention parameters per layer", records, columns_for("params", records), wide)
        for spec in models:
            if not has_whole_model(spec):
                console.print(
                    f"{spec.name}: whole-model counts unknown (attention only): "
                    f"{spec.uncounted or COUNT_HINT}",
                    markup=False,
                )
                continue
            if is_what_if(spec.num_kv_heads, spec.published_kv_heads):
                continue  # a what-if: in the table of its set, below
            rows = [
                r for r in parts if r.model == spec.name and r.num_kv_heads == spec.num_kv_heads
            ]
            title = f"Whole model ({spec.dtype} weights)"
            rows = present_parts(rows)
            columns = WHOLE_MODEL if spec.body is not None else WHOLE_MODEL_COUNTED
            show_table(title, rows, columns, wide)
            if spec.body is not None:  # a count of transformers' says so in its note
                console.print(f"Counted by {whole_model_source(spec)}.", markup=False)
            variants = [r for r in what_if_rows if r["model"] == spec.name]
            if variants:
                title = f"Whole model per KV-head count ({spec.dtype} weights)"
                show_table(title, variants, WHOLE_MODEL_WHAT_IF, wide)
            if spec.mla is not None:
                console.print(
                    f"{spec.name} uses MLA: the per-layer table above is a plain attention "
                    f"layer of its {spec.num_heads:,} heads and {spec.num_kv_heads:,} KV heads "
                    f"of head_dim {spec.head_dim:,}, to set beside MHA, GQA and MQA, not its "
                    "own layer; the whole-model table counts its MLA projections."
                )
        model_notes(models)
    show_written(written, quiet)
