"""Which layers of a config.json attend and which keep a fixed-size state, as transformers'
code of each hybrid model type reads them, and the size of each state.

A hybrid model (Qwen3-Next, Jamba, Bamba, Falcon-H1, Granite-4.0-H, Nemotron-H, LFM2,
MiniMax-Text-01, Zamba2, ...) declares each layer's kind in a field of its own:
`layer_types` (Qwen3-Next, Granite-4.0-H, LFM2, MiniMax; "mamba" and "attention" are the
legacy names of "linear_attention" and "full_attention"), `layers_block_type` (Zamba2),
`hybrid_override_pattern` (Nemotron-H: M Mamba-2, * attention, - MLP, E experts),
`attn_layer_indices` (Bamba), `attn_layer_period` and `attn_layer_offset` (Jamba),
`full_attention_interval` (Qwen3-Next), `full_attn_idxs` (LFM2), each with its
configuration class's default where the field is left out. Each layer is then:

- an attention layer (full, sliding or chunked): it caches K and V per token;
- a state layer (Mamba, Mamba-2, gated DeltaNet, lightning attention, a short
  convolution): it keeps a state of fixed size per sequence (StateSpec), whatever the
  context;
- both (Falcon-H1's parallel attention and Mamba-2; Zamba2's hybrid layers, a shared
  attention block before a Mamba-2 mixer, each keeping its own K and V);
- neither (Nemotron-H's MLP and MoE layers).

The state's shapes are those transformers' cache holds after a prefill, in the dtype it
keeps them in: the short convolution's last `kernel` inputs of its channels, in the
model's dtype; the recurrent state (Mamba's SSM state per channel, Mamba-2's per head, a
gated DeltaNet's key x value matrix per head) in float32 whatever the model's dtype, as
transformers' scans return it; MiniMax's lightning-attention matrix per head in the
model's dtype. (A serving engine may keep the recurrent state in the model's dtype:
vLLM's mamba_ssm_cache_dtype defaults to it.)

A model type attnbench does not list here is read as all attention only when its config
declares nothing else: a `layer_types` of another kind, or any field of HYBRID_FIELDS,
leaves its layer kinds unknown (the cache is then refused, never counted as if every
layer attended).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError, brief
from .architecture import StateSpec
from .config_fields import REQUIRED, int_field, layer_indices, number_field, object_field

#: The layer types of transformers' configs that cache K and V ("attention": legacy).
ATTENTION_TYPES = {"full_attention", "sliding_attention", "chunked_attention", "attention"}
#: The layer types that keep a state ("mamba": legacy), that hold both (a state layer
#: with attention beside it), and that cache nothing.
STATE_TYPES = {"linear_attention", "mamba", "conv"}
BOTH_TYPES = {"hybrid"}
NO_CACHE_TYPES = {"mlp", "moe"}

#: Config fields that declare layers other than attention: a model type not listed in
#: HYBRIDS that has one of them is not read as all attention.
HYBRID_FIELDS = (
    "layers_block_type",
    "hybrid_override_pattern",
    "attn_layer_indices",
    "attn_layer_period",
    "attn_layer_offset",
    "full_attn_idxs",
    "full_attention_interval",
    "attn_type_list",
    "linear_attn_config",
    "mamba_d_state",
    "mamba_n_heads",
    "ssm_cfg",
    "state_size",
    "conv_L_cache",
    "linear_conv_kernel_dim",
    "block_types",
)


@dataclass(frozen=True)
class LayerPlan:
    """What each layer of a model caches: `types`, one transformers layer type per layer
    ("full_attention", "sliding_attention", "linear_attention", "hybrid", "mlp", ...),
    and `state`, what its state layers keep. `num_layers` is len(types): Nemotron-H's
    pattern sets its layer count."""

    types: tuple[str, ...]
    state: StateSpec | None

    @property
    def num_layers(self) -> int:
        return len(self.types)

    @property
    def attends(self) -> tuple[bool, ...]:
        return tuple(t in ATTENTION_TYPES or t in BOTH_TYPES for t in self.types)

    @property
    def states(self) -> tuple[StateSpec | None, ...]:
        keeps = STATE_TYPES | BOTH_TYPES
        return tuple(self.state if t in keeps else None for t in self.types)


# --- reading the fields -------------------------------------------------------------------


#: The largest value of a field read here: far above any model's widths and heads.
_LARGEST = 2**24


def _int(cfg: dict, key: str, where: str, default: int | None, minimum: int = 1) -> int:
    """cfg[key] as an integer in [minimum, _LARGEST]; `default` when it is left out (None:
    the field must be given)."""
    given = REQUIRED if default is None else default
    return int_field(cfg, key, where, given, minimum=minimum, maximum=_LARGEST)


def _number(cfg: dict, key: str, where: str, default: float) -> float:
    """A factor (Mamba's expand): a number in (0, 64]."""
    return number_field(cfg, key, where, default, maximum=64)


def listed_types(
    cfg: dict, key: str, num_layers: int | None, where: str, known: set[str]
) -> list[str] | None:
    """The layer types listed under `key` (one string per layer; `num_layers` None: any
    count), each one of `known`; None when the field is left out."""
    listed = cfg.get(key)
    if listed is None:
        return None
    count = "" if num_layers is None else f"{num_layers} "
    if (
        not isinstance(listed, list)
        or not listed
        or (num_layers is not None and len(listed) != num_layers)
        or not all(isinstance(t, str) for t in listed)
    ):
        raise UsageError(f"{where}: field {key!r} must list {count}layer types (strings)")
    unknown = sorted(set(listed) - known)
    if unknown:
        raise UsageError(
            f"{where}: field {key!r} holds layer type {unknown[0]!r}; expected "
            f"{', '.join(sorted(known))}"
        )
    return listed


def _every(interval: int, num_layers: int, offset: int = 0) -> list[bool]:
    """True for layer i when i % interval == offset."""
    return [i % interval == offset for i in range(num_layers)]


def _types(attends: list[bool], state_type: str = "linear_attention") -> list[str]:
    return ["full_attention" if a else state_type for a in attends]


# --- the states -----------------------------------------------------------------------------


def mamba2_state(
    cfg: dict,
    where: str,
    *,
    heads: str,
    head_dim: str | None,
    groups: str,
    state: str,
    kernel: str,
    expand: str,
    defaults: dict[str, Any],
    d_model: int,
    intermediate: str | None = None,
) -> StateSpec:
    """A Mamba-2 mixer's state: the convolution over x, B and C (intermediate + 2 * groups
    * state channels, `kernel` columns) in the model's dtype, and the SSM state (heads x
    head_dim x state) in float32, read from the model type's own field names."""
    n_heads = _int(cfg, heads, where, defaults.get(heads))
    n_groups = _int(cfg, groups, where, defaults.get(groups))
    d_state = _int(cfg, state, where, defaults.get(state))
    d_conv = _int(cfg, kernel, where, defaults.get(kernel))
    inner = cfg.get(intermediate) if intermediate else None
    if inner is not None:
        inner = _int(cfg, intermediate, where, None)  # type: ignore[arg-type]
    elif head_dim is not None and cfg.get(head_dim) not in (None, "auto"):
        inner = n_heads * _int(cfg, head_dim, where, None)
    else:
        inner = int(_number(cfg, expand, where, defaults.get(expand, 2)) * d_model)
    if inner % n_heads:
        raise UsageError(
            f"{where}: field {heads!r} ({n_heads}) must divide the Mamba width ({inner:,})"
        )
    conv_dim = inner + 2 * n_groups * d_state
    return StateSpec(
        "mamba2",
        conv=conv_dim * d_conv,
        recurrent=inner * d_state,
        recurrent_dtype="float32",
        shapes=f"conv ({conv_dim}, {d_conv}), ssm ({n_heads}, {inner // n_heads}, {d_state}) "
        "float32",
    )


def mamba_state(cfg: dict, where: str, d_model: int, heads_key: str | None = None) -> StateSpec:
    """A Mamba (1) mixer's state: the convolution over its intermediate channels
    (mamba_d_conv columns) in the model's dtype, and the SSM state (intermediate x
    mamba_d_state) in float32; Zamba's scans it in `heads_key` heads (same elements)."""
    d_state = _int(cfg, "mamba_d_state", where, 16)
    d_conv = _int(cfg, "mamba_d_conv", where, 4)
    inner = int(_number(cfg, "mamba_expand", where, 2) * d_model)
    heads = 1 if heads_key is None else _int(cfg, heads_key, where, 2)
    if inner % heads:
        raise UsageError(f"{where}: field {heads_key!r} ({heads}) must divide {inner:,}")
    ssm = f"({inner}, {d_state})" if heads == 1 else f"({heads}, {inner // heads}, {d_state})"
    return StateSpec(
        "mamba",
        conv=inner * d_conv,
        recurrent=inner * d_state,
        recurrent_dtype="float32",
        shapes=f"conv ({inner}, {d_conv}), ssm {ssm} float32",
    )


def gated_deltanet_state(cfg: dict, where: str, dims: Dims | None = None) -> StateSpec:
    """A gated DeltaNet's state (Qwen3-Next, Qwen3.5, OLMo-Hybrid): the convolution over q,
    k and v (2 * key heads * key dim + value heads * value dim channels,
    linear_conv_kernel_dim columns) in the model's dtype, and a key dim x value dim matrix
    per value head in float32. The defaults are Qwen3-Next's, or with `dims` OLMo-Hybrid's
    (heads as the attention's, key dim 0.75 * d_model / heads, value dim twice it)."""
    if dims is None:
        k_heads = _int(cfg, "linear_num_key_heads", where, 16)
        v_heads = _int(cfg, "linear_num_value_heads", where, 32)
        k_dim = _int(cfg, "linear_key_head_dim", where, 128)
        v_dim = _int(cfg, "linear_value_head_dim", where, 128)
    else:
        k_heads = _int(cfg, "linear_num_key_heads", where, dims.num_heads)
        v_heads = _int(cfg, "linear_num_value_heads", where, dims.num_heads)
        k_dim = _int(cfg, "linear_key_head_dim", where, max(1, int(0.75 * dims.d_model / k_heads)))
        v_dim = _int(cfg, "linear_value_head_dim", where, 2 * k_dim)
    kernel = _int(cfg, "linear_conv_kernel_dim", where, 4)
    conv_dim = 2 * k_heads * k_dim + v_heads * v_dim
    return StateSpec(
        "gated deltanet",
        conv=conv_dim * kernel,
        recurrent=v_heads * k_dim * v_dim,
        recurrent_dtype="float32",
        shapes=f"conv ({conv_dim}, {kernel}), recurrent ({v_heads}, {k_dim}, {v_dim}) float32",
    )


def kimi_delta_state(cfg: dict, where: str) -> StateSpec:
    """Kimi Delta Attention: one short convolution over q, k and v together (3 * heads *
    head_dim channels, short_conv_kernel_size columns) in the model's dtype, and a head_dim
    x head_dim matrix per head in float32; linear_attn_config's values over the top-level
    linear_* fields, as KimiLinearConfig reads them."""
    nested = object_field(cfg, "linear_attn_config", where) or {}
    heads = _int(nested, "num_heads", where, _int(cfg, "linear_num_heads", where, 32))
    head_dim = _int(nested, "head_dim", where, _int(cfg, "linear_head_dim", where, 128))
    kernel = _int(
        nested, "short_conv_kernel_size", where, _int(cfg, "linear_conv_kernel_dim", where, 4)
    )
    conv_dim = 3 * heads * head_dim
    return StateSpec(
        "kimi delta attention",
        conv=conv_dim * kernel,
        recurrent=heads * head_dim * head_dim,
        recurrent_dtype="float32",
        shapes=f"conv ({conv_dim}, {kernel}), recurrent ({heads}, {head_dim}, {head_dim}) float32",
    )


def lightning_state(cfg: dict, where: str, d_model: int, num_heads: int) -> StateSpec:
    """MiniMax's lightning attention: a head_dim x head_dim matrix per head (K^T V, decayed),
    in the model's dtype."""
    head_dim = _int(cfg, "head_dim", where, d_model // num_heads)
    return StateSpec(
        "lightning attention",
        conv=0,
        recurrent=num_heads * head_dim * head_dim,
        shapes=f"recurrent ({num_heads}, {head_dim}, {head_dim})",
    )


def short_conv_state(cfg: dict, where: str, d_model: int) -> StateSpec:
    """LFM2's gated short convolution: its last conv_L_cache inputs of d_model channels."""
    kernel = _int(cfg, "conv_L_cache", where, 3)
    return StateSpec(
        "short conv", conv=d_model * kernel, recurrent=0, shapes=f"conv ({d_model}, {kernel})"
    )


# --- the model types --------------------------------------------------------------------------

#: Nemotron-H's pattern letters, as NemotronHConfig reads hybrid_override_pattern.
NEMOTRON_LETTERS = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe"}


@dataclass(frozen=True)
class Dims:
    """The model's own dimensions, which some states are made of; `given_layers`, the
    layer count the config gives (None: none)."""

    d_model: int
    num_heads: int
    given_layers: int | None

    def layers(self, where: str) -> int:
        if self.given_layers is None:
            raise UsageError(f"{where}: missing field 'num_hidden_layers'")
        return self.given_layers


def _qwen3_next(cfg: dict, dims: Dims, where: str) -> LayerPlan:
    known = ATTENTION_TYPES | {"linear_attention"}
    types = listed_types(cfg, "layer_types", dims.layers(where), where, known)
    if types is None:
        every = _int(cfg, "full_attention_interval", where, 4)
        types = _types(_every(every, dims.layers(where), every - 1))
    return LayerPlan(tuple(types), gated_deltanet_state(cfg, where))


def _jamba(cfg: dict, dims: Dims, where: str) -> LayerPlan:
    period = _int(cfg, "attn_layer_period", where, 8)
    offset = _int(cfg, "attn_layer_offset", where, 4, minimum=0)
    if offset >= period:
        raise UsageError(
            f"{where}: field 'attn_layer_offset' ({offset}) must be less than "
            f"'attn_layer_period' ({period})"
        )
    types = _types(_every(period, dims.layers(where), offset))
    return LayerPlan(tuple(types), mamba_state(cfg, where, dims.d_model))


def _mamba2(**fields: Any) -> Callable[[dict, Dims, str], StateSpec]:
    def state(cfg: dict, dims: Dims, where: str) -> StateSpec:
        return mamba2_state(cfg, where, d_model=dims.d_model, **fields)

    return state


#: The Mamba-2 fields of Bamba, Granite-4.0-H and Falcon-H1, with their defaults.
_BAMBA_FIELDS: dict[str, Any] = {
    "heads": "mamba_n_heads",
    "head_dim": "mamba_d_head",
    "groups": "mamba_n_groups",
    "state": "mamba_d_state",
    "kernel": "mamba_d_conv",
    "expand": "mamba_expand",
    "defaults": {
        "mamba_n_heads": 128,
        "mamba_n_groups": 1,
        "mamba_d_state": 256,
        "mamba_d_conv": 4,
        "mamba_expand": 2,
    },
}
_BAMBA_STATE = _mamba2(**_BAMBA_FIELDS)


def _bamba(cfg: dict, dims: Dims, where: str) -> LayerPlan:
    attention = layer_indices(cfg, "attn_layer_indices", dims.layers(where), where) or set()
    types = _types([i in attention for i in range(dims.layers(where))])
    return LayerPlan(tuple(types), _BAMBA_STATE(cfg, dims, where))


def _falcon_h1(cfg: dict, dims: Dims, where: str) -> LayerPlan:
    state = _mamba2(**_BAMBA_FIELDS, intermediate="mamba_d_ssm")(cfg, dims, where)
    return LayerPlan(("hybrid",) * dims.layers(where), state)


def _granite_hybrid(cfg: dict, dims: Dims, where: str) -> LayerPlan:
    known = ATTENTION_TYPES | {"linear_attention", "mamba"}
    types = listed_types(cfg, "layer_types", dims.layers(where), where, known)
    if types is None:
        types = listed_types(cfg, "layers_block_type", dims.layers(where), where, known)
    return LayerPlan(
        tuple(types or ["linear_attention"] * dims.layers(where)), _BAMBA_STATE(cfg, dims, where)
    )


def _nemotron_h(cfg: dict, dims: Dims, where: str) -> LayerPlan:
    known = {"full_attention", "attention", "linear_attention", "mamba", "mlp", "moe"}
    types = listed_types(cfg, "layers_block_type", None, where, known)
    if types is None:
        pattern = cfg.get("hybrid_override_pattern")
        if pattern is None:
            types = ["linear_attention", "moe", "full_attention", "mlp"]
        elif isinstance(pattern, str) and pattern and set(pattern) <= set(NEMOTRON_LETTERS):
            types = [NEMOTRON_LETTERS[c] for c in pattern]
        else:
            raise UsageError(
                f"{where}: field 'hybrid_override_pattern' is {brief(pattern)}; expected "
                "letters M (Mamba-2), * (attention), - (MLP) and E (experts)"
            )
    state = _mamba2(
        heads="mamba_num_heads",
        head_dim="mamba_head_dim",
        groups="n_groups",
        state="ssm_state_size",
        kernel="conv_kernel",
        expand="expand",
        defaults={
            "mamba_num_heads": 128,
            "n_groups": 8,
            "ssm_state_size": 128,
            "conv_kernel": 4,
            "expand": 2,
        },
    )(_nemotron_aliases(cfg), dims, where)
    return LayerPlan(tuple(types), state)


def _nemotron_aliases(cfg: dict) -> dict:
    """NemotronHConfig's legacy names (mamba_n_groups, mamba_d_conv, ...) as its own."""
    legacy = {"mamba_n_groups": "n_groups", "mamba_d_conv": "conv_kernel", "mamba_expand": "expand"}
    return {**cfg, **{new: cfg[old] for old, new in legacy.items() if cfg.get(old) is not None}}


def _lfm2(cfg: dict, dims: Dims, where: str) -> LayerPlan:
    known = ATTENTION_TYPES | {"conv"}
    types = listed_types(cfg, "layer_types", dims.layers(where), where, known)
    if types is None:
        attention = layer_indices(cfg, "full_attn_idxs", dims.layers(where), where)
        if attention is None:
            attention = set(range(dims.layers(where)))
        types = _types([i in attention for i in range(dims.layers(where))], "conv")
    return LayerPlan(tuple(types), short_conv_state(cfg, where, dims.d_model))


def _lfm2_moe(cfg: dict, dims: Dims, where: str) -> LayerPlan:
    if cfg.get("layer_types") is None:  # Lfm2MoeConfig has no default
        raise UsageError(f"{where}: missing field 'layer_types' (an lfm2_moe model lists them)")
    return _lfm2(cfg, dims, where)


def _minimax(cfg: dict, dims: Dims, where: str) -> LayerPlan:
    known = ATTENTION_TYPES | {"linear_attention"}
    types = listed_types(cfg, "layer_types", dims.layers(where), where, known)
    if types is None and cfg.get("attn_type_list") is not None:
        types = _attn_type_list(cfg, dims.layers(where), where)
    if types is None:
        types = _types(_every(2, dims.layers(where)))  # MiniMaxConfig: even layers attend
    state = lightning_state(cfg, where, dims.d_model, dims.num_heads)
    return LayerPlan(tuple(types), state)


def _zamba2(cfg: dict, dims: Dims, where: str) -> LayerPlan:
    known = {"linear_attention", "mamba", "hybrid"}
    types = listed_types(cfg, "layers_block_type", dims.layers(where), where, known)
    if types is None:
        types = ZAMBA2_DEFAULT_TYPES
    state = _mamba2(
        heads="n_mamba_heads",
        head_dim="mamba_headdim",
        groups="mamba_ngroups",
        state="mamba_d_state",
        kernel="mamba_d_conv",
        expand="mamba_expand",
        defaults={
            "n_mamba_heads": 8,
            "mamba_ngroups": 1,
            "mamba_d_state": 64,
            "mamba_d_conv": 4,
            "mamba_expand": 2,
        },
    )(cfg, dims, where)
    return LayerPlan(tuple(types), state)


def _attn_type_list(cfg: dict, num_layers: int, where: str) -> list[str]:
    """MiniMax's own code's layer list: 1 softmax attention, 0 lightning attention."""
    listed = cfg["attn_type_list"]
    if not (
        isinstance(listed, list)
        and len(listed) == num_layers
        and all(v in (0, 1) and not isinstance(v, bool) for v in listed)
    ):
        raise UsageError(f"{where}: field 'attn_type_list' must list {num_layers} 0s and 1s")
    return _types([v == 1 for v in listed])


#: The model types of MiniMax's own code (trust_remote_code) for the architecture that
#: transformers names "minimax": its conversion keeps every field, and lists the layers
#: of attn_type_list as layer_types.
MINIMAX_CUSTOM_TYPES = ("minimax_text_01", "minimax_m1")


def as_transformers(cfg: dict) -> dict:
    """`cfg` as transformers reads the architecture: a config of MiniMax's own code as
    its conversion to model_type "minimax" (layer_types from attn_type_list); any other
    config as it is."""
    if cfg.get("model_type") not in MINIMAX_CUSTOM_TYPES:
        return cfg
    converted = {k: v for k, v in cfg.items() if k not in ("attn_type_list", "architectures")}
    listed = cfg.get("attn_type_list")
    if isinstance(listed, list):
        converted["layer_types"] = _types([v == 1 for v in listed])
    return {**converted, "model_type": "minimax"}


def _zamba(cfg: dict, dims: Dims, where: str) -> LayerPlan:
    known = {"linear_attention", "mamba", "hybrid"}
    layers = dims.layers(where)
    types = listed_types(cfg, "layers_block_type", layers, where, known)
    if types is None:  # ZambaConfig: two Mamba layers, a hybrid, then every period-th
        period = _int(cfg, "attn_layer_period", where, 6)
        offset = _int(cfg, "attn_layer_offset", where, 4, minimum=0)
        rest = ["hybrid" if a else "linear_attention" for a in _every(period, layers - 3, offset)]
        types = ["linear_attention", "linear_attention", "hybrid", *rest][:layers]
    return LayerPlan(tuple(types), mamba_state(cfg, where, dims.d_model, "n_mamba_heads"))


def _kimi_linear(cfg: dict, dims: Dims, where: str) -> LayerPlan:
    layers = dims.layers(where)
    known = ATTENTION_TYPES | {"linear_attention"}
    types = listed_types(cfg, "layer_types", layers, where, known)
    nested = object_field(cfg, "linear_attn_config", where) or {}
    if types is None and "full_attn_layers" in nested:
        full = {i - 1 for i in layer_indices(nested, "full_attn_layers", layers + 1, where) or ()}
        types = _types([i in full for i in range(layers)])
    if types is None:  # KimiLinearConfig: every 4th layer from the 5th
        types = _types([i > 0 and i % 4 == 0 for i in range(layers)])
    return LayerPlan(tuple(types), kimi_delta_state(cfg, where))


def _olmo_hybrid(cfg: dict, dims: Dims, where: str) -> LayerPlan:
    layers = dims.layers(where)
    known = ATTENTION_TYPES | {"linear_attention"}
    types = listed_types(cfg, "layer_types", layers, where, known)
    if types is None:  # OlmoHybridConfig: every 4th layer attends, at least the last
        attends = _every(4, layers, 3)
        attends[-1] = attends[-1] or not any(attends)
        types = _types(attends)
    return LayerPlan(tuple(types), gated_deltanet_state(cfg, where, dims))


#: Zamba2Config's layers when its config lists none (54 layers).
ZAMBA2_DEFAULT_TYPES = (
    ["linear_attention"]
    + (["linear_attention"] * 5 + ["hybrid"]) * 7
    + ["linear_attention"] * 4
    + ["hybrid"]
    + ["linear_attention"] * 3
    + ["hybrid"]
    + ["linear_attention"] * 2
)

#: The hybrid model types attnbench reads, each with how its config declares its layers.
HYBRIDS: dict[str, Callable[[dict, Dims, str], LayerPlan]] = {
    "qwen3_next": _qwen3_next,
    **dict.fromkeys(("qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"), _qwen3_next),
    "olmo_hybrid": _olmo_hybrid,
    "kimi_linear": _kimi_linear,
    "zamba": _zamba,
    "jamba": _jamba,
    "bamba": _bamba,
    "falcon_h1": _falcon_h1,
    "granitemoehybrid": _granite_hybrid,
    "nemotron_h": _nemotron_h,
    "lfm2": _lfm2,
    "lfm2_moe": _lfm2_moe,
    "minimax": _minimax,
    **dict.fromkeys(MINIMAX_CUSTOM_TYPES, _minimax),
    "zamba2": _zamba2,
}


def layer_plan(cfg: dict, kind: str, dims: Dims, where: str) -> LayerPlan:
    """The layers of a hybrid model type of HYBRIDS."""
    plan = HYBRIDS[kind](cfg, dims, where)
    # NemotronHConfig takes its pattern's length, whatever num_hidden_layers says
    if kind != "nemotron_h" and dims.given_layers not in (None, plan.num_layers):
        raise UsageError(
            f"{where}: the config declares {plan.num_layers} layers' kinds for "
            f"'num_hidden_layers' {dims.given_layers}"
        )
    return plan


def unknown_kinds(cfg: dict, kind: str) -> str | None:
    """Why the layer kinds of a model type attnbench does not read as a hybrid are not
    known: a layer type that is not attention in `layer_types`, or a field that declares
    layers of other kinds (HYBRID_FIELDS); None when every layer attends."""
    listed = cfg.get("layer_types")
    if isinstance(listed, list):
        others = [t for t in listed if not (isinstance(t, str) and t in ATTENTION_TYPES)]
        if others:
            return (
                f"model_type {kind!r} declares layers of type {brief(others[0])} (field "
                "'layer_types'), which attnbench cannot size"
            )
    listed = cfg.get("attn_type_list")  # MiniMax's: 1 softmax attention on every layer
    if isinstance(listed, list) and listed and all(v == 1 for v in listed):
        cfg = {k: v for k, v in cfg.items() if k != "attn_type_list"}
    field = next((f for f in HYBRID_FIELDS if cfg.get(f) is not None), None)
    if field is not None:
        return (
            f"model_type {kind!r} declares layers other than attention (field {field!r}), "
            "which attnbench cannot size"
        )
    return None
