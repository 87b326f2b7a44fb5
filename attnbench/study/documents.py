"""Result documents: the JSON every command writes (and `run`'s results.json), and the
CSVs, read back and validated against the record types' declared field kinds."""

from __future__ import annotations

import csv
import dataclasses
import datetime
import io
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import FieldError, UsageError, brief, spelled
from ..experiments.whole_model import PART_RECORDS
from ..measure.devices import DEVICE_NAME
from ..measure.environment import FIELD_TYPES
from ..model.files import json_int, json_problem, not_text, read_user_file, unique_keys
from ..records import (
    Kind,
    bounds,
    csv_fields,
    failed,
    field_kinds,
    gated_timing,
    key_fields,
    positive_fields,
    ratio_against,
    signed_fields,
)
from .output import SCHEMA_VERSION
from .schema import FIELDS, parse_number
from .sections import KINDS, RECORD_TYPES, command_of, record_type

#: The commands whose JSON holds records, and the section each single command writes.
COMMAND_SECTIONS = {command_of(name): name for name in KINDS}
COMMANDS = (*COMMAND_SECTIONS, "run")
#: The largest results file read: it is parsed whole, samples and all.
MAX_RESULTS_BYTES = 1 << 30
#: Whole-model part records that `params` writes, for a model, beside its per-layer records
#: (a key of the document beside `records`, or beside `sections` in a study's).
PARTS_SECTION = PART_RECORDS


@dataclass(frozen=True)
class Document:
    """A results file as sections of records. CSV files carry one section, no environment
    and no raw samples; `raw` is the parsed JSON (None for CSV)."""

    path: str
    command: str
    sections: dict[str, list[dict]]
    environment: dict | None
    raw: dict | None
    #: A merged study's (study.merge): each record's environment, the share's that ran it.
    record_environments: dict[str, list[dict]] = field(default_factory=dict)

    def environments_of(self, section: str) -> dict[int, dict]:
        """{id(record): the environment it was measured in} for the section's records
        that name their own ({} when every record has the document's)."""
        found = self.record_environments.get(section, [])
        return {id(r): env for r, env in zip(self.sections[section], found, strict=False)}

    def require_environment(self, why: str) -> None:
        """UsageError when this file names no environment (a CSV has none); `why` says
        what needs one."""
        if not self.environment:
            csv = " (a CSV has none)" if self.raw is None else ""
            raise UsageError(f"{self.path}: names no environment{csv}, {why}")


def kinds_of(section: str) -> dict[str, Kind]:
    """The declared kind of each field of a section's records ({} for an unknown one)."""
    rtype = record_type(section)
    return field_kinds(rtype) if rtype else {}


def load_document(path: str | Path) -> Document:
    """Read and validate a JSON or CSV results file written by a command: the one reader
    of result files (compare, baseline save, plot, report and resume all come here).

    Every record is checked against its record type: its numbers are finite and >= 0 (or
    null; a ratio > 0), keys and infos have their declared types, statistics lie on their
    side of their median, a ratio names what it was taken against, every record of a
    section has the same key fields, and no two records share their key values."""
    p = Path(path)
    try:
        text = read_user_file(p, "results", MAX_RESULTS_BYTES)
    except FieldError as exc:  # the file is named, not a flag: it may be an argument
        raise UsageError(f"{exc.value}: {exc.reason}") from None
    return _csv_document(p, text) if p.suffix.lower() == ".csv" else _json_document(p, text)


def _json_document(path: Path, text: str) -> Document:
    try:
        doc = json.loads(
            text, parse_int=json_int, object_pairs_hook=lambda pairs: unique_keys(pairs, str(path))
        )
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}: not valid JSON ({json_problem(exc)})") from None
    except RecursionError:
        raise UsageError(f"{path}: JSON nested too deeply") from None
    except ValueError as exc:  # an integer of too many digits (json_int)
        raise UsageError(f"{path}: not valid JSON ({exc})") from None
    if bad := not_text(doc, text):
        raise UsageError(f"{path}: {bad}")
    return parse_document(doc, path)


def parse_document(doc: Any, path: str | Path) -> Document:
    """A results document already read from JSON (`path` names it in errors), validated
    as load_document does."""
    path = Path(path)
    if not isinstance(doc, dict):
        raise UsageError(f"{path}: expected a JSON object written by attnbench")
    version = doc.get("schema_version")
    if version is None and "efficiency_bw" in doc:  # what predict's calibration writes
        raise UsageError(f"{path}: a calibration file of the performance model, not results")
    if type(version) is not int or version != SCHEMA_VERSION:  # true == 1 in Python
        raise UsageError(f"{path}: schema_version {spelled(version)} is not supported (expected 1)")
    command = doc.get("command")
    if command not in COMMANDS:
        raise UsageError(f"{path}: unknown command {spelled(command)}; expected one of {COMMANDS}")
    environment = doc.get("environment")
    if not isinstance(environment, dict):
        raise UsageError(
            f"{path}: environment: expected an object (the machine the results "
            f"were measured on), got {spelled(environment)}"
        )
    check_environment(environment, f"{path}: environment")
    _check_created(path, doc.get("created"))
    per_record: dict[str, list[dict]] = {}
    if command == "run":
        _check_run_header(path, doc)
        sections = _run_sections(path, doc.get("sections"))
        per_record = _record_environments(path, doc, sections)
    else:
        name = COMMAND_SECTIONS[command]
        sections = {name: _check_records(path, name, doc.get("records"))}
    if doc.get(PARTS_SECTION) is not None:
        sections[PARTS_SECTION] = _check_records(path, PARTS_SECTION, doc[PARTS_SECTION])
    return Document(str(path), command, sections, environment, doc, per_record)


def check_environment(environment: dict, where: str) -> None:
    """UsageError naming the first field of `environment` that is not of its type
    (measure.environment.FIELD_TYPES): a field attnbench does not record is let be."""
    for name, value in environment.items():
        kind = FIELD_TYPES.get(name)
        if kind is None or value is None:
            continue
        if kind in ("str", "int"):
            _check_type(where, name, value, [kind])
        if kind == "str":
            continue
        by_dtype = kind.endswith("by dtype")
        if by_dtype and not isinstance(value, dict):
            raise UsageError(
                f"{where}: {name}: expected an object keyed by dtype, got {spelled(value)}"
            )
        entries = {f"{name}.{k}": v for k, v in value.items()} if by_dtype else {name: value}
        check = _check_numbers if kind.startswith("floats") else _check_metric
        for at, item in entries.items():
            check(where, at, item)


def _record_environments(path: Path, doc: dict, sections: dict) -> dict[str, list[dict]]:
    """A merged study's environment of each record: `environment_of` in each section, the
    index of the share's environment in `environments`."""
    shares = doc.get("environments")
    if shares is None:
        return {}
    if not isinstance(shares, list) or not all(isinstance(e, dict) for e in shares):
        raise UsageError(f"{path}: environments: expected a list of objects")
    for i, share in enumerate(shares):
        check_environment(share, f"{path}: environments[{i}]")
    found = {}
    for name in sections:
        which = doc["sections"][name].get("environment_of")
        if which is None:
            continue
        valid = isinstance(which, list) and len(which) == len(sections[name])
        if not valid or not all(type(i) is int and 0 <= i < len(shares) for i in which):
            raise UsageError(
                f"{path}: sections.{name}.environment_of: expected one index "
                "into environments per record"
            )
        found[name] = [shares[i] for i in which]
    return found


def _check_created(path: Path, created: Any) -> None:
    """When the file was written: null, or an ISO 8601 date and time (what a history
    files the run under, when no date is given)."""
    if created is None:
        return
    try:
        moment = datetime.datetime.fromisoformat(created)
    except (TypeError, ValueError):
        raise UsageError(
            f"{path}: created: expected an ISO 8601 date and time, got {spelled(created)}"
        ) from None
    try:
        if moment.tzinfo is not None:  # a history files runs by their time in UTC
            moment.astimezone(datetime.timezone.utc)
    except OverflowError:  # 0001-01-01T00:00:00+01:00 is in the year 0 in UTC
        raise UsageError(
            f"{path}: created: {spelled(created)} is outside the years 1 to 9999 in UTC"
        ) from None


def _check_run_header(path: Path, doc: dict) -> None:
    """What plot, report and resume read of a run document besides its records."""
    if not isinstance(doc.get("config"), dict):
        raise UsageError(f"{path}: config: expected an object, got {spelled(doc.get('config'))}")
    for name in ("created", "attnbench_version"):
        if not isinstance(doc.get(name), str):
            raise UsageError(f"{path}: {name}: expected text, got {spelled(doc.get(name))}")


def _run_sections(path: Path, body: Any) -> dict[str, list[dict]]:
    if not isinstance(body, dict) or not body:
        raise UsageError(f"{path}: sections: expected an object of sections")
    sections = {}
    for name, section in body.items():
        if name not in KINDS:
            raise UsageError(f"{path}: sections: unknown section {spelled(name)}")
        if not isinstance(section, dict):
            raise UsageError(f"{path}: sections.{name}: expected an object with records")
        if not isinstance(section.get("config", {}), dict):
            raise UsageError(f"{path}: sections.{name}.config: expected an object")
        sections[name] = _check_records(path, name, section.get("records"))
    return sections


#: How a field's declared type reads in an error, and the values it takes (None aside).
_TYPES: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "int": ("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool)),
    "float": ("a number", lambda v: is_number(v)),
    "str": ("text", lambda v: isinstance(v, str)),
    "bool": ("true or false", lambda v: isinstance(v, bool)),
}


def _type_names(f: dataclasses.Field) -> list[str]:
    """A field's declared type as the names of its alternatives: 'int | None'."""
    return [t.strip() for t in str(f.type).split("|")]


def declared_types(rtype: type | None) -> dict[str, list[str]]:
    """Each field's declared scalar types ('int | None' -> ['int']); fields of another
    type (lists) are left out."""
    types = {}
    for f in dataclasses.fields(rtype) if rtype else ():
        names = [t for t in _type_names(f) if t != "None"]
        if names and all(t in _TYPES for t in names):
            types[f.name] = names
    return types


@dataclass(frozen=True)
class _Declared:
    """What a section's record type declares that the reader checks beyond each value's
    type: the fields that may be below 0 (`signed`) and those that are above it
    (`positive`, ratios), the raw samples' fields, the statistics on either side of a
    median (records.bounds), the info field naming what a ratio was taken against
    (records.ratio_against), and the key fields a record cannot be made without, whose
    type has no None (the rows are told apart, drawn and matched by them); `sampled`:
    each median's raw samples field; `choices`: the values a key field the sweep schema
    restricts may take (a decode row's mode, provider, dtype), and `least` the smallest
    value of an integer one (a context of 0 tokens is no point a run makes)."""

    signed: set[str] = field(default_factory=set)
    positive: set[str] = field(default_factory=set)
    samples: set[str] = field(default_factory=set)
    sampled: dict[str, str] = field(default_factory=dict)
    bounds: list[tuple[str, str, str]] = field(default_factory=list)
    against: dict[str, str] = field(default_factory=dict)
    required: list[str] = field(default_factory=list)
    choices: dict[str, tuple[str, ...]] = field(default_factory=dict)
    least: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, section: str, rtype: type | None) -> _Declared:
        if rtype is None:
            return cls()
        keys = [f for f in dataclasses.fields(rtype) if f.metadata["kind"] is Kind.KEY]
        swept = {  # the key fields the sweep schema declares for this section
            f.name: sweep
            for f in keys
            if (sweep := FIELDS.get(f.name)) is not None and section in sweep.sections
        }
        timings = gated_timing(rtype)
        sampled = {
            median: stats["samples"] for median, stats in timings.items() if "samples" in stats
        }
        return cls(
            signed=signed_fields(rtype),
            positive=positive_fields(rtype),
            samples=set(sampled.values()),
            sampled=sampled,
            bounds=bounds(rtype),
            against=ratio_against(rtype),
            required=[
                f.name
                for f in keys
                if f.default is dataclasses.MISSING and "None" not in _type_names(f)
            ],
            choices={name: f.choices for name, f in swept.items() if f.choices is not None},
            least={
                name: f.minimum
                for name, f in swept.items()
                if f.type is int and f.minimum is not None
            },
        )


def _check_records(path: Path, section: str, records: Any) -> list[dict]:
    """Records as dicts: metrics finite numbers >= 0 or null, keys and infos of their
    declared types (numbers >= 0: sizes, counts, times and rates), ratios > 0, the same
    key fields in every record, no two with the same keys."""
    if not isinstance(records, list):
        raise UsageError(f"{path}: {section}: records: expected a list")
    kinds = kinds_of(section)
    rtype = record_type(section)
    types = declared_types(rtype)
    declared = _Declared.of(section, rtype)
    for i, rec in enumerate(records):
        where = f"{path}: {section} record {i}"
        if not isinstance(rec, dict):
            raise UsageError(f"{where}: expected an object")
        for name, value in rec.items():
            positive = name in declared.positive
            if name in declared.samples:
                _check_numbers(where, name, value, positive)
            elif kinds.get(name) in METRICS:
                _check_metric(where, name, value, name in declared.signed, positive)
            elif name in types:
                _check_type(where, name, value, types[name])
                if is_number(value):  # every number a record declares is a size or a rate
                    _check_metric(where, name, value, positive=positive)
        _check_related(where, rec, declared)
    _check_keys(path, section, records, [k for k, kind in kinds.items() if kind is Kind.KEY])
    return records


def _check_related(where: str, rec: dict, declared: _Declared) -> None:
    """A record's values against each other: a key field its type says is never null is
    not; a median's quartiles and interval lie on their sides of it; a ratio names what
    it was taken against, where its type declares a field for it."""
    for name in declared.required:
        if name in rec and rec[name] is None:
            raise UsageError(f"{where}: key field {name} is null; every row has one")
    for lower, median, upper in declared.bounds:
        for low, high in ((lower, median), (median, upper), (lower, upper)):
            a, b = rec.get(low), rec.get(high)
            if is_number(a) and is_number(b) and a > b:
                raise UsageError(
                    f"{where}: {low}: {a} is above {high} ({b}); a median's quartiles "
                    "and interval lie on either side of it"
                )
    for median, samples in declared.sampled.items():
        _check_median_of(where, rec, median, samples)
    for name, choices in declared.choices.items():
        if isinstance(rec.get(name), str) and rec[name] not in choices:
            listed = ", ".join(choices)
            raise UsageError(f"{where}: {name}: {brief(rec[name])} is not one of {listed}")
    for name, least in declared.least.items():
        if type(rec.get(name)) is int and rec[name] < least:
            raise UsageError(f"{where}: {name}: {rec[name]} is below {least}, the least it takes")
    device = rec.get("device")
    if isinstance(device, str) and (device == "auto" or not DEVICE_NAME.fullmatch(device)):
        raise UsageError(
            f"{where}: device: {brief(device)} is no device a run records (cpu, cuda:i)"
        )
    heads, kv_heads = rec.get("num_heads"), rec.get("num_kv_heads")
    counts = all(type(n) is int and n > 0 for n in (heads, kv_heads))
    if counts and heads % kv_heads:
        raise UsageError(f"{where}: num_kv_heads {kv_heads} does not divide num_heads {heads}")
    for name, against in declared.against.items():
        if rec.get(name) is not None and rec.get(against) is None:
            raise UsageError(
                f"{where}: {name}: {rec[name]} is taken against {against}, which is null"
            )


def _check_median_of(where: str, rec: dict, median: str, samples: str) -> None:
    """A median lies among its raw samples (within float rounding): the gate judges the
    samples, the tables show the median, and a file whose two disagree (samples scaled
    a hundredfold beside their median) would pass a regression as unchanged."""
    value, raw = rec.get(median), rec.get(samples)
    if not is_number(value) or not raw:
        return
    least, most = min(raw), max(raw)
    slack = 1e-9 * max(abs(least), abs(most))
    if not least - slack <= value <= most + slack:
        raise UsageError(
            f"{where}: {median}: {value:g} is not among its samples ({samples}: "
            f"{least:g} to {most:g}); a median lies among the samples it was taken of"
        )


#: The kinds of field that are measured or computed sizes, counts, times and ratios.
METRICS = (Kind.EXACT, Kind.MEMORY, Kind.TIMING, Kind.RATIO, Kind.COUNT)


def _check_metric(
    where: str, name: str, value: Any, signed: bool = False, positive: bool = False
) -> None:
    """A size, a count, a time or a rate: null, or a finite number >= 0 (any finite number
    for a `signed` one; above 0 for a `positive` one, a ratio of two times)."""
    if value is None:
        return
    if not is_number(value):
        if isinstance(value, str) and _non_finite_text(value):
            raise UsageError(f"{where}: {name}: {value} is not a finite number")
        raise UsageError(f"{where}: {name}: expected a number, got {spelled(value)}")
    _check_finite(where, name, value)
    if value < 0 and not signed:
        raise UsageError(
            f"{where}: {name}: {value} is negative; a size, a count, a time or a rate is >= 0"
        )
    if value == 0 and positive:
        raise UsageError(f"{where}: {name}: {value} is no ratio of two times, which is > 0")


def _check_numbers(where: str, name: str, value: Any, positive: bool = False) -> None:
    """Null, or a list of sizes, counts, times or ratios (_check_metric)."""
    if value is not None and not isinstance(value, list):
        raise UsageError(f"{where}: {name}: expected a list of numbers, got {spelled(value)}")
    for j, v in enumerate(value or ()):
        _check_metric(where, f"{name}[{j}]", v, positive=positive)


def _check_finite(where: str, name: str, value: int | float) -> None:
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an integer beyond any float
        raise UsageError(f"{where}: {name}: {spelled(value)} is too large") from None
    if not finite:
        raise UsageError(f"{where}: {name}: {value} is not a finite number")


def _check_type(where: str, name: str, value: Any, types: list[str]) -> None:
    if value is None:
        return
    if isinstance(value, str) and "str" not in types and _non_finite_text(value):
        raise UsageError(f"{where}: {name}: {value} is not a finite number")
    if not any(_TYPES[t][1](value) for t in types):
        expected = " or ".join(_TYPES[t][0] for t in types)
        raise UsageError(f"{where}: {name}: expected {expected} or null, got {spelled(value)}")
    if is_number(value):
        _check_finite(where, name, value)


def _check_keys(path: Path, section: str, records: list[dict], keys: list[str]) -> None:
    """Every record has the key fields any record of the section has (a file from an
    earlier version may lack a key field in all of them), and no two records have the
    same key values with different metrics: rows are matched on their keys. A record
    repeated whole is the same row twice (two models with one layer shape give the same
    per-layer params row), not a conflict; compare matches it once."""
    present = [k for k in keys if any(k in rec for rec in records)]
    if records and keys and not present:  # nothing to match a row on: not our records
        raise UsageError(
            f"{path}: {section} records: none has a key field ({', '.join(keys[:3])}, ...)"
        )
    seen: dict[tuple, int] = {}
    for i, rec in enumerate(records):
        where = f"{path}: {section} record {i}"
        for k in present:
            if k not in rec:
                raise UsageError(f"{where}: key field {k} is missing (other records have it)")
        values = tuple(hashable(rec[k]) for k in present)
        if values in seen and records[seen[values]] != rec:
            config = " ".join(f"{k}={rec[k]}" for k in present if rec[k] is not None)
            raise UsageError(
                f"{where}: a duplicate row: record {seen[values]} has the same "
                f"key fields ({config or 'none'}) and other values"
            )
        seen.setdefault(values, i)


def hashable(value: Any) -> Any:
    """A key value rows can be matched on: lists and objects as their JSON text."""
    return json.dumps(value, sort_keys=True) if isinstance(value, (list, dict)) else value


def _non_finite_text(text: str) -> bool:
    return text.strip().lower().lstrip("+-") in ("nan", "inf", "infinity")


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _csv_document(path: Path, text: str) -> Document:
    """A CSV that attnbench wrote, or a spreadsheet saved it again (a byte-order mark
    first, as Excel writes one)."""
    reader = csv.DictReader(io.StringIO(text.removeprefix("\ufeff")))
    try:
        return _csv_records(path, reader)
    except csv.Error as exc:  # a cell over the csv module's field limit (128 KiB), say
        reason = f"not a CSV attnbench reads ({exc})"
        raise UsageError(f"{path}: line {reader.line_num}: {reason}") from None


def _csv_records(path: Path, reader: csv.DictReader) -> Document:
    fields = reader.fieldnames or []
    if twice := next((f for i, f in enumerate(fields) if f in fields[:i]), None):
        raise UsageError(f"{path}: line 1: the header names column {spelled(twice)} twice")
    section = _csv_section(path, fields)
    text_fields = {
        name for name, types in declared_types(record_type(section)).items() if types == ["str"]
    }
    records = []
    for line, row in enumerate(reader, start=2):
        if None in row:
            raise UsageError(f"{path}: line {line}: more cells than the header has columns")
        if None in row.values():  # DictReader's value for a cell the row ends before
            cells = sum(v is not None for v in row.values())
            raise UsageError(
                f"{path}: line {line}: {cells} cells, fewer than the header's "
                f"{len(fields)} columns (a file cut short?)"
            )
        records.append({k: _text_cell(v) if k in text_fields else _cell(v) for k, v in row.items()})
    return Document(
        str(path), section, {section: _check_records(path, section, records)}, None, None
    )


def _csv_section(path: Path, fields: list[str]) -> str:
    """A CSV has no `command` field: its section is the record set (RECORD_TYPES) whose
    key columns it has, all of them, and whose columns it shares the most of."""
    header = set(fields)
    shared = {
        name: len(header & set(csv_fields(rtype)))
        for name, rtype in RECORD_TYPES.items()
        if set(key_fields(rtype)) <= header
    }
    if not shared or not max(shared.values()):
        known = ", ".join(RECORD_TYPES)
        raise UsageError(
            f"{path}: not an attnbench CSV: its header has the columns of none of {known}"
        )
    return max(shared, key=shared.__getitem__)


def _text_cell(text: str) -> str | None:
    """A cell of a text field ('7' stays '7'): '' -> None."""
    return None if text == "" else text


def _cell(text: str) -> Any:
    """A CSV cell as the value the JSON would hold: '' -> None, '4096' -> 4096, 'True'.
    A number is written as a flag's value is (schema.parse_number: ASCII digits, no digit
    separators), and alone in its cell; any other cell stays text, which a number field
    refuses by its type."""
    if text == "":
        return None
    if text in ("True", "False"):
        return text == "True"
    if text != text.strip():  # ' 16384'
        return text
    for kind in (int, float):
        value = parse_number(text, kind)
        if value is not None and math.isfinite(value):
            return value
    return text


def load_results(path: str | Path) -> dict:
    """A results.json written by `attnbench run`, validated; UsageError otherwise."""
    document = load_document(path)
    if document.raw is None:  # a CSV: one record set, of a study or of one command
        study = Path(path).with_name("results.json")
        beside = f" ({study} beside it)" if _is_study(study) else ""
        raise UsageError(
            f"{path}: a CSV holds one record set ({document.command}), not a study: give "
            f"the results.json that `attnbench run` writes{beside}"
        )
    if document.command != "run":
        section = ", ".join(s for s in document.sections if s in KINDS)
        raise UsageError(
            f"{path}: written by `attnbench {command_of(document.command)}`, not by "
            f"`attnbench run`: a study runs its flags as a sweep file's {section} section"
        )
    return document.raw


def _is_study(path: Path) -> bool:
    """Whether `path` holds the results of `attnbench run`."""
    try:
        return path.is_file() and load_document(path).command == "run"
    except UsageError:
        return False


def incomplete(doc: dict) -> list[tuple[str, dict]]:
    """(section, record) of every point of a results document that did not complete."""
    return [
        (name, r)
        for name, section in doc["sections"].items()
        for r in section["records"]
        if failed(r)
    ]
