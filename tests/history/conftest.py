"""The results the history tests store: a real decode sweep (timings with their raw
samples) and a kvmem one (exact metrics), each made once per module."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnbench.cli import app
from tests.helpers import runner


def _results(out: Path, *args: str) -> dict:
    """The results document a command run with `args` writes as its --json."""
    result = runner.invoke(app, [*args, "--json", str(out), "-q"])
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def decode_run(tmp_path_factory) -> dict:
    """A real decode-speed results document (four points, raw samples kept)."""
    out = tmp_path_factory.mktemp("history") / "decode.json"
    shape = ["--d-model", "64", "--heads", "4", "--kv-heads", "4,1", "--prompt-len", "16"]
    timing = ["--repeats", "20", "--warmup", "1", "--no-prefill", "--reference", "none"]
    return _results(out, "decode-speed", *shape, *timing)


@pytest.fixture(scope="module")
def kvmem_run(tmp_path_factory) -> dict:
    """A kvmem results document (exact metrics of an MHA and an MQA point): made at once."""
    out = tmp_path_factory.mktemp("kvmem") / "kvmem.json"
    shape = ["--d-model", "64", "--heads", "4", "--kv-heads", "4,1"]
    return _results(out, "kvmem", *shape, "--no-measure")
