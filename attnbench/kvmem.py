"""KV-cache memory: computed from the analytic model and measured on a real cache."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .analytic import kv_bytes_per_token, kv_cache_bytes, variant_label
from .devices import free_memory_bytes, torch_dtype
from .kv_cache import KVCache
from .output import format_bytes

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
    """Allocate one KVCache per layer on `device` and count their storage.

    On CUDA the allocator's view (torch.cuda.memory_allocated delta) must agree too.
    Nothing is allocated when `expected` bytes exceed the device's free memory.
    """
    free = free_memory_bytes(device)
    if expected > free:
        return None, f"skipped: needs {format_bytes(expected)}, {format_bytes(free)} free"
    on_cuda = device.type == "cuda"
    if on_cuda:
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
    caches = [
        KVCache(batch, num_kv_heads, seq_len, head_dim, torch_dtype(dtype), device)
        for _ in range(num_layers)
    ]
    measured = sum(c.nbytes for c in caches)
    status = "ok"
    if on_cuda:
        delta = torch.cuda.memory_allocated(device) - before
        if delta != measured:
            status = f"allocator delta {delta} != storage {measured}"
    del caches
    if on_cuda:
        torch.cuda.empty_cache()
    if measured != expected:
        status = f"mismatch: measured {measured} != analytic {expected}"
    return measured, status


def kvmem_record(point: dict, device: torch.device | None) -> KvmemRecord:
    """One row of `attnbench kvmem`; `device` None skips measuring."""
    layers, batch, seq = point.get("num_layers", 1), point["batch"], point["seq_len"]
    heads, kv_heads = point["num_heads"], point["num_kv_heads"]
    head_dim = point.get("head_dim") or point["d_model"] // heads
    dtype = point.get("dtype") or DEFAULT_KV_DTYPE
    total = kv_cache_bytes(layers, batch, seq, kv_heads, head_dim, dtype)
    mha_total = kv_cache_bytes(layers, batch, seq, heads, head_dim, dtype)
    measured, status = (None, "not measured")
    if device is not None:
        measured, status = measure_cache_bytes(
            layers, batch, seq, kv_heads, head_dim, dtype, device, total
        )
    return KvmemRecord(
        model=point.get("model"),
        variant=variant_label(heads, kv_heads),
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        batch=batch,
        seq_len=seq,
        dtype=dtype,
        bytes_per_token=kv_bytes_per_token(layers, kv_heads, head_dim, dtype),
        kv_bytes_per_layer=kv_cache_bytes(1, batch, seq, kv_heads, head_dim, dtype),
        kv_bytes=total,
        measured_bytes=measured,
        ratio_vs_mha=total / mha_total,
        status=status,
    )
