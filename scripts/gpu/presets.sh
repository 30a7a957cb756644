#!/usr/bin/env bash
# One device call on two GPUs for the analytic model and the transports: `hios tune` on each
# MODEL:SIZE:BATCH[:MATH] with its profile database kept (what `hios fit-preset` fits a device
# preset to, and whose `searched` candidates give measured times for the predictions), a
# re-tune with it, and first the chosen two-GPU schedule of COMM_SCHEDULE (a tuned schedule,
# with COMM_MODEL:COMM_SIZE) run under NCCL's default and limited CTA counts
# (NCCL_MAX_CTAS): how much the NCCL kernels' SMs cost the compute beside them.
#   OUT=/some/dir COMM_SCHEDULE=s.json COMM_MODEL=nasnet_large COMM_SIZE=2048 \
#     bash scripts/gpu.sh presets inception_v3:2048:1 inception_v3:1024:1 ...
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/output/gpu-presets}
B=${BUILD_DIR:-/tmp/b}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
source scripts/gpu/build.sh
[ -x "$B/cli/hios" ] && [ -z "${REBUILD:-}" ] || JOBS=${JOBS:-32} gpu_build hios
H=$B/cli/hios
if [ -n "${COMM_SCHEDULE:-}" ]; then
  g=$OUT/comm.graph.json
  "$H" graph --model "$COMM_MODEL" --height "$COMM_SIZE" --width "$COMM_SIZE" -o "$g" >/dev/null
  for ctas in default 16 8 4 2 default; do
    env=(); [ "$ctas" != default ] && env=(-x NCCL_MAX_CTAS=$ctas -x NCCL_MIN_CTAS=1)
    timeout 120 mpirun -np 2 "${env[@]}" "$H" run --graph "$g" --schedule "$COMM_SCHEDULE" --backend cuda --warmup 5 \
      --number 10 --repeat 7 --timeout 110 -o none >"$OUT/comm-$ctas.log" 2>&1
    echo "$COMM_MODEL $COMM_SIZE NCCL_MAX_CTAS=$ctas (rc $?): $(grep -E '^# latency' "$OUT/comm-$ctas.log" | \
      sed -E 's/.*median ([0-9.]+).*/median \1 ms/')" | tee -a "$OUT/comm.txt"
  done
fi
NORUN=1 OUT=$OUT BUILD_DIR=$B TUNE_S=${TUNE_S:-120} STALL_S=${STALL_S:-115} bash scripts/gpu/tune.sh "$@"
