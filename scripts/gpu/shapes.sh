#!/usr/bin/env bash
# Shape sets on one GPU, one device call: build, the GPU shape-set tests, then
# `hios run --shapes` of a model over sizes x batches with --compare-separate (each shape alone,
# for the memory comparison) and optionally --verify (every shape against the CPU reference).
#
#   OUT=/some/dir bash scripts/gpu.sh shapes
#
# Environment: BUILD_DIR (/tmp/b), TESTS (1: ctest -L gpu -R shape first), MODEL (inception_v3),
# SHAPES (299,331,512,768,1024), BATCHES (1,2,4), MATH (tf32), VERIFY (1), EXTRA (more hios run
# arguments).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/output/gpu-shapes}
B=${BUILD_DIR:-/tmp/b}
mkdir -p "$OUT"
t0=$(date +%s)
targets=(hios)
[ "${TESTS:-1}" = 1 ] && targets+=(test_gpu)
source scripts/gpu/build.sh
gpu_build "${targets[@]}"
if [ "${TESTS:-1}" = 1 ]; then
  (cd "$B" && timeout "${CTEST_TIMEOUT:-240}" ctest -L gpu -R shape --output-on-failure --timeout 200) >"$OUT/ctest-gpu.log" 2>&1
  echo "ctest -L gpu -R shape: $(grep -E 'tests passed|tests failed' "$OUT/ctest-gpu.log" | tail -1) ($(( $(date +%s) - t0 )) s)"
  grep -E "FAILED|Failed|with expansion|hios-skip" -A4 "$OUT/ctest-gpu.log" | head -30
fi
MODEL=${MODEL:-inception_v3}
"$B/cli/hios" graph --model "$MODEL" -o "$OUT/$MODEL.json" >/dev/null
verify=()
[ "${VERIFY:-1}" = 1 ] && verify=(--verify)
# shellcheck disable=SC2086
timeout "${RUN_TIMEOUT:-400}" "$B/cli/hios" run -g "$OUT/$MODEL.json" --backend cuda --math "${MATH:-tf32}" \
  --shapes "${SHAPES:-299,331,512,768,1024}" --batches "${BATCHES:-1,2,4}" --compare-separate "${verify[@]}" \
  --warmup 3 --number 20 -o "$OUT/shapes-$MODEL.json" ${EXTRA:-} 2>&1 | tee "$OUT/shapes-$MODEL.txt"
echo "hios run --shapes rc=${PIPESTATUS[0]} ($(( $(date +%s) - t0 )) s)"
