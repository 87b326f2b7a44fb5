"""Values a damaged history holds (a page of other bytes, a hand edit) that no results
file could have: each command that reads one says so in one line naming the file,
where the statistics failed with a traceback, or showed and searched them as times."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tests.history.test_store import READERS, add, one_error, run_cli, write


@pytest.fixture()
def timed_history(tmp_path, decode_run) -> Path:
    db = tmp_path / "h.sqlite"
    add(db, write(tmp_path / "d.json", decode_run), "a" * 40, 1)
    return db


def _update(db: Path, statement: str, *values: object) -> None:
    con = sqlite3.connect(db)
    con.execute(statement, values)
    con.commit()
    con.close()


@pytest.mark.parametrize(
    ("samples", "shown"),
    [
        ('["a", "b"]', "'a' is not a finite number >= 0"),
        ("[1e400, 1, 2]", "inf is not a finite number >= 0"),
        ("[-1, -1, -1]", "-1 is not a finite number >= 0"),
        ("[1, null]", "None is not a finite number >= 0"),
        ("[true, 1]", "True is not a finite number >= 0"),
        ("[1" + "0" * 400 + "]", "is not a finite number >= 0"),
    ],
)
@pytest.mark.parametrize("reader", READERS)
def test_damaged_samples_are_one_error_naming_the_run_and_metric(
    samples, shown, reader, timed_history, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    _update(timed_history, "UPDATE samples SET samples = ?", samples)
    one_error(
        run_cli(*reader, str(timed_history), "--metric", "step_ms_median"),
        f"--db {timed_history}: cannot use it: a stored value is damaged: "
        "run 1's samples of step_ms_median: ",
        shown,
    )


@pytest.mark.parametrize(
    ("metric", "value", "shown"),
    [
        ("step_ms_median", -1.5, "run 1's step_ms_median: -1.5 is not a finite number >= 0"),
        ("step_ms_median", float("inf"), "run 1's step_ms_median: inf is not a finite number"),
        ("bytes_per_step", "many", "run 1's bytes_per_step: 'many' is not a finite number"),
    ],
)
def test_a_damaged_metric_value_is_one_error(metric, value, shown, timed_history):
    """A timing below 0 or infinite, an exact metric of text (SQLite keeps text that is no
    number in a REAL column)."""
    _update(timed_history, "UPDATE metrics SET value = ? WHERE name = ?", value, metric)
    _update(timed_history, "DELETE FROM samples")  # the value is what is shown then
    one_error(
        run_cli("history", "show", "--db", str(timed_history), "--metric", metric),
        f"--db {timed_history}: cannot use it: a stored value is damaged: {shown}",
    )


@pytest.mark.parametrize(
    ("field", "value", "shown"),
    [
        ("samples_ms", ["a"], "samples_ms: 'a' is not a finite number >= 0"),
        ("samples_ms", 5, "samples_ms: 5 is not a list"),
        ("step_ms_median", [1.0], "step_ms_median: [1.0] is not a number"),
        ("step_ms_p25", -2.0, "step_ms_p25: -2.0 is not a finite number >= 0"),
    ],
)
def test_compare_against_a_record_damaged_in_the_history_is_one_error(
    field, value, shown, timed_history, tmp_path, decode_run
):
    """The whole records a run keeps, which compare --history pools and gates."""
    con = sqlite3.connect(timed_history)
    [(record_id, text)] = con.execute("SELECT id, record FROM records WHERE position = 0")
    con.close()
    record = {**json.loads(text), field: value}
    _update(
        timed_history, "UPDATE records SET record = ? WHERE id = ?", json.dumps(record), record_id
    )
    current = write(tmp_path / "cur.json", {**decode_run, "created": "2020-01-01T00:00:00+00:00"})
    one_error(
        run_cli("compare", current, "--history", str(timed_history)),
        f"--history {timed_history}: cannot use it: a stored value is damaged: "
        f"run 1's decode record 0: {shown}",
    )
