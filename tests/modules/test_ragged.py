"""Attention over a ragged batch: every implementation against the explicit reference, the
bottom-right causal mask, the cache writes, and agreement with the uniform decode step."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend

from attnbench.modules import ragged
from attnbench.modules.attention import GroupedQueryAttention
from attnbench.modules.kv_cache import KVCache
from attnbench.modules.providers import check_output
from attnbench.modules.workload import Unsupported

D_MODEL, HEADS = 32, 4
#: (num_kv_heads, label) over 4 query heads.
VARIANTS = {"MHA": 4, "GQA": 2, "MQA": 1}
BATCHES = {
    "uniform-decode": [(1, 9)] * 3,
    "ragged-decode": [(1, 5), (1, 17), (1, 33)],
    "speculative": [(4, 12), (4, 20)],
    "mixed": [(8, 8), (1, 10), (1, 3)],
    "chunked-prefill": [(6, 14)],
}
#: Every implementation on the CPU; on torch's CPU kernels each runs every batch (the
#: flash kernel takes a boolean mask there, and the lower-right bias is materialised).
IMPLEMENTATIONS = {
    "reference": ragged.reference,
    "sdpa-padded-math": ragged.sdpa_padded(SDPBackend.MATH),
    "sdpa-padded-flash": ragged.sdpa_padded(SDPBackend.FLASH_ATTENTION),
    "sdpa-per-sequence-math": ragged.sdpa_per_sequence(SDPBackend.MATH),
    "sdpa-per-sequence-flash": ragged.sdpa_per_sequence(SDPBackend.FLASH_ATTENTION),
    "sdpa-padded": ragged.sdpa_padded(),
    "flex-unfused": ragged.flex(compiled=False),
}


def layer(kv_heads: int) -> GroupedQueryAttention:
    return GroupedQueryAttention(D_MODEL, HEADS, kv_heads)


def poisoned(inputs: ragged.RaggedInputs) -> ragged.RaggedInputs:
    """The inputs with large values in every padding slot of the caches, so that an
    implementation reading past a sequence's keys is far off."""
    for i, (_, kv_len) in enumerate(inputs.sequences):
        inputs.k_cache[i, kv_len:] = 30.0
        inputs.v_cache[i, kv_len:] = 1e3
    return inputs


@pytest.mark.parametrize("name", IMPLEMENTATIONS)
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("variant", VARIANTS)
@torch.inference_mode()
def test_every_cpu_implementation_runs_every_batch_and_matches_the_reference(variant, batch, name):
    inputs = poisoned(ragged.ragged_inputs(layer(VARIANTS[variant]), BATCHES[batch]))
    expected = ragged.reference_step(inputs)
    out = ragged.ragged_step(inputs, IMPLEMENTATIONS[name])()
    assert out.shape == (sum(q for q, _ in BATCHES[batch]), D_MODEL)
    assert check_output(out, expected) is None


def rows_one_by_one(inputs: ragged.RaggedInputs, q: torch.Tensor) -> torch.Tensor:
    """The attention computed without any mask: query row r of a sequence attends the
    slice of its first kv_len - q_len + r + 1 keys (float64, K/V expanded to every head)."""
    groups = inputs.layer.group_size
    out = []
    start = 0
    for i, (q_len, kv_len) in enumerate(inputs.sequences):
        for r in range(q_len):
            keys = kv_len - q_len + r + 1
            k, v = (
                c[i, :keys].double().repeat_interleave(groups, dim=1).transpose(0, 1)
                for c in (inputs.k_cache, inputs.v_cache)
            )
            row = q[start + r].double().unsqueeze(1)  # (Hq, 1, D)
            out.append(F.scaled_dot_product_attention(row, k, v).squeeze(1))
        start += q_len
    return torch.stack(out)


@pytest.mark.parametrize("name", IMPLEMENTATIONS)
@torch.inference_mode()
def test_the_causal_mask_is_aligned_bottom_right(name):
    """Several queries over a longer cache: query row r sees the cached keys and the new
    ones up to itself, not only keys 0 .. r as a top-left mask would let it."""
    inputs = poisoned(ragged.ragged_inputs(layer(2), [(4, 12), (3, 3), (2, 9)]))
    q = torch.randn(len(inputs.x), HEADS, D_MODEL // HEADS)
    expected = rows_one_by_one(inputs, q)
    out = IMPLEMENTATIONS[name](inputs)(q)
    torch.testing.assert_close(out.double(), expected, atol=1e-5, rtol=1e-5)
    first = inputs.k_cache[0, :1].repeat_interleave(2, dim=1).transpose(0, 1)
    top_left_row0 = F.scaled_dot_product_attention(q[:1].transpose(0, 1), first, first)
    assert not torch.allclose(out[0], top_left_row0.squeeze(1), atol=1e-2)


def test_the_padded_mask_masks_padding_and_gives_padding_rows_one_key():
    inputs = ragged.ragged_inputs(layer(1), [(2, 4), (1, 2)])
    mask = ragged.padded_mask(inputs)
    assert mask.shape == (2, 1, 2, 4)
    assert mask[0, 0].tolist() == [[True, True, True, False], [True, True, True, True]]
    assert mask[1, 0].tolist() == [[True, True, False, False], [True, False, False, False]]


@pytest.mark.parametrize("name", IMPLEMENTATIONS)
@pytest.mark.parametrize("variant", VARIANTS)
@torch.inference_mode()
def test_a_uniform_decode_batch_is_the_layers_decode_step(variant, name):
    """Three decodes at context 8 give what GroupedQueryAttention.decode_step gives over a
    contiguous KVCache holding the same cached K/V, and write the same new K/V."""
    attn = layer(VARIANTS[variant])
    inputs = ragged.ragged_inputs(attn, [(1, 9)] * 3)
    cache = KVCache(3, attn.num_kv_heads, 9, attn.head_dim)
    cache.k[:, :, :8] = inputs.k_cache[:, :8].transpose(1, 2)
    cache.v[:, :, :8] = inputs.v_cache[:, :8].transpose(1, 2)
    expected = attn.decode_step(inputs.x.view(3, 1, D_MODEL), cache, 8)()
    out = ragged.ragged_step(inputs, IMPLEMENTATIONS[name])()
    torch.testing.assert_close(out, expected.view(3, D_MODEL), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(inputs.k_cache.transpose(1, 2), cache.k)
    torch.testing.assert_close(inputs.v_cache.transpose(1, 2), cache.v)


@torch.inference_mode()
def test_a_step_writes_only_its_new_tokens_and_can_be_repeated():
    attn = layer(2)
    inputs = ragged.ragged_inputs(attn, [(4, 12), (1, 5)])
    before_k, before_v = inputs.k_cache.clone(), inputs.v_cache.clone()
    step = ragged.ragged_step(inputs, ragged.sdpa_padded())
    first = step()
    new_k = F.linear(inputs.x, attn.k_proj.weight).view(5, 2, -1)
    written = torch.zeros(inputs.k_cache.shape[:2], dtype=torch.bool)
    written[0, 8:12] = written[1, 4] = True
    torch.testing.assert_close(inputs.k_cache[written], new_k)
    assert torch.equal(inputs.k_cache[~written], before_k[~written])
    assert torch.equal(inputs.v_cache[~written], before_v[~written])
    assert torch.equal(step(), first)


def test_inputs_are_seeded_random_in_the_layers_dtype():
    attn = layer(2).to(torch.bfloat16)
    a, b = (ragged.ragged_inputs(attn, [(3, 7), (1, 2)], seed=5) for _ in range(2))
    c = ragged.ragged_inputs(attn, [(3, 7), (1, 2)], seed=6)
    assert a.x.shape == (4, D_MODEL) and a.k_cache.shape == (2, 7, 2, D_MODEL // HEADS)
    assert a.x.dtype == a.k_cache.dtype == torch.bfloat16
    assert torch.equal(a.x, b.x) and torch.equal(a.v_cache, b.v_cache)
    assert not torch.equal(a.x, c.x)
    assert (a.k_cache != 0).all() and (a.x != 0).all()
    assert a.q_starts == [0, 3, 4]
    assert a.slots().tolist() == [4, 5, 6, 8]


@pytest.mark.parametrize(
    ("sequences", "message"),
    [
        ([], "at least one sequence"),
        ([(0, 4)], "sequence 0: q_len must be a positive integer, got 0"),
        ([(1, 2), (2, 1)], r"sequence 1: kv_len 1 < q_len 2"),
        ([(1, 2.5)], "sequence 0: kv_len must be a positive integer"),
    ],
)
def test_malformed_sequences_are_refused(sequences, message):
    with pytest.raises(ValueError, match=message):
        ragged.ragged_inputs(layer(1), sequences)


def test_a_kernel_that_refuses_the_batch_is_unsupported_with_its_reason():
    """The memory-efficient kernel has no CPU implementation: preparing raises Unsupported
    naming the kernel, the way and torch's reason, never computing something else."""
    inputs = ragged.ragged_inputs(layer(2), BATCHES["speculative"])
    for implementation, how in (
        (ragged.sdpa_padded(SDPBackend.EFFICIENT_ATTENTION), "a padded batch"),
        (ragged.sdpa_per_sequence(SDPBackend.EFFICIENT_ATTENTION), "lower-right causal bias"),
    ):
        with pytest.raises(Unsupported, match=f"efficient_attention SDPA kernel cannot run.*{how}"):
            implementation(inputs)


@pytest.mark.slow
@torch.inference_mode()
def test_compiled_flex_matches_the_reference():
    inputs = poisoned(ragged.ragged_inputs(layer(2), BATCHES["mixed"]))
    out = ragged.ragged_step(inputs, ragged.flex())()
    assert check_output(out, ragged.reference_step(inputs)) is None
