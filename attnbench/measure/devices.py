"""Device and dtype names from the command line, resolved to torch objects."""

from __future__ import annotations

from pathlib import Path

import torch

from ..errors import UsageError

TORCH_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}

#: Storage dtypes of KV-cache element types (capacity.KV_DTYPES): float8 are torch dtypes,
#: int4 values are packed two per uint8 byte.
KV_STORAGE_DTYPES: dict[str, torch.dtype] = {
    **TORCH_DTYPES,
    "float8_e4m3fn": torch.float8_e4m3fn,
    "float8_e5m2": torch.float8_e5m2,
    "int8": torch.int8,
    "int4": torch.uint8,
}


def torch_dtype(name: str) -> torch.dtype:
    try:
        return TORCH_DTYPES[name]
    except KeyError:
        choices = ", ".join(TORCH_DTYPES)
        raise UsageError(f"dtype: unknown dtype {name!r}; choose from {choices}") from None


def resolve_device(name: str | None, flag: str = "--device") -> torch.device:
    """'auto' (CUDA when available, else the CPU), 'cpu', 'cuda' or 'cuda:i'."""
    name = (name or "auto").strip().lower()
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cpu":
        return torch.device("cpu")
    if name == "cuda" or name.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise UsageError(f"{flag}: {name!r} requested but CUDA is not available here")
        index = name.partition(":")[2]
        if index:
            if not index.isdigit() or int(index) >= torch.cuda.device_count():
                count = torch.cuda.device_count()
                raise UsageError(f"{flag}: no device {name!r} ({count} CUDA device(s) present)")
            return torch.device("cuda", int(index))
        return torch.device("cuda", torch.cuda.current_device())
    raise UsageError(f"{flag}: unknown device {name!r}; use auto, cpu, cuda or cuda:<index>")


def free_memory_bytes(device: torch.device) -> int:
    """Memory that can still be allocated on `device`: the CUDA driver's free memory, or
    MemAvailable from /proc/meminfo on the CPU."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    import os

    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
