"""Providers: every implementation of one operator (a decode step of an attention layer),
each prepared for a point as fixed calls that can be timed side by side.

- `attnbench`: this package's GroupedQueryAttention (torch SDPA, GQA folded for decode);
- `naive`: the explicit reference (K/V expanded to every query head, softmax by hand);
- `sdpa-math`, `sdpa-flash`, `sdpa-efficient`, `sdpa-cudnn`: torch's SDPA called as a user
  calls it (`enable_gqa`), pinned to one kernel with torch.nn.attention.sdpa_kernel;
- `flex`: torch.nn.attention.flex_attention, compiled;
- `hf`: Hugging Face transformers' LlamaAttention with a StaticCache (optional extra).

All of them use the same weights, inputs and cached K/V, so their outputs can be checked
against one reference (`check_output`) before any is timed. A provider that cannot run a
point says why (`Unsupported`); that is a row of the results, never an error.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from . import flash_attn_provider
from .attention import (
    BACKEND_ATTENTION,
    CausalAttention,
    DecodeAttention,
    grouped_reference,
)
from .paged_cache import prepare_flex, prepare_gather
from .workload import Call, DecodeInputs, Workload, in_turn

#: Largest error allowed against the reference, relative to the reference's largest value
#: (plus the same absolute amount), per dtype: what the dtype's rounding of a few
#: accumulations in different orders costs.
TOLERANCE = {torch.float32: 1e-3, torch.float16: 1e-2, torch.bfloat16: 3e-2}


#: Bytes the explicit reference holds per attention score at its peak, counted on the CPU
#: (measure.peak_memory): the float32 scores, the masked scores and the probabilities.
NAIVE_SCORE_BYTES = 12
#: Bytes torch's SDPA math kernel holds per attention score at its peak, counted the same
#: way: the float32 scores, their softmax and the boolean mask of the rows its safe
#: softmax finds all -inf, alive at once.
MATH_SCORE_BYTES = 9


@dataclass(frozen=True)
class Provider:
    """One implementation, and what a decode experiment must know of it beyond its calls:
    the backend of the layer it is built on, the memory it takes beyond the layer's, and
    how it may be timed."""

    name: str
    summary: str
    prepare: Callable[[DecodeInputs], Workload]
    #: Why it cannot run on a device type with a dtype before anything is built, or None.
    unavailable: Callable[[torch.device, torch.dtype], str | None] = lambda device, dtype: None
    kernel: SDPBackend | None = None
    #: The GroupedQueryAttention backend its layer is built with (modules.attention).
    backend: str = "sdpa"
    #: Bytes it holds per attention score at its peak (the scores and what it makes of
    #: them, all at once) beyond the layer's tensors, and K/V expanded to every query head;
    #: 0 for a fused kernel, which holds no whole score matrix.
    score_bytes: int = 0
    #: It keeps its own copies of the cache: one for its step and one for its generations.
    copies_cache: bool = False
    #: It compiles its kernels for every point (a minute on the CPU).
    compiles: bool = False
    #: Its calls are the layer's own, so its heads can be split over tensor-parallel ranks
    #: with o_proj's all-reduce in them (experiments.tensor_parallel).
    splits_heads: bool = False
    #: Its attention over a batch of sequences of their own lengths (modules.ragged: an
    #: Implementation, made when asked), or None: it takes uniform batches only.
    ragged: Callable[[], Callable] | None = None
    #: Its decode over a paged KV cache (modules.paged_cache.prepare_gather or
    #: prepare_flex), or None: it reads contiguous caches only.
    paged: Callable[..., Call] | None = None

    def running(self) -> AbstractContextManager:
        """What the point's calls run inside: the pinned SDPA kernel, if any."""
        return sdpa_kernel([self.kernel]) if self.kernel is not None else nullcontext()


def layer_workload(decode: DecodeAttention, causal: CausalAttention) -> Callable:
    """The workload of GroupedQueryAttention's fixed calls with the given attention."""

    def prepare(inputs: DecodeInputs) -> Workload:
        layer, x, context, gen_len = inputs.layer, inputs.x, inputs.context_len, inputs.gen_len
        cache = inputs.cache
        if cache is None:
            forward = layer.causal_call(x[:, : context + 1].contiguous(), causal)
            prefixes = [layer.causal_call(x[:, : context + i + 1], causal) for i in range(gen_len)]
            return Workload(
                step=lambda: forward()[:, -1:],
                generation=in_turn(prefixes) if prefixes else None,
                projection_path=layer.projection_path,
            )
        step = layer.decode_step(x[:, context : context + 1].contiguous(), cache, context, decode)
        steps = [
            layer.decode_step(x[:, t : t + 1].contiguous(), cache, t, decode)
            for t in range(context, context + gen_len)
        ]
        return Workload(
            step=step,
            prefill=layer.causal_call(x[:, :context].contiguous(), causal, cache),
            generation=in_turn(steps) if steps else None,
            projection_path=layer.projection_path,
        )

    return prepare


def gqa_sdpa_decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """torch's SDPA as a user calls it for grouped heads: `enable_gqa`."""
    return F.scaled_dot_product_attention(q, k, v, enable_gqa=q.shape[1] != k.shape[1])


#: The SDPA kernels on the CPU (the others are CUDA kernels).
CPU_KERNELS = (SDPBackend.MATH, SDPBackend.FLASH_ATTENTION)


def _ragged(way: str, *args: object) -> Callable[[], Callable]:
    """The implementation modules.ragged's `way` makes with `args`, made when asked
    (modules.ragged imports this module)."""

    def implementation() -> Callable:
        from . import ragged

        return getattr(ragged, way)(*args)

    return implementation


def _ragged_reference() -> Callable:
    """modules.ragged's explicit reference, an implementation as it is."""
    from . import ragged

    return ragged.reference


def _pinned(name: str, kernel: SDPBackend, what: str, score_bytes: int = 0) -> Provider:
    def unavailable(device: torch.device, dtype: torch.dtype) -> str | None:
        if device.type == "cpu" and kernel not in CPU_KERNELS:
            return f"no {what} kernel on the CPU"
        return None

    return Provider(
        name,
        f"torch SDPA pinned to its {what} kernel",
        layer_workload(gqa_sdpa_decode, BACKEND_ATTENTION["sdpa"][1]),
        unavailable,
        kernel,
        score_bytes=score_bytes,
        ragged=_ragged("sdpa_padded", kernel),
    )


def _flex_prepare(inputs: DecodeInputs) -> Workload:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    torch.compiler.reset()  # every point compiles afresh: no recompile limit is reached
    compiled = torch.compile(flex_attention)
    gqa = inputs.layer.num_heads != inputs.layer.num_kv_heads
    device = inputs.x.device
    masks: dict[int, object] = {}

    def block_mask(length: int) -> object:
        if length not in masks:
            masks[length] = create_block_mask(
                lambda b, h, q, k: q >= k, None, None, length, length, device=device
            )
        return masks[length]

    def decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return compiled(q, k, v, enable_gqa=gqa)

    for length in _causal_lengths(inputs):  # built here, not inside the timed calls
        block_mask(length)

    def causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return compiled(q, k, v, block_mask=masks[q.shape[2]], enable_gqa=gqa)

    return layer_workload(decode, causal)(inputs)


def _causal_lengths(inputs: DecodeInputs) -> list[int]:
    """The lengths of the causal forwards of a point: its prefill, or the no-cache step
    and generation."""
    context = inputs.context_len
    if inputs.cached:
        return [context]
    return sorted({context + 1, *(context + i + 1 for i in range(inputs.gen_len))})


def _flex_unavailable(device: torch.device, dtype: torch.dtype) -> str | None:
    try:
        from torch.nn.attention import flex_attention  # noqa: F401
    except ImportError:
        return f"torch {torch.__version__} has no flex_attention"
    return None


def _hf_prepare(inputs: DecodeInputs) -> Workload:
    from .hf_attention import prepare_hf

    return prepare_hf(inputs)


def _hf_unavailable(device: torch.device, dtype: torch.dtype) -> str | None:
    from .hf_attention import hf_unavailable

    return hf_unavailable()


PROVIDERS: dict[str, Provider] = {
    p.name: p
    for p in (
        Provider(
            "attnbench",
            "this package's GroupedQueryAttention",
            layer_workload(*BACKEND_ATTENTION["sdpa"]),
            splits_heads=True,
            ragged=_ragged("sdpa_per_sequence"),
            paged=prepare_gather,
        ),
        Provider(
            "naive",
            "the explicit reference, K/V expanded to every query head",
            layer_workload(*BACKEND_ATTENTION["naive"]),
            backend="naive",
            score_bytes=NAIVE_SCORE_BYTES,
            splits_heads=True,
            ragged=_ragged_reference,
        ),
        _pinned("sdpa-math", SDPBackend.MATH, "math", score_bytes=MATH_SCORE_BYTES),
        _pinned("sdpa-flash", SDPBackend.FLASH_ATTENTION, "flash"),
        _pinned("sdpa-efficient", SDPBackend.EFFICIENT_ATTENTION, "memory-efficient"),
        _pinned("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION, "cuDNN"),
        Provider(
            "flex",
            "torch flex_attention, compiled",
            _flex_prepare,
            _flex_unavailable,
            compiles=True,
            ragged=_ragged("flex"),
            paged=prepare_flex,
        ),
        Provider(
            "flash-attn",
            "flash-attn's kernels (flash_attn_func; flash_attn_with_kvcache over a paged cache)",
            layer_workload(flash_attn_provider.decode, flash_attn_provider.decode),
            flash_attn_provider.unavailable,
            paged=flash_attn_provider.prepare_paged,
        ),
        Provider(
            "hf",
            "transformers' LlamaAttention with a StaticCache",
            _hf_prepare,
            _hf_unavailable,
            copies_cache=True,
        ),
    )
}


def reference_step(inputs: DecodeInputs) -> torch.Tensor:
    """What a decode step at the point's context must return, computed the explicit way
    (grouped_reference, float32) from the layer's weights and the same inputs: for a
    cached point the cached K/V of the context plus the new token's, without a cache the
    K/V of every token of the prefix."""
    layer, x, context = inputs.layer, inputs.x, inputs.context_len
    batch, heads, kv_heads, dim = x.shape[0], layer.num_heads, layer.num_kv_heads, layer.head_dim

    def project(proj: torch.nn.Linear, tokens: torch.Tensor, count: int) -> torch.Tensor:
        out = F.linear(tokens, proj.weight, proj.bias)
        return out.view(batch, tokens.shape[1], count, dim).transpose(1, 2)

    token = x[:, context : context + 1]
    if inputs.cache is not None:
        k_prefix, v_prefix = inputs.cache.k[:, :, :context], inputs.cache.v[:, :, :context]
    else:
        k_prefix = project(layer.k_proj, x[:, :context], kv_heads)
        v_prefix = project(layer.v_proj, x[:, :context], kv_heads)
    keys = torch.cat([k_prefix, project(layer.k_proj, token, kv_heads)], dim=2)
    values = torch.cat([v_prefix, project(layer.v_proj, token, kv_heads)], dim=2)
    out = grouped_reference(project(layer.q_proj, token, heads), keys, values)
    out = out.to(x.dtype).reshape(batch, 1, heads * dim)
    return F.linear(out, layer.o_proj.weight, layer.o_proj.bias)


def check_output(out: torch.Tensor, reference: torch.Tensor) -> str | None:
    """Why `out` disagrees with `reference` beyond the dtype's tolerance, or None."""
    if out.shape != reference.shape:
        return f"output of shape {tuple(out.shape)}, expected {tuple(reference.shape)}"
    tolerance = TOLERANCE.get(reference.dtype, 1e-3)
    ref = reference.float()
    error = (out.float() - ref).abs().max().item()
    allowed = tolerance * (1 + ref.abs().max().item())
    if not error <= allowed:  # NaN fails too
        return f"max error {error:.3g} against the reference, above {allowed:.3g}"
    return None
