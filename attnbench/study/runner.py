"""The one runner: every command and every study executes its points here.

A study is sections of typed points. The runner alone sets the threads, collects the
environment, measures the peak bandwidth (once, when a timed section has points to run),
orders the points, runs them one by one (an out-of-memory point becomes its record's
status), links speed-ups, and hands each record to a store as soon as it exists, so a
crash or Ctrl-C keeps every finished point. The k-th record of a section is its k-th
point, which is how a resumed run knows what is left; a resumed study must resolve to
the same configuration, whose hash the store keeps.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import closing, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..errors import CombinationError, FieldError, MissingFields, Problems, UsageError
from ..experiments.context import Context
from ..measure import timing
from ..measure.devices import resolve_device
from ..measure.environment import collect_environment
from ..measure.memory import is_oom
from ..model.capacity import MAX_SEQUENCES
from ..records import as_dict
from .documents import load_results
from .estimate import peak_seconds, point_seconds
from .output import (
    append_csv_row,
    csv_row_count,
    document_header,
    write_csv,
    write_json_atomic,
)
from .schema import DEFAULT_SECTIONS, FIELDS, SECTIONS, SHAPE_FIELDS, above_maximum, fields_for
from .sections import KINDS, SectionKind
from .sweep import (
    FLAGS_SOURCE,
    FROM_FLAGS,
    MODEL_FIELDS,
    Section,
    StudyConfig,
    load_config,
    resolve,
)

#: The study `attnbench run` runs without a config file (shipped as package data).
DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "default.yaml"
RESULTS_FILE = "results.json"
#: Problems listed before the rest are summed up.
MAX_PROBLEMS = 20
#: Points a study may hold unless told otherwise (`plan_study`'s max_points).
MAX_POINTS = 100_000


@dataclass(frozen=True)
class Task:
    """One point of one section; `index` is its position in the section's order."""

    section: str
    index: int
    point: Any


@dataclass
class Plan:
    """A resolved, validated study: its sections, their points in run order, devices."""

    config: StudyConfig
    sections: dict[str, Section]
    devices: dict[str, torch.device]
    tasks: list[Task]

    @property
    def device(self) -> torch.device:
        """The device the environment is recorded for: decode's, else kvmem's."""
        for name in ("decode", "kvmem"):
            if name in self.devices:
                return self.devices[name]
        return torch.device("cpu")

    @property
    def threads(self) -> int | None:
        decode = self.sections.get("decode")
        return decode.options.get("threads") if decode else None

    def context(self, section: str, peak_gbps: float | None = None) -> Context:
        """What the points of `section` run with; kvmem's device is None when it does not
        measure."""
        sec = self.sections[section]
        device = self.devices.get(section)
        if section == "kvmem" and not sec.options.get("measure", True):
            device = None
        return Context(device, sec.options, peak_gbps if KINDS[section].timed else None)

    def estimate(self, task: Task) -> float:
        """A rough time for one task, in seconds."""
        sec = self.sections[task.section]
        return point_seconds(task.point, self.devices.get(task.section), sec.options)

    def estimate_total(self, tasks: Sequence[Task]) -> float:
        timed = any(KINDS[t.section].timed for t in tasks)
        return (peak_seconds(self.device) if timed else 0.0) + sum(map(self.estimate, tasks))

    def section_configs(self) -> dict[str, dict]:
        return {name: sec.to_dict() for name, sec in self.sections.items()}

    @property
    def resolved_sha256(self) -> str:
        """A hash of what the study measures (not where the file lives)."""
        configs = {name: _without_source(c) for name, c in self.section_configs().items()}
        return hashlib.sha256(json.dumps(configs, sort_keys=True).encode()).hexdigest()

    def config_document(self) -> dict:
        """The `config` of results.json: the file as written and resolved per section."""
        return {
            "source": self.config.source,
            "file_sha256": hashlib.sha256(self.config.text.encode()).hexdigest(),
            "file_text": self.config.text,
            "resolved_sha256": self.resolved_sha256,
            "sections": self.section_configs(),
        }


def _without_source(config: dict) -> dict:
    return {k: v for k, v in config.items() if k != "source"}


class TooManyPoints(UsageError):
    """A study larger than its limit of points, found before any point is built.
    `field` names the setting that raises the limit (None where it cannot be raised)."""

    def __init__(self, source: str | None, sections: Sequence[str], count: int, limit: int,
                 field: str | None = "max_points") -> None:  # fmt: skip
        self.source = source
        self.sections = list(sections)
        self.count = count
        self.limit = limit
        self.field = field
        super().__init__(self.render(lambda name: name))

    def render(self, name: Callable[[str], str]) -> str:
        """The message with the setting that raises the limit named by `name(field)`."""
        where = f"{self.source}: " if self.source else ""
        names = self.sections
        what = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
        hint = f"raise it with {name(self.field)}" if self.field else "give fewer values"
        return (f"{where}{self.count:,} points in {what}, more than the limit of "
                f"{self.limit:,} ({hint})")  # fmt: skip


def point_count(sec: Section) -> int:
    """How many points `sec.points()` gives, from the lengths of its axes alone (as it
    builds them: the grid of its other axes, for each synthetic shape and each model)."""
    wanted = set(KINDS[sec.name].point.__dataclass_fields__)
    shape_axes = (*SHAPE_FIELDS, "num_layers")
    rest = math.prod(
        len(values)
        for name, values in sec.values.items()
        if name not in (*shape_axes, "seq_lens") and name in wanted
    )
    shapes = 0
    if sec.has_shape:
        shapes = math.prod(
            len(sec.values[n]) for n in shape_axes if n in sec.values and n in wanted
        )
    return rest * (shapes + len(sec.models))


def check_limits(sec: Section) -> list[UsageError]:
    """Every value of `sec` above its field's maximum (axes, options and what its models
    bring), and a batch of more than MAX_SEQUENCES listed lengths: checked before any
    point is built, so no size is computed from them."""
    problems: list[UsageError] = []
    for name, value in (*sec.values.items(), *sec.options.items()):
        values = value if isinstance(value, list) else [value]
        if name == "seq_lens" and len(values) > MAX_SEQUENCES:
            reason = f"more than {MAX_SEQUENCES:,} sequences in one batch"
            problems.append(sec.locate(FieldError(name, f"{len(values):,} lengths", reason)))
            continue
        if FIELDS[name].type is not int:
            continue
        found = {}
        for v in values:
            if (reason := above_maximum(name, v)) and v not in found:
                found[v] = sec.locate(FieldError(name, v, reason))
        problems.extend(found.values())
    for model in sec.models:
        for name in MODEL_FIELDS:
            value = getattr(model, name, None)
            if (reason := above_maximum(name, value)) is not None:
                error = FieldError(name, value, reason)
                problems.append(error.located(f"{model.name}: {name} {value}"))
    return problems


def _check_size(sections: dict[str, Section], counts: dict[str, int], max_points: int,
                field: str | None) -> UsageError | None:  # fmt: skip
    """The study's points over `max_points`: one section's, else all of them together."""
    source = next(iter(sections.values())).source if sections else FLAGS_SOURCE
    where = None if source == FLAGS_SOURCE else source
    for name, count in counts.items():
        if count > max_points:
            return TooManyPoints(where, [name], count, max_points, field)
    total = sum(counts.values())
    if total > max_points:
        return TooManyPoints(where, list(counts), total, max_points, field)
    return None


def plan_sections(
    config: StudyConfig,
    sections: dict[str, Section],
    max_points: int = MAX_POINTS,
    limit_field: str | None = "max_points",
) -> Plan:
    """Expand, order and check every point of `sections`, and resolve their devices.
    Every problem is found here, before anything runs: one UsageError lists them all.
    Values above their maximum, and a study of more than `max_points` points (counted
    before they are built; `limit_field` names what raises the limit, None where nothing
    can), stop it before any point is built."""
    if isinstance(max_points, bool) or not isinstance(max_points, int) or max_points < 1:
        raise FieldError("max_points", max_points, "must be an integer >= 1")
    limits = [p for sec in sections.values() for p in check_limits(sec)]
    if limits:
        unique = {str(p): p for p in limits}
        raise Problems(list(unique.values()), MAX_PROBLEMS)
    too_many = _check_size(sections, {n: point_count(s) for n, s in sections.items()},
                           max_points, limit_field)  # fmt: skip
    if too_many is not None:
        raise too_many
    problems: list[UsageError] = []
    devices: dict[str, torch.device] = {}
    tasks: list[Task] = []
    for name, sec in sections.items():
        kind = KINDS[name]
        try:
            if "device" in sec.options:
                devices[name] = resolve_device(sec.options["device"])
            points = sec.points()
        except FieldError as exc:
            problems.append(sec.locate(exc))
            continue
        if not points:
            problems.append(_nothing_to_run(sec))
        problems.extend(_check_points(kind, sec, points))
        ordered = kind.order(points) if kind.order else points
        tasks.extend(Task(name, i, p) for i, p in enumerate(ordered))
    if problems:
        unique = {str(p): p for p in problems}  # one line for a value every section shares
        raise Problems(list(unique.values()), MAX_PROBLEMS)
    return Plan(config, sections, devices, tasks)


def _nothing_to_run(sec: Section) -> UsageError:
    source = None if sec.source == FLAGS_SOURCE else sec.source
    if sec.name == "fit":
        return MissingFields("fit", [["model"]], source)
    return MissingFields(sec.name, [["d_model", "num_heads"], ["model"]], source)


def _check_points(kind: SectionKind, sec: Section, points: list) -> list[UsageError]:
    """One error per distinct problem of the section's points."""
    found: dict[str, UsageError] = {}
    for point in points:
        try:
            kind.check(point)
        except FieldError as exc:
            error: UsageError = sec.locate(exc, point)
        except ValueError as exc:  # an impossible shape: name the values that make it
            error = _combination(sec, point, str(exc))
        else:
            continue
        found.setdefault(str(error), error)
    return list(found.values())


def _combination(sec: Section, point: Any, reason: str) -> UsageError:
    if getattr(point, "model", None):
        return UsageError(f"{point.model}: {reason}")
    given = [n for n in ("d_model", "num_heads", "num_kv_heads", "head_dim")
             if getattr(point, n, None) is not None]  # fmt: skip
    typed = [n for n in given if n in sec.origins]  # what the user set, not defaults
    values = {n: getattr(point, n) for n in typed or given}
    from_file = any(sec.origins.get(n) not in (None, FROM_FLAGS) for n in values)
    return CombinationError(values, reason, sec.source if from_file else None)


def plan_study(
    config_path: str | Path | None = None,
    device: str | None = None,
    names: Sequence[str] | None = None,
    measure: bool | None = None,
    max_points: int = MAX_POINTS,
) -> Plan:
    """A study from a sweep file (the default study when None): every section it names
    (params, kvmem and decode when it names none; `names` to choose). `device` overrides
    the file's device, `measure` whether kvmem allocates its caches; a study of more than
    `max_points` points is refused before any is built."""
    config = load_config(Path(config_path) if config_path is not None else DEFAULT_CONFIG)
    names = names or [s for s in SECTIONS if s in config.sections] or list(DEFAULT_SECTIONS)
    given = {"device": device, "measure": measure}
    sections = {
        n: resolve(config, n, {k: v for k, v in given.items() if k in fields_for(n)}) for n in names
    }
    return plan_sections(config, sections, max_points)


def plan_command(
    section: str,
    config_path: str | Path | None,
    overrides: dict[str, Any],
    models: list[str] | None = None,
) -> Plan:
    """A one-section study: a command's flags over an optional sweep file, of at most
    MAX_POINTS points (a command cannot raise the limit)."""
    config = load_config(config_path)
    sections = {section: resolve(config, section, overrides, models)}
    return plan_sections(config, sections, MAX_POINTS, limit_field=None)


# --- stores ------------------------------------------------------------------------------


class MemoryStore:
    """Keeps the document in memory: what a single command renders and writes at the end."""

    def exists(self) -> bool:
        return False

    def load(self) -> dict:
        raise UsageError("resume: nothing stored in memory to resume")

    def save(self, document: dict) -> None:
        pass

    def append(self, section: str, record: Any, record_type: type) -> None:
        pass

    def rewrite(self, section: str, records: list[dict], record_type: type) -> None:
        pass


#: The lock file `DirectoryStore` keeps in its directory while a study writes there.
LOCK_FILE = ".attnbench.lock"


@dataclass
class DirectoryStore:
    """results.json (rewritten atomically after each point) and one CSV per section
    (appended to) in `out_dir`, written by one process at a time: `locked()` holds
    `out_dir/.attnbench.lock` ("pid host") while a study writes there."""

    out_dir: Path
    #: The last document saved (or that failed to save): what to keep when a write fails.
    document: dict | None = field(default=None, repr=False)
    _lock_held: bool = field(default=False, repr=False)

    @property
    def path(self) -> Path:
        return self.out_dir / RESULTS_FILE

    @property
    def lock_path(self) -> Path:
        return self.out_dir / LOCK_FILE

    def exists(self) -> bool:
        return self.path.exists()

    def load(self) -> dict:
        if not self.path.is_file():
            raise FieldError("out", str(self.out_dir), f"no {RESULTS_FILE} there to resume")
        return load_results(self.path)

    def save(self, document: dict) -> None:
        self.document = document
        write_json_atomic(self.path, document)

    def append(self, section: str, record: Any, record_type: type) -> None:
        append_csv_row(self.csv_path(section), record, record_type)

    def csv_path(self, section: str) -> Path:
        return self.out_dir / f"{section}.csv"

    def rewrite(self, section: str, records: list[dict], record_type: type) -> None:
        """The section's CSV exactly as the JSON has it, so a row appended just before a
        crash (and not in the JSON) is not kept twice, and a CSV left from another study
        (with no results.json) is not appended to."""
        csv_path = self.csv_path(section)
        if records:
            write_csv(csv_path, records, record_type)
        else:
            csv_path.unlink(missing_ok=True)

    def agrees(self, section: str, records: list[dict]) -> bool:
        """The section's CSV holds as many rows as `records` (none: no CSV)."""
        rows = csv_row_count(self.csv_path(section))
        return (rows or 0) == len(records) and (rows is not None or not records)

    # --- one writer at a time ------------------------------------------------------------

    @contextmanager
    def locked(self) -> Iterator[str | None]:
        """Hold the directory's lock inside (re-entrant), creating the directory; yields a
        note when a stale lock (of a process no longer running) was taken over, else None.
        UsageError when another live process holds it; released on the way out, also on
        an exception or Ctrl-C."""
        if self._lock_held:
            yield None
            return
        note = self.acquire()
        try:
            yield note
        finally:
            self.release()

    def acquire(self) -> str | None:
        """Take the lock (see `locked`)."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        me = f"{os.getpid()} {socket.gethostname()}"
        note = None
        for _ in range(3):  # a stale lock is moved aside, then the lock is taken again
            try:
                fd = os.open(self.lock_path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = _read_lock(self.lock_path)
                if holder is None:
                    continue  # removed meanwhile
                if not _stale(holder):
                    raise self._busy(holder) from None
                if self._move_aside(holder):
                    pid, host = _lock_owner(holder)
                    note = (f"{self.lock_path}: process {pid} on {host} that held it is no "
                            "longer running; took its lock over")  # fmt: skip
                continue
            with os.fdopen(fd, "w") as fh:
                fh.write(me + "\n")
            self._lock_held = True
            return note
        raise self._busy(_read_lock(self.lock_path) or "")

    def release(self) -> None:
        """Remove the lock, if it is still this process's."""
        if not self._lock_held:
            return
        self._lock_held = False
        if _read_lock(self.lock_path) == f"{os.getpid()} {socket.gethostname()}":
            self.lock_path.unlink(missing_ok=True)

    def _busy(self, holder: str) -> UsageError:
        pid, host = _lock_owner(holder)
        who = f"process {pid} on {host}" if pid else "another process"
        return FieldError("out", str(self.out_dir), f"in use by {who} (lock file "
                          f"{self.lock_path}); wait for it to finish, or choose another "
                          "directory; remove the lock file only if that process is "
                          "gone")  # fmt: skip

    def _move_aside(self, holder: str) -> bool:
        """Remove a stale lock, unless it changed meanwhile (another process took it
        over first): True when it was removed."""
        aside = self.lock_path.with_name(f"{LOCK_FILE}.{os.getpid()}.stale")
        try:
            os.rename(self.lock_path, aside)
        except FileNotFoundError:
            return False
        if _read_lock(aside) != holder:  # a fresh lock: put it back if none is there
            with contextlib.suppress(FileExistsError):
                os.link(aside, self.lock_path)
            aside.unlink(missing_ok=True)
            return False
        aside.unlink(missing_ok=True)
        return True


def _read_lock(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except FileNotFoundError:
        return None


def _lock_owner(holder: str) -> tuple[int | None, str]:
    """(pid, host) of a lock file's text "pid host"; (None, '?') when unreadable."""
    pid, _, host = holder.partition(" ")
    return (int(pid), host.strip() or "?") if pid.isdigit() else (None, "?")


def _stale(holder: str) -> bool:
    """The lock's process is gone: on this host, and no process has its PID. A lock of
    another host (a shared file system), or one being written, is never stale."""
    pid, host = _lock_owner(holder)
    if pid is None or host != socket.gethostname():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    return False


Store = MemoryStore | DirectoryStore
#: Runs one task: the default runs the section's experiment.
Executor = Callable[[Task, Context], Any]
Progress = Callable[[Sequence[Task]], Generator[Task, None, None]]


def run_experiment(task: Task, context: Context) -> Any:
    return KINDS[task.section].run(task.point, context)


def _no_progress(tasks: Sequence[Task]) -> Generator[Task, None, None]:
    yield from tasks


@dataclass
class RunResult:
    document: dict
    records: dict[str, list] = field(default_factory=dict)  # this run's records, as objects
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
    on_interrupt: Callable[[], None] | None = None,
    progress: Progress = _no_progress,
    execute: Executor = run_experiment,
    probe_peak: Callable[[torch.device], float] | None = None,
) -> RunResult:
    """Run the points of `plan` not yet in `store`, keeping each one as it finishes.

    `execute` runs one task (tests inject their own); `probe_peak` measures the copy
    bandwidth timed points are held against (default: measure.timing.measure_peak_gbps).
    With `on_interrupt`, the first Ctrl-C sets `stop` and calls it, and the study ends
    after the current point; `stop` is checked between points. `progress` wraps the
    pending tasks (a progress bar)."""
    start = time.perf_counter()
    store = store if store is not None else MemoryStore()
    stop = stop if stop is not None else threading.Event()
    hold = store.locked() if isinstance(store, DirectoryStore) else nullcontext()
    interrupt = _stop_on_sigint(stop, on_interrupt) if on_interrupt else nullcontext()
    with hold, interrupt, _threads(plan.threads):
        doc = _resumed_document(plan, store) if resume else _new_document(plan, store, command)
        sections = doc["sections"]
        pending = [t for t in plan.tasks if t.index >= len(sections[t.section]["records"])]
        env = doc["environment"]
        if any(KINDS[t.section].timed for t in pending) and env.get("peak_gbps") is None:
            probe = probe_peak or timing.measure_peak_gbps
            env["peak_gbps"] = probe(plan.devices.get("decode", plan.device))
            store.save(doc)
        records: dict[str, list] = {name: [] for name in plan.sections}
        linked = _linkable(plan, sections)
        ran = 0
        with closing(progress(pending)) as tasks:
            for task in tasks:
                kind = KINDS[task.section]
                context = plan.context(task.section, env.get("peak_gbps"))
                record = _execute(kind, task, context, execute)
                records[task.section].append(record)
                if kind.link is not None:  # earlier rows of its configuration are already in
                    linked[task.section].append(record)
                    kind.link(linked[task.section])
                sections[task.section]["records"].append(as_dict(record))
                store.append(task.section, record, kind.record)
                store.save(doc)
                ran += 1
                if stop.is_set():
                    break
    skipped = len(plan.tasks) - len(pending)
    return RunResult(doc, records, len(plan.tasks), skipped, ran, time.perf_counter() - start,
                     skipped + ran < len(plan.tasks))  # fmt: skip


def _execute(kind: SectionKind, task: Task, context: Context, execute: Executor) -> Any:
    """The task's record; a point that runs out of memory (or, in a section that keeps
    going, fails otherwise) gets a record saying so instead of stopping the study."""
    try:
        return execute(task, context)
    except Exception as exc:
        if kind.failed is None:
            raise
        if is_oom(exc):
            return kind.failed(task.point, "oom", context)
        if kind.keeps_going:
            return kind.failed(task.point, f"error: {type(exc).__name__}: {exc}", context)
        raise


def _linkable(plan: Plan, sections: dict) -> dict[str, list]:
    """The records so far of sections whose records link to each other (speed-ups), as
    record objects again."""
    linked = {}
    for name in plan.sections:
        kind = KINDS[name]
        if kind.link is not None:
            try:
                linked[name] = [kind.record(**r) for r in sections[name]["records"]]
            except TypeError:
                raise UsageError(f"resume: the {name} records come from another version of "
                                 "attnbench") from None  # fmt: skip
    return linked


def _new_document(plan: Plan, store: Store, command: str) -> dict:
    """A new document with the environment, no records yet."""
    if store.exists():
        raise FieldError("out", str(getattr(store, "out_dir", "")), "already holds results; "
                         "resume them, or choose another directory")  # fmt: skip
    environment = collect_environment(plan.device)
    sections = {name: {"config": sec.to_dict(), "records": []}
                for name, sec in plan.sections.items()}  # fmt: skip
    doc = {**document_header(command, plan.config_document(), environment), "sections": sections}
    store.save(doc)
    for name in plan.sections:  # a CSV left there by another study is not appended to
        store.rewrite(name, [], KINDS[name].record)
    return doc


def _resumed_document(plan: Plan, store: Store) -> dict:
    """The stored document, checked against `plan`, with each CSV rebuilt from it when
    their rows disagree (a row appended just before a crash, or a CSV edited or lost)."""
    doc = store.load()
    if doc["config"].get("resolved_sha256") != plan.resolved_sha256:
        raise UsageError(f"resume: {getattr(store, 'path', 'the results')} was recorded with a "
                         f"different configuration ({config_difference(doc, plan)}); resume it "
                         "with the same configuration, or choose another directory")  # fmt: skip
    for name, section in doc["sections"].items():
        if not isinstance(store, DirectoryStore) or not store.agrees(name, section["records"]):
            store.rewrite(name, section["records"], KINDS[name].record)
    return doc


def config_difference(doc: dict, plan: Plan) -> str:
    """The first difference between a saved study's configuration and `plan`'s, in words."""
    saved = {name: s.get("config", {}) for name, s in doc["sections"].items()}
    now = plan.section_configs()
    if set(saved) != set(now):
        return f"sections {', '.join(saved)} there, {', '.join(now)} here"
    for name, config in now.items():
        old, new = _without_source(saved[name]), _without_source(config)
        for key in sorted(set(old) | set(new)):
            if old.get(key) != new.get(key):
                return f"{name}.{key}: {old.get(key)!r} there, {new.get(key)!r} here"
    return "its configuration hash differs"


@contextmanager
def _threads(count: int | None) -> Iterator[None]:
    """torch's intra-op threads set to `count` (when given) inside, and restored after."""
    before = torch.get_num_threads()
    if count:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextmanager
def _stop_on_sigint(stop: threading.Event, notice: Callable[[], None]) -> Iterator[None]:
    """While inside, the first Ctrl-C sets `stop` (and calls `notice`) so the study ends
    after the current point; a second one raises KeyboardInterrupt at once."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()
        notice()

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
