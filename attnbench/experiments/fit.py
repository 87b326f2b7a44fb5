"""What fits on a GPU: the largest batch at a context length, or the longest context at a
batch size, after the weights and a reserve.

Per GPU, with G GPUs serving G / tp replicas of the model, each split over tp ranks:

    KV budget = memory - weights on one rank - reserve
    largest batch at S     = replicas * floor(budget / KV bytes of one sequence of S on a rank)
    longest context at B   = the largest S with ceil(B / replicas) * KV bytes(S) <= budget

A sequence's cache is its K/V bytes and, in a hybrid model, the fixed-size state of its
state layers (Mamba, linear attention): both count against the budget.

The reserve stands for what is neither weights nor KV cache: activations of a forward
pass, the CUDA context, communication buffers and allocator fragmentation. It defaults to
10% of each GPU's memory (a serving engine told to use 90% of a GPU leaves the same), and
takes a percentage or a size.

With a named GPU and latency targets, the largest batch at S must also meet them, as the
roofline of model/roofline.py predicts the GPU's times (with the stated defaults, or a
calibration):

    time per output token (tpot) = one decode step of the batch on one replica: B
        sequences with S tokens cached, on one of its tp ranks, its all-reduces included
    time to first token (ttft)   = the prefill of one sequence of S tokens (one prompt
        alone, no queueing: the least a request waits for its first token)

The step time grows with the batch, so the answer is the largest batch of a replica
within the memory whose step meets tpot (a binary search between 1 and the memory's
answer); ttft does not depend on the batch: it is met by every batch or by none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from fractions import Fraction

from ..errors import FieldError, UsageError
from ..model.architecture import ModelSpec
from ..model.capacity import (
    KvFormat,
    TokenLayout,
    cache_bytes,
    ceil_div,
    layer_windows,
    model_layout,
    or_list,
    positive_int,
    state_bytes,
    tensor_parallel_sizes,
    tp_split_problem,
    window_summary,
)
from ..model.devices import DEVICES, DeviceSpec
from ..model.dtypes import served_dtype
from ..model.model_params import has_own_head, weight_bytes_per_rank
from ..model.parallelism import (
    DATA_PARALLEL,
    attention_split,
    check_dp_attention,
    check_model_ep,
    data_parallel,
)
from ..model.roofline import (
    ModelCounts,
    ModelPrediction,
    PerfModel,
    check_timed_tp,
    decode_counts,
    predict_counts,
    prefill_counts,
)
from ..model.units import MemorySize, duration_seconds, format_bytes, parse_memory, parse_share
from ..model.weights import WeightFormat, vocab_key
from ..records import ColumnSpec, exact, info, key
from .context import Context, grid_order, no_links
from .target import is_this, perf_model, target_device

#: The status of an answer; any other says why nothing fits.
OK = "ok"
#: Which limit sets the answer to a latency question.
MEMORY_BOUND, LATENCY_BOUND = "memory", "latency"
#: How the status of a latency question that no batch meets begins.
TOO_SLOW = "too slow"


#: The quantised weights a fit of 16-bit weights that leave no room suggests (the format
#: most large models are served in on GPUs that compute in it).
FP8_WEIGHTS = "float8_e4m3fn"


class CapacityError(Exception):
    """The request cannot fit; the message gives the numbers. Exit code 1."""

    exit_code = 1


@dataclass(frozen=True, kw_only=True)
class FitPoint:
    """One question: `seq_len` asks for the largest batch, `batch` for the longest context.
    `gpus` defaults to `tp`, `tp` to `gpus` (else 1); the dtypes to the one the model is
    served in (model.dtypes.served_dtype: a float32 checkpoint's bfloat16)."""

    model: str
    reserve: str
    scale_dtype: str
    memory: str | None = None
    seq_len: int | None = None
    batch: int | None = None
    gpus: int | None = None
    tp: int | None = None
    ep: int = 1
    dp_attention: bool = False
    weights_dtype: str | None = None
    weights_group: int | None = None
    vocab_layout: str = "split"
    quantize_head: bool = False
    keep_attention: bool = False
    weight_only_kernel: str = "cuda-cores"
    kv_dtype: str | None = None
    kv_scale_group: int | str | None = None
    sliding_window: int | None = None
    layer_pattern: str | None = None
    page_size: int | None = None
    #: The model's KV heads (what tells the variants of a what-if set apart) and, on such
    #: a set, the model's own count.
    num_kv_heads: int | None = None
    published_kv_heads: int | None = None
    #: A named GPU (model/devices.py): its memory unless `memory` is given, and the peaks
    #: that time the targets; a calibration file for the roofline (default: its defaults).
    gpu: str | None = None
    calibration: str | None = None
    #: Latency targets with their unit ('50ms', '2s'): the most time per output token,
    #: and to the first token (the prefill of one sequence of seq_len tokens).
    tpot: str | None = None
    ttft: str | None = None
    spec: ModelSpec | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class FitPlan:
    """One GPU's memory, the model's share of it and the cache's layout."""

    spec: ModelSpec
    memory_bytes: int
    gpus: int
    tp: int
    weights: WeightFormat
    kv: KvFormat
    windows: tuple[int | None, ...]
    page_size: int | None
    reserve_bytes: int
    layer_pattern: str | None = None
    #: Ranks of the tp the routed experts are split whole over (model/parallelism.py).
    ep: int = 1
    #: Each rank runs (and caches) its own sequences' attention, whole.
    dp_attention: bool = False
    #: Whether tp was given; else it is the GPUs given (gpus), named in refusals of it.
    tp_given: bool = True
    #: The most tp a hint may propose: where a step is timed, the GPUs one collective
    #: joins (one node's; 1 without an interconnect); None where only memory is planned.
    most_tp: int | None = None

    def __post_init__(self) -> None:
        if self.gpus % self.tp:
            raise FieldError("gpus", self.gpus, f"not a multiple of tp {self.tp}")
        self.layout  # noqa: B018  (tp must split the heads)
        check_model_ep(self.spec, self.ep, self.tp)
        if self.data_parallel:
            check_dp_attention(self.spec)

    @property
    def data_parallel(self) -> bool:
        """Whether each rank runs its own sequences' attention (asked, over ranks)."""
        return data_parallel(self.tp, self.dp_attention)

    @property
    def attention_tp(self) -> int:
        """The ranks one sequence's attention, and its cache, is split over."""
        return attention_split(1, self.tp, self.dp_attention)[1]

    def per_gpu(self, per_replica: int) -> int:
        """The sequences of a replica's `per_replica` one GPU caches: each of them, or
        under data-parallel attention its own share, the busiest's."""
        return attention_split(per_replica, self.tp, self.dp_attention)[0]

    @property
    def replicas(self) -> int:
        return self.gpus // self.tp

    @property
    def layout(self) -> TokenLayout:
        return model_layout(self.spec, self.kv, self.attention_tp)

    @property
    def weights_bytes(self) -> int:
        """Weights on one GPU (one tensor-parallel rank), with their scales; the whole
        attention's under data-parallel attention."""
        return weight_bytes_per_rank(
            self.spec, self.weights, self.tp, dp_attention=self.data_parallel
        )

    @property
    def dtype(self) -> str:
        """The activations' dtype: the weights' where they are 16 or 32 bits, else the
        one the model is served in (quantised weights are dequantised into it, or float8
        matmuls write it)."""
        return served_dtype(self.spec.dtype) if self.weights.quantized else self.weights.dtype

    @property
    def state_bytes(self) -> int:
        """The state one sequence keeps in the state layers on one GPU (0: none), in the
        dtype the model is served in where transformers keeps it in the model's."""
        served = served_dtype(self.spec.dtype)
        return state_bytes(self.spec.layer_states, served, 1, self.attention_tp)

    def sequence_bytes(self, seq_len: int) -> int:
        """Cache bytes one sequence of `seq_len` tokens takes on one GPU: its K and V, and
        its state in the state layers."""
        kv = cache_bytes(self.layout, self.windows, [seq_len], self.page_size).total
        return kv + self.state_bytes

    def kv_budget(self, sequences: int = 1, seq_len: int = 1) -> int:
        """Bytes left for the KV cache on one GPU; CapacityError when there are none, or
        too few for a replica's `sequences` sequences of `seq_len` tokens (the question's
        least: one sequence of its context, or its batch at one token)."""
        weights, memory, reserve = self.weights_bytes, self.memory_bytes, self.reserve_bytes
        where = f"on each of {self.gpus} GPU(s) with tp {self.tp}"
        hint = self._tp_hint(sequences, seq_len)
        if weights > memory:
            raise CapacityError(
                f"weights alone do not fit: {format_bytes(weights)} ({weights:,} bytes of "
                f"{self.weights.describe()}) {where} > {format_bytes(memory)} ({memory:,} "
                f"bytes){hint}"
            )
        if weights + reserve >= memory:
            raise CapacityError(
                f"no room for a KV cache: weights {format_bytes(weights)} + reserve "
                f"{format_bytes(reserve)} {where} leave nothing of {format_bytes(memory)}"
                f"{hint}"
            )
        budget = memory - weights - reserve
        need = self.per_gpu(sequences) * self.sequence_bytes(seq_len)
        if need > budget:
            many = "one sequence" if sequences == 1 else f"{sequences:,} sequences per replica"
            they = "it needs" if sequences == 1 else "they need"
            need_text, left_text = format_bytes(need), format_bytes(budget)
            if need_text == left_text:  # a few bytes apart
                need_text, left_text = f"{need:,} bytes", f"{budget:,}"
            raise CapacityError(
                f"not even {many} of {seq_len:,} token{'s' * (seq_len > 1)} fits: {they} "
                f"{need_text} of KV cache per GPU, {left_text} is left after weights and "
                f"reserve{hint}"
            )
        return budget

    def _tp_hint(self, sequences: int, seq_len: int) -> str:
        """Where the memory leaves no room for `sequences` sequences of `seq_len` tokens a
        replica: the smallest larger tp (a multiple of this one that splits the query
        and KV heads as model_layout allows) that leaves it, as '; tp N would leave room
        ...', and for 16- or 32-bit weights the smallest tp (this one or larger) at which
        float8 weights would; '' when none does. A GPU count given apart from tp
        (replicas) must then be a multiple of N. Under a time target the tp stops at
        most_tp; a larger one that would leave room is named as past it."""
        need = (sequences, seq_len)
        found = self._smallest_tp(self.weights, 2 * self.tp, self.most_tp, need)
        hint = ""
        if found is not None:
            tp, weights = found
            gpus = f"; gpus a multiple of {tp}" if self.gpus != self.tp and self.gpus % tp else ""
            weights_text = f"{format_bytes(weights)} of weights a GPU{gpus}"
            hint = f"; tp {tp} would leave room for {_cache_of(*need)} ({weights_text})"
        if not self.weights.quantized:
            fp8_weights = replace(self.weights, dtype=FP8_WEIGHTS, group=None)
            fp8 = self._smallest_tp(fp8_weights, self.tp, self.most_tp, need)
            if fp8 is not None and (found is None or fp8[0] < found[0]):
                hint += f"{' or' if hint else ';'} {FP8_WEIGHTS} weights at tp {fp8[0]}"
        if found is None and self.most_tp is not None:
            past = self._smallest_tp(self.weights, 2 * self.tp, None, need)
            if past is not None:
                gpus = "1 GPU" if self.most_tp == 1 else f"{self.most_tp} GPUs"
                hint += f"; tp {past[0]} would leave room, but a timed step spans at most {gpus}"
        return hint

    def _smallest_tp(
        self, weights: WeightFormat, first: int, most: int | None, need: tuple[int, int]
    ) -> tuple[int, int] | None:
        """The smallest tp from `first` to `most` (None: the query heads), a multiple of
        this one that model_layout allows, at which `weights`, the reserve and the cache
        of `need` (a replica's sequences, their tokens) fit in a GPU's memory, with the
        weights' bytes a GPU; None if none does."""
        sequences, seq_len = need
        most = min(self.spec.num_heads, most or self.spec.num_heads)
        for tp in range(first, most + 1, self.tp):
            try:
                at = replace(self, tp=tp, gpus=tp, weights=weights)
            except FieldError:  # a tp the heads, the experts or the layout refuse
                continue
            cache = at.per_gpu(sequences) * at.sequence_bytes(seq_len)
            if at.weights_bytes + self.reserve_bytes + cache <= self.memory_bytes:
                return tp, at.weights_bytes
        return None


def _cache_of(sequences: int, seq_len: int) -> str:
    """What a tp hint leaves room for: 'a KV cache', 'a sequence of 131,072 tokens',
    '8 sequences'."""
    if seq_len > 1:
        many = "a sequence" if sequences == 1 else f"{sequences:,} sequences"
        return f"{many} of {seq_len:,} tokens"
    return "a KV cache" if sequences == 1 else f"the cache of {sequences:,} sequences"


@dataclass(kw_only=True)
class FitRecord:
    """The answer, with the per-GPU breakdown (weights + KV + reserve + free = memory).
    The question's input (seq_len or batch) and its answer (the other) are both exact:
    a changed answer to the same question is a changed model."""

    model: str = key()
    variant: str = key()
    num_kv_heads: int = key()
    question: str = key()  # largest_batch (at seq_len) or longest_context (at batch)
    given: int = key()  # the question's input: seq_len for largest_batch, batch for the other
    memory_bytes_per_gpu: int = key()
    num_layers: int = key()
    gpus: int = key()
    tp: int = key()
    #: Ranks of the tp the routed experts are split whole over, the step timed on the
    #: busiest; None: each expert split over all tp.
    ep: int | None = key(None)
    #: "data-parallel" where each rank runs and caches its own sequences' attention;
    #: None: the attention split over the tp ranks.
    attention: str | None = key(None)
    replicas: int = exact()
    weights_dtype: str = key()
    #: Quantised weights' format in words ("int4 in groups of 128, the head too"); None:
    #: 16- or 32-bit weights.
    weights: str | None = key(None)
    #: "replicated" where every tensor-parallel rank holds the whole vocabulary; None:
    #: split over them.
    vocab: str | None = key(None)
    kv_dtype: str = key()
    #: A quantised cache's format in words ("int8 in groups of 32, float32 scales");
    #: None: a 16- or 32-bit cache.
    kv: str | None = key(None)
    page_size: int | None = key()
    layer_pattern: str | None = key(None)
    sliding_window: int | None = key()
    windowed_layers: int = exact()
    seq_len: int | None = exact()
    batch: int = exact()
    batch_per_replica: int = exact()
    context_unbounded: bool = info()
    max_position_embeddings: int | None = info()
    kv_bytes_per_sequence_per_gpu: int = exact()
    #: A hybrid model's state per sequence, and the batch's (0: no state layers).
    state_bytes_per_sequence_per_gpu: int = exact(0)
    weights_bytes_per_gpu: int = exact()
    kv_bytes_per_gpu: int = exact()
    state_bytes_per_gpu: int = exact(0)
    reserve_bytes_per_gpu: int = exact()
    free_bytes_per_gpu: int = exact(signed=True)
    #: The model's own KV heads on every row of a what-if set; None otherwise.
    published_kv_heads: int | None = info()
    #: "ok", or why nothing fits: then the answer (batch, or seq_len) is 0, and
    #: free_bytes_per_gpu is negative when the weights and reserve exceed the memory.
    status: str = info(OK)
    #: The named GPU; the latency targets in ms (None: not given).
    gpu: str | None = key(None)
    tpot_target_ms: float | None = key(None)
    ttft_target_ms: float | None = key(None)
    #: The largest batch at seq_len that memory alone allows (None for longest_context);
    #: under latency targets, `batch` may be less.
    memory_batch: int | None = exact(None)
    #: Predicted, under targets: a decode step of batch_per_replica sequences with
    #: seq_len cached on one rank (the time per output token), the tokens a GPU makes
    #: per second at it, and (with a ttft target) the prefill of one sequence of seq_len
    #: tokens. When no batch meets the targets, tpot_ms and ttft_ms are those of one
    #: sequence (the least a batch takes), and there is no rate.
    tpot_ms: float | None = info()
    ttft_ms: float | None = info()
    tokens_per_s_per_gpu: float | None = info()
    #: Under targets: "memory" when memory sets the answer, "latency" when a target does.
    bound: str | None = info()
    #: The roofline's parameters, and whether they are defaults or calibrated.
    perf_model: str | None = info()


#: The section's table (records.ColumnSpec).
COLUMNS = (
    ColumnSpec("Model", "model", "label", 0, setting=True, title="{}"),
    ColumnSpec("Variant", "variant", "variant", 0, setting=True),
    ColumnSpec("Question", "question", "label", 0),
    ColumnSpec("context", "seq_len", "int", 1),
    ColumnSpec("batch", "batch", "int", 1),
    ColumnSpec("GPUs", "gpus", "int", 3, setting=True),
    ColumnSpec("tp", "tp", "int", 3, setting=True),
    ColumnSpec("ep", "ep", "int", 3, setting=True),
    ColumnSpec("attention", "attention", "label", 3, setting=True),
    ColumnSpec("kv dtype", "kv_dtype", "label", 4, setting=True),
    ColumnSpec("KV per sequence", "kv_bytes_per_sequence_per_gpu", "bytes", 2),
    ColumnSpec("weights", "weights_bytes_per_gpu", "bytes", 5),
    ColumnSpec("KV cache", "kv_bytes_per_gpu", "bytes", 5),
    ColumnSpec("free", "free_bytes_per_gpu", "bytes", 6),
)


def _record(
    plan: FitPlan,
    question: str,
    seq_len: int | None,
    per_replica: int,
    total_batch: int,
    unbounded: bool,
    per_seq: int,
) -> FitRecord:
    state = plan.state_bytes if per_seq else 0
    per_gpu = plan.per_gpu(per_replica)
    kv = per_gpu * (per_seq - state)
    window, windowed_layers = window_summary(plan.windows)
    spec = plan.spec
    return FitRecord(
        model=spec.name,
        variant=spec.variant,
        num_kv_heads=spec.num_kv_heads,
        published_kv_heads=spec.published_kv_heads,
        question=question,
        given=seq_len if question == "largest_batch" else total_batch,  # type: ignore[arg-type]
        memory_bytes_per_gpu=plan.memory_bytes,
        num_layers=plan.spec.num_layers,
        gpus=plan.gpus,
        tp=plan.tp,
        ep=plan.ep if plan.ep > 1 else None,
        attention=DATA_PARALLEL if plan.data_parallel else None,
        replicas=plan.replicas,
        weights_dtype=plan.weights.dtype,
        weights=plan.weights.describe() if plan.weights.quantized else None,
        vocab=vocab_key(plan.weights),
        kv_dtype=plan.kv.dtype,
        kv=plan.kv.describe() if plan.kv.quantized else None,
        page_size=plan.page_size,
        layer_pattern=plan.layer_pattern,
        sliding_window=window,
        windowed_layers=windowed_layers,
        seq_len=seq_len,
        batch=total_batch,
        batch_per_replica=per_replica,
        context_unbounded=unbounded,
        max_position_embeddings=plan.spec.max_position_embeddings,
        kv_bytes_per_sequence_per_gpu=per_seq - state,
        state_bytes_per_sequence_per_gpu=state,
        weights_bytes_per_gpu=plan.weights_bytes,
        kv_bytes_per_gpu=kv,
        state_bytes_per_gpu=per_gpu * state,
        reserve_bytes_per_gpu=plan.reserve_bytes,
        free_bytes_per_gpu=plan.memory_bytes
        - plan.weights_bytes
        - plan.reserve_bytes
        - per_gpu * per_seq,
    )


def largest_batch(plan: FitPlan, seq_len: int) -> FitRecord:
    """The most sequences of `seq_len` tokens that fit, over all replicas."""
    budget = plan.kv_budget(1, seq_len)
    per_seq = plan.sequence_bytes(seq_len)
    # under data-parallel attention each of a replica's tp GPUs caches its own sequences
    per_replica = budget // per_seq * (plan.tp if plan.data_parallel else 1)
    total = per_replica * plan.replicas
    record = _record(plan, "largest_batch", seq_len, per_replica, total, False, per_seq)
    return replace(record, memory_batch=total)


def longest_context(plan: FitPlan, batch: int) -> FitRecord:
    """The longest context at which `batch` sequences fit (spread over the replicas).

    KV bytes grow with the context until every layer's window is full: when all layers
    have a window and the batch fits at the largest one, the context is unbounded."""
    per_replica = ceil_div(batch, plan.replicas)
    budget = plan.kv_budget(per_replica, 1)
    question = "longest_context"

    def fits(seq_len: int) -> bool:
        return plan.per_gpu(per_replica) * plan.sequence_bytes(seq_len) <= budget

    if all(w is not None for w in plan.windows):  # no attention layer: the state alone
        widest = max((w for w in plan.windows if w is not None), default=1)
        if fits(widest):
            return _record(
                plan, question, None, per_replica, batch, True, plan.sequence_bytes(widest)
            )
        high = widest
    else:
        high = 2
        while fits(high):
            high *= 2
    low = 1  # fits(low) and not fits(high)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return _record(plan, question, low, per_replica, batch, False, plan.sequence_bytes(low))


def device_for(point: FitPoint) -> DeviceSpec | None:
    """The point's named GPU, or None. This machine's measured peaks are refused: a fit
    plans for a GPU's memory and times its collectives, which published figures state."""
    if point.gpu is None:
        return None
    if is_this(point.gpu):
        raise FieldError(
            "gpu",
            point.gpu,
            f"fit needs a named GPU ({', '.join(DEVICES)}): its memory and the peaks and "
            "interconnect its published figures state",
        )
    return target_device(point.gpu)


def memory_of(point: FitPoint, device: DeviceSpec | None = None) -> MemorySize:
    """The memory of each GPU: `memory` as given, else the named GPU's (`device`, when
    device_for resolved it already), in the decimal GB its vendor states (an H100 SXM's
    80GB is 80e9 bytes)."""
    device = device or device_for(point)
    if point.memory is not None:
        return parse_memory(point.memory, "memory")
    if device is None:
        reason = "give the memory of each GPU, e.g. 80GiB, or a GPU by its name, e.g. h100-sxm"
        raise FieldError("memory", None, reason)
    return MemorySize(device.memory_bytes, f"{device.memory_bytes / 10**9:g}GB", decimal=True)


def plan_for(point: FitPoint, device: DeviceSpec | None = None) -> FitPlan:
    """The FitPlan of a point (on `device`, its named GPU when resolved already);
    FieldError for a value that cannot be planned."""
    spec = point.spec
    if spec is None:
        raise FieldError("model", point.model, "a fit needs the model's architecture")
    spec.require_kinds()
    if (point.seq_len is None) == (point.batch is None):
        raise FieldError(
            "seq_len",
            point.seq_len,
            "give either {seq_len} (for the largest batch) or {batch} (for the longest "
            "context), exactly one",
            mentions=("seq_len", "batch"),
        )
    size = memory_of(point, device)
    tp = positive_int("tp", point.tp) if point.tp is not None else None
    gpus = positive_int("gpus", point.gpus) if point.gpus is not None else None
    most_tp = _most_tp(point, device)
    _check_split(spec, tp or gpus or 1, device, most_tp, tp_given=tp is not None)
    tp = tp or gpus or 1
    return FitPlan(
        spec=spec,
        memory_bytes=size.bytes,
        gpus=gpus or tp,
        tp=tp,
        weights=_weights(point, spec),
        kv=_kv(point, spec),
        windows=layer_windows(
            spec.kv_layers, spec.windows, point.sliding_window, point.layer_pattern
        ),
        page_size=point.page_size,
        reserve_bytes=parse_share(point.reserve, "reserve", size.bytes),
        layer_pattern=point.layer_pattern,
        ep=point.ep,
        dp_attention=point.dp_attention,
        tp_given=point.tp is not None,
        most_tp=most_tp,
    )


def _weights(point: FitPoint, spec: ModelSpec) -> WeightFormat:
    """The weights: weights_dtype (default: the dtype the model is served in, a float32
    checkpoint's bfloat16: served_dtype; a quantised checkpoint's are set as it stores
    them, target.checkpoint_weights) with its scale groups, the head quantised too
    where quantize_head says so, the attention kept where keep_attention says so,
    multiplied where weight_only_kernel says, the vocabulary laid out over the ranks as
    vocab_layout says."""
    dtype = point.weights_dtype or served_dtype(spec.dtype)
    return WeightFormat.of_point(dtype, point)


def _kv(point: FitPoint, spec: ModelSpec) -> KvFormat:
    """The cache: kv_dtype (default: the dtype the model is served in) with its scale
    groups."""
    return KvFormat(
        point.kv_dtype or served_dtype(spec.dtype), point.kv_scale_group, point.scale_dtype
    )


def scaled(point: FitPoint) -> frozenset[str]:
    """The formats of the point that carry scales: its weights' and its cache's, each
    where quantised, and "weights group" where a scale group may be set on the weights
    (a point that is checked already: it has its model)."""
    spec = point.spec
    assert spec is not None
    return _weights(point, spec).scaled(own_head=has_own_head(spec)) | _kv(point, spec).scaled()


def _most_tp(point: FitPoint, device: DeviceSpec | None) -> int | None:
    """The most tp whose steps `device` can time where the point has a time target: one
    node's GPUs (Collectives.node_gpus), 1 without an interconnect; None without a target
    or a device (memory alone plans any tp)."""
    if device is None or (point.tpot is None and point.ttft is None):
        return None
    return device.most_tp


def _check_split(
    spec: ModelSpec, tp: int, device: DeviceSpec | None, most: int | None, tp_given: bool
) -> None:
    """FieldError where `tp` ranks cannot split the model's heads, or, where `device`
    times the steps (`most`, _most_tp), where it cannot time them (check_timed_tp);
    without tp given, naming the GPUs it stands for (_as_gpus)."""
    try:
        if device is not None and most is not None:
            check_timed_tp(device, tp, spec.num_heads, spec.num_kv_heads)
        model_layout(spec, KvFormat(spec.dtype), tp)
    except FieldError as exc:
        if tp_given:
            raise
        raise _as_gpus(spec, tp, exc, most) from None


def _as_gpus(spec: ModelSpec, gpus: int, exc: FieldError, most: int | None) -> FieldError:
    """A refusal of the tp that `gpus` given without tp stand for (one model split over
    them), as an error of the GPUs: what the user gave. Where the heads refuse it, the
    tps that split them and divide the GPUs (into replicas) are named."""
    cause = tp_split_problem(spec.num_heads, spec.num_kv_heads, gpus)
    if cause is None:
        reason = exc.reason
    else:
        sizes = tensor_parallel_sizes(spec.num_heads, spec.num_kv_heads)
        fitting = [t for t in sizes if gpus % t == 0 and (most is None or t <= most)]
        reason = f"{cause}; on {gpus} GPUs {{tp}} may be {or_list(fitting)}"
    reason = f"split one model over them ({{tp}}, not given): {reason}; give {{tp}}"
    return FieldError("gpus", gpus, reason, mentions=("tp",))


@dataclass(frozen=True)
class Targets:
    """A latency question: the GPU whose peaks time a step, the roofline's parameters, and
    the most time per output token and to the first token in exact seconds, and as
    given (None: no such target)."""

    device: DeviceSpec
    model: PerfModel
    tpot_s: Fraction | None
    ttft_s: Fraction | None
    tpot_text: str | None
    ttft_text: str | None

    @property
    def named(self) -> tuple[str, str]:
        """The target that errors of the prediction name: tpot, else ttft, as given."""
        if self.tpot_text is not None:
            return "tpot", self.tpot_text
        return "ttft", self.ttft_text  # type: ignore[return-value]

    def fields(self) -> dict[str, object]:
        """The record's fields that state the question: GPU, targets in ms, the model."""
        return {
            "gpu": self.device.name,
            "tpot_target_ms": None if self.tpot_s is None else float(self.tpot_s * 1000),
            "ttft_target_ms": None if self.ttft_s is None else float(self.ttft_s * 1000),
            "perf_model": self.model.describe(),
        }


def targets_for(point: FitPoint) -> Targets | None:
    """The point's latency targets, or None when it gives none; FieldError for a target
    without its unit, without a named GPU, or on the longest-context question (a target
    limits a batch, which that question gives)."""
    given = [(name, getattr(point, name)) for name in ("tpot", "ttft")]
    given = [(name, text) for name, text in given if text is not None]
    if not given:
        return None
    seconds = {name: duration_seconds(text, name) for name, text in given}
    texts = {name: str(text) for name, text in given}
    name, text = given[0]
    device = device_for(point)
    if device is None:
        reason = "needs {gpu}: the named GPU whose peaks time the step"
        raise FieldError(name, text, reason, mentions=("gpu",))
    if point.batch is not None:
        raise FieldError(
            name,
            text,
            "latency targets answer the largest batch at seq_len; give seq_len, not batch",
        )
    model = _calibrated(point.calibration, device)
    return Targets(
        device,
        model,
        seconds.get("tpot"),
        seconds.get("ttft"),
        texts.get("tpot"),
        texts.get("ttft"),
    )


def _calibrated(path: str | None, device: DeviceSpec) -> PerfModel:
    """The performance model of a calibration file fitted against `device`
    (experiments.target.perf_model, the defaults without one); what is wrong with the
    file as an error of the calibration field, fit's one field for it."""
    try:
        return perf_model(path, device)
    except FieldError as exc:
        if exc.field == "calibration":
            raise
        raise FieldError("calibration", path, f"{exc.field} {exc.value}: {exc.reason}") from None
    except UsageError as exc:
        raise FieldError("calibration", path, str(exc).removeprefix(f"{path}: ")) from None


@contextmanager
def _roofline_errors(plan: FitPlan, targets: Targets, hint: str) -> Iterator[None]:
    """The roofline's refusals as errors of the fit's own fields: a dtype the device has
    no matmul rate for is that of the plan's weights dtype (with `hint`, where the
    checkpoint stores them so: ModelSpec.stored_hint); a tp the GPUs given stand for,
    where none was given, theirs (_as_gpus, as _check_split names them); a model it cannot
    time the target's."""
    try:
        yield
    except FieldError as exc:
        if exc.field == "tp" and not plan.tp_given:
            raise _as_gpus(plan.gpus, exc) from None
        if exc.field != "dtype":
            raise
        raise FieldError("weights_dtype", plan.weights.dtype, exc.reason + hint) from None
    except UsageError as exc:
        raise FieldError(*targets.named, str(exc)) from None


def _predict(
    plan: FitPlan, targets: Targets, counts: Callable[..., ModelCounts], batch: int, seq_len: int
) -> ModelPrediction:
    """The roofline's time of a step of `counts` (decode_counts or prefill_counts) on one
    of the plan's tp ranks: the weights' dtype for the step, the cache's for the cache,
    and the plan's layer windows, so the step reads the cache the plan holds."""
    spec = replace(plan.spec, windows=plan.windows)
    with _roofline_errors(plan, targets, spec.stored_hint(plan.weights.dtype, plan.dtype)):
        split = (plan.tp, plan.weights, plan.ep, plan.data_parallel)
        step = counts(spec, batch, seq_len, plan.dtype, plan.kv.dtype, *split)
        return predict_counts(step, targets.device, plan.dtype, plan.tp, targets.model)


def step_prediction(
    plan: FitPlan, targets: Targets, per_replica: int, seq_len: int
) -> ModelPrediction:
    """A decode step of `per_replica` sequences with `seq_len` tokens cached, on one of the
    replica's tp ranks with its all-reduces: the time per output token."""
    return _predict(plan, targets, decode_counts, per_replica, seq_len)


def prefill_prediction(plan: FitPlan, targets: Targets, seq_len: int) -> ModelPrediction:
    """The prefill of one sequence of `seq_len` tokens on one rank: the time to first
    token of a request that waits for no other."""
    return _predict(plan, targets, prefill_counts, 1, seq_len)


def latency_batch(
    memory_per_replica: int,
    tpot_s: Fraction | None,
    step: Callable[[int], ModelPrediction],
) -> tuple[int, str]:
    """The largest batch of a replica, at most what memory allows, whose step (`step(b)`)
    meets `tpot_s`, and the limit that binds; 0 when one sequence is already too slow. A
    step's time grows with its batch, so a binary search finds it."""

    def meets(batch: int) -> bool:
        return step(batch).time_s <= tpot_s  # type: ignore[operator]

    if tpot_s is None or meets(memory_per_replica):
        return memory_per_replica, MEMORY_BOUND
    low, high = 0, memory_per_replica  # low meets the target (0 trivially), high does not
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if meets(mid) else (low, mid)
    return low, LATENCY_BOUND


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.2f} ms"


def largest_batch_within(plan: FitPlan, seq_len: int, targets: Targets) -> FitRecord:
    """The largest batch at `seq_len` that fits and meets the targets, with its predicted
    times; when no batch meets them, a record whose batch is 0 and whose status says
    which target one sequence misses. CapacityError when memory alone leaves no batch."""
    fits = largest_batch(plan, seq_len)
    ttft = prefill_prediction(plan, targets, seq_len) if targets.ttft_s is not None else None
    status = OK
    if ttft is not None and ttft.time_s > targets.ttft_s:  # type: ignore[operator]
        per_replica, bound = 0, LATENCY_BOUND
        status = (
            f"{TOO_SLOW}: no batch meets ttft {targets.ttft_text}: the prefill of one "
            f"sequence of {seq_len:,} tokens takes {_ms(ttft.time_s)}"
        )
    else:
        per_replica, bound = latency_batch(
            fits.batch_per_replica,
            targets.tpot_s,
            lambda batch: step_prediction(plan, targets, batch, seq_len),
        )
    step = step_prediction(plan, targets, per_replica or 1, seq_len)
    if per_replica == 0 and status == OK:
        status = (
            f"{TOO_SLOW}: no batch meets tpot {targets.tpot_text}: one sequence takes "
            f"{_ms(step.time_s)} per output token"
        )
    record = _record(
        plan,
        "largest_batch",
        seq_len,
        per_replica,
        per_replica * plan.replicas,
        False,
        fits.kv_bytes_per_sequence_per_gpu,
    )
    return replace(
        record,
        status=status,
        memory_batch=fits.batch,
        bound=bound,
        tpot_ms=step.time_s * 1e3,
        ttft_ms=None if ttft is None else ttft.time_s * 1e3,
        tokens_per_s_per_gpu=step.tokens_per_s / plan.tp if per_replica else None,
    )


def check(point: FitPoint) -> None:
    """Raise for a question that cannot be asked (not for one whose answer is 'nothing
    fits': that is the answer, a CapacityError when run); under targets, for a model or
    dtype the roofline cannot time."""
    targets = targets_for(point)
    plan = plan_for(point, targets.device if targets is not None else None)
    if point.page_size is not None:
        positive_int("page_size", point.page_size)
    plan.sequence_bytes(1)
    if targets is not None and point.seq_len is not None:
        step_prediction(plan, targets, 1, point.seq_len)
        if targets.ttft_s is not None:
            prefill_prediction(plan, targets, point.seq_len)


def _answer(point: FitPoint, plan: FitPlan, targets: Targets | None) -> FitRecord:
    """The answer to the point's question; CapacityError when memory leaves none."""
    if point.seq_len is None:
        return longest_context(plan, point.batch)  # type: ignore[arg-type]
    if targets is None:
        return largest_batch(plan, point.seq_len)
    return largest_batch_within(plan, point.seq_len, targets)


def run(point: FitPoint, context: Context | None = None) -> FitRecord:
    """The answer to the point's question; when nothing fits, a record whose answer is 0
    and whose status says why."""
    targets = targets_for(point)
    device = targets.device if targets is not None else device_for(point)
    plan = plan_for(point, device)
    try:
        record = _answer(point, plan, targets)
    except CapacityError as exc:
        if point.seq_len is not None:
            per_seq = plan.sequence_bytes(point.seq_len)
            record = _record(plan, "largest_batch", point.seq_len, 0, 0, False, per_seq)
            record.memory_batch = 0
        else:
            record = _record(plan, "longest_context", 0, 0, point.batch, False, 0)  # type: ignore[arg-type]
        record.status = str(exc)
        record.bound = MEMORY_BOUND if targets is not None else None
    if targets is None:
        return replace(record, gpu=device.name if device else None)
    return replace(record, **targets.fields())


#: The grid's run order, and no comparison among the points (study.sections.Experiment).
order, link = grid_order, no_links
