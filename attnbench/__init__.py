"""attnbench: benchmark and analyse MHA, MQA and GQA attention and their KV cache.

The modules are imported on first use (torch takes seconds to load), so the command line
can answer Ctrl-C from its first instant."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: What `from attnbench import X` gives, and the module it lives in.
_EXPORTS = {
    "GroupedQueryAttention": ".modules.attention",
    "MultiHeadAttention": ".modules.attention",
    "MultiQueryAttention": ".modules.attention",
    "scaled_dot_product_attention": ".modules.attention",
    "KVCache": ".modules.kv_cache",
    "load_frames": ".study.frames",
}

__all__ = [
    "GroupedQueryAttention",
    "KVCache",
    "MultiHeadAttention",
    "MultiQueryAttention",
    "__version__",
    "load_frames",
    "scaled_dot_product_attention",
]

if TYPE_CHECKING:
    from .modules.attention import (
        GroupedQueryAttention,
        MultiHeadAttention,
        MultiQueryAttention,
        scaled_dot_product_attention,
    )
    from .modules.kv_cache import KVCache
    from .study.frames import load_frames


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name], __name__), name)
    raise AttributeError(f"module 'attnbench' has no attribute {name!r}")
