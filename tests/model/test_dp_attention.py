"""Data-parallel attention: each rank runs its own sequences' attention with the whole
attention's weights and cache, the MLPs and experts every rank's tokens."""

from __future__ import annotations

import pytest

from attnbench.errors import FieldError
from attnbench.model.devices import device_spec
from attnbench.model.model_params import step_parts, weight_bytes_per_rank
from attnbench.model.presets import get_preset
from attnbench.model.roofline import allgather_s, decode_counts, mla_counts, predict_counts
from tests.model.test_states import hybrid


def counts(name: str, batch: int, tp: int, dp: bool, **kwargs):
    spec = get_preset(name)
    return decode_counts(spec, batch, 2048, "bfloat16", None, tp, dp_attention=dp, **kwargs)


def test_one_rank_is_tensor_parallelism_alone():
    assert counts("deepseek-v3", 4, 1, True) == counts("deepseek-v3", 4, 1, False)


def test_each_rank_reads_the_whole_attention():
    spec = get_preset("deepseek-v3")
    whole, split = step_parts(spec, 1)["attention"], step_parts(spec, 8)["attention"]
    # in bfloat16, 2 bytes a weight; a rank looks up its own token in the embeddings, not
    # every rank's 8
    difference = (
        counts("deepseek-v3", 8, 8, True).weight_bytes
        - counts("deepseek-v3", 8, 8, False).weight_bytes
    )
    assert difference == 2 * (whole - split) + 2 * (1 - 8) * 7168
    # and holds them, and the whole embeddings table
    dp_memory = weight_bytes_per_rank(spec, "bfloat16", 8, dp_attention=True)
    table = step_parts(spec, 1)["embeddings"] - step_parts(spec, 8)["embeddings"]
    assert dp_memory - weight_bytes_per_rank(spec, "bfloat16", 8) == 2 * (whole - split + table)


def test_mla_caches_a_ranks_own_sequences_only():
    """Tensor parallelism keeps every sequence's latent on every rank; data-parallel
    attention each rank's own, an eighth of them on eight ranks."""
    spec = get_preset("deepseek-v3")
    split = counts("deepseek-v3", 64, 8, False).kv_bytes
    own = counts("deepseek-v3", 64, 8, True).kv_bytes
    assert split == 8 * own
    assert own == mla_counts(spec, 8, 1, 2049, "bfloat16").kv_bytes


def test_gqa_reads_the_same_cache_either_way():
    """Eight KV heads over eight ranks: a head of every sequence, or every head of an
    eighth of them."""
    assert (
        counts("llama-3-70b", 64, 8, True).kv_bytes == counts("llama-3-70b", 64, 8, False).kv_bytes
    )


def test_the_busiest_rank_runs_the_remainder():
    # 9 sequences over 8 ranks: one rank runs 2
    assert counts("deepseek-v3", 9, 8, True).kv_bytes == counts("deepseek-v3", 16, 8, True).kv_bytes


def test_tokens_are_gathered_and_scattered_around_each_mlp():
    step = counts("deepseek-v3", 32, 8, True)
    assert (step.allreduces, step.gathers) == (0, 2 * 61)
    h200 = device_spec("h200")
    both = predict_counts(step, h200, "bfloat16", 8).allreduce_s
    logits = allgather_s(step.gather_bytes, 8, h200)
    assert both == pytest.approx(2 * 61 * allgather_s(32 * 7168 * 2, 8, h200) + logits)


def test_hybrids_are_refused():
    with pytest.raises(FieldError, match="state layers"):
        decode_counts(hybrid(), 4, 128, "bfloat16", None, 2, dp_attention=True)
