"""How far the host moves a study's steps over time, with nothing else moving: the cached
steps that a study compares at its longest context (the default study's MHA, GQA-2 and MQA
at 4,096 tokens), built once, in one memory layout, and sampled in turn for `--seconds`
as the study samples them (the same Timer, blocks and warm-up), one round after another.

A run of the study samples each context's layouts within a few seconds, so its stated
interval holds the next run's value only if the host holds still for longer than that.
This script says whether it does: it splits the rounds into windows of 1, 5 and 30
seconds and reports, for every step and for its ratio over the narrowest variant's, how
far apart the windows' medians lie (max over min). Windows of 5 s that lie further apart
than a comparison's target mean that no sampling within one 30-s run can make the next
run agree with it on this host: the host, not the layout, moved.

    python scripts/host_drift.py [--seconds 240] [--config attnbench/configs/default.yaml]
        [--out results/bench/host-drift-cpu.json]
    python scripts/host_drift.py --report results/bench/host-drift-cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from datetime import datetime, timezone
from pathlib import Path

import torch
from aa_runs import refuse_beside_report

from attnbench.experiments.context import Context
from attnbench.experiments.decode import Ready, prepare, timed_step
from attnbench.measure.environment import collect_environment
from attnbench.measure.stats import median
from attnbench.measure.timing import Timer, Unit
from attnbench.modules.providers import PROVIDERS
from attnbench.study.plan import DEFAULT_CONFIG, plan_study

WINDOWS_S = (1, 5, 30)


def compared_points(config: Path) -> tuple[list, object, torch.device, int | None]:
    """The decode section's cached points at its longest context, for the first provider
    (widest variant first), with the section's options, device and threads."""
    plan = plan_study(config, names=["decode"])
    points = [t.point for t in plan.tasks if t.section == "decode" and t.point.cached]
    if not points:
        raise SystemExit(f"{config}: its decode section times no cached step")
    longest = max(p.prompt_len for p in points)
    provider = points[0].provider
    chosen = [p for p in points if p.prompt_len == longest and p.provider == provider]
    chosen.sort(key=lambda p: -p.num_kv_heads)
    return chosen, plan.options["decode"], plan.devices["decode"], plan.threads


def sample(config: Path, seconds: float) -> dict:
    """Every round's samples (ms) of the compared steps, with the seconds it started at."""
    load = os.getloadavg()[0]
    points, options, device, threads = compared_points(config)
    if threads:
        torch.set_num_threads(threads)
    context = Context(device=device)
    ready = [prepare(p, context) for p in points]
    failed = [r.status for r in ready if not isinstance(r, Ready)]
    if failed:
        raise SystemExit(f"a compared point did not build: {failed[0]}")
    timer, sampling = Timer(device), options.sampling(device)
    units = []
    with torch.inference_mode():
        for r in ready:
            with PROVIDERS[r.point.provider].running():
                step = timed_step(r.work, r.point, device)
            units.append(Unit([(step, r.work.step_setup)], PROVIDERS[r.point.provider].running))
        blocks = timer.warm_up(units, sampling)  # as the study's rounds take them
        order, rounds = random.Random(0), []
        start = time.perf_counter()
        while (at := time.perf_counter() - start) < seconds:
            taken = timer.time_rounds(units, blocks, 1, order)
            rounds.append([round(at, 3), *(round(unit[0][0], 5) for unit in taken)])
    return {
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "config": str(config),
        "seconds": seconds,
        "load": load,
        "environment": collect_environment(device),
        "points": [f"{r.point.shape.variant} at {r.point.prompt_len:,}" for r in ready],
        "kv_heads": [r.point.num_kv_heads for r in ready],
        "blocks": [b[0].number for b in blocks],
        "rounds": rounds,
    }


def window_medians(rounds: list[list[float]], column, width: float) -> list[float]:
    """The median of `column(round)` over each whole window of `width` seconds."""
    windows: dict[int, list[float]] = {}
    end = rounds[-1][0]
    for r in rounds:
        if ((w := int(r[0] // width)) + 1) * width <= end:
            windows.setdefault(w, []).append(column(r))
    return [median(v) for _, v in sorted(windows.items())]


def report(doc: dict) -> list[str]:
    env = doc["environment"]
    rounds, names, heads = doc["rounds"], doc["points"], doc["kv_heads"]
    narrowest = heads.index(min(heads))
    host = env.get("cpu_model") or env.get("device")
    lines = [
        f"{len(rounds)} rounds in {rounds[-1][0]:.0f} s on {host} (torch "
        f"{env.get('torch_version')}, load {doc['load']:.2f} as it started), one memory "
        f"layout; blocks of {', '.join(map(str, doc['blocks']))} calls.",
        "",
        "| step | window | windows | medians (ms or x) | max / min |",
        "|---|---:|---:|---|---:|",
    ]
    columns = [(f"{n}: step", lambda r, i=i: r[1 + i]) for i, n in enumerate(names)]
    columns += [
        (f"{n}: over the narrowest", lambda r, i=i: r[1 + i] / r[1 + narrowest])
        for i, n in enumerate(names)
        if i != narrowest
    ]
    for name, column in columns:
        for width in WINDOWS_S:
            medians = window_medians(rounds, column, width)
            if len(medians) < 2:
                continue
            lines.append(
                f"| {name} | {width} s | {len(medians)} | {min(medians):.3g} to "
                f"{max(medians):.3g} | {max(medians) / min(medians):.3f} |"
            )
    return lines


def as_json(doc: dict) -> str:
    """The document, one round to a line."""
    head = json.dumps({k: v for k, v in doc.items() if k != "rounds"}, indent=1)[:-2]
    rounds = ",\n".join("  " + json.dumps(r) for r in doc["rounds"])
    return f'{head},\n "rounds": [\n{rounds}\n ]\n}}\n'


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, help="how long to sample (default 240)")
    parser.add_argument("--config", type=Path, help="the study (default: the default study)")
    parser.add_argument("--out", type=Path, help="write the rounds here (JSON)")
    parser.add_argument("--report", type=Path, help="report a file written before")
    args = parser.parse_args()
    if args.report is not None:
        refuse_beside_report(parser, args, "samples nothing")
        doc = json.loads(args.report.read_text())
    else:
        seconds = 240.0 if args.seconds is None else args.seconds
        if not seconds >= 2 * WINDOWS_S[0]:
            parser.error(f"--seconds {seconds:g}: at least {2 * WINDOWS_S[0]} (two windows)")
        doc = sample(args.config or DEFAULT_CONFIG, seconds)
        if args.out is not None:
            args.out.write_text(as_json(doc))
    print("\n".join(report(doc)))


if __name__ == "__main__":
    main()
