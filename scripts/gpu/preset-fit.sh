#!/usr/bin/env bash
# One device call on two GPUs: the data that fits and checks an analytic device preset.
#
#  1. `hios profile --gpus 2` every MODEL:SIZE in TF32 and in bf16 (nodes, links, and the
#     stages of the one-GPU hios-lp schedule), keeping each profile database;
#  2. `hios fit-preset` per math to those databases (FIT_NAME, FIT_NAME-bf16);
#  3. `hios schedule` with the fitted preset: hios-lp on one GPU and on two, and for Inception
#     the two-way recompute and halo row splits; each run with `mpirun hios run`, and its
#     prediction (`hios show --cost analytic`) beside the measured median in predictions.txt.
#
# Everything lands in OUT; the databases let the fit be repeated off the GPU machine.
#   OUT=/some/dir FIT_BASE=h200 FIT_NAME=h200 bash scripts/gpu.sh preset-fit inception_v3:331 nasnet_large:2048 ...
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/output/gpu-preset-fit}
B=${BUILD_DIR:-/tmp/b}
FIT_BASE=${FIT_BASE:-h200}
FIT_NAME=${FIT_NAME:-$FIT_BASE}
MATHS=${MATHS:-tf32 bf16}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
source scripts/gpu/build.sh
gpu_hios_and_env
configs=("$@")
[ ${#configs[@]} -gt 0 ] || configs=(inception_v3:331 inception_v3:1024 inception_v3:2048 nasnet_large:331 nasnet_large:1024)

preset_args() {  # MATH: the fitted preset's name and the rates its fit starts from
  if [ "$1" = bf16 ]; then
    # bf16 tensor cores, and twice the bandwidth because the graph counts bytes in fp32
    local bw
    bw=$(python3 -c "import json; print(2 * next(d['mem_bandwidth_gbs'] for d in json.load(open('schedules/devices.json'))['devices'] if d['name'] == '$FIT_BASE'))")
    echo "--name $FIT_NAME-bf16 --peak-tflops 989.4 --mem-bandwidth-gbs $bw"
  else
    echo "--name $FIT_NAME"
  fi
}

for math in $MATHS; do
  fit_args=()
  for spec in "${configs[@]}"; do
    IFS=: read -r model size <<<"$spec"
    name=$model-$size-$math
    g=$OUT/$model-$size.graph.json
    [ -f "$g" ] || "$H" graph --model "$model" --height "$size" --width "$size" -o "$g" >/dev/null
    "$H" schedule --graph "$g" --algo hios-lp --gpus 1 -o "$OUT/$name.stages.json" >/dev/null 2>&1
    s0=$(date +%s)
    timeout 150 "$H" profile --graph "$g" --gpus 2 --math "$math" --stages "$OUT/$name.stages.json" \
      -o "$OUT/$name.db.json" >"$OUT/$name.profile.log" 2>&1
    echo "$name profile rc=$? $(( $(date +%s) - s0 )) s" | tee -a "$OUT/walls.txt"
    [ -f "$OUT/$name.db.json" ] && fit_args+=(--graph "$g" --profile-db "$OUT/$name.db.json")
  done
  # shellcheck disable=SC2046
  "$H" fit-preset "${fit_args[@]}" --base "$FIT_BASE" $(preset_args "$math") -o "$OUT/preset-$math.json" \
    >"$OUT/fit-$math.log" 2>&1
  echo "fit $math rc=$?: $(tail -1 "$OUT/fit-$math.log")"
done

for math in $MATHS; do
  dev=$FIT_NAME; [ "$math" = bf16 ] && dev=$FIT_NAME-bf16
  devs=$OUT/preset-$math.json
  [ -f "$devs" ] || continue
  for spec in "${configs[@]}"; do
    IFS=: read -r model size <<<"$spec"
    g=$OUT/$model-$size.graph.json
    kinds=(lp1 lp2); [ "$model" = inception_v3 ] && kinds+=(recompute halo)
    for kind in "${kinds[@]}"; do
      name=$model-$size-$math-$kind
      case $kind in
        lp1) args=(--algo hios-lp --gpus 1); np=1 ;;
        lp2) args=(--algo hios-lp --gpus 2); np=2 ;;
        *) args=(--algo hios-lp --gpus 2 --spatial 2 --spatial-mode "$kind"); np=2 ;;
      esac
      timeout 120 "$H" schedule --graph "$g" "${args[@]}" --device "$dev" --devices "$devs" -o "$OUT/$name.json" \
        >"$OUT/$name.schedule.log" 2>&1 || { echo "$name schedule failed"; continue; }
      predicted=$("$H" show "$OUT/$name.json" --graph "$g" --cost analytic --device "$dev" --devices "$devs" |
        sed -nE 's/^simulated ([0-9.]+) ms.*/\1/p')
      timeout 90 mpirun -np "$np" "$H" run --graph "$g" --schedule "$OUT/$name.json" --backend cuda --math "$math" \
        --warmup 5 --number 10 --repeat 5 --timeout 80 -o "$OUT/$name.run.json" >"$OUT/$name.run.log" 2>&1
      measured=$(python3 -c "import json; print(json.load(open('$OUT/$name.run.json'))['latency_ms']['median'])" 2>/dev/null)
      echo "$model $size $math $kind predicted $predicted measured ${measured:-failed}" | tee -a "$OUT/predictions.txt"
    done
  done
done
