"""Tensor-parallel attention: the head split, and sharded layers summed equal the full one."""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from attnbench.cli import app
from attnbench.errors import FieldError
from attnbench.experiments.decode import timed
from attnbench.measure.lockstep import lockstep_plan
from attnbench.measure.timing import Sampling
from attnbench.model.capacity import kv_cache_bytes
from attnbench.modules.attention import GroupedQueryAttention
from attnbench.modules.kv_cache import KVCache
from attnbench.modules.tensor_parallel import shard_layer, tp_shard_heads
from tests.helpers import runner

D_MODEL, HEAD_DIM, BATCH, MAX_LEN, POSITION, PREFILL = 64, 8, 2, 16, 9, 7
TOLERANCE = 1e-10
#: name -> (num_heads, num_kv_heads) run on two real processes.
VARIANTS = {"mha": (8, 8), "gqa": (8, 2), "mqa": (8, 1)}
WORLD = 2


@pytest.mark.parametrize(
    ("heads", "kv_heads", "tp", "expected"),
    [
        (8, 8, 2, [(range(0, 4), range(0, 4)), (range(4, 8), range(4, 8))]),
        (8, 2, 2, [(range(0, 4), range(0, 1)), (range(4, 8), range(1, 2))]),
        (8, 1, 2, [(range(0, 4), range(0, 1)), (range(4, 8), range(0, 1))]),
        (
            8,
            2,
            4,
            [
                (range(0, 2), range(0, 1)),
                (range(2, 4), range(0, 1)),
                (range(4, 6), range(1, 2)),
                (range(6, 8), range(1, 2)),
            ],
        ),
    ],
    ids=["mha", "gqa", "mqa-replicated", "gqa-replicated-x2"],
)
def test_heads_split_over_ranks(heads, kv_heads, tp, expected):
    assert [tp_shard_heads(heads, kv_heads, tp, rank) for rank in range(tp)] == expected


@pytest.mark.parametrize(
    ("heads", "kv_heads", "tp", "message"),
    [
        (6, 6, 4, "tp: 4: does not divide the 6 query heads"),
        (6, 3, 2, "tp: 2: does not divide the 3 KV heads"),
        (12, 3, 4, "tp: 4: is not a multiple of the 3 KV heads"),
    ],
)
def test_an_impossible_split_names_the_numbers(heads, kv_heads, tp, message):
    """The rule kvmem --tp counts KV bytes per GPU with, and its errors."""
    with pytest.raises(FieldError, match=re.escape(message)):
        tp_shard_heads(heads, kv_heads, tp, 0)


def test_a_rank_outside_the_group_is_refused():
    with pytest.raises(ValueError, match=re.escape("rank must be an integer in [0, 2), got 2")):
        tp_shard_heads(8, 2, 2, 2)


def full_layer(heads: int, kv_heads: int) -> GroupedQueryAttention:
    """The unsharded layer, the same in every process."""
    torch.manual_seed(0)
    return GroupedQueryAttention(
        D_MODEL, heads, kv_heads, head_dim=HEAD_DIM, bias=True, dtype=torch.float64
    )


def filled_cache(k: torch.Tensor, v: torch.Tensor) -> KVCache:
    cache = KVCache(BATCH, k.shape[1], MAX_LEN, HEAD_DIM, dtype=k.dtype)
    cache.update(k, v, 0)
    return cache


def test_a_shard_holds_its_slices_and_rank_0_the_output_bias():
    layer = full_layer(8, 2)
    shards = [shard_layer(layer, 4, rank) for rank in range(4)]
    for rank, shard in enumerate(shards):
        assert (shard.num_heads, shard.num_kv_heads, shard.head_dim) == (2, 1, HEAD_DIM)
        assert shard.q_proj.weight.dtype == torch.float64 and shard.backend == layer.backend
        kv_rows = slice(rank // 2 * HEAD_DIM, (rank // 2 + 1) * HEAD_DIM)
        assert torch.equal(shard.k_proj.weight, layer.k_proj.weight[kv_rows])
        assert torch.equal(shard.v_proj.bias, layer.v_proj.bias[kv_rows])
        assert (shard.o_proj.bias is not None) == (rank == 0)
    assert torch.equal(torch.cat([s.q_proj.weight for s in shards]), layer.q_proj.weight)
    assert torch.equal(torch.cat([s.o_proj.weight for s in shards], 1), layer.o_proj.weight)


@pytest.mark.parametrize(("heads", "kv_heads", "tp"), [(8, 8, 4), (8, 2, 2), (8, 2, 4), (8, 1, 4)])
def test_the_ranks_decode_outputs_sum_to_the_layers(heads, kv_heads, tp):
    """The all-reduce's arithmetic in one process, replicated KV heads included."""
    layer = full_layer(heads, kv_heads)
    k, v = (torch.randn(BATCH, kv_heads, POSITION, HEAD_DIM, dtype=torch.float64) for _ in "kv")
    x = torch.randn(BATCH, 1, D_MODEL, dtype=torch.float64)
    expected = layer.decode_step(x, filled_cache(k, v), POSITION)()
    total = torch.zeros_like(expected)
    for rank in range(tp):
        shard = shard_layer(layer, tp, rank)
        kv = tp_shard_heads(heads, kv_heads, tp, rank)[1]
        total += shard.decode_step(x, filled_cache(k[:, kv], v[:, kv]), POSITION)()
    assert (total - expected).abs().max().item() < TOLERANCE


def _cache_error(part: KVCache, full: KVCache, kv: range, length: int) -> float:
    """How far a rank's cache is from its KV heads of the full cache, over `length` tokens."""
    k = (part.k - full.k[:, kv])[:, :, :length]
    v = (part.v - full.v[:, kv])[:, :, :length]
    return max(k.abs().max().item(), v.abs().max().item())


def _rank_errors(layer: GroupedQueryAttention, rank: int) -> dict[str, float]:
    """Largest differences between this rank's all-reduced outputs (and its cache) and the
    unsharded layer's, for one decode step over a filled cache and for a prefill."""
    shard = shard_layer(layer, WORLD, rank, all_reduce=True)
    kv = tp_shard_heads(layer.num_heads, layer.num_kv_heads, WORLD, rank)[1]
    generator = torch.Generator().manual_seed(1)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator, dtype=torch.float64)

    heads = layer.num_kv_heads
    k, v = randn(BATCH, heads, POSITION, HEAD_DIM), randn(BATCH, heads, POSITION, HEAD_DIM)
    x = randn(BATCH, 1, D_MODEL)
    full, part = filled_cache(k, v), filled_cache(k[:, kv].clone(), v[:, kv].clone())
    expected = layer.decode_step(x, full, POSITION)()
    out = shard.decode_step(x, part, POSITION)()
    errors = {"decode": (out - expected).abs().max().item()}
    errors["decode cache"] = _cache_error(part, full, kv, POSITION + 1)

    prompt = randn(BATCH, PREFILL, D_MODEL)
    full = KVCache(BATCH, heads, MAX_LEN, HEAD_DIM, dtype=torch.float64)
    part = KVCache(BATCH, len(kv), MAX_LEN, HEAD_DIM, dtype=torch.float64)
    expected = layer.causal_call(prompt, cache=full)()
    out = shard.causal_call(prompt, cache=part)()
    errors["prefill"] = (out - expected).abs().max().item()
    errors["prefill cache"] = _cache_error(part, full, kv, PREFILL)
    return errors


def _worker(rank: int, store: str, results: str) -> None:
    """One rank: every variant on a gloo group of WORLD processes, errors to a JSON file."""
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"file://{store}",
        rank=rank,
        world_size=WORLD,
        timeout=timedelta(seconds=60),
    )
    try:
        errors = {name: _rank_errors(full_layer(*heads), rank) for name, heads in VARIANTS.items()}
        Path(results, f"rank{rank}.json").write_text(json.dumps(errors))
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def rank_errors(tmp_path_factory) -> list[dict[str, dict[str, float]]]:
    """Each rank's errors per variant, from one run of WORLD real processes."""
    root = tmp_path_factory.mktemp("tensor_parallel")
    mp.spawn(_worker, args=(str(root / "store"), str(root)), nprocs=WORLD, join=True)
    return [json.loads((root / f"rank{rank}.json").read_text()) for rank in range(WORLD)]


@pytest.mark.integration
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_two_processes_all_reduced_equal_the_full_layer(rank_errors, variant):
    for rank, errors in enumerate(rank_errors):
        worst = {what: error for what, error in errors[variant].items() if error >= TOLERANCE}
        assert not worst, f"rank {rank}: {worst}"


# --- decode-speed --tp: a layer split over torchrun's ranks --------------------------------


def test_lockstep_plan_is_one_fixed_plan_from_the_slowest_probe():
    """Every rank derives the same calls per sample and sample count from the agreed probe:
    blocks spanning min_sample_ms, as many samples as fit max_time, within the limits."""
    adaptive = Sampling(min_repeats=5, max_time_s=1.0, min_sample_ms=5.0, max_repeats=100)
    plan = lockstep_plan(0.4, adaptive, setup=False)
    assert (plan.calls_per_sample, plan.repeats, plan.warmup) == (13, 100, 0)  # 192 fit
    assert lockstep_plan(0.4, replace(adaptive, max_time_s=0.02), setup=False).repeats == 5
    assert lockstep_plan(0.4, adaptive, setup=True).calls_per_sample == 1  # reset each call
    assert lockstep_plan(0.4, replace(adaptive, repeats=7), setup=False).repeats == 7


def test_kv_bytes_per_gpu_is_kvmems_share_of_a_rank():
    """One rank's cache: Hkv / tp heads, or one replicated head when tp > Hkv."""
    full = kv_cache_bytes(1, 2, 100, 8, 64, "float16")
    assert kv_cache_bytes(1, 2, 100, 8, 64, "float16", tp=4, num_heads=32) == full // 4
    assert kv_cache_bytes(1, 2, 100, 1, 64, "float16", tp=4, num_heads=32) == full // 8


def run_cli(*args: str, env: dict[str, str] | None = None):
    return runner.invoke(app, list(args), env=env)


def test_tp_outside_torchrun_exits_2_with_the_command_to_run():
    result = run_cli("decode-speed", "--tp", "2", "--d-model", "64", "--heads", "4")
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "error: --tp 2: splits each point over 2 processes; start them with torchrun "
        "--standalone --nproc-per-node 2 -m attnbench decode-speed --tp 2 ..."
    ]


def test_torchruns_ranks_need_a_matching_tp():
    env = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}
    result = run_cli("decode-speed", "--d-model", "64", "--heads", "4", env=env)
    assert result.exit_code == 2
    assert "--tp 1: torchrun started 2 ranks" in result.output


def test_one_run_has_one_tp_and_a_study_none_above_1(tmp_path):
    result = run_cli("decode-speed", "--tp", "1,2", "--d-model", "64", "--heads", "4")
    assert result.exit_code == 2 and "--tp 1,2: one size per run" in result.output
    study = tmp_path / "study.yaml"
    study.write_text("decode:\n  d_model: 64\n  num_heads: 4\n  tp: 2\n")
    result = run_cli("run", str(study), "--out", str(tmp_path / "out"))
    assert result.exit_code == 2
    assert result.output.startswith(f"error: decode.tp: 2 ({study}): a study runs each")
    assert not (tmp_path / "out").exists()


@pytest.mark.integration
def test_torchrun_decode_speed_tp2_times_the_split_layer(tmp_path):
    """Two real ranks (gloo): every point is checked against the whole layer's reference
    and timed; each record has the slowest rank's step, the all-reduce alone, and the KV
    bytes per GPU that kvmem --tp 2 counts for the same shape, replicated MQA included."""
    out = tmp_path / "tp2.json"
    torchrun = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
    ]
    args = [
        "decode-speed",
        "--tp",
        "2",
        "--d-model",
        "64",
        "--heads",
        "4",
        "--kv-heads",
        "4,2,1",
        "--prompt-len",
        "24",
        "--gen-len",
        "2",
        "--repeats",
        "3",
        "--json",
        str(out),
    ]
    done = subprocess.run(
        [*torchrun, "-m", "attnbench", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("Decode on") == 1  # rank 0 alone reports
    records = json.loads(out.read_text())["records"]
    assert [(r["num_kv_heads"], r["mode"]) for r in records] == [
        (kv, mode) for kv in (4, 2, 1) for mode in ("no_cache", "cache")
    ]
    for r in records:
        assert r["tp"] == 2 and timed(r), r["status"]
        assert len(r["samples_ms"]) == len(r["allreduce_samples_ms"]) == 3
        assert r["step_ms_median"] > 0 and r["allreduce_ms_median"] > 0
        assert r["gen_ms_median"] > 0
    kvmem = run_cli(
        "kvmem",
        "--d-model",
        "64",
        "--heads",
        "4",
        "--kv-heads",
        "4,2,1",
        "--seq-len",
        "24",
        "--dtype",
        "float32",
        "--tp",
        "2",
        "--json",
        str(tmp_path / "kv.json"),
    )
    assert kvmem.exit_code == 0, kvmem.output
    per_gpu = {
        r["num_kv_heads"]: r["kv_bytes_per_gpu"]
        for r in json.loads((tmp_path / "kv.json").read_text())["records"]
    }
    cached = {r["num_kv_heads"]: r["kv_bytes_per_gpu"] for r in records if r["mode"] == "cache"}
    assert cached == per_gpu == {4: 2 * 24 * 2 * 16 * 4, 2: 24 * 2 * 16 * 4, 1: 24 * 2 * 16 * 4}


@pytest.mark.integration
def test_the_allreduce_benchmark_times_every_size_on_the_slowest_rank(tmp_path):
    """scripts/allreduce_bench.py under torchrun, two gloo ranks: a row per message size,
    its time the median of the slowest rank's samples, and the bus bandwidth of two ranks
    the algorithm bandwidth (2 (n - 1) / n = 1)."""
    out = tmp_path / "allreduce.json"
    script = Path(__file__).resolve().parents[2] / "scripts" / "allreduce_bench.py"
    env = {**os.environ, "PYTHONPATH": str(script.parents[1])}
    run = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
        + [str(script), "--json", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    document = json.loads(out.read_text())
    assert document["ranks"] == 2
    assert [r["bytes"] for r in document["rows"]] == [4096, 65536, 1048576]
    for row in document["rows"]:
        assert row["time_us"] > 0 and len(row["samples_ms"]) == 15
        assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"])
        # the slowest rank's samples: the median of the maxima over the ranks
        assert row["time_us"] == pytest.approx(1e3 * statistics.median(row["samples_ms"]))
