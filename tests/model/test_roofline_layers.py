"""One attention layer's step, as predict's layer rows count it: an MLA model's own MLA
layer (its projections, its latent cache, its absorbed or expanded attention), and a
layer's projections in the weights' format, each counted by hand and against the
whole model's counts of the same layers."""

from __future__ import annotations

import pytest

from attnbench.model.devices import DEVICES, attention_flops_for, flops_for
from attnbench.model.model_params import part_params
from attnbench.model.presets import get_preset
from attnbench.model.roofline import (
    ATTENTION_KERNELS,
    QUANTISE_KERNELS,
    layer_counts,
    mla_counts,
    mla_layer_counts,
    predict_counts,
)
from attnbench.model.shapes import AttentionShape
from attnbench.model.weights import WeightFormat

#: Llama-2-7B's attention layer: d 4096, 32 heads of 128, MHA.
LLAMA = AttentionShape(4096, 32, 32, 128)
#: Its four projections: 4 * 4096 * 4096 weights, no bias.
LLAMA_PARAMS = 4 * 4096 * 4096  # 67,108,864


def test_an_mla_layer_s_decode_step_by_hand():
    """DeepSeek-V3 at tp 8 (d 7168, 128 heads, q_lora_rank 1536, kv_lora_rank 512,
    qk_nope 128, qk_rope 64, v 128): 16 heads a rank, the down-projections replicated."""
    spec = get_preset("deepseek-v3")
    counts = mla_layer_counts(spec, 1, 1, 2049, "bfloat16", tp=8)
    # q_a 7168*1536 + its norm 1536 + q_b 1536*16*(128+64)   = 15,730,176
    q = 7168 * 1536 + 1536 + 1536 * 16 * 192
    # kv_a 7168*(512+64) + its norm 512 + kv_b 512*16*(128+128) = 6,226,432
    kv = 7168 * 576 + 512 + 512 * 16 * 256
    # o 16*128*7168                                              = 14,680,064
    o = 16 * 128 * 7168
    params = q + kv + o
    assert params == 36_636_672
    assert counts.weight_bytes == 2 * params == 73_273_344
    # the whole latent on every rank: (512 + 64) * 2 bytes = 1,152 a token, 2,049 keys
    # read and the new one written: 2,050 * 1,152
    assert counts.kv_bytes == (2049 + 1) * (512 + 64) * 2 == 2_361_600
    # x read, the layer's output (2 * 7168), q (16 * 192) and the attention's output
    # (16 * 128), one token, 2 bytes each
    assert counts.activation_bytes == (2 * 7168 + 16 * (192 + 128)) * 2 == 38_912
    # absorbed: each of 16 heads scores 2,049 latents (2 * (512 + 64)) and sums them
    # (2 * 512): 2 * (2 * 512 + 64) * 16 * 2049
    core = 2 * (2 * 512 + 64) * 16 * 2049
    assert core == 71_337_984
    assert counts.attention_flops == core
    assert counts.flops == core + 2 * params  # the projections: 2 per weight per token
    assert counts.bytes == 73_273_344 + 2_361_600 + 38_912  # 72.17 MiB, not 128 MiB
    # the norm, q_a with kv_a, q_a's norm, q_b, kv_a's norm, rotary, the two absorbing
    # batched matmuls, the cache write, attention, o: 11 kernels
    assert (counts.layers, counts.kernels, counts.allreduces) == (1, 11, 1)


def test_an_mla_layer_s_weights_are_what_params_counts_of_its_attention():
    """`attnbench params --model deepseek-v3`: attention 11,413,547,008 over 61 layers."""
    spec = get_preset("deepseek-v3")
    # q_a 7168*1536 + 1536 + q_b 1536*128*192, kv_a 7168*576 + 512 + kv_b 512*128*256,
    # o 128*128*7168
    per_layer = (
        (7168 * 1536 + 1536 + 1536 * 128 * 192)
        + (7168 * 576 + 512 + 512 * 128 * 256)
        + 128 * 128 * 7168
    )
    assert per_layer == 187_107_328 == 11_413_547_008 // 61
    assert part_params(spec)["attention"] == 61 * per_layer
    counts = mla_layer_counts(spec, 1, 1, 2049, "bfloat16")
    assert counts.weight_bytes == 2 * per_layer  # 356.9 MiB, not 4 * 7168 * 16384 * 2


def test_an_mla_layer_s_prefill_up_projects_each_latent_once_by_hand():
    """DeepSeek-V2-Lite (d 2048, 16 heads, full-rank queries, kv_lora_rank 512), a prefill
    of 1,024 tokens."""
    spec = get_preset("deepseek-v2-lite")
    counts = mla_layer_counts(spec, 1, 1024, 1024, "bfloat16")
    # q 2048*16*192 + kv_a 2048*576 + norm 512 + kv_b 512*16*256 + o 16*128*2048
    params = 2048 * 16 * 192 + 2048 * 576 + 512 + 512 * 16 * 256 + 16 * 128 * 2048
    assert params == 13_763_072 == 371_602_944 // 27  # params: attention over 27 layers
    assert counts.weight_bytes == 2 * params
    # 1,024 latents read and 1,024 written, 1,152 bytes each
    assert counts.kv_bytes == 2 * 1024 * 1152 == 2_359_296
    # causal: 1024 * 1025 / 2 pairs, 2 * (192 + 128) FLOPs per pair and head
    core = 2 * (192 + 128) * 16 * (1024 * 1025 // 2)
    assert counts.attention_flops == core == 5_373_952_000
    # the prompt's keys and values are its up-projection's output (kv_b, in `params`),
    # counted once per token with the projections: nothing cached is expanded again
    assert counts.flops == core + 2 * 1024 * params == 33_560_723_456


def test_an_mla_chunk_expands_its_cached_prefix_once_more():
    """A prefill chunk of 512 tokens after 1,536 cached: its own keys and values come from
    its up-projection; the 1,536 cached latents are up-projected again,
    2 * 512 * 16 * (128 + 128) FLOPs each."""
    spec = get_preset("deepseek-v2-lite")
    chunk = mla_layer_counts(spec, 1, 512, 2048, "bfloat16")
    params = 13_763_072
    pairs = 512 * 1536 + 512 * 513 // 2
    core = 2 * (192 + 128) * 16 * pairs
    expand = 2 * 1536 * 512 * 16 * 256
    assert chunk.flops == core + expand + 2 * 512 * params


@pytest.mark.parametrize(("q_len", "kv_len"), [(1, 4097), (512, 512)])
def test_an_mla_layer_is_one_of_the_model_s_layers(q_len, kv_len):
    """The layer rows and the model rows count the same layers: 61 of the layer are the
    model's attention (its cache, its FLOPs with the projections', its weights)."""
    spec = get_preset("deepseek-v3")
    layer = mla_layer_counts(spec, 2, q_len, kv_len, "bfloat16", tp=8)
    model = mla_counts(spec, 2, q_len, kv_len, "bfloat16", tp=8)
    assert 61 * layer.kv_bytes == model.kv_bytes
    assert 61 * layer.activation_bytes == model.activation_bytes
    assert 61 * layer.attention_flops == model.core_flops
    attention = part_params(spec, 8)["attention"]
    assert 61 * layer.flops == model.flops + 2 * 2 * q_len * attention
    assert 61 * layer.weight_bytes == 2 * attention


def test_a_layer_s_weight_only_int8_projections_by_hand():
    """`predict --model llama-2-7b --weights-dtype int8`: the layer decode row was 160.06
    MiB whatever the weights (128 MiB of float16 projections and 32 MiB of cache)."""
    full = layer_counts(LLAMA, 1, 1, 2049, "float16")
    int8 = layer_counts(LLAMA, 1, 1, 2049, "float16", weights="int8")
    # float16: 67,108,864 weights * 2 bytes = 128 MiB
    assert full.weight_bytes == 2 * LLAMA_PARAMS == 134_217_728
    # int8: a byte a weight, a 16-bit scale for each of 4 * 4096 rows of 4096 inputs
    assert int8.weight_bytes == LLAMA_PARAMS + 4 * 4096 * 2 == 67_141_632
    # the cache: 2 (K, V) * 32 heads * 128 * 2 bytes a token, 2,049 read and 1 written
    assert int8.kv_bytes == full.kv_bytes == 2 * 32 * 128 * 2 * 2050 == 33_587_200
    # x read, q, the attention's output, the layer's output: 4 * 4096 * 2 bytes
    assert int8.activation_bytes == full.activation_bytes == 4 * 4096 * 2
    assert int8.bytes == 67_141_632 + 33_587_200 + 32_768 == 100_761_600  # 96.09 MiB
    assert full.bytes == 134_217_728 + 33_587_200 + 32_768 == 167_837_696  # 160.06 MiB
    # weight-only: dequantised (a conversion and a scale: 2 ops a weight), matmuls in float16
    assert int8.dequant_ops == 2 * LLAMA_PARAMS and full.dequant_ops == 0
    assert int8.matmul_dtype == "float16" and int8.flops == full.flops


def test_a_layer_s_int4_projections_by_hand():
    int4 = layer_counts(LLAMA, 1, 1, 2049, "float16", weights=WeightFormat("int4"))
    # half a byte a weight; groups of 128: 4 * 4096 rows * 32 groups * (scale + zero) * 2
    assert int4.weight_bytes == LLAMA_PARAMS // 2 + 4 * 4096 * 32 * 2 * 2 == 35_651_584
    assert int4.dequant_ops == 5 * LLAMA_PARAMS


def test_a_layer_s_float8_projections_run_at_the_float8_rate():
    """The layer prefill was timed at float16's rate whatever the weights."""
    full = layer_counts(LLAMA, 1, 2048, 2048, "float16")
    fp8 = layer_counts(LLAMA, 1, 2048, 2048, "float16", weights="float8_e4m3fn")
    assert fp8.matmul_dtype == "float8_e4m3fn" and fp8.dequant_ops == 0
    assert fp8.weight_bytes == LLAMA_PARAMS + 4 * 4096 * 2  # a byte a weight, row scales
    # each projection's input quantised first, read in float16 and written in float8 (3
    # bytes): q, k and v read d (4096), o the attention's output (32 * 128), 2048 tokens
    assert fp8.activation_bytes - full.activation_bytes == 2048 * 3 * (4096 + 4096)
    device = DEVICES["h100-sxm"]
    f8 = flops_for(device, "float8_e4m3fn")
    bw = device.memory_bandwidth
    dense = (fp8.bytes - fp8.kv_bytes) / bw + (fp8.flops - fp8.attention_flops) / f8
    # the core stays in float16, at the attention kernel's rate
    core = fp8.kv_bytes / bw + fp8.attention_flops / attention_flops_for(device, "float16")
    assert fp8.attention_core_flops == fp8.attention_flops
    # and a kernel quantising the input of each of its two projections' matmuls
    assert fp8.kernels == full.kernels + 2 * QUANTISE_KERNELS
    # each kernel launched, and waiting one memory latency for its first bytes
    per_kernel = device.launch_s + device.memory_latency_s
    expected = dense + core + (ATTENTION_KERNELS + 2 * QUANTISE_KERNELS) * per_kernel
    found = predict_counts(fp8, device, "float16")
    assert found.time_s == pytest.approx(expected)
    assert found.time_s < predict_counts(full, device, "float16").time_s


def test_a_layer_s_weights_match_the_model_s_attention_part():
    """Llama-2-7B's 32 layers in int8: the model reads 32 of the layer's projections."""
    spec = get_preset("llama-2-7b")
    layer = layer_counts(LLAMA, 1, 1, 2049, "float16", weights="int8")
    fmt = WeightFormat("int8")
    assert 32 * layer.weight_bytes == fmt.bytes(part_params(spec)["attention"], 4096)
    assert 32 * layer.dequant_ops == fmt.dequant_ops * part_params(spec)["attention"]
