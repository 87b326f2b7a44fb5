"""Hybrid models as a user meets them, on Qwen3-Next-80B-A3B's config.json: its K/V cache
is its 12 attention layers', its 36 gated DeltaNets keep a state beside it, and every
command that sizes memory or time counts both; a model type without attnbench's formulas
is counted whole by transformers, or said to be attention only without it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnbench.cli import app
from attnbench.model.capacity import ceil_div
from attnbench.model.devices import device_spec
from attnbench.model.hf_config import load_hf_config
from attnbench.modules import hf_fallback
from tests.helpers import runner

pytest.importorskip("transformers")

QWEN3_NEXT = Path(__file__).resolve().parents[2] / "docs/architectures/qwen3-next-80b-a3b.json"
#: Qwen3-Next-80B-A3B in bfloat16: K and V of 2 heads of 256 in 12 layers, per token; a
#: gated DeltaNet's state (its convolution over 8,192 channels, 4 wide, in bfloat16; a
#: 128 x 128 matrix of float32 per value head, 32 of them) in each of 36 layers.
KV_PER_TOKEN = 12 * 2 * 2 * 256 * 2
STATE = 36 * (8192 * 4 * 2 + 32 * 128 * 128 * 4)


def run_json(tmp_path, *args: str) -> dict:
    out = tmp_path / "out.json"
    result = runner.invoke(app, [*args, "--json", str(out), "-q"])
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text())


def test_kvmem_counts_the_attention_layers_and_the_state_beside_them(tmp_path):
    doc = run_json(tmp_path, "kvmem", "--hf-config", str(QWEN3_NEXT), "--seq-len", "32768")
    (record,) = doc["records"]
    assert record["kv_bytes"] == 32768 * KV_PER_TOKEN == 768 * 2**20
    assert (record["kv_layers"], record["state_layers"], record["num_layers"]) == (12, 36, 48)
    assert record["state_bytes"] == STATE
    assert record["total_bytes"] == record["kv_bytes"] + STATE
    assert record["measured_bytes"] == record["kv_bytes"]  # the 12 layers' cache, allocated
    kinds = {r["kind"]: r for r in doc["layer_kinds"]}
    assert kinds["gated deltanet"]["state_bytes"] == STATE
    assert kinds["full attention"]["kv_bytes_per_token"] == KV_PER_TOKEN
    assert kinds["full attention"]["layers"] == 12


def test_kvmem_layer_kinds_store_as_the_records_do_in_each_dtype(tmp_path):
    """The layer kinds' rows hold their cache and state in the dtypes the points store
    them in, a row per dtype and cache format: a float8 cache is half a bfloat16 one, the
    state's convolution in the asked dtype (its recurrent matrix float32 whatever it is)."""
    doc = run_json(
        tmp_path,
        "kvmem",
        "--hf-config",
        str(QWEN3_NEXT),
        "--seq-len",
        "1024",
        "--dtype",
        "bfloat16,float32",
        "--kv-dtype",
        "float8_e4m3fn",
        "--no-measure",
    )
    kinds = {(r["dtype"], r["kv_dtype"], r["kind"]): r for r in doc["layer_kinds"]}
    assert set(kinds) == {
        (dtype, "float8_e4m3fn", kind)
        for dtype in ("bfloat16", "float32")
        for kind in ("gated deltanet", "full attention")
    }
    for dtype in ("bfloat16", "float32"):
        assert kinds[dtype, "float8_e4m3fn", "full attention"]["kv_bytes_per_token"] == (
            KV_PER_TOKEN // 2
        )
    assert kinds["bfloat16", "float8_e4m3fn", "gated deltanet"]["state_bytes"] == STATE
    conv = 36 * 8192 * 4
    assert kinds["float32", "float8_e4m3fn", "gated deltanet"]["state_bytes"] == STATE + 2 * conv
    records = {r["dtype"]: r for r in doc["records"]}
    assert records["float32"]["state_bytes"] == STATE + 2 * conv


GEMMA_2 = QWEN3_NEXT.with_name("gemma-2-9b.json")


@pytest.mark.parametrize("layout", [["--sliding-window", "1024,0"], ["--layer-pattern", "LLLG,G"]])
def test_kvmem_layer_kinds_lay_out_the_windows_as_each_point_does(tmp_path, layout):
    """A point's own windows (a window of its own, none, a layer pattern) lay out its
    kinds' rows: each point's rows, their layers at their windows, add up to its cache."""
    doc = run_json(
        tmp_path,
        "kvmem",
        "--hf-config",
        str(GEMMA_2),
        "--seq-len",
        "8192",
        *layout,
        "--dtype",
        "bfloat16",
        "--no-measure",
    )
    field = layout[0].removeprefix("--").replace("-", "_")
    for record in doc["records"]:
        rows = [r for r in doc["layer_kinds"] if r[field] == record[field]]
        cached = sum(r["kv_bytes_per_token"] * min(r["window"] or 8192, 8192) for r in rows)
        assert rows and cached == record["kv_bytes"], record[field]


def test_kvmem_layer_kinds_of_each_scale_group_are_told_apart(tmp_path):
    """Two scale groups of an int8 cache give their rows each: their keys differ, and a
    group of 32 keeps more scales a token than one a vector."""
    doc = run_json(
        tmp_path,
        "kvmem",
        "--hf-config",
        str(GEMMA_2),
        "--seq-len",
        "1024",
        "--no-measure",
        "--kv-dtype",
        "int8",
        "--kv-scale-group",
        "32,vector",
    )
    rows = {(r["kv_scale_group"], r["kind"]): r["kv_bytes_per_token"] for r in doc["layer_kinds"]}
    assert len(rows) == len(doc["layer_kinds"]) == 4
    assert rows[32, "full attention"] > rows["vector", "full attention"]


def test_an_encoder_s_config_is_refused_where_a_cache_is_sized(tmp_path):
    """An encoder (ViT, here) keeps no cache: kvmem refuses it in one line, naming the file,
    where params still counts its attention layer."""
    vit = tmp_path / "config.json"
    vit.write_text(
        json.dumps(
            {
                "model_type": "vit",
                "hidden_size": 64,
                "num_attention_heads": 4,
                "num_hidden_layers": 2,
            }
        )
    )
    result = runner.invoke(app, ["kvmem", "--hf-config", str(vit), "--no-measure"])
    assert result.exit_code == 2
    assert f"--hf-config {vit}: model_type 'vit' keeps no cache" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert runner.invoke(app, ["params", "--hf-config", str(vit)]).exit_code == 0
    bert = {
        "model_type": "bert",
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
    }
    vit.write_text(json.dumps(bert))  # a type that may decode: its cache is sized
    assert runner.invoke(app, ["kvmem", "--hf-config", str(vit), "--no-measure"]).exit_code == 0
    # a tower with no base model of its own is told by its whole config's (SigLIP's)
    tower = {"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2}
    vit.write_text(json.dumps({"model_type": "siglip", "text_config": tower}))
    result = runner.invoke(app, ["kvmem", "--hf-config", str(vit), "--no-measure"])
    assert result.exit_code == 2 and "model_type 'siglip' keeps no cache" in result.output


def test_a_type_the_formulas_or_a_hybrid_s_plan_know_is_never_asked_of_transformers(
    monkeypatch,
):
    """Telling an encoder costs transformers' import (seconds): a model the formulas count,
    or a hybrid whose plan attnbench reads (Qwen3-Next), is a decoder without asking."""

    def asked():
        raise AssertionError("transformers asked")

    monkeypatch.setattr(hf_fallback, "transformers_installed", asked)
    hybrid = load_hf_config(QWEN3_NEXT)
    assert hybrid.body is None and hybrid.states is not None
    assert hf_fallback.caches_nothing(hybrid) is None
    assert hf_fallback.caches_nothing(load_hf_config(GEMMA_2)) is None


def test_forward_arguments_that_hand_a_model_a_cache():
    names = ("cache", "use_cache", "past_key_values", "cache_params", "decoder_cache", "mems")
    assert all(map(hf_fallback._takes_a_cache, (*names, "state")))
    assert not any(map(hf_fallback._takes_a_cache, ("input_ids", "pixel_values", "kwargs")))


def test_kvmem_table_names_the_layer_kinds():
    result = runner.invoke(
        app,
        ["kvmem", "--hf-config", str(QWEN3_NEXT), "--seq-len", "32768", "--no-measure"],
        env={"COLUMNS": "120"},
    )
    assert result.exit_code == 0, result.output
    for text in ("KV + state", "842.25 MiB", "gated deltanet", "Layer kinds", "in float32"):
        assert text in result.output, text


def test_what_if_kv_heads_change_the_attention_layers_only(tmp_path):
    doc = run_json(
        tmp_path,
        "kvmem",
        "--hf-config",
        str(QWEN3_NEXT),
        "--seq-len",
        "1024",
        "--kv-heads",
        "mqa,16",
    )
    by_heads = {r["num_kv_heads"]: r for r in doc["records"]}
    assert by_heads[1]["kv_bytes"] * 2 == by_heads[2]["kv_bytes"]
    assert by_heads[16]["kv_bytes"] == 8 * by_heads[2]["kv_bytes"]
    assert {r["state_bytes"] for r in doc["records"]} == {STATE}


def test_params_counts_a_hybrid_whole_with_transformers_and_its_what_ifs(tmp_path):
    doc = run_json(tmp_path, "params", "--hf-config", str(QWEN3_NEXT), "--kv-heads", "4")
    totals = {r["num_kv_heads"]: r["params"] for r in doc["model_parts"] if r["part"] == "total"}
    # Qwen3-Next's published size; 4 KV heads instead of 2 add k and v of 2 heads of 256
    # to each of its 12 attention layers
    assert totals[2] == 79_674_391_296
    assert totals[4] - totals[2] == 12 * 2 * 2048 * 2 * 256
    parts = {r["part"]: r for r in doc["model_parts"] if r["num_kv_heads"] == 2}
    assert parts["state layers"]["params"] > 0 and parts["other"]["params"] == 0
    assert parts["active per token"]["params"] == 3_874_929_408
    assert parts["total"]["source"].startswith("transformers ")


def test_fit_fills_the_memory_with_kv_and_state(tmp_path):
    doc = run_json(
        tmp_path,
        "fit",
        "--hf-config",
        str(QWEN3_NEXT),
        "--gpu",
        "h100-sxm",
        "--gpus",
        "4",
        "--seq-len",
        "32768",
    )
    (r,) = doc["records"]
    # tp 4 over 2 KV heads: each rank keeps one of them; the states split four ways
    per_seq = 32768 * KV_PER_TOKEN // 2 + ceil_div(STATE // 36, 4) * 36
    assert r["kv_bytes_per_sequence_per_gpu"] + r["state_bytes_per_sequence_per_gpu"] == per_seq
    budget = device_spec("h100-sxm").memory_bytes * 9 // 10 - r["weights_bytes_per_gpu"]
    assert r["batch"] == budget // per_seq
    assert r["state_bytes_per_gpu"] == r["batch"] * r["state_bytes_per_sequence_per_gpu"]


def test_predict_reads_and_writes_the_state_at_each_step(tmp_path):
    doc = run_json(
        tmp_path,
        "predict",
        "--hf-config",
        str(QWEN3_NEXT),
        "--gpu",
        "h100-sxm",
        "--seq-len",
        "4096",
        "--batch",
        "8",
    )
    (r,) = doc["records"]
    assert r["step_state_bytes"] == 2 * 8 * STATE
    assert r["step_kv_bytes"] > r["step_state_bytes"]


def test_without_transformers_the_attention_only_with_how_to_count_it(monkeypatch):
    monkeypatch.setattr(hf_fallback, "transformers_installed", lambda: False)
    result = runner.invoke(app, ["params", "--hf-config", str(QWEN3_NEXT)])
    assert result.exit_code == 0, result.output
    assert "whole-model counts unknown (attention only)" in result.output
    assert "install attnbench[hf]" in result.output
    fit = runner.invoke(
        app, ["fit", "--hf-config", str(QWEN3_NEXT), "--memory", "80GiB", "--seq-len", "1024"]
    )
    assert fit.exit_code == 2 and "install attnbench[hf]" in fit.output
    assert len(fit.output.strip().splitlines()) == 1


def write(tmp_path, cfg: dict, name: str = "config.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(cfg))
    return str(path)


LLAMA_LIKE = {
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 4,
    "intermediate_size": 96,
    "vocab_size": 100,
    "pad_token_id": None,
    "bos_token_id": None,
    "eos_token_id": None,
}


def test_an_unknown_hybrid_is_refused_in_one_line_naming_type_and_field(tmp_path):
    cfg = {**LLAMA_LIKE, "model_type": "mystery", "layers_block_type": ["mamba"] * 4}
    result = runner.invoke(app, ["kvmem", "--hf-config", write(tmp_path, cfg)])
    assert result.exit_code == 2
    (line,) = result.output.strip().splitlines()
    assert "'mystery'" in line and "'layers_block_type'" in line and "not counted" in line


def test_which_layers_slide_comes_from_transformers_for_a_type_it_knows(tmp_path, monkeypatch):
    """OLMo-3 sets sliding_window without layer_types: its configuration class windows
    three layers of four. With transformers that is read; without, the cache is refused."""
    cfg = {**LLAMA_LIKE, "model_type": "olmo3", "sliding_window": 16, "num_hidden_layers": 8}
    path = write(tmp_path, cfg)
    doc = run_json(tmp_path, "kvmem", "--hf-config", path, "--seq-len", "64", "--no-measure")
    (r,) = doc["records"]
    assert (r["windowed_layers"], r["sliding_window"]) == (6, 16)
    assert r["kv_bytes"] == (6 * 16 + 2 * 64) * 2 * 2 * 16 * 4  # float32: no dtype given
    monkeypatch.setattr(hf_fallback, "transformers_installed", lambda: False)
    refused = runner.invoke(app, ["kvmem", "--hf-config", path])
    assert refused.exit_code == 2 and "'sliding_window' without 'layer_types'" in refused.output
