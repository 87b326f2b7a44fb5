"""`run`, `merge`, `plot` and `report` on inputs that are wrong: --shard in a dry run, a
results.json cut short in the directory resumed, and an --out holding another study's
results, which only --force writes over."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnbench.cli import app
from tests.helpers import one_error, runner

STUDY = """
defaults: {d_model: 64, num_heads: 4}
sweep: {num_kv_heads: [4, 2, 1]}
params: {}
kvmem: {seq_len: [16, 32], measure: false}
"""

OTHER = "defaults: {d_model: 64, num_heads: 4}\nparams: {num_kv_heads: [4, 1]}\n"


def cli(*args: object):
    return runner.invoke(app, [*map(str, args)], env={"COLUMNS": "250"})


@pytest.fixture
def study(tmp_path: Path) -> Path:
    path = tmp_path / "study.yaml"
    path.write_text(STUDY)
    return path


@pytest.fixture(autouse=True)
def no_plots(monkeypatch: pytest.MonkeyPatch) -> None:
    """No plots drawn: these tests are about which files are written where."""
    monkeypatch.setattr("attnbench.render.plots.render_plots", lambda doc, out: [])


# --- --shard in a dry run ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shard", "reason"),
    [
        ("x", "expected i/N"),
        ("0/0", "N must be between 1 and 100,000"),
        ("-1/2", "expected i/N"),
        ("0/2/3", "expected i/N"),
        ("2/2", "i must be below N"),
    ],
)
def test_a_dry_run_checks_shard_as_a_run_does(study, shard, reason):
    dry = one_error(cli("run", study, "--shard", shard, "--dry-run"))
    assert dry.startswith(f"error: --shard {shard}: {reason}")
    assert one_error(cli("run", study, "--shard", shard, "--out", study.parent / "out")) == dry


def test_a_dry_run_of_a_share_lists_its_points_alone(study):
    whole = cli("run", study, "--dry-run")
    assert whole.exit_code == 0 and "9 points (" in whole.stdout
    listed = []
    for i in range(2):
        result = cli("run", study, "--shard", f"{i}/2", "--dry-run")
        assert result.exit_code == 0, result.output
        *points, total = result.stdout.strip().splitlines()
        assert total.startswith(f"{len(points)} points of share {i}/2 (")
        listed += points
    assert sorted(listed) == sorted(whole.stdout.strip().splitlines()[:-1])
    assert 0 < len(points) < 9


def test_a_dry_run_of_a_share_takes_no_nproc(study):
    line = one_error(cli("run", study, "--shard", "0/2", "--nproc", "2", "--dry-run"))
    assert line.startswith("error: --nproc 2: shares the whole study")


# --- resuming a results.json cut short -----------------------------------------------------


def test_resuming_a_truncated_results_json_names_the_file_and_why(study, tmp_path):
    out = tmp_path / "out"
    assert cli("run", study, "--out", out, "-q").exit_code == 0
    results = out / "results.json"
    results.write_bytes(results.read_bytes()[:300])
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    line = one_error(cli("run", study, "--out", out, "--resume", "-q"))
    assert line.startswith(f"error: {results}: not valid JSON (")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


# --- another study's results in --out ------------------------------------------------------


@pytest.fixture
def other(tmp_path: Path) -> Path:
    """The directory of another study (another configuration), finished, with notes."""
    sweep = tmp_path / "other.yaml"
    sweep.write_text(OTHER)
    out = tmp_path / "other"
    assert cli("run", sweep, "--out", out, "-q").exit_code == 0
    return out


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


@pytest.mark.parametrize("command", ["merge", "plot", "report"])
def test_another_studys_results_are_kept_unless_forced(study, tmp_path, other, command):
    done, shared = tmp_path / "done", tmp_path / "shared"
    assert cli("run", study, "--out", done, "-q").exit_code == 0
    assert cli("run", study, "--out", shared, "--shard", "0/1", "-q").exit_code == 0
    source = shared if command == "merge" else done / "results.json"
    before = _files(other)
    line = one_error(cli(command, source, "--out", other, "-q"))
    assert line.startswith(f"error: --out {other}: holds the results of another study (")
    assert line.endswith("give another directory, or --force")
    assert _files(other) == before
    assert cli(command, source, "--out", other, "-q", "--force").exit_code == 0
    help_text = " ".join(cli(command, "--help").stdout.split())
    assert "--force Write into --out even when it holds another study's results" in help_text


def test_the_same_study_is_merged_and_rerendered_where_its_results_are(study, tmp_path):
    shared, merged = tmp_path / "shared", tmp_path / "merged"
    for i in range(2):
        assert cli("run", study, "--out", shared, "--shard", f"{i}/2", "-q").exit_code == 0
    for _ in range(2):  # merged again over its own results: the same study
        assert cli("merge", shared, "-q").exit_code == 0
        assert cli("merge", shared, "--out", merged, "-q").exit_code == 0
    results = merged / "results.json"
    assert json.loads(results.read_text())["sections"]["params"]["records"]
    for command in ("plot", "report"):
        assert cli(command, results, "-q").exit_code == 0
        assert cli(command, results, "--out", shared, "-q").exit_code == 0


@pytest.mark.parametrize(
    ("command", "name"), [("report", "report.md"), ("plot", "decode_latency.png")]
)
def test_a_rerender_never_writes_over_its_own_results(study, tmp_path, command, name):
    """A results.json saved under a name the command writes (report.md, a plot's) would be
    replaced by what is rendered from it: refused, --force or not, before anything."""
    out = tmp_path / "out"
    assert cli("run", study, "--out", out, "-q").exit_code == 0
    renamed = tmp_path / "kept" / name
    renamed.parent.mkdir()
    renamed.write_bytes((out / "results.json").read_bytes())
    before = renamed.read_bytes()
    for force in ([], ["--force"]):
        line = one_error(cli(command, renamed, *force))
        assert f"would replace {renamed}, an input of this command" in line
    assert renamed.read_bytes() == before
    assert cli(command, renamed, "--out", out, "-q").exit_code == 0  # elsewhere: written


def test_a_run_never_writes_over_its_own_sweep_file(tmp_path):
    """A sweep file in --out under a name the study writes (report.md, results.json, a
    CSV) would be replaced by the study's file: refused, --force or not."""
    out = tmp_path / "out"
    out.mkdir()
    sweep = out / "report.md"
    sweep.write_text(STUDY)
    for force in ([], ["--force"]):
        line = one_error(cli("run", sweep, "--out", out, *force))
        assert "would replace" in line and "an input of this command" in line
    assert sweep.read_text() == STUDY
    kept = out / "study.yaml"  # under its own name it may lie there, as before
    kept.write_text(STUDY)
    sweep.unlink()
    assert cli("run", kept, "--out", out, "-q").exit_code == 0 and kept.read_text() == STUDY
