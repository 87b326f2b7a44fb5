"""Measured memory: allocate a cache for real and count what it holds, byte for byte.

On the CPU the count is the tensors' storage. On CUDA the caching allocator's own count
of the bytes asked of it (memory_stats' requested_bytes) must grow by the tensors' storage
too, so an allocation the tensors do not show cannot hide. Its memory_allocated would not
do: it counts blocks, rounded to 512 bytes, and a block cut from a 20 MiB segment keeps
the segment's tail when less than 1 MiB would be left (a 4,096,000-byte tensor can hold
4,587,520 bytes).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from ..model.capacity import SeqLens, TokenLayout
from ..model.units import format_bytes
from ..modules.dtypes import torch_dtype
from ..modules.kv_cache import KVCache
from ..modules.quantized_cache import allocate_cache
from .devices import free_memory_bytes


def skip_status(needed: int, free: int) -> str | None:
    """The status of what is not allocated because `needed` bytes exceed the `free` ones
    ('skipped: needs 40.00 GiB, 23.50 GiB free'), or None when they fit."""
    if needed <= free:
        return None
    return f"skipped: needs {format_bytes(needed)}, {format_bytes(free)} free"


def requested_bytes(device: torch.device) -> int | None:
    """The bytes the tensors alive on `device` asked the CUDA caching allocator for; None
    under an allocator that keeps no such count (PYTORCH_CUDA_ALLOC_CONF's
    backend:cudaMallocAsync), whose cache is then checked by its storage alone."""
    return torch.cuda.memory_stats(device).get("requested_bytes.all.current")


def measure_allocation(
    allocate: Callable[[], list[torch.Tensor]],
    device: torch.device,
    expected: int,
    free_bytes: Callable[[torch.device], int] = free_memory_bytes,
) -> tuple[int | None, str]:
    """Run `allocate` on `device` and count the storage of the tensors it returns;
    `expected` is the formula's bytes. Nothing is allocated when `expected` exceeds what
    `free_bytes` says the device has free: the status says so and the count is None."""
    skipped = skip_status(expected, free_bytes(device))
    if skipped is not None:
        return None, skipped
    on_cuda = device.type == "cuda"
    if on_cuda:
        torch.cuda.synchronize(device)
        before = requested_bytes(device)
    tensors = allocate()
    measured = sum(t.untyped_storage().nbytes() for t in tensors)
    status = "ok"
    if on_cuda:
        after = requested_bytes(device)
        delta = None if after is None or before is None else after - before
        if delta is not None and delta != measured:
            status = f"allocator's requested bytes grew by {delta}, the storage is {measured}"
    del tensors
    if on_cuda:
        torch.cuda.empty_cache()
    if measured != expected:
        status = f"mismatch: measured {measured} != analytic {expected}"
    return measured, status


def measure_cache_bytes(
    num_layers: int,
    batch: int,
    seq_len: int,
    num_kv_heads: int,
    head_dim: int,
    dtype: str,
    device: torch.device,
    expected: int,
    free_bytes: Callable[[torch.device], int] = free_memory_bytes,
) -> tuple[int | None, str]:
    """Allocate one KVCache (the module decode uses) per layer on `device` and count it."""

    def allocate() -> list[torch.Tensor]:
        caches = [
            KVCache(batch, num_kv_heads, seq_len, head_dim, torch_dtype(dtype), device)
            for _ in range(num_layers)
        ]
        return [t for c in caches for t in (c.k, c.v)]

    return measure_allocation(allocate, device, expected, free_bytes)


def measure_storage_bytes(
    layout: TokenLayout,
    windows: Sequence[int | None],
    seq_lens: SeqLens,
    device: torch.device,
    expected: int,
    page_size: int | None = None,
    free_bytes: Callable[[torch.device], int] = free_memory_bytes,
) -> tuple[int | None, str]:
    """Allocate the quantisable cache of `layout` (see allocate_cache) and count it."""

    def allocate() -> list[torch.Tensor]:
        layers = allocate_cache(layout, windows, seq_lens, page_size, device)
        return [t for layer in layers for t in layer.tensors()]

    return measure_allocation(allocate, device, expected, free_bytes)


def is_oom(exc: BaseException) -> bool:
    """CUDA's OutOfMemoryError, or the CPU allocator failing."""
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and (
        "out of memory" in text or "can't allocate memory" in text
    )
