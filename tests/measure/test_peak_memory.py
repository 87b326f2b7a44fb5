"""The peak bytes a call allocates: exact on the CPU, from the allocator on CUDA, and the
SDPA math kernel's quadratic scores against the flash kernel's linear buffers."""

from __future__ import annotations

import sys

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from attnbench.measure.peak_memory import (
    CPU_PROFILER,
    CUDA_ALLOCATOR,
    PeakMemory,
    peak_bytes_during,
    peak_of,
)

CPU = torch.device("cpu")


def _bytes(n: int, device: torch.device = CPU) -> torch.Tensor:
    return torch.empty(n, dtype=torch.uint8, device=device)


def test_two_blocks_at_once_then_one_freed_peak_at_both_the_returned_one_counts():
    def call() -> torch.Tensor:
        a, b = _bytes(1000), _bytes(3000)
        del a
        c = _bytes(500)  # 3500 held: below the 4000 of a and b
        return torch.cat([b, c])  # 3500 + 3500 = 7000 held at once, 3500 returned

    assert peak_bytes_during(call, CPU) == PeakMemory(7000, CPU_PROFILER)


def test_temporaries_of_a_call_that_returns_nothing_count_while_they_live():
    def call() -> None:
        for n in (2048, 4096, 1024):
            _bytes(n)  # each freed before the next

    assert peak_bytes_during(call, CPU).peak_bytes == 4096


def test_the_peak_is_relative_to_what_was_allocated_before_the_call():
    held = [_bytes(1 << 20)]  # allocated before: neither counted nor discounted

    def call() -> torch.Tensor:
        held.clear()  # frees the block from before: not counted against the call
        return _bytes(100)

    assert peak_bytes_during(call, CPU).peak_bytes == 100


def test_a_call_that_allocates_nothing_has_no_peak():
    x = torch.ones(10)
    assert peak_bytes_during(lambda: x.view(2, 5), CPU).peak_bytes == 0


@pytest.mark.parametrize("mode", [torch.inference_mode, torch.no_grad])
def test_calls_inside_or_under_inference_mode_and_no_grad(mode):
    x = torch.ones(256)  # 1024 bytes of float32

    def inside() -> torch.Tensor:
        with mode():
            return x.clone()

    assert peak_bytes_during(inside, CPU).peak_bytes == 1024
    with mode():
        assert peak_bytes_during(x.clone, CPU).peak_bytes == 1024


def test_repeated_calls_give_the_same_peak():
    # each call's output is allocated while the profiler runs and freed after it: the
    # allocator keeps its size by its address, which the next blocks may reuse
    peaks = [peak_bytes_during(lambda: _bytes(40960), CPU) for _ in range(3)]
    assert peaks == [PeakMemory(40960, CPU_PROFILER)] * 3


def test_peak_of_counts_only_blocks_the_events_allocated():
    events = [
        (1, -500),  # a block from before: its free is not counted
        (2, 100),
        (3, 200),  # 300 held
        (2, -100),
        (2, 50),  # the address reused: 250 held
        (4, -7),  # another block from before
    ]
    assert peak_of(events) == 300
    assert peak_of([]) == 0
    assert peak_of([(1, -10), (2, 10)]) == 10


def test_other_devices_are_refused():
    with pytest.raises(ValueError, match="meta"):
        peak_bytes_during(lambda: None, torch.device("meta"))


def _sdpa_peak(backend: SDPBackend, batch: int, heads: int, seq: int, dim: int) -> int:
    q, k, v = (torch.randn(batch, heads, seq, dim) for _ in range(3))
    with sdpa_kernel([backend]):
        return peak_bytes_during(
            lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), CPU
        ).peak_bytes


def test_sdpa_math_materialises_the_scores_quadratic_flash_stays_linear():
    batch, heads, dim = 1, 4, 32
    math = {s: _sdpa_peak(SDPBackend.MATH, batch, heads, s, dim) for s in (256, 512)}
    flash = {s: _sdpa_peak(SDPBackend.FLASH_ATTENTION, batch, heads, s, dim) for s in (256, 512)}
    for seq, peak in math.items():
        assert peak >= batch * heads * seq * seq * 4  # the float32 scores
        assert flash[seq] < batch * heads * seq * seq * 4
    assert 3.5 < math[512] / math[256] < 4.5
    assert 1.5 < flash[512] / flash[256] < 2.5


@pytest.mark.cuda
def test_cuda_peak_counts_the_allocator_blocks_above_those_allocated_before():
    cuda = torch.device("cuda")
    held = _bytes(1 << 20, cuda)

    def call() -> torch.Tensor:
        a, b = _bytes(1 << 20, cuda), _bytes(3 << 20, cuda)
        del a
        return b

    assert peak_bytes_during(call, cuda) == PeakMemory(4 << 20, CUDA_ALLOCATOR)
    # the allocator rounds each tensor up to 512 bytes
    assert peak_bytes_during(lambda: _bytes(1, cuda), cuda).peak_bytes == 512
    del held


def test_the_profilers_banners_are_dropped_and_the_rest_of_stderr_is_kept(capfd):
    def call() -> torch.Tensor:
        print("a warning of the call", file=sys.stderr, flush=True)
        return torch.empty(256)

    assert peak_bytes_during(call, torch.device("cpu")).peak_bytes == 1024
    err = capfd.readouterr().err
    assert "a warning of the call" in err and "profiler_st" not in err
