"""The model layer's hybrid and counted models, by hand and without transformers: state
bytes per sequence, batch and rank; the layer kinds; the roofline of a step that reads and
writes the state; the parts of a model counted by transformers, whole and per rank."""

from __future__ import annotations

from dataclasses import replace

import pytest

from attnbench.errors import UsageError
from attnbench.model.architecture import CountedModel, ModelSpec, StateSpec
from attnbench.model.capacity import state_bytes
from attnbench.model.model_params import (
    COUNTED_PARTS,
    active_params,
    part_params,
    total_params,
    weight_bytes_per_rank,
)
from attnbench.model.roofline import STATE_FLOPS, decode_counts, prefill_counts

#: A gated DeltaNet of 2 value heads of 4 x 4 in float32 and a convolution of 12 x 3 in
#: the model's dtype: 2 * 16 * 4 + 36 * 2 = 200 bytes in bfloat16.
DELTANET = StateSpec("gated deltanet", conv=36, recurrent=32, recurrent_dtype="float32")
PARTS = {"embeddings": 800, "attention": 1000, "mlp": 300, "experts": 4000, "router": 80}
PARTS |= {"norms": 24, "output head": 800, "state layers": 500, "other": 7}


def hybrid(**changes) -> ModelSpec:
    """4 layers, of which layer 3 attends (K/V of 2 heads of 4) and 0 to 2 keep a state;
    counted by transformers: 8 experts, 2 a token, a vocabulary of 100 on d_model 8."""
    spec = ModelSpec(
        "h",
        4,
        8,
        2,
        2,
        4,
        "bfloat16",
        "test",
        attends=(False, False, False, True),
        states=(DELTANET,) * 3 + (None,),
        counted=CountedModel(tuple(PARTS.items()), "transformers (test)", 100, False, 8, 2),
    )
    return replace(spec, **changes)


def test_state_bytes_per_sequence_batch_and_rank():
    assert DELTANET.bytes_in("bfloat16") == 2 * 16 * 4 + 36 * 2 == 200
    assert DELTANET.bytes_in("float32") == 2 * 16 * 4 + 36 * 4
    spec = hybrid()
    assert state_bytes(spec.layer_states, "bfloat16") == 3 * 200
    assert state_bytes(spec.layer_states, "bfloat16", batch=5) == 5 * 3 * 200
    assert state_bytes(spec.layer_states, "bfloat16", tp=3) == 3 * 67  # 200 / 3, rounded up
    with pytest.raises(ValueError):
        StateSpec("empty", 0, 0)


def test_layer_kinds_and_counts():
    spec = hybrid()
    assert (spec.kv_layers, spec.state_layers) == (1, 3)
    assert spec.layer_kinds() == ("gated deltanet",) * 3 + ("full attention",)
    both = hybrid(attends=(True,) * 4, states=(DELTANET,) * 4)
    assert set(both.layer_kinds()) == {"full attention + gated deltanet"}
    nothing = hybrid(attends=(False, True, False, True), states=(DELTANET, None, None, None))
    assert nothing.layer_kinds()[2] == "mlp only"
    windowed = hybrid(windows=(16,))
    assert windowed.layer_kinds()[3] == "sliding attention"
    with pytest.raises(ValueError, match="windows for 1 attention layers"):
        hybrid(windows=(16, 16))
    with pytest.raises(ValueError, match="3 entries of attends for 4 layers"):
        hybrid(attends=(True,) * 3)


def test_unknown_kinds_refuse_the_cache():
    spec = hybrid(unknown_kinds="model_type 'x' declares layers of type 'mamba'")
    with pytest.raises(UsageError, match="h: model_type 'x'.*not counted"):
        spec.require_kinds()
    hybrid().require_kinds()


def test_a_counted_model_is_its_parts_split_evenly_per_rank():
    spec = hybrid()
    assert part_params(spec) == {p: PARTS.get(p, 0) for p in COUNTED_PARTS}
    assert total_params(spec) == sum(PARTS.values())
    halves = part_params(spec, 2)
    assert halves["experts"] == 2000 and halves["state layers"] == 250
    assert halves["router"] == 80 and halves["norms"] == 24 and halves["other"] == 7
    assert part_params(spec, 3)["attention"] == 334  # rounded up
    assert weight_bytes_per_rank(spec, "bfloat16", 2) == 2 * sum(halves.values())
    # 6 of its 8 experts idle for a token
    assert active_params(spec) == total_params(spec) - 4000 // 8 * 6


def test_a_decode_step_reads_and_writes_the_state():
    spec = hybrid()
    plain = hybrid(states=None, attends=(False, False, False, True))
    step, without = decode_counts(spec, 4, 64, "bfloat16"), decode_counts(plain, 4, 64, "bfloat16")
    assert step.state_bytes == 2 * 4 * 3 * 200
    assert step.kv_bytes - without.kv_bytes == step.state_bytes
    state_flops = STATE_FLOPS * 4 * 3 * 32
    assert step.flops - without.flops == state_flops
    assert step.attention_flops - without.attention_flops == state_flops
    assert step.weight_bytes == without.weight_bytes
    prefill = prefill_counts(spec, 1, 64, "bfloat16")
    assert prefill.state_bytes == 2 * 3 * 200  # the state of one sequence, once
    assert prefill.flops - prefill_counts(plain, 1, 64, "bfloat16").flops == STATE_FLOPS * 64 * 96


def test_a_counted_step_reads_the_touched_experts_and_the_dense_parts():
    spec = hybrid(states=None)
    one = decode_counts(spec, 1, 64, "bfloat16")
    # every part but embeddings and experts, one embedding row of 8, and 2 of 8 experts
    dense = sum(PARTS.values()) - PARTS["embeddings"] - PARTS["experts"]
    assert one.weight_bytes == 2 * (dense + 8 + 4000 // 8 * 2)
    # 16 tokens, 2 picks each: 8 * (1 - (3/4)^16) = 7.92 of the 8 experts read, expected
    many = decode_counts(spec, 16, 64, "bfloat16")
    assert many.weight_bytes == 2 * (dense + 16 * 8 + round(500 * 8 * (1 - 0.75**16)))


def test_a_model_known_by_its_attention_alone_is_refused_with_a_hint():
    spec = hybrid(counted=None, uncounted="install attnbench[hf] (transformers) to count it")
    with pytest.raises(UsageError, match="no formulas of its model_type; install attnbench"):
        total_params(spec)
    with pytest.raises(UsageError, match="not known"):
        decode_counts(spec, 1, 64, "bfloat16")
