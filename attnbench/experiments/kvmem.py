"""KV-cache memory: computed from the analytic model and measured on a real cache.

The formulas are capacity.py's: the cache's own dtype (with scales for quantised ones),
per-layer sliding windows, MLA latents, tensor-parallel shards and paged blocks. Byte
columns describe the whole (logical) cache unless their name says per GPU. A hybrid
model's K/V cache is its attention layers' alone; its state layers' fixed-size states
are counted beside it (state_bytes), and the two together are total_bytes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import FieldError
from ..measure.devices import free_memory_bytes
from ..model.architecture import ModelSpec
from ..model.capacity import (
    KvFormat,
    TokenLayout,
    cache_bytes,
    counted,
    layer_windows,
    paging_report,
    positive_int,
    state_bytes,
    token_layout,
    window_summary,
)
from ..model.shapes import AttentionShape, variant_label
from ..model.what_if import is_what_if
from ..records import exact, info, key, memory
from .context import Context, grid_order, no_links

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True, kw_only=True)
class KvmemPoint:
    """One cache to size. `seq_lens` (one batch of different lengths) replaces batch x
    seq_len; `spec` is the point's model, which brings its per-layer windows and MLA."""

    d_model: int
    num_heads: int
    num_kv_heads: int
    num_layers: int
    batch: int
    seq_len: int
    dtype: str
    scale_dtype: str
    tp: int = 1
    head_dim: int | None = None
    kv_dtype: str | None = None
    kv_scale_group: int | str | None = None
    sliding_window: int | None = None
    layer_pattern: str | None = None
    page_size: int | None = None
    seq_lens: tuple[int, ...] | None = None
    model: str | None = None
    #: The model's own KV heads, when this point is one of a what-if set (model/what_if.py).
    published_kv_heads: int | None = None
    spec: ModelSpec | None = field(default=None, compare=False, repr=False)

    @property
    def shape(self) -> AttentionShape:
        return AttentionShape(self.d_model, self.num_heads, self.num_kv_heads, self.head_dim)


@dataclass(kw_only=True)
class KvmemRecord:
    model: str | None = key()
    variant: str = key()
    num_layers: int = key()
    num_heads: int = key()
    num_kv_heads: int = key()
    head_dim: int = key()
    batch: int = key()
    seq_len: int = key()
    dtype: str = key()
    bytes_per_token: int = exact()
    kv_bytes_per_layer: int = exact()
    kv_bytes: int = exact()
    measured_bytes: int | None = memory()
    #: KV over MHA's (the same layers with one KV head per query head); None without
    #: attention layers.
    ratio_vs_mha: float | None = info()
    status: str = info()
    kv_dtype: str = key()
    kv_scale_group: int | str | None = key()
    scale_dtype: str | None = key()
    scale_bytes: int = exact()
    sliding_window: int | None = key()
    layer_pattern: str | None = key(None)
    windowed_layers: int = exact()
    page_size: int | None = key()
    tp: int = key()
    kv_heads_per_gpu: int | None = exact()
    kv_bytes_per_gpu: int = exact()
    kv_bytes_all_gpus: int = exact()
    used_bytes: int | None = exact()
    paged_bytes: int | None = exact()
    contiguous_bytes: int | None = exact()
    paged_waste_pct: float | None = info()
    contiguous_waste_pct: float | None = info()
    measured_paged_bytes: int | None = memory()
    #: The model's own KV heads on every row of a what-if set; None otherwise.
    published_kv_heads: int | None = info()
    #: The layers that cache K and V, and those that keep a fixed-size state (a hybrid's
    #: Mamba or linear-attention layers), with the state's bytes for the batch and the
    #: cache's whole: kv_bytes + state_bytes.
    kv_layers: int | None = exact(None)
    state_layers: int = exact(0)
    state_bytes: int = exact(0)
    total_bytes: int | None = exact(None)
    #: How many layers of each kind ("12 full attention, 36 gated deltanet").
    layer_kinds: str | None = info()
    state_bytes_per_gpu: int = exact(0)
    #: The positions the model declares (max_position_embeddings): a longer context is
    #: computed all the same. None without a model, or one that declares none.
    max_positions: int | None = info(None)


@dataclass(frozen=True)
class KvmemOptions:
    """A kvmem section's scalar options: `measure`, allocate each cache and count it."""

    measure: bool


def on_device(options: Mapping[str, Any]) -> bool:
    """Whether the section's points, with its resolved scalar options, use its device:
    only to measure (study.sections)."""
    return options["measure"]


def check(point: KvmemPoint) -> None:
    """Raise for a point whose cache cannot be sized (a tp that does not divide the
    heads, a scale group wider than a vector, a layout that does not fit the layers,
    ...), without sizing or measuring it."""
    if point.spec is not None:
        point.spec.require_kinds()
    _ = _layout(point, point.tp).bytes  # its scale groups checked against its vectors
    _windows(point)
    if point.page_size is not None:
        positive_int("page_size", point.page_size)


def check_section(values: Mapping[str, list], options: object, given: set[str]) -> None:
    """seq_lens gives a batch and its lengths: a batch or seq_len given beside it would be
    replaced without a word."""
    replaced = sorted(given & {"batch", "seq_len"}) if values.get("seq_lens") else []
    if replaced:
        name = replaced[0]
        listed = ",".join(map(str, values[name]))
        raise FieldError(name, listed, "is set by seq_lens (its lengths): give one or the other")


def scaled(point: KvmemPoint) -> frozenset[str]:
    """The formats of the point that carry scales: its cache's, where quantised."""
    return _format(point).scaled()


def _format(point: KvmemPoint) -> KvFormat:
    """The cache's format: kv_dtype (default: dtype) with its scale groups."""
    return KvFormat(point.kv_dtype or point.dtype, point.kv_scale_group, point.scale_dtype)


def _layout(point: KvmemPoint, tp: int = 1) -> TokenLayout:
    """What one token of the cache holds in one layer, on one of `tp` ranks."""
    spec = point.spec
    latent = spec.mla.latent_dim if spec is not None and spec.mla else None
    head_dim: int = point.shape.head_dim  # type: ignore[assignment]
    return token_layout(point.num_heads, point.num_kv_heads, head_dim, _format(point), tp, latent)


def _windows(point: KvmemPoint) -> tuple[int | None, ...]:
    """Each attention layer's window (None: the whole context)."""
    spec = point.spec
    layers = spec.kv_layers if spec is not None else point.num_layers
    model_windows = spec.windows if spec is not None else None
    return layer_windows(layers, model_windows, point.sliding_window, point.layer_pattern)


def run(
    point: KvmemPoint,
    context: Context | None = None,
    free_bytes: Callable[[torch.device], int] = free_memory_bytes,
) -> KvmemRecord:
    """One row of `attnbench kvmem`; measured on `context.device` unless it is None.
    `free_bytes` tells how much memory the device has free (a cache that does not fit is
    not allocated)."""
    device = context.device if context is not None else None
    shape, spec = point.shape, point.spec
    heads, kv_heads = point.num_heads, point.num_kv_heads
    layers = spec.kv_layers if spec is not None else point.num_layers
    states = spec.layer_states if spec is not None else ()
    head_dim: int = shape.head_dim  # type: ignore[assignment]
    fmt = _format(point)
    mla = spec.mla if spec is not None else None
    if point.seq_lens:
        lengths: dict[int, int] | tuple[int, ...] = point.seq_lens
        batch, seq = len(point.seq_lens), max(point.seq_lens)
    else:
        batch, seq = point.batch, point.seq_len
        lengths = {seq: batch}
    windows = _windows(point)
    # The formulas count layers per window (computed in Python integers, per distinct
    # window and length); only an allocation goes layer by layer.
    counts = counted(windows)
    page_size = point.page_size
    layout = _layout(point)
    per_gpu = _layout(point, point.tp) if point.tp > 1 else layout
    mha = token_layout(heads, heads, head_dim, fmt)
    full = {seq: batch}
    total = cache_bytes(layout, counts, full)
    gpu_bytes = cache_bytes(per_gpu, counts, full).total
    largest_layer = max((cache_bytes(layout, {w: 1}, full).total for w in counts), default=0)
    mha_bytes = cache_bytes(mha, counts, full).total
    state = state_bytes(states, point.dtype, batch)
    state_per_gpu = state_bytes(states, point.dtype, batch, point.tp)
    paging = (
        paging_report(layout, counts, lengths, page_size) if point.seq_lens or page_size else None
    )

    measured, status = (None, "not measured")
    measured_paged = None
    if device is not None and not layers:
        measured, status = 0, "ok"  # no attention layer: no K/V cache to allocate
    elif device is not None:
        from ..measure.memory import measure_cache_bytes, measure_storage_bytes  # torch

        windows_unused = all(w is None or w >= seq for w in counts)
        if mla is None and not fmt.quantized and windows_unused:  # the project's KVCache
            measured, status = measure_cache_bytes(
                layers, batch, seq, kv_heads, head_dim, fmt.dtype, device, total.total, free_bytes
            )
        else:
            measured, status = measure_storage_bytes(
                layout, windows, full, device, total.total, free_bytes=free_bytes
            )
        if paging is not None and paging.paged_bytes is not None:
            measured_paged, paged_status = measure_storage_bytes(
                layout, windows, lengths, device, paging.paged_bytes, page_size, free_bytes
            )
            if paged_status != "ok" and status == "ok":
                status = f"paged: {paged_status}"

    window, windowed_layers = window_summary(counts)
    return KvmemRecord(
        model=point.model,
        variant="MLA" if mla else variant_label(heads, kv_heads),
        num_layers=point.num_layers,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        batch=batch,
        seq_len=seq,
        dtype=point.dtype,
        bytes_per_token=layers * layout.bytes,
        kv_bytes_per_layer=largest_layer,
        kv_bytes=total.total,
        measured_bytes=measured,
        ratio_vs_mha=total.total / mha_bytes if mha_bytes else None,
        kv_layers=layers,
        state_layers=sum(s is not None for s in states),
        state_bytes=state,
        total_bytes=total.total + state,
        layer_kinds=kinds_summary(spec, windows) if spec is not None else None,
        published_kv_heads=point.published_kv_heads,
        status=status,
        kv_dtype=fmt.dtype,
        kv_scale_group=fmt.scale_group,
        scale_dtype=fmt.scale_dtype if "kv scales" in fmt.scaled() else None,
        scale_bytes=total.scales,
        sliding_window=window,
        layer_pattern=point.layer_pattern,
        windowed_layers=windowed_layers,
        page_size=page_size,
        tp=point.tp,
        kv_heads_per_gpu=None if mla else per_gpu.vectors // 2,
        kv_bytes_per_gpu=gpu_bytes,
        kv_bytes_all_gpus=gpu_bytes * point.tp,
        state_bytes_per_gpu=state_per_gpu,
        used_bytes=paging.used_bytes if paging else None,
        paged_bytes=paging.paged_bytes if paging else None,
        contiguous_bytes=paging.contiguous_bytes if paging else None,
        paged_waste_pct=paging.paged_waste_pct if paging else None,
        contiguous_waste_pct=paging.contiguous_waste_pct if paging else None,
        measured_paged_bytes=measured_paged,
        max_positions=spec.max_position_embeddings if spec is not None else None,
    )


def kinds_summary(spec: ModelSpec, windows: tuple[int | None, ...]) -> str:
    """How many layers of each kind the model has, in the order they first appear:
    "12 full attention, 36 gated deltanet"."""
    kinds = Counter(spec.layer_kinds(windows))
    return ", ".join(f"{n} {kind}" for kind, n in kinds.items())


#: The name of the layer-kind records' set, in result documents and files.
KIND_RECORDS = "layer_kinds"


@dataclass(kw_only=True)
class LayerKindRecord:
    """The layers of one kind of a model whose layers are not all alike (a hybrid, or
    windows on some layers): how many, the K/V bytes one token of one sequence takes in
    all of them (growing with the context up to their window) in the cache's dtype, and
    the state one sequence keeps in all of them (fixed) in the model's dtype, as the
    section's points store them."""

    model: str = key()
    num_kv_heads: int = key()
    kind: str = key()
    dtype: str = key()
    kv_dtype: str = key()
    #: The cache's scales, where its dtype keeps them (KvmemPoint's).
    kv_scale_group: int | str | None = key()
    scale_dtype: str | None = key()
    #: The windows of the point's layout, as its record gives them: the widest (None: no
    #: layer keeps one), and its layer pattern; the layers that keep one.
    sliding_window: int | None = key()
    layer_pattern: str | None = key()
    windowed_layers: int = exact()
    layers: int = exact()
    window: int | None = exact()
    kv_bytes_per_token: int = exact()
    state_bytes: int = exact()
    #: The shapes of one layer's state, as transformers holds them.
    state_shapes: str | None = info()


def layer_kind_records(section: Any) -> list[LayerKindRecord]:
    """A row per layer kind of each model whose layers are not all alike, for each dtype
    and cache format the section's points store it in (the variants of a what-if set but
    the model's own are left out: their kinds are the model's). `section`: a
    study.sweep.Section of kvmem points."""
    rows: list[LayerKindRecord] = []
    seen = set()
    for point in section.points():
        spec = point.spec
        if spec is None or is_what_if(spec.num_kv_heads, spec.published_kv_heads):
            continue
        if len(set(spec.layer_kinds())) == 1 and not spec.state_layers:
            continue
        windows, fmt = _windows(point), _format(point)
        stored = (spec.name, spec.num_kv_heads, point.dtype, fmt, windows, point.layer_pattern)
        if stored not in seen:
            seen.add(stored)
            rows.extend(_kind_rows(spec, point, windows, fmt))
    return rows


def _kind_rows(
    spec: ModelSpec, point: KvmemPoint, windows: tuple[int | None, ...], fmt: KvFormat
) -> list[LayerKindRecord]:
    """The rows of `spec`'s layer kinds, its cache and state stored as `point` stores them
    (in `fmt`), its layers' windows as the point lays them out (`windows`)."""
    layout = _layout(point)
    bounds = iter(windows)
    groups: dict[str, list] = {}
    attends_of = spec.attends or (True,) * spec.num_layers
    kinds = spec.layer_kinds(windows)
    widest, windowed = window_summary(windows)
    for kind, attends, state in zip(kinds, attends_of, spec.layer_states, strict=True):
        window = next(bounds) if attends else None
        groups.setdefault(kind, []).append((attends, window, state))
    rows = []
    for kind, layers in groups.items():
        states = [state for _, _, state in layers]
        first = next((s for s in states if s is not None), None)
        windows = [w for attends, w, _ in layers if attends and w is not None]
        rows.append(
            LayerKindRecord(
                model=spec.name,
                num_kv_heads=spec.num_kv_heads,
                kind=kind,
                dtype=point.dtype,
                kv_dtype=fmt.dtype,
                kv_scale_group=point.kv_scale_group if fmt.quantized else None,
                scale_dtype=fmt.scale_dtype if "kv scales" in fmt.scaled() else None,
                sliding_window=widest,
                windowed_layers=windowed,
                layer_pattern=point.layer_pattern,
                layers=len(layers),
                window=max(windows, default=None),
                kv_bytes_per_token=sum(a for a, _, _ in layers) * layout.bytes,
                state_bytes=state_bytes(states, point.dtype),
                state_shapes=first.shapes if first is not None else None,
            )
        )
    return rows


#: The record sets kvmem writes beside its points' (study.sections.SectionKind.beside).
BESIDE: dict[str, Callable[[Any], list]] = {KIND_RECORDS: layer_kind_records}


def failed(point: KvmemPoint, status: str, context: Context | None = None) -> KvmemRecord:
    """The record of a point whose allocation failed: the analytic columns, and `status`."""
    record = run(point)
    record.status = status
    return record


#: The grid's run order, and no comparison among the points (study.sections.Experiment).
order, link = grid_order, no_links
