#!/usr/bin/env bash
# Imported ONNX models against PyTorch, one device call: for each MODEL:SIZE:EXPORTER, PyTorch
# exports the model with seeded weights (scripts/torch_onnx_export.py), `hios import` reads
# it, and `hios run` computes the same input on one GPU (hios-lp, fp32, --verify against the
# sequential run and the CPU reference) and, where there are two GPUs and TWO_GPU names the
# model, on two (hios-lp on 2 GPUs, and a 2-way row split). Each output is compared with
# PyTorch's: max_abs, max_rel (over the largest |output|) and top-1 agreement. So are
# PyTorch's own TF32 and bf16 outputs and ONNX Runtime's (CPU, fp32), which give the error the
# number formats bring by themselves. A model the importer refuses is reported with its one-line error.
#
#   OUT=/some/dir bash scripts/gpu.sh onnx resnet50:224:legacy inception_v3:299:dynamo ...
#
# Environment: MATHS (the one-GPU runs: fp32, tf32, bf16, fp16 and cpu, the CPU reference;
# default fp32), TWO_MATH (the two-GPU runs', default fp32), TOP1_BATCH (the top-1 agreement
# of TOP1_MODEL, default inception_v3, over this many random inputs in TF32; unset or 0: none), BUILTIN_SIZE (the
# imported inception_v3 against the built-in one at this size, TF32), BUILD_DIR (/tmp/b), TWO_GPU (models also run on two GPUs, default inception_v3),
# CHECK_S (the whole script's budget in seconds, default 480), TUNE_SIZE (with two GPUs: the
# first model that runs on two is imported again at this size and tuned there with
# `mpirun -np 2 hios tune`, then its tuned and best one-GPU schedules run), SERVE (1: the first
# imported model is also served on the GPU for a few seconds).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/output/gpu-onnx-check}
export BUILD_DIR=${BUILD_DIR:-/tmp/b}
B=$BUILD_DIR
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONUNBUFFERED=1
t0=$(date +%s)
source scripts/gpu/build.sh
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
    --formats --onnxruntime >"$W/export.log" 2>&1 ||
    { echo "$spec: export failed: $(tail -1 "$W/export.log")" | tee -a "$OUT/summary.txt"; continue; }
  s1=$(date +%s)
  # The references' own error against PyTorch fp32: PyTorch in TF32 and in bf16, ONNX Runtime.
  for ref in torch-tf32 torch-bf16 onnxruntime; do
    [ -f "$W/$ref.npy" ] && echo "$spec reference $ref against PyTorch fp32: $(python3 scripts/torch_weights.py --compare \
      "$W/torch.npy" "$W/$ref.npy" 2>&1)" | tee -a "$OUT/summary.txt"
  done
  if ! "$H" import "$W/model.onnx" -o "$W/graph.json" >"$W/import.log" 2>&1; then
    echo "$spec: import refused ($(( s1 - s0 )) s export): $(grep -m1 error "$W/import.log")" | tee -a "$OUT/summary.txt"
    continue
  fi
  echo "$spec: $(head -1 "$W/import.log")" | tee -a "$OUT/summary.txt"
  "$H" schedule --graph "$W/graph.json" --algo hios-lp --gpus 1 -o "$W/lp1.json" >/dev/null 2>&1
  runs=()
  for math in ${MATHS:-fp32}; do  # "cpu" is the CPU reference backend (fp32)
    if [ "$math" = cpu ]; then runs+=("lp1 1 $W/lp1.json fp32 cpu"); else runs+=("lp1 1 $W/lp1.json $math cuda"); fi
  done
  if [ "$gpus" -ge 2 ] && [[ "$two" == *" $model "* ]]; then
    "$H" schedule --graph "$W/graph.json" --algo hios-lp --gpus 2 -o "$W/lp2.json" >/dev/null 2>&1
    "$H" schedule --graph "$W/graph.json" --algo hios-lp --gpus 2 --spatial 2 --spatial-mode recompute \
      -o "$W/split.json" >/dev/null 2>&1
    runs+=("lp2 2 $W/lp2.json ${TWO_MATH:-fp32} cuda" "split 2 $W/split.json ${TWO_MATH:-fp32} cuda")
  fi
  for r in "${runs[@]}"; do
    read -r name np sched math backend <<<"$r"
    label=$name-$math-$backend
    extra=(--verify --warmup 2 --number 5 --repeat 3)
    [ "$backend" = cpu ] && extra=(--warmup 0 --number 1 --repeat 1)
    timeout 150 mpirun -np "$np" "$H" run --graph "$W/graph.json" --schedule "$sched" --backend "$backend" --math "$math" \
      --input "$W/input.npy" --save-output "$W/hios-$label.npy" "${extra[@]}" \
      --timeout 140 -o none >"$W/run-$label.log" 2>&1 ||
      echo "$spec $label: run failed: $(grep -m1 -E 'error|FAIL' "$W/run-$label.log")" | tee -a "$OUT/summary.txt"
    # The output is saved before verification, so a run whose --verify failed is compared too.
    [ -f "$W/hios-$label.npy" ] || continue
    echo "$spec $name ($np GPU) $backend $math against PyTorch: $(python3 scripts/torch_weights.py --compare "$W/torch.npy" \
      "$W/hios-$label.npy")  $(grep -E '^# correctness' "$W/run-$label.log")  $(grep -E '^# latency' "$W/run-$label.log")" \
      | tee -a "$OUT/summary.txt"
  done
  # Top-1 agreement over TOP1_BATCH random inputs, in TF32: the graph imported at that batch.
  if [[ "${TOP1_BATCH:-}" =~ ^[1-9][0-9]*$ ]] && [ "$model" = "${TOP1_MODEL:-inception_v3}" ] && [ -z "${top1_done:-}" ]; then
    top1_done=1
    timeout 120 python3 scripts/torch_onnx_export.py --model "$model" --size "$size" --exporter none --batch "$TOP1_BATCH" \
      --out "$W/b$TOP1_BATCH" >"$W/top1-export.log" 2>&1
    "$H" import "$W/model.onnx" -o "$W/b$TOP1_BATCH/graph.json" --batch "$TOP1_BATCH" >/dev/null 2>&1
    "$H" schedule --graph "$W/b$TOP1_BATCH/graph.json" --algo hios-lp --gpus 1 -o "$W/b$TOP1_BATCH/lp1.json" >/dev/null 2>&1
    timeout 150 "$H" run --graph "$W/b$TOP1_BATCH/graph.json" --schedule "$W/b$TOP1_BATCH/lp1.json" --backend cuda --math tf32 \
      --input "$W/b$TOP1_BATCH/input.npy" --save-output "$W/b$TOP1_BATCH/hios.npy" --warmup 1 --number 1 --repeat 1 \
      --timeout 140 -o none >"$W/top1-run.log" 2>&1
    echo "$spec batch $TOP1_BATCH tf32 against PyTorch: $(python3 scripts/torch_weights.py --compare \
      "$W/b$TOP1_BATCH/torch.npy" "$W/b$TOP1_BATCH/hios.npy" 2>&1)" | tee -a "$OUT/summary.txt"
    rm -f "$W/b$TOP1_BATCH"/*.npy "$W/b$TOP1_BATCH"/*.safetensors
  fi
  # The imported model against hios's built-in one at BUILTIN_SIZE, same math (tf32), one GPU.
  if [ -n "${BUILTIN_SIZE:-}" ] && [ "$model" = inception_v3 ] && [ -z "${builtin_done:-}" ]; then
    builtin_done=1
    BI=$W/builtin-$BUILTIN_SIZE
    mkdir -p "$BI"
    "$H" import "$W/model.onnx" -o "$BI/imported.json" --height "$BUILTIN_SIZE" --width "$BUILTIN_SIZE" >/dev/null 2>&1
    "$H" graph --model inception_v3 --height "$BUILTIN_SIZE" --width "$BUILTIN_SIZE" -o "$BI/builtin.json" 2>/dev/null
    for g in imported builtin imported builtin; do
      "$H" schedule --graph "$BI/$g.json" --algo hios-lp --gpus 1 -o "$BI/$g.lp1.json" >/dev/null 2>&1
      timeout 100 "$H" run --graph "$BI/$g.json" --schedule "$BI/$g.lp1.json" --backend cuda --math tf32 --warmup 5 \
        --number 10 --repeat 7 --timeout 90 -o none >"$BI/$g.run.log" 2>&1
      echo "inception_v3 $BUILTIN_SIZE $g (hios-lp, 1 GPU, tf32): $(grep -E '^# latency' "$BI/$g.run.log")" | tee -a "$OUT/summary.txt"
    done
    rm -f "$BI"/*.safetensors
  fi
  if [ -n "${SERVE:-}" ] && [ -z "${served:-}" ]; then
    served=1
    timeout 120 "$H" serve --backend cuda --models "$W/graph.json" --size "$size" --duration 2 --loads 0.5,1 \
      --batches 1,2,4 --static-batch 2 --verify-every 50 -o "$W/serve.json" >"$W/serve.log" 2>&1
    echo "$spec served (rc $?): $(grep -E '^# within|^# summary' "$W/serve.log" | tr '\n' ' ')" | tee -a "$OUT/summary.txt"
  fi
  if [ -n "${TUNE_SIZE:-}" ] && [ -z "${tuned:-}" ] && [ "$gpus" -ge 2 ] && [[ "$two" == *" $model "* ]]; then
    tuned=1
    T=$W/tune-$TUNE_SIZE
    mkdir -p "$T"
    "$H" import "$W/model.onnx" -o "$T/graph.json" --height "$TUNE_SIZE" --width "$TUNE_SIZE" >/dev/null 2>&1
    s0=$(date +%s)
    timeout 150 mpirun -np 2 "$H" tune --graph "$T/graph.json" --gpus 2 --backend cuda --profile-db "$T/db.json" \
      -o "$T/tuned.json" --one-gpu-output "$T/best1.json" --timeout 140 >"$T/tune.log" 2>&1
    echo "$spec at $TUNE_SIZE: tune rc=$? in $(( $(date +%s) - s0 )) s: $(grep -m1 -E '<- chosen' "$T/tune.log" | tr -s ' ')" | tee -a "$OUT/summary.txt"
    for kind in tuned best1; do
      np=2; [ "$kind" = best1 ] && np=1
      timeout 100 mpirun -np $np "$H" run --graph "$T/graph.json" --schedule "$T/$kind.json" --backend cuda --verify \
        --warmup 5 --number 10 --repeat 7 --timeout 90 -o none >"$T/run-$kind.log" 2>&1
      echo "$spec at $TUNE_SIZE $kind ($np GPU): $(grep -E '^# latency|^# correctness' "$T/run-$kind.log" | tr '\n' ' ')" | tee -a "$OUT/summary.txt"
    done
    rm -f "$T"/*.safetensors
  fi
  rm -f "$W"/model.onnx.data "$W"/*.npy "$W"/*.safetensors  # keep what comes back small
done
