#!/usr/bin/env bash
# On a 2-GPU machine, one device call: the same search with 1, 2 and 3 link lanes
# (ScheduleMeta::link_lanes) on a profile database measured on this kind of GPU, each schedule
# run verified under mpirun beside the one-GPU schedule, so every ratio comes from one call:
#
#   OUT=/some/dir bash scripts/gpu-lanes.sh MODEL:SIZE DB.json[.gz] ONE_GPU.json [SAVED.json]
#
# With SAVED.json (e.g. a tuned two-GPU schedule) that schedule also runs as it is and with its
# meta.link_lanes set to 1, 2 and 3: the same stages and transfers, only the lanes differ.
# BUILD_DIR (/tmp/b) is built when hios is missing or REBUILD is set. Prints one line per
# schedule: predicted and measured median ms, and the ratio to the one-GPU run. SEARCH=0 skips
# the searches (only SAVED.json's runs).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/output/gpu-lanes}
B=${BUILD_DIR:-/tmp/b}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
IFS=: read -r model size <<<"$1"
db=$2 one=$3 saved=${4:-}
if [ ! -x "$B/cli/hios" ] || [ -n "${REBUILD:-}" ]; then
  source scripts/gpu-build.sh
  gpu_build hios
fi
H=$B/cli/hios
{ nvidia-smi --query-gpu=index,name,driver_version --format=csv; date -u +%FT%TZ; } >"$OUT/env.txt" 2>&1
W=$(mktemp -d)
g=$W/graph.json
"$H" graph --model "$model" --height "$size" --width "$size" -o "$g" >/dev/null || exit 1
case "$db" in *.gz) gunzip -c "$db" >"$W/db.json"; db=$W/db.json ;; esac

run() {  # LABEL NP SCHEDULE
  timeout 120 mpirun -np "$2" -x NCCL_NVLS_ENABLE "$H" run --graph "$g" --schedule "$3" --backend cuda --transport nccl --verify \
    --warmup 5 --number 10 --repeat 7 --timeout 110 -o "$W/$1.run.json" >"$W/$1.log" 2>&1 ||
    { echo "$1 failed: $(grep -m1 -i error "$W/$1.log")"; return; }
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); s=json.load(open(sys.argv[2])); print(sys.argv[3], '%.3f' % s['meta']['predicted_ms'], '%.3f' % d['latency_ms']['median'], 'verified' if d['ok'] else 'NOT VERIFIED')" \
    "$W/$1.run.json" "$3" "$1"
}
{
  run one-gpu 1 "$one"
  for lanes in $([ "${SEARCH:-1}" = 1 ] && echo 1 2 3); do
    "$H" schedule --graph "$g" --gpus 2 --cost "$db" --lanes $lanes -o "$W/lanes$lanes.json" >"$W/lanes$lanes.schedule.log" 2>&1
    run lanes$lanes 2 "$W/lanes$lanes.json"
  done
  if [ -n "$saved" ]; then
    for lanes in 1 2 3; do
      python3 -c "import json,sys; s=json.load(open(sys.argv[1])); s['meta']['link_lanes']=int(sys.argv[3]); json.dump(s,open(sys.argv[2],'w'))" \
        "$saved" "$W/saved-lanes$lanes.json" $lanes
      run saved-lanes$lanes 2 "$W/saved-lanes$lanes.json"
    done
  fi
  run one-gpu-again 1 "$one"
  [ "${SEARCH:-1}" = 1 ] && run lanes2-again 2 "$W/lanes2.json"
} | tee "$W/lanes.txt"
python3 - "$W/lanes.txt" <<'PY' | tee "$OUT/lanes-summary.txt"
import sys
rows = [l.split() for l in open(sys.argv[1]) if len(l.split()) == 4 and l.split()[0] != "predicted"]
one = sorted(float(r[2]) for r in rows if r[0].startswith("one-gpu"))
base = one[len(one) // 2]
for label, pred, meas, ok in rows:
    print(f"{label:16s} predicted {float(pred):7.3f} ms  measured {float(meas):7.3f} ms  {float(meas) / base:6.3f}x one GPU  {ok}")
PY
tar -czf "$OUT/gpu-lanes.tgz" -C "$W" .
