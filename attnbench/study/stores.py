"""Where a study's records go as they are made: kept in memory (a single command), or
in an output directory (results.json and a CSV per section), held by a lock file so
that one process writes there at a time."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import signal
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import FieldError, UsageError, one_line
from ..model.files import shown_path
from ..records import csv_fields
from .documents import load_results
from .output import (
    append_csv_row,
    csv_row_count,
    write_csv,
    write_json_atomic,
)
from .shards import SHARDS_DIR, share_named

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


def check_resumable(out_dir: Path) -> None:
    """A study can be resumed in `out_dir`: it holds its results.json."""
    if not (out_dir / RESULTS_FILE).is_file():
        raise FieldError("out", str(out_dir), f"no {RESULTS_FILE} there to resume")


@dataclass
class DirectoryStore:
    """results.json (rewritten atomically after each point) and one CSV per section
    (appended to), and per record set written beside them (model_parts.csv, written
    whole), in `out_dir`, written by one process at a time: `locked()` holds
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
        check_resumable(self.out_dir)
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

    def check_csv(self, section: str, record_type: type) -> None:
        """Refuse to resume into a section's CSV that rows cannot be appended to without
        losing fields: not UTF-8, not CSV, or its header lacks a column (a file saved by a
        spreadsheet: a byte-order mark, semicolons). Nothing is written over it; moved
        aside, it is written again from results.json."""
        path = self.csv_path(section)
        try:
            text = path.read_bytes().decode("utf-8")
            rows = list(csv.reader(io.StringIO(text)))  # all of them: counted later
        except FileNotFoundError:
            return
        except UnicodeDecodeError as exc:
            problem = f"not UTF-8 text (byte {exc.start})"
        except OSError as exc:
            problem = f"cannot read it ({exc.strerror})"
        except csv.Error as exc:  # a cell over the csv module's limit
            problem = f"not a CSV attnbench reads ({exc})"
        else:
            header = rows[0] if rows else []
            missing = [name for name in csv_fields(record_type) if name not in header]
            if not rows or not missing:
                return
            sep = next((c for c in ";\t|" if len(header) == 1 and c in header[0]), None)
            causes = []
            if text.startswith("\ufeff"):
                causes.append("starts with a byte-order mark")
            if sep:
                causes.append(f"its columns are separated by {sep!r}, not commas")
            if causes:
                problem = f"{' and '.join(causes)} (as a spreadsheet saves it)"
            else:
                problem = f"its header lacks {listed(missing)}"
        raise UsageError(
            f"resume: {shown_path(path)}: {problem}; rows appended to it would "
            "lose fields: move it aside, and resuming writes it again from "
            f"{RESULTS_FILE}"
        )

    def agrees(self, section: str, records: list[dict]) -> bool:
        """The section's CSV holds as many rows as `records` (none: no CSV), the last one
        whole: a row cut short by a crash would run into the next one appended."""
        path = self.csv_path(section)
        rows = csv_row_count(path)
        if rows is None:
            return not records
        return rows == len(records) and _ends_a_line(path)

    # --- one writer at a time ------------------------------------------------------------

    @contextmanager
    def locked(self) -> Iterator[str | None]:
        """Hold the directory's lock inside (re-entrant), creating the directory; yields a
        note when a stale lock (of a process no longer running) was taken over, else None.
        UsageError when another live process holds it; released on the way out, also on
        an exception, Ctrl-C, SIGTERM or SIGHUP (see stops_as_ctrl_c)."""
        if self._lock_held:
            yield None
            return
        with stops_as_ctrl_c():
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
                    note = (
                        f"{shown_path(self.lock_path)}: {_who(holder)} that held it is no "
                        "longer running; took its lock over"
                    )
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
        return FieldError(
            "out",
            shown_path(self.out_dir),
            f"in use by {_who(holder)} (lock "
            f"file {shown_path(self.lock_path)}); wait for it to finish, or "
            "choose another directory; remove the lock file only if that "
            "process is gone",
        )

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


#: Signals that end a process by default, leaving its lock behind: while a lock is held,
#: they stop it as Ctrl-C does. One that is ignored (SIGHUP under nohup) stays ignored.
STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)
)


@contextmanager
def stops_as_ctrl_c() -> Iterator[None]:
    """Inside, SIGTERM and SIGHUP raise KeyboardInterrupt, as Ctrl-C does, so that what
    is held (a lock) is released on the way out and the command says how to go on."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame) -> None:
        raise KeyboardInterrupt

    caught = [s for s in STOP_SIGNALS if signal.getsignal(s) is signal.SIG_DFL]
    for sig in caught:
        signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig in caught:
            signal.signal(sig, signal.SIG_DFL)


def written_by_run(path: Path) -> dict | None:
    """The document at `path` when it is a results file `attnbench run` wrote (a JSON
    object of its command, with sections), else None; its records are not checked here."""
    try:
        doc = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    ours = isinstance(doc, dict) and doc.get("command") == "run"
    return doc if ours and isinstance(doc.get("sections"), dict) else None


def holds_study(folder: Path) -> bool:
    """`folder` holds a study: a results.json written by `attnbench run`, or its shares'."""
    shares = (folder / SHARDS_DIR).glob(f"*/{RESULTS_FILE}")
    return any(written_by_run(p) is not None for p in (folder / RESULTS_FILE, *shares))


def foreign_files(folder: Path) -> list[str]:
    """The names in `folder` that are not a study's, sorted: none when it holds a study
    (holds_study), else all but what a study keeps there beside its results: its lock (or
    one moved aside), a results.json being replaced, its shares. OSError when `folder`
    cannot be listed."""
    kept = (f"{LOCK_FILE}.", f".{RESULTS_FILE}.")
    names = [
        n for n in os.listdir(folder) if n not in (LOCK_FILE, SHARDS_DIR) and not n.startswith(kept)
    ]
    return sorted(names) if names and not holds_study(folder) else []


def share_in(folder: Path) -> str | None:
    """Which share of a study ("i/N") `folder` holds (its results.json says so), or is
    named for (DIR/shards/<i>-of-<N>/, before its results.json is written); else None."""
    doc = written_by_run(folder / RESULTS_FILE)
    about = doc.get("shard") if doc is not None else None
    if isinstance(about, dict):
        return f"{one_line(str(about.get('index')), 20)}/{one_line(str(about.get('count')), 20)}"
    share = share_named(Path(os.path.realpath(folder)))
    return str(share) if share is not None else None


def _ends_a_line(path: Path) -> bool:
    with path.open("rb") as fh:
        fh.seek(-1, os.SEEK_END)
        return fh.read(1) == b"\n"


def listed(names: list[str], shown: int = 3) -> str:
    """'a, b, c and 4 more': the first `shown` of `names`, each on one short line."""
    text = ", ".join(one_line(name, 40) for name in names[:shown])
    return text + (f" and {len(names) - shown:,} more" if len(names) > shown else "")


def _holder() -> str:
    """What this process writes in a lock file: "pid host"."""
    return f"{os.getpid()} {socket.gethostname()}"


#: More than a lock file of ours holds ("pid host"): what is read of one.
LOCK_BYTES = 4096


def _read_lock(path: Path) -> str | None:
    """A lock file's text; None when there is none, '' when it cannot be read (a
    directory in its place): a lock of no known process."""
    try:
        with path.open("rb") as fh:
            return fh.read(LOCK_BYTES).decode("utf-8", errors="replace").strip()
    except FileNotFoundError:
        return None
    except OSError:
        return ""


def _lock_owner(holder: str) -> tuple[str | None, str]:
    """(pid, host) of a lock file's text "pid host"; (None, '?') when unreadable. The PID
    stays text: it may have more digits than any process's number."""
    pid, _, host = holder.partition(" ")
    if not (pid.isascii() and pid.isdigit()):
        return None, "?"
    return pid, host.strip() or "?"


def _who(holder: str) -> str:
    """The process of a lock file's text, in one short line."""
    pid, host = _lock_owner(holder)
    return f"process {one_line(pid, 30)} on {one_line(host, 80)}" if pid else "another process"


def _stale(holder: str) -> bool:
    """The lock's process is gone: on this host, and no process has its PID. A lock of
    another host (a shared file system), or one being written, is never stale."""
    pid, host = _lock_owner(holder)
    if pid is None or host != socket.gethostname():
        return False
    try:
        os.kill(int(pid), 0)
    except (ProcessLookupError, OverflowError):  # no process has it, or could
        return True
    except PermissionError:  # alive, another user's
        return False
    return False
