"""The memory a device has free: on the CPU, no more than the address space this
process's limit leaves it, so that a point beyond it is skipped at once."""

from __future__ import annotations

import os

import pytest
import torch

from attnbench.measure import devices

resource = pytest.importorskip("resource")
CPU = torch.device("cpu")


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="no /proc here")
def test_an_address_space_limit_bounds_the_free_memory(monkeypatch):
    """A limit 1 GiB above what the process maps leaves it about 1 GiB, whatever the
    machine has available (MemAvailable is larger here)."""
    with open("/proc/self/status") as status:
        mapped = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))
    limit = mapped + (1 << 30)
    monkeypatch.setattr(resource, "getrlimit", lambda which: (limit, resource.RLIM_INFINITY))
    free = devices.free_memory_bytes(CPU)
    assert free <= min(1 << 30, devices._available_bytes())
    assert free > (1 << 30) - (256 << 20) or devices._available_bytes() < (1 << 30)


def test_no_limit_leaves_the_available_memory(monkeypatch):
    monkeypatch.setattr(
        resource, "getrlimit", lambda which: (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
    )
    assert devices.free_memory_bytes(CPU) == devices._available_bytes()
