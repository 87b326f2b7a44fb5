"""Bad input in a Hugging Face config.json: dtype beside torch_dtype, keys given twice,
names that would break a line or drive the terminal, sub-configs that are no objects.

Every file is written by the test into tmp_path; nothing is downloaded.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnbench.cli import app
from attnbench.errors import UsageError
from attnbench.model.hf_config import load_hf_config
from tests.helpers import runner
from tests.model.test_hf_config import expect_usage_error, write_config

SMALL = {"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2}


# --- dtype and torch_dtype ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"dtype": "float16"}, "float16"),
        ({"torch_dtype": "float16"}, "float16"),
        ({"dtype": "bfloat16", "torch_dtype": "bfloat16"}, "bfloat16"),
        ({"dtype": "bfloat16", "torch_dtype": "torch.bfloat16"}, "bfloat16"),
        ({"dtype": "float16", "torch_dtype": None}, "float16"),
        ({}, "float32"),
    ],
)
def test_dtype_from_either_field(tmp_path, given, expected):
    assert load_hf_config(write_config(tmp_path, {**SMALL, **given})).dtype == expected


def test_dtype_and_torch_dtype_that_disagree_are_refused(tmp_path):
    cfg = {**SMALL, "torch_dtype": "bfloat16", "dtype": "float32"}
    expect_usage_error(
        write_config(tmp_path, cfg),
        "contradictory",
        "'dtype': 'float32'",
        "'torch_dtype': 'bfloat16'",
    )


def test_a_bad_dtype_is_blamed_on_dtype(tmp_path):
    path = write_config(tmp_path, {**SMALL, "dtype": "float64"})
    expect_usage_error(path, "field 'dtype' is 'float64'")
    with pytest.raises(UsageError) as info:
        load_hf_config(path)
    assert "torch_dtype" not in str(info.value)


def test_a_bad_torch_dtype_is_blamed_on_torch_dtype(tmp_path):
    expect_usage_error(
        write_config(tmp_path, {**SMALL, "torch_dtype": "float64"}), "field 'torch_dtype'"
    )


def test_text_config_dtype_wins_over_the_top_level(tmp_path):
    text = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4}
    cfg = {
        "model_type": "llava",
        "torch_dtype": "bfloat16",
        "text_config": {**text, "num_hidden_layers": 2, "dtype": "float16"},
    }
    assert load_hf_config(write_config(tmp_path, cfg)).dtype == "float16"


def test_text_config_takes_the_top_level_dtype(tmp_path):
    text = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4}
    cfg = {
        "model_type": "llava",
        "dtype": "float16",
        "text_config": {**text, "num_hidden_layers": 2},
    }
    assert load_hf_config(write_config(tmp_path, cfg)).dtype == "float16"


# --- keys given twice ---------------------------------------------------------------------


def test_a_key_given_twice_is_refused(tmp_path):
    text = (
        '{"model_type":"llama","hidden_size":4096,"num_attention_heads":32,'
        '"num_hidden_layers":2,"hidden_size":2048}'
    )
    path = write_config(tmp_path, text)
    expect_usage_error(path, str(path), "duplicate key 'hidden_size'")


def test_a_key_given_twice_in_text_config_is_refused(tmp_path):
    text = (
        '{"model_type":"llava","text_config":{"model_type":"llama","hidden_size":64,'
        '"num_attention_heads":4,"num_hidden_layers":2,"num_attention_heads":8}}'
    )
    expect_usage_error(write_config(tmp_path, text), "duplicate key 'num_attention_heads'")


def test_a_key_given_twice_deeper_down_is_refused(tmp_path):
    text = json.dumps(SMALL)[:-1] + ', "rope_scaling": {"factor": 8, "factor": 2}}'
    expect_usage_error(write_config(tmp_path, text), "duplicate key 'factor'")


# --- model names --------------------------------------------------------------------------


def test_a_name_with_a_line_break_stays_on_one_line(tmp_path):
    path = write_config(tmp_path, {**SMALL, "_name_or_path": "evil\nerror: fake"})
    assert load_hf_config(path).name == repr("evil\nerror: fake")
    result = runner.invoke(app, ["params", "--hf-config", str(path), "--kv-heads", "3"])
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1, result.output
    assert "'evil\\nerror: fake'" in result.output


def test_a_name_with_a_terminal_escape_is_escaped(tmp_path):
    path = write_config(tmp_path, {**SMALL, "_name_or_path": "red\x1b[31m"})
    assert load_hf_config(path).name == repr("red\x1b[31m")
    result = runner.invoke(app, ["kvmem", "--hf-config", str(path), "--no-measure"])
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output


def test_a_file_name_with_a_line_break_names_the_model_on_one_line(tmp_path):
    path = tmp_path / "a\nb.json"
    path.write_text(json.dumps(SMALL))
    assert load_hf_config(path).name == repr("a\nb")


def test_an_unreadable_file_with_a_line_break_is_named_on_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a short path, shown whole
    path = Path("a\nb.json")
    path.write_text('{"model_type":')
    expect_usage_error(path, "'a\\nb.json': not valid JSON")


def test_a_plain_name_is_kept(tmp_path):
    path = write_config(tmp_path, {**SMALL, "_name_or_path": "org/My Model-7B"})
    assert load_hf_config(path).name == "org/My Model-7B"


# --- sub-configs that are no objects ------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "shown"), [([1, 2], "[1, 2]"), ("llama", "'llama'"), (None, "null"), (3, "3")]
)
def test_text_config_must_be_an_object(tmp_path, value, shown):
    cfg = {"model_type": "llava", "text_config": value}
    expect_usage_error(
        write_config(tmp_path, cfg), "field 'text_config': expected an object, got " + shown
    )


def test_text_config_beside_top_level_fields_must_be_an_object(tmp_path):
    cfg = {**SMALL, "text_config": [1]}
    expect_usage_error(write_config(tmp_path, cfg), "field 'text_config': expected an object")


def test_attn_config_must_be_an_object(tmp_path):
    cfg = {"model_type": "dbrx", "d_model": 64, "n_heads": 4, "n_layers": 2, "attn_config": "x"}
    expect_usage_error(write_config(tmp_path, cfg), "field 'attn_config': expected an object")


def test_attn_config_null_takes_the_default(tmp_path):
    cfg = {"model_type": "dbrx", "d_model": 64, "n_heads": 4, "n_layers": 2, "attn_config": None}
    assert load_hf_config(write_config(tmp_path, cfg)).num_kv_heads == 4


def test_linear_attn_config_must_be_an_object(tmp_path):
    cfg = {
        "model_type": "kimi_linear",
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_hidden_layers": 4,
        "linear_attn_config": [1],
    }
    expect_usage_error(
        write_config(tmp_path, cfg), "field 'linear_attn_config': expected an object"
    )


def test_per_layer_config_must_be_an_object(tmp_path):
    cfg = {**SMALL, "model_type": "other", "per_layer_config": [{"head_dim": 512}]}
    expect_usage_error(write_config(tmp_path, cfg), "field 'per_layer_config': expected an object")
