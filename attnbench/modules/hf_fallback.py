"""What transformers tells of a model type attnbench has no tables of: its whole model,
and which of its layers keep a sliding window.

attnbench's formulas (model/model_params.py) count the model types they know; a
config.json of any other type is read for its attention and cache only. Where a command
needs the whole model (params, fit, predict) and transformers is installed, it is
counted as transformers builds it (hf_model.py) and the count put on the spec
(ModelSpec.counted). A what-if variant (the model rebuilt with other KV heads) is built
with its own count of KV heads: only its attention layers change.

A config of an unknown type that sets a sliding window without listing its layers'
types leaves them unknown (ModelSpec.unknown_kinds): its configuration class has a rule
of its own. transformers' configuration class of the type derives them; when they are
all attention, the config is read again with them listed, and the spec says so.
"""

from __future__ import annotations

import importlib.util
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..model.architecture import CountedModel, ModelSpec
from ..model.files import read_user_file
from ..model.hf_config import (
    EXPERT_KEYS,
    KV_HEAD_KEYS,
    MAX_CONFIG_BYTES,
    language_model,
    parse_json,
    spec_from_hf_config,
)
from ..model.hf_layers import ATTENTION_TYPES, as_transformers
from ..model.model_params import COUNT_HINT

#: The most layers a model built to be counted may have: far more than any real model's,
#: few enough that transformers builds it in seconds (a layer takes some milliseconds).
MAX_BUILT_LAYERS = 1024
#: The fields that give the experts each token goes to, one name or another by type.
PER_TOKEN_KEYS = (
    "num_experts_per_tok",
    "num_experts_per_token",
    "moe_k",
    "moe_topk",
    "top_k",
    "moe_top_k",
)
#: The fields that count the routed experts, one name or another by type (ERNIE-4.5's and
#: Aria's moe_num_experts besides the formulas' own).
COUNT_KEYS = (*EXPERT_KEYS, "moe_num_experts")


def transformers_installed() -> bool:
    return importlib.util.find_spec("transformers") is not None


def with_layer_types(spec: ModelSpec) -> ModelSpec:
    """`spec` with the layer types transformers' configuration class derives, when its
    own config leaves them unknown and they are all attention; else `spec` as it is."""
    if spec.unknown_kinds is None or spec.config_path is None or not transformers_installed():
        return spec
    path = spec.config_path
    cfg = _read(path)
    try:
        derived = derived_layer_types(as_transformers(cfg))
    except UsageError:
        return spec
    if derived is None or not set(derived) <= ATTENTION_TYPES:
        return spec
    text = isinstance(cfg.get("text_config"), dict)
    listed = {**cfg["text_config"], "layer_types": derived} if text else None
    cfg = {**cfg, "text_config": listed} if text else {**cfg, "layer_types": derived}
    try:  # transformers' list may not fit the file's own fields (Dory: 36 for 72 layers)
        known = replace(spec_from_hf_config(cfg, spec.name, path), config_path=path)
    except UsageError:
        return spec
    if known.unknown_kinds is not None:
        return spec
    source = "layer types as transformers' configuration class derives them"
    return replace(known, note="; ".join(filter(None, (spec.note, source))))


def _takes_a_cache(name: str) -> bool:
    """Whether a forward argument hands a model what earlier tokens left: a cache
    (`cache`, `past_key_values`, Mamba's `cache_params`, Mimi's `decoder_cache`,
    `use_cache`), Transformer-XL's and XLNet's `mems`, RWKV's `state`."""
    return "cache" in name or name.startswith("past_key_value") or name in ("mems", "state")


def caches_nothing(spec: ModelSpec) -> str | None:
    """Why `spec`'s model keeps no cache, where transformers tells: a type neither the
    formulas nor a hybrid's plan know, of which transformers builds no causal LM, whose
    base model's forward takes no cache (ViT, wav2vec2, DeBERTa, CLIP's text tower).
    None otherwise: a decoder, or a type that nothing tells of."""
    if spec.body is not None or spec.states is not None or spec.config_path is None:
        return None
    if not transformers_installed():
        return None
    import inspect

    import transformers
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    from .hf_model import builds_generative  # torch: only for a type the formulas lack

    cfg = _read(spec.config_path)
    text = cfg["text_config"] if isinstance(cfg.get("text_config"), dict) else cfg
    kind = text.get("model_type")
    if builds_generative(cfg.get("model_type")) or builds_generative(kind):
        return None
    # the text model's base model, else the whole config's (SigLIP's text tower has none)
    kinds = [k for k in (kind, cfg.get("model_type")) if isinstance(k, str)]
    named = ((k, MODEL_MAPPING_NAMES.get(k)) for k in kinds)
    found = next(((k, name) for k, name in named if isinstance(name, str)), None)
    model = getattr(transformers, found[1], None) if found is not None else None
    if model is None or any(map(_takes_a_cache, inspect.signature(model.forward).parameters)):
        return None
    return (
        f"model_type {found[0]!r} keeps no cache to size: transformers builds no causal LM "
        f"of it, and its {model.__name__} takes none"
    )


def derived_layer_types(cfg: dict[str, Any]) -> list[str] | None:
    """The layer types transformers' configuration class of `cfg`'s model type derives
    (its text config's, for a multimodal one); None when it derives none. UsageError when
    transformers does not know the type or refuses the config."""
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    kind = cfg.get("model_type")
    if kind not in CONFIG_MAPPING:
        raise UsageError(f"transformers does not know model_type {kind!r}")
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity(transformers.logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            config = CONFIG_MAPPING[kind].from_dict(cfg)
    except Exception as exc:  # transformers refuses the config
        raise UsageError(f"transformers refuses the config: {exc}") from None
    finally:
        transformers.logging.set_verbosity(verbosity)
    types = getattr(config.get_text_config(decoder=True), "layer_types", None)
    return list(types) if types else None


def _read(path: str) -> dict[str, Any]:
    return parse_json(read_user_file(Path(path), "hf_config", limit=MAX_CONFIG_BYTES), path)


def with_whole_model(spec: ModelSpec) -> ModelSpec:
    """`spec` counted whole by transformers when attnbench's formulas do not count it (no
    formulas of its type, or they decline: ModelSpec.formulas_decline, _class_ties_nothing),
    it came from a config.json and transformers is installed; else `spec` as it is."""
    if (declined := _class_ties_nothing(spec)) is not None:
        spec = replace(spec, body=None, formulas_decline=declined)
    if spec.body is not None or spec.counted is not None or spec.config_path is None:
        return spec
    if not transformers_installed():
        return replace(spec, uncounted=COUNT_HINT)
    if spec.num_layers > MAX_BUILT_LAYERS:
        why = f"{spec.num_layers:,} layers are more than {MAX_BUILT_LAYERS:,}: not built"
        return replace(spec, uncounted=why)
    path = spec.config_path
    cfg = _read(path)
    if spec.published_kv_heads is not None and spec.num_kv_heads != spec.published_kv_heads:
        cfg = with_kv_heads(cfg, spec.num_kv_heads)
    try:
        from .hf_model import transformers_parts  # torch: only for a model it builds

        count = transformers_parts(as_transformers(cfg), path)
    except UsageError as exc:  # transformers does not build it: the attention alone
        return replace(spec, uncounted=str(exc).removeprefix(f"{path}: "))
    text = language_model(cfg, path) if isinstance(cfg.get("text_config"), dict) else cfg
    experts = _first(text, COUNT_KEYS, "ffn_config", "moe_num_experts")
    per_token = _first(text, PER_TOKEN_KEYS, "ffn_config", "moe_top_k")
    source = f"transformers {count.transformers_version} ({count.model_class} on the meta device)"
    counted = CountedModel(
        parts=tuple(count.parts.items()),
        source=source,
        vocab_size=count.vocab_size,
        tied_embeddings=count.tied_embeddings,
        num_experts=experts if count.parts.get("experts") else None,
        experts_per_token=per_token if count.parts.get("experts") else None,
        qk_norm_across_heads=(count.q_norm_width or 0) > spec.head_dim,
    )
    return replace(spec, counted=counted)


#: Multimodal model types whose class transformers builds declares its tied weights (the
#: head tied as the flags say), so that their configs need not import it (seconds) to
#: tell: the common ones, each checked against transformers by the tests.
TIES_AS_FLAGS = frozenset(
    (
        "aya_vision",
        "chameleon",
        "cohere2_vision",
        "deepseek_vl",
        "gemma3",
        "gemma3n",
        "gemma4",
        "glm4v",
        "idefics3",
        "internvl",
        "janus",
        "llama4",
        "llava",
        "llava_next",
        "llava_next_video",
        "llava_onevision",
        "mistral3",
        "paligemma",
        "qwen2_5_vl",
        "qwen2_vl",
        "qwen3_vl",
        "qwen3_vl_moe",
        "shieldgemma2",
        "smolvlm",
        "video_llava",
        "vipllava",
    )
)


def _class_ties_nothing(spec: ModelSpec) -> str | None:
    """Why a multimodal config's head, which its tie_word_embeddings tie, is left to
    transformers to count: its conditional generation class declares no tied weights
    (Voxtral's, Qwen2-Audio's: their heads are their own whatever the flags say; Llama-4's
    ties through its language model). None where the formulas' count stands."""
    if spec.body is None or not spec.body.tied_embeddings or spec.config_path is None:
        return None
    if not transformers_installed():
        return None
    cfg = _read(spec.config_path)
    if not isinstance(cfg.get("text_config"), dict) or cfg.get("model_type") in TIES_AS_FLAGS:
        return None
    from .hf_model import generative_class  # torch: only for a multimodal config

    model = generative_class(cfg.get("model_type"))
    if model is None or getattr(model, "_tied_weights_keys", None):
        return None
    return (
        f"tie_word_embeddings ties the head, but {model.__name__} declares no tied weights "
        "of its own: whether it ties is the class's choice"
    )


def _first(cfg: dict, keys: tuple[str, ...], nested: str, nested_key: str) -> int | None:
    """The first positive integer under `keys`, or under `nested_key` of the dict
    `nested` (DBRX's ffn_config); None when there is none."""
    found = [cfg.get(k) for k in keys]
    inner = cfg.get(nested)
    if isinstance(inner, dict):
        found.append(inner.get(nested_key))
    return next(
        (v for v in found if isinstance(v, int) and not isinstance(v, bool) and v > 0), None
    )


def with_kv_heads(cfg: dict[str, Any], kv_heads: int) -> dict[str, Any]:
    """`cfg` with `kv_heads` KV heads: in its text_config for a multimodal config, under
    every KV-head field it gives (DBRX's attn_config.kv_n_heads), or num_key_value_heads
    when it gives none."""
    if isinstance(cfg.get("text_config"), dict):
        return {**cfg, "text_config": with_kv_heads(cfg["text_config"], kv_heads)}
    given = [k for k in KV_HEAD_KEYS if cfg.get(k) is not None]
    nested = cfg.get("attn_config")
    if not given and isinstance(nested, dict) and nested.get("kv_n_heads") is not None:
        return {**cfg, "attn_config": {**nested, "kv_n_heads": kv_heads}}
    return {**cfg, **dict.fromkeys(given or ["num_key_value_heads"], kv_heads)}
