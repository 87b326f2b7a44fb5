"""Attention: the explicit reference function and the MHA / GQA / MQA modules.

Every expected value is computed here, independently of attnbench, in float64: K/V are
expanded with repeat_interleave and the softmax is written out by hand.
"""

from __future__ import annotations

import contextlib
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attnbench import (
    GroupedQueryAttention,
    KVCache,
    MultiHeadAttention,
    MultiQueryAttention,
    scaled_dot_product_attention,
)
from attnbench.modules.attention import folded_decode

#: This torch build has oneDNN's linear with prepacked weights (asked of torch itself).
ONEDNN_LINEAR = torch.backends.mkldnn.is_available() and all(
    hasattr(torch.ops.mkldnn, op) for op in ("_reorder_linear_weight", "_linear_pointwise")
)

D_MODEL = 64
HEADS = 8
HEAD_DIM = D_MODEL // HEADS
#: (num_kv_heads, label): MHA, two GQA groupings and MQA over 8 query heads.
VARIANTS = [(8, "MHA"), (4, "GQA-4"), (2, "GQA-2"), (1, "MQA")]
KV_HEADS = [kv for kv, _ in VARIANTS]
KV_IDS = [label for _, label in VARIANTS]
BACKENDS = ["sdpa", "naive"]
#: Relative tolerance against the float64 reference, per dtype.
RTOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2}


# --------------------------------------------------------------------------- reference


def allowed_causal(q_len: int, k_len: int) -> torch.Tensor:
    """Bottom-right causal mask built element by element: the queries are the last q_len
    of the k_len positions, so query i sees key j iff j <= i + (k_len - q_len)."""
    allowed = torch.zeros(q_len, k_len, dtype=torch.bool)
    for i in range(q_len):
        for j in range(k_len):
            allowed[i, j] = j <= i + (k_len - q_len)
    return allowed


def ref_attention(q, k, v, mask=None, causal=False, scale=None) -> torch.Tensor:
    """float64 attention. q (B, Hq, Lq, D); k, v (B, Hkv, Lk, D) with Hkv dividing Hq.

    A boolean mask is True where a query may attend; a float mask is added to the scores.
    A row with nothing to attend gives zeros."""
    q, k, v = q.double(), k.double(), v.double()
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    q_len, k_len = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale
    allowed = torch.ones(q_len, k_len, dtype=torch.bool)
    if causal:
        allowed = allowed & allowed_causal(q_len, k_len)
    if mask is not None:
        if mask.dtype == torch.bool:
            allowed = allowed & mask
        else:
            scores = scores + mask.double()
    scores = scores.masked_fill(~allowed, float("-inf"))
    row_max = scores.amax(dim=-1, keepdim=True)
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    exps = torch.exp(scores - row_max)
    total = exps.sum(dim=-1, keepdim=True)
    probs = torch.where(total > 0, exps / total, torch.zeros_like(exps))
    return torch.matmul(probs, v)


def _linear64(layer: nn.Linear, t: torch.Tensor) -> torch.Tensor:
    out = t.double() @ layer.weight.double().T
    if layer.bias is not None:
        out = out + layer.bias.double()
    return out


def ref_module(m, x, context=None, mask=None, causal=False) -> torch.Tensor:
    """The module's forward pass, redone in float64 from its own weights."""
    src = x if context is None else context
    batch, q_len, _ = x.shape
    k_len = src.shape[1]
    h, hkv, d = m.num_heads, m.num_kv_heads, m.head_dim
    q = _linear64(m.q_proj, x).view(batch, q_len, h, d).transpose(1, 2)
    k = _linear64(m.k_proj, src).view(batch, k_len, hkv, d).transpose(1, 2)
    v = _linear64(m.v_proj, src).view(batch, k_len, hkv, d).transpose(1, 2)
    out = ref_attention(q, k, v, mask=mask, causal=causal)
    return _linear64(m.o_proj, out.transpose(1, 2).reshape(batch, q_len, h * d))


def assert_matches(actual: torch.Tensor, expected: torch.Tensor, rtol: float) -> None:
    """Close within `rtol`, relative to each element and (as an absolute floor) to the
    largest magnitude of the expected tensor, so that near-zero entries do not dominate."""
    assert not torch.isnan(actual).any(), "output has NaN"
    expected = expected.double()
    atol = rtol * max(expected.abs().max().item(), 1e-12)
    torch.testing.assert_close(actual.double(), expected, rtol=rtol, atol=atol)


def make_mask(kind: str, batch: int, heads: int, q_len: int, k_len: int):
    """(attn_mask, is_causal) for a named mask kind."""
    if kind == "none":
        return None, False
    if kind == "causal":
        return None, True
    if kind == "bool":
        return torch.rand(batch, 1, q_len, k_len) > 0.3, False
    if kind == "bool_heads":
        return torch.rand(batch, heads, q_len, k_len) > 0.3, False
    if kind == "bool_2d":
        return torch.rand(q_len, k_len) > 0.3, False
    if kind == "float":
        return torch.randn(batch, heads, q_len, k_len), False
    if kind == "bool_causal":
        return torch.rand(batch, 1, q_len, k_len) > 0.3, True
    if kind == "float_causal":
        return torch.randn(batch, 1, 1, k_len), True
    raise AssertionError(kind)


MASK_KINDS = [
    "none",
    "causal",
    "bool",
    "bool_heads",
    "bool_2d",
    "float",
    "bool_causal",
    "float_causal",
]


def gqa(kv_heads: int, backend: str = "sdpa", bias: bool = False, dtype=torch.float32):
    return GroupedQueryAttention(D_MODEL, HEADS, kv_heads, bias=bias, backend=backend, dtype=dtype)


def twin(m: GroupedQueryAttention, backend: str) -> GroupedQueryAttention:
    """A module with the same shape and weights as `m` but another backend."""
    other = GroupedQueryAttention(
        m.d_model,
        m.num_heads,
        m.num_kv_heads,
        head_dim=m.head_dim,
        bias=m.q_proj.bias is not None,
        backend=backend,
        dtype=m.q_proj.weight.dtype,
    )
    other.load_state_dict(m.state_dict())
    return other


# ------------------------------------------------------- scaled_dot_product_attention


def _qkv(batch=2, heads=3, q_len=5, k_len=5, dim=8, dtype=torch.float32):
    q = torch.randn(batch, heads, q_len, dim, dtype=dtype)
    k = torch.randn(batch, heads, k_len, dim, dtype=dtype)
    v = torch.randn(batch, heads, k_len, dim, dtype=dtype)
    return q, k, v


def test_sdpa_default_scale_is_inverse_sqrt_head_dim():
    q, k, v = _qkv(dim=16)
    out = scaled_dot_product_attention(q, k, v)
    assert out.shape == (2, 3, 5, 16) and out.dtype == torch.float32
    assert_matches(out, ref_attention(q, k, v, scale=0.25), 1e-5)
    # a test that can tell the scale apart: scale 1 gives something else
    assert not torch.allclose(out, scaled_dot_product_attention(q, k, v, scale=1.0), atol=1e-3)


def test_sdpa_explicit_scale():
    q, k, v = _qkv()
    out = scaled_dot_product_attention(q, k, v, scale=0.3)
    assert_matches(out, ref_attention(q, k, v, scale=0.3), 1e-5)
    assert not torch.allclose(out, scaled_dot_product_attention(q, k, v), atol=1e-3)


def test_sdpa_value_dim_may_differ_from_query_dim():
    q, k, _ = _qkv(dim=8)
    v = torch.randn(2, 3, 5, 12)
    out = scaled_dot_product_attention(q, k, v)
    assert out.shape == (2, 3, 5, 12)
    assert_matches(out, ref_attention(q, k, v), 1e-5)


def test_sdpa_boolean_mask_true_means_attend():
    q, k, v = _qkv(q_len=4, k_len=6)
    mask = torch.rand(2, 1, 4, 6) > 0.4
    mask[..., 0] = True  # every row sees at least one key
    out = scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert_matches(out, ref_attention(q, k, v, mask=mask), 1e-5)
    # the masked-out values do not matter: change them and nothing moves
    keys_never_seen = ~mask.any(dim=-2)  # (2, 1, 6): keys no query attends to
    v3 = v.masked_fill(keys_never_seen.unsqueeze(-1), 1e3)
    assert torch.allclose(scaled_dot_product_attention(q, k, v3, attn_mask=mask), out)


def test_sdpa_float_mask_is_added_to_scores():
    q, k, v = _qkv(q_len=4, k_len=6)
    mask = torch.randn(2, 3, 4, 6) * 3
    out = scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert_matches(out, ref_attention(q, k, v, mask=mask), 1e-5)
    # an additive float mask of 0 / -inf is the same as the boolean mask
    bool_mask = torch.rand(2, 3, 4, 6) > 0.3
    bool_mask[..., -1] = True
    additive = torch.zeros(2, 3, 4, 6).masked_fill(~bool_mask, float("-inf"))
    torch.testing.assert_close(
        scaled_dot_product_attention(q, k, v, attn_mask=additive),
        scaled_dot_product_attention(q, k, v, attn_mask=bool_mask),
    )


def test_sdpa_causal_square_matches_torch():
    q, k, v = _qkv(q_len=7, k_len=7)
    out = scaled_dot_product_attention(q, k, v, is_causal=True)
    assert_matches(out, ref_attention(q, k, v, causal=True), 1e-5)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))


def test_sdpa_causal_is_bottom_right_aligned_when_fewer_queries():
    q_len, k_len = 3, 7
    q, k, v = _qkv(q_len=q_len, k_len=k_len)
    out = scaled_dot_product_attention(q, k, v, is_causal=True)
    assert_matches(out, ref_attention(q, k, v, causal=True), 1e-5)
    # the last query sees every key; query i sees keys 0 .. i + (k_len - q_len)
    assert_matches(out[..., -1:, :], ref_attention(q[..., -1:, :], k, v), 1e-5)
    for i in range(q_len):
        last = i + k_len - q_len
        seen = ref_attention(q[..., i : i + 1, :], k[..., : last + 1, :], v[..., : last + 1, :])
        assert_matches(out[..., i : i + 1, :], seen, 1e-5)
    # and it is not torch's top-left alignment
    top_left = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert not torch.allclose(out, top_left, atol=1e-3)


def test_sdpa_causal_combines_with_masks():
    q, k, v = _qkv(q_len=4, k_len=6)
    bool_mask = torch.rand(2, 1, 4, 6) > 0.3
    out = scaled_dot_product_attention(q, k, v, attn_mask=bool_mask, is_causal=True)
    assert_matches(out, ref_attention(q, k, v, mask=bool_mask, causal=True), 1e-5)
    float_mask = torch.randn(2, 1, 1, 6)
    out = scaled_dot_product_attention(q, k, v, attn_mask=float_mask, is_causal=True)
    assert_matches(out, ref_attention(q, k, v, mask=float_mask, causal=True), 1e-5)


def test_sdpa_bf16_softmax_in_float32():
    """Computed in float32, the bf16 result is the float32 answer rounded once to bf16,
    so it is within half a bf16 ulp (2**-8 relative) of the float64 answer, plus float32
    noise."""
    q, k, v = _qkv(batch=2, heads=4, q_len=16, k_len=32, dim=16, dtype=torch.bfloat16)
    out = scaled_dot_product_attention(q, k, v, is_causal=True)
    assert out.dtype == torch.bfloat16
    in_fp32 = scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    assert torch.equal(out, in_fp32.to(torch.bfloat16))
    ref = ref_attention(q, k, v, causal=True)
    err = (out.double() - ref).abs()
    bound = ref.abs() * 2.0**-8 + 1e-5 * ref.abs().max()
    assert (err <= bound).all(), err.max()


def test_sdpa_fp16_scores_do_not_overflow():
    """q.k = 16 * 100 * 100 = 160,000 overflows float16 (max 65,504); computed in float32
    and scaled by 1/4 it is fine."""
    q = torch.full((1, 1, 2, 16), 100.0, dtype=torch.float16)
    k = torch.full((1, 1, 3, 16), 100.0, dtype=torch.float16)
    k[..., 1, :] = -100.0
    v = torch.randn(1, 1, 3, 16, dtype=torch.float16)
    out = scaled_dot_product_attention(q, k, v)
    assert out.dtype == torch.float16
    assert torch.isfinite(out).all()
    assert_matches(out, ref_attention(q, k, v), 1e-3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_sdpa_fully_masked_row_gives_zeros(dtype):
    q, k, v = _qkv(q_len=4, k_len=5, dtype=dtype)
    bool_mask = torch.ones(2, 1, 4, 5, dtype=torch.bool)
    bool_mask[:, :, 2] = False
    out = scaled_dot_product_attention(q, k, v, attn_mask=bool_mask)
    assert not torch.isnan(out).any()
    assert (out[:, :, 2] == 0).all()
    assert (out[:, :, [0, 1, 3]] != 0).any()
    float_mask = torch.zeros(2, 1, 4, 5, dtype=dtype).masked_fill(~bool_mask, float("-inf"))
    out_f = scaled_dot_product_attention(q, k, v, attn_mask=float_mask)
    assert not torch.isnan(out_f).any()
    torch.testing.assert_close(out_f, out)


def test_sdpa_causal_with_more_queries_than_keys_gives_zero_rows():
    # queries 0 and 1 of 5 come before the 3 keys: nothing to attend
    q, k, v = _qkv(q_len=5, k_len=3)
    out = scaled_dot_product_attention(q, k, v, is_causal=True)
    assert not torch.isnan(out).any()
    assert (out[..., :2, :] == 0).all()
    assert_matches(out, ref_attention(q, k, v, causal=True), 1e-5)


# ------------------------------------------------------------- modules vs reference


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kv_heads", KV_HEADS, ids=KV_IDS)
@pytest.mark.parametrize("mask_kind", MASK_KINDS)
def test_module_matches_float64_reference(mask_kind, kv_heads, backend, dtype):
    m = gqa(kv_heads, backend, bias=True, dtype=dtype)
    x = torch.randn(2, 12, D_MODEL, dtype=dtype)
    mask, causal = make_mask(mask_kind, 2, HEADS, 12, 12)
    out = m(x, attn_mask=mask, is_causal=causal)
    assert out.shape == x.shape and out.dtype == dtype
    assert_matches(out, ref_module(m, x, mask=mask, causal=causal), RTOL[dtype])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kv_heads", KV_HEADS, ids=KV_IDS)
def test_module_without_bias_matches_reference(kv_heads, backend):
    m = gqa(kv_heads, backend, bias=False)
    assert m.q_proj.bias is None and m.o_proj.bias is None
    x = torch.randn(3, 9, D_MODEL)
    assert_matches(m(x, is_causal=True), ref_module(m, x, causal=True), 1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kv_heads", KV_HEADS, ids=KV_IDS)
def test_cross_attention_matches_reference(kv_heads, backend, dtype):
    m = gqa(kv_heads, backend, bias=True, dtype=dtype)
    x = torch.randn(2, 5, D_MODEL, dtype=dtype)
    context = torch.randn(2, 11, D_MODEL, dtype=dtype)
    out = m(x, context)
    assert out.shape == (2, 5, D_MODEL)
    assert_matches(out, ref_module(m, x, context=context), RTOL[dtype])
    pad = torch.ones(2, 1, 1, 11, dtype=torch.bool)
    pad[1, ..., 7:] = False
    out = m(x, context, attn_mask=pad)
    assert_matches(out, ref_module(m, x, context=context, mask=pad), RTOL[dtype])


@pytest.mark.parametrize("bias", [False, True], ids=["no_bias", "bias"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kv_heads", KV_HEADS, ids=KV_IDS)
def test_fully_masked_row_in_module_gives_no_nan(kv_heads, backend, bias):
    m = gqa(kv_heads, backend, bias=bias)
    x = torch.randn(2, 6, D_MODEL)
    bool_mask = torch.ones(2, 1, 6, 6, dtype=torch.bool)
    bool_mask[:, :, 3] = False  # query 3 may attend to no key
    float_mask = torch.zeros(2, 1, 6, 6)
    float_mask[:, :, 3] = float("-inf")
    for mask in (bool_mask, float_mask):
        for causal in (False, True):
            out = m(x, attn_mask=mask, is_causal=causal)
            assert not torch.isnan(out).any()
            # the attention output of row 3 is zero, so the layer output is o_proj's bias
            expected_row = m.o_proj.bias if bias else torch.zeros(D_MODEL)
            torch.testing.assert_close(out[:, 3], expected_row.expand(2, D_MODEL))
            assert_matches(out, ref_module(m, x, mask=mask, causal=causal), 1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kv_heads", KV_HEADS, ids=KV_IDS)
def test_causal_cross_attention_with_short_context_has_no_nan(kv_heads, backend):
    """is_causal with more queries than keys: the first queries see nothing (zeros)."""
    m = gqa(kv_heads, backend)
    x = torch.randn(2, 6, D_MODEL)
    context = torch.randn(2, 4, D_MODEL)
    out = m(x, context, is_causal=True)
    assert not torch.isnan(out).any()
    assert (out[:, :2] == 0).all()
    assert_matches(out, ref_module(m, x, context=context, causal=True), 1e-5)


# ---------------------------------------------------- MHA vs torch.nn.MultiheadAttention


def torch_mha_from(m: GroupedQueryAttention) -> nn.MultiheadAttention:
    bias = m.q_proj.bias is not None
    ref = nn.MultiheadAttention(m.d_model, m.num_heads, bias=bias, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([m.q_proj.weight, m.k_proj.weight, m.v_proj.weight]))
        ref.out_proj.weight.copy_(m.o_proj.weight)
        if bias:
            ref.in_proj_bias.copy_(torch.cat([m.q_proj.bias, m.k_proj.bias, m.v_proj.bias]))
            ref.out_proj.bias.copy_(m.o_proj.bias)
    assert (ref.in_proj_bias is None) == (not bias)
    return ref.eval()


@pytest.mark.parametrize("bias", [False, True], ids=["no_bias", "bias"])
@pytest.mark.parametrize("backend", BACKENDS)
class TestAgainstTorchMultiheadAttention:
    def test_self_attention(self, backend, bias):
        m = MultiHeadAttention(D_MODEL, HEADS, bias=bias, backend=backend)
        ref = torch_mha_from(m)
        x = torch.randn(2, 10, D_MODEL)
        expected, _ = ref(x, x, x, need_weights=False)
        assert_matches(m(x), expected, 1e-5)

    def test_causal(self, backend, bias):
        m = MultiHeadAttention(D_MODEL, HEADS, bias=bias, backend=backend)
        ref = torch_mha_from(m)
        x = torch.randn(2, 10, D_MODEL)
        torch_mask = torch.triu(torch.ones(10, 10, dtype=torch.bool), diagonal=1)  # True=block
        expected, _ = ref(x, x, x, attn_mask=torch_mask, need_weights=False)
        assert_matches(m(x, is_causal=True), expected, 1e-5)
        assert_matches(m(x, attn_mask=~torch_mask), expected, 1e-5)

    def test_key_padding_mask(self, backend, bias):
        m = MultiHeadAttention(D_MODEL, HEADS, bias=bias, backend=backend)
        ref = torch_mha_from(m)
        x = torch.randn(3, 8, D_MODEL)
        key_padding = torch.zeros(3, 8, dtype=torch.bool)  # torch: True = ignore
        key_padding[1, 5:] = True
        key_padding[2, 2:] = True
        expected, _ = ref(x, x, x, key_padding_mask=key_padding, need_weights=False)
        ours = (~key_padding)[:, None, None, :]  # ours: True = attend, (B, 1, 1, Lk)
        assert_matches(m(x, attn_mask=ours), expected, 1e-5)

    def test_cross_attention(self, backend, bias):
        m = MultiHeadAttention(D_MODEL, HEADS, bias=bias, backend=backend)
        ref = torch_mha_from(m)
        x = torch.randn(2, 4, D_MODEL)
        context = torch.randn(2, 13, D_MODEL)
        expected, _ = ref(x, context, context, need_weights=False)
        assert_matches(m(x, context), expected, 1e-5)


# ----------------------------------------------------------------- variants agree


@pytest.mark.parametrize("backend", BACKENDS)
def test_gqa_with_all_kv_heads_equals_mha(backend):
    mha = MultiHeadAttention(D_MODEL, HEADS, bias=True, backend=backend)
    g = GroupedQueryAttention(D_MODEL, HEADS, HEADS, bias=True, backend=backend)
    g.load_state_dict(mha.state_dict())
    assert g.variant == mha.variant == "MHA"
    x = torch.randn(2, 7, D_MODEL)
    torch.testing.assert_close(g(x, is_causal=True), mha(x, is_causal=True))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kv_heads", [4, 2, 1], ids=["GQA-4", "GQA-2", "MQA"])
def test_gqa_equals_mha_with_kv_weights_repeated_per_group(kv_heads, backend):
    """Query head h uses KV head h // G: an MHA whose K/V heads are the GQA heads repeated
    (repeat_interleave over heads) computes the same thing."""
    g = gqa(kv_heads, backend, bias=True)
    group = HEADS // kv_heads
    mha = MultiHeadAttention(D_MODEL, HEADS, bias=True, backend=backend)
    state = g.state_dict()
    for name in ("k_proj", "v_proj"):
        w = state[f"{name}.weight"].view(kv_heads, HEAD_DIM, D_MODEL)
        state[f"{name}.weight"] = w.repeat_interleave(group, dim=0).reshape(-1, D_MODEL)
        b = state[f"{name}.bias"].view(kv_heads, HEAD_DIM)
        state[f"{name}.bias"] = b.repeat_interleave(group, dim=0).reshape(-1)
    mha.load_state_dict(state)
    x = torch.randn(2, 9, D_MODEL)
    mask = torch.rand(2, HEADS, 9, 9) > 0.3
    assert_matches(g(x, is_causal=True), mha(x, is_causal=True), 1e-5)
    assert_matches(g(x, attn_mask=mask), mha(x, attn_mask=mask), 1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("kv_heads", KV_HEADS, ids=KV_IDS)
@pytest.mark.parametrize("mask_kind", MASK_KINDS)
def test_naive_equals_sdpa(mask_kind, kv_heads, dtype):
    sdpa = gqa(kv_heads, "sdpa", bias=True, dtype=dtype)
    naive = twin(sdpa, "naive")
    x = torch.randn(2, 10, D_MODEL, dtype=dtype)
    mask, causal = make_mask(mask_kind, 2, HEADS, 10, 10)
    assert_matches(
        naive(x, attn_mask=mask, is_causal=causal),
        sdpa(x, attn_mask=mask, is_causal=causal),
        RTOL[dtype],
    )


@pytest.mark.parametrize("mask_shape", [(2, HEADS, 1, 6), (2, 1, 1, 6)], ids=["per-head", "shared"])
@pytest.mark.parametrize("kv_heads", KV_HEADS, ids=KV_IDS)
def test_folded_decode_with_a_mask_equals_the_reference(kv_heads, mask_shape):
    """The mask folds with the query heads: query head h keeps its own row of it."""
    q = torch.randn(2, HEADS, 1, HEAD_DIM)
    k, v = torch.randn(2, kv_heads, 6, HEAD_DIM), torch.randn(2, kv_heads, 6, HEAD_DIM)
    mask = torch.rand(mask_shape) > 0.4
    mask[..., 0] = True  # every row sees a key
    groups = HEADS // kv_heads
    expected = scaled_dot_product_attention(
        q, k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1), attn_mask=mask
    )
    assert_matches(folded_decode(q, k, v, mask), expected, 1e-5)


def test_variant_classes():
    assert MultiHeadAttention(D_MODEL, HEADS).num_kv_heads == HEADS
    mqa = MultiQueryAttention(D_MODEL, HEADS, bias=True)
    assert mqa.num_kv_heads == 1 and mqa.variant == "MQA" and mqa.group_size == HEADS
    assert mqa.k_proj.out_features == HEAD_DIM and mqa.q_proj.out_features == D_MODEL
    assert gqa(4).variant == "GQA-4"
    assert gqa(2).group_size == 4


# ------------------------------------------------------------------ KV-cache decode


def _cache(m, batch, max_len, dtype=torch.float32):
    return KVCache(batch, m.num_kv_heads, max_len, m.head_dim, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kv_heads", KV_HEADS, ids=KV_IDS)
def test_prefill_then_cached_steps_equal_one_causal_pass(kv_heads, backend, dtype):
    prompt, steps, batch = 6, 5, 2
    m = gqa(kv_heads, backend, bias=True, dtype=dtype)
    x = torch.randn(batch, prompt + steps, D_MODEL, dtype=dtype)
    full = m(x, is_causal=True)
    cache = _cache(m, batch, 16, dtype)
    outs = [m(x[:, :prompt], is_causal=True, kv_cache=cache)]
    assert cache.length == prompt
    for t in range(prompt, prompt + steps):
        outs.append(m(x[:, t : t + 1], is_causal=True, kv_cache=cache))
        assert cache.length == t + 1
    incremental = torch.cat(outs, dim=1)
    assert_matches(incremental, full, RTOL[dtype])
    assert_matches(incremental, ref_module(m, x, causal=True), RTOL[dtype])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kv_heads", KV_HEADS, ids=KV_IDS)
def test_chunked_prefill_equals_one_causal_pass(kv_heads, backend):
    batch, chunks = 2, [4, 1, 5, 3, 1]
    total = sum(chunks)
    m = gqa(kv_heads, backend, bias=True)
    x = torch.randn(batch, total, D_MODEL)
    full = m(x, is_causal=True)
    for explicit in (False, True):
        cache = _cache(m, batch, 20)
        outs, pos = [], 0
        for n in chunks:
            start = pos if explicit else None
            outs.append(m(x[:, pos : pos + n], is_causal=True, kv_cache=cache, start_pos=start))
            pos += n
            assert cache.length == pos
        assert_matches(torch.cat(outs, dim=1), full, 1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kv_heads", KV_HEADS, ids=KV_IDS)
def test_rerunning_a_chunk_at_an_earlier_start_pos(kv_heads, backend):
    """Writing at an earlier start_pos truncates what followed: re-running the last chunk
    gives the same output as the first time."""
    m = gqa(kv_heads, backend)
    x = torch.randn(1, 10, D_MODEL)
    cache = _cache(m, 1, 12)
    m(x[:, :6], is_causal=True, kv_cache=cache)
    first = m(x[:, 6:10], is_causal=True, kv_cache=cache)
    again = m(x[:, 6:10], is_causal=True, kv_cache=cache, start_pos=6)
    assert cache.length == 10
    torch.testing.assert_close(again, first)
    other = torch.randn(1, 2, D_MODEL)
    replaced = m(other, is_causal=True, kv_cache=cache, start_pos=6)
    assert cache.length == 8
    expected = m(torch.cat([x[:, :6], other], dim=1), is_causal=True)[:, 6:]
    assert_matches(replaced, expected, 1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kv_heads", KV_HEADS, ids=KV_IDS)
def test_cached_decode_with_padding_mask(kv_heads, backend):
    """A key-padding mask over the whole cached length, during prefill and decode."""
    m = gqa(kv_heads, backend, bias=True)
    x = torch.randn(2, 8, D_MODEL)
    keep = torch.ones(2, 1, 1, 8, dtype=torch.bool)
    keep[1, ..., :3] = False  # sequence 1 is left-padded by 3
    expected = ref_module(m, x, mask=keep, causal=True)
    cache = _cache(m, 2, 8)
    outs = [m(x[:, :5], is_causal=True, kv_cache=cache, attn_mask=keep[..., :5])]
    for t in range(5, 8):
        step = m(x[:, t : t + 1], is_causal=True, kv_cache=cache, attn_mask=keep[..., : t + 1])
        outs.append(step)
    assert_matches(torch.cat(outs, dim=1), expected, 1e-5)


@pytest.mark.parametrize("mask_kind", ["bool", "float"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kv_heads", KV_HEADS, ids=KV_IDS)
def test_cached_decode_with_per_head_mask(kv_heads, backend, mask_kind):
    """Single-token steps with a mask that differs per query head (the sdpa backend folds
    the heads of a group together for decode; the mask must follow its head). One head
    of one step sees no key at all and must give zeros, not NaN."""
    m = gqa(kv_heads, backend, bias=False)
    steps, prompt = 3, 5
    x = torch.randn(2, prompt + steps, D_MODEL)
    cache = _cache(m, 2, prompt + steps)
    m(x[:, :prompt], is_causal=True, kv_cache=cache)
    for t in range(prompt, prompt + steps):
        keep = torch.rand(2, HEADS, 1, t + 1) > 0.4
        keep[0, 5] = False  # head 5 of sequence 0 attends to nothing
        mask = keep if mask_kind == "bool" else torch.zeros(keep.shape).masked_fill(~keep, -1e30)
        if mask_kind == "float":
            mask[0, 5] = float("-inf")
        out = m(x[:, t : t + 1], is_causal=True, kv_cache=cache, attn_mask=mask)
        k = _linear64(m.k_proj, x[:, : t + 1]).view(2, t + 1, kv_heads, HEAD_DIM).transpose(1, 2)
        v = _linear64(m.v_proj, x[:, : t + 1]).view(2, t + 1, kv_heads, HEAD_DIM).transpose(1, 2)
        q = _linear64(m.q_proj, x[:, t : t + 1]).view(2, 1, HEADS, HEAD_DIM).transpose(1, 2)
        attn = ref_attention(q, k, v, mask=mask)
        assert (attn[0, 5] == 0).all()
        expected = _linear64(m.o_proj, attn.transpose(1, 2).reshape(2, 1, D_MODEL))
        assert_matches(out, expected, 1e-5)


# ------------------------------------------------------------------- construction


@pytest.mark.parametrize(
    "args, kwargs, numbers",
    [
        ((100, 3, 3), {}, ["3", "100"]),  # 3 heads do not divide d_model 100
        ((4096, 30, 30), {}, ["30", "4096"]),
        ((64, 8, 3), {}, ["3", "8"]),  # 3 KV heads do not divide 8 heads
        ((64, 8, 16), {}, ["16", "8"]),  # more KV heads than heads
        ((0, 8, 8), {}, ["d_model", "0"]),
        ((-64, 8, 8), {}, ["d_model", "-64"]),
        ((64, 0, 1), {}, ["num_heads", "0"]),
        ((64, 8, 0), {}, ["num_kv_heads", "0"]),
        ((64, 8, -2), {}, ["num_kv_heads", "-2"]),
        ((64, 8, 8), {"head_dim": 0}, ["head_dim", "0"]),
        ((64, 8, 8), {"head_dim": -8}, ["head_dim", "-8"]),
    ],
)
def test_invalid_sizes_raise_value_error_naming_the_numbers(args, kwargs, numbers):
    with pytest.raises(ValueError) as info:
        GroupedQueryAttention(*args, **kwargs)
    message = str(info.value)
    for n in numbers:
        assert n in message, message


def test_specific_divisibility_messages():
    with pytest.raises(ValueError, match=r"num_heads 3 does not divide d_model 100"):
        GroupedQueryAttention(100, 3, 3)
    with pytest.raises(ValueError, match=r"num_kv_heads 3 does not divide num_heads 8"):
        GroupedQueryAttention(64, 8, 3)
    with pytest.raises(ValueError, match=r"backend"):
        GroupedQueryAttention(64, 8, 8, backend="flash")


def test_explicit_head_dim_gemma_7b():
    """Gemma-7B: d_model 3072, 16 heads of head_dim 256 -> q_proj 3072 -> 16*256 = 4096."""
    m = GroupedQueryAttention(3072, 16, 16, head_dim=256, device="meta")
    assert m.head_dim == 256
    assert (m.q_proj.in_features, m.q_proj.out_features) == (3072, 4096)
    assert (m.k_proj.out_features, m.v_proj.out_features) == (4096, 4096)
    assert (m.o_proj.in_features, m.o_proj.out_features) == (4096, 3072)


@pytest.mark.parametrize("backend", BACKENDS)
def test_explicit_head_dim_forward_matches_reference(backend):
    # head_dim 12 with 6 heads on d_model 40 (which 6 does not divide)
    m = GroupedQueryAttention(40, 6, 2, head_dim=12, bias=True, backend=backend)
    assert m.q_proj.out_features == 72 and m.k_proj.out_features == 24
    x = torch.randn(2, 5, 40)
    assert_matches(m(x, is_causal=True), ref_module(m, x, causal=True), 1e-5)


# ------------------------------------------------------------------------------ CUDA


@pytest.mark.cuda
@pytest.mark.parametrize("kv_heads", KV_HEADS, ids=KV_IDS)
def test_cuda_naive_equals_sdpa_with_cache(kv_heads):
    sdpa = gqa(kv_heads, "sdpa", dtype=torch.bfloat16).cuda()
    naive = twin(sdpa, "naive").cuda()
    x = torch.randn(2, 12, D_MODEL, dtype=torch.bfloat16, device="cuda")
    full = naive(x, is_causal=True)
    cache = KVCache(2, kv_heads, 12, HEAD_DIM, dtype=torch.bfloat16, device="cuda")
    outs = [sdpa(x[:, :8], is_causal=True, kv_cache=cache)]
    outs += [sdpa(x[:, t : t + 1], is_causal=True, kv_cache=cache) for t in range(8, 12)]
    assert_matches(torch.cat(outs, dim=1), full, 1e-2)


def test_cpu_inference_path_matches_the_plain_projections_and_repacks_on_change():
    """Under inference on the CPU the projections run through prepacked weights: same
    numbers as nn.Linear, and an in-place change to a weight is picked up."""
    layer = GroupedQueryAttention(64, 8, 2)
    x = torch.randn(2, 5, 64)
    eager = layer(x, is_causal=True)
    with torch.no_grad():
        packed = layer(x, is_causal=True)
        torch.testing.assert_close(packed, eager, rtol=1e-5, atol=1e-6)
        layer.o_proj.weight.mul_(2.0)
        doubled = layer(x, is_causal=True)
    torch.testing.assert_close(doubled, 2 * eager.detach(), rtol=1e-5, atol=1e-6)


# ------------------------------------------------------- the packed CPU projections


def plain_forward(m: GroupedQueryAttention, x: torch.Tensor, causal: bool) -> torch.Tensor:
    """The module's forward with every projection through F.linear, as nn.Linear runs it,
    and the float64 reference attention in between."""
    batch, q_len, _ = x.shape
    h, hkv = m.num_heads, m.num_kv_heads

    def linear(proj: nn.Linear, t: torch.Tensor, heads: int) -> torch.Tensor:
        out = F.linear(t, proj.weight, proj.bias)
        return out.view(batch, q_len, heads, -1).transpose(1, 2)

    q, k, v = linear(m.q_proj, x, h), linear(m.k_proj, x, hkv), linear(m.v_proj, x, hkv)
    out = ref_attention(q, k, v, causal=causal).to(x.dtype)
    return F.linear(out.transpose(1, 2).reshape(batch, q_len, -1), m.o_proj.weight, m.o_proj.bias)


def test_weights_made_under_inference_mode_and_changed_in_place_are_not_stale():
    """Inference tensors keep no version counter, so a packed copy of them could not tell
    an in-place change: such weights go through nn.Linear."""
    x = torch.randn(2, 5, D_MODEL)
    with torch.inference_mode():
        layer = gqa(2, bias=True)
        layer(x, is_causal=True)
        layer.q_proj.weight.mul_(2.0)
        out = layer(x, is_causal=True)
        expected = plain_forward(layer, x, causal=True)
    assert layer.projection_path == "torch"
    assert_matches(out, expected, 1e-5)


@pytest.mark.parametrize(
    "load_mode", [torch.inference_mode, contextlib.nullcontext], ids=["in_inference", "outside"]
)
def test_load_state_dict_after_an_inference_forward_is_picked_up(load_mode):
    layer, other = gqa(2, bias=True), gqa(2, bias=True)
    x = torch.randn(2, 5, D_MODEL)
    with torch.inference_mode():
        before = layer(x, is_causal=True)
    with load_mode():
        layer.load_state_dict(other.state_dict())
    with torch.inference_mode():
        out = layer(x, is_causal=True)
        expected = plain_forward(other, x, causal=True)
    assert not torch.allclose(out, before)
    assert_matches(out, expected, 1e-5)


def test_assigning_weight_data_is_picked_up():
    """`.data = ...` swaps the memory without a version bump: the packed copy follows it."""
    layer = gqa(2)
    x = torch.randn(2, 5, D_MODEL)
    with torch.inference_mode():
        layer(x, is_causal=True)
    layer.o_proj.weight.data = torch.randn_like(layer.o_proj.weight)
    with torch.inference_mode():
        out = layer(x, is_causal=True)
        expected = plain_forward(layer, x, causal=True)
    assert_matches(out, expected, 1e-5)


@pytest.mark.skipif(not ONEDNN_LINEAR, reason="needs oneDNN's packed linear")
def test_projection_path_is_packed_for_float32_cpu_inference():
    layer = gqa(2)
    x = torch.randn(1, 3, D_MODEL)
    assert layer.projection_path == "onednn-packed"  # before any forward: what it would take
    with torch.inference_mode():
        layer(x)
    assert layer.projection_path == "onednn-packed"
    layer(x)  # autograd on: nn.Linear
    assert layer.projection_path == "torch"


def test_projection_path_is_torch_for_inference_tensors_and_bfloat16():
    x = torch.randn(1, 3, D_MODEL)
    with torch.inference_mode():
        made_in_inference = gqa(2)
    assert made_in_inference.projection_path == "torch"
    with torch.inference_mode():
        made_in_inference(x)
    assert made_in_inference.projection_path == "torch"

    half = gqa(2, dtype=torch.bfloat16)
    assert half.projection_path == "torch"
    with torch.inference_mode():
        half(x.to(torch.bfloat16))
    assert half.projection_path == "torch"


# --- fixed calls: checked once, then nothing but the computation -----------------------------


@pytest.mark.parametrize("kv_heads", [4, 2, 1])
@pytest.mark.parametrize("backend", ["sdpa", "naive"])
def test_fixed_calls_equal_the_forward_with_a_cache(kv_heads, backend):
    layer = GroupedQueryAttention(32, 4, kv_heads, backend=backend, dtype=torch.float64)
    x = torch.randn(2, 7, 32, dtype=torch.float64)
    with torch.inference_mode():
        ours, theirs = (KVCache(2, kv_heads, 7, 8, torch.float64) for _ in range(2))
        prefill = layer.causal_call(x[:, :6], cache=ours)()
        expected_prefill = layer(x[:, :6], is_causal=True, kv_cache=theirs)
        step = layer.decode_step(x[:, 6:7].contiguous(), ours, 6)()
        expected_step = layer(x[:, 6:7], is_causal=True, kv_cache=theirs)
        no_cache = layer.causal_call(x)()[:, -1:]
    torch.testing.assert_close(prefill, expected_prefill, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(step, expected_step, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(no_cache, expected_step, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(ours.k, theirs.k, rtol=0, atol=0)  # the same K/V written
    torch.testing.assert_close(ours.v, theirs.v, rtol=0, atol=0)


@pytest.mark.parametrize(
    ("x_shape", "position", "cache_len", "message"),
    [
        ((2, 2, 32), 3, 8, r"expected x of shape \(batch, 1, 32\)"),
        ((2, 1, 16), 3, 8, r"expected x of shape \(batch, 1, 32\)"),
        ((3, 1, 32), 3, 8, "does not fit batch 3"),
        ((2, 1, 32), 8, 8, "9 keys do not fit a cache of 8 tokens"),
        ((2, 1, 32), -1, 8, "position must be an integer >= 0"),
    ],
)
def test_a_decode_step_is_checked_when_it_is_built(x_shape, position, cache_len, message):
    layer = GroupedQueryAttention(32, 4, 2)
    cache = KVCache(2, 2, cache_len, 8)
    with pytest.raises(ValueError, match=message):
        layer.decode_step(torch.randn(*x_shape), cache, position)


def test_a_decode_step_refuses_a_cache_of_another_dtype():
    layer = GroupedQueryAttention(32, 4, 2)
    cache = KVCache(2, 2, 8, 8, torch.float64)
    with pytest.raises(ValueError, match="cache holds torch.float64"):
        layer.decode_step(torch.randn(2, 1, 32), cache, 3)


def test_fixed_calls_resolve_the_projection_path_once():
    layer = GroupedQueryAttention(32, 4, 2)
    with torch.inference_mode():
        layer.decode_step(torch.randn(2, 1, 32), KVCache(2, 2, 8, 8), 3)()
    expected = "onednn-packed" if ONEDNN_LINEAR else "torch"
    assert layer.projection_path == expected
    with torch.inference_mode():
        layer.decode_step(
            torch.randn(2, 1, 32, dtype=torch.float64), KVCache(2, 2, 8, 8, torch.float64), 3
        )
    assert layer.projection_path == "torch"  # float64 has no packed path


def test_a_copy_made_under_inference_mode_projects_as_the_layer_does():
    """The copies a cold-cache step rotates over are made under inference mode. Their
    weights were then inference tensors that still require grad, for which matmul does
    not fold a (batch, tokens, d) input into one product: each projection copied its
    transposed weight for a bmm (a bfloat16 step of d_model 4,096 took 30 times as long).
    A copy's weights are parameters as the layer's, and its projections run no bmm."""
    layer = GroupedQueryAttention(256, 4, 2, dtype=torch.bfloat16)
    with torch.inference_mode():
        copy = layer.copied()
        x = torch.randn(1, 1, 256, dtype=torch.bfloat16)
        for weights in (layer, copy):
            assert not weights.q_proj.weight.is_inference()
            with torch.profiler.profile() as prof:
                weights.q_proj(x)
            ops = {event.key for event in prof.key_averages()}
            assert "aten::bmm" not in ops and "aten::copy_" not in ops, ops
    assert torch.equal(copy.q_proj.weight, layer.q_proj.weight)
    assert copy.q_proj.weight.data_ptr() != layer.q_proj.weight.data_ptr()
