"""The kernels of one decode step, each timed alone with the same harness: what the step
would cost with no glue between them (Python, views, the cache write). The step's time
over their sum says how much the glue costs."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..measure.devices import torch_dtype
from ..measure.timing import Measurement, Timer
from ..modules.attention import folded_decode
from .context import Context
from .decode import DecodeOptions, DecodePoint, build_layer, point_inputs

#: The kernels of a cached decode step, in the order it runs them.
KERNELS = ("q_proj", "k_proj", "v_proj", "sdpa", "o_proj")


def step_kernels(point: DecodePoint, device: torch.device) -> dict[str, Callable[[], object]]:
    """attnbench's cached step at the point's context, as its kernels: the four
    projections of one token as the step resolves them (oneDNN-packed or nn.Linear), and
    torch SDPA over the context + 1 cached keys."""
    if not point.cached:
        raise ValueError("the kernels of a step are those of a cached step (mode cache)")
    layer = build_layer(point.shape, "sdpa", torch_dtype(point.dtype), device)
    inputs = point_inputs(point, layer, device)
    context = point.prompt_len
    token = inputs.x[:, context : context + 1].contiguous()
    q_proj, k_proj, v_proj, o_proj = layer.resolved_projections(token)
    batch, heads, dim = point.batch, layer.num_heads, layer.head_dim
    q = q_proj(token).view(batch, heads, 1, dim)
    keys, values = inputs.cache.k[:, :, : context + 1], inputs.cache.v[:, :, : context + 1]  # type: ignore[union-attr]
    attended = folded_decode(q, keys, values).reshape(batch, 1, heads * dim)
    return {
        "q_proj": lambda: q_proj(token),
        "k_proj": lambda: k_proj(token),
        "v_proj": lambda: v_proj(token),
        "sdpa": lambda: folded_decode(q, keys, values),
        "o_proj": lambda: o_proj(attended),
    }


def time_kernels(point: DecodePoint, context: Context) -> dict[str, Measurement]:
    """Each kernel of the point's step timed alone, sampled as the step is."""
    device = context.device if context.device is not None else torch.device("cpu")
    options = DecodeOptions.from_options(context.options)
    timer = Timer(device, flush_l2=options.flush_l2)
    with torch.inference_mode():
        calls = step_kernels(point, device)
        return {name: timer.sample(call, options.sampling(device)) for name, call in calls.items()}
