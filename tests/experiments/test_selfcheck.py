"""`attnbench selfcheck`: the device checks pass where they should and can fail."""

import pytest
import torch

from attnbench.cli import app
from attnbench.experiments import selfcheck
from attnbench.experiments.decode import build_layer
from attnbench.modules.attention import GroupedQueryAttention
from tests.helpers import runner


def test_selfcheck_passes_on_the_cpu():
    result = runner.invoke(app, ["selfcheck", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    assert "0 failed" in result.output and "FAIL" not in result.output
    assert "PASS MQA naive float32 cached decode == full pass" in result.output
    # a provider's line says its output was checked, not how its one timed sample spread
    assert "step vs reference: output within the tolerance of the reference" in result.output
    assert "noisy" not in result.output
    assert "KV cache measured == analytic: 32,768,000 vs 32,768,000 bytes (ok)" in result.output


class HalfOutputAttention(GroupedQueryAttention):
    """A broken backend: every output is half what the layer's weights give."""

    def forward(self, *args, **kwargs):
        return 0.5 * super().forward(*args, **kwargs)


def broken_sdpa(shape, backend, dtype, device):
    """The selfcheck's layer, but with the sdpa backend broken (the same weights)."""
    layer = build_layer(shape, backend, dtype, device)
    if backend != "sdpa":
        return layer
    broken = HalfOutputAttention(
        shape.d_model,
        shape.num_heads,
        shape.num_kv_heads,
        shape.head_dim,
        shape.bias,
        backend=backend,
        device=device,
        dtype=dtype,
    )
    broken.load_state_dict(layer.state_dict())
    return broken


def test_selfcheck_reports_a_broken_backend():
    checks = selfcheck.check_backends(torch.device("cpu"), torch.float32, build=broken_sdpa)
    results = {r.name: r for r in checks}
    assert not results["MHA sdpa float32 vs float64"].passed
    assert results["MHA sdpa float32 vs float64"].detail == "rel err 5.00e-01"
    assert results["MHA naive float32 vs float64"].passed
    # the fixed calls the timings run are not the broken forward: they disagree with it
    assert not results["MQA sdpa float32 cached decode == full pass"].passed
    assert results["MQA naive float32 cached decode == full pass"].passed


def test_selfcheck_command_passes_on_the_cpu():
    result = runner.invoke(app, ["selfcheck", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    assert "PASS MHA sdpa float32 vs float64" in result.output
    assert "FAIL" not in result.output and ", 0 failed on cpu" in result.output
    assert "PASS provider sdpa-flash float32 step vs reference" in result.output


@pytest.mark.cuda
def test_selfcheck_passes_on_cuda():
    results = selfcheck.run_checks(torch.device("cuda"))
    assert [r.name for r in results if not r.passed] == []
    assert any(r.name == "CUDA-graph decode" for r in results)
