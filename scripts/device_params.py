"""Microbenchmarks of the figures the roofline takes for a GPU (model/device_table.py),
measured on this device: memory bandwidth, dense matmul rates by dtype, and the gap
between kernels replayed from a CUDA graph.

- bandwidth: a copy (bytes read plus written) and a STREAM triad, a = b + s * c (two
  arrays read, one written), over float32 arrays of each size;
- matmul: torch.mm of random normal matrices (bfloat16, float16, float32 with TF32), and
  float8_e4m3fn through torch._scaled_mm (a private op, guarded: the row says when it is
  missing), over square and model-sized shapes; the best shape is the rate a large GEMM
  reaches, as the maximum achievable matmul FLOPS tables take it;
- decode matmuls: bfloat16 inputs of 1 to 128 rows times a layer's weights, the rate at
  which they read the weights;
- one-row matmuls: graphs of them by weight matrices of six widths, the time of one and
  the rate it moves its bytes at (what it costs beside them: docs/gpu.md's tables);
- launch: graphs of N and 10N one-element additions, each replayed whole; the gap a kernel
  adds is the difference over the 9N kernels more, and what is left of the short graph
  the replay's own cost. Eager launches of the same kernels are timed too.

Every figure is the median of its samples (each the mean of a block of calls), with the
quartiles. On the CPU it runs small sizes only, to check itself.

    PYTHONPATH=. python3 scripts/device_params.py --json results/gpu/device-params.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import torch.nn.functional as F

from attnbench.experiments.decode import capture_graph
from attnbench.measure.environment import collect_environment
from attnbench.measure.stats import Measurement
from attnbench.measure.timing import Timer
from attnbench.model.formulas import matmul_flops

GIB = 1 << 30
#: (M, K, N) of the matmuls: squares, and a 70B-class layer's prefill of 8,192 tokens.
SHAPES = ((4096, 4096, 4096), (8192, 8192, 8192), (16384, 16384, 16384), (8192, 8192, 28672))
CPU_SHAPES = ((256, 256, 256), (512, 512, 512))
#: (K, N) of decode-step weight matrices (a 7B and a 70B model's MLP), and the rows (tokens)
#: multiplied by them.
WEIGHT_SHAPES, CPU_WEIGHT_SHAPES = ((4096, 14336), (8192, 28672)), ((1024, 4096),)
STEP_ROWS = (1, 8, 32, 128)
#: The widths of the weight matrices (by 4,096 inputs) of the one-row matmuls, and how many
#: matmuls, each with its own weights, one timed call runs.
COST_WIDTHS, CPU_COST_WIDTHS, COUNT = (1024, 2048, 4096, 8192, 14336, 28672), (256, 1024), 16


def summary(measurement: Measurement, scale: float) -> dict:
    """A rate from times in ms (scale / seconds): the median's, and the quartiles'."""
    rate = lambda ms: scale / (ms * 1e-3)  # noqa: E731
    return {
        "median": rate(measurement.median_ms),
        "p25": rate(measurement.p75_ms),  # the slower quartile of time is the lower rate
        "p75": rate(measurement.p25_ms),
        "median_ms": measurement.median_ms,
        "samples_ms": measurement.samples_ms,
    }


def timed(timer: Timer, call, samples: int, number: int) -> Measurement:
    """`samples` samples of `number` consecutive calls each, after `number` untimed."""
    for _ in range(number):
        call()
    return Measurement.of_samples(timer.time_blocks(call, samples, number))


def bandwidth(timer: Timer, device: torch.device, sizes: list[int], samples: int) -> list[dict]:
    rows = []
    for nbytes in sizes:
        kernels = stream_kernels(*(torch.randn(nbytes // 4, device=device) for _ in range(3)))
        for name, (call, reads_writes) in kernels.items():
            moved = reads_writes * nbytes
            rate = summary(timed(timer, call, samples, 5), moved / 1e9)
            rows.append({"kernel": name, "array_bytes": nbytes, "gbps": rate})
            print(f"  {name:5} {nbytes / GIB:6.2f} GiB arrays: {rate['median']:8.0f} GB/s")
        del kernels
    return rows


def stream_kernels(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> dict:
    """STREAM's copy and triad over arrays a, b, c: each call, and the arrays it moves."""
    return {
        "copy": (lambda: a.copy_(b), 2),
        "triad": (lambda: torch.add(b, c, alpha=0.4, out=a), 3),
    }


def _scaled_mm(a: torch.Tensor, b: torch.Tensor):
    """float8 inputs, float32 scales of one, bfloat16 out: the float8 GEMM as torch.compile's
    and torchao's float8 layers call it. None where torch has no such op."""
    scaled_mm = getattr(torch, "_scaled_mm", None)
    if scaled_mm is None:
        return None
    a8 = a.to(torch.float8_e4m3fn)
    b8 = b.t().contiguous().to(torch.float8_e4m3fn).t()  # column-major, as it needs
    one = torch.ones((), device=a.device)
    return lambda: scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)


def matmul(timer: Timer, device: torch.device, shapes, samples: int) -> list[dict]:
    rows = []
    dtypes = ["bfloat16", "float16", "float32"]
    if device.type == "cuda":
        dtypes.append("float8_e4m3fn")
    torch.backends.cuda.matmul.allow_tf32 = True
    for m, k, n in shapes:
        flops = matmul_flops(m, k, n)
        for name in dtypes:
            source = torch.randn(m, k, device=device), torch.randn(k, n, device=device)
            if name == "float8_e4m3fn":
                call, path = _scaled_mm(*(t.to(torch.bfloat16) for t in source)), "torch._scaled_mm"
            else:
                a, b = (t.to(getattr(torch, name)) for t in source)
                call, path = (lambda a=a, b=b: torch.mm(a, b)), "torch.mm"
            if call is None:
                rows.append({"dtype": name, "shape": [m, k, n], "unsupported": "no _scaled_mm"})
                del source
                continue
            try:
                rate = summary(timed(timer, call, samples, 3), flops / 1e12)
            except (RuntimeError, TypeError) as error:  # an op this GPU or build lacks
                rows.append({"dtype": name, "shape": [m, k, n], "unsupported": str(error)[:200]})
                print(f"  {name:13} {m}x{k}x{n}: unsupported ({str(error)[:30]})")
                del source, call
                continue
            rows.append({"dtype": name, "shape": [m, k, n], "path": path, "tflops": rate})
            print(f"  {name:13} {m}x{k}x{n}: {rate['median']:7.1f} TFLOPS")
            del source, call
    return rows


def weight_stream(timer: Timer, device: torch.device, shapes, rows, samples: int) -> list[dict]:
    """bfloat16 matmuls of a few rows (a decode step's tokens) by a layer's weight matrix:
    the bandwidth at which they read the weights, as a decode step's matmuls do."""
    out = []
    for k, n in shapes:
        weight = torch.randn(n, k, device=device).to(torch.bfloat16)
        for m in rows:
            x = torch.randn(m, k, device=device).to(torch.bfloat16)
            moved = (weight.numel() + x.numel() + m * n) * 2
            call = lambda x=x, w=weight: F.linear(x, w)  # noqa: E731
            rate = summary(timed(timer, call, samples, 10), moved / 1e9)
            out.append({"rows": m, "k": k, "n": n, "gbps": rate})
            print(f"  {m:4} rows x {k}x{n} weights: {rate['median']:7.0f} GB/s")
    return out


def kernel_cost(timer: Timer, device: torch.device, k: int, widths, samples: int) -> dict:
    """What one-row matmuls cost beside their bytes: a graph (eagerly on the CPU) of COUNT
    bfloat16 matmuls of one row by a k x n weight matrix, each its own, for each width n:
    the time of one, and the rate at which it moves its bytes."""
    rows = []
    x = torch.randn(1, k, device=device).to(torch.bfloat16)
    for n in widths:
        weights = [torch.randn(n, k, device=device).to(torch.bfloat16) for _ in range(COUNT)]

        def call(weights=weights) -> None:
            for w in weights:
                F.linear(x, w)

        if device.type == "cuda":
            call = capture_graph(call, None, device)
        m = timed(timer, call, samples, 3)
        kernel_us = m.median_ms * 1e3 / COUNT
        moved = (n * k + k + n) * 2
        rows.append(
            {"k": k, "n": n, "bytes": moved, "kernel_us": kernel_us, "samples_ms": m.samples_ms}
        )
        print(f"  1 x {k} by {k} x {n:5}: {kernel_us:7.2f} us, {moved / kernel_us / 1e3:5.0f} GB/s")
        del weights
    return {"rows": rows}


def launch(timer: Timer, device: torch.device, kernels: int, samples: int) -> dict:
    """The gap a kernel adds to a graph's replay, from graphs of `kernels` and 10x as many
    one-element additions, and the time of the same kernels launched one by one."""
    x = torch.zeros(1, device=device)

    def adds(count: int):
        def call() -> None:
            for _ in range(count):
                x.add_(1.0)

        return call

    short, long = kernels, 10 * kernels
    out: dict = {"kernels": [short, long]}
    if device.type == "cuda":
        replays = [
            timed(timer, capture_graph(adds(n), None, device), samples, 3) for n in (short, long)
        ]
        gap_ms = (replays[1].median_ms - replays[0].median_ms) / (long - short)
        out["graph_replay_ms"] = [r.median_ms for r in replays]
        out["graph_replay_samples_ms"] = [r.samples_ms for r in replays]
        out["graph_gap_us"] = gap_ms * 1e3
        out["graph_fixed_us"] = (replays[0].median_ms - short * gap_ms) * 1e3
        fixed = out["graph_fixed_us"]
        print(f"  graph replay: {gap_ms * 1e3:.2f} us a kernel, {fixed:.1f} us a replay")
    eager = timed(timer, adds(long), samples, 1)
    out["eager_us"] = eager.median_ms * 1e3 / long
    out["eager_samples_ms"] = eager.samples_ms
    print(f"  eager: {out['eager_us']:.2f} us a kernel")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    timer = Timer(device)
    cuda = device.type == "cuda"
    sizes = [GIB // 4, GIB, 4 * GIB] if cuda else [16 << 20]
    result = {"environment": collect_environment(device)}
    print(f"== bandwidth on {result['environment'].get('device_name', device)}")
    result["bandwidth"] = bandwidth(timer, device, sizes, args.samples)
    print("== matmul")
    result["matmul"] = matmul(timer, device, SHAPES if cuda else CPU_SHAPES, args.samples)
    print("== decode matmuls: weights read")
    weights = WEIGHT_SHAPES if cuda else CPU_WEIGHT_SHAPES
    result["weight_stream"] = weight_stream(timer, device, weights, STEP_ROWS, args.samples)
    print("== one-row matmuls by width")
    k, widths = (4096, COST_WIDTHS) if cuda else (1024, CPU_COST_WIDTHS)
    result["kernel_cost"] = kernel_cost(timer, device, k, widths, args.samples)
    print("== launch")
    result["launch"] = launch(timer, device, 100 if cuda else 10, args.samples)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
