#!/usr/bin/env bash
# The CPU decode benchmark of the README: a Llama-sized layer (d_model 4096, 32 heads of
# 128) in float32, batch 8, 2048 cached tokens, cached decode only, sdpa and naive
# backends, MHA / GQA-8 / MQA, on 2 threads. Shared machines are noisy, so the sweep runs
# in ROUNDS rounds (default 3), each with its own peak-bandwidth probe, and the table gives
# each configuration's median over the rounds: variants and backends are measured side by
# side, and a burst of outside load hits one round, not one variant.
set -euo pipefail
cd "$(dirname "$0")/.."
ATTNBENCH=${ATTNBENCH:-.venv/bin/attnbench}
PY=${PYTHON:-.venv/bin/python}
out=${1:-results/bench-cpu-decode}
rounds=${ROUNDS:-3}
mkdir -p "$out"
for i in $(seq 1 "$rounds"); do
  $ATTNBENCH decode-speed --d-model 4096 --heads 32 --kv-heads 32,8,1 --head-dim 128 \
    --batch 8 --prompt-len 2048 --gen-len 8 --mode cache --no-prefill --backend sdpa,naive \
    --threads 2 --warmup 1 --repeats 5 --device cpu --quiet --json "$out/round$i.json"
done
$PY - "$out" <<'PY'
import glob
import json
import statistics
import sys

docs = [json.load(open(p)) for p in sorted(glob.glob(f"{sys.argv[1]}/round*.json"))]
env = docs[0]["environment"]
peaks = [d["environment"]["peak_gbps"] for d in docs]
rows: dict = {}
for d in docs:
    for r in d["records"]:
        rows.setdefault((r["variant"], r["backend"]), []).append(r)


def med(key, field):
    return statistics.median(r[field] for r in rows[key])


print(f"{env['cpu_model']}, {env['num_threads']} threads, torch {env['torch_version']}; "
      f"{len(docs)} rounds; peak copy bandwidth per round: "
      + ", ".join(f"{p:.1f}" for p in peaks) + " GB/s")
print("| Variant | Backend | step ms (median of rounds) | per round | GB/s | % of peak |")
print("|---|---|---|---|---|---|")
for key in rows:
    per_round = " / ".join(f"{r['step_ms_median']:.1f}" for r in rows[key])
    print(f"| {key[0]} | {key[1]} | {med(key, 'step_ms_median'):.1f} | {per_round} | "
          f"{med(key, 'achieved_gbps'):.1f} | {med(key, 'pct_of_peak_bw'):.1f}% |")
step = {key: med(key, "step_ms_median") for key in rows}
print()
print(f"MHA / GQA-8 step time (sdpa): {step['MHA', 'sdpa'] / step['GQA-8', 'sdpa']:.2f}x")
print(f"MHA / MQA step time (sdpa): {step['MHA', 'sdpa'] / step['MQA', 'sdpa']:.2f}x")
for v in ("GQA-8", "MQA"):
    print(f"naive / sdpa step time, {v}: {step[v, 'naive'] / step[v, 'sdpa']:.2f}x")
PY
