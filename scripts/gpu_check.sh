#!/usr/bin/env bash
# GPU check: the CUDA self-checks and tests, then a bf16 decode sweep with and without
# CUDA graphs (MHA, GQA-8, MQA; batch 1, 8, 32; prompts 512..32768), written to
# results/gpu/. Installs nothing: runs from the checkout with the machine's own python3
# and its preinstalled torch, typer, rich, pandas and pyyaml. About 5 minutes on one H200.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=.
PY=${PYTHON:-python3}
OUT=${OUT_DIR:-results/gpu}
mkdir -p "$OUT"
status=0

echo "== environment"
$PY -m attnbench env --device cuda | tee "$OUT/env.txt" || exit 2

echo "== self-checks on CUDA"
$PY -m attnbench selfcheck --device cuda | tee "$OUT/selfcheck.txt" || status=1

echo "== CUDA-marked tests"
if $PY -c "import pytest" 2>/dev/null; then
  $PY -m pytest -q -m cuda tests | tee "$OUT/pytest-cuda.txt" || status=1
else
  echo "pytest is not installed here: the CUDA tests were skipped (the self-checks above ran)" \
    | tee "$OUT/pytest-cuda.txt"
fi

sweep=(--d-model 4096 --heads 32 --kv-heads 32,8,1 --head-dim 128 --dtype bfloat16
       --batch 1,8,32 --prompt-len 512,2048,8192,32768 --gen-len 32
       --mode cache --no-prefill --warmup 1 --repeats 3 --device cuda)
echo "== decode sweep, eager"
timeout 240 $PY -m attnbench decode-speed "${sweep[@]}" \
  --csv "$OUT/decode-eager.csv" --json "$OUT/decode-eager.json" || status=1
echo "== decode sweep, CUDA graphs"
timeout 240 $PY -m attnbench decode-speed "${sweep[@]}" --cuda-graph \
  --csv "$OUT/decode-graph.csv" --json "$OUT/decode-graph.json" || status=1

echo "== achieved share of the measured HBM copy bandwidth (median step)"
$PY - "$OUT" <<'PY' | tee "$OUT/summary.txt"
import sys
import pandas as pd
out = sys.argv[1]
frames = []
for name in ("eager", "graph"):
    try:
        df = pd.read_csv(f"{out}/decode-{name}.csv")
    except FileNotFoundError:
        continue
    frames.append(df.assign(run=name))
df = pd.concat(frames)
table = df.pivot_table(index=["variant", "batch", "prompt_len"], columns="run",
                       values=["step_ms_median", "pct_of_peak_bw"])
print(f"peak copy bandwidth: {df['peak_gbps'].iloc[0]:.0f} GB/s")
print(table.round(3).to_string())
PY
exit $status
