"""Expert parallelism: the busiest rank's experts and routes, and a step's counts on it."""

from __future__ import annotations

import numpy as np
import pytest

from attnbench.errors import FieldError
from attnbench.model.parallelism import busiest, check_ep, normal_max
from attnbench.model.presets import get_preset
from attnbench.model.roofline import decode_counts, experts_touched, prefill_counts


def test_busiest_of_exact_small_cases():
    # one trial at 1/2 on each of 2 ranks: the larger is 0 only when both are, 1/4
    assert busiest(1, 0.5, 2) == pytest.approx(0.75)
    # two trials at 1/2 on 2 ranks: P(max <= 0) = 1/16, P(max <= 1) = (3/4)^2
    assert busiest(2, 0.5, 2) == pytest.approx((1 - 1 / 16) + (1 - 9 / 16))
    assert busiest(10, 0.3, 1) == pytest.approx(3.0)  # one rank: the mean
    assert busiest(32, 1.0, 8) == 32  # every expert touched on every rank
    assert busiest(32, 0.0, 8) == 0


@pytest.mark.parametrize(
    ("count", "p", "ranks"),
    [(32, 1 / 32, 8), (64, 0.3, 4), (5, 0.5, 2), (20_000, 1 / 8, 8), (1_000_000, 1 / 8, 8)],
)
def test_busiest_matches_sampling(count, p, ranks):
    """The exact sum (and, past NORMAL_FROM standard deviations, the normal's) against
    the mean largest of 200,000 seeded draws, within 4 standard errors."""
    draws = np.random.default_rng(0).binomial(count, p, size=(200_000, ranks)).max(axis=1)
    error = 4 * draws.std() / np.sqrt(draws.size) + 1e-9
    assert busiest(count, p, ranks) == pytest.approx(draws.mean(), abs=error)


def test_expected_largest_normal():
    assert normal_max(1) == pytest.approx(0, abs=1e-9)
    assert normal_max(2) == pytest.approx(1 / np.sqrt(np.pi), rel=1e-6)
    assert normal_max(8) == pytest.approx(1.4236, abs=1e-4)  # tables of normal order statistics


@pytest.mark.parametrize(
    ("ep", "tp", "experts", "says"),
    [
        (3, 8, 256, "must divide {tp} (8)"),
        (8, 8, 0, "needs a mixture of experts"),
        (8, 8, 60, "must divide the model's 60 routed experts"),
        (0, 8, 256, "must be an integer >= 1"),
        (True, 8, 256, "must be an integer >= 1"),
    ],
)
def test_ep_it_cannot_split(ep, tp, experts, says):
    with pytest.raises(FieldError) as raised:
        check_ep(ep, tp, experts)
    assert raised.value.field == "ep" and says in raised.value.reason


def test_ep_one_is_tensor_parallelism_alone():
    spec = get_preset("deepseek-v3")
    for batch in (1, 16, 512):
        assert decode_counts(spec, batch, 2048, "bfloat16", None, 8, "float8_e4m3fn", 1) == (
            decode_counts(spec, batch, 2048, "bfloat16", None, 8, "float8_e4m3fn")
        )


def test_one_token_waits_for_the_rank_with_the_most_of_its_experts():
    """One token's 8 of 256 experts over 8 ranks of 32: tensor parallelism reads an eighth
    of each (one expert's bytes), expert parallelism the whole of those on the busiest
    rank, E[max] of 8 binomials of 32 at 8/256 (2.54)."""
    spec = get_preset("deepseek-v3")
    tp_only = decode_counts(spec, 1, 2048, "bfloat16", None, 8, "float8_e4m3fn")
    split = decode_counts(spec, 1, 2048, "bfloat16", None, 8, "float8_e4m3fn", ep=8)
    per_expert = 3 * 7168 * 2048 * 58  # every MoE layer's, float8: a byte each
    largest = busiest(32, experts_touched(256, 8, 1) / 256, 8)
    assert largest == pytest.approx(2.545, abs=0.01)
    added = split.weight_bytes - tp_only.weight_bytes
    # the scales (one per output channel, float32) add 4 bytes per 7,168 or 2,048 weights
    assert added == pytest.approx((largest - 1) * per_expert, rel=2e-3)
    # and its routes: the rank with the most of the token's 8 routes computes them whole
    routes = busiest(8, 1 / 8, 8)
    extra_flops = 2 * (routes - 1) * per_expert
    assert split.flops - tp_only.flops == pytest.approx(extra_flops, rel=1e-3)


def test_many_tokens_share_the_experts_evenly():
    """A prefill of 8,192 tokens touches every expert on every rank, and sends each rank
    an eighth of the routes, within a few standard deviations: the same bytes as tensor
    parallelism, and FLOPs within 1%."""
    spec = get_preset("deepseek-v3")
    tp_only = prefill_counts(spec, 1, 8192, "bfloat16", None, 8, "float8_e4m3fn")
    split = prefill_counts(spec, 1, 8192, "bfloat16", None, 8, "float8_e4m3fn", ep=8)
    assert split.weight_bytes == pytest.approx(tp_only.weight_bytes, rel=1e-6)
    assert 1 < split.flops / tp_only.flops < 1.01
