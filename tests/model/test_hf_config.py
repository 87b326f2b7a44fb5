"""Reading a model's attention architecture from a Hugging Face config.json on disk.

Every file is written by the test into tmp_path; nothing is downloaded.
"""

from __future__ import annotations

import json

import pytest

from attnbench.cli import app
from attnbench.errors import UsageError
from attnbench.model.architecture import StoredWeights
from attnbench.model.capacity import layer_tokens
from attnbench.model.hf_config import BODY_MODEL_TYPES, load_hf_config, spec_from_hf_config
from attnbench.model.presets import get_preset
from tests.helpers import runner


def write_config(tmp_path, cfg, name="model"):
    folder = tmp_path / name
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.json"
    path.write_text(json.dumps(cfg, indent=2) if not isinstance(cfg, str) else cfg)
    return path


def expect_usage_error(path, *needles):
    """load_hf_config raises UsageError, and the CLI exits 2 with the same message."""
    with pytest.raises(UsageError) as info:
        load_hf_config(path)
    for needle in needles:
        assert needle in str(info.value)
    result = runner.invoke(app, ["kvmem", "--hf-config", str(path), "--no-measure"])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.output.startswith("error:")
    for needle in needles:
        assert needle in result.output


LLAMA3_8B = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 32,
    "intermediate_size": 14336,
    "torch_dtype": "bfloat16",
    "model_type": "llama",
}


def test_gqa_from_num_key_value_heads(tmp_path):
    spec = load_hf_config(write_config(tmp_path, LLAMA3_8B))
    assert (spec.num_layers, spec.d_model, spec.num_heads, spec.num_kv_heads) == (32, 4096, 32, 8)
    assert spec.head_dim == 128  # 4096 / 32
    assert spec.dtype == "bfloat16"
    assert spec.variant == "GQA-8"


def test_qwen2_gqa(tmp_path):
    cfg = {
        "hidden_size": 3584,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "num_hidden_layers": 28,
        "torch_dtype": "bfloat16",
        "model_type": "qwen2",
    }
    spec = load_hf_config(write_config(tmp_path, cfg))
    assert (spec.num_heads, spec.num_kv_heads, spec.head_dim) == (28, 4, 128)  # 3584 / 28
    assert spec.variant == "GQA-4"


def test_missing_num_key_value_heads_means_mha(tmp_path):
    cfg = {k: v for k, v in LLAMA3_8B.items() if k != "num_key_value_heads"}
    cfg["torch_dtype"] = "float16"
    spec = load_hf_config(write_config(tmp_path, cfg))
    assert spec.num_kv_heads == spec.num_heads == 32
    assert spec.variant == "MHA"
    assert spec.dtype == "float16"


@pytest.mark.parametrize(("kind", "kv_heads"), [("mistral", 8), ("gemma2", 4), ("qwen2", 32)])
def test_missing_num_key_value_heads_is_the_class_default(tmp_path, kind, kv_heads):
    """As transformers builds it: Mistral's configuration class gives 8 KV heads to a
    config.json that leaves the field out, whatever its heads (Llama's gives None: MHA)."""
    cfg = {k: v for k, v in LLAMA3_8B.items() if k != "num_key_value_heads"}
    spec = load_hf_config(write_config(tmp_path, {**cfg, "model_type": kind}))
    assert spec.num_kv_heads == kv_heads


def test_null_num_key_value_heads_means_mha(tmp_path):
    spec = load_hf_config(write_config(tmp_path, {**LLAMA3_8B, "num_key_value_heads": None}))
    assert spec.num_kv_heads == 32


@pytest.mark.parametrize(
    "names",
    [
        # the original RefinedWeb names
        {"n_head": 71, "n_layer": 32},
        # the names of transformers' native FalconConfig
        {"num_attention_heads": 71, "num_hidden_layers": 32},
    ],
)
def test_falcon_multi_query_is_mqa(tmp_path, names):
    cfg = {
        "model_type": "falcon",
        "hidden_size": 4544,
        **names,
        "multi_query": True,
        "new_decoder_architecture": False,
        "torch_dtype": "bfloat16",
    }
    spec = load_hf_config(write_config(tmp_path, cfg))
    assert (spec.num_layers, spec.d_model, spec.num_heads) == (32, 4544, 71)
    assert spec.num_kv_heads == 1
    assert spec.head_dim == 64  # 4544 / 71
    assert spec.variant == "MQA"


def test_falcon_multi_query_ignores_default_num_kv_heads(tmp_path):
    # What FalconConfig.save_pretrained writes for falcon-7b: num_kv_heads defaults to the
    # number of query heads, and the model still has one KV head.
    cfg = {
        "model_type": "falcon",
        "hidden_size": 4544,
        "num_attention_heads": 71,
        "num_hidden_layers": 32,
        "num_kv_heads": 71,
        "multi_query": True,
        "new_decoder_architecture": False,
        "torch_dtype": "bfloat16",
    }
    spec = load_hf_config(write_config(tmp_path, cfg))
    assert spec.num_kv_heads == 1


@pytest.mark.parametrize("kv_key", ["num_kv_heads", "n_head_kv"])
def test_falcon_new_decoder_architecture_uses_num_kv_heads(tmp_path, kv_key):
    # falcon-40b: 60 layers, 8192 wide, 128 query heads, 8 KV heads; multi_query is ignored
    # with the new decoder architecture.
    cfg = {
        "model_type": "falcon",
        "hidden_size": 8192,
        "num_attention_heads": 128,
        "num_hidden_layers": 60,
        kv_key: 8,
        "multi_query": True,
        "new_decoder_architecture": True,
        "torch_dtype": "bfloat16",
    }
    spec = load_hf_config(write_config(tmp_path, cfg))
    assert (spec.num_layers, spec.num_heads, spec.num_kv_heads) == (60, 128, 8)
    assert spec.head_dim == 64  # 8192 / 128
    assert spec.variant == "GQA-8"


def test_gpt2_names(tmp_path):
    cfg = {"model_type": "gpt2", "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024}
    spec = load_hf_config(write_config(tmp_path, cfg))
    assert (spec.num_layers, spec.d_model, spec.num_heads, spec.num_kv_heads) == (12, 768, 12, 12)
    assert spec.head_dim == 64  # 768 / 12
    assert spec.variant == "MHA"
    assert spec.dtype == "float32"  # no torch_dtype: weights are stored in float32


def test_explicit_head_dim(tmp_path):
    # gemma-7b: head_dim 256 although 3072 / 16 = 192.
    cfg = {
        "model_type": "gemma",
        "hidden_size": 3072,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "head_dim": 256,
        "num_hidden_layers": 28,
        "torch_dtype": "bfloat16",
    }
    spec = load_hf_config(write_config(tmp_path, cfg))
    assert spec.head_dim == 256
    assert (spec.num_layers, spec.d_model, spec.num_heads, spec.num_kv_heads) == (28, 3072, 16, 16)


def test_name_comes_from_name_or_path_or_the_files_stem(tmp_path):
    named = load_hf_config(write_config(tmp_path, {**LLAMA3_8B, "_name_or_path": "org/m"}))
    assert named.name == "org/m"
    for stem in ("cohere2", "olmo2"):  # files of one folder, each its own name
        path = tmp_path / f"{stem}.json"
        path.write_text(json.dumps(LLAMA3_8B))
        assert load_hf_config(path).name == stem


def test_hf_config_in_kvmem(tmp_path):
    path = write_config(tmp_path, LLAMA3_8B, name="llama3")
    out = tmp_path / "out.json"
    result = runner.invoke(
        app,
        [
            "kvmem",
            "--hf-config",
            str(path),
            "--seq-len",
            "1024",
            "--no-measure",
            "--json",
            str(out),
            "-q",
        ],
    )
    assert result.exit_code == 0, result.output
    (rec,) = json.loads(out.read_text())["records"]
    assert rec["model"] == "llama3"
    assert rec["num_layers"] == 32
    assert rec["dtype"] == "bfloat16"
    # 2 (K and V) * 32 layers * 8 KV heads * 128 head_dim * 2 bytes = 131,072 bytes per token
    assert rec["bytes_per_token"] == 131_072
    # x 1 sequence x 1024 tokens = 134,217,728 bytes (128 MiB)
    assert rec["kv_bytes"] == 134_217_728


def test_hf_config_in_params(tmp_path):
    path = write_config(tmp_path, LLAMA3_8B)
    out = tmp_path / "out.json"
    result = runner.invoke(app, ["params", "--hf-config", str(path), "--json", str(out), "-q"])
    assert result.exit_code == 0, result.output
    (rec,) = json.loads(out.read_text())["records"]
    # q and o: 4096 * 4096 each; k and v: 4096 * (8 * 128) each
    assert rec["total_params"] == 2 * 4096 * 4096 + 2 * 4096 * 1024


# transformers' default for tie_word_embeddings, per model_type: the configuration classes
# of Llama, Mistral, Mixtral, Qwen2/3 and DeepSeek-V2/V3 untie the output head, those of
# Gemma 1/2/3, Falcon and GPT-2 tie it; of the others, Cohere 1/2, SmolLM3 and StarCoder2
# tie it.
TIED_BY_DEFAULT = {
    "llama": False,
    "mistral": False,
    "mixtral": False,
    "qwen2": False,
    "qwen3": False,
    "deepseek_v2": False,
    "deepseek_v3": False,
    "gemma": True,
    "gemma2": True,
    "gemma3_text": True,
    "falcon": True,
    "RefinedWeb": True,
    "RefinedWebModel": True,
    "gpt2": True,
    "cohere": True,
    "cohere2": True,
    "exaone4": False,
    "glm4": False,
    "glm4_moe": False,
    "gpt_oss": False,
    "granite": False,
    "llama4_text": False,
    "olmo2": False,
    "phi3": False,
    "phimoe": False,
    "qwen2_moe": False,
    "qwen3_moe": False,
    "smollm3": True,
    "starcoder2": True,
}
TINY_BODY = {
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,  # given: some types' defaults (Mistral's 8) exceed 4 heads
    "num_hidden_layers": 2,
    "vocab_size": 100,
    "intermediate_size": 128,
    "n_positions": 32,
    "num_experts_per_tok": 1,
}


@pytest.mark.parametrize("model_type", sorted(TIED_BY_DEFAULT))
def test_missing_tie_word_embeddings_takes_the_model_types_default(model_type):
    spec = spec_from_hf_config({**TINY_BODY, "model_type": model_type}, "m", "m")
    assert spec.body.tied_embeddings is TIED_BY_DEFAULT[model_type]
    for given in (True, False):
        cfg = {**TINY_BODY, "model_type": model_type, "tie_word_embeddings": given}
        assert spec_from_hf_config(cfg, "m", "m").body.tied_embeddings is given


def test_every_model_type_with_a_body_has_a_tie_default():
    assert set(BODY_MODEL_TYPES) == set(TIED_BY_DEFAULT)


def test_non_boolean_tie_word_embeddings(tmp_path):
    cfg = {**TINY_BODY, "model_type": "llama", "tie_word_embeddings": "false"}
    expect_usage_error(write_config(tmp_path, cfg), "tie_word_embeddings")


def test_mla_head_dim_is_v_head_dim_whatever_head_dim_says(tmp_path):
    """DeepSeek-V3 as transformers writes its config: head_dim is qk_rope_head_dim (64). The
    attention shape, and so the ratios to MHA, are those of the deepseek-v3 preset."""
    cfg = {
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
        "dtype": "bfloat16",
    }
    path = write_config(tmp_path, cfg, name="v3")
    spec = load_hf_config(path)
    preset = get_preset("deepseek-v3")
    assert spec.head_dim == preset.head_dim == 128
    assert spec.attention_shape() == preset.attention_shape()
    ratios = {}
    for args in (["--model", "deepseek-v3"], ["--hf-config", str(path)]):
        out = tmp_path / "out.json"
        result = runner.invoke(app, ["kvmem", *args, "--no-measure", "--json", str(out), "-q"])
        assert result.exit_code == 0, result.output
        (rec,) = json.loads(out.read_text())["records"]
        ratios[args[0]] = (rec["head_dim"], rec["ratio_vs_mha"])
    assert ratios["--hf-config"] == ratios["--model"]


# ---------------------------------------------------------------------------- errors


def test_invalid_json_names_the_line(tmp_path):
    text = '{\n  "hidden_size": 4096,\n  "num_attention_heads": 32,\n  "num_hidden_layers" 32\n}\n'
    path = write_config(tmp_path, text)
    expect_usage_error(path, str(path), "line 4")


def test_missing_hidden_size_is_named(tmp_path):
    cfg = {k: v for k, v in LLAMA3_8B.items() if k != "hidden_size"}
    expect_usage_error(write_config(tmp_path, cfg), "missing", "hidden_size")


def test_missing_num_heads_is_named(tmp_path):
    """Refused for a type without a default of its heads; a type with one (Llama's 32, as
    transformers builds it) takes it, and says so."""
    cfg = {k: v for k, v in LLAMA3_8B.items() if k != "num_attention_heads"}
    unknown = write_config(tmp_path, {**cfg, "model_type": "rwkv"}, "rwkv")
    expect_usage_error(unknown, "missing", "num_attention_heads")
    spec = load_hf_config(write_config(tmp_path, cfg))
    assert spec.num_heads == 32 and "num_attention_heads left out: llama's default" in spec.note


def test_missing_num_layers_is_named(tmp_path):
    cfg = {k: v for k, v in LLAMA3_8B.items() if k != "num_hidden_layers"}
    expect_usage_error(write_config(tmp_path, cfg), "missing", "num_hidden_layers")


def test_contradictory_width_fields(tmp_path):
    cfg = {**LLAMA3_8B, "n_embd": 2048}
    expect_usage_error(write_config(tmp_path, cfg), "contradictory", "hidden_size", "n_embd")


def test_contradictory_kv_head_fields(tmp_path):
    cfg = {**LLAMA3_8B, "num_kv_heads": 4}
    expect_usage_error(write_config(tmp_path, cfg), "contradictory", "num_key_value_heads")


def test_kv_heads_that_do_not_divide_heads(tmp_path):
    cfg = {**LLAMA3_8B, "num_key_value_heads": 3}
    expect_usage_error(write_config(tmp_path, cfg), "num_kv_heads 3")


@pytest.mark.parametrize("bad", [0, -4, "32", 32.0, True])
def test_non_positive_or_non_integer_field(tmp_path, bad):
    cfg = {**LLAMA3_8B, "num_hidden_layers": bad}
    expect_usage_error(write_config(tmp_path, cfg), "num_hidden_layers")


def test_unknown_torch_dtype(tmp_path):
    cfg = {**LLAMA3_8B, "torch_dtype": "int8"}
    expect_usage_error(write_config(tmp_path, cfg), "torch_dtype", "int8")


def test_top_level_not_an_object(tmp_path):
    expect_usage_error(write_config(tmp_path, "[1, 2, 3]\n"), "JSON object")


def test_missing_file(tmp_path):
    path = tmp_path / "nowhere" / "config.json"
    expect_usage_error(path, "no such file", str(path))
    result = runner.invoke(app, ["kvmem", "--hf-config", str(path), "--no-measure"])
    assert result.output.startswith(f"error: --hf-config {path}: no such file")


def test_non_utf8_file_is_a_usage_error(tmp_path):
    path = tmp_path / "config.json"
    path.write_bytes(b'{"hidden_size": 4096, "name": "caf\xe9"}\n')
    result = runner.invoke(app, ["kvmem", "--hf-config", str(path), "--no-measure"])
    assert result.exit_code == 2
    assert "Traceback" not in result.output


def test_model_and_hf_config_together(tmp_path):
    path = write_config(tmp_path, LLAMA3_8B)
    result = runner.invoke(
        app, ["kvmem", "--model", "llama-2-7b", "--hf-config", str(path), "--no-measure"]
    )
    assert result.exit_code == 2
    assert "--model" in result.output and "--hf-config" in result.output


#: Small configs of the model types whose layouts differ: (model_type, fields). Every one
#: has 8 layers, a sliding window of 16 and (Llama-4) chunks of 32.
LAYOUTS = [
    ("cohere2", {}),  # sliding_window_pattern 4 by default: every 4th layer global
    ("cohere2", {"sliding_window_pattern": 2}),
    ("exaone4", {}),
    ("gpt_oss", {}),  # every other layer
    ("gemma2", {}),
    ("gemma3_text", {"sliding_window_pattern": 3}),
    ("mistral", {}),
    # chunked but every 4th layer; Llama-4 configs have no sliding window
    ("llama4_text", {"attention_chunk_size": 32, "sliding_window": None}),
    (
        "llama4_text",
        {"attention_chunk_size": 32, "sliding_window": None, "no_rope_layers": [1, 0] * 4},
    ),
    ("llama4_text", {"attention_chunk_size": None, "sliding_window": None}),
    ("qwen2", {"use_sliding_window": True, "max_window_layers": 5}),
]


@pytest.mark.parametrize(
    ("model_type", "fields"), LAYOUTS, ids=[f"{t}-{i}" for i, (t, _) in enumerate(LAYOUTS)]
)
def test_each_layers_cache_is_what_transformers_static_cache_keeps(model_type, fields):
    """Per layer, the tokens attnbench counts equal what StaticCache holds after a
    prefill of 64 tokens, for each way a config declares its layout."""
    transformers = pytest.importorskip("transformers")
    import torch

    cfg = {
        "model_type": model_type,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "num_hidden_layers": 8,
        "sliding_window": 16,
        "vocab_size": 100,
        "intermediate_size": 128,
        "eos_token_id": 1,
        "pad_token_id": 0,
        **fields,
    }
    theirs = transformers.AutoConfig.for_model(**cfg)
    cache = transformers.StaticCache(config=theirs, max_cache_len=64)
    for layer in range(8):
        k = torch.zeros(1, 2, 64, 16)
        cache.update(k, k, layer)
    kept = [layer.keys.shape[-2] for layer in cache.layers]
    spec = spec_from_hf_config(cfg, model_type, model_type)
    windows = spec.windows or (None,) * 8
    assert [layer_tokens(64, w) for w in windows] == kept
    assert (
        len(set(kept)) > 1
        or model_type == "mistral"
        or fields.get("attention_chunk_size", 1) is None
    )


def test_a_multimodal_config_is_read_through_its_language_model(tmp_path):
    gemma3 = {
        "model_type": "gemma3",
        "torch_dtype": "bfloat16",
        "_name_or_path": "org/g3",
        "text_config": {
            "hidden_size": 64,
            "num_attention_heads": 4,
            "num_key_value_heads": 1,
            "head_dim": 16,
            "num_hidden_layers": 6,
            "sliding_window": 32,
        },
        "vision_config": {"hidden_size": 1152},
    }
    spec = load_hf_config(write_config(tmp_path, gemma3))
    assert (spec.name, spec.d_model, spec.num_kv_heads, spec.dtype) == ("org/g3", 64, 1, "bfloat16")
    assert spec.windows == (32,) * 5 + (None,)  # gemma3_text: every 6th layer global
    assert "vision or audio encoder is not counted" in spec.note
    result = runner.invoke(
        app, ["kvmem", "--hf-config", str(write_config(tmp_path, gemma3)), "--seq-len", "64"]
    )
    assert result.exit_code == 0, result.output
    note = "note: org/g3: the language model of a multimodal config: its vision or audio encoder"
    assert f"{note} is not counted" in " ".join(result.output.split())


def test_a_sliding_window_pattern_of_letters_repeats_over_the_layers():
    cfg = {
        "model_type": "exaone4",
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": 8,
        "sliding_window": 16,
    }
    cfg["sliding_window_pattern"] = "LLG"
    assert spec_from_hf_config(cfg, "e", "e").windows == (16, 16, None, 16, 16, None, 16, 16)
    with pytest.raises(UsageError, match="'sliding_window_pattern' is 'LX'"):
        spec_from_hf_config({**cfg, "sliding_window_pattern": "LX"}, "e", "e")


def test_kvmem_flags_a_context_past_the_models_positions():
    result = runner.invoke(app, ["kvmem", "--model", "llama-2-7b", "--seq-len", "4096,8192"])
    assert result.exit_code == 0, result.output
    note = "note: llama-2-7b: context 8,192 is past its 4,096 positions (max_position_embeddings)"
    assert f"{note}; computed all the same" in " ".join(result.output.split())
    assert "8,192" in result.output.split("note:")[0]  # computed: its row is in the table
    within = runner.invoke(app, ["kvmem", "--model", "llama-2-7b", "--seq-len", "4096"])
    assert "note:" not in within.output


def test_a_config_of_an_unknown_type_or_without_a_name_says_so(tmp_path, monkeypatch):
    """A model_type neither attnbench's formulas nor transformers know is read from the
    common fields, unchecked, and one named after its folder says so: notes, not
    silence."""
    import json as _json
    from pathlib import Path

    import attnbench.model.hf_config as hf_config

    root = Path(__file__).resolve().parents[2] / "docs" / "architectures"
    cfg = _json.loads((root / "llama-3.1-8b.json").read_text())
    known = hf_config.load_hf_config(root / "llama-3.1-8b.json")
    assert known.note is None and known.name == "meta-llama/Llama-3.1-8B"
    cfg["model_type"] = "weirdformer"
    del cfg["_name_or_path"]
    path = tmp_path / "mymodel" / "config.json"
    path.parent.mkdir()
    path.write_text(_json.dumps(cfg))
    spec = hf_config.load_hf_config(path)
    assert spec.name == "mymodel"
    assert spec.note.startswith(
        "model_type 'weirdformer': known neither to attnbench's formulas nor transformers"
    )
    assert spec.note.endswith("; named after its folder: the config has no _name_or_path")
    assert (spec.num_kv_heads, spec.d_model) == (known.num_kv_heads, known.d_model)
    monkeypatch.setattr(hf_config, "transformers_knows", lambda kind: None)
    assert "(transformers is not installed)" in hf_config.load_hf_config(path).note


def test_a_type_transformers_knows_without_a_package_of_its_own_is_known(tmp_path):
    """A multimodal model's text type (gemma4_text) has no transformers/models/<type>
    folder: it is looked up in transformers' table of types, not called unknown."""
    pytest.importorskip("transformers")
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**GEMMA4_LIKE, "_name_or_path": "g"}))
    assert load_hf_config(path).note is None


GEMMA4_LIKE = {
    "model_type": "gemma4_text",
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "num_hidden_layers": 4,
    "sliding_window": 32,
    "layer_types": ["sliding_attention"] * 3 + ["full_attention"],
}


@pytest.mark.parametrize(
    "extra, reason",
    [
        (
            {"per_layer_config": {"03": {"head_dim": 32}}},
            "field 'per_layer_config' gives layers 03 their own head_dim, which attnbench "
            "cannot size",
        ),
        (
            {"num_kv_shared_layers": 2},
            "field 'num_kv_shared_layers' (2) has its last layers reuse earlier layers' K and V",
        ),
        # MiMo-V2-Flash: values of 128 beside keys of 192, its sliding layers twice the KV
        # heads: sized as one shape, its cache was 7% over at 4k tokens, 18% at 32k
        (
            {"v_head_dim": 8},
            "field 'v_head_dim' (8) caches values of another width than the keys' head_dim (16)",
        ),
        (
            {"swa_num_key_value_heads": 4},
            "field 'swa_num_key_value_heads' gives its sliding layers heads of their own",
        ),
        # Llama-3.2-Vision: 8 of its 40 layers cache the image's tokens, not the text's
        (
            {"cross_attention_layers": [1, 3]},
            "field 'cross_attention_layers' (2 layers) has layers attend to an image's tokens",
        ),
    ],
)
def test_layers_shaped_or_cached_apart_are_refused_not_sized_as_the_others(extra, reason):
    # Gemma-4's global layers take head_dim 512 beside 256; Gemma-3n's last layers hold no
    # cache of their own. Sized as the others, the KV cache would be -38% and +75% off.
    spec = spec_from_hf_config({**GEMMA4_LIKE, **extra}, "m", "m.json")
    assert spec.unknown_kinds is not None and spec.unknown_kinds.startswith(reason)
    with pytest.raises(UsageError, match="its KV cache and state are not counted"):
        spec.require_kinds()
    plain = {**GEMMA4_LIKE, "per_layer_config": {"03": {}}, "num_kv_shared_layers": 0}
    assert spec_from_hf_config(plain, "m", "m.json").unknown_kinds is None
    even = {**GEMMA4_LIKE, "v_head_dim": 16, "cross_attention_layers": []}
    assert spec_from_hf_config(even, "m", "m.json").unknown_kinds is None
    # no head_dim: the keys are hidden_size / heads wide (16), the values 8
    narrow = {k: v for k, v in GEMMA4_LIKE.items() if k != "head_dim"} | {"v_head_dim": 8}
    why = spec_from_hf_config(narrow, "m", "m.json").unknown_kinds
    assert why is not None and why.startswith("field 'v_head_dim' (8)")


def test_kv_heads_written_null_are_one_per_query_head_left_out_the_class_default():
    """SmolLM3's class default is 4 KV heads; a config that writes null gets one per query
    head, as transformers 5.24 builds it (its cache 4x the default's)."""
    smollm3 = {
        "model_type": "smollm3",
        "hidden_size": 2048,
        "num_attention_heads": 16,
        "num_hidden_layers": 4,
    }
    assert spec_from_hf_config(smollm3, "m", "m.json").num_kv_heads == 4
    null = {**smollm3, "num_key_value_heads": None}
    assert spec_from_hf_config(null, "m", "m.json").num_kv_heads == 16


@pytest.mark.parametrize("kind", ["qwen3_next", "qwen3_5_text", "qwen3_5_moe_text"])
def test_qwen3_next_and_3_5_without_head_dim_take_the_class_default_256(kind):
    cfg = {"model_type": kind, "hidden_size": 2048, "num_attention_heads": 16}
    cfg |= {"num_key_value_heads": 2, "num_hidden_layers": 4}
    assert spec_from_hf_config(cfg, "m", "m.json").head_dim == 256


@pytest.mark.parametrize(("norms", "expected"), [(None, 2), (2, 2), (1, 1)])
def test_falcon_new_decoder_architecture_takes_its_parallel_norms(norms, expected):
    """Falcon2-11B writes num_ln_in_parallel_attn 1: one LayerNorm a layer, not two."""
    cfg = {
        "model_type": "falcon",
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_kv_heads": 2,
        "num_hidden_layers": 2,
        "new_decoder_architecture": True,
        "num_ln_in_parallel_attn": norms,
        "vocab_size": 100,
    }
    body = spec_from_hf_config(cfg, "m", "m.json").body
    assert body is not None and body.norms_per_layer == expected


def test_floats_transformers_tags_are_read_back_as_its_from_json_file_reads_them():
    """Mamba-2's time_step_limit, written by transformers as [0.0, {"__float__":
    "Infinity"}]: its configuration class refuses the tag, so the whole model was lost."""
    import math

    from attnbench.model.hf_config import parse_json

    text = (
        '{"a": [0.0, {"__float__": "Infinity"}], "b": {"__float__": [1]}, "c": {"__float__": "x"}}'
    )
    data = parse_json(text, "c.json")
    assert data["a"] == [0.0, math.inf]
    assert data["b"] == {"__float__": [1]} and data["c"] == {"__float__": "x"}


def test_a_window_of_0_is_none_and_refused_only_where_layers_slide():
    """Qwen2-MoE's default config writes sliding_window 0 with use_sliding_window false,
    which transformers builds: no window. Layers listed as sliding with it are refused."""
    off = {**GEMMA4_LIKE, "model_type": "qwen2_moe", "sliding_window": 0}
    off["layer_types"] = ["full_attention"] * 4
    assert spec_from_hf_config(off, "m", "m.json").windows is None
    with pytest.raises(UsageError, match="field 'sliding_window' is 0, but layers slide"):
        spec_from_hf_config({**GEMMA4_LIKE, "sliding_window": 0}, "m", "m.json")


def test_a_multimodal_config_ties_the_head_as_its_top_level_says_or_leaves_it_to_its_class():
    """A multimodal config's head is tied as its top level's tie_word_embeddings says when
    its text_config (as given, or by its type's default) says the same. Where the two
    differ, the class decides (LLaVA ties where either says so, Llama-4 where text_config
    does): the formulas count no whole model, and say why."""
    text = {
        **GEMMA4_LIKE,
        "model_type": "qwen3",
        "vocab_size": 1000,
        "intermediate_size": 96,
    }
    del text["layer_types"], text["sliding_window"]
    top = {"model_type": "multimodal", "text_config": text}
    untied = spec_from_hf_config(top, "m", "m.json")  # qwen3's default: untied
    assert untied.body is not None and not untied.body.tied_embeddings
    agree = {
        **top,
        "tie_word_embeddings": True,
        "text_config": {**text, "tie_word_embeddings": True},
    }
    assert spec_from_hf_config(agree, "m", "m.json").body.tied_embeddings
    for outer, inner in ((True, False), (False, True)):
        differ = {**top, "tie_word_embeddings": outer}
        differ["text_config"] = {**text, "tie_word_embeddings": inner}
        spec = spec_from_hf_config(differ, "m", "m.json")
        assert spec.body is None
        assert f"tie_word_embeddings {str(outer).lower()} at the top level" in (
            spec.formulas_decline
        )
    # Llama-4's text model ties its own head, as its text_config says or defaults to
    llama4 = {"model_type": "llama4", "tie_word_embeddings": True}
    llama4["text_config"] = {**text, "model_type": "llama4_text"}
    assert not spec_from_hf_config(llama4, "m", "m.json").body.tied_embeddings
    llama4["text_config"]["tie_word_embeddings"] = True
    assert spec_from_hf_config(
        {**llama4, "tie_word_embeddings": False}, "m", "m.json"
    ).body.tied_embeddings
    # the top level says, where its text_config does not (Gemma-3's, LLaVA's)
    said = spec_from_hf_config({**top, "tie_word_embeddings": True}, "m", "m.json")
    assert said.body.tied_embeddings and said.formulas_decline is None


def test_jetmoe_s_heads_are_kv_channels_wide():
    """JetMoE's K and V heads are kv_channels (128 by default) wide, not hidden / heads:
    its cache would have been counted at half."""
    cfg = {"model_type": "jetmoe", "hidden_size": 2048, "num_attention_heads": 32}
    cfg |= {"num_key_value_heads": 16, "num_hidden_layers": 12}
    assert spec_from_hf_config(cfg, "m", "m.json").head_dim == 128
    assert spec_from_hf_config({**cfg, "kv_channels": 64}, "m", "m.json").head_dim == 64


def test_longcat_flash_caches_two_attention_blocks_a_layer():
    """LongCat-Flash's decoder layers each hold two MLA blocks, each with its cache
    (transformers' num_hidden_layers = 2 * num_layers): 28 layers cache as 56."""
    cfg = {"model_type": "longcat_flash", "hidden_size": 64, "num_attention_heads": 4}
    cfg |= {"num_layers": 28, "kv_lora_rank": 16, "qk_rope_head_dim": 8}
    cfg |= {"qk_nope_head_dim": 16, "v_head_dim": 16, "q_lora_rank": 32}
    spec = spec_from_hf_config(cfg, "m", "m.json")
    assert spec.num_layers == 56 and spec.mla is not None


@pytest.mark.parametrize(
    "cfg, message",
    [
        (
            {"model_type": "bart", "is_encoder_decoder": True, "d_model": 64},
            "model_type 'bart' is an encoder-decoder (field 'is_encoder_decoder'): attnbench "
            "sizes decoder-only models",
        ),
        (
            {"model_type": "llama", "is_encoder_decoder": "yes", "hidden_size": 64},
            "field 'is_encoder_decoder' must be true or false, got 'yes'",
        ),
        (
            {"model_type": "glm4_moe", "hidden_size": 4096, "num_attention_heads": 96},
            "the width (4096) is no multiple of the attention heads (96), and the config gives "
            "no 'head_dim'",
        ),
    ],
)
def test_refusals_of_a_config_say_why_in_its_own_terms(cfg, message):
    """An encoder-decoder used to be told a field was missing; a width the heads do not
    divide was named by attnbench's own names (num_heads, d_model), not the config's."""
    with pytest.raises(UsageError) as info:
        spec_from_hf_config({**cfg, "num_hidden_layers": 2}, "m", "m.json")
    assert str(info.value).startswith(f"m.json: {message}")
    assert "\n" not in str(info.value)


def test_layer_types_transformers_derives_that_do_not_fit_the_file_leave_it_unknown(
    tmp_path, monkeypatch
):
    """Dory's configuration class derives 36 layer types for the file's 72 layers: the
    file's layers stay unknown (a refusal of what cannot be sized), not an error blaming
    the file's own layer_types."""
    import attnbench.modules.hf_fallback as hf_fallback

    cfg = {**GEMMA4_LIKE, "model_type": "mystery", "_name_or_path": "m"}
    del cfg["layer_types"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    spec = load_hf_config(path)
    assert spec.unknown_kinds is not None  # a window, and no rule of its type known
    monkeypatch.setattr(hf_fallback, "transformers_installed", lambda: True)
    monkeypatch.setattr(hf_fallback, "derived_layer_types", lambda cfg: ["full_attention"] * 2)
    assert hf_fallback.with_layer_types(spec) is spec
    monkeypatch.setattr(hf_fallback, "derived_layer_types", lambda cfg: ["full_attention"] * 4)
    assert hf_fallback.with_layer_types(spec).unknown_kinds is None


def test_params_of_a_config_whose_cache_is_refused_says_so(tmp_path):
    """params counts what it can of such a config; its note says its cache is not counted
    and why, where kvmem refuses it."""
    path = tmp_path / "config.json"
    cfg = {**GEMMA4_LIKE, "model_type": "mystery", "_name_or_path": "g", "vocab_size": 100}
    path.write_text(json.dumps({**cfg, "num_kv_shared_layers": 2}))
    result = runner.invoke(app, ["params", "--hf-config", str(path)])
    assert result.exit_code == 0, result.output
    assert "note: g: field 'num_kv_shared_layers' (2) has its last layers reuse" in result.stdout
    assert "; its cache is not counted" in result.stdout
    refused = runner.invoke(app, ["kvmem", "--hf-config", str(path)])
    assert refused.exit_code == 2 and "num_kv_shared_layers" in refused.stderr


def test_a_checkpoints_scale_group_longer_than_a_row_names_its_field(tmp_path):
    """A group_size past hidden_size, which no weight row holds: the config's field named,
    not a --weights-group the user never gave."""
    quant = {"quant_method": "awq", "bits": 4, "group_size": 100_000}
    path = write_config(tmp_path, {**LLAMA3_8B, "quantization_config": quant})
    with pytest.raises(UsageError) as caught:
        load_hf_config(path)
    assert "field 'quantization_config.group_size': 100,000 exceeds the 4,096 inputs" in str(
        caught.value
    )


def test_a_quantised_checkpoint_is_counted_as_stored_where_its_format_is_read(tmp_path):
    """quantization_config, where attnbench reads its format, sets how fit and predict
    count the weights (stored_weights), and the note says so; a format it cannot read
    (AWQ, GPTQ, FP8 and MXFP4 store their scales each its own way) leaves them in the
    model's dtype, the note naming the settings that count them."""
    quant = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}
    spec = load_hf_config(write_config(tmp_path, {**LLAMA3_8B, "quantization_config": quant}))
    assert spec.stored_weights == StoredWeights("int4", 128)
    assert (
        "quantization_config (awq, 4 bits, groups of 128): fit, and predict on a named GPU, "
        "count the weights as the checkpoint stores them, weights_dtype int4 and "
        "weights_group 128 (weights_dtype sets others); params counts them in the model's dtype"
    ) in spec.note
    plain = load_hf_config(write_config(tmp_path, LLAMA3_8B, "plain"))
    assert "quantization_config" not in (plain.note or "") and plain.stored_weights is None
    unread = [
        {"quant_method": "gptq", "bits": 4.0},  # not a whole number of bits: no guess
        {"quant_method": "gptq", "bits": True},
        {"quant_method": "compressed-tensors"},  # no config_groups
        {"quant_method": "bitsandbytes", "load_in_4bit": True},
    ]
    for i, odd in enumerate(unread):
        spec = load_hf_config(
            write_config(tmp_path, {**LLAMA3_8B, "quantization_config": odd}, f"u{i}")
        )
        assert spec.stored_weights is None
        assert "not read: the weights are counted in the model's dtype" in spec.note
        assert "weights_dtype and weights_group count them as the checkpoint" in spec.note


def _scheme(weights: dict, inputs: dict | None = None) -> dict:
    """A compressed-tensors quantization_config of one group over the linear layers."""
    group = {"targets": ["Linear"], "weights": weights, "input_activations": inputs}
    return {
        "quant_method": "compressed-tensors",
        "config_groups": {"group_0": group},
        "ignore": ["lm_head"],
    }


_FP8_WEIGHTS = {"num_bits": 8, "type": "float", "strategy": "channel"}
_FP8_TOKENS = {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True}
_INT4_GROUPS = {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128}
_INT8_CHANNELS = {"num_bits": 8, "type": "int", "strategy": "channel"}


@pytest.mark.parametrize(
    ("quant", "stored"),
    [
        # gpt-oss's: the experts alone in MXFP4
        (
            {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn"]},
            StoredWeights("mxfp4", keep_attention=True),
        ),
        # ModelOpt's NVFP4 (NVIDIA's DeepSeek-R1-FP4), its attention excluded
        (
            {
                "quant_method": "modelopt",
                "quant_algo": "NVFP4",
                "exclude_modules": ["lm_head", "model.layers.0.self_attn*"],
            },
            StoredWeights("nvfp4", keep_attention=True),
        ),
        ({"quant_algo": "NVFP4", "exclude_modules": ["lm_head"]}, StoredWeights("nvfp4")),
        (
            {"quant_method": "fp8", "weight_block_size": [128, 128]},
            StoredWeights("float8_e4m3fn"),
        ),
        ({"quant_method": "gptq", "bits": 8, "group_size": 128}, StoredWeights("int8", 128)),
        ({"quant_method": "gptq", "bits": 4, "group_size": -1}, StoredWeights("int4")),
        # a vision tower's attention left unconverted keeps the language model's quantised
        (
            {"quant_method": "fp8", "ignored_layers": ["vision_model.blocks.0.attn.qkv"]},
            StoredWeights("float8_e4m3fn"),
        ),
        # a list spelled as one string, or not a list at all: read as it can be, no crash
        (
            {"quant_method": "mxfp4", "modules_to_not_convert": "model.layers.*.self_attn"},
            StoredWeights("mxfp4", keep_attention=True),
        ),
        ({"quant_method": "mxfp4", "ignored_layers": 5, "ignore": True}, StoredWeights("mxfp4")),
        # compressed-tensors (llm-compressor): FP8_DYNAMIC, W4A16, W8A16
        (_scheme(_FP8_WEIGHTS, _FP8_TOKENS), StoredWeights("float8_e4m3fn")),
        (_scheme(_INT4_GROUPS), StoredWeights("int4", 128)),
        (_scheme(_INT8_CHANNELS), StoredWeights("int8")),
        # NVFP4 (llm-compressor: blocks of 16, activations too), MXFP4 weights alone
        (
            _scheme(
                {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16},
                {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16},
            ),
            StoredWeights("nvfp4"),
        ),
        (
            _scheme({"num_bits": 4, "type": "float", "strategy": "group", "group_size": 32}),
            StoredWeights("mxfp4"),
        ),
        # W8A8 integers (activations quantised too) and float8 weights alone: not expressed
        (_scheme(_INT8_CHANNELS, {**_INT8_CHANNELS, "strategy": "token"}), None),
        (_scheme(_FP8_WEIGHTS), None),
        # groups that quantise differently, or a group that is not an object: not read
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {"a": {"weights": _INT4_GROUPS}, "b": {"weights": _INT8_CHANNELS}},
            },
            None,
        ),
        ({"quant_method": "compressed-tensors", "config_groups": {"a": 4}}, None),
    ],
)
def test_a_quantised_checkpoint_format_is_read_as_stored(tmp_path, quant, stored):
    spec = load_hf_config(write_config(tmp_path, {**LLAMA3_8B, "quantization_config": quant}))
    assert spec.stored_weights == stored
    if stored is not None:
        assert f"as the checkpoint stores them, {stored.settings()}" in spec.note
        # int4 scaled per channel is counted in int4's default groups, and says so
        per_channel = stored.dtype == "int4" and stored.group is None
        assert ("its scales per channel counted as int4's default groups" in spec.note) == (
            per_channel
        )


@pytest.mark.parametrize(
    ("kind", "more", "sliding"),
    [
        ("qwen2", {}, {28, 29}),  # max_window_layers' default 28: the layers from it on
        ("qwen3", {"max_window_layers": 26}, {26, 27, 28, 29}),
        ("qwen2_moe", {"max_window_layers": 5}, {0, 2, 4}),  # even layers below it
        ("qwen3_moe", {"max_window_layers": 5}, set(range(30))),  # every layer: no such field
        ("smollm3", {}, {3, 7, 11, 15, 19, 23, 27}),  # those without RoPE: every 4th
    ],
)
def test_switched_windows_slide_the_layers_each_type_names(kind, more, sliding):
    """use_sliding_window on: which layers slide is each configuration class's own rule
    (transformers 5.24), not Qwen2's for every type."""
    cfg = {**TINY_BODY, "model_type": kind, "num_hidden_layers": 30, "sliding_window": 16}
    spec = spec_from_hf_config({**cfg, **more, "use_sliding_window": True}, "m", "m")
    assert {i for i, w in enumerate(spec.windows or ()) if w == 16} == sliding
    assert spec_from_hf_config({**cfg, **more}, "m", "m").windows is None  # off by default


def test_a_window_left_out_is_the_class_default_and_null_is_none():
    """As transformers builds it: Mistral's class windows at 4,096 a config.json that leaves
    sliding_window out, and not one that gives null; gpt-oss's alternate layers at 128."""
    cfg = {**TINY_BODY, "num_hidden_layers": 4}
    assert spec_from_hf_config({**cfg, "model_type": "mistral"}, "m", "m").windows == (4096,) * 4
    null = {**cfg, "model_type": "mistral", "sliding_window": None}
    assert spec_from_hf_config(null, "m", "m").windows is None
    gpt_oss = spec_from_hf_config({**cfg, "model_type": "gpt_oss"}, "m", "m")
    assert gpt_oss.windows == (128, None, 128, None)


def test_attn_config_kv_heads_are_dbrx_s_and_chatglm_groups_its_own():
    """transformers' MPT builds MHA whatever its attn_config says of KV heads (DBRX reads
    them); ChatGLM's multi_query_group_num counts its KV heads when multi_query_attention
    is on (its own code: 2 groups for ChatGLM3-6B)."""
    base = {**TINY_BODY, "num_attention_heads": 8}
    base.pop("num_key_value_heads")
    nested = {"attn_config": {"kv_n_heads": 2}}
    assert spec_from_hf_config({**base, **nested, "model_type": "mpt"}, "m", "m").num_kv_heads == 8
    dbrx = spec_from_hf_config({**base, **nested, "model_type": "dbrx"}, "m", "m")
    assert dbrx.num_kv_heads == 2
    glm = {**base, "model_type": "chatglm", "multi_query_group_num": 2}
    assert spec_from_hf_config(glm, "m", "m").num_kv_heads == 8  # off: MHA
    on = spec_from_hf_config({**glm, "multi_query_attention": True}, "m", "m")
    assert on.num_kv_heads == 2


def test_heads_left_out_are_the_class_default_as_gemma_3_hub_configs_leave_them():
    """Gemma-3-4B-it's text_config gives no heads, KV heads nor head_dim: Gemma3TextConfig's
    8, 4 and 256, as transformers builds it (it was refused as a model without attention)."""
    text = {
        "model_type": "gemma3_text",
        "hidden_size": 2560,
        "intermediate_size": 10240,
        "num_hidden_layers": 34,
        "sliding_window": 1024,
    }
    spec = spec_from_hf_config({"model_type": "gemma3", "text_config": text}, "g", "g")
    assert (spec.num_heads, spec.num_kv_heads, spec.head_dim) == (8, 4, 256)


def test_a_sliding_window_on_a_type_whose_code_never_reads_it_bounds_nothing():
    """transformers' Llama attends to every token whatever sliding_window says: the cache
    is the whole context's, and a note says the field is not read."""
    spec = spec_from_hf_config({**TINY_BODY, "model_type": "llama", "sliding_window": 16}, "m", "m")
    assert spec.windows is None and "sliding_window not read" in spec.note
    mistral = spec_from_hf_config(
        {**TINY_BODY, "model_type": "mistral", "sliding_window": 16}, "m", "m"
    )
    assert mistral.windows == (16, 16)


@pytest.mark.parametrize(
    ("table", "field"),
    [
        ("HEADS_BY_DEFAULT", "num_attention_heads"),
        ("KV_HEADS_BY_DEFAULT", "num_key_value_heads"),
        ("SLIDING_WINDOW_BY_DEFAULT", "sliding_window"),
    ],
)
def test_the_defaults_of_the_types_are_transformers(table, field):
    """Every default of the tables, read from the configuration class of its type: the
    types whose class gives a number have it, the others none (None: MHA, no window)."""
    pytest.importorskip("transformers")
    import dataclasses

    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from attnbench.model import hf_config

    defaults = getattr(hf_config, table)
    for kind in sorted({*BODY_MODEL_TYPES, *hf_config.HYBRIDS} & set(CONFIG_MAPPING)):
        given = {f.name: f.default for f in dataclasses.fields(CONFIG_MAPPING[kind])}.get(field)
        assert defaults.get(kind) == (given if isinstance(given, int) else None), kind
