"""Shared test setup: a fixed seed for every test, and the `cuda` marker's skip."""

from __future__ import annotations

import pytest
import torch

from attnbench.measure import timing


def pytest_collection_modifyitems(config, items):
    """Skip tests marked `cuda` when no CUDA device is available."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _seed():
    """Every test starts from the same random state."""
    torch.manual_seed(0)
    yield


@pytest.fixture(scope="module")
def single_thread():
    """One intra-op thread for a module of tiny-tensor tests: faster, and it does not fight
    other processes for the CPUs. The previous setting comes back after the module."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


#: The copy bandwidth every unit test's run gets instead of measuring it.
STUB_PEAK_GBPS = 10.0


@pytest.fixture(autouse=True)
def _stub_peak_bandwidth(request, monkeypatch):
    """Unit tests never measure the copy bandwidth (a second of large copies per run):
    every run that would gets STUB_PEAK_GBPS. A test marked `real_peak_probe` measures."""
    if request.node.get_closest_marker("real_peak_probe") is None:
        monkeypatch.setattr(timing, "measure_peak_gbps", lambda device, nbytes=None: STUB_PEAK_GBPS)
    yield
