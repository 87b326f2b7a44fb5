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
from typer.testing import CliRunner

from attnbench.cli import app, history_cmd
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
    assert again.exit_code == 0 and f"already there (run 1), commit {'a' * 10}" in again.output
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
    path = write(tmp_path / "r.json", measured_at(decode_run, None))
    result = run_cli("history", "add", path, "--db", str(tmp_path / "h.sqlite"))
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert "--commit: not in a git checkout" in result.output


#: HEAD of the checkout `history add` runs in, in the tests that set it (fake_head).
HEAD = Commit("e" * 40, "main", "2026-12-01T09:00:00+01:00")


@pytest.fixture()
def fake_head(monkeypatch) -> Commit:
    monkeypatch.setattr(history_cmd, "current_commit", lambda: HEAD)
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
    and branch with its own date; a CSV (no date either) gets HEAD's commit date too."""
    named, unnamed = measured_at(decode_run, "a" * 40, 1), measured_at(decode_run, None, 2)
    paths = [
        write(tmp_path / "named.json", named),
        write(tmp_path / "unnamed.json", unnamed),
        write_csv(tmp_path / "r.csv", measured_at(decode_run, None, 3)),
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
