"""Read a model's architecture from a Hugging Face config.json on disk.

Understands the Llama/Mistral/Qwen/Gemma names (hidden_size, num_attention_heads,
num_key_value_heads, head_dim, num_hidden_layers), Falcon's (n_head, n_layer, multi_query,
num_kv_heads with new_decoder_architecture) and GPT-2's (n_embd, n_head, n_layer).

Sliding windows are read as the model defines them: `layer_types` when present; Qwen2's
`use_sliding_window` (false or absent: no window) and `max_window_layers` (layers from that
index on are windowed); Gemma-2 windows its even layers, Gemma-3 all but every
`sliding_window_pattern`-th; otherwise `sliding_window` applies to every layer (Mistral).
MLA (DeepSeek-V2/V3) comes from kv_lora_rank and its companions, with heads of v_head_dim
whatever head_dim says; q_lora_rank left out takes DeepSeek's default (1536), null means
full-rank queries.

The whole-model body (vocabulary, MLP or experts, norms, biases, output head) is read for
the model types of BODY_MODEL_TYPES, as transformers' modeling code of each type builds
it, so that the count equals the parameters (and the checkpoint-stored buffers) of
transformers' model: Llama, Mistral, Mixtral, Qwen2, Qwen3, Qwen2-MoE, Qwen3-MoE,
DeepSeek-V2/V3, Gemma 1/2/3, Cohere 1/2, EXAONE-4, GLM-4, GLM-4-MoE, gpt-oss, Granite,
Llama-4 (text), OLMo-2, Phi-3, Phi-MoE, SmolLM3 and StarCoder2 from the traits of
BODY_TRAITS, Falcon and GPT-2 from their own names. Per type, the table says:

- which config field switches which biases on, and its default (Bias: attention_bias on
  q, k, v and o, or on q, k and v only as GLM-4's; Qwen2's fixed q/k/v biases, Qwen2-MoE's
  qkv_bias, StarCoder2's use_bias on every projection, mlp_bias, Phi-MoE's lm_head_bias);
- the q/k norms (of head_dim, per head, or over all the heads; Cohere's and GLM-4-MoE's
  behind use_qk_norm; Llama-4's weightless L2 norm counts nothing), the norms per layer
  (Cohere's one, Gemma-2/3's and GLM-4's four), LayerNorms with bias (StarCoder2, Phi-MoE),
  gpt-oss's attention sinks, StarCoder2's MLP without gate;
- the experts (ExpertTraits): their count (n_routed_experts, num_local_experts or
  num_experts), width (moe_intermediate_size, or intermediate_size itself), shared
  experts (n_shared_experts; Qwen2-MoE's shared_expert_intermediate_size and its gate;
  Llama-4's one), which layers have them (first_k_dense_replace; decoder_sparse_step and
  mlp_only_layers; interleave_moe_layer_step or moe_layers, Llama-4's dense layers being
  of intermediate_size_mlp), router and expert biases (gpt-oss), and DeepSeek-V3's and
  GLM-4-MoE's e_score_correction_bias (a buffer that checkpoints store: counted).

A model type reads only the fields its transformers code reads: a Llama config's
num_local_experts is no mixture of experts, as LlamaForCausalLM builds none; a mixture of
experts left without an expert count gets its configuration class's. Other model types
are read for their attention only.

Every field read is checked: integers are integers in range (positive, or >= 0 where 0
means something), booleans are booleans, strings are strings. A field left out (or null)
takes transformers' default for the model type where it has one (tie_word_embeddings,
GPT-2's n_positions and n_inner, intermediate_size, head_dim, biases, the experts), and is
a "missing field" error where it has none: num_key_value_heads left out is the class's
default (8 for Mistral, 4 for Gemma-2, 32 for Qwen2: KV_HEADS_BY_DEFAULT), one KV head per
query head for a class whose default is None (Llama); num_attention_heads left out is the
class's too (HEADS_BY_DEFAULT, with a note), unless the config counts heads under another
name (XGLM's attention_heads), which is refused. The dtype is `dtype`'s, else `torch_dtype`'s
(its older name); the two naming different dtypes are an error, as are other fields of one
quantity that disagree. The file itself is bounded: at most MAX_CONFIG_BYTES, nested at
most MAX_DEPTH deep, each object giving each key once.
"""

from __future__ import annotations

import importlib.util
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeGuard

from ..errors import UsageError, brief, spelled, typed
from ..model.architecture import CountFix, MlaSpec, ModelBody, ModelSpec, MoeSpec, StoredWeights
from ..model.capacity import PATTERN_LETTERS, pattern_bounded
from ..model.dtypes import MODEL_DTYPES, canonical_dtype
from ..model.shapes import AttentionShape
from ..model.weights import FLOAT8_WEIGHTS
from .config_fields import (
    REQUIRED,
    bool_field,
    int_field,
    layer_indices,
    object_field,
    str_field,
)
from .files import json_int, json_problem, not_text, read_user_file, shown_path, unique_keys
from .hf_layers import HYBRIDS, Dims, LayerPlan, unknown_kinds
from .hf_layers import layer_plan as hybrid_plan
from .limits import (
    MAX_EXPERTS,
    MAX_HEADS,
    MAX_LAYERS,
    MAX_POSITIONS,
    MAX_TOKENS,
    MAX_VOCAB,
    MAX_WIDTH,
)

#: The largest config.json read (a larger one is refused before it is read).
MAX_CONFIG_BYTES = 10 << 20
#: Deepest nesting of objects and arrays read (a config.json needs about 4).
MAX_DEPTH = 64

_ALIASES = {
    "d_model": ("hidden_size", "n_embd", "d_model"),
    "num_heads": ("num_attention_heads", "n_head", "n_heads"),
    "num_layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
}
_MAXIMUM = {"d_model": MAX_WIDTH, "num_heads": MAX_HEADS, "num_layers": MAX_LAYERS}


def _given(
    cfg: dict, keys: tuple[str, ...], where: str, maximum: int, what: str = ""
) -> tuple[str, int] | None:
    """(field, value) of the first of `keys`, fields of one quantity under different
    names, that the config gives; None when it gives none. Fields that disagree are an
    error ("contradictory {what}fields")."""
    found = {k: int_field(cfg, k, where, maximum=maximum) for k in keys if cfg.get(k) is not None}
    if len(set(found.values())) > 1:
        raise UsageError(f"{where}: contradictory {what}fields {found}")
    return next(iter(found.items()), None)


def _one_of(cfg: dict, field: str, where: str) -> int:
    """The value under any alias of `field`; aliases that disagree are an error."""
    given = _given(cfg, _ALIASES[field], where, _MAXIMUM[field])
    if given is None:
        names = " or ".join(repr(k) for k in _ALIASES[field])
        raise UsageError(f"{where}: missing field {names}")
    return given[1]


#: The fields that count the KV heads, one name or another by model type.
KV_HEAD_KEYS = ("num_key_value_heads", "num_kv_heads", "n_head_kv")
#: transformers' default for multi_query, for model types whose attention reads it.
MULTI_QUERY_BY_DEFAULT = {"falcon": True}
#: transformers' default num_attention_heads of the model types read here (release 5.24):
#: a config.json that leaves the field out gets it, as Gemma-3's hub configs leave their
#: text_config's 8 heads to Gemma3TextConfig.
HEADS_BY_DEFAULT = {
    **dict.fromkeys(("gemma2", "gemma3_text"), 8),
    **dict.fromkeys(
        (
            "gemma",
            "qwen2_moe",
            "qwen3_5_moe_text",
            "qwen3_5_text",
            "qwen3_next",
            "smollm3",
            "zamba",
        ),
        16,
    ),
    "starcoder2": 24,
    "olmo_hybrid": 30,
    **dict.fromkeys(
        (
            "bamba",
            "deepseek_v2",
            "exaone4",
            "falcon_h1",
            "glm4",
            "granite",
            "granitemoehybrid",
            "jamba",
            "kimi_linear",
            "lfm2",
            "lfm2_moe",
            "llama",
            "minimax",
            "mistral",
            "mixtral",
            "nemotron_h",
            "olmo2",
            "phi3",
            "phimoe",
            "qwen2",
            "qwen3",
            "qwen3_moe",
            "zamba2",
        ),
        32,
    ),
    "llama4_text": 40,
    **dict.fromkeys(("cohere", "cohere2", "gpt_oss"), 64),
    "falcon": 71,
    "glm4_moe": 96,
    "deepseek_v3": 128,
}
#: transformers' default num_key_value_heads of the model types read here whose
#: configuration class gives a number, not None (which means one KV head per query head):
#: a config.json that leaves the field out gets it, whatever its heads, as transformers
#: builds it (its configuration classes, release 5.24). One that writes it null gets one
#: KV head per query head, as those classes read a None (or refuse it).
KV_HEADS_BY_DEFAULT = {
    **dict.fromkeys(("qwen3_5_moe_text", "qwen3_next", "glm4", "starcoder2"), 2),
    **dict.fromkeys(("gemma2", "gemma3_text", "qwen3_5_text", "qwen3_moe", "smollm3"), 4),
    **dict.fromkeys(
        (
            "bamba",
            "falcon_h1",
            "glm4_moe",
            "gpt_oss",
            "jamba",
            "lfm2",
            "lfm2_moe",
            "llama4_text",
            "minimax",
            "mistral",
            "mixtral",
            "nemotron_h",
            "phimoe",
        ),
        8,
    ),
    **dict.fromkeys(("gemma", "qwen2_moe", "zamba"), 16),
    **dict.fromkeys(("exaone4", "kimi_linear", "qwen2", "qwen3"), 32),
    "deepseek_v3": 128,
}
#: transformers' default head_dim, for model types where it is not d_model / heads.
HEAD_DIM_BY_DEFAULT = {
    **dict.fromkeys(
        (
            "gemma",
            "gemma2",
            "gemma3_text",
            "qwen3_next",
            "qwen3_5",
            "qwen3_5_text",
            "qwen3_5_moe",
            "qwen3_5_moe_text",
        ),
        256,
    ),
    **dict.fromkeys(("qwen3", "glm4", "llama4_text"), 128),
    "gpt_oss": 64,
}


def _kv_heads(cfg: dict, num_heads: int, kind: str, where: str) -> int:
    # Falcon's original architecture: multi_query means one KV head, whatever num_kv_heads
    # says (FalconConfig writes num_kv_heads = num_attention_heads by default and the
    # model ignores it unless new_decoder_architecture is set).
    multi_query = bool_field(cfg, "multi_query", where, MULTI_QUERY_BY_DEFAULT.get(kind, False))
    if multi_query and not bool_field(cfg, "new_decoder_architecture", where, False):
        return 1
    given = _given(cfg, KV_HEAD_KEYS, where, MAX_HEADS, "KV-head ")
    # DBRX's attn_config.kv_n_heads (transformers' MPT, whose attn_config may carry one
    # too, builds MHA whatever it says)
    nested = object_field(cfg, "attn_config", where) if kind == "dbrx" else None
    if given is None and nested is not None:
        given = _given(nested, ("kv_n_heads",), f"{where}: attn_config", MAX_HEADS, "KV-head ")
    # ChatGLM's groups (its own code, not transformers'): with multi_query_attention on
    if given is None and bool_field(cfg, "multi_query_attention", where, False):
        given = _given(cfg, ("multi_query_group_num",), where, MAX_HEADS, "KV-head ")
    if given is None and any(k in cfg for k in KV_HEAD_KEYS):  # written null: one per head
        return num_heads
    if given is None:  # the class's default: a number for some types, else one per head
        return KV_HEADS_BY_DEFAULT.get(kind, num_heads)
    return given[1]


def spec_from_hf_config(cfg: dict, name: str, where: str) -> ModelSpec:
    """A ModelSpec from a parsed config.json; `where` names the file in error messages.
    Every field read is checked (type and range); an absent or null field takes
    transformers' default for the model type where it has one, and is an error naming the
    field where it has none."""
    if not isinstance(cfg, dict):
        raise UsageError(f"{where}: expected a JSON object, got {type(cfg).__name__}")
    note, tie_conflict = None, None
    if has_text_config(cfg, where):
        tie_conflict = _tie_conflict(cfg, where)
        cfg, note = language_model(cfg, where), MULTIMODAL_NOTE
    kind = str_field(cfg, "model_type", where) or ""
    if bool_field(cfg, "is_encoder_decoder", where, False):
        raise UsageError(
            f"{where}: model_type {kind!r} is an encoder-decoder (field 'is_encoder_decoder'): "
            "attnbench sizes decoder-only models, and the language model of a multimodal one"
        )
    d_model = _one_of(cfg, "d_model", where)
    heads = _given(cfg, _ALIASES["num_heads"], where, _MAXIMUM["num_heads"])
    if heads is None and (kind not in HEADS_BY_DEFAULT or _other_heads(cfg)):
        _refuse_without_attention(cfg, kind, where)
    if heads is None:  # transformers' default for the type, said in a note
        defaulted = f"num_attention_heads left out: {kind}'s default in transformers, "
        defaulted += f"{HEADS_BY_DEFAULT[kind]}"
        note = f"{note}; {defaulted}" if note else defaulted
    num_heads = heads[1] if heads is not None else HEADS_BY_DEFAULT[kind]
    plan = None
    if kind in HYBRIDS:
        given = _given(cfg, _ALIASES["num_layers"], where, MAX_LAYERS)
        dims = Dims(d_model, num_heads, given[1] if given else None)
        plan = hybrid_plan(cfg, kind, dims, where)
    num_layers = plan.num_layers if plan is not None else _attention_layers(cfg, kind, where)
    num_kv_heads = _kv_heads(cfg, num_heads, kind, where)
    head_dim = _head_dim(cfg, kind, d_model, num_heads, where)
    dtype = _dtype(cfg, where)
    mla = _mla(cfg, kind, where)
    if mla is not None:
        # Heads of v_head_dim, as in the presets: DeepSeek configs written by transformers
        # set head_dim to qk_rope_head_dim (64), which would give a model's config.json
        # other ratios to MHA than its preset.
        head_dim = mla.v_head_dim
    if head_dim is None and d_model % num_heads:
        raise UsageError(
            f"{where}: the width ({d_model}) is no multiple of the attention heads "
            f"({num_heads}), and the config gives no 'head_dim'"
        )
    try:
        shape = AttentionShape(d_model, num_heads, num_kv_heads, head_dim)
    except ValueError as exc:
        raise UsageError(f"{where}: {exc}") from None
    if kind in UNWINDOWED and cfg.get("sliding_window") and not cfg.get("layer_types"):
        ignored = f"sliding_window not read: {kind}'s transformers code attends to every token"
        note = f"{note}; {ignored}" if note else ignored
    return ModelSpec(
        name=name,
        num_layers=num_layers,
        d_model=d_model,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        head_dim=shape.head_dim,  # type: ignore[arg-type]
        dtype=dtype,
        source=str(where),
        windows=_windows(cfg, num_layers, kind, where, plan),
        mla=mla,
        body=None if tie_conflict else _body(cfg, kind, d_model, num_layers, where),
        max_position_embeddings=_context(cfg, kind, where),
        note=note,
        attends=None if plan is None else plan.attends,
        states=None if plan is None or plan.state is None else plan.states,
        chunked=kind in CHUNKED_TYPES,
        unknown_kinds=None if plan is not None else _unknown_kinds(cfg, kind, where),
        count_fix=_count_fix(cfg, kind, shape, plan, where),
        formulas_decline=tie_conflict,
    )


def _count_fix(
    cfg: dict, kind: str, shape: AttentionShape, plan: LayerPlan | None, where: str
) -> CountFix | None:
    """What transformers' count of `kind` gets wrong (CountFix), from the config's fields
    with its configuration class's defaults; None for a type it counts right.

    - LongCat-Flash: zero_expert_num identity experts beside the n_routed_experts, which
      hold no weights, though transformers (5.24) allocates a gate_up slice for each; a
      token's moe_topk routes may go to them (its experts read: at most moe_topk).
    - JetMoE: num_local_experts in the MLP (gate_up and down of intermediate_size each,
      named input_linear and output_linear) and in the attention (a query and an output
      projection of its K and V heads' width each), num_experts_per_tok of each a token.
    - Zamba2: num_mem_blocks shared transformer blocks (attention over the hidden state
      and the embeddings, joined: 2 * d_model wide; a gated MLP; two norms), run in turn
      at each hybrid layer: read again at each use beyond the first of each block. Zamba:
      one such block (attention_hidden_size wide, no biases), at every hybrid layer."""
    d = shape.d_model
    if kind == "longcat_flash":
        layers = int_field(cfg, "num_layers", where, 28, maximum=MAX_LAYERS)
        routed = int_field(cfg, "n_routed_experts", where, 512, maximum=MAX_EXPERTS)
        zero = int_field(cfg, "zero_expert_num", where, 0, minimum=0, maximum=MAX_EXPERTS)
        width = int_field(cfg, "expert_ffn_hidden_size", where, 2048, maximum=MAX_WIDTH)
        return CountFix(
            experts=layers * routed * 3 * width * d,
            unbuilt=layers * zero * 2 * width * d,
            num_experts=routed,
            experts_per_token=int_field(cfg, "moe_topk", where, 12, maximum=routed + zero),
        )
    if kind == "jetmoe":
        layers = int_field(cfg, "num_hidden_layers", where, 12, maximum=MAX_LAYERS)
        experts = int_field(cfg, "num_local_experts", where, 8, maximum=MAX_EXPERTS)
        width = int_field(cfg, "intermediate_size", where, 5632, maximum=MAX_WIDTH)
        return CountFix(
            experts=layers * experts * 3 * width * d,
            experts_in="mlp",
            attention_experts=layers * experts * 2 * shape.kv_dim * d,
            num_experts=experts,
            experts_per_token=int_field(cfg, "num_experts_per_tok", where, 2, maximum=experts),
        )
    if kind in ("zamba", "zamba2") and plan is not None:
        uses = plan.types.count("hybrid")
        v2 = kind == "zamba2"  # Zamba: one block, no biases, its own joined width
        blocks = int_field(cfg, "num_mem_blocks", where, 1, maximum=MAX_LAYERS) if v2 else 1
        blocks = min(blocks, uses)
        width = int_field(
            cfg, "intermediate_size", where, 4 * d if v2 else 14848, maximum=MAX_WIDTH
        )
        bias = v2 and bool_field(cfg, "add_bias_linear", where, False)
        joined = (
            2 * d
            if v2
            else int_field(cfg, "attention_hidden_size", where, 2 * d, maximum=MAX_WIDTH)
        )
        block = {
            "attention": joined * (shape.q_dim + 2 * shape.kv_dim) + shape.q_dim * d,
            "mlp": 3 * width * d + bias * (2 * width + d),
            "norms": joined + d,
        }
        return CountFix(reread=tuple((part, (uses - blocks) * n) for part, n in block.items()))
    return None


#: The fields that name the model's dtype: transformers reads `dtype`, and `torch_dtype`
#: (its older name) where `dtype` is left out.
DTYPE_KEYS = ("dtype", "torch_dtype")


def _dtype_given(cfg: dict, where: str) -> tuple[str, str] | None:
    """(field, value) of the dtype the config names, `dtype` before `torch_dtype`; None
    when it names none. The two naming different dtypes are an error."""
    found = {k: v for k in DTYPE_KEYS if (v := str_field(cfg, k, where)) is not None}
    if len({canonical_dtype(v) or v for v in found.values()}) > 1:
        raise UsageError(f"{where}: contradictory dtype fields {found}")
    return next(iter(found.items()), None)


def _dtype(cfg: dict, where: str) -> str:
    """The model's dtype: float32 when the config names none, as transformers loads it."""
    field, raw = _dtype_given(cfg, where) or ("dtype", "float32")
    dtype = canonical_dtype(raw)
    if dtype not in MODEL_DTYPES:
        raise UsageError(
            f"{where}: field {field!r} is {brief(raw)}; expected one of {', '.join(MODEL_DTYPES)}"
        )
    return dtype


#: Model types whose every decoder layer holds more than one attention block, each with a
#: cache of its own: LongCat-Flash's two MLA blocks (transformers' num_hidden_layers is
#: 2 * num_layers, derived, never written).
BLOCKS_PER_LAYER = {"longcat_flash": 2}


def _attention_layers(cfg: dict, kind: str, where: str) -> int:
    """The attention layers: the decoder layers, times their blocks where a layer holds
    several (BLOCKS_PER_LAYER)."""
    blocks = BLOCKS_PER_LAYER.get(kind, 1)
    if blocks > 1 and cfg.get("num_layers") is not None:
        return blocks * int_field(cfg, "num_layers", where, maximum=MAX_LAYERS // blocks)
    return _one_of(cfg, "num_layers", where)


def _other_heads(cfg: dict) -> list[str]:
    """The fields of a config that count heads under names attnbench does not read for
    its heads (XGLM's attention_heads, xLSTM's num_heads)."""
    return [
        k
        for k, v in cfg.items()
        if "heads" in k.lower() and k not in KV_HEAD_KEYS and type(v) is int
    ]


def _refuse_without_attention(cfg: dict, kind: str, where: str) -> None:
    """The UsageError for a config that gives its attention heads under none of the names
    attnbench reads: one that declares layers of other kinds (a Mamba model) has no
    attention cache to size; another names the fields it does give that count heads
    (XGLM's attention_heads, GPT-Neo's num_heads), which attnbench does not read, as what
    they count is the model type's own (xLSTM's num_heads are its mLSTM cells')."""
    if unknown_kinds(cfg, kind) is not None:
        raise UsageError(
            f"{where}: model_type {kind!r} has no attention layer (no attention heads, and "
            "layers of other kinds): attnbench sizes the caches of models that attend, with "
            f"the states of the hybrid types it reads ({', '.join(sorted(HYBRIDS))})"
        )
    names = " or ".join(repr(k) for k in _ALIASES["num_heads"])
    other = [repr(k) for k in _other_heads(cfg)]
    why = (
        f"it gives {' and '.join(other)}, which attnbench does not read for this type"
        if other
        else "without attention heads it has no KV cache that attnbench can size"
    )
    raise UsageError(f"{where}: missing field {names}: for model_type {kind!r}, {why}")


def _unknown_kinds(cfg: dict, kind: str, where: str) -> str | None:
    """Why the layers of a config that is not a hybrid attnbench reads are not known: it
    declares other kinds (hf_layers.unknown_kinds), or a model type attnbench does not
    know sets a sliding window without saying which layers slide (its configuration
    class has a rule of its own: OLMo-3 windows three layers of four)."""
    why = (
        unknown_kinds(cfg, kind)
        or _per_layer_shapes(cfg, where)
        or _shared_caches(cfg, where)
        or _uneven_heads(cfg, where)
        or _cross_attention(cfg)
    )
    if why is not None or _windows_known(cfg, kind, where):
        return why
    return (
        f"model_type {kind!r} sets 'sliding_window' without 'layer_types': which of its "
        "layers slide is its configuration class's rule, which attnbench does not know"
    )


#: The fields of a layer's attention that attnbench reads once for every layer.
SHAPE_FIELDS = ("head_dim", "num_key_value_heads", "num_attention_heads", "sliding_window")


def _per_layer_shapes(cfg: dict, where: str) -> str | None:
    """Why layers whose attention `per_layer_config` shapes on its own (Gemma-4's global
    layers: head_dim 512 beside 256) cannot be sized: attnbench gives every layer one
    shape. None when it shapes none."""
    listed = object_field(cfg, "per_layer_config", where) or {}
    layers = [k for k, v in listed.items() if isinstance(v, dict) and set(v) & set(SHAPE_FIELDS)]
    if not layers:
        return None
    fields = sorted({f for k in layers for f in listed[k] if f in SHAPE_FIELDS})
    return (
        f"field 'per_layer_config' gives layers {', '.join(map(str, layers))} their own "
        f"{' and '.join(fields)}, which attnbench cannot size (it gives every layer one shape)"
    )


#: Fields that shape the sliding layers' attention apart from the others' (MiMo-V2's).
SLIDING_SHAPE_FIELDS = ("swa_num_key_value_heads", "swa_head_dim", "swa_v_head_dim")


def _uneven_heads(cfg: dict, where: str) -> str | None:
    """Why a config whose values are cached narrower or wider than its keys (v_head_dim
    beside head_dim, outside MLA), or whose sliding layers have heads of their own
    (SLIDING_SHAPE_FIELDS), cannot be sized: attnbench caches K and V of one shape in
    every layer (MiMo-V2-Flash: values of 128 beside keys of 192, twice the KV heads on
    its sliding layers). None otherwise."""
    own = next((f for f in SLIDING_SHAPE_FIELDS if cfg.get(f) is not None), None)
    if own is not None:
        return (
            f"field {own!r} gives its sliding layers heads of their own, which attnbench "
            "cannot size (it caches K and V of one shape in every layer)"
        )
    if cfg.get("kv_lora_rank") is not None or cfg.get("v_head_dim") is None:
        return None
    values = int_field(cfg, "v_head_dim", where, maximum=MAX_HEADS)
    keys = cfg.get("head_dim")
    width, heads = cfg.get("hidden_size"), cfg.get("num_attention_heads")
    if keys is None and _whole(width) and _whole(heads) and heads > 0:
        keys = width // heads  # transformers' head_dim where the config gives none
    if values is None or keys is None or values == keys:
        return None
    return (
        f"field 'v_head_dim' ({values}) caches values of another width than the keys' "
        f"head_dim ({keys}), which attnbench cannot size (it caches K and V of one width)"
    )


def _cross_attention(cfg: dict) -> str | None:
    """Why a config whose layers of `cross_attention_layers` attend to an image's tokens
    (Llama-3.2-Vision's, 8 of its 40) cannot be sized: they cache the image's K and V, not
    the text's, which attnbench would count as every layer's. None without them."""
    listed = cfg.get("cross_attention_layers")
    if not listed:
        return None
    shown = brief(listed) if not isinstance(listed, list) else f"{len(listed)} layers"
    return (
        f"field 'cross_attention_layers' ({shown}) has layers attend to an image's tokens, "
        "whose cache attnbench cannot size (it caches every layer's K and V per text token)"
    )


def _shared_caches(cfg: dict, where: str) -> str | None:
    """Why a config whose last layers reuse earlier layers' K and V (Gemma-3n's
    num_kv_shared_layers) cannot be sized: attnbench caches every attention layer's own.
    None when none is shared."""
    shared = int_field(cfg, "num_kv_shared_layers", where, 0, minimum=0, maximum=MAX_LAYERS)
    if not shared:
        return None
    return (
        f"field 'num_kv_shared_layers' ({shared}) has its last layers reuse earlier layers' "
        "K and V, which attnbench does not model (it caches every attention layer's own)"
    )


def _windows_known(cfg: dict, kind: str, where: str) -> bool:
    """Whether the config says which layers keep a sliding window: it lists them, it has
    none, or its model type is one whose rule attnbench reads (see _layer_types)."""
    if cfg.get("layer_types") is not None or cfg.get("sliding_window") is None:
        return True
    if not bool_field(cfg, "use_sliding_window", where, not kind.startswith("qwen")):
        return True
    known = (*BODY_MODEL_TYPES, *ALTERNATING, *PATTERN_DEFAULT, *CHUNKED_TYPES)
    return kind in known or "sliding_window_pattern" in cfg


#: Model types whose head_dim is another field, with transformers' default of it from the
#: width and the heads: Zamba's attention_head_dim, 2 * d_model / heads (its shared block
#: attends over the hidden state and the embeddings, joined); JetMoE's K and V heads,
#: kv_channels wide, 128.
HEAD_DIM_FIELD: dict[str, tuple[str, Callable[[int, int], int]]] = {
    **dict.fromkeys(("zamba", "zamba2"), ("attention_head_dim", lambda d, heads: 2 * d // heads)),
    "jetmoe": ("kv_channels", lambda d, heads: 128),
}


def _head_dim(cfg: dict, kind: str, d_model: int, num_heads: int, where: str) -> int | None:
    """head_dim (HEAD_DIM_FIELD's field where head_dim is left out); the model type's
    default where it has one (None: d_model / heads)."""
    if kind in HEAD_DIM_FIELD and cfg.get("head_dim") is None:
        field, default = HEAD_DIM_FIELD[kind]
        return int_field(cfg, field, where, default(d_model, num_heads), maximum=MAX_HEADS)
    return int_field(cfg, "head_dim", where, HEAD_DIM_BY_DEFAULT.get(kind), maximum=MAX_HEADS)


#: What the counts of a multimodal config leave out.
MULTIMODAL_NOTE = (
    "the language model of a multimodal config: its vision or audio encoder is not counted"
)


def has_text_config(cfg: dict, where: str) -> bool:
    """Whether `cfg` is a multimodal config, its language model the object `text_config`.
    A text_config that is no object is an error, null included: a configuration class
    would build its default language model, which attnbench does not know."""
    if "text_config" not in cfg:
        return False
    text = cfg["text_config"]
    if not isinstance(text, dict):
        raise UsageError(f"{where}: field 'text_config': expected an object, got {spelled(text)}")
    return True


#: Multimodal model types whose head transformers ties as their text_config says (as
#: given, or its type's default), whatever the top level says: Llama-4's text model is
#: its own causal LM. Every other type ties as its top level says where it says.
TIED_BY_TEXT_CONFIG = frozenset(("llama4",))


def _tie_conflict(cfg: dict, where: str) -> str | None:
    """Why a multimodal config's whole model is left to transformers to count: its top
    level and its text_config each give tie_word_embeddings, differently. Which one ties
    the head is its class's choice (LLaVA-OneVision's ties where either says so, Gemma-3's
    where the top level does); None where they agree, one is left out, or the type is one
    of TIED_BY_TEXT_CONFIG."""
    text = cfg["text_config"]
    if cfg.get("model_type") in TIED_BY_TEXT_CONFIG:
        return None
    if cfg.get("tie_word_embeddings") is None or text.get("tie_word_embeddings") is None:
        return None
    top = bool_field(cfg, "tie_word_embeddings", where, False)
    inner = bool_field(text, "tie_word_embeddings", where, False)
    if inner == top:
        return None
    return (
        f"tie_word_embeddings {str(top).lower()} at the top level and {str(inner).lower()} "
        "in text_config: whether the head is tied is the model class's choice"
    )


def language_model(cfg: dict, where: str) -> dict:
    """The language model of a multimodal config (Gemma-3, Llama-4, ...): its
    `text_config`, with the top level's dtype where it names none, the top level's
    tie_word_embeddings where it gives one (it ties the whole model's head, but for
    TIED_BY_TEXT_CONFIG's types), and model_type
    '<type>_text' where it names none (as Gemma3Config and Llama4Config default it)."""
    text = dict(cfg["text_config"])
    top_dtype = _dtype_given(cfg, where)
    if top_dtype is not None and all(text.get(k) is None for k in DTYPE_KEYS):
        text[top_dtype[0]] = top_dtype[1]
    own = cfg.get("model_type") in TIED_BY_TEXT_CONFIG  # its text model ties its own head
    if cfg.get("tie_word_embeddings") is not None and not own:  # the top level's, else
        text["tie_word_embeddings"] = cfg["tie_word_embeddings"]
    if text.get("model_type") is None:
        top = str_field(cfg, "model_type", where)
        text["model_type"] = f"{top}_text" if top else None
    return text


#: GPT-2's context (n_positions) when its config leaves it out: GPT2Config's default.
GPT2_POSITIONS = 1024


def _context(cfg: dict, kind: str, where: str) -> int | None:
    """The context the model declares (max_position_embeddings, GPT-2's n_positions)."""
    declared = int_field(cfg, "max_position_embeddings", where, None, maximum=MAX_POSITIONS)
    declared = declared or int_field(cfg, "max_seq_len", where, None, maximum=MAX_POSITIONS)  # DBRX
    positions = int_field(
        cfg, "n_positions", where, GPT2_POSITIONS if kind == "gpt2" else None, maximum=MAX_POSITIONS
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


def _windows(
    cfg: dict, num_layers: int, kind: str, where: str, plan: LayerPlan | None = None
) -> tuple[int | None, ...] | None:
    """Each attention layer's bounded cache, in tokens (None: global), or None when no
    layer has one: what transformers' StaticCache keeps per layer. A sliding layer keeps
    its window; a chunked one (Llama-4) one chunk, `attention_chunk_size`. A hybrid's
    layers are its plan's, of which the attending ones are listed."""
    # 0 is no window (Qwen2-MoE writes it with use_sliding_window false), refused below
    # where layers slide; left out, the type's default; null, none
    default = SLIDING_WINDOW_BY_DEFAULT.get(kind) if "sliding_window" not in cfg else None
    given = int_field(cfg, "sliding_window", where, default, minimum=0, maximum=MAX_TOKENS)
    window = given or None
    chunk_default = CHUNK_SIZE if kind in CHUNKED_TYPES else None
    if "attention_chunk_size" in cfg and cfg["attention_chunk_size"] is None:
        chunk_default = None  # null turns chunking off (Llama4TextConfig)
    chunk = int_field(cfg, "attention_chunk_size", where, chunk_default, maximum=MAX_TOKENS)
    sizes = {"sliding_attention": window, "chunked_attention": chunk}
    if plan is not None:
        types = [t for t, attends in zip(plan.types, plan.attends, strict=True) if attends]
    else:
        types = _layer_types(cfg, num_layers, kind, where, window, chunk)
    if types is None:
        return None
    if given == 0 and "sliding_attention" in types:
        raise UsageError(f"{where}: field 'sliding_window' is 0, but layers slide")
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
        if not _per_layer(listed, num_layers, lambda t: isinstance(t, str)):
            raise UsageError(
                f"{where}: field 'layer_types' must list {num_layers} layer types (strings)"
            )
        return listed
    if kind in CHUNKED_TYPES and chunk is not None:
        return [
            "chunked_attention" if rope_free else "full_attention"
            for rope_free in _no_rope_layers(cfg, num_layers, where)
        ]
    # Qwen's and SmolLM3's configs switch windows on with use_sliding_window (default
    # false), each type by its own rule of which layers; others don't have the switch.
    switched = kind.startswith("qwen") or kind in SWITCHED_WINDOWS
    if window is None or kind in UNWINDOWED:
        return None
    if not bool_field(cfg, "use_sliding_window", where, not switched):
        return None
    if switched:
        windowed = _switched_windows(cfg, num_layers, kind, where)
    elif cfg.get("use_sliding_window") is True and cfg.get("max_window_layers") is not None:
        first = int_field(cfg, "max_window_layers", where, minimum=0, maximum=MAX_LAYERS)
        windowed = [i >= first for i in range(num_layers)]
    elif "sliding_window_pattern" in cfg or kind in PATTERN_DEFAULT:
        windowed = _pattern(cfg, num_layers, kind, where)
    elif kind in ALTERNATING:
        windowed = [i % 2 == 0 for i in range(num_layers)]
    else:
        windowed = [True] * num_layers
    return ["sliding_attention" if w else "full_attention" for w in windowed]


#: transformers' default sliding_window of the model types read here whose configuration
#: class has one (release 5.24): a config.json that leaves the field out gets it (Qwen's
#: types only once use_sliding_window is on); one that gives null has no window.
SLIDING_WINDOW_BY_DEFAULT = {
    **dict.fromkeys(
        (
            "cohere2",
            "exaone4",
            "gemma2",
            "gemma3_text",
            "mistral",
            "qwen2",
            "qwen2_moe",
            "qwen3",
            "qwen3_moe",
        ),
        4096,
    ),
    "gpt_oss": 128,
}
#: Model types read here whose transformers modeling code never reads sliding_window (its
#: attention masks every earlier token in): a sliding_window a config.json gives one of
#: them bounds nothing, and is noted as not read (release 5.24).
UNWINDOWED = (
    "cohere",
    "deepseek_v2",
    "deepseek_v3",
    "falcon",
    "gemma",
    "glm4",
    "glm4_moe",
    "gpt2",
    "granite",
    "llama",
    "olmo2",
)
#: Model types besides Qwen's whose config switches windows on with use_sliding_window.
SWITCHED_WINDOWS = ("smollm3",)
#: Qwen2's and Qwen3's default max_window_layers: the layers from it on slide.
MAX_WINDOW_LAYERS = 28


def _switched_windows(cfg: dict, num_layers: int, kind: str, where: str) -> list[bool]:
    """Which layers slide once use_sliding_window is on, by the rule of each type's
    configuration class (transformers 5.24): Qwen3-MoE all of them (it has no
    max_window_layers); Qwen2-MoE the even layers below max_window_layers; SmolLM3 the
    layers without RoPE (no_rope_layers, else all but every no_rope_layer_interval-th
    keep it); Qwen2, Qwen3 and the other Qwen types those from max_window_layers on."""
    if kind == "qwen3_moe":
        return [True] * num_layers
    if kind == "smollm3":
        return [not rope for rope in _no_rope_layers(cfg, num_layers, where)]
    first = int_field(
        cfg, "max_window_layers", where, MAX_WINDOW_LAYERS, minimum=0, maximum=MAX_LAYERS
    )
    if kind == "qwen2_moe":
        return [i % 2 == 0 and i < first for i in range(num_layers)]
    return [i >= first for i in range(num_layers)]


def _per_layer(listed: Any, num_layers: int, ok: Callable[[Any], bool]) -> bool:
    """Whether `listed` is a list of one item per layer, each of them `ok`."""
    return isinstance(listed, list) and len(listed) == num_layers and all(map(ok, listed))


def _pattern(cfg: dict, num_layers: int, kind: str, where: str) -> list[bool]:
    """Which layers slide under `sliding_window_pattern`: an integer N windows all but
    every N-th layer (Gemma-3, Cohere2, EXAONE-4); a string of L (local) and G (global),
    'LLLG', repeats over the layers."""
    pattern = cfg.get("sliding_window_pattern")
    if isinstance(pattern, str) and pattern and set(pattern) <= set(PATTERN_LETTERS):
        return pattern_bounded(pattern, num_layers)
    if isinstance(pattern, str):
        raise UsageError(
            f"{where}: field 'sliding_window_pattern' is {brief(pattern)}; expected an "
            "integer or a string of L (local) and G (global) layers, such as 'LLLG'"
        )
    every = int_field(
        cfg, "sliding_window_pattern", where, PATTERN_DEFAULT.get(kind), maximum=MAX_LAYERS
    )
    return _all_but_every(every, num_layers)


def _no_rope_layers(cfg: dict, num_layers: int, where: str) -> list[bool]:
    """Llama-4's layers without RoPE (they attend within a chunk): `no_rope_layers` (one
    0/1 per layer), else all but every `no_rope_layer_interval`-th."""
    listed = cfg.get("no_rope_layers")
    if listed:
        if not _per_layer(
            listed,
            num_layers,
            lambda v: isinstance(v, int) and not isinstance(v, bool) and v in (0, 1),
        ):
            raise UsageError(f"{where}: field 'no_rope_layers' must list {num_layers} 0s and 1s")
        return [bool(v) for v in listed]
    every = int_field(cfg, "no_rope_layer_interval", where, NO_ROPE_INTERVAL, maximum=MAX_LAYERS)
    return _all_but_every(every, num_layers)


def _all_but_every(every: int, num_layers: int) -> list[bool]:
    """True for every layer but each `every`-th, counting from 1 (layers every - 1,
    2 * every - 1, ... from 0 are False)."""
    return [(i + 1) % every != 0 for i in range(num_layers)]


#: transformers' default q_lora_rank of the MLA model types: it applies to a config that
#: leaves the field out; null means full-rank queries (DeepSeek-V2-Lite).
Q_LORA_RANK_BY_DEFAULT = {"deepseek_v2": 1536, "deepseek_v3": 1536}


def _mla(cfg: dict, kind: str, where: str) -> MlaSpec | None:
    if cfg.get("kv_lora_rank") is None:
        return None
    missing = [
        k for k in ("qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim") if cfg.get(k) is None
    ]
    if missing:
        raise UsageError(f"{where}: kv_lora_rank (MLA) given without {missing[0]!r}")
    return MlaSpec(
        kv_lora_rank=int_field(cfg, "kv_lora_rank", where),
        qk_rope_head_dim=int_field(cfg, "qk_rope_head_dim", where, maximum=MAX_HEADS),
        qk_nope_head_dim=int_field(cfg, "qk_nope_head_dim", where, maximum=MAX_HEADS),
        v_head_dim=int_field(cfg, "v_head_dim", where, maximum=MAX_HEADS),
        q_lora_rank=int_field(
            cfg,
            "q_lora_rank",
            where,
            None if "q_lora_rank" in cfg else Q_LORA_RANK_BY_DEFAULT.get(kind),
        ),
    )


@dataclass(frozen=True)
class Bias:
    """Biases a model type's transformers code puts on some projections, `on` ("qkv": q, k
    and v; "o": the attention's output; "mlp": the dense MLP and the shared experts):
    switched by the config field `key`, `default` when it is left out; always `default`
    when `key` is None."""

    on: tuple[str, ...]
    key: str | None = None
    default: bool = False


#: The biases of most model types: attention_bias on q, k, v and o (default false).
ATTENTION_BIAS = Bias(("qkv", "o"), "attention_bias")
#: ... and mlp_bias on the MLP (Llama, Granite, SmolLM3, DeepSeek-V2's dense and shared MLPs).
MLP_BIAS = Bias(("mlp",), "mlp_bias")


@dataclass(frozen=True)
class ExpertTraits:
    """How a mixture-of-experts model type's config gives its experts, with the defaults
    of its transformers configuration class.

    `num_experts`, `per_token`: the defaults of the expert count (read from any of
    EXPERT_KEYS) and of num_experts_per_tok (None: the field must be given). The routed
    experts' width is the field `size_key`: moe_intermediate_size, default `size`; or
    intermediate_size itself (Mixtral, gpt-oss, Llama-4, Phi-MoE).
    Shared experts: `shared` of them (default of the field `shared_key`, n_shared_experts;
    fixed when it is None), each of the field `shared_size_key` (Qwen2-MoE's
    shared_expert_intermediate_size, default `shared_size`) or else of the routed experts'
    width; `shared_gate`: their Linear(d, 1) gate (Qwen2-MoE).
    Placement: `first_dense`, the default of first_k_dense_replace (None: not read);
    `step_key`, a field putting experts in every n-th layer (decoder_sparse_step,
    interleave_moe_layer_step; default 1); `dense_list_key`, a list of the layers that stay
    dense (mlp_only_layers); `moe_list_key`, a list of the layers with experts, which
    overrides the step (Llama-4's moe_layers).
    `router_bias`: a bias (or e_score_correction_bias) of one value per expert on the
    router; `expert_bias`: biases on every expert's projections (gpt-oss)."""

    num_experts: int
    per_token: int | None
    size_key: str = "moe_intermediate_size"
    size: int | None = None
    shared: int = 0
    shared_key: str | None = None
    shared_size_key: str | None = None
    shared_size: int | None = None
    shared_gate: bool = False
    first_dense: int | None = None
    step_key: str | None = None
    dense_list_key: str | None = None
    moe_list_key: str | None = None
    router_bias: bool = False
    expert_bias: bool = False


@dataclass(frozen=True)
class BodyTraits:
    """What a model type's transformers code builds besides the attention projections, and
    the defaults of its configuration class.

    `tied`: tie_word_embeddings' default. `intermediate`: intermediate_size's default
    (None: the field must be given). `biases`: see Bias. `qk_norm`: the q/k norm (one of
    architecture.QK_NORMS, None: none with weights), built only when the config field
    `qk_norm_key` is true (default false) where one is named. `norms_per_layer`, `norm_bias`,
    `gated_mlp`, `sinks` (attention sinks): as in ModelBody. `head_bias_key`: the field
    that puts a bias on the output head (default false). `dense_mlp`: the field and default
    of the dense layers' width when it is not intermediate_size (Llama-4's
    intermediate_size_mlp, its experts being of intermediate_size). `experts`: a mixture of
    experts (ExpertTraits)."""

    tied: bool
    intermediate: int | None
    biases: tuple[Bias, ...] = (ATTENTION_BIAS,)
    qk_norm: str | None = None
    qk_norm_key: str | None = None
    norms_per_layer: int = 2
    norm_bias: bool = False
    gated_mlp: bool = True
    sinks: bool = False
    head_bias_key: str | None = None
    dense_mlp: tuple[str, int] | None = None
    experts: ExpertTraits | None = None


#: The experts of each mixture-of-experts model type (transformers' defaults).
_DEEPSEEK_V2_EXPERTS = ExpertTraits(
    64, None, size=1407, shared=2, shared_key="n_shared_experts", first_dense=0
)
_DEEPSEEK_V3_EXPERTS = ExpertTraits(
    256, 8, size=2048, shared=1, shared_key="n_shared_experts", first_dense=3, router_bias=True
)
_GLM4_MOE_EXPERTS = ExpertTraits(
    128, 8, size=1408, shared=1, shared_key="n_shared_experts", first_dense=1, router_bias=True
)
_GPT_OSS_EXPERTS = ExpertTraits(128, 4, "intermediate_size", router_bias=True, expert_bias=True)
_LLAMA4_EXPERTS = ExpertTraits(
    16,
    1,
    "intermediate_size",
    shared=1,
    step_key="interleave_moe_layer_step",
    moe_list_key="moe_layers",
)
_QWEN2_MOE_EXPERTS = ExpertTraits(
    60,
    4,
    size=1408,
    shared=1,
    shared_size_key="shared_expert_intermediate_size",
    shared_size=5632,
    shared_gate=True,
    step_key="decoder_sparse_step",
    dense_list_key="mlp_only_layers",
)
_QWEN3_MOE_EXPERTS = ExpertTraits(
    128, 8, size=768, step_key="decoder_sparse_step", dense_list_key="mlp_only_layers"
)

#: The model types whose whole-model body attnbench reads from the Llama family's field
#: names, each with what transformers' modeling and configuration code of that type builds.
BODY_TRAITS: dict[str, BodyTraits] = {
    "llama": BodyTraits(False, 11008, (ATTENTION_BIAS, MLP_BIAS)),
    "mistral": BodyTraits(False, 14336, ()),
    "mixtral": BodyTraits(False, 14336, (), experts=ExpertTraits(8, 2, "intermediate_size")),
    "qwen2": BodyTraits(False, 22016, (Bias(("qkv",), None, True),)),
    "qwen3": BodyTraits(False, 22016, qk_norm="head_dim"),
    "deepseek_v2": BodyTraits(
        False, 11008, (ATTENTION_BIAS, MLP_BIAS), experts=_DEEPSEEK_V2_EXPERTS
    ),
    "deepseek_v3": BodyTraits(False, 18432, experts=_DEEPSEEK_V3_EXPERTS),
    "gemma": BodyTraits(True, 24576),
    # Gemma-2's configuration class changed the default between releases (24576, then
    # 9216): a gemma2 config.json must give intermediate_size.
    "gemma2": BodyTraits(True, None, norms_per_layer=4),
    "gemma3_text": BodyTraits(True, 9216, qk_norm="head_dim", norms_per_layer=4),
    "cohere": BodyTraits(
        True, 22528, qk_norm="per_head", qk_norm_key="use_qk_norm", norms_per_layer=1
    ),
    "cohere2": BodyTraits(True, 22528, norms_per_layer=1),
    "exaone4": BodyTraits(False, 16384, (), qk_norm="head_dim"),
    "glm4": BodyTraits(False, 13696, (Bias(("qkv",), "attention_bias", True),), norms_per_layer=4),
    "glm4_moe": BodyTraits(
        False,
        10944,
        (Bias(("qkv",), "attention_bias"),),
        qk_norm="head_dim",
        qk_norm_key="use_qk_norm",
        experts=_GLM4_MOE_EXPERTS,
    ),
    "gpt_oss": BodyTraits(
        False,
        2880,
        (Bias(("qkv", "o"), "attention_bias", True),),
        sinks=True,
        experts=_GPT_OSS_EXPERTS,
    ),
    "granite": BodyTraits(False, 11008, (ATTENTION_BIAS, MLP_BIAS)),
    "llama4_text": BodyTraits(
        False, 8192, dense_mlp=("intermediate_size_mlp", 16384), experts=_LLAMA4_EXPERTS
    ),
    "olmo2": BodyTraits(False, 11008, qk_norm="full"),
    "phi3": BodyTraits(False, 8192, ()),
    "phimoe": BodyTraits(
        False,
        6400,
        norm_bias=True,
        head_bias_key="lm_head_bias",
        experts=ExpertTraits(16, 2, "intermediate_size"),
    ),
    "qwen2_moe": BodyTraits(
        False, 5632, (Bias(("qkv",), "qkv_bias", True),), experts=_QWEN2_MOE_EXPERTS
    ),
    "qwen3_moe": BodyTraits(False, 6144, qk_norm="head_dim", experts=_QWEN3_MOE_EXPERTS),
    "smollm3": BodyTraits(True, 11008, (ATTENTION_BIAS, MLP_BIAS)),
    "starcoder2": BodyTraits(
        True,
        12288,
        (Bias(("qkv", "o", "mlp"), "use_bias", True),),
        norm_bias=True,
        gated_mlp=False,
    ),
}

#: Falcon's and GPT-2's bodies, read from their own field names (_falcon_body, _gpt2_body).
FALCON_TYPES = ("falcon", "RefinedWeb", "RefinedWebModel")

#: The model_type values whose whole-model body attnbench reads (others: attention only),
#: each with transformers' default for tie_word_embeddings: it applies when a config.json
#: leaves the field out or sets it to null.
TIED_EMBEDDINGS_BY_DEFAULT: dict[str, bool] = {
    **{kind: traits.tied for kind, traits in BODY_TRAITS.items()},
    **dict.fromkeys(FALCON_TYPES, True),
    "gpt2": True,
}
BODY_MODEL_TYPES = tuple(TIED_EMBEDDINGS_BY_DEFAULT)

#: The fields that count the routed experts, one name or another by model type (each
#: configuration class maps the others it knows onto its own).
EXPERT_KEYS = ("n_routed_experts", "num_local_experts", "num_experts")


def _body(cfg: dict, kind: str, d_model: int, num_layers: int, where: str) -> ModelBody | None:
    """The network besides attention, or None for a model type attnbench does not know."""
    if kind not in BODY_MODEL_TYPES or cfg.get("vocab_size") is None:
        return None
    vocab = int_field(cfg, "vocab_size", where, maximum=MAX_VOCAB)
    tied = bool_field(cfg, "tie_word_embeddings", where, TIED_EMBEDDINGS_BY_DEFAULT[kind])
    if kind in FALCON_TYPES:
        return _falcon_body(cfg, d_model, vocab, tied, where)
    if kind == "gpt2":
        return _gpt2_body(cfg, d_model, vocab, tied, where)
    traits = BODY_TRAITS[kind]
    why = (
        f" (a {kind} config.json must give it: transformers' default changed between releases)"
        if traits.intermediate is None
        else ""
    )
    default = REQUIRED if traits.intermediate is None else traits.intermediate
    intermediate = int_field(cfg, "intermediate_size", where, default, why=why)
    dense = intermediate
    if traits.dense_mlp is not None:
        dense = int_field(cfg, traits.dense_mlp[0], where, traits.dense_mlp[1])
    biased = {
        part
        for bias in traits.biases
        if (bias.default if bias.key is None else bool_field(cfg, bias.key, where, bias.default))
        for part in bias.on
    }
    qk_norm = traits.qk_norm
    if traits.qk_norm_key is not None and not bool_field(cfg, traits.qk_norm_key, where, False):
        qk_norm = None
    head_bias = traits.head_bias_key is not None and bool_field(
        cfg, traits.head_bias_key, where, False
    )
    moe = None
    if traits.experts is not None:
        moe = _moe(cfg, traits.experts, intermediate, num_layers, where)
    return ModelBody(
        vocab,
        dense,
        gated_mlp=traits.gated_mlp,
        mlp_bias="mlp" in biased,
        qkv_bias="qkv" in biased,
        o_bias="o" in biased,
        qk_norm=qk_norm,
        norm_bias=traits.norm_bias,
        norms_per_layer=traits.norms_per_layer,
        tied_embeddings=tied,
        moe=moe,
        attention_sinks=traits.sinks,
        head_bias=head_bias,
    )


def _falcon_body(cfg: dict, d_model: int, vocab: int, tied: bool, where: str) -> ModelBody:
    """Falcon: `bias` on every projection, LayerNorms with biases; a sequential layer has
    two norms, a parallel one num_ln_in_parallel_attn (default: two with
    new_decoder_architecture, one without; Falcon2-11B writes one)."""
    bias = bool_field(cfg, "bias", where, False)
    new = bool_field(cfg, "new_decoder_architecture", where, False)
    parallel_norms = int_field(cfg, "num_ln_in_parallel_attn", where, 2 if new else 1)
    single_norm = bool_field(cfg, "parallel_attn", where, True) and parallel_norms != 2
    return ModelBody(
        vocab,
        int_field(cfg, "ffn_hidden_size", where, 4 * d_model),
        gated_mlp=False,
        mlp_bias=bias,
        qkv_bias=bias,
        o_bias=bias,
        norm_bias=True,
        norms_per_layer=1 if single_norm else 2,
        tied_embeddings=tied,
    )


def _gpt2_body(cfg: dict, d_model: int, vocab: int, tied: bool, where: str) -> ModelBody:
    """GPT-2: learned positions (n_positions), biases everywhere, LayerNorms, n_inner."""
    positions = int_field(cfg, "n_positions", where, GPT2_POSITIONS, maximum=MAX_POSITIONS)
    return ModelBody(
        vocab,
        int_field(cfg, "n_inner", where, 4 * d_model),
        gated_mlp=False,
        mlp_bias=True,
        qkv_bias=True,
        o_bias=True,
        norm_bias=True,
        tied_embeddings=tied,
        position_embeddings=positions,
    )


def _moe(
    cfg: dict, traits: ExpertTraits, intermediate: int, num_layers: int, where: str
) -> MoeSpec:
    """The experts, their placement and their biases (see ExpertTraits); a field left out
    takes the model type's default."""
    given = _given(cfg, EXPERT_KEYS, where, MAX_EXPERTS, "expert-count ")
    num_experts = traits.num_experts if given is None else given[1]
    freq = int_field(cfg, "moe_layer_freq", where, 1, maximum=MAX_LAYERS)
    if freq != 1:
        raise UsageError(f"{where}: field 'moe_layer_freq' {freq} is not supported (only 1)")
    per_token_default = REQUIRED if traits.per_token is None else traits.per_token
    per_token = int_field(cfg, "num_experts_per_tok", where, per_token_default, maximum=MAX_EXPERTS)
    if per_token > num_experts:
        bound = (
            f"{given[0]!r} ({num_experts}), the number of experts"
            if given
            else f"{num_experts}, the model type's default number of experts"
        )
        raise UsageError(
            f"{where}: field 'num_experts_per_tok' ({per_token}) must be at most {bound}"
        )
    if traits.size_key == "intermediate_size":
        size = intermediate
    else:
        size = int_field(cfg, traits.size_key, where, traits.size)
    shared = traits.shared
    if traits.shared_key is not None:
        shared = int_field(cfg, traits.shared_key, where, shared, minimum=0, maximum=MAX_EXPERTS)
    shared_size = None
    if traits.shared_size_key is not None:
        shared_size = int_field(cfg, traits.shared_size_key, where, traits.shared_size)
    dense_layers = 0
    if traits.first_dense is not None:
        dense_layers = _first_dense(cfg, traits.first_dense, num_layers, where)
    every = (
        1
        if traits.step_key is None
        else int_field(cfg, traits.step_key, where, 1, maximum=MAX_LAYERS)
    )
    dense_indices: tuple[int, ...] = ()
    if traits.dense_list_key is not None:
        dense_indices = layer_indices(cfg, traits.dense_list_key, num_layers, where) or ()
    if traits.moe_list_key is not None:
        listed = layer_indices(cfg, traits.moe_list_key, num_layers, where)
        if listed is not None:  # the layers with experts, whatever the step says
            every = 1
            dense_indices = tuple(i for i in range(num_layers) if i not in listed)
    return MoeSpec(
        num_experts=num_experts,
        experts_per_token=per_token,
        intermediate_size=size,
        shared_experts=shared,
        dense_layers=dense_layers,
        router_bias=traits.router_bias,
        shared_intermediate_size=shared_size,
        shared_expert_gate=traits.shared_gate,
        expert_bias=traits.expert_bias,
        moe_every=every,
        dense_indices=dense_indices,
    )


def _first_dense(cfg: dict, default: int, num_layers: int, where: str) -> int:
    """first_k_dense_replace: the leading layers that keep the dense MLP."""
    if cfg.get("first_k_dense_replace") is None:
        # transformers' default (DeepSeek-V3: 3) leaves a model of fewer layers all dense
        return min(default, num_layers)
    dense_layers = int_field(cfg, "first_k_dense_replace", where, minimum=0, maximum=MAX_LAYERS)
    if dense_layers > num_layers:
        raise UsageError(
            f"{where}: field 'first_k_dense_replace' ({dense_layers}) must be at most "
            f"'num_hidden_layers' ({num_layers})"
        )
    return dense_layers


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
        data = json.loads(
            text, object_pairs_hook=lambda pairs: unique_keys(pairs, where), parse_int=json_int
        )
    except json.JSONDecodeError as exc:
        raise UsageError(f"{where}: not valid JSON ({json_problem(exc)})") from None
    except RecursionError:
        raise too_deep from None
    except ValueError as exc:  # an integer of too many digits (json_int)
        raise UsageError(f"{where}: not valid JSON ({exc})") from None
    if json_depth(data) > max_depth:
        raise too_deep
    if bad := not_text(data, text):
        raise UsageError(f"{where}: {bad}")
    return special_floats(data)


#: How transformers writes the floats JSON has no literal for: {"__float__": "Infinity"}.
FLOAT_TAGS = {"Infinity": math.inf, "-Infinity": -math.inf, "NaN": math.nan}


def special_floats(data: Any) -> Any:
    """`data` with each float transformers tagged when it wrote the config (Mamba-2's
    time_step_limit [0.0, {"__float__": "Infinity"}]) read back as the float, as its
    from_json_file reads it: its configuration class refuses the tag itself."""
    if isinstance(data, dict):
        tag = data.get("__float__")
        if len(data) == 1 and isinstance(tag, str) and tag in FLOAT_TAGS:
            return FLOAT_TAGS[tag]
        return {key: special_floats(value) for key, value in data.items()}
    if isinstance(data, list):
        return [special_floats(value) for value in data]
    return data


def transformers_knows(kind: str) -> bool | None:
    """Whether transformers has a configuration class of model type `kind`; None when it
    is not installed. A type with a package of its own (transformers/models/<type>) is
    found without importing transformers; any other (a multimodal model's '<type>_text',
    'xlm-roberta') is looked up in its table of types, which takes a second or two."""
    spec = importlib.util.find_spec("transformers")
    if spec is None or spec.origin is None:
        return None
    if (Path(spec.origin).parent / "models" / kind).is_dir():
        return True
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    return kind in CONFIG_MAPPING_NAMES


def load_hf_config(path: str | Path) -> ModelSpec:
    """Read config.json at `path`; every problem is a UsageError naming the file and field.
    The model is named by `_name_or_path`, else by the file's stem (its folder's name for
    a file called config.json), quoted (errors.typed) where it would not print as one
    line of plain text. Its note says so when it is named after its file, and when its
    model_type is none attnbench has formulas for (read from the common fields, which
    nothing of the type's own checks)."""
    path = Path(path)
    text = read_user_file(path, "hf_config", limit=MAX_CONFIG_BYTES)
    where = str(shown_path(path))
    cfg = parse_json(text, where)
    name = str_field(cfg, "_name_or_path", where) if isinstance(cfg, dict) else None
    # A model's own folder holds config.json; a folder of configs names each by its file.
    fallback = path.parent.name if path.stem == "config" and path.parent.name else path.stem
    spec = spec_from_hf_config(cfg, typed(name or fallback), where)
    notes = [spec.note] if spec.note else []
    inner = language_model(cfg, where) if has_text_config(cfg, where) else cfg
    kind = str_field(inner, "model_type", where) or ""
    # True, False, or None when transformers is not installed
    known = kind in BODY_MODEL_TYPES or kind in HYBRIDS or (bool(kind) and transformers_knows(kind))
    if not known:
        what = f"model_type {kind!r}" if kind else "a config without a model_type"
        by = "nor transformers" if known is False else "(transformers is not installed)"
        notes.append(
            f"{what}: known neither to attnbench's formulas {by}; its attention is read "
            "from the common fields (hidden_size, num_attention_heads, "
            "num_key_value_heads, head_dim), unchecked"
        )
    stored = None
    if quantised := _quantisation(cfg, where):
        said, stored = quantised
        notes.append(said)
    if stored is not None and stored.group is not None and stored.group > spec.d_model:
        raise UsageError(
            f"{where}: field 'quantization_config.group_size': {stored.group:,} exceeds the "
            f"{spec.d_model:,} inputs of a weight row (hidden_size; a scale group lies within "
            "one row)"
        )
    if not name:
        where = "folder" if path.stem == "config" and path.parent.name else "file"
        notes.append(f"named after its {where}: the config has no _name_or_path")
    note = "; ".join(notes) or None
    return replace(spec, config_path=str(path), note=note, stored_weights=stored)


def _quantisation(cfg: dict, where: str) -> tuple[str, StoredWeights | None] | None:
    """What a quantised checkpoint's config says of its weights: the note that says it
    ('quantization_config (awq, 4 bits, groups of 128): ...') and the weights as stored,
    in fit's and predict's terms, where attnbench can tell them (None where it cannot:
    its formats differ in their scales, and some quantise the experts alone; the note then
    says the weights are counted in the model's dtype). None for a config without one."""
    quant = object_field(cfg, "quantization_config", where)
    if quant is None:
        return None
    method, bits = quant.get("quant_method"), quant.get("bits")
    bits = bits if _whole(bits) else None
    group = quant.get("group_size") or quant.get("q_group_size")
    said = [str(method) if isinstance(method, str) else "a method it does not name"]
    said += [f"{bits} bits"] if bits is not None else []
    said += [f"groups of {group:,}"] if _whole(group) and group > 0 else []
    stored = _stored_as(quant, method, bits, group)
    if stored is None:
        return (
            f"quantization_config ({', '.join(said)}) not read: the weights are counted in "
            "the model's dtype (fit's and predict's weights_dtype and weights_group count "
            "them as the checkpoint stores them)",
            None,
        )
    caveat = ""  # how what is counted differs from what is stored
    if stored.dtype == "int4" and stored.group is None:
        caveat = (
            ", its scales per channel counted as int4's default groups of 128 (a scale per "
            "128 weights more)"
        )
    elif stored.dtype in FLOAT8_WEIGHTS:  # experiments.target.served_weights
        caveat = (
            ", on a GPU without float8 as 8-bit weights alone (int8's bytes and "
            "dequantisation, as vLLM's FP8 Marlin runs them)"
        )
    return (
        f"quantization_config ({', '.join(said)}): fit, and predict on a named GPU, count "
        f"the weights as the checkpoint stores them, {stored.settings()}{caveat} "
        "(weights_dtype sets others); params counts them in the model's dtype",
        stored,
    )


#: Spellings of the quantisation methods whose weights one of WEIGHT_DTYPES stores as the
#: checkpoint does, where the method says no bits (an integer method says its bits).
_METHOD_DTYPES = {"mxfp4": "mxfp4", "fp8": "float8_e4m3fn", "nvfp4": "nvfp4"}


def _whole(value: object) -> TypeGuard[int]:
    """A whole number as JSON gives one (an int, not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _stored_as(
    quant: dict, method: object, bits: int | None, group: object
) -> StoredWeights | None:
    """The weights as a checkpoint stores them, where its quantization_config says so: a
    4-bit float or float8 method (ModelOpt's in its quant_algo), AWQ's and GPTQ's integers
    with their group, or compressed-tensors' scheme (_compressed); keep_attention too where
    the modules it leaves unconverted are the attention's (gpt-oss's, NVIDIA's FP4
    checkpoints'). None where it cannot tell."""
    name = str(quant.get("quant_algo") or method or "").lower()
    dtype = _METHOD_DTYPES.get(name)
    scale_group = None
    if dtype is None and name in ("awq", "gptq") and bits in (4, 8):
        dtype = f"int{bits}"
        scale_group = group if _whole(group) and group > 0 else None
    if dtype is None and name == "compressed-tensors":
        dtype, scale_group = _compressed(quant)
    if dtype is None:
        return None
    skipped: list[str] = []
    for key in ("modules_to_not_convert", "exclude_modules", "ignore", "ignored_layers"):
        listed = quant.get(key)
        listed = [listed] if isinstance(listed, str) else listed
        if isinstance(listed, list):
            skipped += [str(m) for m in listed]
    kept = any("attn" in m and not any(v in m for v in _VISION) for m in skipped)
    return StoredWeights(dtype, scale_group, kept)


#: Module names of a multimodal checkpoint's vision tower, whose attention a quantiser may
#: leave unconverted while it converts the language model's.
_VISION = ("vision", "visual")


def _compressed(quant: dict) -> tuple[str | None, int | None]:
    """The weights' dtype and scale group of a compressed-tensors checkpoint (llm-compressor's
    schemes), where every group of its config_groups quantises alike: float8 weights and
    activations (FP8, FP8_DYNAMIC), 4-bit floats in NVFP4's blocks of 16 with their
    activations or MXFP4's of 32 alone, or 4- or 8-bit integer weights alone, in groups or
    per channel (W4A16, W8A16). (None, None) for any other scheme (W8A8 integers, whose
    activations attnbench does not quantise; NVFP4A16) or one it cannot read."""
    groups = quant.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        return None, None
    schemes = set()
    for scheme in groups.values():
        weights = scheme.get("weights") if isinstance(scheme, dict) else None
        if not isinstance(weights, dict):
            return None, None
        inputs = scheme.get("input_activations")
        bits, kind, strategy = weights.get("num_bits"), weights.get("type"), weights.get("strategy")
        group = weights.get("group_size") if strategy in ("group", "tensor_group") else None
        schemes.add((bits, kind, group if _whole(group) and group > 0 else None, bool(inputs)))
    if len(schemes) != 1:
        return None, None
    ((bits, kind, group, inputs),) = schemes
    if (bits, kind) == (8, "float"):
        return ("float8_e4m3fn", None) if inputs else (None, None)
    if (bits, kind) == (4, "float"):  # NVFP4 (blocks of 16, inputs too); MXFP4A16's 32
        fp4 = {(16, True): "nvfp4", (32, False): "mxfp4"}.get((group, inputs))
        return fp4, None
    if kind == "int" and bits in (4, 8) and not inputs:
        return f"int{bits}", group
    return None, None
