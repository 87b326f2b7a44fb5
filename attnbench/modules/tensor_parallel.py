"""Tensor-parallel attention: one layer split by heads over T ranks, as serving engines do.

Each rank holds Hq/T query heads and the KV heads they use. q/k/v are column-parallel (each
rank computes its heads' rows of the projections), o_proj is row-parallel (each rank
multiplies its heads' slice of the attention output by its columns of the weight), so the
layer's output is the sum of the ranks' outputs: one all-reduce per layer, no other
communication. With fewer KV heads than ranks, each KV head is replicated on T/Hkv ranks.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist

from ..model.capacity import kv_heads_per_rank
from .attention import GroupedQueryAttention, Projection


def tp_shard_heads(num_heads: int, num_kv_heads: int, tp: int, rank: int) -> tuple[range, range]:
    """The query heads and KV heads that rank `rank` of `tp` holds.

    Query heads are split evenly; each rank holds the KV heads its query heads use, as
    many as model.capacity.kv_heads_per_rank says (the rule kvmem counts the KV bytes per
    GPU with): Hkv / tp, or one replicated on tp / Hkv ranks. Raises FieldError (naming
    tp) when the heads cannot be split that way, ValueError for a rank outside [0, tp)."""
    kv_here = kv_heads_per_rank(num_heads, num_kv_heads, tp)
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < tp:
        raise ValueError(f"rank must be an integer in [0, {tp}), got {rank!r}")
    per_rank = num_heads // tp
    q_heads = range(rank * per_rank, (rank + 1) * per_rank)
    group_size = num_heads // num_kv_heads
    first = q_heads.start // group_size  # the KV head of the rank's first query head
    kv_heads = range(first, first + kv_here)
    assert all(h // group_size in kv_heads for h in q_heads), (q_heads, kv_heads)
    return q_heads, kv_heads


def _rows(heads: range, head_dim: int) -> slice:
    return slice(heads.start * head_dim, heads.stop * head_dim)


class TensorParallelShard(GroupedQueryAttention):
    """One rank's part of a tensor-parallel layer (see shard_layer). With `all_reduce`,
    every output (forward and the fixed calls: decode steps, prefills, causal forwards)
    is summed over `group` right after o_proj, in place, so each call returns the whole
    layer's output on every rank, with one all-reduce per call as serving engines pay
    it; without, it returns this rank's part of the sum."""

    def __init__(
        self, *args, all_reduce: bool = False, group: dist.ProcessGroup | None = None, **kwargs
    ) -> None:
        super().__init__(*args, **kwargs)
        self.all_reduce = all_reduce
        self.group = group

    def forward(self, *args, **kwargs) -> torch.Tensor:
        out = super().forward(*args, **kwargs)
        if self.all_reduce:
            dist.all_reduce(out, op=dist.ReduceOp.SUM, group=self.group)
        return out

    def resolved_projections(self, x: torch.Tensor) -> tuple[Projection, ...]:
        """The layer's projections (see GroupedQueryAttention.resolved_projections), o_proj
        followed by the all-reduce when the shard sums its outputs."""
        q_proj, k_proj, v_proj, o_proj = super().resolved_projections(x)
        if not self.all_reduce:
            return q_proj, k_proj, v_proj, o_proj
        _check_initialized()
        group = self.group

        def o_proj_reduced(t: torch.Tensor) -> torch.Tensor:
            out = o_proj(t)
            dist.all_reduce(out, op=dist.ReduceOp.SUM, group=group)
            return out

        return q_proj, k_proj, v_proj, o_proj_reduced


def shard_layer(
    layer: GroupedQueryAttention,
    tp: int,
    rank: int,
    *,
    all_reduce: bool = False,
    group: dist.ProcessGroup | None = None,
) -> TensorParallelShard:
    """Rank `rank`'s part of `layer` split over `tp` ranks, holding copies of its slices;
    with `all_reduce`, its outputs are summed over `group` (see TensorParallelShard).

    o_proj keeps its bias only on rank 0, so that summing the ranks' outputs adds it once.
    """
    q_heads, kv_heads = tp_shard_heads(layer.num_heads, layer.num_kv_heads, tp, rank)
    weight = layer.q_proj.weight
    has_bias = layer.q_proj.bias is not None
    shard = TensorParallelShard(
        layer.d_model,
        len(q_heads),
        len(kv_heads),
        head_dim=layer.head_dim,
        bias=has_bias,
        backend=layer.backend,
        device=weight.device,
        dtype=weight.dtype,
        all_reduce=all_reduce,
        group=group,
    )
    q_rows, kv_rows = _rows(q_heads, layer.head_dim), _rows(kv_heads, layer.head_dim)
    with torch.no_grad():
        for name, rows in (("q_proj", q_rows), ("k_proj", kv_rows), ("v_proj", kv_rows)):
            source, target = getattr(layer, name), getattr(shard, name)
            target.weight.copy_(source.weight[rows])
            if has_bias:
                target.bias.copy_(source.bias[rows])
        shard.o_proj.weight.copy_(layer.o_proj.weight[:, q_rows])
        if layer.o_proj.bias is not None and rank == 0:
            shard.o_proj.bias.copy_(layer.o_proj.bias)
    if rank != 0:
        shard.o_proj.register_parameter("bias", None)
    return shard


def all_reduce_call(
    tensor: torch.Tensor, group: dist.ProcessGroup | None = None
) -> Callable[[], torch.Tensor]:
    """The all-reduce (sum) of `tensor` in place over `group` alone, as a fixed call, to time
    the communication of a step apart from its computation. Each call sums again what the
    previous left, so the values are meaningless after the first."""
    _check_initialized()

    def call() -> torch.Tensor:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group)
        return tensor

    return call


def _check_initialized() -> None:
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("tensor-parallel calls need torch.distributed initialised first")
