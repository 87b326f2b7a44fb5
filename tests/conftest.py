"""Shared test setup: a fixed seed for every test, the `cuda` and `slow` markers' skips,
one torch thread, the peak probes stubbed, the signal handling of a process run in the
foreground, and a tiny study. The CLI runner the test modules share is tests.helpers'."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import torch

from attnbench.measure import timing

# A command's output off a terminal is fitted to $COLUMNS, else 120 columns. pytest-xdist
# hands its workers the terminal's COLUMNS, so the tests unset it: each test that means
# another width gives its own.
os.environ.pop("COLUMNS", None)


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


@pytest.fixture(scope="session", autouse=True)
def _one_thread():
    """The tests compute on tiny tensors, with one torch thread: it is faster, and on a
    busy machine (or beside the other pytest-xdist worker `make test` runs) a parallel
    region would wait for a thread of its own that another process holds the CPU from.
    A test that sets its own count gets it; `decode-speed --threads` sets it for a run."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


#: The copy bandwidth and matmul throughput every unit test's run gets instead of
#: measuring them.
STUB_PEAK_GBPS = 10.0
STUB_PEAK_TFLOPS = 0.1
REAL_PROBES = (timing.measure_peak_gbps, timing.measure_peak_tflops)


@pytest.fixture(scope="session", autouse=True)
def _stub_peaks():
    """Tests never measure the peaks (a second of large copies and matmuls per run): every
    run that would gets STUB_PEAK_GBPS and STUB_PEAK_TFLOPS, in module- and session-scoped
    fixtures too."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(timing, "measure_peak_gbps", lambda device, **kw: STUB_PEAK_GBPS)
        patch.setattr(timing, "measure_peak_tflops", lambda device, dtype, **kw: STUB_PEAK_TFLOPS)
        yield


@pytest.fixture(autouse=True)
def _real_peaks_if_marked(request, monkeypatch):
    """A test marked `real_peak_probe` measures the peaks."""
    if request.node.get_closest_marker("real_peak_probe") is not None:
        monkeypatch.setattr(timing, "measure_peak_gbps", REAL_PROBES[0])
        monkeypatch.setattr(timing, "measure_peak_tflops", REAL_PROBES[1])
    yield


#: A study of every kind of section but fit, small enough to run in a second on the CPU,
#: and its points per section.
TINY_STUDY = """\
defaults:
  d_model: 64
  num_heads: 4
sweep:
  num_kv_heads: [4, 2, 1]
params: {}
kvmem:
  num_layers: 2
  batch: 1
  seq_len: [16, 64]
  dtype: float16
  device: cpu
decode:
  batch: 1
  dtype: float32
  prompt_len: [4, 8]
  gen_len: 4
  warmup: 0
  repeats: 1
  device: cpu
"""
TINY_POINTS = {"params": 3, "kvmem": 6, "decode": 12}


@pytest.fixture
def tiny_study(tmp_path) -> Path:
    """TINY_STUDY, written to tiny.yaml in the test's own folder."""
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY_STUDY)
    return path


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
