"""A model's parameters with their real shapes and no computation, built on the `meta`
device to count them without allocating memory: the check on model/model_params.py.

Each parameter's part (model_params.PARTS) is its module's name in a layer: `attention`
(projections and their biases, q/k norms, attention sinks, MLA's norms), `mlp` (the dense
MLP, or a MoE layer's shared experts, and `shared_gate`, their gate), `experts` (stacked
routed experts, with their biases), `router` (its bias too: gpt-oss's, or the
e_score_correction_bias that checkpoints store), `norms`; outside the layers, the
embeddings, the final norm and the output head (its bias too; a tied weight counts once,
in the embeddings). Buffers that transformers keeps are parameters here, so that the
counts are those of a checkpoint."""

from __future__ import annotations

import torch
from torch import nn

from ..model.architecture import ModelBody, ModelSpec
from ..model.model_params import PARTS, require_body


def _embedding(num: int, dim: int) -> nn.Embedding:
    """An embedding table given its (empty) weight: nn.Embedding's own initialisation
    (normal_) on the meta device loads torch's compiler stack, a second of start-up for
    a table whose values are never read."""
    return nn.Embedding(num, dim, _weight=torch.empty(num, dim))


def _norm(body: ModelBody, dim: int) -> nn.Module:
    return nn.LayerNorm(dim) if body.norm_bias else nn.RMSNorm(dim)


class _Mlp(nn.Module):
    def __init__(self, d: int, inter: int, gated: bool, bias: bool) -> None:
        super().__init__()
        self.gate = nn.Linear(d, inter, bias=bias) if gated else None
        self.up = nn.Linear(d, inter, bias=bias)
        self.down = nn.Linear(inter, d, bias=bias)


class _Experts(nn.Module):
    """Routed experts as stacked weights (num_experts, ...), as fused MoE kernels hold them,
    with gpt-oss's biases when `bias`."""

    def __init__(self, num: int, d: int, inter: int, bias: bool) -> None:
        super().__init__()
        self.gate_up = nn.Parameter(torch.empty(num, 2 * inter, d))
        self.down = nn.Parameter(torch.empty(num, d, inter))
        if bias:
            self.gate_up_bias = nn.Parameter(torch.empty(num, 2 * inter))
            self.down_bias = nn.Parameter(torch.empty(num, d))


class _Attention(nn.Module):
    def __init__(self, spec: ModelSpec, body: ModelBody) -> None:
        super().__init__()
        d, hq = spec.d_model, spec.num_heads
        if body.attention_sinks:
            self.sinks = nn.Parameter(torch.empty(hq))
        if spec.mla is not None:
            m = spec.mla
            qk = m.qk_nope_head_dim + m.qk_rope_head_dim
            if m.q_lora_rank:
                self.q_a = nn.Linear(d, m.q_lora_rank, bias=body.qkv_bias)
                self.q_a_norm = nn.RMSNorm(m.q_lora_rank)
                self.q_b = nn.Linear(m.q_lora_rank, hq * qk, bias=False)
            else:
                self.q = nn.Linear(d, hq * qk, bias=False)
            self.kv_a = nn.Linear(d, m.latent_dim, bias=body.qkv_bias)
            self.kv_a_norm = nn.RMSNorm(m.kv_lora_rank)
            self.kv_b = nn.Linear(
                m.kv_lora_rank, hq * (m.qk_nope_head_dim + m.v_head_dim), bias=False
            )
            self.o = nn.Linear(hq * m.v_head_dim, d, bias=body.o_bias)
            return
        D, hkv = spec.head_dim, spec.num_kv_heads
        self.q = nn.Linear(d, hq * D, bias=body.qkv_bias)
        self.k = nn.Linear(d, hkv * D, bias=body.qkv_bias)
        self.v = nn.Linear(d, hkv * D, bias=body.qkv_bias)
        self.o = nn.Linear(hq * D, d, bias=body.o_bias)
        if body.qk_norm == "head_dim":
            self.q_norm, self.k_norm = nn.RMSNorm(D), nn.RMSNorm(D)
        elif body.qk_norm == "per_head":
            self.q_norm, self.k_norm = nn.RMSNorm((hq, D)), nn.RMSNorm((hkv, D))
        elif body.qk_norm == "full":
            self.q_norm, self.k_norm = nn.RMSNorm(hq * D), nn.RMSNorm(hkv * D)


class _Block(nn.Module):
    def __init__(self, spec: ModelSpec, body: ModelBody, index: int) -> None:
        super().__init__()
        d, moe = spec.d_model, body.moe
        self.attention = _Attention(spec, body)
        self.norms = nn.ModuleList(_norm(body, d) for _ in range(body.norms_per_layer))
        self.mlp = self.experts = self.router = self.shared_gate = None
        if moe is None or not moe.is_moe_layer(index):
            self.mlp = _Mlp(d, body.intermediate_size, body.gated_mlp, body.mlp_bias)
            return
        if moe.shared_width:
            self.mlp = _Mlp(d, moe.shared_width, True, body.mlp_bias)
        if moe.shared_expert_gate:
            self.shared_gate = nn.Linear(d, 1, bias=False)
        self.experts = _Experts(moe.num_experts, d, moe.intermediate_size, moe.expert_bias)
        self.router = nn.Linear(d, moe.num_experts, bias=moe.router_bias)


class ModelSkeleton(nn.Module):
    """The model's parameters with their real shapes and no computation; build it under
    `torch.device("meta")` to count parameters without allocating them."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        body = require_body(spec)
        d = spec.d_model
        self.embeddings = nn.ModuleDict({"tokens": _embedding(body.vocab_size, d)})
        if body.position_embeddings:
            self.embeddings["positions"] = _embedding(body.position_embeddings, d)
        self.layers = nn.ModuleList(_Block(spec, body, i) for i in range(spec.num_layers))
        self.final_norm = _norm(body, d)
        self.output_head = nn.Linear(d, body.vocab_size, bias=body.head_bias)
        if body.tied_embeddings:
            self.output_head.weight = self.embeddings["tokens"].weight


def _part_of(name: str) -> str:
    """The PARTS entry a parameter of ModelSkeleton belongs to, from its name."""
    head = name.split(".")[0]
    if head == "layers":
        sub = name.split(".")[2]
        return {"shared_gate": "mlp"}.get(sub, sub)
    return {"final_norm": "norms", "output_head": "output head"}.get(head, head)


def meta_part_params(spec: ModelSpec) -> dict[str, int]:
    """Parameters per part of a ModelSkeleton built on the meta device (a tied head's
    weight is the embeddings' and counts once)."""
    with torch.device("meta"):
        model = ModelSkeleton(spec)
    parts = dict.fromkeys(PARTS, 0)
    for name, p in model.named_parameters():
        parts[_part_of(name)] += p.numel()
    return parts
