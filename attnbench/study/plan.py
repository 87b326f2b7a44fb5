"""Planning a study: its sections expanded into typed points, ordered, and every point
checked (limits, shapes, capacity) before anything runs; all problems reported at once."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import CombinationError, FieldError, MissingFields, Problems, UsageError
from ..experiments.context import Context
from ..measure.devices import check_device_name, resolve_device
from ..model.capacity import MAX_SEQUENCES, positive_int
from ..model.dtypes import QUANTIZED_KV_DTYPES
from ..model.weights import BLOCKS, GROUPED, QUANTIZED, WEIGHT_ONLY
from .limits import MAX_POINTS
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

if TYPE_CHECKING:
    import torch

#: The study `attnbench run` runs without a config file (shipped as package data).
DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "default.yaml"
#: Problems listed before the rest are summed up.
MAX_PROBLEMS = 20


@dataclass(frozen=True)
class Task:
    """One point of one section; `index` is its position in the section's order."""

    section: str
    index: int
    point: Any


def needs_peaks(task: Task) -> bool:
    """Whether a task is held against the peaks the run measures: a timed section's, or
    one whose kind wants them (SectionKind.wants_peaks)."""
    kind = KINDS[task.section]
    return kind.timed or (kind.wants_peaks is not None and kind.wants_peaks(task.point))


@dataclass
class Plan:
    """A resolved, validated study: its sections, their points in run order, and the
    devices of the sections that use one (resolved: torch), by section."""

    config: StudyConfig
    sections: dict[str, Section]
    devices: dict[str, torch.device]
    tasks: list[Task]
    #: Each section's typed options (SectionKind.options), resolved once; None: it has none.
    options: dict[str, Any] = field(default_factory=dict)
    #: For one share of a study (study.shards): which points of each section it runs.
    shard: dict | None = None

    @property
    def device(self) -> torch.device:
        """The device the environment is recorded for: a timed section's, else that of one
        that measures on its device (SectionKind.measures), else the CPU (asked for where
        the run uses torch all the same: see uses_torch)."""
        measuring = [name for name in self.devices if KINDS[name].measures]
        for name in sorted(measuring, key=lambda name: not KINDS[name].timed):
            return self.devices[name]
        import torch

        return torch.device("cpu")

    @property
    def uses_torch(self) -> bool:
        """Whether the run's results depend on torch: it measures on the device of a
        section that measures on it, or this machine's peaks for a point held against them
        (predict on this machine), or a section counts its points on torch modules
        (params). A run that only computes its points (kvmem without measuring, fit,
        predict on a named GPU) runs without torch, and records its environment so."""
        if any(KINDS[name].measures for name in self.devices):
            return True
        if any(KINDS[name].counts_on_torch for name in self.sections):
            return True
        return any(needs_peaks(task) for task in self.tasks)

    @property
    def threads(self) -> int | None:
        """torch's threads for the study: the first that a section's options set."""
        return next(
            (s.options["threads"] for s in self.sections.values() if s.options.get("threads")), None
        )

    def context(
        self,
        section: str,
        peak_gbps: float | None = None,
        peak_tflops: dict | None = None,
        counts: dict | None = None,
        environment: Mapping[str, Any] | None = None,
    ) -> Context:
        """What the points of `section` run with; no device for a section whose options
        measure nothing (SectionKind.on_device). Only timed sections get the peaks, and
        what their pre-pass counted, and those that want the peaks (predict) get them
        with the run's device, where it measured them, and the `environment` the run
        recorded."""
        kind = KINDS[section]
        device = self.devices.get(section)
        if kind.wants_peaks is not None:  # the peaks of the run's device, where measured
            measured_on = self.device if peak_gbps is not None else None
            return Context(measured_on, peak_gbps, peak_tflops or {}, environment=environment or {})
        if not kind.timed:
            return Context(device)
        return Context(device, peak_gbps, peak_tflops or {}, counts or {})

    def estimate(self, task: Task) -> float:
        """A rough time for one task, in seconds."""
        from .estimate import point_seconds  # decode's estimates: torch

        options = self.options.get(task.section)
        return point_seconds(task.point, self.devices.get(task.section), options)

    def estimate_total(self, tasks: Sequence[Task]) -> float:
        from .estimate import peak_seconds

        timed = any(KINDS[t.section].timed for t in tasks)
        return (peak_seconds(self.device) if timed else 0.0) + sum(map(self.estimate, tasks))

    def section_configs(self) -> dict[str, dict]:
        return {name: sec.to_dict() for name, sec in self.sections.items()}

    @property
    def resolved_sha256(self) -> str:
        """A hash of what the study measures (not where the file lives)."""
        configs = {name: without_source(c) for name, c in self.section_configs().items()}
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


def without_source(config: dict) -> dict:
    return {k: v for k, v in config.items() if k != "source"}


def first_difference(there: dict[str, dict], mine: dict[str, dict], where: str) -> str:
    """The first difference between two studies' section configurations, in words:
    'decode.prompt_len: [16] there, [64] here' (`where` names the second)."""
    if set(there) != set(mine):
        return f"sections {', '.join(there)} there, {', '.join(mine)} {where}"
    for name, config in mine.items():
        old, new = without_source(there[name]), without_source(config)
        for key in sorted(set(old) | set(new)):
            if old.get(key) != new.get(key):
                return f"{name}.{key}: {old.get(key)!r} there, {new.get(key)!r} {where}"
    return "its configuration hash differs"


class TooManyPoints(UsageError):
    """A study larger than its limit of points, found before any point is built.
    `field` names the setting that raises the limit (None where it cannot be raised)."""

    def __init__(
        self,
        source: str | None,
        sections: Sequence[str],
        count: int,
        limit: int,
        field: str | None = "max_points",
    ) -> None:
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
        return (
            f"{where}{self.count:,} points in {what}, more than the limit of "
            f"{self.limit:,} ({hint})"
        )


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


def _check_size(
    sections: dict[str, Section], counts: dict[str, int], max_points: int, field: str | None
) -> UsageError | None:
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
    positive_int("max_points", max_points)
    if max_points > MAX_POINTS:
        raise FieldError("max_points", max_points, f"must be <= {MAX_POINTS:,}")
    limits = [p for sec in sections.values() for p in check_limits(sec)]
    if limits:
        unique = {str(p): p for p in limits}
        raise Problems(list(unique.values()), MAX_PROBLEMS)
    too_many = _check_size(
        sections, {n: point_count(s) for n, s in sections.items()}, max_points, limit_field
    )
    if too_many is not None:
        raise too_many
    problems: list[UsageError] = []
    devices: dict[str, torch.device] = {}
    tasks: list[Task] = []
    options: dict[str, Any] = {}
    for name, sec in sections.items():
        kind = KINDS[name]
        try:
            if "device" in sec.options:
                if kind.on_device is None or kind.on_device(sec.options):
                    devices[name] = resolve_device(sec.options["device"])
                else:  # a device left unused: its name is checked, not whether it is here
                    check_device_name(sec.options["device"])
                    if sec.origins.get("device") == FROM_FLAGS:  # a file's may serve a flag's mode
                        raise FieldError(
                            "device",
                            sec.options["device"],
                            f"has no effect: the {name} section uses no device with its options",
                        )
            _check_cuda_only(kind, sec, devices.get(name))
            if kind.options is not None:
                options[name] = kind.options(sec.options, devices.get(name))
            if kind.check_section is not None:
                kind.check_section(sec.values, options.get(name), set(sec.origins))
            points = sec.points(options.get(name))
        except FieldError as exc:
            problems.append(sec.locate(exc))
            continue
        except CombinationError as exc:
            problems.append(_in_file(sec, exc))
            continue
        if not points:
            problems.append(_nothing_to_run(sec))
        found = _check_points(kind, sec, points)
        if not found and kind.scaled is not None:
            found = _unused_groups(kind.scaled, sec, points)
            points = _distinct(kind, points) if not found else points
        problems.extend(found)
        ordered = kind.order(points, options.get(name)) if kind.order else points
        if points and not ordered:
            problems.append(_all_left_out(sec, len(points)))
        tasks.extend(Task(name, i, p) for i, p in enumerate(ordered))
    if problems:
        unique = {str(p): p for p in problems}  # one line for a value every section shares
        raise Problems(list(unique.values()), MAX_PROBLEMS)
    return Plan(config, sections, devices, tasks, options=options)


def _check_cuda_only(kind: SectionKind, sec: Section, device: torch.device | None) -> None:
    """A switch that acts on a CUDA device alone (SectionKind.cuda_only), set by a flag
    for a section on another device: it would change nothing but a row's status."""
    if device is None or device.type == "cuda":
        return
    for name in kind.cuda_only:
        if True in sec.listed(name) and sec.origins.get(name) == FROM_FLAGS:
            raise FieldError(name, True, f"has no effect on {device}: it needs a CUDA device")


def _nothing_to_run(sec: Section) -> UsageError:
    source = None if sec.source == FLAGS_SOURCE else sec.source
    shapes = [["d_model", "num_heads"]] if "d_model" in fields_for(sec.name) else []
    return MissingFields(sec.name, [*shapes, ["model"]], source)


def _all_left_out(sec: Section, count: int) -> UsageError:
    """A section whose points its run order all leaves out (see each kind's `order`)."""
    where = "" if sec.source == FLAGS_SOURCE else f"{sec.source}: "
    return UsageError(
        f"{where}nothing to run for {sec.name}: its {count:,} points are all left out "
        "of the run (a point its other values do not time)"
    )


def _in_file(sec: Section, error: CombinationError) -> CombinationError:
    """`error` from values a section's check found together, at the sweep file when one
    of them was set there."""
    from_file = any(sec.origins.get(n) not in (None, FROM_FLAGS) for n in error.values)
    if not from_file or error.source is not None:
        return error
    return CombinationError(error.values, error.reason, sec.source)


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


#: The options of quantised formats (their scales' groups and dtype, the weights' head):
#: the format each sets (as the kinds' scaled name them: "weights group", the weights of
#: a format whose group may be set), the dtype option that quantises it, and the dtypes
#: that do.
SCALE_GROUPS = {
    "weights_group": ("weights group", "weights_dtype", GROUPED),
    "quantize_head": ("head", "weights_dtype", QUANTIZED),
    "keep_attention": ("weights", "weights_dtype", QUANTIZED),
    "weight_only_kernel": ("weight-only weights", "weights_dtype", WEIGHT_ONLY),
    "kv_scale_group": ("kv", "kv_dtype", QUANTIZED_KV_DTYPES),
    "scale_dtype": ("kv scales", "kv_dtype", QUANTIZED_KV_DTYPES),
}


NO_CACHED_SCALES = (
    "has no effect: the cache stores no scales (its scale is one per tensor, float8's "
    "default; {kv_scale_group} vector or a group size stores them)"
)


def _unused_groups(
    scaled: Callable[[Any], frozenset[str]], sec: Section, points: list
) -> list[UsageError]:
    """A scale group given (by a flag, or in the section itself: one shared by the file's
    sections may serve another) for a format that no point quantises: it would change
    nothing."""
    quantised = frozenset().union(*(scaled(p) for p in points))
    errors: list[UsageError] = []
    for name, (fmt, dtype_field, dtypes) in SCALE_GROUPS.items():
        # a switch or group set, or a choice other than the field's default
        given = [v for v in sec.listed(name) if v and v != FIELDS[name].default]
        if not (sec.sets_itself(name) and given) or fmt in quantised:
            continue
        choices = f"{', '.join(dtypes[:-1])} or {dtypes[-1]}"
        if fmt == "weights group" and "weights" in quantised:  # in block formats alone
            blocks = " and ".join(BLOCKS)
            reason = f"has no effect: {blocks} scale the blocks their formats fix"
        elif fmt == "weight-only weights":
            reason = "has no effect: no weights are weight-only"
        elif fmt == "kv scales" and "kv" in quantised:
            error = FieldError(name, sec.shown(name), NO_CACHED_SCALES, ("kv_scale_group",))
            errors.append(sec.locate(error))
            continue
        else:
            subject = "the cache is" if fmt == "kv" else "the weights are"
            reason = f"has no effect: {subject} not quantised"
        reason += f" (set {{{dtype_field}}} to {choices})"
        errors.append(sec.locate(FieldError(name, sec.shown(name), reason, (dtype_field,))))
    return errors


def _distinct(kind: SectionKind, points: list) -> list:
    """Each point with the format options that none of its formats takes at their
    defaults (SCALE_GROUPS), and each distinct point once, in order: a sweep that crosses
    weights_group [64, 128] or both weight-only kernels with bfloat16 and int4 weights
    gives the bfloat16 weights one point, not two identical ones, each recorded with an
    option it does not have."""
    assert kind.scaled is not None
    fields = kind.point.__dataclass_fields__
    distinct: dict[Any, Any] = {}
    for point in points:
        formats = kind.scaled(point)
        unused = {
            name: FIELDS[name].default
            for name, (fmt, _, _) in SCALE_GROUPS.items()
            if name in fields and fmt not in formats
        }
        if any(getattr(point, name) != default for name, default in unused.items()):
            point = replace(point, **unused)
        # the same fields of two models of one name (a preset and a config.json) are
        # two points: a point's fields hold its model's name and attention shape only
        distinct.setdefault((id(getattr(point, "spec", None)), point), point)
    return list(distinct.values())


def _combination(sec: Section, point: Any, reason: str) -> UsageError:
    if getattr(point, "model", None):
        return UsageError(f"{point.model}: {reason}")
    given = [
        n
        for n in ("d_model", "num_heads", "num_kv_heads", "head_dim")
        if getattr(point, n, None) is not None
    ]
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
    `max_points` points (at most MAX_POINTS) is refused before any is built."""
    config = load_config(Path(config_path) if config_path is not None else DEFAULT_CONFIG)
    names = names or study_sections(config)
    given = {"device": device, "measure": measure}
    sections = {
        n: resolve(config, n, {k: v for k, v in given.items() if k in fields_for(n)}) for n in names
    }
    return plan_sections(
        config, sections, max_points, "max_points" if max_points < MAX_POINTS else None
    )


def study_sections(config: StudyConfig) -> list[str]:
    """The sections a study runs: those its sweep file names, else the default ones."""
    return [s for s in SECTIONS if s in config.sections] or list(DEFAULT_SECTIONS)


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


def measured_run_target(
    config_path: str | Path | None, overrides: dict[str, Any]
) -> tuple[str | None, str | None]:
    """The GPU and the calibration file a measured run is calibrated or checked with
    (predict's modes on a run): the flags over the sweep file's predict section (one GPU;
    None when neither names one). No point is planned."""
    from ..experiments.calibrate import one_gpu

    section = resolve(load_config(config_path), "predict", overrides)
    gpu = one_gpu(section.values.get("gpu")) if "gpu" in section.origins else None
    return gpu, section.options.get("calibration")


def section_inputs(plan: Plan, section: str) -> dict[str, list[str]]:
    """The files `section` of a planned study reads beside its sweep file, by what names
    them: "models", its models' config.json files, and "calibration", its calibration's."""
    sec = plan.sections[section]
    calibration = sec.options.get("calibration")
    return {
        "models": [m.config_path for m in sec.models if m.config_path],
        "calibration": [calibration] if calibration else [],
    }


def check_one_rank_per_point(plan: Plan, source: str | None, command: Callable[[int], str]) -> None:
    """A study shares its points among ranks, each point on one rank; a tensor-parallel
    point of a timed section (decode) needs all of its ranks at once. FieldError naming
    the first such tp (at the sweep file's section.tp when `source` names the file) and
    `command(tp)`, the command line that times a layer split over that many ranks."""
    split = (t for t in plan.tasks if KINDS[t.section].timed and t.point.tp > 1)
    task = next(split, None)
    if task is None:
        return
    tp, name = task.point.tp, task.section
    error = FieldError(
        "tp",
        tp,
        f"a study runs each {name} point on one rank; time a layer split over {tp} ranks "
        f"with {command(tp)}",
    )
    raise error.located(f"{name}.tp: {tp} ({source})") if source else error
