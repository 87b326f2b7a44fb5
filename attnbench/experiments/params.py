"""Parameter counts of one attention layer: analytic, and counted on a real module."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import FieldError, ModelMismatchError
from ..model.architecture import ModelSpec
from ..model.formulas import attention_params, projection_params
from ..model.shapes import AttentionShape
from ..modules.attention import GroupedQueryAttention
from ..records import ColumnSpec, exact, info, key
from . import whole_model
from .context import Context, grid_order, no_links


@dataclass(frozen=True, kw_only=True)
class ParamsPoint:
    """One layer shape; `model` names the preset or config.json it came from, if any, and
    `spec` is that model: a layer of it has the model's own biases, whatever `bias` says
    (check refuses a `bias` that contradicts them)."""

    d_model: int
    num_heads: int
    num_kv_heads: int
    head_dim: int | None = None
    bias: bool = False
    model: str | None = None
    #: The model's own KV heads, when this point is one of a what-if set (model/what_if.py).
    published_kv_heads: int | None = None
    spec: ModelSpec | None = field(default=None, compare=False, repr=False)

    @property
    def model_biases(self) -> tuple[bool, bool] | None:
        """(q/k/v, o) biases of the model's layers; None without a model whose body
        attnbench knows (a count by transformers does not say them)."""
        body = None if self.spec is None else self.spec.body
        return None if body is None else (body.qkv_bias, body.o_bias)

    @property
    def shape(self) -> AttentionShape:
        qkv, o = self.model_biases or (self.bias, None)
        return AttentionShape(
            self.d_model, self.num_heads, self.num_kv_heads, self.head_dim, qkv, o
        )


@dataclass(kw_only=True)
class ParamsRecord:
    variant: str = key()
    d_model: int = key()
    num_heads: int = key()
    num_kv_heads: int = key()
    head_dim: int = key()
    bias: bool = key()
    #: Which projections carry a bias (AttentionShape.biases): 'q/k/v bias' for Qwen2's.
    biases: str | None = info(None)
    q_params: int = exact()
    k_params: int = exact()
    v_params: int = exact()
    o_params: int = exact()
    total_params: int = exact()
    module_params: int = exact()
    ratio_vs_mha: float = info()
    #: The model's own KV heads on every row of a what-if set; None otherwise.
    published_kv_heads: int | None = info()


#: The section's table (records.ColumnSpec).
COLUMNS = (
    ColumnSpec("Model", "model", "label", 0, setting=True, title="{}"),
    ColumnSpec("Variant", "variant", "variant", 0),
    ColumnSpec("d_model", "d_model", "int", 10, setting=True, title="d_model {:,}"),
    ColumnSpec("heads", "num_heads", "int", 11, setting=True, title="{:,} heads"),
    # when it varies, the variant's name says it too
    ColumnSpec("kv heads", "num_kv_heads", "int", 45, setting=True, title="{:,} kv heads"),
    ColumnSpec("head_dim", "head_dim", "int", 13, setting=True, title="head_dim {:,}"),
    ColumnSpec("bias", "biases", "label", 14, setting=True, title="{}"),
    ColumnSpec("q_proj", "q_params", "count", 40),
    ColumnSpec("k_proj", "k_params", "count", 40),
    ColumnSpec("v_proj", "v_params", "count", 40),
    ColumnSpec("o_proj", "o_params", "count", 40),
    ColumnSpec("total", "total_params", "count", 1),
    # the check of total on a built module: the first to hide, where the parts add up to it
    ColumnSpec("module", "module_params", "count", 46),
    ColumnSpec("vs MHA", "ratio_vs_mha", "pct", 2),
)


def count_module_params(shape: AttentionShape) -> int:
    """Parameters of a GroupedQueryAttention built on the `meta` device (no memory used),
    without the biases the shape does not have (Qwen2's o_proj)."""
    module = GroupedQueryAttention(
        shape.d_model,
        shape.num_heads,
        shape.num_kv_heads,
        head_dim=shape.head_dim,
        bias=shape.bias or shape.out_bias,
        device="meta",
    )
    biased = {"q_proj": shape.bias, "k_proj": shape.bias, "v_proj": shape.bias}
    for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
        if not biased.get(name, shape.out_bias):  # a model's layer without this bias
            getattr(module, name).register_parameter("bias", None)
    return sum(p.numel() for p in module.parameters())


def check(point: ParamsPoint) -> None:
    """Raise for a point that cannot run (the shape is validated on construction), and
    for a `bias` on a model whose projections have none: a model's layer has its own."""
    shape = point.shape
    if point.bias and point.model_biases is not None and not (shape.bias and shape.out_bias):
        raise FieldError(
            "bias",
            True,
            f"{point.model}'s projections have {shape.biases}: a model's layer is counted "
            "with its own biases, and {bias} sets those of a shape given by its width and heads",
            mentions=("bias",),
        )


def run(point: ParamsPoint, context: Context | None = None) -> ParamsRecord:
    """One row of `attnbench params`; raises ModelMismatchError if formula and module differ."""
    shape = point.shape
    total = attention_params(shape)
    counted = count_module_params(shape)
    if counted != total:
        raise ModelMismatchError(
            f"{shape}: the formula gives {total} parameters but the module has {counted}"
        )
    mha = replace(shape, num_kv_heads=shape.num_heads)
    return ParamsRecord(
        variant=shape.variant,
        d_model=shape.d_model,
        num_heads=shape.num_heads,
        num_kv_heads=shape.num_kv_heads,
        head_dim=shape.head_dim,  # type: ignore[arg-type]
        bias=shape.bias,
        biases=shape.biases,
        **projection_params(shape),
        total_params=total,
        module_params=counted,
        ratio_vs_mha=total / attention_params(mha),
        published_kv_heads=point.published_kv_heads,
    )


#: The record sets params writes beside its per-layer records, each made from the
#: section: the whole-model parts of every model with a body.
BESIDE: dict[str, Callable[[Any], list]] = {
    whole_model.PART_RECORDS: lambda section: whole_model.model_parts(section.models)
}


#: The grid's run order, and no comparison among the points (study.sections.Experiment).
order, link = grid_order, no_links
