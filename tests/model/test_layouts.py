"""Layouts given as flags: a layer pattern of bounded (L) and global (G) layers, with the
window of the bounded ones, which is how a chunked layer is sized too (at most one chunk)."""

from __future__ import annotations

import json

import pytest

from attnbench.cli import app
from attnbench.errors import FieldError
from attnbench.model.capacity import layer_windows, pattern_bounded
from attnbench.model.hf_config import spec_from_hf_config
from tests.helpers import runner


def test_a_pattern_repeats_over_the_layers_from_the_first():
    assert pattern_bounded("LLLG", 6) == [True, True, True, False, True, True]
    assert layer_windows(4, None, 16, "LG") == (16, None, 16, None)
    assert layer_windows(3, None, None, "G") == (None, None, None)


def test_a_pattern_takes_the_models_window_when_none_is_given():
    assert layer_windows(4, (8, 8, 8, 8), None, "LLLG") == (8, 8, 8, None)


@pytest.mark.parametrize("bad", ["", "LLX", "lg"])
def test_other_letters_are_refused(bad):
    with pytest.raises(FieldError, match="expected letters L"):
        layer_windows(4, None, 16, bad)


def test_flags_give_the_layout_a_config_declares(tmp_path):
    """Command R7B's layout (sliding_window_pattern 4) from flags on a config without one."""
    fields = {
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "num_hidden_layers": 32,
        "torch_dtype": "bfloat16",
    }
    cohere2 = spec_from_hf_config(
        {**fields, "model_type": "cohere2", "sliding_window": 4096}, "c", "c"
    )
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({**fields, "model_type": "llama"}))
    out = tmp_path / "k.json"
    args = ["kvmem", "--hf-config", str(plain), "--seq-len", "32768", "--no-measure"]
    result = runner.invoke(
        app, [*args, "--layer-pattern", "LLLG", "--sliding-window", "4096", "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    (record,) = json.loads(out.read_text())["records"]
    assert layer_windows(32, cohere2.windows, None) == layer_windows(32, None, 4096, "LLLG")
    assert record["kv_bytes"] == 1.375 * 2**30  # 8 global layers of 32k, 24 of 4k
    assert record["layer_pattern"] == "LLLG" and record["windowed_layers"] == 24


def test_a_pattern_without_a_window_names_the_field():
    result = runner.invoke(app, ["kvmem", "--model", "llama-3-8b", "--layer-pattern", "LG"])
    assert result.exit_code == 2
    assert "--layer-pattern LG: needs sliding_window" in result.output


def test_a_window_beside_patterns_of_global_layers_alone_is_refused():
    args = ["kvmem", "--model", "llama-3-8b", "--no-measure", "--sliding-window", "4096"]
    result = runner.invoke(app, [*args, "--layer-pattern", "GG"])
    assert result.exit_code == 2
    assert result.stderr == (
        "error: --sliding-window 4096: has no effect: --layer-pattern GG has no L layer to bound\n"
    )
    assert runner.invoke(app, [*args, "--layer-pattern", "GG,LG", "-q"]).exit_code == 0
