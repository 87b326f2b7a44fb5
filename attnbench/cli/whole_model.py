"""The whole-model parameter table `attnbench params` prints for --model / --hf-config."""

from __future__ import annotations

from collections.abc import Sequence

from ..experiments.params import ModelMismatchError
from ..model.architecture import ModelSpec
from ..model.model_params import whole_model_records
from ..study.output import fmt_int, fmt_plain, format_bytes
from .common import console, fail, render_table

COLUMNS = [
    ("Part", "part", fmt_plain),
    ("params", "params", fmt_int),
    ("meta-device", "meta_params", fmt_int),
    ("weights", "weight_bytes", format_bytes),
]


def print_whole_models(models: Sequence[ModelSpec]) -> None:
    """A table per model: each part, analytic and counted on the meta device, with its
    bytes in the model's dtype; exits 1 when the two counts differ (a bug)."""
    for spec in models:
        if spec.body is None:
            console.print(f"{spec.name}: whole-model counts unknown (attention only)")
            continue
        try:
            records = whole_model_records(spec)
        except ModelMismatchError as exc:
            raise fail(f"internal error: {exc}", code=1) from None
        title = f"Whole model: {spec.name} ({spec.dtype} weights)"
        console.print(render_table(title, records, COLUMNS))
        if spec.mla is not None:
            console.print(
                f"{spec.name} uses MLA: the per-layer table above describes a GQA layer of "
                "its heads; the whole-model table counts its MLA projections."
            )
