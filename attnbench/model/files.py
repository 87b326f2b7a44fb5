"""Reading the files a user names (sweep files, config.json): only regular files, and at
most a given size, so a device, a FIFO or a huge file can neither block nor exhaust memory."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..errors import FieldError
from .units import binary_unit


def read_user_file(path: Path, field: str, limit: int | None = None) -> str:
    """The text of a file the user named for `field`; every failure is a FieldError.

    Only a regular file is read (a directory, a device such as /dev/zero, a FIFO or a
    socket is refused before anything is read, so nothing blocks), and with a `limit` at
    most `limit` bytes of it: a larger file is refused from its size, and one that grows
    while it is read is cut at `limit` + 1 bytes and refused. Line ends are read as '\\n'.
    """
    path = Path(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise FieldError(field, path, "file not found") from None
    except (OSError, ValueError) as exc:
        raise FieldError(field, path, f"cannot read it: {_reason(exc)}") from None
    _check_regular(info, field, path, limit)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
        with os.fdopen(fd, "rb") as file:
            # the path may have been replaced since the stat: check what was opened
            _check_regular(os.fstat(file.fileno()), field, path, limit)
            data = file.read() if limit is None else file.read(limit + 1)
    except FileNotFoundError:
        raise FieldError(field, path, "file not found") from None
    except OSError as exc:
        raise FieldError(field, path, f"cannot read it: {_reason(exc)}") from None
    if limit is not None and len(data) > limit:
        raise FieldError(field, path, f"file too large (over {format_size(limit)})")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FieldError(field, path, f"not UTF-8 text (byte {exc.start})") from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _check_regular(info: os.stat_result, field: str, path: Path, limit: int | None) -> None:
    if stat.S_ISDIR(info.st_mode):
        raise FieldError(field, path, "is a directory, not a file")
    if not stat.S_ISREG(info.st_mode):
        raise FieldError(field, path, "not a regular file (a device, pipe or socket)")
    if limit is not None and info.st_size > limit:
        raise FieldError(
            field,
            path,
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
