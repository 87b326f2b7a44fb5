"""Whole-model parameter counts per part: analytic, per tensor-parallel rank, (counted on a
`meta`-device skeleton of the same shapes by modules/skeleton.py).

Per layer (d d_model, Hq/Hkv heads, D head_dim, I intermediate size, E experts):

- attention: q d*Hq*D, k and v d*Hkv*D each, o Hq*D*d (+ biases: Hq*D + 2*Hkv*D on q, k
  and v, d on o); q/k norms of D each ("head_dim"), or of Hq*D and Hkv*D ("per_head",
  "full"); attention sinks, Hq. MLA: q_a d*r_q + norm r_q + q_b r_q*Hq*(D_nope+D_rope) (or
  q d*Hq*(D_nope+D_rope)), kv_a d*(r_kv+D_rope) + norm r_kv, kv_b r_kv*Hq*(D_nope+D_v),
  o Hq*D_v*d (+ biases on q_a, kv_a and o);
- mlp: the dense MLP, (3 if gated else 2)*d*I (+ biases: 2*I or I, and d), in the layers
  without experts; in a MoE layer the shared experts, one gated MLP of their summed width
  (+ the same biases), and their gate, d (Qwen2-MoE);
- experts: E gated experts of 3*d*I_e each (+ 2*I_e + d of biases each, gpt-oss);
- router: E*d (+ E of bias: gpt-oss's router bias, or the e_score_correction_bias of
  DeepSeek-V3 and GLM-4-MoE, a buffer in transformers that checkpoints store);
- norms: d per RMSNorm (or LayerNorm without bias), 2*d per LayerNorm (weight and bias).

Plus token embeddings V*d (+ learned positions), a final norm, and the output head V*d
unless tied to the embeddings (+ V of bias, Phi-MoE's lm_head_bias, tied or not).

Under tensor parallelism (`tp` ranks) embeddings and head (its bias too) are split by
vocabulary, attention by heads (KV heads replicated when tp > Hkv, MLA's down-projections
replicated), MLPs, shared experts and routed experts by intermediate size (every rank
holds a slice of every expert). Split with their heads: the biases of q, k and v, the
attention sinks and the "per_head" q/k norms (each head normalised on its own).
Replicated on every rank: norms, the "head_dim" q/k norms (one weight for every head),
the "full" q/k norms (their statistics span every head, so they apply to the gathered
projection, as OLMo-2's do in transformers' plan), routers and their biases, the shared
experts' gate (Linear(d, 1)), MLA's biases (on replicated down-projections), and the
biases added after a row-parallel projection (o, down, the experts' down).

A model type without formulas here but counted by transformers (ModelSpec.counted) has
its parts as counted, two more among them: "state layers" (the token mixers of Mamba,
linear-attention and convolution layers) and "other" (what no part's name describes).
Per tensor-parallel rank, each of its split parts (embeddings, attention, mlp, experts,
state layers, output head) is divided by tp, rounded up: the formulas' split without
their detail (a bias or norm inside a part split with it), and the same at tp 1.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import UsageError
from ..model.architecture import CountedModel, ModelBody, ModelSpec
from ..model.capacity import ceil_div, kv_heads_per_rank
from ..model.dtypes import packed_bytes
from ..model.formulas import attention_params
from ..model.shapes import AttentionShape
from ..model.weights import WeightFormat, weight_format

PARTS: tuple[str, ...] = (
    "embeddings",
    "attention",
    "mlp",
    "experts",
    "router",
    "norms",
    "output head",
)
#: The parts of a model counted by transformers: PARTS, the token mixers of its layers
#: that are not attention, and what no part's name describes.
COUNTED_PARTS: tuple[str, ...] = (*PARTS, "state layers", "other")
#: The parts split over tensor-parallel ranks in a counted model (the rest replicated).
SPLIT_PARTS = ("embeddings", "attention", "mlp", "experts", "output head", "state layers")
#: Of them, those split whatever the vocabulary's layout (WeightFormat.replicated_vocab).
SPLIT_BUT_VOCAB = tuple(p for p in SPLIT_PARTS if p not in ("embeddings", "output head"))
#: How to have a model type attnbench has no formulas for counted whole.
COUNT_HINT = "install attnbench[hf] (transformers) to count the whole model"


def require_body(spec: ModelSpec) -> ModelBody:
    """The model's body, or a UsageError saying whole-model counts are unknown for it."""
    if spec.body is None:
        raise UsageError(f"{spec.name}: {uncounted_reason(spec)}")
    return spec.body


def uncounted_reason(spec: ModelSpec) -> str:
    """Why the whole model is not known, and what would count it."""
    why = spec.uncounted or COUNT_HINT
    formulas = spec.formulas_decline or "attnbench has no formulas of its model_type"
    return (
        "the whole model (vocabulary, MLP, norms) is not known, only its attention: "
        f"{formulas}; {why}"
    )


def has_whole_model(spec: ModelSpec) -> bool:
    """Whether the whole model is known: by the formulas, or counted by transformers."""
    return spec.body is not None or spec.counted is not None


def whole_model_source(spec: ModelSpec) -> str:
    """What gave the whole-model count: attnbench's formulas or transformers' build."""
    if spec.body is not None:
        return "attnbench's formulas (column counted: a skeleton of the model, as torch builds it)"
    return require_counted(spec).source


def require_counted(spec: ModelSpec) -> CountedModel:
    if spec.counted is None:
        require_body(spec)  # raises: neither is known
    return spec.counted  # type: ignore[return-value]


@dataclass(frozen=True)
class StepTraits:
    """What a step's roofline needs of the whole model besides its parts' parameters: the
    vocabulary, the tied head, learned positions, and the routed experts (0: dense)."""

    vocab_size: int
    tied_embeddings: bool
    position_embeddings: int
    num_experts: int
    experts_per_token: int


def has_own_head(spec: ModelSpec) -> bool:
    """The model's output head is a matrix of its own, not its embeddings' table (tied),
    so quantised weights can quantise it. A model whose traits cannot be read is taken to
    have one (its points say why they cannot be counted)."""
    try:
        return not step_traits(spec).tied_embeddings
    except UsageError:
        return True


def step_traits(spec: ModelSpec) -> StepTraits:
    if spec.body is not None:
        body, moe = spec.body, spec.body.moe
        experts = (moe.num_experts, moe.experts_per_token) if moe else (0, 0)
        return StepTraits(body.vocab_size, body.tied_embeddings, body.position_embeddings, *experts)
    counted, fix = require_counted(spec), spec.count_fix
    routed = counted_parts(spec)["experts"]
    if fix is not None and fix.num_experts and fix.experts_per_token:
        counted = replace(
            counted, num_experts=fix.num_experts, experts_per_token=fix.experts_per_token
        )
    if routed and not (counted.num_experts and counted.experts_per_token):
        raise UsageError(
            f"{spec.name}: transformers builds it with routed experts, but its config gives "
            "their count or the experts a token goes to in no field attnbench reads: the "
            "experts a step reads cannot be counted"
        )
    return StepTraits(
        counted.vocab_size,
        counted.tied_embeddings,
        0,
        counted.num_experts or 0,
        counted.experts_per_token or 0,
    )


def _attention(spec: ModelSpec, body: ModelBody, tp: int) -> int:
    """One layer's attention parameters on one of `tp` ranks."""
    d = spec.d_model
    hkv = kv_heads_per_rank(spec.num_heads, spec.num_kv_heads, tp)
    hq = spec.num_heads // tp
    sinks = hq if body.attention_sinks else 0
    if spec.mla is not None:
        m = spec.mla
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        if m.q_lora_rank:
            q = d * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * hq * qk
            q += m.q_lora_rank if body.qkv_bias else 0
        else:
            q = d * hq * qk
        kv = (
            d * m.latent_dim
            + m.kv_lora_rank
            + m.kv_lora_rank * hq * (m.qk_nope_head_dim + m.v_head_dim)
        )
        kv += m.latent_dim if body.qkv_bias else 0
        return q + kv + hq * m.v_head_dim * d + (d if body.o_bias else 0) + sinks
    shape = AttentionShape(d, hq, hkv, spec.head_dim)  # this rank's heads, weights only
    total = attention_params(shape) + sinks
    if body.qkv_bias:
        total += shape.q_dim + 2 * shape.kv_dim
    if body.o_bias:
        total += d
    if body.qk_norm == "head_dim":
        total += 2 * spec.head_dim
    elif body.qk_norm == "per_head":
        total += shape.q_dim + shape.kv_dim
    elif body.qk_norm == "full":
        total += (spec.num_heads + spec.num_kv_heads) * spec.head_dim
    return total


def _mlp(d: int, inter: int, bias: bool, tp: int, gated: bool) -> int:
    """A dense MLP on one rank: column-parallel up (and gate), row-parallel down; with
    `bias`, biases on each (the down projection's replicated)."""
    i = ceil_div(inter, tp)
    total = (3 if gated else 2) * d * i
    if bias:
        total += (2 if gated else 1) * i + d
    return total


def counted_parts(spec: ModelSpec) -> dict[str, int]:
    """The parts of a model counted by transformers, corrected where its count is not the
    model (ModelSpec.count_fix): the routed experts moved to "experts", and what
    transformers allocates that the model does not hold dropped. A count that does not
    hold what the fix expects is refused, not given wrong."""
    counted = {part: dict(require_counted(spec).parts).get(part, 0) for part in COUNTED_PARTS}
    fix = spec.count_fix
    if fix is None or not fix.experts:
        return counted
    rest = counted[fix.experts_in] - fix.experts
    if fix.experts_in == "experts" and rest in (0, fix.unbuilt):
        rest = 0  # the unbuilt experts, or none where transformers builds the model's alone
    if rest < 0 or (fix.experts_in == "experts" and rest):
        raise UsageError(
            f"{spec.name}: transformers counts {counted[fix.experts_in]:,} parameters in its "
            f"{fix.experts_in}, not the {fix.experts:,} of the routed experts its config "
            "gives: attnbench cannot tell which it holds"
        )
    counted[fix.experts_in] = rest
    counted["experts"] += fix.experts
    return counted


def part_params(spec: ModelSpec, tp: int = 1, replicated_vocab: bool = False) -> dict[str, int]:
    """Parameters of each part on one of `tp` tensor-parallel ranks (tp=1: the whole model),
    the vocabulary (embeddings and output head) split over them or, `replicated_vocab`,
    whole on each."""
    split = SPLIT_PARTS if not replicated_vocab else SPLIT_BUT_VOCAB
    if spec.body is None and spec.counted is not None:
        counted = counted_parts(spec)
        return {part: ceil_div(n, tp if part in split else 1) for part, n in counted.items()}
    body = require_body(spec)
    d, L, moe = spec.d_model, spec.num_layers, body.moe
    vocab = ceil_div(body.vocab_size, 1 if replicated_vocab else tp)
    norm = d * (2 if body.norm_bias else 1)
    moe_layers = 0 if moe is None else moe.moe_layers(L)
    parts = dict.fromkeys(PARTS, 0)
    parts["embeddings"] = vocab * d + body.position_embeddings * d
    parts["attention"] = L * _attention(spec, body, tp)
    dense = _mlp(d, body.intermediate_size, body.mlp_bias, tp, body.gated_mlp)
    parts["mlp"] = (L - moe_layers) * dense
    if moe is not None:
        expert = _mlp(d, moe.intermediate_size, moe.expert_bias, tp, gated=True)
        parts["experts"] = moe_layers * moe.num_experts * expert
        parts["router"] = moe_layers * moe.num_experts * (d + moe.router_bias)
        shared = _mlp(d, moe.shared_width, body.mlp_bias, tp, True) if moe.shared_width else 0
        parts["mlp"] += moe_layers * (shared + (d if moe.shared_expert_gate else 0))
    parts["norms"] = (L * body.norms_per_layer + 1) * norm
    parts["output head"] = (0 if body.tied_embeddings else vocab * d) + body.head_bias * vocab
    return parts


def step_parts(spec: ModelSpec, tp: int = 1, replicated_vocab: bool = False) -> dict[str, int]:
    """The parameters per part a step reads and computes with on one of `tp` ranks: each
    part's (part_params), and again at every further use of a block the model shares among
    its layers (CountFix.reread): memory holds it once, a step runs it at each use."""
    parts = part_params(spec, tp, replicated_vocab)
    if spec.body is None and spec.count_fix is not None:
        for part, n in spec.count_fix.reread:
            parts[part] += ceil_div(n, tp if part in SPLIT_PARTS else 1)
    return parts


def routed_attention(spec: ModelSpec, tp: int = 1) -> int:
    """Routed parameters a count keeps in "attention" on one of `tp` ranks (JetMoE's
    attention experts, CountFix.attention_experts), routed as the experts are."""
    fix = spec.count_fix if spec.body is None else None
    return 0 if fix is None else ceil_div(fix.attention_experts, tp)


def total_params(spec: ModelSpec) -> int:
    return sum(part_params(spec).values())


def active_params(spec: ModelSpec) -> int:
    """Parameters one token uses: all but the routed experts it is not sent to (in the
    attention too: JetMoE's)."""
    traits = step_traits(spec)
    if not traits.num_experts:
        return total_params(spec)
    routed = part_params(spec)["experts"] + routed_attention(spec)
    return total_params(spec) - routed // traits.num_experts * (
        traits.num_experts - traits.experts_per_token
    )


def weight_bytes_per_rank(
    spec: ModelSpec,
    weights: str | WeightFormat,
    tp: int = 1,
    dtype: str | None = None,
    dp_attention: bool = False,
) -> int:
    """Bytes of one rank's weights in `weights` (a dtype, or a WeightFormat: quantised
    weights with their scales); under data-parallel attention (`dp_attention`) the
    attention and the token embeddings whole on every rank, each rank embedding and
    attending its own tokens (SGLang's embeddings split over the attention's ranks
    alone). Quantised weights keep the embeddings,
    and the output head unless fmt.quantized_head, in `dtype` (default: the model's), as
    GPTQ, AWQ and float8 checkpoints do, and the attention too where fmt.kept_attention."""
    fmt = weight_format(weights)
    parts = part_params(spec, tp, fmt.replicated_vocab)
    if dp_attention and tp > 1:
        whole = part_params(spec, 1, fmt.replicated_vocab)
        parts["attention"], parts["embeddings"] = whole["attention"], whole["embeddings"]
    if not fmt.quantized:
        return packed_bytes(sum(parts.values()), fmt.dtype)
    kept = parts["embeddings"] + (0 if fmt.quantized_head else parts["output head"])
    # kept attention: its projections, not its routed experts (JetMoE's), which stay quantised
    kept += parts["attention"] - routed_attention(spec, tp) if fmt.kept_attention else 0
    rest = fmt.bytes(sum(parts.values()) - kept, spec.d_model)
    return rest + packed_bytes(kept, dtype or spec.dtype)
