"""`attnbench run`: a whole study end to end, kept point by point, interrupted, resumed,
dry-run, out of memory, and its bad input."""

from __future__ import annotations

import functools
import json
import os
import signal
import threading

import matplotlib.image
import pandas as pd
import pytest
import torch

from attnbench.cli import app
from attnbench.experiments.decode import run_order
from attnbench.experiments.whole_model import ModelPartRecord, whole_model_records
from attnbench.records import as_dict
from attnbench.render.report import findings
from attnbench.study.documents import load_document
from attnbench.study.merge import merge
from attnbench.study.output import append_csv_row, write_csv
from attnbench.study.runner import (
    DirectoryStore,
    Task,
    plan_study,
    run_experiment,
    run_study,
)
from attnbench.study.shards import Shard, shard_dir, shard_plan
from attnbench.study.stores import LOCK_FILE
from tests.conftest import TINY_POINTS, TINY_STUDY
from tests.experiments.options import decode_options, decode_point
from tests.helpers import runner

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def no_plots(monkeypatch):
    monkeypatch.setattr("attnbench.render.plots.render_plots", lambda doc, out: [])


@pytest.fixture
def cli_runs_with(monkeypatch):
    """`cli_runs_with(execute, **options)`: `attnbench run` runs its study through the
    public runner with `execute` (and any other run_study options) injected."""

    def inject(execute, **options) -> None:
        study = functools.partial(run_study, execute=execute, **options)
        monkeypatch.setattr("attnbench.study.runner.run_study", study)

    return inject


def after_points(k: int, then):
    """An executor that runs every point and calls `then()` once the k-th has finished
    (before its record is handed back to the runner)."""
    done: list[Task] = []

    def execute(task: Task, context):
        record = run_experiment(task, context)
        done.append(task)
        if len(done) == k:
            then()
        return record

    return execute


def sigint() -> None:
    """Ctrl-C, as the terminal sends it; only while the runner handles it (without its
    handler the test session itself would stop)."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        pytest.fail("no Ctrl-C handler is installed while the study runs")
    os.kill(os.getpid(), signal.SIGINT)


def sigint_twice() -> None:
    sigint()
    sigint()


def send(signum: int, times: int = 1):
    """A signal as `kill` sends it, `times` in a row; only while attnbench handles it
    (without a handler the test session itself would end)."""

    def then() -> None:
        for _ in range(times):
            if signal.getsignal(signum) in (signal.SIG_DFL, signal.SIG_IGN):
                pytest.fail(f"no {signal.Signals(signum).name} handler is installed")
            os.kill(os.getpid(), signum)

    return then


def forbidden(*args, **kwargs):
    pytest.fail("a dry run ran something")


def run(*args):
    return runner.invoke(app, ["run", *map(str, args)])


def flat(text: str) -> str:
    """Console text with its line breaks (the console's width) undone."""
    return " ".join(text.split())


def csv_rows(out, section) -> pd.DataFrame:
    return pd.read_csv(out / f"{section}.csv")


def decode_key(df: pd.DataFrame) -> list[tuple]:
    return list(zip(df["num_kv_heads"], df["prompt_len"], df["mode"], strict=True))


# ------------------------------------------------------------------ end to end


def test_end_to_end(tiny_study, tmp_path):
    out = tmp_path / "study"
    result = run(tiny_study, "--out", out)
    assert result.exit_code == 0, result.output
    names = [
        "params.csv",
        "kvmem.csv",
        "decode.csv",
        "results.json",
        "report.md",
        "decode_latency.png",
        "decode_speedup.png",
        "kv_memory_heads.png",
        "kv_memory_context.png",
        "decode_bandwidth.png",
    ]
    for name in names:
        assert (out / name).is_file(), name
    for section, count in TINY_POINTS.items():
        assert len(csv_rows(out, section)) == count
    for png in out.glob("*.png"):
        assert png.read_bytes()[:8] == PNG_SIGNATURE
        assert matplotlib.image.imread(png).ndim == 3

    doc = json.loads((out / "results.json").read_text())
    assert doc["schema_version"] == 1 and doc["command"] == "run"
    assert doc["environment"]["peak_gbps"] > 0
    assert doc["config"]["resolved_sha256"] and doc["config"]["file_text"] == TINY_STUDY
    assert {s: len(doc["sections"][s]["records"]) for s in TINY_POINTS} == TINY_POINTS
    assert doc["sections"]["decode"]["config"]["prompt_len"] == [4, 8]
    cached = [r for r in doc["sections"]["decode"]["records"] if r["mode"] == "cache"]
    assert all(r["speedup_vs_no_cache"] for r in cached)
    assert csv_rows(out, "decode")["speedup_vs_no_cache"].notna().sum() == len(cached)

    report = (out / "report.md").read_text()
    for variant in ("MHA", "GQA-2", "MQA"):
        assert variant in report
    assert "![Decode step latency" in report
    assert "With 4 query heads, GQA-2 needs 50.0% of MHA's KV cache and MQA 25.0%." in flat(
        result.stdout
    )
    assert "Findings" in result.stdout


@pytest.mark.usefixtures("no_plots")
def test_peaks_are_probed_before_and_after_the_timed_points_and_a_move_is_said(
    tiny_study, tmp_path, cli_runs_with
):
    """The copy peak the points are held against comes from the first probe; a second one
    after them tells whether the host's speed moved; one that moved more than 20% is said
    in the summary and in report.md."""
    readings = iter([10.0, 4.0])
    flops = iter([1e-4, 1e-4])
    cli_runs_with(
        None,
        probe_peak=lambda device: next(readings),
        probe_flops=lambda device, dtype: next(flops),
    )
    out = tmp_path / "study"
    result = run(tiny_study, "--out", out)
    assert result.exit_code == 0, result.output
    env = json.loads((out / "results.json").read_text())["environment"]
    assert (env["peak_gbps"], env["peak_gbps_probes"]) == (10.0, [10.0, 4.0])
    assert env["peak_tflops_probes"] == {"float32": [1e-4, 1e-4]}
    assert env["cache_bytes"] is None or env["cache_bytes"] > 0
    records = json.loads((out / "results.json").read_text())["sections"]["decode"]["records"]
    assert {r["peak_gbps"] for r in records} == {10.0}
    moved = (
        "The host's copy peak moved 2.5x during the run (10.0, then 4.0 GB/s), more than 20% apart"
    )
    summary = flat(result.stdout)
    assert f"Findings: - {moved}" in summary
    assert moved in (out / "report.md").read_text()


def test_decode_points_put_no_cache_first(tiny_study):
    base = {
        "d_model": 64,
        "num_heads": 4,
        "num_kv_heads": 4,
        "batch": 1,
        "dtype": "float32",
        "gen_len": 4,
        "provider": "attnbench",
    }
    points = [
        decode_point(**base, prompt_len=n, mode=m) for n in (4, 8) for m in ("cache", "no_cache")
    ]
    assert [(p.prompt_len, p.mode) for p in run_order(points, decode_options())] == [
        (4, "no_cache"),
        (4, "cache"),
        (8, "no_cache"),
        (8, "cache"),
    ]
    plan = plan_study(tiny_study)
    decode = [t.point for t in plan.tasks if t.section == "decode"]
    # the points compared with each other (every variant and mode at one context) together
    assert [(p.num_kv_heads, p.prompt_len, p.mode) for p in decode[:6]] == [
        (4, 4, "no_cache"),
        (4, 4, "cache"),
        (2, 4, "no_cache"),
        (2, 4, "cache"),
        (1, 4, "no_cache"),
        (1, 4, "cache"),
    ]


# ------------------------------------------------------------ whole-model parts

#: A params section of a model with a body, rebuilt with each KV-head count.
MODEL_STUDY = "models: [llama-3-8b]\nparams:\n  num_kv_heads: [32, 8, 1]\n"


@pytest.fixture
def model_study(tmp_path):
    path = tmp_path / "models.yaml"
    path.write_text(MODEL_STUDY)
    return path


def expected_parts(plan) -> list[ModelPartRecord]:
    """The part records of the params section's models, as the library makes them."""
    return [r for spec in plan.sections["params"].models for r in whole_model_records(spec)]


@pytest.mark.usefixtures("no_plots")
def test_the_runner_keeps_the_parts_of_a_params_section_of_models_once(model_study, tmp_path):
    """The runner writes the whole-model parts of each model beside the params records,
    in results.json and model_parts.csv; a resumed study makes them again in their place,
    never twice; every reader of results takes them."""
    plan = plan_study(model_study)
    expected = expected_parts(plan)
    assert {r.num_kv_heads for r in expected} == {32, 8, 1}
    out = tmp_path / "study"
    result = run_study(
        plan,
        DirectoryStore(out),
        execute=after_points(1, sigint),
        on_interrupt=lambda signum: None,
        probe_peak=lambda device: 7.0,
    )
    assert result.interrupted and result.records["model_parts"] == expected
    written = [as_dict(r) for r in expected]
    assert json.loads((out / "results.json").read_text())["model_parts"] == written

    result = run_study(plan_study(model_study), DirectoryStore(out), resume=True)
    assert (result.skipped, result.ran, result.interrupted) == (1, 2, False)
    assert json.loads((out / "results.json").read_text())["model_parts"] == written
    write_csv(tmp_path / "parts.csv", expected, ModelPartRecord)
    assert (out / "model_parts.csv").read_text() == (tmp_path / "parts.csv").read_text()
    assert load_document(out / "results.json").sections["model_parts"] == written
    for command in ("report", "plot"):
        shown = runner.invoke(app, [command, str(out / "results.json"), "-q"])
        assert shown.exit_code == 0, shown.output


def test_run_writes_parts_only_for_a_params_section_of_models(model_study, tmp_path):
    with_models, without = tmp_path / "with", tmp_path / "without"
    assert run(model_study, "--out", with_models, "-q").exit_code == 0
    assert len(csv_rows(with_models, "model_parts")) == len(expected_parts(plan_study(model_study)))
    shapes = tmp_path / "shapes.yaml"
    shapes.write_text("defaults: {d_model: 64, num_heads: 4}\nparams: {num_kv_heads: [4, 1]}\n")
    assert run(shapes, "--out", without, "-q").exit_code == 0
    assert "model_parts" not in json.loads((without / "results.json").read_text())
    assert not (without / "model_parts.csv").exists()


def test_merged_shares_keep_the_parts_once(model_study, tmp_path):
    plan = plan_study(model_study)
    out = tmp_path / "sharded"
    for share in (Shard(0, 2), Shard(1, 2)):
        run_study(shard_plan(plan, share), DirectoryStore(shard_dir(out, share)))
    merged = merge([out])
    assert merged.complete
    assert merged.document["model_parts"] == [as_dict(r) for r in expected_parts(plan)]


# ------------------------------------------------------------ nothing lost

#: Stop after this many points: between a no_cache point and its cache point.
K = TINY_POINTS["params"] + TINY_POINTS["kvmem"] + 3


@pytest.mark.usefixtures("no_plots")
def test_ctrl_c_keeps_finished_points_and_resume_completes(tiny_study, tmp_path):
    out = tmp_path / "study"
    handler = signal.getsignal(signal.SIGINT)
    notices = []
    result = run_study(
        plan_study(tiny_study),
        DirectoryStore(out),
        execute=after_points(K, sigint),
        on_interrupt=notices.append,
    )
    assert result.interrupted and result.ran == K and notices == [signal.SIGINT]
    assert signal.getsignal(signal.SIGINT) is handler  # Ctrl-C is the test runner's again
    assert len(csv_rows(out, "decode")) == 3
    doc = json.loads((out / "results.json").read_text())
    assert sum(len(s["records"]) for s in doc["sections"].values()) == K

    # one more point, then stop; the peak bandwidth stored with the study is reused (a
    # probe before the resumed points only tells whether the host's speed moved since)
    stop = threading.Event()
    result = run_study(
        plan_study(tiny_study),
        DirectoryStore(out),
        resume=True,
        stop=stop,
        execute=after_points(1, stop.set),
        probe_peak=lambda device: 7.0,
    )
    assert (result.skipped, result.ran, result.interrupted) == (K, 1, True)
    (cached,) = result.records["decode"]
    assert (cached.num_kv_heads, cached.prompt_len, cached.mode) == (2, 4, "cache")
    assert cached.speedup_vs_no_cache is None  # run alone: no comparison
    assert result.environment["peak_gbps"] == doc["environment"]["peak_gbps"]
    assert cached.peak_gbps == doc["environment"]["peak_gbps"]
    assert result.environment["peak_gbps_probes"] == [*doc["environment"]["peak_gbps_probes"], 7.0]

    # the runner's own resume: the first context's group, recorded in part, runs again whole
    result = run(tiny_study, "--out", out, "--resume")
    assert result.exit_code == 0, result.output
    assert f"({TINY_POINTS['params'] + TINY_POINTS['kvmem']} recorded earlier)" in result.stdout
    for section, count in TINY_POINTS.items():
        assert len(csv_rows(out, section)) == count
    decode = csv_rows(out, "decode")
    assert len(set(decode_key(decode))) == TINY_POINTS["decode"]
    assert (decode["sampling"] == "interleaved").all()
    assert decode.loc[decode["mode"] == "cache", "speedup_vs_no_cache"].notna().all()


@pytest.mark.usefixtures("no_plots")
def test_a_hard_stop_keeps_every_finished_row(tiny_study, tmp_path):
    """A second Ctrl-C (KeyboardInterrupt mid-point) loses only the point it hit."""
    out = tmp_path / "study"
    handler = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        run_study(
            plan_study(tiny_study),
            DirectoryStore(out),
            execute=after_points(2, sigint_twice),
            on_interrupt=lambda signum: None,
        )
    assert signal.getsignal(signal.SIGINT) is handler
    assert len(csv_rows(out, "params")) == 1
    doc = json.loads((out / "results.json").read_text())
    assert len(doc["sections"]["params"]["records"]) == 1
    assert run(tiny_study, "--out", out, "--resume", "-q").exit_code == 0
    assert [len(csv_rows(out, s)) for s in TINY_POINTS] == list(TINY_POINTS.values())


@pytest.mark.parametrize("then", [sigint, sigint_twice], ids=["ctrl-c", "ctrl-c twice"])
@pytest.mark.usefixtures("no_plots")
def test_interrupted_run_exits_130_and_says_how_to_resume(
    tiny_study, tmp_path, cli_runs_with, then
):
    out = tmp_path / "study"
    cli_runs_with(after_points(2, then))
    result = run(tiny_study, "--out", out)
    assert result.exit_code == 130, result.output
    assert f"attnbench run {tiny_study} --out {out} --resume" in result.stderr
    assert (out / "results.json").is_file() and not (out / "report.md").exists()


@pytest.mark.parametrize("times", [1, 2], ids=["once", "twice"])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
@pytest.mark.usefixtures("no_plots")
def test_sigterm_and_sighup_stop_a_run_as_ctrl_c_does(
    tiny_study, tmp_path, cli_runs_with, signum, times
):
    """The message, the way to resume and the lock released; the handlers are put back."""
    out = tmp_path / "study"
    cli_runs_with(after_points(2, send(signum, times)))
    result = run(tiny_study, "--out", out)
    assert result.exit_code == 130, result.output
    stderr = flat(result.stderr)
    name = signal.Signals(signum).name
    assert f"stopping after the current points ({name} or Ctrl-C again to stop now)" in stderr
    assert (
        f"interrupted: the finished points are in {out}/; finish with: attnbench run "
        f"{tiny_study} --out {out} --resume"
    ) in stderr
    assert not (out / LOCK_FILE).exists()
    assert signal.getsignal(signum) is signal.SIG_DFL
    kept = json.loads((out / "results.json").read_text())["sections"]["params"]["records"]
    assert len(kept) == 3 - times  # a second signal stops at once: the point it hit is lost
    assert run(tiny_study, "--out", out, "--resume", "-q").exit_code == 0


def test_a_signal_ignored_stays_ignored(tiny_study, tmp_path):
    """SIGHUP under nohup: the study goes on; Ctrl-C and SIGTERM still stop it."""
    handlers = {}

    def look(task, context):
        handlers.update({s: signal.getsignal(s) for s in (signal.SIGHUP, signal.SIGTERM)})
        return run_experiment(task, context)

    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        run_study(
            plan_study(tiny_study, names=["params"]),
            DirectoryStore(tmp_path / "study"),
            execute=look,
            on_interrupt=lambda signum: None,
        )
        assert handlers[signal.SIGHUP] is signal.SIG_IGN
        assert handlers[signal.SIGTERM] not in (signal.SIG_DFL, signal.SIG_IGN)
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, before)


@pytest.mark.usefixtures("no_plots")
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


@pytest.mark.usefixtures("no_plots")
def test_out_with_results_needs_resume(tmp_path):
    out = tmp_path / "study"
    config = tmp_path / "params.yaml"
    config.write_text("defaults: {d_model: 64, num_heads: 4}\nparams: {}\n")
    assert run(config, "--out", out, "-q").exit_code == 0
    result = run(config, "--out", out)
    assert result.exit_code == 2
    assert f"error: --out {out}: already holds results; resume them" in result.stderr
    result = run(config, "--resume")
    assert result.exit_code == 2
    assert "error: --resume: give the results directory to finish with --out" in result.stderr
    result = run(config, "--out", tmp_path / "empty", "--resume")
    assert result.exit_code == 2 and "no results.json there to resume" in result.stderr
    assert not (tmp_path / "empty").exists()  # refused before the directory is made
    result = run(config, "--out", "")
    assert result.exit_code == 2 and "error: --out '': empty; give a value" in result.stderr


@pytest.mark.usefixtures("no_plots")
def test_a_point_refused_on_this_machine_is_named_by_its_key_and_blocks_no_retry(tmp_path):
    """`gpu: [this]` is checked at the point (its peaks are this machine's): the error
    names the file's key, and the study it left, with no record, is no results to keep."""
    out = tmp_path / "study"
    config = tmp_path / "p.yaml"
    config.write_text(
        "predict: {models: [llama-3-8b], gpu: [this], weights_dtype: float8_e4m3fn}\n"
    )
    result = run(config, "--out", out, "-q")
    assert result.exit_code == 2
    assert f"error: predict.weights_dtype: float8_e4m3fn ({config}): " in result.stderr
    assert "--weights-dtype" not in result.stderr
    config.write_text("predict: {models: [llama-3-8b], gpu: [this]}\n")
    assert run(config, "--out", out, "--dry-run").exit_code == 0
    assert run(config, "--out", out, "-q").exit_code == 0
    doc = json.loads((out / "results.json").read_text())
    assert len(doc["sections"]["predict"]["records"]) == 1


@pytest.mark.usefixtures("no_plots")
def test_a_dry_run_checks_out_resume_and_force_as_the_run_does(tmp_path):
    out = tmp_path / "study"
    config = tmp_path / "s.yaml"
    config.write_text(PARAMS_KVMEM)
    assert run(config, "--out", out, "-q").exit_code == 0
    result = run(config, "--out", out, "--dry-run")
    assert result.exit_code == 2 and "already holds results; resume them" in result.stderr
    assert "0 points left of 5" in run(config, "--out", out, "--dry-run", "--resume").stdout
    doc = json.loads((out / "results.json").read_text())
    del doc["sections"]["kvmem"]["records"][1:]
    (out / "results.json").write_text(json.dumps(doc))
    listed = run(config, "--out", out, "--dry-run", "--resume").stdout
    assert "1 point left of 5" in listed and "params" not in listed
    result = run(config, "--dry-run", "--resume")
    assert result.exit_code == 2 and "--resume: give the results directory" in result.stderr
    result = run(config, "--out", tmp_path / "new", "--dry-run", "--resume")
    assert result.exit_code == 2 and "no results.json there to resume" in result.stderr
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    result = run(config, "--out", other, "--dry-run")
    assert result.exit_code == 2 and "holds files that are not a study's" in result.stderr
    assert run(config, "--out", other, "--dry-run", "--force").exit_code == 0
    assert sorted(p.name for p in other.iterdir()) == ["notes.txt"]  # nothing written
    assert not (tmp_path / "new").exists()


PARAMS_KVMEM = """\
defaults: {d_model: 64, num_heads: 4}
params: {num_kv_heads: [4, 2, 1]}
kvmem: {batch: 1, seq_len: [16, 32], measure: false}
"""


@pytest.fixture
def started(tmp_path):
    """A study of params and kvmem points stopped after its first point, and its sweep."""
    config = tmp_path / "study.yaml"
    config.write_text(PARAMS_KVMEM)
    out = tmp_path / "study"
    stop = threading.Event()
    run_study(plan_study(config), DirectoryStore(out), stop=stop, execute=after_points(1, stop.set))
    return config, out


def spreadsheet(text: str, bom: bool = True, delimiter: str = ";") -> bytes:
    """`text` (a CSV) as a spreadsheet saves it: a byte-order mark, another delimiter."""
    rows = [line.split(",") for line in text.splitlines()]
    saved = "".join(delimiter.join(row) + "\r\n" for row in rows)
    return saved.encode("utf-8-sig" if bom else "utf-8")


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        (lambda t: b"\xff\xfe" + t.encode(), "not UTF-8 text (byte 0)"),
        (
            spreadsheet,
            "starts with a byte-order mark and its columns are separated by ';', not "
            "commas (as a spreadsheet saves it)",
        ),
        (
            lambda t: spreadsheet(t, bom=False, delimiter="\t"),
            "its columns are separated by '\\t', not commas (as a spreadsheet saves it)",
        ),
        (lambda t: ("\ufeff" + t).encode(), "starts with a byte-order mark (as a spreadsheet"),
        (lambda t: t.replace("variant,", "", 1).encode(), "its header lacks variant;"),
        (
            lambda t: t.replace("variant,", "x" * 200_000 + ",", 1).encode(),
            "not a CSV attnbench reads (field larger than field limit",
        ),
    ],
    ids=["not-utf8", "spreadsheet", "tabs", "bom", "no-variant", "huge-cell"],
)
@pytest.mark.usefixtures("no_plots")
def test_resume_refuses_a_csv_it_cannot_append_to_and_keeps_it(started, damage, problem):
    """Rows appended under a header that lacks their columns would lose fields: refused,
    naming the file, nothing written; moved aside, the CSV is written again whole."""
    config, out = started
    csv_path = out / "params.csv"
    damaged = damage(csv_path.read_text())
    csv_path.write_bytes(damaged)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    result = run(config, "--out", out, "--resume")
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: resume: {csv_path}: {problem}"), line
    assert line.endswith("move it aside, and resuming writes it again from results.json")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # no lock left either
    csv_path.rename(out.parent / "saved.csv")
    assert run(config, "--out", out, "--resume", "-q").exit_code == 0
    rows = csv_rows(out, "params")
    assert list(rows["variant"]) == ["MHA", "GQA-2", "MQA"]


def is_mqa_cache_at_8(task: Task) -> bool:
    p = task.point
    return task.section == "decode" and (p.num_kv_heads, p.prompt_len, p.mode) == (1, 8, "cache")


def failing(exc: BaseException, when):
    def execute(task: Task, context):
        if when(task):
            raise exc
        return run_experiment(task, context)

    return execute


MQA_OOM = "decode MQA attnbench d_model 64 batch 1 context 8 cache: oom"


def test_out_of_memory_is_recorded_and_listed(tiny_study, tmp_path):
    out = tmp_path / "study"
    oom = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    result = run_study(
        plan_study(tiny_study), DirectoryStore(out), execute=failing(oom, is_mqa_cache_at_8)
    )
    assert not result.interrupted and result.ran == sum(TINY_POINTS.values())
    assert findings(result.document)[-1] == f"1 point(s) did not complete: {MQA_OOM}."
    decode = csv_rows(out, "decode")
    assert len(decode) == TINY_POINTS["decode"]
    assert (decode["status"] == "oom").sum() == 1
    oom_row = decode[decode["status"] == "oom"].iloc[0]
    assert (oom_row["num_kv_heads"], oom_row["prompt_len"], oom_row["mode"]) == (1, 8, "cache")
    assert pd.isna(oom_row["step_ms_median"]) and oom_row["bytes_per_step"] > 0


@pytest.mark.usefixtures("no_plots")
@pytest.mark.parametrize(
    ("exc", "code", "status"),
    [
        (torch.OutOfMemoryError("CUDA out of memory"), 0, "oom"),
        (ValueError("bad thing"), 1, "error: ValueError: bad thing"),
    ],
)
def test_run_exits_1_only_for_failures_other_than_memory(
    tiny_study, tmp_path, cli_runs_with, exc, code, status
):
    out = tmp_path / "study"
    cli_runs_with(failing(exc, is_mqa_cache_at_8))
    result = run(tiny_study, "--out", out)
    assert result.exit_code == code, result.output
    assert f"1 point(s) did not complete: {MQA_OOM.replace('oom', status)}." in flat(result.stdout)
    assert list(csv_rows(out, "decode")["status"]).count(status) == 1


# ------------------------------------------------------------ dry run, bad input


def test_dry_run_runs_nothing(tiny_study, tmp_path, cli_runs_with):
    cli_runs_with(forbidden, probe_peak=forbidden)
    out = tmp_path / "study"
    result = run(tiny_study, "--out", out, "--dry-run")
    assert result.exit_code == 0, result.output
    assert not out.exists()
    lines = result.stdout.splitlines()
    assert sum(line.startswith("decode ") for line in lines) == TINY_POINTS["decode"]
    assert sum(line.startswith("kvmem ") for line in lines) == TINY_POINTS["kvmem"]
    assert (
        f"{sum(TINY_POINTS.values())} points" in result.stdout
        and "nothing was run" in result.stdout
    )


def test_default_study_plans_within_budget():
    """The packaged study: every variant, cache and no cache at several prompt lengths."""
    plan = plan_study()
    decode = [t.point for t in plan.tasks if t.section == "decode"]
    kv_heads = {p.num_kv_heads for p in decode}
    assert {1, *(p.num_heads for p in decode)} < kv_heads  # MQA, MHA and a GQA between
    assert {p.mode for p in decode} == {"cache", "no_cache"}
    assert len({p.prompt_len for p in decode}) >= 3
    # `make bench` takes at most a minute; the estimate is the decode budget (max_time per
    # point) and the peak probes, which real runs take (about 30 s on a 2-core VM)
    assert 0 < plan.estimate_total(plan.tasks) < 60


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.yaml"], "missing.yaml: no such file"),
        (["--device", "tpu"], "--device tpu: unknown device"),
    ],
)
def test_bad_input_is_one_line(args, message):
    result = run(*args, "--dry-run")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ") and message in result.stderr.splitlines()[0]
    assert "Traceback" not in result.output and result.stdout == ""


def test_the_sweep_file_may_come_as_config_as_for_every_other_command(tiny_study):
    as_argument = run(tiny_study, "--dry-run")
    as_flag = run("--config", tiny_study, "--dry-run")
    assert as_flag.exit_code == 0, as_flag.output
    assert as_flag.stdout == as_argument.stdout
    both = run(tiny_study, "--config", tiny_study, "--dry-run")
    assert both.exit_code == 2
    assert both.stderr.splitlines() == [
        f"error: CONFIG {tiny_study} and --config {tiny_study}: give the sweep file once"
    ]


def test_a_bad_device_is_reported_once():
    result = run("--device", "tpu", "--dry-run")
    assert result.exit_code == 2
    assert len(result.stderr.splitlines()) == 1, result.stderr


def test_a_missing_sweep_file_names_no_flag_that_run_lacks():
    result = run("missing.yaml", "--dry-run")
    assert result.exit_code == 2
    assert "--config" not in result.stderr, result.stderr


def test_resuming_an_empty_directory_names_out(tmp_path):
    config = tmp_path / "params.yaml"
    config.write_text("defaults: {d_model: 64, num_heads: 4}\nparams: {}\n")
    result = run(config, "--out", tmp_path / "empty", "--resume")
    assert result.exit_code == 2
    assert f"error: --out {tmp_path / 'empty'}: no results.json" in result.stderr, result.stderr


def test_unwritable_out_is_one_line(tmp_path):
    config = tmp_path / "params.yaml"
    config.write_text("defaults: {d_model: 64, num_heads: 4}\nparams: {}\n")
    result = run(config, "--out", config / "study")
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: --out {config / 'study'}")
    assert "cannot write: Not a directory" in line


def test_appended_rows_keep_the_existing_header(tmp_path):
    path = tmp_path / "rows.csv"
    append_csv_row(path, {"a": 1, "b": 2})
    append_csv_row(path, {"b": 3, "a": 4, "c": 5})  # a field the header lacks stays out
    append_csv_row(path, {"a": 6})
    assert path.read_text().splitlines() == ["a,b", "1,2", "4,3", "6,"]


def test_kvmem_section_matches_the_kvmem_command_for_config_json_windows_and_batches(tmp_path):
    """run and kvmem read a study the same way: a config.json model keeps its sliding
    window, and a YAML seq_lens list is one batch of those lengths."""
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "model_type": "mistral",
                "hidden_size": 256,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "num_hidden_layers": 2,
                "sliding_window": 64,
                "torch_dtype": "float16",
            }
        )
    )
    sweep = tmp_path / "study.yaml"
    sweep.write_text(
        "models: [config.json]\nkvmem:\n  seq_lens: [100, 30, 200]\n"
        "  page_size: 16\n  measure: false\n"
    )
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
