"""Records out: CSV and JSON files written from the same records.

A CSV holds every field its record type declares for CSV (all but raw samples), in UTF-8
with commas; the JSON holds the records whole. Every file is written atomically (a
temporary file renamed over it: replace_with, which the report and the plots use too), and
only over a regular file; a CSV row appended as a point finishes is the exception.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import json
import os
import stat
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any, TextIO

from .. import __version__
from ..errors import FieldError
from ..records import as_dict, csv_fields

SCHEMA_VERSION = 1


def _header(rows: Sequence[dict], record_type: type | None) -> list[str]:
    if record_type is not None:
        return csv_fields(record_type)
    fields: list[str] = []
    for rec in rows:
        fields.extend(k for k in rec if k not in fields)
    return fields


def writable_target(path: str | Path) -> Path:
    """The file a write to `path` lands in: `path`, or the file a symlink there points
    to. OSError (naming `path`) for what must not be written: a directory, a device, a
    FIFO or a socket (also behind a symlink), or a read-only file (by its mode bits, which
    root would otherwise write through)."""
    path = Path(path)
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    try:
        st = path.stat()  # through the link: /dev/stdout's leads to a pipe realpath can't name
    except FileNotFoundError:
        return target
    except OSError as exc:
        raise named(exc, path) from None
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory, not a file to write", str(path))
    if not stat.S_ISREG(st.st_mode):
        raise OSError(
            errno.EINVAL,
            "not a regular file (a device, a FIFO or a socket); give a file to write",
            str(path),
        )
    if not writable(target):
        raise PermissionError(errno.EACCES, "the file is read-only", str(path))
    return target


def writable(path: Path) -> bool:
    """Writable by this process, and by its mode bits too: root passes os.access on a
    read-only file or folder, and would write through it."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return bool(mode & 0o222) and os.access(path, os.W_OK)


def named(exc: OSError, path: str | Path) -> OSError:
    """`exc` with the file it failed on: a write that fails (a full disk) names none."""
    if exc.filename is not None or exc.errno is None:
        return exc
    return type(exc)(exc.errno, exc.strerror, str(path))


def write_csv(path: str | Path, records: Iterable, record_type: type | None = None) -> None:
    """Write records as CSV (None becomes an empty cell); raw samples stay in the JSON."""
    rows = [as_dict(r) for r in records]
    try:
        fields = _header(rows, record_type)

        def write(fh: TextIO) -> None:
            writer = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)

        replace_with(writable_target(path), write)  # a full disk leaves the old file whole
    except OSError as exc:
        raise named(exc, path) from None


def append_csv_row(path: str | Path, record, record_type: type | None = None) -> None:
    """Append one record to a CSV, under the header already there (fields it lacks stay
    in the JSON) or under a new header, so a study keeps each finished row as it goes."""
    row = as_dict(record)
    try:
        target = writable_target(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        header = None
        if target.exists() and target.stat().st_size:
            with target.open(newline="", encoding="utf-8") as fh:
                header = next(csv.reader(fh), None)
        with target.open("a", newline="", encoding="utf-8") as fh:
            fields = header or _header([row], record_type)
            writer = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
            if header is None:
                writer.writeheader()
            writer.writerow(row)
    except OSError as exc:
        raise named(exc, path) from None


def csv_row_count(path: str | Path) -> int | None:
    """The rows of a CSV under its header; None when there is no file (or no header)."""
    try:
        with Path(path).open(newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh)
            if next(reader, None) is None:
                return None
            return sum(1 for _ in reader)
    except FileNotFoundError:
        return None


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


def add_beside(document: dict, beside: Mapping[str, Sequence]) -> None:
    """Put into `document` the record sets a section writes beside its own records (the
    whole-model parts of `params`), a key each after them; an empty one is left out. The
    one layout of both a command's JSON and a study's results.json."""
    document.update({name: [as_dict(r) for r in rows] for name, rows in beside.items() if rows})


def write_json_atomic(path: str | Path, document: dict) -> None:
    """Write JSON to a temporary file beside the target, then rename it over the target,
    so a reader (or a crash) never sees half a file. Only a regular file (or nothing) is
    replaced, keeping its mode (and owner, where allowed); a symlink to one is followed and
    stays a symlink. A directory, a device, a FIFO, a socket or a read-only file there is
    an OSError, never overwritten. Every OSError names `path`."""
    try:
        target = writable_target(path)
        replace_with_json(target, document)
    except OSError as exc:
        raise named(exc, path) from None


def replace_with_json(target: Path, document: dict) -> None:
    def write(fh: TextIO) -> None:
        json.dump(document, fh, indent=2, allow_nan=False)
        fh.write("\n")

    replace_with(target, write)


def replace_with(target: Path, write: Callable[[IO[Any]], None], binary: bool = False) -> None:
    """`target` replaced by what `write` writes (text in UTF-8, or bytes when `binary`: a
    picture), through a temporary file beside it renamed over it, keeping its mode and
    owner (see write_json_atomic). Whatever `write` raises (a full disk, a drawing error,
    Ctrl-C) leaves `target` as it was, and no temporary file."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        before: os.stat_result | None = target.stat()
    except FileNotFoundError:
        before = None
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        fh = os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", newline="", encoding="utf-8")
        with fh:
            if before is None:
                umask = os.umask(0)
                os.umask(umask)
                os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes it private; a plain file's mode
            else:
                os.fchmod(fd, stat.S_IMODE(before.st_mode))
                if (before.st_uid, before.st_gid) != (os.geteuid(), os.getegid()):
                    with contextlib.suppress(PermissionError):  # only root gives files away
                        os.fchown(fd, before.st_uid, before.st_gid)
            write(fh)
            fh.flush()
            os.fsync(fd)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@dataclass
class Written:
    """The files a command's outputs went to, in order, and why the rest were not written
    (None: all were); then the records are kept in a file that error names."""

    paths: list[str] = field(default_factory=list)
    failure: FieldError | None = None


def write_outputs(
    command: str,
    records: Sequence,
    record_type: type,
    config: dict,
    environment: dict,
    csv_path: str | None,
    json_path: str | None,
    beside: Mapping[str, Sequence] | None = None,
) -> Written:
    """Write the CSV and JSON a command was asked for. `beside` holds the record sets
    written beside the records (whole-model parts), by name: a key of the JSON each, and a
    CSV beside the main one (`out.csv` -> `out.<name>.csv`). When a file cannot be written
    (a full disk), the records are kept in a file in the temporary folder, named in the
    failure, so the work done is not lost."""
    from .sections import BESIDE_RECORDS  # the kinds of record, above the files they fill

    beside = {name: rows for name, rows in (beside or {}).items() if rows}
    doc = json_document(command, records, config, environment)
    add_beside(doc, beside)
    written = Written()
    field_name = "csv"
    try:
        if csv_path:
            write_csv(csv_path, records, record_type)
            written.paths.append(csv_path)
            for name, rows in beside.items():
                side = beside_csv_path(csv_path, name)
                write_csv(side, rows, BESIDE_RECORDS[name])
                written.paths.append(side)
        if json_path:
            field_name = "json"
            write_json_atomic(json_path, doc)
            written.paths.append(json_path)
    except OSError as exc:
        kept = keep_records(command, doc)
        written.failure = FieldError(
            field_name,
            exc.filename or (json_path if field_name == "json" else csv_path),
            f"cannot write: {exc.strerror}{kept_text(kept)}",
        )
    return written


def beside_csv_path(csv_path: str, name: str) -> str:
    """Where the record set `name` goes beside a command's CSV: out.csv -> out.<name>.csv."""
    path = Path(csv_path)
    return str(path.with_name(f"{path.stem}.{name}{path.suffix or '.csv'}"))


def keep_records(command: str, document: dict) -> Path | None:
    """Save `document` (records that could not be written where asked) to a new file in
    the system's temporary folder, else in the current one; its path, or None when
    neither takes it."""
    for folder in (tempfile.gettempdir(), "."):
        try:
            fd, name = tempfile.mkstemp(prefix=f"attnbench-{command}-", suffix=".json", dir=folder)
            try:
                with os.fdopen(fd, "w", newline="", encoding="utf-8") as fh:
                    json.dump(document, fh, indent=2, allow_nan=False, default=str)
                    fh.write("\n")
            except BaseException:
                Path(name).unlink(missing_ok=True)
                raise
        except (OSError, ValueError):
            continue
        return Path(name).resolve()
    return None


def kept_text(kept: Path | None) -> str:
    """The end of an error about outputs not written: where the records went instead."""
    if kept is None:
        return "; the records could not be kept anywhere (no space in the temporary folder or here)"
    return f"; the records are kept in {kept}"
