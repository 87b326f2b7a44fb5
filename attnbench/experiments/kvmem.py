"""KV-cache memory: computed from the analytic model and measured on a real cache.

The formulas are capacity.py's: the cache's own dtype (with scales for quantised ones),
per-layer sliding windows, MLA latents, tensor-parallel shards and paged blocks. Byte
columns describe the whole (logical) cache unless their name says per GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..measure.devices import free_memory_bytes
from ..measure.memory import measure_cache_bytes, measure_storage_bytes
from ..model.architecture import ModelSpec
from ..model.capacity import (
    KvFormat,
    cache_bytes,
    counted,
    layer_windows,
    paging_report,
    positive_int,
    token_layout,
    window_summary,
)
from ..model.shapes import AttentionShape, variant_label
from ..records import exact, info, key, memory
from .context import Context, grid_order, no_links


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
    kv_scale_group: int | None = None
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
    ratio_vs_mha: float = info()
    status: str = info()
    kv_dtype: str = key()
    kv_scale_group: int | None = key()
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


@dataclass(frozen=True)
class KvmemOptions:
    """A kvmem section's scalar options: `measure`, allocate each cache and count it."""

    measure: bool


def check(point: KvmemPoint) -> None:
    """Raise for a point whose cache cannot be sized (a tp that does not divide the
    heads, a scale group wider than a vector, a layout that does not fit the layers,
    ...), without sizing or measuring it."""
    spec = point.spec
    fmt = KvFormat(point.kv_dtype or point.dtype, point.kv_scale_group, point.scale_dtype)
    latent = spec.mla.latent_dim if spec is not None and spec.mla else None
    head_dim: int = point.shape.head_dim  # type: ignore[assignment]
    token_layout(point.num_heads, point.num_kv_heads, head_dim, fmt, point.tp, latent)
    model_windows = spec.windows if spec is not None else None
    layer_windows(point.num_layers, model_windows, point.sliding_window, point.layer_pattern)
    if point.page_size is not None:
        positive_int("page_size", point.page_size)


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
    layers, heads, kv_heads = point.num_layers, point.num_heads, point.num_kv_heads
    head_dim: int = shape.head_dim  # type: ignore[assignment]
    fmt = KvFormat(point.kv_dtype or point.dtype, point.kv_scale_group, point.scale_dtype)
    mla = spec.mla if spec is not None else None
    latent = mla.latent_dim if mla else None
    if point.seq_lens:
        lengths: dict[int, int] | tuple[int, ...] = point.seq_lens
        batch, seq = len(point.seq_lens), max(point.seq_lens)
    else:
        batch, seq = point.batch, point.seq_len
        lengths = {seq: batch}
    model_windows = spec.windows if spec is not None else None
    windows = layer_windows(layers, model_windows, point.sliding_window, point.layer_pattern)
    # The formulas count layers per window (computed in Python integers, per distinct
    # window and length); only an allocation goes layer by layer.
    counts = counted(windows)
    page_size = point.page_size
    layout = token_layout(heads, kv_heads, head_dim, fmt, 1, latent)
    per_gpu = token_layout(heads, kv_heads, head_dim, fmt, point.tp, latent)
    mha = token_layout(heads, heads, head_dim, fmt)
    full = {seq: batch}
    total = cache_bytes(layout, counts, full)
    gpu_bytes = cache_bytes(per_gpu, counts, full).total
    largest_layer = max(cache_bytes(layout, {w: 1}, full).total for w in counts)
    paging = (
        paging_report(layout, counts, lengths, page_size) if point.seq_lens or page_size else None
    )

    measured, status = (None, "not measured")
    measured_paged = None
    if device is not None:
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
        num_layers=layers,
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
        ratio_vs_mha=total.total / cache_bytes(mha, counts, full).total,
        published_kv_heads=point.published_kv_heads,
        status=status,
        kv_dtype=fmt.dtype,
        kv_scale_group=fmt.scale_group,
        scale_dtype=fmt.scale_dtype if fmt.quantized else None,
        scale_bytes=total.scales,
        sliding_window=window,
        layer_pattern=point.layer_pattern,
        windowed_layers=windowed_layers,
        page_size=page_size,
        tp=point.tp,
        kv_heads_per_gpu=None if mla else per_gpu.vectors // 2,
        kv_bytes_per_gpu=gpu_bytes,
        kv_bytes_all_gpus=gpu_bytes * point.tp,
        used_bytes=paging.used_bytes if paging else None,
        paged_bytes=paging.paged_bytes if paging else None,
        contiguous_bytes=paging.contiguous_bytes if paging else None,
        paged_waste_pct=paging.paged_waste_pct if paging else None,
        contiguous_waste_pct=paging.contiguous_waste_pct if paging else None,
        measured_paged_bytes=measured_paged,
    )


def failed(point: KvmemPoint, status: str, context: Context | None = None) -> KvmemRecord:
    """The record of a point whose allocation failed: the analytic columns, and `status`."""
    record = run(point)
    record.status = status
    return record


#: The grid's run order, and no comparison among the points (study.sections.Experiment).
order, link = grid_order, no_links
