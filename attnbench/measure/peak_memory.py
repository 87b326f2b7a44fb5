"""The peak memory a call allocates, above what was allocated just before it, in bytes.

On CUDA the caching allocator keeps the count itself: its peak (max_memory_allocated) is
reset before the call and read after it. The count is in the allocator's blocks (each
tensor rounded up to 512 bytes).

The CPU allocator keeps no count that Python can read (torch.cpu has no memory_allocated,
torch.accelerator covers accelerators only) and offers no public hook, so the count comes
from the profiler's memory events (profile_memory=True): one per allocation and per free
by torch's CPU allocator, with its exact size (not the process's RSS). The profiler's op
table (events(), key_averages()) sums them per op and loses their order, and its flat event
list has no addresses, so they are read from its event tree (as torch's memory timeline
reads them), in the order they happened: the running sum of the blocks still live, at its
highest, is the peak. Two limits of that reporting, both outside a prefill call's path:

- the allocator knows the size of a block only if it was allocated while memory
  profiling was on, and it keeps the sizes of such blocks freed while it was off, so the
  free of a block from before the call is either not reported or reported with the size
  of an earlier block at the same address. Only blocks the call allocated are counted: a
  call that frees memory from before it gets the peak of its own allocations, which is
  higher than the CUDA count by what it freed;
- the profiler's state is per thread and the intra-op workers do not get it: what they
  allocate is not reported. With one torch thread nothing is missed; with more, the SDPA
  kernels still allocate on the calling thread (the flash kernel its workers' buffers up
  front).
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch.profiler import ProfilerActivity, profile, record_function

CUDA_ALLOCATOR = "cuda-allocator"
CPU_PROFILER = "cpu-profiler"

_SPAN = "attnbench.peak_bytes_during"


@dataclass(frozen=True)
class PeakMemory:
    """The most bytes the call held at once beyond those allocated before it (the tensors
    it returns included), and how they were counted (CUDA_ALLOCATOR or CPU_PROFILER)."""

    peak_bytes: int
    method: str


def peak_bytes_during(call: Callable[[], object], device: torch.device) -> PeakMemory:
    """Run `call` once on `device` (the CPU or a CUDA device) and measure its peak.

    On CUDA this resets the device's peak statistics (torch.cuda.reset_peak_memory_stats).
    """
    if device.type == "cuda":
        return _cuda_peak(call, device)
    if device.type == "cpu":
        return _cpu_peak(call)
    raise ValueError(f"no peak-memory count for {device.type} devices, only cpu and cuda")


def _cuda_peak(call: Callable[[], object], device: torch.device) -> PeakMemory:
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    call()
    torch.cuda.synchronize(device)
    return PeakMemory(torch.cuda.max_memory_allocated(device) - before, CUDA_ALLOCATOR)


def _cpu_peak(call: Callable[[], object]) -> PeakMemory:
    # The span marks the call's own events: nothing the profiler does on starting and
    # stopping, nor the returned tensors' free after it, falls inside.
    with (
        _without_profiler_banners(),
        profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof,
        record_function(_SPAN),
    ):
        call()
    roots = prof.profiler.kineto_results.experimental_event_tree()
    span = next(node for node in roots if node.name == _SPAN)
    return PeakMemory(peak_of(_cpu_allocations(span)), CPU_PROFILER)


#: What torch's profiler library prints straight to file descriptor 2 as it starts and
#: stops ('USDT:2026-... SyncActivityProfilerHandler.cpp:52] profiler_start').
_BANNER = re.compile(rb"^USDT:.*\] profiler_(start|stop)\s*$")


@contextmanager
def _without_profiler_banners() -> Iterator[None]:
    """Run the block with file descriptor 2 into a temporary file, then write back to it
    everything that was printed there but the profiler's start and stop banners: a
    warning still reaches the terminal, the banners do not."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            kept = [line for line in held.read().splitlines(True) if not _BANNER.match(line)]
            if kept:
                os.write(2, b"".join(kept))


def _cpu_allocations(node) -> Iterator[tuple[int, int]]:
    """(address, signed bytes) of the CPU allocator's events under `node`, in order: a
    node's children are ordered by start time, and an allocation is a leaf."""
    for child in node.children:
        fields = child.extra_fields
        if isinstance(fields, torch._C._profiler._ExtraFields_Allocation):
            if fields.device.type == "cpu":
                yield fields.ptr, fields.alloc_size
        else:
            yield from _cpu_allocations(child)


def peak_of(events: Iterable[tuple[int, int]]) -> int:
    """The highest running total of the blocks allocated by `events`, (address, bytes:
    positive for an allocation, negative for a free), starting from 0. A free of a block
    not allocated by these events is of memory from before them, and is not counted."""
    live: dict[int, int] = {}
    held = peak = 0
    for ptr, nbytes in events:
        if nbytes > 0:
            held += nbytes - live.get(ptr, 0)
            live[ptr] = nbytes
            peak = max(peak, held)
        else:
            held -= live.pop(ptr, 0)
    return peak
