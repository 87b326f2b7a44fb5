#!/usr/bin/env bash
# GPU check, within 10 minutes on one GPU (the steps' time limits add up to 590 s): the
# CUDA self-checks and tests, every provider side by side in bfloat16, CUDA-graph
# against eager steps, serving batches (ragged and mixed, a paged cache, the prefill's
# peak memory from the CUDA allocator), the performance model calibrated on one sweep and
# checked against another, and a TP=1 tensor-parallel smoke run over NCCL.
# Writes results/gpu/.
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
timeout 80 $PY -m attnbench selfcheck --device cuda | tee "$OUT/selfcheck.txt" || status=1

echo "== CUDA-marked tests"
if $PY -c "import pytest" 2>/dev/null; then
  timeout 110 $PY -m pytest -q -m cuda tests | tee "$OUT/pytest-cuda.txt" || status=1
else
  echo "pytest is not installed here: the CUDA tests were skipped (the self-checks above ran)" \
    | tee "$OUT/pytest-cuda.txt"
fi

shape=(--d-model 4096 --heads 32 --kv-heads 32,8,1 --head-dim 128 --dtype bfloat16
       --mode cache --no-prefill --max-time 0.5 --device cuda)
echo "== providers side by side, bfloat16"
timeout 120 $PY -m attnbench decode-speed "${shape[@]}" --batch 8 --prompt-len 1024,8192 \
  --provider attnbench,naive,sdpa-math,sdpa-flash,sdpa-efficient,sdpa-cudnn,flash-attn,hf \
  --csv "$OUT/providers.csv" --json "$OUT/providers.json" || status=1
echo "== flex_attention (compiled for each point)"
timeout 90 $PY -m attnbench decode-speed "${shape[@]}" --batch 8 --prompt-len 8192 \
  --provider attnbench,flex --csv "$OUT/flex.csv" --json "$OUT/flex.json" || status=1
echo "== serving: ragged and mixed batches, a paged cache, the prefill's peak memory"
serving=(--d-model 4096 --heads 32 --kv-heads 8 --head-dim 128 --dtype bfloat16
         --max-time 0.3 --device cuda --reference none)
timeout 25 $PY -m attnbench decode-speed "${serving[@]}" \
  --batch-spec 8q1s128..8k,q512s2k_16q1s2k --provider attnbench,naive,sdpa-flash,sdpa-efficient \
  --csv "$OUT/batches.csv" --json "$OUT/batches.json" || status=1
timeout 15 $PY -m attnbench decode-speed "${serving[@]}" --batch 8 --prompt-len 8192 \
  --block-size contiguous,16,256 --provider attnbench,flash-attn --mode cache --no-prefill \
  --csv "$OUT/paged.csv" --json "$OUT/paged.json" || status=1
timeout 20 $PY -m attnbench decode-speed "${serving[@]}" --batch 1 --prompt-len 2048,8192 \
  --provider sdpa-math,sdpa-flash,sdpa-efficient --mode cache --prefill-memory \
  --csv "$OUT/prefill-memory.csv" --json "$OUT/prefill-memory.json" || status=1
echo "== CUDA graph against eager"
timeout 60 $PY -m attnbench decode-speed --config configs/cuda-graphs.yaml --device cuda \
  --csv "$OUT/graphs.csv" --json "$OUT/graphs.json" || status=1
echo "== the performance model: calibrated on one sweep, checked against another"
calibration=(--d-model 2048,4096 --heads 32 --kv-heads 32,8,1 --dtype bfloat16 --mode cache
             --no-prefill --reference none --max-time 0.2 --device cuda)
timeout 15 $PY -m attnbench decode-speed "${calibration[@]}" --batch 1,16 --prompt-len 1024,8192 \
  --quiet --json "$OUT/calibration-fit.json" || status=1
timeout 15 $PY -m attnbench decode-speed "${calibration[@]}" --batch 4,8 --prompt-len 2048,4096 \
  --quiet --json "$OUT/calibration-check.json" || status=1
timeout 10 $PY -m attnbench predict --calibrate "$OUT/calibration-fit.json" \
  --to "$OUT/calibration.json" || status=1
timeout 10 $PY -m attnbench predict --check "$OUT/calibration-check.json" \
  --calibration "$OUT/calibration.json" | tee "$OUT/calibration-check.txt" || status=1
echo "== tensor-parallel decode, TP=1 over NCCL (a node of N GPUs: --nproc-per-node N --tp N)"
timeout 20 $PY -m torch.distributed.run --standalone --nproc-per-node 1 -m attnbench \
  decode-speed "${shape[@]}" --batch 8 --prompt-len 8192 --tp 1 \
  --json "$OUT/tp1.json" || status=1
exit $status
