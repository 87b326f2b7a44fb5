"""`attnbench fit` with --gpu and latency targets on the command line: one table row per
tensor-parallel degree within 80 columns, exit 1 when no batch meets a target, and every
bad input refused in one line with exit 2."""

from __future__ import annotations

import json

import pytest

from attnbench.cli import app
from tests.helpers import runner

TARGET = [
    "fit",
    "--model",
    "llama-3-70b",
    "--gpu",
    "h100-sxm",
    "--gpus",
    "8",
    "--tp",
    "1,2,4,8",
    "--seq-len",
    "8192",
]


def rows(text: str) -> dict[str, list[str]]:
    """The table's body rows by their first cell (tp)."""
    found = {}
    for line in text.splitlines():
        if line.startswith("│"):
            cells = [c.strip() for c in line.strip("│").split("│")]
            found[cells[0]] = cells
    return found


def test_one_row_per_tp_within_80_columns_and_exit_1_when_one_does_not_fit(tmp_path):
    out = tmp_path / "fit.json"
    result = runner.invoke(
        app, [*TARGET, "--tpot", "29ms", "--ttft", "2s", "--json", str(out)], env={"COLUMNS": "80"}
    )
    assert result.exit_code == 1, result.output  # tp 1: the weights alone do not fit
    table = [line for line in result.stdout.splitlines() if line[:1] in "┏┃┡│└"]
    assert table and max(len(line) for line in table) <= 80
    header = next(line for line in table if line.startswith("┃"))
    for column in ("tp", "batch", "fits", "TPOT ms", "tok/s/GPU", "TTFT ms", "set by"):
        assert column in header
    records = {r["tp"]: r for r in json.loads(out.read_text())["records"]}
    shown = rows(result.stdout)
    assert sorted(shown) == ["1", "2", "4", "8"]
    for tp, record in records.items():
        cells = shown[str(tp)]
        assert cells[1] == f"{record['batch']:,}" and cells[2] == f"{record['memory_batch']:,}"
    assert shown["1"][-2:] == ["memory", "no fit"]
    assert shown["8"][-2:] == ["latency", "ok"] and records[8]["batch"] < 162
    assert "weights alone do not fit" in result.stdout  # the note under the table
    assert "Performance model: efficiency_bw 1," in result.stdout and "(defaults)" in result.stdout
    assert "█" not in result.stdout  # no memory bar under targets


def test_the_memory_column_is_what_fit_answers_with_the_gpus_memory(tmp_path):
    within, today = tmp_path / "within.json", tmp_path / "today.json"
    runner.invoke(app, [*TARGET, "--tpot", "10s", "--json", str(within), "-q"])
    plain = [a if a != "--gpu" else "--memory" for a in TARGET]
    plain[plain.index("--memory") + 1] = "80GB"
    runner.invoke(app, [*plain, "--json", str(today), "-q"])
    answers = json.loads(within.read_text())["records"]
    memory = json.loads(today.read_text())["records"]
    assert [r["memory_batch"] for r in answers] == [r["batch"] for r in memory] == [0, 4, 108, 162]
    assert [r["bound"] for r in answers] == ["memory"] * 4


def test_no_batch_meets_the_target_exit_1_in_one_line():
    args = ["fit", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--seq-len", "8192"]
    result = runner.invoke(app, [*args, "--tpot", "1ms"])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: llama-3-8b: too slow: no batch meets tpot 1ms: ")
    assert len(result.stderr.strip().splitlines()) == 1


def test_without_a_target_the_gpu_gives_the_memory_and_the_answer_reads_as_today():
    result = runner.invoke(
        app,
        ["fit", "--model", "llama-3-70b", "--gpu", "h100-sxm", "--gpus", "8", "--seq-len", "8192"],
    )
    assert result.exit_code == 0, result.output
    assert "note: h100-sxm: 80GB = 80,000,000,000 bytes" in result.stdout
    assert "Largest batch at 8,192 tokens: 162 sequences" in result.stdout
    assert "▓" in result.stdout and "TPOT" not in result.stdout


BASE = ["fit", "--model", "llama-3-8b", "--seq-len", "8192"]
HINT = "expected a time with its unit: 50ms, 0.05s, 2s"


@pytest.mark.parametrize(
    "args, message",
    [
        (["--gpu", "h999", "--tpot", "50ms"], "--gpu h999: unknown value 'h999'; choose from "),
        (
            ["--gpu", "this", "--tpot", "50ms"],
            "--gpu this: fit needs a named GPU (h100-sxm, ",
        ),
        (["--gpu", "h100-sxm", "--tpot", "50"], f"--tpot 50: {HINT}"),
        (["--gpu", "h100-sxm", "--tpot", "-50ms"], "--tpot -50ms: must be a time above 0"),
        (["--gpu", "h100-sxm", "--ttft", "0s"], "--ttft 0s: must be a time above 0"),
        (
            ["--memory", "80GB", "--tpot", "50ms"],
            "--tpot 50ms: needs --gpu: the named GPU whose peaks time the step",
        ),
        (
            ["--gpu", "h100-sxm", "--calibration", "missing.json", "--tpot", "50ms"],
            "--calibration missing.json: no such file",
        ),
    ],
)
def test_bad_input_is_one_line_exit_2(args, message):
    result = runner.invoke(app, [*BASE, *args])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: {message}"), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.output


def test_a_target_with_batch_asks_for_seq_len():
    args = ["fit", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--batch", "8", "--tpot", "50ms"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert result.stderr == (
        "error: --tpot 50ms: latency targets answer the largest batch at seq_len; give "
        "seq_len, not batch\n"
    )


def test_ttft_without_tpot_is_a_question_of_its_own():
    result = runner.invoke(app, [*BASE, "--gpu", "h100-sxm", "--ttft", "2s"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert "time to first token <= 2 s" in result.stdout and "TTFT ms" in result.stdout


def test_mla_is_answered_with_float8_weights_and_the_latent_cache():
    args = ["fit", "--model", "deepseek-v3", "--gpu", "h200", "--gpus", "8", "--seq-len", "8192"]
    result = runner.invoke(app, [*args, "--tpot", "50ms", "--weights-dtype", "float8_e4m3fn"])
    assert result.exit_code == 0, result.output
    assert "MLA" in result.stdout and "TPOT ms" in result.stdout and "│ ok" in result.stdout
