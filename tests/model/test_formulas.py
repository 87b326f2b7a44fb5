"""The analytic model against numbers worked out by hand (the arithmetic is in comments)."""

from __future__ import annotations

import dataclasses

import pytest

from attnbench.errors import FieldError
from attnbench.model.batches import parse_batch
from attnbench.model.capacity import KvFormat, kv_cache_bytes, token_layout
from attnbench.model.dtypes import MODEL_DTYPES, dtype_bytes
from attnbench.model.formulas import (
    StepCounts,
    attention_core_flops,
    attention_params,
    batch_step_counts,
    cached_step_bytes,
    decode_totals,
    forward_flops,
    prefill_flops,
    projection_flops,
    projection_params,
    score_matrix_bytes,
    step_totals,
    step_traffic_bytes,
    uncached_step_bytes,
    visible_pairs,
    weight_bytes,
)
from attnbench.model.shapes import AttentionShape, variant_label

GiB, MiB = 1024**3, 1024**2

# d_model 4096, 32 heads, head_dim 128. q_proj and o_proj: 4096 * 4096 = 16,777,216 each;
# k_proj and v_proj: 4096 * (kv_heads * 128) each.
LLAMA_TOTALS = {
    32: 67_108_864,  # 4 * 16,777,216
    8: 41_943_040,  # 2 * 16,777,216 + 2 * 4096 * 1024 (4,194,304)
    4: 37_748_736,  # 2 * 16,777,216 + 2 * 4096 * 512 (2,097,152)
    1: 34_603_008,  # 2 * 16,777,216 + 2 * 4096 * 128 (524,288)
}


@pytest.mark.parametrize("kv_heads, total", list(LLAMA_TOTALS.items()))
def test_projection_params_llama_sizes(kv_heads, total):
    shape = AttentionShape(4096, 32, kv_heads)
    parts = projection_params(shape)
    assert parts["q_params"] == parts["o_params"] == 16_777_216  # 4096 * 4096
    assert parts["k_params"] == parts["v_params"] == 4096 * kv_heads * 128
    assert sum(parts.values()) == attention_params(shape) == total


def test_projection_params_with_bias():
    # GQA-8 with bias: q 16,777,216 + 4096; k, v 4,194,304 + 1024; o 16,777,216 + 4096
    parts = projection_params(AttentionShape(4096, 32, 8, bias=True))
    assert parts == {
        "q_params": 16_781_312,
        "k_params": 4_195_328,
        "v_params": 4_195_328,
        "o_params": 16_781_312,
    }
    # MHA with bias: 67,108,864 + 4 * 4096 bias terms
    assert attention_params(AttentionShape(4096, 32, 32, bias=True)) == 67_125_248


def test_projection_params_explicit_head_dim_gemma_7b():
    # d_model 3072, 16 heads of 256: q, k, v and o are each 3072 * 4096 = 12,582,912
    parts = projection_params(AttentionShape(3072, 16, 16, head_dim=256))
    assert set(parts.values()) == {12_582_912}
    assert attention_params(AttentionShape(3072, 16, 16, head_dim=256)) == 50_331_648


@pytest.mark.parametrize(
    "kv_heads, expected",
    [
        (32, 1 * GiB),  # 2 * 32 * 2048 * 32 * 128 * 2 = 1,073,741,824
        (8, 256 * MiB),  # 2 * 32 * 2048 *  8 * 128 * 2 =   268,435,456
        (4, 128 * MiB),  # 2 * 32 * 2048 *  4 * 128 * 2 =   134,217,728
        (1, 32 * MiB),  # 2 * 32 * 2048 *  1 * 128 * 2 =    33,554,432
    ],
)
def test_kv_cache_bytes_batch32_seq2048_fp16_one_layer(kv_heads, expected):
    assert kv_cache_bytes(1, 32, 2048, kv_heads, 128, "float16") == expected


def test_kv_cache_bytes_scales_with_layers_and_dtype():
    # Llama-2-7B, 32 layers, batch 1, 4096 tokens, fp16: 2 * 32 * 4096 * 32 * 128 * 2 = 2 GiB
    assert kv_cache_bytes(32, 1, 4096, 32, 128, "float16") == 2 * GiB
    # the same in float32 is twice that
    assert kv_cache_bytes(32, 1, 4096, 32, 128, "float32") == 4 * GiB
    assert kv_cache_bytes(1, 1, 0, 8, 128, "bfloat16") == 0


def kv_bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, dtype: str) -> int:
    """Bytes one token takes in the cache of every layer: L times one layer's layout."""
    layout = token_layout(num_kv_heads, num_kv_heads, head_dim, KvFormat(dtype))
    return num_layers * layout.bytes


def test_kv_bytes_per_token():
    # Llama-2-7B: 2 * 32 layers * 32 KV heads * 128 * 2 bytes = 524,288 (0.5 MiB)
    assert kv_bytes_per_token(32, 32, 128, "float16") == 524_288
    # Llama-3-8B (8 KV heads), bf16: 2 * 32 * 8 * 128 * 2 = 131,072
    assert kv_bytes_per_token(32, 8, 128, "bfloat16") == 131_072
    # Falcon-7B (MQA, head_dim 64), fp32: 2 * 32 * 1 * 64 * 4 = 16,384
    assert kv_bytes_per_token(32, 1, 64, "float32") == 16_384


def test_dtype_bytes():
    assert dtype_bytes("float32") == 4
    assert dtype_bytes("float16") == 2
    assert dtype_bytes("bfloat16") == 2
    with pytest.raises(ValueError, match="int3"):
        dtype_bytes("int3")


@pytest.mark.parametrize(
    "q_len, k_len, causal, pairs",
    [
        (4, 4, False, 16),  # 4 * 4
        (4, 4, True, 10),  # 1 + 2 + 3 + 4
        (2, 5, True, 9),  # bottom-right: query 0 sees 4 keys, query 1 sees 5
        (3, 7, True, 18),  # 5 + 6 + 7
        (1, 7, True, 7),  # one decode query sees every key
        (1, 1, True, 1),
        (3, 7, False, 21),
    ],
)
def test_visible_pairs(q_len, k_len, causal, pairs):
    assert visible_pairs(q_len, k_len, causal) == pairs


SMALL = AttentionShape(64, 4, 2)  # head_dim 16, q_dim 64, kv_dim 32; 12,288 parameters


def test_small_shape_params():
    # q 64*64 + k 64*32 + v 64*32 + o 64*64 = 4096 + 2048 + 2048 + 4096
    assert attention_params(SMALL) == 12_288


def test_attention_core_flops():
    # 4 FLOPs * batch 2 * 4 heads * head_dim 16 = 512 per visible pair
    assert attention_core_flops(SMALL, 2, 3, 5, causal=True) == 6_144  # 512 * (4 + 5 + 3)
    assert attention_core_flops(SMALL, 2, 3, 5, causal=False) == 7_680  # 512 * 15
    # MQA and MHA over the same query heads do the same attention FLOPs
    mqa = AttentionShape(64, 4, 1)
    assert attention_core_flops(mqa, 2, 3, 5, True) == attention_core_flops(SMALL, 2, 3, 5, True)


def test_projection_and_forward_flops():
    # q and o: 2 * 64 * 64 * 2 * batch 2 * 3 tokens = 98,304
    # k and v: 2 * 64 * 32 * 2 * batch 2 * 5 tokens = 81,920
    assert projection_flops(SMALL, 2, 3, 5) == 180_224
    # forward: projections over the 3 new tokens (98,304 + 49,152) + core 6,144
    assert forward_flops(SMALL, 2, 3, 5, causal=True) == 153_600


def test_cached_step_bytes():
    # float16 (2 bytes), batch 2, 10 tokens cached:
    #   weights      12,288 * 2                    = 24,576
    #   KV read      2 * 2 * 32 * (10 + 1) * 2     =  2,816
    #   KV written   2 * 2 * 32 * 2                =    256
    #   activations  2 * (2 * 64 + 2 * 64) * 2     =  1,024
    assert cached_step_bytes(SMALL, 2, 10, "float16") == 28_672


def test_step_traffic_bytes():
    # float16, batch 3, 4 new tokens attending 10 keys (6 cached):
    #   KV read      2 * 3 * 32 * 10 * 2           = 3,840
    #   KV written   2 * 3 * 32 * 4 * 2            = 1,536
    #   activations  3 * 4 * (2 * 64 + 2 * 64) * 2 = 6,144
    assert step_traffic_bytes(SMALL, 3, 4, 10, "float16") == 11_520
    # one new token: the cached step, weights aside
    assert step_traffic_bytes(SMALL, 2, 1, 11, "float16") == 28_672 - 24_576


@pytest.mark.parametrize("q_len, k_len", [(1, 1), (1, 9), (4, 4), (4, 10), (7, 30)])
def test_visible_pairs_row_by_row(q_len, k_len):
    # query row i (0-based) of q_len sees (k_len - q_len) + i + 1 keys
    rows = sum(k_len - q_len + i + 1 for i in range(q_len))
    assert visible_pairs(q_len, k_len, causal=True) == rows


def test_batch_step_counts_by_hand():
    # q4s10: one sequence, 4 new tokens attending 10 keys (6 cached), float16
    #   bytes: weights 24,576 + KV read 2*32*10*2 = 1,280 + KV written 2*32*4*2 = 512
    #          + activations 4 * (2*64 + 2*64) * 2 = 2,048                    = 28,416
    #   FLOPs: projections of 4 tokens: q and o 2 * 2*4*64*64 = 65,536, k and v
    #          2 * 2*4*32*64 = 32,768; core 4*4 heads*16 = 256 per pair, rows see
    #          7 + 8 + 9 + 10 = 34 keys: 8,704                                = 107,008
    #   KV held: 2 * 32 * 10 * 2                                              = 1,280
    assert batch_step_counts(SMALL, parse_batch("q4s10"), "float16") == StepCounts(
        28_416, 107_008, 1_280
    )
    # 2q1s11: two decodes over 10 cached tokens, as test_cached_step_bytes; FLOPs 2 *
    # (projections of one token 24,576 + core 256 * 11 = 2,816); KV held 2 * 2*32*11*2
    assert batch_step_counts(SMALL, parse_batch("2q1s11"), "float16") == StepCounts(
        28_672, 54_784, 2_816
    )


def test_batch_step_counts_of_a_mixed_batch_by_hand():
    # q4s10_2q1s11: the parts above, the weights (24,576) counted once
    counts = batch_step_counts(SMALL, parse_batch("q4s10_2q1s11"), "float16")
    assert counts == StepCounts(28_416 + 28_672 - 24_576, 107_008 + 54_784, 1_280 + 2_816)


SHAPES = [
    SMALL,
    AttentionShape(64, 4, 1),
    AttentionShape(64, 4, 4, bias=True),
    AttentionShape(4096, 32, 8),
    AttentionShape(3072, 16, 16, head_dim=256),
    AttentionShape(100, 3, 3, head_dim=32, bias=True),
    AttentionShape(8192, 64, 8),
]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s.d_model}-{s.variant}")
@pytest.mark.parametrize("dtype", MODEL_DTYPES)
@pytest.mark.parametrize("batch, context", [(1, 0), (1, 1), (3, 100), (8, 1023), (64, 4095)])
def test_uniform_decode_batch_equals_step_totals(shape, dtype, batch, context):
    spec = parse_batch(f"{batch}q1s{context + 1}")
    counts = batch_step_counts(shape, spec, dtype)
    assert (counts.bytes, counts.flops) == step_totals(shape, batch, context, dtype, cached=True)
    kv = kv_cache_bytes(1, batch, context + 1, shape.num_kv_heads, shape.head_dim, dtype)
    assert counts.kv_bytes == kv


@pytest.mark.parametrize("shape", SHAPES[:4], ids=lambda s: f"{s.d_model}-{s.variant}")
@pytest.mark.parametrize(
    "parts",
    [
        ["2q2k", "32q1s1k"],
        ["q512s2k", "16q1s1k"],
        ["q4s1k", "5q1s300", "3q7"],
        ["4q1..16s64..512", "q1s1"],
    ],
)
def test_mixed_batch_is_its_parts_with_the_weights_once(shape, parts):
    whole = batch_step_counts(shape, parse_batch("_".join(parts)), "bfloat16")
    alone = [batch_step_counts(shape, parse_batch(p), "bfloat16") for p in parts]
    extra_weights = (len(parts) - 1) * weight_bytes(shape, "bfloat16")
    assert whole.bytes == sum(c.bytes for c in alone) - extra_weights
    assert whole.flops == sum(c.flops for c in alone)
    assert whole.kv_bytes == sum(c.kv_bytes for c in alone)


def test_batch_prefill_flops_are_prefill_flops():
    # a batch of prompts and nothing cached: one causal forward over each
    counts = batch_step_counts(SMALL, parse_batch("3q8"), "float32")
    assert counts.flops == prefill_flops(SMALL, 3, 8)


def test_batch_step_counts_sequence_by_sequence():
    # a ragged batch counted in groups equals the sum over its sequences one by one
    spec = parse_batch("64q1..4s8..64@5")
    counts = batch_step_counts(SMALL, spec, "float16")
    per = [(s.q_len, s.kv_len) for s in spec.sequences]
    assert counts.bytes == weight_bytes(SMALL, "float16") + sum(
        step_traffic_bytes(SMALL, 1, q, k, "float16") for q, k in per
    )
    assert counts.flops == sum(forward_flops(SMALL, 1, q, k, causal=True) for q, k in per)
    assert counts.kv_bytes == sum(2 * 32 * k * 2 for _, k in per)


def test_score_matrix_bytes():
    # batch 2 * 4 query heads * 3 queries * 5 keys * 4 bytes
    assert score_matrix_bytes(SMALL, 2, 3, 5, 4) == 480
    # Llama-2-7B prefill of 4096 tokens, fp16 scores: 32 * 4096 * 4096 * 2 = 1 GiB
    assert score_matrix_bytes(AttentionShape(4096, 32, 32), 1, 4096, 4096, 2) == GiB


def test_uncached_step_bytes():
    # prefix 4, batch 2 -> 8 tokens, float16:
    #   weights 24,576; K/V 2 * 2 * 32 * 8 * 2 = 2,048; q and attention 2 * 2 * 64 * 8 * 2
    #   = 4,096; x and output 2 * 64 * 8 * 2 = 2,048
    assert uncached_step_bytes(SMALL, 2, 4, "float16") == 32_768


def test_decode_totals_cached():
    # prompt 3, 2 steps, batch 2, float16. Step 0 feeds token 3 (3 cached, 4 keys), step 1
    # feeds token 4 (4 cached, 5 keys).
    # bytes: 24,576 + 256 + 1,024 + KV read 2*2*32*4*2 = 1,024  -> 26,880
    #        24,576 + 256 + 1,024 + KV read 2*2*32*5*2 = 1,280  -> 27,136   total 54,016
    # FLOPs: projections for one token 2*64*64*2*2 + 2*64*32*2*2 = 49,152 per step;
    #        core 512 * 4 keys = 2,048 and 512 * 5 = 2,560        total 102,912
    assert decode_totals(SMALL, 2, 3, 2, "float16", cached=True) == (54_016, 102_912)


def test_decode_totals_uncached():
    # Step with prefix n costs 24,576 + 2,048 * n bytes: n=4 -> 32,768, n=5 -> 34,816
    # FLOPs: 49,152 * n projections + 512 * n(n+1)/2 core:
    #   n=4: 196,608 + 5,120 = 201,728; n=5: 245,760 + 7,680 = 253,440
    assert decode_totals(SMALL, 2, 3, 2, "float16", cached=False) == (67_584, 455_168)


def test_decode_totals_zero_steps_and_cache_saves_work():
    assert decode_totals(SMALL, 1, 8, 0, "float32", cached=True) == (0, 0)
    cached = decode_totals(SMALL, 1, 16, 8, "bfloat16", cached=True)
    uncached = decode_totals(SMALL, 1, 16, 8, "bfloat16", cached=False)
    assert cached[0] < uncached[0] and cached[1] < uncached[1]


@pytest.mark.parametrize(
    "heads, kv_heads, label",
    [
        (32, 32, "MHA"),
        (32, 8, "GQA-8"),
        (32, 4, "GQA-4"),
        (32, 1, "MQA"),
        (1, 1, "MHA"),
        (64, 2, "GQA-2"),
    ],
)
def test_variant_label(heads, kv_heads, label):
    assert variant_label(heads, kv_heads) == label
    assert AttentionShape(heads * 8, heads, kv_heads).variant == label


def test_attention_shape_derived_sizes():
    s = AttentionShape(4096, 32, 8)
    assert s.head_dim == 128 and s.group_size == 4
    assert s.q_dim == 4096 and s.kv_dim == 1024
    g = AttentionShape(3072, 16, 16, head_dim=256)
    assert g.head_dim == 256 and g.q_dim == 4096
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.num_heads = 16  # type: ignore[misc]


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        ((0, 8, 8), {}, "d_model must be a positive integer, got 0"),
        ((-4, 8, 8), {}, "d_model must be a positive integer, got -4"),
        ((64, 0, 1), {}, "num_heads must be a positive integer, got 0"),
        ((64, 8, 0), {}, "num_kv_heads must be a positive integer, got 0"),
        ((64.0, 8, 8), {}, "d_model must be a positive integer, got 64.0"),
        ((True, 1, 1), {}, "d_model must be a positive integer, got True"),
        ((100, 3, 3), {}, "num_heads 3 does not divide d_model 100"),
        ((64, 8, 3), {}, "num_kv_heads 3 does not divide num_heads 8"),
        ((64, 8, 16), {}, "num_kv_heads 16 does not divide num_heads 8"),
        ((64, 8, 8), {"head_dim": 0}, "head_dim must be a positive integer, got 0"),
        ((64, 8, 8), {"head_dim": 8.0}, "head_dim must be a positive integer, got 8.0"),
    ],
)
def test_attention_shape_validation(args, kwargs, message):
    with pytest.raises(ValueError) as info:
        AttentionShape(*args, **kwargs)
    assert message in str(info.value)


def test_attention_shape_head_dim_need_not_divide():
    # with head_dim given, num_heads need not divide d_model
    assert AttentionShape(100, 3, 3, head_dim=32).q_dim == 96


def test_a_causal_step_with_fewer_keys_than_queries_is_refused():
    """Query r of the last q_len sees k_len - q_len + r + 1 keys: fewer keys than queries
    would count negative pairs (an MLA prefill's FLOPs below zero), so it is refused."""
    assert visible_pairs(4, 4, True) == 10
    with pytest.raises(FieldError, match="kv_len"):
        visible_pairs(512, 256, True)
    assert visible_pairs(512, 256, False) == 512 * 256
