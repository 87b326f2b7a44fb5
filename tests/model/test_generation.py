"""A batch's generation on a device: a static batch's prefill and decode steps, and the
inter-token latency of a serving engine kept at a fixed concurrency."""

from __future__ import annotations

import pytest

from attnbench.model.devices import device_spec
from attnbench.model.generation import generation, prefill_side_by_side, serving_itl_s
from attnbench.model.presets import get_preset


def test_a_static_batch_is_its_prefill_then_a_step_per_further_token():
    found = generation(get_preset("llama-2-7b"), device_spec("a100-80gb"), 4, 128, 64, "float16")
    assert found.total_s == pytest.approx(found.ttft_s + 63 * found.tpot_s)
    assert found.output_tokens_per_s == pytest.approx(4 * 64 / found.total_s)


def test_serving_at_a_fixed_concurrency_adds_the_others_prefills():
    # 25 requests in flight, 500 tokens each: while one generates its last 499, the 24
    # others are each replaced once, and each replacement's 0.36 s prefill delays it
    assert serving_itl_s(0.024, 0.36, 25, 500) == pytest.approx(0.024 + 24 * 0.36 / 499)
    assert serving_itl_s(0.024, 0.36, 1, 500) == 0.024  # alone: the step
    assert serving_itl_s(0.024, 0.36, 8, 1) == 0.024  # one token: no step after it
    with pytest.raises(ValueError, match="concurrency"):
        serving_itl_s(0.024, 0.36, 0, 500)


def test_data_parallel_attention_prefills_the_others_side_by_side():
    """Eight ranks each prefill their own requests in one pass: 63 others at 8 a pass
    delay the tokens by 8 such passes, not 63 single prompts."""
    assert prefill_side_by_side(64, 8, True) == 8
    assert prefill_side_by_side(4, 8, True) == 3  # as many as there are others
    assert prefill_side_by_side(64, 8, False) == prefill_side_by_side(64, 1, True) == 1
    assert serving_itl_s(0.02, 0.8, 64, 1001, 8) == pytest.approx(0.02 + 8 * 0.8 / 1000)
    assert serving_itl_s(0.02, 0.1, 64, 1001) == pytest.approx(0.02 + 63 * 0.1 / 1000)
    with pytest.raises(ValueError, match="side_by_side"):
        serving_itl_s(0.02, 0.1, 64, 1001, 0)
