"""The roofline model: hand-computed times, bounds and ridge points, kernel launches,
tensor-parallel collectives, quantised weights, MLA, and whole-model counts against the
parameter and KV-cache formulas."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from attnbench.errors import FieldError, show_value
from attnbench.model.capacity import KvFormat, cache_bytes, kv_cache_bytes, token_layout
from attnbench.model.devices import Collectives, DeviceSpec, device_spec
from attnbench.model.formulas import attention_core_flops
from attnbench.model.model_params import active_params, total_params, weight_bytes_per_rank
from attnbench.model.presets import get_preset
from attnbench.model.roofline import (
    DEFAULT_MODEL,
    LAYER_KERNELS,
    QUANTISE_KERNELS,
    STEP_KERNELS,
    Matmul,
    PerfModel,
    allgather_s,
    allreduce_s,
    attention_counts,
    decode_counts,
    experts_touched,
    layer_counts,
    mla_layer_counts,
    predict,
    predict_counts,
    prefill_counts,
    tokens_per_s,
)
from attnbench.model.shapes import AttentionShape
from attnbench.model.weights import WeightFormat

#: A device of round figures: 1 TB/s, 100 TFLOP/s in bfloat16 (200 in float8), 100 GB/s
#: of all-reduce bus bandwidth with 20 us of latency, 2 us a kernel launch.
DEVICE = DeviceSpec(
    name="round",
    title="A device of round figures",
    memory_bytes=80 * 10**9,
    memory_bandwidth=1e12,
    dense_flops={"float32": 1e13, "bfloat16": 1e14, "float8": 2e14},
    collectives=Collectives(20e-6, 1e11, "a test link"),
    launch_s=2e-6,
    interconnect="a test link",
    datasheet_bandwidth=1e12,
    datasheet_flops={"bfloat16": 1e14},
    interconnect_bandwidth=1e11,
    sources=(),
)
NO_PEERS = replace(DEVICE, collectives=None)
IDEAL = PerfModel(1.0, 1.0, 0.0, "ideal")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("efficiency_bw", -0.5),
        ("efficiency_bw", 0.0),
        ("efficiency_flops", 1.6),
        ("efficiency_flops", True),
        ("overhead_s", -1e-6),
        ("overhead_s", "10us"),
    ],
)
def test_perf_model_refuses_a_bad_field_by_name(field, value):
    with pytest.raises(FieldError) as err:
        replace(DEFAULT_MODEL, **{field: value})
    assert err.value.field == field
    assert str(err.value).startswith(f"{field}: {show_value(value)}: ")


def test_memory_bound_step():
    roof = predict(10**9, 10**9, 1e12, 1e14, IDEAL)
    assert roof.time_s == pytest.approx(1e-3 + 1e-5)
    assert (roof.bound, roof.intensity, roof.ridge) == ("memory", 1.0, 100.0)


def test_compute_bound_step():
    roof = predict(10**9, 10**12, 1e12, 1e14, IDEAL)
    assert roof.time_s == pytest.approx(1e-3 + 1e-2)  # the bytes' time and the FLOPs' add
    assert (roof.bound, roof.intensity) == ("compute", 1000.0)


def test_efficiencies_scale_the_bounds_and_the_ridge():
    model = PerfModel(0.5, 0.25, 0.0, "test")
    # memory 1e9 / 0.5e12 = 2 ms; compute 1e11 / 0.25e14 = 4 ms
    roof = predict(10**9, 10**11, 1e12, 1e14, model)
    assert roof.time_s == pytest.approx(2e-3 + 4e-3)
    assert roof.ridge == pytest.approx(50.0)  # the effective peaks: 0.25e14 / 0.5e12
    assert roof.bound == "compute" and roof.intensity > roof.ridge


def test_overhead_is_paid_once_per_layer():
    model = PerfModel(1.0, 1.0, 10e-6, "test")
    assert predict(10**9, 0, 1e12, 1e14, model).time_s == pytest.approx(1e-3 + 10e-6)
    assert predict(10**9, 0, 1e12, 1e14, model, overheads=32).time_s == pytest.approx(
        1e-3 + 32 * 10e-6
    )


def test_tokens_per_s():
    assert tokens_per_s(8, 0.02) == pytest.approx(400.0)


def test_collective_times_follow_nccl_tests_bus_bandwidth():
    assert allreduce_s(10**6, 1, NO_PEERS) == 0.0
    # 2 * 3/4 of 1 MB at 100 GB/s busbw is 15 us, plus 20 us of latency
    assert allreduce_s(10**6, 4, DEVICE) == pytest.approx(15e-6 + 20e-6)
    # an all-gather moves (tp - 1) / tp of its result
    assert allgather_s(10**6, 4, DEVICE) == pytest.approx(7.5e-6 + 20e-6)
    with pytest.raises(FieldError, match="interconnect"):
        allreduce_s(10**6, 2, NO_PEERS)


def test_a_collective_past_one_node_is_refused():
    """The collectives' figures are one node's (8 GPUs); 16 ranks would cross the network,
    which is not timed: refused, naming tp, not priced as a ring of 16 over NVLink."""
    assert allreduce_s(10**6, 8, DEVICE) > 0
    with pytest.raises(FieldError, match=r"tp.*16.*8 GPUs of one"):
        allreduce_s(10**6, 16, DEVICE)
    counts = decode_counts(get_preset("llama-3-70b"), 1, 2048, "bfloat16", tp=16)
    with pytest.raises(FieldError, match="8 GPUs of one h100-sxm node"):
        predict_counts(counts, device_spec("h100-sxm"), "bfloat16", tp=16)


def test_collective_latency_grows_with_the_rings_steps():
    ring = replace(DEVICE, collectives=Collectives(6e-6, 1e11, "a test ring", step_s=1e-6))
    # an all-reduce over 8 ranks: 2 * 7 ring steps; an all-gather: 7
    assert allreduce_s(8, 8, ring) == pytest.approx(6e-6 + 14e-6 + 14 / 8 * 8 / 1e11)
    assert allgather_s(8, 8, ring) == pytest.approx(6e-6 + 7e-6 + 7 / 8 * 8 / 1e11)
    assert allreduce_s(8, 2, ring) < allreduce_s(8, 4, ring) < allreduce_s(8, 8, ring)


def test_llama_2_7b_decode_reads_its_weights_and_cache():
    spec, context = get_preset("llama-2-7b"), 4096
    counts = decode_counts(spec, 1, context, "bfloat16")
    # every weight but the embedding table, of which one row is looked up
    assert counts.weight_bytes == 2 * (total_params(spec) - 32000 * 4096 + 4096)
    kv = kv_cache_bytes(32, 1, context + 1, 32, 128, "bfloat16")
    assert counts.kv_bytes == kv + kv_cache_bytes(32, 1, 1, 32, 128, "bfloat16")
    assert counts.bytes == pytest.approx(2 * 6.74e9 + kv, rel=0.02)
    assert counts.flops == pytest.approx(2 * 6.74e9, rel=0.2)  # + attention over 4k keys
    assert counts.allreduces == 0


def test_decode_of_llama_2_7b_on_a_device_is_memory_bound():
    counts = decode_counts(get_preset("llama-2-7b"), 1, 4096, "bfloat16")
    pred = predict_counts(counts, DEVICE, "bfloat16")
    assert pred.roofline.bound == "memory"
    launches = (32 * LAYER_KERNELS + STEP_KERNELS) * 2e-6
    assert counts.kernels == 32 * LAYER_KERNELS + STEP_KERNELS
    expected = counts.bytes / 1e12 + counts.flops / 1e14 + launches
    assert pred.launch_s == pytest.approx(launches)
    assert pred.time_s == pytest.approx(expected)
    assert pred.tokens_per_s == pytest.approx(1 / expected)


@pytest.mark.parametrize(
    ("preset", "per_layer", "moe_layers", "per_moe_layer"),
    [
        # 32 layers of 10 kernels, each a MoE layer: routing (3), no shared experts
        ("mixtral-8x7b", 10, 32, 3),
        # MLA with low-rank queries: 11 attention kernels, not 6; 58 MoE layers after 3
        # dense ones, each with routing (3) and a shared expert's MLP (3)
        ("deepseek-v3", 10 - 6 + 11, 58, 3 + 3),
        # MLA without low-rank queries (10); 26 MoE layers after 1 dense one, 2 shared
        ("deepseek-v2-lite", 10 - 6 + 10, 26, 3 + 3),
    ],
)
def test_a_step_launches_each_layers_kernels(preset, per_layer, moe_layers, per_moe_layer):
    spec = get_preset(preset)
    counts = decode_counts(spec, 1, 1024, "bfloat16")
    layers = spec.num_layers * per_layer
    assert counts.kernels == layers + moe_layers * per_moe_layer + STEP_KERNELS


@pytest.mark.parametrize(
    ("preset", "weights", "quantised"),
    [
        # 32 layers: QKV's and the output's inputs, the MLP's two (gate/up, down)
        ("llama-3-8b", "float8_e4m3fn", 32 * (2 + 2)),
        ("llama-3-8b", WeightFormat.of("float8_e4m3fn", keep_attention=True), 32 * 2),
        # nvfp4 quantises its inputs as float8 does
        ("mixtral-8x7b", "nvfp4", 32 * (2 + 2)),
        # MLA: 3 a layer; each of 61 layers' MLP or routed experts 2, the shared experts
        # beside the routed ones of 58 layers 2 more
        ("deepseek-v3", "float8_e4m3fn", 61 * (3 + 2) + 58 * 2),
        # MLA without low-rank queries: its queries' and latent's projections apart, 3 too
        ("deepseek-v2-lite", "float8_e4m3fn", 27 * (3 + 2) + 26 * 2),
        # a head quantised with the rest quantises its input too
        ("llama-3-8b", WeightFormat.of("float8_e4m3fn", quantize_head=True), 32 * 4 + 1),
        # weight-only formats quantise no input
        ("llama-3-8b", "int4", 0),
    ],
)
def test_a_format_that_quantises_inputs_launches_a_kernel_before_each_matmul(
    preset, weights, quantised
):
    spec = get_preset(preset)
    plain = decode_counts(spec, 1, 1024, "bfloat16")
    counts = decode_counts(spec, 1, 1024, "bfloat16", weights=weights)
    assert counts.kernels - plain.kernels == quantised * QUANTISE_KERNELS


@pytest.mark.parametrize(
    ("preset", "per_token"),
    [
        # per layer: QKV's input d, the output projection's 32 * 128, gate/up's d, down's
        # 14,336; the head kept
        ("llama-3-8b", 32 * (4096 + 4096 + 4096 + 14336)),
        # MLA (tp 1): the down-projections' d, the queries' latent 1,536, the output's
        # 128 * 128; the 3 dense layers' MLP d + 18,432; the 58 MoE layers' routed
        # experts' d + 8 * 2,048, their shared expert's d + 2,048
        (
            "deepseek-v3",
            61 * (7168 + 1536 + 128 * 128)
            + 3 * (7168 + 18432)
            + 58 * (7168 + 8 * 2048 + 7168 + 2048),
        ),
        # MLA without low-rank queries: the queries' and the latent's down-projections
        # read d each
        (
            "deepseek-v2-lite",
            27 * (2 * 2048 + 16 * 128) + 1 * (2048 + 10944) + 26 * (2048 + 6 * 1408 + 2048 + 2816),
        ),
    ],
)
def test_each_quantised_input_moves_its_bytes(preset, per_token):
    """float8 weights quantise each matmul's input: its bfloat16 read (2 bytes) and its
    float8 written (1), for every input a quantising kernel is launched for."""
    spec = get_preset(preset)
    plain = decode_counts(spec, 1, 1024, "bfloat16")
    counts = decode_counts(spec, 1, 1024, "bfloat16", weights="float8_e4m3fn")
    assert counts.activation_bytes - plain.activation_bytes == 3 * per_token


def test_an_mla_model_s_quantised_inputs_by_hand_at_tp_8():
    """DeepSeek-V3 in float8 at TP 8, batch 8, 3 bytes an input element. A token feeds its
    MLPs 61 * 7,168 (their input), 3 * 18,432 / 8 (the dense layers' down), 58 * 2,048 / 8
    (the shared experts' down), 58 * 8 * 2,048 / 8 (its routed experts' down) and
    58 * 7,168 (the shared experts' gate/up); its attention 7,168 + 1,536 + 128 * 128 / 8
    a layer. With data-parallel attention each rank attends its own sequence with all 128
    heads: 7,168 + 1,536 + 128 * 128 a layer, for 1 token of the 8. The layer row is one
    MLA layer's attention at TP 8."""
    spec, fp8 = get_preset("deepseek-v3"), "float8_e4m3fn"
    mlp = 61 * 7168 + 3 * 18432 // 8 + 58 * 2048 // 8 + 58 * 8 * 2048 // 8 + 58 * 7168
    for dp_attention, attention in ((False, 8 * (7168 + 1536 + 2048)), (True, 7168 + 1536 + 16384)):
        plain = decode_counts(spec, 8, 1024, "bfloat16", tp=8, dp_attention=dp_attention)
        counts = decode_counts(
            spec, 8, 1024, "bfloat16", tp=8, weights=fp8, dp_attention=dp_attention
        )
        inputs = 8 * mlp + 61 * attention
        assert counts.activation_bytes - plain.activation_bytes == 3 * inputs
    layer = mla_layer_counts(spec, 1, 1, 1025, "bfloat16", tp=8, weights=fp8)
    plain_layer = mla_layer_counts(spec, 1, 1, 1025, "bfloat16", tp=8)
    assert layer.activation_bytes - plain_layer.activation_bytes == 3 * (7168 + 1536 + 2048)


def test_an_mla_layer_without_low_rank_queries_launches_one_kernel_less():
    """DeepSeek-V2-Lite projects its queries whole: 10 kernels, where V3's take 11."""
    lite = mla_layer_counts(get_preset("deepseek-v2-lite"), 1, 1, 1025, "bfloat16")
    assert lite.kernels == 10


def test_a_prefill_moves_its_tokens_activations_through_every_kernel():
    spec, tokens = get_preset("llama-2-7b"), 2048
    d, inner, layers = 4096, 11008, 32
    counts = prefill_counts(spec, 1, tokens, "bfloat16")
    attention = attention_counts(AttentionShape(d, 32, 32), 1, tokens, tokens, "bfloat16")
    # per layer and token: two norms (read, write d each), the MLP's input and output, and
    # inside it gate/up written (2I), read by SiLU-and-multiply (2I), its product written
    # and read by the down projection (I each); the final norm once
    per_token = layers * (2 * 2 * d + 2 * d + 6 * inner) + 2 * d
    assert counts.activation_bytes == layers * attention.activation_bytes + 2 * tokens * per_token
    # as large as the weights a 2,048-token prefill streams
    assert counts.activation_bytes > 0.5 * counts.weight_bytes


def test_weight_only_weights_are_dequantised_once_a_step_on_the_cuda_cores():
    spec = get_preset("llama-2-7b")
    plain = decode_counts(spec, 1, 128, "bfloat16")
    int4 = decode_counts(spec, 1, 128, "bfloat16", weights=WeightFormat("int4"))
    fp8 = decode_counts(spec, 1, 128, "bfloat16", weights=WeightFormat("float8_e4m3fn"))
    body = total_params(spec) - 2 * 32000 * 4096  # the embeddings and head stay bfloat16
    assert int4.dequant_ops == 5 * body
    assert plain.dequant_ops == fp8.dequant_ops == 0  # the tensor cores take them as stored
    pred = predict_counts(int4, DEVICE, "bfloat16")
    assert pred.dequant_s == pytest.approx(5 * body / DEVICE.dense_flops["float32"])
    assert pred.time_s == pytest.approx(
        pred.roofline.time_s + pred.launch_s + pred.allreduce_s + pred.dequant_s
    )


def test_float8_weights_quantise_each_matmuls_input_first():
    spec, tokens = get_preset("llama-2-7b"), 2048
    d, inner, layers = 4096, 11008, 32
    plain = prefill_counts(spec, 1, tokens, "bfloat16")
    fp8 = prefill_counts(spec, 1, tokens, "bfloat16", weights=WeightFormat("float8_e4m3fn"))
    int8 = prefill_counts(spec, 1, tokens, "bfloat16", weights=WeightFormat("int8"))
    # q/k/v read d, o_proj q_dim, gate/up d, down I: each read in bfloat16, written in fp8
    inputs = layers * (d + d + d + inner)
    assert fp8.activation_bytes - plain.activation_bytes == tokens * inputs * (2 + 1)
    assert int8.activation_bytes == plain.activation_bytes  # weight-only: inputs as they are


def test_nvfp4_weights_quantise_each_matmuls_input_to_four_bits_and_a_scale():
    spec, tokens = get_preset("llama-2-7b"), 2048
    d, inner, layers = 4096, 11008, 32
    plain = prefill_counts(spec, 1, tokens, "bfloat16")
    fp4 = prefill_counts(spec, 1, tokens, "bfloat16", weights=WeightFormat("nvfp4"))
    inputs = layers * (d + d + d + inner)
    assert fp4.activation_bytes - plain.activation_bytes == round(tokens * inputs * 2.5625)
    assert fp4.matmul_dtype == "float4"
    with pytest.raises(FieldError, match="no float4 peak"):
        predict_counts(fp4, DEVICE, "bfloat16")


def test_kept_attention_stays_in_16_bits_with_its_matmuls_at_their_rate():
    """gpt-oss's and DeepSeek-R1-FP4's checkpoints quantise the MLP and the experts, not
    the attention's projections: those are read in bfloat16, multiplied at its rate, and
    fed no quantised inputs."""
    spec, tokens = get_preset("llama-2-7b"), 2048
    d, layers = 4096, 32
    attention = layers * 4 * d * d  # q, k, v, o of MHA
    fp4 = WeightFormat("nvfp4")
    kept = WeightFormat("nvfp4", kept_attention=True)
    quantised = prefill_counts(spec, 1, tokens, "bfloat16", weights=fp4)
    counts = prefill_counts(spec, 1, tokens, "bfloat16", weights=kept)
    # 2 bytes a weight where nvfp4 stores half a byte and a byte of scale per 16
    more = attention * 2 - attention * 9 // 16
    assert counts.weight_bytes - quantised.weight_bytes == more
    assert weight_bytes_per_rank(spec, kept) - weight_bytes_per_rank(spec, fp4) == more
    assert counts.attention_flops - quantised.attention_flops == 2 * tokens * attention
    # the q/k/v and o projections' inputs (d each) are not quantised: 2 + 0.5 + 1/16 bytes
    assert quantised.activation_bytes - counts.activation_bytes == tokens * 2.5625 * layers * 2 * d


def test_kept_attention_pads_its_tiles_at_the_activations_rate():
    """A decode step of one sequence pads each matmul to a tile of DEVICE's rows: the kept
    projections' and the head's zeros at bfloat16's rate, the quantised weights' at
    float8's."""
    spec = get_preset("llama-2-7b")
    device = replace(DEVICE, mma_rows=16)
    kept = WeightFormat("float8_e4m3fn", kept_attention=True)
    counts = decode_counts(spec, 1, 128, "bfloat16", weights=kept)
    attention, rest = 32 * 4 * 4096 * 4096, 32 * 3 * 4096 * 11008
    head = 32000 * 4096
    assert counts.padding_flops(16, "bfloat16") == 2 * 15 * (attention + head)
    assert counts.padding_flops(16) == 2 * 15 * rest
    pred = predict_counts(counts, device, "bfloat16")
    assert pred.padding_s == pytest.approx(
        2 * 15 * (attention + head) / 1e14 + 2 * 15 * rest / 2e14
    )
    # the head's FLOPs, like the kept projections', at the activations' rate
    fp8 = decode_counts(spec, 1, 128, "bfloat16", weights=WeightFormat("float8_e4m3fn"))
    bf16 = decode_counts(spec, 1, 128, "bfloat16")
    assert fp8.attention_flops - bf16.attention_flops == 2 * head


def test_prefill_is_compute_bound():
    spec = get_preset("llama-2-7b")
    counts = prefill_counts(spec, 1, 4096, "bfloat16")
    assert counts.flops > 2 * 6.6e9 * 4096
    assert predict_counts(counts, DEVICE, "bfloat16").roofline.bound == "compute"


def test_moe_reads_the_experts_its_tokens_touch():
    spec = get_preset("mixtral-8x7b")
    looked_up = (32000 - 1) * 4096  # the embedding rows not read at batch 1
    assert decode_counts(spec, 1, 1, "bfloat16").weight_bytes == 2 * (
        active_params(spec) - looked_up
    )
    # 64 sequences send 128 routes to 8 experts: each is missed with probability (3/4)^64
    many = decode_counts(spec, 64, 1, "bfloat16").weight_bytes
    per_expert = 3 * 4096 * 14336 * 32  # every layer's
    missed = round(8 * per_expert * 0.75**64)
    assert many == 2 * (total_params(spec) - (32000 - 64) * 4096 - missed)


def test_sliding_windows_bound_the_cache_read():
    spec = get_preset("mistral-7b")  # a window of 4096 on every layer
    windowless = replace(spec, windows=None)
    assert decode_counts(spec, 1, 1000, "bfloat16") == decode_counts(
        windowless, 1, 1000, "bfloat16"
    )
    layout = token_layout(32, 8, 128, KvFormat("bfloat16"))
    kv = decode_counts(spec, 1, 16000, "bfloat16").kv_bytes
    assert kv == cache_bytes(layout, {4096: 32}, {16001: 1}).total + 32 * layout.bytes
    assert kv < decode_counts(windowless, 1, 16000, "bfloat16").kv_bytes


def test_a_quantised_cache_moves_fewer_bytes():
    spec = get_preset("llama-3-8b")
    full = decode_counts(spec, 8, 8192, "bfloat16")
    int8 = decode_counts(spec, 8, 8192, "bfloat16", kv_dtype="int8")
    assert full.kv_bytes / 2 < int8.kv_bytes < full.kv_bytes  # half, plus the scales
    assert int8.weight_bytes == full.weight_bytes


def test_tensor_parallel_splits_the_weights_and_adds_allreduces():
    spec = get_preset("llama-3-70b")
    one = decode_counts(spec, 8, 4096, "bfloat16")
    eight = decode_counts(spec, 8, 4096, "bfloat16", tp=8)
    assert eight.weight_bytes == pytest.approx(one.weight_bytes / 8, rel=0.01)
    assert eight.kv_bytes == one.kv_bytes // 8  # 8 KV heads, one a rank
    assert (eight.allreduces, eight.allreduce_bytes) == (160, 8 * 8192 * 2)
    # the logits of the 8 sequences' last tokens, gathered from 8 vocabulary shards
    assert eight.gather_bytes == 8 * 128256 // 8 * 8 * 4
    pred = predict_counts(eight, DEVICE, "bfloat16", tp=8)
    per = 2 * 7 / 8 * 8 * 8192 * 2 / 1e11 + 20e-6
    gather = 7 / 8 * eight.gather_bytes / 1e11 + 20e-6
    assert pred.allreduce_s == pytest.approx(160 * per + gather)
    assert pred.time_s == pytest.approx(pred.roofline.time_s + pred.allreduce_s + pred.launch_s)


def test_q_and_k_norms_across_the_heads_add_an_allreduce_of_their_statistics_a_layer():
    """OLMo-2's (and MiniMax-M2's) norms take their statistics over all the heads: a rank
    holding some of them all-reduces each token's two sums of squares in every attention
    layer."""
    llama = get_preset("llama-3-8b")
    full = replace(llama, body=replace(llama.body, qk_norm="full"))
    per_head = replace(llama, body=replace(llama.body, qk_norm="head_dim"))
    two = decode_counts(full, 8, 4096, "bfloat16", tp=2)
    assert (two.norm_allreduces, two.norm_allreduce_bytes) == (32, 8 * 2 * 4)
    assert two.allreduces == decode_counts(per_head, 8, 4096, "bfloat16", tp=2).allreduces
    assert decode_counts(per_head, 8, 4096, "bfloat16", tp=2).norm_allreduces == 0
    assert decode_counts(full, 8, 4096, "bfloat16").norm_allreduces == 0  # one rank
    # a data-parallel attention holds every head on each rank
    assert decode_counts(full, 8, 4096, "bfloat16", tp=2, dp_attention=True).norm_allreduces == 0
    pred = predict_counts(two, DEVICE, "bfloat16", tp=2)
    plain = predict_counts(replace(two, norm_allreduces=0), DEVICE, "bfloat16", tp=2)
    # an all-reduce over 2 ranks: 2 * (2 - 1) / 2 of its 64 bytes over the test device's
    # 100 GB/s of bus bandwidth, plus its 20 us of latency
    per = 2 * 1 / 2 * 8 * 2 * 4 / 1e11 + 20e-6
    assert pred.allreduce_s - plain.allreduce_s == pytest.approx(32 * per)
    # the model's own attention layer, as predict's layer rows count it
    shape = full.attention_shape()
    layer = layer_counts(shape, 8, 1, 4097, "bfloat16", tp=2, qk_norm_across_heads=True)
    assert (layer.norm_allreduces, layer.norm_allreduce_bytes) == (1, 8 * 2 * 4)
    assert (
        layer_counts(shape, 8, 1, 4097, "bfloat16", qk_norm_across_heads=True).norm_allreduces == 0
    )


def test_a_replicated_vocabulary_is_read_whole_on_each_rank_with_no_gather():
    spec = get_preset("llama-3-70b")  # an untied head of 128,256 x 8,192
    split = decode_counts(spec, 8, 4096, "bfloat16", tp=8)
    whole = WeightFormat.of("bfloat16", vocab="replicated")
    replicated = decode_counts(spec, 8, 4096, "bfloat16", tp=8, weights=whole)
    head = 128256 * 8192
    assert replicated.weight_bytes - split.weight_bytes == 2 * (head - head // 8)
    assert replicated.flops - split.flops == 2 * 8 * (head - head // 8)  # 8 last tokens
    assert (replicated.gather_bytes, split.gather_bytes > 0) == (0, True)
    assert replicated.allreduces == split.allreduces
    # the memory of a rank holds the whole table and head; the layers stay split
    assert weight_bytes_per_rank(spec, whole, 8) - weight_bytes_per_rank(spec, "bfloat16", 8) == (
        2 * 2 * (head - head // 8)
    )
    one = decode_counts(spec, 8, 4096, "bfloat16", weights=whole)  # one rank: no difference
    assert one == decode_counts(spec, 8, 4096, "bfloat16")


def test_a_quantised_head_is_read_and_dequantised_with_the_rest():
    spec = get_preset("llama-2-7b")
    kept = decode_counts(spec, 1, 100, "bfloat16", weights=WeightFormat("int4", 32))
    with_head = WeightFormat("int4", 32, quantized_head=True)
    quantised = decode_counts(spec, 1, 100, "bfloat16", weights=with_head)
    head = 32000 * 4096
    # the head's 2 bytes a weight become half a byte, and a scale and zero point per 32
    assert kept.weight_bytes - quantised.weight_bytes == 2 * head - (head // 2 + head // 32 * 4)
    assert quantised.dequant_ops - kept.dequant_ops == 5 * head
    assert quantised.flops == kept.flops
    # a weight-only head multiplies on the CUDA cores, as the layers' weights do: no tiles
    assert [m.weights for m in kept.matmuls] == [head] and quantised.matmuls == ()
    float8 = WeightFormat("float8_e4m3fn", quantized_head=True)
    fp8 = decode_counts(spec, 1, 100, "bfloat16", weights=float8)
    fp8_kept = decode_counts(spec, 1, 100, "bfloat16", weights="float8_e4m3fn")
    assert fp8_kept.weight_bytes - fp8.weight_bytes == head - 32000 * 2  # a scale a row
    tied = get_preset("gemma-7b")  # its head is the embeddings: the lookup reads them
    int8 = decode_counts(tied, 1, 100, "bfloat16", weights="int8")
    head_too = WeightFormat("int8", quantized_head=True)
    assert decode_counts(tied, 1, 100, "bfloat16", weights=head_too) == int8
    assert weight_bytes_per_rank(tied, head_too) == weight_bytes_per_rank(tied, "int8")


def test_only_quantised_weights_quantise_their_head():
    with pytest.raises(FieldError, match="quantize_head.*bfloat16 weights are not quantised"):
        WeightFormat("bfloat16", quantized_head=True)
    assert not WeightFormat.of("bfloat16", quantize_head=True).quantized_head  # a sweep's
    assert WeightFormat.of("int4", 64, quantize_head=True).describe() == (
        "int4 in groups of 64, the head too"
    )


def test_a_vocabulary_layout_is_one_of_two():
    with pytest.raises(FieldError, match="vocab_layout.*choose from split, replicated"):
        WeightFormat.of("bfloat16", vocab="sharded")


def test_weight_only_quantisation_reads_packed_weights_and_their_scales():
    spec = get_preset("llama-2-7b")
    full = decode_counts(spec, 1, 100, "bfloat16")
    int4 = decode_counts(spec, 1, 100, "bfloat16", weights=WeightFormat("int4", 32))
    kept = (1 + 32000) * 4096  # one embedding row and the untied head stay bfloat16
    body = total_params(spec) - 32000 * 4096 * 2
    # half a byte a weight, and a 16-bit scale and zero point per 32 weights
    assert int4.weight_bytes == body // 2 + body // 32 * 4 + 2 * kept
    assert int4.weight_bytes < full.weight_bytes / 3
    assert (int4.flops, int4.matmul_dtype) == (full.flops, "bfloat16")  # dequantised
    int8 = decode_counts(spec, 1, 100, "bfloat16", weights="int8")
    assert int8.weight_bytes == body + body // 4096 * 2 + 2 * kept  # a scale per row


def test_float8_weights_run_their_matmuls_at_the_float8_rate():
    spec = get_preset("llama-2-7b")
    counts = prefill_counts(spec, 1, 4096, "bfloat16", weights="float8_e4m3fn")
    assert counts.matmul_dtype == "float8_e4m3fn"
    fp8 = predict_counts(counts, DEVICE, "bfloat16").roofline.time_s
    full = predict_counts(prefill_counts(spec, 1, 4096, "bfloat16"), DEVICE, "bfloat16")
    assert fp8 < full.roofline.time_s * 0.6  # compute-bound: twice the rate, half the bytes
    with pytest.raises(FieldError, match="float8"):
        predict_counts(counts, replace(DEVICE, dense_flops={"bfloat16": 1e14}), "bfloat16")


def test_mla_decode_reads_the_latent_cache_with_absorbed_attention():
    spec = get_preset("deepseek-v3")
    m, context = spec.mla, 4096
    counts = decode_counts(spec, 2, context, "bfloat16", tp=8)
    # every rank reads the whole latent of every layer: (512 + 64) bfloat16 values a token
    assert counts.kv_bytes == 61 * 2 * (context + 1 + 1) * m.latent_dim * 2
    # 16 query heads a rank score each latent (2 * (512 + 64)) and sum it (2 * 512)
    assert counts.attention_flops == 61 * 2 * 16 * (context + 1) * 2 * (2 * 512 + 64)
    prefill = prefill_counts(spec, 1, 1024, "bfloat16")
    # 37B active parameters, less the embedding table and the head (0.93B each), 2 FLOPs
    # each a token (the head's at the last token alone), beside the attention's core
    assert prefill.attention_flops > 0
    assert 2 * 35e9 * 1024 < prefill.flops - prefill.attention_flops < 2 * 37e9 * 1024


def test_a_bad_batch_is_named():
    with pytest.raises(FieldError, match="batch"):
        decode_counts(get_preset("llama-2-7b"), 0, 10, "bfloat16")


def test_the_cache_s_bytes_stream_at_their_own_efficiency():
    model = PerfModel(1.0, 1.0, 0.0, "test", efficiency_kv=0.25)
    roof = predict(2 * 10**9, 0, 1e12, 1e14, model, kv_bytes=10**9)
    assert roof.time_s == pytest.approx(1e-3 + 4e-3)
    assert roof.ridge == pytest.approx(1e14 / 1e12)  # the device's, at efficiency_bw
    unset = PerfModel(0.5, 1.0, 0.0, "test")
    assert predict(2 * 10**9, 0, 1e12, 1e14, unset, kv_bytes=10**9).time_s == pytest.approx(4e-3)
    with pytest.raises(ValueError, match="kv_bytes"):
        predict(10**9, 0, 1e12, 1e14, model, kv_bytes=2 * 10**9)


def test_a_model_states_its_parameters():
    model = PerfModel(0.8, 0.6, 10e-6, "defaults", efficiency_kv=0.35)
    assert model.describe() == (
        "efficiency_bw 0.8, efficiency_kv 0.35, efficiency_flops 0.6, overhead 10 us per "
        "layer (defaults)"
    )


def test_the_attention_core_is_a_roofline_of_its_own_after_the_dense_part():
    model = PerfModel(1.0, 1.0, 0.0, "test")
    # dense: 1 GB at 1 TB/s (1 ms) beside 1e9 FLOPs at 100 TFLOP/s (0.01 ms): memory-bound;
    # core: 1 MB (0.001 ms) beside 5e11 FLOPs (5 ms): compute-bound; the two add up
    roof = predict(10**9 + 10**6, 10**9 + 5 * 10**11, 1e12, 1e14, model, 1, 10**6, 5 * 10**11)
    assert roof.time_s == pytest.approx(1e-3 + 1e-5 + 1e-6 + 5e-3)
    assert roof.bound == "compute"  # the longer part's
    with pytest.raises(ValueError, match="attention_flops"):
        predict(10**9, 10, 1e12, 1e14, model, attention_flops=11)


def test_a_model_s_attention_flops_are_its_layers_cores():
    spec = get_preset("llama-3-8b")
    counts = decode_counts(spec, 4, 1000, "bfloat16")
    shape = AttentionShape(spec.d_model, spec.num_heads, spec.num_kv_heads, spec.head_dim)
    assert counts.attention_flops == 32 * attention_core_flops(shape, 4, 1, 1001, True)


def test_the_attention_kernel_s_flops_run_at_the_device_s_attention_rate():
    """Of the core's FLOPs, QK^T and PV run at the attention kernel's measured rate (half
    the matmul's here), a kept attention's projections at the matmul's."""
    model = PerfModel(1.0, 1.0, 0.0, "test")
    # 5e11 FLOPs at the core's rate, 4e11 of them the kernel's at 5e13: 1 + 8 ms
    roof = predict(10**6, 5 * 10**11, 1e12, 1e14, model, 1, 0, 5 * 10**11, None, 4 * 10**11, 5e13)
    assert roof.time_s == pytest.approx(1e-6 + 1e-3 + 8e-3)
    with pytest.raises(ValueError, match="kernel_flops"):
        predict(10**9, 10, 1e12, 1e14, model, attention_flops=5, kernel_flops=6)
    spec = get_preset("llama-3-8b")
    prefill = prefill_counts(spec, 1, 8192, "bfloat16")
    assert prefill.attention_core_flops == prefill.attention_flops  # nothing kept
    half = replace(DEVICE, attention_flops=5e13, attention_source="a test kernel")
    slower = predict_counts(prefill, half, "bfloat16").time_s
    assert slower - predict_counts(prefill, DEVICE, "bfloat16").time_s == pytest.approx(
        prefill.attention_core_flops * (1 / 5e13 - 1 / 1e14)
    )
    kept = WeightFormat.of("float8_e4m3fn", keep_attention=True)
    fp8 = prefill_counts(spec, 1, 8192, "bfloat16", weights=kept)
    assert fp8.attention_core_flops == prefill.attention_core_flops < fp8.attention_flops


def test_dequantising_needs_the_devices_float32_rate():
    no_float32 = replace(DEVICE, dense_flops={"bfloat16": 1e14})
    int4 = decode_counts(get_preset("llama-2-7b"), 1, 128, "bfloat16", weights=WeightFormat("int4"))
    with pytest.raises(FieldError, match="no float32 rate") as error:
        predict_counts(int4, no_float32, "bfloat16")
    assert (error.value.field, error.value.value) == ("gpu", "round")


#: DEVICE with tensor cores that multiply tiles of 16 rows (A100's mma.sync).
TILED = replace(DEVICE, mma_rows=16, mma_source="a test tile")


def test_a_matmul_pads_its_tokens_to_whole_tiles():
    # 100 tokens in tiles of 64: 128 rows computed, 28 of them zeros, 2 FLOPs a weight each
    assert Matmul(100, 1000).padding_flops(64) == 2 * 28 * 1000
    assert Matmul(128, 1000).padding_flops(64) == 0
    assert Matmul(1, 1000).padding_flops(16) == 2 * 15 * 1000
    assert Matmul(0.5, 1000).padding_flops(16) == 2 * 15.5 * 1000  # a MoE expert's mean share
    assert Matmul(7, 1000).padding_flops(1) == 0  # no tile: a CPU


def test_a_decode_step_at_batch_1_computes_its_tiles_zero_rows():
    spec = get_preset("llama-2-7b")
    counts = decode_counts(spec, 1, 128, "bfloat16")
    # q, k, v, o (4 d^2) and gate, up, down (3 d I) per layer, and the head over one token
    weights = 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008) + 32000 * 4096
    assert counts.padding_flops(16) == 2 * 15 * weights
    pred = predict_counts(counts, TILED, "bfloat16")
    assert pred.padding_s == pytest.approx(2 * 15 * weights / 1e14)  # 2.0 ms at 100 TFLOP/s
    assert pred.time_s == pytest.approx(
        predict_counts(counts, DEVICE, "bfloat16").time_s + pred.padding_s
    )
    # a prefill of 128 tokens fills its tiles; one of 100 pads the body to 112 and the head
    assert prefill_counts(spec, 1, 128, "bfloat16").padding_flops(16) == 2 * 15 * 32000 * 4096
    assert (
        prefill_counts(spec, 1, 100, "bfloat16").padding_flops(16)
        == 2 * 12 * (weights - 32000 * 4096) + 2 * 15 * 32000 * 4096
    )
    # at batch 64, 64 rows: no padding of tiles of 16
    assert decode_counts(spec, 64, 128, "bfloat16").padding_flops(16) == 0


def test_weight_only_kernels_are_not_padded_the_head_is():
    spec = get_preset("llama-2-7b")
    int4 = decode_counts(spec, 1, 128, "bfloat16", weights=WeightFormat("int4"))
    # small batches' weight-only kernels multiply on the CUDA cores; the head is bfloat16
    assert int4.padding_flops(16) == 2 * 15 * 32000 * 4096
    fp8 = decode_counts(spec, 1, 128, "bfloat16", weights=WeightFormat("float8_e4m3fn"))
    head = 2 * 15 * 32000 * 4096  # the head stays bfloat16
    assert fp8.padding_flops(16) + fp8.padding_flops(16, "bfloat16") == (
        decode_counts(spec, 1, 128, "bfloat16").padding_flops(16)
    )
    assert fp8.padding_flops(16, "bfloat16") == head
    # float8 matmuls pad at the float8 rate, the bfloat16 head at bfloat16's
    pred = predict_counts(fp8, TILED, "bfloat16")
    assert pred.padding_s == pytest.approx(fp8.padding_flops(16) / 2e14 + head / 1e14)


def test_weight_only_kernels_on_the_tensor_cores_pad_to_16_tokens_whatever_the_device():
    """Marlin (vLLM's and SGLang's GPTQ and AWQ kernels) multiplies on the tensor cores with
    mma.sync m16n8k16, the tokens its M: a step of one token computes 15 rows of zeros of
    every weight, at the activations' rate, even on a device whose own tile is 64."""
    spec = get_preset("llama-2-7b")
    body = 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008)
    head = 32000 * 4096  # the head stays bfloat16, in the device's tiles
    marlin = WeightFormat.of("int4", keep_attention=False, weight_only_kernel="tensor-cores")
    gemv = decode_counts(spec, 1, 128, "bfloat16", weights=WeightFormat("int4"))
    tiled = decode_counts(spec, 1, 128, "bfloat16", weights=marlin)
    assert tiled.padding_flops(64) == 2 * 15 * body + 2 * 63 * head
    assert gemv.padding_flops(64) == 2 * 63 * head
    # the same bytes, dequantisation and FLOPs: only the zero rows differ
    assert (tiled.bytes, tiled.dequant_ops, tiled.flops) == (
        gemv.bytes,
        gemv.dequant_ops,
        gemv.flops,
    )
    pred, cores = (predict_counts(c, TILED, "bfloat16") for c in (tiled, gemv))
    assert pred.padding_s - cores.padding_s == pytest.approx(2 * 15 * body / 1e14)
    # 16 sequences fill the tile; 17 pad 15 rows again
    assert decode_counts(spec, 16, 128, "bfloat16", weights=marlin).padding_flops(16) == 0
    assert decode_counts(spec, 17, 128, "bfloat16", weights=marlin).padding_flops(16) == (
        2 * 15 * (body + head)
    )


def test_a_weight_only_kernel_on_mma_sync_runs_at_the_devices_warp_level_share():
    """Marlin multiplies with Ampere's warp-level mma.sync, which a Hopper runs at a share
    of its full-rate wgmma: every FLOP of the kernel, its tokens' rows and its zero rows,
    takes 1/share the time at the matmul rate (its efficiency included). The rest of the
    step keeps the rate, as does the kernel where the share is 1 (Ampere, Ada)."""
    spec = get_preset("llama-2-7b")
    body = 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008)
    marlin = WeightFormat.of("int4", keep_attention=False, weight_only_kernel="tensor-cores")
    step = decode_counts(spec, 4, 128, "bfloat16", weights=marlin)
    # 4 tokens' rows and 12 of zeros a weight; the head, kept in bfloat16, has no own tile
    assert step.own_tile_flops(16) == pytest.approx(2 * 16 * body)
    slower = replace(TILED, warp_mma_share=0.8)
    slow, full = (predict_counts(step, device, "bfloat16") for device in (slower, TILED))
    assert full.warp_mma_s == 0.0
    assert slow.warp_mma_s == pytest.approx(2 * 16 * body / 1e14 * (1 / 0.8 - 1))
    assert slow.time_s - full.time_s == pytest.approx(slow.warp_mma_s)
    half = PerfModel(1.0, 0.5, 0.0, "test")  # at half the FLOP/s, twice the surcharge
    assert predict_counts(step, slower, "bfloat16", model=half).warp_mma_s == pytest.approx(
        2 * slow.warp_mma_s
    )
    # a head quantised with the rest is multiplied by the same kernel, in its tiles
    head = WeightFormat.of("int4", quantize_head=True, weight_only_kernel="tensor-cores")
    with_head = decode_counts(spec, 4, 128, "bfloat16", weights=head)
    assert with_head.own_tile_flops(16) == pytest.approx(2 * 16 * (body + 32000 * 4096))
    gemv = decode_counts(spec, 4, 128, "bfloat16", weights=WeightFormat("int4"))
    dense = decode_counts(spec, 4, 128, "bfloat16")
    assert gemv.own_tile_flops(16) == dense.own_tile_flops(16) == 0
    assert predict_counts(dense, slower, "bfloat16").warp_mma_s == 0.0


def test_each_kernel_waits_the_device_s_memory_latency_for_its_first_bytes():
    """The latency-bandwidth model of a transfer: a kernel's bytes stream at the bandwidth
    once its first load has come back, one memory latency after it asked, whatever its
    bytes, batch or dtype; a device whose latency is not counted adds nothing."""
    spec = get_preset("llama-2-7b")
    latent = replace(DEVICE, memory_latency_s=4e-7)
    for counts in (
        decode_counts(spec, 1, 128, "bfloat16"),
        decode_counts(spec, 64, 4096, "bfloat16", weights=WeightFormat("float8_e4m3fn")),
        prefill_counts(spec, 2, 512, "bfloat16"),
    ):
        waits, plain = (predict_counts(counts, d, "bfloat16") for d in (latent, DEVICE))
        assert plain.memory_latency_s == 0.0
        assert waits.memory_latency_s == pytest.approx(counts.kernels * 4e-7)
        assert waits.time_s - plain.time_s == pytest.approx(waits.memory_latency_s)
        assert waits.launch_s == plain.launch_s  # beside the launches, not in them


@pytest.mark.parametrize(("batch", "tp", "ep"), [(1, 1, 1), (8, 2, 1), (64, 2, 2), (8, 8, 8)])
def test_a_weight_only_kernel_s_tokens_flops_are_those_the_step_counts(batch, tp, ep):
    """The FLOPs of the tokens' rows of Marlin's matmuls, summed, are those the step counts
    for its matmuls: a MoE's experts on the busiest rank under expert parallelism too,
    whose routes are not the mean share of its experts that pads their tiles."""
    spec = get_preset("mixtral-8x7b")
    marlin = WeightFormat.of("int4", keep_attention=False, weight_only_kernel="tensor-cores")
    step = decode_counts(spec, batch, 128, "bfloat16", None, tp, marlin, ep)
    no_padding = sum(m.flops for m in step.matmuls if m.tile)
    # all but the attention core (and the head, kept in bfloat16, untiled) is Marlin's
    head = 2 * batch * 32000 * 4096 // tp
    assert no_padding == pytest.approx(step.flops - step.attention_core_flops - head, rel=1e-6)


def test_a_weight_only_kernel_is_chosen_for_weight_only_weights_alone():
    assert WeightFormat.of("int8", weight_only_kernel="tensor-cores").tensor_core_kernel
    # a sweep's float8 and bfloat16 points keep their own tensor-core matmuls
    assert not WeightFormat.of(
        "float8_e4m3fn", weight_only_kernel="tensor-cores"
    ).tensor_core_kernel
    with pytest.raises(FieldError, match="not weight-only"):
        WeightFormat("nvfp4", tensor_core_kernel=True)
    with pytest.raises(FieldError) as err:
        WeightFormat.of("int4", weight_only_kernel="tensor")
    assert err.value.field == "weight_only_kernel" and "cuda-cores, tensor-cores" in str(err.value)
    assert WeightFormat.of("int4", weight_only_kernel="tensor-cores").describe() == (
        "int4 in groups of 128, on the tensor cores"
    )


def test_expected_experts_touched_under_uniform_routing():
    assert experts_touched(8, 2, 1) == 2  # one token: its k experts
    assert experts_touched(8, 2, 2) == pytest.approx(8 * (1 - 0.75**2))  # 3.5, not 4
    assert experts_touched(8, 2, 64) == pytest.approx(8)
    assert experts_touched(256, 8, 1) == pytest.approx(8)


def test_moe_experts_pad_their_share_of_the_tokens():
    spec = get_preset("mixtral-8x7b")
    per_expert = 3 * 4096 * 14336 * 32  # every layer's
    # q and o (d^2 each), k and v (d * 8 heads * 128 each), and the router, per layer
    tokens_go_through = 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 8 * 4096)
    head = 32000 * 4096
    # one token goes to 2 experts: each multiplies 1 row of a 16-row tile
    one = decode_counts(spec, 1, 1, "bfloat16")
    assert one.padding_flops(16) == 2 * 15 * (tokens_go_through + head + 2 * per_expert)
    # 2 tokens: 3.5 experts expected, each with 4 / 3.5 rows of a tile
    two = decode_counts(spec, 2, 1, "bfloat16")
    touched = 8 * (1 - 0.75**2)
    experts = Matmul(4 / touched, round(per_expert * touched)).padding_flops(16)
    assert two.padding_flops(16) == pytest.approx(2 * 14 * (tokens_go_through + head) + experts)


@pytest.mark.parametrize(
    ("tokens", "expert_rows", "tile"),
    [
        (0.25, 8, 8),  # a token an expert or less: the smallest tile
        (2.5, 16, 16),
        (9.0, 8, 16),  # 9 tokens: the next power of two, 16
        (33.0, 16, 64),  # 64: at most the instruction's rows
        (100.0, 16, 64),  # more than a tile: whole tiles of 64
    ],
)
def test_a_fused_moe_kernel_tiles_an_experts_tokens_to_the_next_power_of_two(
    tokens, expert_rows, tile
):
    experts = Matmul(tokens, 1000, grouped=True)
    padded = math.ceil(tokens / tile) * tile
    assert experts.padding_flops(64, expert_rows) == pytest.approx(2 * (padded - tokens) * 1000)
    # a dense matmul, or a device without an expert tile, pads to the instruction's rows
    dense = Matmul(tokens, 1000)
    assert dense.padding_flops(64, expert_rows) == experts.padding_flops(64, 0)
    assert experts.padding_flops(64, 0) == pytest.approx(
        2 * (math.ceil(tokens / 64) * 64 - tokens) * 1000
    )


def test_hopper_and_blackwell_tile_experts_smaller_than_their_instructions():
    h200, b200, a100 = device_spec("h200"), device_spec("b200"), device_spec("a100-80gb")
    assert (h200.mma_rows, h200.expert_rows) == (64, 16)
    assert (b200.mma_rows, b200.expert_rows) == (64, 8)
    assert (a100.mma_rows, a100.expert_rows) == (16, 0)  # its instruction is as small
    step = decode_counts(get_preset("deepseek-v3"), 16, 2048, "bfloat16", None, 8, "float8_e4m3fn")
    # 16 tokens x 8 routes over the 102 experts they touch: 1.25 tokens an expert, 16 rows a tile
    experts = [m for m in step.matmuls if m.grouped]
    share = 16 * 8 / experts_touched(256, 8, 16)
    assert len(experts) == 1 and experts[0].tokens == pytest.approx(share)
    assert step.padding_flops(64, None, 16) < step.padding_flops(64)


def test_a_weight_only_kernel_s_own_tile_holds_for_experts_on_every_device():
    """Marlin's 16-token tile holds for a MoE's experts too, whatever the device's expert
    tile (8 on Blackwell); and an expert's share a hair above a whole tile (16 tokens an
    expert at batch 64 of Mixtral, computed in floats) fills it, not two."""
    spec = get_preset("mixtral-8x7b")
    marlin = WeightFormat.of("int4", weight_only_kernel="tensor-cores")
    one = decode_counts(spec, 1, 1, "bfloat16", weights=marlin)
    experts = [m for m in one.matmuls if m.grouped]
    assert [m.tile for m in experts] == [16]
    # one token an expert: 15 rows of zeros, on a Blackwell's expert tile of 8 as on 64
    assert experts[0].padding_flops(64, 8) == experts[0].padding_flops(64, 16)
    assert experts[0].padding_flops(64, 8) == pytest.approx(2 * 15 * experts[0].weights)
    assert experts[0].padding_flops(1) == 0  # a device with no tensor cores: no tile
    full = decode_counts(spec, 64, 1, "bfloat16")  # 64 tokens x 2 routes over 8 experts
    (grouped,) = [m for m in full.matmuls if m.grouped]
    assert grouped.tokens == pytest.approx(16) and grouped.padding_flops(64, 16) == 0.0
