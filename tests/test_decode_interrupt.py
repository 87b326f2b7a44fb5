"""decode-speed stopped by Ctrl-C: the first one ends the run after the current group of
points, whose finished rows are shown and written (exit 130); a second one stops at once;
nothing finished, no file is written."""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import signal

import pytest

from attnbench.cli import app
from attnbench.measure import timing
from attnbench.study.sections import KINDS
from tests.helpers import runner

#: Two contexts (prompts of 4 and 8 tokens), a group of two points each (no_cache, cache).
TINY = [
    "--d-model",
    "32",
    "--heads",
    "4",
    "--kv-heads",
    "2",
    "--batch",
    "1",
    "--prompt-len",
    "4,8",
    "--gen-len",
    "3",
    "--warmup",
    "0",
    "--repeats",
    "1",
    "--device",
    "cpu",
]
NOTICE = "stopping after the current points (Ctrl-C again to stop now)"


def sigint() -> None:
    """Ctrl-C, as the terminal sends it; only while the command handles it (without its
    handler the test session itself would stop)."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        pytest.fail("no Ctrl-C handler is installed while decode-speed runs")
    os.kill(os.getpid(), signal.SIGINT)


def ctrl_c_in_group(monkeypatch, times: int = 1, group: int = 0) -> list[int]:
    """Send Ctrl-C `times` while group `group` of the decode points runs (the runner's
    own grouped path, as the command runs it); the sizes of the groups run come back."""
    kind = KINDS["decode"]
    sizes: list[int] = []

    def run_group(points, context, number, link):
        sizes.append(len(points))
        if number == group:
            for _ in range(times):
                sigint()
        return kind.run_group(points, context, number, link)

    monkeypatch.setitem(KINDS, "decode", dataclasses.replace(kind, run_group=run_group))
    return sizes


def decode_speed(*args):
    return runner.invoke(app, ["decode-speed", *TINY, *map(str, args)])


def flat(text: str) -> str:
    """Console text with its line breaks (the console's width) undone."""
    return " ".join(text.split())


def test_ctrl_c_keeps_the_finished_group_in_the_table_and_files(monkeypatch, tmp_path):
    sizes = ctrl_c_in_group(monkeypatch)
    csv_path, json_path = tmp_path / "d.csv", tmp_path / "d.json"
    handler = signal.getsignal(signal.SIGINT)
    result = decode_speed("--csv", csv_path, "--json", json_path)
    assert result.exit_code == 130, result.output
    assert sizes == [2]  # the first group finished, the second never started
    assert signal.getsignal(signal.SIGINT) is handler  # Ctrl-C is the test runner's again
    err = flat(result.stderr)
    assert NOTICE in err
    assert err.endswith("interrupted: 2 of 4 points finished; the table and the files hold those")
    assert err.index(NOTICE) < err.index("interrupted:")
    assert "Traceback" not in result.output
    assert f"wrote {csv_path}" in result.stdout and f"wrote {json_path}" in result.stdout
    table = [line for line in result.stdout.splitlines() if line.startswith("│")]
    assert [line.split("│")[2].strip() for line in table] == ["no_cache", "cache"]  # its rows

    rows = list(csv.DictReader(csv_path.open()))
    assert [(r["prompt_len"], r["mode"]) for r in rows] == [("4", "no_cache"), ("4", "cache")]
    doc = json.loads(json_path.read_text())
    assert doc["command"] == "decode-speed"
    assert [(r["prompt_len"], r["mode"]) for r in doc["records"]] == [
        (4, "no_cache"),
        (4, "cache"),
    ]
    assert all(r["sampling"] == "interleaved" for r in doc["records"])  # run as a group
    assert doc["config"]["prompt_len"] == [4, 8]  # what was asked: more than it holds


def test_the_files_read_back_as_results(monkeypatch, tmp_path):
    """A file of an interrupted run is a results file like any other (compare, baseline)."""
    from attnbench.study.documents import load_document

    ctrl_c_in_group(monkeypatch)
    csv_path, json_path = tmp_path / "d.csv", tmp_path / "d.json"
    result = decode_speed("--quiet", "--csv", csv_path, "--json", json_path)
    assert result.exit_code == 130, result.output
    assert flat(result.stderr).endswith("interrupted: 2 of 4 points finished; the files hold those")
    for path in (csv_path, json_path):
        assert len(load_document(path).sections["decode"]) == 2


def test_a_second_ctrl_c_stops_at_once_and_writes_nothing(monkeypatch, tmp_path):
    ctrl_c_in_group(monkeypatch, times=2)
    csv_path = tmp_path / "d.csv"
    csv_path.write_text("variant,step_ms_median\nMHA,1.5\n")
    result = decode_speed("--csv", csv_path)
    assert result.exit_code == 130
    assert NOTICE in flat(result.stderr)
    assert "wrote" not in result.stdout
    assert csv_path.read_text() == "variant,step_ms_median\nMHA,1.5\n"


def test_ctrl_c_before_any_point_writes_no_file(monkeypatch, tmp_path):
    """Stopped while the peaks are probed: no point starts, and an earlier file stays."""
    ran = ctrl_c_in_group(monkeypatch, times=0)

    def probe(device, **kwargs):
        sigint()
        return 10.0

    monkeypatch.setattr(timing, "measure_peak_gbps", probe)
    csv_path, json_path = tmp_path / "d.csv", tmp_path / "d.json"
    csv_path.write_text("variant,step_ms_median\nMHA,1.5\n")
    result = decode_speed("--csv", csv_path, "--json", json_path)
    assert result.exit_code == 130, result.output
    assert ran == []
    err = flat(result.stderr)
    assert NOTICE in err
    assert err.endswith("interrupted: 0 of 4 points finished; no file written")
    assert "wrote" not in result.stdout
    assert csv_path.read_text() == "variant,step_ms_median\nMHA,1.5\n"
    assert not json_path.exists()


def test_an_uninterrupted_run_is_as_before(monkeypatch, tmp_path):
    sizes = ctrl_c_in_group(monkeypatch, times=0)
    result = decode_speed("--csv", tmp_path / "d.csv")
    assert result.exit_code == 0, result.output
    assert sizes == [2, 2]
    assert "interrupted" not in result.stderr and "stopping" not in result.stderr
    assert len(list(csv.DictReader((tmp_path / "d.csv").open()))) == 4
