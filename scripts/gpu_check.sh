#!/usr/bin/env bash
# GPU check (4.5 minutes on an H200; its steps' time limits add up to 12 minutes on one
# GPU, 14 on several): the device's roofline figures measured
# (bandwidth, matmul rates, the gap between graph-replayed kernels), whole-model steps
# beside `attnbench predict`'s figures for the same GPU, the CUDA self-checks and tests,
# every provider side by side in bfloat16, CUDA-graph against eager steps, serving batches
# (ragged and mixed, a paged cache, the prefill's peak memory from the CUDA allocator),
# the performance model calibrated on one sweep and checked against another, and a
# tensor-parallel decode over NCCL on every GPU of the machine (TP=1 on one), after the
# all-reduce's latency and bus bandwidth by message size where there are several.
# Writes results/gpu/, its log included (log.txt).
# Installs nothing: runs from the checkout with the machine's own python3 and its
# preinstalled torch, typer, rich, pandas and pyyaml (hf rows are `unsupported` without
# transformers). DEVICE=cpu runs the same steps on the CPU, to check the script itself.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=. PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
OUT=${OUT_DIR:-results/gpu}
DEVICE=${DEVICE:-cuda}
GPU=${GPU:-h200}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
failed=()
# step SECONDS CMD...: run CMD under a time limit; a failure is named at the end
step() {
  local limit=$1; shift
  timeout "$limit" "$@"
  local rc=$?
  if [ "$rc" -ne 0 ]; then
    failed+=("exit $rc: ${*:1:6}")
    echo "!! exit $rc"
  fi
}

echo "== environment"
step 30 $PY -m attnbench env --device "$DEVICE" > >(tee "$OUT/env.txt")
$PY -m pip list 2>/dev/null | grep -iE "^(torch|typer|click|rich|numpy|pandas|transformers|pytest) " \
  | tee "$OUT/packages.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit \
  --format=csv 2>/dev/null | tee "$OUT/nvidia-smi.txt"

echo "== the roofline's figures, measured"
step 70 $PY scripts/device_params.py --device "$DEVICE" --json "$OUT/device-params.json"
echo "== whole-model steps, measured and predicted for $GPU"
small=(); [ "$DEVICE" = cpu ] && small=(--small --fp8-models "")
step 150 $PY scripts/model_step.py --device "$DEVICE" --gpu "$GPU" ${small[@]+"${small[@]}"} \
  --json "$OUT/model-step.json"

echo "== self-checks on CUDA"
step 60 $PY -m attnbench selfcheck --device "$DEVICE" > >(tee "$OUT/selfcheck.txt")

echo "== CUDA-marked tests"
if $PY -c "import pytest" 2>/dev/null; then
  step 80 $PY -m pytest -q -p no:cacheprovider -m cuda tests > >(tee "$OUT/pytest-cuda.txt")
else
  echo "pytest is not installed here: the CUDA tests were skipped (the self-checks above ran)" \
    | tee "$OUT/pytest-cuda.txt"
fi

shape=(--d-model 4096 --heads 32 --kv-heads 32,8,1 --head-dim 128 --dtype bfloat16
       --mode cache --no-prefill --max-time 0.5 --device "$DEVICE")
echo "== providers side by side, bfloat16"
step 60 $PY -m attnbench decode-speed "${shape[@]}" --batch 8 --prompt-len 1024,8192 \
  --provider attnbench,naive,sdpa-math,sdpa-flash,sdpa-efficient,sdpa-cudnn,flash-attn,hf \
  --csv "$OUT/providers.csv" --json "$OUT/providers.json"
echo "== flex_attention (compiled for each point)"
step 45 $PY -m attnbench decode-speed "${shape[@]}" --batch 8 --prompt-len 8192 \
  --provider attnbench,flex --csv "$OUT/flex.csv" --json "$OUT/flex.json"
echo "== serving: ragged and mixed batches, a paged cache, the prefill's peak memory"
serving=(--d-model 4096 --heads 32 --kv-heads 8 --head-dim 128 --dtype bfloat16
         --max-time 0.3 --device "$DEVICE" --reference none)
step 25 $PY -m attnbench decode-speed "${serving[@]}" \
  --batch-spec 8q1s128..8k,q512s2k_16q1s2k --provider attnbench,naive,sdpa-flash,sdpa-efficient \
  --csv "$OUT/batches.csv" --json "$OUT/batches.json"
step 15 $PY -m attnbench decode-speed "${serving[@]}" --batch 8 --prompt-len 8192 \
  --block-size contiguous,16,256 --provider attnbench,flash-attn --mode cache --no-prefill \
  --csv "$OUT/paged.csv" --json "$OUT/paged.json"
step 20 $PY -m attnbench decode-speed "${serving[@]}" --batch 1 --prompt-len 2048,8192 \
  --provider sdpa-math,sdpa-flash,sdpa-efficient --mode cache --prefill-memory \
  --csv "$OUT/prefill-memory.csv" --json "$OUT/prefill-memory.json"
echo "== CUDA graph against eager"
step 40 $PY -m attnbench decode-speed --config configs/cuda-graphs.yaml --device "$DEVICE" \
  --csv "$OUT/graphs.csv" --json "$OUT/graphs.json"
echo "== the performance model: calibrated on one sweep, checked against another"
calibration=(--d-model 2048,4096 --heads 32 --kv-heads 32,8,1 --dtype bfloat16 --mode cache
             --no-prefill --reference none --max-time 0.2 --device "$DEVICE")
step 15 $PY -m attnbench decode-speed "${calibration[@]}" --batch 1,16 --prompt-len 1024,8192 \
  --quiet --json "$OUT/calibration-fit.json"
step 15 $PY -m attnbench decode-speed "${calibration[@]}" --batch 4,8 --prompt-len 2048,4096 \
  --quiet --json "$OUT/calibration-check.json"
step 10 $PY -m attnbench predict --calibrate "$OUT/calibration-fit.json" \
  --to "$OUT/calibration.json"
step 10 $PY -m attnbench predict --check "$OUT/calibration-check.json" \
  --calibration "$OUT/calibration.json" > >(tee "$OUT/calibration-check.txt")
echo "== the same sweep predicted for $GPU with the stated defaults"
step 10 $PY -m attnbench predict --check "$OUT/calibration-check.json" --gpu "$GPU" \
  > >(tee "$OUT/predict-check.txt")
ngpu=0
[ "$DEVICE" = cpu ] || ngpu=$($PY -c "import torch; print(torch.cuda.device_count())" || echo 0)
tp=$(( ngpu > 1 ? ngpu : 1 ))
if [ "$tp" -gt 1 ]; then
  echo "== all-reduce over $tp GPUs: latency and bus bandwidth by message size"
  step 120 $PY -m torch.distributed.run --standalone --nproc-per-node "$tp" \
    scripts/allreduce_bench.py --json "$OUT/allreduce.json"
fi
echo "== tensor-parallel decode over NCCL, TP=$tp (every GPU of the machine)"
step 60 $PY -m torch.distributed.run --standalone --nproc-per-node "$tp" -m attnbench \
  decode-speed "${shape[@]}" --batch 8 --prompt-len 8192 --tp "$tp" \
  --json "$OUT/tp$tp.json"
for f in "${failed[@]}"; do echo "failed: $f"; done
exit $(( ${#failed[@]} > 0 ))
