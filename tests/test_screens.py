"""Every command's screen as a person sees it, 80 and 120 columns wide: no number, status
or name is ever cut ("…") or folded, and each row's key value is there, in full or in its
compact unit."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from attnbench.cli import app

runner = CliRunner()
WIDTHS = ["80", "120"]


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
    for total in ("67,108,864", "41,943,040", "37,748,736", "34,603,008"):
        assert total in text
    assert "d_model 4,096 · 32 heads · head_dim 128 · no bias" in " ".join(text.split())


@pytest.mark.parametrize("width", WIDTHS)
def test_kvmem(width):
    text = screen(width, "kvmem", "--model", "llama-3-70b", "--seq-len", "8192,32768",
                  "--no-measure")  # fmt: skip
    assert_readable(text, width)
    assert "2.50 GiB" in text and "10.00 GiB" in text and "320.00 KiB" in text
    assert "llama-3-70b · 80 layers" in " ".join(text.split())


@pytest.mark.parametrize("width", WIDTHS)
def test_decode(width, tmp_path):
    out = tmp_path / "d.json"
    text = screen(width, "decode-speed", "--d-model", "64", "--heads", "4", "--kv-heads", "4,1",
                  "--prompt-len", "16", "--gen-len", "2", "--repeats", "2", "--warmup", "0",
                  "--json", str(out))  # fmt: skip
    assert_readable(text, width)
    for record in json.loads(out.read_text())["records"]:
        assert f"{record['step_ms_median']:.3f}" in text
    flat = " ".join(text.split())
    assert "sdpa" in flat and "float32" in flat and "batch 1" in flat  # constant: the title


@pytest.mark.parametrize("width", WIDTHS)
def test_models(width):
    text = screen(width, "models")
    assert_readable(text, width)
    assert "deepseek-v2-lite" in text and "gpt3-175b" in text


@pytest.mark.parametrize("width", WIDTHS)
def test_compare_two_decode_results(width, tmp_path):
    paths = []
    for name in ("a", "b"):
        path = tmp_path / f"{name}.json"
        runner.invoke(app, ["decode-speed", "--d-model", "64", "--heads", "4", "--kv-heads",
                            "4,1", "--prompt-len", "16", "--gen-len", "2", "--repeats", "2",
                            "--warmup", "0", "--json", str(path), "-q"])  # fmt: skip
        paths.append(str(path))
    result = runner.invoke(app, ["compare", *paths, "--allow-env-mismatch"],
                           env={"COLUMNS": width})  # fmt: skip
    assert result.exit_code in (0, 1), result.output
    assert_readable(result.stdout, width)
    assert "step_ms_median" in result.stdout


@pytest.mark.parametrize("width", WIDTHS)
def test_fit(width):
    text = screen(width, "fit", "--model", "llama-3-70b", "--memory", "80GiB", "--gpus", "8",
                  "--seq-len", "8192")  # fmt: skip
    assert_readable(text, width)
    assert "Largest batch at 8,192 tokens: 177 sequences" in text
