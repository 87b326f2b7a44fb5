"""The kinds of section a study can hold, and what the runner needs to know of each."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..experiments import decode, fit, instructions, interleave, kvmem, params, whole_model


@dataclass(frozen=True)
class SectionKind:
    """`run(point, context)` measures one point; `check(point)` raises for a point that
    cannot run, before anything runs; `failed(point, status)` is the record of a point that
    ran out of memory (None: such a point stops the study). A section that `keeps_going`
    records any other failure of a point as an `error: ...` status and goes on.
    `check_section(values, options, given)` raises for options that do not fit the axes;
    `order(points, options)` gives the run order (and may leave points out);
    `groups(points, options, device)` puts the points, in run order, into groups that
    `run_group(points, context, number)` runs together, returning their records (decode:
    the points compared with each other, sampled in turn); `together(point)` is what the
    points of a group share (a study shared among workers keeps them on one);
    `pre_pass(points, options, device)` measures what is measured for all the points at
    once before any runs (decode: instruction counts, in one valgrind process), which each
    point finds in its context's `counts`."""

    name: str
    point: type
    record: type
    run: Callable[..., Any]
    check: Callable[[Any], None]
    failed: Callable[[Any, str], Any] | None = None
    order: Callable[[list, dict], list] | None = None
    groups: Callable[[list, dict, torch.device], list[list[int]]] | None = None
    together: Callable[[Any], Any] | None = None
    run_group: Callable[[list, Any, int], list] | None = None
    check_section: Callable[[dict, dict, set], None] | None = None
    pre_pass: Callable[[list, dict, torch.device], dict] | None = None
    timed: bool = False
    measures: bool = False
    keeps_going: bool = False


KINDS: dict[str, SectionKind] = {
    "params": SectionKind(
        "params", params.ParamsPoint, params.ParamsRecord, params.run, params.check
    ),
    "kvmem": SectionKind(
        "kvmem",
        kvmem.KvmemPoint,
        kvmem.KvmemRecord,
        kvmem.run,
        kvmem.check,
        failed=kvmem.failed,
        measures=True,
    ),
    "decode": SectionKind(
        "decode",
        decode.DecodePoint,
        decode.DecodeRecord,
        decode.run,
        decode.check,
        failed=decode.failed,
        order=decode.run_order,
        groups=interleave.sampling_groups,
        run_group=interleave.run_group,
        together=decode.context_of,
        check_section=decode.check_section,
        pre_pass=instructions.section_counts,
        timed=True,
        measures=True,
        keeps_going=True,
    ),
    "fit": SectionKind("fit", fit.FitPoint, fit.FitRecord, fit.run, fit.check),
}


#: Every record type by the name of the records it holds: the sections', and the
#: whole-model part records `params` writes beside its own.
RECORD_TYPES: dict[str, type] = {
    **{name: kind.record for name, kind in KINDS.items()},
    "model_parts": whole_model.ModelPartRecord,
}


def record_type(section: str) -> type | None:
    """The record dataclass of a section (None for a section this version does not know)."""
    return RECORD_TYPES.get(section)
