#!/usr/bin/env bash
# One device call after a change to the IR: the built-in models' one-GPU timings against a
# reference build (scripts/gpu-timing-ab.sh, REF_TARBALL or REF), an imported model against
# PyTorch on the GPU (scripts/gpu-onnx-check.sh), then the GPU test suite.
#   OUT=/some/dir REF_TARBALL=output/ref-src.tgz bash scripts/gpu-ir-check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/output/gpu-ir-check}
mkdir -p "$OUT"
start=$(date +%s)
OUT=$OUT/ab REPEATS=${REPEATS:-2} bash scripts/gpu-timing-ab.sh ${CONFIGS:-inception_v3:2048 inception_v3:2048:bf16 nasnet_large:331} \
  2>&1 | tee "$OUT/ab.log"
echo "timing A/B done at $(( $(date +%s) - start )) s"
if [ -z "${NO_ONNX:-}" ]; then
  OUT=$OUT/onnx CHECK_S=${CHECK_S:-120} TWO_GPU=none BUILD_DIR=${BUILD_DIR:-/tmp/b} bash scripts/gpu-onnx-check.sh ${ONNX_MODELS:-resnet50:224:dynamo} \
    2>&1 | tail -n 12 | tee "$OUT/onnx.log"
  echo "onnx check done at $(( $(date +%s) - start )) s"
fi
B=${BUILD_DIR:-/tmp/b}
(cd "$B" && cmake --build . -j 16 --target test_gpu >/dev/null 2>&1 && timeout ${CTEST_S:-200} ctest -L gpu -j 4 --output-on-failure) \
  >"$OUT/ctest-gpu.log" 2>&1
echo "ctest -L gpu: $(grep -E 'tests passed|tests failed' "$OUT/ctest-gpu.log" | tail -1) at $(( $(date +%s) - start )) s"
grep -E "Failed|\*\*\*" "$OUT/ctest-gpu.log" | head -20
