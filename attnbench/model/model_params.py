"""Whole-model parameter counts per part: analytic, per tensor-parallel rank, (counted on a
`meta`-device skeleton of the same shapes by modules/skeleton.py).

Per layer (d d_model, Hq/Hkv heads, D head_dim, I intermediate size, E experts):

- attention: q d*Hq*D, k and v d*Hkv*D each, o Hq*D*d (+ biases; + q/k norms of D each);
  MLA: q_a d*r_q + norm r_q + q_b r_q*Hq*(D_nope+D_rope) (or q d*Hq*(D_nope+D_rope)),
  kv_a d*(r_kv+D_rope) + norm r_kv, kv_b r_kv*Hq*(D_nope+D_v), o Hq*D_v*d;
- MLP: (3 if gated else 2)*d*I (+ biases); MoE: E gated experts of 3*d*I_e, a router of
  E*d (+E bias: the router of DeepSeek-V3 counts e_score_correction_bias, a buffer in
  transformers that checkpoints store), shared experts as one gated MLP of n_shared*I_e;
- norms: d per RMSNorm, 2*d per LayerNorm (weight and bias).

Plus token embeddings V*d (+ learned positions), a final norm, and the output head V*d
unless tied to the embeddings. Under tensor parallelism (`tp` ranks) embeddings and head
are split by vocabulary, attention by heads (KV heads replicated when tp > Hkv, MLA's
down-projections replicated), MLPs and experts by intermediate size; norms, routers and
the biases added after a row-parallel projection are replicated.
"""

from __future__ import annotations

from ..errors import UsageError
from ..model.architecture import ModelBody, ModelSpec
from ..model.capacity import ceil_div, kv_heads_per_rank
from ..model.dtypes import packed_bytes
from ..model.formulas import attention_params
from ..model.shapes import AttentionShape

PARTS: tuple[str, ...] = (
    "embeddings", "attention", "mlp", "experts", "router", "norms", "output head",
)  # fmt: skip


def require_body(spec: ModelSpec) -> ModelBody:
    """The model's body, or a UsageError saying whole-model counts are unknown for it."""
    if spec.body is None:
        raise UsageError(
            f"{spec.name}: the whole model (vocabulary, MLP, norms) is not known, only its "
            "attention; use a preset or a config.json of a supported model_type"
        )
    return spec.body


def _attention(spec: ModelSpec, body: ModelBody, tp: int) -> int:
    """One layer's attention parameters on one of `tp` ranks."""
    d = spec.d_model
    hkv = kv_heads_per_rank(spec.num_heads, spec.num_kv_heads, tp)
    hq = spec.num_heads // tp
    if spec.mla is not None:
        m = spec.mla
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        if m.q_lora_rank:
            q = d * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * hq * qk
        else:
            q = d * hq * qk
        kv = (
            d * m.latent_dim
            + m.kv_lora_rank
            + m.kv_lora_rank * hq * (m.qk_nope_head_dim + m.v_head_dim)
        )
        return q + kv + hq * m.v_head_dim * d  # fmt: skip
    shape = AttentionShape(d, hq, hkv, spec.head_dim)  # this rank's heads, weights only
    total = attention_params(shape)
    if body.qkv_bias:
        total += shape.q_dim + 2 * shape.kv_dim
    if body.o_bias:
        total += d
    if body.qk_norm:
        total += 2 * spec.head_dim
    return total


def _mlp(d: int, inter: int, body: ModelBody, tp: int, gated: bool) -> int:
    """A dense MLP on one rank: column-parallel up (and gate), row-parallel down."""
    i = ceil_div(inter, tp)
    total = (3 if gated else 2) * d * i
    if body.mlp_bias:
        total += (2 if gated else 1) * i + d
    return total


def part_params(spec: ModelSpec, tp: int = 1) -> dict[str, int]:
    """Parameters of each part on one of `tp` tensor-parallel ranks (tp=1: the whole model)."""
    body = require_body(spec)
    d, L, moe = spec.d_model, spec.num_layers, body.moe
    vocab = ceil_div(body.vocab_size, tp) * d
    norm = d * (2 if body.norm_bias else 1)
    dense_layers = L if moe is None else moe.dense_layers
    parts = dict.fromkeys(PARTS, 0)
    parts["embeddings"] = vocab + body.position_embeddings * d
    parts["attention"] = L * _attention(spec, body, tp)
    parts["mlp"] = dense_layers * _mlp(d, body.intermediate_size, body, tp, body.gated_mlp)
    if moe is not None:
        moe_layers = L - moe.dense_layers
        expert = _mlp(d, moe.intermediate_size, body, tp, gated=True)
        parts["experts"] = moe_layers * moe.num_experts * expert
        parts["router"] = moe_layers * (moe.num_experts * d + moe.router_bias * moe.num_experts)
        if moe.shared_experts:
            shared = moe.shared_experts * moe.intermediate_size
            parts["mlp"] += moe_layers * _mlp(d, shared, body, tp, gated=True)
    parts["norms"] = (L * body.norms_per_layer + 1) * norm
    parts["output head"] = 0 if body.tied_embeddings else vocab
    return parts


def total_params(spec: ModelSpec) -> int:
    return sum(part_params(spec).values())


def active_params(spec: ModelSpec) -> int:
    """Parameters one token uses: all but the routed experts it is not sent to."""
    moe = require_body(spec).moe
    if moe is None:
        return total_params(spec)
    experts = part_params(spec)["experts"]
    return total_params(spec) - experts // moe.num_experts * (
        moe.num_experts - moe.experts_per_token
    )


def weight_bytes_per_rank(spec: ModelSpec, dtype: str, tp: int = 1) -> int:
    """Bytes of one rank's weights in `dtype` (packed for int4; quantisation scales of the
    weights are not counted)."""
    return packed_bytes(sum(part_params(spec, tp).values()), dtype)
