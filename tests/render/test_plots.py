"""Plots and report.md from a saved results.json: re-rendered without re-running, labelled
with units, and every number in the report taken from the records."""

from __future__ import annotations

import copy
import json
import re

import matplotlib.image
import pytest

from attnbench.cli import app
from attnbench.experiments import decode as decode_mod
from attnbench.measure.timing import CpuShare
from attnbench.model.units import binary_unit, format_bytes
from attnbench.render import plots, report, selection
from attnbench.render.columns import columns_for, kvmem_columns
from attnbench.render.comparisons import RESOLVED_WIDTH, allowed_width
from attnbench.render.table import markdown_table
from attnbench.study.runner import RESULTS_FILE, DirectoryStore, plan_study, run_study
from tests.helpers import runner

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
    """A finished tiny study's results.json (no plots, no report yet) and its document.
    Its process ran for all of its sampling time, however busy the machine is (CpuShare):
    the points are not marked as sampled while another process held the CPU, which would
    change what the report says of them."""
    out = tmp_path_factory.mktemp("study")
    (out / "tiny.yaml").write_text(TINY)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(CpuShare, "share", lambda self: 1.0)
        result = run_study(plan_study(out / "tiny.yaml"), DirectoryStore(out))
    assert not result.interrupted and result.ran == 3 + 9 + 12
    assert {r["cpu_share"] for r in result.document["sections"]["decode"]["records"]} == {1.0}
    return {"path": out / RESULTS_FILE, "doc": result.document}


@pytest.fixture
def nothing_runs(monkeypatch, saved):
    """Re-rendering runs no study and leaves the saved results as they were."""

    def forbidden(*args, **kwargs):
        pytest.fail("re-rendering ran a study")

    monkeypatch.setattr("attnbench.study.runner.run_study", forbidden)
    before = saved["path"].read_bytes()
    yield
    assert saved["path"].read_bytes() == before


def settled(doc: dict, rounds: int = 20) -> dict:
    """The document as if every timed decode point (sampled once in the tiny study) had
    been sampled over `rounds` rounds with a spread of 2%: steady steps and prefills, their
    comparisons resolved. Steps alike in every round, so that two points' per-round ratio
    is the ratio of their medians."""
    for r in doc["sections"]["decode"]["records"]:
        for stem, samples in (("step_ms", "samples_ms"), ("prefill_ms", "prefill_samples_ms")):
            median = r.get(f"{stem}_median")
            if median is not None:
                r[samples] = [median * (0.99 + 0.02 * i / (rounds - 1)) for i in range(rounds)]
                r.update({f"{stem}_p25": median * 0.995, f"{stem}_p75": median * 1.005})
        if r.get("step_ms_median") is not None:
            r.update(step_repeats=rounds, noisy=False, status="ok")
    return doc


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
        settled(doc)
        for r in doc["sections"]["decode"]["records"]:
            if r["variant"] == "MHA" and r["mode"] == "cache" and r["prompt_len"] == 8:
                r.update(
                    x_of_no_cache_samples=[1 / 987.6] * len(r["x_of_no_cache_samples"]),
                    x_of_no_cache_median=1 / 987.6,
                    x_of_no_cache_p25=1 / 990,
                    x_of_no_cache_p75=1 / 985,
                    x_of_no_cache_ci_lo=1 / 1000,
                    x_of_no_cache_ci_hi=1 / 975,
                )
        for r in doc["sections"]["kvmem"]["records"]:
            if r["variant"] == "MQA":
                r["ratio_vs_mha"] = 0.123

    path = _saved_copy(saved, tmp_path, edit)
    assert runner.invoke(app, ["report", str(path), "-q"]).exit_code == 0
    text = (tmp_path / "report.md").read_text()
    assert "prefix at 8 tokens: MHA 987.6x faster (95% interval 975.0-1000.0x), GQA-2" in text
    assert "GQA-2 needs 50.0% of MHA's KV cache and MQA 12.3%" in text


@pytest.mark.parametrize("command", ["plot", "report"])
def test_bad_results_file_is_one_line(command, tmp_path, saved):
    missing = runner.invoke(app, [command, str(tmp_path / "nope.json")])
    assert missing.exit_code == 2 and "no such file" in missing.stderr
    kvmem = tmp_path / "kvmem.json"
    args = ["kvmem", "--d-model", "64", "--heads", "4", "--no-measure", "-q", "--json", str(kvmem)]
    assert runner.invoke(app, args).exit_code == 0
    other = runner.invoke(app, [command, str(kvmem)])
    assert other.exit_code == 2 and "not by `attnbench run`" in other.stderr
    assert "Traceback" not in other.output
    # a command's whole-model parts beside its records are no section a sweep file takes
    params = tmp_path / "params.json"
    args = ["params", "--model", "llama-3-8b", "-q", "--json", str(params)]
    assert runner.invoke(app, args).exit_code == 0
    one = " ".join(runner.invoke(app, [command, str(params)]).stderr.split())
    assert "a sweep file's params section" in one and "model_parts" not in one
    # a study's CSV holds one of its record sets: the study's results.json is named
    csv = tmp_path / "decode.csv"
    args = ["kvmem", "--d-model", "64", "--heads", "4", "--no-measure", "-q", "--csv", str(csv)]
    assert runner.invoke(app, args).exit_code == 0
    (tmp_path / "results.json").write_text("{}")  # no study's: not named
    one = " ".join(runner.invoke(app, [command, str(csv)]).stderr.split())
    assert "a CSV holds one record set (kvmem), not a study" in one and "beside it" not in one
    _saved_copy(saved, tmp_path)
    one = " ".join(runner.invoke(app, [command, str(csv)]).stderr.split())
    assert f"({tmp_path / 'results.json'} beside it)" in one
    truncated = tmp_path / "cut.json"
    truncated.write_text('{"command": "run", "records')
    one = " ".join(runner.invoke(app, [command, str(truncated)]).stderr.split())
    assert "not valid JSON (unterminated string at line 1, column 20)" in one


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


def test_a_name_that_starts_with_an_underscore_keeps_its_legend_entry(saved):
    """matplotlib leaves a label that starts with '_' out of a legend: a model named so
    (after its file, say) is still named there, behind a zero-width space."""
    doc = copy.deepcopy(saved["doc"])
    for record in doc["sections"]["kvmem"]["records"]:
        record["model"] = "_tiny"
    memory = plots.kv_memory_vs_context(doc).axes[0]
    labels = [t.get_text() for t in memory.get_legend().get_texts()]
    assert labels and all(label.startswith("\u200b_tiny") for label in labels)


def test_plots_skip_what_the_study_lacks(saved, tmp_path):
    doc = copy.deepcopy(saved["doc"])
    del doc["sections"]["decode"]
    assert plots.render_plots(doc, tmp_path) == [
        tmp_path / "kv_memory_heads.png",
        tmp_path / "kv_memory_context.png",
    ]


def test_binary_units():
    assert binary_unit(1000) == (1.0, "B")
    assert binary_unit(1536) == (1024.0, "KiB")
    assert binary_unit(3 * 2**30) == (2.0**30, "GiB")


# ------------------------------------------------------------------ report pieces


def test_markdown_table_drops_empty_columns_and_escapes():
    params = columns_for("params", [])
    table = markdown_table([{"variant": "a|b", "d_model": 4096, "model": None}], params)
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
    rows = [
        {
            "variant": v,
            "num_kv_heads": h,
            "tp": tp,
            "kv_heads_per_gpu": max(h // tp, 1),
            "seq_len": 8,
            "kv_bytes": 64 * h,
        }
        for v, h in (("MHA", 4), ("MQA", 1))
        for tp in (1, 2)
    ]
    lines = selection.series(rows, "num_kv_heads", named=False)
    assert [(label, len(line)) for label, line in lines] == [("tp 1", 2), ("tp 2", 2)]
    assert [[r["num_kv_heads"] for r in line] for _, line in lines] == [[1, 4], [1, 4]]
    # the report's kvmem table shows tp as a column of its own once some row uses it
    table = markdown_table(rows, kvmem_columns(rows)).splitlines()
    assert table[0] == "| Variant | kv heads | context | whole model | tp |"
    assert table[2:] == [
        "| MHA | 4 | 8 | 256 B | 1 |",
        "| MHA | 4 | 8 | 256 B | 2 |",
        "| MQA | 1 | 8 | 64 B | 1 |",
        "| MQA | 1 | 8 | 64 B | 2 |",
    ]
    without_tp = [{**r, "tp": 1} for r in rows[::2]]
    assert "tp" not in markdown_table(without_tp, kvmem_columns(without_tp)).splitlines()[0]


# ------------------------------------------------------------------ providers side by side

CUDNN = "unsupported: no cuDNN kernel on the CPU"
WRONG = "wrong: max error 0.5 against the reference, above 0.001"


def with_providers(doc: dict) -> dict:
    """The tiny study's decode records, settled, as if three more providers had run beside
    attnbench, in the same rounds: sdpa-flash 1.25x as fast everywhere, sdpa-cudnn
    unsupported, and naive disagreeing with the reference at MQA (timed elsewhere, 2x
    slower)."""
    doc = copy.deepcopy(doc)
    section = doc["sections"]["decode"]
    base = section["records"]
    flash, cudnn, naive = [], [], []
    untimed = dict(
        step_ms_median=None,
        step_ms_p25=None,
        step_ms_p75=None,
        samples_ms=[],
        tokens_per_s=None,
        speedup_vs_no_cache=None,
        speedup_vs_baseline=None,
        pct_of_peak_bw=None,
        achieved_gbps=None,
        noisy=None,
    )
    faster = {
        "speedup_vs_baseline": 1.25,
        "x_of_baseline_median": 0.8,
        "x_of_baseline_ci_lo": 0.78,
        "x_of_baseline_ci_hi": 0.82,
    }
    settled(doc)

    def scaled(r: dict, by: float) -> dict:
        steps = {f: r[f] * by for f in ("step_ms_median", "step_ms_p25", "step_ms_p75")}
        return {**steps, "samples_ms": [v * by for v in r["samples_ms"]]}

    for r in base:
        r["speedup_vs_baseline"] = 1.0
        timing = scaled(r, 0.8)
        flash.append({**r, **timing, "provider": "sdpa-flash", **faster})
        cudnn.append({**r, **untimed, "provider": "sdpa-cudnn", "status": CUDNN})
        slow = scaled(r, 2)
        if r["variant"] == "MQA":
            naive.append({**r, **untimed, "provider": "naive", "status": WRONG})
        else:
            naive.append({**r, **slow, "provider": "naive", "speedup_vs_baseline": 0.5})
    section["records"] = base + flash + naive + cudnn
    return doc


def cached(doc: dict, provider: str, variant: str, context: int) -> dict:
    return next(
        r
        for r in doc["sections"]["decode"]["records"]
        if (r["provider"], r["variant"], r["prompt_len"], r["mode"])
        == (provider, variant, context, "cache")
    )


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
    longest = [
        f"{v} sdpa-flash ({cached(doc, 'sdpa-flash', v, 8)['step_ms_median']:.3f} ms, "
        f"1.25x faster (95% interval 1.22-1.28x) than attnbench)"
        for v in ("MHA", "GQA-2", "MQA")
    ]
    fastest = (
        f"Fastest cached decode step at context 8: {longest[0]}, {longest[1]} and {longest[2]}."
    )
    assert fastest in found
    assert (
        "Unsupported here, so not timed: sdpa-cudnn at 12 points (no cuDNN kernel on the CPU)."
    ) in found
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
            r["samples_ms"] = [v * 10 for v in r["samples_ms"]]
    line = next(f for f in report.findings(doc) if f.startswith("Fastest"))
    base = cached(doc, "attnbench", "MHA", 8)["step_ms_median"]
    assert f"MHA attnbench ({base:.3f} ms, the baseline), GQA-2 sdpa-flash" in line


def test_report_shows_providers_side_by_side(saved, tmp_path):
    doc = with_providers(saved["doc"])
    text = report.render_report(doc, [PROVIDERS_PNG])
    assert "![Cached decode step latency by provider](decode_providers.png)" in text
    assert (
        "### Cached decode step, ms by provider (speed-up over attnbench) · not timed at "
        "any point: sdpa-cudnn"
    ) in text
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
    doc = settled(copy.deepcopy(saved["doc"]))
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
    best = max(
        (r for r in records if r.get("pct_of_peak_flops") is not None),
        key=lambda r: r["pct_of_peak_flops"],
    )
    for r in records:  # one prefill over the peak: the cause is named
        if r.get("pct_of_peak_flops") is not None:
            r["pct_of_peak_flops"] = 150.0 if r is best else 50.0
    found = report.findings(doc)
    assert (
        "3 of 12 decode steps (each timed at a fixed context) are flagged noisy: p25 to "
        "p75 wider than 10% of the median."
    ) in found
    assert (
        "The widest 95% interval of a comparison is ±15.0% (GQA-2 over MQA, context 8), "
        "against a target of ±2.0%."
    ) in found
    prefill = next(f for f in found if f.startswith("The best prefill"))
    assert prefill == (
        f"The best prefill reaches {best['achieved_tflops']:.3g} TFLOPS, "
        f"{best['pct_of_peak_flops']:.1f}% of the measured float32 matmul peak of 0.1 TFLOPS "
        f"({best['variant']}, {best['prompt_len']} tokens); over 100% means the peak was "
        "probed in a slower moment, or the prefill's kernels ran faster than the one square "
        "matmul the peak is probed with."
    )


# ------------------------------------------------------------------ evidence of findings


def interval(r: dict, stem: str, median: float, lo: float, hi: float) -> None:
    r.update({f"{stem}_median": median, f"{stem}_ci_lo": lo, f"{stem}_ci_hi": hi})


def test_a_comparison_is_stated_only_when_resolved(saved):
    """A comparison whose interval is wide, or taken over few rounds, is not stated as a
    ratio: the finding says it is not resolved, and why."""
    doc = settled(copy.deepcopy(saved["doc"]))
    interval(cached(doc, "attnbench", "MHA", 8), "x_of_narrowest", 3.0, 2.9, 3.1)
    interval(cached(doc, "attnbench", "GQA-2", 8), "x_of_narrowest", 1.3, 0.91, 1.69)
    cached(doc, "attnbench", "GQA-2", 8).update(step_ms_p25=1.0, step_ms_p75=2.5)
    found = report.findings(doc)
    assert (
        "Cached step over MQA's at 8 tokens: MHA 3.00x (95% interval 2.90-3.10x), sampled "
        "in turn over 20 rounds."
    ) in found
    assert (
        "Cached step of GQA-2 over MQA's at 8 tokens: not resolved, its 95% interval is "
        "±30% wide (over ±10%) and the steps compared spread up to 2.5x from p25 to "
        "p75."
    ) in found
    assert not any("GQA-2 1.30x" in f for f in found)
    # a narrow interval over a few rounds says little: over one round it has no width
    for r in doc["sections"]["decode"]["records"]:
        if r["prompt_len"] == 8 and r["mode"] == "cache" and r["variant"] != "MQA":
            r["step_repeats"] = 4
    interval(cached(doc, "attnbench", "GQA-2", 8), "x_of_narrowest", 2.0, 2.0, 2.0)
    line = next(f for f in report.findings(doc) if f.startswith("Cached step of"))
    assert line == (
        "Cached step of MHA and GQA-2 over MQA's at 8 tokens: not resolved, they "
        "were sampled over only 4 rounds (11 needed) and the steps compared "
        "spread up to 2.5x from p25 to p75."
    )


def test_a_ratio_far_from_even_resolves_with_an_interval_as_wide_as_its_effect_allows(saved):
    """7x is resolved within ±29% (a third of 1 - 1/7): it says which step is faster and
    by about how much; the same ratio over ±30% is not, and the finding says what width
    it would need, to a tenth of a percent where whole percents would read alike."""
    doc = settled(copy.deepcopy(saved["doc"]))
    interval(cached(doc, "attnbench", "MHA", 8), "x_of_narrowest", 7.0, 5.8, 8.4)
    interval(cached(doc, "attnbench", "GQA-2", 8), "x_of_narrowest", 2.0, 1.9, 2.1)
    line = next(f for f in report.findings(doc) if f.startswith("Cached step"))
    assert line.startswith("Cached step over MQA's at 8 tokens: MHA 7.00x (95% interval 5.80-8.4")
    interval(cached(doc, "attnbench", "MHA", 8), "x_of_narrowest", 7.0, 5.0, 9.1)
    line = next(f for f in report.findings(doc) if f.startswith("Cached step of MHA"))
    assert "not resolved, its 95% interval is ±30% wide (over ±29%)" in line
    interval(cached(doc, "attnbench", "MHA", 8), "x_of_narrowest", 1.2, 1.1, 1.3248)
    line = next(f for f in report.findings(doc) if f.startswith("Cached step of MHA"))
    assert "not resolved, its 95% interval is ±10.4% wide (over ±10.0%)" in line
    assert allowed_width(7.0) == allowed_width(1 / 7.0) == pytest.approx(6 / 7 / 3)
    assert allowed_width(1.2) == RESOLVED_WIDTH


def test_a_speed_up_below_one_is_written_slower(saved):
    doc = settled(copy.deepcopy(saved["doc"]))
    interval(cached(doc, "attnbench", "MHA", 8), "x_of_no_cache", 0.1, 0.099, 0.101)
    interval(cached(doc, "attnbench", "GQA-2", 8), "x_of_no_cache", 1.43, 1.40, 1.46)
    interval(cached(doc, "attnbench", "MQA", 8), "x_of_no_cache", 1.0, 0.98, 1.03)
    line = next(f for f in report.findings(doc) if f.startswith("Cached decode over"))
    assert line.startswith(
        "Cached decode over recomputing the prefix at 8 tokens: MHA 10.0x faster (95% interval "
        "9.90-10.1x), GQA-2 1.43x slower (1.40-1.46x), MQA as fast within its interval "
        "(speed-up 1.00x, 95% interval 0.97-1.02x), sampled in turn over 20 rounds"
    )
    assert not re.search(r"\b0\.\d+x faster", line)  # no 'N x faster' with N below 1


def test_the_host_moving_during_the_run_is_said_and_leaves_comparisons_unresolved(saved):
    doc = settled(copy.deepcopy(saved["doc"]))
    interval(cached(doc, "attnbench", "MHA", 8), "x_of_narrowest", 3.0, 2.9, 3.1)
    interval(cached(doc, "attnbench", "GQA-2", 8), "x_of_narrowest", 2.0, 1.95, 2.05)
    doc["environment"].update(
        peak_gbps=10.0,
        peak_gbps_probes=[10.0, 4.0],
        peak_tflops_probes={"float32": [1e-4, 1.01e-4]},
    )
    found = report.findings(doc)
    moved = "the host's copy peak moved 2.5x during the run (10.0, then 4.0 GB/s)"
    assert found[0] == (
        f"T{moved[1:]}, more than 20% apart: the run's timings hold for "
        "neither moment, and its comparisons are not resolved."
    )
    variants = next(f for f in found if f.startswith("Cached step of"))
    assert (
        variants == f"Cached step of MHA and GQA-2 over MQA's at 8 tokens: not resolved, {moved}."
    )
    assert not any(f.startswith(("Cached step over", "Cached decode over")) for f in found)
    text = report.render_report(doc, [])
    assert f"- T{moved[1:]}, more than 20% apart" in text
    assert "| peak_gbps_probes | 10, 4 |" in text
    # probes within 20% of each other: nothing said
    doc["environment"]["peak_gbps_probes"] = [10.0, 8.5]
    assert not any("moved" in f for f in report.findings(doc))


def test_steps_sampled_while_another_process_held_the_cpu_are_not_stated(saved):
    """A steady spread on a host that ran the points at a fraction of its speed
    throughout says nothing: their times and comparisons are not stated, and why."""
    doc = settled(copy.deepcopy(saved["doc"]))
    interval(cached(doc, "attnbench", "MHA", 8), "x_of_narrowest", 3.0, 2.9, 3.1)
    interval(cached(doc, "attnbench", "GQA-2", 8), "x_of_narrowest", 2.0, 1.95, 2.05)
    for r in doc["sections"]["decode"]["records"]:
        r["cpu_share"] = 0.33 if r["prompt_len"] == 8 else 0.97
        if r["prompt_len"] == 8:
            r.update(noisy=True, status=decode_mod.BUSY)
    found = report.findings(doc)
    assert found[0] == (
        "Another process held the CPU while 6 of 12 decode steps were sampled: this one ran "
        "for only 33% of their sampling time, so the host ran them slower than it can, and "
        "their times and comparisons are not stated."
    )
    held = "another process held the CPU: this one ran for only 33% of the sampling time"
    assert f"Cached step of MHA and GQA-2 over MQA's at 8 tokens: not resolved, {held}." in found
    mha = next(f for f in found if f.startswith("MHA:"))
    assert mha.endswith(
        f"not stated for the uncached step at context 8 and cached step at "
        f"context 8, noisy ({held})."
    )
    assert (
        "6 of 12 decode steps (each timed at a fixed context) are flagged noisy: 6 sampled "
        "while another process held the CPU."
    ) in found
    latency = plots.decode_latency(doc).axes[0]
    assert {x for x, _ in hollow_points(latency)} == {8}


def test_noisy_step_times_are_not_stated(saved):
    doc = settled(copy.deepcopy(saved["doc"]))
    mha = [r for r in doc["sections"]["decode"]["records"] if r["variant"] == "MHA"]
    noisy = next(r for r in mha if r["mode"] == "cache" and r["prompt_len"] == 8)
    noisy.update(
        noisy=True,
        status="noisy",
        step_ms_p25=noisy["step_ms_median"] * 0.8,
        step_ms_p75=noisy["step_ms_median"] * 1.2,
    )
    line = next(f for f in report.findings(doc) if f.startswith("MHA:"))
    assert line.count(" ms at context ") == 3 and "ms at context 8; not stated" not in line
    assert line.endswith(
        "; not stated for the cached step at context 8, noisy (p25 to p75 spans 40% of the median)."
    )
    for r in mha:
        r["step_repeats"] = 3
    line = next(f for f in report.findings(doc) if f.startswith("MHA:"))
    assert line == (
        "MHA: decode step times at contexts 4 and 8 not stated, all 4 steps there are noisy "
        "(too few samples (under 11) to judge the spread)."
    )


def test_a_result_over_its_peak_names_the_cause(saved):
    doc = settled(copy.deepcopy(saved["doc"]))
    records = doc["sections"]["decode"]["records"]
    best = max(
        (r for r in records if r.get("pct_of_peak_bw") is not None),
        key=lambda r: r["pct_of_peak_bw"],
    )
    best["pct_of_peak_bw"] = 150.0
    prefill = max(
        (r for r in records if r.get("pct_of_peak_flops") is not None),
        key=lambda r: r["pct_of_peak_flops"],
    )
    for r in records:
        if r.get("pct_of_peak_flops") is not None:
            r["pct_of_peak_flops"] = 150.0 if r is prefill else 50.0
    doc["environment"].update(cache_bytes=None, peak_gbps_probes=[10.0])

    def line(prefix: str) -> str:
        return next(f for f in report.findings(doc) if f.startswith(prefix))

    assert line("The best decode step").endswith(
        "; over 100% means the peak was probed in a slower moment, or the step's data came "
        "from on-chip caches, not memory."
    )
    doc["environment"].update(cache_bytes=32 << 20, peak_gbps_probes=[10.0, 10.2])
    assert line("The best decode step").endswith(
        f"; over 100% because its {format_bytes(best['bytes_per_step'])} a step fit in the "
        "device's 32.00 MiB last-level cache, so they need not come from memory."
    )
    doc["environment"].update(cache_bytes=1024, peak_gbps_probes=[10.0, 15.0])
    assert line("The best decode step").endswith(
        "; over 100% because the peak was probed in a slower moment (the probes read 10.0, "
        "then 15.0 GB/s)."
    )
    doc["environment"]["peak_tflops_probes"] = {"float32": [1e-4, 3e-4]}
    assert line("The best prefill").endswith(
        "; over 100% because the peak was probed in a slower moment (the probes read 0.0001, "
        "then 0.0003 TFLOPS)."
    )
    # a noisy step is no best: every step noisy, none is named
    for r in records:
        r["noisy"] = True
    assert line("The decode steps' share").startswith(
        "The decode steps' share of the copy bandwidth is not stated: every step is noisy"
    )


def test_the_best_step_says_what_noisy_steps_read_above_it(saved):
    """The finding and decode_bandwidth.png say the same: noisy steps (hollow there) that
    read a higher share than the best steady step are named, not silently left out."""
    doc = settled(copy.deepcopy(saved["doc"]))
    records = [r for r in doc["sections"]["decode"]["records"] if r.get("pct_of_peak_bw")]
    steady = [r for r in records if r["mode"] == "no_cache"]
    for share, r in enumerate(steady, start=1):
        r["pct_of_peak_bw"] = float(share)
    noisy = [r for r in records if r["mode"] == "cache"]
    for share, r in zip((40.0, 90.0, *[0.5] * len(noisy)), noisy, strict=False):
        r.update(noisy=True, pct_of_peak_bw=share)
    line = next(f for f in report.findings(doc) if "of the measured peak copy" in f)
    assert line.startswith(f"The best decode step not flagged noisy reaches {len(steady)}.0%")
    assert line.endswith(
        "; 2 cached steps read 40-90% but are noisy (hollow in the bandwidth plot), so left out."
    )
    for r in noisy:
        r["pct_of_peak_bw"] = 0.5  # below the best steady step: nothing to say of them
    line = next(f for f in report.findings(doc) if "of the measured peak copy" in f)
    assert line.startswith("The best decode step reaches") and "noisy" not in line


def test_report_marks_few_samples_and_never_writes_a_speed_up_of_0_0x(saved):
    doc = copy.deepcopy(saved["doc"])  # the tiny study: one sample per point
    cached(doc, "attnbench", "MHA", 8)["speedup_vs_no_cache"] = 0.0213
    text = report.render_report(doc, [])
    decode = text[text.index("## Decode speed") :].split("\n\n")[1].splitlines()
    header = decode[0].split(" | ")
    spread = header.index("±IQR")
    cells = [row.split(" | ") for row in decode[2:]]
    assert {c[spread] for c in cells} == {"too few"}  # not ±0.0%
    assert "±0.0%" not in text and "0.0x" not in text and "| 0.021x |" in text
    assert "comparisons were sampled over under 11 rounds: too few for an interval" in text
    status = header.index("Status")
    assert {c[status] for c in cells} == {"noisy"}
    records = doc["sections"]["decode"]["records"]
    assert all(r["status"] == decode_mod.FEW_SAMPLES and r["noisy"] for r in records)


# ------------------------------------------------------------------ plots mark noise


def hollow_points(ax) -> set[tuple[float, float]]:
    """The (x, y) of every hollow marker drawn on `ax`."""
    return {
        (x, y)
        for line in ax.get_lines()
        if line.get_markerfacecolor() == "white"
        for x, y in zip(line.get_xdata(), line.get_ydata(), strict=True)
    }


def test_plots_draw_noisy_and_unresolved_points_hollow(saved):
    doc = settled(copy.deepcopy(saved["doc"]))
    noisy = cached(doc, "attnbench", "GQA-2", 8)
    noisy.update(noisy=True, status="noisy")
    latency = plots.decode_latency(doc).axes[0]
    assert hollow_points(latency) == {(8, noisy["step_ms_median"])}
    labels = [t.get_text() for t in latency.get_legend().get_texts()]
    assert labels[-1] == plots.textwrap.fill(plots.NOISY_LABEL, plots.LEGEND_TITLE_WIDTH)
    bandwidth = plots.decode_bandwidth(doc).axes[0]
    assert hollow_points(bandwidth) == {(8, noisy["pct_of_peak_bw"])}
    interval(noisy, "x_of_narrowest", 2.0, 1.5, 2.5)
    variants = plots.decode_variants(doc).axes[0]
    assert hollow_points(variants) == {(8, 2.0)}
    key = " ".join(variants.get_legend().get_texts()[-1].get_text().split())
    assert key.startswith("hollow: too uncertain to call (95% interval over ±10%")
    assert hollow_points(plots.decode_speedup(doc).axes[0]) == set()
    quiet = settled(copy.deepcopy(saved["doc"]))  # nothing to mark: no hollow key either
    latency = plots.decode_latency(quiet).axes[0]
    assert hollow_points(latency) == set()
    assert not any("hollow" in t.get_text() for t in latency.get_legend().get_texts())


def test_an_unresolved_interval_spanning_decades_is_cut_at_the_axis(saved):
    """The medians keep the plot: a bar of 1e-4 to 1e6 would flatten every line."""
    doc = settled(copy.deepcopy(saved["doc"]))
    interval(cached(doc, "attnbench", "GQA-2", 8), "x_of_narrowest", 2.0, 1e-4, 1e6)
    medians = [r["x_of_narrowest_median"] for r in plots._ratio_records(doc, "x_of_narrowest")]
    reach = plots.BAR_REACH * plots.BAR_MARGIN
    low, high = plots.decode_variants(doc).axes[0].get_ylim()
    assert min(1, *medians) / reach * (1 - 1e-9) <= low < 1  # the 1x line, every median
    assert max(medians) < high <= max(medians) * reach * (1 + 1e-9)  # as floats round


def heads_rows(contexts=(8,), measured: bool = False) -> list[dict]:
    """Two families of KV-head counts (8 and 32 query heads) at each context."""
    return [
        {
            "variant": v,
            "num_heads": q,
            "num_kv_heads": h,
            "head_dim": 64,
            "seq_len": s,
            "kv_bytes": 1024 * h * s,
            "measured_bytes": 1024 * h * s if measured else None,
            "status": "ok",
        }
        for s in contexts
        for q, heads in ((8, (8, 2, 1)), (32, (32, 8)))
        for h in heads
        for v in [{1: "MQA", q: "MHA"}.get(h, f"GQA-{h}")]
    ]


def test_kv_heads_ticks_are_counts_where_a_count_is_two_variants():
    doc = {"environment": {"device": "cpu"}, "sections": {"kvmem": {"records": heads_rows()}}}
    ax = plots.kv_memory_vs_heads(doc).axes[0]
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert ticks == ["1", "2", "8", "32"]  # 8: MHA of 8 query heads, GQA-8 of 32


def test_kv_heads_plot_draws_a_line_per_shape_and_names_a_machine_only_if_it_allocated():
    """Four contexts of two shapes: two lines (at the longest context, which the subtitle
    names), not eight; bytes of the formula alone name no machine."""
    env = {"device": "cpu", "device_name": "Some CPU"}
    computed = heads_rows((8, 64, 512, 4096))
    doc = {"environment": env, "sections": {"kvmem": {"records": computed}}}
    ax = plots.kv_memory_vs_heads(doc).axes[0]
    assert len(ax.get_legend().get_texts()) == 2
    assert "context 4,096 (the longest" in ax.get_title()
    assert "Some CPU" not in ax.get_title() and "computed by the formula" in ax.get_title()
    context_plot = plots.kv_memory_vs_context(doc).axes[0]
    assert "Some CPU" not in context_plot.get_title()
    doc["sections"]["kvmem"]["records"] = heads_rows((8, 64), measured=True)
    ax = plots.kv_memory_vs_heads(doc).axes[0]
    assert "checked by allocation on Some CPU (cpu)" in ax.get_title()


def test_a_series_names_its_cache_and_its_sequences():
    from attnbench.render.selection import field_text

    assert field_text("block_size", None) == "contiguous cache"
    assert field_text("block_size", 16) == "blocks of 16"
    assert field_text("batch_spec", "8q1s1k") == "sequences 8q1s1k"


def test_a_bandwidth_over_the_peak_is_explained_on_the_plot(saved):
    doc = settled(copy.deepcopy(saved["doc"]))
    title = plots.decode_bandwidth(doc).axes[0].get_title()
    records = doc["sections"]["decode"]["records"]
    over = any((r.get("pct_of_peak_bw") or 0) > 100 for r in records)
    assert ("over 100%: a step whose bytes a cache holds" in title) == over
    cached(doc, "attnbench", "MHA", 8)["pct_of_peak_bw"] = 150.0
    title = plots.decode_bandwidth(doc).axes[0].get_title()
    assert "over 100%: a step whose bytes a cache holds reads them faster" in title


def uncached(doc: dict, variant: str, context: int) -> dict:
    return next(
        r
        for r in doc["sections"]["decode"]["records"]
        if (r["variant"], r["prompt_len"], r["mode"]) == (variant, context, "no_cache")
    )


def test_a_hollow_point_is_explained_on_the_plot_not_in_the_findings(saved):
    """The key of a hollow comparison says what made it too uncertain: the picture stands
    alone (the findings need not name that comparison)."""
    doc = settled(copy.deepcopy(saved["doc"]))
    interval(cached(doc, "attnbench", "GQA-2", 8), "x_of_narrowest", 2.0, 1.5, 2.5)
    key = plots.decode_variants(doc).axes[0].get_legend().get_texts()[-1].get_text()
    key = " ".join(key.split())
    assert "findings" not in key and "not resolved" not in key
    for rule in ("95% interval over ±10%", "a third of the ratio's gap to 1x", "under 11 rounds"):
        assert rule in key, rule
    assert "host's speed moved" in key and "another process held the CPU" in key


def test_lines_drawn_one_on_the_other_are_one_line_and_each_keeps_its_marker(saved):
    """GQA-2's and MQA's uncached steps read alike: one dashed line, named by both; every
    configuration has a marker of its own, which shows lines that merely cross or lie
    close."""
    doc = settled(copy.deepcopy(saved["doc"]))
    for context in (4, 8):
        uncached(doc, "GQA-2", context)["pct_of_peak_bw"] = uncached(doc, "MQA", context)[
            "pct_of_peak_bw"
        ]
    ax = plots.decode_bandwidth(doc).axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == [
        "measured peak (100%)",
        "MHA, cache",
        "MHA, no cache",
        "GQA-2, cache",
        "GQA-2 = MQA, no cache",
        "MQA, cache",
    ]
    lines = {bars.get_label(): bars.lines[0] for bars in ax.containers}
    assert len({line.get_marker() for line in lines.values()}) == 3  # one per configuration
    assert lines["GQA-2 = MQA, no cache"].get_marker() == lines["GQA-2, cache"].get_marker()
    assert lines["GQA-2 = MQA, no cache"].get_linestyle() == "--"
    styles = {
        (line.get_color(), line.get_marker(), line.get_linestyle()) for line in lines.values()
    }
    assert len(styles) == len(lines)
    # unalike, they are two lines again
    uncached(doc, "MQA", 8)["pct_of_peak_bw"] *= 1.01
    labels = [t.get_text() for t in plots.decode_bandwidth(doc).axes[0].get_legend().get_texts()]
    assert "GQA-2, no cache" in labels and "MQA, no cache" in labels


def test_a_line_the_study_cut_short_says_why(saved):
    """no_cache_max_prompt_len leaves the dashed lines short of the cached ones: the
    subtitles of the plots that draw them say so; and they name the layer."""
    doc = settled(copy.deepcopy(saved["doc"]))
    title = " ".join(plots.decode_latency(doc).axes[0].get_title().split())
    assert "d_model 64, query heads 4, float32, batch 1" in title
    assert "no_cache_max_prompt_len" not in title  # every context has its no-cache step
    section = doc["sections"]["decode"]
    section["config"]["no_cache_max_prompt_len"] = 4
    section["records"] = [
        r for r in section["records"] if r["mode"] == "cache" or r["prompt_len"] <= 4
    ]
    for plot in (plots.decode_latency, plots.decode_bandwidth):
        title = plot(doc).axes[0].get_title()
        line = "no cache (dashed) only up to 4 tokens: the study's no_cache_max_prompt_len"
        assert line in title.splitlines(), plot
