"""Read a model's architecture from a Hugging Face config.json on disk.

Understands the Llama/Mistral/Qwen/Gemma names (hidden_size, num_attention_heads,
num_key_value_heads, head_dim, num_hidden_layers), Falcon's (n_head, n_layer, multi_query,
num_kv_heads with new_decoder_architecture) and GPT-2's (n_embd, n_head, n_layer).

Sliding windows are read as the model defines them: `layer_types` when present; Qwen2's
`use_sliding_window` (false or absent: no window) and `max_window_layers` (layers from that
index on are windowed); Gemma-2 windows its even layers, Gemma-3 all but every
`sliding_window_pattern`-th; otherwise `sliding_window` applies to every layer (Mistral).
MLA (DeepSeek-V2/V3) comes from kv_lora_rank and its companions, with heads of v_head_dim
whatever head_dim says; the whole-model body (vocabulary, MLP or experts, norms, biases,
tied head) from the fields of the model types in BODY_MODEL_TYPES, where a missing
tie_word_embeddings takes transformers' default for the model type.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import UsageError, read_user_file
from ..model.architecture import MlaSpec, ModelBody, ModelSpec, MoeSpec
from ..model.dtypes import MODEL_DTYPES, canonical_dtype
from ..model.shapes import AttentionShape

_ALIASES = {
    "d_model": ("hidden_size", "n_embd", "d_model"),
    "num_heads": ("num_attention_heads", "n_head", "n_heads"),
    "num_layers": ("num_hidden_layers", "n_layer", "num_layers"),
}


def _positive_int(cfg: dict, key: str, where: str) -> int:
    value = cfg[key]
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise UsageError(f"{where}: field {key!r} must be a positive integer, got {value!r}")
    return value


def _one_of(cfg: dict, field: str, where: str) -> int:
    """The value under any alias of `field`; aliases that disagree are an error."""
    found = {k: _positive_int(cfg, k, where) for k in _ALIASES[field] if k in cfg}
    if not found:
        names = " or ".join(repr(k) for k in _ALIASES[field])
        raise UsageError(f"{where}: missing field {names}")
    if len(set(found.values())) > 1:
        raise UsageError(f"{where}: contradictory fields {found}")
    return next(iter(found.values()))


def _kv_heads(cfg: dict, num_heads: int, where: str) -> int:
    # Falcon's original architecture: multi_query means one KV head, whatever num_kv_heads
    # says (FalconConfig writes num_kv_heads = num_attention_heads by default and the
    # model ignores it unless new_decoder_architecture is set).
    if cfg.get("multi_query") and not cfg.get("new_decoder_architecture"):
        return 1
    candidates: dict[str, int] = {}
    for key in ("num_key_value_heads", "num_kv_heads", "n_head_kv"):
        if cfg.get(key) is not None:
            candidates[key] = _positive_int(cfg, key, where)
    if len(set(candidates.values())) > 1:
        raise UsageError(f"{where}: contradictory KV-head fields {candidates}")
    return next(iter(candidates.values())) if candidates else num_heads


def spec_from_hf_config(cfg: dict, name: str, where: str) -> ModelSpec:
    """A ModelSpec from a parsed config.json; `where` names the file in error messages."""
    if not isinstance(cfg, dict):
        raise UsageError(f"{where}: expected a JSON object, got {type(cfg).__name__}")
    d_model = _one_of(cfg, "d_model", where)
    num_heads = _one_of(cfg, "num_heads", where)
    num_layers = _one_of(cfg, "num_layers", where)
    num_kv_heads = _kv_heads(cfg, num_heads, where)
    head_dim = cfg.get("head_dim")
    if head_dim is not None:
        head_dim = _positive_int(cfg, "head_dim", where)
    # transformers loads a config without a dtype in float32
    raw_dtype = cfg.get("torch_dtype") or cfg.get("dtype") or "float32"
    dtype = canonical_dtype(raw_dtype)
    if dtype not in MODEL_DTYPES:
        raise UsageError(
            f"{where}: field 'torch_dtype' is {raw_dtype!r}; expected one of "
            f"{', '.join(MODEL_DTYPES)}"
        )
    mla = _mla(cfg, where)
    if mla is not None:
        # Heads of v_head_dim, as in the presets: DeepSeek configs written by transformers
        # set head_dim to qk_rope_head_dim (64), which would give a model's config.json
        # other ratios to MHA than its preset.
        head_dim = mla.v_head_dim
    try:
        shape = AttentionShape(d_model, num_heads, num_kv_heads, head_dim)
    except ValueError as exc:
        raise UsageError(f"{where}: {exc}") from None
    context = cfg.get("max_position_embeddings") or cfg.get("n_positions")
    return ModelSpec(
        name=name,
        num_layers=num_layers,
        d_model=d_model,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        head_dim=shape.head_dim,  # type: ignore[arg-type]
        dtype=dtype,
        source=str(where),
        windows=_windows(cfg, num_layers, where),
        mla=mla,
        body=_body(cfg, d_model, where),
        max_position_embeddings=context if isinstance(context, int) and context > 0 else None,
    )


def _optional_int(cfg: dict, key: str, where: str, default: int | None = None) -> int | None:
    return _positive_int(cfg, key, where) if cfg.get(key) is not None else default


def _windows(cfg: dict, num_layers: int, where: str) -> tuple[int | None, ...] | None:
    """Each layer's sliding window (None: global), or None when no layer has one."""
    window = _optional_int(cfg, "sliding_window", where)
    # Qwen configs switch windows on with use_sliding_window (default false); others don't.
    uses = cfg.get("use_sliding_window", not str(cfg.get("model_type", "")).startswith("qwen"))
    if window is None or not uses:
        return None
    types = cfg.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != num_layers:
            raise UsageError(f"{where}: field 'layer_types' must list {num_layers} layer types")
        windowed = [t == "sliding_attention" for t in types]
    elif cfg.get("use_sliding_window") is True and "max_window_layers" in cfg:
        first = cfg["max_window_layers"]
        if isinstance(first, bool) or not isinstance(first, int) or first < 0:
            raise UsageError(f"{where}: field 'max_window_layers' must be an integer >= 0")
        windowed = [i >= first for i in range(num_layers)]
    elif cfg.get("model_type") == "gemma2":
        windowed = [i % 2 == 0 for i in range(num_layers)]
    elif cfg.get("model_type") in ("gemma3", "gemma3_text"):
        every = _optional_int(cfg, "sliding_window_pattern", where, 6)
        windowed = [(i + 1) % every != 0 for i in range(num_layers)]  # type: ignore[operator]
    else:
        windowed = [True] * num_layers
    if not any(windowed):
        return None
    return tuple(window if w else None for w in windowed)


def _mla(cfg: dict, where: str) -> MlaSpec | None:
    if cfg.get("kv_lora_rank") is None:
        return None
    missing = [k for k in ("qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim") if k not in cfg]
    if missing:
        raise UsageError(f"{where}: kv_lora_rank (MLA) given without {missing[0]!r}")
    return MlaSpec(
        kv_lora_rank=_positive_int(cfg, "kv_lora_rank", where),
        qk_rope_head_dim=_positive_int(cfg, "qk_rope_head_dim", where),
        qk_nope_head_dim=_positive_int(cfg, "qk_nope_head_dim", where),
        v_head_dim=_positive_int(cfg, "v_head_dim", where),
        q_lora_rank=_optional_int(cfg, "q_lora_rank", where),
    )


#: The model_type values whose whole-model body attnbench reads (others: attention only),
#: each with transformers' default for tie_word_embeddings: it applies when a config.json
#: leaves the field out or sets it to null.
TIED_EMBEDDINGS_BY_DEFAULT: dict[str, bool] = {
    "llama": False, "mistral": False, "mixtral": False, "qwen2": False, "qwen3": False,
    "deepseek_v2": False, "deepseek_v3": False,
    "gemma": True, "gemma2": True, "gemma3_text": True,
    "falcon": True, "RefinedWeb": True, "RefinedWebModel": True, "gpt2": True,
}  # fmt: skip
BODY_MODEL_TYPES = tuple(TIED_EMBEDDINGS_BY_DEFAULT)


def _body(cfg: dict, d_model: int, where: str) -> ModelBody | None:
    """The network besides attention, or None for a model type attnbench does not know."""
    kind = cfg.get("model_type")
    if kind not in BODY_MODEL_TYPES or cfg.get("vocab_size") is None:
        return None
    vocab = _positive_int(cfg, "vocab_size", where)
    tied = cfg.get("tie_word_embeddings")
    if tied is None:
        tied = TIED_EMBEDDINGS_BY_DEFAULT[kind]
    elif not isinstance(tied, bool):
        raise UsageError(f"{where}: field 'tie_word_embeddings' must be true or false")
    if kind in ("falcon", "RefinedWeb", "RefinedWebModel"):
        bias = bool(cfg.get("bias", False))
        single_norm = cfg.get("parallel_attn", True) and not cfg.get("new_decoder_architecture")
        return ModelBody(
            vocab, _optional_int(cfg, "ffn_hidden_size", where, 4 * d_model),  # type: ignore[arg-type]
            gated_mlp=False, mlp_bias=bias, qkv_bias=bias, o_bias=bias, norm_bias=True,
            norms_per_layer=1 if single_norm else 2, tied_embeddings=tied,
        )  # fmt: skip
    if kind == "gpt2":
        return ModelBody(
            vocab, _optional_int(cfg, "n_inner", where, 4 * d_model),  # type: ignore[arg-type]
            gated_mlp=False, mlp_bias=True, qkv_bias=True, o_bias=True, norm_bias=True,
            tied_embeddings=tied, position_embeddings=_positive_int(cfg, "n_positions", where),
        )  # fmt: skip
    attention_bias = bool(cfg.get("attention_bias", False))
    return ModelBody(
        vocab,
        _positive_int(cfg, "intermediate_size", where),
        mlp_bias=bool(cfg.get("mlp_bias", False)),
        qkv_bias=attention_bias or kind == "qwen2",
        o_bias=attention_bias,
        qk_norm=kind in ("qwen3", "gemma3_text"),
        norms_per_layer=4 if kind in ("gemma2", "gemma3_text") else 2,
        tied_embeddings=tied,
        moe=_moe(cfg, where),
    )


def _moe(cfg: dict, where: str) -> MoeSpec | None:
    """The experts; DeepSeek-V3's router also counts e_score_correction_bias, one value per
    routed expert: a buffer in transformers, but stored in the checkpoints (see MoeSpec)."""
    experts_key = next((k for k in ("n_routed_experts", "num_local_experts") if cfg.get(k)), None)
    if experts_key is None:
        return None
    if cfg.get("moe_layer_freq", 1) != 1:
        raise UsageError(f"{where}: moe_layer_freq {cfg['moe_layer_freq']!r} is not supported")
    inter_key = "moe_intermediate_size" if "moe_intermediate_size" in cfg else "intermediate_size"
    return MoeSpec(
        num_experts=_positive_int(cfg, experts_key, where),
        experts_per_token=_positive_int(cfg, "num_experts_per_tok", where),
        intermediate_size=_positive_int(cfg, inter_key, where),
        shared_experts=cfg.get("n_shared_experts") or 0,
        dense_layers=cfg.get("first_k_dense_replace") or 0,
        router_bias=cfg.get("model_type") == "deepseek_v3",
    )


def load_hf_config(path: str | Path) -> ModelSpec:
    """Read config.json at `path`; every problem is a UsageError naming the file and field."""
    path = Path(path)
    text = read_user_file(path, "hf_config")
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}: invalid JSON at line {exc.lineno}: {exc.msg}") from None
    name = cfg.get("_name_or_path") if isinstance(cfg, dict) else None
    return spec_from_hf_config(cfg, name or path.parent.name or path.stem, str(path))
