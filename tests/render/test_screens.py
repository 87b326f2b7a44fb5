"""Every command's screen as a person sees it, 80 and 120 columns wide: no number, status
or name is ever cut ("…") or folded, and each row's key value is there, in full or in its
compact unit."""

from __future__ import annotations

import functools
import json

import pytest

from attnbench.cli import app
from attnbench.experiments import decode
from attnbench.render.columns import fmt_si
from attnbench.study.runner import run_experiment, run_study
from tests.helpers import runner

WIDTHS = ["80", "120"]


def timed(record: dict) -> bool:
    """The record holds a step time: its status is ok, or noisy with its reason."""
    return str(record["status"]).split(":", 1)[0] in ("ok", "noisy")


def screen(width: str, *args: str) -> str:
    result = runner.invoke(app, list(args), env={"COLUMNS": width})
    assert result.exit_code == 0, result.output
    return result.stdout


def assert_readable(text: str, width: str) -> None:
    assert "…" not in text
    for line in text.splitlines():
        if line[:1] in "┏┃┡│└":  # a table line fits the page; prose may wrap
            assert len(line) <= int(width), line


@pytest.mark.parametrize("width", WIDTHS)
def test_params(width):
    text = screen(width, "params", "--d-model", "4096", "--heads", "32", "--kv-heads", "32,8,4,1")
    assert_readable(text, width)
    for total in (67_108_864, 41_943_040, 37_748_736, 34_603_008):
        assert f"{total:,}" in text or fmt_si(total) in text
    assert "d_model 4,096 · 32 heads · head_dim 128 · no bias" in " ".join(text.split())


@pytest.mark.parametrize("width", WIDTHS)
def test_kvmem(width):
    text = screen(
        width, "kvmem", "--model", "llama-3-70b", "--seq-len", "8192,32768", "--no-measure"
    )
    assert_readable(text, width)
    assert "2.50 GiB" in text and "10.00 GiB" in text and "320.00 KiB" in text
    assert "llama-3-70b · 80 layers" in " ".join(text.split())


@pytest.mark.parametrize("width", WIDTHS)
def test_decode(width, tmp_path):
    out = tmp_path / "d.json"
    text = screen(
        width,
        "decode-speed",
        "--d-model",
        "64",
        "--heads",
        "4",
        "--kv-heads",
        "4,1",
        "--prompt-len",
        "16",
        "--gen-len",
        "2",
        "--repeats",
        "2",
        "--warmup",
        "0",
        "--json",
        str(out),
    )
    assert_readable(text, width)
    for record in json.loads(out.read_text())["records"]:
        assert f"{record['step_ms_median']:.3f}" in text
    flat = " ".join(text.split())
    assert "provider attnbench" in flat and "float32" in flat and "batch 1" in flat  # the title
    assert "by provider" not in text  # one provider: nothing side by side


@pytest.mark.parametrize("width", WIDTHS)
def test_decode_providers(width, tmp_path):
    """Two providers timed and one the CPU lacks: every row, the reason once, and the
    cached steps side by side."""
    out = tmp_path / "d.json"
    text = screen(
        width,
        "decode-speed",
        "--d-model",
        "64",
        "--heads",
        "4",
        "--kv-heads",
        "4,1",
        "--prompt-len",
        "16",
        "--provider",
        "attnbench,sdpa-math,sdpa-efficient",
        "--repeats",
        "3",
        "--warmup",
        "0",
        "--json",
        str(out),
    )
    assert_readable(text, width)
    records = json.loads(out.read_text())["records"]
    assert len(records) == 12
    main, side = text.split("Cached decode step, ms by provider")
    for record in records:
        if timed(record):
            assert f"{record['step_ms_median']:.3f}" in main
    headers = next(line for line in main.splitlines() if line.startswith("┃"))
    headers = [h.strip() for h in headers.split("┃")[1:-1]]
    assert headers[:4] == ["Variant", "provider", "Mode", "step ms"]  # context 16: the title
    assert "Status" in headers and main.count("unsupported") >= 4
    notes = [line for line in main.splitlines() if "no memory-efficient kernel" in line]
    assert notes == ["unsupported: no memory-efficient kernel on the CPU (sdpa-efficient, 4 rows)"]
    assert "not timed at any point: sdpa-efficient" in " ".join(side.split())
    rows = [line for line in side.splitlines() if line.startswith("│")]
    assert len(rows) == 2  # MHA and MQA at context 16, cached
    for row in rows:
        variant, attnbench, math, fastest = [c.strip() for c in row.split("│")[1:-1]]
        times = {
            r["provider"]: r["step_ms_median"]
            for r in records
            if (r["variant"], r["mode"]) == (variant, "cache") and timed(r)
        }
        assert attnbench == f"{times['attnbench']:.3f}"
        assert math.split()[0] == f"{times['sdpa-math']:.3f}"  # and its speed-up when room
        assert fastest == "not resolved"  # 3 rounds: no fastest named on a least median
    note = " ".join(side[side.index("note: fastest not resolved") :].split())
    assert "sampled over only 3 rounds" in note


@pytest.mark.parametrize("width", WIDTHS)
def test_models(width):
    text = screen(width, "models")
    assert_readable(text, width)
    assert "deepseek-v2-lite" in text and "gpt3-175b" in text


@pytest.fixture(scope="module")
def two_decode_results(tmp_path_factory) -> list[str]:
    """Two runs of the same decode points, as JSON: what compare is shown at each width."""
    folder = tmp_path_factory.mktemp("decode")
    paths = []
    for name in ("a", "b"):
        path = folder / f"{name}.json"
        runner.invoke(
            app,
            [
                "decode-speed",
                "--d-model",
                "64",
                "--heads",
                "4",
                "--kv-heads",
                "4,1",
                "--prompt-len",
                "16",
                "--gen-len",
                "2",
                "--repeats",
                "2",
                "--warmup",
                "0",
                "--json",
                str(path),
                "-q",
            ],
        )
        paths.append(str(path))
    return paths


@pytest.mark.parametrize("width", WIDTHS)
def test_compare_two_decode_results(width, two_decode_results):
    result = runner.invoke(
        app,
        ["compare", *two_decode_results, "--allow-env-mismatch", "--all"],
        env={"COLUMNS": width},
    )
    assert result.exit_code in (0, 1), result.output
    assert_readable(result.stdout, width)
    assert "step_ms_median" in result.stdout


@pytest.mark.parametrize("width", WIDTHS)
def test_fit(width):
    text = screen(
        width,
        "fit",
        "--model",
        "llama-3-70b",
        "--memory",
        "80GiB",
        "--gpus",
        "8",
        "--seq-len",
        "8192",
    )
    assert_readable(text, width)
    assert "Largest batch at 8,192 tokens: 177 sequences" in text


# ------------------------------------------------------------------ decode-speed's exit status

TINY_DECODE = [
    "decode-speed",
    "--d-model",
    "32",
    "--heads",
    "4",
    "--kv-heads",
    "4",
    "--prompt-len",
    "4",
    "--provider",
    "attnbench,naive,sdpa-math",
    "--repeats",
    "2",
    "--warmup",
    "0",
]


def with_statuses(monkeypatch, statuses: dict[str, str]) -> None:
    """decode-speed runs its points for real, but a provider named in `statuses` gives that
    status instead ('raise': an exception, which the runner records as an error)."""

    def execute(task, context):
        status = statuses.get(task.point.provider)
        if status is None:
            return run_experiment(task, context)
        if status == "raise":
            raise RuntimeError("the kernel crashed")
        return decode.failed(task.point, status, context)

    monkeypatch.setattr(
        "attnbench.study.runner.run_study", functools.partial(run_study, execute=execute)
    )


def test_unsupported_and_wrong_rows_are_not_errors(monkeypatch):
    with_statuses(
        monkeypatch,
        {
            "naive": "wrong: max error 0.5 against the reference, above 0.001",
            "sdpa-math": "unsupported: no math kernel today",
        },
    )
    result = runner.invoke(app, TINY_DECODE, env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert result.stderr.strip() == (
        "warning: 1 provider disagrees with the reference: naive at 2 points (max error 0.5 "
        "against the reference, above 0.001)"
    )
    assert "wrong: max error 0.5 against the reference, above 0.001 (naive, 2 rows)" in (
        result.stdout
    )
    assert "unsupported: no math kernel today (sdpa-math, 2 rows)" in result.stdout
    assert "did not complete" not in result.output
    assert_readable(result.stdout, "80")


def test_failed_points_exit_1(monkeypatch):
    with_statuses(monkeypatch, {"naive": "raise", "sdpa-math": "unsupported: no math kernel"})
    result = runner.invoke(app, TINY_DECODE, env={"COLUMNS": "80"})
    assert result.exit_code == 1
    assert (
        "2 of 6 points did not complete: error: RuntimeError: the kernel crashed" in result.stderr
    )
    assert "sdpa-math" not in result.stderr  # unsupported: not a failure
