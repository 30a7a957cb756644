#!/usr/bin/env bash
# Where the GPU time goes, hios against PyTorch, one device call: build, optionally
# run the GPU tests, then per configuration hios-gpu-bench's rows (and per-node profile) and
# scripts/profile_pytorch.py's kernel breakdown of the same model and size.
#
#   OUT=/some/dir bash scripts/gpu.sh kernels inception_v3:2048 [nasnet_large:331 ...]
#
# Environment: BUILD_DIR (/tmp/b), JOBS (16), TESTS (0; 1: ctest -L gpu $CTEST_ARGS first, for at
# most CTEST_TIMEOUT seconds, default 300), PT_VARIANTS
# (profile_pytorch.py --variants; empty: no PyTorch), HIOS_ARGS (extra hios-gpu-bench
# arguments; default "--layout both --profile 3 --summary"), KERNEL_MATH (e.g. "bf16 fp32": run
# hios-kernel-bench, hios's depthwise and pool kernels variant against variant, in each).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/output/gpu-kernels}
B=${BUILD_DIR:-/tmp/b}
JOBS=${JOBS:-16}
TESTS=${TESTS:-0}
PT_VARIANTS=${PT_VARIANTS-eager,eager-cl,compile,compile-bf16}
HIOS_ARGS=${HIOS_ARGS:---layout both --profile 3 --summary}
mkdir -p "$OUT"
configs=("$@")
[ ${#configs[@]} -eq 0 ] && configs=(inception_v3:2048)
{ nvidia-smi --query-gpu=index,name,driver_version --format=csv; date -u +%FT%TZ; } >"$OUT/env.txt" 2>&1
t0=$(date +%s)
targets=(hios-gpu-bench)
[ "$TESTS" = 1 ] && targets+=(test_gpu)
[ -n "${KERNEL_MATH:-}" ] && targets+=(hios-kernel-bench)
source scripts/gpu/build.sh
gpu_build "${targets[@]}"
if [ "$TESTS" = 1 ]; then
  # shellcheck disable=SC2086
  (cd "$B" && timeout "${CTEST_TIMEOUT:-300}" ctest -L gpu ${CTEST_ARGS:-} --output-on-failure --timeout 240) >"$OUT/ctest-gpu.log" 2>&1
  echo "ctest -L gpu: $(grep -E 'tests passed|tests failed' "$OUT/ctest-gpu.log" | tail -1) ($(( $(date +%s) - t0 )) s)"
  grep -E "Failed|\*\*\*|FAILED|REQUIRE|CHECK\(|with expansion|worse layout" "$OUT/ctest-gpu.log" | head -30
fi
for m in ${KERNEL_MATH:-}; do
  timeout 120 "$B/bench/hios-kernel-bench" --math "$m" >"$OUT/kernels-$m.txt" 2>&1
  echo "hios-kernel-bench $m rc=$? ($(( $(date +%s) - t0 )) s)"
  cat "$OUT/kernels-$m.txt"
done
for spec in "${configs[@]}"; do
  IFS=: read -r model size <<<"$spec"
  # shellcheck disable=SC2086
  timeout 240 "$B/bench/hios-gpu-bench" --model "$model" --size "$size" --algo hios-lp --gpus 1 \
    --warmup 5 --iters 20 $HIOS_ARGS >"$OUT/hios-$model-$size.log" 2>&1
  echo "hios $model $size rc=$? ($(( $(date +%s) - t0 )) s)"
  grep -E "^$model |^# profile|error" "$OUT/hios-$model-$size.log" | head -12
  if [ -n "$PT_VARIANTS" ]; then
    timeout 300 python3 scripts/profile_pytorch.py --model "$model" --size "$size" --variants "$PT_VARIANTS" \
      >"$OUT/torch-$model-$size.log" 2>&1
    echo "torch $model $size rc=$?"
    grep -E "^##|^   [a-z]" "$OUT/torch-$model-$size.log"
  fi
done
