"""`attnbench selfcheck`: the device checks pass where they should and can fail."""

import pytest
import torch
from typer.testing import CliRunner

from attnbench.cli import app
from attnbench.experiments import selfcheck

runner = CliRunner()


def test_selfcheck_passes_on_the_cpu():
    result = runner.invoke(app, ["selfcheck", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    assert "0 failed" in result.output and "FAIL" not in result.output


def test_selfcheck_reports_a_broken_backend(monkeypatch):
    def broken(q, k, v, *args, **kwargs):
        return torch.zeros_like(q)

    monkeypatch.setattr("attnbench.modules.attention.F.scaled_dot_product_attention", broken)
    result = runner.invoke(app, ["selfcheck", "--device", "cpu"])
    assert result.exit_code == 1
    assert "FAIL MHA sdpa float32 vs float64" in result.output


@pytest.mark.cuda
def test_selfcheck_passes_on_cuda():
    results = selfcheck.run_checks(torch.device("cuda"))
    assert [r.name for r in results if not r.passed] == []
    assert any(r.name == "CUDA-graph decode" for r in results)
