"""`predict --calibrate` and `--check` from the command line: a flag that does nothing in
the mode given is an error naming both flags, a promised output is always written, no
input is ever written over (through a link or not), and bad results or calibration
files are one line, exit 2."""

from __future__ import annotations

import json
import os

import pytest

from attnbench.cli import app
from tests.helpers import runner
from tests.model.test_calibration_inputs import ENVIRONMENT, record


def results(tmp_path, *records, name: str = "run.json"):
    """A decode-speed results file of `records` (four consistent steps by default)."""
    steps = records or [
        record(
            batch=b,
            prompt_len=s,
            bytes_per_step=40_000 * b + 100 * s,
            flops_per_step=90_000 * b + 1000 * s,
            kv_bytes_per_gpu=128 * b * s,
            step_ms_median=t,
        )
        for (b, s), t in zip(
            ((1, 64), (1, 128), (2, 64), (2, 128)), (0.4, 0.5, 0.7, 0.9), strict=True
        )
    ]
    doc = {
        "schema_version": 1,
        "command": "decode-speed",
        "environment": ENVIRONMENT,
        "records": list(steps),
    }
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def predict(*args):
    result = runner.invoke(app, ["predict", *map(str, args)], env={"COLUMNS": "200"})
    assert "Traceback" not in result.output, result.output
    return result


def one_error(result, message: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: {message}"), result.stderr
    assert len(result.stderr.splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--check", "R", "--to", "out.json"], "--to goes with --calibrate"),
        (["--check", "R", "--model", "llama-2-7b", "--seq-len", "64"], "--model with --check: "),
        (["--check", "R", "--seq-len", "64"], "--seq-len with --check: "),
        (["--check", "R", "--csv", "out.csv"], "--csv with --check: "),
        (["--calibrate", "R", "--calibration", "R"], "--calibration with --calibrate: "),
        (["--calibrate", "R", "--batch", "2"], "--batch with --calibrate: "),
        (["--model", "llama-2-7b", "--seq-len", "64", "--to", "x.json"], "--to goes with --cal"),
        (["--model", "llama-2-7b", "--seq-len", "64", "--min-time", "1ms"], "--min-time goes "),
        (["--check", "R", "--min-time", "1"], "--min-time 1: expected a time"),
    ],
)
def test_a_flag_without_effect_in_the_mode_names_both(tmp_path, args, message):
    path = results(tmp_path)
    one_error(predict(*[str(path) if a == "R" else a for a in args]), message)
    assert not (tmp_path / "run.calibration.json").exists()


def test_check_json_writes_the_check(tmp_path):
    out = tmp_path / "check.json"
    result = predict("--check", results(tmp_path), "--json", out, "--min-time", "0ms")
    assert result.exit_code == 0, result.output
    written = json.loads(out.read_text())
    assert written["checked"].endswith("run.json") and len(written["rows"]) == 4
    assert written["model"]["source"] == "defaults" and f"wrote {out}" in result.output


def test_calibrate_writes_its_fit_and_its_check(tmp_path):
    to, out = tmp_path / "cal.json", tmp_path / "check.json"
    result = predict("--calibrate", results(tmp_path), "--to", to, "--json", out, "-q")
    assert result.exit_code == 0, result.output
    assert json.loads(to.read_text())["gpu"] == "this"
    assert len(json.loads(out.read_text())["rows"]) == 4


@pytest.mark.parametrize("link", [False, True])
def test_to_never_writes_over_the_run_it_calibrates_on(tmp_path, link):
    path = results(tmp_path)
    before = path.read_text()
    target = tmp_path / "link.json" if link else path
    if link:
        os.symlink(path, target)
    result = predict("--calibrate", path, "--to", target)
    one_error(result, f"--to {target}: is the --calibrate file, an input of this command")
    assert path.read_text() == before


def test_check_with_another_gpu_than_the_calibration_is_refused(tmp_path):
    cal = tmp_path / "cal.json"
    cal.write_text(
        json.dumps(
            {"efficiency_bw": 0.8, "efficiency_flops": 0.6, "overhead_s": 0, "gpu": "h100-sxm"}
        )
    )
    result = predict("--check", results(tmp_path), "--gpu", "a100-80gb", "--calibration", cal)
    one_error(result, f"--calibration {cal}: was fitted against h100-sxm's peaks, not a100-80gb's")
    result = predict("--check", results(tmp_path), "--gpu", "this", "--calibration", cal)
    one_error(
        result,
        f"--calibration {cal}: was fitted against h100-sxm's peaks, "
        "not this machine's measured peaks",
    )
    assert predict("--check", results(tmp_path), "--calibration", cal).exit_code == 0


def test_a_bad_run_is_one_line_naming_file_record_and_field(tmp_path):
    path = results(tmp_path, record(), record(prompt_len=64, num_kv_heads=3))
    for mode in ("--check", "--calibrate"):
        one_error(predict(mode, path), f"{path}: decode record 1: num_kv_heads 3 does not divide")
    zero = results(tmp_path, record(step_ms_median=0.0), name="zero.json")
    one_error(predict("--check", zero), f"{zero}: no timed decode samples to check against")
    floor = predict("--check", zero, "--min-time", "1s")
    one_error(floor, f"{zero}: no timed decode samples of 1 s or more")


def test_a_run_of_no_decode_points_does_not_blame_gpu(tmp_path):
    path = tmp_path / "predict.json"
    doc = {"schema_version": 1, "command": "predict", "environment": {}, "records": []}
    path.write_text(json.dumps(doc))
    result = predict("--check", path)
    one_error(result, f"{path}: no timed decode samples")
    assert "--gpu" not in result.stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_as_calibration_is_refused_in_every_mode(tmp_path):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    message = f"--calibration {fifo}: not a regular file (a device, pipe or socket)"
    one_error(predict("--check", results(tmp_path), "--calibration", fifo), message)
    args = ["--model", "llama-2-7b", "--seq-len", "64", "--gpu", "h100-sxm"]
    one_error(predict(*args, "--calibration", fifo), message)


def test_a_sweep_files_gpu_reaches_calibrate_and_check(tmp_path):
    """--calibrate and --check read the GPU of the sweep file's predict section, as a
    prediction does: the fit is against its peaks, and a check against another GPU's
    calibration is refused naming it."""
    run = results(tmp_path)
    study = tmp_path / "study.yaml"
    study.write_text("predict:\n  gpu: h100-sxm\n")
    to = tmp_path / "cal.json"
    result = predict("--calibrate", run, "--config", study, "--to", to, "-q")
    assert result.exit_code == 0, result.output
    assert json.loads(to.read_text())["gpu"] == "h100-sxm"
    result = predict("--check", run, "--config", study, "--calibration", to)
    assert result.exit_code == 0, result.output
    assert "peaks: NVIDIA H100" in result.output
    study.write_text("predict:\n  gpu: a100-80gb\n")
    result = predict("--check", run, "--config", study, "--calibration", to)
    one_error(result, f"--calibration {to}: was fitted against h100-sxm's peaks, not a100-80gb's")


def test_no_output_writes_over_a_file_the_sweep_names_or_the_calibration(tmp_path):
    """The model config.json a sweep file lists and the calibration, by flag or by file,
    are inputs too: --json or --csv over one of them is refused, and it stays whole."""
    path = results(tmp_path)
    calibration = tmp_path / "cal.json"
    assert predict("--calibrate", path, "--to", calibration).exit_code == 0
    model = tmp_path / "m.json"
    model.write_text(
        json.dumps(
            {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 8}
            | {"num_hidden_layers": 2, "vocab_size": 100, "intermediate_size": 64}
        )
    )
    sweep = tmp_path / "s.yaml"
    sweep.write_text("models: [m.json]\npredict: {seq_len: 64, calibration: cal.json}\n")
    before = {p: p.read_text() for p in (model, calibration)}
    one_error(
        predict("--config", sweep, "--json", model),
        f"--json {model}: is a model config.json the sweep file lists, an input",
    )
    one_error(
        predict("--config", sweep, "--csv", calibration),
        f"--csv {calibration}: is the --calibration file, an input of this command",
    )
    flags = ("--model", "llama-2-7b", "--seq-len", "64", "--calibration", calibration)
    one_error(predict(*flags, "--json", calibration), f"--json {calibration}: is the")
    assert {p: p.read_text() for p in (model, calibration)} == before
