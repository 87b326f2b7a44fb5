"""Reading the files a user names (sweep files, config.json): only regular files, and at
most a given size, so a device, a FIFO or a huge file can neither block nor exhaust memory."""

from __future__ import annotations

import json
import os
import re
import stat
from collections import Counter
from pathlib import Path
from typing import Any, BinaryIO

from ..errors import FieldError, UsageError, brief
from .units import binary_unit

#: The longest name most file systems take for one file (NAME_MAX, in bytes).
NAME_MAX = 255


def _encoded(text: str) -> bytes | None:
    """`text` as the system's bytes for a file name; None when no file name can hold it
    (a lone surrogate that no byte stands for)."""
    try:
        return os.fsencode(text)
    except UnicodeEncodeError:
        return None


def refuse_empty(field: str, path: str | Path | None) -> None:
    """A name given empty (a variable the shell found unset) is refused, not read as the
    option left out, nor as the current folder (Path("") is ".")."""
    if path == "":
        raise FieldError(field, "", "empty; give a file's name")


def dangling_folder(path: str | Path, itself: bool = False) -> str | None:
    """Why no folder can be made on the way to `path` (or, `itself`, at it): one of them
    is a symlink to nothing, which a folder cannot be made over ("File exists"); None
    when none is."""
    path = Path(path)
    for folder in [path, *path.parents][0 if itself else 1 :]:
        if folder.is_symlink() and not folder.exists():
            return f"{folder} is a symlink to nothing ({os.readlink(folder)})"
    return None


def bad_name(path: str | Path) -> str | None:
    """Why the system would refuse `path` as a file's name, perhaps only once the folders
    before it are made: a part longer than any file's name can be (ENAMETOOLONG), or a
    character no file name can hold; None when it may name a file."""
    parts = [_encoded(part) for part in Path(path).parts]
    if any(part is None for part in parts):
        return "holds a character no file name can (a lone surrogate)"
    if any(len(part) > NAME_MAX for part in parts if part is not None):
        return "File name too long"
    return None


def shown_path(path: str | Path) -> str | Path:
    """`path` for a one-line message: as given, or quoted and cut (errors.brief) when it
    holds a line break or another unprintable character, or is longer than a file name
    can be (a name the system refused as too long would fill the screen)."""
    text = str(path)
    encoded = _encoded(text)
    if text.isprintable() and encoded is not None and len(encoded) <= NAME_MAX:
        return path
    return brief(text, 80)


def _read_at_most(file: BinaryIO, size: int) -> bytes:
    """Up to `size` bytes of `file`, read a MiB at a time: one read of `size` would
    allocate all of it first (1 GiB for a results file of a few KiB), which a process
    short of address space (`ulimit -v`) cannot."""
    chunks: list[bytes] = []
    left = size
    while left > 0 and (chunk := file.read(min(left, 1 << 20))):
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_user_file(path: Path, field: str, limit: int | None = None) -> str:
    """The text of a file the user named for `field`; every failure is a FieldError.

    Only a regular file is read (a directory, a device such as /dev/zero, a FIFO or a
    socket is refused before anything is read, so nothing blocks), and with a `limit` at
    most `limit` bytes of it: a larger file is refused from its size, and one that grows
    while it is read is cut at `limit` + 1 bytes and refused. Line ends are read as '\\n'.
    """
    path = Path(path)
    shown = shown_path(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise FieldError(field, shown, "no such file") from None
    except (OSError, ValueError) as exc:  # a name too long, a component not a directory
        raise FieldError(field, shown, f"cannot read it: {_reason(exc)}") from None
    _check_regular(info, field, shown, limit)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
        with os.fdopen(fd, "rb") as file:
            # the path may have been replaced since the stat: check what was opened
            _check_regular(os.fstat(file.fileno()), field, shown, limit)
            data = file.read() if limit is None else _read_at_most(file, limit + 1)
    except FileNotFoundError:
        raise FieldError(field, shown, "no such file") from None
    except OSError as exc:
        raise FieldError(field, shown, f"cannot read it: {_reason(exc)}") from None
    if limit is not None and len(data) > limit:
        raise FieldError(field, shown, f"file too large (over {format_size(limit)})")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FieldError(field, shown, f"not UTF-8 text (byte {exc.start})") from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _check_regular(info: os.stat_result, field: str, shown: str | Path, limit: int | None) -> None:
    if stat.S_ISDIR(info.st_mode):
        raise FieldError(field, shown, "is a directory, not a file")
    if not stat.S_ISREG(info.st_mode):
        raise FieldError(field, shown, "not a regular file (a device, pipe or socket)")
    if limit is not None and info.st_size > limit:
        raise FieldError(
            field,
            shown,
            f"file too large ({format_size(info.st_size)}; the limit is {format_size(limit)})",
        )


def _reason(exc: Exception) -> str:
    return getattr(exc, "strerror", None) or str(exc)


def format_size(n: int) -> str:
    """A byte count for a message, as coarse as it can be: 1 MiB, 47.7 MiB, 512 bytes."""
    divisor, unit = binary_unit(n)
    if unit == "B":
        return f"{n} bytes"
    return f"{n / divisor:.0f} {unit}" if n % divisor == 0 else f"{n / divisor:.1f} {unit}"


#: A JSON escape of a UTF-16 surrogate, \ud800 to \udfff: the only way a lone one gets
#: into text decoded from UTF-8.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def not_text(data: object, text: str) -> str | None:
    """Why JSON `data`, parsed from `text`, cannot be written out: a string in it holds a
    lone surrogate escape ("\\ud800"), which JSON parsers accept and UTF-8 refuses; None
    when none does. Checked as a file is read, so that a later write (a table, a CSV, a
    report) cannot fail half-way through a file it has opened. `data` is walked only
    where `text` escapes a surrogate at all (a pair stands for one character and is no
    fault): a results file's walk takes longer than its parse."""
    if not _SURROGATE_ESCAPE.search(text):
        return None
    where = _surrogate_at(data, "")
    if where is None:
        return None
    return f"{where} holds a lone surrogate escape, which no UTF-8 text can hold"


def _surrogate_at(data: object, where: str) -> str | None:
    """The path ('records[0].variant') of the first string in `data` that UTF-8 refuses."""
    if isinstance(data, str):
        try:
            data.encode("utf-8")
        except UnicodeEncodeError:
            return where or "a value"
        return None
    if isinstance(data, dict):
        for key, value in data.items():
            if _surrogate_at(key, "a key"):
                return f"a key of {where}" if where else "a key"
            if bad := _surrogate_at(value, f"{where}.{key}" if where else str(key)):
                return bad
        return None
    if isinstance(data, list):
        return next(
            (bad for i, v in enumerate(data) if (bad := _surrogate_at(v, f"{where}[{i}]"))), None
        )
    return None


#: The most digits an integer of a JSON file may have: as many as Python converts by
#: default (sys.get_int_max_str_digits), far beyond any count attnbench reads, which the
#: fields' own checks then refuse by name.
MAX_INT_DIGITS = 4300


def json_int(text: str) -> int:
    """A JSON integer (json.loads' parse_int); one of more than MAX_INT_DIGITS digits is a
    ValueError that says so, where Python's would advise raising its conversion limit."""
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {digits:,} digits: {MAX_INT_DIGITS:,} at most")
    return int(text)


def json_problem(exc: json.JSONDecodeError) -> str:
    """Where and why a text is not JSON: 'unterminated string at line 1, column 61'
    (json's own message leaves its position to be appended: 'Unterminated string starting
    at')."""
    if exc.msg.startswith("Unexpected UTF-8 BOM"):
        return "a byte-order mark before it: save the file as UTF-8 without one"
    what = exc.msg.removesuffix(" at").removesuffix(" starting")
    return f"{what[:1].lower()}{what[1:]} at line {exc.lineno}, column {exc.colno}"


def unique_keys(pairs: list[tuple[str, Any]], where: str) -> dict:
    """One JSON object's pairs as a dict (json.loads' object_pairs_hook); a key given
    twice is an error naming `where`, where json.loads would keep its last value."""
    found = dict(pairs)
    if len(found) < len(pairs):
        twice = next(k for k, n in Counter(k for k, _ in pairs).items() if n > 1)
        raise UsageError(f"{where}: duplicate key {brief(twice)}")
    return found
