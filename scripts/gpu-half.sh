#!/usr/bin/env bash
# Half precision on one GPU, one device call: build, the GPU tests named by
# CTEST_REGEX, `hios run --verify` of each model in each math mode (the verification errors
# that docs/executor.md's tolerances come from), then scripts/bench-gpu.sh against PyTorch.
#
#   OUT=/some/dir bash scripts/gpu-half.sh
#
# Environment: BUILD_DIR (/tmp/b), CTEST_REGEX (empty: no tests), VERIFY (inception_v3:331
# nasnet_large:331; "" for none), VERIFY_MATH (tf32 bf16 fp16), then bench-gpu.sh's MODELS,
# SIZES, MATH (default here tf32,bf16), LAYOUT (nhwc), GPUS (1), PT_VARIANTS (compile-ro-cl,
# compile-ro-cl-bf16, compile-ro-cl-bf16-pure), RELU_FOLD (on) and DEADLINE_S (BENCH=0 skips the
# benchmark).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/output/gpu-half}
B=${BUILD_DIR:-/tmp/b}
VERIFY=${VERIFY-inception_v3:331 nasnet_large:331}
VERIFY_MATH=${VERIFY_MATH:-tf32 bf16 fp16}
mkdir -p "$OUT"
t0=$(date +%s)
export NCCL_NVLS_ENABLE=0
source scripts/gpu-build.sh
gpu_build hios hios-gpu-bench test_gpu
if [ -n "${CTEST_REGEX:-}" ]; then
  (cd "$B" && timeout "${CTEST_TIMEOUT:-300}" ctest -L gpu -R "$CTEST_REGEX" -j 4 --output-on-failure --timeout 280) \
    >"$OUT/ctest-gpu.log" 2>&1
  echo "ctest: $(grep -E 'tests passed|tests failed' "$OUT/ctest-gpu.log" | tail -1) ($(( $(date +%s) - t0 )) s)"
  grep -E "FAILED|Failed|hios-skip|with expansion" "$OUT/ctest-gpu.log" | head -20
fi
HIOS="$B/cli/hios"
for spec in $VERIFY; do
  IFS=: read -r model size <<<"$spec"
  g="$OUT/$model-$size.json"
  "$HIOS" graph --model "$model" --height "$size" --width "$size" -o "$g" >/dev/null
  "$HIOS" schedule --graph "$g" --algo hios-lp --gpus 1 --cost analytic --device h200 -o "$OUT/$model-$size.s.json" >/dev/null
  for m in $VERIFY_MATH; do
    timeout 120 "$HIOS" run --graph "$g" --schedule "$OUT/$model-$size.s.json" --backend cuda --math "$m" --verify \
      --repeat 3 --number 5 >"$OUT/run-$model-$size-$m.txt" 2>&1
    echo "run $model $size $m rc=$?: $(grep -iE 'median|against|verif|error' "$OUT/run-$model-$size-$m.txt" | tr '\n' ' ' | cut -c1-400)"
  done
done
if [ "${BENCH:-1}" = 1 ]; then
  MATH=${MATH:-tf32,bf16} LAYOUT=${LAYOUT:-nhwc} GPUS=${GPUS:-1} \
    PT_VARIANTS=${PT_VARIANTS:-compile-ro-cl,compile-ro-cl-bf16,compile-ro-cl-bf16-pure} \
    bash scripts/bench-gpu.sh "$B" "$OUT" | tail -30
fi
echo "total: $(( $(date +%s) - t0 )) s"
