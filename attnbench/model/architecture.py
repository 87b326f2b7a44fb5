"""What attnbench knows of a model's architecture: attention shape, KV-cache layout and the
rest of the network (embeddings, MLP or mixture of experts, norms, output head).

Presets (presets.py) and config.json files (hf_config.py) both produce a ModelSpec.
"""

from __future__ import annotations

from dataclasses import dataclass

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


@dataclass(frozen=True)
class ModelSpec:
    """A model: its attention layers and their count, plus (where known) per-layer sliding
    windows (None entries are global layers), MLA, the rest of the network and its context."""

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

    def attention_shape(self, bias: bool = False) -> AttentionShape:
        return AttentionShape(
            self.d_model, self.num_heads, self.num_kv_heads, self.head_dim, bias=bias
        )

    @property
    def variant(self) -> str:
        return "MLA" if self.mla else self.attention_shape().variant
