"""What attnbench knows of a model's architecture: attention shape, KV-cache layout and the
rest of the network (embeddings, MLP or mixture of experts, norms, output head).

Presets (presets.py) and config.json files (hf_config.py) both produce a ModelSpec.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import UsageError
from ..model.dtypes import packed_bytes
from ..model.shapes import AttentionShape


@dataclass(frozen=True)
class MlaSpec:
    """Multi-head latent attention (DeepSeek-V2/V3). The cache holds, per token and layer,
    one latent of kv_lora_rank plus the shared RoPE key of qk_rope_head_dim, not K and V
    per head. Queries are low-rank too when q_lora_rank is set."""

    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    q_lora_rank: int | None = None

    @property
    def latent_dim(self) -> int:
        """Elements cached per token per layer: kv_lora_rank + qk_rope_head_dim."""
        return self.kv_lora_rank + self.qk_rope_head_dim


@dataclass(frozen=True)
class MoeSpec:
    """A mixture-of-experts MLP: `num_experts` routed experts of `intermediate_size` each
    (gated), `experts_per_token` of them per token, and a router of one weight row per
    expert.

    Shared experts, which every token goes through: `shared_experts` of
    `shared_intermediate_size` each (None: the routed experts' intermediate_size), held as
    one gated MLP of their summed width (DeepSeek, GLM-4-MoE: n_shared_experts x
    moe_intermediate_size; Qwen2-MoE: one of shared_expert_intermediate_size; Llama-4: one
    of the experts' size). `shared_expert_gate`: the shared experts' output is scaled by a
    sigmoid gate, Linear(d_model, 1) without bias (Qwen2-MoE).

    `router_bias` adds one value per routed expert to the router: gpt-oss's router bias,
    and DeepSeek-V3's and GLM-4-MoE's e_score_correction_bias, a buffer in transformers
    that checkpoints store, so it is counted as the checkpoint counts it. `expert_bias`:
    each routed expert has biases on its gate and up projections (2 x intermediate_size)
    and on its down projection (d_model), as gpt-oss's have.

    Which layers have the experts (the others keep the dense MLP, of
    ModelBody.intermediate_size): layer i (from 0) does when i >= `dense_layers`
    (DeepSeek's and GLM-4-MoE's first_k_dense_replace), i + 1 is a multiple of `moe_every`
    (Qwen-MoE's decoder_sparse_step, Llama-4's interleave_moe_layer_step) and i is not in
    `dense_indices` (Qwen-MoE's mlp_only_layers; the layers Llama-4's moe_layers leaves
    out)."""

    num_experts: int
    experts_per_token: int
    intermediate_size: int
    shared_experts: int = 0
    dense_layers: int = 0
    router_bias: bool = False
    shared_intermediate_size: int | None = None
    shared_expert_gate: bool = False
    expert_bias: bool = False
    moe_every: int = 1
    dense_indices: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not 1 <= self.experts_per_token <= self.num_experts:
            raise ValueError(
                f"experts_per_token {self.experts_per_token} must be between 1 and "
                f"num_experts {self.num_experts}"
            )
        if self.intermediate_size <= 0 or self.shared_experts < 0 or self.dense_layers < 0:
            raise ValueError(
                "intermediate_size must be positive, shared_experts and dense_layers >= 0"
            )
        if self.shared_intermediate_size is not None and self.shared_intermediate_size <= 0:
            raise ValueError("shared_intermediate_size must be positive or None")
        if self.moe_every < 1 or any(i < 0 for i in self.dense_indices):
            raise ValueError("moe_every must be positive and dense_indices >= 0")

    def is_moe_layer(self, index: int) -> bool:
        """Whether layer `index` (from 0) has the experts rather than the dense MLP."""
        return (
            index >= self.dense_layers
            and (index + 1) % self.moe_every == 0
            and index not in self.dense_indices
        )

    def moe_layers(self, num_layers: int) -> int:
        """How many of a model's `num_layers` layers have the experts."""
        return sum(self.is_moe_layer(i) for i in range(num_layers))

    @property
    def shared_width(self) -> int:
        """The shared experts' summed width (0: none)."""
        return self.shared_experts * (self.shared_intermediate_size or self.intermediate_size)


#: The q/k norms that ModelBody.qk_norm names, by the weights they hold (Hq query and Hkv
#: KV heads of D): "head_dim", one RMSNorm of D for the queries and one for the keys,
#: shared by the heads (Qwen3, Gemma-3, EXAONE-4, GLM-4-MoE's use_qk_norm); "per_head", a
#: weight of D per head, Hq*D and Hkv*D, each head normalised on its own (Cohere's
#: use_qk_norm, weights of shape (heads, D)); "full", one RMSNorm over all the query heads
#: (Hq*D) and one over the key heads (Hkv*D), its statistics taken across the heads
#: (OLMo-2). A norm without weights (Llama-4's L2 norm) is no q/k norm here: None.
QK_NORMS = ("head_dim", "per_head", "full")


@dataclass(frozen=True)
class ModelBody:
    """Everything of a decoder-only transformer besides its attention shape.

    `intermediate_size`: the dense MLP's width (of every layer, or of the layers without
    experts when `moe` is set); `gated_mlp`: gate, up and down projections (SwiGLU; a fused
    gate_up projection counts the same), else up and down. `mlp_bias`: biases on the dense
    MLP and on the shared experts (the routed experts': MoeSpec.expert_bias). `qkv_bias`,
    `o_bias`: biases on the q, k and v projections, and on the output projection (MLA: on
    its down-projections q_a and kv_a, and on o). `qk_norm`: one of QK_NORMS, or None.
    `attention_sinks`: a learned value per query head and layer (gpt-oss).
    `norms_per_layer` norms of d_model in each layer (Cohere's one parallel norm: 1;
    Gemma-2/3 and GLM-4: 4), plus the final norm: LayerNorms with a bias when `norm_bias`,
    else of a weight only (RMSNorm, or Cohere's LayerNorm without bias).
    `tied_embeddings`: the output head is the token embeddings; `head_bias`: the output
    head has a bias, one value per token of the vocabulary (Phi-MoE's lm_head_bias), tied
    or not. `position_embeddings`: learned positions (GPT-2)."""

    vocab_size: int
    intermediate_size: int
    gated_mlp: bool = True
    mlp_bias: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    qk_norm: str | None = None
    norm_bias: bool = False
    norms_per_layer: int = 2
    tied_embeddings: bool = False
    position_embeddings: int = 0
    moe: MoeSpec | None = None
    attention_sinks: bool = False
    head_bias: bool = False

    def __post_init__(self) -> None:
        if self.qk_norm is not None and self.qk_norm not in QK_NORMS:
            raise ValueError(f"qk_norm must be one of {QK_NORMS} or None, got {self.qk_norm!r}")


#: What an attention layer keeps of one sequence, by its bound: every token, the last W
#: tokens (a sliding window) or the current chunk of W tokens (Llama-4).
FULL, SLIDING, CHUNKED = "full attention", "sliding attention", "chunked attention"
#: A layer that caches nothing (Nemotron-H's MLP and MoE layers).
NO_CACHE = "mlp only"


@dataclass(frozen=True)
class StateSpec:
    """The cache of one state layer for one sequence, fixed in size whatever the context,
    as transformers' cache of the model type holds it: `conv` elements (the rolling window
    of its short causal convolutions) and `recurrent` elements (Mamba's SSM state, or gated
    DeltaNet's and lightning attention's matrix per head), each in its dtype: None for the
    model's own (the activations' dtype), or the dtype transformers keeps it in whatever
    the model's (float32). `kind` names the layer ("mamba2", "gated deltanet"); `shapes`
    gives the shapes it holds, for the notes that state them."""

    kind: str
    conv: int
    recurrent: int
    conv_dtype: str | None = None
    recurrent_dtype: str | None = None
    shapes: str = ""

    def __post_init__(self) -> None:
        if self.conv < 0 or self.recurrent < 0 or self.conv + self.recurrent == 0:
            raise ValueError(
                f"a {self.kind} state needs elements, got {self.conv}, {self.recurrent}"
            )

    def bytes_in(self, dtype: str) -> int:
        """Bytes of one sequence's state in this layer, in a model of `dtype`."""
        return packed_bytes(self.conv, self.conv_dtype or dtype) + packed_bytes(
            self.recurrent, self.recurrent_dtype or dtype
        )


@dataclass(frozen=True)
class CountedModel:
    """The whole model of a type attnbench has no formulas for, counted by building it
    (transformers, on the meta device): parameters and stored buffers per part
    (model_params.COUNTED_PARTS), and what a step's roofline needs besides: the
    vocabulary, whether the head is tied to the embeddings, and the routed experts (None:
    dense). `source` says what counted it."""

    parts: tuple[tuple[str, int], ...]
    source: str
    vocab_size: int
    tied_embeddings: bool
    num_experts: int | None = None
    experts_per_token: int | None = None
    #: Its q and k norms each take their statistics across all the heads (one RMSNorm
    #: of the query heads' Hq*D values, MiniMax-M2's), as ModelBody.qk_norm "full".
    qk_norm_across_heads: bool = False


@dataclass(frozen=True)
class StoredWeights:
    """How a quantised checkpoint stores its weights, as its config's quantization_config
    says, in the terms of fit's and predict's weights settings: a weights dtype, its scale
    group (None: the format's default) and whether the attention's projections stay in
    the model's dtype. Those commands count the weights so where no setting is given."""

    dtype: str
    group: int | None = None
    keep_attention: bool = False

    def settings(self) -> str:
        """'weights_dtype int4 and weights_group 128'."""
        said = [f"weights_dtype {self.dtype}"]
        said += [f"weights_group {self.group}"] if self.group is not None else []
        said += ["keep_attention"] if self.keep_attention else []
        return " and ".join(said)


@dataclass(frozen=True)
class CountFix:
    """Where transformers' count of a model type (CountedModel) is not the model as its
    config gives it, which its part names or its build get wrong.

    `experts`: the routed experts' parameters, every layer's, which the count holds in
    its part `experts_in` ("mlp" where no module name says experts: JetMoE's MLP). In
    the "experts" part, whatever the count holds beyond them must be `unbuilt`, what
    transformers allocates that the model does not hold (LongCat-Flash's identity experts'
    gate_up slices, which its forward never reads and its checkpoints do not store), and
    is dropped. `attention_experts`: routed parameters the count keeps in "attention"
    (JetMoE's attention experts, a token's query and output projections). `num_experts`
    and `experts_per_token` route both. `reread`: parameters per part a step reads again
    beyond the one copy held (Zamba2's shared transformer block, run at each of its
    hybrid layers): time counts them at every use, memory once."""

    experts: int = 0
    experts_in: str = "experts"
    unbuilt: int = 0
    attention_experts: int = 0
    num_experts: int | None = None
    experts_per_token: int | None = None
    reread: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class ModelSpec:
    """A model: its attention layers and their count, plus (where known) per-layer sliding
    windows (None entries are global layers), MLA, the rest of the network and its context.

    A hybrid model (Qwen3-Next, Jamba, Nemotron-H, ...) says which of its `num_layers`
    layers attend (`attends`, None: all) and which keep a state (`states`, one entry per
    layer, None for a layer without one; None: no layer has one). `windows` then lists the
    attending layers only, in order: the KV cache is theirs. `chunked`: a bounded
    attention layer keeps a chunk (Llama-4), not a sliding window."""

    name: str
    num_layers: int
    d_model: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    dtype: str
    source: str
    windows: tuple[int | None, ...] | None = None
    mla: MlaSpec | None = None
    body: ModelBody | None = None
    max_position_embeddings: int | None = None
    #: What its counts leave out, said wherever they are shown (a multimodal config's
    #: vision tower).
    note: str | None = None
    #: The KV heads the model declares, on every spec of a what-if set (the model rebuilt
    #: with other KV-head counts, model/what_if.py), its own included; None otherwise.
    published_kv_heads: int | None = None
    attends: tuple[bool, ...] | None = None
    states: tuple[StateSpec | None, ...] | None = None
    chunked: bool = False
    #: The whole model as transformers builds it, where `body` is None (see CountedModel),
    #: from the config.json at `config_path` (None for a preset).
    counted: CountedModel | None = None
    config_path: str | None = None
    #: Corrections to `counted` for a model type transformers miscounts (CountFix).
    count_fix: CountFix | None = None
    #: Why transformers did not count the whole model (not installed, or it does not
    #: build the model type); None when it did, or was not asked.
    uncounted: str | None = None
    #: Why attnbench's formulas leave the whole model to transformers though they know its
    #: type (a multimodal config's head tied one way at its top level, the other in its
    #: text_config); None: they count it, or do not know its type.
    formulas_decline: str | None = None
    #: Why the layers' kinds are not known (a model type attnbench does not read as a
    #: hybrid whose config declares layers other than attention): its cache is refused.
    unknown_kinds: str | None = None
    #: The weights as a quantised checkpoint stores them (its quantization_config), where
    #: attnbench reads it; None: stored in `dtype`, or a format it cannot tell.
    stored_weights: StoredWeights | None = None

    def __post_init__(self) -> None:
        for name in ("attends", "states"):
            per_layer = getattr(self, name)
            if per_layer is not None and len(per_layer) != self.num_layers:
                raise ValueError(f"{len(per_layer)} entries of {name} for {self.num_layers} layers")
        if self.windows is not None and len(self.windows) != self.kv_layers:
            raise ValueError(f"{len(self.windows)} windows for {self.kv_layers} attention layers")

    def stored_hint(self, weights_dtype: str, dtype: str) -> str:
        """What an error about `weights_dtype` adds where it is how the checkpoint stores
        its weights (stored_weights), which the user may not have asked for: that it is,
        and the setting that counts them unquantised in `dtype`; '' otherwise."""
        stored = self.stored_weights
        if stored is None or stored.dtype != weights_dtype:
            return ""
        return (
            f" (the checkpoint's, its quantization_config; weights_dtype {dtype} counts "
            "the weights unquantised)"
        )

    def require_kinds(self) -> None:
        """A UsageError when the layers' kinds are not known: what is cached is not."""
        if self.unknown_kinds is not None:
            raise UsageError(
                f"{self.name}: {self.unknown_kinds}; its KV cache and state are not counted"
            )

    @property
    def kv_layers(self) -> int:
        """The layers that cache K and V (or an MLA latent)."""
        return self.num_layers if self.attends is None else sum(self.attends)

    @property
    def qk_norm_across_heads(self) -> bool:
        """Whether each attention layer's q and k norms take their statistics across all
        the heads (QK_NORMS' "full"): under tensor parallelism a rank, holding some of the
        heads, needs the others' sums of squares."""
        if self.body is not None:
            return self.body.qk_norm == "full"
        return self.counted is not None and self.counted.qk_norm_across_heads

    @property
    def layer_states(self) -> tuple[StateSpec | None, ...]:
        return self.states or (None,) * self.num_layers

    @property
    def state_layers(self) -> int:
        """The layers that keep a state."""
        return sum(s is not None for s in self.layer_states)

    def layer_kinds(self, windows: Sequence[int | None] | None = None) -> tuple[str, ...]:
        """Each layer's kind: its attention ("full attention", "sliding attention",
        "chunked attention", by its bound in `windows`, default the model's), its state's
        kind, both joined by " + " (Falcon-H1), or "mlp only"."""
        bounds = iter(windows if windows is not None else self.windows or (None,) * self.kv_layers)
        bounded = CHUNKED if self.chunked else SLIDING
        kinds = []
        for attends, state in zip(
            self.attends or (True,) * self.num_layers, self.layer_states, strict=True
        ):
            names = [FULL if next(bounds) is None else bounded] if attends else []
            names += [state.kind] if state is not None else []
            kinds.append(" + ".join(names) or NO_CACHE)
        return tuple(kinds)

    def attention_shape(self, bias: bool = False) -> AttentionShape:
        return AttentionShape(
            self.d_model, self.num_heads, self.num_kv_heads, self.head_dim, bias=bias
        )

    @property
    def variant(self) -> str:
        return "MLA" if self.mla else self.attention_shape().variant
