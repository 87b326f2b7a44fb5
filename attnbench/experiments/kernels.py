"""The kernels of one decode step, as calls that can be timed alone: what the step would
cost with no glue between them (Python, views, copies, the cache write). The step's time
over their sum (`x_of_reference` with reference `kernels`) says how much the glue costs,
and, timed in the same rounds as the step, is a ratio a noisy machine leaves alone."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..modules.attention import folded_decode, sdpa_causal
from ..modules.workload import DecodeInputs


def step_kernels(inputs: DecodeInputs) -> dict[str, Callable[[], object]]:
    """The kernels of the step at the inputs' context S: the four projections as the
    layer resolves them (oneDNN-packed or nn.Linear) and torch SDPA. Cached: the
    projections of one token and SDPA over the S + 1 cached keys. Without a cache: the
    projections of all S + 1 tokens and causal SDPA over them. In the order the step
    runs them: q_proj, k_proj, v_proj, sdpa, o_proj."""
    layer, context = inputs.layer, inputs.context_len
    tokens = 1 if inputs.cached else context + 1
    x = inputs.x[:, context + 1 - tokens : context + 1].contiguous()
    q_proj, k_proj, v_proj, o_proj = layer.resolved_projections(x)
    batch, heads, kv_heads, dim = x.shape[0], layer.num_heads, layer.num_kv_heads, layer.head_dim

    def heads_of(t: torch.Tensor, count: int) -> torch.Tensor:
        return t.view(batch, tokens, count, dim).transpose(1, 2)

    q = heads_of(q_proj(x), heads)
    if inputs.cache is not None:
        keys, values = inputs.cache.k[:, :, : context + 1], inputs.cache.v[:, :, : context + 1]

        def attend() -> torch.Tensor:
            return folded_decode(q, keys, values)

    else:
        keys, values = heads_of(k_proj(x), kv_heads), heads_of(v_proj(x), kv_heads)

        def attend() -> torch.Tensor:
            return sdpa_causal(q, keys, values)

    attended = attend().transpose(1, 2).reshape(batch, tokens, heads * dim)
    return {
        "q_proj": lambda: q_proj(x),
        "k_proj": lambda: k_proj(x),
        "v_proj": lambda: v_proj(x),
        "sdpa": attend,
        "o_proj": lambda: o_proj(attended),
    }
