"""The performance history: storing runs (idempotent, atomic, concurrent, migrated),
series over commits, change points, and gating against the history."""

from __future__ import annotations

import csv
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attnbench.cli import app
from attnbench.errors import FieldError
from attnbench.history import stamps
from attnbench.history.series import parse_where
from attnbench.history.store import (
    APPLICATION_ID,
    MIGRATIONS,
    SCHEMA_VERSION,
    Commit,
    open_history,
)
from attnbench.study.documents import load_document
from tests.helpers import runner


def run_cli(*args: str):
    return runner.invoke(app, list(args))


def scaled(doc: dict, factor: float, seed: int) -> dict:
    """`doc` as another run of the same points (its content differs, so it is a new
    run): 20 step samples spread ±5% around its median times `factor`, seeded, taken
    with the CPU to itself, so the history's values and verdicts do not depend on how
    busy the machine was when the fixture ran."""
    import random

    rng = random.Random(seed)
    copy = json.loads(json.dumps(doc))
    for record in copy["records"]:
        level = record["step_ms_median"] * factor
        samples = [level * (1 + rng.uniform(-0.05, 0.05)) for _ in range(20)]
        record["samples_ms"] = samples
        ordered = sorted(samples)
        record["step_ms_median"] = ordered[len(ordered) // 2]
        record["step_ms_p25"], record["step_ms_p75"] = ordered[5], ordered[14]
        record["cpu_share"] = 1.0
    copy["created"] = f"2026-11-{1 + seed % 28:02d}T00:00:00+00:00"
    return copy


def write(path: Path, doc: dict) -> str:
    path.write_text(json.dumps(doc))
    return str(path)


def add(db: Path, path: str, commit: str, day: int) -> None:
    result = run_cli(
        "history",
        "add",
        path,
        "--db",
        str(db),
        "--commit",
        commit,
        "--branch",
        "main",
        "--date",
        f"2026-10-{day:02d}T12:00:00+00:00",
    )
    assert result.exit_code == 0, result.output


def test_a_run_is_stored_once_with_its_commit_records_and_samples(tmp_path, decode_run):
    db = tmp_path / "h.sqlite"
    path = write(tmp_path / "run.json", decode_run)
    add(db, path, "a" * 40, 1)
    again = run_cli("history", "add", path, "--db", str(db), "--commit", "a" * 40)
    assert again.exit_code == 0 and f"already there (run 1), commit {'a' * 10}" in again.output
    elsewhere = run_cli("history", "add", path, "--db", str(db), "--commit", "b" * 40)
    assert elsewhere.exit_code == 0, elsewhere.output
    assert f"already there (run 1), stored under commit {'a' * 10}, not {'b' * 10}" in (
        elsewhere.output
    )
    history = open_history(db)
    [run] = history.runs()
    assert (run.commit.sha, run.commit.branch, run.command) == ("a" * 40, "main", "decode-speed")
    points = history.points("step_ms_median")
    assert [p.value for p in points] == [r["step_ms_median"] for r in decode_run["records"]]
    assert [p.samples for p in points] == [r["samples_ms"] for r in decode_run["records"]]
    assert {p.kind for p in points} == {"timing"}
    assert {p.kind for p in history.points("bytes_per_step")} == {"exact"}
    assert points[0].keys["num_kv_heads"] == 4 and "step_ms_median" not in points[0].keys
    history.close()


def test_an_old_database_is_upgraded_and_keeps_its_runs(tmp_path, decode_run):
    """A schema-1 database (no branch, no samples, records as keys and metrics) opens
    as the current schema with its run readable, and takes new runs."""
    db = tmp_path / "old.sqlite"
    con = sqlite3.connect(db)
    con.executescript(MIGRATIONS[0] + "PRAGMA user_version = 1;")
    con.execute(
        "INSERT INTO runs VALUES (1, 'h', 'c1', '2026-01-01', NULL, 'now', "
        "'decode-speed', 'env', '{}', NULL)"
    )
    con.execute("INSERT INTO records VALUES (1, 1, 'decode', 0, '{\"variant\": \"MHA\"}')")
    con.execute("INSERT INTO metrics VALUES (1, 'step_ms_median', 'timing', 2.5)")
    con.commit()
    con.close()
    history = open_history(db)
    assert sqlite3.connect(db).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert sqlite3.connect(db).execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    [point] = history.points("step_ms_median")
    assert (point.value, point.keys, point.samples, point.run.commit.branch) == (
        2.5,
        {"variant": "MHA"},
        None,
        None,
    )
    assert history.run_records(1) == [("decode", {"variant": "MHA", "step_ms_median": 2.5})]
    history.add(load_document(write(tmp_path / "r.json", decode_run)), Commit("c2"))
    assert len(history.runs()) == 2
    history.close()


def test_a_newer_database_is_refused(tmp_path):
    db = tmp_path / "new.sqlite"
    con = sqlite3.connect(db)
    con.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    con.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    con.close()
    result = run_cli("history", "show", "--db", str(db))
    assert result.exit_code == 2 and "newer than this attnbench's" in result.output


def _many_records(doc: dict, count: int) -> dict:
    """`doc` with `count` records (distinct batch sizes): an add that takes seconds."""
    base = doc["records"][0]
    copy = dict(doc)
    copy["records"] = [{**base, "batch": b} for b in range(1, count + 1)]
    return copy


def _stored(db: Path) -> tuple[int, int]:
    con = sqlite3.connect(db)
    try:
        return (
            con.execute("SELECT COUNT(*) FROM runs").fetchone()[0],
            con.execute("SELECT COUNT(*) FROM records").fetchone()[0],
        )
    finally:
        con.close()


@pytest.mark.integration
def test_a_process_killed_mid_add_stores_nothing_of_that_run(tmp_path, decode_run):
    """SIGKILL while the records go in: the run is not there at all, and a later add of
    the same file stores it whole."""
    db = tmp_path / "h.sqlite"
    count = 6_000
    path = write(tmp_path / "big.json", _many_records(decode_run, count))
    command = [
        sys.executable,
        "-m",
        "attnbench",
        "history",
        "add",
        path,
        "--db",
        str(db),
        "--commit",
        "c" * 40,
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wal = Path(f"{db}-wal")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not wal.exists() or wal.stat().st_size < 1 << 18):
        time.sleep(0.005)  # until the run's rows are being written (256 KiB of them)
    assert process.poll() is None, "the add finished before it could be killed"
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert _stored(db) == (0, 0)
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert _stored(db) == (1, count)


@pytest.mark.integration
def test_two_processes_adding_at_once_both_land(tmp_path, decode_run):
    db = tmp_path / "h.sqlite"
    paths = [
        write(tmp_path / f"r{i}.json", _many_records(scaled(decode_run, 1, i), 1000))
        for i in range(2)
    ]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "attnbench",
                "history",
                "add",
                p,
                "--db",
                str(db),
                "--commit",
                f"{i}" * 40,
            ],
            stderr=subprocess.PIPE,
        )
        for i, p in enumerate(paths)
    ]
    for p in procs:
        assert p.wait(timeout=120) == 0, p.stderr.read() if p.stderr else ""
    assert _stored(db) == (2, 2000)


@pytest.fixture(scope="module")
def stepped_db(tmp_path_factory, decode_run) -> tuple[Path, list[str]]:
    """20 commits; from the 12th, every step takes 25% longer: built once for the module."""
    folder = tmp_path_factory.mktemp("stepped")
    db = folder / "h.sqlite"
    commits = [f"{i:02d}".ljust(40, "f") for i in range(20)]
    for i, sha in enumerate(commits):
        factor = 1.25 if i >= 12 else 1.0
        add(db, write(folder / f"r{i}.json", scaled(decode_run, factor, i)), sha, i + 1)
    return db, commits


@pytest.fixture()
def stepped_history(tmp_path, stepped_db) -> tuple[Path, list[str]]:
    """A copy of stepped_db in the test's own folder, for the test to do with as it likes."""
    db, commits = stepped_db
    copy = tmp_path / db.name
    copy.write_bytes(db.read_bytes())
    return copy, commits


def step_changes(db: Path) -> list[list[str]]:
    """The cells of each row `history changes --format markdown` prints for step_ms_median."""
    metric = "step_ms_median"
    result = run_cli(
        "history", "changes", "--db", str(db), "--metric", metric, "--format", "markdown"
    )
    assert result.exit_code == 0, result.output
    rows = [line for line in result.output.splitlines() if line.startswith(f"| {metric}")]
    return [[c.strip() for c in row.strip("|").split("|")] for row in rows]


def test_changes_name_the_commit_where_the_steps_slowed(stepped_history):
    db, commits = stepped_history
    rows = step_changes(db)
    assert len(rows) == 4  # every point's series, all at the same commit
    for cells in rows:
        assert cells[2] == f"`{commits[12][:10]}`"
        assert 20 < float(cells[3].rstrip("%")) < 30


def test_show_and_plot_follow_a_series(stepped_history, tmp_path):
    db, commits = stepped_history
    where = "variant=MQA,mode=cache"
    shown = run_cli("history", "show", "--db", str(db), "--where", where)
    assert shown.exit_code == 0, shown.output
    assert sum(sha[:10] in shown.output for sha in commits) == 20
    out = tmp_path / "trend.png"
    drawn = run_cli("history", "plot", "--db", str(db), "--where", where, "--out", str(out))
    assert drawn.exit_code == 0, drawn.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_show_names_the_filter_of_several_series(stepped_history):
    """Series picked by --where keep only the keys that tell them apart: the title says
    what they share."""
    db, _ = stepped_history
    shown = run_cli("history", "show", "--db", str(db), "--where", "variant=MQA")
    assert shown.exit_code == 0, shown.output
    title = " ".join(shown.output.split("┏")[0].split())
    assert "· where variant=MQA ·" in title, title


def test_compare_history_gates_against_the_recent_runs_of_the_environment(
    stepped_history, tmp_path, decode_run
):
    db, _ = stepped_history
    same = write(tmp_path / "same.json", scaled(decode_run, 1.25, 99))
    slower = write(tmp_path / "slower.json", scaled(decode_run, 1.25 * 1.5, 98))
    assert run_cli("compare", "--history", str(db), same).exit_code == 0
    result = run_cli("compare", "--history", str(db), slower)
    assert result.exit_code == 1, result.output
    elsewhere = scaled(decode_run, 1.0, 97)
    elsewhere["environment"] = {**elsewhere["environment"], "num_threads": 64}
    result = run_cli("compare", "--history", str(db), write(tmp_path / "e.json", elsewhere))
    assert result.exit_code == 2 and "no run of this environment" in result.output


def test_a_run_added_before_it_is_gated_is_left_out_of_its_own_baseline(tmp_path):
    """Add, then gate: the run compared with itself would pass whatever it holds. A params
    run with 1,000 parameters more than the one before still regresses once added, and a
    history of that run alone is refused."""
    before, after = tmp_path / "p1.json", tmp_path / "p2.json"
    args = ["params", "--d-model", "64", "--heads", "4", "--kv-heads", "4,2", "-q"]
    assert run_cli(*args, "--json", str(before)).exit_code == 0
    doc = json.loads(before.read_text())
    doc["records"][1]["k_params"] += 1000
    doc["records"][1]["total_params"] += 1000
    after.write_text(json.dumps(doc))
    db = tmp_path / "h.sqlite"
    for path, sha in ((before, "a" * 40), (after, "b" * 40)):
        assert run_cli("history", "add", str(path), "--db", str(db), "--commit", sha).exit_code == 0
    assert run_cli("compare", str(after), "--history", str(db)).exit_code == 1
    alone = tmp_path / "alone.sqlite"
    assert (
        run_cli("history", "add", str(after), "--db", str(alone), "--commit", "b" * 40).exit_code
        == 0
    )
    result = run_cli("compare", str(after), "--history", str(alone))
    assert result.exit_code == 2 and "holds this run (run 1) and no other" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["history", "show", "--db", "postgresql://host/db"], "--db postgresql://host/db: no "),
        (["history", "show", "--where", "variant"], "--where variant: expected key=value"),
        (["history", "show", "--metric", "nope"], "--metric nope: not in the history"),
        (["compare", "a.json", "b.json", "--history", "h.sqlite"], "give CURRENT alone"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message, stepped_history, monkeypatch):
    db, _ = stepped_history
    monkeypatch.chdir(db.parent)
    if "--db" not in args and args[0] == "history":
        args = [*args, "--db", str(db)]
    result = run_cli(*args)
    assert result.exit_code == 2, result.output
    assert message in result.output and len(result.output.strip().splitlines()) == 1


def test_add_outside_a_checkout_needs_the_commit(tmp_path, decode_run, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    path = write(tmp_path / "r.json", measured_at(decode_run, None))
    result = run_cli("history", "add", path, "--db", str(tmp_path / "h.sqlite"))
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert "--commit: not in a git checkout" in result.output


#: HEAD of the checkout `history add` runs in, in the tests that set it (fake_head).
HEAD = Commit("e" * 40, "main", "2026-12-01T09:00:00+01:00")


@pytest.fixture()
def fake_head(monkeypatch) -> Commit:
    monkeypatch.setattr(stamps, "current_commit", lambda: HEAD)
    return HEAD


def measured_at(doc: dict, sha: str | None, seed: int = 0, factor: float = 1.0) -> dict:
    """`scaled(doc, factor, seed)` as measured at commit `sha` (None: outside a checkout)."""
    copy = scaled(doc, factor, seed)
    copy["environment"]["git_commit"] = sha
    return copy


def write_csv(path: Path, doc: dict) -> str:
    """`doc`'s records as the CSV its command writes: no environment, no creation time."""
    fields = [k for k, v in doc["records"][0].items() if not isinstance(v, list)]
    with path.open("w", newline="") as out:
        writer = csv.DictWriter(out, fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(doc["records"])
    return str(path)


def stored_commits(db: Path) -> list[Commit]:
    history = open_history(db)
    try:
        return [run.commit for run in history.runs()]
    finally:
        history.close()


def test_a_file_is_filed_under_the_commit_its_environment_names(tmp_path, decode_run, fake_head):
    doc = measured_at(decode_run, "a" * 40)
    db = tmp_path / "h.sqlite"
    result = run_cli("history", "add", write(tmp_path / "r.json", doc), "--db", str(db))
    assert result.exit_code == 0, result.output
    assert f"commit {'a' * 10}" in result.output
    assert stored_commits(db) == [Commit("a" * 40, None, doc["created"])]


def test_a_file_naming_no_commit_is_filed_under_head(tmp_path, decode_run, fake_head):
    """In one add: a file naming its commit keeps it; one naming none gets HEAD's commit
    and branch with its own date, and HEAD's commit date when it has none."""
    named, unnamed = measured_at(decode_run, "a" * 40, 1), measured_at(decode_run, None, 2)
    undated = measured_at(decode_run, None, 3)
    del undated["created"]
    paths = [
        write(tmp_path / "named.json", named),
        write(tmp_path / "unnamed.json", unnamed),
        write(tmp_path / "undated.json", undated),
    ]
    db = tmp_path / "h.sqlite"
    result = run_cli("history", "add", *paths, "--db", str(db))
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert [line.split(", commit ")[1] for line in lines] == ["a" * 10, "e" * 10, "e" * 10]
    assert stored_commits(db) == [  # in the order of their dates
        Commit("a" * 40, None, named["created"]),
        Commit(HEAD.sha, HEAD.branch, unnamed["created"]),
        HEAD,
    ]


def test_a_file_with_no_environment_is_refused_and_nothing_is_stored(tmp_path, decode_run):
    """A CSV keeps no environment: its timings could not be told from other machines'. The
    add stores nothing (not the good file before it either), and compare --history refuses
    it too."""
    good = write(tmp_path / "good.json", decode_run)
    csv_path = write_csv(tmp_path / "r.csv", decode_run)
    db = tmp_path / "h.sqlite"
    result = run_cli("history", "add", good, csv_path, "--db", str(db), "--commit", "abc")
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert f"error: {csv_path}: names no environment (a CSV has none)" in result.output
    assert "torch None" not in result.output and not db.exists()
    add(db, good, "a" * 40, 1)
    gated = run_cli("compare", "--history", str(db), csv_path)
    assert gated.exit_code == 2 and f"error: {csv_path}: names no environment" in gated.output


def test_a_file_of_no_records_is_refused_and_nothing_is_stored(tmp_path, decode_run):
    """An empty run was stored, and counted in the history, where baseline save refuses
    one ("no records to gate on")."""
    good = write(tmp_path / "good.json", decode_run)
    empty = write(tmp_path / "empty.json", {**decode_run, "records": []})
    db = tmp_path / "h.sqlite"
    result = run_cli("history", "add", good, empty, "--db", str(db), "--commit", "a" * 40)
    one_error(result, f"{empty}: no records to store")
    assert not db.exists()


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--commit", "b" * 40], Commit("b" * 40, None, "2026-11-01T00:00:00+00:00")),  # the file's
        (["--date", "2026-10-05"], Commit("a" * 40, None, "2026-10-05")),
    ],
)
def test_commit_and_date_override_the_files_each_alone(
    tmp_path, decode_run, fake_head, flags, expected
):
    db = tmp_path / "h.sqlite"
    path = write(tmp_path / "r.json", measured_at(decode_run, "a" * 40))
    result = run_cli("history", "add", path, "--db", str(db), *flags)
    assert result.exit_code == 0, result.output
    assert stored_commits(db) == [expected]


def test_archived_files_of_twelve_commits_show_the_step_at_the_eighth(
    tmp_path, decode_run, fake_head
):
    """Twelve results files kept from twelve commits, added at once from one checkout:
    each is filed under its own commit, so the 10% step from the eighth on is found."""
    commits = [f"c{i:02d}".ljust(40, "0") for i in range(1, 13)]
    docs = [
        measured_at(decode_run, sha, i, 1.1 if i >= 7 else 1.0) for i, sha in enumerate(commits)
    ]
    paths = [write(tmp_path / f"r{i}.json", doc) for i, doc in enumerate(docs)]
    db = tmp_path / "h.sqlite"
    result = run_cli("history", "add", *paths, "--db", str(db), "--quiet")
    assert result.exit_code == 0, result.output
    assert [c.sha for c in stored_commits(db)] == commits
    rows = step_changes(db)
    assert len(rows) == 4  # every point's series, each at the eighth commit
    assert {cells[2] for cells in rows} == {f"`{commits[7][:10]}`"}


# --- bad input: the database, the picture, the flags of add, --where --------------------


@pytest.fixture()
def kv_history(tmp_path, kvmem_run) -> Path:
    db = tmp_path / "h.sqlite"
    add(db, write(tmp_path / "kv.json", kvmem_run), "a" * 40, 1)
    return db


def one_error(result, *parts: str) -> None:
    """Exit 2 with one `error:` line holding every part."""
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert all(part in lines[0] for part in parts), (parts, lines[0])


READERS = [
    ["history", "show", "--db"],
    ["history", "plot", "--out", "t.png", "--db"],
    ["history", "changes", "--db"],
]


@pytest.mark.parametrize("command", READERS)
def test_a_reader_of_a_missing_database_fails_and_creates_nothing(command, tmp_path):
    """A typo in --db is an error, not an empty history that reports no change."""
    db = tmp_path / "typo.sqlite"
    one_error(run_cli(*command, str(db)), f"--db {db}: no such file")
    assert list(tmp_path.iterdir()) == []


def test_compare_history_of_a_missing_database_fails_naming_history(tmp_path, kvmem_run):
    db = tmp_path / "typo.sqlite"
    current = write(tmp_path / "kv.json", kvmem_run)
    one_error(run_cli("compare", "--history", str(db), current), f"--history {db}: no such file")
    assert not db.exists()


def test_the_default_database_is_not_created_by_a_reader(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    one_error(run_cli("history", "show"), "--db results/history.sqlite: no such file (the default")
    assert list(tmp_path.iterdir()) == []


def _foreign_sqlite(path: Path) -> bytes:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE notes (text TEXT)")
    con.execute("INSERT INTO notes VALUES ('mine')")
    con.commit()
    con.close()
    return path.read_bytes()


@pytest.mark.parametrize("command", [["history", "add", "KV", "--db"], *READERS])
def test_a_file_that_is_not_a_history_is_refused_and_left_as_it_was(
    command, tmp_path, kvmem_run, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    kv = write(tmp_path / "kv.json", kvmem_run)
    args = [kv if a == "KV" else a for a in command]
    foreign = tmp_path / "other.sqlite"
    before = _foreign_sqlite(foreign)
    one_error(
        run_cli(*args, str(foreign)),
        f"--db {foreign}: an SQLite database, but not an attnbench history",
    )
    noise = tmp_path / "noise.bin"
    noise.write_bytes(bytes(range(256)) * 4)
    one_error(run_cli(*args, str(noise)), f"--db {noise}: not an attnbench history")
    one_error(run_cli(*args, str(tmp_path)), f"--db {tmp_path}: a directory")
    assert foreign.read_bytes() == before and noise.read_bytes() == bytes(range(256)) * 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kv.json", "noise.bin", "other.sqlite"]


def test_a_history_add_cannot_write_leaves_no_file_behind(tmp_path, kvmem_run, monkeypatch):
    """A new history that SQLite cannot write (a full disk) is refused as such, not as a
    file that is no history, and the file it began is removed."""
    from attnbench.history.store import SqliteHistory

    def full(self, create):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(SqliteHistory, "_migrate", full)
    kv = write(tmp_path / "kv.json", kvmem_run)
    db = tmp_path / "new.sqlite"
    one_error(
        run_cli("history", "add", kv, "--db", str(db)),
        f"--db {db}: cannot write it: database or disk is full",
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kv.json"]
    # a history that was there (another process's, made meanwhile) is never removed
    assert run_cli("history", "add", kv, "--db", str(db), "-q").exit_code == 2
    monkeypatch.undo()
    assert run_cli("history", "add", kv, "--db", str(db), "-q").exit_code == 0
    before = db.read_bytes()
    monkeypatch.setattr(SqliteHistory, "_migrate", full)
    one_error(run_cli("history", "add", kv, "--db", str(db)), "cannot write it")
    assert db.read_bytes() == before


def test_a_new_history_another_process_made_meanwhile_is_never_removed(
    tmp_path, kvmem_run, monkeypatch
):
    """Found missing, then made by another process before this one makes it: a failure
    after (SQLite busy, or any other) leaves that history whole. A file made here that
    SQLite cannot open is removed; one it may be filling for another (busy) is left."""
    from attnbench.history.store import SqliteHistory

    kv = write(tmp_path / "kv.json", kvmem_run)
    theirs = tmp_path / "theirs.sqlite"
    assert run_cli("history", "add", kv, "--db", str(theirs), "-q").exit_code == 0
    made = theirs.read_bytes()
    db = tmp_path / "new.sqlite"

    def meanwhile(self, create):  # found missing; another process makes it at once
        db.write_bytes(made)
        return True

    def full(self, create):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(SqliteHistory, "_check_file", meanwhile)
    monkeypatch.setattr(SqliteHistory, "_migrate", full)
    one_error(run_cli("history", "add", kv, "--db", str(db)), "cannot write it")
    assert db.read_bytes() == made
    made = b""  # made, not yet filled: still theirs
    db.unlink()
    one_error(run_cli("history", "add", kv, "--db", str(db)), "cannot write it")
    assert db.exists()
    monkeypatch.undo()

    busy = sqlite3.OperationalError("database is locked")
    busy.sqlite_errorcode = sqlite3.SQLITE_BUSY

    def locked(self, create):
        raise busy

    monkeypatch.setattr(SqliteHistory, "_migrate", locked)
    db.unlink()
    one_error(run_cli("history", "add", kv, "--db", str(db)), "database is locked")
    assert db.exists()  # empty, but another process may be filling it
    monkeypatch.undo()

    def refused(*args, **kwargs):
        raise sqlite3.OperationalError("unable to open database file")

    monkeypatch.setattr(sqlite3, "connect", refused)
    db.unlink()
    one_error(run_cli("history", "add", kv, "--db", str(db)), "cannot open it")
    assert not db.exists()


def test_an_empty_file_holds_no_history_but_add_makes_one_in_it(tmp_path, kvmem_run):
    db = tmp_path / "h.sqlite"
    db.touch()
    one_error(run_cli("history", "show", "--db", str(db)), f"--db {db}: an empty file")
    add(db, write(tmp_path / "kv.json", kvmem_run), "a" * 40, 1)
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    con.close()
    assert run_cli("history", "show", "--db", str(db), "--metric", "kv_bytes").exit_code == 0


def test_a_history_that_holds_no_run_finds_no_change_as_an_error(tmp_path):
    """What a process killed mid-add leaves: the schema, no runs. `changes` must not pass."""
    db = tmp_path / "h.sqlite"
    open_history(db, create=True).close()
    one_error(run_cli("history", "changes", "--db", str(db)), f"--db {db}: holds no runs")


def test_names_longer_than_the_system_takes_are_one_error_line(kv_history, tmp_path):
    """The name is shown cut, quoted (the start of the path)."""
    long = str(tmp_path / ("x" * 300))
    show = run_cli("history", "show", "--db", long + ".sqlite")
    one_error(show, "--db '/", ": cannot open it: File name too long")
    kv = str(kv_history.parent / "kv.json")
    added = run_cli("history", "add", kv, "--db", long + ".sqlite")
    one_error(added, "--db '/", ": cannot open it: File name too long")
    drawn = run_cli(
        "history", "plot", "--db", str(kv_history), "--metric", "kv_bytes", "--out", long + ".png"
    )
    one_error(drawn, "--out '/", ": File name too long")


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("trend.txt", "unknown picture format .txt; end the name in .png, .svg or .pdf"),
        ("trend", "no extension; end the name in .png, .svg or .pdf"),
    ],
)
def test_plot_refuses_a_picture_it_cannot_write_by_its_name(kv_history, name, message):
    out = kv_history.parent / name
    drawn = run_cli(
        "history", "plot", "--db", str(kv_history), "--metric", "kv_bytes", "--out", str(out)
    )
    one_error(drawn, f"--out {out}: {message}")
    assert not out.exists() and not out.with_suffix(".png").exists()


@pytest.mark.parametrize(("name", "magic"), [("a/b/t.svg", b"<?xml"), ("t.PDF", b"%PDF")])
def test_plot_writes_the_format_its_extension_names_making_its_folder(kv_history, name, magic):
    out = kv_history.parent / name
    drawn = run_cli(
        "history", "plot", "--db", str(kv_history), "--metric", "kv_bytes", "--out", str(out)
    )
    assert drawn.exit_code == 0 and drawn.output == f"wrote {out}\n", drawn.output
    assert out.read_bytes().startswith(magic)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--date", "notadate"], "--date notadate: expected an ISO 8601 date"),
        (["--date", ""], "--date '': empty; give a value"),
        (["--commit", ""], "--commit '': empty; give a value"),
        (["--commit", "  "], "--commit '  ': empty"),
        (["--commit", "a b"], "--commit a b: a commit is one word"),
        (["--branch", ""], "--branch '': empty; give a value"),
    ],
)
def test_add_refuses_a_bad_date_commit_or_branch_before_anything(
    tmp_path, kvmem_run, flags, message
):
    db = tmp_path / "h.sqlite"
    one_error(
        run_cli("history", "add", write(tmp_path / "kv.json", kvmem_run), "--db", str(db), *flags),
        message,
    )
    assert not db.exists()


def test_a_date_is_stored_in_the_extended_iso_form(tmp_path, kvmem_run):
    db = tmp_path / "h.sqlite"
    path = write(tmp_path / "kv.json", kvmem_run)
    result = run_cli(
        "history", "add", path, "--db", str(db), "--commit", "a" * 40, "--date", "20261005T1200Z"
    )
    assert result.exit_code == 0, result.output
    assert [c.date for c in stored_commits(db)] == ["2026-10-05T12:00:00+00:00"]


def test_a_key_given_twice_in_where_matches_either_value(kv_history):
    def series(where: str) -> str:
        shown = run_cli(
            "history", "show", "--db", str(kv_history), "--metric", "kv_bytes", "--where", where
        )
        assert shown.exit_code == 0, shown.output
        return shown.output

    both = series("variant=MHA,variant=MQA")
    assert "variant=MHA" in both and "variant=MQA" in both
    only = series("variant=MQA")
    assert "where variant=MQA" in only and "variant=MHA" not in only
    assert parse_where("variant=MHA, variant=MQA,tp=2") == {"variant": {"MHA", "MQA"}, "tp": {"2"}}
    assert parse_where(None) == parse_where("") == parse_where(" ") == {}
    for bad in ("variant=MHA,,tp=2", "variant=MHA,", ",tp=2", "variant"):
        with pytest.raises(FieldError, match="expected key=value pairs"):
            parse_where(bad)


def test_where_text_that_looks_like_markup_is_shown_as_typed(tmp_path, kvmem_run):
    """Keys holding rich markup, an emoji code or mathtext are matched, titled, drawn and
    named in errors as written."""
    doc = json.loads(json.dumps(kvmem_run))
    doc["records"][0]["variant"], doc["records"][1]["variant"] = "[/]$\\frac$", "[bold]:x:"
    db = tmp_path / "h.sqlite"
    add(db, write(tmp_path / "kv.json", doc), "a" * 40, 1)
    flags = ["--db", str(db), "--metric", "kv_bytes"]
    shown = run_cli("history", "show", *flags, "--where", "variant=[bold]:x:")
    assert shown.exit_code == 0 and "where variant=[bold]:x:" in shown.output, shown.output
    out = tmp_path / "t.png"
    drawn = run_cli("history", "plot", *flags, "--out", str(out))
    assert drawn.exit_code == 0 and out.exists(), drawn.output
    one_error(
        run_cli("history", "show", *flags, "--where", "variant=[/]"),
        "--where variant=[/]: no series of kv_bytes matches",
    )
    one_error(
        run_cli("history", "show", *flags, "--where", "variant=a\nb"),
        "--where 'variant=a\\nb': no series",
    )
    changes = run_cli("history", "changes", *flags[:2], "--format", "markdown")
    assert changes.exit_code == 0, changes.output


def test_changes_with_a_where_that_matches_nothing_is_an_error(kv_history):
    """A typo in --where must not report 'no change' and pass a CI check."""
    one_error(
        run_cli("history", "changes", "--db", str(kv_history), "--where", "varaint=MHA"),
        "--where varaint=MHA: no series of any metric matches",
    )


def test_a_prediction_at_the_largest_shapes_fits_the_database(tmp_path):
    """Its counts pass 64 bits: stored as the REAL metrics they are, not refused by SQLite
    mid-add, and read back."""
    path = tmp_path / "predict.json"
    args = ["--d-model", "1048576", "--heads", "1", "--seq-len", "16777216"]
    args += ["--batch", "1000000000", "--gpu", "h100-sxm", "-q", "--json", str(path)]
    result = run_cli("predict", *args)
    assert result.exit_code == 0, result.output
    flops = json.loads(path.read_text())["records"][0]["layer_prefill_flops"]
    assert flops > 2**63
    db = tmp_path / "h.sqlite"
    added = run_cli("history", "add", str(path), "--db", str(db), "--commit", "c" * 40)
    assert added.exit_code == 0, added.output
    history = open_history(db)
    [point] = history.points("layer_prefill_flops")
    assert point.value == float(flops)
    history.close()


@pytest.mark.parametrize("reader", READERS)
def test_a_damaged_history_is_one_error_naming_db(tmp_path, kv_history, reader, monkeypatch):
    """A table gone from the file (a damaged or hand-edited database): every reader says so
    in one line naming --db, where SQLite's error was a traceback."""
    monkeypatch.chdir(tmp_path)
    with sqlite3.connect(kv_history) as db:
        db.execute("DROP TABLE metrics")
    db.close()
    one_error(run_cli(*reader, str(kv_history)), f"--db {kv_history}: cannot use it", "metrics")


def test_history_plot_never_draws_over_its_database(tmp_path, kv_history):
    picture = tmp_path / "h.svg"
    picture.write_bytes(kv_history.read_bytes())
    result = run_cli("history", "plot", "--db", str(picture), "--out", str(picture))
    one_error(result, f"--out {picture}: is the --db file")
    assert picture.read_bytes() == kv_history.read_bytes()


def test_compare_against_a_damaged_history_is_one_error_naming_history(
    tmp_path, kv_history, kvmem_run
):
    """Pages overwritten in the middle of the file: SQLite finds the image malformed while
    compare reads the baseline from it, and compare says so naming --history."""
    damaged = bytearray(kv_history.read_bytes())
    for page in range(4096, len(damaged), 4096):
        damaged[page + 8 : page + 72] = b"\xff" * 64
    kv_history.write_bytes(bytes(damaged))
    # another run than the one stored (which is left out of its own baseline)
    current = write(tmp_path / "cur.json", {**kvmem_run, "created": "2020-01-01T00:00:00+00:00"})
    result = run_cli("compare", current, "--history", str(kv_history))
    one_error(result, f"--history {kv_history}: cannot use it")
    # SQLite finds the file malformed, or reads a damaged value (_stored_json)
    assert "malformed" in result.output or "a stored value is damaged" in result.output


@pytest.mark.parametrize("value", ["not json", "[1, 2]", None])
def test_a_damaged_stored_value_is_one_error_naming_history(tmp_path, kv_history, kvmem_run, value):
    """A value the file holds that is not the JSON the history wrote (a page of other
    bytes): one error, where json.loads failed with a TypeError traceback on a NULL."""
    with sqlite3.connect(kv_history) as db:
        db.execute("UPDATE records SET record = ?", (value,))
        if value is None:  # a record kept as its keys and metrics (schema 1)
            db.execute("UPDATE records SET keys = 'x'")
    db.close()
    current = write(tmp_path / "cur.json", {**kvmem_run, "created": "2020-01-01T00:00:00+00:00"})
    result = run_cli("compare", current, "--history", str(kv_history))
    one_error(result, f"--history {kv_history}: cannot use it", "a stored value is damaged")


def test_adding_a_stored_run_again_says_it_keeps_its_date_and_branch(tmp_path, kvmem_run):
    """The same results added again change nothing: a --date or --branch given then is
    said to be kept as stored, where it was dropped without a word."""
    db, path = tmp_path / "h.sqlite", write(tmp_path / "kv.json", kvmem_run)
    first = ["history", "add", str(path), "--db", str(db), "--commit", "a" * 40]
    assert run_cli(*first, "--date", "2024-01-01").exit_code == 0
    again = run_cli(*first, "--date", "2025-06-01", "--branch", "other")
    assert again.exit_code == 0
    said = " ".join(again.output.split())
    assert "already there (run 1)" in said
    assert "its date stays 2024-01-01" in said and "its branch stays none, not other" in said
    plain = " ".join(run_cli(*first).output.split())
    assert "stays" not in plain


def test_a_commit_that_names_nothing_here_is_filed_as_given_with_a_note(
    tmp_path, decode_run, monkeypatch
):
    """In a git checkout, --commit mian (a branch mistyped) names no commit: it is filed
    under that name, as a label from elsewhere is, and a note on stderr says so; a sha,
    a revision of the checkout, or --quiet, no note."""
    monkeypatch.chdir(tmp_path)
    git = ["git", "-c", "user.email=a@b", "-c", "user.name=a"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    path = write(tmp_path / "d.json", decode_run)
    note = "note: --commit mian: no branch, tag or commit of this checkout"
    typo = run_cli("history", "add", path, "--db", "a.db", "--commit", "mian")
    assert typo.exit_code == 0 and note in " ".join(typo.stderr.split())
    assert "commit mian" in typo.stdout
    for commit in ("main", "0123abcd", "a" * 40):
        named = run_cli("history", "add", path, "--db", f"{commit}.db", "--commit", commit)
        assert named.exit_code == 0 and named.stderr == "", (commit, named.stderr)
    quiet = run_cli("history", "add", path, "--db", "q.db", "--commit", "mian", "-q")
    assert quiet.exit_code == 0 and quiet.output == ""
    # stored already, under the commit it was first filed under: no note contradicts that
    stored = run_cli("history", "add", path, "--db", "main.db", "--commit", "mian")
    assert stored.exit_code == 0 and stored.stderr == "", stored.stderr
    assert "not mian" in stored.stdout
