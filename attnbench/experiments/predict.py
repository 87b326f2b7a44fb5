"""Predicted prefill and decode times on a device: one attention layer as decode-speed
times it (an MLA model's: one of its MLA layers, as its whole model's rows count each),
and a whole model (its MLP or experts, embeddings and head) where a model is given, from
the roofline of model/roofline.py. Quantised weights (`weights_dtype`) are the layer's
projections' as much as the model's: a layer shape's projections can be quantised too.

Each point is predicted on a named GPU, from its measured figures (model/devices.py), or
on THIS_DEVICE, from the peaks the run measures before its points; with the stated
default efficiencies, or a calibration file's (model/calibration.py), whose efficiencies
are shares of the peaks of the device it was fitted against: a named GPU's measured figures,
or what this machine measures at the time.

The time to first token is the prefill of `batch` prompts of seq_len tokens; the time
per output token is the decode step of `batch` sequences with seq_len tokens cached (each
attends seq_len + 1 keys). tokens/s is the batch's: batch tokens per decode step. With
`output_len`, a model's whole generation too (model/generation.py): the prefill, then
output_len - 1 decode steps at the mean context; and the time between a request's tokens
when `batch` requests are kept in flight (serving_itl_s).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property, partial
from typing import Any

from ..errors import FieldError
from ..model.architecture import ModelSpec
from ..model.calibration import load_calibration
from ..model.capacity import KvFormat, cache_bytes, model_layout, state_bytes
from ..model.devices import THIS_DEVICE, DeviceSpec, flops_for
from ..model.dtypes import MODEL_DTYPES, served_dtype
from ..model.generation import generation, prefill_side_by_side, serving_itl_s
from ..model.model_params import has_own_head, weight_bytes_per_rank
from ..model.parallelism import DATA_PARALLEL, attention_split, data_parallel
from ..model.roofline import (
    ModelCounts,
    ModelPrediction,
    check_timed_tp,
    layer_counts,
    mla_layer_counts,
    predict_counts,
    step_counts,
)
from ..model.shapes import AttentionShape
from ..model.weights import WeightFormat, vocab_key
from ..records import ColumnSpec, exact, info, key
from .context import Context, grid_order, no_links
from .target import Target, checkpoint_weights, is_this, run_peaks, target


@dataclass(frozen=True, kw_only=True)
class PredictPoint:
    """One prediction: a layer shape, or a model (`spec`), on `gpu`."""

    gpu: str
    batch: int
    dtype: str
    d_model: int
    num_heads: int
    num_kv_heads: int
    seq_len: int | None = None
    head_dim: int | None = None
    tp: int = 1
    ep: int = 1
    dp_attention: bool = False
    kv_dtype: str | None = None
    calibration: str | None = None
    model: str | None = None
    published_kv_heads: int | None = None
    weights_dtype: str | None = None
    weights_group: int | None = None
    vocab_layout: str = "split"
    quantize_head: bool = False
    keep_attention: bool = False
    weight_only_kernel: str = "cuda-cores"
    output_len: int | None = None
    spec: ModelSpec | None = field(default=None, compare=False, repr=False)

    @property
    def shape(self) -> AttentionShape:
        return AttentionShape(self.d_model, self.num_heads, self.num_kv_heads, self.head_dim)

    @property
    def weights(self) -> WeightFormat:
        """The model's weights: weights_dtype (default: dtype) with its scale groups, the
        head quantised too where quantize_head says so, the attention kept where
        keep_attention says so, multiplied where weight_only_kernel says, the vocabulary
        laid out over the ranks as vocab_layout says."""
        dtype = self.weights_dtype or self.dtype
        return WeightFormat.of_point(dtype, self)

    @cached_property
    def named_target(self) -> Target:
        """The named GPU's figures and the calibration's model on them (target), resolved
        once for the point's check and its run; FieldError for THIS_DEVICE, whose peaks
        only a run measures."""
        return target(self.gpu, self.calibration)


@dataclass(kw_only=True)
class PredictRecord:
    """Predicted times of one point, for one attention layer (layer_*) and, where a model
    is given, for the whole model on one tensor-parallel rank (ttft_ms, tpot_ms and the
    counts behind them), with the peaks and the model's parameters they came from. The
    intensity is FLOPs per byte; the ridge is the intensity where the effective peaks
    meet; `bound` says which of them sets the time (memory or compute). The counts are
    exact (the same inputs always give them); the times depend on the peaks."""

    model: str | None = key()
    variant: str = key()
    gpu: str = key()
    d_model: int = key()
    num_heads: int = key()
    num_kv_heads: int = key()
    head_dim: int = key()
    num_layers: int | None = key()
    batch: int = key()
    seq_len: int = key()
    dtype: str = key()
    kv_dtype: str = key()
    tp: int = key()
    layer_prefill_ms: float = info()
    layer_prefill_bytes: int = exact()
    layer_prefill_flops: int = exact()
    layer_prefill_intensity: float = info()
    layer_prefill_bound: str = info()
    layer_step_ms: float = info()
    layer_step_bytes: int = exact()
    layer_step_kv_bytes: int = exact()
    layer_step_flops: int = exact()
    layer_step_intensity: float = info()
    layer_step_bound: str = info()
    ttft_ms: float | None = info()
    prefill_bytes: int | None = exact(None)
    prefill_flops: int | None = exact(None)
    prefill_intensity: float | None = info()
    prefill_bound: str | None = info()
    tpot_ms: float | None = info()
    step_bytes: int | None = exact(None)
    step_weight_bytes: int | None = exact(None)
    step_kv_bytes: int | None = exact(None)
    #: Of step_kv_bytes, a hybrid model's state read and written (0: no state layers).
    step_state_bytes: int | None = exact(None)
    step_flops: int | None = exact(None)
    step_intensity: float | None = info()
    step_bound: str | None = info()
    allreduce_ms: float | None = info()
    #: Of the step's collectives, the all-reduces of q and k norms that span the heads
    #: (one an attention layer; 0: none).
    norm_allreduces: int | None = info()
    #: The batch's tokens per second: the model's step where there is one, else the layer's.
    tokens_per_s: float = info()
    ridge_flops_per_byte: float = info()
    device_title: str = info()
    peak_gbps: float = info()
    peak_tflops: float = info()
    interconnect_gbps: float | None = info()
    peaks_source: str = info()
    efficiency_bw: float = info()
    efficiency_kv: float = info()
    efficiency_flops: float = info()
    overhead_us: float = info()
    perf_model: str = info()
    #: On every row of a what-if set (a model rebuilt with other KV-head counts), the
    #: model's own count; None otherwise.
    published_kv_heads: int | None = info()
    #: A model's weights on one rank and the KV cache of the batch at seq_len there (no
    #: reserve), and whether they fit in the named GPU's memory (None: a layer shape, or
    #: this machine). A prediction for a model that does not fit is still made.
    memory_bytes_needed_per_gpu: int | None = exact(None)
    fits_memory: bool | None = info()
    #: The weights' format where it is not dtype ("int4, groups of 128"); None: dtype.
    weights: str | None = key(None)
    #: "replicated" where every tensor-parallel rank holds the whole vocabulary; None:
    #: split over them.
    vocab: str | None = key(None)
    #: Ranks of the tp over which the routed experts are split whole (expert
    #: parallelism), the step timed on the busiest; None: each expert split over all tp.
    ep: int | None = key(None)
    #: "data-parallel" where each rank runs the attention of its own sequences with the
    #: whole attention; None: the attention split over the tp ranks.
    attention: str | None = key(None)
    #: The model's step: its kernels' launches (ms), included in tpot_ms and ttft_ms.
    launch_ms: float | None = info()
    #: The model's step: its kernels' waits for their first bytes, one memory latency each
    #: (ms), included in tpot_ms and ttft_ms; None where the device's is not counted.
    memory_latency_ms: float | None = info()
    #: The time to first token of one request whose prompt is prefilled alone, as fit's
    #: time-to-first-token target counts it: ttft_ms at batch 1; at a larger batch,
    #: ttft_ms is the prefill of all its prompts in one pass.
    request_ttft_ms: float | None = info()
    #: The model's decode step: dequantising its weight-only int8 or int4 weights (ms),
    #: included in tpot_ms; None where the weights need none.
    dequant_ms: float | None = info()
    #: The model's decode step: the rows its matmuls compute as zeros to fill whole
    #: tensor-core tiles (ms), included in tpot_ms; None where there are none.
    padding_ms: float | None = info()
    #: The model's decode step: what its weight-only kernel on the warp-level mma.sync
    #: (Marlin's) takes beyond the matmul rate on a device whose full-rate instruction is
    #: another (ms), included in tpot_ms; None elsewhere.
    warp_mma_ms: float | None = info()
    #: Tokens each request generates after its prompt (None: no generation predicted).
    output_len: int | None = key(None)
    #: The batch's whole generation (ms): its prefill, then output_len - 1 decode steps
    #: at the mean context, seq_len + output_len / 2.
    generation_ms: float | None = info()
    #: A decode step at the generation's mean context (ms); None at output_len 1.
    generation_tpot_ms: float | None = info()
    #: The batch's output tokens per second of its whole generation.
    output_tokens_per_s: float | None = info()
    #: The time between a request's tokens (ms) when `batch` requests are kept in
    #: flight, each replaced by a new one as it ends: the step at the mean context plus
    #: the others' prefills, each counted whole (an upper bound where an engine chunks
    #: them into the steps; data-parallel attention prefills them one a rank, side by
    #: side). None at output_len 1, which has no token after the first.
    serving_itl_ms: float | None = info()
    #: The device's figures that set the times, each with its source.
    device_figures: str = info("")


#: The section's table (records.ColumnSpec): one row per point.
COLUMNS = (
    ColumnSpec("Model", "model", "label", 0, setting=True),
    ColumnSpec("GPU", "gpu", "label", 0, setting=True),
    ColumnSpec("tp", "tp", "int", 2, setting=True),
    ColumnSpec("ep", "ep", "int", 2, setting=True),
    ColumnSpec("attention", "attention", "label", 2, setting=True),
    ColumnSpec("batch", "batch", "int", 1, setting=True),
    ColumnSpec("context", "seq_len", "int", 1, setting=True),
    ColumnSpec("output", "output_len", "int", 1, setting=True),
    ColumnSpec("Variant", "variant", "variant", 1),
    ColumnSpec("kv heads", "num_kv_heads", "int", 1, setting=True),
    ColumnSpec("layer step ms", "layer_step_ms", "aligned", 1),
    ColumnSpec("TTFT ms", "ttft_ms", "aligned", 0),
    ColumnSpec("TPOT ms", "tpot_ms", "aligned", 0),
    ColumnSpec("tokens/s", "tokens_per_s", "rate", 0),
    ColumnSpec("ITL in flight ms", "serving_itl_ms", "aligned", 1),
    ColumnSpec("Bound", "step_bound", "label", 1),
)


def model_defaults(spec: ModelSpec, point: Mapping[str, Any]) -> dict[str, Any]:
    """What a model gives the fields of a point that sets none of them: on a named GPU, a
    serving engine's load of its checkpoint, the dtype (the weights' where the point sets
    them in 16 or 32 bits, else a float32 checkpoint's in bfloat16: served_dtype) and,
    unless the point sets weights_dtype, the weights as a quantised checkpoint stores
    them, as the GPU runs them (target.checkpoint_weights); on THIS_DEVICE, its dtype, as
    it runs here."""
    if is_this(point.get("gpu")):
        return {"dtype": spec.dtype}
    given = point.get("weights_dtype")
    dtype = given if given in MODEL_DTYPES else served_dtype(spec.dtype)
    return {"dtype": dtype, **checkpoint_weights(spec, point)}


def target_of(point: PredictPoint, context: Context | None) -> Target:
    """The point's device and model (experiments.target): a named GPU's measured
    figures, or for THIS_DEVICE the peaks this run measured, in the environment the
    runner recorded (a calibration of this machine holds shares of whatever it measures
    at the time)."""
    if not is_this(point.gpu) or context is None or context.device is None:
        return point.named_target  # this machine unmeasured: FieldError
    peaks = run_peaks(context.environment, context.peak_gbps, context.peak_tflops)
    return target(point.gpu, point.calibration, peaks)


def scaled(point: PredictPoint) -> frozenset[str]:
    """The formats of the point that carry scales: its weights', where quantised, with
    its model's own head, and "weights group" where a scale group may be set on them."""
    return point.weights.scaled(own_head=point.spec is not None and has_own_head(point.spec))


def check(point: PredictPoint) -> None:
    """Raise for a point that cannot be predicted, before anything runs: an unknown GPU,
    a calibration file that cannot be read, a shape tp does not split, a tp the GPU's
    interconnect does not join (none, or past one node), weights whose
    matmuls the GPU has no rate for, a scale group longer than a weight row."""
    if point.seq_len is None:
        raise FieldError("seq_len", None, "give the context to predict at, e.g. 8192")
    if point.spec is not None:
        point.spec.require_kinds()
    if not is_this(point.gpu):
        device = point.named_target.device
        check_weights_rate(point, device)
        check_timed_tp(device, point.tp, point.shape.num_heads, point.shape.num_kv_heads)
    elif point.calibration is not None:
        load_calibration(point.calibration)  # this machine's peaks are measured later
    if point.tp > 1 and is_this(point.gpu):
        raise FieldError("tp", point.tp, f"needs a named GPU (its interconnect), not {THIS_DEVICE}")
    if point.output_len is not None and point.spec is None:
        reason = "needs a model: a layer shape has no whole generation"
        raise FieldError("output_len", point.output_len, reason)
    _counts(point)


def check_weights_rate(point: PredictPoint, device: DeviceSpec) -> None:
    """FieldError naming weights_dtype when `device` has no rate for the matmuls of the
    point's weights (float8 on a GPU without float8 tensor cores, nvfp4 on one without
    float4's, or this machine)."""
    if point.weights.dtype != point.dtype:
        try:
            flops_for(device, point.weights.matmul_dtype(point.dtype))
        except FieldError as exc:
            dtype = point.weights.dtype
            hint = point.spec.stored_hint(dtype, point.dtype) if point.spec is not None else ""
            raise FieldError("weights_dtype", dtype, exc.reason + hint) from None


def _counts(point: PredictPoint) -> dict[str, ModelCounts]:
    """The counts of the layer's and the model's prefill and decode step. The layer is the
    model's own attention layer (an MLA model's: one MLA layer, as the model's rows count
    each), or the layer shape's; its projections' weights in the point's format, as the
    model's are."""
    s, b, tp, dtype, kv = point.seq_len, point.batch, point.tp, point.dtype, point.kv_dtype
    assert s is not None  # check() refuses a point without
    weights = point.weights
    if point.spec is not None and point.spec.mla is not None:
        layer = partial(mla_layer_counts, point.spec)
    else:  # q and k norms spanning the heads add their all-reduce to the model's layer
        spans = point.spec is not None and point.spec.qk_norm_across_heads
        layer = partial(layer_counts, point.shape, qk_norm_across_heads=spans)
    # data-parallel attention: a rank's layer attends its own sequences with every head
    lb, ltp = attention_split(b, tp, point.dp_attention)
    counts = {
        "layer_prefill": layer(lb, s, s, dtype, kv, ltp, weights),
        "layer_step": layer(lb, 1, s + 1, dtype, kv, ltp, weights),
    }
    if point.spec is not None:
        whole = partial(
            step_counts,
            point.spec,
            dtype=dtype,
            kv_dtype=kv,
            tp=tp,
            weights=weights,
            ep=point.ep,
            dp_attention=point.dp_attention,
        )
        counts["prefill"] = whole(b, s, s)
        counts["step"] = whole(b, 1, s + 1)
        if b > 1:  # one request's prompt prefilled alone
            counts["request"] = whole(1, s, s)
        side = prefill_side_by_side(b, tp, point.dp_attention)
        if side > 1:  # the other requests' prompts prefilled one a rank, side by side
            counts["side_by_side"] = whole(side, s, s)
    elif point.ep > 1:
        raise FieldError("ep", point.ep, "needs a model: a layer shape has no experts")
    elif point.dp_attention:
        raise FieldError("dp_attention", True, "needs a model: a layer shape has no MLP")
    return counts


def run(point: PredictPoint, context: Context | None = None) -> PredictRecord:
    """The point's predictions on its device (see the module's notes)."""
    found_on = target_of(point, context)
    device, model = found_on.device, found_on.model
    check_weights_rate(point, device)  # this machine's rates are known only now
    found = {
        name: predict_counts(counts, device, point.dtype, point.tp, model)
        for name, counts in _counts(point).items()
    }
    step = found.get("step", found["layer_step"])
    return PredictRecord(
        model=point.model,
        variant=point.spec.variant if point.spec else point.shape.variant,
        gpu=point.gpu,
        d_model=point.d_model,
        num_heads=point.num_heads,
        num_kv_heads=point.num_kv_heads,
        head_dim=point.shape.head_dim,  # type: ignore[arg-type]
        num_layers=point.spec.num_layers if point.spec else None,
        batch=point.batch,
        seq_len=point.seq_len,  # type: ignore[arg-type]
        dtype=point.dtype,
        kv_dtype=point.kv_dtype or point.dtype,
        tp=point.tp,
        **_phase("layer_prefill", "layer_prefill_ms", found["layer_prefill"]),
        **_phase("layer_step", "layer_step_ms", found["layer_step"]),
        layer_step_kv_bytes=found["layer_step"].counts.kv_bytes,
        **_model_phases(found.get("prefill"), found.get("step")),
        tokens_per_s=step.tokens_per_s,
        ridge_flops_per_byte=step.roofline.ridge,
        device_title=device.title,
        peak_gbps=device.memory_bandwidth / 1e9,
        peak_tflops=flops_for(device, step.counts.matmul_dtype or point.dtype) / 1e12,
        interconnect_gbps=device.collectives.bus_bandwidth / 1e9 if device.collectives else None,
        peaks_source="; ".join(device.sources),
        efficiency_bw=model.efficiency_bw,
        efficiency_kv=model.kv_efficiency,
        efficiency_flops=model.efficiency_flops,
        overhead_us=model.overhead_s * 1e6,
        perf_model=model.describe(),
        published_kv_heads=point.published_kv_heads,
        **_memory(point, device),
        weights=point.weights.describe() if point.weights.dtype != point.dtype else None,
        vocab=vocab_key(point.weights),
        ep=point.ep if point.ep > 1 else None,
        attention=DATA_PARALLEL if data_parallel(point.tp, point.dp_attention) else None,
        launch_ms=found["step"].launch_s * 1e3 if "step" in found else None,
        memory_latency_ms=_part_ms(found.get("step"), "memory_latency_s"),
        dequant_ms=_part_ms(found.get("step"), "dequant_s"),
        padding_ms=_part_ms(found.get("step"), "padding_s"),
        warp_mma_ms=_part_ms(found.get("step"), "warp_mma_s"),
        request_ttft_ms=_ms(found.get("request", found.get("prefill"))),
        **_generation(point, found, found_on),
        device_figures=device.figures(),
    )


def _generation(
    point: PredictPoint, found: dict[str, ModelPrediction], on: Target
) -> dict[str, Any]:
    """A model's whole generation of output_len tokens after its prompts, and the time
    between a request's tokens with the batch kept in flight (none without output_len)."""
    if point.output_len is None or point.spec is None:
        return {}
    assert point.seq_len is not None  # check() refuses a point without
    whole = generation(
        point.spec,
        on.device,
        point.batch,
        point.seq_len,
        point.output_len,
        point.dtype,
        point.kv_dtype,
        point.tp,
        point.weights,
        on.model,
        point.ep,
        point.dp_attention,
    )
    fields = {
        "output_len": point.output_len,
        "generation_ms": whole.total_s * 1e3,
        "output_tokens_per_s": whole.output_tokens_per_s,
    }
    if point.output_len == 1:  # the first token alone: no step, nothing between tokens
        return fields
    side = prefill_side_by_side(point.batch, point.tp, point.dp_attention)
    prompts = found.get("side_by_side", found.get("request", found["prefill"]))
    itl = serving_itl_s(whole.tpot_s, prompts.time_s, point.batch, point.output_len, side)
    return {**fields, "generation_tpot_ms": whole.tpot_s * 1e3, "serving_itl_ms": itl * 1e3}


def _ms(found: ModelPrediction | None) -> float | None:
    return None if found is None else found.time_s * 1e3


def _part_ms(step: ModelPrediction | None, part: str) -> float | None:
    """One part of the decode step's time (its kernels' waits for their first bytes, its
    dequantisation, its tiles' padding, its warp-level kernels' surcharge) in ms; None for
    a layer shape or a step without it."""
    seconds = getattr(step, part) if step is not None else 0.0
    return seconds * 1e3 if seconds else None


def memory_needed(point: PredictPoint) -> int | None:
    """A model's weights on one of tp ranks, and the cache of its batch at seq_len there,
    or at the end of its generation with output_len (each attention layer keeps its
    window; each state layer its state), in bytes; None for a layer shape."""
    spec = point.spec
    if spec is None or point.seq_len is None:
        return None
    fmt = KvFormat(point.kv_dtype or point.dtype)
    # data-parallel attention: each rank caches its own sequences, every head of them
    batch, attn_tp = attention_split(point.batch, point.tp, point.dp_attention)
    layout = model_layout(spec, fmt, attn_tp)
    windows = spec.windows or (None,) * spec.kv_layers
    tokens = point.seq_len + (point.output_len or 0)
    cache = cache_bytes(layout, windows, {tokens: batch}).total
    cache += state_bytes(spec.layer_states, point.dtype, batch, attn_tp)
    dp = point.dp_attention
    return weight_bytes_per_rank(spec, point.weights, point.tp, dp_attention=dp) + cache


def _memory(point: PredictPoint, device: DeviceSpec) -> dict[str, Any]:
    needed = memory_needed(point)
    fits = None
    if needed is not None and not is_this(device.name):
        fits = needed <= device.memory_bytes
    return {"memory_bytes_needed_per_gpu": needed, "fits_memory": fits}


def _phase(prefix: str, time_field: str, found: ModelPrediction) -> dict[str, Any]:
    """The fields of one prediction: its time in ms and the counts and bound behind it."""
    roof = found.roofline
    return {
        time_field: found.time_s * 1e3,
        f"{prefix}_bytes": roof.bytes,
        f"{prefix}_flops": roof.flops,
        f"{prefix}_intensity": roof.intensity,
        f"{prefix}_bound": roof.bound,
    }


def _model_phases(prefill: ModelPrediction | None, step: ModelPrediction | None) -> dict[str, Any]:
    """The whole model's fields (none without a model)."""
    if prefill is None or step is None:
        return {}
    return {
        **_phase("prefill", "ttft_ms", prefill),
        **_phase("step", "tpot_ms", step),
        "step_weight_bytes": step.counts.weight_bytes,
        "step_kv_bytes": step.counts.kv_bytes,
        "step_state_bytes": step.counts.state_bytes,
        "allreduce_ms": step.allreduce_s * 1e3,
        "norm_allreduces": step.counts.norm_allreduces,
    }


#: The grid's run order, and no comparison among the points (study.sections.Experiment).
order, link = grid_order, no_links


def wants_peaks(point: PredictPoint) -> bool:
    """Whether the run must measure this machine's peaks for the point: on THIS_DEVICE."""
    return is_this(point.gpu)
