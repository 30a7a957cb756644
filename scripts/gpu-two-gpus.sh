#!/usr/bin/env bash
# One device call on two GPUs of one host: build hios, then, in order, tune each configuration
# (scripts/gpu-tune.sh: tune, re-tune, and `mpirun hios run` of the tuned and the best one-GPU
# schedules) with the main job (`make run`'s scripts/main-job.sh) after the first. Everything is
# packed into $OUT/results.tgz after every step, so a call cut short still brings back what ran.
#
# MAIN_JOB=0 leaves the main job out.
#
#   OUT=/some/dir bash scripts/gpu-two-gpus.sh inception_v3:2048:1 inception_v3:2048:1:bf16 ...
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/output/gpu-two-gpus}
export BUILD_DIR=${BUILD_DIR:-/tmp/b} JOBS=${JOBS:-32}
B=$BUILD_DIR
mkdir -p "$OUT/w"
pack() { tar czf "$OUT/results.tgz.tmp" -C "$OUT/w" . 2>/dev/null && mv "$OUT/results.tgz.tmp" "$OUT/results.tgz"; }
source scripts/gpu-build.sh
OUT=$OUT/w gpu_build hios
first=1
for spec in "$@"; do
  OUT=$OUT/w bash scripts/gpu-tune.sh "$spec" 2>&1 | grep -vE "^\| config|^\|---" | tee -a "$OUT/summary.txt"
  pack
  if [ -n "$first" ] && [ "${MAIN_JOB:-1}" = 1 ]; then
    first=
    s0=$(date +%s)
    timeout 240 bash scripts/main-job.sh "$B" >"$OUT/w/makerun.log" 2>&1
    echo "main job rc=$? $(( $(date +%s) - s0 )) s" | tee -a "$OUT/summary.txt"
    grep -E "^# summary|^# spatial|<- chosen" "$OUT/w/makerun.log" | tee -a "$OUT/summary.txt"
    cp "$OUT/w/makerun.log" "$OUT/makerun.log"
    pack
  fi
done
