"""Records out: CSV and JSON files written from the same records, and human units."""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import tempfile
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from pathlib import Path

from .. import __version__

SCHEMA_VERSION = 1

#: Record fields too long for a CSV cell; they go to JSON only.
JSON_ONLY_FIELDS = ("samples_ms",)


def as_dict(record) -> dict:
    """A record (dataclass or dict) as a plain dict."""
    return dataclasses.asdict(record) if dataclasses.is_dataclass(record) else dict(record)


def csv_fields(records: Sequence[dict]) -> list[str]:
    fields: list[str] = []
    for rec in records:
        fields.extend(k for k in rec if k not in fields and k not in JSON_ONLY_FIELDS)
    return fields


def write_csv(path: str | Path, records: Iterable) -> None:
    """Write records as CSV (None becomes an empty cell); raw samples stay in the JSON."""
    rows = [as_dict(r) for r in records]
    fields = csv_fields(rows)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def append_csv_row(path: str | Path, record) -> None:
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
        writer = csv.DictWriter(fh, fieldnames=header or csv_fields([row]), extrasaction="ignore")
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
    reader (or a crash) never sees half a file."""
    path = Path(path)
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


def format_bytes(n: int | float | None) -> str:
    """Binary units: 1536 -> '1.50 KiB'."""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


# Cell formatters for tables (terminal and Markdown); None shows as "-".


def fmt_plain(v) -> str:
    return "-" if v is None else str(v)


def fmt_int(v) -> str:
    return "-" if v is None else f"{v:,}"


def fmt_pct(v) -> str:
    """A fraction as a percentage: 0.25 -> '25.00%'."""
    return "-" if v is None else f"{v:.2%}"


def fmt_ms(v) -> str:
    return "-" if v is None else f"{v:.3f}"


def fmt_f1(v) -> str:
    return "-" if v is None else f"{v:.1f}"


def fmt_x(v) -> str:
    """A speed-up: 11.2 -> '11.2x'."""
    return "-" if v is None else f"{v:.1f}x"
