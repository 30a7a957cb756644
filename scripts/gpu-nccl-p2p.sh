#!/usr/bin/env bash
# On a 2-GPU machine: hios-nccl-p2p-bench (bench/nccl_p2p_bench.cpp), k tensors from GPU 0 to
# GPU 1 sent one after another, in one NCCL group, or on k communicators at once, each way
# captured in a CUDA Graph. BUILD_DIR (/tmp/b) is built when the tool is missing or REBUILD is
# set; extra arguments go to the tool.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/output/gpu-nccl-p2p}
B=${BUILD_DIR:-/tmp/b}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [ ! -x "$B/bench/hios-nccl-p2p-bench" ] || [ -n "${REBUILD:-}" ]; then
  source scripts/gpu-build.sh
  gpu_build hios-nccl-p2p-bench
fi
{ nvidia-smi --query-gpu=index,name,driver_version --format=csv; date -u +%FT%TZ; } >"$OUT/env-bench.txt" 2>&1
timeout 300 mpirun -np 2 -x NCCL_NVLS_ENABLE "$B/bench/hios-nccl-p2p-bench" "$@" 2>&1 | tee "$OUT/nccl-p2p.txt"
