"""Providers side by side: fixed-context steps, agreement with the reference, and the rows
of providers that cannot run a point or get it wrong."""

from __future__ import annotations

import dataclasses
import itertools
import statistics

import pytest
import torch

from attnbench.experiments import decode
from attnbench.experiments.context import Context
from attnbench.experiments.decode import DecodePoint
from attnbench.modules import attention, providers
from attnbench.modules.providers import PROVIDERS, Provider, layer_workload
from attnbench.study.runner import plan_command, run_study
from tests.experiments.options import decode_point, with_options

CPU = torch.device("cpu")
FIXED = {"warmup": 2, "repeats": 6}
#: Providers that run on this CPU without a compiler (flex compiles; see its own test).
CPU_PROVIDERS = ["attnbench", "naive", "sdpa-math", "sdpa-flash"]


def point(**fields) -> DecodePoint:
    base = {
        "d_model": 64,
        "num_heads": 8,
        "num_kv_heads": 2,
        "batch": 2,
        "prompt_len": 9,
        "dtype": "float32",
    }
    return decode_point(**{**base, **fields})


def spied(monkeypatch, name: str) -> list[tuple[int, int]]:
    """Make provider `name` record the (query length, key length) of every attention call."""
    seen: list[tuple[int, int]] = []
    decode_fn, causal_fn = attention.BACKEND_ATTENTION["sdpa"]

    def spy_decode(q, k, v):
        seen.append((q.shape[2], k.shape[2]))
        return decode_fn(q, k, v)

    def spy_causal(q, k, v):
        seen.append((q.shape[2], k.shape[2]))
        return causal_fn(q, k, v)

    spy = dataclasses.replace(PROVIDERS[name], prepare=layer_workload(spy_decode, spy_causal))
    monkeypatch.setitem(PROVIDERS, name, spy)
    return seen


@pytest.mark.parametrize("context_len", [1, 9, 33])
def test_every_sample_of_a_cached_point_attends_exactly_context_plus_one_keys(
    monkeypatch, context_len
):
    seen = spied(monkeypatch, "attnbench")
    p = point(prompt_len=context_len)
    rec = decode.run(with_options(p, {**FIXED, "prefill": False}, CPU), Context(CPU))
    assert decode.timed(rec) and len(rec.samples_ms) == 6
    # every call the point made, checked, warmed or timed, attends S + 1 keys, and the
    # samples recorded are made of such calls
    assert set(seen) == {(1, context_len + 1)}
    assert len(seen) >= len(rec.samples_ms) * rec.step_calls_per_sample


def test_no_cache_samples_are_one_causal_forward_over_context_plus_one_tokens(monkeypatch):
    seen = spied(monkeypatch, "attnbench")
    rec = decode.run(with_options(point(mode="no_cache"), FIXED, CPU), Context(CPU))
    assert decode.timed(rec)
    assert set(seen) == {(10, 10)}
    assert len(seen) >= len(rec.samples_ms) * rec.step_calls_per_sample


def test_prefill_and_generation_are_their_own_samples(monkeypatch):
    seen = spied(monkeypatch, "attnbench")
    rec = decode.run(with_options(point(gen_len=3), {"warmup": 1, "repeats": 2}, CPU), Context(CPU))
    assert decode.timed(rec)
    assert len(rec.samples_ms) == len(rec.prefill_samples_ms) == len(rec.gen_samples_ms) == 2
    assert seen[0] == (1, 10)  # the reference check
    prefills = list(itertools.takewhile(lambda c: c == (9, 9), seen[1:]))
    rest = seen[1 + len(prefills) :]
    generation = [(1, 10), (1, 11), (1, 12)]  # a whole generation from context 9
    runs = 0
    while rest[-3:] == generation:
        rest, runs = rest[:-3], runs + 1
    assert len(prefills) >= 1 + 2  # a warm-up and 2 samples of the prompt's prefill
    assert rest == [(1, 10)] * len(rest) and len(rest) >= 1 + 2  # the fixed-context steps
    assert runs >= 1 + 2  # generations, never mixed with the steps


def test_a_fixed_step_gives_the_same_output_every_call():
    p = point()
    layer = decode.build_layer(p.shape, "sdpa", torch.float32, CPU)
    with torch.inference_mode():
        inputs = decode.point_inputs(p, layer, CPU)
        work = PROVIDERS["attnbench"].prepare(inputs)
        first = work.step().clone()
        for _ in range(3):
            torch.testing.assert_close(work.step(), first, rtol=0, atol=0)
        torch.testing.assert_close(first, providers.reference_step(inputs), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kv_heads", [8, 2, 1])
@pytest.mark.parametrize("mode", ["cache", "no_cache"])
def test_every_cpu_provider_agrees_with_the_reference(kv_heads, mode):
    for name in CPU_PROVIDERS:
        rec = decode.run(
            with_options(
                point(num_kv_heads=kv_heads, mode=mode, provider=name),
                {"warmup": 0, "repeats": 2},
                CPU,
            ),
            Context(CPU),
        )
        assert decode.timed(rec), (name, rec.status)
        assert rec.step_ms_median > 0


@pytest.mark.parametrize("name", ["sdpa-efficient", "sdpa-cudnn"])
def test_cuda_only_kernels_are_unsupported_rows_on_the_cpu(name):
    rec = decode.run(with_options(point(provider=name), FIXED, CPU), Context(CPU))
    assert rec.status.startswith("unsupported: no ") and rec.status.endswith("kernel on the CPU")
    assert rec.step_ms_median is None and rec.bytes_per_step > 0  # analytic columns remain


def broken(decode_fn):
    def halved(q, k, v):
        return 0.5 * decode_fn(q, k, v)

    return halved


def test_a_provider_that_disagrees_is_wrong_and_not_timed(monkeypatch):
    decode_fn, causal_fn = attention.BACKEND_ATTENTION["sdpa"]
    bad = Provider("naive", "a broken one", layer_workload(broken(decode_fn), causal_fn))
    monkeypatch.setitem(PROVIDERS, "naive", bad)
    rec = decode.run(with_options(point(provider="naive"), FIXED, CPU), Context(CPU))
    assert rec.status.startswith("wrong: max error ")
    assert rec.step_ms_median is None and rec.samples_ms == []


def test_a_kernel_that_refuses_the_inputs_is_unsupported_with_its_reason(monkeypatch):
    def refusing(q, k, v):
        import warnings

        warnings.warn("Flash attention requires equal head counts", stacklevel=1)
        raise RuntimeError("No available kernel. Aborting execution.")

    refuses = Provider("sdpa-flash", "refuses", layer_workload(refusing, refusing))
    monkeypatch.setitem(PROVIDERS, "sdpa-flash", refuses)
    rec = decode.run(with_options(point(provider="sdpa-flash"), FIXED, CPU), Context(CPU))
    assert rec.status == "unsupported: Flash attention requires equal head counts"


def test_a_missing_optional_provider_is_an_unsupported_row(monkeypatch):
    missing = dataclasses.replace(
        PROVIDERS["hf"], unavailable=lambda device, dtype: "transformers is not installed"
    )
    monkeypatch.setitem(PROVIDERS, "hf", missing)
    plan = plan_command(
        "decode",
        None,
        {
            "d_model": [64],
            "num_heads": [8],
            "prompt_len": [8],
            "provider": ["attnbench", "hf"],
            "repeats": 2,
            "device": "cpu",
        },
    )
    records = run_study(plan).records["decode"]
    statuses = {(r.provider, r.mode): r.status for r in records}
    assert statuses[("hf", "cache")] == "unsupported: transformers is not installed"
    assert decode.timed({"status": statuses[("attnbench", "cache")]})


def test_the_baseline_provider_must_be_swept():
    from attnbench.errors import UsageError

    with pytest.raises(UsageError, match="baseline_provider"):
        plan_command(
            "decode",
            None,
            {
                "d_model": [64],
                "num_heads": [8],
                "provider": ["naive"],
                "baseline_provider": "hf",
                "device": "cpu",
            },
        )


@pytest.mark.parametrize("kv_heads", [8, 2, 1])
def test_hf_llama_attention_agrees_and_is_timed(kv_heads):
    pytest.importorskip("transformers")
    for mode in ("cache", "no_cache"):
        rec = decode.run(
            with_options(
                point(num_kv_heads=kv_heads, mode=mode, provider="hf", gen_len=3),
                {"warmup": 1, "repeats": 2},
                CPU,
            ),
            Context(CPU),
        )
        assert decode.timed(rec), rec.status
        assert rec.projection_path == "torch"
        assert len(rec.samples_ms) == len(rec.gen_samples_ms) == 2


def test_hf_generation_matches_attnbench_token_by_token():
    """transformers' masked StaticCache generation and attnbench's steps give the same
    outputs: both providers really decode the same tokens."""
    pytest.importorskip("transformers")
    from attnbench.modules.hf_attention import prepare_hf

    p = point(gen_len=4)
    layer = decode.build_layer(p.shape, "sdpa", torch.float32, CPU)
    with torch.inference_mode():
        inputs = decode.point_inputs(p, layer, CPU)
        ours = PROVIDERS["attnbench"].prepare(inputs).generation()
        theirs_work = prepare_hf(inputs)
        theirs_work.generation_setup()
        theirs = theirs_work.generation()
    torch.testing.assert_close(theirs, ours, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_flex_attention_compiles_and_agrees():
    """Compiling flex_attention on the CPU takes most of a minute: `make test-slow`."""
    rec = decode.run(
        with_options(point(provider="flex"), {"warmup": 1, "repeats": 2}, CPU), Context(CPU)
    )
    assert decode.timed(rec), rec.status


@pytest.mark.parametrize("mode", ["cache", "no_cache"])
def test_the_kernels_of_a_step_are_its_projections_and_sdpa(mode):
    """Cached: one token's projections and SDPA over the S + 1 cached keys; without a
    cache, all S + 1 tokens' projections and causal SDPA over them. Together they compute
    the step's output."""
    from attnbench.experiments.kernels import step_kernels

    p = point(mode=mode)
    layer = decode.build_layer(p.shape, "sdpa", torch.float32, CPU)
    inputs = decode.point_inputs(p, layer, CPU)
    with torch.inference_mode():
        calls = step_kernels(inputs)
        shapes = {name: tuple(call().shape) for name, call in calls.items()}
        step = PROVIDERS["attnbench"].prepare(inputs).step()
        attended = calls["sdpa"]().transpose(1, 2).reshape(2, -1, 64)
        out = layer.o_proj(attended)[:, -1:]
    tokens = 1 if mode == "cache" else 10
    assert list(calls) == ["q_proj", "k_proj", "v_proj", "sdpa", "o_proj"]  # as the step runs
    assert shapes == {
        "q_proj": (2, tokens, 64),
        "k_proj": (2, tokens, 16),
        "v_proj": (2, tokens, 16),
        "sdpa": (2, 8, tokens, 8),
        "o_proj": (2, tokens, 64),
    }
    torch.testing.assert_close(out, step)


@pytest.mark.parametrize("reference", ["kernels", "sdpa-math"])
def test_a_step_is_timed_in_rounds_with_its_reference(reference):
    """x_of_reference is the step over its reference, round by round: each of its samples
    is a step sample over the reference's sample of the same round."""
    rec = decode.run(with_options(point(), {**FIXED, "reference": reference}, CPU), Context(CPU))
    assert decode.timed(rec) and rec.reference == reference
    assert len(rec.x_of_reference_samples) == len(rec.samples_ms) == FIXED["repeats"]
    assert rec.x_of_reference_median == pytest.approx(statistics.median(rec.x_of_reference_samples))
    assert all(r > 0 for r in rec.x_of_reference_samples)


@pytest.mark.parametrize(
    ("provider", "reference"), [("attnbench", "none"), ("sdpa-math", "sdpa-math")]
)
def test_no_reference_no_ratio(provider, reference):
    rec = decode.run(
        with_options(point(provider=provider), {**FIXED, "reference": reference}, CPU),
        Context(CPU),
    )
    assert decode.timed(rec)
    assert rec.x_of_reference_median is None and rec.reference is None
    assert rec.x_of_reference_samples == []
