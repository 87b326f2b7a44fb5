"""The `flash-attn` provider: Tri Dao's flash-attn package (an optional install, CUDA
only, half precision), for contiguous caches and for paged ones.

- contiguous: `flash_attn_func` on the layer's q, K and V viewed token-major (batch,
  tokens, heads, head_dim); it takes grouped KV heads as they are, and its causal mask is
  aligned bottom-right;
- paged: `flash_attn_with_kvcache` reading the pool of a modules.paged_cache.PagedKVCache
  in place through its block table. The pool is head-major; flash-attn reads it
  block-major, (num_blocks, block_size, kv_heads, head_dim), through a permuted view of
  the same memory. flash-attn 2 takes blocks of a multiple of 256 tokens only.

Every output is checked against the explicit reference before anything is timed, like
any provider's, so a layout flash-attn reads otherwise than assumed here shows as a
`wrong` row, never as a timing.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .paged_cache import PagedKVCache, check_query

#: The dtypes flash-attn computes in.
HALF = (torch.float16, torch.bfloat16)
#: flash-attn 2's paged cache takes blocks of a multiple of this many tokens.
PAGE_MULTIPLE = 256


def unavailable(device: torch.device, dtype: torch.dtype) -> str | None:
    """Why flash-attn cannot run on `device` in `dtype`, or None."""
    try:
        import flash_attn  # noqa: F401
    except ImportError:
        return "flash-attn is not installed (pip install flash-attn, on a CUDA machine)"
    if device.type != "cuda":
        return "flash-attn runs on CUDA devices only"
    if dtype not in HALF:
        return f"flash-attn computes in float16 or bfloat16, not {str(dtype).split('.')[-1]}"
    return None


def decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Attention of q (batch, heads, q_len, head_dim) over K/V (batch, kv_heads, keys,
    head_dim), causal bottom-right when q_len > 1 (flash-attn's alignment)."""
    from flash_attn import flash_attn_func

    out = flash_attn_func(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=q.shape[2] > 1
    )
    return out.transpose(1, 2)


def prepare_paged(cache: PagedKVCache, q: torch.Tensor) -> Callable[[], torch.Tensor]:
    """Decode q (batch, heads, 1, head_dim) over the cache as it is now with
    flash_attn_with_kvcache, the pool read in place through the block table. Prepare
    again after appending."""
    if cache.block_size % PAGE_MULTIPLE:
        raise NotImplementedError(
            f"flash-attn pages blocks of a multiple of {PAGE_MULTIPLE} tokens, "
            f"not {cache.block_size}"
        )
    from flash_attn import flash_attn_with_kvcache

    check_query(cache, q)
    keys, values = (pool.permute(1, 2, 0, 3) for pool in (cache.k, cache.v))
    lengths = torch.tensor(cache.lengths, dtype=torch.int32, device=q.device)
    table = cache.padded_table().contiguous()
    queries = q.transpose(1, 2)  # (batch, 1, heads, head_dim)

    def attend() -> torch.Tensor:
        out = flash_attn_with_kvcache(
            queries, keys, values, cache_seqlens=lengths, block_table=table
        )
        return out.transpose(1, 2)

    return attend
