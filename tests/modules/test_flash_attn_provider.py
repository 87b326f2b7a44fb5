"""The flash-attn provider: why it does not run here, and its side of flash-attn's API,
checked against a stand-in that follows flash-attn's documented layouts."""

from __future__ import annotations

import sys
import types

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

from attnbench.modules import flash_attn_provider
from attnbench.modules.attention import grouped_reference
from attnbench.modules.paged_cache import PagedKVCache, prepare_gather


def flash_attn_func(q, k, v, causal=False):
    """flash-attn's layout: (batch, tokens, heads, head_dim), grouped KV heads as they are,
    the causal mask aligned bottom-right."""
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    bias = causal_lower_right(q.shape[2], k.shape[2]) if causal else None
    return F.scaled_dot_product_attention(q, k, v, bias, enable_gqa=True).transpose(1, 2)


def flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens, block_table):
    """flash-attn's paged read: block-major caches (num_blocks, block_size, kv_heads,
    head_dim), a block table per sequence and its length."""
    outs = []
    for b in range(q.shape[0]):
        length = int(cache_seqlens[b])
        k, v = (c[block_table[b].long()].flatten(0, 1)[:length] for c in (k_cache, v_cache))
        outs.append(flash_attn_func(q[b : b + 1], k[None], v[None]))
    return torch.cat(outs)


@pytest.fixture
def stand_in(monkeypatch):
    module = types.SimpleNamespace(
        flash_attn_func=flash_attn_func, flash_attn_with_kvcache=flash_attn_with_kvcache
    )
    monkeypatch.setitem(sys.modules, "flash_attn", module)


def test_without_the_package_it_says_how_to_get_it():
    if (
        "flash_attn" in sys.modules
        or flash_attn_provider.unavailable(torch.device("cpu"), torch.float16) is None
    ):
        pytest.skip("flash-attn is installed here")
    reason = flash_attn_provider.unavailable(torch.device("cuda"), torch.float16)
    assert reason.startswith("flash-attn is not installed")


def test_it_runs_half_precision_on_cuda_only(stand_in):
    assert flash_attn_provider.unavailable(torch.device("cpu"), torch.float16) == (
        "flash-attn runs on CUDA devices only"
    )
    why = flash_attn_provider.unavailable(torch.device("cuda"), torch.float32)
    assert why == "flash-attn computes in float16 or bfloat16, not float32"
    assert flash_attn_provider.unavailable(torch.device("cuda"), torch.bfloat16) is None


def test_its_contiguous_attention_matches_the_reference(stand_in):
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 8, 1, 16, generator=gen)
    k, v = (torch.randn(2, 2, 33, 16, generator=gen) for _ in range(2))
    torch.testing.assert_close(flash_attn_provider.decode(q, k, v), grouped_reference(q, k, v))


@pytest.mark.parametrize("lengths", [(300, 300), (513, 40, 256)])
def test_it_reads_a_paged_pool_in_place_as_the_gather_path_does(stand_in, lengths):
    cache = PagedKVCache.filled(lengths, 2, 16, 256)
    q = torch.randn(len(lengths), 8, 1, 16, generator=torch.Generator().manual_seed(1))
    paged = flash_attn_provider.prepare_paged(cache, q)
    torch.testing.assert_close(paged(), prepare_gather(cache, q)())


def test_it_refuses_blocks_flash_attn_does_not_page(stand_in):
    cache = PagedKVCache.filled((40, 40), 2, 16, 64)
    with pytest.raises(NotImplementedError, match="multiple of 256 tokens, not 64"):
        flash_attn_provider.prepare_paged(cache, torch.zeros(2, 4, 1, 16))
