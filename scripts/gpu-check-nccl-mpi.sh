#!/usr/bin/env bash
# The production multi-GPU path: mpirun, one process per GPU, NCCL, eager and CUDA Graph,
# inception_v3 at SIZE (1024) with an hios-lp schedule over 2 GPUs, against 1 GPU; --verify.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/output/gpu-nccl}
B=${BUILD_DIR:-/tmp/b}
SIZE=${SIZE:-1024}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_DEBUG=${NCCL_DEBUG:-WARN}
{ cmake -B "$B" -DCMAKE_CUDA_ARCHITECTURES=90 -DHIOS_CUDA=ON && cmake --build "$B" -j32 --target hios; } >"$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
H=$B/cli/hios
W=$(mktemp -d)
$H graph --model inception_v3 --height $SIZE --width $SIZE -o $W/g.json 2>/dev/null
$H schedule --graph $W/g.json --algo sequential --gpus 1 -o $W/s1.json | grep predicted
$H schedule --graph $W/g.json --algo hios-lp --gpus 2 -o $W/s2.json | grep -E "predicted|transfers"
run() {  # label np schedule extra...
  local label=$1 np=$2 s=$3; shift 3
  echo "== $label"
  timeout 90 mpirun -np $np -x NCCL_DEBUG -x NCCL_NVLS_ENABLE $H run --graph $W/g.json --schedule $s --backend cuda --transport nccl \
    --verify --timeout 80 -o $OUT/$label.json "$@" >$OUT/$label.log 2>&1
  echo "exit $?"
  grep -E "transport|verify vs|latency|error" $OUT/$label.log | head -6
}
run seq-1gpu 1 $W/s1.json
run lp-2gpu-nccl-eager 2 $W/s2.json --transport nccl --cuda-graph off
run lp-2gpu-nccl-graph 2 $W/s2.json --transport nccl --cuda-graph on
