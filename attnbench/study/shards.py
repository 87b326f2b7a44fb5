"""Sharing a study's points among N workers (the ranks of a torchrun job, or the tasks
of a job array): deterministic, every point to exactly one worker, balanced by the
runner's time estimate.

The shares come from the longest-processing-time-first rule: points in decreasing order
of their estimate, each to the worker with the least estimated time so far (ties to the
lower index). It is within 4/3 of the best possible balance, and the same inputs always
give the same shares, so independent workers agree on them without talking. Points that
are compared with each other (decode: the points of one context, sampled in turn) go to
one worker together, so that their comparisons are made, unless that leaves the shares
more than 10% off the best balance (a few large groups on many workers).
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Callable, Hashable, Mapping, Sequence, Set
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import FieldError
from .limits import MAX_SHARDS
from .plan import Plan, Task
from .sections import KINDS


@dataclass(frozen=True)
class Shard:
    """Share `index` of `count` (0-based)."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    """'i/N' (0 <= i < N) as a Shard; FieldError naming the value otherwise."""
    index, sep, count = str(text).strip().partition("/")
    digits = [part.strip() for part in (index, count)]
    if not sep or not all(d.isascii() and d.isdigit() for d in digits):  # not other scripts'
        raise FieldError("shard", text, "expected i/N, e.g. 0/4 (share i of N, from 0)")
    shard = Shard(int(digits[0]), int(digits[1]))
    if not 1 <= shard.count <= MAX_SHARDS:
        raise FieldError("shard", text, f"N must be between 1 and {MAX_SHARDS:,}")
    if shard.index >= shard.count:
        raise FieldError("shard", text, f"i must be below N (0 to {shard.count - 1})")
    return shard


def together(task: Task) -> Hashable:
    """What a task shares with the tasks that must run on the same worker: the decode
    points of one context (the section's `together`), else nothing but itself."""
    key = KINDS[task.section].together
    return (task.section, key(task.point)) if key else (task.section, task.index)


#: How far above the best balance the shares may be for the points of one context to
#: stay together: past it, they are shared point by point.
BALANCE = 1.10


def assign(
    tasks: Sequence[Task],
    estimate: Callable[[Task], float],
    count: int,
    key: Callable[[Task], Hashable] = together,
) -> list[list[Task]]:
    """`tasks` shared among `count` workers, longest first onto the least loaded, tasks of
    one `key` as one, unless that leaves a share more than BALANCE x the best possible
    load (few large groups on many workers): then task by task. Each share keeps the
    study's order."""
    if count < 1:
        raise ValueError(f"count must be at least 1, got {count}")
    costs = [estimate(t) for t in tasks]
    bundles: dict[Hashable, list[int]] = {}
    for i, task in enumerate(tasks):
        bundles.setdefault(key(task), []).append(i)
    shares = _longest_first(list(bundles.values()), costs, count)
    best = max(sum(costs) / count, max(costs, default=0.0))
    if max(sum(costs[i] for i in share) for share in shares) > BALANCE * best:
        shares = _longest_first([[i] for i in range(len(tasks))], costs, count)
    return [[tasks[i] for i in sorted(share)] for share in shares]


def _longest_first(bundles: list[list[int]], costs: list[float], count: int) -> list[list[int]]:
    """Bundles of task indices onto `count` workers, the costliest first onto the least
    loaded (ties to the earlier bundle and the lower worker)."""
    cost = [sum(costs[i] for i in bundle) for bundle in bundles]
    order = sorted(range(len(bundles)), key=lambda b: (-cost[b], bundles[b][0]))
    loads = [(0.0, w) for w in range(count)]  # a heap of (estimated seconds, worker)
    shares: list[list[int]] = [[] for _ in range(count)]
    for b in order:
        load, worker = heapq.heappop(loads)
        shares[worker].extend(bundles[b])
        heapq.heappush(loads, (load + cost[b], worker))
    return shares


@dataclass(frozen=True)
class ShareLoads:
    """A study shared among ranks (`assign`): each rank's tasks and estimated seconds,
    against the whole study's on one rank (`total`)."""

    shares: list[list[Task]]
    loads: list[float]
    total: float

    @property
    def slowest(self) -> float:
        """The study's wall time on the ranks: its slowest rank's load."""
        return max(self.loads)

    @property
    def balance(self) -> float | None:
        """The slowest rank's load over the mean (1.0: perfectly even); None when the
        ranks have nothing to run."""
        mean = sum(self.loads) / len(self.loads)
        return self.slowest / mean if mean > 0 else None


def share_loads(plan: Plan, count: int) -> ShareLoads:
    """`plan` shared among `count` ranks as they would run it, with each one's estimate."""
    shares = assign(plan.tasks, plan.estimate, count)
    loads = [plan.estimate_total(share) for share in shares]
    return ShareLoads(shares, loads, plan.estimate_total(plan.tasks))


def share_of(
    tasks: Sequence[Task],
    estimate: Callable[[Task], float],
    shard: Shard,
    key: Callable[[Task], Hashable] = together,
) -> list[Task]:
    """The tasks of `shard` (see assign)."""
    return assign(tasks, estimate, shard.count, key)[shard.index]


#: Where the shares of a study keep their results, under its output directory.
SHARDS_DIR = "shards"


def shard_dir(out_dir: Path, shard: Shard) -> Path:
    """The directory one share writes: DIR/shards/<i>-of-<N>/, its own results.json and
    CSVs, so workers never write the same file."""
    return out_dir / SHARDS_DIR / f"{shard.index}-of-{shard.count}"


def share_named(path: Path) -> Shard | None:
    """The share whose directory `path` is named as (DIR/shards/<i>-of-<N>/), or None."""
    found = re.fullmatch(r"([0-9]{1,9})-of-([0-9]{1,9})", path.name)
    if found is None or path.parent.name != SHARDS_DIR:
        return None
    return Shard(int(found[1]), int(found[2]))


def shard_plan(plan: Plan, shard: Shard, done: Mapping[str, Set[int]] | None = None) -> Plan:
    """The plan of one share of the points not `done` (indices per section, recorded by
    an earlier split of the study): its tasks, numbered within the share, and (in
    `shard`) where each sits in the whole study, which merging puts back together."""
    done = done or {}
    left = [t for t in plan.tasks if t.index not in done.get(t.section, ())]
    return indexed_plan(plan, shard, share_of(left, plan.estimate, shard))


def indexed_plan(plan: Plan, shard: Shard, share: Sequence[Task]) -> Plan:
    """The plan running the tasks `share` of `plan` as share `shard`."""
    tasks: list[Task] = []
    indices: dict[str, list[int]] = {name: [] for name in plan.sections}
    for task in share:
        tasks.append(Task(task.section, len(indices[task.section]), task.point))
        indices[task.section].append(task.index)
    points = {name: sum(t.section == name for t in plan.tasks) for name in plan.sections}
    about = {"index": shard.index, "count": shard.count, "indices": indices, "points": points}
    return replace(plan, tasks=tasks, shard=about)
