"""PagedKVCache: blocks allocated on demand and scattered over the pool, bytes that match
the paging formulas, errors that change nothing, and both decode paths equal to attention
over a contiguous cache."""

from __future__ import annotations

import pytest
import torch
import torch.nn.attention.flex_attention as flex_module

from attnbench.model.capacity import KvFormat, cache_bytes, ceil_div, paging_report, token_layout
from attnbench.modules.attention import naive_attention
from attnbench.modules.paged_cache import (
    NO_BLOCK,
    PagedKVCache,
    paged_block_mask,
    prepare_flex,
    prepare_gather,
)

pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")

D = 8
VARIANTS = {"MHA": (4, 4), "GQA": (4, 2), "MQA": (4, 1)}
LENGTHS = {"equal": [40, 40, 40], "ragged": [1, 17, 64, 100]}


@pytest.fixture(autouse=True)
def _flex_untraced(monkeypatch):
    """Uncompiled flex_attention runs its reference in plain Python rather than tracing it
    again for every new shape (seconds each), the switch its own warning suggests."""
    monkeypatch.setattr(flex_module, "_FLEX_ATTENTION_DISABLE_COMPILE_DEBUG", True, raising=False)


def grown(lengths, kv_heads, block_size, num_blocks=None, seed=None, chunk=7):
    """A cache whose sequences grew in turn, `chunk` tokens at a time, and the K/V each
    sequence was given (kv_heads, length, D): the contiguous reference."""
    blocks = num_blocks or sum(ceil_div(n, block_size) for n in lengths)
    cache = PagedKVCache(len(lengths), kv_heads, D, block_size, blocks, seed=seed)
    keys = [torch.randn(kv_heads, n, D) for n in lengths]
    values = [torch.randn(kv_heads, n, D) for n in lengths]
    for start in range(0, max(lengths), chunk):
        for seq, n in enumerate(lengths):
            if start < n:
                end = min(start + chunk, n)
                cache.append(seq, keys[seq][:, start:end], values[seq][:, start:end])
    return cache, keys, values


def contiguous_reference(q, keys, values):
    """Each sequence's query over its own K/V, expanded to every query head: the explicit
    softmax of attention.naive_attention."""
    return torch.cat(
        [
            naive_attention(q[b : b + 1], k[None], v[None])
            for b, (k, v) in enumerate(zip(keys, values, strict=True))
        ]
    )


def flex_eager(cache, q):
    return prepare_flex(cache, q, compiled=False)


@pytest.mark.parametrize("prepare", [prepare_gather, flex_eager], ids=["gather", "flex"])
@pytest.mark.parametrize("block_size", [1, 16, 64])
@pytest.mark.parametrize("lengths", LENGTHS.values(), ids=LENGTHS.keys())
@pytest.mark.parametrize("heads", VARIANTS.values(), ids=VARIANTS.keys())
def test_decode_paths_equal_attention_over_a_contiguous_cache(prepare, block_size, lengths, heads):
    num_heads, kv_heads = heads
    cache, keys, values = grown(lengths, kv_heads, block_size, seed=3)
    q = torch.randn(len(lengths), num_heads, 1, D)
    out = prepare(cache, q)()
    assert out.shape == q.shape
    torch.testing.assert_close(out, contiguous_reference(q, keys, values))


@pytest.mark.parametrize("prepare", [prepare_gather, flex_eager], ids=["gather", "flex"])
def test_decode_paths_skip_the_blocks_of_others_and_the_free_ones(prepare):
    cache = PagedKVCache.filled([5, 30, 12], 2, D, block_size=4, num_blocks=40, seed=9)
    q = torch.randn(3, 4, 1, D)
    keys, values = zip(*(cache.gather(seq) for seq in range(3)), strict=True)
    torch.testing.assert_close(prepare(cache, q)(), contiguous_reference(q, keys, values))


def test_a_prepared_call_reads_the_pool_when_called():
    cache, keys, values = grown([5, 9], 2, 4)
    q = torch.randn(2, 4, 1, D)
    calls = [prepare_gather(cache, q), flex_eager(cache, q)]
    cache.k.mul_(2.0)
    expected = contiguous_reference(q, [2.0 * k for k in keys], values)
    for call in calls:
        torch.testing.assert_close(call(), expected)


def test_gather_returns_what_was_appended():
    cache, keys, values = grown([3, 20, 11], 2, 4, seed=1)
    for seq in range(3):
        k, v = cache.gather(seq)
        assert k.is_contiguous() and v.is_contiguous()
        torch.testing.assert_close(k, keys[seq], rtol=0, atol=0)
        torch.testing.assert_close(v, values[seq], rtol=0, atol=0)


def test_append_batch_appends_one_token_to_each_sequence():
    cache, keys, values = grown([4, 8, 1], 2, 4, num_blocks=10)
    k, v = torch.randn(3, 2, 1, D), torch.randn(3, 2, 1, D)
    cache.append_batch(k, v)
    assert cache.lengths == (5, 9, 2)
    assert cache.blocks_in_use == 2 + 3 + 1
    for seq in range(3):
        got_k, got_v = cache.gather(seq)
        torch.testing.assert_close(got_k, torch.cat([keys[seq], k[seq]], dim=1), rtol=0, atol=0)
        torch.testing.assert_close(got_v, torch.cat([values[seq], v[seq]], dim=1), rtol=0, atol=0)


def test_blocks_are_allocated_on_demand():
    cache = PagedKVCache(2, 1, D, block_size=4, num_blocks=10)
    assert cache.blocks_in_use == 0 and cache.free_blocks == 10
    for step in range(1, 13):
        cache.append(step % 2, torch.randn(1, 1, D), torch.randn(1, 1, D))
        expected = sum(ceil_div(n, 4) for n in cache.lengths)
        assert cache.blocks_in_use == expected
        assert [cache.num_seq_blocks(s) for s in range(2)] == [
            ceil_div(n, 4) for n in cache.lengths
        ]
    assert (cache.block_table[:, 2:] == NO_BLOCK).all()


def test_sequences_growing_in_turn_get_scattered_blocks():
    cache = PagedKVCache.filled([64, 64, 64], 1, D, block_size=16, seed=None)
    assert [cache.seq_blocks(s) for s in range(3)] == [[0, 3, 6, 9], [1, 4, 7, 10], [2, 5, 8, 11]]
    shuffled = PagedKVCache.filled([64], 1, D, block_size=16, num_blocks=32, seed=5)
    blocks = shuffled.seq_blocks(0)
    assert len(set(blocks)) == 4
    assert blocks != list(range(blocks[0], blocks[0] + 4))


def test_filled_is_seeded_and_holds_exactly_the_blocks_needed():
    a = PagedKVCache.filled([5, 33, 16], 2, D, block_size=16)
    b = PagedKVCache.filled([5, 33, 16], 2, D, block_size=16)
    assert a.lengths == (5, 33, 16)
    assert a.num_blocks == a.blocks_in_use == 1 + 3 + 1 and a.free_blocks == 0
    assert torch.equal(a.block_table, b.block_table)
    assert torch.equal(a.k, b.k) and torch.equal(a.v, b.v)


@pytest.mark.parametrize("block_size", [1, 16, 64])
@pytest.mark.parametrize("heads", VARIANTS.values(), ids=VARIANTS.keys())
def test_bytes_match_the_paging_formulas(heads, block_size):
    num_heads, kv_heads = heads
    lengths = [1, 17, 64, 100]
    cache = PagedKVCache.filled(lengths, kv_heads, D, block_size, num_blocks=200)
    layout = token_layout(num_heads, kv_heads, D, KvFormat("float32"))
    report = paging_report(layout, [None], lengths, block_size)
    assert cache.allocated_bytes == report.paged_bytes
    assert cache.allocated_bytes == cache_bytes(layout, [None], lengths, block_size).total
    assert cache.used_bytes == report.used_bytes
    slots_free = sum(ceil_div(n, block_size) * block_size - n for n in lengths)
    assert cache.allocated_bytes - cache.used_bytes == slots_free * layout.bytes
    assert cache.pool_bytes == 200 * block_size * layout.bytes
    assert cache.pool_bytes == cache.k.nbytes + cache.v.nbytes


def snapshot(cache):
    return cache.lengths, cache.free_blocks, cache.block_table.clone()


def assert_unchanged(cache, before):
    lengths, free, table = before
    assert cache.lengths == lengths and cache.free_blocks == free
    assert torch.equal(cache.block_table, table)


def test_an_exhausted_pool_raises_and_changes_nothing():
    cache = PagedKVCache(2, 1, D, block_size=4, num_blocks=3)
    cache.append(0, torch.randn(1, 6, D), torch.randn(1, 6, D))
    before = snapshot(cache)
    with pytest.raises(
        ValueError, match=r"sequence 1 needs 2 more blocks of 4 tokens, but only 1 .* exhausted"
    ):
        cache.append(1, torch.randn(1, 5, D), torch.randn(1, 5, D))
    assert_unchanged(cache, before)
    cache.append(1, torch.randn(1, 4, D), torch.randn(1, 4, D))  # fills the last block
    cache.append(0, torch.randn(1, 2, D), torch.randn(1, 2, D))  # fits in its second block
    before = snapshot(cache)
    with pytest.raises(ValueError, match="the batch needs 2 more blocks"):
        cache.append_batch(torch.randn(2, 1, 1, D), torch.randn(2, 1, 1, D))
    assert_unchanged(cache, before)
    with pytest.raises(ValueError, match="filling the cache needs 4 more blocks"):
        PagedKVCache.filled([8, 8], 1, D, block_size=4, num_blocks=3)


@pytest.mark.parametrize(
    ("k_shape", "dtype", "match"),
    [
        ((2, 3, D), torch.float32, r"k has shape \(2, 3, 8\), expected \(1, tokens, 8\)"),
        ((1, 3, 4), torch.float32, "expected"),
        ((1, 3, D), torch.float64, "float64"),
    ],
)
def test_mismatched_inputs_raise_and_change_nothing(k_shape, dtype, match):
    cache = PagedKVCache(2, 1, D, block_size=4, num_blocks=4)
    before = snapshot(cache)
    with pytest.raises(ValueError, match=match):
        cache.append(0, torch.randn(k_shape, dtype=dtype), torch.randn(1, 3, D))
    with pytest.raises(ValueError, match="k has shape .* but v"):
        cache.append(0, torch.randn(1, 3, D), torch.randn(1, 2, D))
    for seq in (2, -1, True):
        with pytest.raises(ValueError, match="not one of the 2 sequences"):
            cache.append(seq, torch.randn(1, 3, D), torch.randn(1, 3, D))
    with pytest.raises(ValueError, match=r"expected \(2, 1, 1, 8\)"):
        cache.append_batch(torch.randn(2, 1, 2, D), torch.randn(2, 1, 2, D))
    assert_unchanged(cache, before)


@pytest.mark.parametrize("prepare", [prepare_gather, flex_eager], ids=["gather", "flex"])
def test_queries_that_do_not_fit_the_cache_raise(prepare):
    cache = PagedKVCache.filled([3, 0], 2, D, block_size=4, num_blocks=4)
    with pytest.raises(ValueError, match=r"expected q of shape \(2, num_heads, 1, 8\)"):
        prepare(cache, torch.randn(2, 4, 2, D))
    with pytest.raises(ValueError, match="3 query heads are not a multiple of 2 KV heads"):
        prepare(cache, torch.randn(2, 3, 1, D))
    with pytest.raises(ValueError, match="float64"):
        prepare(cache, torch.randn(2, 4, 1, D, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"sequences \[1\] hold no tokens"):
        prepare(cache, torch.randn(2, 4, 1, D))


def test_the_block_mask_lists_full_blocks_and_the_partial_last_one():
    cache = PagedKVCache.filled([5, 32, 17], 1, D, block_size=16, num_blocks=8, seed=2)
    mask = paged_block_mask(cache)
    assert mask.full_kv_num_blocks.flatten().tolist() == [0, 2, 1]
    assert mask.kv_num_blocks.flatten().tolist() == [1, 0, 1]
    assert mask.kv_indices[0, 0, 0, 0] == cache.seq_blocks(0)[0]
    assert mask.kv_indices[2, 0, 0, 0] == cache.seq_blocks(2)[1]
    assert mask.full_kv_indices[1, 0, 0, :2].tolist() == cache.seq_blocks(1)
    dense = mask.to_dense()  # which (sequence, pool block) pairs are visited at all
    for seq in range(3):
        assert dense[seq, 0, 0].nonzero().flatten().tolist() == sorted(cache.seq_blocks(seq))


@pytest.mark.slow
def test_compiled_flex_equals_the_reference():
    cache, keys, values = grown([3, 40], 2, 16, seed=4)
    q = torch.randn(2, 4, 1, D)
    torch.testing.assert_close(prepare_flex(cache, q)(), contiguous_reference(q, keys, values))
