"""`predict --ep`: a mixture of experts' experts split whole over ranks, from flags and a
sweep file; what it cannot split is one line naming the field, exit 2."""

from __future__ import annotations

import csv
import re

import pytest

from attnbench.cli import app
from tests.cli.test_predict_modes import one_error, predict
from tests.helpers import runner


def test_ep_is_a_column_and_a_key_of_its_records(tmp_path):
    out = tmp_path / "p.csv"
    args = ["--gpu", "h200", "--model", "deepseek-v3", "--tp", "8", "--ep", "1,8"]
    result = predict(*args, "--batch", "1,512", "--seq-len", "2048", "--csv", out)
    assert result.exit_code == 0, result.output
    assert re.search(r"┃\s*ep\s*┃", result.stdout), result.stdout
    rows = {(r["ep"], r["batch"]): float(r["tpot_ms"]) for r in csv.DictReader(out.open())}
    # one sequence waits for the rank with the most of its 8 experts; 512 share them all
    assert rows[("8", "1")] > 1.1 * rows[("", "1")]
    assert rows[("8", "512")] == pytest.approx(rows[("", "512")], rel=0.02)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "deepseek-v3", "--tp", "8", "--ep", "3"], "--ep 3: must divide --tp (8)"),
        (["--model", "llama-3-8b", "--tp", "8", "--ep", "8"], "--ep 8: needs a mixture of experts"),
        (["--d-model", "4096", "--heads", "32", "--tp", "2", "--ep", "2"], "--ep 2: needs a model"),
        (["--model", "deepseek-v3", "--ep", "0"], "--ep 0: must be >= 1"),
    ],
)
def test_what_ep_cannot_split_is_one_line(args, message):
    one_error(predict("--gpu", "h200", "--seq-len", "1024", *args), message)


def test_a_sweep_files_ep_is_located(tmp_path):
    study = tmp_path / "study.yaml"
    study.write_text(
        "models: [deepseek-v3]\npredict:\n  gpu: h200\n  tp: 4\n  ep: [1, 8]\n  seq_len: 1024\n"
    )
    one_error(predict("--config", study), f"predict.ep: 8 ({study}): must divide tp (4)")


def fit(*args):
    result = runner.invoke(app, ["fit", *map(str, args)], env={"COLUMNS": "200"})
    assert "Traceback" not in result.output, result.output
    return result


def test_fit_under_a_latency_target_waits_for_the_busiest_rank(tmp_path):
    out = tmp_path / "f.csv"
    common = ["--model", "deepseek-v3", "--gpu", "h200", "--gpus", "8", "--seq-len", "4096"]
    weights = ["--weights-dtype", "float8_e4m3fn", "--tpot", "30ms", "--csv", out]
    result = fit(*common, *weights, "--ep", "1,8")
    assert result.exit_code == 0, result.output
    assert re.search(r"┃\s*ep\s*┃", result.stdout), result.stdout
    rows = {r["ep"]: r for r in csv.DictReader(out.open())}
    # the same memory either way (whole experts, as many on each rank), fewer sequences
    # within the target where a step waits for the busiest rank
    assert rows["8"]["memory_batch"] == rows[""]["memory_batch"]
    assert 0 < int(rows["8"]["batch"]) < int(rows[""]["batch"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "llama-3-8b", "--ep", "2"], "--ep 2: needs a mixture of experts"),
        (["--model", "deepseek-v3", "--gpus", "8", "--ep", "3"], "--ep 3: must divide --tp (8)"),
    ],
)
def test_what_fit_cannot_split_is_one_line(args, message):
    one_error(fit("--gpu", "h200", "--seq-len", "4096", *args), message)
