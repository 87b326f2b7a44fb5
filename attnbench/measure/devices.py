"""Devices by name, resolved to torch devices, and the memory they have free.

torch is imported where a device is resolved or asked for its memory, not with this
module: planning a study whose sections use no device needs none of it (a second of
start-up)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import FieldError

if TYPE_CHECKING:
    import torch

__all__ = ["check_device_name", "free_memory_bytes", "resolve_device"]

#: A device's name, lower-cased: auto, cpu, cuda or cuda:i (i in ASCII digits: int() would
#: take other scripts' digits, and str.isdigit() superscripts it cannot convert).
DEVICE_NAME = re.compile(r"auto|cpu|cuda(?::([0-9]+))?")


def check_device_name(name: str | None) -> re.Match:
    """`name` ('auto' when None) read as a device's name, without asking torch whether
    the device is there: FieldError for a name of no device."""
    found = DEVICE_NAME.fullmatch(("auto" if name is None else name).strip().lower())
    if found is None:
        reason = "unknown device; use auto, cpu, cuda or cuda:<index>"
        raise FieldError("device", name, reason)
    return found


def resolve_device(name: str | None) -> torch.device:
    """'auto' (CUDA when available, else the CPU), 'cpu', 'cuda' or 'cuda:i'."""
    import torch

    found = check_device_name(name)
    if found[0] == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if found[0] == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise FieldError("device", name, "requested but CUDA is not available here")
    if found[1] is None:
        return torch.device("cuda", torch.cuda.current_device())
    index, count = int(found[1]), torch.cuda.device_count()
    if index >= count:
        raise FieldError("device", name, f"no such device ({count} CUDA device(s) present)")
    return torch.device("cuda", index)


def free_memory_bytes(device: torch.device) -> int:
    """Memory that can still be allocated on `device`: the CUDA driver's free memory, or
    on the CPU MemAvailable from /proc/meminfo, and no more than the address space this
    process's limit (RLIMIT_AS, `ulimit -v`) leaves it: a point beyond that is skipped at
    once, not built until an allocation fails."""
    if device.type == "cuda":
        import torch

        free, _ = torch.cuda.mem_get_info(device)
        return free
    return min(_available_bytes(), _address_space_left())


def _available_bytes() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def _address_space_left() -> int:
    """RLIMIT_AS less the address space this process maps (VmSize); the limit itself
    where that cannot be read, and no bound (a huge number) where there is no limit."""
    try:
        import resource
    except ImportError:  # not a POSIX system
        return sys.maxsize
    limit, _ = resource.getrlimit(resource.RLIMIT_AS)
    if limit == resource.RLIM_INFINITY:
        return sys.maxsize
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                return max(0, limit - int(line.split()[1]) * 1024)
    except OSError:
        pass
    return limit
