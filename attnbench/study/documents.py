"""Result documents: the JSON every command writes (and `run`'s results.json), and the
CSVs, read back and validated against the record types' declared field kinds."""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..records import Kind, failed, field_kinds, gated_timing
from .output import SCHEMA_VERSION
from .sections import KINDS, record_type

#: The commands whose JSON holds records, and the section each single command writes.
COMMAND_SECTIONS = {"params": "params", "kvmem": "kvmem", "decode-speed": "decode", "fit": "fit"}
COMMANDS = (*COMMAND_SECTIONS, "run")
#: Whole-model part records that `params` writes, for a model, beside its per-layer records.
PARTS_SECTION = "model_parts"


@dataclass(frozen=True)
class Document:
    """A results file as sections of records. CSV files carry one section, no environment
    and no raw samples; `raw` is the parsed JSON (None for CSV)."""

    path: str
    command: str
    sections: dict[str, list[dict]]
    environment: dict | None
    raw: dict | None


def kinds_of(section: str) -> dict[str, Kind]:
    """The declared kind of each field of a section's records ({} for an unknown one)."""
    rtype = record_type(section)
    return field_kinds(rtype) if rtype else {}


def load_document(path: str | Path) -> Document:
    """Read and validate a JSON or CSV results file written by a command."""
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"{p}: {'not a file' if p.exists() else 'no such file'}")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{p}: cannot read it ({exc})") from None
    return _csv_document(p, text) if p.suffix.lower() == ".csv" else _json_document(p, text)


def _json_document(path: Path, text: str) -> Document:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise UsageError(f"{path}: JSON nested too deeply") from None
    if not isinstance(doc, dict):
        raise UsageError(f"{path}: expected a JSON object written by attnbench")
    version = doc.get("schema_version")
    if version != SCHEMA_VERSION:
        raise UsageError(f"{path}: schema_version {version!r} is not supported (expected 1)")
    command = doc.get("command")
    if command not in COMMANDS:
        raise UsageError(f"{path}: unknown command {command!r}; expected one of {COMMANDS}")
    environment = doc.get("environment")
    if environment is not None and not isinstance(environment, dict):
        raise UsageError(f"{path}: environment: expected an object")
    if command == "run":
        sections = _run_sections(path, doc.get("sections"))
    else:
        name = COMMAND_SECTIONS[command]
        sections = {name: _check_records(path, name, doc.get("records"))}
        if doc.get(PARTS_SECTION) is not None:
            sections[PARTS_SECTION] = _check_records(path, PARTS_SECTION, doc[PARTS_SECTION])
    return Document(str(path), command, sections, environment, doc)


def _run_sections(path: Path, body: Any) -> dict[str, list[dict]]:
    if not isinstance(body, dict) or not body:
        raise UsageError(f"{path}: sections: expected an object of sections")
    sections = {}
    for name, section in body.items():
        if name not in KINDS:
            raise UsageError(f"{path}: sections: unknown section {name!r}")
        if not isinstance(section, dict):
            raise UsageError(f"{path}: sections.{name}: expected an object with records")
        sections[name] = _check_records(path, name, section.get("records"))
    return sections


def _check_records(path: Path, section: str, records: Any) -> list[dict]:
    """Records as dicts whose metrics are numbers or null (NaN counts as null)."""
    if not isinstance(records, list):
        raise UsageError(f"{path}: {section}: records: expected a list")
    kinds = kinds_of(section)
    rtype = record_type(section)
    timings = gated_timing(rtype).values() if rtype else []
    samples = {stats["samples"] for stats in timings if "samples" in stats}
    for i, rec in enumerate(records):
        where = f"{path}: {section} record {i}"
        if not isinstance(rec, dict):
            raise UsageError(f"{where}: expected an object")
        for name, value in rec.items():
            if name in samples:
                if value is not None and not (
                    isinstance(value, list) and all(is_number(v) for v in value)
                ):
                    raise UsageError(f"{where}: {name}: expected a list of numbers")
            elif kinds.get(name) in (Kind.EXACT, Kind.MEMORY, Kind.TIMING):
                if value is not None and not is_number(value):
                    raise UsageError(f"{where}: {name}: expected a number, got {value!r}")
                if isinstance(value, float) and math.isnan(value):
                    rec[name] = None
    return records


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _csv_document(path: Path, text: str) -> Document:
    reader = csv.DictReader(io.StringIO(text))
    fields = reader.fieldnames or []
    section = _csv_section(path, fields)
    records = []
    for line, row in enumerate(reader, start=2):
        if None in row:
            raise UsageError(f"{path}: line {line}: more cells than the header has columns")
        records.append({k: _cell(v) for k, v in row.items()})
    return Document(
        str(path), section, {section: _check_records(path, section, records)}, None, None
    )


def _csv_section(path: Path, fields: list[str]) -> str:
    """A CSV has no `command` field: tell the section from a column only it writes."""
    for column, section in (
        ("step_ms_median", "decode"),
        ("kv_bytes", "kvmem"),
        ("total_params", "params"),
        ("free_bytes_per_gpu", "fit"),
        ("part", PARTS_SECTION),
    ):
        if column in fields:
            return section
    raise UsageError(
        f"{path}: not an attnbench CSV (no step_ms_median, kv_bytes or total_params column)"
    )


def _cell(text: str | None) -> Any:
    """A CSV cell as the value the JSON would hold: '' -> None, '4096' -> 4096, 'True'."""
    if text is None or text == "":
        return None
    if text in ("True", "False"):
        return text == "True"
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        return text
    return value if math.isfinite(value) else text


def load_results(path: str | Path) -> dict:
    """A results.json written by `attnbench run`, validated; UsageError otherwise."""
    document = load_document(path)
    if document.command != "run" or document.raw is None:
        raise UsageError(f"{path}: written by `attnbench {document.command}`, not by "
                         "`attnbench run`")  # fmt: skip
    return document.raw


def incomplete(doc: dict) -> list[tuple[str, dict]]:
    """(section, record) of every point of a results document that did not complete."""
    return [(name, r) for name, section in doc["sections"].items()
            for r in section["records"] if failed(r)]  # fmt: skip
