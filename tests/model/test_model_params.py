"""Whole-model parameter counts: the formulas, a meta-device skeleton, and the figures the
model publishers state."""

from __future__ import annotations

import pytest

from attnbench.cli import app
from attnbench.errors import FieldError, UsageError
from attnbench.experiments.whole_model import whole_model_records
from attnbench.model.architecture import CountedModel, ModelBody, ModelSpec
from attnbench.model.hf_config import spec_from_hf_config
from attnbench.model.model_params import (
    active_params,
    part_params,
    step_traits,
    total_params,
    weight_bytes_per_rank,
)
from attnbench.model.presets import PRESETS, get_preset
from attnbench.modules.skeleton import meta_part_params
from tests.helpers import runner

#: Totals computed by hand from each published config.json (vocabulary, intermediate size,
#: RMSNorm weights, Qwen2's q/k/v biases, Gemma's tied embeddings, Falcon's LayerNorm
#: biases, GPT-3's learned positions and biases, DeepSeek's MLA and experts).
EXACT_TOTALS = {
    "llama-2-7b": 6_738_415_616,
    "llama-2-13b": 13_015_864_320,
    "llama-2-70b": 68_976_648_192,
    "llama-3-8b": 8_030_261_248,
    "llama-3-70b": 70_553_706_496,
    "llama-3.1-8b": 8_030_261_248,  # Llama 3's shapes: the same checkpoint sizes
    "llama-3.1-70b": 70_553_706_496,
    "mistral-7b": 7_241_732_096,
    "mixtral-8x7b": 46_702_792_704,
    "falcon-7b": 6_921_720_704,
    "qwen2.5-7b": 7_615_616_512,
    "gemma-7b": 8_537_680_896,
    "gemma-2-9b": 9_241_705_984,
    "gemma-2-27b": 27_227_128_320,
    "deepseek-v2-lite": 15_706_484_224,
    "deepseek-v2": 235_741_434_880,
    "deepseek-v3": 671_026_419_200,
    "gpt3-175b": 174_604_259_328,
}


def test_every_preset_has_a_checked_total():
    assert set(EXACT_TOTALS) == set(PRESETS)


@pytest.mark.parametrize("name", sorted(EXACT_TOTALS))
def test_formula_equals_meta_skeleton_equals_hand_total(name):
    spec = PRESETS[name]
    analytic, counted = part_params(spec), meta_part_params(spec)
    assert analytic == counted
    assert sum(analytic.values()) == EXACT_TOTALS[name]


def _non_embedding(spec: ModelSpec) -> int:
    parts = part_params(spec)
    return sum(parts.values()) - parts["embeddings"] - parts["output head"]


# Published figures, each next to ours. A checkpoint's model.safetensors.index.json states
# metadata.total_size: the bytes of every tensor, here 2 bytes per bfloat16 parameter.
CHECKPOINT_BYTES = [
    ("llama-3-8b", 16_060_522_496, "meta-llama/Meta-Llama-3-8B model.safetensors.index.json"),
    ("mistral-7b", 14_483_464_192, "mistralai/Mistral-7B-v0.1 model.safetensors.index.json"),
    ("mixtral-8x7b", 93_405_585_408, "mistralai/Mixtral-8x7B-v0.1 model.safetensors.index.json"),
    ("qwen2.5-7b", 15_231_233_024, "Qwen/Qwen2.5-7B-Instruct model.safetensors.index.json"),
]


@pytest.mark.parametrize("name, total_size, source", CHECKPOINT_BYTES)
def test_checkpoint_sizes_published_with_the_weights(name, total_size, source):
    assert 2 * total_params(PRESETS[name]) == total_size, source


# Statements in billions, to the digits published: (model, what, ours, figure, decimals,
# source). Publishers round or truncate (Qwen: 7.6156B is "7.61B" but 6.5256B "6.53B"), so
# ours must be within one unit of the last published digit.
ROUNDED = [
    ("llama-2-7b", "total", total_params, 7, 0, "Touvron et al. 2023, Llama 2, Table 1 (7B)"),
    (
        "mixtral-8x7b",
        "total",
        total_params,
        46.7,
        1,
        "Mistral AI, Mixtral of experts (2023): 46.7B total parameters",
    ),
    (
        "mixtral-8x7b",
        "active",
        active_params,
        12.9,
        1,
        "Mistral AI, Mixtral of experts (2023): 12.9B parameters per token",
    ),
    (
        "qwen2.5-7b",
        "total",
        total_params,
        7.61,
        2,
        "Qwen/Qwen2.5-7B model card: Number of Parameters 7.61B",
    ),
    (
        "qwen2.5-7b",
        "non-embedding",
        _non_embedding,
        6.53,
        2,
        "Qwen/Qwen2.5-7B model card: Number of Parameters (Non-Embedding) 6.53B",
    ),
    (
        "deepseek-v2-lite",
        "total",
        total_params,
        15.7,
        1,
        "deepseek-ai/DeepSeek-V2-Lite model card: 15.7B total parameters",
    ),
    (
        "deepseek-v2",
        "total",
        total_params,
        236,
        0,
        "DeepSeek-AI 2024, DeepSeek-V2 (arXiv:2405.04434): 236B total parameters",
    ),
    (
        "deepseek-v3",
        "total",
        total_params,
        671,
        0,
        "DeepSeek-AI 2024, DeepSeek-V3 (arXiv:2412.19437): 671B total parameters",
    ),
    ("gpt3-175b", "total", total_params, 175, 0, "Brown et al. 2020, Table 2.1: 175.0B"),
]


@pytest.mark.parametrize("name, what, count, published, decimals, source", ROUNDED)
def test_published_counts_in_billions(name, what, count, published, decimals, source):
    assert abs(count(PRESETS[name]) / 1e9 - published) < 10**-decimals, source


# Exact non-embedding counts from the Gemma reports (Table 2). Their embedding counts use
# the training vocabulary of 256,128 rows; the released config.json has 256,000.
GEMMA_REPORTS = [
    ("gemma-7b", 7_751_248_896, 786_825_216, "Gemma Team 2024, Gemma, Table 2"),
    ("gemma-2-9b", 8_324_201_984, 917_962_752, "Gemma Team 2024, Gemma 2, Table 2"),
    ("gemma-2-27b", 26_047_480_320, 1_180_237_824, "Gemma Team 2024, Gemma 2, Table 2"),
]


@pytest.mark.parametrize("name, non_embedding, embedding, source", GEMMA_REPORTS)
def test_gemma_reports(name, non_embedding, embedding, source):
    spec = PRESETS[name]
    assert _non_embedding(spec) == non_embedding, source
    assert embedding == 256_128 * spec.d_model
    assert part_params(spec)["output head"] == 0  # tied to the embeddings


# --- tensor parallelism, by hand -----------------------------------------------------------

TINY = ModelSpec(
    "tiny", 1, 8, 4, 2, 2, "float16", "test", body=ModelBody(vocab_size=10, intermediate_size=6)
)


def test_parts_per_rank_by_hand():
    # tp 1: embeddings 10*8, q 8*8, k and v 8*4, o 8*8, MLP 3*8*6, norms 3*8, head 10*8.
    assert part_params(TINY) == {
        "embeddings": 80,
        "attention": 192,
        "mlp": 144,
        "experts": 0,
        "router": 0,
        "norms": 24,
        "output head": 80,
    }
    # tp 2: vocabulary 5 rows, 2 query heads and 1 KV head, intermediate 3; norms replicated.
    assert sum(part_params(TINY, 2).values()) == 40 + (32 + 16 + 16 + 32) + 72 + 24 + 40
    # tp 4 > 2 KV heads: each rank keeps one KV head; ceil(10 / 4) = 3 rows, ceil(6 / 4) = 2.
    assert sum(part_params(TINY, 4).values()) == 24 + (16 + 16 + 16 + 16) + 48 + 24 + 24
    # int4 halves all but the embeddings and the head (24 + 24, kept in float16), with a
    # 16-bit scale and zero point per group: rows of 8 inputs, shorter than the default 128,
    # are a group each, 136 / 8 = 17 of them
    assert weight_bytes_per_rank(TINY, "int4", 4) == 136 // 2 + 17 * 4 + 48 * 2
    assert weight_bytes_per_rank(TINY, "float16", 4) == 184 * 2
    with pytest.raises(FieldError, match="does not divide the 4 query heads") as info:
        part_params(TINY, 3)
    assert (info.value.field, info.value.value) == ("tp", 3)


def test_llama_3_70b_per_gpu_weights_under_tp8():
    spec = PRESETS["llama-3-70b"]
    replicated = (80 * 2 + 1) * 8192  # norms
    per_rank = (EXACT_TOTALS["llama-3-70b"] - replicated) // 8 + replicated
    assert sum(part_params(spec, 8).values()) == per_rank


# --- config.json bodies --------------------------------------------------------------------


def test_config_json_body_matches_the_preset():
    cfg = {
        "model_type": "llama",
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "num_hidden_layers": 32,
        "vocab_size": 128256,
        "intermediate_size": 14336,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
    assert total_params(spec_from_hf_config(cfg, "l3", "l3")) == EXACT_TOTALS["llama-3-8b"]


# config.json files without tie_word_embeddings: the model type's default in transformers
# decides (Llama: untied, Gemma: tied).
CONFIGS_WITHOUT_TIE_FIELD = {
    "llama-2-7b": {
        "model_type": "llama",
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "num_hidden_layers": 32,
        "vocab_size": 32000,
        "intermediate_size": 11008,
        "torch_dtype": "float16",
    },
    "gemma-7b": {
        "model_type": "gemma",
        "hidden_size": 3072,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "head_dim": 256,
        "num_hidden_layers": 28,
        "vocab_size": 256000,
        "intermediate_size": 24576,
        "torch_dtype": "bfloat16",
    },
}


@pytest.mark.parametrize("name", sorted(CONFIGS_WITHOUT_TIE_FIELD))
def test_config_without_tie_word_embeddings_matches_the_preset(name):
    spec = spec_from_hf_config(CONFIGS_WITHOUT_TIE_FIELD[name], name, name)
    assert spec.body == PRESETS[name].body
    assert total_params(spec) == EXACT_TOTALS[name]  # llama-2-7b: 6,738,415,616


#: DeepSeek-V3's config.json as transformers writes it: head_dim is qk_rope_head_dim.
DEEPSEEK_V3_CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "hidden_size": 7168,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "head_dim": 64,
    "kv_lora_rank": 512,
    "q_lora_rank": 1536,
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128,
    "v_head_dim": 128,
    "num_hidden_layers": 61,
    "vocab_size": 129280,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 3,
    "n_group": 8,
    "topk_group": 4,
    "norm_topk_prob": True,
    "routed_scaling_factor": 2.5,
    "max_position_embeddings": 163840,
    "tie_word_embeddings": False,
    "dtype": "bfloat16",
}


@pytest.mark.parametrize("topk_method", [None, "noaux_tc"], ids=["no_topk_method", "noaux_tc"])
def test_deepseek_v3_config_json_matches_the_preset(topk_method):
    """head_dim is v_head_dim (128), and the router counts e_score_correction_bias (stored
    in the checkpoint) whether or not the config names its top-k method."""
    cfg = dict(DEEPSEEK_V3_CONFIG)
    if topk_method is not None:
        cfg["topk_method"] = topk_method
    spec, preset = spec_from_hf_config(cfg, "v3", "v3"), PRESETS["deepseek-v3"]
    assert spec.head_dim == preset.head_dim == 128
    assert spec.body == preset.body and spec.mla == preset.mla
    assert part_params(spec) == part_params(preset) == meta_part_params(spec)
    assert part_params(spec)["router"] == (61 - 3) * 256 * (7168 + 1)
    assert total_params(spec) == EXACT_TOTALS["deepseek-v3"]


def test_gpt2_small_by_hand():
    cfg = {
        "model_type": "gpt2",
        "n_embd": 768,
        "n_head": 12,
        "n_layer": 12,
        "n_positions": 1024,
        "vocab_size": 50257,
    }
    spec = spec_from_hf_config(cfg, "gpt2", "gpt2")
    layer = (4 * 768 * 768 + 4 * 768) + (8 * 768 * 768 + 4 * 768 + 768) + 4 * 768
    assert total_params(spec) == 50257 * 768 + 1024 * 768 + 12 * layer + 2 * 768
    assert meta_part_params(spec) == part_params(spec)


def test_falcon_config_body():
    cfg = {
        "model_type": "falcon",
        "hidden_size": 4544,
        "n_head": 71,
        "n_layer": 32,
        "multi_query": True,
        "parallel_attn": True,
        "bias": False,
        "vocab_size": 65024,
    }
    assert total_params(spec_from_hf_config(cfg, "f", "f")) == EXACT_TOTALS["falcon-7b"]


def test_unknown_model_type_has_no_body():
    cfg = {
        "model_type": "mystery",
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "vocab_size": 10,
    }
    spec = spec_from_hf_config(cfg, "m", "m")
    with pytest.raises(UsageError, match="whole model .* is not known"):
        total_params(spec)


def test_records_and_cli_table():
    records = whole_model_records(PRESETS["mixtral-8x7b"])
    assert [r.part for r in records][-2:] == ["total", "active per token"]
    assert records[-2].params == records[-2].meta_params == EXACT_TOTALS["mixtral-8x7b"]
    result = runner.invoke(app, ["params", "--model", "qwen2.5-7b"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert "Whole model (bfloat16 weights) · qwen2.5-7b" in result.output
    assert "Counted by attnbench's formulas" in result.output
    assert all(r.source.startswith("attnbench's formulas") for r in records)
    assert "7,615,616,512" in result.output


def _counted_spec(num_experts, experts_per_token) -> ModelSpec:
    counted = CountedModel(
        parts=(("embeddings", 6400), ("attention", 16384), ("experts", 24576)),
        source="test",
        vocab_size=100,
        tied_embeddings=True,
        num_experts=num_experts,
        experts_per_token=experts_per_token,
    )
    return ModelSpec("moe", 2, 64, 4, 2, 16, "bfloat16", "test", counted=counted)


def test_counted_experts_without_their_count_or_top_k_refuse_a_step():
    # Routed experts that transformers builds but whose count or top-k the config gives
    # under no field read: a step's expert bytes would be counted as none, or divided by 0.
    for num_experts, per_token in ((None, 2), (4, None)):
        with pytest.raises(UsageError, match="moe: transformers builds it with routed experts"):
            step_traits(_counted_spec(num_experts, per_token))
    assert step_traits(_counted_spec(4, 2)).experts_per_token == 2
    assert active_params(_counted_spec(4, 2)) == 6400 + 16384 + 24576 // 4 * 2


def test_a_replicated_vocabulary_stays_whole_on_each_rank():
    # a model counted by transformers, and one of attnbench's formulas
    counted = _counted_spec(4, 2)
    split, whole = part_params(counted, 2), part_params(counted, 2, replicated_vocab=True)
    assert (split["embeddings"], whole["embeddings"]) == (3200, 6400)
    assert split["attention"] == whole["attention"] == 8192
    llama = get_preset("llama-2-7b")
    split, whole = part_params(llama, 4), part_params(llama, 4, replicated_vocab=True)
    assert whole["output head"] == whole["embeddings"] == 4 * split["output head"] == 32000 * 4096
    assert whole["mlp"] == split["mlp"]
