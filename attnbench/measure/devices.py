"""Devices by name, resolved to torch devices, and the memory they have free."""

from __future__ import annotations

from pathlib import Path

import torch

from ..errors import FieldError
from ..modules.dtypes import torch_dtype

__all__ = ["free_memory_bytes", "resolve_device", "torch_dtype"]


def resolve_device(name: str | None) -> torch.device:
    """'auto' (CUDA when available, else the CPU), 'cpu', 'cuda' or 'cuda:i'."""
    given = name
    name = (name or "auto").strip().lower()
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cpu":
        return torch.device("cpu")
    if name == "cuda" or name.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise FieldError("device", given, "requested but CUDA is not available here")
        index = name.partition(":")[2]
        if index:
            if not index.isdigit() or int(index) >= torch.cuda.device_count():
                count = torch.cuda.device_count()
                raise FieldError(
                    "device", given, f"no such device ({count} CUDA device(s) present)"
                )
            return torch.device("cuda", int(index))
        return torch.device("cuda", torch.cuda.current_device())
    raise FieldError("device", given, "unknown device; use auto, cpu, cuda or cuda:<index>")


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
