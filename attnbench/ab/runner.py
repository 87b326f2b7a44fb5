"""The A/B run: every decode point of a study timed by both sides in turn, and gated.

Per point, one warm-up visit per side (not counted), then `rounds` rounds of four visits
in ABBA order: base, head, head, base. Each round gives two (base, head) pairs measured
next to each other, the first visit with the second and the fourth with the third, so a
drift of the machine during a round weighs on both sides of each pair alike. The pairs
are judged by gate.paired; the findings make a compare.Comparison, shown and gated as
`attnbench compare` shows and gates its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..errors import FieldError, UsageError
from ..experiments.context import Context
from ..experiments.decode import DecodePoint, DecodeRecord, analytic_record
from ..gate.compare import Comparison, Finding, Mismatch, Thresholds, compare_rows
from ..gate.paired import ABBA, WARMUP, abba_pairs, judge_paired
from ..measure import stats
from ..records import Kind, as_dict, failed, field_kinds
from ..study.plan import Plan, Task, plan_command, study_sections
from ..study.sweep import check_value, load_config
from .sides import Side
from .workers import Worker, workers

METRIC = "step_ms_median"
OK = "ok"
#: Options every visit runs with, whatever each side's defaults: only the step at a fixed
#: context is compared, timed alone (a version that also times it interleaved with
#: reference calls, sample by sample, would otherwise time it differently from one that
#: does not).
VISIT_OPTIONS = {"prefill": False, "reference": "none"}

Progress = Callable[[Sequence[Task]], Iterable[Task]]


def visit_order(rounds: int) -> list[tuple[int, str]]:
    """(round, side) of every visit of one point: the warm-up (round 0, head then base),
    then rounds 1..`rounds` in ABBA order. Warming head up first makes every round alike:
    its first visit, base's, follows a visit by base too (the warm-up, then the previous
    round's last), so of each round's two pairs, one has base right after itself and head
    right after base, the other the reverse (a process's own caches, and the threads of
    the other one still spinning, weigh on both sides alike)."""
    return [(WARMUP, "head"), (WARMUP, "base")] + [
        (r, side) for r in range(1, rounds + 1) for side in ABBA
    ]


def plan_points(
    study: str, visit_time: float, device: str | None = None, threads: int | None = None
) -> Plan:
    """The timed decode points of `study`, as head's code reads it: only the step at a
    fixed context is compared, so no generations (gen_len 0) and no timed prefill; each
    visit samples for `visit_time` seconds at the most."""
    reason = check_value("max_time", visit_time)
    if reason:
        raise FieldError("visit_time", visit_time, reason)
    sections = study_sections(load_config(study))
    if "decode" not in sections:
        raise UsageError(
            f"{study}: no decode section: ab times the decode steps a study runs "
            f"(this one runs {', '.join(sections)})"
        )
    overrides: dict[str, Any] = {"gen_len": [0], "max_time": visit_time, **VISIT_OPTIONS}
    if device is not None:
        overrides["device"] = device
    if threads is not None:
        overrides["threads"] = threads
    plan = plan_command("decode", study, overrides)
    split = sorted({t.point.tp for t in plan.tasks if t.point.tp > 1})
    if split:
        raise UsageError(
            f"{study}: decode.tp {split[0]}: a side runs in one process; "
            "tensor-parallel points cannot be compared this way"
        )
    return plan


@dataclass(frozen=True)
class Visit:
    """One visit of a point by one side: its step median (None when its status is not
    ok) and status."""

    round: int
    side: str
    step_ms_median: float | None
    status: str


@dataclass
class PointResult:
    point: DecodePoint
    config: dict[str, Any]
    visits: list[Visit] = field(default_factory=list)

    def counted(self, side: str) -> list[Visit]:
        return [v for v in self.visits if v.round != WARMUP and v.side == side]

    def status(self, side: str) -> str:
        """The side's first status other than ok, else ok."""
        return next((v.status for v in self.visits if v.side == side and v.status != OK), OK)

    def pairs(self) -> list[tuple[float, float]]:
        """(base, head) step medians measured next to each other (gate.paired.abba_pairs)."""
        return abba_pairs([(v.round, v.side, v.step_ms_median) for v in self.visits])

    def median(self, side: str) -> float | None:
        """The median of the side's counted visits' step medians."""
        times = [v.step_ms_median for v in self.counted(side) if v.step_ms_median is not None]
        return stats.median(times) if times else None

    def findings(self, th: Thresholds) -> list[Finding]:
        """The step's paired verdict; when a side did not time the point (wrong,
        unsupported, an error), the verdicts compare gives two rows with those statuses."""
        base, head = self.status("base"), self.status("head")
        if base != OK or head != OK:
            rows = [
                {"status": status, METRIC: self.median(side) if status == OK else None}
                for side, status in (("base", base), ("head", head))
            ]
            return compare_rows("decode", self.config, rows[0], rows[1], th, Mismatch(), False)
        pairs = self.pairs()
        judgement = judge_paired([b for b, _ in pairs], [h for _, h in pairs], th)
        return [
            Finding(
                "decode",
                self.config,
                METRIC,
                Kind.TIMING,
                self.median("base"),
                self.median("head"),
                **asdict(judgement),
            )
        ]

    def label(self) -> str:
        """'MHA attnbench float32 batch 1 context 16 cache'."""
        c = self.config
        name = c["model"] or c["variant"]
        return (
            f"{name} {c['provider']} {c['dtype']} batch {c['batch']} context "
            f"{c['prompt_len']} {c['mode']}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "visits": [
                {"round": v.round, "side": v.side, METRIC: v.step_ms_median, "status": v.status}
                for v in self.visits
            ],
        }


@dataclass
class AbResult:
    base: Side
    head: Side
    rounds: int
    plan: Plan
    threads: int
    points: list[PointResult] = field(default_factory=list)
    greetings: dict[str, dict[str, Any]] = field(default_factory=dict)

    def comparison(self, th: Thresholds, fail_on_improvement: bool = False) -> Comparison:
        """The findings of every point, as compare would show and gate them."""
        result = Comparison(
            f"base {self.base.label}", f"head {self.head.label}", th, fail_on_improvement
        )
        for point in self.points:
            result.findings += point.findings(th)
        visit_s = self.plan.sections["decode"].options["max_time"]
        result.notes.append(
            f"{_count(len(self.points), 'point')} in "
            f"{_count(self.rounds, 'round')} of ABBA visits of up to "
            f"{visit_s:g} s each, {_count(self.threads, 'thread')}; a change "
            "is the median of the paired ratios head / base"
        )
        for p in self.points:
            base, head = p.status("base"), p.status("head")
            if base != OK and head != OK:
                result.notes.append(
                    f"{p.label()}: timed by neither side (base {base}; head {head})"
                )
        return result

    def head_failures(self) -> list[str]:
        """The statuses of the points head ran out of memory or failed on (compare shows
        their step as missing, which does not fail a gate on its own)."""
        statuses = [p.status("head") for p in self.points]
        return [s for s in statuses if failed({"status": s})]

    def to_dict(self) -> dict[str, Any]:
        """The `ab` block of the JSON: the sides, the order, and every visit's median."""
        return {
            "base": self._side(self.base),
            "head": self._side(self.head),
            "rounds": self.rounds,
            "order": "".join("A" if s == "base" else "B" for s in ABBA),
            "visit_time_s": self.plan.sections["decode"].options["max_time"],
            "threads": self.threads,
            "device": str(self.plan.devices.get("decode", self.plan.device)),
            "points": [p.to_dict() for p in self.points],
        }

    def _side(self, side: Side) -> dict[str, Any]:
        return {"sha": side.sha, "source": str(side.source), **self.greetings.get(side.name, {})}


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' * (n != 1)}"


def config_of(point: DecodePoint, device: torch.device) -> dict[str, Any]:
    """The key fields of the point's decode record: what names its row."""
    record = as_dict(analytic_record(point, Context(device)))
    return {k: record[k] for k, kind in field_kinds(DecodeRecord).items() if kind is Kind.KEY}


def time_point(
    point: DecodePoint,
    config: dict,
    by_side: dict[str, Worker],
    rounds: int,
    options: dict[str, Any],
) -> PointResult:
    """Every visit of one point in visit_order. A side that does not time the step (a
    status other than ok: wrong, unsupported, an error) ends the point, after both
    warm-up visits, so that both sides' statuses are known."""
    result = PointResult(point, config)
    sent = {k: v for k, v in asdict(point).items() if k != "options"}  # `options` are sent
    for round_, side in visit_order(rounds):
        answer = by_side[side].visit(sent, options)
        median, status = answer.get(METRIC), answer.get("status") or OK
        if status == OK and median is None:
            status = "error: the worker sent no step time"
        result.visits.append(Visit(round_, side, median, status))
        if any(v.status != OK for v in result.visits) and len(result.visits) >= 2:
            break
    return result


def _all(tasks: Sequence[Task]) -> Iterator[Task]:
    yield from tasks


def run_ab(
    plan: Plan, base: Side, head: Side, rounds: int, logs: Path, progress: Progress = _all
) -> AbResult:
    """Time every point of `plan` with both sides, their workers logging to `logs`, each
    with the study's torch threads (default: torch's default here)."""
    threads = plan.threads or torch.get_num_threads()
    device = plan.devices.get("decode", plan.device)
    options = {**plan.sections["decode"].options, **VISIT_OPTIONS}
    result = AbResult(base, head, rounds, plan, threads)
    with workers([base, head], logs, threads, str(device)) as (base_worker, head_worker):
        result.greetings = {w.side.name: w.greeting for w in (base_worker, head_worker)}
        by_side = {"base": base_worker, "head": head_worker}
        for task in progress(plan.tasks):
            config = config_of(task.point, device)
            result.points.append(time_point(task.point, config, by_side, rounds, options))
    return result
