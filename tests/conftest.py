"""Shared test setup: a fixed seed for every test, and the `cuda` marker's skip."""

from __future__ import annotations

import signal

import pytest
import torch

from attnbench.measure import timing


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true", help="also run the tests marked slow")


def pytest_collection_modifyitems(config, items):
    """Skip tests marked `cuda` when no CUDA device is available, and tests marked `slow`
    unless --slow is given (`make test-slow`)."""
    skips = {}
    if not torch.cuda.is_available():
        skips["cuda"] = pytest.mark.skip(reason="needs a CUDA device")
    if not config.getoption("--slow"):
        skips["slow"] = pytest.mark.skip(reason="slow: run with --slow (make test-slow)")
    for item in items:
        for marker, skip in skips.items():
            if item.get_closest_marker(marker) is not None:
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


#: The copy bandwidth and matmul throughput every unit test's run gets instead of
#: measuring them.
STUB_PEAK_GBPS = 10.0
STUB_PEAK_TFLOPS = 0.1


@pytest.fixture(autouse=True)
def _stub_peaks(request, monkeypatch):
    """Unit tests never measure the peaks (a second of large copies and matmuls per run):
    every run that would gets STUB_PEAK_GBPS and STUB_PEAK_TFLOPS. A test marked
    `real_peak_probe` measures."""
    if request.node.get_closest_marker("real_peak_probe") is None:
        monkeypatch.setattr(timing, "measure_peak_gbps", lambda device, **kw: STUB_PEAK_GBPS)
        monkeypatch.setattr(
            timing, "measure_peak_tflops", lambda device, dtype, **kw: STUB_PEAK_TFLOPS
        )
    yield


@pytest.fixture(autouse=True)
def _foreground_signals():
    """Every test starts with the signal handling of a process run in the foreground:
    Ctrl-C raises KeyboardInterrupt, SIGTERM and SIGHUP stop it. A test runner started in
    the background of a script, or under nohup, inherits SIGINT or SIGHUP ignored, and
    attnbench leaves an ignored signal ignored; the tests of its handlers would then
    test nothing. The runner's own dispositions come back after each test."""
    wanted = {
        signal.SIGINT: signal.default_int_handler,
        signal.SIGTERM: signal.SIG_DFL,
        signal.SIGHUP: signal.SIG_DFL,
    }
    before = {sig: signal.signal(sig, handler) for sig, handler in wanted.items()}
    yield
    for sig, handler in before.items():
        signal.signal(sig, handler)
