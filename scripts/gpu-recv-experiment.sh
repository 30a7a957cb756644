#!/usr/bin/env bash
# One device call on two GPUs: why do two-GPU schedules run slower than predicted? Builds with
# CUDA, then for each MODEL:SIZE runs today's analytic hios-lp schedule on two GPUs with
#   - receives posted as early as possible (what lowering did until now) and with a receive
#     lead of 0, 1 and 2 stages (meta.recv_lead: post each receive that many stages before its
#     consumer's stage, so NCCL's receive kernel does not hold SMs while its data is far off);
#   - the send and receive streams at normal and at high CUDA priority (--comm-priority);
# and the one-GPU hios-lp schedule, all with `hios run`'s timing. Prints one table.
#   OUT=/some/dir [TUNE=MODEL:SIZE] bash scripts/gpu-recv-experiment.sh nasnet_large:331 inception_v3:2048
# TUNE also runs `hios tune` on that configuration and prints its candidate table.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/output/gpu-recv}
B=${BUILD_DIR:-/tmp/b}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
source scripts/gpu-build.sh
[ -x "$B/cli/hios" ] && [ -z "${REBUILD:-}" ] || JOBS=${JOBS:-32} gpu_build hios
H=$B/cli/hios
configs=("$@")
[ ${#configs[@]} -eq 0 ] && configs=(nasnet_large:331 inception_v3:2048 nasnet_large:1024)
run() {  # name np schedule [hios run options...]
  local name=$1 np=$2 s=$3; shift 3
  timeout 150 mpirun -np "$np" "$H" run --graph "$g" --schedule "$s" --backend cuda --transport nccl --warmup 3 \
    --number 10 --repeat 7 --timeout 140 -o none "$@" >"$OUT/$name.log" 2>&1
  local lat
  lat=$(grep -E '^# latency' "$OUT/$name.log" | sed -E 's/.*median ([0-9.]+).*predicted ([0-9.]+).*/\1 \2/')
  echo "$name ${lat:-FAILED}" | tee -a "$OUT/results.txt"
}
: >"$OUT/results.txt"
for spec in "${configs[@]}"; do
  IFS=: read -r model size <<<"$spec"
  g=$OUT/$model-$size.graph.json
  "$H" graph --model "$model" --height "$size" --width "$size" -o "$g" >/dev/null
  "$H" schedule --graph "$g" --gpus 1 -o "$OUT/$model-$size.lp1.json" 2>/dev/null
  "$H" schedule --graph "$g" --gpus 2 --no-single-gpu-fallback -o "$OUT/$model-$size.lp2.json" 2>/dev/null
  for L in 0 1 2; do
    python3 -c "import json,sys; s=json.load(open(sys.argv[1])); s['meta']['recv_lead']=int(sys.argv[2]); json.dump(s,open(sys.argv[3],'w'))" \
      "$OUT/$model-$size.lp2.json" $L "$OUT/$model-$size.lp2-lead$L.json"
  done
  p=$model-$size
  run "$p.lp1" 1 "$OUT/$p.lp1.json"
  for pri in normal high; do
    run "$p.lp2.$pri" 2 "$OUT/$p.lp2.json" --comm-priority $pri
    for L in 0 2; do run "$p.lp2.$pri.lead$L" 2 "$OUT/$p.lp2-lead$L.json" --comm-priority $pri; done
  done
done
if [ -n "${TUNE:-}" ]; then
  IFS=: read -r model size <<<"$TUNE"
  g=$OUT/$model-$size.graph.json
  [ -f "$g" ] || "$H" graph --model "$model" --height "$size" --width "$size" -o "$g" >/dev/null
  timeout 200 mpirun -np 2 "$H" tune --graph "$g" --gpus 2 --backend cuda -o "$OUT/$model-$size.tuned.json" \
    --timeout 190 >"$OUT/$model-$size.tune.log" 2>&1
  sed -n '/^# candidate/,$p' "$OUT/$model-$size.tune.log"
fi
echo "name median_ms predicted_ms"
cat "$OUT/results.txt"
