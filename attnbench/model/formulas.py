"""The analytic model: every computed (not measured) number attnbench reports.

Pure functions on integers, no tensors. Every command and every test takes its formulas
from here, so a number can only be wrong in one place.

Notation (as in the formulas cited below): B batch, Hq query heads, Hkv KV heads,
G = Hq / Hkv, D head_dim, d d_model, L layers, S sequence length, b bytes per element.

- Projection parameters: q_proj d*Hq*D (+Hq*D bias), k_proj and v_proj d*Hkv*D (+Hkv*D)
  each, o_proj Hq*D*d (+d).
- KV cache: see capacity.py.
- Attention FLOPs: two matmuls (QK^T and PV) of 2*D FLOPs per visible (query, key) pair.
  Projections: 2 FLOPs per weight per token.
- One cached step of a sequence feeding q new tokens that attend k keys (the new ones
  included: k - q were cached before) moves at least the KV read (2*Hkv*k*D*b), the new
  K/V written (2*Hkv*q*D*b) and the activations of its q tokens; a step over a batch moves
  the weights once besides. A decode step over S cached tokens is q = 1, k = S + 1.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from ..errors import FieldError
from .batches import BatchSpec
from .capacity import kv_cache_bytes
from .dtypes import dtype_bytes
from .shapes import AttentionShape


def projection_params(shape: AttentionShape) -> dict[str, int]:
    """Parameters of q_proj, k_proj, v_proj and o_proj (weights plus optional bias)."""
    d, bias = shape.d_model, int(shape.bias)
    return {
        "q_params": d * shape.q_dim + bias * shape.q_dim,
        "k_params": d * shape.kv_dim + bias * shape.kv_dim,
        "v_params": d * shape.kv_dim + bias * shape.kv_dim,
        "o_params": shape.q_dim * d + int(shape.out_bias) * d,
    }


def attention_params(shape: AttentionShape) -> int:
    """All parameters of one attention layer."""
    return sum(projection_params(shape).values())


def visible_pairs(q_len: int, k_len: int, causal: bool) -> int:
    """(query, key) pairs attended. Causal masks are aligned bottom-right: query r of the
    last q_len positions sees k_len - q_len + r + 1 keys, so a causal step holds at least
    its own q_len keys (FieldError naming kv_len otherwise)."""
    if not causal:
        return q_len * k_len
    if k_len < q_len:
        raise FieldError("kv_len", k_len, f"fewer keys than the step's {q_len} causal queries")
    return q_len * (k_len - q_len) + q_len * (q_len + 1) // 2


def attention_core_flops(
    shape: AttentionShape, batch: int, q_len: int, k_len: int, causal: bool
) -> int:
    """FLOPs of QK^T and PV: 2 matmuls * 2*D FLOPs per visible pair, for every query head."""
    pairs = visible_pairs(q_len, k_len, causal)
    return 4 * batch * shape.num_heads * shape.head_dim * pairs  # type: ignore[operator]


def matmul_flops(m: int, n: int, k: int) -> int:
    """FLOPs of an (m x k) @ (k x n) matmul: one multiply and one add per product."""
    return 2 * m * n * k


def projection_flops(shape: AttentionShape, batch: int, q_tokens: int, kv_tokens: int) -> int:
    """FLOPs of the four projections: 2 per weight per token (bias adds are not counted)."""
    d = shape.d_model
    q_and_o = 2 * matmul_flops(batch * q_tokens, shape.q_dim, d)
    k_and_v = 2 * matmul_flops(batch * kv_tokens, shape.kv_dim, d)
    return q_and_o + k_and_v


def forward_flops(shape: AttentionShape, batch: int, q_len: int, k_len: int, causal: bool) -> int:
    """FLOPs of one forward pass: q_len new tokens attending k_len keys (new ones included).

    Prefill: q_len == k_len == prompt. Cached decode step: q_len 1, k_len = context + 1.
    """
    return projection_flops(shape, batch, q_len, q_len) + attention_core_flops(
        shape, batch, q_len, k_len, causal
    )


def weight_bytes(shape: AttentionShape, dtype: str) -> int:
    return attention_params(shape) * dtype_bytes(dtype)


def step_traffic_bytes(
    shape: AttentionShape, batch: int, q_len: int, kv_len: int, dtype: str
) -> int:
    """Bytes one cached step of `batch` sequences moves at the least, weights aside: each
    feeds `q_len` new tokens that attend `kv_len` keys, the new ones included. KV read
    (all kv_len keys: the new K/V are written, then read back by the attention) + new K/V
    written + activations of the q_len tokens (x read, q, attention output and layer
    output)."""
    b = dtype_bytes(dtype)
    kv_read = 2 * batch * shape.kv_dim * kv_len * b
    kv_write = 2 * batch * shape.kv_dim * q_len * b
    activations = batch * q_len * (2 * shape.d_model + 2 * shape.q_dim) * b
    return kv_read + kv_write + activations


def cached_step_bytes(shape: AttentionShape, batch: int, context_len: int, dtype: str) -> int:
    """Bytes one cached decode step moves at the least, with `context_len` tokens already
    cached: weights + the traffic of one new token attending context_len + 1 keys."""
    return weight_bytes(shape, dtype) + step_traffic_bytes(shape, batch, 1, context_len + 1, dtype)


@dataclass(frozen=True)
class StepCounts:
    """The analytic counts of one cached step of one layer over a batch of sequences."""

    #: Bytes moved at the least: the weights once, and each sequence's step_traffic_bytes.
    bytes: int
    #: forward_flops of each sequence, causal (bottom-right).
    flops: int
    #: The KV cache held after the step: every sequence's kv_len tokens.
    kv_bytes: int


def batch_step_counts(shape: AttentionShape, batch: BatchSpec, dtype: str) -> StepCounts:
    """Counts of one cached step over `batch`, sequences of one (q_len, kv_len) counted
    together. A uniform decode batch (B sequences of q_len 1, kv_len S + 1) moves and
    computes what step_totals(shape, B, S, dtype, cached=True) gives."""
    groups = Counter(batch.sequences)
    traffic = sum(step_traffic_bytes(shape, n, s.q_len, s.kv_len, dtype) for s, n in groups.items())
    flops = sum(forward_flops(shape, n, s.q_len, s.kv_len, causal=True) for s, n in groups.items())
    head_dim: int = shape.head_dim  # type: ignore[assignment]
    # a plain cache is linear in tokens: the batch's kv_tokens as one sequence's
    kv_bytes = kv_cache_bytes(1, 1, batch.kv_tokens, shape.num_kv_heads, head_dim, dtype)
    return StepCounts(weight_bytes(shape, dtype) + traffic, flops, kv_bytes)


def score_matrix_bytes(
    shape: AttentionShape, batch: int, q_len: int, k_len: int, element_bytes: int
) -> int:
    """Bytes of the attention scores materialised whole: B*Hq*q_len*k_len elements."""
    return batch * shape.num_heads * q_len * k_len * element_bytes


def uncached_step_bytes(shape: AttentionShape, batch: int, prefix_len: int, dtype: str) -> int:
    """Bytes of one decode step without a cache, re-running the layer over `prefix_len`
    tokens: weights + x read + K/V written and read back + q and attention output written
    and read + layer output (only the last row is needed, all rows are counted).
    """
    b = dtype_bytes(dtype)
    tokens = batch * prefix_len
    kv = 2 * 2 * shape.kv_dim * tokens * b
    q_and_attn = 2 * 2 * shape.q_dim * tokens * b
    x_and_out = 2 * shape.d_model * tokens * b
    return weight_bytes(shape, dtype) + kv + q_and_attn + x_and_out


def step_totals(
    shape: AttentionShape, batch: int, context_len: int, dtype: str, cached: bool
) -> tuple[int, int]:
    """(bytes, FLOPs) of one decode step at a fixed context of `context_len` tokens: it
    feeds token context_len and attends context_len + 1 keys. Cached: the new token's
    projections and attention over the cache. Uncached: the layer re-runs causally over
    all context_len + 1 tokens."""
    n = context_len + 1
    if cached:
        return cached_step_bytes(shape, batch, context_len, dtype), forward_flops(
            shape, batch, 1, n, causal=True
        )
    return uncached_step_bytes(shape, batch, n, dtype), forward_flops(shape, batch, n, n, True)


def prefill_flops(shape: AttentionShape, batch: int, prompt_len: int) -> int:
    """FLOPs of prefilling `prompt_len` tokens: one causal forward over all of them."""
    return forward_flops(shape, batch, prompt_len, prompt_len, causal=True)


def decode_totals(
    shape: AttentionShape, batch: int, prompt_len: int, gen_len: int, dtype: str, cached: bool
) -> tuple[int, int]:
    """Total (bytes, FLOPs) of a generation of `gen_len` tokens after a prompt of
    `prompt_len`: step i (0-based) is the step at context prompt_len + i (step_totals)."""
    steps = [step_totals(shape, batch, prompt_len + i, dtype, cached) for i in range(gen_len)]
    return sum(b for b, _ in steps), sum(f for _, f in steps)
