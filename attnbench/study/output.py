"""Records out: CSV and JSON files written from the same records.

A CSV holds every field its record type declares for CSV (all but raw samples); the JSON
holds the records whole. JSON is written atomically, and only over a regular file.
"""

from __future__ import annotations

import csv
import json
import os
import stat
import tempfile
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from pathlib import Path

from .. import __version__
from ..records import as_dict, csv_fields

SCHEMA_VERSION = 1


def _header(rows: Sequence[dict], record_type: type | None) -> list[str]:
    if record_type is not None:
        return csv_fields(record_type)
    fields: list[str] = []
    for rec in rows:
        fields.extend(k for k in rec if k not in fields)
    return fields


def write_csv(path: str | Path, records: Iterable, record_type: type | None = None) -> None:
    """Write records as CSV (None becomes an empty cell); raw samples stay in the JSON."""
    rows = [as_dict(r) for r in records]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=_header(rows, record_type), extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def append_csv_row(path: str | Path, record, record_type: type | None = None) -> None:
    """Append one record to a CSV, under the header already there (fields it lacks stay
    in the JSON) or under a new header, so a study keeps each finished row as it goes."""
    row = as_dict(record)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    header = None
    if path.exists() and path.stat().st_size:
        with path.open(newline="") as fh:
            header = next(csv.reader(fh), None)
    with path.open("a", newline="") as fh:
        fields = header or _header([row], record_type)
        writer = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
        if header is None:
            writer.writeheader()
        writer.writerow(row)


def document_header(command: str, config: dict, environment: dict) -> dict:
    """The fields every JSON document starts with (schema_version 1)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "command": command,
        "attnbench_version": __version__,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "environment": environment,
        "config": config,
    }


def json_document(command: str, records: Iterable, config: dict, environment: dict) -> dict:
    """The JSON layout every single-section command writes."""
    return {
        **document_header(command, config, environment),
        "records": [as_dict(r) for r in records],
    }


def write_json_atomic(path: str | Path, document: dict) -> None:
    """Write JSON to a temporary file beside `path`, then rename it over `path`, so a
    reader (or a crash) never sees half a file. Only a regular file (or nothing) is
    replaced: a device, a FIFO or a directory there is an OSError, never overwritten."""
    path = Path(path)
    if path.exists() and not stat.S_ISREG(path.stat().st_mode):
        raise IsADirectoryError(21, "not a regular file", str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    umask = os.umask(0)
    os.umask(umask)
    try:
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes it private; give it a plain file's mode
        with os.fdopen(fd, "w") as fh:
            json.dump(document, fh, indent=2, allow_nan=False)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
