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

import hashlib
import json
import signal
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import closing, contextmanager
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
from ..records import as_dict
from .documents import load_results
from .estimate import peak_seconds, point_seconds
from .output import append_csv_row, document_header, write_csv, write_json_atomic
from .schema import DEFAULT_SECTIONS, SECTIONS, fields_for
from .sections import KINDS, SectionKind
from .sweep import FLAGS_SOURCE, FROM_FLAGS, Section, StudyConfig, load_config, resolve

#: The study `attnbench run` runs without a config file (shipped as package data).
DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "default.yaml"
RESULTS_FILE = "results.json"
#: Problems listed before the rest are summed up.
MAX_PROBLEMS = 20


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


def plan_sections(config: StudyConfig, sections: dict[str, Section]) -> Plan:
    """Expand, order and check every point of `sections`, and resolve their devices.
    Every problem is found here, before anything runs: one UsageError lists them all."""
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
) -> Plan:
    """A study from a sweep file (the default study when None): every section it names
    (params, kvmem and decode when it names none; `names` to choose). `device` overrides
    the file's device, `measure` whether kvmem allocates its caches."""
    config = load_config(Path(config_path) if config_path is not None else DEFAULT_CONFIG)
    names = names or [s for s in SECTIONS if s in config.sections] or list(DEFAULT_SECTIONS)
    given = {"device": device, "measure": measure}
    sections = {
        n: resolve(config, n, {k: v for k, v in given.items() if k in fields_for(n)}) for n in names
    }
    return plan_sections(config, sections)


def plan_command(
    section: str,
    config_path: str | Path | None,
    overrides: dict[str, Any],
    models: list[str] | None = None,
) -> Plan:
    """A one-section study: a command's flags over an optional sweep file."""
    config = load_config(config_path)
    return plan_sections(config, {section: resolve(config, section, overrides, models)})


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


@dataclass
class DirectoryStore:
    """results.json (rewritten atomically after each point) and one CSV per section
    (appended to) in `out_dir`."""

    out_dir: Path

    @property
    def path(self) -> Path:
        return self.out_dir / RESULTS_FILE

    def exists(self) -> bool:
        return self.path.exists()

    def load(self) -> dict:
        if not self.path.is_file():
            raise FieldError("out", str(self.out_dir), f"no {RESULTS_FILE} there to resume")
        return load_results(self.path)

    def save(self, document: dict) -> None:
        write_json_atomic(self.path, document)

    def append(self, section: str, record: Any, record_type: type) -> None:
        append_csv_row(self.out_dir / f"{section}.csv", record, record_type)

    def rewrite(self, section: str, records: list[dict], record_type: type) -> None:
        """The section's CSV exactly as the JSON has it, so a row appended just before a
        crash (and not in the JSON) is not kept twice."""
        csv_path = self.out_dir / f"{section}.csv"
        if records:
            write_csv(csv_path, records, record_type)
        else:
            csv_path.unlink(missing_ok=True)


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
    with _threads(plan.threads):
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
        interrupt = _stop_on_sigint(stop, on_interrupt) if on_interrupt else _nothing()
        with interrupt, closing(progress(pending)) as tasks:
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
    return doc


def _resumed_document(plan: Plan, store: Store) -> dict:
    """The stored document, checked against `plan`, with its CSVs rewritten from it."""
    doc = store.load()
    if doc["config"].get("resolved_sha256") != plan.resolved_sha256:
        raise UsageError(f"resume: {getattr(store, 'path', 'the results')} was recorded with a "
                         f"different configuration ({config_difference(doc, plan)}); resume it "
                         "with the same configuration, or choose another directory")  # fmt: skip
    for name, section in doc["sections"].items():
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
def _nothing() -> Iterator[None]:
    yield


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
