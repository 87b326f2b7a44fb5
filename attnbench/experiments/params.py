"""Parameter counts of one attention layer: analytic, and counted on a real module."""

from __future__ import annotations

from dataclasses import dataclass

from ..model.formulas import AttentionShape, attention_params, projection_params
from ..modules.attention import GroupedQueryAttention


class ModelMismatchError(RuntimeError):
    """The analytic model and the instantiated module disagree: a bug in attnbench."""


@dataclass
class ParamsRecord:
    variant: str
    d_model: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    bias: bool
    q_params: int
    k_params: int
    v_params: int
    o_params: int
    total_params: int
    module_params: int
    ratio_vs_mha: float


def count_module_params(shape: AttentionShape) -> int:
    """Parameters of a GroupedQueryAttention built on the `meta` device (no memory used)."""
    module = GroupedQueryAttention(
        shape.d_model,
        shape.num_heads,
        shape.num_kv_heads,
        head_dim=shape.head_dim,
        bias=shape.bias,
        device="meta",
    )
    return sum(p.numel() for p in module.parameters())


def params_record(shape: AttentionShape) -> ParamsRecord:
    """One row of `attnbench params`; raises ModelMismatchError if formula and module differ."""
    parts = projection_params(shape)
    total = attention_params(shape)
    counted = count_module_params(shape)
    if counted != total:
        raise ModelMismatchError(
            f"{shape}: the formula gives {total} parameters but the module has {counted}"
        )
    mha = AttentionShape(shape.d_model, shape.num_heads, shape.num_heads, shape.head_dim,
                         shape.bias)  # fmt: skip
    return ParamsRecord(
        variant=shape.variant,
        d_model=shape.d_model,
        num_heads=shape.num_heads,
        num_kv_heads=shape.num_kv_heads,
        head_dim=shape.head_dim,  # type: ignore[arg-type]
        bias=shape.bias,
        **parts,
        total_params=total,
        module_params=counted,
        ratio_vs_mha=total / attention_params(mha),
    )
