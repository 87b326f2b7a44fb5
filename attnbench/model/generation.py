"""A batch's whole generation on a device, from the roofline: the prefill of its prompts,
then one decode step per further output token, as a serving engine runs a static batch.

Every decode step is timed at the generation's mean context, prompt + output / 2 tokens
cached: a step's time grows linearly with the context it reads, so the sum of the steps
is the number of steps times the step at the mean context.

A serving engine under a closed-loop load (continuous batching, a fixed number of
requests in flight) also runs the prefills of the requests that replace finished ones
between its decode steps: serving_itl_s.
"""

from __future__ import annotations

from dataclasses import dataclass

from .architecture import ModelSpec
from .capacity import ceil_div
from .devices import DeviceSpec
from .parallelism import data_parallel
from .roofline import (
    DEFAULT_MODEL,
    ModelPrediction,
    PerfModel,
    decode_counts,
    predict_counts,
    prefill_counts,
)
from .weights import WeightFormat


@dataclass(frozen=True)
class Generation:
    """A static batch of `batch` prompts of `prompt_len` tokens, each generating
    `output_len` tokens: its prefill (the first token) and its decode steps."""

    batch: int
    prompt_len: int
    output_len: int
    prefill: ModelPrediction
    #: A decode step at the mean context (see the module's notes).
    step: ModelPrediction

    @property
    def ttft_s(self) -> float:
        """The time to the first token: the batch's prefill."""
        return self.prefill.time_s

    @property
    def tpot_s(self) -> float:
        """The time per output token after the first."""
        return self.step.time_s

    @property
    def total_s(self) -> float:
        return self.ttft_s + (self.output_len - 1) * self.tpot_s

    @property
    def output_tokens_per_s(self) -> float:
        """Output tokens of the whole batch per second of the whole generation."""
        return self.batch * self.output_len / self.total_s


def generation(
    spec: ModelSpec,
    device: DeviceSpec,
    batch: int,
    prompt_len: int,
    output_len: int,
    dtype: str,
    kv_dtype: str | None = None,
    tp: int = 1,
    weights: str | WeightFormat | None = None,
    model: PerfModel = DEFAULT_MODEL,
    ep: int = 1,
    dp_attention: bool = False,
) -> Generation:
    """The generation of `batch` sequences on one of `tp` ranks of `device` (see the
    module's notes), the routed experts split whole over `ep` of them, the attention
    data-parallel over the ranks where `dp_attention`: activations in `dtype`, weights in
    `weights`, the cache in `kv_dtype`."""
    split = (tp, weights, ep, dp_attention)
    prefill = prefill_counts(spec, batch, prompt_len, dtype, kv_dtype, *split)
    context = prompt_len + output_len // 2
    step = decode_counts(spec, batch, context, dtype, kv_dtype, *split)
    return Generation(
        batch,
        prompt_len,
        output_len,
        predict_counts(prefill, device, dtype, tp, model),
        predict_counts(step, device, dtype, tp, model),
    )


def serving_itl_s(
    step_s: float,
    prefill_s: float,
    concurrency: int,
    output_len: int,
    side_by_side: int = 1,
) -> float:
    """The mean time between a request's tokens when `concurrency` requests are kept in
    flight, each generating `output_len` tokens, and the engine batches them continuously
    (AIPerf's or vLLM's benchmarks at a fixed concurrency): a decode step of the whole
    batch (`step_s`) per token, plus the prefills that run between the steps. In steady
    state each of the other concurrency - 1 requests finishes and is replaced once while
    one request generates its output_len - 1 tokens after the first, and the
    replacement's prefill (`prefill_s`, one prompt) delays them all:

        itl = step_s + (concurrency - 1) * prefill_s / (output_len - 1)

    With data-parallel attention each rank prefills its own requests, the ranks side by
    side in one pass: `prefill_s` is then the prefill of `side_by_side` prompts, one a
    rank (prefill_side_by_side), and ceil((concurrency - 1) / side_by_side) of them
    delay the tokens.

    An upper bound where the engine chunks a prefill into decode steps, which then share
    one read of the weights; at concurrency 1 it is the step alone."""
    if concurrency < 1 or output_len < 1 or side_by_side < 1:
        raise ValueError(
            f"concurrency, output_len and side_by_side must be >= 1, got {concurrency}, "
            f"{output_len}, {side_by_side}"
        )
    if output_len == 1:
        return step_s
    return step_s + ceil_div(concurrency - 1, side_by_side) * prefill_s / (output_len - 1)


def prefill_side_by_side(concurrency: int, tp: int, dp_attention: bool) -> int:
    """The prompts a serving engine prefills at once between its steps, one of each of
    the other concurrency - 1 requests in flight: under data-parallel attention one a
    rank, up to tp of them; else one."""
    return max(1, min(tp, concurrency - 1)) if data_parallel(tp, dp_attention) else 1
