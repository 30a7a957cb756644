#!/usr/bin/env bash
# hios against PyTorch with the same weights, one device call: for each size, torchvision's
# inception_v3 (untrained, seeded, batch norms with seeded statistics) gives its parameters to
# hios's inception_v3 graph (scripts/torch_weights.py, BN folded), then hios runs the same
# input on one GPU and, where there are two, on two (a hios-lp schedule and a forced row
# split), and each output is compared with PyTorch's: max_abs, max_rel (over the largest
# |logit|) and top-1 agreement. fp32 on both sides (TF32 off), then hios in TF32.
#
#   OUT=/some/dir bash scripts/gpu.sh torch-check [SIZE ...]     (default 299 1024)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/output/gpu-torch-check}
export BUILD_DIR=${BUILD_DIR:-/tmp/b}
B=$BUILD_DIR
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
source scripts/gpu/build.sh
[ -x "$B/cli/hios" ] || JOBS=${JOBS:-32} gpu_build hios
H=$B/cli/hios
gpus=$(nvidia-smi -L | grep -c '^GPU')
sizes=("$@")
[ ${#sizes[@]} -eq 0 ] && sizes=(299 1024)
for size in "${sizes[@]}"; do
  W=$OUT/inception_v3-$size
  mkdir -p "$W"
  "$H" graph --model inception_v3 --height "$size" --width "$size" -o "$W/plain.json" 2>/dev/null
  python3 scripts/torch_weights.py --model inception_v3 --graph "$W/plain.json" --out "$W" || continue
  "$H" schedule --graph "$W/graph.json" --algo hios-lp --gpus 1 -o "$W/lp1.json" >/dev/null 2>&1
  runs=("lp1 1 $W/lp1.json")
  if [ "$gpus" -ge 2 ]; then
    "$H" schedule --graph "$W/graph.json" --algo hios-lp --gpus 2 -o "$W/lp2.json" >/dev/null 2>&1
    "$H" schedule --graph "$W/graph.json" --algo hios-lp --gpus 2 --spatial 2 --spatial-mode recompute \
      -o "$W/split.json" >/dev/null 2>&1
    runs+=("lp2 2 $W/lp2.json" "split 2 $W/split.json")
  fi
  for r in "${runs[@]}"; do
    read -r name np sched <<<"$r"
    for math in fp32 tf32; do
      timeout 200 mpirun -np "$np" "$H" run --graph "$W/graph.json" --schedule "$sched" --backend cuda --math "$math" \
        --input "$W/input.npy" --save-output "$W/hios-$name-$math.npy" --verify --warmup 1 --number 3 --repeat 3 \
        --timeout 190 -o none >"$W/run-$name-$math.log" 2>&1 || { echo "$size $name $math: run failed: $(grep -m1 error "$W/run-$name-$math.log")"; continue; }
      echo "inception_v3 $size $name ($np GPU) $math against PyTorch: $(python3 scripts/torch_weights.py --compare \
        "$W/torch.npy" "$W/hios-$name-$math.npy")  $(grep -E '^# correctness' "$W/run-$name-$math.log")" | tee -a "$OUT/summary.txt"
    done
  done
done
