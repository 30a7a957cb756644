#!/usr/bin/env bash
# Where the GPU time goes, hios against PyTorch, one device call (issue 11): build
# hios-gpu-bench, print hios's per-node profile and chosen convolution engines, then
# scripts/profile_pytorch.py's kernel breakdown of the same model and size.
#
#   OUT=/some/dir bash scripts/gpu-kernels.sh inception_v3:2048 [nasnet_large:331 ...]
#
# Environment: BUILD_DIR (/tmp/b), JOBS (16), PT_VARIANTS (profile_pytorch.py --variants),
# HIOS_ARGS (extra hios-gpu-bench arguments, e.g. "--layout nhwc").
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/output/gpu-kernels}
B=${BUILD_DIR:-/tmp/b}
JOBS=${JOBS:-16}
PT_VARIANTS=${PT_VARIANTS:-eager,eager-cl,compile,compile-bf16}
mkdir -p "$OUT"
configs=("$@")
[ ${#configs[@]} -eq 0 ] && configs=(inception_v3:2048)
{ nvidia-smi --query-gpu=index,name,driver_version --format=csv; date -u +%FT%TZ; } >"$OUT/env.txt" 2>&1
t0=$(date +%s)
{ cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DHIOS_CUDA=ON &&
  cmake --build "$B" -j "$JOBS" --target hios-gpu-bench; } >"$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
for spec in "${configs[@]}"; do
  IFS=: read -r model size <<<"$spec"
  # shellcheck disable=SC2086
  timeout 240 "$B/executor/cuda/hios-gpu-bench" --model "$model" --size "$size" --algo hios-lp --gpus 1 \
    --warmup 5 --iters 20 --profile 3 --summary ${HIOS_ARGS:-} >"$OUT/hios-$model-$size.log" 2>&1
  echo "hios $model $size rc=$?"
  grep -E "^(sequential|hios|#)" "$OUT/hios-$model-$size.log" | head -12
  timeout 300 python3 scripts/profile_pytorch.py --model "$model" --size "$size" --variants "$PT_VARIANTS" \
    >"$OUT/torch-$model-$size.log" 2>&1
  echo "torch $model $size rc=$?"
  grep -E "^##|^   [a-z]" "$OUT/torch-$model-$size.log"
done
