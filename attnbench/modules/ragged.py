"""One attention step over a batch of sequences of different query and KV lengths.

A serving step mixes sequences: decodes (one new token over a cache), speculative steps
(a few tokens), prefills and chunks of prefills. Sequence i brings q_len_i new tokens and
attends kv_len_i keys, the new ones included: its first kv_len_i - q_len_i keys are
already cached. Query row r (0-based) of sequence i sees keys 0 .. kv_len_i - q_len_i + r:
the causal mask aligned bottom-right.

Layout, the one varlen kernels and serving engines use:

- the new tokens of every sequence packed one after the other, x (total_q, d_model), with
  `cu_seqlens_q` (batch + 1,) their offsets: each projection is one matmul for the batch;
- one padded cache per K and V, (batch, max_kv, Hkv, D), token-major like
  flash-attn's `k_cache` with `cache_seqlens`: sequence i's keys are at [i, :kv_len_i]. A
  step writes its new K/V at [i, kv_len_i - q_len_i : kv_len_i] in one index_copy_ over
  precomputed slots (vLLM's slot mapping). The buffer is at once SDPA's padded
  (batch, Hkv, max_kv, D) (a transpose) and flex_attention's packed (1, Hkv,
  batch * max_kv, D) (a view), so no implementation copies the cache.

An implementation prepares, outside the timed call, whatever it needs for a batch (masks,
index tensors, a compiled kernel) and returns the attention itself: packed queries
(total_q, Hq, D) -> outputs (total_q, Hq, D) over the cache as the step has written it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from ..model.shapes import check_int
from .attention import GroupedQueryAttention, naive_attention
from .workload import Unsupported, refusals, tensor_bytes

#: Attention over a ragged batch: packed queries (total_q, Hq, D) -> (total_q, Hq, D).
RaggedAttention = Callable[[torch.Tensor], torch.Tensor]
#: Prepares a RaggedAttention for a batch's inputs (untimed).
Implementation = Callable[["RaggedInputs"], RaggedAttention]


@dataclass(frozen=True, eq=False)
class RaggedInputs:
    """One step's inputs: the layer, the sequences (q_len, kv_len), the packed new tokens
    x (total_q, d_model) and the padded caches (batch, max_kv, Hkv, D), each holding its
    sequence's kv_len - q_len cached keys first."""

    layer: GroupedQueryAttention
    sequences: tuple[tuple[int, int], ...]
    x: torch.Tensor
    k_cache: torch.Tensor
    v_cache: torch.Tensor

    def copied(self) -> RaggedInputs:
        """The same inputs in memory of their own: the layer's weights and the caches
        copied; the packed new tokens shared."""
        return replace(
            self,
            layer=self.layer.copied(),
            k_cache=self.k_cache.clone(),
            v_cache=self.v_cache.clone(),
        )

    def copied_bytes(self) -> int:
        """The bytes `copied` copies: the layer's weights and the caches."""
        return tensor_bytes([*self.layer.parameters(), self.k_cache, self.v_cache])

    @property
    def q_starts(self) -> list[int]:
        """cu_seqlens_q as integers: sequence i's tokens are x[q_starts[i]:q_starts[i + 1]]."""
        starts = [0]
        for q_len, _ in self.sequences:
            starts.append(starts[-1] + q_len)
        return starts

    @property
    def max_kv(self) -> int:
        return self.k_cache.shape[1]

    def slots(self) -> torch.Tensor:
        """Where each new token's K/V goes in the cache flattened to (batch * max_kv, ...)."""
        slots = [
            i * self.max_kv + kv_len - q_len + r
            for i, (q_len, kv_len) in enumerate(self.sequences)
            for r in range(q_len)
        ]
        return torch.tensor(slots, dtype=torch.long, device=self.x.device)


def check_sequences(sequences: Sequence[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """The sequences as a tuple, after checking each has 1 <= q_len <= kv_len."""
    if not sequences:
        raise ValueError("a ragged batch needs at least one sequence")
    for i, (q_len, kv_len) in enumerate(sequences):
        check_int(f"sequence {i}: q_len", q_len)
        check_int(f"sequence {i}: kv_len", kv_len)
        if kv_len < q_len:
            raise ValueError(
                f"sequence {i}: kv_len {kv_len} < q_len {q_len} (kv_len counts the new tokens)"
            )
    return tuple((q, kv) for q, kv in sequences)


def ragged_inputs(
    layer: GroupedQueryAttention, sequences: Sequence[tuple[int, int]], seed: int = 0
) -> RaggedInputs:
    """Seeded random inputs (never zeros) for `sequences` in the layer's dtype and device:
    the new tokens, and caches filled whole (cached keys and padding alike)."""
    sequences = check_sequences(sequences)
    weight = layer.q_proj.weight
    factory = {"dtype": weight.dtype, "device": weight.device}
    gen = torch.Generator(device=weight.device).manual_seed(seed)
    total_q = sum(q for q, _ in sequences)
    cache_shape = (
        len(sequences),
        max(kv for _, kv in sequences),
        layer.num_kv_heads,
        layer.head_dim,
    )
    x = torch.randn(total_q, layer.d_model, generator=gen, **factory)
    k_cache = torch.randn(cache_shape, generator=gen, **factory)
    v_cache = torch.randn(cache_shape, generator=gen, **factory)
    return RaggedInputs(layer, sequences, x, k_cache, v_cache)


def ragged_step(inputs: RaggedInputs, implementation: Implementation) -> Callable[[], torch.Tensor]:
    """The step, prepared once: projects the packed tokens (one matmul per projection),
    writes their K/V after each sequence's cache, attends with `implementation` and
    projects the output: (total_q, d_model). Calling it again redoes the same step."""
    layer, x = inputs.layer, inputs.x
    q_proj, k_proj, v_proj, o_proj = layer.resolved_projections(x)
    attend = implementation(inputs)
    total, heads, kv_heads, dim = x.shape[0], layer.num_heads, layer.num_kv_heads, layer.head_dim
    k_flat = inputs.k_cache.view(-1, kv_heads, dim)
    v_flat = inputs.v_cache.view(-1, kv_heads, dim)
    slots = inputs.slots()

    def step() -> torch.Tensor:
        q = q_proj(x).view(total, heads, dim)
        k_flat.index_copy_(0, slots, k_proj(x).view(total, kv_heads, dim))
        v_flat.index_copy_(0, slots, v_proj(x).view(total, kv_heads, dim))
        return o_proj(attend(q).reshape(total, heads * dim))

    return step


def _explicit(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """One sequence the explicit way in float32: q (q_len, Hq, D), K/V (kv_len, Hkv, D)
    expanded to Hq, softmax by hand, bottom-right causal mask -> (q_len, Hq, D) float32."""
    heads = (t.float().transpose(0, 1).unsqueeze(0) for t in (q, k, v))
    return naive_attention(*heads, is_causal=True)[0].transpose(0, 1)


def reference(inputs: RaggedInputs) -> RaggedAttention:
    """The ground truth: each sequence on its own, the explicit way (float32)."""
    spans = _spans(inputs)

    def attend(q: torch.Tensor) -> torch.Tensor:
        parts = [_explicit(q[start:end], k, v) for start, end, k, v in spans]
        return torch.cat(parts).to(q.dtype)

    return attend


def reference_step(inputs: RaggedInputs) -> torch.Tensor:
    """What the step must return, all in float32 from the layer's weights, the new tokens
    and the cached keys [0, kv_len - q_len) of each sequence (which a step never writes),
    without the step's cache writes: (total_q, d_model) in x's dtype."""
    layer, x = inputs.layer, inputs.x.float()
    heads, kv_heads, dim = layer.num_heads, layer.num_kv_heads, layer.head_dim

    def project(proj: torch.nn.Linear, count: int) -> torch.Tensor:
        bias = None if proj.bias is None else proj.bias.float()
        return F.linear(x, proj.weight.float(), bias).view(len(x), count, dim)

    q = project(layer.q_proj, heads)
    k, v = project(layer.k_proj, kv_heads), project(layer.v_proj, kv_heads)
    starts = inputs.q_starts
    parts = []
    for i, (q_len, kv_len) in enumerate(inputs.sequences):
        start, end, cached = starts[i], starts[i + 1], kv_len - q_len
        keys = torch.cat([inputs.k_cache[i, :cached].float(), k[start:end]])
        values = torch.cat([inputs.v_cache[i, :cached].float(), v[start:end]])
        parts.append(_explicit(q[start:end], keys, values))
    out = torch.cat(parts).reshape(len(x), heads * dim)
    o_bias = None if layer.o_proj.bias is None else layer.o_proj.bias.float()
    return F.linear(out, layer.o_proj.weight.float(), o_bias).to(inputs.x.dtype)


def _spans(inputs: RaggedInputs) -> list[tuple[int, int, torch.Tensor, torch.Tensor]]:
    """Per sequence: its rows of the packed queries and its keys and values
    (kv_len, Hkv, D), views of the caches."""
    starts = inputs.q_starts
    return [
        (starts[i], starts[i + 1], inputs.k_cache[i, :kv_len], inputs.v_cache[i, :kv_len])
        for i, (_, kv_len) in enumerate(inputs.sequences)
    ]


def _pinned(kernel: SDPBackend | None) -> AbstractContextManager:
    return sdpa_kernel([kernel]) if kernel is not None else nullcontext()


def _some_queries(inputs: RaggedInputs) -> torch.Tensor:
    """Packed queries to run an implementation once while preparing it."""
    layer, x = inputs.layer, inputs.x
    return torch.ones(len(x), layer.num_heads, layer.head_dim, dtype=x.dtype, device=x.device)


def _checked(
    inputs: RaggedInputs, attend: RaggedAttention, kernel: SDPBackend | None, how: str
) -> None:
    """Run `attend` once (untimed): Unsupported, with torch's reasons, if the kernel
    refuses the batch."""
    try:
        with refusals() as reasons:
            attend(_some_queries(inputs))
    except RuntimeError as error:
        why = "; ".join(dict.fromkeys([*reasons, str(error)]))
        name = f"the {kernel.name.lower()} SDPA kernel" if kernel is not None else "torch's SDPA"
        raise Unsupported(f"{name} cannot run {how}: {why}") from error


def padded_mask(inputs: RaggedInputs) -> torch.Tensor:
    """The boolean (batch, 1, max_q, max_kv) mask of the padded batch: bottom-right causal
    within each sequence, padding keys masked. A padding query row sees key 0 only, so no
    row is fully masked (kernels differ there); its output is dropped."""
    max_q = max(q for q, _ in inputs.sequences)
    rows = torch.arange(max_q, device=inputs.x.device).view(1, -1, 1)
    cols = torch.arange(inputs.max_kv, device=inputs.x.device).view(1, 1, -1)
    q_lens, kv_lens = (
        torch.tensor(lens, device=inputs.x.device).view(-1, 1, 1)
        for lens in zip(*inputs.sequences, strict=True)
    )
    real = (cols <= rows + kv_lens - q_lens) & (rows < q_lens)
    return (real | ((rows >= q_lens) & (cols == 0))).unsqueeze(1)


def sdpa_padded(kernel: SDPBackend | None = None) -> Implementation:
    """One SDPA call over the batch padded to the longest q and kv, with a boolean mask
    (bottom-right causal and padding; none when nothing is masked), on `kernel` (torch's
    choice when None). The queries are scattered into a padded buffer and gathered back
    inside the call: that is this way's cost. torch's CPU kernels, math and flash, both
    take the mask; a kernel that refuses it is Unsupported."""

    def prepare(inputs: RaggedInputs) -> RaggedAttention:
        layer, batch = inputs.layer, len(inputs.sequences)
        heads, dim, gqa = layer.num_heads, layer.head_dim, layer.group_size > 1
        max_q = max(q for q, _ in inputs.sequences)
        rows = [
            i * max_q + r for i, (q_len, _) in enumerate(inputs.sequences) for r in range(q_len)
        ]
        rows_t = torch.tensor(rows, dtype=torch.long, device=inputs.x.device)
        padded = inputs.x.new_zeros(batch * max_q, heads, dim)
        mask = padded_mask(inputs)
        mask = None if bool(mask.all()) else mask
        keys, values = inputs.k_cache.transpose(1, 2), inputs.v_cache.transpose(1, 2)

        def attend(q: torch.Tensor) -> torch.Tensor:
            padded.index_copy_(0, rows_t, q)
            q_pad = padded.view(batch, max_q, heads, dim).transpose(1, 2)
            with _pinned(kernel):
                out = F.scaled_dot_product_attention(
                    q_pad, keys, values, attn_mask=mask, enable_gqa=gqa
                )
            return out.transpose(1, 2).reshape(batch * max_q, heads, dim).index_select(0, rows_t)

        _checked(inputs, attend, kernel, "a padded batch with a boolean mask")
        return attend

    return prepare


def sdpa_per_sequence(kernel: SDPBackend | None = None) -> Implementation:
    """One SDPA call per sequence, what a user without varlen kernels writes: no mask for
    a single query (it sees every key), else torch's lower-right causal bias
    (torch.nn.attention.bias.causal_lower_right; `is_causal` aligns top-left)."""
    from torch.nn.attention.bias import causal_lower_right  # loads torch._dynamo: seconds

    def prepare(inputs: RaggedInputs) -> RaggedAttention:
        gqa = inputs.layer.group_size > 1
        calls = [
            (
                start,
                end,
                k.transpose(0, 1).unsqueeze(0),
                v.transpose(0, 1).unsqueeze(0),
                None if end - start == 1 else causal_lower_right(end - start, k.shape[0]),
            )
            for start, end, k, v in _spans(inputs)
        ]
        out = inputs.x.new_empty(len(inputs.x), inputs.layer.num_heads, inputs.layer.head_dim)

        def attend(q: torch.Tensor) -> torch.Tensor:
            with _pinned(kernel):
                for start, end, k, v, bias in calls:
                    o = F.scaled_dot_product_attention(
                        q[start:end].transpose(0, 1).unsqueeze(0), k, v, bias, enable_gqa=gqa
                    )
                    out[start:end].copy_(o[0].transpose(0, 1))
            return out

        _checked(inputs, attend, kernel, "a sequence with a lower-right causal bias")
        return attend

    return prepare


def flex(compiled: bool = True) -> Implementation:
    """flex_attention over the packed layout: the queries (1, Hq, total_q, D) against the
    whole cache as (1, Hkv, batch * max_kv, D), with a BlockMask built here (a query sees
    its own sequence's keys up to its bottom-right causal limit, so padding and other
    sequences' blocks are skipped). Compiled unless `compiled` is False (the unfused
    implementation, which materialises every score: for checking only)."""

    def prepare(inputs: RaggedInputs) -> RaggedAttention:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        layer, device = inputs.layer, inputs.x.device
        kv_heads, dim = layer.num_kv_heads, layer.head_dim
        lows, highs = [], []
        for i, (q_len, kv_len) in enumerate(inputs.sequences):
            first = i * inputs.max_kv
            lows += [first] * q_len
            highs += [first + kv_len - q_len + r for r in range(q_len)]
        low, high = (torch.tensor(t, device=device) for t in (lows, highs))

        def visible(b, h, q_idx, kv_idx):
            return (kv_idx >= low[q_idx]) & (kv_idx <= high[q_idx])

        keys_total = len(inputs.sequences) * inputs.max_kv
        block_mask = create_block_mask(visible, None, None, len(lows), keys_total, device=device)
        keys, values = (
            cache.view(keys_total, kv_heads, dim).transpose(0, 1).unsqueeze(0)
            for cache in (inputs.k_cache, inputs.v_cache)
        )
        gqa = layer.group_size > 1
        if compiled:
            torch.compiler.reset()  # each batch compiles afresh: no recompile limit is reached
            kernel = torch.compile(flex_attention)
        else:
            kernel = _unfused(flex_attention)

        def attend(q: torch.Tensor) -> torch.Tensor:
            out = kernel(
                q.transpose(0, 1).unsqueeze(0), keys, values, block_mask=block_mask, enable_gqa=gqa
            )
            return out[0].transpose(0, 1)

        attend(_some_queries(inputs))  # compiles here, not in the first timed call
        return attend

    return prepare


def _unfused(flex_attention: Callable) -> Callable:
    """flex_attention run eagerly, without its warning that it is not compiled."""

    def call(*args, **kwargs):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "flex_attention called without torch.compile")
            return flex_attention(*args, **kwargs)

    return call
