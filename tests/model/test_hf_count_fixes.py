"""Model types whose count by transformers is not the model (ModelSpec.count_fix): each
held to transformers' own build on the meta device, where it allocates what the model
does not hold (LongCat-Flash), names its experts otherwise (JetMoE), or shares a block
among layers (Zamba2)."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest

from attnbench.errors import FieldError, UsageError
from attnbench.model.architecture import CountedModel
from attnbench.model.hf_config import load_hf_config, spec_from_hf_config
from attnbench.model.model_params import (
    active_params,
    part_params,
    step_parts,
    step_traits,
    total_params,
)
from attnbench.model.roofline import decode_counts

LONGCAT = {
    "model_type": "longcat_flash",
    "hidden_size": 64,
    "num_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "ffn_hidden_size": 96,
    "expert_ffn_hidden_size": 32,
    "n_routed_experts": 8,
    "zero_expert_num": 4,
    "moe_topk": 2,
    "kv_lora_rank": 16,
    "q_lora_rank": 24,
    "qk_nope_head_dim": 16,
    "qk_rope_head_dim": 8,
    "v_head_dim": 16,
    "head_dim": 8,
    "vocab_size": 100,
}
JETMOE = {
    "model_type": "jetmoe",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_key_value_heads": 2,
    "kv_channels": 16,
    "num_attention_heads": 4,
    "intermediate_size": 48,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "vocab_size": 100,
}
#: What the two Zamba configurations share: 7 layers, 4 of them hybrid (a shared block).
ZAMBA_LAYERS = {
    "hidden_size": 64,
    "num_hidden_layers": 7,
    "layers_block_type": ["mamba", "hybrid", "mamba", "hybrid", "hybrid", "mamba", "hybrid"],
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "vocab_size": 100,
}
ZAMBA2 = {
    **ZAMBA_LAYERS,
    "model_type": "zamba2",
    "n_mamba_heads": 4,
    "mamba_headdim": 32,
    "mamba_d_state": 8,
    "num_mem_blocks": 2,
}
ZAMBA = {
    **ZAMBA_LAYERS,
    "model_type": "zamba",
    "n_mamba_heads": 2,
    "intermediate_size": 96,
    "mamba_d_state": 8,
}


def _spec(cfg: dict, parts: dict[str, int], experts: int | None = None):
    """The spec of `cfg` as transformers would have counted it: `parts`."""
    spec = spec_from_hf_config(cfg, cfg["model_type"], "config.json")
    counted = CountedModel(
        tuple(parts.items()), "test", 100, False, experts, 2 if experts else None
    )
    return replace(spec, counted=counted)


def _built(cfg: dict) -> dict[str, int]:
    """{name: elements} of what transformers builds of `cfg` (parameters and stored
    buffers, each tensor once), on the meta device."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.AutoConfig.for_model(**cfg)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    stored = {id(p): (n, p.numel()) for n, p in model.named_parameters()}
    for prefix, sub in model.named_modules():
        for n, b in sub._buffers.items():
            if b is not None and n not in sub._non_persistent_buffers_set:
                stored.setdefault(id(b), (f"{prefix}.{n}", b.numel()))
    return dict(stored.values())


def _sum(built: dict[str, int], pattern: str) -> int:
    return sum(n for name, n in built.items() if re.search(pattern, name))


def _loaded(cfg: dict, tmp_path):
    """The spec of `cfg` written to a config.json, counted whole by transformers."""
    from attnbench.modules.hf_fallback import with_whole_model

    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return with_whole_model(load_hf_config(path))


def test_longcat_zero_experts_hold_no_weights() -> None:
    # transformers counts 8 real + 4 zero experts' gate_up slices in "experts"
    d, width, layers = 64, 32, 2
    real, unbuilt = layers * 8 * 3 * width * d, layers * 4 * 2 * width * d
    spec = _spec(LONGCAT, {"embeddings": 6400, "experts": real + unbuilt}, experts=8)
    assert part_params(spec)["experts"] == real
    assert total_params(spec) == 6400 + real
    assert step_traits(spec).num_experts == 8
    # a later transformers that builds the real experts alone counts the same
    assert part_params(_spec(LONGCAT, {"embeddings": 6400, "experts": real}, 8)) == part_params(
        spec
    )
    with pytest.raises(UsageError, match="attnbench cannot tell"):
        part_params(_spec(LONGCAT, {"experts": real + 1}, experts=8))


def test_longcat_counts_transformers_build_without_its_unbuilt_experts(tmp_path) -> None:
    built = _built(LONGCAT)
    spec = _loaded(LONGCAT, tmp_path)
    # transformers allocates gate_up for the 4 zero experts too, down_proj for the 8 alone
    gate_up = _sum(built, r"experts\.gate_up_proj$")
    assert gate_up == 2 * 12 * 2 * 32 * 64
    assert _sum(built, r"experts\.down_proj$") == 2 * 8 * 32 * 64
    unbuilt = 2 * 4 * 2 * 32 * 64
    assert total_params(spec) == sum(built.values()) - unbuilt
    assert part_params(spec)["experts"] == _sum(built, r"\.experts\.") - unbuilt


def test_jetmoe_counts_its_experts_in_mlp_and_attention(tmp_path) -> None:
    built = _built(JETMOE)
    spec = _loaded(JETMOE, tmp_path)
    mlp_experts = _sum(built, r"\.mlp\.(input|output)_linear\.")
    attention_experts = _sum(built, r"\.self_attention\.experts\.(input|output)_linear\.")
    assert total_params(spec) == sum(built.values())
    assert part_params(spec)["experts"] == mlp_experts
    traits = step_traits(spec)
    assert (traits.num_experts, traits.experts_per_token) == (4, 2)
    # a token goes to 2 of the 4 experts of each kind
    assert active_params(spec) == sum(built.values()) - (mlp_experts + attention_experts) // 2


def test_jetmoe_attention_experts_are_not_split_by_expert_parallelism(tmp_path) -> None:
    spec = _loaded(JETMOE, tmp_path)
    assert decode_counts(spec, 2, 8, "float32", None, 2).weight_bytes > 0
    with pytest.raises(FieldError, match="not routed attention experts"):
        decode_counts(spec, 2, 8, "float32", None, 2, ep=2)


@pytest.mark.parametrize("batch", [1, 2, 64])
def test_jetmoe_matmuls_hold_the_attention_experts_its_tokens_touch(tmp_path, batch) -> None:
    """The matmuls whose tiles are padded (and, on Marlin's kernel, surcharged) hold the
    attention experts a step's tokens touch, as the MLP's: their tokens' FLOPs add up to
    the step's, and a single token's hold 2 of the 4 experts' weights, not all 4 (which
    counted 24% more FLOPs than the step's)."""
    spec = _loaded(JETMOE, tmp_path)
    step = decode_counts(spec, batch, 8, "float32")
    tokens_flops = sum(m.flops for m in step.matmuls)
    assert tokens_flops == pytest.approx(step.flops - step.attention_core_flops, rel=1e-3)
    routed = [m for m in step.matmuls if m.grouped]
    assert len(routed) == 2  # the attention's experts and the MLP's
    if batch == 1:  # one token: 2 of the 4 attention experts, each its whole token
        experts_attention = 2 * 4 * 2 * (2 * 16) * 64  # layers, experts, in and out, kv, d
        assert routed[0].tokens == pytest.approx(1)
        assert routed[0].weights == experts_attention // 2


def test_zamba2_shared_blocks_are_read_at_each_use(tmp_path) -> None:
    built = _built(ZAMBA2)
    spec = _loaded(ZAMBA2, tmp_path)
    assert total_params(spec) == sum(built.values())
    # 4 hybrid layers, 2 shared blocks: each block runs twice, held once
    shared = _sum(built, r"shared_transformer\.(?!.*adapter)")
    assert sum(step_parts(spec).values()) == total_params(spec) + shared
    assert sum(step_parts(spec, tp=2).values()) > sum(part_params(spec, tp=2).values())
    # the shared attention projects the hidden state and the embeddings joined (twice
    # the width of the layer shape), at each use: a token's matmuls are 2 FLOPs a weight
    # of every use, the head's included
    parts = step_parts(spec)
    used = sum(parts[p] for p in ("attention", "mlp", "router", "state layers", "other"))
    step = decode_counts(spec, 1, 8, "float32")
    assert step.flops - step.attention_flops == 2 * used + 2 * 100 * 64


def test_zamba_shares_one_block_among_its_hybrid_layers(tmp_path) -> None:
    built = _built(ZAMBA)
    spec = _loaded(ZAMBA, tmp_path)
    assert total_params(spec) == sum(built.values())
    shared = _sum(built, r"shared_transf\.")  # held once, run at each of 4 hybrid layers
    assert shared and sum(step_parts(spec).values()) == total_params(spec) + 3 * shared
