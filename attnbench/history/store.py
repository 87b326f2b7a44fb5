"""The history database: runs stored with their commit, environment and records (keys,
metrics with their declared kinds, raw timing samples).

Storage sits behind `HistoryBackend`: add a run, list the runs, read the stored points of
one metric. SQLite, from the standard library, is the backend here: one file, WAL mode so
that concurrent writers queue (busy timeout) instead of failing, and every run added in
one transaction, so a process killed mid-add leaves nothing half-stored. A second backend
(PostgreSQL, say) is one module implementing the protocol, chosen by `open_history` from
the database's address.

The schema is versioned (SQLite's `user_version`) and upgraded on open by the migrations
in MIGRATIONS, in order; a database newer than this code is refused. A history is told
from other SQLite files by its `application_id` (set when it is created; one made by an
earlier attnbench, which set none, by its tables and schema version, and gets the id when
written to). Only `history add` creates a database; every other command needs one that is
there, and refuses any other file rather than adding tables to it. Those commands only
read: they open it read-only. Every command checks the whole file as it opens it, and
refuses a damaged one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import sqlite3
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import FieldError, UsageError, brief
from ..gate.rules import GATING_ENV_FIELDS
from ..model.files import shown_path
from ..records import Kind, gated_timing

if TYPE_CHECKING:
    from ..study.documents import Document

#: Where `attnbench history` keeps its database unless told otherwise.
DEFAULT_DB = Path("results") / "history.sqlite"
#: The environment fields that make two runs' timings comparable (as compare gates them).
IDENTITY_FIELDS = (*GATING_ENV_FIELDS, "cpu_model")
#: SQLite's application_id of an attnbench history ("ATNB"): what tells it from the
#: databases of other programs.
APPLICATION_ID = 0x41544E42
#: The tables of every schema: with a user_version, what marks a history made before the
#: application_id was set.
CORE_TABLES = frozenset({"runs", "records", "metrics"})
#: How long a writer waits for another one to finish, in milliseconds.
BUSY_TIMEOUT_MS = 30_000

#: Each step of the schema, applied in order; the database's user_version counts them.
MIGRATIONS: tuple[str, ...] = (
    # 1: runs, their records and metrics
    """
    CREATE TABLE runs (
        id INTEGER PRIMARY KEY,
        content_hash TEXT NOT NULL UNIQUE,
        commit_sha TEXT NOT NULL,
        committed_at TEXT,
        created TEXT,
        added_at TEXT NOT NULL,
        command TEXT NOT NULL,
        environment_id TEXT NOT NULL,
        environment TEXT NOT NULL,
        source TEXT
    );
    CREATE TABLE records (
        id INTEGER PRIMARY KEY,
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        section TEXT NOT NULL,
        position INTEGER NOT NULL,
        keys TEXT NOT NULL
    );
    CREATE TABLE metrics (
        record_id INTEGER NOT NULL REFERENCES records(id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        kind TEXT NOT NULL,
        value REAL,
        PRIMARY KEY (record_id, name)
    );
    CREATE INDEX metrics_by_name ON metrics(name);
    """,
    # 2: the branch of each run, each record whole, and raw timing samples
    """
    ALTER TABLE runs ADD COLUMN branch TEXT;
    ALTER TABLE records ADD COLUMN record TEXT;
    CREATE TABLE samples (
        record_id INTEGER NOT NULL REFERENCES records(id) ON DELETE CASCADE,
        metric TEXT NOT NULL,
        samples TEXT NOT NULL,
        PRIMARY KEY (record_id, metric)
    );
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)


@dataclass(frozen=True)
class Commit:
    """The code a run measured: its commit, branch and date (ISO 8601): when the run was
    written, or the commit date where the file does not say."""

    sha: str
    branch: str | None = None
    date: str | None = None


@dataclass(frozen=True)
class RunInfo:
    """One stored run."""

    id: int
    commit: Commit
    created: str | None
    environment_id: str
    environment: dict
    command: str


@dataclass(frozen=True)
class StoredPoint:
    """One metric of one record of one run."""

    run: RunInfo
    section: str
    keys: dict
    kind: str
    value: float | None
    samples: list[float] | None


class HistoryBackend(Protocol):
    """What the history needs of a storage: adding a run is atomic and idempotent (by
    content hash); reading gives points ordered by commit date, then by when added."""

    def add(self, document: Document, commit: Commit) -> tuple[int, bool]:
        """Store a run; (its id, whether it was new)."""
        ...

    def runs(self) -> list[RunInfo]: ...

    def run_of(self, document: Document) -> int | None:
        """The id of the run stored from these very results (by content hash), or None."""
        ...

    def run_records(self, run_id: int) -> list[tuple[str, dict]]: ...

    def points(self, metric: str) -> list[StoredPoint]: ...

    def metric_kinds(self) -> dict[str, str]:
        """Every stored metric and its declared kind."""
        ...

    def close(self) -> None: ...


def environment_id(environment: dict | None) -> str:
    """A short name for the environment fields that decide whether timings compare."""
    identity = {f: (environment or {}).get(f) for f in IDENTITY_FIELDS}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:10]


def content_hash(document: Document) -> str:
    """The run's identity: a hash of its file's content (keys sorted), so the same results
    added twice are recognised, whatever the commit they are said to come from."""
    raw = document.raw if document.raw is not None else {"sections": document.sections}
    text = json.dumps(raw, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def check_timings(document: Document) -> None:
    """UsageError naming the file, record and field of a timing of 0 ms (a median, a
    quartile, a sample; one below 0 was refused as the file was read): the history finds
    changes in a series by the ratios of its timings, which 0 has none of."""
    from ..study.documents import kinds_of

    for section, records in document.sections.items():
        timings = [name for name, kind in kinds_of(section).items() if kind is Kind.TIMING]
        for i, record in enumerate(records):
            if at := _zero_timing(record, timings):
                raise UsageError(
                    f"{document.path}: {section} record {i}: {at}: 0 ms: the history "
                    "takes timings above 0, as it finds a change by their ratios"
                )


def _zero_timing(record: dict, timings: Sequence[str]) -> str | None:
    """Where `record` holds a timing of 0 ('samples_ms[3]', 'step_ms_median'), if anywhere:
    its fields `timings` hold a number, or a list of them."""
    for name in timings:
        value = record.get(name)
        values = value if isinstance(value, list) else [value]
        for j, item in enumerate(values):
            if _finite(item) and item <= 0:
                return f"{name}[{j}]" if isinstance(value, list) else name
    return None


class SqliteHistory:
    """The history in one SQLite file (see the module docstring)."""

    def __init__(self, path: str, create: bool = False) -> None:
        """Open the history at `path`: with `create` for writing (`history add`: a missing
        or empty file becomes a new one), else read-only (_open_reader). FieldError
        (field `db`) for anything else that is not a history, and for a damaged one."""
        self.path = Path(path)
        self.shown = shown_path(path)  # in errors: as typed, unless too long or unprintable
        self._tidy = False  # whether closing removes the -wal and -shm a reader made
        new = self._check_file(create)  # before SQLite opens it: opening creates a file
        if create:
            self._open_writer(new, create)
        else:
            self._open_reader()

    def _open_writer(self, new: bool, create: bool) -> None:
        """Open the history for writing, its schema brought up to date (`new`: nothing was
        at the path; `create`: an empty database becomes a history)."""
        try:
            if create:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            if new:  # made here, so that a failure removes only a file this process made
                new = _made_here(self.path)
            self.db = sqlite3.connect(
                self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None
            )
        except (sqlite3.DatabaseError, OSError) as exc:
            if new:  # the empty file made here for it (a name SQLite cannot open)
                self.path.unlink(missing_ok=True)
            raise FieldError("db", self.shown, f"cannot open it: {_why(exc)}") from None
        try:
            self.db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self.db.execute("PRAGMA foreign_keys = ON")
            self._check_integrity()  # before anything is written to it
            self._migrate(create)
            self.db.execute("PRAGMA journal_mode = WAL")  # not within a transaction
        except sqlite3.DatabaseError as exc:  # OperationalError: a full disk, a read-only file
            busy = isinstance(exc, sqlite3.OperationalError) and _busy(exc)
            self._close(new and not busy)  # busy: another process has it now
            raise FieldError("db", self.shown, _refusal(exc, "write")) from None
        except BaseException:
            self._close(new)
            raise

    def _open_reader(self) -> None:
        """Open the history read-only (SQLite's mode=ro), so that the commands that only
        read it never write it, and read one they may not write. Where this process may
        not write the file or its folder and no write-ahead log (-wal) is beside it, it is
        opened immutable: no process with its rights can be writing it, and SQLite would
        have to make -wal and -shm files beside it, which it could not, or would leave
        there. A history of an older schema is upgraded first, where it can be written."""
        logged = Path(f"{self.path}-wal").exists()
        writable = _writable(self.path)
        mode = "mode=ro" if logged or writable else "immutable=1"
        try:
            self.db = sqlite3.connect(
                f"{self.path.absolute().as_uri()}?{mode}",
                uri=True,
                timeout=BUSY_TIMEOUT_MS / 1000,
                isolation_level=None,
            )
        except sqlite3.DatabaseError as exc:
            raise FieldError("db", self.shown, f"cannot open it: {_why(exc)}") from None
        self._tidy = writable and not logged  # SQLite leaves those a reader makes
        try:
            self._check_integrity()
            version = self._identify(create=False)
        except sqlite3.DatabaseError as exc:
            self.close()
            raise FieldError("db", self.shown, _refusal(exc, "read")) from None
        except BaseException:
            self.close()
            raise
        if version < SCHEMA_VERSION:
            self.close()
            self._upgrade(version)

    def _upgrade(self, version: int) -> None:
        """Open a history of an older schema (`version`) for writing, which brings it up
        to date; FieldError where this process may not write it."""
        if not _writable(self.path):
            raise FieldError(
                "db",
                self.shown,
                f"a history of schema {version}, which must be upgraded to this "
                f"attnbench's ({SCHEMA_VERSION}) to be read, and it may not be written "
                "here; make it writable, and reading it upgrades it",
            )
        self._tidy = False
        self._open_writer(new=False, create=False)

    def _check_integrity(self) -> None:
        """FieldError for a damaged file (pages overwritten), which SQLite otherwise reads
        as far as it can: a query that misses the damaged pages would find a metric gone,
        or no change, in place of saying so. SQLite's quick_check reads every page once."""
        if self.db.execute("PRAGMA quick_check(1)").fetchone() != ("ok",):
            raise FieldError("db", self.shown, "cannot use it: database disk image is malformed")

    def _close(self, made_here: bool) -> None:
        """Close the database; a file this process made and nothing filled (a full disk
        refused its first page) is removed rather than left empty."""
        self.db.close()
        with contextlib.suppress(OSError):
            if made_here and self.path.stat().st_size == 0:
                self.path.unlink()

    def _check_file(self, create: bool) -> bool:
        """FieldError for a path that holds no history and must not become one: nothing
        there or an empty file (unless `create`), a directory, a device or a FIFO, a name
        the system refuses (too long). True where nothing is there (`create`: SQLite will
        make the file)."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            if create:
                return True
            default = " (the default database)" if self.path == DEFAULT_DB else ""
            raise FieldError(
                "db",
                self.shown,
                f"no such file{default}; `attnbench history add` creates a history",
            ) from None
        except (OSError, ValueError) as exc:  # ValueError: a NUL in the name
            raise FieldError("db", self.shown, f"cannot open it: {_why(exc)}") from None
        if stat.S_ISDIR(st.st_mode):
            raise FieldError("db", self.shown, "a directory, not a history database")
        if not stat.S_ISREG(st.st_mode):
            raise FieldError("db", self.shown, "not a regular file, so not a history database")
        if st.st_size == 0 and not create:
            raise FieldError(
                "db",
                self.shown,
                "an empty file: it holds no history; `attnbench history add` fills one",
            )
        return False

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction, taken at once (BEGIN IMMEDIATE: a second writer waits for
        the busy timeout), committed whole or rolled back."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def _migrate(self, create: bool) -> None:
        """Check that the database is a history (_identify), then bring its schema up to
        date and mark it as a history, in one transaction: a second process creating the
        same history waits, then finds it made."""
        with self._transaction() as db:
            version = self._identify(create)
            for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
                for statement in filter(str.strip, script.split(";")):
                    db.execute(statement)
                db.execute(f"PRAGMA user_version = {number}")
            db.execute(f"PRAGMA application_id = {APPLICATION_ID}")

    def _identify(self, create: bool) -> int:
        """The schema version of the history; FieldError for a database that is no
        history (an empty one is, with `create`: a new file), or is of a newer schema."""
        app_id = self.db.execute("PRAGMA application_id").fetchone()[0]
        version = self.db.execute("PRAGMA user_version").fetchone()[0]
        tables = {row[0] for row in self.db.execute("SELECT name FROM sqlite_master")}
        empty = app_id == 0 and version == 0 and not tables
        older = app_id == 0 and version > 0 and tables >= CORE_TABLES  # no id set then
        if empty and not create:
            raise FieldError(
                "db",
                self.shown,
                "an empty database: it holds no history; `attnbench history add` fills one",
            )
        if not (empty or older or app_id == APPLICATION_ID):
            raise FieldError(
                "db",
                self.shown,
                "an SQLite database, but not an attnbench history; give the path of one",
            )
        if version > SCHEMA_VERSION:
            raise FieldError(
                "db",
                self.shown,
                f"a history of schema {version}, "
                f"newer than this attnbench's ({SCHEMA_VERSION}); upgrade "
                "attnbench",
            )
        return version

    def add(self, document: Document, commit: Commit) -> tuple[int, bool]:
        digest = content_hash(document)
        env = document.environment or {}
        with self._transaction() as db:
            found = db.execute("SELECT id FROM runs WHERE content_hash = ?", (digest,)).fetchone()
            if found:
                return found[0], False
            run_id = db.execute(
                "INSERT INTO runs (content_hash, commit_sha, branch, committed_at, created, "
                "added_at, command, environment_id, environment, source) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    digest,
                    commit.sha,
                    commit.branch,
                    commit.date,
                    (document.raw or {}).get("created"),
                    _now(),
                    document.command,
                    environment_id(env),
                    json.dumps(env, sort_keys=True),
                    document.path,
                ),
            ).lastrowid
            for section, records in document.sections.items():
                for position, record in enumerate(records):
                    self._add_record(db, run_id, section, position, record)  # type: ignore[arg-type]
        return run_id, True  # type: ignore[return-value]

    @staticmethod
    def _add_record(
        db: sqlite3.Connection, run_id: int, section: str, position: int, record: dict
    ) -> None:
        from ..study.documents import is_number, kinds_of
        from ..study.sections import record_type

        kinds = kinds_of(section)
        keys = {k: v for k, v in record.items() if kinds.get(k) is Kind.KEY}
        record_id = db.execute(
            "INSERT INTO records (run_id, section, position, keys, record) VALUES (?, ?, ?, ?, ?)",
            (run_id, section, position, json.dumps(keys, sort_keys=True), json.dumps(record)),
        ).lastrowid
        metrics = [
            (record_id, name, kinds[name].value, _real(record[name]))
            for name in record
            if kinds.get(name) not in (None, Kind.KEY)
            and (record[name] is None or is_number(record[name]))
        ]
        db.executemany("INSERT INTO metrics VALUES (?, ?, ?, ?)", metrics)
        rtype = record_type(section)
        for metric, stats in (gated_timing(rtype) if rtype else {}).items():
            samples = record.get(stats.get("samples", ""))
            if samples:
                db.execute(
                    "INSERT INTO samples VALUES (?, ?, ?)", (record_id, metric, json.dumps(samples))
                )

    def runs(self) -> list[RunInfo]:
        rows = self.db.execute(f"SELECT {_RUN_COLUMNS} FROM runs u ORDER BY {_ORDER}").fetchall()
        return [_run_info(row) for row in rows]

    def run_of(self, document: Document) -> int | None:
        digest = content_hash(document)
        found = self.db.execute("SELECT id FROM runs WHERE content_hash = ?", (digest,)).fetchone()
        return found[0] if found else None

    def points(self, metric: str) -> list[StoredPoint]:
        rows = self.db.execute(
            f"SELECT {_RUN_COLUMNS}, r.section, r.keys, m.kind, m.value, s.samples "
            "FROM metrics m JOIN records r ON r.id = m.record_id JOIN runs u ON u.id = r.run_id "
            "LEFT JOIN samples s ON s.record_id = r.id AND s.metric = m.name "
            f"WHERE m.name = ? ORDER BY {_ORDER}, r.position",
            (metric,),
        ).fetchall()
        width = len(_RUN_COLUMNS.split(","))
        return [_point(metric, _run_info(row[:width]), *row[width:]) for row in rows]

    def run_records(self, run_id: int) -> list[tuple[str, dict]]:
        """(section, record) of every record of a run, in its order; a record stored
        before records were kept whole (schema 1) is its keys and metrics."""
        rows = self.db.execute(
            "SELECT r.id, r.section, r.position, r.keys, r.record FROM records r "
            "WHERE r.run_id = ? ORDER BY r.id",
            (run_id,),
        ).fetchall()
        found = []
        for record_id, section, position, keys, whole in rows:
            if whole is None:
                metrics = self.db.execute(
                    "SELECT name, value FROM metrics WHERE record_id = ?", (record_id,)
                ).fetchall()
                record = {**_stored_json(keys, dict), **dict(metrics)}
            else:
                record = _stored_json(whole, dict)
            _check_sampled(section, record, f"run {run_id}'s {section} record {position}")
            found.append((section, record))
        return found

    def metric_kinds(self) -> dict[str, str]:
        rows = self.db.execute("SELECT DISTINCT name, kind FROM metrics ORDER BY name")
        return dict(rows.fetchall())

    def close(self) -> None:
        self.db.close()
        if self._tidy:
            _remove_wal(self.path)


_RUN_COLUMNS = (
    "u.id, u.commit_sha, u.branch, u.committed_at, u.created, u.environment_id, "
    "u.environment, u.command"
)
_ORDER = "COALESCE(u.committed_at, u.created), u.id"


def _real(value: int | float | None) -> float | None:
    """A metric as its REAL column holds it: SQLite stores an integer there as a float
    anyway, and takes no integer beyond 64 bits (a predicted count at the largest shapes
    is one)."""
    return None if value is None else float(value)


def _stored_json(text: Any, kind: type) -> Any:
    """A JSON value the history stored, of `kind`; a damaged file's (a NULL where SQLite
    kept a page of other bytes, text that is not that JSON) is a DatabaseError, which
    database_failures reports as the file's, never a traceback."""
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        value = None
    if not isinstance(value, kind):
        raise sqlite3.DatabaseError(f"a stored value is damaged: {brief(text)}")
    return value


def _damaged(where: str, value: Any, what: str) -> sqlite3.DatabaseError:
    """The error of a stored value that no results file holds (as _stored_json's)."""
    return sqlite3.DatabaseError(
        f"a stored value is damaged: {where}: {brief(value)} is not {what}"
    )


def _finite(value: Any) -> bool:
    """Whether `value` is a finite number (not a boolean; nor an integer beyond a float)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _stored_numbers(values: list, where: str, signed: bool = False) -> None:
    """DatabaseError (_damaged) for the first of `values` that is no finite number, or
    is below 0 unless `signed`: a damaged file's, which the series' statistics would
    fail on, or show as a time."""
    for value in values:
        if not (_finite(value) and (signed or value >= 0)):
            raise _damaged(where, value, "a finite number" + " >= 0" * (not signed))


def _point(
    metric: str, run: RunInfo, section: str, keys: Any, kind: str, value: Any, samples: Any
) -> StoredPoint:
    """A stored point of `metric`, its value (below 0 only where not a timing) and raw
    samples checked (_stored_numbers)."""
    if value is not None:
        _stored_numbers([value], f"run {run.id}'s {metric}", signed=kind != Kind.TIMING.value)
    if samples:
        samples = _stored_json(samples, list)
        _stored_numbers(samples, f"run {run.id}'s samples of {metric}")
    return StoredPoint(run, section, _stored_json(keys, dict), kind, value, samples or None)


def _check_sampled(section: str, record: dict, where: str) -> None:
    """DatabaseError (_damaged) for a stored record whose sampled metrics, which a
    comparison against the history pools and gates (baseline.history_baseline), are not
    as a results file holds them: a median or quartile null or a number >= 0, the samples
    null or a list of such numbers."""
    from ..study.sections import record_type

    rtype = record_type(section)
    for metric, stats in (gated_timing(rtype) if rtype else {}).items():
        for name in (metric, *stats.values()):
            value, many = record.get(name), name == stats.get("samples")
            if value is None:
                continue
            if many != isinstance(value, list):
                raise _damaged(f"{where}: {name}", value, "a list" if many else "a number")
            _stored_numbers(value if many else [value], f"{where}: {name}")


def _run_info(row: Sequence) -> RunInfo:
    run_id, sha, branch, committed, created, env_id, env, command = row
    return RunInfo(
        run_id, Commit(sha, branch, committed), created, env_id, _stored_json(env, dict), command
    )


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def open_history(db: str | Path | None = None, create: bool = False) -> HistoryBackend:
    """The history at `db`: a file path (SQLite; DEFAULT_DB when None), which must hold one
    unless `create` (`history add`). A URL of another database (postgresql://...) names a
    backend this version does not have."""
    text = str(db if db is not None else DEFAULT_DB)
    if "://" in text:
        scheme = text.split("://", 1)[0]
        raise FieldError(
            "db",
            shown_path(text),
            f"no {scheme} backend in this version; give a file path (SQLite)",
        )
    if not text:
        raise FieldError("db", None, "empty; give the database's path")
    return SqliteHistory(text, create)


@contextmanager
def database_failures(field: str, db: str | Path | None) -> Iterator[None]:
    """A history that fails under a command once open (a damaged file, a table gone, a
    file the system will not let it write) as one FieldError naming `field`, the input
    that gave `db` (DEFAULT_DB when None), not SQLite's own exception."""
    try:
        yield
    except (sqlite3.Error, json.JSONDecodeError) as exc:
        shown = shown_path(str(db if db is not None else DEFAULT_DB))
        raise FieldError(field, shown, f"cannot use it: {exc}") from None


def _made_here(path: Path) -> bool:
    """Make the empty file at `path` for SQLite to fill: True where this process made it,
    False where another made it since it was found missing."""
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
    except FileExistsError:
        return False
    return True


def _busy(exc: sqlite3.Error) -> bool:
    """Whether SQLite gave up waiting for another connection (locked, busy)."""
    return getattr(exc, "sqlite_errorcode", None) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def _why(exc: Exception) -> str:
    return getattr(exc, "strerror", None) or str(exc)


def _refusal(exc: sqlite3.DatabaseError, doing: str) -> str:
    """Why a database SQLite failed on as it was opened (`doing`: read or write) is
    refused: damaged, not to be read or written here (OperationalError), or no history."""
    if (getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF == sqlite3.SQLITE_CORRUPT:
        return f"cannot use it: {exc}"
    if isinstance(exc, sqlite3.OperationalError):
        return f"cannot {doing} it: {exc}"
    return f"not an attnbench history ({exc})"


def _writable(path: Path) -> bool:
    """Whether this process may write the file at `path` and make files beside it."""
    return os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)


def _remove_wal(path: Path) -> None:
    """Have SQLite remove the -wal and -shm files a read-only connection made beside the
    history at `path` and left: the last connection that may write it removes them as it
    closes (while one of another process is open, they are kept for it)."""
    with contextlib.suppress(sqlite3.Error):
        db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000)
        try:
            db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
        finally:
            db.close()
