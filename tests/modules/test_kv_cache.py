"""KVCache: in-place writes into preallocated buffers, and errors that change nothing."""

from __future__ import annotations

import pytest
import torch

from attnbench import KVCache

B, H, S, D = 2, 3, 10, 4


def kv(tokens: int, batch=B, heads=H, dim=D, dtype=torch.float32):
    return (
        torch.randn(batch, heads, tokens, dim, dtype=dtype),
        torch.randn(batch, heads, tokens, dim, dtype=dtype),
    )


def bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bytes of a tensor: compares buffers bit for bit, even uninitialised ones
    that may hold NaN patterns."""
    return t.detach().contiguous().view(torch.uint8).clone()


def snapshot(cache: KVCache):
    return bits(cache.k), bits(cache.v), cache.length, cache.k.data_ptr(), cache.v.data_ptr()


def assert_unchanged(cache: KVCache, before) -> None:
    k_bits, v_bits, length, k_ptr, v_ptr = before
    assert cache.length == length
    assert cache.k.data_ptr() == k_ptr and cache.v.data_ptr() == v_ptr
    assert torch.equal(bits(cache.k), k_bits), "K buffer changed"
    assert torch.equal(bits(cache.v), v_bits), "V buffer changed"


def filled(tokens: int = 4, dtype=torch.float32) -> tuple[KVCache, torch.Tensor, torch.Tensor]:
    cache = KVCache(B, H, S, D, dtype=dtype)
    k, v = kv(tokens, dtype=dtype)
    cache.update(k, v)
    return cache, k, v


def test_new_cache_is_empty_with_buffers_of_the_full_shape():
    cache = KVCache(B, H, S, D)
    assert cache.length == 0
    assert cache.max_seq_len == S
    assert cache.k.shape == cache.v.shape == (B, H, S, D)
    assert cache.k.dtype == torch.float32


def test_update_writes_in_place_and_returns_views():
    cache = KVCache(B, H, S, D)
    k_ptr, v_ptr = cache.k.data_ptr(), cache.v.data_ptr()
    k1, v1 = kv(3)
    out_k, out_v = cache.update(k1, v1)
    assert cache.length == 3
    assert out_k.shape == out_v.shape == (B, H, 3, D)
    torch.testing.assert_close(out_k, k1, rtol=0, atol=0)
    torch.testing.assert_close(out_v, v1, rtol=0, atol=0)
    # views of the buffers, not copies; the buffers were not reallocated
    assert out_k.data_ptr() == cache.k.data_ptr() == k_ptr
    assert out_v.data_ptr() == cache.v.data_ptr() == v_ptr
    assert out_k.untyped_storage().data_ptr() == cache.k.untyped_storage().data_ptr()
    out_k[0, 0, 0, 0] = 123.0  # writing through the view writes the buffer
    assert cache.k[0, 0, 0, 0].item() == 123.0

    k2, v2 = kv(2)
    out_k, out_v = cache.update(k2, v2)
    assert cache.length == 5
    assert cache.k.data_ptr() == k_ptr and cache.v.data_ptr() == v_ptr
    assert out_k.data_ptr() == k_ptr and out_v.data_ptr() == v_ptr
    torch.testing.assert_close(out_k[:, :, 3:], k2, rtol=0, atol=0)
    torch.testing.assert_close(out_v[:, :, 3:], v2, rtol=0, atol=0)
    torch.testing.assert_close(out_v[:, :, :3], v1, rtol=0, atol=0)


def test_single_token_updates_fill_to_max_seq_len():
    cache = KVCache(1, 2, 5, 3)
    ks, vs = [], []
    for t in range(5):
        k, v = kv(1, batch=1, heads=2, dim=3)
        ks.append(k)
        vs.append(v)
        out_k, out_v = cache.update(k, v)
        assert cache.length == t + 1 and out_k.shape[2] == t + 1
    torch.testing.assert_close(cache.k, torch.cat(ks, dim=2), rtol=0, atol=0)
    torch.testing.assert_close(cache.v, torch.cat(vs, dim=2), rtol=0, atol=0)


def test_non_contiguous_input_is_copied_correctly():
    cache = KVCache(B, H, S, D)
    # (batch, tokens, heads, dim) transposed, as the attention module produces it
    k = torch.randn(B, 4, H, D).transpose(1, 2)
    v = torch.randn(B, 4, H, D).transpose(1, 2)
    assert not k.is_contiguous()
    out_k, out_v = cache.update(k, v)
    assert torch.equal(out_k, k) and torch.equal(out_v, v)


def test_explicit_start_pos_rewrites_and_truncates():
    cache, k, v = filled(6)
    k2, v2 = kv(2)
    out_k, out_v = cache.update(k2, v2, start_pos=3)
    assert cache.length == 5
    assert out_k.shape[2] == 5
    assert torch.equal(out_k[:, :, :3], k[:, :, :3])
    assert torch.equal(out_k[:, :, 3:], k2) and torch.equal(out_v[:, :, 3:], v2)
    # start_pos == length appends, like the default
    k3, v3 = kv(1)
    cache.update(k3, v3, start_pos=5)
    assert cache.length == 6
    # start_pos 0 starts over
    cache.update(k3, v3, start_pos=0)
    assert cache.length == 1


def test_write_exactly_up_to_max_seq_len_is_allowed():
    cache, _, _ = filled(4)
    k, v = kv(S - 4)
    out_k, _ = cache.update(k, v)
    assert cache.length == S and out_k.shape[2] == S


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_nbytes_is_both_buffers(dtype):
    cache = KVCache(B, H, S, D, dtype=dtype)
    element = torch.tensor([], dtype=dtype).element_size()
    assert cache.nbytes == 2 * B * H * S * D * element
    # 2 * 2 * 3 * 10 * 4 = 480 elements
    assert cache.nbytes == {torch.float32: 1920, torch.float16: 960, torch.bfloat16: 960}[dtype]
    # independent of how much is cached
    cache.update(*kv(5, dtype=dtype))
    assert cache.nbytes == 2 * B * H * S * D * element


def test_reset_keeps_buffers_and_starts_over():
    cache, _, _ = filled(7)
    k_ptr, v_ptr, nbytes = cache.k.data_ptr(), cache.v.data_ptr(), cache.nbytes
    cache.reset()
    assert cache.length == 0
    assert cache.k.data_ptr() == k_ptr and cache.v.data_ptr() == v_ptr
    assert cache.nbytes == nbytes
    k, v = kv(2)
    out_k, out_v = cache.update(k, v)
    assert cache.length == 2 and out_k.shape[2] == 2
    assert torch.equal(out_k, k) and torch.equal(out_v, v)
    with pytest.raises(ValueError, match="gap"):
        cache.update(k, v, start_pos=5)  # the old tokens are gone


def test_buffers_are_not_saved_in_state_dict():
    assert KVCache(B, H, S, D).state_dict() == {}


# ------------------------------------------------------------------------- errors


def _bad_updates():
    """(description, k, v, start_pos, words the message must contain) on a cache of
    B=2, H=3, S=10, D=4 holding 4 tokens."""
    good_k, good_v = kv(2)
    return [
        ("overflow", *kv(7), None, ["7", "4", "max_seq_len", "10"]),
        ("overflow at start_pos", *kv(8), 3, ["8", "3", "max_seq_len 10"]),
        ("gap", good_k, good_v, 5, ["start_pos 5", "gap", "4"]),
        ("negative start_pos", good_k, good_v, -1, ["start_pos", "-1"]),
        ("bool start_pos", good_k, good_v, True, ["start_pos"]),
        ("wrong batch", *kv(2, batch=3), None, ["(3, 3, 2, 4)", "batch"]),
        ("wrong heads", *kv(2, heads=1), None, ["(2, 1, 2, 4)", "num_kv_heads"]),
        ("wrong head_dim", *kv(2, dim=8), None, ["(2, 3, 2, 8)", "head_dim"]),
        ("3-d k", good_k[0], good_v, None, ["shape"]),
        ("wrong v only", good_k, torch.randn(2, 3, 2, 5), None, ["v has shape", "(2, 3, 2, 5)"]),
        ("wrong dtype", *kv(2, dtype=torch.float16), None, ["dtype", "float16", "float32"]),
        ("wrong v dtype", good_k, good_v.double(), None, ["v has dtype", "float64"]),
        ("token mismatch", good_k, torch.randn(2, 3, 3, 4), None, ["2 tokens", "3"]),
    ]


@pytest.mark.parametrize("case", _bad_updates(), ids=lambda c: c[0])
def test_bad_update_raises_and_leaves_cache_unchanged(case):
    _, k, v, start_pos, words = case
    cache, _, _ = filled(4)
    before = snapshot(cache)
    with pytest.raises(ValueError) as info:
        cache.update(k, v, start_pos)
    message = str(info.value)
    assert message.startswith("KVCache.update:")
    for word in words:
        assert word in message, message
    assert_unchanged(cache, before)
    # and it still works afterwards
    cache.update(*kv(1))
    assert cache.length == 5


def test_error_on_empty_cache_leaves_it_empty():
    cache = KVCache(B, H, S, D)
    before = snapshot(cache)
    with pytest.raises(ValueError, match="max_seq_len"):
        cache.update(*kv(S + 1))
    with pytest.raises(ValueError, match="gap"):
        cache.update(*kv(1), start_pos=1)
    assert_unchanged(cache, before)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"batch_size": 0}, "batch_size"),
        ({"num_kv_heads": -1}, "num_kv_heads"),
        ({"max_seq_len": 0}, "max_seq_len"),
        ({"head_dim": 2.5}, "head_dim"),
        ({"batch_size": True}, "batch_size"),
    ],
)
def test_invalid_construction(kwargs, name):
    args = {"batch_size": B, "num_kv_heads": H, "max_seq_len": S, "head_dim": D, **kwargs}
    with pytest.raises(ValueError, match=name):
        KVCache(**args)


@pytest.mark.cuda
def test_cuda_device_mismatch_is_rejected():
    cache = KVCache(B, H, S, D, device="cuda")
    before_len = cache.length
    with pytest.raises(ValueError, match="cuda"):
        cache.update(*kv(2))
    assert cache.length == before_len
