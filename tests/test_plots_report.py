"""Plots and report.md from a saved results.json: re-rendered without re-running, labelled
with units, and every number in the report taken from the records."""

from __future__ import annotations

import copy
import json

import matplotlib.image
import pytest
from typer.testing import CliRunner

import attnbench.cli.run_cmd
from attnbench.cli import app
from attnbench.model.units import binary_unit
from attnbench.render import plots, report
from attnbench.render.columns import PARAMS, kvmem_columns
from attnbench.render.table import markdown_table
from attnbench.study.runner import RESULTS_FILE, DirectoryStore, plan_study, run_study

pytestmark = pytest.mark.usefixtures("single_thread")

runner = CliRunner()

TINY = """\
defaults: {d_model: 64, num_heads: 4}
sweep: {num_kv_heads: [4, 2, 1]}
params: {}
kvmem: {num_layers: 2, batch: 1, seq_len: [16, 64, 256], dtype: float16, device: cpu}
decode: {batch: 1, prompt_len: [4, 8], gen_len: 4, warmup: 0, repeats: 1, device: cpu}
"""


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict:
    """A finished tiny study's results.json (no plots, no report yet) and its document."""
    out = tmp_path_factory.mktemp("study")
    (out / "tiny.yaml").write_text(TINY)
    # module-scoped: conftest's stub of the peak probe is not in place yet
    result = run_study(plan_study(out / "tiny.yaml"), DirectoryStore(out),
                       probe_peak=lambda device: 10.0)  # fmt: skip
    assert not result.interrupted and result.ran == 3 + 9 + 12
    return {"path": out / RESULTS_FILE, "doc": result.document}


@pytest.fixture
def nothing_runs(monkeypatch, saved):
    """Re-rendering runs no study and leaves the saved results as they were."""

    def forbidden(*args, **kwargs):
        pytest.fail("re-rendering ran a study")

    monkeypatch.setattr(attnbench.cli.run_cmd, "run_study", forbidden)
    before = saved["path"].read_bytes()
    yield
    assert saved["path"].read_bytes() == before


def _saved_copy(saved, tmp_path, edit=None):
    doc = copy.deepcopy(saved["doc"])
    if edit:
        edit(doc)
    path = tmp_path / "results.json"
    path.write_text(json.dumps(doc))
    return path


# ------------------------------------------------------------------ commands


@pytest.mark.usefixtures("nothing_runs")
def test_plot_rerenders_from_results(saved, tmp_path):
    out = tmp_path / "plots"
    result = runner.invoke(app, ["plot", str(saved["path"]), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == sorted(plots.PLOTS)
    for png in out.iterdir():
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        height, width, _ = matplotlib.image.imread(png).shape
        assert width > 600 and height > 400


@pytest.mark.usefixtures("nothing_runs")
def test_report_rerenders_beside_results(saved, tmp_path):
    path = _saved_copy(saved, tmp_path)
    (tmp_path / "decode_latency.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    result = runner.invoke(app, ["report", str(path)])
    assert result.exit_code == 0, result.output
    text = (tmp_path / "report.md").read_text()
    for heading in ("## Findings", "## Environment", "## Decode speed", "## Configuration"):
        assert heading in text
    for variant in ("MHA", "GQA-2", "MQA"):
        assert f"| {variant} |" in text
    assert "![Decode step latency vs prompt length](decode_latency.png)" in text
    assert "decode_speedup.png" not in text  # only the plots that exist are shown


def test_report_numbers_come_from_the_records(saved, tmp_path):
    def edit(doc):
        for r in doc["sections"]["decode"]["records"]:
            if r["variant"] == "MHA" and r["mode"] == "cache" and r["prompt_len"] == 8:
                r["speedup_vs_no_cache"] = 987.6
        for r in doc["sections"]["kvmem"]["records"]:
            if r["variant"] == "MQA":
                r["ratio_vs_mha"] = 0.123

    path = _saved_copy(saved, tmp_path, edit)
    assert runner.invoke(app, ["report", str(path), "-q"]).exit_code == 0
    text = (tmp_path / "report.md").read_text()
    assert "At prompt 8, cached decode is 987.6x (MHA)" in text
    assert "GQA-2 needs 50.0% of MHA's KV cache and MQA 12.3%" in text


@pytest.mark.parametrize("command", ["plot", "report"])
def test_bad_results_file_is_one_line(command, tmp_path):
    missing = runner.invoke(app, [command, str(tmp_path / "nope.json")])
    assert missing.exit_code == 2 and "no such file" in missing.stderr
    kvmem = tmp_path / "kvmem.json"
    args = ["kvmem", "--d-model", "64", "--heads", "4", "--no-measure", "-q", "--json", str(kvmem)]
    assert runner.invoke(app, args).exit_code == 0
    other = runner.invoke(app, [command, str(kvmem)])
    assert other.exit_code == 2 and "not by `attnbench run`" in other.stderr
    assert "Traceback" not in other.output


# ------------------------------------------------------------------ plots


def test_plots_name_device_units_and_scales(saved):
    doc = saved["doc"]
    latency = plots.decode_latency(doc).axes[0]
    assert "float32" in latency.get_title() and "batch 1" in latency.get_title()
    assert latency.get_xlabel() == "Prompt length (tokens)" and "(ms)" in latency.get_ylabel()
    labels = [t.get_text() for t in latency.get_legend().get_texts()]
    assert "MHA, cache" in labels and "MQA, no cache" in labels

    memory = plots.kv_memory_vs_context(doc).axes[0]
    assert memory.get_xscale() == "log"  # 16 to 256 tokens spans more than a decade
    assert memory.get_ylabel().endswith("(KiB)")  # 2 layers of 4 KV heads of 16, fp16
    heads = plots.kv_memory_vs_heads(doc).axes[0]
    assert [t.get_text() for t in heads.get_xticklabels()] == ["1\nMQA", "2\nGQA-2", "4\nMHA"]


def test_plots_skip_what_the_study_lacks(saved, tmp_path):
    doc = copy.deepcopy(saved["doc"])
    del doc["sections"]["decode"]
    assert plots.render_plots(doc, tmp_path) == [tmp_path / "kv_memory_heads.png",
                                                 tmp_path / "kv_memory_context.png"]  # fmt: skip


def test_binary_units():
    assert binary_unit(1000) == (1.0, "B")
    assert binary_unit(1536) == (1024.0, "KiB")
    assert binary_unit(3 * 2**30) == (2.0**30, "GiB")


# ------------------------------------------------------------------ report pieces


def test_markdown_table_drops_empty_columns_and_escapes():
    table = markdown_table([{"variant": "a|b", "d_model": 4096, "model": None}], PARAMS)
    header, rule, row = table.splitlines()
    assert header == "| Variant | d_model |" and rule == "|---|---:|"
    assert row == "| a\\|b | 4,096 |"


def test_findings_list_incomplete_points(saved):
    doc = copy.deepcopy(saved["doc"])
    doc["sections"]["decode"]["records"][0]["status"] = "oom"
    found = report.findings(doc)
    assert found[-1].startswith("1 point(s) did not complete: decode MHA d_model 64")
    assert found[-1].endswith(": oom.")


def test_settings_added_to_records_later_tell_lines_and_columns_apart():
    """tp is a sweep setting, kv_heads_per_gpu is derived from it: one line per tp."""
    rows = [{"variant": v, "num_kv_heads": h, "tp": tp, "kv_heads_per_gpu": max(h // tp, 1),
             "seq_len": 8, "kv_bytes": 64 * h} for v, h in (("MHA", 4), ("MQA", 1))
            for tp in (1, 2)]  # fmt: skip
    lines = plots.series(rows, "num_kv_heads", named=False)
    assert [(label, len(line)) for label, line in lines] == [("tp 1", 2), ("tp 2", 2)]
    assert [[r["num_kv_heads"] for r in line] for _, line in lines] == [[1, 4], [1, 4]]
    # the report's kvmem table shows tp as a column of its own once some row uses it
    table = markdown_table(rows, kvmem_columns(rows)).splitlines()
    assert table[0] == "| Variant | kv heads | context | whole model | tp |"
    assert table[2:] == ["| MHA | 4 | 8 | 256 B | 1 |", "| MHA | 4 | 8 | 256 B | 2 |",
                         "| MQA | 1 | 8 | 64 B | 1 |", "| MQA | 1 | 8 | 64 B | 2 |"]  # fmt: skip
    without_tp = [{**r, "tp": 1} for r in rows[::2]]
    assert "tp" not in markdown_table(without_tp, kvmem_columns(without_tp)).splitlines()[0]
