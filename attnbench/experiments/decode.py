"""Prefill and per-token decode of one attention layer, with and without the KV cache,
by every provider of the operator (modules/providers.py).

One point = (shape, provider, dtype, batch, context S = prompt_len, gen_len, mode,
cuda_graph). Its metrics, each with its own raw samples:

- the step (the default metric), at a fixed context: every timed call is one decode step
  with exactly S cached tokens: it writes position S and attends S + 1 keys (mode
  "cache"), or one causal forward over S + 1 tokens keeping the last row (mode
  "no_cache"). The samples are independent draws of one quantity;
- the prefill (mode cache, option `prefill`): one causal forward over the S prompt tokens
  that fills the cache, held against the matmul peak (it is compute-bound);
- the generation (gen_len N > 0): N tokens decoded one after another from context S, one
  sample per whole generation: `gen_tokens_per_s`.

Before anything is timed, the provider's step is checked against the explicit reference
on the same inputs; a provider that disagrees is `wrong` and is not timed, one that cannot
run the point is `unsupported`, with the reason.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch

from ..errors import CombinationError, FieldError
from ..measure.devices import free_memory_bytes
from ..measure.memory import is_oom, skip_status
from ..measure.peak_memory import PeakMemory, peak_bytes_during
from ..measure.stats import (
    BUSY_CPU_SHARE,
    MIN_SPREAD_SAMPLES,
    NOISY_IQR_FRACTION,
    Measurement,
    in_run_ratio,
    median,
)
from ..measure.timing import CpuShare, Sampling, TimedCall, Timer
from ..model.capacity import kv_cache_bytes
from ..model.dtypes import dtype_bytes
from ..model.formulas import (
    StepCounts,
    batch_step_counts,
    prefill_flops,
    score_matrix_bytes,
    step_totals,
    weight_bytes,
)
from ..model.shapes import AttentionShape
from ..modules.attention import GroupedQueryAttention
from ..modules.dtypes import torch_dtype
from ..modules.kv_cache import KVCache
from ..modules.providers import PROVIDERS, check_output, reference_step
from ..modules.ragged import RaggedInputs
from ..modules.ragged import reference_step as ragged_reference
from ..modules.workload import DecodeInputs, Unsupported, Workload, refusals
from ..records import Status, count, exact, flattened, info, key, ratio, timing
from . import serving
from .context import Context, Counted
from .kernels import step_kernels
from .params import ParamsPoint
from .tensor_parallel import Ranks

SEED = 0
#: The status of a point measured with a steady spread, and of one whose step is noisy:
#: p25 to p75 wider than NOISY_IQR_FRACTION of the median (`noisy`), or too few samples
#: to judge the spread (FEW_SAMPLES). Both are timed; every other status is not.
OK, NOISY = "ok", "noisy"
#: The reference that times a step against its own kernels, each run alone.
OWN_KERNELS = "kernels"
FEW_SAMPLES = f"{NOISY}: under {MIN_SPREAD_SAMPLES} samples, too few to judge the spread"
#: The status of a point sampled while this process had the CPU for less than
#: BUSY_CPU_SHARE of the time (measure.timing.CpuShare): timed, but on a busy host.
BUSY = f"{NOISY}: sampled while another process held the CPU"
#: The status of a point whose samples spread wide: the rule in the table's terms too
#: (its ±IQR column shows half of p25 to p75).
WIDE = (
    f"{NOISY}: p25 to p75 over {NOISY_IQR_FRACTION:.0%} of the median "
    f"(±IQR over ±{NOISY_IQR_FRACTION / 2:.0%})"
)
#: How a point's step was sampled: in turn with the others of its context
#: (experiments.interleave), or alone.
INTERLEAVED, ALONE = "interleaved", "alone"
#: The least time one sample spans, by device type: shorter calls are timed in blocks
#: (see measure.timing.Sampling), unless something must run between calls.
MIN_SAMPLE_MS = {"cpu": 2.0, "cuda": 0.5}
#: The memory layouts a group's points are sampled over (experiments.interleave): at
#: least LAYOUTS (the fewest whose spread a t interval can use at a useful width), then
#: more while the comparisons are wider than asked, up to MAX_LAYOUTS.
LAYOUTS, MAX_LAYOUTS = 4, 16


@dataclass(frozen=True, kw_only=True)
class DecodeOptions:
    """A decode section's scalar options, resolved once per section by the study's
    planning (study.sections.decode_options): their defaults are the schema's
    (study.schema), `max_time` the seconds of sampling on the section's device."""

    warmup: int
    repeats: int | None
    min_repeats: int
    max_time: float
    target_rel_ci: float
    prefill: bool
    prefill_memory: bool
    flush_l2: bool
    cold_cache: bool
    baseline_provider: str
    reference: str
    instructions: bool
    no_cache_max_prompt_len: int | None

    @classmethod
    def of_mapping(cls, options: Mapping[str, Any]) -> DecodeOptions:
        """The options from a mapping naming every field (and maybe more): a decode
        section's resolved options as `attnbench ab` sends them to its workers, or a
        point's as JSON gives them back."""
        return cls(**{name: options[name] for name in cls.__dataclass_fields__})

    def sampling(self, device: torch.device) -> Sampling:
        return Sampling(
            warmup=self.warmup,
            repeats=self.repeats,
            min_repeats=self.min_repeats,
            max_time_s=self.max_time,
            target_rel_ci=self.target_rel_ci,
            min_sample_ms=MIN_SAMPLE_MS[device.type],
            layouts=LAYOUTS,
            max_layouts=MAX_LAYOUTS,
        )


@dataclass(frozen=True, kw_only=True)
class DecodePoint(ParamsPoint):
    """One layer shape (see ParamsPoint) decoding at a context of `prompt_len` tokens,
    with its section's options (the same object for every point of a section)."""

    options: DecodeOptions
    batch: int
    dtype: str
    prompt_len: int
    gen_len: int = 0
    provider: str = "attnbench"
    mode: str = "cache"
    cuda_graph: bool = False
    tp: int = 1
    #: The batch sequence by sequence (model.batches: `8q1s128..4k`), or None: `batch`
    #: sequences at a context of `prompt_len`. Given, it sets `batch` (its sequences)
    #: and `prompt_len` (its longest context).
    batch_spec: str | None = None
    #: Tokens per block of a paged cache (experiments.serving), or None: contiguous.
    block_size: int | None = None

    def __post_init__(self) -> None:
        if self.batch_spec is not None:
            batch = serving.batch_of(self.batch_spec)
            object.__setattr__(self, "batch", batch.batch_size)
            object.__setattr__(self, "prompt_len", batch.max_context_len)

    @property
    def cached(self) -> bool:
        return self.mode == "cache"

    @property
    def times_prefill(self) -> bool:
        """Its prefill is timed: a cached uniform point whose options ask for it."""
        return self.cached and self.options.prefill and not serving.is_serving(self)

    @property
    def query_tokens(self) -> int:
        """New tokens one step feeds: one per sequence, or the batch spec's."""
        if self.batch_spec is None:
            return self.batch
        return serving.batch_of(self.batch_spec).query_tokens

    def to_dict(self) -> dict[str, Any]:
        """The point as JSON-ready fields, its options nested (`of_dict` reads it back)."""
        return asdict(self)

    @classmethod
    def of_dict(cls, fields: Mapping[str, Any]) -> DecodePoint:
        return cls(**{**fields, "options": DecodeOptions.of_mapping(fields["options"])})


@dataclass(frozen=True)
class Sampled:
    """A sampled metric of a record, declared once as one attribute `stem`
    (expand_sampled): its fields `<stem>_median`, `<stem>_p25`, `<stem>_p75` and the raw
    samples (JSON only; `samples` names their field where it is not `<stem>_samples`),
    of `kind` (records.timing or records.ratio); `against` (on the median) names the
    info field that says what a ratio was taken against. A comparison of two points
    sampled in turn (`interval`) also holds its 95% interval, `<stem>_ci_lo` and
    `<stem>_ci_hi`; `names` is the other point's field that its `against` field takes,
    `inverse` the info field that holds 1 / its median (a speed-up), which the other
    point holds as 1.0 when `inverse_of_other`."""

    kind: Callable[..., Any]
    samples: str | None = None
    against: str | None = None
    interval: bool = False
    names: str | None = None
    inverse: str | None = None
    inverse_of_other: bool = False

    def fields(self, stem: str) -> dict[str, tuple[str, Any]]:
        """The record fields it stands for, in order: name -> (annotation, field)."""
        median = f"{stem}_median"
        timed = stem.endswith("_ms")
        samples = self.samples or (f"{stem[:-3]}_samples_ms" if timed else f"{stem}_samples")
        number, values = "float | None", "list[float]"
        found = {
            median: (number, self.kind(against=self.against) if self.against else self.kind()),
            f"{stem}_p25": (number, self.kind(of=median, role="p25")),
            f"{stem}_p75": (number, self.kind(of=median, role="p75")),
            samples: (values, self.kind([], of=median, csv=False, role="samples")),
        }
        if self.interval:
            found[f"{stem}_ci_lo"] = (number, info())
            found[f"{stem}_ci_hi"] = (number, info())
        return found


def sampled(kind: Callable[..., Any], **how: Any) -> Any:
    """A sampled metric's declaration in a record's body (see Sampled)."""
    return Sampled(kind, **how)


def comparison(**how: Any) -> Any:
    """A comparison's declaration in a record's body: a sampled ratio with its interval."""
    return Sampled(ratio, interval=True, **how)


def expand_sampled(cls: type) -> type:
    """The record class with each `Sampled` attribute replaced, in its place, by the
    fields it stands for (before dataclass reads them); the declarations stay readable
    as `cls.SAMPLED`, by stem."""
    annotations: dict[str, Any] = {}
    declared: dict[str, Sampled] = {}
    for name, annotation in cls.__dict__.get("__annotations__", {}).items():
        value = cls.__dict__.get(name)
        if not isinstance(value, Sampled):
            annotations[name] = annotation
            continue
        delattr(cls, name)
        declared[name] = value
        for field_name, (field_annotation, field_value) in value.fields(name).items():
            annotations[field_name] = field_annotation
            setattr(cls, field_name, field_value)
    cls.__annotations__ = annotations
    cls.SAMPLED = declared  # type: ignore[attr-defined]
    return cls


@dataclass(kw_only=True)
@expand_sampled
class DecodeRecord:
    """One decode point's row. Each sampled metric (`Sampled`) stands for its median,
    p25, p75 and raw samples, and a comparison also for its 95% interval's bounds."""

    variant: str = key()
    provider: str = key()
    device: str = key()
    dtype: str = key()
    batch: int = key()
    d_model: int = key()
    num_heads: int = key()
    num_kv_heads: int = key()
    head_dim: int = key()
    prompt_len: int = key()
    gen_len: int = key()
    mode: str = key()
    cuda_graph: bool = key(False)
    tp: int = key(1)
    step_ms: Sampled = sampled(timing, samples="samples_ms")
    step_repeats: int | None = info()
    step_calls_per_sample: int | None = info()
    step_stop: str | None = info()
    step_ci_pct: float | None = info()
    tokens_per_s: float | None = info()
    speedup_vs_no_cache: float | None = info()
    baseline_provider: str | None = info()
    speedup_vs_baseline: float | None = info()
    bytes_per_step: int | None = exact(None)
    achieved_gbps: float | None = info()
    peak_gbps: float | None = info()
    pct_of_peak_bw: float | None = info()
    flops_per_step: int | None = exact(None)
    kv_bytes_per_gpu: int | None = exact(None)
    allreduce_ms: Sampled = sampled(timing)
    prefill_ms: Sampled = sampled(timing)
    prefill_flops: int | None = exact(None)
    achieved_tflops: float | None = info()
    peak_tflops: float | None = info()
    pct_of_peak_flops: float | None = info()
    gen_ms: Sampled = sampled(timing)
    gen_tokens_per_s: float | None = info()
    reference: str | None = info()
    x_of_reference: Sampled = sampled(ratio, against="reference")
    # The comparisons of points sampled in the same rounds (experiments.interleave): the
    # step over another point's, round by round, with a bootstrap 95% interval.
    sampling: str | None = info()
    sampling_group: int | None = info()
    #: The memory layouts its samples span, each sampled for as many rounds: a fresh
    #: allocation of the points' weights, inputs and caches; over copies, one run of
    #: rounds over copies allocated once (experiments.interleave).
    layouts: int | None = info()
    #: The copies of its weights and cache its step rotates over, a call on each in turn,
    #: so that it reads them from memory (experiments.interleave.copies_for).
    copies: int | None = info()
    #: The share of the CPU time its threads needed this process had while sampling (on
    #: the CPU; measure.timing.CpuShare): under BUSY_CPU_SHARE, another process held it.
    cpu_share: float | None = info()
    narrowest_variant: str | None = info()
    x_of_narrowest: Sampled = comparison(against="narrowest_variant", names="variant")
    x_of_no_cache: Sampled = comparison(inverse="speedup_vs_no_cache")
    x_of_baseline: Sampled = comparison(
        against="baseline_provider", inverse="speedup_vs_baseline", inverse_of_other=True
    )
    instructions_per_step: int | None = count()
    instructions_counter: str | None = info()
    noisy: bool | None = info()
    status: str = info("ok")
    model: str | None = key(None)
    #: The model's own KV heads on every row of a what-if set; None otherwise.
    published_kv_heads: int | None = info()
    projection_path: str | None = info()
    batch_spec: str | None = key(None)
    block_size: int | None = key(None)
    #: A paged point's cache after its step, as kvmem counts it: the bytes of its blocks,
    #: of the tokens they hold, and the share of the blocks that holds none.
    kv_allocated_bytes: int | None = exact(None)
    kv_used_bytes: int | None = exact(None)
    kv_waste_pct: float | None = info()
    x_of_contiguous: Sampled = comparison(against="block_size")  # paged: a block size
    #: The peak bytes allocated during one prefill call (option prefill_memory), how they
    #: were counted, and the bytes of the whole score matrix, B * Hq * S * S elements.
    prefill_peak_bytes: int | None = info()
    prefill_peak_method: str | None = info()
    score_matrix_bytes: int | None = exact(None)
    #: What the prefill holds at its peak by the provider's declaration (forward_bytes):
    #: its activations, and the scores of a provider that holds them all.
    prefill_analytic_bytes: int | None = exact(None)


def build_layer(
    shape: AttentionShape, backend: str, dtype: torch.dtype, device
) -> GroupedQueryAttention:
    """The layer under test, with seeded random weights."""
    torch.manual_seed(SEED)
    return GroupedQueryAttention(
        shape.d_model,
        shape.num_heads,
        shape.num_kv_heads,
        shape.head_dim,
        shape.bias,
        backend=backend,
        device=device,
        dtype=dtype,
    )


def random_tokens(shape: AttentionShape, batch: int, length: int, dtype, device) -> torch.Tensor:
    """The layer's input for `length` positions: seeded random activations (never zeros)."""
    gen = torch.Generator(device=device).manual_seed(SEED + 1)
    return torch.randn(batch, length, shape.d_model, dtype=dtype, device=device, generator=gen)


def filled_cache(shape: AttentionShape, batch: int, length: int, dtype, device) -> KVCache:
    """A cache of `length` tokens holding seeded random K/V (generated in place: GBs at
    long contexts), as if a prompt had been prefilled."""
    cache = KVCache(batch, shape.num_kv_heads, length, shape.head_dim, dtype, device)  # type: ignore[arg-type]
    gen = torch.Generator(device=device).manual_seed(SEED + 2)
    for buffer in (cache.k, cache.v):
        buffer.normal_(generator=gen)
    cache.length = length
    return cache


def point_inputs(point: DecodePoint, layer: GroupedQueryAttention, device) -> DecodeInputs:
    """The inputs every provider of `point` shares: x for context + max(gen_len, 1) tokens
    and, cached, a filled cache of as many."""
    length = point.prompt_len + max(point.gen_len, 1)
    tdtype = torch_dtype(point.dtype)
    x = random_tokens(point.shape, point.batch, length, tdtype, device)
    cache = filled_cache(point.shape, point.batch, length, tdtype, device) if point.cached else None
    return DecodeInputs(layer, x, cache, point.prompt_len, point.gen_len)


def step_inputs(
    point: DecodePoint, layer: GroupedQueryAttention, device
) -> DecodeInputs | RaggedInputs:
    """The inputs of the point's step: a batch spec's packed tokens and padded caches
    (experiments.serving), else the uniform batch's (point_inputs)."""
    if point.batch_spec is not None:
        return serving.batch_inputs(point, layer)
    return point_inputs(point, layer, device)


@torch.inference_mode()
def decode_outputs(
    layer: GroupedQueryAttention, x: torch.Tensor, prompt_len: int, gen_len: int, cached: bool
) -> torch.Tensor:
    """The outputs of gen_len tokens decoded after a prefilled prompt, (batch, gen_len,
    d_model), through the fixed calls the timings use: what both modes, and one causal
    pass over everything, must agree on."""
    if not cached:
        return torch.cat(
            [
                layer.causal_call(x[:, : t + 1])()[:, -1:]
                for t in range(prompt_len, prompt_len + gen_len)
            ],
            dim=1,
        )
    cache = KVCache(
        x.shape[0], layer.num_kv_heads, prompt_len + gen_len, layer.head_dim, x.dtype, x.device
    )
    layer.causal_call(x[:, :prompt_len], cache=cache)()
    steps = [
        layer.decode_step(x[:, t : t + 1].contiguous(), cache, t)
        for t in range(prompt_len, prompt_len + gen_len)
    ]
    return torch.cat([step() for step in steps], dim=1)


def capture_graph(
    call: Callable[[], object], setup: Callable[[], object] | None, device
) -> Callable[[], None]:
    """`call` captured once in a CUDA graph (after a warm-up on a side stream), returned as
    its replay. Possible because a fixed-context call reads and writes the same memory
    every time."""
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        for _ in range(2):
            if setup is not None:
                setup()
            call()
    torch.cuda.current_stream(device).wait_stream(stream)
    if setup is not None:
        setup()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    return graph.replay


@dataclass
class Timings:
    step: Measurement
    prefill: Measurement | None = None
    generation: Measurement | None = None
    all_reduce: Measurement | None = None  # tensor-parallel: the step's all-reduce alone
    x_of_reference: Measurement | None = None  # the step over its reference, per round
    reference: str | None = None  # what x_of_reference is taken against
    prefill_peak: PeakMemory | None = None  # the bytes one prefill call allocates at most
    copies: int = 1  # of the step's buffers, rotated over (timing.rotating)


#: Times a call: Timer.sample, or a replacement with its signature (measure.lockstep).
Sample = Callable[..., Measurement]


def time_workload(
    work: Workload,
    point: DecodePoint,
    device: torch.device,
    sample: Sample = Timer.sample,
    reference: list[TimedCall] | None = None,
) -> Timings:
    """Time the point's metrics with `sample`: the prefill first (it fills the cache with
    real K/V), then the fixed-context step, then whole generations. With `reference`
    calls, the step is sampled in rounds with them (Timer.sample_interleaved) and its
    in-run ratio to their sum is kept beside it."""
    options = point.options
    timer = Timer(device, flush_l2=options.flush_l2)
    sampling = options.sampling(device)
    prefill = time_prefill(timer, work, point, sample)
    step = timed_step(work, point, device)
    if reference:
        measured = timer.sample_interleaved([(step, work.step_setup), *reference], sampling)
        timings = step_timings(measured, prefill, options.reference)
    else:
        timings = Timings(sample(timer, step, sampling, work.step_setup), prefill)
    timings.generation = time_generation(timer, work, point, sample)
    timings.prefill_peak = prefill_peak(work, point, device)
    return timings


def prefill_peak(work: Workload, point: DecodePoint, device: torch.device) -> PeakMemory | None:
    """The peak bytes one more prefill call allocates, counted apart from its timings
    (measure.peak_memory), when the point's options ask for it."""
    if not (point.times_prefill and point.options.prefill_memory and work.prefill):
        return None
    if work.prefill_setup is not None:
        work.prefill_setup()
    return peak_bytes_during(work.prefill, device)


def time_prefill(
    timer: Timer, work: Workload, point: DecodePoint, sample: Sample
) -> Measurement | None:
    """The prefill's samples, when the point has one to time (mode cache, `prefill`)."""
    if point.times_prefill and work.prefill is not None:
        sampling = point.options.sampling(timer.device)
        return sample(timer, work.prefill, sampling, work.prefill_setup)
    return None


def time_generation(
    timer: Timer, work: Workload, point: DecodePoint, sample: Sample
) -> Measurement | None:
    """Whole generations of gen_len tokens, one sample each, when gen_len is set."""
    if point.gen_len and work.generation is not None:
        sampling = point.options.sampling(timer.device)
        return sample(timer, work.generation, sampling, work.generation_setup)
    return None


def timed_step(work: Workload, point: DecodePoint, device: torch.device) -> Callable[[], object]:
    """The call each step sample times: the step, or its CUDA graph's replay."""
    if point.cuda_graph:
        return capture_graph(work.step, work.step_setup, device)
    return work.step


def step_timings(
    measured: list[Measurement], prefill: Measurement | None, reference: str
) -> Timings:
    """The step's timings from its samples and those of its reference calls, taken in the
    same rounds: the step, and its in-run ratio to their sum when it has any."""
    if len(measured) == 1:
        return Timings(measured[0], prefill)
    return Timings(measured[0], prefill, x_of_reference=in_run_ratio(measured), reference=reference)


def forward_bytes(point: DecodePoint, q_len: int, k_len: int) -> int:
    """Bytes one forward of `q_len` new tokens over `k_len` keys allocates at the least:
    q, the new K and V, the attention output and the layer output; with a provider that
    scores explicitly also what it holds of the B*Hq*q_len*k_len scores at once
    (Provider.score_bytes per score) and K/V expanded to every query head."""
    shape, batch = point.shape, point.batch
    b = dtype_bytes(point.dtype)
    total = batch * q_len * (2 * shape.q_dim + 2 * shape.kv_dim + shape.d_model) * b
    score_bytes = PROVIDERS[point.provider].score_bytes
    if score_bytes:
        total += batch * shape.num_heads * q_len * k_len * score_bytes
        if shape.group_size > 1:
            total += 2 * batch * shape.num_heads * k_len * shape.head_dim * b  # type: ignore[operator]
    return total


def decode_bytes(point: DecodePoint, prefill: bool = True) -> int:
    """Bytes a decode point allocates at its peak, at the least, in Python integers (no
    size overflows): the weights, the input x of batch * L * d_model elements with
    L = prompt_len + max(gen_len, 1), the KV cache of 2 * batch * Hkv * L * D elements
    (mode cache; a provider that copies the cache holds one for its step and one for its
    generations; a paged point also its paged copy) and the largest forward: the prefill
    or a step with a cache, the layer over the whole prefix without one (see
    forward_bytes). A batch spec's: serving.batch_bytes."""
    shape, batch = point.shape, point.batch
    b = dtype_bytes(point.dtype)
    length = point.prompt_len + max(point.gen_len, 1)
    weights = weight_bytes(shape, point.dtype)
    if point.batch_spec is not None:
        return weights + serving.batch_bytes(point)
    if point.block_size is not None:
        prefill = False  # a paged step is timed alone, its paged copy beside the cache
        weights += serving.paged_bytes(point)
    x = batch * length * shape.d_model * b
    if not point.cached:
        return weights + x + forward_bytes(point, length, length)
    copies = 1 + PROVIDERS[point.provider].copies_cache * (1 + (point.gen_len > 0))
    cache = copies * 2 * batch * shape.kv_dim * length * b
    largest = forward_bytes(point, 1, length)
    if prefill:
        largest = max(largest, forward_bytes(point, point.prompt_len, point.prompt_len))
    return weights + x + cache + largest


def check(point: DecodePoint) -> None:
    """Raise for a point that cannot run: its shape, dtype and provider."""
    point.shape  # noqa: B018
    torch_dtype(point.dtype)
    if point.provider not in PROVIDERS:
        raise ValueError(f"unknown provider {point.provider!r}")
    serving.check(point)


def check_section(values: Mapping[str, list], options: DecodeOptions, given: set[str]) -> None:
    """Raise for options that cannot work with the section's axes: a baseline provider
    set (`given`) but not swept, several tensor-parallel sizes (one launch has one), a
    no_cache_max_prompt_len that leaves a no_cache-only section nothing to run."""
    sizes = values.get("tp", [1])
    if len(sizes) > 1:
        raise FieldError(
            "tp",
            ",".join(map(str, sizes)),
            "one size per run: the ranks torchrun started split every point",
        )
    longest = options.no_cache_max_prompt_len
    contexts = values.get("prompt_len", [])
    if longest is not None and values.get("mode") == ["no_cache"] and min(contexts) > longest:
        listed = ", ".join(map(str, contexts))
        reason = f"is below every context ({listed}): no point would run"
        raise FieldError("no_cache_max_prompt_len", longest, reason)
    for spec in values.get("batch_spec") or []:  # a bad spec is named before what it sets
        serving.batch_of(spec)
    check_serving(values, options, given)
    replaced = sorted(given & {"batch", "prompt_len"}) if values.get("batch_spec") else []
    if replaced:
        name = replaced[0]
        listed = ",".join(map(str, values[name]))
        raise FieldError(name, listed, "is set by the batch spec: give one or the other")
    check_unused(values, options, given)
    swept = values.get("provider", [])
    baseline = options.baseline_provider
    if "baseline_provider" in given and baseline not in swept:
        raise FieldError(
            "baseline_provider", baseline, f"is not among the providers swept ({', '.join(swept)})"
        )


#: The options that say when adaptive sampling stops: a fixed number of repeats replaces them.
ADAPTIVE = ("min_repeats", "max_time", "target_rel_ci")


def check_unused(values: Mapping[str, list], options: DecodeOptions, given: set[str]) -> None:
    """Refuse options given (`given`) that nothing would read: adaptive sampling's beside a
    fixed number of repeats; a no-cache cut where no point runs without the cache; a
    reference that is the one provider timed."""
    if options.repeats is not None:
        for name in ADAPTIVE:
            if name in given:
                reason = "has no effect beside {repeats}, which fixes the samples a point takes"
                raise FieldError(name, getattr(options, name), reason, ("repeats",))
    if "no_cache_max_prompt_len" in given and "no_cache" not in values.get("mode", ["cache"]):
        reason = "has no effect: no point runs without the cache ({mode} has no no_cache)"
        raise FieldError(
            "no_cache_max_prompt_len", options.no_cache_max_prompt_len, reason, ("mode",)
        )
    if "reference" in given and values.get("provider") == [options.reference]:
        reason = "is the provider timed: give another to check its outputs against, or none"
        raise FieldError("reference", options.reference, reason)


def check_serving(values: Mapping[str, list], options: DecodeOptions, given: set[str]) -> None:
    """CombinationError for serving axes that leave nothing to run or to measure: a batch
    spec or a paged cache is timed cached only, so without the cache mode no point runs;
    and they time no prefill, as a section without prefill or the cache mode does not,
    so prefill_memory (`given`) would measure nothing."""
    specs = values.get("batch_spec") or []
    paged = [b for b in values.get("block_size", []) if b not in (None, "contiguous")]
    only_paged = bool(paged) and len(paged) == len(values.get("block_size", []))
    served = {"batch_spec": specs[0]} if specs else {"block_size": paged[0]} if only_paged else {}
    cached = "cache" in values.get("mode", ["cache"])
    if served and not cached:
        raise CombinationError(
            {"mode": "no_cache", **served},
            "a batch spec or a paged cache is timed with the cache only: no point would run",
        )
    if "prefill_memory" not in given or not options.prefill_memory:
        return
    why = [
        ({"prefill": False}, not options.prefill, "the prefill is not timed"),
        (served, bool(served), "a batch spec or a paged cache times its step alone"),
        ({"mode": "no_cache"}, not cached, "a step without the cache times no prefill"),
    ]
    for values_, applies, reason in why:
        if applies:
            raise CombinationError(
                {"prefill_memory": True, **values_},
                f"{reason}: there is no prefill whose peak memory to count",
            )


def step_counts(point: DecodePoint) -> StepCounts:
    """The bytes, FLOPs and KV-cache bytes of the point's step: its batch spec's
    sequences, else its uniform batch's at its context (model.formulas)."""
    if point.batch_spec is not None:
        return batch_step_counts(point.shape, serving.batch_of(point.batch_spec), point.dtype)
    shape = point.shape
    step_bytes, step_flops = step_totals(
        shape, point.batch, point.prompt_len, point.dtype, point.cached
    )
    kv_bytes = kv_cache_bytes(
        1,
        point.batch,
        point.prompt_len,
        shape.num_kv_heads,
        shape.head_dim,
        point.dtype,
        tp=point.tp,
        num_heads=shape.num_heads,
    )
    return StepCounts(step_bytes, step_flops, kv_bytes)


def analytic_record(point: DecodePoint, context: Context) -> DecodeRecord:
    """The point's record before timing: its configuration and the bytes and FLOPs a
    step moves and computes (what a failed point still reports)."""
    shape = point.shape
    device = context.device if context.device is not None else torch.device("cpu")
    options = point.options
    prefills = point.times_prefill
    counts = step_counts(point)
    paging = serving.paging(point) if point.block_size is not None else None
    counts_memory = prefills and options.prefill_memory
    length, element = point.prompt_len, dtype_bytes(point.dtype)
    scores = score_matrix_bytes(shape, point.batch, length, length, element)
    prefill_held = forward_bytes(point, length, length)
    return DecodeRecord(
        variant=shape.variant,
        provider=point.provider,
        device=str(device),
        dtype=point.dtype,
        batch=point.batch,
        d_model=shape.d_model,
        num_heads=shape.num_heads,
        num_kv_heads=shape.num_kv_heads,
        head_dim=shape.head_dim,  # type: ignore[arg-type]
        prompt_len=point.prompt_len,
        gen_len=point.gen_len,
        mode=point.mode,
        cuda_graph=point.cuda_graph,
        tp=point.tp,
        peak_gbps=context.peak_gbps,
        peak_tflops=context.peak_tflops.get(point.dtype) if prefills else None,
        model=point.model,
        published_kv_heads=point.published_kv_heads,
        baseline_provider=options.baseline_provider,
        bytes_per_step=counts.bytes,
        flops_per_step=counts.flops,
        kv_bytes_per_gpu=counts.kv_bytes if point.cached else None,
        prefill_flops=prefill_flops(shape, point.batch, point.prompt_len) if prefills else None,
        batch_spec=point.batch_spec,
        block_size=point.block_size,
        kv_allocated_bytes=paging.paged_bytes if paging else None,
        kv_used_bytes=paging.used_bytes if paging else None,
        kv_waste_pct=paging.paged_waste_pct if paging else None,
        score_matrix_bytes=scores if counts_memory else None,
        prefill_analytic_bytes=prefill_held if counts_memory else None,
    )


def failed(point: DecodePoint, status: str, context: Context | None = None) -> DecodeRecord:
    """The record of a point that did not complete: analytic columns and `status`."""
    record = analytic_record(point, context or Context())
    record.status = status
    return record


def unsupported_reason(point: DecodePoint, device: torch.device) -> str | None:
    """Why the point cannot run on `device` before anything is built, or None."""
    if point.cuda_graph and device.type != "cuda":
        return "CUDA graphs need a CUDA device"
    return PROVIDERS[point.provider].unavailable(device, torch_dtype(point.dtype))


class WrongOutput(Exception):
    """A provider's output disagrees with the reference."""


def prepared(
    point: DecodePoint,
    inputs: DecodeInputs | RaggedInputs,
    reference: Callable[[Any], torch.Tensor] | None = None,
) -> Workload:
    """The provider's workload for the point, its step checked against `reference`.
    Raises Unsupported when the provider refuses the point (a kernel that cannot take the
    shape, dtype or device) and WrongOutput, saying by how much, when it disagrees."""
    try:
        with refusals() as reasons:
            work = workload_of(point, inputs)
            if work.step_setup is not None:
                work.step_setup()
            out = work.step()
    except (RuntimeError, NotImplementedError) as exc:
        if is_oom(exc):
            raise
        raise Unsupported(_first_reason(reasons, exc)) from None
    if reference is None:  # a batch spec's is checked sequence by sequence
        reference = ragged_reference if point.batch_spec is not None else reference_step
    wrong = check_output(out, reference(inputs))
    if wrong is not None:
        raise WrongOutput(wrong)
    return work


def workload_of(point: DecodePoint, inputs: DecodeInputs | RaggedInputs) -> Workload:
    """The point's provider's workload on `inputs`, unchecked (see `prepared`)."""
    if serving.is_serving(point):
        return serving.workload(point, inputs)
    return PROVIDERS[point.provider].prepare(inputs)


def _first_reason(warned: list[str], exc: BaseException) -> str:
    """The most telling line of a kernel's refusal: its first warning, else the error."""
    for text in [*warned, str(exc)]:
        line = " ".join(text.split())
        if line:
            return line[:200]
    return type(exc).__name__


@dataclass
class Ready:
    """A point built and checked, ready to be timed: its record so far, its checked
    workload, what its step is timed against, and its instruction count if one was made."""

    point: DecodePoint
    record: DecodeRecord
    work: Workload
    against: list[TimedCall]
    counted: Counted | str | None = None
    inputs: DecodeInputs | RaggedInputs | None = None

    def on_copy(self) -> tuple[Workload, list[TimedCall]]:
        """The workload and what its step is timed against, on a copy of the inputs
        (DecodeInputs.copied): the same values in other memory, checked once already,
        its step run once, untimed, as the checked one was."""
        inputs = self.inputs.copied()  # type: ignore[union-attr]
        with PROVIDERS[self.point.provider].running():
            work = workload_of(self.point, inputs)
            if work.step_setup is not None:
                work.step_setup()
            work.step()
        return work, reference_calls(self.point, inputs, self.point.options.reference)

    def finish(self, timings: Timings, context: Context) -> DecodeRecord:
        """The record with its measured columns."""
        fill_timings(self.record, self.point, timings, context)
        self.record.projection_path = self.work.projection_path
        if isinstance(self.counted, Counted):
            self.record.instructions_per_step = self.counted.instructions
            self.record.instructions_counter = self.counted.counter
        return self.record


def prepare(
    point: DecodePoint,
    context: Context,
    free_bytes: Callable[[torch.device], int] = free_memory_bytes,
    ranks: Ranks | None = None,
) -> Ready | DecodeRecord:
    """Build the point's layer, inputs and workload on `context.device` and check its
    step against the reference: what can be timed, or the record saying why not. A point
    that needs more memory (decode_bytes) than `free_bytes` says the device has free is
    not built: its status says what it needs. With `ranks` (torchrun), this process
    builds its share of the heads, and every status is agreed, so all ranks run the same
    calls."""
    device = context.device if context.device is not None else torch.device("cpu")
    options = point.options
    rec = analytic_record(point, context)
    local = ranks.local(point) if ranks else point  # the heads this process holds
    status = _blocked(point, local, device, options, free_bytes, ranks)
    counted = context.counts.get(point) if options.instructions and point.cached else None
    if status is None and isinstance(counted, str):
        status = counted  # no count where one was asked for: why
    if ranks:
        status = ranks.agree(status)
    if status is not None:
        rec.status = status
        return rec
    backend = PROVIDERS[point.provider].backend
    layer = build_layer(point.shape, backend, torch_dtype(point.dtype), device)
    if ranks:
        layer = ranks.shard(layer)
    with torch.inference_mode(), PROVIDERS[point.provider].running():
        reference = ranks.reference if ranks else None
        inputs = step_inputs(local, layer, device)
        work, status = _prepared(point, inputs, reference, ranks)
        if status is not None:
            rec.status = status
            return rec
        against = [] if ranks else reference_calls(point, inputs, options.reference)
    return Ready(point, rec, work, against, counted, inputs)  # type: ignore[arg-type]


def run(
    point: DecodePoint,
    context: Context,
    free_bytes: Callable[[torch.device], int] = free_memory_bytes,
) -> DecodeRecord:
    """Measure one point alone on `context.device` and fill its record (see `prepare`).
    Inside an initialised process group (torchrun), the point runs tensor-parallel over
    its ranks (experiments.tensor_parallel), each timing in lockstep."""
    device = context.device if context.device is not None else torch.device("cpu")
    options = point.options
    ranks = Ranks.joined(point.tp, device)
    try:
        ready = prepare(point, context, free_bytes, ranks)
        if isinstance(ready, DecodeRecord):
            return ready
        with torch.inference_mode(), PROVIDERS[point.provider].running():
            sample = ranks.sampler() if ranks else Timer.sample
            share = CpuShare(device)
            timings = time_workload(ready.work, point, device, sample, ready.against)
            ran_for = None if ranks else share.share()  # ranks wait for each other
            if ranks:
                dtype = torch_dtype(point.dtype)
                timings.all_reduce = ranks.time_all_reduce(point, dtype, options.sampling(device))
    finally:
        if device.type == "cuda":
            torch.cuda.empty_cache()
    record = ready.finish(timings, context)
    record.sampling = ALONE
    held_cpu(record, ran_for)
    return record


def held_cpu(record: DecodeRecord, share: float | None) -> None:
    """The share of its sampling time the point's process ran for, into its record: under
    BUSY_CPU_SHARE, a point whose spread was steady is noisy all the same (BUSY), since
    a host that ran it at a fraction of its speed throughout spreads nothing; and one
    noisy for its spread or its few samples says the cause, BUSY, instead."""
    record.cpu_share = share
    timed = record.status in (OK, WIDE, FEW_SAMPLES)
    if share is not None and share < BUSY_CPU_SHARE and timed:
        record.status, record.noisy = BUSY, True


def reference_calls(point: DecodePoint, inputs: DecodeInputs, reference: str) -> list[TimedCall]:
    """What the point's step is timed against: its kernels, each alone
    (experiments.kernels), or another provider's step on the same inputs, checked against
    the reference output first; none for `none`, for the point's own provider, or for a
    provider that cannot run the point."""
    if reference == "none" or reference == point.provider:
        return []
    if reference == OWN_KERNELS:
        if not isinstance(inputs, DecodeInputs):  # a batch spec's: no uniform kernels
            return []
        return [(call, None) for call in step_kernels(inputs).values()]
    try:
        with PROVIDERS[reference].running():
            work = prepared(replace(point, provider=reference), inputs)
    except (Unsupported, WrongOutput):
        return []
    return [(_running(reference, work.step), work.step_setup)]


def _running(provider: str, call: Callable[[], object]) -> Callable[[], object]:
    """`call` inside its provider's context (a pinned SDPA kernel), when it has one."""
    if PROVIDERS[provider].kernel is None:
        return call

    def pinned() -> object:
        with PROVIDERS[provider].running():
            return call()

    return pinned


def _blocked(
    point: DecodePoint,
    local: DecodePoint,
    device: torch.device,
    options: DecodeOptions,
    free_bytes: Callable[[torch.device], int],
    ranks: Ranks | None,
) -> str | None:
    """Why the point is not run, found before anything is built, or None: it is
    unsupported here, or `local` (this process's share) does not fit the free memory."""
    reason = unsupported_reason(point, device) or (ranks.unsupported(point) if ranks else None)
    if reason is not None:
        return f"unsupported: {reason}"
    return skip_status(decode_bytes(local, options.prefill), free_bytes(device))


def _prepared(
    point: DecodePoint,
    inputs: DecodeInputs,
    reference: Callable[[DecodeInputs], torch.Tensor] | None,
    ranks: Ranks | None,
) -> tuple[Workload | None, str | None]:
    """The checked workload, or the status saying why there is none. Across ranks the
    status is agreed, and any failure becomes one (a rank that raised would leave the
    others waiting in a collective)."""
    work, status = None, None
    try:
        work = prepared(point, inputs, reference)
    except Unsupported as exc:
        status = f"unsupported: {exc}"
    except WrongOutput as exc:
        status = f"wrong: {exc}"
    except Exception as exc:
        if ranks is None:
            raise
        status = "oom" if is_oom(exc) else f"error: {type(exc).__name__}: {exc}"
    return work, ranks.agree(status) if ranks else status


def fill_timings(rec: DecodeRecord, point: DecodePoint, timings: Timings, context: Context) -> None:
    """The record's measured columns, and the rates derived from them."""
    steps = timings.step
    step_s = steps.median_ms * 1e-3
    summarise(rec, "step_ms_median", steps)
    rec.step_repeats, rec.step_stop = len(steps.samples_ms), steps.stop_reason
    rec.step_calls_per_sample = steps.calls_per_sample
    rec.layouts, rec.copies = steps.layouts, timings.copies
    rec.step_ci_pct = 100 * steps.ci_rel
    rec.noisy = steps.noisy or not steps.spread_known or steps.modes is not None
    rec.status = step_status(steps)
    rec.tokens_per_s = point.query_tokens / step_s
    rec.achieved_gbps = rec.bytes_per_step / step_s / 1e9  # type: ignore[operator]
    peak = context.peak_gbps and context.peak_gbps * point.tp  # every rank's device reads
    rec.pct_of_peak_bw = 100 * rec.achieved_gbps / peak if peak else None
    if timings.prefill is not None:
        pre = timings.prefill
        summarise(rec, "prefill_ms_median", pre)
        rec.achieved_tflops = rec.prefill_flops / (pre.median_ms * 1e-3) / 1e12  # type: ignore[operator]
        if rec.peak_tflops:
            rec.pct_of_peak_flops = 100 * rec.achieved_tflops / rec.peak_tflops
    if timings.generation is not None:
        gen = timings.generation
        summarise(rec, "gen_ms_median", gen)
        rec.gen_tokens_per_s = point.batch * point.gen_len / (gen.median_ms * 1e-3)
    if timings.all_reduce is not None:
        summarise(rec, "allreduce_ms_median", timings.all_reduce)
    if timings.x_of_reference is not None:
        rec.reference = timings.reference
        summarise(rec, "x_of_reference_median", timings.x_of_reference)
        below_kernels(rec)
    if timings.prefill_peak is not None:
        rec.prefill_peak_bytes = timings.prefill_peak.peak_bytes
        rec.prefill_peak_method = timings.prefill_peak.method


#: The least a step can take over its own kernels, each run alone: the step runs them all
#: and more. A median below it says rounds stalled, on the step or on its kernels' sample
#: (a thread of a parallel region preempted for a scheduler tick: one round reads 40x
#: either way), not that the step was faster.
LEAST_OVER_KERNELS = 0.9


def below_kernels(rec: DecodeRecord) -> None:
    """A step timed over its own kernels at under LEAST_OVER_KERNELS of their time is
    noisy, whatever its spread: the rounds stalled (see LEAST_OVER_KERNELS)."""
    ratio = rec.x_of_reference_median
    if rec.reference != OWN_KERNELS or ratio is None or ratio >= LEAST_OVER_KERNELS:
        return
    rec.noisy = True
    if rec.status == OK:
        rec.status = (
            f"{NOISY}: the step read {ratio:.3g}x its own kernels, which it runs all of: "
            "rounds stalled"
        )


def step_status(steps: Measurement) -> str:
    """A timed point's status: FEW_SAMPLES when its step has too few samples to judge
    their spread, `bimodal` when its memory layouts fell into two modes (both named: a
    median between them would describe neither), WIDE when p25 to p75 spans more than
    NOISY_IQR_FRACTION of the median, OK otherwise."""
    if not steps.spread_known:
        return FEW_SAMPLES
    modes = steps.modes
    if modes is not None:
        return bimodal(*modes)
    return WIDE if steps.noisy else OK


def bimodal(low: Sequence[float], high: Sequence[float]) -> str:
    """'noisy: two modes over its memory layouts, 0.466 ms (3 layouts) and 0.887 ms (1)'."""
    of = f"{len(low)} layout{'s' * (len(low) > 1)}"
    return (
        f"{NOISY}: two modes over its memory layouts, {median(low):.4g} ms ({of}) and "
        f"{median(high):.4g} ms ({len(high)})"
    )


def timed(record: Mapping[str, Any] | DecodeRecord) -> bool:
    """The record holds a step time: its status is ok or noisy (with its reason)."""
    status = record.get("status") if isinstance(record, Mapping) else record.status
    return Status.of(status).word in (OK, NOISY)


def summarise(rec: DecodeRecord, metric: str, measured: Measurement) -> None:
    """A measurement of the sampled field `metric` (step_ms_median for a time,
    x_of_reference_median for a ratio) into the record: its median and the statistics the
    record declares for it (records.flattened)."""
    for name, value in flattened(DecodeRecord, metric, measured).items():
        setattr(rec, name, value)


def context_of(point: DecodePoint) -> DecodePoint:
    """What the points compared with each other share: all but the variant (KV heads),
    the provider and the mode. Points of one context are sampled in turn
    (experiments.interleave)."""
    return replace(point, num_kv_heads=0, provider="", mode="", block_size=None)


def run_order(points: list[DecodePoint], options: DecodeOptions) -> list[DecodePoint]:
    """The points to run, grouped by context (in grid order), then by configuration, the
    baseline provider first and each provider's no_cache point just before its cache
    point. No_cache points above `no_cache_max_prompt_len` are left out: their cost
    grows with the square of the context; so are those of a batch spec or a paged cache,
    which are timed cached (experiments.serving)."""
    longest = options.no_cache_max_prompt_len

    def runs(p: DecodePoint) -> bool:
        if p.cached:
            return True
        return not serving.is_serving(p) and (longest is None or p.prompt_len <= longest)

    points = [p for p in points if runs(p)]
    contexts: dict[DecodePoint, int] = {}
    first: dict[DecodePoint, int] = {}
    providers: dict[str, int] = {}
    for i, p in enumerate(points):
        contexts.setdefault(context_of(p), i)
        first.setdefault(replace(p, provider="", mode=""), i)
        providers.setdefault(p.provider, i)

    def order(p: DecodePoint) -> tuple:
        configuration = first[replace(p, provider="", mode="")]
        not_baseline = p.provider != options.baseline_provider
        group = contexts[context_of(p)]
        return (group, configuration, not_baseline, providers[p.provider], p.mode != "no_cache")

    return sorted(points, key=order)


#: The run order, under the name every experiment gives it (study.sections.Experiment).
order = run_order


@dataclass(frozen=True)
class Pair:
    """One comparison: the step of point `of` over that of point `over`, as `name` (the
    record field that holds it, `x_of_narrowest` say)."""

    name: str
    of: int
    over: int


def link(points: Sequence[DecodePoint], options: DecodeOptions) -> list[Pair]:
    """Which of a group's points are compared with which (experiments.interleave samples
    them in turn): each cached step over the narrowest variant's of its provider and over
    its own step without the cache, and each provider's step over the baseline
    provider's; each step over a paged cache over its step over the contiguous one."""
    baseline = options.baseline_provider
    index = {(p.num_kv_heads, p.provider, p.mode, p.block_size): i for i, p in enumerate(points)}
    pairs = []
    for i, p in enumerate(points):
        paged = p.block_size
        if p.cached:
            narrowest = min(
                q.num_kv_heads
                for q in points
                if q.cached and q.provider == p.provider and q.block_size == paged
            )
            if p.num_kv_heads != narrowest:
                j = index[narrowest, p.provider, p.mode, paged]
                pairs.append(Pair("x_of_narrowest", i, j))
            if (j := index.get((p.num_kv_heads, p.provider, "no_cache", paged))) is not None:
                pairs.append(Pair("x_of_no_cache", i, j))
            contiguous = index.get((p.num_kv_heads, p.provider, p.mode, None))
            if paged is not None and contiguous is not None:
                pairs.append(Pair("x_of_contiguous", i, contiguous))
        j = index.get((p.num_kv_heads, baseline, p.mode, paged))
        if p.provider != baseline and j is not None:
            pairs.append(Pair("x_of_baseline", i, j))
    return pairs
