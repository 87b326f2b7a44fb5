"""KV-cache capacity: dtypes and scales, sliding windows, paged blocks, MLA and tensor
parallelism. Hand-computed cases first, then measured == analytic on real CPU caches."""

from __future__ import annotations

import csv
import json

import pytest
import torch

from attnbench.cli import app
from attnbench.errors import FieldError, UsageError
from attnbench.experiments import kvmem
from attnbench.experiments.context import Context
from attnbench.experiments.kvmem import KvmemPoint
from attnbench.model.architecture import ModelSpec
from attnbench.model.capacity import (
    KvFormat,
    TokenLayout,
    allocated_tokens,
    cache_bytes,
    kv_cache_bytes,
    kv_heads_per_rank,
    layer_tokens,
    layer_windows,
    paging_report,
    parse_seq_lens,
    tensor_parallel_sizes,
    token_layout,
)
from attnbench.model.dtypes import KV_DTYPES, QUANTIZED_KV_DTYPES, packed_bytes
from attnbench.model.hf_config import spec_from_hf_config
from attnbench.model.presets import PRESETS
from attnbench.modules.quantized_cache import LayerStorage, pack_int4, unpack_int4
from attnbench.study.sweep import StudyConfig, resolve
from tests.helpers import runner

CPU = torch.device("cpu")


def point(**kw) -> KvmemPoint:
    base = {
        "model": None,
        "d_model": 256,
        "num_heads": 8,
        "num_kv_heads": 2,
        "head_dim": 32,
        "num_layers": 2,
        "batch": 2,
        "seq_len": 24,
        "dtype": "float16",
        "scale_dtype": "float16",
    }
    return KvmemPoint(**{**base, **kw})


def model_point(spec: ModelSpec, **kw) -> KvmemPoint:
    """A point of a model, as a study makes it: the model's shape, dtype and spec."""
    base = {
        "model": spec.name,
        "spec": spec,
        "d_model": spec.d_model,
        "num_heads": spec.num_heads,
        "num_kv_heads": spec.num_kv_heads,
        "head_dim": spec.head_dim,
        "num_layers": spec.num_layers,
        "batch": 1,
        "seq_len": 2048,
        "dtype": spec.dtype,
        "scale_dtype": "float16",
    }
    return KvmemPoint(**{**base, **kw})


def field_error(info: pytest.ExceptionInfo) -> tuple:
    """(field, value) of a FieldError: the library names fields, never flags."""
    return info.value.field, info.value.value


# --- element types and scales -------------------------------------------------------------


def test_packed_bytes_by_hand():
    assert packed_bytes(128, "float16") == 256
    assert packed_bytes(128, "float8_e4m3fn") == 128
    assert packed_bytes(128, "int4") == 64  # two values per byte
    assert packed_bytes(5, "int4") == 3  # the last byte holds one value


def test_scales_default_per_tensor_for_float8_per_vector_for_integers_and_groups():
    assert KvFormat("float16").scale_bytes(128) == 0  # unquantised: no scales
    # float8 as vLLM, SGLang and TensorRT-LLM cache it: a static scale per layer's K and V,
    # none in the cache; int8 and int4 one float16 scale per token per head
    for dtype in ("float8_e4m3fn", "float8_e5m2"):
        assert KvFormat(dtype).scale_bytes(128) == 0 and KvFormat(dtype).per_tensor
        assert KvFormat(dtype, "vector").scale_bytes(128) == 2
        assert KvFormat(dtype).scaled() == {"kv"}
    assert KvFormat("int8").scale_bytes(128) == 2 and not KvFormat("int8").per_tensor
    assert KvFormat("int8").scaled() == {"kv", "kv scales"}
    assert KvFormat("int4", "tensor").scale_bytes(128) == 0
    assert KvFormat("float16", "tensor").scaled() == frozenset()
    assert KvFormat("int8", 32).scale_bytes(128) == 4 * 2
    assert KvFormat("int4", 48, "float32").scale_bytes(128) == 3 * 4  # ceil(128 / 48) = 3
    with pytest.raises(FieldError, match="exceeds the 128 elements") as info:
        KvFormat("int8", 256).scale_bytes(128)
    assert field_error(info) == ("kv_scale_group", 256)


def test_bad_formats_name_the_field():
    with pytest.raises(FieldError, match="kv_dtype: fp4: unknown dtype") as info:
        KvFormat("fp4")
    assert field_error(info) == ("kv_dtype", "fp4")
    with pytest.raises(FieldError, match="unknown dtype") as info:
        KvFormat("int8", scale_dtype="int8")
    assert field_error(info) == ("scale_dtype", "int8")
    with pytest.raises(FieldError, match="must be an integer >= 1") as info:
        KvFormat("int8", 0)
    assert field_error(info) == ("kv_scale_group", 0)
    with pytest.raises(FieldError, match="must be an integer >= 1") as info:
        KvFormat("int8", "token")
    assert field_error(info) == ("kv_scale_group", "token")


def test_a_format_names_scales_other_than_its_dtypes_defaults():
    assert KvFormat("float8_e4m3fn").describe() == "float8_e4m3fn"
    assert KvFormat("float8_e4m3fn", "tensor").describe() == "float8_e4m3fn"
    assert KvFormat("float8_e4m3fn", "vector").describe() == "float8_e4m3fn, a scale per vector"
    assert KvFormat("int8", "vector", "float32").describe() == "int8, float32 scales"
    assert KvFormat("int8", "tensor", "float32").describe() == "int8, a scale per tensor"
    assert KvFormat("int4", 32).describe() == "int4 in groups of 32"


def test_llama3_8b_token_bytes_per_dtype_by_hand():
    # 32 layers x 2 (K, V) x 8 KV heads x 128 = 65,536 elements per token.
    spec = PRESETS["llama-3-8b"]
    per_token = {
        "float32": 262144,
        "bfloat16": 131072,
        "float8_e5m2": 65536,  # a scale per tensor, outside the cache
        "int8": 65536 + 512 * 2,
        "int4": 32768 + 512 * 2,
    }
    for dtype, expected in per_token.items():
        layout = token_layout(32, 8, 128, KvFormat(dtype))
        assert spec.num_layers * layout.bytes == expected, dtype


def test_int4_packing_round_trips_every_code():
    codes = torch.arange(-8, 8, dtype=torch.int8).repeat(3)[:47]  # odd width
    packed = pack_int4(codes)
    assert packed.dtype == torch.uint8 and packed.numel() == 24
    assert torch.equal(unpack_int4(packed, 47), codes)


@pytest.mark.parametrize("dtype", KV_DTYPES)
def test_quantised_storage_round_trips(dtype):
    fmt = KvFormat(dtype, 16 if dtype in QUANTIZED_KV_DTYPES else None)
    storage = LayerStorage(2, 8, TokenLayout(4, 64, fmt))
    x = torch.randn(2, 4, 8, 64)
    storage.write(0, x)
    error = (storage.read(8) - x).abs().max().item()
    bound = {
        "float32": 0.0,
        "float16": 2e-3,
        "bfloat16": 2e-2,
        "int8": 3e-2,
        "int4": 0.5,
        "float8_e4m3fn": 0.3,
        "float8_e5m2": 0.6,
    }[dtype]
    assert error <= bound


def test_a_record_names_a_scale_dtype_only_where_the_cache_stores_scales():
    assert kvmem.run(point(kv_dtype="float8_e4m3fn")).scale_dtype is None  # per tensor
    assert kvmem.run(point(kv_dtype="int8")).scale_dtype == "float16"
    assert kvmem.run(point(kv_dtype="float8_e4m3fn", kv_scale_group="vector")).scale_dtype == (
        "float16"
    )


@pytest.mark.parametrize("dtype", QUANTIZED_KV_DTYPES)
def test_per_tensor_storage_keeps_its_first_scales_and_none_in_the_cache(dtype):
    """One static scale for K's heads and one for V's, calibrated on the first write and
    kept outside the cache's bytes; a later value past them saturates."""
    fmt = KvFormat(dtype, "tensor")
    storage = LayerStorage(2, 8, TokenLayout(4, 64, fmt))  # 2 K heads, then 2 V heads
    assert storage.scales is None and storage.nbytes == storage.values.untyped_storage().nbytes()
    prompt = torch.randn(2, 4, 6, 64)
    prompt[:, 2:] *= 10  # V's values ten times K's: a scale each
    storage.write(0, prompt)
    scale = storage.tensor_scale
    assert scale is not None and scale.shape == (1, 4, 1, 1)
    k_max, v_max = prompt[:, :2].abs().max().item(), prompt[:, 2:].abs().max().item()
    ratio = v_max / k_max  # each half's scale is its own absmax over the largest code
    assert torch.allclose(scale.flatten() / scale.flatten()[0], torch.tensor([1, 1, ratio, ratio]))
    late = torch.full((2, 4, 2, 64), 2 * v_max)  # past both scales: saturates at each
    storage.write(6, late)
    assert storage.tensor_scale is scale
    read = storage.read(8)
    step = {"int8": 1 / 127, "int4": 1 / 7}.get(dtype, 0.13)
    assert (read[:, :2, :6] - prompt[:, :2]).abs().max().item() <= step * k_max
    assert (read[:, 2:, :6] - prompt[:, 2:]).abs().max().item() <= step * v_max
    assert torch.allclose(read[:, :2, 6:], torch.full((2, 2, 2, 64), k_max), rtol=0.07)
    assert torch.allclose(read[:, 2:, 6:], torch.full((2, 2, 2, 64), v_max), rtol=0.07)


# --- tensor parallelism --------------------------------------------------------------------


def test_tp_splits_then_replicates_kv_heads():
    assert kv_heads_per_rank(64, 8, 1) == 8
    assert kv_heads_per_rank(64, 8, 4) == 2
    assert kv_heads_per_rank(64, 8, 8) == 1
    assert kv_heads_per_rank(64, 8, 16) == 1  # more ranks than KV heads: one each, replicated
    with pytest.raises(FieldError, match="tp: 3: does not divide the 64 query heads") as info:
        kv_heads_per_rank(64, 8, 3)
    assert field_error(info) == ("tp", 3)
    with pytest.raises(FieldError, match="not a multiple of the 4 KV heads") as info:
        kv_heads_per_rank(24, 4, 6)
    assert field_error(info) == ("tp", 6)


def test_tp_record_per_gpu_and_total():
    # 2 layers x 2 seqs x 24 tokens x 2 (K, V) x 32 x 2 bytes = 12,288 bytes per KV head.
    rec = kvmem.run(point(tp=2))
    assert (rec.kv_bytes, rec.kv_heads_per_gpu) == (2 * 12288, 1)
    assert (rec.kv_bytes_per_gpu, rec.kv_bytes_all_gpus) == (12288, 2 * 12288)
    rec = kvmem.run(point(tp=8))  # tp 8 > 2 KV heads: each rank keeps one
    assert (rec.kv_bytes_per_gpu, rec.kv_bytes_all_gpus) == (12288, 8 * 12288)


# --- sliding windows -----------------------------------------------------------------------


def test_window_keeps_min_of_context_and_window():
    assert layer_tokens(1000, 4096) == 1000  # window longer than the context: no effect
    assert layer_tokens(32768, 4096) == 4096
    assert layer_tokens(32768, None) == 32768


def test_window_override_rules():
    assert layer_windows(3, None, None) == (None, None, None)
    assert layer_windows(3, None, 64) == (64, 64, 64)
    assert layer_windows(4, (4096, None) * 2, 1024) == (1024, None, 1024, None)
    assert layer_windows(2, (4096, 4096), 0) == (None, None)
    with pytest.raises(FieldError, match="must be an integer >= 0") as info:
        layer_windows(2, None, -1)
    assert field_error(info) == ("sliding_window", -1)


def test_mistral_window_at_32k_by_hand():
    spec = PRESETS["mistral-7b"]
    base = model_point(spec, seq_len=32768)
    assert (base.d_model, base.num_heads, base.num_kv_heads, base.head_dim) == (4096, 32, 8, 128)
    assert (base.num_layers, base.dtype) == (32, "bfloat16")
    per_token = 32 * 2 * 8 * 128 * 2  # 131,072 bytes
    windowed = kvmem.run(base)
    assert windowed.kv_bytes == 4096 * per_token and windowed.windowed_layers == 32
    assert windowed.sliding_window == 4096
    full = kvmem.run(model_point(spec, seq_len=32768, sliding_window=0))
    assert full.kv_bytes == 32768 * per_token and full.sliding_window is None
    short = kvmem.run(model_point(spec, seq_len=1000))
    assert short.kv_bytes == 1000 * per_token  # the window is longer than the context


def test_alternating_windows_gemma2_by_hand():
    spec = PRESETS["gemma-2-9b"]
    p = model_point(spec, seq_len=8192)
    assert (p.d_model, p.num_heads, p.num_kv_heads, p.head_dim) == (3584, 16, 8, 256)
    assert (p.num_layers, p.dtype) == (42, "bfloat16")
    per_layer_token = 2 * 8 * 256 * 2
    rec = kvmem.run(p)
    assert rec.kv_bytes == 21 * (4096 + 8192) * per_layer_token
    assert rec.kv_bytes_per_layer == 8192 * per_layer_token  # the largest (global) layer


# --- paged allocation ----------------------------------------------------------------------


def test_page_rounding_divides_and_does_not():
    assert allocated_tokens(256, 16) == 256
    assert allocated_tokens(100, 16) == 112
    assert allocated_tokens(1, 16) == 16
    with pytest.raises(FieldError, match="must be an integer >= 1") as info:
        allocated_tokens(10, 0)
    assert field_error(info) == ("page_size", 0)


def test_paging_report_by_hand():
    layout = TokenLayout(2, 4, KvFormat("float16"))  # 16 bytes per token per layer
    lengths = [100, 50, 200]
    report = paging_report(layout, [None], lengths, 16)
    assert report.used_bytes == 350 * 16
    assert report.paged_bytes == (112 + 64 + 208) * 16
    assert report.contiguous_bytes == 3 * 200 * 16
    assert report.paged_waste_pct == pytest.approx(100 * 34 / 384)
    assert report.contiguous_waste_pct == pytest.approx(100 * 250 / 600)
    divides = paging_report(layout, [None], [64, 128], 64)
    assert divides.paged_bytes == divides.used_bytes and divides.paged_waste_pct == 0.0


def test_paging_with_window_caps_each_layer():
    layout = TokenLayout(2, 4, KvFormat("float16"))
    # Layer 0 windowed at 64: 100 -> 64 tokens (4 blocks); layer 1 global: 100 -> 7 blocks.
    assert cache_bytes(layout, [64, None], [100], 16).total == (64 + 112) * 16


def test_seq_lens_syntax():
    assert parse_seq_lens("100,50,200") == [100, 50, 200]
    assert parse_seq_lens("3x17, 5") == [17, 17, 17, 5]
    assert parse_seq_lens("linspace:100:200:5") == [100, 125, 150, 175, 200]
    assert parse_seq_lens("linspace:1:2:4") == [1, 1, 2, 2]
    bad = {
        "100,,5": "expected N, CxN",
        "0": "must be >= 1",
        "x5": "expected N, CxN",
        "linspace:5:1:3": "HIGH must be >= LOW",
        "linspace:1:5": "expected linspace:",
    }
    for text, reason in bad.items():
        with pytest.raises(FieldError, match=reason) as info:
            parse_seq_lens(text)
        assert info.value.field == "seq_lens", text


# --- MLA -----------------------------------------------------------------------------------


def test_mla_latent_bytes_by_hand():
    spec = PRESETS["deepseek-v3"]
    p = model_point(spec, seq_len=1000, tp=8)
    assert (p.d_model, p.num_heads, p.num_kv_heads, p.head_dim) == (7168, 128, 128, 128)
    assert (p.num_layers, p.dtype) == (61, "bfloat16")
    rec = kvmem.run(p)
    assert rec.variant == "MLA"
    assert rec.bytes_per_token == 61 * (512 + 64) * 2  # one latent, not K and V per head
    assert rec.kv_bytes == 1000 * 61 * 576 * 2
    assert rec.kv_bytes_per_gpu == rec.kv_bytes  # every rank keeps the whole latent
    assert rec.ratio_vs_mha == pytest.approx(576 / (2 * 128 * 128))


# --- the general formula reduces to the original -------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_plain_points_keep_the_original_formula(dtype):
    p = point(dtype=dtype)
    rec = kvmem.run(p, Context(CPU))
    assert rec.kv_bytes == kv_cache_bytes(2, 2, 24, 2, 32, dtype) == rec.measured_bytes
    assert rec.kv_dtype == dtype and rec.scale_bytes == 0 and rec.status == "ok"


# --- measured == analytic on the CPU ---------------------------------------------------------


OPTIONS = [
    {},
    {"sliding_window": 16},
    {"seq_lens": (24, 5, 17), "page_size": 8},
    {"tp": 2, "scale_dtype": "float32"},
]
MEASURED_CASES = [(dtype, options) for dtype in KV_DTYPES for options in OPTIONS] + [
    (dtype, {"kv_scale_group": group})
    for dtype in QUANTIZED_KV_DTYPES
    for group in (12, "vector", "tensor")  # 32 = 12 + 12 + 8
]


@pytest.mark.parametrize("dtype, options", MEASURED_CASES)
def test_measured_equals_analytic(dtype, options):
    rec = kvmem.run(point(kv_dtype=dtype, **options), Context(CPU))
    assert rec.status == "ok"
    assert rec.measured_bytes == rec.kv_bytes
    if "page_size" in options:
        assert rec.measured_paged_bytes == rec.paged_bytes


@pytest.mark.parametrize("dtype", KV_DTYPES)
def test_measured_mla_equals_analytic(dtype):
    spec = PRESETS["deepseek-v2-lite"]
    p = model_point(spec, seq_len=9, kv_dtype=dtype)
    assert (p.d_model, p.num_heads, p.num_kv_heads, p.head_dim) == (2048, 16, 16, 128)
    assert (p.num_layers, p.dtype) == (27, "bfloat16")
    rec = kvmem.run(p, Context(CPU))
    assert rec.status == "ok" and rec.measured_bytes == rec.kv_bytes


# --- config.json ---------------------------------------------------------------------------


def _cfg(**kw) -> dict:
    base = {
        "model_type": "qwen2",
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": 4,
        "vocab_size": 100,
        "intermediate_size": 128,
        "torch_dtype": "bfloat16",
    }
    return {**base, **kw}


def test_qwen2_sliding_window_as_the_model_defines_it():
    off = spec_from_hf_config(
        _cfg(sliding_window=4096, use_sliding_window=False, max_window_layers=2), "q", "q"
    )
    assert off.windows is None
    on = spec_from_hf_config(
        _cfg(sliding_window=4096, use_sliding_window=True, max_window_layers=2), "q", "q"
    )
    assert on.windows == (None, None, 4096, 4096)
    assert spec_from_hf_config(_cfg(sliding_window=4096), "q", "q").windows is None


def test_windows_of_other_model_types():
    mistral = spec_from_hf_config(_cfg(model_type="mistral", sliding_window=4096), "m", "m")
    assert mistral.windows == (4096,) * 4
    assert (
        spec_from_hf_config(_cfg(model_type="mistral", sliding_window=None), "m", "m").windows
        is None
    )
    gemma2 = spec_from_hf_config(_cfg(model_type="gemma2", sliding_window=4096), "g", "g")
    assert gemma2.windows == (4096, None, 4096, None)
    gemma3 = spec_from_hf_config(
        _cfg(model_type="gemma3_text", num_hidden_layers=12, sliding_window=512), "g", "g"
    )
    assert [w is None for w in gemma3.windows].count(True) == 2  # layers 5 and 11
    assert gemma3.windows[5] is None and gemma3.windows[11] is None
    types = ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]
    cfg = _cfg(model_type="gpt_oss", sliding_window=128, layer_types=types)
    listed = spec_from_hf_config(cfg, "l", "l")
    assert listed.windows == (128, None, 128, None)


def test_mla_config_fields():
    cfg = _cfg(
        model_type="deepseek_v3",
        num_attention_heads=4,
        num_key_value_heads=4,
        kv_lora_rank=32,
        qk_rope_head_dim=8,
        qk_nope_head_dim=16,
        v_head_dim=16,
        q_lora_rank=24,
    )
    spec = spec_from_hf_config(cfg, "ds", "ds")
    assert spec.mla is not None and spec.mla.latent_dim == 40 and spec.head_dim == 16
    without_v = {k: v for k, v in cfg.items() if k != "v_head_dim"}
    with pytest.raises(UsageError, match="kv_lora_rank .MLA. given without 'v_head_dim'"):
        spec_from_hf_config(without_v, "x", "x")


# --- command line and YAML -----------------------------------------------------------------


ORIGINAL_COLUMNS = [
    "model",
    "variant",
    "num_layers",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "batch",
    "seq_len",
    "dtype",
    "bytes_per_token",
    "kv_bytes_per_layer",
    "kv_bytes",
    "measured_bytes",
    "ratio_vs_mha",
    "status",
]


def test_cli_flags_and_csv_columns(tmp_path):
    out = tmp_path / "kv.csv"
    result = runner.invoke(
        app,
        [
            "kvmem",
            "--d-model",
            "256",
            "--heads",
            "8",
            "--kv-heads",
            "2",
            "--layers",
            "2",
            "--seq-lens",
            "100,50,200",
            "--page-size",
            "16",
            "--kv-dtype",
            "int4",
            "--kv-scale-group",
            "8",
            "--tp",
            "2",
            "--device",
            "cpu",
            "--csv",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(out.open()))
    assert list(rows[0])[: len(ORIGINAL_COLUMNS)] == ORIGINAL_COLUMNS
    row = rows[0]
    # per token per layer: 4 vectors x (16 bytes of int4 + 4 float16 scales) = 96 bytes
    assert int(row["paged_bytes"]) == 2 * (112 + 64 + 208) * 96
    assert int(row["contiguous_bytes"]) == int(row["kv_bytes"]) == 2 * 3 * 200 * 96
    assert row["measured_paged_bytes"] == row["paged_bytes"] and row["status"] == "ok"
    assert (row["batch"], row["seq_len"], row["tp"]) == ("3", "200", "2")


def test_yaml_fields(tmp_path):
    cfg = tmp_path / "study.yaml"
    cfg.write_text(
        "kvmem:\n  d_model: 256\n  num_heads: 8\n  num_kv_heads: 2\n  num_layers: 2\n"
        "  seq_lens: [100, 50, 200]\n  page_size: 16\n  kv_dtype: [float16, float8_e5m2]\n"
        "  sliding_window: 64\n  tp: 2\n  measure: false\n"
    )
    out = tmp_path / "kv.json"
    result = runner.invoke(app, ["kvmem", "--config", str(cfg), "--json", str(out), "-q"])
    assert result.exit_code == 0, result.output
    records = json.loads(out.read_text())["records"]
    assert [r["kv_dtype"] for r in records] == ["float16", "float8_e5m2"]
    first = records[0]
    assert (first["batch"], first["seq_len"], first["sliding_window"]) == (3, 200, 64)
    # layers windowed at 64: 100, 50, 200 -> 64, 50, 64 tokens; 16 bytes per token per layer
    assert first["used_bytes"] == 2 * (64 + 50 + 64) * 4 * 32 * 2
    assert first["paged_bytes"] == 2 * (64 + 64 + 64) * 4 * 32 * 2


@pytest.mark.parametrize(
    "args, message",
    [
        (["--kv-dtype", "fp4"], "--kv-dtype fp4: unknown dtype 'fp4'"),
        (["--page-size", "0"], "--page-size 0: must be >= 1"),
        (["--sliding-window", "-1"], "--sliding-window -1: must be >= 0"),
        (["--seq-lens", "1,x"], "--seq-lens x: expected N, CxN or linspace:LOW:HIGH:C"),
        (["--tp", "3"], "--tp 3: does not divide the 32 query heads"),
        (
            ["--kv-dtype", "int8", "--kv-scale-group", "999"],
            "--kv-scale-group 999: exceeds the 128 elements",
        ),
    ],
)
def test_bad_flags_exit_2(args, message):
    result = runner.invoke(app, ["kvmem", "--model", "llama-3-8b", "--no-measure", *args])
    assert result.exit_code == 2
    assert result.output.startswith(f"error: {message}"), result.output
    assert "Traceback" not in result.output


def test_seq_lens_stay_one_batch():
    # One batch's lengths are not an axis of the grid: every point keeps the whole list.
    overrides = {
        "d_model": [256],
        "num_heads": [8],
        "num_kv_heads": [2],
        "seq_lens": [24, 5, 17],
        "kv_dtype": ["float16", "int8"],
    }
    points = resolve(StudyConfig(), "kvmem", overrides).points()
    assert [p.kv_dtype for p in points] == ["float16", "int8"]
    for p in points:
        assert (p.seq_lens, p.batch, p.seq_len) == ((24, 5, 17), 3, 24)
    rec = kvmem.run(points[0])
    assert (rec.batch, rec.seq_len) == (3, 24)
    # 1 layer, 2 KV heads of 32 in float16: 256 bytes per token
    assert rec.used_bytes == (24 + 5 + 17) * 256
    assert rec.contiguous_bytes == rec.kv_bytes == 3 * 24 * 256


def test_a_tp_the_heads_refuse_names_those_they_take():
    assert tensor_parallel_sizes(64, 8) == [1, 2, 4, 8, 16, 32, 64]
    assert tensor_parallel_sizes(12, 4) == [1, 2, 4, 12]  # 3 and 6 split no 4 KV heads
    with pytest.raises(
        FieldError, match=r"does not divide the 4 KV heads; tp may be 1, 2, 4 or 12"
    ):
        kv_heads_per_rank(12, 4, 3)
