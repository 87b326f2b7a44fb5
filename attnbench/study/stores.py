"""Where a study's records go as they are made: kept in memory (a single command), or
in an output directory (results.json and a CSV per section), held by a lock file so
that one process writes there at a time."""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import FieldError, UsageError
from .documents import load_results
from .output import (
    append_csv_row,
    csv_row_count,
    write_csv,
    write_json_atomic,
)

RESULTS_FILE = "results.json"


class MemoryStore:
    """Keeps the document in memory: what a single command renders and writes at the end."""

    def exists(self) -> bool:
        return False

    def load(self) -> dict:
        raise UsageError("resume: nothing stored in memory to resume")

    def save(self, document: dict) -> None:
        pass

    def append(self, section: str, record: Any, record_type: type) -> None:
        pass

    def rewrite(self, section: str, records: list[dict], record_type: type) -> None:
        pass


#: The lock file `DirectoryStore` keeps in its directory while a study writes there.
LOCK_FILE = ".attnbench.lock"


@dataclass
class DirectoryStore:
    """results.json (rewritten atomically after each point) and one CSV per section
    (appended to) in `out_dir`, written by one process at a time: `locked()` holds
    `out_dir/.attnbench.lock` ("pid host") while a study writes there."""

    out_dir: Path
    #: The last document saved (or that failed to save): what to keep when a write fails.
    document: dict | None = field(default=None, repr=False)
    _lock_held: bool = field(default=False, repr=False)

    @property
    def path(self) -> Path:
        return self.out_dir / RESULTS_FILE

    @property
    def lock_path(self) -> Path:
        return self.out_dir / LOCK_FILE

    def exists(self) -> bool:
        return self.path.exists()

    def load(self) -> dict:
        if not self.path.is_file():
            raise FieldError("out", str(self.out_dir), f"no {RESULTS_FILE} there to resume")
        return load_results(self.path)

    def save(self, document: dict) -> None:
        self.document = document
        write_json_atomic(self.path, document)

    def append(self, section: str, record: Any, record_type: type) -> None:
        append_csv_row(self.csv_path(section), record, record_type)

    def csv_path(self, section: str) -> Path:
        return self.out_dir / f"{section}.csv"

    def rewrite(self, section: str, records: list[dict], record_type: type) -> None:
        """The section's CSV exactly as the JSON has it, so a row appended just before a
        crash (and not in the JSON) is not kept twice, and a CSV left from another study
        (with no results.json) is not appended to."""
        csv_path = self.csv_path(section)
        if records:
            write_csv(csv_path, records, record_type)
        else:
            csv_path.unlink(missing_ok=True)

    def agrees(self, section: str, records: list[dict]) -> bool:
        """The section's CSV holds as many rows as `records` (none: no CSV)."""
        rows = csv_row_count(self.csv_path(section))
        return (rows or 0) == len(records) and (rows is not None or not records)

    # --- one writer at a time ------------------------------------------------------------

    @contextmanager
    def locked(self) -> Iterator[str | None]:
        """Hold the directory's lock inside (re-entrant), creating the directory; yields a
        note when a stale lock (of a process no longer running) was taken over, else None.
        UsageError when another live process holds it; released on the way out, also on
        an exception or Ctrl-C."""
        if self._lock_held:
            yield None
            return
        note = self.acquire()
        try:
            yield note
        finally:
            self.release()

    def acquire(self) -> str | None:
        """Take the lock (see `locked`)."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        note = None
        for _ in range(3):  # a stale lock is moved aside, then the lock is taken again
            try:
                fd = os.open(self.lock_path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = _read_lock(self.lock_path)
                if holder is None:
                    continue  # removed meanwhile
                if not _stale(holder):
                    raise self._busy(holder) from None
                if self._move_aside(holder):
                    pid, host = _lock_owner(holder)
                    note = (f"{self.lock_path}: process {pid} on {host} that held it is no "
                            "longer running; took its lock over")  # fmt: skip
                continue
            with os.fdopen(fd, "w") as fh:
                fh.write(_holder() + "\n")
            self._lock_held = True
            return note
        raise self._busy(_read_lock(self.lock_path) or "")

    def release(self) -> None:
        """Remove the lock, if it is still this process's."""
        if not self._lock_held:
            return
        self._lock_held = False
        if _read_lock(self.lock_path) == _holder():
            self.lock_path.unlink(missing_ok=True)

    def _busy(self, holder: str) -> UsageError:
        pid, host = _lock_owner(holder)
        who = f"process {pid} on {host}" if pid else "another process"
        return FieldError("out", str(self.out_dir), f"in use by {who} (lock file "
                          f"{self.lock_path}); wait for it to finish, or choose another "
                          "directory; remove the lock file only if that process is "
                          "gone")  # fmt: skip

    def _move_aside(self, holder: str) -> bool:
        """Remove a stale lock, unless it changed meanwhile (another process took it
        over first): True when it was removed."""
        aside = self.lock_path.with_name(f"{LOCK_FILE}.{os.getpid()}.stale")
        try:
            os.rename(self.lock_path, aside)
        except FileNotFoundError:
            return False
        if _read_lock(aside) != holder:  # a fresh lock: put it back if none is there
            with contextlib.suppress(FileExistsError):
                os.link(aside, self.lock_path)
            aside.unlink(missing_ok=True)
            return False
        aside.unlink(missing_ok=True)
        return True


def _holder() -> str:
    """What this process writes in a lock file: "pid host"."""
    return f"{os.getpid()} {socket.gethostname()}"


def _read_lock(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except FileNotFoundError:
        return None


def _lock_owner(holder: str) -> tuple[int | None, str]:
    """(pid, host) of a lock file's text "pid host"; (None, '?') when unreadable."""
    pid, _, host = holder.partition(" ")
    return (int(pid), host.strip() or "?") if pid.isdigit() else (None, "?")


def _stale(holder: str) -> bool:
    """The lock's process is gone: on this host, and no process has its PID. A lock of
    another host (a shared file system), or one being written, is never stale."""
    pid, host = _lock_owner(holder)
    if pid is None or host != socket.gethostname():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    return False
