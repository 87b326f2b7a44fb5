"""Numerical self-checks on a device: do the backends, the providers, the cache and CUDA
graphs agree?

Run before trusting timings from a new machine (`attnbench selfcheck` on that device); it
needs nothing beyond attnbench's own dependencies, so it also runs where pytest is absent.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..measure.memory import measure_cache_bytes
from ..model.capacity import kv_cache_bytes
from ..model.shapes import AttentionShape
from ..modules.attention import BACKENDS, scaled_dot_product_attention
from ..modules.providers import PROVIDERS
from ..records import Status
from . import decode
from .context import Context
from .decode import build_layer, decode_outputs

SHAPES = [AttentionShape(256, 8, kv) for kv in (8, 2, 1)]
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 5e-3}


@dataclass
class CheckResult:
    name: str
    passed: bool
    detail: str


def _reference(layer, x: torch.Tensor) -> torch.Tensor:
    """The layer's causal output recomputed in float64 on the CPU, K/V expanded."""
    w = {
        n: getattr(layer, n).weight.detach().double().cpu()
        for n in ("q_proj", "k_proj", "v_proj", "o_proj")
    }
    x64 = x.double().cpu()
    b, s, _ = x64.shape
    q = (x64 @ w["q_proj"].T).view(b, s, layer.num_heads, layer.head_dim).transpose(1, 2)
    k = (x64 @ w["k_proj"].T).view(b, s, layer.num_kv_heads, layer.head_dim).transpose(1, 2)
    v = (x64 @ w["v_proj"].T).view(b, s, layer.num_kv_heads, layer.head_dim).transpose(1, 2)
    k = k.repeat_interleave(layer.group_size, 1)
    v = v.repeat_interleave(layer.group_size, 1)
    out = scaled_dot_product_attention(q, k, v, is_causal=True)
    return out.transpose(1, 2).reshape(b, s, -1) @ w["o_proj"].T


def _relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double().cpu(), b.double().cpu()
    return ((a - b).norm() / b.norm()).item()


def check_backends(
    device: torch.device, dtype: torch.dtype, build: Callable[..., Any] = build_layer
) -> list[CheckResult]:
    """Each variant and backend against the float64 reference, and the fixed calls the
    timings run (a prefill, then cached decode steps) against the module's own causal
    pass. `build(shape, backend, dtype, device)` makes the layer under test (a test
    passes a broken one to see the check fail)."""
    results = []
    for shape in SHAPES:
        for backend in BACKENDS:
            layer = build(shape, backend, dtype, device)
            x = torch.randn(2, 40, shape.d_model, device=device, dtype=dtype)
            with torch.inference_mode():
                full = layer(x, is_causal=True)
            err = _relative_error(full, _reference(layer, x))
            cached = decode_outputs(layer, x, prompt_len=32, gen_len=8, cached=True)
            err_cache = _relative_error(cached, full[:, 32:])
            tol = TOLERANCE[dtype]
            name = f"{shape.variant} {backend} {str(dtype).removeprefix('torch.')}"
            results.append(CheckResult(f"{name} vs float64", err < tol, f"rel err {err:.2e}"))
            results.append(
                CheckResult(
                    f"{name} cached decode == full pass",
                    err_cache < tol,
                    f"rel err {err_cache:.2e}",
                )
            )
    return results


def check_kv_memory(device: torch.device) -> list[CheckResult]:
    """A real cache's storage (and, on CUDA, the allocator's count) equals the formula."""
    expected = kv_cache_bytes(4, 2, 1000, 8, 128, "bfloat16")
    measured, status = measure_cache_bytes(4, 2, 1000, 8, 128, "bfloat16", device, expected)
    return [
        CheckResult(
            "KV cache measured == analytic",
            measured == expected and status == "ok",
            f"{measured:,} vs {expected:,} bytes ({status})",  # exact: a byte apart fails
        )
    ]


def check_options(warmup: int, repeats: int, prefill: bool = True) -> decode.DecodeOptions:
    """A check's decode options: `repeats` samples after `warmup` calls, each step timed
    against its kernels, nothing else measured."""
    return decode.DecodeOptions(
        warmup=warmup,
        repeats=repeats,
        min_repeats=repeats,
        max_time=math.inf,
        target_rel_ci=0.0,
        prefill=prefill,
        prefill_memory=False,
        flush_l2=False,
        cold_cache=False,
        baseline_provider="attnbench",
        reference="kernels",
        instructions=False,
        no_cache_max_prompt_len=None,
    )


def check_providers(device: torch.device, dtype: str) -> list[CheckResult]:
    """Every provider that runs here, on a GQA step, against the explicit reference (the
    check every timed point passes first). flex is left out on the CPU, where compiling
    it takes a minute."""
    results = []
    for name in PROVIDERS:
        if PROVIDERS[name].compiles and device.type == "cpu":
            continue
        point = decode.DecodePoint(
            d_model=256,
            num_heads=8,
            num_kv_heads=2,
            batch=2,
            dtype=dtype,
            prompt_len=48,
            provider=name,
            options=check_options(0, 1, prefill=False),
        )
        rec = decode.run(point, Context(device))
        if Status.of(rec.status).word == "unsupported":
            continue
        ran = decode.timed(rec)  # its output passed the check before its step was timed
        detail = "output within the tolerance of the reference" if ran else rec.status
        results.append(CheckResult(f"provider {name} {dtype} step vs reference", ran, detail))
    return results


def check_cuda_graph(device: torch.device) -> list[CheckResult]:
    """A decode step replayed from a CUDA graph runs, agrees and gives its samples."""
    point = decode.DecodePoint(
        d_model=256,
        num_heads=8,
        num_kv_heads=2,
        batch=2,
        dtype="bfloat16",
        prompt_len=64,
        cuda_graph=True,
        options=check_options(1, 4),
    )
    rec = decode.run(point, Context(device))
    ok = decode.timed(rec) and len(rec.samples_ms) == 4
    return [CheckResult("CUDA-graph decode", ok, f"{rec.status}, {rec.step_ms_median} ms/step")]


def run_checks(device: torch.device) -> list[CheckResult]:
    torch.manual_seed(0)
    checks: list[Callable[[], list[CheckResult]]] = [
        lambda: check_backends(device, torch.float32),
        lambda: check_backends(device, torch.bfloat16),
        lambda: check_kv_memory(device),
        lambda: check_providers(device, "float32"),
    ]
    if device.type == "cuda":
        checks.append(lambda: check_cuda_graph(device))
    return [result for check in checks for result in check()]
