"""How a model's parts split over a node's ranks besides tensor parallelism, which splits
every weight over all tp ranks.

Data-parallel attention (SGLang's enable_dp_attention at as many ranks as tp, vLLM's data
parallelism beside expert parallelism, TensorRT-LLM's enable_attention_dp): each rank
runs the attention of its own sequences (a tp-th of the batch) with the whole attention's
weights, and keeps their cache whole (every KV head, or the whole MLA latent); the MLPs
and experts run on every rank's tokens, gathered before them and scattered back after
(model/roofline.py counts the step).

Expert parallelism: a mixture of experts' routed experts split whole over `ep` of the
tensor-parallel ranks (SGLang's ep_size, vLLM's enable_expert_parallel), each expert's
weights split over the tp / ep ranks of its group, where tensor parallelism alone splits
every expert over all tp ranks.

Over many tokens every rank holds and touches the same share of the experts either way;
over a few, the router sends more of them to some ranks than to others, and a step waits
for the busiest: its experts touched and its routes (tokens times their k experts) are
the largest of ep ranks', expected. Each rank's count is taken as a binomial, independent
of the others' (the router's uniform picks, as model/roofline.py's experts_touched takes
them): a rank's E / ep experts, each touched with the same probability; the step's
routes, each landing on a rank with probability 1 / ep. The largest of ep such counts has
the expected value sum over m of 1 - F(m)^ep (F the binomial's distribution function).
"""

from __future__ import annotations

import math
from functools import cache

from ..errors import FieldError
from .architecture import ModelSpec
from .capacity import ceil_div
from .model_params import part_params, routed_attention, step_traits

#: Standard deviations either side of the mean over which a binomial's distribution is
#: summed; beyond them it is 0 or 1 to double precision.
SPAN = 12
#: From this standard deviation on, the largest of ep binomials is taken as the mean plus
#: the standard deviation times the expected largest of ep standard normals, which leaves
#: out the binomial's skew: within a few tenths of a count of the exact sum there (0.2 at
#: p = 1/8, 0.6 at 1/32), a part in 10^4 of a count of 2,500 or more.
NORMAL_FROM = 50.0


def check_ep(ep: int, tp: int, experts: int) -> None:
    """FieldError unless `ep` ranks can hold whole experts: ep divides tp (the experts'
    groups are tensor-parallel ranks) and the model's `experts` routed experts (each rank
    holds as many), and a model with routed experts at all where ep > 1."""
    if isinstance(ep, bool) or not isinstance(ep, int) or ep < 1:
        raise FieldError("ep", ep, "must be an integer >= 1")
    if ep == 1:
        return
    if not experts:
        raise FieldError("ep", ep, "needs a mixture of experts: the model has no routed experts")
    if tp % ep:
        reason = f"must divide {{tp}} ({tp}): the experts are split over tensor-parallel ranks"
        raise FieldError("ep", ep, reason, ("tp",))
    if experts % ep:
        raise FieldError("ep", ep, f"must divide the model's {experts} routed experts")


def check_model_ep(spec: ModelSpec, ep: int, tp: int) -> None:
    """check_ep for `spec`'s routed experts, and FieldError where it routes attention
    experts too (JetMoE's), which expert parallelism does not split here."""
    if type(ep) is int and ep == 1:  # the default splits nothing: no need to count
        return
    experts = step_traits(spec).num_experts if part_params(spec)["experts"] else 0
    check_ep(ep, tp, experts)
    if ep > 1 and routed_attention(spec, tp):
        raise FieldError("ep", ep, "splits the MLP's experts only, not routed attention experts")


#: A record's `attention` where each rank runs that of its own sequences.
DATA_PARALLEL = "data-parallel"


def data_parallel(tp: int, dp_attention: bool) -> bool:
    """Whether the attention is data-parallel: asked, over more than one rank (one rank
    runs every sequence's attention either way)."""
    return dp_attention and tp > 1


def attention_split(batch: int, tp: int, dp_attention: bool) -> tuple[int, int]:
    """The sequences one rank's attention runs and the ranks each one's attention (and
    cache) is split over: under data-parallel attention over more than one rank, the
    busiest rank's own share of `batch`, ceil(batch / tp), whole; else every sequence,
    split over the tp ranks."""
    if data_parallel(tp, dp_attention):
        return ceil_div(batch, tp), 1
    return batch, tp


def check_dp_attention(spec: ModelSpec) -> None:
    """FieldError for a model whose attention data-parallelism is not counted here: state
    layers (a hybrid's), whose split the engines choose otherwise, and routed attention
    experts (JetMoE's)."""
    if any(s is not None for s in spec.layer_states):
        reason = "is not modelled for a model with state layers (a hybrid's)"
        raise FieldError("dp_attention", True, reason)
    if routed_attention(spec):
        raise FieldError("dp_attention", True, "is not modelled for routed attention experts")


def busiest(count: int, p: float, ranks: int) -> float:
    """The expected largest of `ranks` independent binomial counts of `count` trials of
    probability `p` (for one rank: the mean, count * p)."""
    if ranks == 1 or p <= 0 or count == 0:
        return count * p
    if p >= 1:
        return float(count)
    mean, sd = count * p, math.sqrt(count * p * (1 - p))
    if sd >= NORMAL_FROM:
        return min(float(count), mean + sd * normal_max(ranks))
    low = max(0, math.floor(mean - SPAN * sd))
    high = min(count, math.ceil(mean + SPAN * sd))
    # the distribution function from `low` on (its mass below is under 1e-30)
    log_q, log_odds = math.log1p(-p), math.log(p) - math.log1p(-p)
    log_pmf = (
        math.lgamma(count + 1)
        - math.lgamma(low + 1)
        - math.lgamma(count - low + 1)
        + low * math.log(p)
        + (count - low) * log_q
    )
    total, cdf = float(low), 0.0  # every m below `low` adds 1 - 0^ranks = 1
    for m in range(low, high):
        cdf = min(1.0, cdf + math.exp(log_pmf))
        total += 1 - cdf**ranks
        log_pmf += math.log((count - m) / (m + 1)) + log_odds
    return total


@cache
def normal_max(ranks: int) -> float:
    """The expected largest of `ranks` independent standard normal draws: the integral of
    x * ranks * phi(x) * Phi(x)^(ranks - 1), summed on a grid of 1/1000."""
    step, total = 1e-3, 0.0
    for i in range(-10_000, 10_001):
        x = i * step
        phi = math.exp(-x * x / 2) / math.sqrt(2 * math.pi)
        big_phi = 0.5 * math.erfc(-x / math.sqrt(2))
        total += x * ranks * phi * big_phi ** (ranks - 1) * step
    return total
