"""Sweep files: loading, validation (every problem exits 2 with a message, never a
traceback), the Cartesian grid, flags overriding the file, and the shipped configs."""

from __future__ import annotations

import itertools
import json
import textwrap
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnbench.cli import app
from attnbench.errors import UsageError
from attnbench.experiments.kvmem import KvmemPoint
from attnbench.experiments.params import ParamsPoint
from attnbench.model.presets import PRESETS
from attnbench.records import failed
from attnbench.study.runner import DEFAULT_CONFIG
from attnbench.study.sweep import load_config, resolve
from tests.helpers import one_error, runner

ROOT = Path(__file__).resolve().parents[2]
#: The example sweep files shipped beside the package.
CONFIGS = ROOT / "configs"
#: The default study, shipped inside the package (what `attnbench run` runs).
DEFAULT = ROOT / "attnbench" / "configs" / "default.yaml"


def write_yaml(tmp_path, text: str, name: str = "study.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def run_json(tmp_path, command: str, *args) -> list[dict]:
    """Run a command quietly with --json and return its records."""
    out = tmp_path / f"{command}.json"
    result = runner.invoke(app, [command, *map(str, args), "--json", str(out), "-q"])
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text())["records"]


def error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.strip()]


# ------------------------------------------------------------------- the grid


def test_no_file_is_an_empty_config():
    config = load_config(None)
    assert config.sections == {}


def test_cartesian_grid(tmp_path):
    path = write_yaml(
        tmp_path,
        """
        defaults:
          num_heads: 8
        sweep:
          d_model: [256, 512]
          num_kv_heads: [8, 2, 1]
          batch: [1, 2]
        kvmem:
          seq_len: [16, 32]
          dtype: float32
        """,
    )
    study = resolve(load_config(path), "kvmem")
    points = study.points()
    assert all(isinstance(p, KvmemPoint) for p in points)
    got = sorted((p.d_model, p.num_kv_heads, p.batch, p.seq_len) for p in points)
    want = sorted(itertools.product([256, 512], [8, 2, 1], [1, 2], [16, 32]))
    assert got == want  # 2 * 3 * 2 * 2 = 24 points, each once
    assert {p.dtype for p in points} == {"float32"}
    assert {p.num_heads for p in points} == {8}


def test_precedence_defaults_sweep_section_flags(tmp_path):
    path = write_yaml(
        tmp_path,
        """
        defaults:
          d_model: 512
          num_heads: 8
          batch: 1
          dtype: float32
        sweep:
          batch: [2, 3]
        kvmem:
          dtype: bfloat16
        """,
    )
    config = load_config(path)
    study = resolve(config, "kvmem")
    assert study.values["batch"] == [2, 3]  # sweep over defaults
    assert study.values["dtype"] == ["bfloat16"]  # the command's section over defaults
    study = resolve(config, "kvmem", {"batch": [7], "dtype": ["float16"]})
    assert study.values["batch"] == [7]  # flags over everything
    assert study.values["dtype"] == ["float16"]


def test_num_kv_heads_defaults_to_num_heads(tmp_path):
    path = write_yaml(tmp_path, "defaults:\n  d_model: 512\n  num_heads: 8\n")
    (p,) = resolve(load_config(path), "params").points()
    assert isinstance(p, ParamsPoint)
    assert (p.d_model, p.num_heads, p.num_kv_heads, p.head_dim) == (512, 8, 8, None)


def test_models_from_presets_and_config_json_beside_the_file(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(
        json.dumps(
            {
                "hidden_size": 1024,
                "num_attention_heads": 16,
                "num_key_value_heads": 4,
                "num_hidden_layers": 6,
                "torch_dtype": "float16",
            }
        )
    )
    path = write_yaml(
        tmp_path,
        """
        models: [Mistral-7B, m/config.json]
        kvmem:
          seq_len: 8
        """,
    )
    records = run_json(tmp_path, "kvmem", "--config", path, "--no-measure")
    by_layers = {r["num_layers"]: r for r in records}
    assert set(by_layers) == {32, 6}
    assert by_layers[32]["model"] == "mistral-7b"
    # the config.json model: 2 * 6 layers * 4 KV heads * 64 (1024 / 16) * 2 bytes = 6,144
    assert by_layers[6]["bytes_per_token"] == 6_144


@settings(max_examples=25, deadline=None)
@given(
    kv=st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=4, unique=True),
    batch=st.lists(st.integers(1, 64), min_size=1, max_size=3, unique=True),
    seq=st.lists(st.integers(1, 4096), min_size=1, max_size=3, unique=True),
    layers=st.lists(st.integers(1, 80), min_size=1, max_size=2, unique=True),
)
def test_grid_size_is_the_product(kv, batch, seq, layers):
    from attnbench.study.sweep import StudyConfig

    config = StudyConfig(
        {
            "defaults": {"d_model": 512, "num_heads": 8},
            "sweep": {"num_kv_heads": kv, "batch": batch, "seq_len": seq, "num_layers": layers},
        }
    )
    points = resolve(config, "kvmem").points()
    assert len(points) == len(kv) * len(batch) * len(seq) * len(layers)
    combos = {(p.num_kv_heads, p.batch, p.seq_len, p.num_layers) for p in points}
    assert combos == set(itertools.product(kv, batch, seq, layers))


# ---------------------------------------------------------- flags override the file


BATCH_FILE = """
defaults:
  d_model: 512
  num_heads: 8
sweep:
  num_kv_heads: [8, 1]
kvmem:
  batch: [1, 2]
  seq_len: [16]
"""


def test_flag_overrides_file_axis(tmp_path):
    path = write_yaml(tmp_path, BATCH_FILE)
    records = run_json(tmp_path, "kvmem", "--config", path, "--no-measure")
    assert sorted({r["batch"] for r in records}) == [1, 2]
    records = run_json(tmp_path, "kvmem", "--config", path, "--batch", 4, "--no-measure")
    assert {r["batch"] for r in records} == {4}
    assert len(records) == 2  # MHA and MQA, batch 4 only


def test_kv_heads_flag_overrides_sweep(tmp_path):
    path = write_yaml(tmp_path, BATCH_FILE)
    records = run_json(tmp_path, "kvmem", "--config", path, "--kv-heads", 2, "--no-measure")
    assert {r["num_kv_heads"] for r in records} == {2}
    assert {r["num_heads"] for r in records} == {8}


def test_kv_heads_flag_on_the_article_config(tmp_path):
    path = CONFIGS / "article-tables.yaml"
    (rec,) = run_json(tmp_path, "kvmem", "--config", path, "--kv-heads", 8, "--no-measure")
    # 2 * 8 KV heads * 128 * 2 bytes * 32 * 2048 = 268,435,456 (256 MiB)
    assert (rec["num_heads"], rec["num_kv_heads"], rec["head_dim"]) == (32, 8, 128)
    assert rec["kv_bytes_per_layer"] == 256 * 1024**2


def test_head_dim_flag_overrides_only_head_dim(tmp_path):
    path = write_yaml(tmp_path, BATCH_FILE)
    records = run_json(tmp_path, "kvmem", "--config", path, "--head-dim", 32, "--no-measure")
    assert {(r["num_heads"], r["head_dim"]) for r in records} == {(8, 32)}
    assert {r["num_kv_heads"] for r in records} == {8, 1}


def test_model_flag_replaces_file_shapes_and_models(tmp_path):
    path = write_yaml(tmp_path, BATCH_FILE + "models: [llama-2-7b]\n")
    records = run_json(tmp_path, "kvmem", "--config", path, "--model", "falcon-7b", "--no-measure")
    assert {r["model"] for r in records} == {"falcon-7b"}
    assert {r["batch"] for r in records} == {1, 2}  # the file's other axes still apply


def test_shape_flags_replace_file_models(tmp_path):
    path = write_yaml(tmp_path, BATCH_FILE + "models: [llama-2-7b]\n")
    records = run_json(
        tmp_path, "kvmem", "--config", path, "--d-model", 256, "--heads", 4, "--no-measure"
    )
    assert {r["model"] for r in records} == {None}
    assert {(r["num_heads"], r["num_kv_heads"], r["head_dim"]) for r in records} == {(4, 4, 64)}


def test_measure_flag_overrides_file(tmp_path):
    path = write_yaml(tmp_path, BATCH_FILE + "  measure: true\n  device: cpu\n")
    records = run_json(tmp_path, "kvmem", "--config", path, "--no-measure")
    assert all(r["measured_bytes"] is None for r in records)
    records = run_json(tmp_path, "kvmem", "--config", path)
    assert all(r["measured_bytes"] == r["kv_bytes"] for r in records)


def test_bias_in_params_section(tmp_path):
    path = write_yaml(tmp_path, "defaults:\n  d_model: 64\n  num_heads: 4\nparams:\n  bias: true\n")
    (rec,) = run_json(tmp_path, "params", "--config", path)
    # 4 * 64 * 64 weights + (64 + 64 + 64 + 64) biases
    assert rec["total_params"] == 4 * 64 * 64 + 4 * 64
    (rec,) = run_json(tmp_path, "params", "--config", path, "--no-bias")
    assert rec["total_params"] == 4 * 64 * 64


# ------------------------------------------------------------------------ errors

# (file text, strings the message must contain). Each is a problem of its own class.
LOAD_ERRORS = {
    "unknown top-level key": (
        "sweeps:\n  num_kv_heads: [8]\n",
        ["'sweeps'", "did you mean 'sweep'"],
    ),
    "unknown field in a section": (
        "defaults:\n  d_model: 512\n  num_heads: 8\n  num_kv_head: 2\n",
        ["'num_kv_head'", "did you mean 'num_kv_heads'"],
    ),
    "unknown field in a command section": (
        "kvmem:\n  seqlen: [16]\n",
        ["'seqlen'", "did you mean 'seq_len'"],
    ),
    "wrong type": (
        "defaults:\n  d_model: abc\n  num_heads: 8\n",
        ["d_model", "abc", "integer"],
    ),
    "wrong type in a list": (
        "sweep:\n  batch: [1, two]\n",
        ["batch", "two"],
    ),
    "wrong bool": (
        "params:\n  bias: maybe\n",
        ["bias", "maybe"],
    ),
    "below the minimum": (
        "sweep:\n  seq_len: [0, 16]\n",
        ["seq_len", ">= 1"],
    ),
    "list in defaults": (
        "defaults:\n  batch: [1, 2]\n",
        ["defaults.batch", "list"],
    ),
    "empty list": (
        "defaults:\n  d_model: 512\n  num_heads: 8\nsweep:\n  num_kv_heads: []\n",
        ["num_kv_heads", "empty"],
    ),
    "unknown dtype": (
        "kvmem:\n  dtype: float61\n",
        ["float61", "did you mean 'float16'", "float32", "bfloat16"],
    ),
    "a GPU's family, not its name": (
        "predict:\n  gpu: h100\n",
        ["'h100'", "did you mean 'h100-sxm', 'h100-pcie' or 'h100-nvl'?"],
    ),
    "unknown dtype in a list": (
        "sweep:\n  dtype: [float32, bfloat61]\n",
        ["bfloat61", "did you mean 'bfloat16'"],
    ),
    "field that does not apply to the section": (
        "params:\n  seq_len: 16\n",
        ["seq_len", "params"],
    ),
    "list for a scalar option": (
        "kvmem:\n  device: [cpu, cuda]\n",
        ["device", "single value"],
    ),
    "section not a mapping": (
        "defaults: [1, 2]\n",
        ["defaults", "mapping"],
    ),
    "models not a list": (
        "models: llama-2-7b\n",
        ["models", "list"],
    ),
    "top level not a mapping": (
        "- d_model\n- 512\n",
        ["mapping"],
    ),
    "yaml syntax error (indentation)": (
        "defaults:\n  d_model: 512\n num_heads: 8\n",
        ["YAML", "line 3"],
    ),
    "yaml syntax error (tab)": (
        "defaults:\n  d_model: 512\n\tnum_heads: 8\n",
        ["YAML", "line 3"],
    ),
}


@pytest.mark.parametrize("command", ["kvmem", "params"])
@pytest.mark.parametrize("case", sorted(LOAD_ERRORS))
def test_file_errors_exit_2(tmp_path, command, case):
    text, needles = LOAD_ERRORS[case]
    path = write_yaml(tmp_path, text)
    out = tmp_path / "never.csv"
    result = runner.invoke(app, [command, "--config", str(path), "--csv", str(out)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.stdout == ""  # nothing ran, no table
    assert not out.exists()  # validated before anything ran
    lines = error_lines(result.output)
    assert len(lines) == 1, lines  # one problem, one line
    assert lines[0].startswith("error:")
    for needle in needles:
        assert needle in lines[0]
    assert str(path) in lines[0]  # names the file


def test_invalid_combination_names_the_point(tmp_path):
    path = write_yaml(
        tmp_path,
        "defaults:\n  d_model: 512\n  num_heads: 8\nsweep:\n  num_kv_heads: [8, 3, 1]\n",
    )
    result = runner.invoke(app, ["kvmem", "--config", str(path), "--no-measure"])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    (line,) = error_lines(result.output)
    assert "invalid combination" in line
    for value in ("d_model=512", "num_heads=8", "num_kv_heads=3"):
        assert value in line


def test_invalid_combination_head_dim(tmp_path):
    path = write_yaml(tmp_path, "defaults:\n  d_model: 500\n  num_heads: 8\n")
    result = runner.invoke(app, ["params", "--config", str(path)])
    assert result.exit_code == 2
    assert "d_model=500" in result.output and "num_heads=8" in result.output


def test_a_file_value_is_named_by_section_field_and_file(tmp_path):
    path = write_yaml(tmp_path, "defaults: {d_model: 512, num_heads: 8}\nkvmem:\n  tp: 3\n")
    result = runner.invoke(app, ["kvmem", "--config", str(path), "--no-measure"])
    assert result.exit_code == 2
    (line,) = error_lines(result.output)
    assert (
        line
        == f"error: kvmem.tp: 3 ({path}): does not divide the 8 query heads; tp may be 1, 2, 4 or 8"
    )


def test_a_flag_value_is_named_by_its_flag(tmp_path):
    path = write_yaml(tmp_path, "defaults: {d_model: 512, num_heads: 8}\n")
    result = runner.invoke(app, ["kvmem", "--config", str(path), "--tp", "3", "--no-measure"])
    assert result.exit_code == 2
    (line,) = error_lines(result.output)
    assert line == "error: --tp 3: does not divide the 8 query heads; tp may be 1, 2, 4 or 8"


@pytest.mark.parametrize(
    ("text", "start"),
    [
        ("kvmem:\n  dtype: float61\n", "kvmem.dtype: float61"),
        ("sweep:\n  seq_len: [0, 16]\n", "sweep.seq_len: 0"),
    ],
)
def test_a_value_rejected_on_loading_is_named_by_section_field_and_file(tmp_path, text, start):
    path = write_yaml(tmp_path, text)
    result = runner.invoke(app, ["kvmem", "--config", str(path)])
    assert result.exit_code == 2
    (line,) = error_lines(result.output)
    assert line.startswith(f"error: {start} ({path}): "), line


def test_every_problem_reported_once(tmp_path):
    path = write_yaml(
        tmp_path,
        """
        defaults:
          d_model: abc
          num_kv_head: 2
        sweeps: {}
        kvmem:
          dtype: float61
          batch: []
        params:
          seq_len: 5
        """,
    )
    result = runner.invoke(app, ["kvmem", "--config", str(path)])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    lines = error_lines(result.output)
    assert len(lines) == 6, lines
    assert all(line.startswith("error:") for line in lines)
    for needle in ("d_model", "num_kv_head", "sweeps", "float61", "batch", "seq_len"):
        assert sum(needle in line for line in lines) >= 1


def test_unknown_model_in_file(tmp_path):
    path = write_yaml(tmp_path, "models: [llama2-7b]\n")
    result = runner.invoke(app, ["kvmem", "--config", str(path), "--no-measure"])
    assert result.exit_code == 2
    assert "llama2-7b" in result.output
    assert "did you mean 'llama-2-7b'" in result.output
    assert "Traceback" not in result.output


def test_missing_config_json_in_file(tmp_path):
    path = write_yaml(tmp_path, "models: [nowhere/config.json]\n")
    result = runner.invoke(app, ["kvmem", "--config", str(path), "--no-measure"])
    assert result.exit_code == 2
    assert "no such file" in result.output
    assert "Traceback" not in result.output


def test_nothing_to_run(tmp_path):
    path = write_yaml(tmp_path, "kvmem:\n  batch: [1]\n")
    result = runner.invoke(app, ["kvmem", "--config", str(path), "--no-measure"])
    assert result.exit_code == 2
    assert "nothing to run" in result.output


@pytest.mark.parametrize("command", ["kvmem", "params"])
def test_missing_file(tmp_path, command):
    path = tmp_path / "missing.yaml"
    result = runner.invoke(app, [command, "--config", str(path)])
    assert result.exit_code == 2
    assert "no such file" in result.output
    assert str(path) in result.output
    assert "Traceback" not in result.output


def test_directory_instead_of_file(tmp_path):
    result = runner.invoke(app, ["kvmem", "--config", str(tmp_path)])
    assert result.exit_code == 2
    assert "Traceback" not in result.output


def test_non_utf8_file(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"# caf\xe9\ndefaults:\n  d_model: 512\n")
    result = runner.invoke(app, ["kvmem", "--config", str(path)])
    assert result.exit_code == 2, result.output
    assert str(path) in result.output
    assert "Traceback" not in result.output


def test_load_config_raises_usage_error(tmp_path):
    path = write_yaml(tmp_path, "defaults:\n  num_kv_head: 2\n")
    with pytest.raises(UsageError, match="did you mean 'num_kv_heads'"):
        load_config(path)


def test_empty_file_and_empty_sections_are_fine(tmp_path):
    path = write_yaml(tmp_path, "defaults:\nparams: {}\n")
    assert load_config(path).sections == {"params": {}}
    assert load_config(write_yaml(tmp_path, "", name="empty.yaml")).sections == {}


def test_decode_section_validated_but_ignored_by_kvmem(tmp_path):
    good = write_yaml(tmp_path, BATCH_FILE + "decode:\n  prompt_len: [16, 64]\n  gen_len: 4\n")
    records = run_json(tmp_path, "kvmem", "--config", good, "--no-measure")
    assert len(records) == 4
    bad = write_yaml(tmp_path, BATCH_FILE + "decode:\n  seq_len: [16]\n", name="bad.yaml")
    result = runner.invoke(app, ["kvmem", "--config", str(bad), "--no-measure"])
    assert result.exit_code == 2
    assert "seq_len" in result.output and "decode" in result.output


# -------------------------------------------------------------- shipped configs


@pytest.mark.parametrize(
    ("name", "command", "extra"),
    [
        (DEFAULT, "params", []),
        (DEFAULT, "kvmem", ["--no-measure"]),
        (CONFIGS / "article-tables.yaml", "params", []),
        (CONFIGS / "article-tables.yaml", "kvmem", ["--no-measure"]),
        (CONFIGS / "models.yaml", "params", []),
        (CONFIGS / "models.yaml", "kvmem", ["--no-measure"]),
    ],
    ids=lambda v: v.name if isinstance(v, Path) else None,
)
def test_shipped_configs_run(tmp_path, name, command, extra):
    records = run_json(tmp_path, command, "--config", name, *extra)
    assert records
    assert not any(map(failed, records))


def test_run_uses_the_packaged_default_study():
    assert DEFAULT.is_file() and DEFAULT_CONFIG.samefile(DEFAULT)


def test_default_config_content(tmp_path):
    records = run_json(tmp_path, "kvmem", "--config", DEFAULT, "--no-measure")
    synthetic = [r for r in records if r["model"] is None]
    assert {r["variant"] for r in synthetic} == {"MHA", "GQA-2", "MQA"}
    assert {"llama-2-7b", "llama-3-8b"} <= {r["model"] for r in records}
    assert all(r["kv_bytes"] == r["bytes_per_token"] * r["batch"] * r["seq_len"] for r in records)


#: The presets configs/models.yaml sizes (the newer presets, DeepSeek and Gemma 2, are not
#: in it).
MODELS_YAML = {
    "llama-2-7b",
    "llama-2-13b",
    "llama-2-70b",
    "llama-3-8b",
    "llama-3-70b",
    "mistral-7b",
    "mixtral-8x7b",
    "falcon-7b",
    "qwen2.5-7b",
    "gemma-7b",
    "gpt3-175b",
}


def test_models_config_sizes_each_of_its_presets(tmp_path):
    records = run_json(tmp_path, "kvmem", "--config", CONFIGS / "models.yaml", "--no-measure")
    names = [r["model"] for r in records]
    assert set(names) == MODELS_YAML and set(PRESETS) >= MODELS_YAML
    assert len(names) == 3 * len(MODELS_YAML)  # batch 1 at three context lengths each
    for r in records:
        assert r["dtype"] == PRESETS[r["model"]].dtype  # each model's own dtype
        assert r["num_layers"] == PRESETS[r["model"]].num_layers


def test_a_command_section_can_carry_its_own_models(tmp_path):
    path = tmp_path / "study.yaml"
    path.write_text(
        "defaults: {d_model: 64, num_heads: 4}\n"
        "models: [llama-2-7b]\n"
        "decode: {models: []}\n"
        "params: {models: [falcon-7b, gemma-7b]}\n"
    )
    config = load_config(path)
    assert resolve(config, "kvmem").models[0].name == "llama-2-7b"
    assert resolve(config, "decode").models == []
    assert [m.name for m in resolve(config, "params").models] == ["falcon-7b", "gemma-7b"]


def test_a_section_models_list_is_validated(tmp_path):
    path = tmp_path / "study.yaml"
    path.write_text("defaults: {d_model: 64, num_heads: 4}\ndecode: {models: llama-2-7b}\n")
    with pytest.raises(UsageError, match=r"decode\.models: expected a list"):
        load_config(path)


# --- decode: providers, the old backend key, sampling options -------------------------------


def decode_points(tmp_path, text: str) -> list:
    from attnbench.study.plan import plan_study

    plan = plan_study(write_yaml(tmp_path, text), names=["decode"])
    return [t.point for t in plan.tasks]


def test_the_old_backend_key_and_value_still_work(tmp_path):
    points = decode_points(
        tmp_path,
        """
        decode: {d_model: 64, num_heads: 4, prompt_len: 8, mode: cache,
                 backend: [sdpa, naive], device: cpu}
    """,
    )
    assert [p.provider for p in points] == ["attnbench", "naive"]


def test_backend_and_provider_together_are_refused(tmp_path):
    path = write_yaml(tmp_path, "decode: {backend: sdpa, provider: naive}")
    with pytest.raises(UsageError, match="'backend' is the old name of 'provider'; give one"):
        load_config(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("max_time: 0", "decode.max_time: 0 .*: must be a number above 0$"),
        ("target_rel_ci: 2", "decode.target_rel_ci: 2 .*: must be <= 1"),
        ("max_time: soon", "decode.max_time: soon .*: expected a number"),
        ("gen_len: -1", "decode.gen_len: -1 .*: must be >= 0"),
        ("provider: [attnbench, tpu]", "decode.provider: tpu .*: unknown value 'tpu'"),
    ],
)
def test_bad_decode_options_name_the_key(tmp_path, text, message):
    with pytest.raises(UsageError, match=message):
        load_config(write_yaml(tmp_path, f"decode: {{{text}}}"))


def test_cuda_graph_is_an_axis_for_graph_and_eager_side_by_side(tmp_path):
    points = decode_points(
        tmp_path,
        """
        decode: {d_model: 64, num_heads: 4, prompt_len: 8, mode: cache,
                 cuda_graph: [false, true], device: cpu}
    """,
    )
    assert [p.cuda_graph for p in points] == [False, True]


def test_sampling_options_reach_every_point(tmp_path):
    from attnbench.experiments.decode import DecodeOptions
    from attnbench.study.plan import plan_study

    path = write_yaml(
        tmp_path,
        """
        decode: {d_model: 64, num_heads: 4, prompt_len: 8, device: cpu,
                 max_time: 3, target_rel_ci: 0.05, min_repeats: 7}
    """,
    )
    plan = plan_study(path, names=["decode"])
    options = plan.options["decode"]
    assert isinstance(options, DecodeOptions)  # typed once, for the whole section
    assert all(task.point.options is options for task in plan.tasks)
    sampling = options.sampling(torch.device("cpu"))
    assert (sampling.max_time_s, sampling.target_rel_ci, sampling.min_repeats) == (3, 0.05, 7)
    assert sampling.repeats is None  # adaptive unless repeats is given


# --- numbers: a sweep file's read as the flags read them ----------------------------------

NUMBER_SPELLINGS = [
    ("2e-2", 0.02),
    ("2E-2", 0.02),
    ("+2e-2", 0.02),
    ("0.2e-1", 0.02),
    ("2.0e-2", 0.02),
    (".02", 0.02),
    ("1e3", 1000.0),
    ("+1E+3", 1000.0),
    ("1.5e3", 1500.0),
    ("3", 3.0),
]


@pytest.mark.parametrize("text, value", NUMBER_SPELLINGS)
def test_a_number_in_a_file_reads_as_the_same_flag_reads(tmp_path, text, value):
    from attnbench.cli.flags import parse_field

    field = "target_rel_ci" if value < 1 else "max_time"
    path = write_yaml(tmp_path, f"decode: {{d_model: 8, num_heads: 2, {field}: {text}}}\n")
    from_file = resolve(load_config(path), "decode").options[field]
    assert from_file == value == parse_field(field, text)
    assert type(from_file) is float  # as the flag gives it, whatever the spelling


@pytest.mark.parametrize(
    "text, flag_value",
    [
        ("batch: 010", 10),
        ("seq_len: 0x10", None),
        ("seq_len: 1:30", None),
        ("batch: 1_000", None),
        ("sliding_window: none", 0),
        ("sliding_window: None", 0),
    ],
)
def test_integers_in_a_file_are_decimal_as_flags_are(tmp_path, text, flag_value):
    from attnbench.cli.flags import parse_field

    field, value = text.split(": ")
    path = write_yaml(tmp_path, f"kvmem:\n  models: [llama-2-7b]\n  {text}\n")
    if flag_value is None:
        with pytest.raises(UsageError, match=f"kvmem.{field}: {value} .*expected an integer"):
            load_config(path)
        with pytest.raises(UsageError, match="expected integers"):
            parse_field(field, value)
        return
    assert resolve(load_config(path), "kvmem").values[field] == [flag_value]
    assert parse_field(field, value) == [flag_value]


@pytest.mark.parametrize(
    "text",
    [
        "batch: true",
        "tp: false",
        "num_layers: yes",
        "max_time: true",
        "target_rel_ci: false",
        "gpus: true",
        "seq_lens: [8, true]",
        "warmup: false",
        "sweep_batch: [1, true]",
    ],
)
def test_a_boolean_is_never_a_number(tmp_path, text):
    field, value = text.split(": ")
    section = "sweep" if field.startswith("sweep_") else ("fit" if field == "gpus" else "kvmem")
    section = "decode" if field in ("max_time", "target_rel_ci", "warmup") else section
    field = field.removeprefix("sweep_")
    path = write_yaml(tmp_path, f"{section}:\n  {field}: {value}\n")
    with pytest.raises(UsageError, match=rf"{section}\.{field}: .*expected an? (integer|number)"):
        load_config(path)


def test_a_batchs_lengths_take_the_flags_forms_in_a_file(tmp_path):
    """kvmem.seq_lens as its help gives it: '8x512', 'linspace:...', '100,50'."""
    path = write_yaml(tmp_path, 'kvmem:\n  seq_lens: "2x512,linspace:1:3:3,7"\n')
    assert load_config(path).sections["kvmem"]["seq_lens"] == [512, 512, 1, 2, 3, 7]
    bad = write_yaml(tmp_path, 'kvmem:\n  seq_lens: "8y512"\n')
    with pytest.raises(UsageError, match=r"kvmem\.seq_lens: 8y512 \(.*\): expected N, CxN"):
        load_config(bad)


def test_a_float_too_large_for_a_float_field_is_named(tmp_path):
    path = write_yaml(tmp_path, f"decode:\n  max_time: 1{'0' * 400}\n  target_rel_ci: 1e400\n")
    with pytest.raises(UsageError) as raised:
        load_config(path)
    lines = str(raised.value).splitlines()
    assert lines[0].startswith("decode.max_time: ") and lines[0].endswith("must be <= 3600.0")
    assert (
        lines[1].startswith("decode.target_rel_ci: inf") and "must be a finite number" in lines[1]
    )


# --- files a sweep file names, and values that would do nothing -----------------------------

CALIBRATION = {"efficiency_bw": 0.8, "efficiency_flops": 0.6, "overhead_s": 1e-5}


def test_a_calibration_path_resolves_from_the_sweep_file_as_models_do(tmp_path, monkeypatch):
    folder = tmp_path / "studies"
    folder.mkdir()
    (folder / "cal.json").write_text(json.dumps(CALIBRATION))
    text = "predict:\n  models: [llama-2-7b]\n  seq_len: 64\n  gpu: h100-sxm\n"
    study = write_yaml(folder, text + "  calibration: cal.json\n")
    monkeypatch.chdir(tmp_path)  # not the sweep file's folder
    result = runner.invoke(app, ["predict", "--config", str(study), "-q"])
    assert result.exit_code == 0, result.output
    missing = write_yaml(folder, text + "  calibration: none.json\n", "missing.yaml")
    result = runner.invoke(app, ["predict", "--config", str(missing)])
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: predict.calibration: {folder / 'none.json'} ({missing}): no such file\n"
    )


def test_fit_refuses_a_calibration_nothing_reads(tmp_path):
    """A calibration times the latency targets: without one it would not even be read."""
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    args = ["fit", "--model", "llama-2-7b", "--gpu", "h100-sxm", "--seq-len", "1024"]
    result = runner.invoke(app, [*args, "--calibration", str(bad)])
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: --calibration {bad}: times the targets tpot and ttft only: give one, or "
        "leave it out\n"
    )
    result = runner.invoke(app, [*args, "--calibration", str(bad), "--tpot", "50ms"])
    assert result.stderr.startswith(f"error: --calibration {bad}: not valid JSON")


def test_fit_refuses_a_gpu_beside_memory_with_no_target(tmp_path):
    """Its memory replaced and its peaks timing no target, the GPU would be a label."""
    args = ["fit", "--model", "llama-2-7b", "--seq-len", "1024", "--memory", "24GiB"]
    result = runner.invoke(app, [*args, "--gpu", "h100-sxm"])
    assert result.exit_code == 2
    assert result.stderr == (
        "error: --gpu h100-sxm: has no effect beside --memory, which replaces its memory: "
        "only --tpot and --ttft use its peaks\n"
    )
    assert runner.invoke(app, [*args, "--gpu", "h100-sxm", "--tpot", "50ms"]).exit_code == 0
    fit = "fit: {models: [llama-2-7b], memory: 24GiB, seq_len: 1024}"
    shared = write_yaml(tmp_path, f"defaults: {{gpu: h100-sxm}}\n{fit}\n")
    result = runner.invoke(app, ["run", str(shared), "--dry-run"])  # its GPU may serve another
    assert result.exit_code == 0, result.output


def test_a_weights_group_goes_to_the_formats_that_take_one():
    """mxfp4 and nvfp4 scale the blocks their formats fix: a group beside them alone would
    change nothing; beside int4 in the same sweep it is int4's."""
    args = ["predict", "--model", "llama-3-8b", "--gpu", "b200", "--weights-group", "64"]
    assert one_error(runner.invoke(app, [*args, "--weights-dtype", "mxfp4,nvfp4"])) == (
        "error: --weights-group 64: has no effect: mxfp4 and nvfp4 scale the blocks their "
        "formats fix (set --weights-dtype to int8, int4, float8_e4m3fn or float8_e5m2)"
    )
    assert runner.invoke(app, [*args, "--weights-dtype", "int4,mxfp4"]).exit_code == 0


def test_fit_names_the_weights_dtype_a_gpu_has_no_peak_for():
    """nvfp4 runs at the float4 peak, which an H100 lacks: the error names the dtype
    given, not the peak's name."""
    args = ["fit", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--seq-len", "4096"]
    result = runner.invoke(app, [*args, "--weights-dtype", "nvfp4", "--tpot", "50ms"])
    assert one_error(result).startswith("error: --weights-dtype nvfp4: h100-sxm has no float4")


def test_kept_attention_on_a_layer_shape_is_refused():
    """A layer shape's weights are its attention's: kept, nothing would be quantised."""
    args = ["predict", "--d-model", "4096", "--heads", "32", "--gpu", "h100-sxm"]
    result = runner.invoke(app, [*args, "--weights-dtype", "int4", "--keep-attention"])
    assert one_error(result) == (
        "error: --keep-attention: has no effect: a layer shape's weights are all its "
        "attention's, only a model has others"
    )
    model = ["predict", "--model", "llama-2-7b", "--gpu", "h100-sxm", "--weights-dtype", "int4"]
    assert runner.invoke(app, [*model, "--keep-attention"]).exit_code == 0


@pytest.mark.parametrize("command", ["predict", "fit"])
@pytest.mark.parametrize("flag", ["--quantize-head", "--keep-attention"])
def test_a_quantised_head_without_quantised_weights_is_refused(tmp_path, command, flag):
    """Weights in 16 bits quantise no head, and keep their attention as they are: the
    switch would change nothing."""
    args = [command, "--model", "llama-2-7b", "--gpu", "h100-sxm", "--seq-len", "1024"]
    result = runner.invoke(app, [*args, flag])
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: {flag}: has no effect: the weights are not quantised (set "
        "--weights-dtype to int8, int4, mxfp4, float8_e4m3fn, float8_e5m2 or nvfp4)\n"
    )
    assert runner.invoke(app, [*args, flag, "--weights-dtype", "int4"]).exit_code == 0
    section = f"{command}: {{models: [llama-2-7b], gpu: h100-sxm, seq_len: 1024, quantize_head: "
    path = write_yaml(tmp_path, section + "true}\n")
    result = runner.invoke(app, ["run", str(path), "--dry-run"])
    assert result.exit_code == 2
    assert f"{command}.quantize_head: true (" in result.stderr  # as YAML writes it
    path = write_yaml(tmp_path, section + "false}\n")
    assert runner.invoke(app, ["run", str(path), "--dry-run"]).exit_code == 0


def test_a_quantised_head_where_no_model_has_its_own_head_is_refused(tmp_path):
    """A head tied to the embeddings stays in their dtype, and a layer shape has none."""
    args = ["predict", "--gpu", "h100-sxm", "--seq-len", "64", "--weights-dtype", "int4"]
    result = runner.invoke(app, [*args, "--model", "gemma-7b", "--quantize-head"])
    assert result.exit_code == 2
    assert result.stderr == (
        "error: --quantize-head: has no effect: gemma-7b ties its output head to the embeddings\n"
    )
    result = runner.invoke(app, [*args, "--d-model", "64", "--heads", "4", "--quantize-head"])
    assert result.exit_code == 2
    assert "a layer shape has no output head, only a model has one" in result.stderr
    text = "predict: {{models: [gemma-7b, {}], gpu: h100-sxm, seq_len: 64, weights_dtype: int4, "
    found = {}
    for other in ("gemma-2-9b", "llama-2-7b"):
        path = write_yaml(tmp_path, text.format(other) + "quantize_head: true}\n")
        found[other] = runner.invoke(app, ["run", str(path), "--dry-run"])
    assert found["gemma-2-9b"].exit_code == 2
    assert "gemma-7b, gemma-2-9b tie their output heads" in found["gemma-2-9b"].stderr
    assert found["llama-2-7b"].exit_code == 0, found["llama-2-7b"].output  # one is enough


@pytest.mark.parametrize("command", ["predict", "fit"])
def test_a_replicated_vocabulary_on_one_rank_is_refused(tmp_path, command):
    """One rank holds the whole vocabulary either way: the layout would change nothing."""
    args = [command, "--model", "llama-2-7b", "--gpu", "h100-sxm", "--seq-len", "1024"]
    result = runner.invoke(app, [*args, "--vocab-layout", "replicated"])
    assert result.exit_code == 2
    assert result.stderr == (
        "error: --vocab-layout replicated: has no effect at --tp 1: a single rank holds the "
        "whole vocabulary either way\n"
    )
    ranks = ["--tp", "1,2"] if command == "predict" else ["--gpus", "2"]
    result = runner.invoke(app, [*args, "--vocab-layout", "replicated", *ranks])
    assert result.exit_code == 0, result.output
    section = f"{command}: {{models: [llama-2-7b], gpu: h100-sxm, seq_len: 1024}}"
    shared = write_yaml(tmp_path, f"defaults: {{vocab_layout: replicated}}\n{section}\n")
    result = runner.invoke(app, ["run", str(shared), "--dry-run"])  # it may serve another
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--model", "llama-2-7b", "--layer-pattern", "LLG" * 11],
            f"--layer-pattern {'LLG' * 11}: has 33 letters, more than llama-2-7b's 32 "
            "attention layers: one letter per layer at most",
        ),
        (
            ["--d-model", "64", "--heads", "2", "--layers", "2", "--layer-pattern", "LLG"],
            "--layer-pattern LLG: has 3 letters, more than the 2 attention layers",
        ),
        (
            ["--d-model", "64", "--heads", "2", "--layers", "1", "--layer-pattern", "LG"],
            "--layer-pattern LG: has 2 letters, more than the 1 attention layer:",
        ),
        (  # letters it does not take are what is wrong, whatever its length
            ["--d-model", "64", "--heads", "2", "--layers", "1", "--layer-pattern", "XYZ"],
            "--layer-pattern XYZ: expected letters L (a sliding or chunked layer) and G",
        ),
    ],
)
def test_a_layer_pattern_longer_than_the_layers_is_refused(args, message):
    for command in ("kvmem", "fit"):
        extra = ["--gpu", "h100-sxm"] if command == "fit" else ["--no-measure"]
        if command == "fit" and "--model" not in args:
            continue  # fit answers for models only
        result = runner.invoke(
            app, [command, *args, "--sliding-window", "64", "--seq-len", "128", *extra]
        )
        assert result.exit_code == 2, result.output
        assert result.stderr.startswith(f"error: {message}"), result.stderr


def test_a_value_an_alias_repeats_is_refused_once(tmp_path):
    text = "defaults: {d_model: 64, num_heads: 4}\nsweep:\n  batch: &a [1, 2]\n"
    path = write_yaml(tmp_path, text + "  seq_len: [*a, *a]\n")
    result = runner.invoke(app, ["kvmem", "--config", str(path)])
    assert result.exit_code == 2
    assert result.stderr.count("error:") == 1 and "sweep.seq_len" in result.stderr


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (
            "defaults: {d_model: 64, num_heads: 4}\n"
            "kvmem: {seq_len: 64, kv_dtype: int4, kv_scale_group: 1000000000}\n",
            "error: kvmem.kv_scale_group: 1000000000 (study.yaml): exceeds the 16 elements",
        ),
        (
            "models: [llama-2-7b]\nfit: {gpu: h100-sxm}\n",
            "error: fit (study.yaml): give either seq_len (for the largest batch) or batch",
        ),
    ],
)
def test_a_study_is_refused_when_planned_in_the_files_terms(tmp_path, monkeypatch, text, error):
    """Not when its points run, and not by a flag `run` does not have."""
    monkeypatch.chdir(tmp_path)
    write_yaml(tmp_path, text)
    result = runner.invoke(app, ["run", "study.yaml", "--dry-run"])
    assert result.exit_code == 2 and result.stderr.startswith(error), result.output
    assert "--" not in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["decode-speed", "--kv-heads", "4,mha"], "--kv-heads 4,mha: 4 and mha are both 4 KV"),
        (["decode-speed", "--mode", "cache,cache"], "--mode cache,cache: cache is given twice"),
        (["decode-speed", "--prompt-len", "8,8"], "--prompt-len 8,8: 8 is given twice"),
        (["kvmem", "--kv-heads", "mqa,1"], "--kv-heads mqa,1: mqa and 1 are both 1 KV head here"),
        # two spellings of one value, named as typed
        (["kvmem", "--sliding-window", "none,0"], "--sliding-window none,0: none and 0 are one"),
        (["kvmem", "--dtype", "bf16,bfloat16"], "--dtype bf16,bfloat16: bf16 and bfloat16 are"),
    ],
)
def test_a_value_given_twice_on_an_axis_is_refused_before_anything_runs(args, message):
    """Two equal values on an axis make two points with the same keys, which the results
    readers refuse as a duplicate row after the run: refused when planned."""
    shape = ["--d-model", "64", "--heads", "4"]
    result = runner.invoke(app, [*args, *shape])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: {message}"), line


def test_a_value_given_twice_in_a_sweep_file_is_refused_by_its_field(tmp_path):
    path = write_yaml(tmp_path, "decode: {d_model: 64, num_heads: 4, mode: [cache, cache]}")
    result = runner.invoke(app, ["run", str(path), "--dry-run"])
    assert result.exit_code == 2
    assert "decode.mode: cache,cache (" in result.stderr and "cache is given twice" in result.stderr


def test_the_layout_example_of_the_sweep_files_page_plans(tmp_path):
    """The page's first block is the one a reader copies: with its config.json in place,
    every section of it plans (a run --dry-run's check), none refused."""
    from attnbench.study.plan import plan_study

    page = (ROOT / "docs" / "sweep-files.md").read_text()
    block = page.split("## Layout", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    config = tmp_path / "path" / "to" / "config.json"  # GPT-J: 16 heads, as tp 8 needs
    config.parent.mkdir(parents=True)
    config.write_text((ROOT / "docs" / "validation" / "models" / "gpt-j-6b.json").read_text())
    plan = plan_study(write_yaml(tmp_path, block), "cpu")
    assert set(plan.sections) == {"params", "kvmem", "decode", "fit"}


def test_a_section_named_with_nothing_under_it_runs_with_its_defaults(tmp_path):
    """`kvmem:` and nothing under it (every key commented out) is `kvmem: {}`: it runs, where
    it was dropped without a word."""
    from attnbench.study.plan import plan_study

    path = write_yaml(tmp_path, "defaults: {d_model: 64, num_heads: 4}\nparams: {}\nkvmem:\n")
    assert load_config(path).sections["kvmem"] == {}
    assert set(plan_study(path, "cpu").sections) == {"params", "kvmem"}


@pytest.mark.parametrize(
    ("models", "again"),
    [
        ("[llama-3-8b, LLAMA-3-8B]", "models: LLAMA-3-8B"),
        ("[llama-3-8b, llama-3-8b]", "models: llama-3-8b"),
        ("[cfg.json, ./cfg.json]", "models: ./cfg.json"),
    ],
)
def test_a_model_given_twice_is_refused(tmp_path, models, again):
    """Presets by any case, config.json files by any path: one model twice ran its points
    twice, and the study's own results were then refused by every reader."""
    from attnbench.study.plan import plan_study
    from tests.helpers import SMALL_CONFIG

    (tmp_path / "cfg.json").write_text(json.dumps(SMALL_CONFIG | {"model_type": "llama"}))
    path = write_yaml(tmp_path, f"models: {models}\nkvmem: {{measure: false}}\n")
    with pytest.raises(UsageError, match="again: give each model once") as caught:
        plan_study(path, "cpu")
    assert again in str(caught.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "defaults: {d_model: 2001-12-14, num_heads: 4}\nparams: {}\n",
            "study.yaml): expected an integer, got a date",
        ),
        # no such day: the key and the text, where the calendar's error named neither
        (
            "defaults: {d_model: 9999-99-99, num_heads: 4}\nparams: {}\n",
            "defaults.d_model: 9999-99-99 (",
        ),
        (
            "defaults: {d_model: 2001-12-14 21:59:43.10 +25:00, num_heads: 4}\nparams: {}\n",
            "expected an integer, got '2001-12-14 21:59:43.10 +25:00'",
        ),
        ("defaults: {null: 3, d_model: 64, num_heads: 4}\nparams: {}\n", "unknown key null\n"),
        ("models: [null]\nparams: {}\n", "models: expected a list of names or paths, got [null]"),
        ("2001-01-01: {}\n", "unknown key 2001-01-01\n"),
    ],
)
def test_yaml_values_are_spelled_as_yaml_writes_them(tmp_path, text, message):
    """null, not None; [null], not [None]; a date as it was written, not datetime.date."""
    study = write_yaml(tmp_path, text)
    result = runner.invoke(app, ["run", str(study), "--dry-run"])
    assert result.exit_code == 2
    assert message in result.stderr and "None" not in result.stderr, result.stderr
    assert "datetime" not in result.stderr and "(2001, 12" not in result.stderr


@pytest.mark.parametrize(
    ("command", "args", "field", "expected"),
    [
        # bfloat16 weights take neither a group nor a weight-only kernel: one point each
        (
            "predict",
            ["--gpu", "h100-sxm", "--weights-dtype", "bfloat16,int4", "--weights-group", "64,128"],
            "weights",
            [None, "int4 in groups of 64", "int4 in groups of 128"],
        ),
        (
            "predict",
            ["--gpu", "h100-sxm", "--weights-dtype", "bfloat16,int8"]
            + ["--weight-only-kernel", "cuda-cores,tensor-cores"],
            "weights",
            [None, "int8 per channel", "int8 per channel, on the tensor cores"],
        ),
        # a bfloat16 cache takes no scales: one point, beside int8's four
        (
            "kvmem",
            ["--kv-dtype", "bfloat16,int8", "--kv-scale-group", "32,64"]
            + ["--scale-dtype", "float16,float32"],
            "kv_scale_group",
            [None, 32, 32, 64, 64],
        ),
        (
            "fit",
            ["--gpu", "h100-sxm", "--seq-len", "4096", "--kv-dtype", "bfloat16,int8"]
            + ["--kv-scale-group", "32,64"],
            "kv",
            [None, "int8 in groups of 32", "int8 in groups of 64"],
        ),
    ],
)
def test_a_format_option_crossed_with_formats_it_does_not_apply_to_runs_each_point_once(
    tmp_path, command, args, field, expected
):
    """An option crossed with dtypes it does not apply to gave those dtypes one point per
    value: identical rows, each recorded with an option it does not have."""
    records = run_json(tmp_path, command, "--model", "llama-2-7b", *args)
    assert [r[field] for r in records] == expected


@pytest.mark.parametrize(
    ("field", "values", "message"),
    [
        ("sliding_window", "[none, 0]", "kvmem.sliding_window: none,0 ({}): none and 0 are one"),
        ("dtype", "[bf16, float32, bfloat16]", "kvmem.dtype: bf16,float32,bfloat16 ({}): bf16 and"),
    ],
)
def test_a_sweep_files_two_spellings_of_one_value_are_named_as_written(
    tmp_path, field, values, message
):
    """As a flag's are: the grid's own check for repeats sees the values made canonical
    ('0,0: 0 is given twice'), which is not what the file says."""
    path = tmp_path / "study.yaml"
    path.write_text(f"kvmem: {{d_model: 64, num_heads: 4, measure: false, {field}: {values}}}\n")
    result = runner.invoke(app, ["run", str(path), "--dry-run"])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: " + message.format(path)), line
