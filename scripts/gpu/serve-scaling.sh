#!/usr/bin/env bash
# Serving on one GPU and on two, one device call: build, then `hios serve` of the same model mix
# with --replicas auto on GPU 0 alone and on GPUs 0 and 1, each launcher (fifo, static, adaptive)
# at every load, then scripts/report.py on both JSONs: p99 against answered/s for one and two
# GPUs on one plot, each launcher's most within its budget against fifo's, and where each GPU's
# workers spent their time. Everything comes back in OUT (the plot as scaling.tgz).
#
#   OUT=/some/dir bash scripts/gpu.sh serve-scaling
#
# Environment: BUILD_DIR (/tmp/b), MODELS (inception_v3,nasnet_large,randwire), SIZE (331),
# MATH (bf16), BATCHES (1,2,3,4,5,6,7,8), LOADS1 (0.5,1,1.5,2: one GPU), LOADS2 (0.5,1,2,3,4: two
# GPUs), DURATION (6 s per run), BUDGET_DURATION (20 s: fifo's run at the lowest load, whose p99
# is the budget), SEED (1), SERVE_TIMEOUT (260 s per hios serve). Preparing five replicas at eight
# batch sizes on two H100s took about 90 s of a hios serve; the whole script about 8 minutes.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/output/gpu-serve-scaling}
B=${BUILD_DIR:-/tmp/b}
mkdir -p "$OUT"
t0=$(date +%s)
source scripts/gpu/build.sh
gpu_build hios
nvidia-smi --query-gpu=index,name --format=csv,noheader
serve() {  # NAME DEVICES LOADS
  timeout "${SERVE_TIMEOUT:-260}" "$B/cli/hios" serve --backend cuda --devices "$2" --replicas auto \
    --models "${MODELS:-inception_v3,nasnet_large,randwire}" --size "${SIZE:-331}" --math "${MATH:-bf16}" \
    --batches "${BATCHES:-1,2,3,4,5,6,7,8}" --loads "$3" --duration "${DURATION:-6}" \
    --budget-duration "${BUDGET_DURATION:-20}" --seed "${SEED:-1}" --verify-every 50 -o "$OUT/$1.json" >"$OUT/$1.txt" 2>&1
  echo "$1 (GPUs $2): hios serve rc=$? ($(( $(date +%s) - t0 )) s)"
  grep -E "^# hios serve|^# within|^adaptive .* all|^fifo .* all|^static .* all|^#   (device|dispatcher)" "$OUT/$1.txt" | cut -c1-240
}
serve one-gpu 0 "${LOADS1:-0.5,1,1.5,2}"
serve two-gpus 0,1 "${LOADS2:-0.5,1,2,3,4}"
if python3 scripts/report.py "$OUT/one-gpu.json" "$OUT/two-gpus.json" -o "$OUT/scaling" --formats png \
    --title "Serving on one and two GPUs" >"$OUT/report.log" 2>&1; then
  tar czf "$OUT/scaling.tgz" -C "$OUT" scaling && rm -rf "$OUT/scaling"
  echo "report: $OUT/scaling.tgz"
else
  echo "report failed:"; tail -5 "$OUT/report.log"
fi
echo "total: $(( $(date +%s) - t0 )) s"
