#!/usr/bin/env bash
# What limits serving on one GPU, one device call: the batch-1..8 pass times of a
# model in each precision (hios-gpu-bench, one-GPU schedule), each with the default number of
# hardware work queues and with CUDA_DEVICE_MAX_CONNECTIONS=32. Several models' multi-stream
# graphs in flight at once can share the default 8 queues, and then a kernel of one model waits
# behind an unrelated kernel of another: the second column shows whether that costs anything.
#
#   OUT=/some/dir bash scripts/gpu-serve-probe.sh
#
# Environment: BUILD_DIR (/tmp/b), MODEL (nasnet_large), SIZE (331), BATCHES (1,2,4,8),
# MATH (tf32,bf16), CONNECTIONS (32).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/output/gpu-serve-probe}
B=${BUILD_DIR:-/tmp/b}
mkdir -p "$OUT"
t0=$(date +%s)
source scripts/gpu-build.sh
gpu_build hios hios-gpu-bench
IFS=, read -r -a batches <<<"${BATCHES:-1,2,4,8}"
for b in "${batches[@]}"; do
  for conn in default "${CONNECTIONS:-32}"; do
    env_conn=()
    [ "$conn" != default ] && env_conn=(CUDA_DEVICE_MAX_CONNECTIONS="$conn")
    env ${env_conn[@]+"${env_conn[@]}"} timeout 120 "$B/bench/hios-gpu-bench" --model "${MODEL:-nasnet_large}" \
      --size "${SIZE:-331}" --batch "$b" --math "${MATH:-tf32,bf16}" --layout nhwc --cuda-graph on --algo hios-lp \
      --gpus 1 --warmup 5 --iters 30 --json "$OUT/passes-conn-$conn.jsonl" 2>/dev/null |
      sed "s/^/conn=$conn batch=$b  /" | grep -v "^conn=[^ ]* batch=[0-9]*  #"
  done
done
echo "probe: $(( $(date +%s) - t0 )) s"
