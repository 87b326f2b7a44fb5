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
tied head) from the fields of the model types in BODY_MODEL_TYPES; other model types are
read for their attention only.

Every field read is checked: integers are integers in range (positive, or >= 0 where 0
means something), booleans are booleans, strings are strings. A field left out (or null)
takes transformers' default for the model type where it has one (tie_word_embeddings,
GPT-2's n_positions and n_inner, intermediate_size, the experts of Mixtral and DeepSeek),
and is a "missing field" error where it has none. The file itself is bounded: at most
MAX_CONFIG_BYTES, nested at most MAX_DEPTH deep.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import UsageError, brief
from ..model.architecture import MlaSpec, ModelBody, ModelSpec, MoeSpec
from ..model.dtypes import MODEL_DTYPES, canonical_dtype
from ..model.shapes import AttentionShape
from .files import read_user_file

#: The largest config.json read (a larger one is refused before it is read).
MAX_CONFIG_BYTES = 10 << 20
#: Deepest nesting of objects and arrays read (a config.json needs about 4).
MAX_DEPTH = 64

# Upper bounds of the integer fields, far above any real model: a size computed from them
# stays a size (the sweep schema bounds the same quantities given as flags).
_WIDTH = 2**20  # hidden and MLP widths, latent ranks
_HEADS = 2**16  # heads and head dims
_LAYERS = 100_000
_EXPERTS = 2**16
_VOCAB = 2**24
_TOKENS = 10**9  # windows
_POSITIONS = 2**40  # the context a model declares

_ALIASES = {
    "d_model": ("hidden_size", "n_embd", "d_model"),
    "num_heads": ("num_attention_heads", "n_head", "n_heads"),
    "num_layers": ("num_hidden_layers", "n_layer", "num_layers"),
}
_MAXIMUM = {"d_model": _WIDTH, "num_heads": _HEADS, "num_layers": _LAYERS}

#: Marks a field that has no default: a config.json must give it.
REQUIRED: Any = object()


def _missing(key: str, where: str, why: str = "") -> UsageError:
    return UsageError(f"{where}: missing field {key!r}{why}")


def _int(
    cfg: dict,
    key: str,
    where: str,
    default: Any = REQUIRED,
    *,
    minimum: int = 1,
    maximum: int = _WIDTH,
    why: str = "",
) -> Any:
    """cfg[key] as an integer in [minimum, maximum]; `default` when it is absent or null
    (REQUIRED: an error naming the field, with `why` appended)."""
    value = cfg.get(key)
    if value is None:
        if default is REQUIRED:
            raise _missing(key, where, why)
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise UsageError(f"{where}: field {key!r} must be {kind}, got {brief(value)}")
    if value > maximum:
        raise UsageError(f"{where}: field {key!r} must be at most {maximum:,}, got {brief(value)}")
    return value


def _positive_int(cfg: dict, key: str, where: str, maximum: int = _WIDTH) -> int:
    return _int(cfg, key, where, maximum=maximum)


def _optional_int(
    cfg: dict, key: str, where: str, default: int | None = None, maximum: int = _WIDTH
) -> int | None:
    return _int(cfg, key, where, default, maximum=maximum)


def _bool(cfg: dict, key: str, where: str, default: bool) -> bool:
    """cfg[key] as true or false; `default` when it is absent or null."""
    value = cfg.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise UsageError(f"{where}: field {key!r} must be true or false, got {brief(value)}")
    return value


def _str(cfg: dict, key: str, where: str) -> str | None:
    """cfg[key] as a string; None when it is absent or null."""
    value = cfg.get(key)
    if value is not None and not isinstance(value, str):
        raise UsageError(f"{where}: field {key!r} must be a string, got {brief(value)}")
    return value


def _one_of(cfg: dict, field: str, where: str) -> int:
    """The value under any alias of `field`; aliases that disagree are an error."""
    found = {
        k: _int(cfg, k, where, maximum=_MAXIMUM[field])
        for k in _ALIASES[field]
        if cfg.get(k) is not None
    }
    if not found:
        names = " or ".join(repr(k) for k in _ALIASES[field])
        raise UsageError(f"{where}: missing field {names}")
    if len(set(found.values())) > 1:
        raise UsageError(f"{where}: contradictory fields {found}")
    return next(iter(found.values()))


#: transformers' default for multi_query, for model types whose attention reads it.
MULTI_QUERY_BY_DEFAULT = {"falcon": True}
#: transformers' default head_dim, for model types where it is not d_model / heads.
HEAD_DIM_BY_DEFAULT = {"gemma": 256, "gemma2": 256, "gemma3_text": 256, "qwen3": 128}


def _kv_heads(cfg: dict, num_heads: int, kind: str, where: str) -> int:
    # Falcon's original architecture: multi_query means one KV head, whatever num_kv_heads
    # says (FalconConfig writes num_kv_heads = num_attention_heads by default and the
    # model ignores it unless new_decoder_architecture is set).
    multi_query = _bool(cfg, "multi_query", where, MULTI_QUERY_BY_DEFAULT.get(kind, False))
    if multi_query and not _bool(cfg, "new_decoder_architecture", where, False):
        return 1
    candidates: dict[str, int] = {}
    for key in ("num_key_value_heads", "num_kv_heads", "n_head_kv"):
        if cfg.get(key) is not None:
            candidates[key] = _int(cfg, key, where, maximum=_HEADS)
    if len(set(candidates.values())) > 1:
        raise UsageError(f"{where}: contradictory KV-head fields {candidates}")
    return next(iter(candidates.values())) if candidates else num_heads


def spec_from_hf_config(cfg: dict, name: str, where: str) -> ModelSpec:
    """A ModelSpec from a parsed config.json; `where` names the file in error messages.
    Every field read is checked (type and range); an absent or null field takes
    transformers' default for the model type where it has one, and is an error naming the
    field where it has none."""
    if not isinstance(cfg, dict):
        raise UsageError(f"{where}: expected a JSON object, got {type(cfg).__name__}")
    note = None
    if isinstance(cfg.get("text_config"), dict):
        cfg, note = language_model(cfg, where), MULTIMODAL_NOTE
    kind = _str(cfg, "model_type", where) or ""
    d_model = _one_of(cfg, "d_model", where)
    num_heads = _one_of(cfg, "num_heads", where)
    num_layers = _one_of(cfg, "num_layers", where)
    num_kv_heads = _kv_heads(cfg, num_heads, kind, where)
    head_dim = _int(cfg, "head_dim", where, HEAD_DIM_BY_DEFAULT.get(kind), maximum=_HEADS)
    # transformers loads a config without a dtype in float32
    raw_dtype = _str(cfg, "torch_dtype", where) or _str(cfg, "dtype", where) or "float32"
    dtype = canonical_dtype(raw_dtype)
    if dtype not in MODEL_DTYPES:
        raise UsageError(
            f"{where}: field 'torch_dtype' is {brief(raw_dtype)}; expected one of "
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
    return ModelSpec(
        name=name,
        num_layers=num_layers,
        d_model=d_model,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        head_dim=shape.head_dim,  # type: ignore[arg-type]
        dtype=dtype,
        source=str(where),
        windows=_windows(cfg, num_layers, kind, where),
        mla=mla,
        body=_body(cfg, kind, d_model, num_layers, where),
        max_position_embeddings=_context(cfg, kind, where),
        note=note,
    )


#: What the counts of a multimodal config leave out.
MULTIMODAL_NOTE = "the language model of a multimodal config: its vision tower is not counted"


def language_model(cfg: dict, where: str) -> dict:
    """The language model of a multimodal config (Gemma-3, Llama-4, ...): its
    `text_config`, with the top level's dtype where it names none, and model_type
    '<type>_text' where it names none (as Gemma3Config and Llama4Config default it)."""
    text = dict(cfg["text_config"])
    for key in ("torch_dtype", "dtype"):
        if text.get(key) is None and cfg.get(key) is not None:
            text[key] = cfg[key]
    if text.get("model_type") is None:
        top = _str(cfg, "model_type", where)
        text["model_type"] = f"{top}_text" if top else None
    return text


#: GPT-2's context (n_positions) when its config leaves it out: GPT2Config's default.
GPT2_POSITIONS = 1024


def _context(cfg: dict, kind: str, where: str) -> int | None:
    """The context the model declares (max_position_embeddings, GPT-2's n_positions)."""
    declared = _int(cfg, "max_position_embeddings", where, None, maximum=_POSITIONS)
    positions = _int(
        cfg, "n_positions", where, GPT2_POSITIONS if kind == "gpt2" else None, maximum=_POSITIONS
    )
    return declared or positions


#: Model types whose config windows every other layer when it lists no layer types
#: (GptOssConfig: even layers, from the first).
ALTERNATING = ("gemma2", "gpt_oss")
#: Model types whose config computes its layer types from `sliding_window_pattern` when
#: it lists none, with that pattern's default (every pattern-th layer global).
PATTERN_DEFAULT = {"gemma3": 6, "gemma3_text": 6, "cohere2": 4, "exaone4": 4}
#: Llama-4: chunked attention on the layers without RoPE, every `no_rope_layer_interval`-th
#: layer global (Llama4TextConfig's defaults).
CHUNKED_TYPES = ("llama4", "llama4_text")
NO_ROPE_INTERVAL, CHUNK_SIZE = 4, 8192


def _windows(cfg: dict, num_layers: int, kind: str, where: str) -> tuple[int | None, ...] | None:
    """Each layer's bounded cache, in tokens (None: global), or None when no layer has
    one: what transformers' StaticCache keeps per layer. A sliding layer keeps its window;
    a chunked one (Llama-4) one chunk, `attention_chunk_size`."""
    window = _int(cfg, "sliding_window", where, None, maximum=_TOKENS)
    chunk_default = CHUNK_SIZE if kind in CHUNKED_TYPES else None
    if "attention_chunk_size" in cfg and cfg["attention_chunk_size"] is None:
        chunk_default = None  # null turns chunking off (Llama4TextConfig)
    chunk = _int(cfg, "attention_chunk_size", where, chunk_default, maximum=_TOKENS)
    sizes = {"sliding_attention": window, "chunked_attention": chunk}
    types = _layer_types(cfg, num_layers, kind, where, window, chunk)
    if types is None:
        return None
    bounded = tuple(sizes.get(t) for t in types)
    return bounded if any(b is not None for b in bounded) else None


def _layer_types(
    cfg: dict, num_layers: int, kind: str, where: str, window: int | None, chunk: int | None
) -> list[str] | None:
    """Each layer's attention type as the model's config class derives it: `layer_types`
    when listed; else Qwen2's max_window_layers, an integer or 'LLLG' `sliding_window_pattern`
    (every pattern-th layer global), alternate layers (Gemma-2, gpt-oss), Llama-4's
    chunked layers (`no_rope_layers`), or `sliding_window` on every layer (Mistral)."""
    listed = cfg.get("layer_types")
    if listed is not None:
        if (
            not isinstance(listed, list)
            or len(listed) != num_layers
            or not all(isinstance(t, str) for t in listed)
        ):
            raise UsageError(
                f"{where}: field 'layer_types' must list {num_layers} layer types (strings)"
            )
        return listed
    if kind in CHUNKED_TYPES and chunk is not None:
        return ["chunked_attention" if rope_free else "full_attention"
                for rope_free in _no_rope_layers(cfg, num_layers, where)]  # fmt: skip
    # Qwen configs switch windows on with use_sliding_window (default false); others don't.
    if window is None or not _bool(cfg, "use_sliding_window", where, not kind.startswith("qwen")):
        return None
    if cfg.get("use_sliding_window") is True and cfg.get("max_window_layers") is not None:
        first = _int(cfg, "max_window_layers", where, minimum=0, maximum=_LAYERS)
        windowed = [i >= first for i in range(num_layers)]
    elif "sliding_window_pattern" in cfg or kind in PATTERN_DEFAULT:
        windowed = _pattern(cfg, num_layers, kind, where)
    elif kind in ALTERNATING:
        windowed = [i % 2 == 0 for i in range(num_layers)]
    else:
        windowed = [True] * num_layers
    return ["sliding_attention" if w else "full_attention" for w in windowed]


def _pattern(cfg: dict, num_layers: int, kind: str, where: str) -> list[bool]:
    """Which layers slide under `sliding_window_pattern`: an integer N windows all but
    every N-th layer (Gemma-3, Cohere2, EXAONE-4); a string of L (local) and G (global),
    'LLLG', repeats over the layers."""
    pattern = cfg.get("sliding_window_pattern")
    if isinstance(pattern, str) and pattern and set(pattern) <= {"L", "G"}:
        return [pattern[i % len(pattern)] == "L" for i in range(num_layers)]
    if isinstance(pattern, str):
        raise UsageError(
            f"{where}: field 'sliding_window_pattern' is {brief(pattern)}; expected an "
            "integer or a string of L (local) and G (global) layers, such as 'LLLG'"
        )
    every = _int(cfg, "sliding_window_pattern", where, PATTERN_DEFAULT.get(kind), maximum=_LAYERS)
    return [(i + 1) % every != 0 for i in range(num_layers)]


def _no_rope_layers(cfg: dict, num_layers: int, where: str) -> list[bool]:
    """Llama-4's layers without RoPE (they attend within a chunk): `no_rope_layers` (one
    0/1 per layer), else all but every `no_rope_layer_interval`-th."""
    listed = cfg.get("no_rope_layers")
    if listed:
        if (
            not isinstance(listed, list)
            or len(listed) != num_layers
            or not all(
                isinstance(v, int) and not isinstance(v, bool) and v in (0, 1) for v in listed
            )
        ):
            raise UsageError(f"{where}: field 'no_rope_layers' must list {num_layers} 0s and 1s")
        return [bool(v) for v in listed]
    every = _int(cfg, "no_rope_layer_interval", where, NO_ROPE_INTERVAL, maximum=_LAYERS)
    return [(i + 1) % every != 0 for i in range(num_layers)]


def _mla(cfg: dict, where: str) -> MlaSpec | None:
    if cfg.get("kv_lora_rank") is None:
        return None
    missing = [
        k for k in ("qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim") if cfg.get(k) is None
    ]
    if missing:
        raise UsageError(f"{where}: kv_lora_rank (MLA) given without {missing[0]!r}")
    return MlaSpec(
        kv_lora_rank=_positive_int(cfg, "kv_lora_rank", where),
        qk_rope_head_dim=_positive_int(cfg, "qk_rope_head_dim", where, _HEADS),
        qk_nope_head_dim=_positive_int(cfg, "qk_nope_head_dim", where, _HEADS),
        v_head_dim=_positive_int(cfg, "v_head_dim", where, _HEADS),
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

#: transformers' default intermediate_size of the gated-MLP model types. Gemma-2 has none
#: here: its configuration class changed the default between releases (24576, then 9216),
#: so a gemma2 config.json must give the field.
INTERMEDIATE_SIZE_BY_DEFAULT: dict[str, int] = {
    "llama": 11008, "mistral": 14336, "mixtral": 14336, "qwen2": 22016, "qwen3": 22016,
    "gemma": 24576, "gemma3_text": 9216, "deepseek_v2": 11008, "deepseek_v3": 18432,
}  # fmt: skip


def _body(cfg: dict, kind: str, d_model: int, num_layers: int, where: str) -> ModelBody | None:
    """The network besides attention, or None for a model type attnbench does not know."""
    if kind not in BODY_MODEL_TYPES or cfg.get("vocab_size") is None:
        return None
    vocab = _int(cfg, "vocab_size", where, maximum=_VOCAB)
    tied = _bool(cfg, "tie_word_embeddings", where, TIED_EMBEDDINGS_BY_DEFAULT[kind])
    if kind in ("falcon", "RefinedWeb", "RefinedWebModel"):
        bias = _bool(cfg, "bias", where, False)
        single_norm = _bool(cfg, "parallel_attn", where, True) and not _bool(
            cfg, "new_decoder_architecture", where, False
        )
        return ModelBody(
            vocab, _int(cfg, "ffn_hidden_size", where, 4 * d_model),
            gated_mlp=False, mlp_bias=bias, qkv_bias=bias, o_bias=bias, norm_bias=True,
            norms_per_layer=1 if single_norm else 2, tied_embeddings=tied,
        )  # fmt: skip
    if kind == "gpt2":
        positions = _int(cfg, "n_positions", where, GPT2_POSITIONS, maximum=_POSITIONS)
        return ModelBody(
            vocab, _int(cfg, "n_inner", where, 4 * d_model),
            gated_mlp=False, mlp_bias=True, qkv_bias=True, o_bias=True, norm_bias=True,
            tied_embeddings=tied, position_embeddings=positions,
        )  # fmt: skip
    why = (
        f" (a {kind} config.json must give it: transformers' default changed between releases)"
        if kind not in INTERMEDIATE_SIZE_BY_DEFAULT
        else ""
    )
    intermediate = _int(
        cfg, "intermediate_size", where, INTERMEDIATE_SIZE_BY_DEFAULT.get(kind, REQUIRED), why=why
    )
    attention_bias = _bool(cfg, "attention_bias", where, False)
    return ModelBody(
        vocab,
        intermediate,
        mlp_bias=_bool(cfg, "mlp_bias", where, False),
        qkv_bias=attention_bias or kind == "qwen2",
        o_bias=attention_bias,
        qk_norm=kind in ("qwen3", "gemma3_text"),
        norms_per_layer=4 if kind in ("gemma2", "gemma3_text") else 2,
        tied_embeddings=tied,
        moe=_moe(cfg, kind, intermediate, num_layers, where),
    )


#: transformers' defaults for the experts of its mixture-of-experts model types, used for
#: a config.json that gives an experts count (n_routed_experts or num_local_experts; one
#: that gives none is read as a dense model). A default of None: the field must be given.
MOE_DEFAULTS: dict[str, dict[str, int | None]] = {
    "mixtral": {"num_experts_per_tok": 2},
    "deepseek_v2": {
        "num_experts_per_tok": None, "moe_intermediate_size": 1407, "n_shared_experts": 2,
        "first_k_dense_replace": 0,
    },
    "deepseek_v3": {
        "num_experts_per_tok": 8, "moe_intermediate_size": 2048, "n_shared_experts": 1,
        "first_k_dense_replace": 3,
    },
}  # fmt: skip
_EXPERT_KEYS = ("n_routed_experts", "num_local_experts")


def _moe(cfg: dict, kind: str, intermediate: int, num_layers: int, where: str) -> MoeSpec | None:
    """The experts; DeepSeek-V3's router also counts e_score_correction_bias, one value per
    routed expert: a buffer in transformers, but stored in the checkpoints (see MoeSpec)."""
    defaults = MOE_DEFAULTS.get(kind, {})
    counts = {
        k: _int(cfg, k, where, maximum=_EXPERTS) for k in _EXPERT_KEYS if cfg.get(k) is not None
    }
    if len(set(counts.values())) > 1:
        raise UsageError(f"{where}: contradictory expert-count fields {counts}")
    if not counts:
        return None
    experts_key, num_experts = next(iter(counts.items()))
    freq = _int(cfg, "moe_layer_freq", where, 1, maximum=_LAYERS)
    if freq != 1:
        raise UsageError(f"{where}: field 'moe_layer_freq' {freq} is not supported (only 1)")

    def default(key: str, fallback: Any = REQUIRED) -> Any:
        value = defaults.get(key, fallback)
        return REQUIRED if value is None else value

    per_token = _int(
        cfg, "num_experts_per_tok", where, default("num_experts_per_tok"), maximum=_EXPERTS
    )
    if per_token > num_experts:
        raise UsageError(
            f"{where}: field 'num_experts_per_tok' ({per_token}) must be at most "
            f"{experts_key!r} ({num_experts}), the number of experts"
        )
    dense = cfg.get("first_k_dense_replace")
    if dense is None:
        # transformers' default (DeepSeek-V3: 3) leaves a model of fewer layers all dense
        dense_layers = min(default("first_k_dense_replace", 0), num_layers)
    else:
        dense_layers = _int(cfg, "first_k_dense_replace", where, minimum=0, maximum=_LAYERS)
        if dense_layers > num_layers:
            raise UsageError(
                f"{where}: field 'first_k_dense_replace' ({dense_layers}) must be at most "
                f"'num_hidden_layers' ({num_layers})"
            )
    return MoeSpec(
        num_experts=num_experts,
        experts_per_token=per_token,
        intermediate_size=_int(
            cfg, "moe_intermediate_size", where, default("moe_intermediate_size", intermediate)
        ),
        shared_experts=_int(
            cfg,
            "n_shared_experts",
            where,
            default("n_shared_experts", 0),
            minimum=0,
            maximum=_EXPERTS,
        ),
        dense_layers=dense_layers,
        router_bias=kind == "deepseek_v3",
    )


def json_depth(data: Any) -> int:
    """How deeply the arrays and objects of parsed JSON nest (a scalar: 0). Iterative."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            value = list(value.values())
        if isinstance(value, list):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in value)
    return deepest


def parse_json(text: str, where: str, max_depth: int = MAX_DEPTH) -> Any:
    """JSON `text`, nested at most `max_depth` deep; every problem a one-line UsageError.
    Nesting deeper than Python's recursion allows stops the parser itself (RecursionError),
    before it takes any memory to speak of."""
    too_deep = UsageError(f"{where}: JSON nested deeper than {max_depth} levels")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{where}: invalid JSON at line {exc.lineno}: {exc.msg}") from None
    except RecursionError:
        raise too_deep from None
    except ValueError as exc:  # an integer of more digits than Python converts, say
        raise UsageError(f"{where}: invalid JSON: {str(exc).splitlines()[0]}") from None
    if json_depth(data) > max_depth:
        raise too_deep
    return data


def load_hf_config(path: str | Path) -> ModelSpec:
    """Read config.json at `path`; every problem is a UsageError naming the file and field.
    The model is named by `_name_or_path`, else by the file's stem (its folder's name for
    a file called config.json)."""
    path = Path(path)
    text = read_user_file(path, "hf_config", limit=MAX_CONFIG_BYTES)
    cfg = parse_json(text, str(path))
    name = _str(cfg, "_name_or_path", str(path)) if isinstance(cfg, dict) else None
    # A model's own folder holds config.json; a folder of configs names each by its file.
    fallback = path.parent.name if path.stem == "config" and path.parent.name else path.stem
    return spec_from_hf_config(cfg, name or fallback, str(path))
