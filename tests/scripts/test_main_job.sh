#!/usr/bin/env bash
# `make run`'s job refuses a bad MATH, SIZE or GPUS in one line naming it, exit 2, before it
# writes anything.
set -uo pipefail
SRC=${1:?usage: test_main_job.sh SOURCE_DIR BUILD_DIR}
BUILD=${2:?usage: test_main_job.sh SOURCE_DIR BUILD_DIR}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
fail=0
check() {  # VAR=VALUE, the text the one line must contain
  local out rc
  out=$(env "$1" bash "$SRC/scripts/main-job.sh" "$BUILD" 2>&1 >/dev/null)
  rc=$?
  if [ $rc -ne 2 ] || [ "$(printf '%s\n' "$out" | wc -l)" -ne 1 ] || [[ "$out" != *"$2"* ]]; then
    echo "FAIL: $1: exit $rc, said: $out"
    fail=1
  fi
  if [ -e output ]; then
    echo "FAIL: $1: wrote output/"
    fail=1
    rm -rf output
  fi
}
check MATH=tf32,bf16 "MATH='tf32,bf16'"
check MATH=int8 "MATH='int8'"
check SIZE=abc "SIZE='abc'"
check SIZE=0 "SIZE='0'"
check GPUS=-1 "GPUS='-1'"
check "GPUS=2;rm" "GPUS='2;rm'"
[ $fail -eq 0 ] && echo "main-job.sh: 6 bad settings refused before anything was written"
exit $fail
