"""What the search for changes cannot search is said, never read as "no change": a timing
of 0 ms is refused by `history add`, and one stored before is left out with a note."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tests.history.test_store import add, one_error, run_cli, scaled, write


def stepped(folder: Path, decode_run: dict, commits: int, at: int) -> Path:
    """A history of `commits` commits whose steps take 50% longer from commit `at` on."""
    folder.mkdir(exist_ok=True)
    db = folder / "h.sqlite"
    for i in range(commits):
        doc = scaled(decode_run, 1.5 if i >= at else 1.0, i)
        add(db, write(folder / f"r{i}.json", doc), f"{i:02d}".ljust(40, "f"), i + 1)
    return db


def changes(db: Path, *flags: str) -> str:
    result = run_cli("history", "changes", "--db", str(db), "--metric", "step_ms_median", *flags)
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


def _zeroed(record: dict, field: str) -> dict:
    """`record` with its step timed at 0 ms: in `field` alone, or in all of it."""
    if field == "samples_ms[3]":
        return {
            **record,
            "samples_ms": [0.0 if j == 3 else s for j, s in enumerate(record["samples_ms"])],
        }
    zero = dict.fromkeys(("step_ms_median", "step_ms_p25", "step_ms_p75"), 0.0)
    return {**record, **zero, "samples_ms": [0.0] * len(record["samples_ms"])}


@pytest.mark.parametrize("field", ["step_ms_median", "samples_ms[3]"])
def test_add_refuses_a_timing_of_0_and_stores_nothing(field, tmp_path, decode_run):
    doc = json.loads(json.dumps(decode_run))
    doc["records"][1] = _zeroed(doc["records"][1], field)
    good, bad = write(tmp_path / "good.json", decode_run), write(tmp_path / "bad.json", doc)
    db = tmp_path / "h.sqlite"
    one_error(
        run_cli("history", "add", good, bad, "--db", str(db), "--commit", "a" * 40),
        f"{bad}: decode record 1: {field}: 0 ms: the history takes timings above 0",
    )
    assert not db.exists()


def test_a_stored_timing_of_0_is_left_out_of_the_search_with_a_note(tmp_path, decode_run):
    """An earlier attnbench stored timings of 0: the commit holding one is left out of the
    search, and a note says so, where the series went unsearched: "No change found"."""
    db = stepped(tmp_path, decode_run, commits=16, at=8)
    con = sqlite3.connect(db)
    con.execute("UPDATE metrics SET value = 0 WHERE name = 'step_ms_median' AND record_id <= 2")
    con.execute("UPDATE samples SET samples = '[0, 0, 0]' WHERE record_id <= 2")  # run 1's
    con.commit()
    con.close()
    found = changes(db)
    assert found.count("08ffffffff") == 4  # the step of each of the four series
    assert (
        "note: step_ms_median: 2 point(s) of 0 ms left out of the search for changes, which "
        "compares timings by their ratios (commit 00ffffffff)" in found
    )
    assert "Note: step_ms_median: 2 point(s) of 0 ms left out" in changes(
        db, "--format", "markdown"
    )


def test_a_series_too_short_to_find_a_change_in_is_said_to_be(tmp_path, decode_run):
    """9 commits, a 50% step after the 5th: the test cannot reach p < 0.01 in so few,
    and "No change found" alone read as if there were none. At 10 it finds the step."""
    short = stepped(tmp_path / "short", decode_run, commits=9, at=5)
    said = changes(short)
    assert said.startswith("No change found in 1 metric(s).")
    assert "note: 4 series of under 10 commits: too few to find a change in at p < 0.01" in said
    assert "too few" in changes(short, "--format", "markdown")
    enough = changes(stepped(tmp_path / "enough", decode_run, commits=10, at=5))
    assert enough.count("05ffffffff") == 4 and "too few" not in enough
