"""A roofline performance model: the time of a step from the bytes it moves and the FLOPs
it computes, on a device of a given bandwidth and peak throughput.

A step runs two kinds of kernel one after the other, each on its own roofline: the dense
matmuls (projections, MLP, experts, head), which stream the weights and activations, and
the attention core (QK^T, softmax, PV), which reads the KV cache:

    time = max(dense_bytes / (efficiency_bw * bandwidth),
               dense_flops / (efficiency_flops * peak))
         + max(kv_bytes / (efficiency_kv * bandwidth),
               attention_flops / (efficiency_flops * peak))
         + overheads * overhead_s

The efficiencies are the shares of the peaks a real kernel reaches; `overhead_s` is the
fixed cost of one layer's step (kernel launches, synchronisation) that no roofline sees.
The cache streams at a share of its own, `efficiency_kv`: the weights are read by a few
large matrix-vector products, the cache by one small one per sequence and head with a
softmax between, which reach less of the bandwidth (on a 2-core CPU, a third of the
weights' rate); unset, it is efficiency_bw. A step given no attention part (kv_bytes and
attention_flops 0) is the plain roofline max(bytes / (efficiency_bw * bandwidth),
flops / (efficiency_flops * peak)). The two parts are summed, not overlapped: a layer's
attention waits for its projections, and on a CPU core an MQA step's attention core
(compute-bound: 32 query heads over one cached head) adds to its projections' weight
streaming. Defaults (DEFAULT_MODEL) or a calibration from measured runs
(model/calibration.py) set the parameters. The ridge point is the device's (at
efficiency_bw); `bound` names the term that sets the larger part's time.

Whole-model counts reuse the one formula of each quantity: attention bytes and FLOPs from
formulas.py, parameters per part and per rank from model_params.py, KV-cache bytes (dtype,
scales, sliding windows, tensor parallelism) from capacity.py. Per rank, one step of B
sequences each feeding q new tokens that attend kv keys (decode: q 1, kv S + 1; prefill
of S tokens: q S, kv S) moves:

- the weights it touches, once: every part but the token embeddings (only the B*q rows
  looked up are read, unless the output head is tied to them: then the head reads the
  whole table) and the routed experts, of which a MoE layer reads at most min(E, B*q*k)
  (each of the B*q tokens goes to k experts; the bound is reached when no two tokens
  share one, the worst case, assumed here);
- the KV cache: every layer reads the keys its sliding window keeps (min(kv, W), the
  architecture's windows; full context on global layers) and writes the q new ones, in
  the KV dtype with its scales;
- the attention's activations (formulas.step_traffic_bytes); the MLP's activations are
  not counted (B*q*(d + 2*I) elements per layer: small beside its weights at decode);
- a hybrid model's state (Mamba, linear attention): every state layer reads each
  sequence's state and writes it back, 2 * its bytes per step (capacity.state_bytes), as
  part of the cache.

FLOPs: attention by formulas.forward_flops (projections and QK^T, PV over the keys the
window keeps, at least the q new tokens: a prefill over a window is counted as full
causal, an upper bound); 2 per parameter a token uses in the MLP, the router and its k
experts (biases included, a negligible overcount; norms and the embedding lookup not
counted); the output head for the last token of each sequence only (B logits), as
serving engines compute it; a state layer's recurrence STATE_FLOPS per element of its
recurrent state per token (decay and rank-one update, and the read-out), its
projections 2 per parameter. MLA models are not modelled (their absorbed attention is
not in formulas.py).

A model counted by transformers (a type without formulas here) is its parts as counted:
"state layers" and "other" timed as dense matmuls, 2 FLOPs per parameter a token uses.

Tensor parallelism adds two all-reduces per layer (after the attention's o_proj and after
the MLP's down projection) of the B*q tokens' hidden states, B*q*d elements each, timed
as a ring all-reduce: 2*(tp-1)/tp * bytes / interconnect_bandwidth + a latency, not
overlapped with the compute. The logits' gather under a vocabulary-split head is not
counted.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import FieldError, UsageError
from .architecture import ModelSpec
from .capacity import (
    KvFormat,
    cache_bytes,
    ceil_div,
    kv_cache_bytes,
    kv_heads_per_rank,
    layer_tokens,
    positive_int,
    state_bytes,
    token_layout,
)
from .devices import DeviceSpec, flops_for
from .dtypes import MODEL_DTYPES, check_dtype, dtype_bytes, packed_bytes
from .formulas import attention_core_flops, forward_flops, step_traffic_bytes, weight_bytes
from .model_params import has_whole_model, part_params, require_body, step_traits
from .shapes import AttentionShape

#: The most a calibrated efficiency may be: above 1 a measured peak may sit under the
#: datasheet's (boost clocks), far above it the peaks given do not match the device.
MAX_EFFICIENCY = 1.5
#: The latency of one all-reduce of a few MB or less, whatever its size: NCCL on NVLink
#: takes some microseconds for small messages (its launch and ring hand-offs).
ALLREDUCE_LATENCY_S = 5e-6
#: FLOPs per element of a state layer's recurrent state, per token: the decay and the
#: rank-one update of the state (2), and the read-out against it (2).
STATE_FLOPS = 4


@dataclass(frozen=True)
class PerfModel:
    """What a roofline needs besides the device: the shares of peak bandwidth and peak
    FLOP/s a step reaches, the fixed time of one layer's step, and where they came from
    ("defaults" or "calibrated from ..."); `efficiency_kv`, the share of the bandwidth at
    which the KV cache is read, is efficiency_bw when None."""

    efficiency_bw: float
    efficiency_flops: float
    overhead_s: float
    source: str
    efficiency_kv: float | None = None

    def __post_init__(self) -> None:
        for name in ("efficiency_bw", "efficiency_flops", "efficiency_kv"):
            value = getattr(self, name)
            if name == "efficiency_kv" and value is None:
                continue
            if not is_number(value) or not 0 < value <= MAX_EFFICIENCY:
                raise FieldError(name, value, f"must be a number in (0, {MAX_EFFICIENCY}]")
        if not is_number(self.overhead_s) or not 0 <= self.overhead_s < math.inf:
            raise FieldError("overhead_s", self.overhead_s, "must be a number >= 0 (seconds)")

    @property
    def kv_efficiency(self) -> float:
        """The share of the bandwidth at which the KV cache is read."""
        return self.efficiency_bw if self.efficiency_kv is None else self.efficiency_kv

    def describe(self) -> str:
        """The parameters in one line, as every prediction states them."""
        kv = "" if self.efficiency_kv is None else f", efficiency_kv {self.efficiency_kv:.3g}"
        return (
            f"efficiency_bw {self.efficiency_bw:.3g}{kv}, efficiency_flops "
            f"{self.efficiency_flops:.3g}, overhead {self.overhead_s * 1e6:.3g} us per layer "
            f"({self.source})"
        )


def is_number(value: object) -> bool:
    """A real number: an int or a float, not a bool, not NaN."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


#: Defaults for a GPU: decode kernels stream their bytes at about 80% of the datasheet
#: bandwidth, dense matmuls reach about 60% of the datasheet tensor-core peak at the
#: shapes of one layer, and one layer's step pays about 10 us of kernel launches and
#: synchronisation (a handful of launches of a few us each, without CUDA graphs).
DEFAULT_MODEL = PerfModel(
    efficiency_bw=0.8, efficiency_flops=0.6, overhead_s=10e-6, source="defaults"
)


@dataclass(frozen=True)
class Roofline:
    """A predicted time, with the counts it came from, the arithmetic intensity (FLOPs per
    byte), the device's ridge point (the intensity where its effective peaks meet, at
    efficiency_bw) and which of the two bounds sets the time ("memory" or "compute": the
    larger term, with the cache's bytes at efficiency_kv)."""

    time_s: float
    bytes: int
    flops: int
    intensity: float
    ridge: float
    bound: str


def predict(
    bytes: int,
    flops: int,
    bandwidth: float,
    peak_flops: float,
    model: PerfModel = DEFAULT_MODEL,
    overheads: int = 1,
    kv_bytes: int = 0,
    attention_flops: int = 0,
) -> Roofline:
    """The time of moving `bytes` and computing `flops` at `bandwidth` (bytes/s) and
    `peak_flops` (FLOP/s), paying model.overhead_s `overheads` times (a whole model: once
    per layer): `kv_bytes` of the bytes and `attention_flops` of the FLOPs are the
    attention core's, on a roofline of their own (see the module's notes)."""
    if bytes <= 0 or flops < 0 or not 0 <= kv_bytes <= bytes:
        raise ValueError(
            f"a step moves bytes > 0, kv_bytes of them, and computes flops >= 0, got "
            f"{bytes}, {kv_bytes}, {flops}"
        )
    if not 0 <= attention_flops <= flops:
        raise ValueError(f"attention_flops {attention_flops} must be in [0, flops {flops}]")
    if bandwidth <= 0 or peak_flops <= 0:
        raise ValueError(f"bandwidth and peak_flops must be > 0, got {bandwidth}, {peak_flops}")
    flops_rate = model.efficiency_flops * peak_flops
    dense = (
        (bytes - kv_bytes) / (model.efficiency_bw * bandwidth),
        (flops - attention_flops) / flops_rate,
    )
    core = (kv_bytes / (model.kv_efficiency * bandwidth), attention_flops / flops_rate)
    longer = max(dense, core, key=max)
    return Roofline(
        time_s=max(dense) + max(core) + overheads * model.overhead_s,
        bytes=bytes,
        flops=flops,
        intensity=flops / bytes,
        ridge=flops_rate / (model.efficiency_bw * bandwidth),
        bound="compute" if longer[1] > longer[0] else "memory",
    )


def tokens_per_s(tokens: int, time_s: float) -> float:
    """Tokens produced per second: a decode step of B sequences makes B tokens."""
    return tokens / time_s


def allreduce_s(
    bytes: int,
    tp: int,
    interconnect_bandwidth: float | None,
    latency_s: float = ALLREDUCE_LATENCY_S,
) -> float:
    """Time of one ring all-reduce of `bytes` over `tp` ranks: each rank sends and
    receives 2*(tp-1)/tp of the buffer, plus a fixed latency; 0 at tp 1."""
    positive_int("tp", tp)
    if tp == 1:
        return 0.0
    if not interconnect_bandwidth:
        raise FieldError("tp", tp, "needs a device with an interconnect bandwidth")
    return 2 * (tp - 1) / tp * bytes / interconnect_bandwidth + latency_s


@dataclass(frozen=True)
class ModelCounts:
    """One step of a whole model on one tensor-parallel rank (see the module's notes)."""

    weight_bytes: int
    #: The cache read and written: K/V, and a hybrid's state (state_bytes of it).
    kv_bytes: int
    activation_bytes: int
    flops: int
    #: Of the FLOPs, the attention core's (QK^T and PV).
    attention_flops: int
    #: Bytes of each all-reduce, and how many the step makes (0 at tp 1).
    allreduce_bytes: int
    allreduces: int
    layers: int
    #: Sequences in the batch: the tokens a decode step produces.
    batch: int
    state_bytes: int = 0

    @property
    def bytes(self) -> int:
        return self.weight_bytes + self.kv_bytes + self.activation_bytes


@dataclass(frozen=True)
class AttentionCounts:
    """The attention of every layer of `windows` over one step, on one rank: weights
    aside (a whole model counts them by part), the KV cache read and written, the
    activations and the FLOPs."""

    kv_bytes: int
    activation_bytes: int
    flops: int
    #: Of the FLOPs, QK^T and PV's (the rest: the projections').
    core_flops: int


def rank_shape(shape: AttentionShape, tp: int) -> AttentionShape:
    """The attention one of `tp` ranks holds: its share of the query heads, and of the KV
    heads (or one of them, replicated, when tp exceeds them)."""
    hkv = kv_heads_per_rank(shape.num_heads, shape.num_kv_heads, tp)
    return AttentionShape(shape.d_model, shape.num_heads // tp, hkv, shape.head_dim)


def attention_counts(
    shape: AttentionShape,
    batch: int,
    q_len: int,
    kv_len: int,
    dtype: str,
    kv_dtype: str | None = None,
    tp: int = 1,
    windows: Sequence[int | None] = (None,),
) -> AttentionCounts:
    """One step of the attention layers whose windows are `windows` (one per layer; None:
    global): `batch` sequences each feeding `q_len` new tokens that attend `kv_len` keys,
    the query heads of `shape` split over `tp` ranks; the cache in `kv_dtype` (default
    `dtype`). Each layer reads the keys its window keeps and writes the q_len new ones."""
    for field, value in (("batch", batch), ("q_len", q_len), ("kv_len", kv_len)):
        positive_int(field, value)
    rank = rank_shape(shape, tp)
    hkv, head_dim = rank.num_kv_heads, rank.head_dim
    layers = Counter(windows)
    keys = {w: max(q_len, layer_tokens(kv_len, w)) for w in layers}
    flops = sum(n * forward_flops(rank, batch, q_len, keys[w], True) for w, n in layers.items())
    core = sum(
        n * attention_core_flops(rank, batch, q_len, keys[w], True) for w, n in layers.items()
    )
    fmt = KvFormat(kv_dtype or dtype)
    layout = token_layout(shape.num_heads, shape.num_kv_heads, head_dim, fmt, tp)
    kv = cache_bytes(layout, layers, {kv_len: batch}).total
    kv += cache_bytes(layout, {None: len(windows)}, {q_len: batch}).total
    # the traffic without its KV terms: x read, q, attention output, layer output
    activations = len(windows) * (
        step_traffic_bytes(rank, batch, q_len, 0, dtype)
        - kv_cache_bytes(1, batch, q_len, hkv, head_dim, dtype)
    )
    return AttentionCounts(kv, activations, flops, core)


def layer_counts(
    shape: AttentionShape,
    batch: int,
    q_len: int,
    kv_len: int,
    dtype: str,
    kv_dtype: str | None = None,
    tp: int = 1,
) -> ModelCounts:
    """One attention layer's step on one of `tp` ranks (its projections' weights, its
    cache, its activations; one all-reduce of its output under tensor parallelism): the
    layer decode-speed times. A decode step at context S is q_len 1, kv_len S + 1; a
    prefill of S tokens q_len S, kv_len S."""
    check_dtype(dtype, "dtype", MODEL_DTYPES)
    attention = attention_counts(shape, batch, q_len, kv_len, dtype, kv_dtype, tp)
    return ModelCounts(
        weight_bytes=weight_bytes(rank_shape(shape, tp), dtype),
        kv_bytes=attention.kv_bytes,
        activation_bytes=attention.activation_bytes,
        flops=attention.flops,
        attention_flops=attention.core_flops,
        allreduce_bytes=batch * q_len * shape.d_model * dtype_bytes(dtype),
        allreduces=1 if tp > 1 else 0,
        layers=1,
        batch=batch,
    )


def step_counts(
    spec: ModelSpec,
    batch: int,
    q_len: int,
    kv_len: int,
    dtype: str,
    kv_dtype: str | None = None,
    tp: int = 1,
) -> ModelCounts:
    """Counts of one step of `batch` sequences each feeding `q_len` new tokens that attend
    `kv_len` keys (the new ones included), weights and activations in `dtype`, the cache
    in `kv_dtype` (default: `dtype`), on one of `tp` ranks."""
    if not has_whole_model(spec):
        require_body(spec)  # raises: the whole model is not known
    if spec.mla is not None:
        raise UsageError(f"{spec.name}: the roofline does not model MLA attention")
    check_dtype(dtype, "dtype", MODEL_DTYPES)
    for field, value in (("batch", batch), ("q_len", q_len), ("kv_len", kv_len)):
        positive_int(field, value)
    parts, traits = part_params(spec, tp), step_traits(spec)
    tokens, L, d = batch * q_len, spec.num_layers, spec.d_model
    vocab_rows = ceil_div(traits.vocab_size, tp)  # this rank's vocabulary

    # weights: embeddings as looked up (or whole, as the tied head), routed experts touched
    weights = sum(parts.values()) - parts["embeddings"] - parts["experts"]
    if traits.tied_embeddings:
        weights += parts["embeddings"]
    else:
        weights += (min(tokens, vocab_rows) + (tokens if traits.position_embeddings else 0)) * d
    head = vocab_rows * d
    expert_flops = 0
    if traits.num_experts and parts["experts"]:
        per_expert = parts["experts"] // traits.num_experts  # over every MoE layer
        weights += per_expert * min(traits.num_experts, tokens * traits.experts_per_token)
        expert_flops = 2 * tokens * traits.experts_per_token * per_expert

    attention = attention_counts(
        AttentionShape(d, spec.num_heads, spec.num_kv_heads, spec.head_dim),
        batch,
        q_len,
        kv_len,
        dtype,
        kv_dtype,
        tp,
        spec.windows or (None,) * spec.kv_layers,
    )
    dense_parts = ("mlp", "router", "state layers", "other")
    dense = 2 * tokens * sum(parts.get(p, 0) for p in dense_parts)
    state = 2 * state_bytes(spec.layer_states, dtype, batch, tp)
    recurrent = sum(ceil_div(s.recurrent, tp) for s in spec.layer_states if s is not None)
    state_flops = STATE_FLOPS * tokens * recurrent
    return ModelCounts(
        weight_bytes=packed_bytes(weights, dtype),
        kv_bytes=attention.kv_bytes + state,
        activation_bytes=attention.activation_bytes,
        flops=attention.flops + dense + expert_flops + 2 * batch * head + state_flops,
        attention_flops=attention.core_flops + state_flops,
        allreduce_bytes=tokens * d * dtype_bytes(dtype),
        allreduces=2 * L if tp > 1 else 0,
        layers=L,
        batch=batch,
        state_bytes=state,
    )


def decode_counts(
    spec: ModelSpec,
    batch: int,
    context_len: int,
    dtype: str,
    kv_dtype: str | None = None,
    tp: int = 1,
) -> ModelCounts:
    """One decode step with `context_len` tokens cached: each sequence feeds one token and
    attends context_len + 1 keys (the time per output token)."""
    return step_counts(spec, batch, 1, context_len + 1, dtype, kv_dtype, tp)


def prefill_counts(
    spec: ModelSpec,
    batch: int,
    prompt_len: int,
    dtype: str,
    kv_dtype: str | None = None,
    tp: int = 1,
) -> ModelCounts:
    """The prefill of a prompt of `prompt_len` tokens (the time to the first token)."""
    return step_counts(spec, batch, prompt_len, prompt_len, dtype, kv_dtype, tp)


@dataclass(frozen=True)
class ModelPrediction:
    """A whole-model step on one device of `tp`: its roofline (the overhead paid once per
    layer) plus its all-reduces."""

    counts: ModelCounts
    roofline: Roofline
    allreduce_s: float

    @property
    def time_s(self) -> float:
        return self.roofline.time_s + self.allreduce_s

    @property
    def tokens_per_s(self) -> float:
        """Decode: the batch's tokens per second (one per sequence per step)."""
        return tokens_per_s(self.counts.batch, self.time_s)


def predict_counts(
    counts: ModelCounts,
    device: DeviceSpec,
    dtype: str,
    tp: int = 1,
    model: PerfModel = DEFAULT_MODEL,
) -> ModelPrediction:
    """The time of a step of `counts` (one rank's) on `device`, at its peak for `dtype`."""
    roof = predict(
        counts.bytes,
        counts.flops,
        device.memory_bandwidth,
        flops_for(device, dtype),
        model,
        overheads=counts.layers,
        kv_bytes=counts.kv_bytes,
        attention_flops=counts.attention_flops,
    )
    per_allreduce = allreduce_s(counts.allreduce_bytes, tp, device.interconnect_bandwidth)
    return ModelPrediction(counts, roof, counts.allreduces * per_allreduce)
