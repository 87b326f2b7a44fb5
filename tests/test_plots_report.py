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
PROVIDERS_PNG = "decode_providers.png"

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
                       probe_peak=lambda device: 10.0,
                       probe_flops=lambda device, dtype: 1e-4)  # fmt: skip
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
    # one provider: no providers plot
    assert sorted(p.name for p in out.iterdir()) == sorted(set(plots.PLOTS) - {PROVIDERS_PNG})
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
    assert "![Decode step latency vs context](decode_latency.png)" in text
    assert "decode_speedup.png" not in text  # only the plots that exist are shown
    assert "vs attnbench" not in text and "by provider" not in text  # one provider


def test_report_numbers_come_from_the_records(saved, tmp_path):
    def edit(doc):
        for r in doc["sections"]["decode"]["records"]:
            if r["variant"] == "MHA" and r["mode"] == "cache" and r["prompt_len"] == 8:
                r.update(x_of_no_cache_median=1 / 987.6, x_of_no_cache_ci_lo=1 / 1000,
                         x_of_no_cache_ci_hi=1 / 975)  # fmt: skip
        for r in doc["sections"]["kvmem"]["records"]:
            if r["variant"] == "MQA":
                r["ratio_vs_mha"] = 0.123

    path = _saved_copy(saved, tmp_path, edit)
    assert runner.invoke(app, ["report", str(path), "-q"]).exit_code == 0
    text = (tmp_path / "report.md").read_text()
    assert "prefix at 8 tokens: MHA 987.6x (95% interval 975.0-1000.0x), GQA-2" in text
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
    assert latency.get_xlabel() == "Context (tokens cached)" and "(ms)" in latency.get_ylabel()
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
    assert found[-1].startswith("1 point(s) did not complete: decode MHA attnbench d_model 64")
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


# ------------------------------------------------------------------ providers side by side

CUDNN = "unsupported: no cuDNN kernel on the CPU"
WRONG = "wrong: max error 0.5 against the reference, above 0.001"


def with_providers(doc: dict) -> dict:
    """The tiny study's decode records as if three more providers had run beside
    attnbench: sdpa-flash 1.25x as fast everywhere, sdpa-cudnn unsupported, and naive
    disagreeing with the reference at MQA (timed elsewhere, 2x slower)."""
    doc = copy.deepcopy(doc)
    section = doc["sections"]["decode"]
    base = section["records"]
    flash, cudnn, naive = [], [], []
    untimed = dict(step_ms_median=None, step_ms_p25=None, step_ms_p75=None, samples_ms=[],
                   tokens_per_s=None, speedup_vs_no_cache=None, speedup_vs_baseline=None,
                   pct_of_peak_bw=None, achieved_gbps=None, noisy=None)  # fmt: skip
    faster = {"speedup_vs_baseline": 1.25, "x_of_baseline_median": 0.8,
              "x_of_baseline_ci_lo": 0.78, "x_of_baseline_ci_hi": 0.82}  # fmt: skip
    for r in base:
        r["speedup_vs_baseline"] = 1.0
        timing = {f: r[f] * 0.8 for f in ("step_ms_median", "step_ms_p25", "step_ms_p75")}
        flash.append({**r, **timing, "provider": "sdpa-flash", **faster})
        cudnn.append({**r, **untimed, "provider": "sdpa-cudnn", "status": CUDNN})
        slow = {f: r[f] * 2 for f in ("step_ms_median", "step_ms_p25", "step_ms_p75")}
        if r["variant"] == "MQA":
            naive.append({**r, **untimed, "provider": "naive", "status": WRONG})
        else:
            naive.append({**r, **slow, "provider": "naive", "speedup_vs_baseline": 0.5})
    section["records"] = base + flash + naive + cudnn
    return doc


def cached(doc: dict, provider: str, variant: str, context: int) -> dict:
    return next(r for r in doc["sections"]["decode"]["records"]
                if (r["provider"], r["variant"], r["prompt_len"], r["mode"])
                == (provider, variant, context, "cache"))  # fmt: skip


def test_providers_plot_one_line_per_provider_one_panel_per_variant(saved, tmp_path):
    doc = with_providers(saved["doc"])
    fig = plots.decode_providers(doc)
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in panels] == ["MHA", "GQA-2", "MQA"]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == ["attnbench (baseline)", "sdpa-flash", "naive"]  # cudnn: nothing timed
    assert "float32" in fig.legends[0].get_title().get_text()
    assert fig.get_supxlabel() == "Context (tokens cached)"
    lines = {bars.get_label(): bars.lines[0] for bars in panels[0].containers}
    assert sorted(lines) == ["attnbench (baseline)", "naive", "sdpa-flash"]
    mha = cached(doc, "sdpa-flash", "MHA", 8)
    assert list(lines["sdpa-flash"].get_xdata()) == [4, 8]
    assert lines["sdpa-flash"].get_ydata()[-1] == pytest.approx(mha["step_ms_median"])
    assert lines["attnbench (baseline)"].get_linewidth() > lines["naive"].get_linewidth()
    assert "naive" not in [bars.get_label() for bars in panels[2].containers]  # wrong there
    written = plots.render_plots(doc, tmp_path)
    assert tmp_path / PROVIDERS_PNG in written
    height, width, _ = matplotlib.image.imread(tmp_path / PROVIDERS_PNG).shape
    assert width > 1000 and height > 400
    # the cache-vs-no-cache plots keep to the baseline provider
    latency = plots.decode_latency(doc).axes[0]
    assert "provider attnbench" in latency.get_title()
    assert len([t for t in latency.get_legend().get_texts()]) == 6  # 3 variants x 2 modes


def test_providers_plot_needs_two_providers(saved):
    assert plots.decode_providers(saved["doc"]) is None
    doc = with_providers(saved["doc"])
    for r in doc["sections"]["decode"]["records"]:
        if r["provider"] != "attnbench" and r["mode"] == "cache":
            r["status"] = "oom"
    assert plots.decode_providers(doc) is None  # one provider has cached steps


def test_findings_name_the_fastest_provider_and_what_was_not_timed(saved):
    doc = with_providers(saved["doc"])
    found = report.findings(doc)
    longest = [f"{v} sdpa-flash ({cached(doc, 'sdpa-flash', v, 8)['step_ms_median']:.3f} ms, "
               f"1.25x (95% interval 1.22-1.28x) attnbench)"
               for v in ("MHA", "GQA-2", "MQA")]  # fmt: skip
    fastest = (f"Fastest cached decode step at context 8: {longest[0]}, {longest[1]} and "
               f"{longest[2]}.")  # fmt: skip
    assert fastest in found
    assert ("Unsupported here, so not timed: sdpa-cudnn at 12 points (no cuDNN kernel on the "
            "CPU).") in found  # fmt: skip
    wrong = next(f for f in found if "disagree with the reference" in f)
    assert wrong.startswith(
        "4 point(s) disagree with the reference, so not timed: decode MQA "
        "naive d_model 64 batch 1 context 4 no_cache: wrong: max error 0.5"
    )
    assert not any("did not complete" in f for f in found)  # rows, not failures
    # the cache-vs-no-cache lines keep to the baseline, and say so
    speedup = next(f for f in found if f.startswith("Cached decode over recomputing"))
    assert speedup.endswith("provider attnbench.")
    assert sum("without the cache a decode step takes" in f for f in found) == 3


def test_fastest_provider_may_be_the_baseline(saved):
    doc = with_providers(saved["doc"])
    for r in doc["sections"]["decode"]["records"]:
        if r["provider"] == "sdpa-flash" and r["variant"] == "MHA":
            r["step_ms_median"] *= 10
    line = next(f for f in report.findings(doc) if f.startswith("Fastest"))
    base = cached(doc, "attnbench", "MHA", 8)["step_ms_median"]
    assert f"MHA attnbench ({base:.3f} ms, the baseline), GQA-2 sdpa-flash" in line


def test_report_shows_providers_side_by_side(saved, tmp_path):
    doc = with_providers(saved["doc"])
    text = report.render_report(doc, [PROVIDERS_PNG])
    assert "![Cached decode step latency by provider](decode_providers.png)" in text
    assert ("### Cached decode step, ms by provider (speed-up over attnbench) · not timed at "
            "any point: sdpa-cudnn") in text  # fmt: skip
    table = text[text.index("### Cached decode step") :].split("\n\n")[2].splitlines()
    assert table[0] == "| Variant | context | attnbench | sdpa-flash | naive | fastest |"
    base = cached(doc, "attnbench", "MHA", 8)["step_ms_median"]
    flash = cached(doc, "sdpa-flash", "MHA", 8)["step_ms_median"]
    naive = cached(doc, "naive", "MHA", 8)["step_ms_median"]
    assert f"| MHA | 8 | {base:.3f} | {flash:.3f} (1.25x) | {naive:.3f} (0.50x) | sdpa-flash |" in (
        table
    )
    assert any(row.startswith("| MQA | 8 |") and "| wrong |" in row for row in table)
    assert len(table) == 2 + 6  # 3 variants x 2 contexts
    decode = text[text.index("## Decode speed") :]
    assert "| vs attnbench |" in decode.splitlines()[2]
    assert "no cuDNN kernel" not in decode.split("###")[0]  # the table says "unsupported"


def test_decode_findings_on_prefill_noise_and_sampling_time(saved):
    doc = copy.deepcopy(saved["doc"])
    records = doc["sections"]["decode"]["records"]
    for r in records:
        r.update(noisy=False, step_stop="target_ci")
    for r in records[:3]:
        r["noisy"] = True
    for r in records:  # every comparison within ±5%, one within +15% (its upper side)
        if r.get("x_of_narrowest_median") is not None:
            r.update(x_of_narrowest_median=2.0, x_of_narrowest_ci_lo=1.9, x_of_narrowest_ci_hi=2.1)
        if r.get("x_of_no_cache_median") is not None:
            r.update(x_of_no_cache_median=0.5, x_of_no_cache_ci_lo=0.49, x_of_no_cache_ci_hi=0.51)
    cached(doc, "attnbench", "GQA-2", 8).update(x_of_narrowest_ci_lo=1.8, x_of_narrowest_ci_hi=2.3)
    best = max((r for r in records if r.get("pct_of_peak_flops") is not None),
               key=lambda r: r["pct_of_peak_flops"])  # fmt: skip
    found = report.findings(doc)
    assert ("3 of 12 decode steps (each timed at a fixed context) are flagged noisy: p25 to "
            "p75 wider than 10% of the median.") in found  # fmt: skip
    assert ("The widest 95% interval of a comparison is ±15.0% (GQA-2 over MQA, context 8), "
            "against a target of ±2.0%.") in found  # fmt: skip
    prefill = next(f for f in found if f.startswith("The best prefill"))
    assert prefill == (
        f"The best prefill reaches {best['achieved_tflops']:.3g} TFLOPS, "
        f"{best['pct_of_peak_flops']:.1f}% of the measured float32 matmul peak of 0.0001 TFLOPS "
        f"({best['variant']}, {best['prompt_len']} tokens)."
    )
