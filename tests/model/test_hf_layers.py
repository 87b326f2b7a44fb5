"""Layer kinds and state sizes of the hybrid model types, against transformers itself: each
small config below is read by attnbench and built by transformers on the meta device,
whose own cache after a prefill (scripts/hf_cache_reference.py runs the model's own
layers into it) must hold, layer by layer, the K/V bytes and the state bytes attnbench
counts. Then what the configs declare when a field is left out, and what is refused."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from attnbench.errors import UsageError
from attnbench.model.capacity import KvFormat, state_bytes, token_layout
from attnbench.model.hf_config import spec_from_hf_config
from attnbench.model.hf_layers import (
    HYBRIDS,
    MINIMAX_CUSTOM_TYPES,
    ZAMBA2_DEFAULT_TYPES,
    as_transformers,
)
from tests.helpers import SMALL_CONFIG

transformers = pytest.importorskip("transformers")

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"

#: What every config shares: hidden 64, 4 heads, 2 KV heads, a vocabulary of 100, bfloat16
#: (so that a state kept in float32 whatever the model's dtype is told apart).
BASE = {
    **{k: v for k, v in SMALL_CONFIG.items() if k not in ("head_dim", "num_hidden_layers")},
    "torch_dtype": "bfloat16",
}
EXPERTS = {"num_experts_per_tok": 1, "moe_intermediate_size": 32}
ALTERNATE = ["linear_attention", "full_attention", "linear_attention", "full_attention"]

#: One small config per hybrid model type, each declaring its layers its own way.
CASES: dict[str, dict] = {
    "qwen3_next": {
        "num_hidden_layers": 4,  # full_attention_interval left out: every 4th layer
        "head_dim": 16,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "linear_key_head_dim": 8,
        "linear_value_head_dim": 8,
        "num_experts": 4,
        **EXPERTS,
        "shared_expert_intermediate_size": 32,
    },
    "qwen3_5_text": {
        "num_hidden_layers": 4,
        "head_dim": 16,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "linear_key_head_dim": 8,
        "linear_value_head_dim": 8,
        "layer_types": ALTERNATE,
    },
    "jamba": {
        "num_hidden_layers": 4,
        "attn_layer_period": 2,
        "attn_layer_offset": 1,
        "num_experts": 2,
        "num_experts_per_tok": 1,
        "mamba_d_state": 8,
        "use_mamba_kernels": False,
    },
    "bamba": {
        "num_hidden_layers": 4,
        "attn_layer_indices": [1],
        "mamba_n_heads": 8,
        "mamba_d_state": 16,
        "mamba_n_groups": 2,
    },
    "falcon_h1": {  # attention and Mamba-2 in every layer, of mamba_d_ssm channels
        "num_hidden_layers": 2,
        "head_dim": 16,
        "mamba_d_ssm": 64,
        "mamba_n_heads": 4,
        "mamba_d_state": 16,
    },
    "granitemoehybrid": {  # the legacy names of the layer types
        "num_hidden_layers": 4,
        "layer_types": ["mamba", "attention", "mamba", "mamba"],
        "mamba_n_heads": 8,
        "mamba_d_state": 16,
        "num_local_experts": 2,
        "num_experts_per_tok": 1,
        "shared_intermediate_size": 32,
    },
    "nemotron_h": {  # Mamba-2, attention, an MLP and experts: the last two cache nothing
        "hybrid_override_pattern": "M*-E",
        "num_hidden_layers": 4,
        "head_dim": 16,
        "mamba_num_heads": 4,
        "mamba_head_dim": 16,
        "n_groups": 2,
        "ssm_state_size": 16,
        "n_routed_experts": 2,
        **EXPERTS,
        "moe_shared_expert_intermediate_size": 32,
    },
    "lfm2": {
        "num_hidden_layers": 4,
        "layer_types": ["conv", "full_attention", "conv", "conv"],
        "conv_L_cache": 3,
    },
    "lfm2_moe": {
        "num_hidden_layers": 4,
        "layer_types": ["conv", "full_attention", "conv", "conv"],
        "num_experts": 2,
        **EXPERTS,
        "num_dense_layers": 1,
    },
    "minimax": {  # lightning attention's state in the model's dtype
        "num_hidden_layers": 4,
        "head_dim": 16,
        "layer_types": ALTERNATE,
        "num_local_experts": 2,
        "num_experts_per_tok": 1,
    },
    "minimax_m1": {  # MiniMax's own code: attn_type_list, 1 for softmax attention
        "num_hidden_layers": 4,
        "head_dim": 16,
        "attn_type_list": [0, 1, 0, 0],
        "num_local_experts": 2,
        "num_experts_per_tok": 1,
    },
    "zamba2": {  # each hybrid layer keeps its own K/V, of 2 * hidden / heads per head
        "num_hidden_layers": 4,
        "layers_block_type": ["mamba", "hybrid", "mamba", "hybrid"],
        "n_mamba_heads": 4,
        "mamba_d_state": 16,
        "num_mem_blocks": 1,
        "hybrid_layer_ids": [1, 3],
    },
    "zamba": {  # layers left out: two Mamba layers, a hybrid, then every period-th
        "num_hidden_layers": 5,
        "n_mamba_heads": 2,
        "mamba_d_state": 8,
        "attn_layer_period": 2,
        "attn_layer_offset": 1,
    },
    "kimi_linear": {  # MLA attention; KDA's one short convolution over q, k and v
        "num_hidden_layers": 4,
        "num_key_value_heads": 4,
        "kv_lora_rank": 16,
        "q_lora_rank": None,
        "qk_rope_head_dim": 8,
        "qk_nope_head_dim": 16,
        "v_head_dim": 16,
        "linear_attn_config": {
            "full_attn_layers": [2, 4],
            "kda_layers": [1, 3],
            "head_dim": 16,
            "num_heads": 4,
            "short_conv_kernel_size": 4,
        },
        "num_experts": 2,
        **EXPERTS,
    },
    "olmo_hybrid": {"num_hidden_layers": 4},  # DeltaNet dims from the attention's
}


def config(model_type: str) -> dict:
    return {**BASE, **CASES[model_type], "model_type": model_type}


@pytest.fixture(scope="module")
def reference():
    """scripts/hf_cache_reference.py's prefilled_cache: what transformers' own cache holds
    after a prefill, run on the meta device."""
    spec = importlib.util.spec_from_file_location(
        "hf_cache_reference", SCRIPTS / "hf_cache_reference.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    transformers.logging.set_verbosity_error()
    return module.prefilled_cache


def hf(cfg: dict):
    """transformers' config of `cfg` (MiniMax's own code as its conversion)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    cfg = as_transformers(cfg)
    return CONFIG_MAPPING[cfg["model_type"]].from_dict(cfg)


def test_every_hybrid_reader_has_a_case():
    readers = {HYBRIDS[kind] for kind in CASES}
    assert readers == set(HYBRIDS.values())
    assert set(MINIMAX_CUSTOM_TYPES) & set(CASES)


@pytest.mark.parametrize("model_type", sorted(CASES))
@pytest.mark.parametrize("tokens", [7, 64])
def test_each_layer_caches_what_transformers_caches(model_type, tokens, reference):
    cfg = config(model_type)
    spec = spec_from_hf_config(cfg, model_type, "test")
    layers = reference(hf(cfg), tokens)
    assert len(layers) == spec.num_layers
    latent = spec.mla.latent_dim if spec.mla else None
    fmt = KvFormat(spec.dtype)
    per_token = token_layout(spec.num_heads, spec.num_kv_heads, spec.head_dim, fmt, 1, latent)
    ours_kv = [tokens * per_token.bytes * a for a in spec.attends]
    ours_state = [state_bytes([s], spec.dtype) for s in spec.layer_states]
    assert ours_kv == [r.kv_bytes for r in layers]
    assert ours_state == [r.conv_bytes + r.recurrent_bytes for r in layers]
    assert any(ours_state) and any(ours_kv)  # a hybrid: both kinds of cache


def test_recurrent_state_dtypes_are_transformers():
    """Mamba's and DeltaNet's recurrent states stay float32 in a bfloat16 model; the
    lightning attention's matrix is the model's dtype."""
    dtypes = {
        kind: spec_from_hf_config(config(kind), kind, "t").layer_states
        for kind in ("jamba", "bamba", "qwen3_next", "minimax", "lfm2")
    }
    first = {k: next(s for s in states if s is not None) for k, states in dtypes.items()}
    assert {k: s.recurrent_dtype for k, s in first.items()} == {
        "jamba": "float32",
        "bamba": "float32",
        "qwen3_next": "float32",
        "minimax": None,
        "lfm2": None,
    }
    assert first["lfm2"].recurrent == 0 and first["lfm2"].conv == 64 * 3
    assert first["minimax"].bytes_in("bfloat16") == 4 * 16 * 16 * 2


#: Configs that leave the layout out: each must get the configuration class's default.
DEFAULT_LAYOUTS = {
    "qwen3_next": {"num_hidden_layers": 8},
    "jamba": {"num_hidden_layers": 16},
    "lfm2": {"num_hidden_layers": 3},
    "minimax": {"num_hidden_layers": 5},
    "zamba": {"num_hidden_layers": 9},
    "zamba2": {"num_hidden_layers": len(ZAMBA2_DEFAULT_TYPES)},
    "kimi_linear": {"num_hidden_layers": 9, "num_key_value_heads": 4},
    "olmo_hybrid": {"num_hidden_layers": 3},
    "nemotron_h": {"num_hidden_layers": 4},
}


@pytest.mark.parametrize("model_type", sorted(DEFAULT_LAYOUTS))
def test_layouts_left_out_are_the_configuration_classes(model_type):
    from transformers.cache_utils import get_layer_types_and_kwargs

    cfg = {**BASE, **DEFAULT_LAYOUTS[model_type], "model_type": model_type}
    spec = spec_from_hf_config(cfg, model_type, "test")
    types, _ = get_layer_types_and_kwargs(hf(cfg))
    attends = [t in ("full_attention", "hybrid") for t in types]
    keeps = [t in ("linear_attention", "conv", "hybrid") for t in types]
    assert list(spec.attends) == attends
    assert [s is not None for s in spec.layer_states] == keeps


def test_qwen3_next_kinds_and_layer_counts():
    spec = spec_from_hf_config({**config("qwen3_next"), "num_hidden_layers": 48}, "q", "test")
    kinds = spec.layer_kinds()
    assert kinds.count("full attention") == spec.kv_layers == 12
    assert kinds.count("gated deltanet") == spec.state_layers == 36
    assert kinds[3] == kinds[47] == "full attention" and kinds[0] == "gated deltanet"


def test_both_and_neither_in_one_layer():
    falcon = spec_from_hf_config(config("falcon_h1"), "f", "t")
    assert set(falcon.layer_kinds()) == {"full attention + mamba2"}
    nemotron = spec_from_hf_config(config("nemotron_h"), "n", "t")
    assert nemotron.layer_kinds() == ("mamba2", "full attention", "mlp only", "mlp only")


# --- refused: never counted as if every layer attended ------------------------------------


def mystery(**fields) -> dict:
    return {**BASE, "num_hidden_layers": 4, "model_type": "mystery", **fields}


@pytest.mark.parametrize(
    "fields, named",
    [
        ({"layer_types": ["full_attention", "mamba", "mamba", "mamba"]}, "'layer_types'"),
        ({"hybrid_override_pattern": "M*MM"}, "'hybrid_override_pattern'"),
        ({"mamba_d_state": 16}, "'mamba_d_state'"),
        ({"attn_type_list": [0, 1, 0, 1]}, "'attn_type_list'"),
        ({"sliding_window": 64}, "'sliding_window' without 'layer_types'"),
    ],
)
def test_an_unknown_type_that_declares_other_layers_is_refused(fields, named):
    spec = spec_from_hf_config(mystery(**fields), "m", "m.json")
    assert spec.unknown_kinds is not None and named in spec.unknown_kinds
    assert "'mystery'" in spec.unknown_kinds
    with pytest.raises(UsageError, match="its KV cache and state are not counted"):
        spec.require_kinds()


def test_what_every_layer_attends_by_is_read_as_before():
    for fields in ({}, {"attn_type_list": [1, 1, 1, 1]}, {"layer_types": ["full_attention"] * 4}):
        assert spec_from_hf_config(mystery(**fields), "m", "m").unknown_kinds is None
    # a window with the layers that keep it listed is known
    listed = mystery(sliding_window=8, layer_types=["sliding_attention", "full_attention"] * 2)
    assert spec_from_hf_config(listed, "m", "m").windows == (8, None, 8, None)


@pytest.mark.parametrize(
    "model_type, fields, named",
    [
        ("qwen3_next", {"layer_types": ["full_attention"] * 3}, "layer_types"),
        ("qwen3_next", {"layer_types": ["full_attention", "mamba", "x", "y"]}, "layer_types"),
        ("nemotron_h", {"hybrid_override_pattern": "M*X"}, "hybrid_override_pattern"),
        ("jamba", {"attn_layer_offset": 2, "attn_layer_period": 2}, "attn_layer_offset"),
        ("bamba", {"attn_layer_indices": [4]}, "attn_layer_indices"),
        ("minimax_m1", {"attn_type_list": [0, 1, 2, 0]}, "attn_type_list"),
        ("lfm2_moe", {"layer_types": None}, "layer_types"),
        ("bamba", {"mamba_n_heads": 7}, "mamba_n_heads"),
        ("qwen3_next", {"linear_num_key_heads": 0}, "linear_num_key_heads"),
    ],
)
def test_bad_layer_fields_name_the_field(model_type, fields, named):
    cfg = {**config(model_type), **fields}
    with pytest.raises(UsageError, match=named):
        spec_from_hf_config(cfg, "m", "m.json")
