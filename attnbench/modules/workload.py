"""What every provider of a decode step works on and gives back: the point's inputs
(`DecodeInputs`), its calls (`Workload`), and the refusal of a point it cannot run
(`Unsupported`, with the reasons a kernel gives in warnings: `refusals`)."""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

import torch

from .attention import TORCH_PATH, GroupedQueryAttention
from .kv_cache import KVCache

Call = Callable[[], object]


class Unsupported(Exception):
    """A provider cannot run this point; the message says why."""


@dataclass
class DecodeInputs:
    """What every provider of a point gets: the layer whose weights all of them use, the
    inputs x (batch, context_len + max(gen_len, 1), d_model) and, for cached points, the
    filled cache of as many tokens."""

    layer: GroupedQueryAttention
    x: torch.Tensor
    cache: KVCache | None
    context_len: int
    gen_len: int

    @property
    def cached(self) -> bool:
        return self.cache is not None

    def copied(self) -> DecodeInputs:
        """The same inputs in memory of their own: the layer's weights and the cache
        copied; x shared, since a step reads only the slices its workload copies of it."""
        return replace(self, layer=self.layer.copied(), cache=copy.deepcopy(self.cache))

    def copied_bytes(self) -> int:
        """The bytes `copied` copies: the layer's weights and the cache."""
        cache = [] if self.cache is None else [self.cache.k, self.cache.v]
        return tensor_bytes([*self.layer.parameters(), *cache])


def tensor_bytes(tensors: list[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


@dataclass
class Workload:
    """A provider's calls for one point, each checked once. `step` is one decode step at
    the fixed context (cached) or the causal forward over context + 1 tokens keeping the
    last row (no cache); `prefill` fills the cache with the prompt's K/V; `generation`
    decodes gen_len tokens from the context. Each `*_setup` runs untimed before its call."""

    step: Call
    step_setup: Call | None = None
    prefill: Call | None = None
    prefill_setup: Call | None = None
    generation: Call | None = None
    generation_setup: Call | None = None
    projection_path: str = TORCH_PATH


def in_turn(calls: list[Call]) -> Call:
    """One call running `calls` in order (a whole generation)."""

    def run() -> object:
        out = None
        for call in calls:
            out = call()
        return out

    return run


@contextmanager
def refusals() -> Iterator[list[str]]:
    """Collect the warnings a kernel gives when it refuses inputs (torch explains a
    refusal in warnings before it raises), instead of printing them."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reasons: list[str] = []
        try:
            yield reasons
        finally:
            reasons.extend(str(w.message) for w in caught)
