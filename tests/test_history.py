"""The performance history: storing runs (idempotent, atomic, concurrent, migrated),
series over commits, change points, and gating against the history."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnbench.cli import app
from attnbench.history.store import MIGRATIONS, SCHEMA_VERSION, Commit, open_history
from attnbench.study.documents import load_document

runner = CliRunner()


def run_cli(*args: str):
    return runner.invoke(app, list(args))


@pytest.fixture(scope="module")
def decode_run(tmp_path_factory) -> dict:
    """A real decode-speed results document (four points, raw samples kept)."""
    out = tmp_path_factory.mktemp("history") / "decode.json"
    result = run_cli("decode-speed", "--d-model", "64", "--heads", "4", "--kv-heads", "4,1",
                     "--prompt-len", "16", "--repeats", "20", "--warmup", "1", "--no-prefill",
                     "--json", str(out), "-q")  # fmt: skip
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text())


def scaled(doc: dict, factor: float, seed: int) -> dict:
    """`doc` as another run of the same points (its content differs, so it is a new
    run): 20 step samples spread ±5% around its median times `factor`, seeded, so the
    history's values do not depend on how noisy the machine was."""
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
    copy["created"] = f"2026-11-{1 + seed % 28:02d}T00:00:00+00:00"
    return copy


def write(path: Path, doc: dict) -> str:
    path.write_text(json.dumps(doc))
    return str(path)


def add(db: Path, path: str, commit: str, day: int) -> None:
    result = run_cli("history", "add", path, "--db", str(db), "--commit", commit,
                     "--branch", "main", "--date", f"2026-10-{day:02d}T12:00:00+00:00")  # fmt: skip
    assert result.exit_code == 0, result.output


def test_a_run_is_stored_once_with_its_commit_records_and_samples(tmp_path, decode_run):
    db = tmp_path / "h.sqlite"
    path = write(tmp_path / "run.json", decode_run)
    add(db, path, "a" * 40, 1)
    again = run_cli("history", "add", path, "--db", str(db), "--commit", "b" * 40)
    assert again.exit_code == 0 and "already there (run 1)" in again.output
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
    con.execute("INSERT INTO runs VALUES (1, 'h', 'c1', '2026-01-01', NULL, 'now', "
                "'decode-speed', 'env', '{}', NULL)")  # fmt: skip
    con.execute("INSERT INTO records VALUES (1, 1, 'decode', 0, '{\"variant\": \"MHA\"}')")
    con.execute("INSERT INTO metrics VALUES (1, 'step_ms_median', 'timing', 2.5)")
    con.commit()
    con.close()
    history = open_history(db)
    assert sqlite3.connect(db).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    [point] = history.points("step_ms_median")
    assert (point.value, point.keys, point.samples, point.run.commit.branch) == (
        2.5, {"variant": "MHA"}, None, None)  # fmt: skip
    assert history.run_records(1) == [("decode", {"variant": "MHA", "step_ms_median": 2.5})]
    history.add(load_document(write(tmp_path / "r.json", decode_run)), Commit("c2"))
    assert len(history.runs()) == 2
    history.close()


def test_a_newer_database_is_refused(tmp_path):
    db = tmp_path / "new.sqlite"
    sqlite3.connect(db).execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
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
        return (con.execute("SELECT COUNT(*) FROM runs").fetchone()[0],
                con.execute("SELECT COUNT(*) FROM records").fetchone()[0])  # fmt: skip
    finally:
        con.close()


def test_a_process_killed_mid_add_stores_nothing_of_that_run(tmp_path, decode_run):
    """SIGKILL while the records go in: the run is not there at all, and a later add of
    the same file stores it whole."""
    db = tmp_path / "h.sqlite"
    count = 6_000
    path = write(tmp_path / "big.json", _many_records(decode_run, count))
    command = [sys.executable, "-m", "attnbench", "history", "add", path, "--db", str(db),
               "--commit", "c" * 40]  # fmt: skip
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


def test_two_processes_adding_at_once_both_land(tmp_path, decode_run):
    db = tmp_path / "h.sqlite"
    paths = [write(tmp_path / f"r{i}.json", _many_records(scaled(decode_run, 1, i), 1000))
             for i in range(2)]  # fmt: skip
    procs = [subprocess.Popen([sys.executable, "-m", "attnbench", "history", "add", p, "--db",
                               str(db), "--commit", f"{i}" * 40], stderr=subprocess.PIPE)
             for i, p in enumerate(paths)]  # fmt: skip
    for p in procs:
        assert p.wait(timeout=120) == 0, p.stderr.read() if p.stderr else ""
    assert _stored(db) == (2, 2000)


@pytest.fixture()
def stepped_history(tmp_path, decode_run) -> tuple[Path, list[str]]:
    """20 commits; from the 12th, every step takes 25% longer."""
    db = tmp_path / "h.sqlite"
    commits = [f"{i:02d}".ljust(40, "f") for i in range(20)]
    for i, sha in enumerate(commits):
        factor = 1.25 if i >= 12 else 1.0
        add(db, write(tmp_path / f"r{i}.json", scaled(decode_run, factor, i)), sha, i + 1)
    return db, commits


def test_changes_name_the_commit_where_the_steps_slowed(stepped_history):
    db, commits = stepped_history
    result = run_cli("history", "changes", "--db", str(db), "--metric", "step_ms_median",
                     "--format", "markdown")  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = [line for line in result.output.splitlines() if line.startswith("| step_ms_median")]
    assert len(rows) == 4  # every point's series, all at the same commit
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
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
    path = write(tmp_path / "r.json", decode_run)
    result = run_cli("history", "add", path, "--db", str(tmp_path / "h.sqlite"))
    assert result.exit_code == 2
    assert "--commit: not in a git checkout" in result.output
