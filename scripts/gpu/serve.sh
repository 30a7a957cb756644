#!/usr/bin/env bash
# Serving on one GPU or several, one device call: build, then `hios serve` of a model
# mix at one size, every launcher (fifo, static, adaptive) on the same Poisson traces at each load (as
# fractions of the fifo launcher's capacity), with spot verification. The JSON comes back.
#
#   OUT=/some/dir bash scripts/gpu.sh serve
#   DEVICES=0,1 OUT=/some/dir bash scripts/gpu.sh serve   # two GPUs, placement automatic
#   EXTRA="--replicas nasnet_large=2" OUT=/some/dir bash scripts/gpu.sh serve   # two nasnet_large workers
#   # the one-GPU serving target (docs/benchmarks.md, serving, the bounded drain): a 90 s fifo run at
#   # half load sets the bar, as 20 s runs of one seed moved it by 15%
#   EXTRA="--math bf16 --batches 1,2,3,4,5,6,7,8 --replicas nasnet_large=2 --budget-duration 90" \
#     LOADS=0.5,0.8,1,1.5 DURATION=30 SERVE_TIMEOUT=570 OUT=/some/dir bash scripts/gpu.sh serve
#
# Environment: BUILD_DIR (/tmp/b), MODELS (inception_v3,nasnet_large,randwire), SIZE (331),
# LOADS (0.5,0.8,1,1.5,2,3), DURATION (4 s per run), DEVICES (e.g. 0,1: passed as --devices when
# set; empty: the default device), EXTRA (more hios serve arguments), SERVE_TIMEOUT (480 s).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/output/gpu-serve}
B=${BUILD_DIR:-/tmp/b}
mkdir -p "$OUT"
t0=$(date +%s)
source scripts/gpu/build.sh
gpu_build hios
# An array, so that an empty DEVICES adds no argument at all (bash before 4.4 calls an empty
# "${a[@]}" unbound under set -u, hence the + form below).
devices=()
[ -n "${DEVICES:-}" ] && devices=(--devices "$DEVICES")
# shellcheck disable=SC2086
timeout "${SERVE_TIMEOUT:-480}" "$B/cli/hios" serve --backend cuda --models "${MODELS:-inception_v3,nasnet_large,randwire}" \
  --size "${SIZE:-331}" --loads "${LOADS:-0.5,0.8,1,1.5,2,3}" --duration "${DURATION:-4}" --verify-every 50 \
  -o "$OUT/serve.json" ${devices[@]+"${devices[@]}"} ${EXTRA:-} 2>&1 | tee "$OUT/serve.txt"
echo "hios serve rc=${PIPESTATUS[0]} ($(( $(date +%s) - t0 )) s)"
