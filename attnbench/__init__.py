"""attnbench: benchmark and analyse MHA, MQA and GQA attention and their KV cache."""

from .attention import (
    GroupedQueryAttention,
    MultiHeadAttention,
    MultiQueryAttention,
    scaled_dot_product_attention,
)
from .kv_cache import KVCache

__version__ = "0.1.0"

__all__ = [
    "GroupedQueryAttention",
    "KVCache",
    "MultiHeadAttention",
    "MultiQueryAttention",
    "__version__",
    "scaled_dot_product_attention",
]
