"""Whole-model counts of every model type with a body, against transformers itself: each
small config below is built by transformers on the meta device, and attnbench's count of
its config.json must equal the model's parameters plus the buffers its checkpoints store
(tied weights once), part by part, and the formulas must equal the skeleton's count.
"""

from __future__ import annotations

import re

import pytest

from attnbench.errors import UsageError
from attnbench.model.architecture import ModelBody, ModelSpec, MoeSpec
from attnbench.model.hf_config import BODY_MODEL_TYPES, spec_from_hf_config
from attnbench.model.model_params import PARTS, active_params, part_params, total_params
from attnbench.modules.skeleton import meta_part_params
from tests.helpers import SMALL_CONFIG

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

BASE = SMALL_CONFIG
MLA = {
    "kv_lora_rank": 16,
    "q_lora_rank": 24,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 16,
    "v_head_dim": 16,
}
EXPERTS = {"num_experts_per_tok": 2, "moe_intermediate_size": 32}
#: Leaves a field of BASE out (FalconConfig has no head_dim to set).
DROP = object()

#: One config per model type, each exercising what that type has besides a Llama's.
CONFIGS = {
    "llama": {"attention_bias": True, "mlp_bias": True},
    "mistral": {"sliding_window": 32, "tie_word_embeddings": True},
    "mixtral": {"num_local_experts": 4, "num_experts_per_tok": 2},
    "qwen2": {"tie_word_embeddings": True},  # q, k and v biases, none on o
    "qwen3": {"attention_bias": True},  # q/k norms of head_dim
    "gemma": {},  # tied by default
    "gemma2": {"tie_word_embeddings": False},  # four norms a layer
    "gemma3_text": {},  # four norms and q/k norms
    "deepseek_v2": {
        **MLA,
        "n_routed_experts": 4,
        **EXPERTS,
        "n_shared_experts": 2,
        "first_k_dense_replace": 1,
        "attention_bias": True,
        "mlp_bias": True,
    },
    "deepseek_v3": {
        **MLA,
        "q_lora_rank": None,
        "n_routed_experts": 4,
        **EXPERTS,
        "n_shared_experts": 1,
        "first_k_dense_replace": 2,
        "n_group": 1,
        "topk_group": 1,
        "num_key_value_heads": 4,
    },  # e_score_correction_bias
    "falcon": {"head_dim": DROP, "num_key_value_heads": DROP},  # multi_query, one norm
    "gpt2": {"n_positions": 32, "tie_word_embeddings": False},
    "cohere": {"use_qk_norm": True, "attention_bias": True},  # (heads, D) q/k norms
    "cohere2": {},  # one parallel norm a layer
    "exaone4": {},  # post-norms, q/k norms
    "glm4": {},  # attention_bias (default true) on q, k and v; four norms
    "glm4_moe": {
        "n_routed_experts": 4,
        **EXPERTS,
        "n_shared_experts": 2,
        "first_k_dense_replace": 1,
        "use_qk_norm": True,
        "attention_bias": True,
    },
    "gpt_oss": {"num_local_experts": 4, "num_experts_per_tok": 2},  # sinks, every bias
    "granite": {"attention_bias": True, "mlp_bias": True},
    "llama4_text": {
        "num_local_experts": 4,
        "num_experts_per_tok": 1,
        "interleave_moe_layer_step": 2,
        "intermediate_size_mlp": 80,
    },
    "olmo2": {},  # q/k norms of Hq*D and Hkv*D
    "phi3": {},  # fused qkv and gate_up projections
    "phimoe": {
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "lm_head_bias": True,
        "tie_word_embeddings": True,
    },  # LayerNorms with bias, a biased tied head
    "qwen2_moe": {
        "num_experts": 4,
        **EXPERTS,
        "shared_expert_intermediate_size": 48,
        "decoder_sparse_step": 2,
        "mlp_only_layers": [3],
    },
    "qwen3_moe": {"num_experts": 4, **EXPERTS, "mlp_only_layers": [0]},
    "smollm3": {"mlp_bias": True},  # tied by default
    "starcoder2": {},  # use_bias everywhere, LayerNorms, c_fc/c_proj MLP
}
#: More configs of some types, for what one config of theirs cannot show.
VARIANTS = {
    "falcon new decoder": (
        "falcon",
        {
            "head_dim": DROP,
            "num_key_value_heads": DROP,
            "new_decoder_architecture": True,
            "num_kv_heads": 2,
            "bias": True,
        },
    ),
    "llama4_text moe_layers": (
        "llama4_text",
        {"num_local_experts": 4, "moe_layers": [0, 3], "intermediate_size_mlp": 80},
    ),
    "qwen2_moe all sparse, no bias": (
        "qwen2_moe",
        {"num_experts": 4, **EXPERTS, "qkv_bias": False},
    ),
    "deepseek_v3 defaults": (
        "deepseek_v3",
        {
            **MLA,
            "q_lora_rank": DROP,  # DeepseekV3Config's default: 1536
            "n_routed_experts": 4,
            **EXPERTS,
            "n_group": 1,
            "topk_group": 1,
        },
    ),
}


def config(model_type: str, extra: dict) -> dict:
    if model_type == "gpt2":
        cfg = {
            "n_embd": 64,
            "n_head": 4,
            "n_layer": 4,
            "vocab_size": 100,
            "bos_token_id": None,
            "eos_token_id": None,
        }
    else:
        cfg = dict(BASE)
    cfg.update(extra, model_type=model_type)
    return {k: v for k, v in cfg.items() if v is not DROP}


CASES = {**{t: (t, extra) for t, extra in CONFIGS.items()}, **VARIANTS}


def hf_part(name: str) -> str:
    """The PARTS entry of a parameter or buffer of a transformers causal LM, by its name."""
    if re.search(r"(embed_tokens|word_embeddings|\bwte|\bwpe)\.", name):
        return "embeddings"
    if name.startswith("lm_head."):
        return "output head"
    if re.search(r"\.(self_attn|self_attention|attn)\.", name):
        return "attention"  # q/k norms, sinks and MLA's norms too
    if ".experts." in name:
        return "experts"
    if re.search(r"\.(mlp|feed_forward)\.(gate|router)\.", name):
        return "router"
    if re.search(r"\.(mlp|feed_forward)\.", name):
        return "mlp"  # the dense MLP, shared experts and their gate
    if "norm" in name or re.search(r"\bln_", name):
        return "norms"
    raise AssertionError(f"no part for {name}")


_built: dict[str, dict[str, int]] = {}


def transformers_parts(case: str) -> dict[str, int]:
    """Per part, the parameters (a tied weight once) and persistent buffers of the model
    transformers builds from the config of `case`, on the meta device."""
    if case not in _built:
        model_type, extra = CASES[case]
        hf_config = transformers.AutoConfig.for_model(**config(model_type, extra))
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(hf_config)
        parts = dict.fromkeys(PARTS, 0)
        for name, p in model.named_parameters():
            parts[hf_part(name)] += p.numel()
        for module_name, module in model.named_modules():
            for name, buffer in module.named_buffers(recurse=False):
                if name not in module._non_persistent_buffers_set:
                    parts[hf_part(f"{module_name}.{name}")] += buffer.numel()
        _built[case] = parts
    return _built[case]


def spec_of(case: str) -> ModelSpec:
    model_type, extra = CASES[case]
    return spec_from_hf_config(config(model_type, extra), case, "test")


def test_every_model_type_with_a_body_has_a_config():
    falcon_aliases = {"RefinedWeb", "RefinedWebModel"}
    assert set(CONFIGS) == set(BODY_MODEL_TYPES) - falcon_aliases
    assert len(CONFIGS) == 27


@pytest.mark.parametrize("case", sorted(CASES))
def test_total_equals_transformers(case):
    spec = spec_of(case)
    assert spec.body is not None
    assert total_params(spec) == sum(transformers_parts(case).values())


@pytest.mark.parametrize("case", sorted(CASES))
def test_parts_equal_transformers_and_the_skeleton(case):
    spec = spec_of(case)
    assert part_params(spec) == transformers_parts(case)
    assert meta_part_params(spec) == part_params(spec)


# --- where the split is not obvious, by hand (d 64, Hq 4, Hkv 2, D 16, L 4, V 100) --------


def test_gpt_oss_router_bias_in_router_expert_biases_in_experts_sinks_in_attention():
    parts = part_params(spec_of("gpt_oss"))
    assert parts["router"] == 4 * 4 * (64 + 1)  # weight and bias of 4 experts, 4 layers
    # each expert: gate_up 64*2*96 (+ 2*96 bias), down 96*64 (+ 64 bias)
    assert parts["experts"] == 4 * 4 * (3 * 64 * 96 + 2 * 96 + 64)
    # q, k, v, o with biases, and a sink per query head
    assert parts["attention"] == 4 * (2 * 64 * 64 + 2 * 64 * 32 + 64 + 2 * 32 + 64 + 4)
    assert parts["mlp"] == 0


def test_qwen2_moe_shared_expert_and_its_gate_in_mlp():
    spec = spec_of("qwen2_moe")
    assert [spec.body.moe.is_moe_layer(i) for i in range(4)] == [False, True, False, False]
    parts = part_params(spec)
    dense, shared = 3 * 64 * 96, 3 * 64 * 48
    assert parts["mlp"] == 3 * dense + (shared + 64)  # the gate: Linear(64, 1)
    assert parts["router"] == 4 * 64
    assert parts["attention"] == 4 * (2 * 64 * 64 + 2 * 64 * 32 + 64 + 2 * 32)  # no o bias


def test_e_score_correction_bias_in_router():
    for case, moe_layers in (("deepseek_v3", 2), ("glm4_moe", 3)):
        assert part_params(spec_of(case))["router"] == moe_layers * 4 * (64 + 1), case


def test_qk_norms_in_attention():
    widths = {"qwen3": 2 * 16, "exaone4": 2 * 16, "olmo2": (4 + 2) * 16, "cohere": (4 + 2) * 16}
    for case, width in widths.items():
        spec = spec_of(case)
        body = spec.body
        bare = ModelSpec(
            **{**spec.__dict__, "body": ModelBody(**{**body.__dict__, "qk_norm": None})}
        )
        extra = part_params(spec)["attention"] - part_params(bare)["attention"]
        assert extra == 4 * width, case
    assert spec_of("llama4_text").body.qk_norm is None  # an L2 norm: no weights


def test_head_bias_counts_with_a_tied_head():
    assert part_params(spec_of("phimoe"))["output head"] == 100  # the bias; weight tied


def test_llama4_dense_layers_use_intermediate_size_mlp():
    spec = spec_of("llama4_text")
    moe = spec.body.moe
    assert spec.body.intermediate_size == 80 and moe.intermediate_size == 96
    assert [moe.is_moe_layer(i) for i in range(4)] == [False, True, False, True]
    parts = part_params(spec)
    assert parts["mlp"] == 2 * 3 * 64 * 80 + 2 * 3 * 64 * 96  # 2 dense, 2 shared experts
    listed = spec_of("llama4_text moe_layers").body.moe
    assert [listed.is_moe_layer(i) for i in range(4)] == [True, False, False, True]


def test_active_params_of_expert_biases():
    spec = spec_of("gpt_oss")
    per_expert = part_params(spec)["experts"] // 4
    assert active_params(spec) == total_params(spec) - 2 * per_expert


# --- tensor parallelism of the new parts ----------------------------------------------------


def _tiny(**body) -> ModelSpec:
    moe = body.pop("moe", None)
    return ModelSpec("t", 1, 8, 4, 2, 2, "float16", "test", body=ModelBody(10, 6, moe=moe, **body))


def test_per_rank_split_and_replicated_parts():
    plain = part_params(_tiny(), 2)["attention"]
    # sinks and per-head q/k norms split with the heads; head_dim and full ones replicated
    assert part_params(_tiny(attention_sinks=True), 2)["attention"] == plain + 2
    assert part_params(_tiny(qk_norm="per_head"), 2)["attention"] == plain + 2 * 2 + 1 * 2
    assert part_params(_tiny(qk_norm="head_dim"), 2)["attention"] == plain + 2 * 2
    assert part_params(_tiny(qk_norm="full"), 2)["attention"] == plain + (4 + 2) * 2
    # the head's bias is split by vocabulary, as its weight
    assert part_params(_tiny(head_bias=True), 2)["output head"] == 5 * 8 + 5
    moe = MoeSpec(
        4,
        2,
        6,
        shared_experts=1,
        shared_intermediate_size=4,
        router_bias=True,
        shared_expert_gate=True,
        expert_bias=True,
    )
    parts = part_params(_tiny(moe=moe), 2)
    assert parts["router"] == 4 * 8 + 4  # replicated, bias too
    # each expert: its slice of 3 of the intermediate 6, gate/up biases split, down's not
    assert parts["experts"] == 4 * (3 * 8 * 3 + 2 * 3 + 8)
    assert parts["mlp"] == 3 * 8 * 2 + 8  # the shared expert's slice, and the whole gate


# --- reading the fields -------------------------------------------------------------------


def test_dense_model_types_ignore_expert_fields():
    # LlamaForCausalLM builds no experts whatever the config says
    cfg = config("llama", {"num_local_experts": 8, "num_experts_per_tok": 2})
    assert spec_from_hf_config(cfg, "m", "m").body.moe is None


def test_expert_fields_left_out_take_the_model_types_defaults():
    cfg = {k: v for k, v in config("qwen2_moe", {}).items()}
    moe = spec_from_hf_config(cfg, "m", "m").body.moe
    assert (moe.num_experts, moe.experts_per_token, moe.intermediate_size) == (60, 4, 1408)
    assert (moe.shared_experts, moe.shared_width, moe.shared_expert_gate) == (1, 5632, True)
    gpt_oss = spec_from_hf_config(config("gpt_oss", {}), "m", "m").body
    assert (gpt_oss.moe.num_experts, gpt_oss.moe.experts_per_token) == (128, 4)
    assert gpt_oss.qkv_bias and gpt_oss.o_bias  # attention_bias defaults to true
    with pytest.raises(UsageError, match="at most 16, the model type's default number"):
        spec_from_hf_config(config("phimoe", {"num_experts_per_tok": 17}), "m", "m")


@pytest.mark.parametrize(
    "field, value",
    [
        ("mlp_only_layers", [4]),
        ("mlp_only_layers", [-1]),
        ("mlp_only_layers", "0"),
        ("mlp_only_layers", [True]),
        ("decoder_sparse_step", 0),
    ],
)
def test_bad_placement_fields(field, value):
    cfg = config("qwen3_moe", {"num_experts": 4, "num_experts_per_tok": 2, field: value})
    with pytest.raises(UsageError, match=field):
        spec_from_hf_config(cfg, "m", "m")


def test_bad_moe_layers():
    cfg = config("llama4_text", {"moe_layers": [0, 9]})
    with pytest.raises(UsageError, match="'moe_layers' must list layer indices from 0 to 3"):
        spec_from_hf_config(cfg, "m", "m")


def test_contradictory_expert_counts():
    cfg = config("gpt_oss", {"num_local_experts": 4, "num_experts": 8})
    with pytest.raises(UsageError, match="contradictory expert-count fields"):
        spec_from_hf_config(cfg, "m", "m")


def test_unknown_model_type_stays_attention_only():
    spec = spec_from_hf_config(config("mystery", {}), "m", "m")
    assert spec.body is None and spec.num_kv_heads == 2
