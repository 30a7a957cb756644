#!/usr/bin/env bash
# Imported ONNX models against PyTorch, one device call: for each MODEL:SIZE:EXPORTER, PyTorch
# exports the model with seeded weights (scripts/torch_onnx_export.py), `hios import` reads
# it, and `hios run` computes the same input on one GPU (hios-lp, fp32, --verify against the
# sequential run and the CPU reference) and, where there are two GPUs and TWO_GPU names the
# model, on two (hios-lp on 2 GPUs, and a 2-way row split). Each output is compared with
# PyTorch's: max_abs, max_rel (over the largest |output|) and top-1 agreement. A model the
# importer refuses is reported with its one-line error.
#
#   OUT=/some/dir bash scripts/gpu-onnx-check.sh resnet50:224:legacy inception_v3:299:dynamo ...
#
# Environment: BUILD_DIR (/tmp/b), TWO_GPU (models also run on two GPUs, default inception_v3),
# CHECK_S (the whole script's budget in seconds, default 480).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/output/gpu-onnx-check}
export BUILD_DIR=${BUILD_DIR:-/tmp/b}
B=$BUILD_DIR
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONUNBUFFERED=1
t0=$(date +%s)
source scripts/gpu-build.sh
[ -x "$B/cli/hios" ] || JOBS=${JOBS:-32} gpu_build hios
H=$B/cli/hios
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
two=" ${TWO_GPU:-inception_v3} "
for spec in "$@"; do
  [ $(( $(date +%s) - t0 )) -lt "${CHECK_S:-480}" ] || { echo "$spec: skipped, out of time" | tee -a "$OUT/summary.txt"; continue; }
  IFS=: read -r model size exporter <<<"$spec"
  W=$OUT/$model-$size-$exporter
  mkdir -p "$W"
  s0=$(date +%s)
  timeout 240 python3 scripts/torch_onnx_export.py --model "$model" --size "$size" --exporter "$exporter" --out "$W" \
    >"$W/export.log" 2>&1 || { echo "$spec: export failed: $(tail -1 "$W/export.log")" | tee -a "$OUT/summary.txt"; continue; }
  s1=$(date +%s)
  if ! "$H" import "$W/model.onnx" -o "$W/graph.json" >"$W/import.log" 2>&1; then
    echo "$spec: import refused ($(( s1 - s0 )) s export): $(grep -m1 error "$W/import.log")" | tee -a "$OUT/summary.txt"
    continue
  fi
  echo "$spec: $(head -1 "$W/import.log")" | tee -a "$OUT/summary.txt"
  "$H" schedule --graph "$W/graph.json" --algo hios-lp --gpus 1 -o "$W/lp1.json" >/dev/null 2>&1
  runs=("lp1 1 $W/lp1.json")
  if [ "$gpus" -ge 2 ] && [[ "$two" == *" $model "* ]]; then
    "$H" schedule --graph "$W/graph.json" --algo hios-lp --gpus 2 -o "$W/lp2.json" >/dev/null 2>&1
    "$H" schedule --graph "$W/graph.json" --algo hios-lp --gpus 2 --spatial 2 --spatial-mode recompute \
      -o "$W/split.json" >/dev/null 2>&1
    runs+=("lp2 2 $W/lp2.json" "split 2 $W/split.json")
  fi
  for r in "${runs[@]}"; do
    read -r name np sched <<<"$r"
    timeout 150 mpirun -np "$np" "$H" run --graph "$W/graph.json" --schedule "$sched" --backend cuda --math fp32 \
      --input "$W/input.npy" --save-output "$W/hios-$name.npy" --verify --warmup 2 --number 5 --repeat 3 \
      --timeout 140 -o none >"$W/run-$name.log" 2>&1 || { echo "$spec $name: run failed: $(grep -m1 error "$W/run-$name.log")" | tee -a "$OUT/summary.txt"; continue; }
    echo "$spec $name ($np GPU) fp32 against PyTorch: $(python3 scripts/torch_weights.py --compare "$W/torch.npy" \
      "$W/hios-$name.npy")  $(grep -E '^# correctness' "$W/run-$name.log")  $(grep -E '^# latency' "$W/run-$name.log")" \
      | tee -a "$OUT/summary.txt"
  done
  rm -f "$W"/model.onnx.data "$W"/*.npy "$W"/*.safetensors  # keep what comes back small
done
