#!/usr/bin/env bash
# The GPU machine's entry point: one device call runs one or more suites, in order.
#
#   bash scripts/gpu.sh SUITE [SUITE ...]        results under $OUT (default output/gpu)
#
#   build   configure and build hios and the GPU tests (Release, sm_90, CUDA on)
#   test    the GPU test suite, `ctest -L gpu`
#   cases   ONNX's backend cases exported by scripts/onnx_conformance.py --export (CASES, default
#           output/conformance-export, or CASES_TAR, a .tar.xz of it) replayed on the CUDA backend
#           in fp32, then in the math modes of CASES_MATH (default "tf32 bf16")
#   ab      the built-in models' one-GPU timings against a reference build (REF_TARBALL, a
#           `git archive` of the reference commit): scripts/gpu-timing-ab.sh
#   all     build test cases ab
#
# Every suite builds what it needs first (once per call). Environment: OUT, BUILD_DIR (/tmp/b),
# JOBS (16).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/output/gpu}
B=${BUILD_DIR:-/tmp/b}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
source scripts/gpu-build.sh
start=$(date +%s)
built=

need_build() {
  [ -n "$built" ] && return
  gpu_build hios test_gpu
  { nvidia-smi --query-gpu=index,name,driver_version --format=csv; git rev-parse --short HEAD 2>/dev/null;
    echo "changes: $(git status --short 2>/dev/null | wc -l) files"; date -u +%FT%TZ; } >"$OUT/env.txt" 2>&1
  built=1
}

suite_test() {
  need_build
  (cd "$B" && timeout "${CTEST_S:-330}" ctest -L gpu -j "${PARALLEL:-4}" --timeout 300 --output-on-failure) \
    >"$OUT/ctest-gpu.log" 2>&1
  echo "test: $(grep -E 'tests passed|tests failed' "$OUT/ctest-gpu.log" | tail -1)"
  grep -E "\*\*\*|Failed  " "$OUT/ctest-gpu.log" | head -20
}

suite_cases() {
  need_build
  local dir=${CASES:-output/conformance-export}
  if [ -n "${CASES_TAR:-}" ]; then
    dir=/tmp/conformance-export
    rm -rf "$dir" && mkdir -p "$dir" && tar -xJf "$CASES_TAR" -C "$dir" --strip-components=1 || { echo "cases: cannot extract $CASES_TAR"; return; }
  fi
  [ -d "$dir" ] || { echo "cases: no exported cases in $dir (scripts/onnx_conformance.py --export)"; return; }
  for math in fp32 ${CASES_MATH-tf32 bf16}; do
    python3 scripts/replay_cases.py "$dir" --hios "$B/cli/hios" --backend cuda --math "$math" --jobs "${CASES_JOBS:-8}" \
      --json "$OUT/cases-$math.json" --markdown "$OUT/cases-$math.md" >"$OUT/cases-$math.log" 2>&1
    head -n 14 "$OUT/cases-$math.log"
  done
}

suite_ab() {
  [ -n "${REF_TARBALL:-}" ] || { echo "ab: set REF_TARBALL to a git archive of the reference commit"; return; }
  OUT=$OUT/ab BUILD_DIR=$B REPEATS=${REPEATS:-2} bash scripts/gpu-timing-ab.sh \
    ${AB_CONFIGS:-inception_v3:2048 inception_v3:2048:bf16 nasnet_large:331} 2>&1 | tee "$OUT/ab.log" | tail -n 5
  built=1
}

[ $# -gt 0 ] || { sed -n '2,17p' "$0"; exit 2; }
for suite in "$@"; do
  case "$suite" in
    build) need_build ;;
    test) suite_test ;;
    cases) suite_cases ;;
    ab) suite_ab ;;
    all) need_build; suite_test; suite_cases; suite_ab ;;
    *) echo "gpu.sh: unknown suite '$suite' (build, test, cases, ab, all)"; exit 2 ;;
  esac
  echo "$suite done at $(( $(date +%s) - start )) s"
done
