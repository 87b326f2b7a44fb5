"""Decode points compared with each other, sampled in turn: the comparisons of a study.

A host's speed shifts for seconds at a time, so two points sampled one after the other,
minutes apart, meet different machines, and the ratio of their medians says as much about
the host as about the points. The points of one context (decode.context_of: the variants,
providers and modes at one shape, batch and context) are therefore built together and
sampled round-robin: every round takes one block of each point's step (and of what the
step is timed against), in a new seeded order each round. Rounds in one process share
where its buffers landed, which the next run's do not, so the group is sampled over
several memory layouts, one after another, each built afresh (`rebuilt`); on the CPU,
over copies of its buffers that outgrow the last-level cache (`copies_for`), each call
on the next, allocated once and split into layouts' runs of rounds. Each
comparison is then the ratio of two steps within each round; its value is the median
over the rounds of every layout and its interval the one the next run's median falls
in (stats.next_run_interval), the layouts' spread included:

- `x_of_narrowest`: a cached step over the narrowest-KV variant's (MQA's, in a sweep that
  has it) at the same context and provider;
- `x_of_no_cache`: a cached step over the same variant's step without the cache (its
  inverse is `speedup_vs_no_cache`);
- `x_of_baseline`: a provider's step over the baseline provider's (inverse:
  `speedup_vs_baseline`).

Adaptive sampling stops when every comparison's interval, and every step's in-run ratio
to its kernels, is within `target_rel_ci`, or when `max_time` per point is spent for the
group. A group must fit the device's free memory (decode_bytes, before anything is
built); a point that does not join one is sampled alone, and so is every point of a
tensor-parallel run (its ranks time in lockstep). Its record says which (`sampling`).
"""

from __future__ import annotations

import gc
import math
import random
from collections.abc import Callable, Sequence

import torch

from ..measure.devices import free_memory_bytes
from ..measure.environment import cache_bytes
from ..measure.memory import is_oom
from ..measure.stats import Measurement, in_run_ratio, next_run_interval, relative_half_width
from ..measure.timing import CpuShare, Timer, Unit, rotating
from ..modules.providers import PROVIDERS
from .context import Context
from .decode import (
    ALONE,
    INTERLEAVED,
    DecodeOptions,
    DecodePoint,
    DecodeRecord,
    Pair,
    Ready,
    Timings,
    context_of,
    decode_bytes,
    failed,
    held_cpu,
    prefill_peak,
    prepare,
    run,
    step_timings,
    summarise,
    time_generation,
    time_prefill,
    timed_step,
)
from .tensor_parallel import Ranks


def sampling_groups(
    points: Sequence[DecodePoint],
    options: DecodeOptions,
    device: torch.device,
    free_bytes: Callable[[torch.device], int] = free_memory_bytes,
) -> list[list[int]]:
    """The points (in run order) in groups sampled together: consecutive points of one
    context, as many as fit the free memory together by their analytic bytes."""
    free = free_bytes(device)
    prefill = options.prefill
    groups: list[list[int]] = []
    used = 0
    for i, point in enumerate(points):
        need = decode_bytes(point, prefill)
        joins = groups and context_of(points[groups[-1][0]]) == context_of(point)
        if joins and used + need <= free:
            groups[-1].append(i)
            used += need
        else:
            groups.append([i])
            used = need
    return groups


def paired_ratio(of: Measurement, over: Measurement) -> Measurement:
    """The ratio of two steps sampled in the same rounds, round by round (and so over the
    same memory layouts)."""
    ratios = [a / b for a, b in zip(of.samples_ms, over.samples_ms, strict=True)]
    return Measurement(ratios, of.stop_reason, 1, layouts=of.layouts)


def interval(ratio: Measurement) -> tuple[float, float]:
    """A comparison's stated 95% interval: the one the next run's median falls in, over
    the memory layouts sampled (stats.next_run_interval)."""
    return next_run_interval(ratio.samples_ms, ratio.layouts)


def run_group(
    points: Sequence[DecodePoint],
    context: Context,
    number: int,
    link: Callable[[Sequence[DecodePoint], DecodeOptions], list[Pair]],
) -> list[DecodeRecord]:
    """The records of the points of one group (`number` in its section), sampled in turn
    over several memory layouts, with the comparisons `link` names among them; a group
    whose one point runs is sampled alone (over layouts too), and every point of a
    tensor-parallel run alone in one layout (its ranks time in lockstep: decode.run)."""
    device = context.device if context.device is not None else torch.device("cpu")
    if Ranks.joined(points[0].tp, device) is not None:
        records = [run(p, context) for p in points]
        for record in records:
            record.sampling_group = number
        return records
    try:
        prepared = [_prepared_or_failed(p, context) for p in points]
        ready = [r for r in prepared if isinstance(r, Ready)]
        share = CpuShare(device)
        timings = time_together(ready, device, context, link) if ready else []
        ran_for = share.share()
        timed = dict(zip(map(id, ready), timings, strict=True))
    finally:
        if device.type == "cuda":
            torch.cuda.empty_cache()
    records = [r.finish(timed[id(r)], context) if isinstance(r, Ready) else r for r in prepared]
    for r, record in zip(prepared, records, strict=True):
        record.sampling_group = number
        if isinstance(r, Ready):
            record.sampling = INTERLEAVED if len(ready) > 1 else ALONE
            held_cpu(record, ran_for)
    steps = {i: timed[id(r)].step for i, r in enumerate(prepared) if isinstance(r, Ready)}
    fill_comparisons(records, steps, link(points, points[0].options))
    return records


def _prepared_or_failed(point: DecodePoint, context: Context) -> Ready | DecodeRecord:
    """The point prepared (decode.prepare), or the record of how preparing it failed: a
    point that runs out of memory, or fails otherwise, leaves the rest of its group."""
    try:
        return prepare(point, context)
    except Exception as exc:
        status = "oom" if is_oom(exc) else f"error: {type(exc).__name__}: {exc}"
        return failed(point, status, context)


#: A memory layout after the first starts after a buffer of a seeded size, up to
#: PAD_BYTES in steps of PAD_STEP (a cache line), so that what the allocator hands out
#: next does not start where the previous layout's buffers did.
PAD_BYTES, PAD_STEP = 1 << 20, 64


def rebuilt(ready: Sequence[Ready], layout: int, context: Context) -> torch.Tensor:
    """Each point's weights, inputs, cache and workload allocated afresh, as memory layout
    `layout` (decode.prepare, its step checked again), in place of the previous
    layout's, which are dropped first; returns the pad its buffers were allocated after,
    which the layout keeps."""
    device = context.device if context.device is not None else torch.device("cpu")
    for r in ready:
        r.work, r.against, r.inputs = None, [], None  # type: ignore[assignment]
    if device.type == "cuda":  # the device's memory is what the group was sized by
        gc.collect()  # sampling pauses the collector: what cycles held goes now
        torch.cuda.empty_cache()  # and no cached block is handed back as it was
    size = random.Random(layout).randrange(PAD_STEP, PAD_BYTES, PAD_STEP)
    pad = torch.empty(size, dtype=torch.uint8, device=device)
    for r in ready:
        fresh = prepare(r.point, context)
        if not isinstance(fresh, Ready):
            raise RuntimeError(f"memory layout {layout + 1}: {fresh.status}")
        r.work, r.against, r.inputs = fresh.work, fresh.against, fresh.inputs
    return pad


#: A group's steps read their buffers from memory when, between two calls on one copy,
#: the group's other calls have read ROTATE_OVER times the CPU's last-level cache: once
#: was enough on the Intel VM, whose default study read alike over copies of once and
#: twice its 480 MiB L3 (MHA's cached step at 4,096 tokens 7.2 and 6.9 ms, one run
#: each). A group that needs more than MAX_COPIES copies for it is too small to leave
#: the cache at the cost of building them, and is timed on one.
ROTATE_OVER, MAX_COPIES = 1, 64


def copies_for(
    ready: Sequence[Ready],
    device: torch.device,
    free_bytes: Callable[[torch.device], int] | None = None,
    cache: Callable[[torch.device], int | None] | None = None,
) -> int:
    """How many copies of its points' buffers a group's steps rotate over
    (measure.timing.rotating), so that each reads its weights and cache from memory, as
    a step of a whole model does, whose layers far exceed the CPU's last-level cache:
    enough that the copies of the group's weights and caches (DecodeInputs.copied_bytes)
    hold ROTATE_OVER times that cache, all read between two calls on one copy. One,
    timed in whatever of it the cache holds, without `cold_cache`, on a GPU (whose L2
    `flush_l2` empties), where the cache's size is unknown, where one copy holds enough,
    and where the copies would number over MAX_COPIES or fill over half the free memory."""
    options: DecodeOptions = ready[0].point.options
    cold = options.cold_cache and device.type == "cpu"
    size = (cache or cache_bytes)(device) if cold else None
    held = sum(r.inputs.copied_bytes() for r in ready)  # type: ignore[union-attr]
    if not size or not held:
        return 1
    need = math.ceil(ROTATE_OVER * size / held)
    free = (free_bytes or free_memory_bytes)(device)
    return need if need <= MAX_COPIES and need * held <= free // 2 else 1


def time_together(
    ready: Sequence[Ready],
    device: torch.device,
    context: Context,
    link: Callable[[Sequence[DecodePoint], DecodeOptions], list[Pair]],
) -> list[Timings]:
    """Each point's timings: its prefill and its generations alone, its step (with its
    reference calls) round-robin with the other points' steps, each call on the next of
    its copies (`copies_for`), over several memory layouts
    (measure.timing.Timer.sample_layouts, `rebuilt`), until the comparisons `link` names
    among them are as narrow as asked."""
    options: DecodeOptions = ready[0].point.options  # one section's: the same for all
    timer = Timer(device, flush_l2=options.flush_l2)
    pairs = link([r.point for r in ready], options)
    copies = copies_for(ready, device)
    kept: list[torch.Tensor] = []
    over_copies: list[Unit] = []

    def units(layout: int) -> list[Unit]:
        if over_copies:  # copies are layouts already, allocated once for the group
            return over_copies
        if layout:
            with torch.inference_mode(False):  # built as the first layout was (decode.prepare)
                kept[:] = [rebuilt(ready, layout, context)]
        made = []
        for r in ready:
            sets = [(r.work, r.against), *(r.on_copy() for _ in range(copies - 1))]
            with PROVIDERS[r.point.provider].running():
                steps = [(timed_step(work, r.point, device), work.step_setup) for work, _ in sets]
            # what a step is timed against runs right after it: on a copy half a turn away
            half = copies // 2
            against = [rotating([c[i] for _, c in sets], half) for i in range(len(r.against))]
            made.append(Unit([rotating(steps), *against], PROVIDERS[r.point.provider].running))
        if copies > 1:
            over_copies[:] = made
        return made

    def widest(measured: list[list[Measurement]]) -> float:
        """The widest interval of the comparisons and of the in-run ratios."""
        steps = [m[0] for m in measured]
        ratios = [paired_ratio(steps[p.of], steps[p.over]) for p in pairs]
        spans = [relative_half_width(r.median_ms, *interval(r)) for r in ratios]
        spans += [in_run_ratio(m).ci_rel for m in measured if len(m) > 1]
        return max(spans, default=0.0)

    with torch.inference_mode():
        prefills = []
        for r in ready:
            with PROVIDERS[r.point.provider].running():
                prefills.append(time_prefill(timer, r.work, r.point, Timer.sample))
        sampling = options.sampling(device)
        budget = sampling.max_time_s * len(ready)
        measured = timer.sample_layouts(units, sampling, widest, budget)
        timings = [
            step_timings(m, pre, options.reference)
            for m, pre in zip(measured, prefills, strict=True)
        ]
        for t in timings:
            t.copies = copies
        for r, t in zip(ready, timings, strict=True):
            with PROVIDERS[r.point.provider].running():
                t.generation = time_generation(timer, r.work, r.point, Timer.sample)
                t.prefill_peak = prefill_peak(r.work, r.point, device)
    return timings


def fill_comparisons(
    records: Sequence[DecodeRecord], steps: dict[int, Measurement], pairs: Sequence[Pair]
) -> None:
    """Each comparison among the group's timed points into the record of its first point,
    as the record declares it (decode.Sampled): median, p25, p75, per-round samples and
    the 95% interval (`interval`); what it was taken against, and the speed-up (the
    inverse median) shown beside it."""
    for pair in pairs:
        if pair.of not in steps or pair.over not in steps:
            continue
        record, other = records[pair.of], records[pair.over]
        ratio = paired_ratio(steps[pair.of], steps[pair.over])
        summarise(record, f"{pair.name}_median", ratio)
        lo, hi = interval(ratio)
        setattr(record, f"{pair.name}_ci_lo", lo)
        setattr(record, f"{pair.name}_ci_hi", hi)
        declared = DecodeRecord.SAMPLED[pair.name]  # type: ignore[attr-defined]
        if declared.names is not None:
            setattr(record, declared.against, getattr(other, declared.names))
        if declared.inverse is not None:
            setattr(record, declared.inverse, 1 / ratio.median_ms)
            if declared.inverse_of_other:
                setattr(other, declared.inverse, 1.0)
