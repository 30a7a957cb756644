#!/usr/bin/env bash
# Row splits on a GPU machine, one device call: build with CUDA and the tests, run
# the GPU tests (the band kernels against the CPU reference among them), then for each
# configuration schedule the graph with and without a forced row split and run both with
# --verify (the CUDA output against the CPU reference). With one GPU the parts share its
# streams (a correctness run; the speed-up needs two GPUs); with two, GPUS=2 splits across them.
#
#   OUT=/some/dir bash scripts/gpu-rowsplit.sh inception_v3:512 inception_v3:2048
#
# Environment: BUILD_DIR (/tmp/b), JOBS (32), GPUS (number of local GPUs), SPLIT (2).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/output/gpu-rowsplit}
B=${BUILD_DIR:-/tmp/b}
JOBS=${JOBS:-32}
GPUS=${GPUS:-$(nvidia-smi -L 2>/dev/null | wc -l)}
SPLIT=${SPLIT:-2}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
configs=("$@")
# --verify computes the CPU reference too, which takes minutes at 2048: keep big sizes few.
[ ${#configs[@]} -eq 0 ] && configs=(inception_v3:512 inception_v3:1024 nasnet_large:331)
{ nvidia-smi --query-gpu=index,name,driver_version --format=csv; date -u +%FT%TZ; } >"$OUT/env.txt" 2>&1
t0=$(date +%s)
source scripts/gpu-build.sh
gpu_build hios test_gpu
(cd "$B" && timeout 240 ctest -L gpu --output-on-failure) >"$OUT/ctest-gpu.log" 2>&1
echo "ctest -L gpu: $(grep -E 'tests passed|tests failed' "$OUT/ctest-gpu.log" | tail -1)"
grep -E "Failed|\*\*\*" "$OUT/ctest-gpu.log" | head -20
H=$B/cli/hios
run() {  # run NAME GRAPH SCHEDULE NP
  timeout 200 mpirun -np "$4" "$H" run --graph "$2" --schedule "$3" --backend cuda --verify --timeout 180 -o none \
    >"$OUT/$1.log" 2>&1
  echo "$1 rc=$?: $(grep -E '^# latency' "$OUT/$1.log" | sed 's/.*median \([0-9.]*\).*/median \1 ms/') \
$(grep -E '^# verify' "$OUT/$1.log" | tr -s ' ' | tr '\n' ' ') $(grep -E '^# correctness' "$OUT/$1.log")"
  grep -E "error" "$OUT/$1.log" | head -3
}
for spec in "${configs[@]}"; do
  IFS=: read -r model size <<<"$spec"
  g=$OUT/$model-$size.json
  "$H" graph --model "$model" --height "$size" --width "$size" -o "$g" >/dev/null || continue
  "$H" schedule --graph "$g" --gpus "$GPUS" -o "$OUT/$model-$size.plain.json" >/dev/null 2>&1
  "$H" schedule --graph "$g" --gpus "$GPUS" --spatial "$SPLIT" --spatial-mode halo -o "$OUT/$model-$size.halo.json" \
    >"$OUT/$model-$size.halo.sched" 2>&1
  "$H" schedule --graph "$g" --gpus "$GPUS" --spatial "$SPLIT" --spatial-mode recompute \
    -o "$OUT/$model-$size.recompute.json" >"$OUT/$model-$size.recompute.sched" 2>&1
  grep -h "spatial:" "$OUT/$model-$size".*.sched
  for kind in plain halo recompute; do run "$model-$size.$kind" "$g" "$OUT/$model-$size.$kind.json" "$GPUS"; done
done
tar czf "$OUT/logs.tgz" -C "$OUT" $(cd "$OUT" && ls *.log *.sched 2>/dev/null) 2>/dev/null
rm -f "$OUT"/*.log "$OUT"/*.sched "$OUT"/*.json 2>/dev/null
echo "total: $(( $(date +%s) - t0 )) s"
