"""The one runner: every command and every study executes its points here.

A study is sections of typed points. The runner alone sets the threads, collects the
environment, measures the peaks when a timed section has points to run (the copy
bandwidth, and the matmul throughput in each dtype timed: before those points, which are
held against them, and again after them, so that the run can tell whether the host's
speed moved), orders the points, runs them one by one or, where a section groups them, a
group at a time (decode: the points of one context, sampled in turn and compared within
their rounds; an out-of-memory point becomes its record's status), and hands each record
to a store as soon as it exists, so a crash or Ctrl-C keeps every finished point; what a
section writes beside its points' records (params: the whole-model parts of its models)
is made before them and kept in the document and a CSV of its own. The k-th record of a
section is its k-th point, which is how a resumed run knows what is left (a group
recorded in part runs again whole); a resumed study must resolve to the same
configuration, whose hash the store keeps.

torch is imported where something is measured (the peaks, a point's allocation or time,
the threads set), not with the runner: a study that only computes its points (kvmem
without measuring, fit, predict on a named GPU) runs without it, a second sooner.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import closing, contextmanager, nullcontext
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import FieldError, UsageError
from ..experiments.context import Context
from ..measure.environment import cache_bytes, collect_environment
from ..records import as_dict
from .documents import load_results
from .output import Written, add_beside, document_header, write_outputs
from .plan import (
    DEFAULT_CONFIG,
    Plan,
    Task,
    first_difference,
    needs_peaks,
    plan_command,
    plan_study,
)
from .sections import KINDS, RECORD_TYPES, SectionKind, command_of
from .stores import RESULTS_FILE, STOP_SIGNALS, DirectoryStore, MemoryStore

if TYPE_CHECKING:
    import torch

__all__ = [  # planning and storing live beside the runner; these are its public face
    "DEFAULT_CONFIG",
    "RESULTS_FILE",
    "DirectoryStore",
    "MemoryStore",
    "Plan",
    "RunResult",
    "Task",
    "plan_command",
    "plan_study",
    "run_command",
    "run_experiment",
    "run_study",
    "write_section",
]


Store = MemoryStore | DirectoryStore
#: Runs one task (tests inject their own; the points then run one by one).
Executor = Callable[[Task, Context], Any]
Progress = Callable[[Sequence[Task]], Generator[Task, None, None]]


def run_command(
    section: str,
    config_path: str | None,
    overrides: dict[str, Any],
    models: list[str] | None,
    csv_path: str | None = None,
    json_path: str | None = None,
    check: Callable[[Plan], None] | None = None,
    **run_options: Any,
) -> tuple[Plan, RunResult, Written]:
    """A command's one-section study: its flags (`overrides`, `models`) over an optional
    sweep file planned and checked (and by `check`, before anything runs), run through the
    runner, and its records written to `csv_path` and `json_path` (see write_section)."""
    plan = plan_command(section, config_path, overrides, models)
    if check is not None:
        check(plan)
    result = run_study(plan, command=command_of(section), **run_options)
    return plan, result, write_section(section, plan, result, csv_path, json_path)


def write_section(
    section: str, plan: Plan, result: RunResult, csv_path: str | None, json_path: str | None
) -> Written:
    """The records of a section run by its command, with its configuration and the run's
    environment, and the record sets the runner made beside them (SectionKind.beside)."""
    beside = {name: result.records.get(name, []) for name in KINDS[section].beside}
    config = plan.sections[section].to_dict()
    record = KINDS[section].record
    records, environment = result.records[section], result.environment
    return write_outputs(
        command_of(section), records, record, config, environment, csv_path, json_path, beside
    )


def run_experiment(task: Task, context: Context) -> Any:
    return KINDS[task.section].run(task.point, context)


def _no_progress(tasks: Sequence[Task]) -> Generator[Task, None, None]:
    yield from tasks


@dataclass
class RunResult:
    document: dict
    #: This run's records, as objects: each section's, and each set written beside them.
    records: dict[str, list] = field(default_factory=dict)
    total: int = 0  # points in the study
    skipped: int = 0  # already recorded by an earlier run (resume)
    ran: int = 0
    seconds: float = 0.0
    interrupted: bool = False

    @property
    def environment(self) -> dict:
        return self.document["environment"]

    def section_records(self, section: str) -> list[dict]:
        return self.document["sections"][section]["records"]


def run_study(
    plan: Plan,
    store: Store | None = None,
    *,
    command: str = "run",
    resume: bool = False,
    stop: threading.Event | None = None,
    on_interrupt: Callable[[int], None] | None = None,
    progress: Progress = _no_progress,
    execute: Executor | None = None,
    probe_peak: Callable[[torch.device], float] | None = None,
    probe_flops: Callable[[torch.device, torch.dtype], float] | None = None,
) -> RunResult:
    """Run the points of `plan` not yet in `store`, keeping each one as it finishes.

    Points a section runs together (decode: the points of one context, sampled in turn)
    are kept together: a group that an earlier run left part-way is run again whole.
    `execute` runs one task instead (tests inject their own), every point alone;
    `probe_peak` measures the copy bandwidth timed points are held against (default:
    measure.timing.measure_peak_gbps), `probe_flops` the matmul throughput (default:
    measure.timing.measure_peak_tflops). With `on_interrupt`, the first Ctrl-C (or
    SIGTERM, or SIGHUP) sets `stop` and calls it with the signal's number, and the study
    ends after the current group; `stop` is checked between groups. `progress` wraps the
    pending tasks (a progress bar)."""
    start = time.perf_counter()
    store = store if store is not None else MemoryStore()
    stop = stop if stop is not None else threading.Event()
    hold = store.locked() if isinstance(store, DirectoryStore) else nullcontext()
    interrupt = _stop_on_signals(stop, on_interrupt) if on_interrupt else nullcontext()
    with hold, interrupt, _threads(plan.threads):
        groups = _groups(plan, grouped=execute is None)
        doc = (
            _resumed_document(plan, store, groups)
            if resume
            else _new_document(plan, store, command)
        )
        beside = _beside(plan, doc, store)
        sections = doc["sections"]
        pending = [t for t in plan.tasks if t.index >= len(sections[t.section]["records"])]
        env = doc["environment"]
        timed = [t for t in pending if needs_peaks(t)]
        probes = _Probes(env, plan, timed, probe_peak, probe_flops)
        if timed:
            probes.probe(first=env.get("peak_gbps") is None)
            store.save(doc)
        counts = _pre_passes(plan, pending)
        records: dict[str, list] = {**{name: [] for name in plan.sections}, **beside}
        done: dict[tuple[str, int], Any] = {}  # records of a group, until they are kept
        ran = 0
        with closing(progress(pending)) as tasks:
            for task in tasks:
                kind = KINDS[task.section]
                if (task.section, task.index) not in done:
                    peaks = (env.get("peak_gbps"), env.get("peak_tflops"))
                    context = plan.context(task.section, *peaks, counts.get(task.section), env)
                    number, members = groups[task.section, task.index]
                    try:
                        kept = _execute(kind, members, number, context, execute)
                    except FieldError as exc:  # a value that only a point could check
                        raise plan.sections[task.section].locate(exc, task.point) from None
                    done.update(
                        ((t.section, t.index), r) for t, r in zip(members, kept, strict=True)
                    )
                record = done.pop((task.section, task.index))
                records[task.section].append(record)
                sections[task.section]["records"].append(as_dict(record))
                store.append(task.section, record, kind.record)
                store.save(doc)
                ran += 1
                if stop.is_set() and not done:
                    break
        if not stop.is_set() and any(KINDS[t.section].timed for t in pending[:ran]):
            probes.probe()  # again after the timed points: did the host's speed move?
            store.save(doc)
    skipped = len(plan.tasks) - len(pending)
    return RunResult(
        doc,
        records,
        len(plan.tasks),
        skipped,
        ran,
        time.perf_counter() - start,
        skipped + ran < len(plan.tasks),
    )


class _Probes:
    """The peaks a run's timed points are held against, probed into its environment:
    `peak_gbps` (the copy bandwidth) and `peak_tflops` ({dtype: matmul TFLOPS}) from the
    first probe, the points' roofline; every probe's reading in `peak_gbps_probes` and
    `peak_tflops_probes` ({dtype: [TFLOPS, ...]}), the first one included: a run probes
    before its timed points and after them (a resumed run again, each time), and probes
    that disagree say the host's speed moved meanwhile (render.comparisons); and
    `cache_bytes`, the device's last-level cache (a step that fits in it need not read
    memory). Injected probes (tests) take the device (and dtype) alone."""

    def __init__(
        self,
        env: dict,
        plan: Plan,
        timed: Sequence[Task],
        probe_peak: Callable | None,
        probe_flops: Callable | None,
    ) -> None:
        self.env, self.plan = env, plan
        self.dtypes = sorted({t.point.dtype for t in timed})
        self.probe_peak, self.probe_flops = probe_peak, probe_flops

    def probe(self, first: bool = False) -> None:
        from ..measure import timing
        from ..modules.dtypes import torch_dtype

        env, device = self.env, self.plan.device
        quick = {} if first else {"repeats": timing.REPROBE_REPEATS}
        gbps = (self.probe_peak or partial(timing.measure_peak_gbps, **quick))(device)
        flops = self.probe_flops or partial(timing.measure_peak_tflops, **quick)
        tflops = {d: flops(device, torch_dtype(d)) for d in self.dtypes}
        if first:
            env["peak_gbps"], env["peak_tflops"] = gbps, dict(tflops)
            env["cache_bytes"] = cache_bytes(device)
        gbps_probes = env.setdefault("peak_gbps_probes", [])
        if not gbps_probes and not first:  # a study begun before probes were kept
            gbps_probes.append(env.get("peak_gbps"))
        gbps_probes.append(gbps)
        tflops_probes = env.setdefault("peak_tflops_probes", {})
        for dtype, value in tflops.items():
            tflops_probes.setdefault(dtype, []).append(value)


#: A task's group: its number in its section, and its members in run order.
Groups = dict[tuple[str, int], tuple[int, list[Task]]]


def _groups(plan: Plan, grouped: bool) -> Groups:
    """Each task's group (see SectionKind.groups): one task alone in a section that does
    not group, or when not `grouped`."""
    found: Groups = {}
    for name in plan.sections:
        tasks = [t for t in plan.tasks if t.section == name]
        kind = KINDS[name]
        if grouped and kind.groups is not None and tasks:
            device = plan.devices.get(name, plan.device)
            indices = kind.groups([t.point for t in tasks], plan.options.get(name), device)
        else:
            indices = [[i] for i in range(len(tasks))]
        for number, members in enumerate(indices):
            group = [tasks[i] for i in members]
            found.update(((name, t.index), (number, group)) for t in group)
    return found


def _pre_passes(plan: Plan, pending: Sequence[Task]) -> dict[str, dict]:
    """What each section's pre-pass measures for its pending points at once, by section."""
    counts = {}
    for name in plan.sections:
        pre_pass = KINDS[name].pre_pass
        points = [t.point for t in pending if t.section == name]
        if pre_pass is not None and points:
            device = plan.devices.get(name, plan.device)
            counts[name] = pre_pass(points, plan.options.get(name), device)
    return counts


def _execute(
    kind: SectionKind,
    tasks: list[Task],
    number: int,
    context: Context,
    execute: Executor | None,
) -> list:
    """The records of a group of tasks: run together by the section (`run_group`), else
    one by one. A point that runs out of memory (or, in a section that keeps going, fails
    otherwise) gets a record saying so instead of stopping the study; in a group run
    together, every point of the group does."""
    run_group = kind.run_group
    if execute is None and run_group is not None:
        points = [t.point for t in tasks]
        together = partial(run_group, points, context, number, kind.link)
        return _failing_as_records(kind, tasks, context, together)
    run_one = execute or run_experiment
    return [
        _failing_as_records(kind, [t], context, lambda t=t: [run_one(t, context)])[0] for t in tasks
    ]


def _failing_as_records(
    kind: SectionKind, tasks: list[Task], context: Context, run: Callable[[], list]
) -> list:
    """`run()`, or when it raises, a record per task saying how it failed (see _execute)."""
    try:
        return run()
    except Exception as exc:
        if kind.failed is None:
            raise
        from ..measure.memory import is_oom  # torch's errors: only once a point failed

        if is_oom(exc):
            return [kind.failed(t.point, "oom", context) for t in tasks]
        if kind.keeps_going:
            status = f"error: {type(exc).__name__}: {exc}"
            return [kind.failed(t.point, status, context) for t in tasks]
        raise


def _beside(plan: Plan, doc: dict, store: Store) -> dict[str, list]:
    """The record sets the sections write beside their points' (SectionKind.beside), made
    from the sections, put in the document (a key each) and written to a CSV each. A
    resumed study makes them again, replacing its own: they are never kept twice."""
    made = {
        name: make(section)
        for section_name, section in plan.sections.items()
        for name, make in KINDS[section_name].beside.items()
    }
    made = {name: rows for name, rows in made.items() if rows}
    if made:
        add_beside(doc, made)
        for name in made:
            store.rewrite(name, doc[name], RECORD_TYPES[name])
        store.save(doc)
    return made


def _new_document(plan: Plan, store: Store, command: str) -> dict:
    """A new document with the environment, no records yet. A study there that recorded
    nothing (refused at its first point, say) is replaced: nothing of it would be lost."""
    _refuse_stored(store)
    environment = collect_environment(plan.device if plan.uses_torch else None)
    sections = {
        name: {"config": sec.to_dict(), "records": []} for name, sec in plan.sections.items()
    }
    doc = {**document_header(command, plan.config_document(), environment), "sections": sections}
    if plan.shard is not None:
        doc["shard"] = plan.shard
    store.save(doc)
    for name in plan.sections:  # a CSV left there by another study is not appended to
        store.rewrite(name, [], KINDS[name].record)
    return doc


def pending_tasks(plan: Plan, store: Store, resume: bool) -> list[Task]:
    """The tasks run_study would run with `store`, which is checked as it checks it, and
    nothing written: what a dry run lists. Resuming, a group the stored study holds only
    part of is listed whole, as it runs again whole."""
    if not resume:
        _refuse_stored(store)
        return list(plan.tasks)
    doc = _stored_study(plan, store)
    groups = _groups(plan, grouped=True)
    kept = {name: _kept(name, len(s["records"]), groups) for name, s in doc["sections"].items()}
    return [t for t in plan.tasks if t.index >= kept.get(t.section, 0)]


def _refuse_stored(store: Store) -> None:
    """Refuse to start a study over one stored with records (see _recorded_nothing)."""
    if store.exists() and not _recorded_nothing(store):
        raise FieldError(
            "out",
            str(getattr(store, "out_dir", "")),
            "already holds results; resume them, or choose another directory",
        )


def _stored_study(plan: Plan, store: Store) -> dict:
    """The document stored in `store`, refused when it is another study's."""
    doc = store.load()
    if not same_study(doc, plan.resolved_sha256):
        difference = config_difference(doc, plan.section_configs())
        raise UsageError(
            f"resume: {getattr(store, 'path', 'the results')} was recorded with a "
            f"different configuration ({difference}); resume it "
            "with the same configuration, or choose another directory"
        )
    return doc


def _kept(section: str, recorded: int, groups: Groups) -> int:
    """How many of a section's `recorded` records a resumed study keeps: those before a
    group it recorded only part of, which runs again whole."""
    cut = groups.get((section, recorded))
    return cut[1][0].index if cut is not None and cut[1][0].index < recorded else recorded


def _recorded_nothing(store: Store) -> bool:
    """The study in `store` holds no record in any section (a file that cannot be read
    as a study's results is not that)."""
    try:
        doc = store.load()
    except UsageError:
        return False
    return not any(section["records"] for section in doc["sections"].values())


def _resumed_document(plan: Plan, store: Store, groups: Groups) -> dict:
    """The stored document, checked against `plan` (its records too: fields of another
    version of attnbench are refused), without the records of a group it holds only part
    of (that group runs again whole), and with each CSV rebuilt from it when their rows
    disagree (a row appended just before a crash, or a CSV edited or lost)."""
    doc = _stored_study(plan, store)
    if isinstance(store, DirectoryStore):  # before any is written: each takes rows as it is
        for name in doc["sections"]:
            store.check_csv(name, KINDS[name].record)
    for name, section in doc["sections"].items():
        kept = section["records"]
        try:
            for record in kept:
                KINDS[name].record(**record)
        except TypeError:
            reason = f"resume: the {name} records come from another version of attnbench"
            raise UsageError(reason) from None
        keep = _kept(name, len(kept), groups)
        if keep < len(kept):
            del kept[keep:]
            store.save(doc)
            store.rewrite(name, kept, KINDS[name].record)
        elif not isinstance(store, DirectoryStore) or not store.agrees(name, kept):
            store.rewrite(name, kept, KINDS[name].record)
    return doc


def config_difference(doc: dict, configs: dict[str, dict]) -> str:
    """The first difference between a saved study's configuration and `configs` (each
    section's), in words."""
    saved = {name: s.get("config", {}) for name, s in doc["sections"].items()}
    return first_difference(saved, configs, "here")


def same_study(doc: dict, resolved_sha256: str | None) -> bool:
    """`doc` (a study's results) was recorded with the configuration hashed
    `resolved_sha256`: what makes two results the same study, to resume, to merge into or
    to re-render into (other_study)."""
    return resolved_sha256 is not None and doc["config"].get("resolved_sha256") == resolved_sha256


def other_study(out_dir: Path, doc: dict) -> str | None:
    """How the study whose results.json `out_dir` holds differs from study `doc` (merged
    from its shares, or re-rendered), when it is another one (see same_study): writing
    `doc`'s files there would replace that study's, which would no longer agree with its
    results. None when `out_dir` holds no results.json, or `doc`'s study's."""
    saved = DirectoryStore(out_dir).path
    if not saved.is_file():
        return None
    there = load_results(saved)
    if same_study(there, doc["config"].get("resolved_sha256")):
        return None
    return config_difference(there, {n: s.get("config", {}) for n, s in doc["sections"].items()})


@contextmanager
def _threads(count: int | None) -> Iterator[None]:
    """torch's intra-op threads set to `count` (when given) inside, and restored after."""
    if not count:
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextmanager
def _stop_on_signals(stop: threading.Event, notice: Callable[[int], None]) -> Iterator[None]:
    """While inside, the first Ctrl-C, SIGTERM or SIGHUP sets `stop` (and calls `notice`
    with its number) so the study ends after the current group of points; a second one
    raises KeyboardInterrupt at once. A signal that is ignored (SIGHUP under nohup) stays
    ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()
        notice(signum)

    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, *STOP_SIGNALS)}
    caught = {s: h for s, h in previous.items() if h not in (signal.SIG_IGN, None)}
    for sig in caught:
        signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, before in caught.items():
            signal.signal(sig, before)
