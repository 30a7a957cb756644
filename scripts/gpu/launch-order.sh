#!/usr/bin/env bash
# Launch orders on one GPU, one device call: hios-gpu-bench's hios-lp rows with each
# stage's launches in topo, opara and measured order (CUDA Graph replay), and PyTorch's
# sequential CUDA Graph of the same model, size and batch in the same call.
#
#   OUT=/some/dir bash scripts/gpu.sh launch-order
#
# Environment: BUILD_DIR (/tmp/b), MODELS (inception_v3 nasnet_large randwire), SIZES (331 1024),
# BATCHES (1 8), MATH (tf32), GRAPH (on; "both" adds eager rows), DEADLINE_S (540: later
# configurations are skipped, not cut), PT (1: PyTorch's cuda-graph variant where it has the model).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/output/gpu-launch-order}
B=${BUILD_DIR:-/tmp/b}
mkdir -p "$OUT"
t0=$(date +%s)
source scripts/gpu/build.sh
gpu_build hios-gpu-bench
deadline=$(( t0 + ${DEADLINE_S:-540} ))
for b in ${BATCHES:-1 8}; do
  for size in ${SIZES:-331 1024}; do
    for model in ${MODELS:-inception_v3 nasnet_large randwire}; do
      left=$(( deadline - $(date +%s) ))
      if [ "$left" -lt 30 ]; then echo "skipped $model $size batch $b: deadline"; continue; fi
      timeout "$left" "$B/bench/hios-gpu-bench" --model "$model" --size "$size" --batch "$b" \
        --math "${MATH:-tf32}" --layout nhwc --cuda-graph "${GRAPH:-on}" --algo hios-lp --gpus 1 \
        --launch-order topo,opara,measured --warmup 5 --iters 20 --json "$OUT/bench.jsonl" \
        >"$OUT/hios-$model-$size-$b.txt" 2>&1
      echo "hios $model $size batch $b rc=$? ($(( $(date +%s) - t0 )) s)"
      grep -E "^$model |^# hios-lp|error" "$OUT/hios-$model-$size-$b.txt"
      if [ "${PT:-1}" = 1 ] && [ "$model" != randwire ]; then
        left=$(( deadline - $(date +%s) ))
        [ "$left" -lt 20 ] && continue
        timeout "$left" python3 scripts/bench_pytorch.py --models "$model" --sizes "$size" --batch "$b" \
          --variants cuda-graph --warmup 5 --iters 20 --json "$OUT/bench.jsonl" >"$OUT/torch-$model-$size-$b.txt" 2>&1
        echo "torch $model $size batch $b rc=$?: $(grep -h '"cuda-graph"' "$OUT/bench.jsonl" | tail -1 | python3 -c 'import json,sys; r=json.loads(sys.stdin.read()); print("cuda-graph median %.3f ms" % r["median_ms"])' 2>/dev/null)"
      fi
    done
  done
done
echo "total: $(( $(date +%s) - t0 )) s"
