"""Devices by name, resolved to torch devices, and the memory they have free."""

from __future__ import annotations

import re
from pathlib import Path

import torch

from ..errors import FieldError
from ..modules.dtypes import torch_dtype

__all__ = ["free_memory_bytes", "resolve_device", "torch_dtype"]


def resolve_device(name: str | None) -> torch.device:
    """'auto' (CUDA when available, else the CPU), 'cpu', 'cuda' or 'cuda:i' (i in ASCII
    digits: int() would take other scripts' digits, and str.isdigit() superscripts it
    cannot convert)."""
    given = name
    name = (name or "auto").strip().lower()
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cpu":
        return torch.device("cpu")
    cuda = re.fullmatch(r"cuda(?::([0-9]+))?", name)
    if cuda is None:
        raise FieldError("device", given, "unknown device; use auto, cpu, cuda or cuda:<index>")
    if not torch.cuda.is_available():
        raise FieldError("device", given, "requested but CUDA is not available here")
    if cuda.group(1) is None:
        return torch.device("cuda", torch.cuda.current_device())
    index, count = int(cuda.group(1)), torch.cuda.device_count()
    if index >= count:
        raise FieldError("device", given, f"no such device ({count} CUDA device(s) present)")
    return torch.device("cuda", index)


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
