#!/usr/bin/env bash
# Focused check of the multi-GPU paths (kept for the next session): builds hios and test_gpu,
# then runs mpirun hios run over NCCL eagerly and with CUDA Graphs, the make-run job at 1024,
# and the in-process two-GPU test, each under a timeout, logs under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/output/gpu-debug}
B=${BUILD_DIR:-/tmp/b}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
{ cmake -B "$B" -DCMAKE_CUDA_ARCHITECTURES=90 -DHIOS_CUDA=ON && cmake --build "$B" -j32 --target hios test_gpu; } >"$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
H=$B/cli/hios
W=$(mktemp -d)
$H graph --model inception_v3 --height 331 --width 331 -o $W/g.json 2>/dev/null
$H schedule --graph $W/g.json --algo hios-lp --gpus 2 -o $W/s2.json >/dev/null
for cg in off on; do
  echo "== mpirun -np 2 inception 331 hios-lp cuda-graph $cg"
  NCCL_DEBUG=WARN timeout 60 mpirun -np 2 -x NCCL_DEBUG -x NCCL_NVLS_ENABLE $H run --graph $W/g.json --schedule $W/s2.json \
    --backend cuda --cuda-graph $cg --verify --timeout 50 -o none 2>&1 | tail -8
  echo "exit ${PIPESTATUS[0]}"
done >"$OUT/mpi.log" 2>&1
cat "$OUT/mpi.log" | grep -E "^==|exit|latency|verify|error" 
echo "== make-run job at 1024"
SIZE=1024 timeout 200 bash scripts/main-job.sh "$B" >"$OUT/main-job.log" 2>&1; echo "exit $?"
grep -E "summary|verify|latency|error" "$OUT/main-job.log" | tail -8
echo "== in-process two-GPU test"
NCCL_DEBUG=INFO timeout 60 "$B/tests/test_gpu" "a two-GPU NCCL schedule matches one GPU" >"$OUT/inproc.log" 2>&1; echo "exit $?"
grep -vE "NCCL INFO (Channel|Ring|Trees|P2P|Connected|comm 0x)" "$OUT/inproc.log" | tail -15
