"""KV-cache memory: computed from the analytic model and measured on a real cache.

The formulas are capacity.py's: the cache's own dtype (with scales for quantised ones),
per-layer sliding windows, MLA latents, tensor-parallel shards and paged blocks. Byte
columns describe the whole (logical) cache unless their name says per GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import UsageError
from ..measure.devices import torch_dtype
from ..model.architecture import ModelSpec
from ..model.capacity import (
    DEFAULT_SCALE_DTYPE,
    KvFormat,
    cache_bytes,
    layer_windows,
    paging_report,
    token_layout,
)
from ..model.formulas import variant_label
from ..model.presets import PRESETS
from ..modules.kv_cache import KVCache
from ..modules.quantized_cache import measure_allocation, measure_storage_bytes
from ..study.sweep import Study

#: KV-cache dtype when neither the config nor the model gives one (what serving uses).
DEFAULT_KV_DTYPE = "float16"


@dataclass
class KvmemRecord:
    model: str | None
    variant: str
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    batch: int
    seq_len: int
    dtype: str
    bytes_per_token: int
    kv_bytes_per_layer: int
    kv_bytes: int
    measured_bytes: int | None
    ratio_vs_mha: float
    status: str
    kv_dtype: str
    kv_scale_group: int | None
    scale_dtype: str | None
    scale_bytes: int
    sliding_window: int | None
    windowed_layers: int
    page_size: int | None
    tp: int
    kv_heads_per_gpu: int | None
    kv_bytes_per_gpu: int
    kv_bytes_all_gpus: int
    used_bytes: int | None
    paged_bytes: int | None
    contiguous_bytes: int | None
    paged_waste_pct: float | None
    contiguous_waste_pct: float | None
    measured_paged_bytes: int | None


def measure_cache_bytes(
    num_layers: int,
    batch: int,
    seq_len: int,
    num_kv_heads: int,
    head_dim: int,
    dtype: str,
    device: torch.device,
    expected: int,
) -> tuple[int | None, str]:
    """Allocate one KVCache per layer on `device` and count their storage (see
    measure_allocation: on CUDA the allocator's count must agree too)."""

    def allocate() -> list[torch.Tensor]:
        caches = [
            KVCache(batch, num_kv_heads, seq_len, head_dim, torch_dtype(dtype), device)
            for _ in range(num_layers)
        ]
        return [t for c in caches for t in (c.k, c.v)]

    return measure_allocation(allocate, device, expected)


def take_batch_lengths(study: Study, lengths: list[int] | None = None) -> None:
    """Make seq_lens (one batch's lengths: `lengths` from the flag, else the file's list,
    which the sweep validated as an axis) a single grid value holding the whole list; it
    replaces the batch and seq_len axes. Call it after `resolve`, before `points`."""
    lengths = lengths or study.values.get("seq_lens")
    if lengths:
        study.values["seq_lens"] = [tuple(lengths)]
        study.values["batch"], study.values["seq_len"] = [len(lengths)], [max(lengths)]


def kvmem_points(
    study: Study, lengths: list[int] | None = None
) -> list[tuple[dict, ModelSpec | None]]:
    """Every point of a resolved kvmem study with its model's spec (which brings the
    model's windows and MLA latent, also for config.json models), after folding one
    batch's lengths into the grid (take_batch_lengths). What kvmem_record needs."""
    take_batch_lengths(study, lengths)
    specs = {m.name: m for m in study.models}
    return [(p, specs.get(p["model"])) for p in study.points()]


def kvmem_record(
    point: dict, device: torch.device | None, spec: ModelSpec | None = None
) -> KvmemRecord:
    """One row of `attnbench kvmem`; `device` None skips measuring.

    `spec` (the point's model; default: the preset the point names, if any) brings its
    per-layer windows and MLA. The point's fields kv_dtype, kv_scale_group, scale_dtype,
    sliding_window, page_size, seq_lens and tp select the cache (absent: the model's
    dtype, its windows, contiguous, one GPU)."""
    layers, heads, kv_heads = point.get("num_layers", 1), point["num_heads"], point["num_kv_heads"]
    head_dim = point.get("head_dim") or point["d_model"] // heads
    dtype = point.get("dtype") or DEFAULT_KV_DTYPE
    fmt = KvFormat(
        point.get("kv_dtype") or dtype,
        point.get("kv_scale_group"),
        point.get("scale_dtype") or DEFAULT_SCALE_DTYPE,
    )
    if spec is None and point.get("model") in PRESETS:
        spec = PRESETS[point["model"]]
    mla = spec.mla if spec is not None else None
    latent = mla.latent_dim if mla else None
    tp = point.get("tp") or 1
    seq_lens = point.get("seq_lens")
    if seq_lens is not None and not isinstance(seq_lens, (list, tuple)):
        raise UsageError(
            f"seq_lens: got {seq_lens!r}; one batch's lengths are a list, which "
            "take_batch_lengths keeps whole (it is not an axis of the grid)"
        )
    batch, seq = (len(seq_lens), max(seq_lens)) if seq_lens else (point["batch"], point["seq_len"])
    lengths = list(seq_lens) if seq_lens else [seq] * batch
    windows = layer_windows(
        layers, spec.windows if spec is not None else None, point.get("sliding_window")
    )
    page_size = point.get("page_size")

    layout = token_layout(heads, kv_heads, head_dim, fmt, 1, latent)
    per_gpu = token_layout(heads, kv_heads, head_dim, fmt, tp, latent)
    mha = token_layout(heads, heads, head_dim, fmt)
    full = [seq] * batch
    total = cache_bytes(layout, windows, full)
    gpu_bytes = cache_bytes(per_gpu, windows, full).total
    largest_layer = max(cache_bytes(layout, [w], full).total for w in set(windows))
    paging = paging_report(layout, windows, lengths, page_size) if seq_lens or page_size else None

    measured, status = (None, "not measured")
    measured_paged = None
    if device is not None:
        windows_unused = all(w is None or w >= seq for w in windows)
        if mla is None and not fmt.quantized and windows_unused:  # the project's KVCache
            measured, status = measure_cache_bytes(
                layers, batch, seq, kv_heads, head_dim, fmt.dtype, device, total.total
            )
        else:
            measured, status = measure_storage_bytes(layout, windows, full, device, total.total)
        if paging is not None and paging.paged_bytes is not None:
            measured_paged, paged_status = measure_storage_bytes(
                layout, windows, lengths, device, paging.paged_bytes, page_size
            )
            if paged_status != "ok" and status == "ok":
                status = f"paged: {paged_status}"

    windowed = [w for w in windows if w is not None]
    return KvmemRecord(
        model=point.get("model"),
        variant="MLA" if mla else variant_label(heads, kv_heads),
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        batch=batch,
        seq_len=seq,
        dtype=dtype,
        bytes_per_token=layers * layout.bytes,
        kv_bytes_per_layer=largest_layer,
        kv_bytes=total.total,
        measured_bytes=measured,
        ratio_vs_mha=total.total / cache_bytes(mha, windows, full).total,
        status=status,
        kv_dtype=fmt.dtype,
        kv_scale_group=fmt.scale_group,
        scale_dtype=fmt.scale_dtype if fmt.quantized else None,
        scale_bytes=total.scales,
        sliding_window=max(windowed) if windowed else None,
        windowed_layers=len(windowed),
        page_size=page_size,
        tp=tp,
        kv_heads_per_gpu=None if mla else per_gpu.vectors // 2,
        kv_bytes_per_gpu=gpu_bytes,
        kv_bytes_all_gpus=gpu_bytes * tp,
        used_bytes=paging.used_bytes if paging else None,
        paged_bytes=paging.paged_bytes if paging else None,
        contiguous_bytes=paging.contiguous_bytes if paging else None,
        paged_waste_pct=paging.paged_waste_pct if paging else None,
        contiguous_waste_pct=paging.contiguous_waste_pct if paging else None,
        measured_paged_bytes=measured_paged,
    )
