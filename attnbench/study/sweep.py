"""Sweep files: load, validate and expand a YAML study into typed points.

Layout (every key optional)::

    defaults: {field: scalar, ...}          # applies to every section
    sweep:    {field: [values], ...}        # expanded as a Cartesian grid
    models:   [llama-2-7b, path/to/config.json]
    params:   {field: value or [values]}    # per-section keys override the above
    kvmem:    {...}
    decode:   {...}
    fit:      {...}

A point's shape comes from d_model / num_heads / num_kv_heads / head_dim, or from a model
(preset or config.json). Values given on the command line override the file (see
`resolve`). Every problem is reported before anything runs, one line per problem, naming
the key as the file spells it.
"""

from __future__ import annotations

import datetime
import itertools
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..errors import (
    FieldError,
    Problems,
    UsageError,
    brief,
    closest,
    one_line,
    show_value,
    spelled,
)
from ..model.architecture import ModelSpec
from ..model.capacity import parse_seq_lens, pattern_bounded, pattern_letters_wrong
from ..model.files import read_user_file, refuse_empty
from ..model.hf_config import load_hf_config
from ..model.model_params import has_own_head
from ..model.presets import get_preset
from ..model.what_if import kv_heads_count, kv_heads_meant, what_if_specs
from ..modules.hf_fallback import caches_nothing, with_layer_types, with_whole_model
from .schema import (
    ALIASES,
    FIELDS,
    FILE_KEYS,
    SECTIONS,
    SHAPE_FIELDS,
    above_maximum,
    canonical_value,
    fields_for,
    spelled_twice,
)
from .sections import KINDS
from .yaml_loader import YamlInputError, load_yaml

#: Fields a model gives its points.
MODEL_FIELDS = (*SHAPE_FIELDS, "num_layers", "dtype")
#: The origin of a value given on the command line (the CLI names it by its flag).
FROM_FLAGS = "flags"
FLAGS_SOURCE = "<flags>"
#: The largest sweep file read (a larger one is refused before it is read).
MAX_SWEEP_FILE_BYTES = 1 << 20
#: Problems reported for one file; the rest are counted.
MAX_PROBLEM_LINES = 20


def _got(value: Any) -> str:
    """What a value of the wrong type is, for a message: an unquoted 2001-12-14 is a date
    to YAML, else the value as YAML spells it."""
    return "a date" if isinstance(value, (datetime.date, datetime.time)) else spelled(value)


def check_value(name: str, value: Any) -> str | None:
    """Why one scalar value does not fit field `name` (its type, range or choices), or
    None when it does: what flags and sweep files are both checked by."""
    spec = FIELDS[name]
    value = canonical_value(name, value)
    if spec.type is int:
        if value in spec.words:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            words = f" or {' or '.join(spec.words)}" if spec.words else ""
            return f"expected an integer{words}, got {_got(value)}"
        if spec.minimum is not None and value < spec.minimum:
            return f"must be >= {spec.minimum}"
        if too_large := above_maximum(name, value):
            return too_large
    elif spec.type is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"expected a number, got {_got(value)}"
        if isinstance(value, float) and not math.isfinite(value):  # an int is never inf
            return "must be a finite number"
        if value <= 0:
            return "must be a number above 0"
        if too_large := above_maximum(name, value):
            return too_large
    elif spec.type is bool:
        if not isinstance(value, bool):
            return f"expected true or false, got {_got(value)}"
    elif not isinstance(value, str):
        return f"expected a string, got {_got(value)}: {spec.help}"  # the help shows the form
    if spec.choices and value not in spec.choices:
        kind = "dtype" if "dtype" in name else "value"
        return (
            f"unknown {kind} {brief(value)}{closest(str(value), spec.choices)}; "
            f"choose from {spec.choices_text or ', '.join(spec.choices)}"
        )
    return None


def _check_models(value: Any, where: str, problems: list[str]) -> None:
    if not isinstance(value, list) or not all(isinstance(m, str) for m in value):
        problems.append(f"{where}: expected a list of names or paths, got {spelled(value)}")


def validate_section(section: str, body: Any, problems: list[str], source: str) -> None:
    """Append to `problems` everything wrong with one section of the file."""
    where = f"{source}: {section}"
    if not isinstance(body, dict):
        problems.append(f"{where}: expected a mapping of fields, got {type(body).__name__}")
        return
    for name, value in body.items():
        if name == "models" and section in SECTIONS:  # a section's own models replace the list
            _check_models(value, f"{where}.models", problems)
            continue
        if name in ALIASES and ALIASES[name] in body:
            problems.append(f"{where}: {name!r} is the old name of {ALIASES[name]!r}; give one")
            continue
        name = ALIASES.get(name, name)
        if name not in FIELDS:
            near = closest(name, FIELDS) if isinstance(name, str) else ""
            problems.append(f"{where}: unknown key {spelled(name)}{near}")
            continue
        spec = FIELDS[name]
        if section in SECTIONS and section not in spec.sections:
            problems.append(f"{where}: {name!r} does not apply to {section}")
            continue
        if name == "seq_lens" and isinstance(value, str):  # the flag's forms: 8x512, ...
            try:
                value = parse_seq_lens(value)
            except FieldError as exc:
                problems.append(f"{section}.{name}: {exc.value} ({source}): {exc.reason}")
                continue
        values = value if isinstance(value, list) else [value]
        if isinstance(value, list):
            if section == "defaults" or not spec.axis:
                problems.append(
                    f"{where}.{name}: expected a single value, got a list {brief(value)}"
                )
                continue
            if not value:
                problems.append(f"{where}.{name}: empty list (the grid would be empty)")
                continue
        problems.extend(
            f"{section}.{name}: {spelled(v, lambda x: one_line(show_value(x)))} ({source}): "
            f"{reason}"
            for v in values
            if (reason := check_value(name, v))
        )
        scalars = [v for v in values if isinstance(v, (str, int, float)) and type(v) is not bool]
        if twice := spelled_twice(scalars, [canonical_value(name, v) for v in scalars]):
            listed = ",".join(one_line(show_value(v)) for v in values)
            problems.append(f"{section}.{name}: {listed} ({source}): {twice}")


@dataclass
class StudyConfig:
    """A validated sweep file (or an empty one when running from flags alone)."""

    sections: dict[str, Any] = field(default_factory=dict)
    source: str = FLAGS_SOURCE
    base_dir: Path = Path(".")
    text: str = ""


def load_config(path: str | Path | None) -> StudyConfig:
    """Read and validate a sweep file; None gives an empty config."""
    if path is None:
        return StudyConfig()
    refuse_empty("config", path)
    path = Path(path)
    text = read_user_file(path, "config", limit=MAX_SWEEP_FILE_BYTES)
    try:
        data = load_yaml(text)
    except YamlInputError as exc:
        raise _problems([f"{path}: {problem}" for problem in exc.problems]) from None
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
        if section not in FILE_KEYS:
            problems.append(
                f"{path}: unknown key {spelled(section)}"
                f"{closest(section, FILE_KEYS) if isinstance(section, str) else ''}"
            )
        elif section == "models":
            _check_models(body, f"{path}: models", problems)
        elif body is not None:
            validate_section(section, body, problems, str(path))
    if problems:
        raise _problems(problems)
    # a section named with nothing under it runs with its defaults, as `fit: {}` does
    named = {k: {} for k, v in data.items() if v is None and k in SECTIONS}
    sections = {k: _current_names(v) for k, v in {**data, **named}.items() if v is not None}
    return StudyConfig(sections, str(path), path.parent, text)


def _current_names(body: Any) -> Any:
    """A section with its fields and values under their current names (see ALIASES), and
    the integers of a float field as floats, as its flag gives them (2 -> 2.0)."""
    if not isinstance(body, dict):
        return body
    renamed = {}
    for name, value in body.items():
        name = ALIASES.get(name, name)
        if name == "seq_lens" and isinstance(value, str):
            value = parse_seq_lens(value)
        if isinstance(value, list):
            renamed[name] = [_typed(name, v) for v in value]
        else:
            renamed[name] = _typed(name, value)
    return renamed


def _typed(name: str, value: Any) -> Any:
    """A valid value of field `name` as the flag parser gives it (see _current_names)."""
    value = canonical_value(name, value)
    is_float = name in FIELDS and FIELDS[name].type is float
    return float(value) if is_float and type(value) is int else value


def _problems(lines: list[str]) -> Problems:
    """One error per line, each once (a YAML alias repeats a value and its problem), the
    first MAX_PROBLEM_LINES of them shown."""
    return Problems([UsageError(line) for line in dict.fromkeys(lines)], MAX_PROBLEM_LINES)


def load_model(ref: str, base_dir: Path = Path(".")) -> ModelSpec:
    """A preset name (case-insensitive), or a path to a Hugging Face config.json (see
    file_path)."""
    if is_model_file(ref):
        return load_hf_config(file_path(ref, base_dir))
    return get_preset(ref)


def is_model_file(ref: str) -> bool:
    """A model reference names a config.json (a path), not a preset."""
    return ref.endswith(".json") or "/" in ref


def file_path(ref: str, base_dir: Path) -> Path:
    """A file a sweep file names (a model's config.json, a calibration): as given when it
    is found there, else relative to the sweep file's folder, `base_dir`."""
    path = Path(ref)
    if not path.is_absolute() and not os.path.exists(path):  # False for a name too long
        path = base_dir / path
    return path


@dataclass
class Section:
    """One section of a study, resolved: its axes (lists), scalar options and models, and
    where each value came from (FROM_FLAGS, or the file section that set it)."""

    name: str
    values: dict[str, list]
    options: dict[str, Any]
    models: list[ModelSpec]
    source: str
    origins: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        """The resolved configuration, for the JSON output."""
        return {
            "source": self.source,
            "command": self.name,
            **self.values,
            **self.options,
            "models": list(dict.fromkeys(m.name for m in self.models)),
        }

    @property
    def has_shape(self) -> bool:
        return "d_model" in self.values and "num_heads" in self.values

    def listed(self, name: str) -> list:
        """The values the section gives field `name`: its axis's, or its one option's
        (none: [])."""
        given = self.values.get(name, self.options.get(name))
        return [] if given is None else given if isinstance(given, list) else [given]

    def shown(self, name: str) -> Any:
        """The values the section gives field `name` as an error names them: its one value
        itself (a switch stays a switch), else all of them joined by commas."""
        values = self.listed(name)
        return values[0] if len(values) == 1 else ",".join(map(str, values))

    def sets_itself(self, name: str) -> bool:
        """Whether a flag or the section's own keys set field `name`: not a value a sweep
        file sets for all its sections, which may serve another."""
        return self.origins.get(name) in (FROM_FLAGS, self.name)

    def locate(self, error: FieldError, point: Any = None) -> FieldError:
        """`error` placed where the user set the field: `kvmem.tp: 3 (study.yaml)` for a
        file; values from flags are left for the CLI to name by their flag, and values a
        model brought are named with the model."""
        if error.location is not None:
            return error
        origin = self.origins.get(error.field)
        value = spelled(error.value) if isinstance(error.value, bool) else show_value(error.value)
        if origin is not None and origin != FROM_FLAGS:
            return error.located(f"{origin}.{error.field}: {value} ({self.source})")
        model = getattr(point, "model", None)
        if origin is None and model is not None and error.field in MODEL_FIELDS:
            return error.located(f"{model}: {error.field} {value}")
        if origin is None and self.source != FLAGS_SOURCE:  # a field the file left out
            return error.located(f"{self.name} ({self.source})")
        return error

    def _given_once(self, name: str, values: list, meant: list | None = None) -> None:
        """FieldError, where the user set `name`, when two of its values are one (`meant`:
        what each is, 4 KV heads for 'mha' beside 4 query heads): they would make two
        points of the same keys, which the results' readers refuse after the run."""
        seen: dict = {}
        for value, key in zip(values, meant or values, strict=True):
            if key not in seen:
                seen[key] = value
                continue
            earlier = seen[key]
            why = (
                f"{show_value(value)} is given twice"
                if earlier == value
                else f"{show_value(earlier)} and {show_value(value)} are both "
                f"{key} KV head{'s' * (key != 1)} here"
            )
            raise self.locate(FieldError(name, values, why))

    def _given_once_each(self, names: list[str]) -> None:
        """Every axis of `names` with each of its values once (`_given_once`), KV heads
        as counts for every count of query heads ('mha' is 4 KV heads beside 4)."""
        for name in names:
            self._given_once(name, self.values[name])
        if "num_kv_heads" in names:
            kv = self.values["num_kv_heads"]
            for heads in self.values["num_heads"]:
                self._given_once("num_kv_heads", kv, [kv_heads_meant(v, heads) for v in kv])

    def points(self, typed: Any = None) -> list:
        """Every grid point as a typed point: synthetic shapes first, then models (whose
        shape fields, and dtype unless one is given, come from the model; where its kind
        says, the dtype and weights it runs in at the point: SectionKind.model_defaults).
        A kind whose points carry their options gets `typed`, the section's typed
        options."""
        kind = KINDS[self.name]
        wanted = set(kind.point.__dataclass_fields__)
        seq_lens = self.values.get("seq_lens")
        grid_only = (*SHAPE_FIELDS, "num_layers", "seq_lens")
        axes = [n for n in self.values if n not in grid_only and n in wanted]
        rest = [
            dict(zip(axes, combo, strict=True))
            for combo in itertools.product(*(self.values[a] for a in axes))
        ]
        for r in rest:  # the word for no block size
            if r.get("block_size") == "contiguous":
                r["block_size"] = None
        if seq_lens:
            for r in rest:
                r.update(seq_lens=tuple(seq_lens), batch=len(seq_lens), seq_len=max(seq_lens))
        options = {k: v for k, v in self.options.items() if k in wanted}
        if "options" in wanted:
            options["options"] = typed
        points = []
        shape_axes = [n for n in (*SHAPE_FIELDS, "num_layers") if n in self.values and n in wanted]
        self._given_once_each([*axes, *shape_axes] if self.has_shape else axes)
        if self.has_shape:
            for combo in itertools.product(*(self.values[a] for a in shape_axes)):
                shape = dict(zip(shape_axes, combo, strict=True))
                kv_heads = shape.get("num_kv_heads", "mha")
                if isinstance(kv_heads, str):  # mha or mqa
                    shape["num_kv_heads"] = kv_heads_count(kv_heads, shape["num_heads"])
                points.extend(kind.point(**shape, **r, **options) for r in rest)
        for model in self.models:
            shape = {
                "d_model": model.d_model,
                "num_heads": model.num_heads,
                "num_kv_heads": model.num_kv_heads,
                "published_kv_heads": model.published_kv_heads,
                "head_dim": model.head_dim,
                "num_layers": model.num_layers,
                "model": model.name,
                "spec": model,
            }
            shape = {k: v for k, v in shape.items() if k in wanted}
            for r in rest:
                point = {**shape, **r, **options}
                if kind.model_defaults:
                    given = kind.model_defaults(model, point)
                else:
                    given = {"dtype": model.dtype}
                for name, value in given.items():
                    if name in wanted and self.origins.get(name) is None:
                        point[name] = value
                points.append(kind.point(**point))
        return points


def resolve(
    config: StudyConfig,
    section: str,
    overrides: dict[str, Any] | None = None,
    models: list[str] | None = None,
) -> Section:
    """Merge defaults < sweep < the section's own keys < `overrides` (values from flags;
    lists for axes). Shape values in `overrides` replace the file's models, and d_model or
    num_heads its whole shape; `models` given there replace both too."""
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    sections = config.sections
    merged: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for part in ("defaults", "sweep", section):
        for name, value in (sections.get(part) or {}).items():
            if name != "models" and section in FIELDS[name].sections:
                merged[name] = value
                origins[name] = part
    own = sections.get(section) or {}
    model_refs: list[str] = list(own.get("models", sections.get("models")) or [])
    model_origin = "models" if "models" not in own else f"{section}.models"
    if models is not None or any(k in overrides for k in SHAPE_FIELDS):
        model_refs = list(models or [])  # flags choose what runs: the file's models go
        model_origin = FROM_FLAGS
    if models is not None or "d_model" in overrides or "num_heads" in overrides:
        # A new base shape (or a model) replaces the file's; num_kv_heads or head_dim
        # alone override just that field of the file's shape. A model replaces its layers
        # too: it brings its own.
        for name in (*SHAPE_FIELDS, *(["num_layers"] if models is not None else [])):
            merged.pop(name, None)
            origins.pop(name, None)
    merged.update(overrides)
    origins.update(dict.fromkeys(overrides, FROM_FLAGS))

    values: dict[str, list] = {}
    options: dict[str, Any] = {}
    for name in fields_for(section):
        spec = FIELDS[name]
        value = merged.get(name)
        if value is None:
            value = spec.default_for(section)
        if not spec.axis:
            options[name] = value
        elif value is not None:
            values[name] = value if isinstance(value, list) else [value]
    loaded = []
    named: dict[str, str] = {}  # each model's identity, and the reference that gave it
    for ref in model_refs:
        try:
            spec = load_model(ref, config.base_dir)
            same = spec.config_path and os.path.realpath(spec.config_path)
            identity = same or f"preset {spec.name}"
            if identity in named:
                reason = (
                    f"is {named[identity]} again: give each model once (its points would run twice)"
                )
                raise FieldError("models", ref, reason)
            named[identity] = ref
            loaded.append(spec)
        except FieldError as exc:
            if model_origin != FROM_FLAGS:
                exc.located(f"{model_origin}: {ref} ({config.source})")
            raise
    resolved = Section(section, values, options, loaded, config.source, origins)
    problems = [resolved.locate(e) for e in model_overrides(resolved)]
    if problems:
        raise Problems(problems)
    check_calibration(resolved, config.base_dir)
    check_gpu_use(resolved)
    check_window_use(resolved)
    check_vocab_use(resolved)
    check_head_use(resolved)
    check_kept_attention_use(resolved)
    check_weight_only_kernel_use(resolved)
    check_dp_attention_use(resolved)
    resolved.models = [with_layer_types(spec) for spec in resolved.models]
    check_decoders(resolved)
    resolved = with_what_ifs(resolved)
    problems = [resolved.locate(e) for e in long_patterns(resolved)]
    if problems:
        raise Problems(problems)
    if KINDS[section].whole_model:
        resolved.models = [with_whole_model(spec) for spec in resolved.models]
    return resolved


#: The fields a section reads its calibration for: without one of them it would do nothing.
CALIBRATED = {"fit": ("tpot", "ttft")}


def check_calibration(sec: Section, base_dir: Path) -> None:
    """The section's calibration file, found as a model's config.json is when the sweep
    file names it (file_path), and read here, as models are: a file that cannot be read,
    or holds a bad field, is refused where it was set, before any point is built; so is
    one that nothing would read (CALIBRATED)."""
    from ..model.calibration import load_calibration  # numpy: only where one is given

    path = sec.options.get("calibration")
    if path is None:
        return
    refuse_empty("calibration", path)
    readers = CALIBRATED.get(sec.name, ())
    if readers and all(sec.options.get(name) is None for name in readers):
        reason = f"times the targets {' and '.join(readers)} only: give one, or leave it out"
        raise sec.locate(FieldError("calibration", path, reason))
    if sec.origins.get("calibration", FROM_FLAGS) != FROM_FLAGS:
        path = sec.options["calibration"] = str(file_path(path, base_dir))
    try:
        load_calibration(path)
    except FieldError as exc:
        raise sec.locate(exc) from None


def _sets_a_time_target(sec: Section) -> bool:
    """Whether a fit section sets a time target (tpot, ttft): the only use of its GPU's
    peaks and of its kernels' rates."""
    return any(sec.options.get(n) is not None for n in CALIBRATED["fit"])


def check_gpu_use(sec: Section) -> None:
    """A fit's GPU named beside its memory, with no target to time: the memory given
    replaces the GPU's, and only the targets use its peaks, so it would change nothing but
    a label. Refused where the section itself sets both (a flag, or the section's keys): a
    GPU the file sets for all its sections may serve another."""
    if sec.name != "fit" or not (sec.sets_itself("gpu") and sec.sets_itself("memory")):
        return
    if _sets_a_time_target(sec):
        return
    reason = (
        "has no effect beside {memory}, which replaces its memory: only {tpot} and {ttft} "
        "use its peaks"
    )
    raise sec.locate(FieldError("gpu", sec.shown("gpu"), reason, ("memory", "tpot", "ttft")))


def check_window_use(sec: Section) -> None:
    """A sliding window beside layer patterns that all lay out global layers alone (G):
    no layer would keep it, so it would change nothing."""
    windows = [w for w in sec.listed("sliding_window") if w]
    patterns = sec.listed("layer_pattern")
    if any(pattern_letters_wrong(str(p)) for p in patterns):
        return  # letters a pattern does not take: long_patterns says so, naming it
    if windows and patterns and not any("L" in str(p).upper() for p in patterns):
        reason = f"has no effect: {{layer_pattern}} {','.join(patterns)} has no L layer to bound"
        listed = ",".join(map(str, windows))
        raise sec.locate(FieldError("sliding_window", listed, reason, ("layer_pattern",)))


def check_vocab_use(sec: Section) -> None:
    """A replicated vocabulary where every point runs on one rank (fit's tp defaults to
    its GPUs): a single rank holds the whole vocabulary either way, so it would change
    nothing."""
    if "replicated" not in sec.listed("vocab_layout") or not sec.sets_itself("vocab_layout"):
        return
    if any(int(r) > 1 for r in _ranks(sec)):
        return
    reason = "has no effect at {tp} 1: a single rank holds the whole vocabulary either way"
    raise sec.locate(FieldError("vocab_layout", sec.shown("vocab_layout"), reason, ("tp",)))


def _ranks(sec: Section) -> list:
    """The tensor-parallel ranks the section's points run on: its tp values, else fit's
    default, its GPUs."""
    return sec.listed("tp") or (sec.listed("gpus") if sec.name == "fit" else [])


def check_dp_attention_use(sec: Section) -> None:
    """Data-parallel attention where every point runs on one rank: that rank runs every
    sequence's attention either way, so it would change nothing."""
    if not (sec.sets_itself("dp_attention") and any(sec.listed("dp_attention"))):
        return
    if any(int(r) > 1 for r in _ranks(sec)):
        return
    reason = "has no effect at {tp} 1: a single rank runs every sequence's attention either way"
    raise sec.locate(FieldError("dp_attention", True, reason, ("tp",)))


def check_decoders(sec: Section) -> None:
    """An encoder's config where a section sizes a cache or times a decoder's steps (all
    but params, which counts its attention layer): refused, naming the model, where
    transformers tells that its type keeps no cache (hf_fallback.caches_nothing)."""
    if sec.name == "params":
        return
    for spec in sec.models:
        if (reason := caches_nothing(spec)) is not None:
            raise sec.locate(FieldError("hf_config", spec.config_path, reason))


def check_head_use(sec: Section) -> None:
    """A quantised head where no model of the section has a head of its own to quantise:
    a layer shape has none, and a head tied to the embeddings stays in their dtype (the
    lookup reads the table), so it would change nothing. A model whose traits cannot be
    read is taken to have one (its points say why they cannot be counted)."""
    if not (sec.sets_itself("quantize_head") and any(sec.listed("quantize_head"))):
        return
    if any(has_own_head(spec) for spec in sec.models):
        return
    if sec.models:
        names = ", ".join(spec.name for spec in sec.models)
        ties = "ties its output head" if len(sec.models) == 1 else "tie their output heads"
        reason = f"has no effect: {names} {ties} to the embeddings"
    else:
        reason = "has no effect: a layer shape has no output head, only a model has one"
    raise sec.locate(FieldError("quantize_head", True, reason))


def check_kept_attention_use(sec: Section) -> None:
    """Attention kept beside quantised weights where the section has no model: a layer
    shape's weights are its attention's alone, so keeping them would leave nothing
    quantised and the weights' dtype would change nothing."""
    if not (sec.sets_itself("keep_attention") and any(sec.listed("keep_attention"))):
        return
    if sec.models:
        return
    reason = (
        "has no effect: a layer shape's weights are all its attention's, only a model has others"
    )
    raise sec.locate(FieldError("keep_attention", True, reason))


def check_weight_only_kernel_use(sec: Section) -> None:
    """A weight-only kernel on the tensor cores where nothing it changes is timed: a layer
    shape's times count no tile padding, and a fit with no time target times nothing."""
    if not sec.sets_itself("weight_only_kernel"):
        return
    if "tensor-cores" not in sec.listed("weight_only_kernel"):
        return
    if sec.name == "fit" and not _sets_a_time_target(sec):
        reason = "has no effect without {tpot} or {ttft}: only they time the weights' kernels"
        error = FieldError("weight_only_kernel", "tensor-cores", reason, ("tpot", "ttft"))
        raise sec.locate(error)
    if sec.models:
        return
    reason = "has no effect: a layer shape's times count no tile padding, only a model's do"
    raise sec.locate(FieldError("weight_only_kernel", "tensor-cores", reason))


def long_patterns(sec: Section) -> list[FieldError]:
    """Each layer pattern longer than the attention layers it lays out (a model's, or a
    layer shape's num_layers): its tail would be cut, silently."""
    layers = [(m.kv_layers, f"{m.name}'s") for m in sec.models]
    if sec.has_shape:
        layers += [(n, "the") for n in sec.values.get("num_layers", [])]
    errors = []
    for pattern in sec.values.get("layer_pattern", []):
        if pattern is not None and pattern_letters_wrong(pattern):
            try:  # its letters first: they are what is wrong
                pattern_bounded(pattern, 1)
            except FieldError as exc:
                errors.append(exc)
                continue
        for count, whose in layers:
            if pattern is not None and len(pattern) > count:
                layer = "attention layer" if count == 1 else "attention layers"
                reason = (
                    f"has {len(pattern)} letters, more than {whose} {count} {layer}: one "
                    "letter per layer at most"
                )
                errors.append(FieldError("layer_pattern", pattern, reason))
                break
    return errors


#: The fields of a model's shape that a study may not change, as a message names them.
MODEL_OWN = {
    "d_model": "width {:,}",
    "num_heads": "{:,} query heads",
    "head_dim": "head_dim {:,}",
    "num_layers": "{:,} layers",
}


def model_overrides(sec: Section) -> list[FieldError]:
    """The fields of a model's shape that `sec` sets while it has models and no layer
    shape of its own: values that would apply to nothing, as a model brings its own shape.
    Of a model, only the KV heads change (a what-if: see with_what_ifs)."""
    if not sec.models or sec.has_shape:
        return []
    model = sec.models[0]
    errors = []
    for name, own in MODEL_OWN.items():
        if name not in sec.origins or name not in sec.values:
            continue
        hint = "give the shape without the model"
        if name in ("d_model", "num_heads"):
            hint += ", or both width and heads for a layer shape beside it"
        reason = (
            f"{model.name} has its own {own.format(getattr(model, name))}; of a "
            f"model's shape only its KV heads can change (a what-if): {hint}"
        )
        errors.append(FieldError(name, sec.values[name], reason))
    return errors


def with_what_ifs(sec: Section) -> Section:
    """`sec` with each model rebuilt with each of its num_kv_heads (see model/what_if.py),
    when those counts are for the models: given as flags (which leave only the models the
    flags name), or in a section without a layer shape of its own. A study's num_kv_heads
    beside its layer shape is that shape's, and its models stay as published."""
    counts = sec.values.get("num_kv_heads")
    for_models = not sec.has_shape or sec.origins.get("num_kv_heads") == FROM_FLAGS
    if not counts or not sec.models or not for_models:
        return sec
    try:
        sec.models = [v for spec in sec.models for v in what_if_specs(spec, counts)]
    except FieldError as exc:
        raise sec.locate(exc) from None
    return sec
