"""The serving workloads of a decode point: a batch given sequence by sequence
(`batch_spec`: ragged, speculative, mixed; model.batches) and a paged KV cache
(`block_size`; modules.paged_cache).

A point with a batch spec times one step of the whole batch: every sequence's new tokens
projected together, written after its cached keys, and attended with the bottom-right
causal mask by the provider's ragged implementation (modules.ragged), checked against the
explicit reference of each sequence. A point with a block size times the decode step of
a uniform batch over a paged copy of the point's cache, with the provider's paged decode;
its comparison with the same point over the contiguous cache is `x_of_contiguous`.
Both are cached steps alone: no prefill, no generation, no step without the cache.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from ..errors import FieldError
from ..model.batches import BatchSpec, parse_batch
from ..model.capacity import KvFormat, PagingReport, paging_report, token_layout
from ..model.dtypes import dtype_bytes
from ..modules.attention import GroupedQueryAttention
from ..modules.paged_cache import PagedKVCache, decode_step
from ..modules.providers import PROVIDERS
from ..modules.ragged import RaggedInputs, ragged_inputs, ragged_step
from ..modules.workload import DecodeInputs, Unsupported, Workload

if TYPE_CHECKING:
    from .decode import DecodePoint

#: The seed of a batch's inputs (decode.SEED's role for a uniform batch).
SEED = 3


@lru_cache(maxsize=256)
def batch_of(text: str) -> BatchSpec:
    """The batch a spec names (parsed once per spec)."""
    return parse_batch(text)


def check(point: DecodePoint) -> None:
    """Raise, naming the field, for a serving point that cannot run: a malformed spec, a
    spec or a paged cache with what they replace or do not take."""
    if point.batch_spec is not None:
        batch_of(point.batch_spec)
        if point.block_size is not None:
            raise FieldError(
                "block_size",
                point.block_size,
                "pages the cache of a uniform batch, not of a batch spec",
            )
    if point.batch_spec is None and point.block_size is None:
        return
    for name, value in (("gen_len", point.gen_len), ("tp", point.tp - 1)):
        if value:
            what = "a batch spec" if point.batch_spec is not None else "a paged cache"
            raise FieldError(name, getattr(point, name), f"is not timed with {what}")


def is_serving(point: DecodePoint) -> bool:
    return point.batch_spec is not None or point.block_size is not None


def batch_inputs(point: DecodePoint, layer: GroupedQueryAttention) -> RaggedInputs:
    """The inputs of a batch spec's step: its sequences' packed tokens and padded caches."""
    sequences = [(s.q_len, s.kv_len) for s in batch_of(point.batch_spec).sequences]  # type: ignore[arg-type]
    return ragged_inputs(layer, sequences, seed=SEED)


def workload(point: DecodePoint, inputs: DecodeInputs | RaggedInputs) -> Workload:
    """The provider's step for a serving point; Unsupported, saying why, for a provider
    that has no ragged or no paged implementation."""
    provider = PROVIDERS[point.provider]
    if isinstance(inputs, RaggedInputs):
        if provider.ragged is None:
            raise Unsupported(f"{provider.summary} takes uniform batches only")
        path = inputs.layer.projection_path
        return Workload(step=ragged_step(inputs, provider.ragged()), projection_path=path)
    if provider.paged is None:
        raise Unsupported(f"{provider.summary} reads contiguous caches only")
    if inputs.cache is None:
        raise Unsupported("a paged cache is read by cached steps only")
    context = inputs.context_len
    cache = PagedKVCache.copy_of(inputs.cache, context + 1, point.block_size)  # type: ignore[arg-type]
    x = inputs.x[:, context : context + 1].contiguous()
    step = decode_step(inputs.layer, x, cache, context, provider.paged)
    return Workload(step=step, projection_path=inputs.layer.projection_path)


def paging(point: DecodePoint) -> PagingReport:
    """The bytes of the point's paged cache after its step (context + 1 tokens per
    sequence) as `kvmem` counts them, allocated and used."""
    shape, fmt = point.shape, KvFormat(point.dtype)
    layout = token_layout(shape.num_heads, shape.num_kv_heads, shape.head_dim, fmt)  # type: ignore[arg-type]
    return paging_report(layout, [None], {point.prompt_len + 1: point.batch}, point.block_size)


def batch_bytes(point: DecodePoint) -> int:
    """Bytes a batch spec's step allocates beyond the weights, at the least: the packed
    tokens and their q, K, V, attention output and layer output, the padded K/V caches
    (batch * longest kv_len) and, for a provider that scores explicitly, the scores and
    probabilities of the padded batch."""
    shape, b = point.shape, dtype_bytes(point.dtype)
    batch = batch_of(point.batch_spec)  # type: ignore[arg-type]
    tokens = batch.query_tokens * (2 * shape.d_model + 2 * shape.q_dim + 2 * shape.kv_dim) * b
    caches = 2 * batch.batch_size * batch.max_kv_len * shape.kv_dim * b
    longest_q = max(s.q_len for s in batch.sequences)
    scores = PROVIDERS[point.provider].score_bytes * 2 * shape.num_heads * longest_q
    return tokens + caches + scores * batch.batch_size * batch.max_kv_len


def paged_bytes(point: DecodePoint) -> int:
    """Bytes of a paged point's copy of its cache: its whole blocks."""
    return paging(point).paged_bytes or 0
