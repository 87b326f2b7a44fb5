"""A roofline performance model: the time of a step from the bytes it moves, the FLOPs it
computes and the kernels it launches, on a device of measured bandwidth and FLOP/s.

A step runs two kinds of kernel one after the other, each on its own roofline: the dense
matmuls (projections, MLP, experts, head), which stream the weights and activations, and
the attention core (QK^T, softmax, PV), which reads the KV cache:

    time = dense_bytes / (efficiency_bw * bandwidth)
         + dense_flops / (efficiency_flops * matmul_rate)
         + kv_bytes / (efficiency_kv * bandwidth)
         + attention_flops / (efficiency_flops * core_rate)   (the kernel's: attention_rate)
         + overheads * overhead_s
         + kernels * launch_s
         + kernels * memory_latency_s
         + collectives
         + dequant_ops / float32_rate
         + padding_flops / (efficiency_flops * matmul_rate)
         + own_tile_flops * (1 / warp_mma_share - 1) / (efficiency_flops * matmul_rate)

`bandwidth` and the rates are what the device reaches in published microbenchmarks (a
streaming kernel, a large GEMM: model/device_types.py), not its datasheet's peaks; the
matmul rate is that of the weights' format where they quantise the activations too
(float8's, nvfp4's float4: WeightFormat.matmul_dtype), else of the activations' dtype
(weight-only int8, int4 and mxfp4 dequantise into it), the attention core's that of the
activations, as is that of a head or an attention kept in their dtype beside quantised
weights; the attention kernel's own FLOPs (QK^T and PV) run at the rate a 16-bit attention
kernel's forward pass reaches on the device, where one was measured (FlashAttention's on
the A100s and the Hoppers: DeviceSpec.attention_flops), at most the matmul rate.
Each kernel pays the device's launch cost, the gap between kernels a captured graph
replays (LAYER_KERNELS per layer, STEP_KERNELS per step, and QUANTISE_KERNELS before each
matmul whose input a float8 or nvfp4 format quantises), and waits one memory latency (a
pointer chase's past the last cache: DeviceSpec.memory_latency_s) for its first bytes,
which then stream at the bandwidth, as the latency-bandwidth model times a transfer; the
collectives are below.
Weight-only weights are turned into the activations' dtype on the CUDA cores, not the
tensor cores, each once per step (WeightFormat.dequant_ops per weight), at the device's
float32 rate. A tensor-core matmul multiplies
whole tiles of the device's mma_rows tokens (16 on Ampere, Ada and CDNA, 64 on Hopper
and Blackwell: their instruction sets), so a step of fewer tokens, a decode step of a
few sequences or a MoE expert's share of them, computes the tile's missing rows as
zeros: padding_flops, 2 per weight per padded row (Matmul), at its matmul's rate, added
as the rest is. A MoE layer's fused expert kernel tiles each expert's tokens smaller,
as the engines' MoE kernels do: the next power of two of the tokens an expert (the mean
share of an expert touched) from DeviceSpec.expert_rows (16 on Hopper: the blocks of
Triton's fused MoE; 8 on Blackwell: TensorRT-LLM's) up to the instruction's rows,
whatever the engine on that device. Small batches' weight-only kernels multiply on the
CUDA cores beside their dequantisation, untiled, or where WeightFormat.tensor_core_kernel
says so (Marlin's, in vLLM and SGLang) on the tensor cores in tiles of WEIGHT_ONLY_TILE
tokens, experts' too, whatever the device's instruction, on Ampere's warp-level mma.sync:
a Hopper runs all of that kernel's FLOPs, its tokens' and its zero rows'
(own_tile_flops), at the share of its matmul rate a microbenchmark of mma.sync reaches
against its wgmma (DeviceSpec.warp_mma_share; 1 where mma.sync is the full-rate
instruction, or not measured). The efficiencies are shares of
those figures, 1 by default (DEFAULT_MODEL), fitted by a calibration on a machine's own
runs (model/calibration.py), as is `overhead_s`, a fixed cost per layer that no roofline
sees (0 by default: the launches are counted). The cache streams at a share of its own,
`efficiency_kv` (unset: efficiency_bw): on a 2-core CPU the cache, read by one small
product per sequence and head with a softmax between, reaches a third of the weights'
rate.

Every term is summed, none overlapped. The parts run one after the other (a layer's
attention waits for its projections), and within a part the time to move the bytes and
the time to compute are added: the bound of a kernel that overlaps neither, where the
classic roofline takes the larger of the two, the bound of one that overlaps them fully.
Far from the device's ridge one term dwarfs the other and the two bounds agree; near it
(a prefill of a few hundred tokens, a decode batch of a few hundred sequences) a GEMM
streams its weight tiles in stages that only partly overlap its math, and the sum is the
nearer bound: over the 1,181 published measurements of docs/validation.md the sum's
median error is 13.1% (853 within 25%), the larger term's 17.8% (732) (both with the same
measured figures; no figure is set from them). An H200's own runs (docs/gpu.md) show the
other side: one matmul of a decode step of 128 tokens overlaps the two. Of a single
GEMM, the sum of an H100's figures gives 0.71 to 1.34 times the float8 GEMM times that
DeepGEMM's README tables on an H800 (the same chip) at 64 and 128 tokens, 0.84 to 1.10
times at 4,096 (https://github.com/deepseek-ai/DeepGEMM, its first release);
CUTLASS-based kernels of the time took 1.4 to 2.7 times DeepGEMM's at 64 and 128. The
ridge point is the device's (at efficiency_bw); `bound` names the larger term of the
longer part.

Whole-model counts reuse the one formula of each quantity: attention bytes and FLOPs from
formulas.py, parameters per part and per rank from model_params.py, KV-cache bytes (dtype,
scales, sliding windows, tensor parallelism) from capacity.py, quantised weights' bytes
from weights.py. Per rank, one step of B sequences each feeding q new tokens that attend
kv keys (decode: q 1, kv S + 1; prefill of S tokens: q S, kv S) moves:

- the weights it touches, once, with their scales where quantised: every part but the
  token embeddings (only the B*q rows looked up are read, unless the output head is tied
  to them: then the head reads the whole table) and the routed experts, of which a MoE
  layer reads those its B*q tokens, k experts each, are routed to: E * (1 - (1 -
  k/E)^(B*q)) expected where the router picks them uniformly (experts_touched), k at
  one token, all E from a few E/k tokens on; quantised
  weights keep the embeddings and the head in the activations' dtype, but a head
  quantised with them (WeightFormat.quantized_head), read and dequantised as they are,
  and the attention's projections too where WeightFormat.kept_attention (their matmuls
  then at the activations' rate, as the attention core's);
- the KV cache: every layer reads the keys its sliding window keeps (min(kv, W), the
  architecture's windows; full context on global layers) and writes the q new ones, in
  the KV dtype with its scales; an MLA layer its latents (mla_counts);
- the activations: the attention's (formulas.step_traffic_bytes), and those the layer's
  other kernels read and write, each token's through every kernel once (mlp_activations):
  small beside the weights at a decode step of a few sequences, as large as them in a
  prefill of a few thousand tokens; with float8 (nvfp4) weights, each quantised matmul's
  input quantised first, read in the activations' dtype and written in float8 (in 4 bits
  and a scale per 16) (_matmul_inputs);
- a hybrid model's state (Mamba, linear attention): every state layer reads each
  sequence's state and writes it back, 2 * its bytes per step (capacity.state_bytes), as
  part of the cache.

FLOPs: attention by formulas.forward_flops (projections and QK^T, PV over the keys the
window keeps, at least the q new tokens: a prefill over a window is counted as full
causal, an upper bound), MLA by mla_counts; 2 per parameter a token uses in the MLP, the
router and its k experts (biases included, a negligible overcount; norms and the
embedding lookup not counted); the output head for the last token of each sequence only
(B logits), as serving engines compute it; a state layer's recurrence STATE_FLOPS per
element of its recurrent state per token (decay and rank-one update, and the read-out),
its projections 2 per parameter.

A model counted by transformers (a type without formulas here) is its parts as counted:
"state layers" and "other" timed as dense matmuls, 2 FLOPs per parameter a token uses;
routed attention experts (JetMoE's) read as the experts are; a block shared by several
layers (Zamba2's) read and computed at each use (model_params.step_parts).

One attention layer's step (layer_counts; an MLA model's layer, mla_layer_counts: its
share of the model's attention part and mla_counts of one layer) is counted as a model's
layers are: its projections' weights in the step's weight format, with their scales,
dequantisation and float8 inputs (_attention_layer), its cache and its activations; no
MLP, embeddings or head, and no tile padding (as decode-speed counts a layer).

Tensor parallelism adds two all-reduces per layer (after the attention's output
projection and after the MLP's down projection) of the B*q tokens' hidden states, B*q*d
elements each, and the all-gather of the last tokens' logits from the vocabulary-split
head (B * vocab float32 values; none where each rank holds the whole vocabulary and
computes every logit: WeightFormat.replicated_vocab), each timed as the collective
library's cost model times it (device_types.Collectives): a protocol's latency plus its
bytes over its share of the bus bandwidth nccl-tests measures (2*(tp-1)/tp of them for an
all-reduce, (tp-1)/tp for an all-gather), the fastest protocol taken, not overlapped with
the compute. Where the q and k norms take their statistics across all the heads
(ModelSpec.qk_norm_across_heads: OLMo-2's, MiniMax-M2's), a rank holding some of the
heads all-reduces each token's QK_NORM_STATISTICS sums of squares in float32 in each
attention layer, one all-reduce more, as vLLM's MiniMax code runs it (its OLMo-2 and
OLMoE code gathers q and k whole instead: more bytes, which the model does not count).

Expert parallelism (ep of the tp ranks holding the routed experts whole,
model/parallelism.py) changes only the experts' part: a step is counted on the rank the
router sends the most, its experts touched and its routes each the expected largest of ep
ranks', each expert's weights there ep/tp of it; its tile padding keeps each touched
expert's mean share of the routes; the all-reduces are the same. Data-parallel attention
(dp_attention) runs each rank's own share of the batch, ceil(B / tp) sequences, through
the whole attention (its weights, every head's cache and FLOPs: tp 1) and the rest of the
layer through every rank's tokens: an all-gather before each layer's MLP and a
reduce-scatter after it (allgather_s each, of the B*q tokens' hidden states) take the
place of its two all-reduces.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from ..errors import FieldError
from .architecture import ModelSpec
from .capacity import (
    KvFormat,
    cache_bytes,
    ceil_div,
    check_tp_split,
    kv_cache_bytes,
    kv_heads_per_rank,
    layer_tokens,
    model_layout,
    positive_int,
    state_bytes,
    token_layout,
)
from .devices import Collectives, DeviceSpec, attention_flops_for, flops_for
from .dtypes import MODEL_DTYPES, check_dtype, dtype_bytes, packed_bytes
from .formulas import (
    attention_core_flops,
    attention_params,
    forward_flops,
    step_traffic_bytes,
    visible_pairs,
)
from .model_params import (
    has_whole_model,
    part_params,
    require_body,
    routed_attention,
    step_parts,
    step_traits,
)
from .parallelism import (
    attention_split,
    busiest,
    check_dp_attention,
    check_model_ep,
    data_parallel,
)
from .shapes import AttentionShape
from .weights import WeightFormat, weight_format

#: The most a calibrated efficiency may be: above 1 a measured peak may sit under the
#: datasheet's (boost clocks), far above it the peaks given do not match the device.
MAX_EFFICIENCY = 1.5
#: The least a calibrated efficiency may be. A calibration fitted against another
#: device's peaks (a CPU's runs against an H100's) holds shares of 1e-5 and less; under a
#: billionth no device runs, and far under it a step's time and the ridge stop being
#: numbers (an efficiency of 1e-308 makes them infinite).
MIN_EFFICIENCY = 1e-9
#: FLOPs per element of a state layer's recurrent state, per token: the decay and the
#: rank-one update of the state (2), and the read-out against it (2).
STATE_FLOPS = 4

#: The float32 values per token that the all-reduce of q and k norms spanning the heads
#: sums across the ranks: the sums of squares of the token's query and of its key
#: (vLLM's MiniMaxText01RMSNormTP.forward_qk, one all-reduce of both a layer).
QK_NORM_STATISTICS = 2

#: Kernels one layer's decode or prefill step launches in a serving engine, counted from
#: vLLM's Llama layer: RMSNorm, the fused QKV matmul, rotary embedding, the cache write,
#: attention, the output projection, the fused residual-add RMSNorm, the fused gate/up
#: matmul, SiLU-and-multiply, the down projection. A state layer launches as many (its
#: norm, projections, convolution, scan and gate); a MoE layer's router and top-k and
#: its experts' sorting add MOE_KERNELS, its shared experts their gated MLP's
#: SHARED_EXPERT_KERNELS (gate/up, activation, down: vLLM's DeepseekV2MLP). Fusing
#: compilers launch fewer.
LAYER_KERNELS = 10
MOE_KERNELS = 3
SHARED_EXPERT_KERNELS = 3
#: Kernels once per step: the embedding lookup, the final norm, the output head, sampling.
STEP_KERNELS = 4
#: Of LAYER_KERNELS, the attention's (norm, QKV, rotary, cache write, attention, output).
ATTENTION_KERNELS = 6
#: Kernels a matmul adds whose weights' format quantises its input too (float8, nvfp4):
#: the input's quantisation, launched before it (vLLM's apply_fp8_linear runs
#: scaled_fp8_quant, then cutlass_scaled_mm:
#: https://github.com/vllm-project/vllm/blob/0039d4bdd8b569a09663acc7dd3fbef7cbb718ee/vllm/model_executor/layers/quantization/utils/w8a8_utils.py;
#: its fused MoE quantises the input of each of its two grouped matmuls so).
QUANTISE_KERNELS = 1
#: The tokens of the tile a weight-only kernel on the tensor cores multiplies: Marlin's
#: mma.sync m16n8k16, the activations its A operand ("thread_m_blocks, number of 16x16
#: blocks in the m dimension (batchsize)", "batchsizes that are not multiples of 16":
#: https://github.com/IST-DASLab/marlin/blob/0f102e119bddf2f03cff9f944d065b04952028fa/marlin/marlin_cuda_kernel.cu).
WEIGHT_ONLY_TILE = 16
#: An MLA layer's attention, counted from vLLM's MultiHeadLatentAttentionWrapper and its
#: absorbed decode: the norm, the latent's down-projection and the queries' projection,
#: the latent's norm, rotary embedding, the queries' absorption into the latent and the
#: values' up-projection (two batched matmuls), the cache write, attention, the output
#: projection. Low-rank queries (DeepSeek-V2 and V3) launch one more: their
#: down-projection fused with the latent's, their norm, their up-projection.
MLA_KERNELS = 10


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
            if value < MIN_EFFICIENCY:
                reason = f"is below {MIN_EFFICIENCY:g}, a billionth of the peaks"
                raise FieldError(name, value, reason)
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


#: Defaults: a step reaches the device's measured figures (device_types: a streaming
#: kernel's bandwidth, a large GEMM's FLOP/s), and its kernels' launches and collectives
#: are counted apart, so no share or overhead per layer is left to assume. A calibration
#: (model/calibration.py) fits them where a machine's own runs are at hand.
DEFAULT_MODEL = PerfModel(
    efficiency_bw=1.0, efficiency_flops=1.0, overhead_s=0.0, source="defaults"
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
    core_peak_flops: float | None = None,
    kernel_flops: int = 0,
    kernel_peak_flops: float | None = None,
) -> Roofline:
    """The time of moving `bytes` and computing `flops` at `bandwidth` (bytes/s) and
    `peak_flops` (FLOP/s), paying model.overhead_s `overheads` times (a whole model: once
    per layer): `kv_bytes` of the bytes and `attention_flops` of the FLOPs are the
    attention core's, on a roofline of their own (see the module's notes), at
    `core_peak_flops` (default peak_flops: float8 matmuls beside a 16-bit attention),
    `kernel_flops` of them, the attention kernel's, at `kernel_peak_flops` (default
    core_peak_flops)."""
    if bytes <= 0 or flops < 0 or not 0 <= kv_bytes <= bytes:
        raise ValueError(
            f"a step moves bytes > 0, kv_bytes of them, and computes flops >= 0, got "
            f"{bytes}, {kv_bytes}, {flops}"
        )
    if not 0 <= attention_flops <= flops:
        raise ValueError(f"attention_flops {attention_flops} must be in [0, flops {flops}]")
    if not 0 <= kernel_flops <= attention_flops:
        raise ValueError(f"kernel_flops {kernel_flops} must be in [0, {attention_flops}]")
    core_peak_flops = core_peak_flops or peak_flops
    kernel_peak_flops = kernel_peak_flops or core_peak_flops
    if bandwidth <= 0 or min(peak_flops, core_peak_flops, kernel_peak_flops) <= 0:
        raise ValueError(
            f"bandwidth and the FLOP/s must be > 0, got {bandwidth}, {peak_flops}, "
            f"{core_peak_flops}, {kernel_peak_flops}"
        )
    flops_rate = model.efficiency_flops * peak_flops
    dense = (
        (bytes - kv_bytes) / (model.efficiency_bw * bandwidth),
        (flops - attention_flops) / flops_rate,
    )
    core = (
        kv_bytes / (model.kv_efficiency * bandwidth),
        (attention_flops - kernel_flops) / (model.efficiency_flops * core_peak_flops)
        + kernel_flops / (model.efficiency_flops * kernel_peak_flops),
    )
    longer = max(dense, core, key=max)
    return Roofline(
        time_s=sum(dense) + sum(core) + overheads * model.overhead_s,
        bytes=bytes,
        flops=flops,
        intensity=flops / bytes,
        ridge=flops_rate / (model.efficiency_bw * bandwidth),
        bound="compute" if longer[1] > longer[0] else "memory",
    )


def tokens_per_s(tokens: int, time_s: float) -> float:
    """Tokens produced per second: a decode step of B sequences makes B tokens."""
    return tokens / time_s


def norm_statistics_bytes(tokens: int) -> int:
    """Bytes of one all-reduce of `tokens` tokens' q and k norm statistics, in float32."""
    return tokens * QK_NORM_STATISTICS * dtype_bytes("float32")


def allreduce_s(bytes: int, tp: int, device: DeviceSpec) -> float:
    """Time of one all-reduce of `bytes` over `tp` ranks of `device`: nccl-tests' busbw =
    algbw * 2*(tp-1)/tp, so 2*(tp-1)/tp * bytes over the bus bandwidth (a protocol's share
    of it), plus the latency of its 2*(tp-1) ring steps; 0 at tp 1."""
    return _collective_s(bytes, tp, device, 2 * (tp - 1))


def allgather_s(bytes: int, tp: int, device: DeviceSpec) -> float:
    """Time of an all-gather whose result is `bytes` on every rank (nccl-tests: busbw =
    algbw * (tp-1)/tp), plus the latency of its tp-1 ring steps; 0 at tp 1."""
    return _collective_s(bytes, tp, device, tp - 1)


def _collective_s(bytes: int, tp: int, device: DeviceSpec, steps: int) -> float:
    positive_int("tp", tp)
    if tp == 1:
        return 0.0
    return collectives_of(device, tp).time_s(steps / tp * bytes, steps)


def collectives_of(device: DeviceSpec, tp: int) -> Collectives:
    """The collectives that join `tp` ranks of `device`, or a FieldError naming tp: a
    device without an interconnect, or more ranks than one node's GPUs (between nodes
    the collectives cross the network, which is not timed)."""
    collectives = device.collectives
    if collectives is None:
        raise FieldError("tp", tp, f"needs a device with an interconnect, not {device.name}")
    if tp > collectives.node_gpus:
        reason = (
            f"spans more than the {collectives.node_gpus} GPUs of one {device.name} node, "
            "whose interconnect times the collectives; between nodes they cross the "
            "network, which attnbench does not time"
        )
        raise FieldError("tp", tp, reason)
    return collectives


def check_timed_tp(device: DeviceSpec, tp: int, num_heads: int, num_kv_heads: int) -> None:
    """FieldError naming tp where a step on `tp` ranks of `device` cannot be timed: no
    collective of it joins them (collectives_of), or they do not split the heads, the tps
    that do listed only as far as the device times them (check_tp_split at most_tp)."""
    if tp > 1:
        collectives_of(device, tp)
    check_tp_split(num_heads, num_kv_heads, tp, device.most_tp)


@dataclass(frozen=True)
class Matmul:
    """Matmuls of a step that multiply `weights` weights (N*K, summed over layers) by the
    activations of `tokens` tokens (M; a MoE expert's: the mean of its share, a fraction),
    at the rate of `dtype` (None: the step's matmul dtype)."""

    tokens: float
    weights: int
    dtype: str | None = None
    #: A mixture of experts' grouped expert GEMM, whose kernel tiles each expert's tokens
    #: (its `tokens`, a share) as DeviceSpec.expert_rows says.
    grouped: bool = False
    #: The rows of the kernel's own tile, whatever the device's instruction (0: the
    #: device's): a weight-only kernel on the tensor cores, WEIGHT_ONLY_TILE.
    tile: int = 0
    #: The FLOPs of its tokens' rows where they are not 2 per weight per token (0): the
    #: busiest rank's experts under expert parallelism, whose routes are not the mean
    #: share of the experts it holds that pads their tiles.
    token_flops: float = 0.0

    @property
    def flops(self) -> float:
        """The FLOPs of its tokens' rows: 2 per weight per token, or token_flops."""
        return self.token_flops or 2 * self.tokens * self.weights

    def padding_flops(self, rows: int, expert_rows: int = 0) -> float:
        """FLOPs on the zero rows that pad the tokens to a whole number of tiles of `rows`
        (the matmul's own `tile` where set): 2 per weight per padded row. A tensor-core
        instruction multiplies a tile of `rows` rows whatever the tokens fill of it (tile
        quantization). A grouped expert GEMM, where `expert_rows` is set, tiles each
        expert's tokens to the next power of two of their whole count from `expert_rows`
        up to `rows`, as its kernel picks it, unless the matmul has its own tile (on a
        device with tensor cores: `rows` above 1)."""
        if self.tile and rows > 1:
            rows = self.tile
        elif self.grouped and expert_rows:
            whole = 1 << max(int(self.tokens) - 1, 0).bit_length()  # the next power of two
            rows = min(rows, max(expert_rows, whole))
        # a share computed in floats may land a hair above a whole number of tiles (16 tokens
        # an expert as 16.000000161): tiles counted to a millionth
        padded = math.ceil(round(self.tokens / rows, 6)) * rows
        return 2 * max(padded - self.tokens, 0.0) * self.weights


def experts_touched(experts: int, k: int, tokens: int) -> float:
    """The experts of a MoE layer that `tokens` tokens, each routed to `k` of `experts`,
    send to, expected when the router picks them uniformly: one token misses an expert
    with probability 1 - k/E, all of them with its power, so E * (1 - (1 - k/E)^tokens):
    k at one token, within 5% of E from 3E/k tokens on."""
    return experts * (1 - (1 - k / experts) ** tokens)


@dataclass(frozen=True)
class ModelCounts:
    """One step of a whole model on one tensor-parallel rank (see the module's notes)."""

    weight_bytes: int
    #: The cache read and written: K/V, and a hybrid's state (state_bytes of it).
    kv_bytes: int
    activation_bytes: int
    flops: int
    #: Of the FLOPs, those at the activations' rate: the attention core's (QK^T and PV),
    #: and beside quantised weights the output head's where it stays in the activations'
    #: dtype, and the attention's projections where they are kept (kept_attention).
    attention_flops: int
    #: Bytes of each all-reduce, and how many the step makes (0 at tp 1).
    allreduce_bytes: int
    allreduces: int
    layers: int
    #: Sequences in the batch: the tokens a decode step produces.
    batch: int
    state_bytes: int = 0
    #: Kernels the step launches (each pays the device's launch cost).
    kernels: int = LAYER_KERNELS
    #: The logits every rank gathers from a vocabulary-split head (0 at tp 1).
    gather_bytes: int = 0
    #: All-gathers and reduce-scatters of the step's hidden states, allreduce_bytes each,
    #: around the MLPs of a data-parallel attention (0 otherwise).
    gathers: int = 0
    #: All-reduces of the sums of squares of q and k norms that span the heads split over
    #: the ranks (ModelSpec.qk_norm_across_heads), one an attention layer, of
    #: QK_NORM_STATISTICS float32 values a token each (0 otherwise).
    norm_allreduces: int = 0
    norm_allreduce_bytes: int = 0
    #: The dtype of the dense matmuls (float8 weights: float8; nvfp4: float4), None: the
    #: step's dtype.
    matmul_dtype: str | None = None
    #: Operations that dequantise weight-only weights (int8, int4, mxfp4), each once.
    dequant_ops: int = 0
    #: The step's tensor-core matmuls, by the tokens each multiplies (tile padding).
    matmuls: tuple[Matmul, ...] = ()
    #: Of attention_flops, the attention kernel's (QK^T and PV), at the device's attention
    #: rate (devices.attention_flops_for).
    attention_core_flops: int = 0

    @property
    def bytes(self) -> int:
        return self.weight_bytes + self.kv_bytes + self.activation_bytes

    def padding_flops(self, rows: int, dtype: str | None = None, expert_rows: int = 0) -> float:
        """FLOPs the tensor cores spend on the zero rows of the last tiles of the matmuls
        at the rate of `dtype` (None: those at the step's matmul dtype), with tiles of
        `rows` tokens (1: no tile) but where a matmul has its own, a grouped expert GEMM's
        from `expert_rows` (Matmul.padding_flops)."""
        return sum(m.padding_flops(rows, expert_rows) for m in self.matmuls if m.dtype == dtype)

    def own_tile_flops(self, rows: int, dtype: str | None = None, expert_rows: int = 0) -> float:
        """The FLOPs, their tokens' and their padding's, of the matmuls at the rate of
        `dtype` whose kernel has its own tile (Matmul.tile: a weight-only kernel on the
        tensor cores, Marlin's), on a device whose tensor cores tile `rows` tokens."""
        return sum(
            m.flops + m.padding_flops(rows, expert_rows)
            for m in self.matmuls
            if m.tile and m.dtype == dtype
        )


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


def attention_kernels(spec: ModelSpec) -> int:
    """Kernels one layer's attention of `spec` launches: ATTENTION_KERNELS, or an MLA
    layer's MLA_KERNELS (one more with low-rank queries)."""
    if spec.mla is None:
        return ATTENTION_KERNELS
    return MLA_KERNELS + (1 if spec.mla.q_lora_rank else 0)


def launched_kernels(spec: ModelSpec, routed: bool) -> int:
    """Kernels one step of `spec` launches: LAYER_KERNELS a layer (its attention's as
    attention_kernels counts them); in each layer with `routed` experts MOE_KERNELS more,
    and SHARED_EXPERT_KERNELS more where shared experts sit beside them; STEP_KERNELS once.
    A model counted by transformers, whose layers' experts attnbench does not know,
    takes MOE_KERNELS in every layer and no shared experts."""
    L = spec.num_layers
    per_layer = LAYER_KERNELS - ATTENTION_KERNELS + attention_kernels(spec)
    moe = spec.body.moe if spec.body is not None else None
    moe_layers = moe.moe_layers(L) if moe is not None else L
    shared = SHARED_EXPERT_KERNELS if moe is not None and moe.shared_width else 0
    extra = (MOE_KERNELS + shared) * moe_layers if routed else 0
    return L * per_layer + extra + STEP_KERNELS


def quantising_kernels(spec: ModelSpec, routed: bool, attention: bool, head: bool) -> int:
    """Kernels one step of `spec` launches to quantise the inputs of its matmuls, where
    the weights' format quantises them (QUANTISE_KERNELS each): per layer, the MLP's two
    (gate/up, down) or, in a layer of `routed` experts, theirs, and two more for shared
    experts beside them; unless not `attention` (kept in the model's dtype), each
    attention layer's projections (quantised_projections); and the output head's input
    where `head` is quantised with the rest. As launched_kernels, every layer counts as a
    transformer layer: a state layer's projections are counted as an MLP's, and a model
    counted by transformers has no shared experts."""
    L = spec.num_layers
    moe = spec.body.moe if spec.body is not None else None
    shared = 2 * moe.moe_layers(L) if routed and moe is not None and moe.shared_width else 0
    projections = quantised_projections(spec) * spec.kv_layers if attention else 0
    return QUANTISE_KERNELS * (2 * L + shared + projections + (1 if head else 0))


def quantised_projections(spec: ModelSpec | None) -> int:
    """Matmuls of one attention layer whose inputs a quantising format quantises: QKV and
    the output projection; an MLA layer's three, its down-projections (with low-rank
    queries, the latent's and the queries' fused; without, the queries' projection and
    the latent's apart), the queries' up-projection where they are low-rank, and the
    output (the absorbed matmuls run in the activations' dtype). A layer shape (None):
    two."""
    return 3 if spec is not None and spec.mla is not None else 2


def layer_counts(
    shape: AttentionShape,
    batch: int,
    q_len: int,
    kv_len: int,
    dtype: str,
    kv_dtype: str | None = None,
    tp: int = 1,
    weights: str | WeightFormat | None = None,
    qk_norm_across_heads: bool = False,
) -> ModelCounts:
    """One attention layer's step on one of `tp` ranks (its projections' weights, its
    cache, its activations; one all-reduce of its output under tensor parallelism, and
    one of its q and k norms' statistics where they span the heads,
    `qk_norm_across_heads`): the layer decode-speed times. A decode step at context S is
    q_len 1, kv_len S + 1; a prefill of S tokens q_len S, kv_len S. Its projections'
    weights are in `weights` (default `dtype`), as a whole model's are (_attention_layer)."""
    check_dtype(dtype, "dtype", MODEL_DTYPES)
    attention = attention_counts(shape, batch, q_len, kv_len, dtype, kv_dtype, tp)
    rank = rank_shape(shape, tp)
    # the projections' FLOPs are in forward_flops, with the core's
    params = attention_params(rank)
    kernels = ATTENTION_KERNELS, quantised_projections(None)
    inputs = _qkvo_inputs(shape.d_model, shape.num_heads, shape.head_dim, tp)  # type: ignore[arg-type]
    layer = _attention_layer(
        attention, params, 0, shape, batch, q_len, dtype, tp, weights, kernels, inputs
    )
    if tp > 1 and qk_norm_across_heads:
        statistics = norm_statistics_bytes(batch * q_len)
        return replace(layer, norm_allreduces=1, norm_allreduce_bytes=statistics)
    return layer


def mla_layer_counts(
    spec: ModelSpec,
    batch: int,
    q_len: int,
    kv_len: int,
    dtype: str,
    kv_dtype: str | None = None,
    tp: int = 1,
    weights: str | WeightFormat | None = None,
) -> ModelCounts:
    """One MLA layer of `spec` (DeepSeek-V2/V3) on one of `tp` ranks, as step_counts counts
    each of the model's: its projections' weights (one layer's share of the model's
    attention part: the down-projections replicated, the up-projections and the output
    split by heads), its latent cache read and written and its attention (mla_counts of
    one layer), 2 FLOPs per projection weight per token; in `weights` (default `dtype`)."""
    check_dtype(dtype, "dtype", MODEL_DTYPES)
    attention = mla_counts(spec, batch, q_len, kv_len, dtype, kv_dtype, tp, layers=1)
    params = ceil_div(part_params(spec, tp)["attention"], spec.num_layers)
    shape = spec.attention_shape()
    flops = 2 * batch * q_len * params
    kernels = attention_kernels(spec), quantised_projections(spec)
    return _attention_layer(
        attention,
        params,
        flops,
        shape,
        batch,
        q_len,
        dtype,
        tp,
        weights,
        kernels,
        attention_inputs(spec, tp),
    )


def _attention_layer(
    attention: AttentionCounts,
    params: int,
    projection_flops: int,
    shape: AttentionShape,
    batch: int,
    q_len: int,
    dtype: str,
    tp: int,
    weights: str | WeightFormat | None,
    kernels: tuple[int, int],
    inputs: int,
) -> ModelCounts:
    """One attention layer's step from its attention's counts and its `params` projection
    weights (on this rank), stored in `weights` as step_counts stores a model's: packed
    with their scales, their matmuls at the format's rate, weight-only ones dequantised
    once, float8 and nvfp4 ones fed inputs quantised first, all kept in `dtype` where the
    format keeps the attention; `projection_flops` beside the
    attention's FLOPs (0 where those hold them); `kernels`: those its attention launches
    (attention_kernels) and its projections whose inputs a quantising format quantises,
    QUANTISE_KERNELS more each (quantised_projections), `inputs` elements a token
    (attention_inputs)."""
    fmt = weight_format(weights or dtype)
    if fmt.kept_attention:  # a layer's projections are its attention's: kept as they are
        fmt = weight_format(dtype)
    launched, quantised = kernels
    if fmt.activation_quant_bytes(dtype) > 0:
        launched += QUANTISE_KERNELS * quantised
    tokens, d = batch * q_len, shape.d_model
    return ModelCounts(
        weight_bytes=fmt.bytes(params, d),
        kv_bytes=attention.kv_bytes,
        activation_bytes=attention.activation_bytes
        + round(tokens * fmt.activation_quant_bytes(dtype) * inputs),
        flops=attention.flops + projection_flops,
        attention_flops=attention.core_flops,
        attention_core_flops=attention.core_flops,
        allreduce_bytes=tokens * d * dtype_bytes(dtype),
        allreduces=1 if tp > 1 else 0,
        layers=1,
        batch=batch,
        kernels=launched,
        matmul_dtype=fmt.matmul_dtype(dtype),
        dequant_ops=fmt.dequant_ops * params,
    )


def mla_counts(
    spec: ModelSpec,
    batch: int,
    q_len: int,
    kv_len: int,
    dtype: str,
    kv_dtype: str | None = None,
    tp: int = 1,
    layers: int | None = None,
) -> AttentionCounts:
    """One step of every MLA layer of `spec` (DeepSeek-V2/V3), or of `layers` of them, on
    one of `tp` ranks, weights aside. Each rank keeps the whole latent cache (kv_lora_rank
    + qk_rope_head_dim per token) and reads it once per layer; its query heads are split.

    A decode step (q_len 1) runs the absorbed form, as FlashMLA and vLLM do: the keys are
    the latents themselves, so each query head scores every cached latent (2*(r + rope)
    FLOPs per key) and sums them (2*r), and the up-projections are applied to the query
    and the output instead of to the keys. A prefill (q_len > 1) expands the latents into
    per-head keys and values and attends them: 2*(nope + rope) + 2*v FLOPs per visible
    pair and head. The projections' FLOPs are 2 per weight per token, counted with the
    other weights: the step's own tokens' expansion is their up-projection's; the
    latents cached before them (kv_len - q_len) are expanded here, 2*r*(nope + v) FLOPs
    per latent and head."""
    mla = spec.mla
    assert mla is not None
    for field, value in (("batch", batch), ("q_len", q_len), ("kv_len", kv_len)):
        positive_int(field, value)
    heads, r = spec.num_heads // tp, mla.kv_lora_rank
    L = spec.num_layers if layers is None else layers
    layout = model_layout(spec, KvFormat(kv_dtype or dtype), tp)
    kv = L * (
        cache_bytes(layout, {None: 1}, {kv_len: batch}).total
        + cache_bytes(layout, {None: 1}, {q_len: batch}).total
    )
    pairs = batch * visible_pairs(q_len, kv_len, True)
    qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim
    if q_len == 1:
        core = 2 * (2 * r + mla.qk_rope_head_dim) * heads * pairs
        expand = 0
    else:
        core = 2 * (qk + mla.v_head_dim) * heads * pairs
        # the step's own tokens' keys and values are its up-projection's output, counted
        # with the projections; the latents cached before them are expanded again
        cached = kv_len - q_len
        expand = 2 * batch * cached * r * heads * (mla.qk_nope_head_dim + mla.v_head_dim)
    # x read, the query, the attention's output and the layer's output
    width = spec.d_model * 2 + heads * (qk + mla.v_head_dim)
    activations = L * batch * q_len * width * dtype_bytes(dtype)
    return AttentionCounts(kv, activations, L * (core + expand), L * core)


def mlp_activations(parts: Mapping[str, int], expert_weights: int, layers: int, d: int) -> int:
    """Elements one token's activations move through a step's kernels besides the
    attention's, on one rank of `parts` (part_params): each norm reads and writes d (2 per
    norm weight); each MLP reads its input and writes its output (2d a layer); within it,
    each matmul writes its output for the next kernel to read, and the activation function
    reads the gate and up outputs and writes their product: 2 per weight over d (gated,
    3dI weights: 2I written, 2I read, I written, I read, 6I; plain, 2dI weights: 4I); the
    routed experts a token goes to, `expert_weights` of them, the same."""
    return 2 * parts["norms"] + 2 * layers * d + 2 * (parts["mlp"] + expert_weights) // d


def _matmul_inputs(
    spec: ModelSpec,
    parts: Mapping[str, int],
    expert_weights: int,
    tp: int,
    attention: bool = True,
) -> int:
    """Elements one token feeds the dense matmuls of a step on one rank: each attention
    layer's matmuls what attention_inputs says, unless not `attention`; each layer's MLP
    reads d, and its down projection I / tp (the MLP's weights over 3d, gated); the
    routed experts a token goes to, the same; shared experts beside them read d again
    (their gate/up matmul quantises its own input)."""
    d = spec.d_model
    inputs = spec.num_layers * d + (parts["mlp"] + expert_weights) // (3 * d)
    moe = spec.body.moe if spec.body is not None else None
    routed = expert_weights > 0  # the step runs routed experts (step_counts)
    if routed and moe is not None and moe.shared_width:
        inputs += moe.moe_layers(spec.num_layers) * d
    if attention:
        inputs += spec.kv_layers * attention_inputs(spec, tp)
    return inputs


def attention_inputs(spec: ModelSpec, tp: int) -> int:
    """Elements one token feeds one attention layer's matmuls on one of `tp` ranks
    (_qkvo_inputs); an MLA layer's (quantised_projections): its down-projections
    read d (low-rank queries': one, fused with the latent's; else the queries' and the
    latent's, 2d), its queries' up-projection the query latent (q_lora_rank), and its
    output projection the attention's output, heads * v_head_dim / tp."""
    d, mla = spec.d_model, spec.mla
    if mla is None:
        return _qkvo_inputs(d, spec.num_heads, spec.head_dim, tp)
    down = d + mla.q_lora_rank if mla.q_lora_rank else 2 * d
    return down + spec.num_heads * mla.v_head_dim // tp


def _qkvo_inputs(d: int, heads: int, head_dim: int, tp: int) -> int:
    """Elements one token feeds one attention layer's matmuls on one of `tp` ranks: its q,
    k and v projections read d, its output projection the attention's output, heads *
    head_dim / tp."""
    return d + heads * head_dim // tp


def step_counts(
    spec: ModelSpec,
    batch: int,
    q_len: int,
    kv_len: int,
    dtype: str,
    kv_dtype: str | None = None,
    tp: int = 1,
    weights: str | WeightFormat | None = None,
    ep: int = 1,
    dp_attention: bool = False,
) -> ModelCounts:
    """Counts of one step of `batch` sequences each feeding `q_len` new tokens that attend
    `kv_len` keys (the new ones included), activations in `dtype`, weights in `weights`
    (default: `dtype`; quantised weights keep the embeddings and the output head in
    `dtype`), the cache in `kv_dtype` (default: `dtype`), on the busiest of `tp` ranks,
    the routed experts split whole over `ep` of them (model/parallelism.py), the
    attention data-parallel over the ranks where `dp_attention` (see the module's notes)."""
    if not has_whole_model(spec):
        require_body(spec)  # raises: the whole model is not known
    check_dtype(dtype, "dtype", MODEL_DTYPES)
    for field, value in (("batch", batch), ("q_len", q_len), ("kv_len", kv_len)):
        positive_int(field, value)
    fmt = weight_format(weights or dtype)
    parts, traits = step_parts(spec, tp, fmt.replicated_vocab), step_traits(spec)
    check_model_ep(spec, ep, tp)
    tokens, L, d = batch * q_len, spec.num_layers, spec.d_model
    routed_attn = routed_attention(spec, tp)  # read as the experts are
    # the attention's rank: data-parallel, its own sequences with the whole attention
    dp_attention = data_parallel(tp, dp_attention)
    if dp_attention:
        check_dp_attention(spec)
    attn_batch, attn_tp = attention_split(batch, tp, dp_attention)
    attn_tokens = attn_batch * q_len
    attn_params = step_parts(spec, 1)["attention"] if dp_attention else parts["attention"]
    split_vocab = tp > 1 and not fmt.replicated_vocab
    vocab_rows = ceil_div(traits.vocab_size, tp if split_vocab else 1)  # this rank's
    split_norms = attn_tp > 1 and spec.qk_norm_across_heads

    # weights: embeddings as looked up (or whole, as the tied head), routed experts touched
    body = sum(parts.values()) - parts["embeddings"] - parts["experts"] - parts["output head"]
    body += attn_params - parts["attention"] - routed_attn
    # the attention's projections kept in `dtype` beside quantised weights
    kept = attn_params - routed_attn if fmt.kept_attention else 0
    body -= kept
    if traits.tied_embeddings:
        table = parts["embeddings"]
    else:
        # the rows looked up: a data-parallel attention's rank its own tokens' in a whole
        # table
        looked_up, rows = (attn_tokens, traits.vocab_size) if dp_attention else (tokens, vocab_rows)
        table = (min(looked_up, rows) + (looked_up if traits.position_embeddings else 0)) * d
        if fmt.quantized_head:  # read with the rest, in the weights' format
            body += parts["output head"]
        else:
            table += parts["output head"]
    head = vocab_rows * d
    # the head quantised with the rest (a head tied to the embeddings stays in `dtype`);
    # weight-only, like the layers' weights, it multiplies where they do
    head_quantised = fmt.quantized_head and not traits.tied_embeddings
    head_on_cuda_cores = bool(fmt.dequant_ops) and head_quantised and not fmt.tensor_core_kernel
    dense_parts = ("mlp", "router", "state layers", "other")
    # every token goes through the projections and the dense matmuls (MLA's projections
    # are in "attention" too), the head through the last token of each sequence
    dense_params = sum(parts.get(p, 0) for p in dense_parts)
    matmuls = [Matmul(tokens, dense_params), Matmul(attn_tokens, attn_params - kept - routed_attn)]
    if routed_attn:  # routed attention projections (JetMoE's): those of the experts touched
        experts, k = traits.num_experts, traits.experts_per_token
        touched = experts_touched(experts, k, attn_tokens)
        held = round(routed_attn / experts * touched)
        matmuls.append(Matmul(attn_tokens * k / touched, held, grouped=True))
    expert_flops, expert_weights = 0, 0
    routed_experts = bool(traits.num_experts and parts["experts"])
    if routed_experts:
        experts, k = traits.num_experts, traits.experts_per_token
        # this rank's part of one expert over every MoE layer: 1/tp of it, ep/tp split whole
        per_expert = parts["experts"] // experts * ep
        touched = experts_touched(experts, k, tokens)
        # each expert touched multiplies its share of the tokens' k routes
        share, routes = tokens * k / touched, tokens * k
        if ep > 1:  # the busiest rank's experts touched and routes
            touched = busiest(experts // ep, touched / experts, ep)
            routes = busiest(routes, 1 / ep, ep)
        body += round((per_expert + routed_attn / experts) * touched)  # ep 1 where routed
        # what one token goes through on this rank (ep > 1: on the busiest, its routes' mean)
        expert_weights = round(routes / tokens * per_expert)
        expert_flops = 2 * tokens * expert_weights
        held = round(per_expert * touched)  # the weights of the experts touched here
        matmuls.append(Matmul(share, held, grouped=True, token_flops=expert_flops))
    # weight-only: on the CUDA cores, untiled, or on the tensor cores in the kernel's tiles
    tile = WEIGHT_ONLY_TILE if fmt.tensor_core_kernel else 0
    if fmt.dequant_ops:
        matmuls = [replace(m, tile=tile) for m in matmuls] if tile else []
    # what stays in `dtype` beside quantised weights multiplies at its rate: a kept
    # attention, and the head unless quantised too (weight-only: the step's rate anyway)
    head_kept = fmt.quantized and not head_quantised
    own_rate = None if fmt.dequant_ops else dtype
    if kept:
        matmuls.append(Matmul(attn_tokens, kept, own_rate))
    if not head_on_cuda_cores:
        head_tile = tile if head_quantised else 0
        matmuls.append(Matmul(batch, head, own_rate if head_kept else None, tile=head_tile))

    if spec.mla is not None:
        attention = mla_counts(spec, attn_batch, q_len, kv_len, dtype, kv_dtype, attn_tp)
    else:
        attention = attention_counts(
            AttentionShape(d, spec.num_heads, spec.num_kv_heads, spec.head_dim),
            attn_batch,
            q_len,
            kv_len,
            dtype,
            kv_dtype,
            attn_tp,
            spec.windows or (None,) * spec.kv_layers,
        )
    dense = 2 * tokens * dense_params
    projections = attention.flops - attention.core_flops  # the shape's (MLA: expansions)
    routed = 0  # of them, the routed projections' (JetMoE's attention experts)
    if spec.mla is not None:  # the MLA projections: 2 per weight per token
        projections += 2 * attn_tokens * attn_params
    elif spec.body is None:
        # a model counted by transformers, whose layer shape need not say its projections
        # (Zamba2's shared block projects the hidden state and the embeddings joined, at
        # each use): 2 per weight per token, routed ones (JetMoE's) for a token's share
        routed = routed_attn * traits.experts_per_token // max(traits.num_experts, 1)
        projections = 2 * attn_tokens * (attn_params - routed_attn + routed)
    state = 2 * state_bytes(spec.layer_states, dtype, batch, tp)
    quantising = fmt.activation_quant_bytes(dtype) > 0
    # elements the quantised matmuls' inputs hold: each token's, the attention's for the
    # rank's own tokens where it is data-parallel
    inputs = tokens * _matmul_inputs(spec, parts, expert_weights, tp, not kept and not dp_attention)
    if dp_attention and not kept:
        own = attention_inputs(spec, 1)
        inputs += attn_tokens * spec.kv_layers * own
    recurrent = sum(ceil_div(s.recurrent, tp) for s in spec.layer_states if s is not None)
    state_flops = STATE_FLOPS * tokens * recurrent
    return ModelCounts(
        weight_bytes=fmt.bytes(body, d) + packed_bytes(table + kept, dtype),
        kv_bytes=attention.kv_bytes + state,
        activation_bytes=attention.activation_bytes
        + tokens * mlp_activations(parts, expert_weights, L, d) * dtype_bytes(dtype)
        + round(inputs * fmt.activation_quant_bytes(dtype)),
        flops=attention.core_flops
        + projections
        + dense
        + expert_flops
        + 2 * batch * head
        + state_flops,
        # kept projections at the activations' rate; routed ones stay quantised
        attention_flops=attention.core_flops
        + state_flops
        + (projections - 2 * attn_tokens * routed if kept else 0)
        + (2 * batch * head if head_kept else 0),
        allreduce_bytes=tokens * d * dtype_bytes(dtype),
        allreduces=2 * L if tp > 1 and not dp_attention else 0,
        # data-parallel attention: the tokens gathered before each layer's MLP or
        # experts, and their outputs scattered back
        gathers=2 * L if dp_attention else 0,
        norm_allreduces=spec.kv_layers if split_norms else 0,
        norm_allreduce_bytes=norm_statistics_bytes(attn_tokens) if split_norms else 0,
        layers=L,
        batch=batch,
        state_bytes=state,
        kernels=launched_kernels(spec, routed_experts)
        + (quantising_kernels(spec, routed_experts, not kept, head_quantised) if quantising else 0),
        # each rank's logits of the last token of every sequence, in float32
        gather_bytes=batch * vocab_rows * tp * 4 if split_vocab else 0,
        matmul_dtype=fmt.matmul_dtype(dtype),
        dequant_ops=fmt.dequant_ops * body,
        matmuls=tuple(matmuls),
        attention_core_flops=attention.core_flops,
    )


def decode_counts(
    spec: ModelSpec,
    batch: int,
    context_len: int,
    dtype: str,
    kv_dtype: str | None = None,
    tp: int = 1,
    weights: str | WeightFormat | None = None,
    ep: int = 1,
    dp_attention: bool = False,
) -> ModelCounts:
    """One decode step with `context_len` tokens cached: each sequence feeds one token and
    attends context_len + 1 keys (the time per output token)."""
    return step_counts(
        spec, batch, 1, context_len + 1, dtype, kv_dtype, tp, weights, ep, dp_attention
    )


def prefill_counts(
    spec: ModelSpec,
    batch: int,
    prompt_len: int,
    dtype: str,
    kv_dtype: str | None = None,
    tp: int = 1,
    weights: str | WeightFormat | None = None,
    ep: int = 1,
    dp_attention: bool = False,
) -> ModelCounts:
    """The prefill of a prompt of `prompt_len` tokens (the time to the first token)."""
    return step_counts(
        spec, batch, prompt_len, prompt_len, dtype, kv_dtype, tp, weights, ep, dp_attention
    )


@dataclass(frozen=True)
class ModelPrediction:
    """A whole-model step on one device of `tp`: its roofline (the overhead paid once per
    layer), its kernels' launches, and its collectives (the all-reduces and the logits'
    gather)."""

    counts: ModelCounts
    roofline: Roofline
    allreduce_s: float
    launch_s: float = 0.0
    #: Dequantising weight-only weights (int8, int4, mxfp4), at the device's float32 rate.
    dequant_s: float = 0.0
    #: The tensor cores' work on the zero rows of the matmuls' last tiles.
    padding_s: float = 0.0
    #: What a kernel on the warp-level mma.sync (Marlin's) takes beyond the matmul rate,
    #: where the device's full-rate instruction is another (DeviceSpec.warp_mma_share).
    warp_mma_s: float = 0.0
    #: The kernels' waits for their first bytes: one memory latency each.
    memory_latency_s: float = 0.0

    @property
    def time_s(self) -> float:
        parts = (
            self.allreduce_s,
            self.launch_s,
            self.memory_latency_s,
            self.dequant_s,
            self.padding_s,
            self.warp_mma_s,
        )
        return self.roofline.time_s + sum(parts)

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
    """The time of a step of `counts` (one rank's) on `device`: its dense matmuls at the
    device's matmul rate for counts.matmul_dtype (default `dtype`), its attention core at
    the rate for `dtype`; each kernel pays the device's launch cost and one memory
    latency before its first bytes arrive, each collective its
    latency and its bytes over the bus bandwidth; the zero rows that fill the matmuls'
    last tiles of device.mma_rows tokens are computed at the matmul rate, and a kernel of
    its own tile (Marlin's) on the warp-level mma.sync at device.warp_mma_share of it."""
    roof = predict(
        counts.bytes,
        counts.flops,
        device.memory_bandwidth,
        flops_for(device, counts.matmul_dtype or dtype),
        model,
        overheads=counts.layers,
        kv_bytes=counts.kv_bytes,
        attention_flops=counts.attention_flops,
        core_peak_flops=flops_for(device, dtype),
        kernel_flops=counts.attention_core_flops,
        kernel_peak_flops=attention_flops_for(device, dtype),
    )
    collectives = counts.allreduces * allreduce_s(counts.allreduce_bytes, tp, device)
    collectives += counts.gathers * allgather_s(counts.allreduce_bytes, tp, device)
    collectives += counts.norm_allreduces * allreduce_s(counts.norm_allreduce_bytes, tp, device)
    if counts.gather_bytes:
        collectives += allgather_s(counts.gather_bytes, tp, device)
    dequant = 0.0
    if counts.dequant_ops:
        rate = device.dense_flops.get("float32")
        if not rate:  # a run of this machine that measured no float32 matmul
            raise FieldError(
                "gpu", device.name, "has no float32 rate to dequantise weight-only weights at"
            )
        dequant = counts.dequant_ops / rate
    # the matmuls' rates: the step's (None), and any kept in their dtype
    rates = {
        d: model.efficiency_flops * flops_for(device, d or counts.matmul_dtype or dtype)
        for d in {m.dtype for m in counts.matmuls}
    }
    padding = sum(
        counts.padding_flops(device.mma_rows, d, device.expert_rows) / rate
        for d, rate in rates.items()
    )
    # a kernel of its own tile on the warp-level instruction: all its FLOPs at its share
    slower = 1 / device.warp_mma_share - 1
    warp_mma = slower * sum(
        counts.own_tile_flops(device.mma_rows, d, device.expert_rows) / rate
        for d, rate in rates.items()
    )
    launch = counts.kernels * device.launch_s
    latency = counts.kernels * device.memory_latency_s
    return ModelPrediction(
        counts,
        roof,
        allreduce_s=collectives,
        launch_s=launch,
        dequant_s=dequant,
        padding_s=padding,
        warp_mma_s=warp_mma,
        memory_latency_s=latency,
    )
