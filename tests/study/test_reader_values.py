"""What the results reader refuses beyond each value's type: statistics on the wrong side
of their median, ratios of 0, a ratio without what it was taken against, a key field
null, negative rates, and CSVs cut short, with loose numbers or a column named twice.
Every command that reads such a file (plot and report drew it and crashed) exits 2 with
one line naming the file, record, field and value."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from attnbench.cli import app
from attnbench.errors import UsageError
from attnbench.study.documents import load_document
from attnbench.study.runner import RESULTS_FILE, plan_study, run_study
from tests.helpers import runner

TINY = """\
defaults: {d_model: 32, num_heads: 2}
sweep: {num_kv_heads: [2, 1]}
params: {}
kvmem: {num_layers: 1, batch: 1, seq_len: [16, 256], dtype: float32, measure: false}
decode: {batch: 1, prompt_len: [2, 4], gen_len: 2, warmup: 0, repeats: 1, device: cpu}
"""


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> dict:
    """A tiny study's results: params, kvmem (not measured) and decode, whose record 1
    (MHA, cached) holds comparisons to MQA's step and to its own step without a cache."""
    config = tmp_path_factory.mktemp("study") / "tiny.yaml"
    config.write_text(TINY)
    doc = run_study(plan_study(config), probe_peak=lambda device: 10.0).document
    assert doc["sections"]["decode"]["records"][1]["narrowest_variant"] == "MQA"
    return doc


def _decode(**values):
    def edit(doc: dict) -> None:
        doc["sections"]["decode"]["records"][1].update(values)

    return edit


def _scaled(field: str, median: str, factor: float | list[float]):
    """Decode record 1 with `field` at `factor` times its `median` (a list: samples, each
    at its factor times it)."""

    def edit(doc: dict) -> None:
        rec = doc["sections"]["decode"]["records"][1]
        scaled = [rec[median] * f for f in factor] if isinstance(factor, list) else None
        rec[field] = scaled if scaled is not None else rec[median] * factor

    return edit


def _kvmem(**values):
    def edit(doc: dict) -> None:
        doc["sections"]["kvmem"]["records"][0].update(values)

    return edit


BAD = [
    (
        _scaled("step_ms_p25", "step_ms_median", 2),
        "decode record 1: step_ms_p25: ",
        "is above step_ms_median",
    ),
    (
        _scaled("step_ms_p75", "step_ms_median", 0.5),
        "decode record 1: step_ms_median: ",
        "is above step_ms_p75",
    ),
    (
        _scaled("x_of_narrowest_ci_lo", "x_of_narrowest_median", 2),
        "decode record 1: x_of_narrowest_ci_lo: ",
        "is above x_of_narrowest_median",
    ),
    (_decode(x_of_no_cache_median=0), "x_of_no_cache_median: 0 ", "ratio of two times"),
    (_decode(x_of_no_cache_ci_lo=0), "x_of_no_cache_ci_lo: 0 ", "ratio of two times"),
    (_decode(x_of_reference_samples=[0.0]), "x_of_reference_samples[0]: 0.0 ", "ratio"),
    (
        _decode(narrowest_variant=None),
        "decode record 1: x_of_narrowest_median: ",
        "is taken against narrowest_variant, which is null",
    ),
    (
        _decode(x_of_contiguous_median=1.0),  # a contiguous row: no paged step to compare
        "decode record 1: x_of_contiguous_median: ",
        "is taken against block_size, which is null",
    ),
    (_kvmem(seq_len=None), "kvmem record 0: key field seq_len is null", ""),
    (_decode(tokens_per_s=-5), "decode record 1: tokens_per_s: -5 is negative", ""),
    (_decode(achieved_gbps=-1), "achieved_gbps: -1 is negative", ""),
    (_decode(pct_of_peak_bw=-3), "pct_of_peak_bw: -3 is negative", ""),
    (_decode(peak_gbps=-1.5), "peak_gbps: -1.5 is negative", ""),
    (_decode(step_ci_pct=-1), "step_ci_pct: -1 is negative", ""),
    (_decode(speedup_vs_no_cache=-2), "speedup_vs_no_cache: -2 is negative", ""),
    (_decode(x_of_no_cache_ci_lo=-0.5), "x_of_no_cache_ci_lo: -0.5 is negative", ""),
    # the samples the gate judges a hundredfold the median the tables show
    (
        _scaled("samples_ms", "step_ms_median", [100]),
        "decode record 1: step_ms_median: ",
        "is not among its samples (samples_ms: ",
    ),
    (
        _scaled("x_of_narrowest_samples", "x_of_narrowest_median", [0.01]),
        "decode record 1: x_of_narrowest_median: ",
        "is not among its samples",
    ),
    (_decode(mode="bogus"), "decode record 1: mode: 'bogus' is not one of cache, no_cache", ""),
    (_decode(provider="fast"), "decode record 1: provider: 'fast' is not one of attnbench", ""),
    (_decode(dtype="float64"), "decode record 1: dtype: 'float64' is not one of float32", ""),
    (_decode(num_kv_heads=3), "decode record 1: num_kv_heads 3 does not divide num_heads 2", ""),
    (_decode(prompt_len=0), "decode record 1: prompt_len: 0 is below 1, the least it takes", ""),
    (_decode(device="tpu"), "decode record 1: device: 'tpu' is no device a run records", ""),
    (_decode(device="auto"), "decode record 1: device: 'auto' is no device a run records", ""),
]


def _bad_copy(study: dict, tmp_path: Path, edit) -> Path:
    doc = copy.deepcopy(study)
    edit(doc)
    path = tmp_path / RESULTS_FILE
    path.write_text(json.dumps(doc))
    return path


def test_the_study_as_written_is_read(study, tmp_path):
    load_document(_bad_copy(study, tmp_path, lambda doc: None))


@pytest.mark.parametrize(("edit", "where", "why"), BAD)
def test_the_reader_refuses_what_a_plot_or_report_cannot_draw(study, tmp_path, edit, where, why):
    path = _bad_copy(study, tmp_path, edit)
    with pytest.raises(UsageError) as raised:
        load_document(path)
    message = str(raised.value)
    assert message.startswith(f"{path}: ") and where in message and why in message, message


@pytest.mark.parametrize("command", ["plot", "report"])
@pytest.mark.parametrize(("edit", "where", "why"), BAD[:9])
def test_plot_and_report_exit_2_on_one_line(study, tmp_path, command, edit, where, why):
    path = _bad_copy(study, tmp_path, edit)
    result = runner.invoke(app, [command, str(path), "-q"])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: {path}: ") and where in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == [RESULTS_FILE]  # nothing drawn


# ------------------------------------------------------------------ CSV


@pytest.fixture(scope="module")
def params_csv(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("csv") / "params.csv"
    args = ["params", "--d-model", "64", "--heads", "4", "--kv-heads", "4,2,1", "--csv", str(path)]
    assert runner.invoke(app, [*args, "-q"]).exit_code == 0
    return path.read_text()


def _compare_csv(tmp_path: Path, good: str, bad: str) -> str:
    """compare's one error line for `bad` against `good`."""
    base, current = tmp_path / "base.csv", tmp_path / "bad.csv"
    base.write_text(good)
    current.write_text(bad)
    result = runner.invoke(app, ["compare", str(base), str(current)])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: {current}: "), line
    return line


def test_a_csv_cut_short_is_refused_naming_the_line(params_csv, tmp_path):
    lines = params_csv.splitlines()
    cut = "\n".join([*lines[:3], lines[3][: len(lines[3]) // 2]]) + "\n"
    line = _compare_csv(tmp_path, params_csv, cut)
    assert "line 4: " in line and "fewer than the header's 15 columns" in line


@pytest.mark.parametrize("number", ["1_6384", "\uff11\uff16\uff13\uff18\uff14", " 16384", "16384 "])
def test_a_csv_number_is_ascii_digits_alone(params_csv, tmp_path, number):
    header, first, *rest = params_csv.splitlines()
    cells = first.split(",")
    at = header.split(",").index("total_params")
    cells[at] = number
    bad = "\n".join([header, ",".join(cells), *rest]) + "\n"
    line = _compare_csv(tmp_path, params_csv, bad)
    assert f"params record 0: total_params: expected a number, got {number!r}" in line


def test_a_csv_header_naming_a_column_twice_is_refused(params_csv, tmp_path):
    header, *rows = params_csv.splitlines()
    at = header.split(",").index("total_params")
    twice = [",".join([*line.split(","), line.split(",")[at]]) for line in rows]
    bad = "\n".join([f"{header},total_params", *twice]) + "\n"
    line = _compare_csv(tmp_path, params_csv, bad)
    assert "line 1: the header names column 'total_params' twice" in line


def test_a_csv_number_may_have_a_sign_a_fraction_and_an_exponent(params_csv, tmp_path):
    path = tmp_path / "params.csv"
    path.write_text(params_csv.replace(",0.75,", ",7.5e-1,").replace(",0.625,", ",+.625,"))
    (records,) = load_document(path).sections.values()
    assert [r["ratio_vs_mha"] for r in records] == [1.0, 0.75, 0.625]
    assert [r["total_params"] for r in records] == [16384, 12288, 10240]


def test_a_key_given_twice_is_refused_where_json_would_keep_the_last(study, tmp_path):
    """A results file is read as strictly as a config.json: of a key given twice, json
    keeps the last value, which compare would gate (a total_params of 999)."""
    path = _bad_copy(study, tmp_path, lambda doc: None)
    text = path.read_text()
    path.write_text(text.replace('"command": "run"', '"command": "run", "command": "kvmem"', 1))
    result = runner.invoke(app, ["compare", str(path), str(path)])
    assert result.exit_code == 2, result.output
    assert result.stderr == f"error: {path}: duplicate key 'command'\n"
