"""A whole study from one sweep file: every section's points, run one by one, each kept on
disk as soon as it finishes.

After each point its row is appended to `<section>.csv` and `results.json` is rewritten
atomically, so a crash or Ctrl-C keeps every finished point. Points run in a fixed order
(params, kvmem, then decode, with each configuration's no_cache point before its cache
point so the cache row's speed-up is known when it is written); the k-th record of a
section is therefore its k-th point, which is how `resume` knows what is left. A resumed
study must resolve to the same configuration: its hash is stored in results.json.
"""

from __future__ import annotations

import hashlib
import json
import signal
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import UsageError
from ..experiments.decode import DecodeOptions, DecodeRecord, decode_record, is_oom, link_speedups
from ..experiments.kvmem import kvmem_points, kvmem_record
from ..experiments.params import params_record
from ..gate.compare import load_document
from ..measure.devices import resolve_device
from ..measure.environment import collect_environment
from ..measure.timing import measure_peak_gbps
from ..model.architecture import ModelSpec
from ..model.formulas import decode_totals, forward_flops
from ..study.output import append_csv_row, as_dict, document_header, write_csv, write_json_atomic
from ..study.sweep import COMMANDS, Study, StudyConfig, load_config, point_shape, resolve

#: The study `attnbench run` runs without a config file (shipped as package data).
DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "default.yaml"
RESULTS_FILE = "results.json"


@dataclass(frozen=True)
class Task:
    """One point of one section; `index` is its position in the section's order."""

    section: str
    index: int
    point: dict
    spec: ModelSpec | None = None  # the kvmem point's model (windows, MLA)


@dataclass
class Plan:
    """A resolved study: the sections to run, their points in run order, and devices."""

    config: StudyConfig
    text: str
    studies: dict[str, Study]
    devices: dict[str, torch.device]
    tasks: list[Task]

    @property
    def decode_options(self) -> DecodeOptions:
        return DecodeOptions.from_options(self.studies["decode"].options)

    @property
    def device(self) -> torch.device:
        """The device the environment is recorded for: decode's, else kvmem's."""
        return next(iter(self.devices.values()), torch.device("cpu"))

    def section_configs(self) -> dict[str, dict]:
        return {name: study.to_dict() for name, study in self.studies.items()}

    @property
    def resolved_sha256(self) -> str:
        """A hash of what the study measures (not where the file lives)."""
        configs = {name: _without_source(c) for name, c in self.section_configs().items()}
        return hashlib.sha256(json.dumps(configs, sort_keys=True).encode()).hexdigest()

    def config_document(self) -> dict:
        """The `config` of results.json: the file as written and resolved per section."""
        return {
            "source": self.config.source,
            "file_sha256": hashlib.sha256(self.text.encode()).hexdigest(),
            "file_text": self.text,
            "resolved_sha256": self.resolved_sha256,
            "sections": self.section_configs(),
        }


def _without_source(config: dict) -> dict:
    return {k: v for k, v in config.items() if k != "source"}


def plan_study(config_path: str | Path | None = None, device: str | None = None) -> Plan:
    """Resolve every section the file names (all three when it names none); `device`
    overrides the file's device. Bad input raises UsageError before anything runs."""
    path = Path(config_path) if config_path is not None else DEFAULT_CONFIG
    config = load_config(path)
    names = [s for s in COMMANDS if s in config.sections] or list(COMMANDS)
    studies = {name: resolve(config, name, {"device": device}) for name in names}
    devices = {}
    for name in ("decode", "kvmem"):
        if name in studies:
            where = "--device" if device else f"{config.source}: {name}.device"
            devices[name] = resolve_device(studies[name].options["device"], where)
    tasks = []
    for name, study in studies.items():
        if name == "kvmem":
            pairs = kvmem_points(study)
        else:
            points = study.points()
            pairs = [(p, None) for p in (no_cache_first(points) if name == "decode" else points)]
        tasks.extend(Task(name, i, p, spec) for i, (p, spec) in enumerate(pairs))
    return Plan(config, path.read_text(), studies, devices, tasks)


def no_cache_first(points: list[dict]) -> list[dict]:
    """Decode points with each configuration's no_cache point just before its cache point
    (otherwise in grid order), so the speed-up can be filled in as each cache row lands."""
    first: dict[tuple, int] = {}
    for i, p in enumerate(points):
        first.setdefault(_configuration(p), i)
    return sorted(points, key=lambda p: (first[_configuration(p)], p["mode"] != "no_cache"))


def _configuration(point: dict) -> tuple:
    return tuple(sorted((k, v) for k, v in point.items() if k != "mode"))


# --- the dry-run estimate ----------------------------------------------------------------


@dataclass(frozen=True)
class Speeds:
    """Rough device speeds for the dry-run estimate only; nothing measured uses them."""

    flops: float
    bytes_per_s: float
    call_s: float  # fixed cost of one timed call: Python, dispatch, kernel launch
    peak_s: float  # the peak-bandwidth copy measured before decode


SPEEDS = {"cpu": Speeds(2e10, 1e10, 2e-4, 1.5), "cuda": Speeds(5e13, 2e12, 5e-5, 0.5)}
#: Half precision on the CPU runs through slow paths.
CPU_HALF_SLOWDOWN = 8.0
#: Params (a module on the meta device) and kvmem (allocate, count, free) points.
CHEAP_POINT_S = 2e-3


def estimate_seconds(plan: Plan, task: Task) -> float:
    """A rough time for one point, from the analytic bytes and FLOPs."""
    if task.section != "decode":
        return CHEAP_POINT_S
    device = plan.devices["decode"]
    speed = SPEEDS.get(device.type, SPEEDS["cpu"])
    opts, p = plan.decode_options, task.point
    shape, dtype, cached = point_shape(p), p.get("dtype") or "float32", p["mode"] == "cache"
    nbytes, flops = decode_totals(shape, p["batch"], p["prompt_len"], p["gen_len"], dtype, cached)
    if cached and opts.prefill:
        flops += forward_flops(shape, p["batch"], p["prompt_len"], p["prompt_len"], causal=True)
    generation = max(flops / speed.flops, nbytes / speed.bytes_per_s) + p["gen_len"] * speed.call_s
    if device.type == "cpu" and dtype != "float32":
        generation *= CPU_HALF_SLOWDOWN
    return (opts.warmup + opts.repeats) * generation


def estimate_total_seconds(plan: Plan, tasks: Sequence[Task]) -> float:
    """The points' estimates plus the bandwidth measurement when decode runs."""
    decode = any(t.section == "decode" for t in tasks)
    peak = SPEEDS.get(plan.device.type, SPEEDS["cpu"]).peak_s if decode else 0.0
    return peak + sum(estimate_seconds(plan, t) for t in tasks)


# --- running -----------------------------------------------------------------------------


@dataclass
class RunResult:
    out_dir: Path
    document: dict
    total: int  # points in the study
    skipped: int  # already recorded by an earlier run (--resume)
    ran: int
    seconds: float
    interrupted: bool


Progress = Callable[[Sequence[Task]], Generator[Task, None, None]]


def _no_progress(tasks: Sequence[Task]) -> Generator[Task, None, None]:
    yield from tasks


def run_study(
    plan: Plan,
    out_dir: Path,
    resume: bool = False,
    stop: threading.Event | None = None,
    progress: Progress = _no_progress,
) -> RunResult:
    """Run the points not yet recorded in `out_dir`, keeping each one as it finishes.

    `stop` is checked between points: once set, the study ends after the current point.
    `progress` wraps the pending tasks (a progress bar); it may be a generator.
    """
    start = time.perf_counter()
    path = out_dir / RESULTS_FILE
    threads = "decode" in plan.studies and plan.studies["decode"].options["threads"]
    if threads:
        torch.set_num_threads(threads)
    doc = _resumed_document(plan, path) if resume else _new_document(plan, path)
    sections = doc["sections"]
    pending = [t for t in plan.tasks if t.index >= len(sections[t.section]["records"])]
    peak = doc["environment"].get("peak_gbps")
    decoded = _decode_records(path, sections)
    ran = 0
    with closing(progress(pending)) as tasks:
        for task in tasks:
            record = _run_point(plan, task, peak)
            if isinstance(record, DecodeRecord):
                decoded.append(record)
                link_speedups(decoded)
            sections[task.section]["records"].append(as_dict(record))
            append_csv_row(out_dir / f"{task.section}.csv", record)
            write_json_atomic(path, doc)
            ran += 1
            if stop is not None and stop.is_set():
                break
    skipped = len(plan.tasks) - len(pending)
    interrupted = skipped + ran < len(plan.tasks)
    return RunResult(out_dir, doc, len(plan.tasks), skipped, ran, time.perf_counter() - start,
                     interrupted)  # fmt: skip


def _run_point(plan: Plan, task: Task, peak_gbps: float | None):
    point = task.point
    if task.section == "params":
        return params_record(point_shape(point))
    if task.section == "kvmem":
        device = plan.devices["kvmem"] if plan.studies["kvmem"].options["measure"] else None
        try:
            return kvmem_record(point, device, task.spec)
        except Exception as exc:  # one point out of memory must not stop the study
            if not is_oom(exc):
                raise
            record = kvmem_record(point, None, task.spec)
            record.status = "oom"
            return record
    return decode_record(point, plan.devices["decode"], plan.decode_options, peak_gbps)


def _new_document(plan: Plan, path: Path) -> dict:
    """A new results.json with the environment (and peak bandwidth), no records yet."""
    if path.exists():
        raise UsageError(f"--out: {path.parent} already holds results; add --resume to finish "
                         "them, or choose another directory")  # fmt: skip
    environment = collect_environment(plan.device)
    if "decode" in plan.studies:
        environment["peak_gbps"] = measure_peak_gbps(plan.devices["decode"])
    sections = {name: {"config": study.to_dict(), "records": []}
                for name, study in plan.studies.items()}  # fmt: skip
    doc = {**document_header("run", plan.config_document(), environment), "sections": sections}
    write_json_atomic(path, doc)
    return doc


def _resumed_document(plan: Plan, path: Path) -> dict:
    """The saved results.json, checked against `plan`; the CSVs are rewritten from it, so
    a row appended just before a crash (and not in the JSON) is not kept twice."""
    if not path.is_file():
        raise UsageError(f"--resume: no {RESULTS_FILE} in {path.parent} to resume")
    doc = load_results(path)
    if doc["config"].get("resolved_sha256") != plan.resolved_sha256:
        raise UsageError(f"--resume: {path} was recorded with a different configuration "
                         f"({config_difference(doc, plan)}); resume it with the same config, "
                         "or choose another --out")  # fmt: skip
    for name, section in doc["sections"].items():  # the CSVs again, exactly as the JSON has them
        csv_path = path.parent / f"{name}.csv"
        if section["records"]:
            write_csv(csv_path, section["records"])
        else:
            csv_path.unlink(missing_ok=True)
    return doc


def _decode_records(path: Path, sections: dict) -> list[DecodeRecord]:
    """The decode records so far as records again (link_speedups works on those)."""
    try:
        return [DecodeRecord(**r) for r in sections.get("decode", {}).get("records", [])]
    except TypeError:
        raise UsageError(f"--resume: {path}: its decode records come from another version "
                         "of attnbench") from None  # fmt: skip


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


def load_results(path: str | Path) -> dict:
    """A results.json written by `attnbench run`, validated; UsageError otherwise."""
    document = load_document(path)
    if document.command != "run" or document.raw is None:
        raise UsageError(f"{path}: written by `attnbench {document.command}`, not by "
                         "`attnbench run`")  # fmt: skip
    return document.raw


def failed(record: dict) -> bool:
    """The point ran out of memory or failed: its record holds no measurement."""
    status = str(record.get("status"))
    return status == "oom" or status.startswith("error")


def incomplete(doc: dict) -> list[tuple[str, dict]]:
    """(section, record) of every point that ran out of memory or failed."""
    return [(name, r) for name, section in doc["sections"].items()
            for r in section["records"] if failed(r)]  # fmt: skip


# --- Ctrl-C ------------------------------------------------------------------------------


@contextmanager
def stop_on_sigint(stop: threading.Event, notice: Callable[[], None]) -> Iterator[None]:
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
