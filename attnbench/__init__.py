"""attnbench: benchmark and analyse MHA, MQA and GQA attention and their KV cache."""

from .modules.attention import (
    GroupedQueryAttention,
    MultiHeadAttention,
    MultiQueryAttention,
    scaled_dot_product_attention,
)
from .modules.kv_cache import KVCache

__version__ = "0.1.0"

__all__ = [
    "GroupedQueryAttention",
    "KVCache",
    "MultiHeadAttention",
    "MultiQueryAttention",
    "__version__",
    "scaled_dot_product_attention",
]
