"""`history add` refuses what `compare` refuses (gate.compare.check_measurements: a timing
no run measures), before it stores anything: compare --history would otherwise read the
database back as a file it refuses, and blame the database."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from attnbench.cli import app
from tests.helpers import runner

ARGS = ["decode-speed", "--d-model", "64", "--heads", "4", "--prompt-len", "8"]
QUICK = ["--mode", "cache", "--no-prefill", "--max-time", "0.1", "--reference", "none", "-q"]


@pytest.fixture(scope="module")
def decode_doc(tmp_path_factory) -> dict:
    path = tmp_path_factory.mktemp("decode") / "d.json"
    result = runner.invoke(app, [*ARGS, *QUICK, "--json", str(path)])
    assert result.exit_code == 0, result.output
    return json.loads(path.read_text())


def _huge(doc: dict) -> dict:
    """Every step timing and sample at 1e308: in order, finite, and no run's."""
    doc = json.loads(json.dumps(doc))
    for record in doc["records"]:
        record.update(step_ms_median=1e308, step_ms_p25=1e308, step_ms_p75=1e308)
        record["samples_ms"] = [1e308] * len(record["samples_ms"])
    return doc


def _add(db: Path, *paths: Path):
    return runner.invoke(
        app, ["history", "add", *map(str, paths), "--db", str(db), "--commit", "c1", "-q"]
    )


def test_history_add_refuses_a_timing_compare_refuses_and_stores_nothing(tmp_path, decode_doc):
    good, huge = tmp_path / "good.json", tmp_path / "huge.json"
    good.write_text(json.dumps(decode_doc))
    huge.write_text(json.dumps(_huge(decode_doc)))
    compared = runner.invoke(app, ["compare", str(good), str(huge)])
    assert compared.exit_code == 2
    db = tmp_path / "h.sqlite"
    result = _add(db, good, huge)
    assert result.exit_code == 2, result.output
    assert result.stderr == compared.stderr  # the same check, the same line
    assert f"error: {huge}: decode record 0: step_ms_median: 1e+308 is out of range" in (
        result.stderr
    )
    assert not db.exists()  # good.json, given first, is not stored either
    assert _add(db, good).exit_code == 0
    assert _add(db, huge).exit_code == 2
    con = sqlite3.connect(db)
    try:
        assert con.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 1
    finally:
        con.close()
