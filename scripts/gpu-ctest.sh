#!/usr/bin/env bash
# One device call: build hios and the GPU tests with CUDA, then run the GPU suite (`ctest -L gpu`)
# with PARALLEL tests at a time (default 4), each test's time in $OUT/ctest-gpu.log.
#   OUT=/some/dir bash scripts/gpu-ctest.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/output/gpu-ctest}
B=${BUILD_DIR:-/tmp/b}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
source scripts/gpu-build.sh
JOBS=${JOBS:-32} gpu_build hios test_gpu
{ nvidia-smi --query-gpu=index,name,driver_version --format=csv; git rev-parse --short HEAD; date -u +%FT%TZ; } >"$OUT/env.txt" 2>&1
s0=$(date +%s)
(cd "$B" && timeout "${CTEST_S:-330}" ctest -L gpu -j "${PARALLEL:-4}" --timeout 300 --output-on-failure) >"$OUT/ctest-gpu.log" 2>&1
echo "ctest -L gpu rc=$? in $(( $(date +%s) - s0 )) s: $(grep -E 'tests passed|tests failed' "$OUT/ctest-gpu.log" | tail -1)"
