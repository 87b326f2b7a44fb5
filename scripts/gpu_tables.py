"""docs/gpu.md's tables of the last GPU check: the roofline's figures as
scripts/device_params.py measured them, beside the ones attnbench's device table takes
for that GPU, and whole-model steps as scripts/model_step.py timed them, beside
`attnbench predict`'s figures. Read from results/gpu/ (scripts/gpu_check.sh writes it).

    python scripts/gpu_tables.py           # rewrite the tables in docs/gpu.md
    python scripts/gpu_tables.py --check   # exit 1, with a diff, if the page differs
"""

from __future__ import annotations

import argparse
import difflib
import json
import statistics
import sys
from pathlib import Path

from model_step import predicted  # the scripts' shared prediction of a timed point

from attnbench.model.devices import device_spec, peak_name
from attnbench.model.formulas import matmul_flops
from attnbench.model.presets import get_preset
from attnbench.model.roofline import DEFAULT_MODEL, Matmul, predict

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results" / "gpu"
PAGE = ROOT / "docs" / "gpu.md"
COUNT_NOTE = "each of 16 in a CUDA graph with its own weights, by the width of those weights"
BEGIN = "<!-- gpu-tables: begin (scripts/gpu_tables.py writes this part) -->"
END = "<!-- gpu-tables: end -->"
#: A 70B model's MLP matmul over a prefill of 8,192 tokens (M, K, N): what a long prefill
#: sustains, beside the best shape's burst.
LAYER = [8192, 8192, 28672]
#: The dtypes device_params.py times; float32 with TF32 allowed, so at the "tfloat32" peak.
TIMED_DTYPES = ("bfloat16", "float16", "float32", "float8_e4m3fn")


def _read(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


def _rate(r: dict, digits: int = 0) -> str:
    return f"{r['median']:,.{digits}f} ({r['p25']:,.{digits}f} to {r['p75']:,.{digits}f})"


def figures_table(params: dict, gpu: str) -> list[str]:
    """The measured figures beside the device table's."""
    spec = device_spec(gpu)
    biggest = max(r["array_bytes"] for r in params["bandwidth"])
    lines = [
        f"| Figure | Measured: median (p25 to p75) | `{gpu}` in attnbench's table |",
        "| --- | ---: | ---: |",
    ]
    for r in params["bandwidth"]:
        if r["array_bytes"] == biggest:
            table = f"{spec.memory_bandwidth / 1e9:,.0f}" if r["kernel"] == "triad" else "-"
            gib = r["array_bytes"] / (1 << 30)
            lines.append(
                f"| {r['kernel']}, {gib:g} GiB arrays (GB/s) | {_rate(r['gbps'])} | {table} |"
            )
    for dtype in TIMED_DTYPES:
        name = "tfloat32" if dtype == "float32" else peak_name(dtype)
        rows = [r for r in params["matmul"] if r["dtype"] == dtype and "tflops" in r]
        if not rows:
            continue
        best = max(rows, key=lambda r: r["tflops"]["median"])
        shape = "x".join(str(n) for n in best["shape"])
        table = spec.dense_flops.get(name)
        table_text = f"{table / 1e12:,.1f}" if table else "-"
        lines.append(
            f"| {name} matmul, best of {len(rows)} shapes ({shape}; TFLOPS) | "
            f"{_rate(best['tflops'], 1)} | {table_text} |"
        )
    layer = [r for r in params["matmul"] if r["dtype"] == "bfloat16" and r["shape"] == LAYER]
    if layer:
        table = spec.dense_flops["bfloat16"] / 1e12
        lines.append(
            f"| bfloat16 matmul, {'x'.join(map(str, LAYER))} (a 70B layer's prefill; TFLOPS) | "
            f"{_rate(layer[0]['tflops'], 1)} | {table:,.1f} |"
        )
    launch = params["launch"]
    lines += [
        f"| a kernel's gap in a graph's replay, empty kernels (us) | "
        f"{launch['graph_gap_us']:.2f} | {spec.launch_s * 1e6:.2f} |",
        f"| an eager launch (us) | {launch['eager_us']:.2f} | - |",
    ]
    return lines


def matmul_model_us(gpu: str, rows: int, k: int, n: int) -> tuple[float, float, float]:
    """attnbench's roofline of one bfloat16 matmul of `rows` rows by k x n weights on
    `gpu`, in us: its bytes' time, its FLOPs' time and the time of the zero rows that fill
    its last tensor-core tile, which the model adds."""
    spec = device_spec(gpu)
    rate = DEFAULT_MODEL.efficiency_flops * spec.dense_flops["bfloat16"]
    moved, flops = (k * n + rows * k + rows * n) * 2, matmul_flops(rows, n, k)
    both = predict(moved, flops, spec.memory_bandwidth, spec.dense_flops["bfloat16"]).time_s
    padding = Matmul(rows, k * n).padding_flops(spec.mma_rows) / rate
    return (both - flops / rate) * 1e6, flops / rate * 1e6, padding * 1e6


def weight_stream_table(params: dict, gpu: str) -> list[str]:
    lines = [
        "| Rows | Weights | Moved at (GB/s) | Measured us | Model: bytes + FLOPs + padding "
        "= us | Error |",
        "| ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    for r in sorted(params["weight_stream"], key=lambda r: (r["k"] * r["n"], r["rows"])):
        m, k, n = r["rows"], r["k"], r["n"]
        measured = (k * n + m * k + m * n) * 2 / (r["gbps"]["median"] * 1e9) * 1e6
        parts = matmul_model_us(gpu, m, k, n)
        model = sum(parts)
        lines.append(
            f"| {m} | {k:,} x {n:,} | {r['gbps']['median']:,.0f} | {measured:.1f} | "
            + " + ".join(f"{p:.1f}" for p in parts)
            + f" = {model:.1f} | {model / measured - 1:+.0%} |"
        )
    return lines


def one_row_table(params: dict) -> list[str]:
    """One-row matmuls by width: their time, their rate, and their time beyond their bytes
    at the run's copy rate (of its largest arrays)."""
    biggest = max(r["array_bytes"] for r in params["bandwidth"])
    copy = next(
        r["gbps"]["median"]
        for r in params["bandwidth"]
        if r["kernel"] == "copy" and r["array_bytes"] == biggest
    )
    lines = [
        f"| Weights | MB | us a matmul | GB/s | us beyond its bytes at {copy:,.0f} GB/s (copy) |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for r in params["kernel_cost"]["rows"]:
        rate = r["bytes"] / r["kernel_us"] / 1e3
        beyond = r["kernel_us"] - r["bytes"] / copy / 1e3
        lines.append(
            f"| {r['k']:,} x {r['n']:,} | {r['bytes'] / 1e6:.1f} | {r['kernel_us']:.2f} | "
            f"{rate:,.0f} | {beyond:+.1f} |"
        )
    return lines


def predicted_steps(steps: dict) -> list[tuple[dict, float, int]]:
    """Each timed step with what attnbench predicts of it now (model_step.predicted: the
    model of this tree, not the run's): (the run's row, predicted ms, kernels counted)."""
    found = []
    for r in steps["rows"]:
        point = (r["phase"], r["batch"], r["context"], r["weights"])
        found.append((r, *predicted(get_preset(r["model"]), steps["gpu"], *point)))
    return found


def steps_table(rows: list[tuple[dict, float, int]]) -> list[str]:
    lines = [
        "| Model | Weights | Step | Batch | Context | Measured ms (p25 to p75) | "
        "Predicted ms | Error | Kernels a decode step (17 keys) |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r, ms, model_kernels in rows:
        kernels = r["decode_step_kernels"]
        kernels_text = f"{kernels:,} (model: {model_kernels})"
        if not isinstance(kernels, int) or r["phase"] != "decode":
            kernels_text = "-"
        lines.append(
            f"| {r['model']} | {r['weights']} | {r['phase']} | {r['batch']} | {r['context']:,} | "
            f"{r['measured_ms']:.3f} ({r['p25_ms']:.3f} to {r['p75_ms']:.3f}) | "
            f"{ms:.3f} | {ms / r['measured_ms'] - 1:+.1%} | {kernels_text} |"
        )
    return lines


def _timed(record: dict) -> bool:
    return record.get("step_ms_median") is not None


def providers_table(records: list[dict]) -> list[str]:
    """One layer's cached decode step by provider: ms, and the share of the measured copy
    bandwidth its bytes move at; * marks a row the run called noisy."""
    providers = list(dict.fromkeys(r["provider"] for r in records if _timed(r)))
    lines = [
        "| Variant | Context | " + " | ".join(providers) + " |",
        "| --- | ---: |" + " ---: |" * len(providers),
    ]
    points = dict.fromkeys((r["variant"], r["prompt_len"]) for r in records)
    for variant, context in points:
        found = {
            r["provider"]: r
            for r in records
            if (r["variant"], r["prompt_len"]) == (variant, context) and _timed(r)
        }
        cells = []
        for provider in providers:
            r = found.get(provider)
            mark = "*" if r and r["noisy"] else ""
            cells.append(
                f"{r['step_ms_median']:.3f}{mark} ({r['pct_of_peak_bw']:.0f}%)" if r else "-"
            )
        lines.append(f"| {variant} | {context:,} | " + " | ".join(cells) + " |")
    return lines


def graphs_table(records: list[dict]) -> list[str]:
    """Each point's step launched kernel by kernel and replayed from a CUDA graph."""
    lines = [
        "| Variant | Context | Eager ms | Graph ms | Graph over eager |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    steps = {(r["variant"], r["prompt_len"], r["cuda_graph"]): r["step_ms_median"] for r in records}
    for variant, context in dict.fromkeys((r["variant"], r["prompt_len"]) for r in records):
        eager, graph = steps[variant, context, False], steps[variant, context, True]
        lines.append(
            f"| {variant} | {context:,} | {eager:.3f} | {graph:.3f} | {graph / eager:.2f}x |"
        )
    return lines


def summary(rows: list[tuple[dict, float, int]]) -> list[str]:
    """A line per weights' dtype: the median |error| and the range."""
    lines = []
    for weights in dict.fromkeys(r["weights"] for r, _, _ in rows):
        errors = [ms / r["measured_ms"] - 1 for r, ms, _ in rows if r["weights"] == weights]
        median = statistics.median(abs(e) for e in errors)
        lines.append(
            f"- {weights}: {len(errors)} points, median |error| {median:.1%}, "
            f"from {min(errors):+.0%} to {max(errors):+.0%}."
        )
    return lines


def block() -> str:
    params, steps = _read("device-params.json"), _read("model-step.json")
    predicted_rows = predicted_steps(steps)
    providers, graphs = _read("providers.json"), _read("graphs.json")
    layer = providers["records"][0]
    env = params["environment"]
    header, values = (RESULTS / "nvidia-smi.txt").read_text().splitlines()[-2:]
    smi = dict(zip(header.split(", "), values.split(", "), strict=True))
    lines = [
        BEGIN,
        "",
        f"On one {env['device_name']} (driver {smi['driver_version']}, power limit "
        f"{smi['power.limit [W]']}), torch {env['torch_version']}, CUDA {env['cuda_version']}:",
        "",
        *figures_table(params, steps["gpu"]),
        "",
        "Decode-step matmuls: bfloat16 inputs of a few rows times a layer's weights, the rate "
        "at which they move their bytes (the weights', but for 4% at most), and attnbench's "
        "roofline of each alone, its launch left out:",
        "",
        *weight_stream_table(params, steps["gpu"]),
        "",
        f"One-row bfloat16 matmuls, {COUNT_NOTE}:",
        "",
        *one_row_table(params),
        "",
        f"Whole-model steps, each replayed from a CUDA graph, beside what `attnbench predict "
        f"--gpu {steps['gpu']}` says of them with its stated defaults (the model of this "
        "tree, recomputed from the run's points):",
        "",
        *steps_table(predicted_rows),
        "",
        *summary(predicted_rows),
        "",
        f"One layer's cached decode step by provider (d_model {layer['d_model']:,}, "
        f"{layer['num_heads']} heads, batch {layer['batch']}, {layer['dtype']}): ms, and in "
        "brackets the share of the run's copy bandwidth its bytes move at; * marks a row "
        "the run called noisy (`results/gpu/providers.csv` says why):",
        "",
        *providers_table(providers["records"]),
        "",
        f"The same layer at batch {graphs['records'][0]['batch']}, launched kernel by "
        "kernel and replayed from a CUDA graph (`configs/cuda-graphs.yaml`):",
        "",
        *graphs_table(graphs["records"]),
        "",
        END,
    ]
    return "\n".join(lines)


def page() -> str:
    text = PAGE.read_text()
    head, rest = text.split(BEGIN, 1)
    return head + block() + rest.split(END, 1)[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page differs")
    args = parser.parse_args(argv)
    new, old = page(), PAGE.read_text()
    if args.check:
        if new != old:
            sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), new.splitlines(True)))
            return 1
        return 0
    PAGE.write_text(new)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
