"""Whole-model parameter counts per part: the formulas of model/model_params.py, checked
against a meta-device skeleton of the model; or, for a model type without formulas, the
count transformers' own build of it gave (ModelSpec.counted), which is its own check."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import ModelMismatchError
from ..model.architecture import ModelSpec
from ..model.dtypes import packed_bytes
from ..model.model_params import (
    active_params,
    has_whole_model,
    part_params,
    step_traits,
    whole_model_source,
)
from ..records import exact, info, key

#: The name of the part records' set, in result documents and files (model_parts.csv).
PART_RECORDS = "model_parts"


@dataclass(kw_only=True)
class ModelPartRecord:
    """One row of the whole-model table."""

    model: str = key()
    num_kv_heads: int = key()
    variant: str = info()
    part: str = key()
    params: int = exact()
    meta_params: int | None = exact()
    weight_bytes: int = exact()
    #: What gave the count: "attnbench formulas", or transformers' build of the model.
    source: str | None = info()
    #: The model's own KV heads on every row of a what-if set; None otherwise.
    published_kv_heads: int | None = info()


def whole_model_records(spec: ModelSpec) -> list[ModelPartRecord]:
    """A row per part, then `total` (and `active per token` for MoE); raises
    ModelMismatchError when formula and skeleton disagree. A model counted by
    transformers has no skeleton: its `meta_params` are None."""
    analytic = part_params(spec)
    counted: dict[str, int | None] = dict.fromkeys(analytic)
    if spec.body is not None:
        from ..modules.skeleton import meta_part_params  # a skeleton on the meta device: torch

        counted = {**meta_part_params(spec)}
        if analytic != counted:
            raise ModelMismatchError(
                f"{spec.name}: the formulas give {analytic} but the skeleton has {counted}"
            )
    rows = [(part, n, counted[part]) for part, n in analytic.items()]
    total = None if spec.body is None else sum(counted.values())  # type: ignore[arg-type]
    rows.append(("total", sum(analytic.values()), total))
    if step_traits(spec).num_experts:
        rows.append(("active per token", active_params(spec), None))
    source = whole_model_source(spec)
    return [
        ModelPartRecord(
            model=spec.name,
            num_kv_heads=spec.num_kv_heads,
            variant=spec.variant,
            part=part,
            params=n,
            meta_params=meta,
            weight_bytes=packed_bytes(n, spec.dtype),
            published_kv_heads=spec.published_kv_heads,
            source=source,
        )
        for part, n, meta in rows
    ]


def model_parts(models: Iterable[ModelSpec]) -> list[ModelPartRecord]:
    """The part records of every model known whole, in order: what `params` writes beside
    its per-layer records (a model known by its attention alone has none)."""
    return [r for spec in models if has_whole_model(spec) for r in whole_model_records(spec)]
