"""`attnbench run`: a whole study end to end, kept point by point, interrupted, resumed,
dry-run, out of memory, and its bad input."""

from __future__ import annotations

import json
import os
import signal

import matplotlib.image
import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

import attnbench.experiments.decode
import attnbench.study.runner as study
from attnbench.cli import app
from attnbench.study.output import append_csv_row

runner = CliRunner()

TINY = """\
defaults:
  d_model: 64
  num_heads: 4
sweep:
  num_kv_heads: [4, 2, 1]
params: {}
kvmem:
  num_layers: 2
  batch: 1
  seq_len: [16, 64]
  dtype: float16
  device: cpu
decode:
  batch: 1
  dtype: float32
  prompt_len: [4, 8]
  gen_len: 4
  warmup: 0
  repeats: 1
  device: cpu
"""
POINTS = {"params": 3, "kvmem": 6, "decode": 12}
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    return path


@pytest.fixture
def fast_peak(monkeypatch):
    """Skip the 256 MiB bandwidth copy where the test is not about it."""
    monkeypatch.setattr(study, "measure_peak_gbps", lambda device: 10.0)


@pytest.fixture
def no_plots(monkeypatch):
    monkeypatch.setattr("attnbench.cli.run_cmd.render_plots", lambda doc, out: [])


def run(*args):
    return runner.invoke(app, ["run", *map(str, args)])


def csv_rows(out, section) -> pd.DataFrame:
    return pd.read_csv(out / f"{section}.csv")


def decode_key(df: pd.DataFrame) -> list[tuple]:
    return list(zip(df["num_kv_heads"], df["prompt_len"], df["mode"], strict=True))


# ------------------------------------------------------------------ end to end


def test_end_to_end(tiny, tmp_path):
    out = tmp_path / "study"
    result = run(tiny, "--out", out)
    assert result.exit_code == 0, result.output
    names = ["params.csv", "kvmem.csv", "decode.csv", "results.json", "report.md",
             "decode_latency.png", "decode_speedup.png", "kv_memory_heads.png",
             "kv_memory_context.png", "decode_bandwidth.png"]  # fmt: skip
    for name in names:
        assert (out / name).is_file(), name
    for section, count in POINTS.items():
        assert len(csv_rows(out, section)) == count
    for png in out.glob("*.png"):
        assert png.read_bytes()[:8] == PNG_SIGNATURE
        assert matplotlib.image.imread(png).ndim == 3

    doc = json.loads((out / "results.json").read_text())
    assert doc["schema_version"] == 1 and doc["command"] == "run"
    assert doc["environment"]["peak_gbps"] > 0
    assert doc["config"]["resolved_sha256"] and doc["config"]["file_text"] == TINY
    assert {s: len(doc["sections"][s]["records"]) for s in POINTS} == POINTS
    assert doc["sections"]["decode"]["config"]["prompt_len"] == [4, 8]
    cached = [r for r in doc["sections"]["decode"]["records"] if r["mode"] == "cache"]
    assert all(r["speedup_vs_no_cache"] for r in cached)
    assert csv_rows(out, "decode")["speedup_vs_no_cache"].notna().sum() == len(cached)

    report = (out / "report.md").read_text()
    for variant in ("MHA", "GQA-2", "MQA"):
        assert variant in report
    assert "![Decode step latency" in report
    assert "GQA-2 needs 50.0% of MHA's KV cache and MQA 25.0%" in result.stdout
    assert "Findings" in result.stdout


def test_decode_points_put_no_cache_first():
    points = [{"prompt_len": n, "mode": m} for n in (4, 8) for m in ("cache", "no_cache")]
    assert [(p["prompt_len"], p["mode"]) for p in study.no_cache_first(points)] == [
        (4, "no_cache"), (4, "cache"), (8, "no_cache"), (8, "cache"),
    ]  # fmt: skip


# ------------------------------------------------------------ nothing lost


REAL_RUN_POINT = study._run_point


def _interrupt_after(monkeypatch, k: int, how) -> None:
    """Call `how()` once the k-th point of the run has finished."""
    real = REAL_RUN_POINT
    done = []

    def run_point(*args):
        record = real(*args)
        done.append(1)
        if len(done) == k:
            how()
        return record

    monkeypatch.setattr(study, "_run_point", run_point)


@pytest.mark.usefixtures("fast_peak", "no_plots")
def test_ctrl_c_keeps_finished_points_and_resume_completes(tiny, tmp_path, monkeypatch):
    out = tmp_path / "study"
    k = POINTS["params"] + POINTS["kvmem"] + 3  # stop between a no_cache and its cache point
    _interrupt_after(monkeypatch, k, lambda: os.kill(os.getpid(), signal.SIGINT))
    result = run(tiny, "--out", out)
    assert result.exit_code == 130, result.output
    assert "--resume" in result.stderr and str(out) in result.stderr
    assert len(csv_rows(out, "decode")) == 3
    doc = json.loads((out / "results.json").read_text())
    assert sum(len(s["records"]) for s in doc["sections"].values()) == k

    monkeypatch.setattr(study, "_run_point", REAL_RUN_POINT)
    monkeypatch.setattr(study, "measure_peak_gbps", lambda device: pytest.fail("re-measured"))
    result = run(tiny, "--out", out, "--resume")
    assert result.exit_code == 0, result.output
    assert f"({k} recorded earlier)" in result.stdout
    for section, count in POINTS.items():
        assert len(csv_rows(out, section)) == count
    decode = csv_rows(out, "decode")
    assert len(set(decode_key(decode))) == POINTS["decode"]
    assert decode.loc[decode["mode"] == "cache", "speedup_vs_no_cache"].notna().all()


@pytest.mark.usefixtures("fast_peak", "no_plots")
def test_a_hard_stop_keeps_every_finished_row(tiny, tmp_path, monkeypatch):
    """A second Ctrl-C (KeyboardInterrupt mid-point) loses only the point it hit."""
    out = tmp_path / "study"

    def hard_stop():
        raise KeyboardInterrupt

    _interrupt_after(monkeypatch, 2, hard_stop)
    assert run(tiny, "--out", out).exit_code == 130
    assert len(csv_rows(out, "params")) == 1
    monkeypatch.setattr(study, "_run_point", REAL_RUN_POINT)
    assert run(tiny, "--out", out, "--resume", "-q").exit_code == 0
    assert [len(csv_rows(out, s)) for s in POINTS] == list(POINTS.values())


@pytest.mark.usefixtures("fast_peak", "no_plots")
def test_resume_with_another_config_exits_2(tmp_path):
    out = tmp_path / "study"
    params_only = tmp_path / "params.yaml"
    params_only.write_text(
        "defaults: {d_model: 64, num_heads: 4}\nparams: {num_kv_heads: [4, 1]}\n"
    )
    assert run(params_only, "--out", out, "-q").exit_code == 0
    params_only.write_text(
        "defaults: {d_model: 64, num_heads: 4}\nparams: {num_kv_heads: [4, 2]}\n"
    )
    result = run(params_only, "--out", out, "--resume")
    assert result.exit_code == 2
    assert "different configuration" in result.stderr
    assert "params.num_kv_heads: [4, 1] there, [4, 2] here" in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.usefixtures("fast_peak", "no_plots")
def test_out_with_results_needs_resume(tmp_path):
    out = tmp_path / "study"
    config = tmp_path / "params.yaml"
    config.write_text("defaults: {d_model: 64, num_heads: 4}\nparams: {}\n")
    assert run(config, "--out", out, "-q").exit_code == 0
    result = run(config, "--out", out)
    assert result.exit_code == 2 and "--resume" in result.stderr
    result = run(config, "--resume")
    assert result.exit_code == 2 and "--out" in result.stderr
    result = run(config, "--out", tmp_path / "empty", "--resume")
    assert result.exit_code == 2 and "no results.json" in result.stderr


@pytest.mark.usefixtures("fast_peak", "no_plots")
def test_out_of_memory_is_recorded_and_listed(tiny, tmp_path, monkeypatch):
    real = attnbench.experiments.decode.time_decode

    def time_decode(shape, backend, dtype, batch, prompt_len, gen_len, cached, *rest):
        if shape.num_kv_heads == 1 and prompt_len == 8 and cached:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(shape, backend, dtype, batch, prompt_len, gen_len, cached, *rest)

    monkeypatch.setattr(attnbench.experiments.decode, "time_decode", time_decode)
    out = tmp_path / "study"
    result = run(tiny, "--out", out)
    assert result.exit_code == 0, result.output
    assert "1 point(s) did not complete" in result.stdout
    assert "decode MQA d_model 64 batch 1 prompt 8 cache: oom" in result.stdout
    decode = csv_rows(out, "decode")
    assert len(decode) == POINTS["decode"]
    assert (decode["status"] == "oom").sum() == 1


# ------------------------------------------------------------ dry run, bad input


def test_dry_run_runs_nothing(tiny, tmp_path, monkeypatch):
    def forbidden(*args, **kwargs):
        pytest.fail("a dry run ran something")

    monkeypatch.setattr(study, "_run_point", forbidden)
    monkeypatch.setattr(study, "measure_peak_gbps", forbidden)
    out = tmp_path / "study"
    result = run(tiny, "--out", out, "--dry-run")
    assert result.exit_code == 0, result.output
    assert not out.exists()
    lines = result.stdout.splitlines()
    assert sum(line.startswith("decode ") for line in lines) == POINTS["decode"]
    assert f"{sum(POINTS.values())} points" in result.stdout and "nothing was run" in result.stdout


def test_default_study_plans_within_budget():
    """The packaged study: every variant, cache and no cache at several prompt lengths."""
    plan = study.plan_study()
    decode = [t.point for t in plan.tasks if t.section == "decode"]
    kv_heads = {p["num_kv_heads"] for p in decode}
    assert {1, *(p["num_heads"] for p in decode)} < kv_heads  # MQA, MHA and a GQA between
    assert {p["mode"] for p in decode} == {"cache", "no_cache"}
    assert len({p["prompt_len"] for p in decode}) >= 3
    assert study.estimate_total_seconds(plan, plan.tasks) < 30


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.yaml"], "file not found"),
        (["--device", "tpu"], "--device: unknown device 'tpu'"),
    ],
)
def test_bad_input_is_one_line(args, message):
    result = run(*args, "--dry-run")
    assert result.exit_code == 2
    assert message in result.stderr and "Traceback" not in result.output


@pytest.mark.usefixtures("fast_peak")
def test_unwritable_out_is_one_line(tmp_path):
    config = tmp_path / "params.yaml"
    config.write_text("defaults: {d_model: 64, num_heads: 4}\nparams: {}\n")
    result = run(config, "--out", config / "study")
    assert result.exit_code == 2
    assert "--out: cannot write" in result.stderr and "Not a directory" in result.stderr


def test_appended_rows_keep_the_existing_header(tmp_path):
    path = tmp_path / "rows.csv"
    append_csv_row(path, {"a": 1, "b": 2})
    append_csv_row(path, {"b": 3, "a": 4, "c": 5})  # a field the header lacks stays out
    append_csv_row(path, {"a": 6})
    assert path.read_text().splitlines() == ["a,b", "1,2", "4,3", "6,"]


def test_kvmem_section_matches_the_kvmem_command_for_config_json_windows_and_batches(tmp_path):
    """run and kvmem read a study the same way: a config.json model keeps its sliding
    window, and a YAML seq_lens list is one batch of those lengths."""
    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "mistral", "hidden_size": 256, "num_attention_heads": 4,
        "num_key_value_heads": 2, "num_hidden_layers": 2, "sliding_window": 64,
        "torch_dtype": "float16"}))  # fmt: skip
    sweep = tmp_path / "study.yaml"
    sweep.write_text("models: [config.json]\nkvmem:\n  seq_lens: [100, 30, 200]\n"
                     "  page_size: 16\n  measure: false\n")  # fmt: skip
    kvmem_json = tmp_path / "kvmem.json"
    result = runner.invoke(app, ["kvmem", "--config", str(sweep), "-q", "--json", str(kvmem_json)])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["run", str(sweep), "--out", str(tmp_path / "out"), "-q"])
    assert result.exit_code == 0, result.output
    expected = json.loads(kvmem_json.read_text())["records"]
    got = json.loads((tmp_path / "out" / "results.json").read_text())["sections"]["kvmem"]
    assert got["records"] == expected
    # 2 layers x 3 sequences x 64 kept tokens x 2 (K, V) x 2 KV heads x 64 x 2 bytes
    assert expected[0]["kv_bytes"] == 2 * 3 * 64 * 2 * 2 * 64 * 2
    assert expected[0]["batch"] == 3 and expected[0]["seq_len"] == 200
