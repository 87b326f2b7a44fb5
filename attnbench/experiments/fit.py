"""What fits on a GPU: the largest batch at a context length, or the longest context at a
batch size, after the weights and a reserve.

Per GPU, with G GPUs serving G / tp replicas of the model, each split over tp ranks:

    KV budget = memory - weights on one rank - reserve
    largest batch at S     = replicas * floor(budget / KV bytes of one sequence of S on a rank)
    longest context at B   = the largest S with ceil(B / replicas) * KV bytes(S) <= budget

The reserve stands for what is neither weights nor KV cache: activations of a forward
pass, the CUDA context, communication buffers and allocator fragmentation. It defaults to
10% of each GPU's memory (a serving engine told to use 90% of a GPU leaves the same), and
takes a percentage or a size.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import FieldError
from ..model.architecture import ModelSpec
from ..model.capacity import (
    KvFormat,
    TokenLayout,
    cache_bytes,
    ceil_div,
    layer_windows,
    positive_int,
    token_layout,
    window_summary,
)
from ..model.dtypes import KV_DTYPES, check_dtype
from ..model.model_params import weight_bytes_per_rank
from ..model.units import format_bytes, parse_memory, parse_share
from ..records import exact, info, key
from .context import Context, grid_order, no_links

#: The status of an answer; any other says why nothing fits.
OK = "ok"


class CapacityError(Exception):
    """The request cannot fit; the message gives the numbers. Exit code 1."""

    exit_code = 1


@dataclass(frozen=True, kw_only=True)
class FitPoint:
    """One question: `seq_len` asks for the largest batch, `batch` for the longest context.
    `gpus` defaults to `tp`, `tp` to `gpus` (else 1); the dtypes to the model's."""

    model: str
    reserve: str
    scale_dtype: str
    memory: str | None = None
    seq_len: int | None = None
    batch: int | None = None
    gpus: int | None = None
    tp: int | None = None
    weights_dtype: str | None = None
    kv_dtype: str | None = None
    kv_scale_group: int | None = None
    sliding_window: int | None = None
    layer_pattern: str | None = None
    page_size: int | None = None
    #: The model's KV heads (what tells the variants of a what-if set apart) and, on such
    #: a set, the model's own count.
    num_kv_heads: int | None = None
    published_kv_heads: int | None = None
    spec: ModelSpec | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class FitPlan:
    """One GPU's memory, the model's share of it and the cache's layout."""

    spec: ModelSpec
    memory_bytes: int
    gpus: int
    tp: int
    weights_dtype: str
    kv: KvFormat
    windows: tuple[int | None, ...]
    page_size: int | None
    reserve_bytes: int
    layer_pattern: str | None = None

    def __post_init__(self) -> None:
        check_dtype(self.weights_dtype, "weights_dtype", KV_DTYPES)
        if self.gpus % self.tp:
            raise FieldError("gpus", self.gpus, f"not a multiple of tp {self.tp}")
        self.layout  # noqa: B018  (tp must split the heads)

    @property
    def replicas(self) -> int:
        return self.gpus // self.tp

    @property
    def layout(self) -> TokenLayout:
        s = self.spec
        latent = s.mla.latent_dim if s.mla else None
        return token_layout(s.num_heads, s.num_kv_heads, s.head_dim, self.kv, self.tp, latent)

    @property
    def weights_bytes(self) -> int:
        """Weights on one GPU (one tensor-parallel rank)."""
        return weight_bytes_per_rank(self.spec, self.weights_dtype, self.tp)

    def sequence_bytes(self, seq_len: int) -> int:
        """KV bytes one sequence of `seq_len` tokens takes on one GPU."""
        return cache_bytes(self.layout, self.windows, [seq_len], self.page_size).total

    def kv_budget(self) -> int:
        """Bytes left for the KV cache on one GPU; CapacityError when there are none."""
        weights, memory, reserve = self.weights_bytes, self.memory_bytes, self.reserve_bytes
        where = f"on each of {self.gpus} GPU(s) with tp {self.tp}"
        if weights > memory:
            raise CapacityError(
                f"weights alone do not fit: {format_bytes(weights)} ({weights:,} bytes of "
                f"{self.weights_dtype}) {where} > {format_bytes(memory)} ({memory:,} bytes)"
            )
        if weights + reserve >= memory:
            raise CapacityError(
                f"no room for a KV cache: weights {format_bytes(weights)} + reserve "
                f"{format_bytes(reserve)} {where} leave nothing of {format_bytes(memory)}"
            )
        return memory - weights - reserve


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
    replicas: int = exact()
    weights_dtype: str = key()
    kv_dtype: str = key()
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
    weights_bytes_per_gpu: int = exact()
    kv_bytes_per_gpu: int = exact()
    reserve_bytes_per_gpu: int = exact()
    free_bytes_per_gpu: int = exact()
    #: The model's own KV heads on every row of a what-if set; None otherwise.
    published_kv_heads: int | None = info()
    #: "ok", or why nothing fits: then the answer (batch, or seq_len) is 0, and
    #: free_bytes_per_gpu is negative when the weights and reserve exceed the memory.
    status: str = info(OK)


def _record(
    plan: FitPlan,
    question: str,
    seq_len: int | None,
    per_replica: int,
    total_batch: int,
    unbounded: bool,
    per_seq: int,
) -> FitRecord:
    kv = per_replica * per_seq
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
        replicas=plan.replicas,
        weights_dtype=plan.weights_dtype,
        kv_dtype=plan.kv.dtype,
        page_size=plan.page_size,
        layer_pattern=plan.layer_pattern,
        sliding_window=window,
        windowed_layers=windowed_layers,
        seq_len=seq_len,
        batch=total_batch,
        batch_per_replica=per_replica,
        context_unbounded=unbounded,
        max_position_embeddings=plan.spec.max_position_embeddings,
        kv_bytes_per_sequence_per_gpu=per_seq,
        weights_bytes_per_gpu=plan.weights_bytes,
        kv_bytes_per_gpu=kv,
        reserve_bytes_per_gpu=plan.reserve_bytes,
        free_bytes_per_gpu=plan.memory_bytes - plan.weights_bytes - plan.reserve_bytes - kv,
    )


def largest_batch(plan: FitPlan, seq_len: int) -> FitRecord:
    """The most sequences of `seq_len` tokens that fit, over all replicas."""
    budget = plan.kv_budget()
    per_seq = plan.sequence_bytes(seq_len)
    per_replica = budget // per_seq
    if per_replica == 0:
        raise CapacityError(
            f"not even one sequence fits: {seq_len:,} tokens need {format_bytes(per_seq)} of "
            f"KV cache per GPU, {format_bytes(budget)} is left after weights and reserve"
        )
    question = "largest_batch"
    return _record(
        plan, question, seq_len, per_replica, per_replica * plan.replicas, False, per_seq
    )


def longest_context(plan: FitPlan, batch: int) -> FitRecord:
    """The longest context at which `batch` sequences fit (spread over the replicas).

    KV bytes grow with the context until every layer's window is full: when all layers
    have a window and the batch fits at the largest one, the context is unbounded."""
    budget = plan.kv_budget()
    per_replica = ceil_div(batch, plan.replicas)
    question = "longest_context"

    def fits(seq_len: int) -> bool:
        return per_replica * plan.sequence_bytes(seq_len) <= budget

    if not fits(1):
        raise CapacityError(
            f"not even one token per sequence fits: {per_replica:,} sequences per replica "
            f"need {format_bytes(per_replica * plan.sequence_bytes(1))} per GPU, "
            f"{format_bytes(budget)} is left after weights and reserve"
        )
    if all(w is not None for w in plan.windows):
        widest = max(w for w in plan.windows if w is not None)
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


def plan_for(point: FitPoint) -> FitPlan:
    """The FitPlan of a point; FieldError for a value that cannot be planned."""
    spec = point.spec
    if spec is None:
        raise FieldError("model", point.model, "a fit needs the model's architecture")
    if (point.seq_len is None) == (point.batch is None):
        raise FieldError(
            "seq_len",
            point.seq_len,
            "give either seq_len (for the largest batch) or batch (for the longest "
            "context), exactly one",
        )
    if point.memory is None:
        raise FieldError("memory", None, "give the memory of each GPU, e.g. 80GiB")
    size = parse_memory(point.memory, "memory")
    tp = positive_int("tp", point.tp) if point.tp is not None else None
    gpus = positive_int("gpus", point.gpus) if point.gpus is not None else None
    tp = tp or gpus or 1
    return FitPlan(
        spec=spec,
        memory_bytes=size.bytes,
        gpus=gpus or tp,
        tp=tp,
        weights_dtype=point.weights_dtype or spec.dtype,
        kv=KvFormat(point.kv_dtype or spec.dtype, point.kv_scale_group, point.scale_dtype),
        windows=layer_windows(
            spec.num_layers, spec.windows, point.sliding_window, point.layer_pattern
        ),
        page_size=point.page_size,
        reserve_bytes=parse_share(point.reserve, "reserve", size.bytes),
        layer_pattern=point.layer_pattern,
    )


def check(point: FitPoint) -> None:
    """Raise for a question that cannot be asked (not for one whose answer is 'nothing
    fits': that is the answer, a CapacityError when run)."""
    plan = plan_for(point)
    if point.page_size is not None:
        positive_int("page_size", point.page_size)
    plan.sequence_bytes(1)


def run(point: FitPoint, context: Context | None = None) -> FitRecord:
    """The answer to the point's question; when nothing fits, a record whose answer is 0
    and whose status says why."""
    plan = plan_for(point)
    try:
        if point.seq_len is not None:
            return largest_batch(plan, point.seq_len)
        return longest_context(plan, point.batch)  # type: ignore[arg-type]
    except CapacityError as exc:
        if point.seq_len is not None:
            per_seq = plan.sequence_bytes(point.seq_len)
            record = _record(plan, "largest_batch", point.seq_len, 0, 0, False, per_seq)
        else:
            record = _record(plan, "longest_context", 0, 0, point.batch, False, 0)  # type: ignore[arg-type]
        record.status = str(exc)
        return record


#: The grid's run order, and no comparison among the points (study.sections.Experiment).
order, link = grid_order, no_links
