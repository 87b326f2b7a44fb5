"""Attention: an explicit reference, and MHA / GQA / MQA modules with a KV cache.

Masks follow torch.nn.functional.scaled_dot_product_attention: a boolean mask is True
where a query may attend; a float mask is added to the scores. `is_causal` is aligned
bottom-right: the queries are taken to be the last Lq of the Lk key positions, which is
what chunked prefill and decode over a cache need (for Lq == Lk it is the usual mask).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from ..model.shapes import AttentionShape, check_int
from ..modules.kv_cache import KVCache

#: Attention of single-token queries (batch, Hq, 1, D) over K/V (batch, Hkv, keys, D).
DecodeAttention = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
#: Causal attention of (batch, Hq, L, D) queries over K/V (batch, Hkv, L, D).
CausalAttention = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
#: A projection resolved once: (..., in_features) -> (..., out_features).
Projection = Callable[[torch.Tensor], torch.Tensor]

#: oneDNN's linear with prepacked weights (what torch.compile uses on the CPU) is available.
_ONEDNN_LINEAR = torch.backends.mkldnn.is_available() and all(
    hasattr(torch.ops.mkldnn, op) for op in ("_reorder_linear_weight", "_linear_pointwise")
)
#: GroupedQueryAttention.projection_path values.
PACKED_PATH, TORCH_PATH = "onednn-packed", "torch"


class _PackedWeight(NamedTuple):
    """A projection weight reordered for oneDNN, and what it was reordered from."""

    weight: torch.Tensor  # the parameter itself: its identity
    source: torch.Tensor  # an alias of the memory packed, kept so no new weight can reuse it
    version: int  # weight._version when packed
    packed: torch.Tensor

    def matches(self, weight: torch.Tensor) -> bool:
        return (
            self.weight is weight
            and self.version == weight._version
            and self.source.data_ptr() == weight.data_ptr()
            and self.source.shape == weight.shape
            and self.source.stride() == weight.stride()
        )


def _packable(proj: nn.Linear) -> bool:
    """Whether the packed path can serve `proj`: float32 on the CPU, and a weight whose
    in-place changes are seen. An inference tensor (made under torch.inference_mode) keeps
    no version counter, so a packed copy of it could go stale without notice."""
    weight, bias = proj.weight, proj.bias
    return (
        weight.device.type == "cpu"
        and weight.dtype == torch.float32
        and not weight.is_inference()
        and (bias is None or (bias.device.type == "cpu" and bias.dtype == torch.float32))
    )


def _packed_linear(
    x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x.contiguous(), packed, bias, "none", [], "")


def _bound_packed(packed: torch.Tensor, bias: torch.Tensor | None) -> Projection:
    return lambda x: _packed_linear(x, packed, bias)


def _plain_linear(weight: torch.Tensor, bias: torch.Tensor | None) -> Projection:
    return lambda x: F.linear(x, weight, bias)


def causal_mask(q_len: int, k_len: int, device: torch.device | str | None = None) -> torch.Tensor:
    """Boolean (q_len, k_len) mask, bottom-right aligned: query i sees keys
    j <= i + k_len - q_len."""
    rows = torch.arange(q_len, device=device).unsqueeze(1)
    cols = torch.arange(k_len, device=device).unsqueeze(0)
    return cols <= rows + (k_len - q_len)


def merge_masks(
    attn_mask: torch.Tensor | None, is_causal: bool, q_len: int, k_len: int, device
) -> torch.Tensor | None:
    """One mask (boolean or additive float) equivalent to `attn_mask` plus the causal mask."""
    if not is_causal:
        return attn_mask
    causal = causal_mask(q_len, k_len, device)
    if attn_mask is None:
        return causal
    if attn_mask.dtype == torch.bool:
        return attn_mask & causal
    return attn_mask.masked_fill(~causal, float("-inf"))


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
) -> torch.Tensor:
    """The explicit reference: softmax(q @ k^T * scale + mask) @ v.

    q (..., Lq, D), k (..., Lk, D), v (..., Lk, Dv); scale defaults to 1/sqrt(D). Softmax
    runs in float32 for half-precision inputs. A query row whose keys are all masked out
    yields zeros (not NaN): it attends to nothing.
    """
    q_len, k_len = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    compute_dtype = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    scores = (q.to(compute_dtype) @ k.to(compute_dtype).transpose(-2, -1)) * scale
    mask = merge_masks(attn_mask, is_causal, q_len, k_len, q.device)
    if mask is not None:
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        else:
            scores = scores + mask.to(compute_dtype)
    probs = torch.softmax(scores, dim=-1)
    if mask is not None:
        probs = probs.masked_fill(torch.isneginf(scores).all(dim=-1, keepdim=True), 0.0)
    return (probs @ v.to(compute_dtype)).to(q.dtype)


def grouped_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The explicit reference for single-token queries, in float32: q (batch, Hq, 1, D)
    attends K/V (batch, Hkv, keys, D), query head h using KV head h // (Hq / Hkv). The
    groups are folded into the query dimension, so K/V are never expanded."""
    batch, heads, _, dim = q.shape
    kv_heads = k.shape[1]
    q32 = q.float().reshape(batch, kv_heads, heads // kv_heads, dim)
    scores = (q32 @ k.float().transpose(-2, -1)) / math.sqrt(dim)
    out = torch.softmax(scores, dim=-1) @ v.float()
    return out.reshape(batch, heads, 1, dim)


def folded_decode(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """torch's fused attention for single-token queries, each KV head read once for its
    whole group: q (B, Hq, 1, D) is viewed as (B, Hkv, G, D), G queries per KV head.
    `attn_mask` (broadcastable to (B, Hq, 1, keys)) is folded the same way."""
    batch, heads, _, dim = q.shape
    kv_heads = k.shape[1]
    folded = q.view(batch, kv_heads, heads // kv_heads, dim)
    if attn_mask is not None:
        keys = k.shape[2]
        attn_mask = attn_mask.expand(batch, heads, 1, keys).reshape(
            batch, kv_heads, heads // kv_heads, keys
        )
    out = F.scaled_dot_product_attention(folded, k, v, attn_mask=attn_mask)
    return out.reshape(batch, heads, 1, dim)


def naive_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
) -> torch.Tensor:
    """The textbook way: K/V (batch, Hkv, keys, D) expanded to every query head with
    repeat_interleave (when there are fewer of them), then the explicit reference."""
    groups = q.shape[1] // k.shape[1]
    if groups > 1:
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    return scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal)


def naive_decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return naive_attention(q, k, v)


def sdpa_causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """torch's fused causal attention, grouping query heads inside the kernel."""
    gqa = q.shape[1] != k.shape[1]
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)


def naive_causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return naive_attention(q, k, v, is_causal=True)


def sdpa_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
) -> torch.Tensor:
    """torch's fused attention, reading each KV head once for its group of query heads.

    Decode (one query): the G query heads of each KV head are folded into the
    query-length dimension, q (B, Hkv*G, 1, D) -> (B, Hkv, G, D), and attend to K/V
    (B, Hkv, Lk, D) as they are. Longer queries use `enable_gqa`, which does the same
    grouping inside the kernel; masks stay broadcastable and are never expanded.
    """
    q_len, k_len, groups = q.shape[2], k.shape[2], q.shape[1] // k.shape[1]
    if q_len == 1:
        is_causal = False  # the one query is the last position: it sees every key
    mask = dead_rows = None
    if attn_mask is not None or (is_causal and q_len != k_len):
        mask = merge_masks(attn_mask, is_causal, q_len, k_len, q.device)
        dead = ~mask if mask.dtype == torch.bool else torch.isneginf(mask)
        dead_rows = dead.all(dim=-1, keepdim=True)  # rows that see no key: zeros
        if mask.dtype != torch.bool:
            mask = mask.to(q.dtype)
    if q_len == 1 and groups > 1:
        out = folded_decode(q, k, v, mask)
    else:
        out = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            is_causal=is_causal and mask is None,
            enable_gqa=groups > 1,
        )
    return out if dead_rows is None else out.masked_fill(dead_rows, 0.0)


#: Each backend's attention in a forward: queries of any length, with a mask or causal.
BACKEND_FORWARD: dict[str, Callable[..., torch.Tensor]] = {
    "sdpa": sdpa_attention,
    "naive": naive_attention,
}
#: Each backend's attention for decode steps and for causal forwards.
BACKEND_ATTENTION: dict[str, tuple[DecodeAttention, CausalAttention]] = {
    "sdpa": (folded_decode, sdpa_causal),
    "naive": (naive_decode, naive_causal),
}
#: The backends a layer computes its attention with.
BACKENDS = tuple(BACKEND_FORWARD)


class GroupedQueryAttention(nn.Module):
    """Attention with `num_heads` query heads sharing `num_kv_heads` K/V heads.

    Query head h uses KV head h // (num_heads // num_kv_heads), the grouping of
    `repeat_interleave`. Backends give the same outputs:

    - "naive": K/V expanded to num_heads with repeat_interleave, then the explicit reference
      (the textbook way; it copies every KV head once per query head in its group);
    - "sdpa": torch's fused scaled_dot_product_attention; each KV head is read once for
      its whole group of query heads (folded into the query dimension for decode,
      `enable_gqa` otherwise) and no expanded K/V is ever built.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        num_kv_heads: int,
        head_dim: int | None = None,
        bias: bool = False,
        backend: str = "sdpa",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        self.shape = AttentionShape(d_model, num_heads, num_kv_heads, head_dim, bias)
        self.d_model = d_model
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim: int = self.shape.head_dim  # type: ignore[assignment]
        self.group_size = self.shape.group_size
        self.backend = backend
        factory = {"device": device, "dtype": dtype}
        self.q_proj = nn.Linear(d_model, self.shape.q_dim, bias=bias, **factory)
        self.k_proj = nn.Linear(d_model, self.shape.kv_dim, bias=bias, **factory)
        self.v_proj = nn.Linear(d_model, self.shape.kv_dim, bias=bias, **factory)
        self.o_proj = nn.Linear(self.shape.q_dim, d_model, bias=bias, **factory)
        self._packed: dict[int, _PackedWeight] = {}  # see _project
        self._last_path: str | None = None

    @property
    def variant(self) -> str:
        return self.shape.variant

    def copied(self) -> GroupedQueryAttention:
        """A copy with weights of its own, in new memory; its weights are packed for it
        when it first runs (their packed copies, oneDNN's opaque tensors, are not
        copied). Made outside inference mode, whatever the caller's, so that its weights
        are parameters as the layer's are: copied under it, they were inference tensors
        that still require grad, for which matmul does not fold a (batch, tokens, d)
        input into one product but copies the transposed weight for a bmm on every call
        (a bfloat16 step of d_model 4,096 took 30 times its time)."""
        with torch.inference_mode(False):
            return copy.deepcopy(self, memo={id(self._packed): {}})

    @property
    def projection_path(self) -> str:
        """How the most recent forward ran its q/k/v/o projections: "onednn-packed"
        (oneDNN with prepacked weights, see _project) or "torch" (nn.Linear). Before the
        first forward: the path a float32 CPU input under inference mode would take."""
        if self._last_path is not None:
            return self._last_path
        return PACKED_PATH if self._weights_packable() else TORCH_PATH

    def _projections(self) -> tuple[nn.Linear, ...]:
        return (self.q_proj, self.k_proj, self.v_proj, self.o_proj)

    def _weights_packable(self) -> bool:
        return _ONEDNN_LINEAR and all(_packable(p) for p in self._projections())

    def forward(
        self,
        x: torch.Tensor,
        context: torch.Tensor | None = None,
        *,
        attn_mask: torch.Tensor | None = None,
        is_causal: bool = False,
        kv_cache: KVCache | None = None,
        start_pos: int | None = None,
    ) -> torch.Tensor:
        """x (batch, seq, d_model) -> (batch, seq, d_model).

        `context` (batch, ctx_seq, d_model) makes it cross-attention: K/V come from it.
        With `kv_cache`, the new K/V are written at `start_pos` (default: the cache's
        length) and the queries attend to everything cached up to the new tokens;
        `is_causal` then masks bottom-right, which is right for prefill, chunked prefill
        and single-token decode. `attn_mask` must broadcast to (batch, num_heads, seq, keys).
        """
        batch, q_len, _ = x.shape
        source = x if context is None else context
        kv_len = source.shape[1]
        packed = self._use_packed(x, source)
        q = self._project(self.q_proj, x, packed).view(batch, q_len, self.num_heads, -1)
        k = self._project(self.k_proj, source, packed).view(batch, kv_len, self.num_kv_heads, -1)
        v = self._project(self.v_proj, source, packed).view(batch, kv_len, self.num_kv_heads, -1)
        q = q.transpose(1, 2)
        k, v = k.transpose(1, 2), v.transpose(1, 2)
        if kv_cache is not None:
            k, v = kv_cache.update(k, v, start_pos)
        out = BACKEND_FORWARD[self.backend](q, k, v, attn_mask, is_causal)
        out = out.transpose(1, 2).reshape(batch, q_len, self.shape.q_dim)
        return self._project(self.o_proj, out, packed)

    def _use_packed(self, x: torch.Tensor, source: torch.Tensor) -> bool:
        """Whether this forward runs every projection on prepacked weights (see _project):
        float32 CPU inputs, no autograd, and weights whose staleness can be detected. The
        choice is what projection_path reports."""
        inputs = not torch.is_grad_enabled() and all(
            t.device.type == "cpu" and t.dtype == torch.float32 for t in (x, source)
        )
        packed = inputs and self._weights_packable()
        if inputs and not packed:
            self._packed.clear()  # copies of weights that can no longer be packed
        self._last_path = PACKED_PATH if packed else TORCH_PATH
        return packed

    def _project(self, proj: nn.Linear, x: torch.Tensor, packed: bool) -> torch.Tensor:
        """proj(x); with `packed`, through oneDNN with a prepacked weight.

        PyTorch's default CPU GEMM is slow for the few rows of a decode step (a handful of
        tokens against a d_model x d_model weight), and a decode step is dominated by
        reading those weights. oneDNN's inner product on a weight reordered once into its
        blocked layout reads them about twice as fast, with the same float32 arithmetic.

        The packed copy is used again only while the weight is the same tensor, over the
        same memory, at the same version: an in-place change (an optimiser step,
        load_state_dict, mul_ under no_grad or inference_mode), an assignment to `.data`
        or a new parameter repacks it. Only changes made in place through `.data`, which
        bypass the version counter as they bypass autograd, go unseen.
        """
        if not packed:
            return proj(x)
        return _packed_linear(x, self._packed_weight(proj), proj.bias)

    def _packed_weight(self, proj: nn.Linear) -> torch.Tensor:
        """proj's weight reordered for oneDNN, packed again when it has changed."""
        weight = proj.weight
        cached = self._packed.get(id(proj))
        if cached is None or not cached.matches(weight):
            source = weight.detach()
            cached = _PackedWeight(
                weight, source, weight._version, torch.ops.mkldnn._reorder_linear_weight(source)
            )
            self._packed[id(proj)] = cached
        return cached.packed

    # --- fixed calls: validated once, then nothing but the computation -------------------

    def resolved_projections(self, x: torch.Tensor) -> tuple[Projection, ...]:
        """q, k, v and o projections for inputs like `x`, resolved once (the packed path
        or nn.Linear's, see _project); sets projection_path. The weights must not change
        while the projections are in use."""
        packed = self._use_packed(x, x)
        if not packed:
            return tuple(_plain_linear(p.weight, p.bias) for p in self._projections())
        return tuple(_bound_packed(self._packed_weight(p), p.bias) for p in self._projections())

    def decode_step(
        self,
        x: torch.Tensor,
        cache: KVCache,
        position: int,
        attend: DecodeAttention | None = None,
    ) -> Callable[[], torch.Tensor]:
        """One decode step at a fixed context, checked once here: the returned call
        projects x (batch, 1, d_model), writes its K/V at `position` of `cache` and
        attends the position + 1 keys [0, position], with no checks or branches inside.
        Calling it again redoes the same step (it writes the same slot). `attend` is
        this module's backend's decode attention unless given."""
        batch = self._check_input(x, 1)
        check_int("position", position, minimum=0)
        self._check_cache(cache, batch, position + 1, x)
        q_proj, k_proj, v_proj, o_proj = self.resolved_projections(x)
        attend = attend or BACKEND_ATTENTION[self.backend][0]
        heads, kv_heads, dim = self.num_heads, self.num_kv_heads, self.head_dim
        k_slot, v_slot = (
            cache.k[:, :, position : position + 1],
            cache.v[:, :, position : position + 1],
        )
        keys, values = cache.k[:, :, : position + 1], cache.v[:, :, : position + 1]
        width = self.shape.q_dim

        def step() -> torch.Tensor:
            q = q_proj(x).view(batch, heads, 1, dim)
            k_slot.copy_(k_proj(x).view(batch, kv_heads, 1, dim))
            v_slot.copy_(v_proj(x).view(batch, kv_heads, 1, dim))
            return o_proj(attend(q, keys, values).reshape(batch, 1, width))

        return step

    def causal_call(
        self,
        x: torch.Tensor,
        attend: CausalAttention | None = None,
        cache: KVCache | None = None,
    ) -> Callable[[], torch.Tensor]:
        """One causal forward over all of x (batch, L, d_model), checked once here. With
        `cache`, the K/V of the L tokens are written at [0, L) of it: a prefill. The
        call returns the layer's output for every position."""
        batch = self._check_input(x, None)
        length = x.shape[1]
        q_proj, k_proj, v_proj, o_proj = self.resolved_projections(x)
        attend = attend or BACKEND_ATTENTION[self.backend][1]
        heads, kv_heads, dim, width = (
            self.num_heads,
            self.num_kv_heads,
            self.head_dim,
            self.shape.q_dim,
        )

        def heads_of(t: torch.Tensor, count: int) -> torch.Tensor:
            return t.view(batch, length, count, dim).transpose(1, 2)

        if cache is None:

            def forward() -> torch.Tensor:
                q, k, v = (
                    heads_of(q_proj(x), heads),
                    heads_of(k_proj(x), kv_heads),
                    heads_of(v_proj(x), kv_heads),
                )
                return o_proj(attend(q, k, v).transpose(1, 2).reshape(batch, length, width))

            return forward
        self._check_cache(cache, batch, length, x)
        k_dst, v_dst = cache.k[:, :, :length], cache.v[:, :, :length]

        def prefill() -> torch.Tensor:
            q = heads_of(q_proj(x), heads)
            k_dst.copy_(heads_of(k_proj(x), kv_heads))
            v_dst.copy_(heads_of(v_proj(x), kv_heads))
            return o_proj(attend(q, k_dst, v_dst).transpose(1, 2).reshape(batch, length, width))

        return prefill

    def _check_input(self, x: torch.Tensor, length: int | None) -> int:
        """x's batch size, after checking it is (batch, length, d_model)."""
        if x.dim() != 3 or x.shape[2] != self.d_model or (length and x.shape[1] != length):
            tokens = length or "tokens"
            raise ValueError(
                f"expected x of shape (batch, {tokens}, {self.d_model}), got {tuple(x.shape)}"
            )
        return x.shape[0]

    def _check_cache(self, cache: KVCache, batch: int, keys: int, x: torch.Tensor) -> None:
        b, h, length, d = cache.k.shape
        if (b, h, d) != (batch, self.num_kv_heads, self.head_dim):
            raise ValueError(
                f"cache of shape {tuple(cache.k.shape)} does not fit batch {batch}, "
                f"{self.num_kv_heads} KV heads of {self.head_dim}"
            )
        if keys > length:
            raise ValueError(f"{keys} keys do not fit a cache of {length} tokens")
        if cache.k.dtype != x.dtype or cache.k.device != x.device:
            raise ValueError(
                f"cache holds {cache.k.dtype} on {cache.k.device}, x is {x.dtype} on {x.device}"
            )


class MultiHeadAttention(GroupedQueryAttention):
    """Multi-head attention: one KV head per query head (num_kv_heads == num_heads)."""

    def __init__(self, d_model: int, num_heads: int, **kwargs) -> None:
        super().__init__(d_model, num_heads, num_heads, **kwargs)


class MultiQueryAttention(GroupedQueryAttention):
    """Multi-query attention: all query heads share one KV head (num_kv_heads == 1)."""

    def __init__(self, d_model: int, num_heads: int, **kwargs) -> None:
        super().__init__(d_model, num_heads, 1, **kwargs)
