"""Model presets against the values in each model's published config.json (or paper)."""

from __future__ import annotations

import json

import pytest

from attnbench.cli import app
from attnbench.errors import FieldError
from attnbench.model.dtypes import MODEL_DTYPES
from attnbench.model.presets import PRESETS, get_preset
from tests.helpers import runner

# name: (num_hidden_layers, hidden_size, num_attention_heads, num_key_value_heads,
#        head_dim, torch_dtype) as published. head_dim is hidden_size / heads except for
# gemma-7b, whose config.json sets head_dim 256 (16 * 256 = 4096 != 3072). GPT-3 175B has
# no config.json: its row is Table 2.1 of Brown et al. 2020 (d_head 128, MHA) and its dtype
# is not published, so it is None here.
PUBLISHED = {
    "llama-2-7b": (32, 4096, 32, 32, 128, "float16"),
    "llama-2-13b": (40, 5120, 40, 40, 128, "float16"),
    "llama-2-70b": (80, 8192, 64, 8, 128, "float16"),
    "llama-3-8b": (32, 4096, 32, 8, 128, "bfloat16"),
    "llama-3-70b": (80, 8192, 64, 8, 128, "bfloat16"),
    "mistral-7b": (32, 4096, 32, 8, 128, "bfloat16"),
    "mixtral-8x7b": (32, 4096, 32, 8, 128, "bfloat16"),
    "falcon-7b": (32, 4544, 71, 1, 64, "bfloat16"),
    "qwen2.5-7b": (28, 3584, 28, 4, 128, "bfloat16"),
    "gemma-7b": (28, 3072, 16, 16, 256, "bfloat16"),
    "gpt3-175b": (96, 12288, 96, 96, 128, None),
}

VARIANTS = {
    "llama-2-7b": "MHA",
    "llama-2-13b": "MHA",
    "llama-2-70b": "GQA-8",
    "llama-3-8b": "GQA-8",
    "llama-3-70b": "GQA-8",
    "mistral-7b": "GQA-8",
    "mixtral-8x7b": "GQA-8",
    "falcon-7b": "MQA",
    "qwen2.5-7b": "GQA-4",
    "gemma-7b": "MHA",
    "gpt3-175b": "MHA",
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_preset_matches_published_config(name):
    layers, d_model, heads, kv_heads, head_dim, dtype = PUBLISHED[name]
    spec = PRESETS[name]
    assert spec.name == name
    assert spec.num_layers == layers
    assert spec.d_model == d_model
    assert spec.num_heads == heads
    assert spec.num_kv_heads == kv_heads
    assert spec.head_dim == head_dim
    if dtype is None:
        assert spec.dtype in MODEL_DTYPES
    else:
        assert spec.dtype == dtype
    assert spec.source.strip(), "every preset names where its numbers come from"


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_preset_shape_and_variant(name):
    spec = PRESETS[name]
    shape = spec.attention_shape()
    assert shape.head_dim == spec.head_dim
    assert spec.variant == VARIANTS[name]
    if name == "gemma-7b":
        assert spec.num_heads * spec.head_dim != spec.d_model  # 16 * 256 = 4096 != 3072
    else:
        assert spec.num_heads * spec.head_dim == spec.d_model


def test_every_required_preset_exists():
    assert set(PUBLISHED) <= set(PRESETS)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("LLaMA-2-7B", "llama-2-7b"),
        ("Mistral-7B", "mistral-7b"),
        ("QWEN2.5-7B", "qwen2.5-7b"),
        ("  falcon-7b  ", "falcon-7b"),
        ("GPT3-175B", "gpt3-175b"),
    ],
)
def test_get_preset_is_case_insensitive(given, expected):
    assert get_preset(given) is PRESETS[expected]


@pytest.mark.parametrize(
    ("given", "suggestion"),
    [("llama2-7b", "llama-2-7b"), ("mistral7b", "mistral-7b"), ("gemma-7", "gemma-7b")],
)
def test_get_preset_unknown_suggests_closest(given, suggestion):
    with pytest.raises(FieldError) as info:
        get_preset(given)
    assert (info.value.field, info.value.value) == ("model", given)
    assert given in str(info.value)
    assert f"did you mean {suggestion!r}" in str(info.value)


def _table_rows(output: str) -> tuple[list[str], list[list[str]]]:
    """Header cells and body rows of a rich table rendered with heavy-head box lines."""
    header: list[str] = []
    rows: list[list[str]] = []
    for line in output.splitlines():
        if line.startswith("┃"):
            header = [c.strip() for c in line.strip().strip("┃").split("┃")]
        elif line.startswith("│"):
            rows.append([c.strip() for c in line.strip().strip("│").split("│")])
    return header, rows


def test_models_command_lists_every_preset_with_its_fields():
    # --wide: every column, the long Source one included, each cell on one line
    result = runner.invoke(app, ["models", "--wide"])
    assert result.exit_code == 0, result.output
    header, rows = _table_rows(result.stdout)
    for column in ("Name", "layers", "d_model", "heads", "kv heads", "head_dim", "dtype"):
        assert column in header
    assert any(h.lower() == "source" for h in header)
    col = {h: i for i, h in enumerate(header)}
    by_name = {r[col["Name"]]: r for r in rows if r[col["Name"]]}
    for name, (layers, d_model, heads, kv_heads, head_dim, _) in PUBLISHED.items():
        assert name in by_name, f"{name} missing from `attnbench models`"
        row = by_name[name]
        # integers are shown with thousands separators (4,096)
        assert row[col["layers"]] == f"{layers:,}"
        assert row[col["d_model"]] == f"{d_model:,}"
        assert row[col["heads"]] == f"{heads:,}"
        assert row[col["kv heads"]] == f"{kv_heads:,}"
        assert row[col["head_dim"]] == f"{head_dim:,}"
        assert row[col["Variant"]] == VARIANTS[name]
        assert row[col["dtype"]] == PRESETS[name].dtype
        source = next(r for h, r in zip(header, row, strict=True) if h.lower() == "source")
        assert source == PRESETS[name].source


def test_kvmem_model_flag_is_case_insensitive(tmp_path):
    out = tmp_path / "k.json"
    result = runner.invoke(
        app, ["kvmem", "--model", "LLaMA-2-7B", "--no-measure", "--json", str(out), "-q"]
    )
    assert result.exit_code == 0, result.output
    (rec,) = json.loads(out.read_text())["records"]
    assert rec["model"] == "llama-2-7b"
    assert rec["num_layers"] == 32
    assert rec["num_kv_heads"] == 32


@pytest.mark.parametrize("command", ["kvmem", "params"])
def test_unknown_model_exits_2_with_suggestion(command):
    result = runner.invoke(app, [command, "--model", "llama-2-7bb"])
    assert result.exit_code == 2
    assert result.output.startswith("error: --model llama-2-7bb: unknown model")
    assert "did you mean 'llama-2-7b'" in result.output
    assert "Traceback" not in result.output
    assert result.stdout == ""


@pytest.mark.parametrize("name", ["llama-3.1-8b", "llama-3.1-70b"])
def test_llama_3_1_presets_are_their_published_configs(name):
    """Llama 3.1: Llama 3's shapes with 131,072 positions (its RoPE scaled 8x); the preset
    reads as its config.json in docs/architectures/ does, every count alike."""
    from pathlib import Path

    from attnbench.model.hf_config import load_hf_config
    from attnbench.model.model_params import part_params

    root = Path(__file__).resolve().parents[2]
    read = load_hf_config(root / "docs" / "architectures" / f"{name}.json")
    preset = PRESETS[name]
    assert preset.max_position_embeddings == read.max_position_embeddings == 131072
    fields = ("num_layers", "d_model", "num_heads", "num_kv_heads", "head_dim", "dtype")
    assert [getattr(preset, f) for f in fields] == [getattr(read, f) for f in fields]
    assert preset.body == read.body
    assert part_params(preset) == part_params(read)
