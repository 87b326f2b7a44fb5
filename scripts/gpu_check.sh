#!/usr/bin/env bash
# GPU check, within 10 minutes on one GPU (the steps' time limits add up to 570 s): the
# CUDA self-checks and tests, every provider side by side in bfloat16, CUDA-graph
# against eager steps, and a TP=1 tensor-parallel smoke run over NCCL. Writes results/gpu/.
# Installs nothing: runs from the checkout with the machine's own python3 and its
# preinstalled torch, typer, rich, pandas and pyyaml (hf rows are `unsupported` without
# transformers).
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
timeout 90 $PY -m attnbench selfcheck --device cuda | tee "$OUT/selfcheck.txt" || status=1

echo "== CUDA-marked tests"
if $PY -c "import pytest" 2>/dev/null; then
  timeout 120 $PY -m pytest -q -m cuda tests | tee "$OUT/pytest-cuda.txt" || status=1
else
  echo "pytest is not installed here: the CUDA tests were skipped (the self-checks above ran)" \
    | tee "$OUT/pytest-cuda.txt"
fi

shape=(--d-model 4096 --heads 32 --kv-heads 32,8,1 --head-dim 128 --dtype bfloat16
       --mode cache --no-prefill --max-time 0.5 --device cuda)
echo "== providers side by side, bfloat16"
timeout 150 $PY -m attnbench decode-speed "${shape[@]}" --batch 8 --prompt-len 1024,8192 \
  --provider attnbench,naive,sdpa-math,sdpa-flash,sdpa-efficient,sdpa-cudnn,hf \
  --csv "$OUT/providers.csv" --json "$OUT/providers.json" || status=1
echo "== flex_attention (compiled for each point)"
timeout 120 $PY -m attnbench decode-speed "${shape[@]}" --batch 8 --prompt-len 8192 \
  --provider attnbench,flex --csv "$OUT/flex.csv" --json "$OUT/flex.json" || status=1
echo "== CUDA graph against eager"
timeout 70 $PY -m attnbench decode-speed --config configs/cuda-graphs.yaml --device cuda \
  --csv "$OUT/graphs.csv" --json "$OUT/graphs.json" || status=1
echo "== tensor-parallel decode, TP=1 over NCCL (a node of N GPUs: --nproc-per-node N --tp N)"
timeout 20 $PY -m torch.distributed.run --standalone --nproc-per-node 1 -m attnbench \
  decode-speed "${shape[@]}" --batch 8 --prompt-len 8192 --tp 1 \
  --json "$OUT/tp1.json" || status=1
exit $status
