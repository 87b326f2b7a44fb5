"""Counts of any model type as transformers builds it (modules/hf_model.py): totals against
the model's own tensors, parts against attnbench's formulas where it has them, state
layers against the modules that are state layers, tied weights, the cache and the errors.
Every config is small (hidden 64, 2 to 4 layers, 4 experts, vocabulary 100).
"""

from __future__ import annotations

import json
import logging
import re
import sys

import pytest

from attnbench.errors import UsageError
from attnbench.model.hf_config import load_hf_config, spec_from_hf_config
from attnbench.model.model_params import part_params
from attnbench.modules import hf_fallback
from attnbench.modules.hf_model import HF_PARTS, generative_class, transformers_parts
from tests.helpers import SMALL_CONFIG

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

BASE = SMALL_CONFIG
EXPERTS = {"num_experts_per_tok": 2, "moe_intermediate_size": 32}
#: One small config per model type; each hybrid has both attention and state layers.
CONFIGS = {
    "llama": {**BASE, "attention_bias": True, "mlp_bias": True},
    "mixtral": {**BASE, "num_local_experts": 4, **EXPERTS},
    "gpt_oss": {**BASE, "num_local_experts": 4, **EXPERTS},  # sinks, biases everywhere
    "olmoe": {**BASE, "num_experts": 4, **EXPERTS},  # q/k norms
    "phi": BASE,  # LayerNorms, a biased head, the attention's `dense` out-projection
    "dbrx": {  # transformer.blocks.*.norm_attn_norm.attn, ffn.experts.mlp
        "d_model": 64,
        "n_heads": 4,
        "n_layers": 2,
        "vocab_size": 100,
        "attn_config": {"kv_n_heads": 2, "rope_theta": 10000.0},
        "ffn_config": {"moe_num_experts": 4, "moe_top_k": 2, "ffn_hidden_size": 32},
    },
    "qwen3_next": {
        **BASE,
        "num_experts": 4,
        **EXPERTS,
        "shared_expert_intermediate_size": 48,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "linear_key_head_dim": 16,
        "linear_value_head_dim": 16,
        "layer_types": ["linear_attention", "full_attention"] * 2,
    },
    "jamba": {
        **BASE,
        "num_experts": 4,
        **EXPERTS,
        "attn_layer_period": 2,
        "attn_layer_offset": 1,
        "mamba_dt_rank": 8,
    },
    "falcon_h1": {
        **BASE,
        "mamba_d_ssm": 64,
        "mamba_n_heads": 4,
        "mamba_d_head": 16,
        "mamba_d_state": 16,
    },
    "nemotron_h": {
        **BASE,
        "layers_block_type": ["linear_attention", "full_attention", "mlp", "moe"],
        "mamba_num_heads": 4,
        "mamba_head_dim": 16,
        "ssm_state_size": 16,
        "n_groups": 2,
        "n_routed_experts": 4,
        **EXPERTS,
        "moe_shared_expert_intermediate_size": 48,
    },
    "lfm2": {**BASE, "layer_types": ["conv", "full_attention"] * 2},
    "rwkv": {"hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 100},  # `head`
    "minimax": {
        **BASE,
        "num_local_experts": 4,
        **EXPERTS,
        "block_size": 16,
        "layer_types": ["linear_attention", "full_attention"] * 2,
    },
    "qwen2_5_vl": {
        "text_config": {**BASE, "num_hidden_layers": 2},
        "vision_config": {
            "depth": 1,
            "hidden_size": 32,
            "intermediate_size": 48,
            "num_heads": 2,
            "out_hidden_size": 64,
            "fullatt_block_indexes": [0],
        },
    },
}
HYBRIDS = ("qwen3_next", "jamba", "falcon_h1", "nemotron_h", "lfm2", "minimax")
#: The classes of the token mixers of the hybrids' state layers, and of their attention.
STATE_CLASS = re.compile(r"Mixer|GatedDeltaNet|ShortConv|LightningAttention")
ATTENTION_CLASS = re.compile(r"(?<!Lightning)Attention$")


def cfg(model_type: str, **changes) -> dict:
    return {**CONFIGS[model_type], "model_type": model_type, **changes}


def built(model_type: str):
    """The model transformers builds from CONFIGS[model_type], on the meta device."""
    config = transformers.AutoConfig.for_model(**cfg(model_type))
    auto = transformers.AutoModelForCausalLM
    if model_type == "qwen2_5_vl":
        auto = transformers.AutoModelForImageTextToText
    with torch.device("meta"):
        return auto.from_config(config)


def stored(modules) -> int:
    """Elements of the parameters and persistent buffers of `modules`, each tensor once."""
    seen = {}
    for module in modules:
        for sub in module.modules():
            for p in sub.parameters(recurse=False):
                seen[id(p)] = p.numel()
            for name, b in sub.named_buffers(recurse=False):
                if name not in sub._non_persistent_buffers_set:
                    seen[id(b)] = b.numel()
    return sum(seen.values())


@pytest.mark.parametrize("model_type", sorted(CONFIGS))
def test_total_is_the_models_tensors_and_every_part_is_placed(model_type):
    count = transformers_parts(cfg(model_type), "config.json")
    model = built(model_type)
    expected = model if model_type != "qwen2_5_vl" else model.model.language_model
    assert count.total == sum(count.parts.values())
    assert count.total == stored([expected, model.get_output_embeddings()])
    assert list(count.parts) == list(HF_PARTS)
    assert count.parts["other"] == 0
    assert count.model_class == type(model).__name__
    assert count.transformers_version == transformers.__version__


def test_multimodal_counts_the_language_model_and_head_and_says_what_it_leaves_out():
    count = transformers_parts(cfg("qwen2_5_vl"), "config.json")
    model = built("qwen2_5_vl")
    vision = stored([model]) - count.total
    assert vision == stored([model.model.visual]) > 0
    assert count.note is not None and f"({vision:,} parameters)" in count.note
    assert count.parts["output head"] == 100 * 64
    assert transformers_parts(cfg("llama"), "config.json").note is None


@pytest.mark.parametrize("model_type", ["llama", "mixtral", "gpt_oss"])
def test_parts_equal_attnbench_formulas(model_type):
    spec = spec_from_hf_config(cfg(model_type), model_type, "test")
    expected = {**part_params(spec), "state layers": 0, "other": 0}
    assert transformers_parts(cfg(model_type), "config.json").parts == expected


@pytest.mark.parametrize("model_type", HYBRIDS)
def test_hybrid_mixers_are_state_layers_and_attention_is_attention(model_type):
    parts = transformers_parts(cfg(model_type), "config.json").parts
    modules = list(built(model_type).modules())
    state = stored(m for m in modules if STATE_CLASS.search(type(m).__name__))
    attention = stored(m for m in modules if ATTENTION_CLASS.search(type(m).__name__))
    assert parts["state layers"] == state > 0
    assert parts["attention"] == attention > 0


def test_parts_of_names_that_vary_by_model_type():
    dbrx = transformers_parts(cfg("dbrx"), "config.json").parts
    # per layer: Wqkv 64*(64+2*32), out_proj 64*64; 4 experts of 3*64*32; router 4*64
    assert dbrx["attention"] == 2 * (64 * 128 + 64 * 64)
    assert dbrx["experts"] == 2 * 4 * 3 * 64 * 32
    assert dbrx["router"] == 2 * 4 * 64
    assert dbrx["norms"] == (2 * 2 + 1) * 64
    phi = transformers_parts(cfg("phi"), "config.json").parts
    assert phi["output head"] == 100 * 64 + 100  # with its bias
    assert phi["norms"] == (4 + 1) * 2 * 64  # LayerNorms: weight and bias
    nemotron = transformers_parts(cfg("nemotron_h"), "config.json").parts
    assert nemotron["router"] == 4 * 64 + 4  # with e_score_correction_bias, a buffer
    # RWKV: its `attention` is a recurrence (time_decay), its head is named `head`
    rwkv = transformers_parts(cfg("rwkv"), "config.json").parts
    recurrences = [m for m in built("rwkv").modules() if type(m).__name__ == "RwkvSelfAttention"]
    assert rwkv["state layers"] == stored(recurrences) > 0
    assert rwkv["attention"] == 0
    assert rwkv["output head"] == 100 * 64


def test_tied_weights_count_once_in_the_embeddings():
    untied = transformers_parts(cfg("llama"), "config.json")
    tied = transformers_parts(cfg("llama", tie_word_embeddings=True), "config.json")
    assert tied.parts["output head"] == 0
    assert tied.tied_embeddings and not untied.tied_embeddings
    assert tied.vocab_size == untied.vocab_size == 100
    assert tied.parts["embeddings"] == untied.parts["embeddings"] == 100 * 64
    assert tied.total == untied.total - 100 * 64


def test_a_config_is_built_once_per_process(monkeypatch):
    builds = []
    from_config = transformers.AutoModelForCausalLM.from_config
    monkeypatch.setattr(
        transformers.AutoModelForCausalLM,
        "from_config",
        lambda config, **kw: builds.append(config) or from_config(config, **kw),
    )
    config = cfg("llama", vocab_size=101)
    first = transformers_parts(config, "a.json")
    first.parts["mlp"] = -1  # a caller's change stays its own
    again = transformers_parts(dict(reversed(config.items())), "b.json")  # same config
    assert len(builds) == 1
    assert again.parts["mlp"] > 0 and again.total == first.total


def test_transformers_messages_are_silenced(monkeypatch):
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("transformers")
    monkeypatch.setattr(logger, "handlers", [*logger.handlers, handler])
    verbosity = transformers.logging.get_verbosity()
    # a token id outside the vocabulary: transformers logs a warning and builds the model
    transformers_parts(cfg("llama", bos_token_id=1000), "config.json")
    assert records == []
    assert transformers.logging.get_verbosity() == verbosity


@pytest.mark.parametrize(
    "config, message",
    [
        ({"model_type": "lama"}, r"does not know model_type 'lama' \(did you mean 'llama'\?\)"),
        (
            {**BASE, "model_type": "llama", "num_attention_heads": 5},
            r"cannot build 'llama': (?!its code raised).*not a multiple of the number of "
            r"attention heads",
        ),
        ({"model_type": "vit"}, "builds no causal LM of model_type 'vit'"),
        (  # image to text, without a language model to count apart
            {"model_type": "pix2struct"},
            "builds Pix2StructForConditionalGeneration of 'pix2struct': not a causal LM",
        ),
    ],
)
def test_errors_are_one_line_naming_the_file(config, message):
    with pytest.raises(UsageError, match=r"^m/config\.json: ") as error:
        transformers_parts(config, "m/config.json")
    assert re.search(message, str(error.value))
    assert "\n" not in str(error.value)


def test_without_transformers_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # `import transformers` fails
    with pytest.raises(UsageError, match=r"^m\.json: .*pip install attnbench\[hf\]"):
        transformers_parts(cfg("llama", vocab_size=102), "m.json")


def test_the_routed_experts_a_step_reads_come_from_each_type_s_own_fields(tmp_path):
    """ERNIE-4.5's moe_num_experts and moe_k (a type attnbench has no formulas of) are
    read, not taken as a dense model's none; so is Kimi-Linear's num_experts_per_token."""
    from attnbench.model.hf_config import load_hf_config
    from attnbench.model.model_params import step_traits
    from attnbench.modules.hf_fallback import PER_TOKEN_KEYS, _first, with_whole_model

    path = tmp_path / "config.json"
    experts = {"moe_num_experts": 4, "moe_k": 2, "moe_intermediate_size": 32}
    path.write_text(json.dumps({**BASE, "model_type": "ernie4_5_moe", **experts}))
    spec = with_whole_model(load_hf_config(path))
    assert spec.body is None and spec.counted is not None
    traits = step_traits(spec)
    assert (traits.num_experts, traits.experts_per_token) == (4, 2)
    assert _first({"num_experts_per_token": 8}, PER_TOKEN_KEYS, "ffn_config", "moe_top_k") == 8


@pytest.mark.parametrize(
    ("model_type", "width", "across"),
    [
        ("olmoe", 64, True),  # one RMSNorm of all the query heads' values
        ("minimax_m2", 64, True),
        ("qwen3_moe", 16, False),  # one of head_dim, shared by the heads
        ("cohere", None, False),  # weights of (heads, D): each head on its own
        ("llama", None, False),
    ],
)
def test_q_norms_that_span_the_heads_are_told_from_each_head_s_own(
    tmp_path, model_type, width, across
):
    from attnbench.model.hf_config import load_hf_config
    from attnbench.modules.hf_fallback import with_whole_model

    extra = {"num_experts": 4, "num_local_experts": 4, **EXPERTS, "use_qk_norm": True}
    config = {**transformers.AutoConfig.for_model(model_type).to_dict(), **BASE, **extra}
    assert transformers_parts(config, "config.json").q_norm_width == width
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert with_whole_model(load_hf_config(path)).qk_norm_across_heads is across


def test_a_vision_tower_s_q_norm_is_not_the_language_model_s(tmp_path):
    """InternVL's vision tower may normalise its q across its heads; its language model
    (ERNIE-4.5 here, without q norms) does not, and is what a step's all-reduces follow."""
    from attnbench.model.hf_config import load_hf_config
    from attnbench.modules.hf_fallback import with_whole_model

    config = transformers.AutoConfig.for_model("internvl").to_dict()
    vision = {"hidden_size": 32, "num_attention_heads": 2, "use_qk_norm": True}
    vision |= {"num_hidden_layers": 1, "intermediate_size": 64}
    text = {**transformers.AutoConfig.for_model("ernie4_5").to_dict(), **BASE}
    config |= {"vision_config": {**config["vision_config"], **vision}, "text_config": text}
    assert transformers_parts(config, "config.json").q_norm_width is None
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert not with_whole_model(load_hf_config(path)).qk_norm_across_heads


def test_a_hybrid_all_reduces_the_norms_of_its_attention_layers_alone(tmp_path):
    """Qwen3-Next's q norm is a head's (not across the heads); were it across them, only
    its attention layers would all-reduce their statistics, not its DeltaNet layers."""
    from dataclasses import replace

    from attnbench.model.hf_config import load_hf_config
    from attnbench.model.roofline import decode_counts
    from attnbench.modules.hf_fallback import with_whole_model

    linear = {"linear_num_key_heads": 2, "linear_num_value_heads": 4}
    linear |= {"linear_key_head_dim": 16, "linear_value_head_dim": 16}
    config = {**transformers.AutoConfig.for_model("qwen3_next").to_dict(), **BASE, **EXPERTS}
    config |= {"num_experts": 4, **linear, "layer_types": None}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    spec = with_whole_model(load_hf_config(path))
    assert spec.counted is not None and not spec.qk_norm_across_heads
    assert decode_counts(spec, 4, 128, "bfloat16", tp=2).norm_allreduces == 0
    across = replace(spec, counted=replace(spec.counted, qk_norm_across_heads=True))
    assert decode_counts(across, 4, 128, "bfloat16", tp=2).norm_allreduces == spec.kv_layers
    assert 0 < spec.kv_layers < spec.num_layers


def test_a_causal_lm_of_the_image_text_mapping_is_counted():
    """Mistral-4 is in transformers' image-text-to-text mapping alone, which builds
    Mistral4ForCausalLM: a causal LM, counted, not refused as one."""
    config = transformers.AutoConfig.for_model("mistral4").to_dict()
    mla = {"kv_lora_rank": 16, "q_lora_rank": 32, "qk_head_dim": 24, "qk_nope_head_dim": 16}
    small = {**BASE, **EXPERTS, **mla, "qk_rope_head_dim": 8, "v_head_dim": 16}
    count = transformers_parts({**config, **small, "n_routed_experts": 4}, "config.json")
    assert count.model_class == "Mistral4ForCausalLM" and count.parts["experts"] > 0


def test_transformers_own_failures_are_named_by_type_and_said_to_be_its_code_s():
    """A ValueError is transformers refusing a value, in its words; any other error is its
    code failing (a KeyError on a layer type, a TypeError on a null field), said so."""
    from attnbench.modules.hf_model import _first_line

    assert _first_line(ValueError("heads: not a multiple\nmore")) == "heads: not a multiple"
    assert _first_line(KeyError("full_attention")) == (
        "its code raised KeyError: 'full_attention' (a field the config leaves out or sets "
        "to null, perhaps)"
    )
    assert _first_line(TypeError()).startswith("its code raised TypeError (a field")
    missing = ModuleNotFoundError("No module named 'timm'")
    assert _first_line(missing) == (
        "its code needs a package that is not installed (No module named 'timm')"
    )


@pytest.mark.parametrize("model_type", sorted(hf_fallback.TIES_AS_FLAGS))
def test_the_types_taken_to_tie_as_their_flags_say_declare_their_tied_weights(model_type):
    """TIES_AS_FLAGS spares their configs an import of the class: each of them does
    declare its tied weights in the transformers installed."""
    model = generative_class(model_type)
    assert model is not None and model._tied_weights_keys, model_type


def test_a_multimodal_class_that_ties_nothing_is_counted_as_transformers_builds_it(tmp_path):
    """Qwen2-Audio's class declares no tied weights: its head is its own though both of
    its config's flags say tied, as transformers builds it; the formulas, which would tie
    it, decline and say why."""
    text = {**BASE, "model_type": "qwen2", "tie_word_embeddings": True}
    audio = {"model_type": "qwen2_audio_encoder", "d_model": 32, "encoder_layers": 1}
    audio |= {"encoder_attention_heads": 2, "encoder_ffn_dim": 32, "num_mel_bins": 16}
    config = {"model_type": "qwen2_audio", "tie_word_embeddings": True, "text_config": text}
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config, "audio_config": audio}))
    spec = hf_fallback.with_whole_model(load_hf_config(path))
    assert spec.body is None and not spec.counted.tied_embeddings
    parts = dict(spec.counted.parts)
    assert parts["output head"] == parts["embeddings"] == 100 * 64
    assert "Qwen2AudioForConditionalGeneration declares no tied weights" in spec.formulas_decline
