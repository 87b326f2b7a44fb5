"""The CPU provider benchmark: a Llama-sized layer (d_model 4096, 32 heads of 128) in
float32, batch 8, a context of 2048 tokens, cached decode steps, providers attnbench, hf
and sdpa-math side by side for MHA, GQA-8 and MQA, and attnbench's MHA step against the
sum of its kernels (its four projections and torch SDPA over the same cache), each timed
alone in the same rounds as the step: the record's `x_of_reference_median`.

Shared machines are noisy, so it runs ROUNDS rounds (each with its own peak probe) and
reports each figure per round and its median over the rounds: providers are measured
side by side within a round, so a burst of outside load hits a round, not a provider.

    python scripts/bench_providers.py [--rounds 3] [--out results/bench/providers-cpu.json]
    python scripts/bench_providers.py --report results/bench/providers-cpu.json

Prints Markdown, and writes every round's records and kernel times as JSON; `--report`
prints the report of a saved run again, measuring nothing.
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime, timezone
from pathlib import Path

from attnbench.measure.stats import median
from attnbench.records import as_dict
from attnbench.study.runner import plan_command, run_study

SHAPE = {"d_model": [4096], "num_heads": [32], "head_dim": [128], "num_kv_heads": [32, 8, 1]}
SWEEP = {
    **SHAPE,
    "batch": [8],
    "prompt_len": [2048],
    "dtype": ["float32"],
    "mode": ["cache"],
    "provider": ["attnbench", "hf", "sdpa-math"],
    "prefill": False,
    "device": "cpu",
}
#: The floors attnbench is held to: its step's speed-up over hf per variant, and the MHA
#: step over its kernels' sum.
FLOORS = {"MHA": 1.0, "GQA-8": 1.3, "MQA": 2.0}
KERNEL_CEILING = 1.1


def one_round() -> dict:
    result = run_study(plan_command("decode", None, SWEEP), command="decode-speed")
    return {
        "environment": result.environment,
        "records": [as_dict(r) for r in result.records["decode"]],
    }


def step(round_: dict, variant: str, provider: str) -> dict:
    (record,) = [
        r for r in round_["records"] if r["variant"] == variant and r["provider"] == provider
    ]
    return record


def _rounds(values: list[float], digits: int = 2) -> str:
    """'1.23 / 1.25 / 1.20': a figure per round."""
    return " / ".join(f"{v:.{digits}f}" for v in values)


def report(rounds: list[dict], transformers: str) -> list[str]:
    env = rounds[0]["environment"]
    peaks = _rounds([r["environment"]["peak_gbps"] for r in rounds], 1)
    lines = [
        f"{env.get('cpu_model')}, {env['num_threads']} threads, torch {env['torch_version']}, "
        f"transformers {transformers}; {len(rounds)} rounds; copy peak per round: {peaks} GB/s",
        "",
        "| Variant | Provider | step ms per round | median | % of copy peak | hf / this |",
        "|---|---|---|---|---|---|",
    ]
    for variant in FLOORS:
        for provider in SWEEP["provider"]:
            steps = [step(r, variant, provider) for r in rounds]
            if any(s["status"] != "ok" for s in steps):
                lines.append(f"| {variant} | {provider} | {steps[0]['status']} | | | |")
                continue
            times = [s["step_ms_median"] for s in steps]
            pct = median([s["pct_of_peak_bw"] for s in steps])
            hf = [step(r, variant, "hf")["step_ms_median"] for r in rounds]
            ratio = median([h / t for h, t in zip(hf, times, strict=True)])
            lines.append(
                f"| {variant} | {provider} | {_rounds(times)} | {median(times):.2f} "
                f"| {pct:.1f}% | {ratio:.2f}x |"
            )
    lines += ["", "attnbench against hf (hf step / attnbench step, median of rounds):"]
    for variant, floor in FLOORS.items():
        ratios = [
            step(r, variant, "hf")["step_ms_median"]
            / step(r, variant, "attnbench")["step_ms_median"]
            for r in rounds
        ]
        middle = median(ratios)
        verdict = "meets" if middle >= floor else "MISSES"
        lines.append(
            f"- {variant}: {middle:.2f}x ({_rounds(ratios)}); {verdict} the {floor}x floor"
        )
    lines += ["", "attnbench MHA step over the sum of its kernels, timed in the same rounds:"]
    mha = [step(r, "MHA", "attnbench") for r in rounds]
    if any(s["reference"] != "kernels" for s in mha):
        return [*lines, f"- not measured: the reference is {mha[0]['reference']!r}"]
    ratios = [s["x_of_reference_median"] for s in mha]
    middle = median(ratios)
    verdict = "meets" if middle <= KERNEL_CEILING else "MISSES"
    lines.append(f"- {middle:.3f}x ({_rounds(ratios, 3)}); {verdict} the {KERNEL_CEILING}x ceiling")
    return lines


def _transformers() -> str:
    try:
        import transformers
    except ImportError:
        return "not installed"
    return transformers.__version__


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("results/bench/providers-cpu.json"))
    parser.add_argument("--report", type=Path, help="print the report of a saved run")
    args = parser.parse_args()
    if args.report is not None:
        saved = json.loads(args.report.read_text())
        print(f"(measured {saved['created']})")
        print("\n".join(report(saved["rounds"], saved["transformers"])))
        return
    rounds = [one_round() for _ in range(args.rounds)]
    lines = report(rounds, _transformers())
    print("\n".join(lines))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    created = datetime.now(timezone.utc).isoformat(timespec="seconds")
    saved = {"created": created, "transformers": _transformers(), "rounds": rounds}
    args.out.write_text(json.dumps(saved, indent=1) + "\n")


if __name__ == "__main__":
    main()
