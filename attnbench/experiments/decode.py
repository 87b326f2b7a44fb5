"""Prefill and per-token decode of one attention layer, with and without the KV cache.

One point = (shape, backend, dtype, batch, prompt_len, gen_len, mode). The layer sees a
fixed random sequence x of prompt_len + gen_len tokens; decode step i feeds token
prompt_len + i:

- mode "cache": the prompt is prefilled once (timed on its own), then each step projects
  only the new token, writes its K/V into the preallocated KVCache and attends over it;
- mode "no_cache": each step re-runs the layer causally over the whole prefix (prompt plus
  the tokens so far) and keeps the last row, as a model without a cache must.

Both modes compute the same outputs (see `decode_outputs`). Samples are per step; a
repeat is one whole generation, and warm-up generations are not counted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from ..measure.devices import free_memory_bytes, torch_dtype
from ..measure.memory import skip_status
from ..measure.timing import Measurement, Timer
from ..model.dtypes import dtype_bytes
from ..model.formulas import decode_totals, weight_bytes
from ..model.shapes import AttentionShape
from ..modules.attention import GroupedQueryAttention
from ..modules.kv_cache import KVCache
from ..records import exact, info, key, timing
from .context import Context
from .params import ParamsPoint

SEED = 0
#: Bytes of an attention score of the naive backend: float32 (half inputs are upcast).
SCORE_BYTES = 4


@dataclass(frozen=True, kw_only=True)
class DecodePoint(ParamsPoint):
    """One layer shape (see ParamsPoint) decoding `gen_len` tokens after `prompt_len`."""

    batch: int
    dtype: str
    prompt_len: int
    gen_len: int
    backend: str
    mode: str

    @property
    def cached(self) -> bool:
        return self.mode == "cache"


@dataclass(kw_only=True)
class DecodeRecord:
    variant: str = key()
    backend: str = key()
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
    prefill_ms: float | None = timing()
    step_ms_median: float | None = timing()
    step_ms_p25: float | None = timing(of="step_ms_median")
    step_ms_p75: float | None = timing(of="step_ms_median")
    samples_ms: list[float] = timing([], of="step_ms_median", csv=False)
    total_ms: float | None = timing()
    tokens_per_s: float | None = info()
    speedup_vs_no_cache: float | None = info()
    bytes_per_step: int | None = exact(None)
    achieved_gbps: float | None = info()
    peak_gbps: float | None = info()
    pct_of_peak_bw: float | None = info()
    flops_per_step: int | None = exact(None)
    achieved_tflops: float | None = info()
    noisy: bool | None = info()
    status: str = info("ok")
    model: str | None = key(None)
    projection_path: str | None = info()


@dataclass(frozen=True)
class DecodeOptions:
    warmup: int = 2
    repeats: int = 3
    prefill: bool = True
    cuda_graph: bool = False
    flush_l2: bool = False

    @classmethod
    def from_options(cls, options) -> DecodeOptions:
        """From a decode section's scalar options (the ones this class names)."""
        return cls(**{f: options[f] for f in cls.__dataclass_fields__ if f in options})


def build_layer(
    shape: AttentionShape, backend: str, dtype: torch.dtype, device
) -> GroupedQueryAttention:
    """The layer under test, with seeded random weights."""
    torch.manual_seed(SEED)
    return GroupedQueryAttention(
        shape.d_model, shape.num_heads, shape.num_kv_heads, shape.head_dim, shape.bias,
        backend=backend, device=device, dtype=dtype,
    )  # fmt: skip


def random_tokens(
    shape: AttentionShape, batch: int, length: int, dtype, device, first: int = 0
) -> torch.Tensor:
    """The layer's input for `length` positions: seeded random activations (never zeros)
    from position `first` on. Positions before it are never read (decode over a cache
    filled without prefill) and are left unwritten, which costs nothing at long contexts."""
    x = torch.empty(batch, length, shape.d_model, dtype=dtype, device=device)
    gen = torch.Generator(device=device).manual_seed(SEED + 1)
    x[:, first:].normal_(generator=gen)
    return x


def step_calls(
    layer: GroupedQueryAttention, x: torch.Tensor, prompt_len: int, gen_len: int,
    cache: KVCache | None,
) -> list[Callable[[], torch.Tensor]]:  # fmt: skip
    """One callable per decode step, in order (they must run in order with a cache)."""
    if cache is not None:
        return [
            (lambda t=t: layer(x[:, t : t + 1], is_causal=True, kv_cache=cache))
            for t in range(prompt_len, prompt_len + gen_len)
        ]
    return [
        (lambda t=t: layer(x[:, : t + 1], is_causal=True)[:, -1:])
        for t in range(prompt_len, prompt_len + gen_len)
    ]


@torch.inference_mode()
def decode_outputs(
    layer: GroupedQueryAttention, x: torch.Tensor, prompt_len: int, gen_len: int, cached: bool
) -> torch.Tensor:
    """The outputs of the gen_len decode steps, (batch, gen_len, d_model): what both modes
    must agree on."""
    cache = None
    if cached:
        cache = KVCache(x.shape[0], layer.num_kv_heads, prompt_len + gen_len, layer.head_dim,
                        x.dtype, x.device)  # fmt: skip
        layer(x[:, :prompt_len], is_causal=True, kv_cache=cache)
    return torch.cat([call() for call in step_calls(layer, x, prompt_len, gen_len, cache)], 1)


def _graph_calls(calls: list[Callable], cache: KVCache, prompt_len: int, device) -> list[Callable]:
    """Capture each step in a CUDA graph (sharing one memory pool) and return replays.

    The steps are captured in order from a cache of prompt_len tokens, so each graph bakes
    in its own cache position."""
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        cache.length = prompt_len
        calls[0]()  # warm the kernels up outside capture
    torch.cuda.current_stream(device).wait_stream(stream)
    cache.length = prompt_len
    graphs: list[torch.cuda.CUDAGraph] = []
    for call in calls:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=graphs[0].pool() if graphs else None):
            call()
        graphs.append(graph)
    return [graph.replay for graph in graphs]


def time_decode(
    layer: GroupedQueryAttention, point: DecodePoint, device: torch.device, options: DecodeOptions
) -> tuple[Measurement, float | None, float]:
    """Time one point: per-step Measurement, median prefill ms (None when not run) and the
    median total ms of a generation (prefill plus its steps)."""
    with torch.inference_mode():
        return _time_decode(layer, point, device, options)


def _time_decode(
    layer: GroupedQueryAttention, point: DecodePoint, device: torch.device, options: DecodeOptions
) -> tuple[Measurement, float | None, float]:
    shape, batch, prompt_len, gen_len = point.shape, point.batch, point.prompt_len, point.gen_len
    tdtype = torch_dtype(point.dtype)
    unread = prompt_len if point.cached and not options.prefill else 0
    x = random_tokens(shape, batch, prompt_len + gen_len, tdtype, device, first=unread)
    timer = Timer(device, flush_l2=options.flush_l2)
    cache = None
    if point.cached:
        cache = KVCache(batch, shape.num_kv_heads, prompt_len + gen_len, shape.head_dim,
                        tdtype, device)  # fmt: skip
        gen = torch.Generator(device=device).manual_seed(SEED + 2)
        for buffer in (cache.k, cache.v):  # generated in place: GBs at long contexts
            buffer.normal_(generator=gen)
    steps = step_calls(layer, x, prompt_len, gen_len, cache)
    prefill = None
    if cache is not None and options.prefill:
        prefill = lambda: layer(x[:, :prompt_len], is_causal=True, kv_cache=cache)  # noqa: E731
    if cache is not None and options.cuda_graph and device.type == "cuda":
        steps = _graph_calls(steps, cache, prompt_len, device)

    samples: list[float] = []
    prefills: list[float] = []
    totals: list[float] = []
    for rep in range(options.warmup + options.repeats):
        pre = 0.0
        if prefill is not None:
            cache.reset()
            pre = timer.time_calls([prefill])[0]
        if cache is not None:
            cache.length = prompt_len  # the steps (or their graphs) write from here on
        times = timer.time_calls(steps)
        if rep >= options.warmup:
            samples.extend(times)
            prefills.append(pre)
            totals.append(pre + sum(times))
    prefill_ms = Measurement(prefills).median_ms if prefill is not None else None
    return Measurement(samples), prefill_ms, Measurement(totals).median_ms


def forward_bytes(point: DecodePoint, q_len: int, k_len: int) -> int:
    """Bytes one forward of `q_len` new tokens over `k_len` keys allocates at the least:
    q, the new K and V, the attention output and the layer output; with the naive
    backend also the scores and probabilities (float32, B*Hq*q_len*k_len each) and K/V
    expanded to every query head."""
    shape, batch = point.shape, point.batch
    b = dtype_bytes(point.dtype)
    total = batch * q_len * (2 * shape.q_dim + 2 * shape.kv_dim + shape.d_model) * b
    if point.backend == "naive":
        total += 2 * batch * shape.num_heads * q_len * k_len * SCORE_BYTES
        if shape.group_size > 1:
            total += 2 * batch * shape.num_heads * k_len * shape.head_dim * b  # type: ignore[operator]
    return total


def decode_bytes(point: DecodePoint, prefill: bool = True) -> int:
    """Bytes a decode point allocates at its peak, at the least, in Python integers (no
    size overflows): the weights, the input x of batch * (prompt_len + gen_len) * d_model
    elements, the KV cache of 2 * batch * Hkv * (prompt_len + gen_len) * D elements
    (mode cache) and the largest forward: the prefill or the last step with a cache, the
    layer over the whole prefix without one (see forward_bytes)."""
    shape, batch = point.shape, point.batch
    b = dtype_bytes(point.dtype)
    length = point.prompt_len + point.gen_len
    weights = weight_bytes(shape, point.dtype)
    x = batch * length * shape.d_model * b
    if not point.cached:
        return weights + x + forward_bytes(point, length, length)
    cache = 2 * batch * shape.kv_dim * length * b
    largest = forward_bytes(point, 1, length)
    if prefill:
        largest = max(largest, forward_bytes(point, point.prompt_len, point.prompt_len))
    return weights + x + cache + largest


def check(point: DecodePoint) -> None:
    """Raise for a point that cannot run: its shape, dtype and backend."""
    point.shape  # noqa: B018
    torch_dtype(point.dtype)


def analytic_record(point: DecodePoint, context: Context) -> DecodeRecord:
    """The point's record before timing: its configuration and the bytes and FLOPs a
    step moves and computes (what a failed point still reports)."""
    shape = point.shape
    device = context.device if context.device is not None else torch.device("cpu")
    total_bytes, total_flops = decode_totals(
        shape, point.batch, point.prompt_len, point.gen_len, point.dtype, point.cached
    )
    return DecodeRecord(
        variant=shape.variant, backend=point.backend, device=str(device), dtype=point.dtype,
        batch=point.batch, d_model=shape.d_model, num_heads=shape.num_heads,
        num_kv_heads=shape.num_kv_heads, head_dim=shape.head_dim,  # type: ignore[arg-type]
        prompt_len=point.prompt_len, gen_len=point.gen_len, mode=point.mode,
        peak_gbps=context.peak_gbps, model=point.model,
        bytes_per_step=round(total_bytes / point.gen_len),
        flops_per_step=round(total_flops / point.gen_len),
    )  # fmt: skip


def failed(point: DecodePoint, status: str, context: Context | None = None) -> DecodeRecord:
    """The record of a point that did not complete: analytic columns and `status`."""
    record = analytic_record(point, context or Context())
    record.status = status
    return record


def run(
    point: DecodePoint,
    context: Context,
    free_bytes: Callable[[torch.device], int] = free_memory_bytes,
) -> DecodeRecord:
    """Measure one point on `context.device` and fill its record. A point that needs more
    memory (decode_bytes) than `free_bytes` says the device has free is not run: its
    status says what it needs."""
    device = context.device if context.device is not None else torch.device("cpu")
    options = DecodeOptions.from_options(context.options)
    rec = analytic_record(point, context)
    skipped = skip_status(decode_bytes(point, options.prefill), free_bytes(device))
    if skipped is not None:
        rec.status = skipped
        return rec
    layer = build_layer(point.shape, point.backend, torch_dtype(point.dtype), device)
    try:
        steps, prefill_ms, total_ms = time_decode(layer, point, device, options)
    finally:
        if device.type == "cuda":
            torch.cuda.empty_cache()
    step_s = steps.median_ms * 1e-3
    rec.prefill_ms = prefill_ms
    rec.step_ms_median, rec.step_ms_p25, rec.step_ms_p75 = (
        steps.median_ms, steps.p25_ms, steps.p75_ms,
    )  # fmt: skip
    rec.samples_ms = steps.samples_ms
    rec.total_ms = total_ms
    rec.tokens_per_s = point.batch / step_s
    rec.achieved_gbps = rec.bytes_per_step / step_s / 1e9  # type: ignore[operator]
    peak = context.peak_gbps
    rec.pct_of_peak_bw = 100 * rec.achieved_gbps / peak if peak else None
    rec.achieved_tflops = rec.flops_per_step / step_s / 1e12  # type: ignore[operator]
    rec.noisy = steps.noisy
    rec.projection_path = layer.projection_path
    return rec


CONFIG_FIELDS = ("model", "variant", "backend", "device", "dtype", "batch", "d_model",
                 "num_heads", "num_kv_heads", "head_dim", "prompt_len", "gen_len")  # fmt: skip


def link_speedups(records: list[DecodeRecord]) -> None:
    """Fill speedup_vs_no_cache on cache rows: the no_cache row's median step time over
    the cache row's, for the same configuration."""

    def configuration(r: DecodeRecord) -> tuple:
        return tuple(getattr(r, f) for f in CONFIG_FIELDS)

    baseline = {configuration(r): r.step_ms_median for r in records if r.mode == "no_cache"}
    for r in records:
        slow = baseline.get(configuration(r))
        if r.mode == "cache" and slow and r.step_ms_median:
            r.speedup_vs_no_cache = slow / r.step_ms_median


def no_cache_first(points: list[DecodePoint]) -> list[DecodePoint]:
    """Decode points with each configuration's no_cache point just before its cache point
    (otherwise in grid order), so the speed-up can be filled in as each cache row lands."""
    first: dict[DecodePoint, int] = {}
    for i, p in enumerate(points):
        first.setdefault(replace(p, mode=""), i)
    return sorted(points, key=lambda p: (first[replace(p, mode="")], p.mode != "no_cache"))
