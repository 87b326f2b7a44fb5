"""Serving workloads of decode: batches sequence by sequence, paged caches, prefill memory."""

from __future__ import annotations

import csv
import json
from dataclasses import replace

import pytest
import torch

from attnbench.cli import app
from attnbench.experiments import decode, serving
from attnbench.experiments.context import Context
from attnbench.model.batches import parse_batch
from attnbench.model.formulas import batch_step_counts, score_matrix_bytes
from attnbench.modules.paged_cache import PagedKVCache
from tests.experiments.options import decode_options, decode_point, with_options
from tests.helpers import runner

CPU = torch.device("cpu")
FAST = {"warmup": 0, "repeats": 3, "prefill": False, "reference": "none"}
SHAPE = {"d_model": 64, "num_heads": 4, "dtype": "float32"}
#: Providers that run on this CPU without compiling (flex compiles: see its slow test).
CPU_PROVIDERS = ["attnbench", "naive", "sdpa-math", "sdpa-flash"]
SPECS = {
    "ragged": "8q1s16..96",
    "speculative": "2q4s40",
    "mixed": "q24s64_4q1s8..40",
}


def spec_point(spec: str, kv_heads: int, provider: str, **options) -> decode.DecodePoint:
    point = decode_point(**SHAPE, num_kv_heads=kv_heads, batch=1, prompt_len=1, batch_spec=spec)
    return with_options(replace(point, provider=provider), {**FAST, **options})


@pytest.mark.parametrize("kind", SPECS)
@pytest.mark.parametrize("kv_heads", [4, 2, 1])
@pytest.mark.parametrize("provider", CPU_PROVIDERS)
def test_every_cpu_provider_runs_every_batch_and_agrees_with_the_reference(
    kind, kv_heads, provider
):
    record = decode.run(spec_point(SPECS[kind], kv_heads, provider), Context(CPU))
    assert decode.timed(record), record.status  # checked against the reference
    assert record.batch_spec == SPECS[kind] and len(record.samples_ms) == 3


def test_a_provider_without_ragged_batches_is_unsupported_with_its_reason(monkeypatch):
    import dataclasses

    from attnbench.modules import providers

    plain = dataclasses.replace(providers.PROVIDERS["attnbench"], ragged=None, paged=None)
    monkeypatch.setitem(providers.PROVIDERS, "attnbench", plain)
    record = decode.run(spec_point("q4s40", 2, "attnbench"), Context(CPU))
    assert (
        record.status
        == "unsupported: this package's GroupedQueryAttention takes uniform batches only"
    )


@pytest.mark.slow
def test_flex_runs_a_mixed_batch():
    record = decode.run(spec_point(SPECS["mixed"], 2, "flex"), Context(CPU))
    assert decode.timed(record), record.status


def test_a_spec_sets_the_batch_its_context_and_the_counts_of_its_sequences():
    point = spec_point("q24s64_4q1s8..40", 2, "attnbench")
    spec = parse_batch("q24s64_4q1s8..40")
    assert point.batch == 5 and point.query_tokens == 28
    assert point.prompt_len == max(s.kv_len - s.q_len for s in spec.sequences)
    record = decode.analytic_record(point, Context(CPU))
    counts = batch_step_counts(point.shape, spec, "float32")
    assert (record.bytes_per_step, record.flops_per_step) == (counts.bytes, counts.flops)
    assert record.kv_bytes_per_gpu == counts.kv_bytes


def test_a_mask_aligned_top_left_would_be_caught_as_wrong(monkeypatch):
    """The check is what stands between a provider and its timings: a provider whose
    ragged attention aligns its causal mask top-left is `wrong`, not timed."""
    import dataclasses

    import torch.nn.functional as F

    from attnbench.modules import providers, ragged

    def top_left(inputs):
        spans = ragged._spans(inputs)

        def attend(q):
            out = torch.empty_like(q)
            for start, end, k, v in spans:
                o = F.scaled_dot_product_attention(
                    q[start:end].transpose(0, 1).unsqueeze(0),
                    k.transpose(0, 1).unsqueeze(0),
                    v.transpose(0, 1).unsqueeze(0),
                    is_causal=end - start > 1,
                    enable_gqa=True,
                )
                out[start:end] = o[0].transpose(0, 1)
            return out

        return attend

    wrong = dataclasses.replace(providers.PROVIDERS["attnbench"], ragged=lambda: top_left)
    monkeypatch.setitem(providers.PROVIDERS, "attnbench", wrong)
    assert decode.run(spec_point("q4s40", 2, "attnbench"), Context(CPU)).status.startswith("wrong")
    assert decode.timed(decode.run(spec_point("4q1s40", 2, "attnbench"), Context(CPU)))


def paged_point(block_size, provider="attnbench", kv_heads=2, **fields):
    point = decode_point(
        **SHAPE, num_kv_heads=kv_heads, batch=3, prompt_len=37, block_size=block_size, **fields
    )
    return with_options(replace(point, provider=provider), FAST)


@pytest.mark.parametrize("block_size", [1, 16, 64])
def test_a_paged_step_agrees_and_holds_what_kvmem_counts(block_size):
    record = decode.run(paged_point(block_size), Context(CPU))
    assert decode.timed(record), record.status
    assert record.block_size == block_size
    tokens = 38  # the context and the step's token, per sequence
    blocks = -(-tokens // block_size)
    per_token = 2 * 2 * 16 * 4  # K and V, 2 KV heads of 16 dims, float32
    assert record.kv_allocated_bytes == 3 * blocks * block_size * per_token
    assert record.kv_used_bytes == 3 * tokens * per_token
    waste = 100 * (blocks * block_size - tokens) / (blocks * block_size)
    assert record.kv_waste_pct == pytest.approx(waste)


def test_the_paged_bytes_are_those_of_a_real_paged_cache_and_of_kvmem(tmp_path):
    point = paged_point(16)
    cache = decode.filled_cache(point.shape, 3, 38, torch.float32, CPU)
    paged = PagedKVCache.copy_of(cache, 38, 16)
    report = serving.paging(point)
    assert (paged.allocated_bytes, paged.used_bytes) == (report.paged_bytes, report.used_bytes)
    out = tmp_path / "k.json"
    args = ["kvmem", "--d-model", "64", "--heads", "4", "--kv-heads", "2", "--layers", "1"]
    args += ["--batch", "3", "--seq-len", "38", "--page-size", "16", "--dtype", "float32"]
    args += ["--json", str(out)]
    result = runner.invoke(app, [*args, "--quiet"])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(out.read_text())["records"]
    assert row["paged_bytes"] == paged.allocated_bytes


def test_a_provider_without_a_paged_decode_is_unsupported():
    record = decode.run(paged_point(16, provider="naive"), Context(CPU))
    assert record.status.startswith("unsupported:") and "contiguous caches only" in record.status


def test_paged_and_contiguous_steps_are_sampled_together_and_compared(tmp_path):
    out = tmp_path / "p.csv"
    args = ["decode-speed", "--d-model", "64", "--heads", "4", "--kv-heads", "2"]
    args += ["--batch", "3", "--prompt-len", "37", "--block-size", "contiguous,16"]
    args += ["--warmup", "0", "--repeats", "5", "--device", "cpu", "--quiet"]
    result = runner.invoke(app, [*args, "--csv", str(out)])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(out.open()))
    # no_cache is not timed with a paged cache: contiguous no_cache and cache, paged cache
    assert [(r["mode"], r["block_size"]) for r in rows] == [
        ("no_cache", ""),
        ("cache", ""),
        ("cache", "16"),
    ]
    paged = rows[2]
    assert (
        paged["sampling"] == "interleaved" and paged["sampling_group"] == rows[1]["sampling_group"]
    )
    low, ratio, high = (float(paged[f"x_of_contiguous_{c}"]) for c in ("ci_lo", "median", "ci_hi"))
    assert 0 < low <= ratio <= high


def test_link_compares_each_paged_step_with_its_contiguous_one():
    points = [paged_point(None), paged_point(16), paged_point(64), paged_point(16, kv_heads=1)]
    pairs = decode.link(points, decode_options())
    assert decode.Pair("x_of_contiguous", 1, 0) in pairs
    assert decode.Pair("x_of_contiguous", 2, 0) in pairs
    assert decode.Pair("x_of_narrowest", 1, 3) in pairs  # among the paged steps of size 16
    assert not any(p.name == "x_of_narrowest" and p.over == 0 for p in pairs)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--batch-spec", "8q1x"], "--batch-spec 8q1x: expected"),
        (["--batch-spec", "q4s2"], "--batch-spec q4s2:"),
        (["--batch-spec", "8q1s1k", "--batch", "2"], "--batch 2: is set by the batch spec"),
        (["--batch-spec", "", "--prompt-len", "8"], "--batch-spec '': empty"),  # named first
        (["--block-size", "0"], "--block-size 0: must be >= 1"),
        (["--block-size", "16", "--gen-len", "4"], "--gen-len 4: is not timed with a paged cache"),
    ],
)
def test_bad_serving_flags_get_one_line_and_exit_2(args, message):
    base = ["decode-speed", "--d-model", "64", "--heads", "4", "--device", "cpu"]
    result = runner.invoke(app, [*base, *args])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--batch-spec", "2q1s16", "--mode", "no_cache"],
            "invalid combination --mode no_cache --batch-spec 2q1s16: a batch spec or a "
            "paged cache is timed with the cache only: no point would run",
        ),
        (
            ["--block-size", "16", "--mode", "no_cache"],
            "invalid combination --mode no_cache --block-size 16: ",
        ),
        (
            ["--no-prefill", "--prefill-memory"],
            "invalid combination --prefill-memory --no-prefill: the prefill is not timed: "
            "there is no prefill whose peak memory to count",
        ),
        (
            ["--batch-spec", "2q1s16", "--prefill-memory"],
            "invalid combination --prefill-memory --batch-spec 2q1s16: a batch spec or a "
            "paged cache times its step alone",
        ),
        (
            ["--block-size", "16", "--prefill-memory"],
            "invalid combination --prefill-memory --block-size 16: ",
        ),
        (
            ["--mode", "no_cache", "--prefill-memory"],
            "invalid combination --prefill-memory --mode no_cache",
        ),
    ],
)
def test_serving_flags_that_leave_nothing_to_run_or_measure_name_both(args, message):
    base = ["decode-speed", "--d-model", "64", "--heads", "4", "--device", "cpu"]
    result = runner.invoke(app, [*base, "--prompt-len", "32", *args])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: {message}"), result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_a_sweep_file_that_runs_nothing_says_why(tmp_path):
    study = tmp_path / "study.yaml"
    study.write_text(
        "decode:\n  d_model: 64\n  num_heads: 2\n  batch_spec: 2q1s16\n  mode: no_cache\n"
    )
    result = runner.invoke(app, ["run", str(study), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: {study}: invalid combination mode=no_cache")
    assert not (tmp_path / "out").exists()


def test_a_million_sequences_are_sized_once_and_skipped_before_anything_is_built():
    """Its sizes come from the batch once (not once per point copy), and a point that
    does not fit the free memory is skipped before its inputs are made."""
    spec = "1000000q1s16"
    point = decode_point(**SHAPE, num_kv_heads=4, batch=1, prompt_len=1, batch_spec=spec)
    assert (point.batch, point.prompt_len) == (1_000_000, 15)
    batch = serving.batch_of(spec)
    assert batch.__dict__["max_context_len"] == 15  # cached on the batch
    needed = decode.decode_bytes(point)
    record = decode.run(point, Context(CPU), free_bytes=lambda device: needed - 1)
    assert record.status.startswith("skipped")


def test_prefill_memory_is_counted_beside_the_score_matrix():
    """The math kernel's peak is what its provider declares it holds, to 10%: its share
    of the whole score matrix; the flash kernel's is below one matrix."""
    shape = {"d_model": 256, "num_heads": 16, "num_kv_heads": 16, "dtype": "float32"}
    options = {**FAST, "prefill": True, "prefill_memory": True}
    math = with_options(
        decode_point(**shape, batch=1, prompt_len=256, provider="sdpa-math"), options
    )
    record = decode.run(math, Context(CPU))
    scores = score_matrix_bytes(math.shape, 1, 256, 256, 4)
    assert record.score_matrix_bytes == scores
    assert record.prefill_peak_method == "cpu-profiler"
    assert record.prefill_peak_bytes > 2 * scores  # more than the scores: their softmax too
    assert record.prefill_peak_bytes == pytest.approx(record.prefill_analytic_bytes, rel=0.1)
    flash = decode.run(replace(math, provider="sdpa-flash"), Context(CPU))
    assert flash.prefill_peak_bytes < scores


@pytest.mark.parametrize("provider", ["sdpa-efficient", "sdpa-cudnn", "hf"])
def test_the_other_providers_are_unsupported_rows_with_a_reason(provider):
    record = decode.run(spec_point("8q1s16..96", 2, provider), Context(CPU))
    assert record.status.startswith("unsupported: ") and len(record.status) > 20
