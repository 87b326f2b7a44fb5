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
    """A mixture-of-experts MLP: routed experts of `intermediate_size` each (gated), a
    router of one weight row per expert, optional shared experts (DeepSeek), and
    `dense_layers` leading layers that keep the dense MLP (DeepSeek's first_k_dense_replace).

    `router_bias` adds one value per routed expert to the router: DeepSeek-V3's
    e_score_correction_bias, a buffer in transformers that checkpoints store, so it is
    counted as the checkpoint counts it."""

    num_experts: int
    experts_per_token: int
    intermediate_size: int
    shared_experts: int = 0
    dense_layers: int = 0
    router_bias: bool = False

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


@dataclass(frozen=True)
class ModelBody:
    """Everything of a decoder-only transformer besides its attention shape."""

    vocab_size: int
    intermediate_size: int
    gated_mlp: bool = True
    mlp_bias: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    qk_norm: bool = False
    norm_bias: bool = False
    norms_per_layer: int = 2
    tied_embeddings: bool = False
    position_embeddings: int = 0
    moe: MoeSpec | None = None


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
