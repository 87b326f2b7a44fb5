"""What an experiment gets besides its point: where to measure, and the run's peak."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Counted:
    """A step's CPU instructions and what counted them ('valgrind-3.19.0'): counts by
    different counters are not compared."""

    instructions: int
    counter: str | None


@dataclass(frozen=True)
class Context:
    """`device` None means compute only (nothing is allocated or timed). `peak_gbps` is
    the copy bandwidth and `peak_tflops` the matmul throughput per dtype the runner
    measured on `device` before the first timed point. A point carries its section's
    options itself."""

    device: torch.device | None = None
    peak_gbps: float | None = None
    peak_tflops: Mapping[str, float] = field(default_factory=dict)
    #: What the section's pre-pass counted for all its points at once, by point (decode:
    #: each cached step's instructions, or why there is no count).
    counts: Mapping[Any, Counted | str] = field(default_factory=dict)
    #: The environment the runner recorded for the run (its peaks among it), for a
    #: point that is predicted on this machine as the run measured it.
    environment: Mapping[str, Any] = field(default_factory=dict)


def grid_order(points: list, options: object = None) -> list:
    """The run order of a section whose points run as its grid lists them (the `order` of
    study.sections.Experiment)."""
    return points


def no_links(points: list, options: object = None) -> list:
    """The comparisons among the points of a section that compares none of them with
    another (the `link` of study.sections.Experiment)."""
    return []
