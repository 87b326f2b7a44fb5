"""Sweep files: load, validate and expand a YAML study into grid points.

Layout (every section optional)::

    defaults: {field: scalar, ...}          # applies to every command
    sweep:    {field: [values], ...}        # expanded as a Cartesian grid
    models:   [llama-2-7b, path/to/config.json]
    params:   {field: value or [values]}    # per-command sections override the above
    kvmem:    {...}
    decode:   {...}

A point's shape comes from d_model / num_heads / num_kv_heads / head_dim, or from a model
(preset or config.json). Flags on the command line override the file (see `resolve`).
Every problem is reported before anything runs, as a UsageError with one line per problem.
"""

from __future__ import annotations

import difflib
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..errors import UsageError, read_user_file
from ..model.capacity import DEFAULT_SCALE_DTYPE, KV_DTYPES, SCALE_DTYPES
from ..model.formulas import MODEL_DTYPES, AttentionShape
from ..model.hf_config import load_hf_config
from ..model.presets import ModelSpec, get_preset

COMMANDS = ("params", "kvmem", "decode")
SECTIONS = ("defaults", "sweep", "models", *COMMANDS)


@dataclass(frozen=True)
class FieldSpec:
    """One config field: its type, the commands that use it, and whether it is an axis of
    the grid (a list expands) or a scalar option."""

    type: type
    commands: tuple[str, ...]
    axis: bool = True
    choices: tuple[str, ...] | None = None
    minimum: int | None = 1
    default: Any = None


_SHAPE = ("params", "kvmem", "decode")
FIELDS: dict[str, FieldSpec] = {
    "d_model": FieldSpec(int, _SHAPE),
    "num_heads": FieldSpec(int, _SHAPE),
    "num_kv_heads": FieldSpec(int, _SHAPE),
    "head_dim": FieldSpec(int, _SHAPE),
    "bias": FieldSpec(bool, ("params", "decode"), default=False),
    "num_layers": FieldSpec(int, ("kvmem",), default=1),
    "batch": FieldSpec(int, ("kvmem", "decode"), default=1),
    "seq_len": FieldSpec(int, ("kvmem",), default=2048),
    "dtype": FieldSpec(str, ("kvmem", "decode"), choices=MODEL_DTYPES),
    "prompt_len": FieldSpec(int, ("decode",), default=128),
    "gen_len": FieldSpec(int, ("decode",), default=32),
    "backend": FieldSpec(str, ("decode",), choices=("sdpa", "naive"), default="sdpa"),
    "mode": FieldSpec(
        str, ("decode",), choices=("cache", "no_cache"), default=["cache", "no_cache"]
    ),
    # KV-cache capacity (capacity.py); kv_dtype defaults to dtype, sliding_window 0 = none
    "kv_dtype": FieldSpec(str, ("kvmem",), choices=KV_DTYPES),
    "kv_scale_group": FieldSpec(int, ("kvmem",)),
    "scale_dtype": FieldSpec(str, ("kvmem",), choices=SCALE_DTYPES, default=DEFAULT_SCALE_DTYPE),
    "sliding_window": FieldSpec(int, ("kvmem",), minimum=0),
    "page_size": FieldSpec(int, ("kvmem",)),
    "tp": FieldSpec(int, ("kvmem",), default=1),
    # one batch's sequence lengths, a list (the kvmem command takes it out of the grid)
    "seq_lens": FieldSpec(int, ("kvmem",)),
    # scalar options
    "device": FieldSpec(str, ("kvmem", "decode"), axis=False, default="auto"),
    "measure": FieldSpec(bool, ("kvmem",), axis=False, default=True),
    "prefill": FieldSpec(bool, ("decode",), axis=False, default=True),
    "warmup": FieldSpec(int, ("decode",), axis=False, minimum=0, default=2),
    "repeats": FieldSpec(int, ("decode",), axis=False, default=3),
    "threads": FieldSpec(int, ("decode",), axis=False, default=None),
    "cuda_graph": FieldSpec(bool, ("decode",), axis=False, default=False),
    "flush_l2": FieldSpec(bool, ("decode",), axis=False, default=False),
}
SHAPE_FIELDS = ("d_model", "num_heads", "num_kv_heads", "head_dim")
SHAPE_FLAGS = {"d_model": "--d-model", "num_heads": "--heads", "num_kv_heads": "--kv-heads",
               "head_dim": "--head-dim"}  # fmt: skip
FLAGS_SOURCE = "<flags>"


def suggest(name: str, choices) -> str:
    match = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.5)
    return f" (did you mean {match[0]!r}?)" if match else ""


def _check_value(name: str, value: Any, where: str) -> str | None:
    """A problem with one scalar value, or None."""
    spec = FIELDS[name]
    if spec.type is int:
        if isinstance(value, bool) or not isinstance(value, int):
            return f"{where}.{name}: expected an integer, got {value!r}"
        if spec.minimum is not None and value < spec.minimum:
            return f"{where}.{name}: must be >= {spec.minimum}, got {value}"
    elif spec.type is bool:
        if not isinstance(value, bool):
            return f"{where}.{name}: expected true or false, got {value!r}"
    elif not isinstance(value, str):
        return f"{where}.{name}: expected a string, got {value!r}"
    if spec.choices and value not in spec.choices:
        kind = "dtype" if name == "dtype" else "value"
        return (
            f"{where}.{name}: unknown {kind} {value!r}{suggest(str(value), spec.choices)}; "
            f"choose from {', '.join(spec.choices)}"
        )
    return None


def _check_models(value: Any, where: str, problems: list[str]) -> None:
    if not isinstance(value, list) or not all(isinstance(m, str) for m in value):
        problems.append(f"{where}: expected a list of names or paths, got {value!r}")


def validate_section(section: str, body: Any, problems: list[str], source: str) -> None:
    """Append to `problems` everything wrong with one section of the file."""
    where = f"{source}: {section}"
    if not isinstance(body, dict):
        problems.append(f"{where}: expected a mapping of fields, got {type(body).__name__}")
        return
    for name, value in body.items():
        if name == "models" and section in COMMANDS:  # a command's own models replace the list
            _check_models(value, f"{where}.models", problems)
            continue
        if name not in FIELDS:
            problems.append(f"{where}: unknown key {name!r}{suggest(str(name), FIELDS)}")
            continue
        spec = FIELDS[name]
        if section in COMMANDS and section not in spec.commands:
            problems.append(f"{where}: {name!r} does not apply to {section}")
            continue
        values = value if isinstance(value, list) else [value]
        if isinstance(value, list):
            if section == "defaults" or not spec.axis:
                problems.append(f"{where}.{name}: expected a single value, got a list {value}")
                continue
            if not value:
                problems.append(f"{where}.{name}: empty list (the grid would be empty)")
                continue
        problems.extend(p for v in values if (p := _check_value(name, v, where)))


@dataclass
class StudyConfig:
    """A validated sweep file (or an empty one when running from flags alone)."""

    sections: dict[str, Any] = field(default_factory=dict)
    source: str = FLAGS_SOURCE
    base_dir: Path = Path(".")


def load_config(path: str | Path | None) -> StudyConfig:
    """Read and validate a sweep file; None gives an empty config."""
    if path is None:
        return StudyConfig()
    path = Path(path)
    text = read_user_file(path, "--config")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UsageError(f"{path}: YAML syntax error{line}: {problem}") from None
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    problems: list[str] = []
    for section, body in data.items():
        if section not in SECTIONS:
            problems.append(f"{path}: unknown key {section!r}{suggest(str(section), SECTIONS)}")
        elif section == "models":
            _check_models(body, f"{path}: models", problems)
        elif body is not None:
            validate_section(section, body, problems, str(path))
    if problems:
        raise UsageError("\n".join(problems))
    sections = {k: v for k, v in data.items() if v is not None}
    return StudyConfig(sections, str(path), path.parent)


def load_model(ref: str, base_dir: Path = Path("."), field_name: str = "models") -> ModelSpec:
    """A preset name, or a path to a Hugging Face config.json (relative to the sweep file)."""
    if ref.endswith(".json") or "/" in ref:
        path = Path(ref)
        if not path.is_absolute() and not path.exists():
            path = base_dir / path
        return load_hf_config(path)
    return get_preset(ref, field_name)


@dataclass
class Study:
    """One command's resolved grid: axis values (lists), scalar options, and models."""

    command: str
    values: dict[str, list]
    options: dict[str, Any]
    models: list[ModelSpec]
    source: str

    def to_dict(self) -> dict:
        """The resolved configuration, for the JSON output."""
        return {
            "source": self.source,
            "command": self.command,
            **self.values,
            **self.options,
            "models": [m.name for m in self.models],
        }

    @property
    def has_shape(self) -> bool:
        return "d_model" in self.values and "num_heads" in self.values

    def points(self) -> list[dict]:
        """Every grid point: synthetic shapes first, then models (whose shape fields come
        from the model). Each point is a dict of field -> value plus `model` (or None)."""
        axes = [n for n in self.values if n not in SHAPE_FIELDS and n != "num_layers"]
        rest = [dict(zip(axes, combo, strict=True))
                for combo in itertools.product(*(self.values[a] for a in axes))]  # fmt: skip
        points: list[dict] = []
        if self.has_shape:
            shape_axes = [n for n in (*SHAPE_FIELDS, "num_layers") if n in self.values]
            for combo in itertools.product(*(self.values[a] for a in shape_axes)):
                shape = dict(zip(shape_axes, combo, strict=True))
                shape.setdefault("num_kv_heads", shape["num_heads"])
                points.extend({"model": None, **shape, **r} for r in rest)
        for model in self.models:
            shape = {
                "d_model": model.d_model,
                "num_heads": model.num_heads,
                "num_kv_heads": model.num_kv_heads,
                "head_dim": model.head_dim,
                "num_layers": model.num_layers,
            }
            for r in rest:
                point = {"model": model.name, **shape, **r}
                if point.get("dtype") is None and "dtype" in fields_for(self.command):
                    point["dtype"] = model.dtype
                points.append(point)
        return points


def fields_for(command: str) -> list[str]:
    return [n for n, s in FIELDS.items() if command in s.commands]


def resolve(
    config: StudyConfig,
    command: str,
    overrides: dict[str, Any] | None = None,
    models: list[str] | None = None,
) -> Study:
    """Merge defaults < sweep < the command's section < flags, validate every point.

    `overrides` holds flag values (lists for axes). Shape flags on the command line replace
    the file's models, and --d-model/--heads its whole shape; `models` on the command line
    replace both too.
    """
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    sections = config.sections
    merged: dict[str, Any] = {}
    for section in ("defaults", "sweep", command):
        for name, value in (sections.get(section) or {}).items():
            if name != "models" and command in FIELDS[name].commands:
                merged[name] = value
    own = sections.get(command) or {}
    model_refs: list[str] = list(own.get("models", sections.get("models")) or [])
    if models is not None or any(k in overrides for k in SHAPE_FIELDS):
        model_refs = list(models or [])  # flags choose what runs: the file's models go
    if models is not None or "d_model" in overrides or "num_heads" in overrides:
        # A new base shape (or a model) replaces the file's; --kv-heads or --head-dim
        # alone override just that field of the file's shape.
        for name in SHAPE_FIELDS:
            merged.pop(name, None)
    merged.update(overrides)

    values: dict[str, list] = {}
    options: dict[str, Any] = {}
    for name in fields_for(command):
        spec = FIELDS[name]
        value = merged.get(name, spec.default)
        if not spec.axis:
            options[name] = value
        elif value is not None:
            values[name] = value if isinstance(value, list) else [value]
    origin = "--model" if models is not None else "models"
    loaded = [load_model(ref, config.base_dir, origin) for ref in model_refs]
    study = Study(command, values, options, loaded, config.source)
    _check_points(study)
    return study


def _check_points(study: Study) -> None:
    problems = []
    shape_given = [n for n in SHAPE_FIELDS if n in study.values]
    if shape_given and not study.has_shape:
        missing = [n for n in ("d_model", "num_heads") if n not in study.values]
        problems.append(f"{study.source}: {', '.join(shape_given)} given without {missing[0]}")
    points = study.points()
    if not points:
        problems.append(
            f"{study.source}: nothing to run for {study.command}: give d_model and num_heads "
            "(or --d-model/--heads), or models (or --model/--hf-config)"
        )
    reported = set()
    for p in points:
        if p["model"] is not None:
            continue
        try:
            AttentionShape(p["d_model"], p["num_heads"], p["num_kv_heads"], p.get("head_dim"))
        except ValueError as exc:
            if str(exc) not in reported:
                reported.add(str(exc))
                shape = [n for n in SHAPE_FIELDS if p.get(n) is not None]
                if study.source == FLAGS_SOURCE:  # name the flags the user typed
                    desc = " ".join(f"{SHAPE_FLAGS[n]} {p[n]}" for n in shape)
                    problems.append(f"invalid combination {desc}: {exc}")
                else:
                    desc = " ".join(f"{n}={p[n]}" for n in shape)
                    problems.append(f"{study.source}: invalid combination {desc}: {exc}")
    if problems:
        raise UsageError("\n".join(problems))


def point_shape(point: dict) -> AttentionShape:
    return AttentionShape(
        point["d_model"],
        point["num_heads"],
        point["num_kv_heads"],
        point.get("head_dim"),
        bias=bool(point.get("bias", False)),
    )
