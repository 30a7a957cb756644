#!/usr/bin/env bash
# Memory of two-GPU schedules with and without a receive lead (receives gated by stage, sends
# fenced: docs/executor.md), one device call: for each MODEL:SIZE:DIR, the schedules DIR holds
# from scripts/gpu-tune.sh (MODEL-SIZE-b1-tf32.tuned.json, .best1.json) run with `hios run`
# as written, with meta.recv_lead 0 and 2, and the one-GPU schedule on one GPU. Prints each
# run's median latency and every rank's peak memory and tensor arena.
#   OUT=/some/dir bash scripts/gpu-memory.sh nasnet_large:2048:docs/data/two-h100-2026-11-26
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/output/gpu-memory}
B=${BUILD_DIR:-/tmp/b}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
source scripts/gpu-build.sh
[ -x "$B/cli/hios" ] && [ -z "${REBUILD:-}" ] || JOBS=${JOBS:-32} gpu_build hios
H=$B/cli/hios
: >"$OUT/memory.txt"
for spec in "$@"; do
  IFS=: read -r model size dir <<<"$spec"
  p=$model-$size
  g=$OUT/$p.graph.json
  "$H" graph --model "$model" --height "$size" --width "$size" -o "$g" >/dev/null
  cp "$dir/$p-b1-tf32.tuned.json" "$OUT/$p.tuned.json"
  cp "$dir/$p-b1-tf32.best1.json" "$OUT/$p.best1.json"
  for L in 0 2; do
    python3 -c "import json,sys; s=json.load(open(sys.argv[1])); s['meta']['recv_lead']=int(sys.argv[2]); json.dump(s,open(sys.argv[3],'w'))" \
      "$OUT/$p.tuned.json" $L "$OUT/$p.tuned-lead$L.json"
  done
  for kind in best1 tuned tuned-lead0 tuned-lead2; do
    np=2; [ "$kind" = best1 ] && np=1
    timeout 150 mpirun -np $np "$H" run --graph "$g" --schedule "$OUT/$p.$kind.json" --backend cuda --warmup 5 \
      --number 10 --repeat 7 --timeout 140 -o none >"$OUT/$p.$kind.log" 2>&1
    echo "$p $kind (rc $?): $(grep -E '^# latency' "$OUT/$p.$kind.log" | sed -E 's/.*median ([0-9.]+).*/median \1 ms/') \
$(grep -E 'peak' "$OUT/$p.$kind.log" | tr -s ' ' | tr '\n' ';')" | tee -a "$OUT/memory.txt"
  done
done
