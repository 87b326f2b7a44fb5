"""`attnbench kvmem`: KV-cache bytes against hand-computed cases, measured on the CPU."""

from __future__ import annotations

import csv
import dataclasses
import json
import re
import time
from pathlib import Path

import pytest
import torch

from attnbench.cli import app
from attnbench.experiments import kvmem
from attnbench.experiments.context import Context
from attnbench.experiments.kvmem import KvmemPoint, KvmemRecord
from attnbench.measure.memory import measure_cache_bytes
from attnbench.model.units import format_bytes
from attnbench.study.output import write_csv
from attnbench.study.runner import plan_command, run_study
from attnbench.study.sweep import StudyConfig, resolve
from tests.helpers import runner

CONFIGS = Path(__file__).parents[2] / "configs"
CPU = torch.device("cpu")
GiB, MiB = 1024**3, 1024**2

CSV_COLUMNS = [
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


def kvmem_json(tmp_path, *args) -> list[dict]:
    """Run `attnbench kvmem ARGS --json` quietly and return its records."""
    out = tmp_path / "kvmem.json"
    result = runner.invoke(app, ["kvmem", *map(str, args), "--json", str(out), "-q"])
    assert result.exit_code == 0, result.output
    assert result.output == ""
    return json.loads(out.read_text())["records"]


def point(d_model, heads, kv_heads, layers=1, batch=1, seq=1, dtype="float16", head_dim=None):
    return KvmemPoint(
        d_model=d_model,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        num_layers=layers,
        batch=batch,
        seq_len=seq,
        dtype=dtype,
        scale_dtype="float16",
    )


# ------------------------------------------------------------- hand-computed cases


@pytest.mark.parametrize(
    ("kv_heads", "variant", "per_token", "per_layer"),
    [
        # d_model 4096, 32 heads -> head_dim 128; fp16 (2 bytes); 1 layer; batch 32 x 2048
        # per token: 2 (K,V) * 1 layer * Hkv * 128 * 2 bytes; per layer: x 32 x 2048
        (32, "MHA", 2 * 32 * 128 * 2, 1 * GiB),  # 16,384 B/token; 32*2048*16384 = 1 GiB
        (8, "GQA-8", 2 * 8 * 128 * 2, 256 * MiB),  # 4,096 B/token -> 256 MiB
        (4, "GQA-4", 2 * 4 * 128 * 2, 128 * MiB),  # 2,048 B/token -> 128 MiB
        (1, "MQA", 2 * 1 * 128 * 2, 32 * MiB),  # 512 B/token -> 32 MiB
    ],
)
def test_article_variants(kv_heads, variant, per_token, per_layer):
    rec = kvmem.run(point(4096, 32, kv_heads, batch=32, seq=2048))
    assert rec.variant == variant
    assert rec.head_dim == 128
    assert rec.bytes_per_token == per_token
    assert rec.kv_bytes_per_layer == per_layer
    assert rec.kv_bytes == per_layer  # one layer
    assert rec.ratio_vs_mha == kv_heads / 32
    assert rec.measured_bytes is None


def test_llama_2_70b_gqa():
    # 80 layers, 8 KV heads, head_dim 128, fp16:
    # 2 * 80 * 8 * 128 * 2 = 327,680 bytes per token; x 4096 tokens = 1,342,177,280 bytes
    rec = kvmem.run(point(8192, 64, 8, layers=80, batch=1, seq=4096))
    assert rec.bytes_per_token == 327_680
    assert rec.kv_bytes == 1_342_177_280
    # one layer: 2 * 8 * 128 * 2 * 4096 = 16,777,216 (16 MiB)
    assert rec.kv_bytes_per_layer == 16_777_216
    assert rec.ratio_vs_mha == 8 / 64
    assert rec.variant == "GQA-8"


def test_mqa_falcon_shape():
    # falcon-7b: 32 layers, 1 KV head, head_dim 4544 / 71 = 64, bf16:
    # 2 * 32 * 1 * 64 * 2 = 8,192 bytes per token; batch 4 x 2048 tokens = 67,108,864
    rec = kvmem.run(point(4544, 71, 1, layers=32, batch=4, seq=2048, dtype="bfloat16"))
    assert rec.head_dim == 64
    assert rec.variant == "MQA"
    assert rec.bytes_per_token == 8_192
    assert rec.kv_bytes == 67_108_864
    assert rec.ratio_vs_mha == 1 / 71


def test_explicit_head_dim():
    # d_model 512, 8 heads, 2 KV heads, head_dim 32 (not 512/8 = 64), 3 layers, fp32:
    # 2 * 3 * 2 * 32 * 4 = 1,536 bytes per token; batch 2 x 10 tokens = 30,720 bytes;
    # one layer: 30,720 / 3 = 10,240
    p = point(512, 8, 2, layers=3, batch=2, seq=10, dtype="float32", head_dim=32)
    rec = kvmem.run(p)
    assert rec.head_dim == 32
    assert rec.bytes_per_token == 1_536
    assert rec.kv_bytes == 30_720
    assert rec.kv_bytes_per_layer == 10_240
    assert rec.ratio_vs_mha == 0.25
    assert rec.variant == "GQA-2"


def test_default_dtype_is_float16():
    # no dtype given and no model: the kvmem section's default, float16
    section = resolve(StudyConfig(), "kvmem", {"d_model": [512], "num_heads": [8]})
    (p,) = section.points()
    assert p.dtype == "float16"
    rec = kvmem.run(p)
    assert rec.dtype == "float16"
    assert rec.bytes_per_token == 2 * 8 * 64 * 2  # 2,048


def test_billion_sequences_are_computed_not_listed():
    # 2 * L * B * S * Hkv * D * b for Llama-2-70B's shape (80 layers, 8 KV heads of 128,
    # float16) at batch 10**9 and 4096 tokens; the batch is a count, never a list of lengths.
    p = KvmemPoint(
        d_model=8192,
        num_heads=64,
        num_kv_heads=8,
        num_layers=80,
        batch=10**9,
        seq_len=4096,
        dtype="float16",
        scale_dtype="float16",
    )
    start = time.perf_counter()
    rec = kvmem.run(p)
    assert time.perf_counter() - start < 1.0
    assert rec.kv_bytes == 2 * 80 * 10**9 * 4096 * 8 * 128 * 2  # 1,342,177,280,000,000,000
    assert rec.kv_bytes == 1_342_177_280_000_000_000
    assert rec.kv_bytes_per_layer == rec.kv_bytes // 80
    assert rec.bytes_per_token == 327_680
    assert (rec.batch, rec.seq_len, rec.measured_bytes) == (10**9, 4096, None)
    # paged in blocks of 16 tokens (which divide 4096): no waste, still counted, not listed
    start = time.perf_counter()
    paged = kvmem.run(dataclasses.replace(p, page_size=16))
    assert time.perf_counter() - start < 1.0
    assert paged.paged_bytes == paged.used_bytes == paged.contiguous_bytes == rec.kv_bytes


# ------------------------------------------------------------------ the command


def test_cli_article_config(tmp_path):
    records = kvmem_json(tmp_path, "--config", CONFIGS / "article-tables.yaml", "--no-measure")
    per_layer = {r["variant"]: r["kv_bytes_per_layer"] for r in records}
    assert per_layer == {"MHA": 1 * GiB, "GQA-8": 256 * MiB, "GQA-4": 128 * MiB, "MQA": 32 * MiB}
    for r in records:
        assert (r["batch"], r["seq_len"], r["dtype"], r["num_layers"]) == (32, 2048, "float16", 1)


def test_cli_flags_match_article(tmp_path):
    records = kvmem_json(
        tmp_path,
        "--d-model",
        4096,
        "--heads",
        32,
        "--kv-heads",
        "32,8,4,1",
        "--batch",
        32,
        "--seq-len",
        2048,
        "--dtype",
        "float16",
        "--no-measure",
    )
    assert [r["kv_bytes"] for r in records] == [1 * GiB, 256 * MiB, 128 * MiB, 32 * MiB]
    assert [r["ratio_vs_mha"] for r in records] == [1.0, 0.25, 0.125, 0.03125]


def test_cli_llama_2_70b(tmp_path):
    (rec,) = kvmem_json(
        tmp_path, "--model", "llama-2-70b", "--seq-len", 4096, "--dtype", "float16", "--no-measure"
    )
    # 2 * 80 * 8 * 128 * 2 = 327,680 B/token; x 4096 = 1,342,177,280 B
    assert rec["num_layers"] == 80
    assert rec["batch"] == 1
    assert rec["bytes_per_token"] == 327_680
    assert rec["kv_bytes"] == 1_342_177_280
    assert rec["measured_bytes"] is None


def test_without_layers_and_model_one_layer(tmp_path):
    (rec,) = kvmem_json(tmp_path, "--d-model", 512, "--heads", 8, "--seq-len", 16, "--no-measure")
    assert rec["num_layers"] == 1
    assert rec["model"] is None
    assert rec["kv_bytes"] == rec["kv_bytes_per_layer"]


def test_layers_flag(tmp_path):
    records = kvmem_json(
        tmp_path,
        "--d-model",
        512,
        "--heads",
        8,
        "--kv-heads",
        2,
        "--layers",
        "1,4",
        "--seq-len",
        16,
        "--no-measure",
    )
    by_layers = {r["num_layers"]: r for r in records}
    assert set(by_layers) == {1, 4}
    # 2 * L * 2 KV heads * 64 * 2 bytes
    assert by_layers[1]["bytes_per_token"] == 512
    assert by_layers[4]["bytes_per_token"] == 2_048
    assert by_layers[4]["kv_bytes"] == 4 * by_layers[4]["kv_bytes_per_layer"]


def test_model_uses_its_layers_and_dtype(tmp_path):
    (rec,) = kvmem_json(tmp_path, "--model", "llama-3-8b", "--seq-len", 8, "--no-measure")
    assert rec["num_layers"] == 32
    assert rec["dtype"] == "bfloat16"
    assert rec["bytes_per_token"] == 2 * 32 * 8 * 128 * 2  # 131,072
    (rec32,) = kvmem_json(
        tmp_path, "--model", "llama-3-8b", "--seq-len", 8, "--dtype", "float32", "--no-measure"
    )
    assert rec32["dtype"] == "float32"
    assert rec32["bytes_per_token"] == 2 * rec["bytes_per_token"]


def test_measured_equals_analytic_on_cpu(tmp_path):
    records = kvmem_json(
        tmp_path,
        "--d-model",
        256,
        "--heads",
        8,
        "--kv-heads",
        "8,2,1",
        "--layers",
        "1,3",
        "--batch",
        "1,2",
        "--seq-len",
        16,
        "--dtype",
        "float32,bfloat16",
        "--device",
        "cpu",
        "--measure",
    )
    assert len(records) == 3 * 2 * 2 * 2
    for r in records:
        assert r["measured_bytes"] == r["kv_bytes"], r
        assert isinstance(r["measured_bytes"], int)
        assert r["status"] == "ok"


def test_measure_cache_bytes_directly():
    # 2 layers * (K and V) * batch 3 * 2 KV heads * 5 tokens * head_dim 4 * 2 bytes = 960
    measured, status = measure_cache_bytes(2, 3, 5, 2, 4, "float16", CPU, 960)
    assert (measured, status) == (960, "ok")


def test_skipped_when_cache_does_not_fit(tmp_path):
    free = 4096
    # 1 layer, 4 heads of 16, fp16: 2 * 4 * 16 * 2 = 256 B/token (MHA), 64 B/token (MQA)
    # seq 16: MHA 4,096 B (fits exactly), MQA 1,024 B; seq 64: MHA 16,384 B (does not fit)
    plan = plan_command(
        "kvmem",
        None,
        {
            "d_model": [64],
            "num_heads": [4],
            "num_kv_heads": [4, 1],
            "seq_len": [16, 64],
            "device": "cpu",
        },
    )
    seen = []

    def execute(task, context):
        seen.append(context.device)
        return kvmem.run(task.point, context, free_bytes=lambda device: free)

    result = run_study(plan, execute=execute)
    assert seen == [CPU] * 4
    out = tmp_path / "k.csv"
    write_csv(out, result.records["kvmem"], KvmemRecord)
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 4
    for row in rows:
        kv = int(row["kv_bytes"])
        if kv > free:
            assert row["measured_bytes"] == ""
            assert row["status"] == (
                f"skipped: needs {format_bytes(kv)}, {format_bytes(free)} free"
            )
            assert re.fullmatch(r"skipped: needs .+, .+ free", row["status"])
        else:
            assert int(row["measured_bytes"]) == kv
            assert row["status"] == "ok"
    assert sum(row["measured_bytes"] == "" for row in rows) == 1


def test_no_measure_never_measures():
    def boom(device):
        raise AssertionError("--no-measure must not look at free memory")

    plan = plan_command(
        "kvmem",
        None,
        {"d_model": [64], "num_heads": [4], "seq_len": [8], "measure": False},
    )
    result = run_study(plan, execute=lambda task, ctx: kvmem.run(task.point, ctx, boom))
    (rec,) = result.records["kvmem"]
    assert rec.measured_bytes is None
    assert "skipped" not in rec.status
    # the same point, measured, does ask how much memory is free
    (task,) = plan.tasks
    with pytest.raises(AssertionError, match="must not look at free memory"):
        kvmem.run(task.point, Context(CPU), free_bytes=boom)


def test_csv_columns(tmp_path):
    out = tmp_path / "k.csv"
    result = runner.invoke(
        app,
        [
            "kvmem",
            "--model",
            "mistral-7b",
            "--seq-len",
            "32",
            "--no-measure",
            "--csv",
            str(out),
            "-q",
        ],
    )
    assert result.exit_code == 0, result.output
    with out.open() as fh:
        reader = csv.reader(fh)
        header = next(reader)
        (row,) = list(reader)
    assert header[: len(CSV_COLUMNS)] == CSV_COLUMNS
    values = dict(zip(header, row, strict=True))
    assert values["model"] == "mistral-7b"
    assert values["variant"] == "GQA-8"
    # 2 * 32 * 8 * 128 * 2 = 131,072 B/token; x 32 = 4,194,304
    assert values["bytes_per_token"] == "131072"
    assert values["kv_bytes"] == "4194304"
    assert values["measured_bytes"] == ""


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error without CUDA")
# ids avoid the bare word "cuda", which conftest.py reads as the `cuda` marker
@pytest.mark.parametrize("device", ["cuda", "cuda:0"], ids=["default", "index0"])
def test_cuda_without_cuda_exits_2(device):
    result = runner.invoke(app, ["kvmem", "--d-model", "64", "--heads", "4", "--device", device])
    assert result.exit_code == 2
    assert result.output.startswith(f"error: --device {device}: ")
    assert "CUDA" in result.output
    assert "Traceback" not in result.output


def test_unknown_device_exits_2():
    result = runner.invoke(app, ["kvmem", "--d-model", "64", "--heads", "4", "--device", "tpu"])
    assert result.exit_code == 2
    assert "--device tpu: unknown device" in result.output


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--d-model", "64", "--heads", "4", "--batch", "0"], "--batch 0: must be >= 1"),
        (["--d-model", "64", "--heads", "4", "--seq-len", "x"], "--seq-len x: expected integer"),
        (["--d-model", "64", "--heads", "4", "--dtype", "fp8"], "--dtype fp8: unknown dtype"),
        (
            ["--d-model", "64", "--heads", "4", "--kv-heads", "3"],
            "invalid combination --d-model 64 --heads 4 --kv-heads 3: "
            "num_kv_heads 3 does not divide num_heads 4",
        ),
        (["--d-model", "60", "--heads", "8"], "num_heads 8 does not divide d_model 60"),
        (["--d-model", "60", "--heads", "8"], "invalid combination --d-model 60 --heads 8"),
        (["--heads", "4"], "give --d-model and --heads or --model"),
        (
            ["--d-model", "64", "--heads", "4", "--seq-lens", "8x512", "--batch", "2"],
            "--batch 2: is set by seq_lens (its lengths): give one or the other",
        ),
        ([], "nothing to run"),
    ],
)
def test_bad_flags_exit_2(args, needle):
    result = runner.invoke(app, ["kvmem", *args, "--no-measure"])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: ")
    assert needle in result.output
    assert "Traceback" not in result.output


def test_an_mla_cache_is_not_given_kv_heads_it_does_not_cache():
    """DeepSeek-V3 caches one latent a token: its title said '128 kv heads · head_dim
    128', the attention's shape, which is not what it caches."""
    result = runner.invoke(app, ["kvmem", "--model", "deepseek-v3", "--no-measure"])
    assert result.exit_code == 0, result.output
    title = result.stdout.split("┏")[0]
    assert "MLA" in result.stdout and "kv heads" not in title and "head_dim" not in title
    plain = runner.invoke(app, ["kvmem", "--model", "llama-3-8b", "--no-measure"])
    assert "8 kv heads · head_dim 128" in " ".join(plain.stdout.split("┏")[0].split())
