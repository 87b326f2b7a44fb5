"""Opening a history: a damaged file is refused by every command, and the commands that
only read open it read-only, so that they read a history they may not write and leave
its folder as it was."""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from attnbench.history import store
from attnbench.history.store import MIGRATIONS, SCHEMA_VERSION
from tests.history.test_store import READERS, add, one_error, run_cli, write


@pytest.fixture()
def history(tmp_path, kvmem_run) -> Path:
    """A history of three runs of the exact metrics, in a folder of its own."""
    db = tmp_path / "data" / "h.sqlite"
    doc = dict(kvmem_run)
    for day in range(1, 4):
        doc["created"] = f"2026-10-{day:02d}T00:00:00+00:00"  # another run each time
        add(db, write(tmp_path / f"kv{day}.json", doc), f"{day}" * 40, day)
    return db


def _overwrite(db: Path, seed: int) -> None:
    """3,000 random bytes over the file from byte 5,000: pages of its tables, not its
    header or schema, so that SQLite opens it and reads what it can."""
    raw = bytearray(db.read_bytes())
    rng = random.Random(seed)
    raw[5000:8000] = bytes(rng.randrange(256) for _ in range(3000))
    db.write_bytes(bytes(raw))


@pytest.mark.parametrize("command", [*READERS, ["history", "add", "KV", "--db"]])
def test_a_history_with_pages_overwritten_is_damaged_for_every_command(
    command, history, tmp_path, monkeypatch
):
    """SQLite reads no rows from the damaged pages: `changes` found no change and passed,
    show and plot blamed --metric. Every command now says the file is damaged."""
    monkeypatch.chdir(tmp_path)
    _overwrite(history, seed=0)
    before = history.read_bytes()
    args = [str(tmp_path / "kv1.json") if a == "KV" else a for a in command]
    one_error(
        run_cli(*args, str(history)),
        f"--db {history}: cannot use it: database disk image is malformed",
    )
    assert history.read_bytes() == before


def _connections(monkeypatch) -> list[str]:
    """The names every sqlite3.connect is called with, from now on."""
    opened: list[str] = []
    connect = sqlite3.connect

    def recording(database, *args, **kwargs):
        opened.append(str(database))
        return connect(database, *args, **kwargs)

    monkeypatch.setattr(sqlite3, "connect", recording)
    return opened


def test_a_reader_opens_the_history_read_only(history):
    """No write transaction, no journal mode set: SQLite's mode=ro refuses any write."""
    opened = store.open_history(history)
    try:
        with pytest.raises(sqlite3.OperationalError, match="readonly database"):
            opened.db.execute("CREATE TABLE notes (text TEXT)")
    finally:
        opened.close()


@pytest.mark.parametrize("reader", READERS)
def test_a_reader_leaves_the_history_and_its_folder_as_they_were(
    reader, history, tmp_path, monkeypatch
):
    """The -wal and -shm files SQLite makes beside a history for a read-only connection
    are gone once the command is done."""
    monkeypatch.chdir(tmp_path)
    before = history.read_bytes()
    result = run_cli(*reader, str(history), "--metric", "kv_bytes")
    assert result.exit_code == 0, result.output
    assert history.read_bytes() == before
    assert sorted(p.name for p in history.parent.iterdir()) == ["h.sqlite"]


def test_a_history_this_process_may_not_write_is_opened_immutable(history, monkeypatch):
    """Where it may not write the file or its folder (and no write-ahead log is beside
    it), SQLite could not make, or would leave, its -wal and -shm files there."""
    monkeypatch.setattr(store, "_writable", lambda path: False)
    opened: list[str] = []
    connect = sqlite3.connect
    monkeypatch.setattr(sqlite3, "connect", lambda db, **kw: opened.append(db) or connect(db, **kw))
    result = run_cli("history", "show", "--db", str(history), "--metric", "kv_bytes")
    assert result.exit_code == 0, result.output
    assert opened == [f"{history.absolute().as_uri()}?immutable=1"]
    assert sorted(p.name for p in history.parent.iterdir()) == ["h.sqlite"]


def _schema_one(db: Path) -> None:
    con = sqlite3.connect(db)
    con.executescript(MIGRATIONS[0] + "PRAGMA user_version = 1;")
    con.execute(
        "INSERT INTO runs VALUES (1, 'h', 'c1', '2026-01-01', NULL, 'now', "
        "'kvmem', 'env', '{}', NULL)"
    )
    con.close()


def test_an_older_history_is_upgraded_by_a_reader_only_where_it_may_write_it(tmp_path, monkeypatch):
    db = tmp_path / "old.sqlite"
    _schema_one(db)
    before = db.read_bytes()
    monkeypatch.setattr(store, "_writable", lambda path: False)
    one_error(
        run_cli("history", "changes", "--db", str(db)),
        f"--db {db}: a history of schema 1, which must be upgraded to this attnbench's "
        f"({SCHEMA_VERSION}) to be read, and it may not be written here",
    )
    assert db.read_bytes() == before
    monkeypatch.undo()
    result = run_cli("history", "changes", "--db", str(db))
    one_error(result, f"--db {db}: holds no runs")  # read, once upgraded
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    con.close()


def _as_unprivileged() -> list[str]:
    """The command prefix that runs a process without the rights to write what its
    permissions forbid: none for a user, setpriv dropping them for root."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("root writes any file, and no setpriv is here to drop that right")
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner"]


@pytest.mark.integration
@pytest.mark.parametrize("locked", ["folder", "file"])
def test_a_history_in_a_read_only_folder_or_file_is_read(locked, history):
    """Read by a process that may not write it (a history on a shared mount): every
    reader reads it, and nothing is made beside it."""
    folder = history.parent
    locked_path = folder if locked == "folder" else history
    locked_path.chmod(0o555 if locked == "folder" else 0o444)
    try:
        for reader in READERS:
            args = [str(folder.parent / "t.png") if a == "t.png" else a for a in reader]
            done = subprocess.run(
                [
                    *_as_unprivileged(),
                    sys.executable,
                    "-m",
                    "attnbench",
                    *args,
                    str(history),
                    "--metric",
                    "kv_bytes",
                ],
                capture_output=True,
                text=True,
                timeout=120,
                cwd=folder.parent,
            )
            assert done.returncode == 0, (reader, done.stderr)
            assert sorted(p.name for p in folder.iterdir()) == ["h.sqlite"], reader
    finally:
        locked_path.chmod(0o755)
