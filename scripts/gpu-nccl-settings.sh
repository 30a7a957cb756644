#!/usr/bin/env bash
# On a 2-GPU machine, one device call: how much of a two-GPU schedule's time is NCCL's
# per-message cost, and whether NCCL's own settings lower it. Runs one saved schedule under
# mpirun once per setting (protocol, p2p channels, comm-stream priority), and the one-GPU
# schedule beside them, so every ratio comes from the same call:
#
#   OUT=/some/dir bash scripts/gpu-nccl-settings.sh GRAPH_SPEC TWO_GPU.json ONE_GPU.json
#
# GRAPH_SPEC is MODEL:SIZE (batch 1, TF32); every two-GPU row names its transport (on one host
# hios run takes cuda-ipc when told none). BUILD_DIR (/tmp/b) is built when hios is missing
# or REBUILD is set. ROWS=transports runs the transports instead of NCCL's settings: nccl and
# cuda-ipc, each twice, then cuda-ipc eager and verified. Prints one line per setting: median ms
# and the ratio to the one-GPU run.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/output/gpu-nccl-settings}
B=${BUILD_DIR:-/tmp/b}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
IFS=: read -r model size <<<"$1"
two=$2 one=$3
if [ ! -x "$B/cli/hios" ] || [ -n "${REBUILD:-}" ]; then
  source scripts/gpu-build.sh
  gpu_build hios
fi
H=$B/cli/hios
{ nvidia-smi --query-gpu=index,name,driver_version --format=csv; date -u +%FT%TZ; } >"$OUT/env.txt" 2>&1
g=$OUT/graph.json
"$H" graph --model "$model" --height "$size" --width "$size" -o "$g" >/dev/null || exit 1

median() { python3 -c "import json,sys; print('%.3f' % json.load(open(sys.argv[1]))['latency_ms']['median'])" "$1"; }
run() {  # LABEL NP SCHEDULE [ENV=VALUE ...] [-- hios run options]; each in its own subshell
  (
    label=$1 np=$2 s=$3; shift 3
    envs=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=(-x "$1"); export "${1?}"; shift; done
    [ $# -gt 0 ] && shift
    timeout 120 mpirun -np "$np" -x NCCL_NVLS_ENABLE "${envs[@]}" "$H" run --graph "$g" --schedule "$s" --backend cuda \
      --warmup 5 --number 10 --repeat 7 --timeout 110 -o "$OUT/$label.json" "$@" >"$OUT/$label.log" 2>&1 ||
      { echo "$label failed: $(grep -m1 error "$OUT/$label.log")"; exit 0; }
    echo "$label $(median "$OUT/$label.json")"
  )
}
transports() {
  run one-gpu 1 "$one"
  for round in 1 2; do
    run nccl-$round 2 "$two" -- --transport nccl
    run cuda-ipc-$round 2 "$two" -- --transport cuda-ipc
  done
  run cuda-ipc-eager 2 "$two" -- --transport cuda-ipc --cuda-graph off
  run cuda-ipc-verify 2 "$two" -- --transport cuda-ipc --verify
  run one-gpu-again 1 "$one"
}
nccl_settings() {
  run one-gpu 1 "$one"
  run default 2 "$two" -- --transport nccl
  run proto-LL 2 "$two" NCCL_PROTO=LL -- --transport nccl
  run proto-LL128 2 "$two" NCCL_PROTO=LL128 -- --transport nccl
  run proto-Simple 2 "$two" NCCL_PROTO=Simple -- --transport nccl
  run p2p-channels-1 2 "$two" NCCL_MAX_P2P_NCHANNELS=1 -- --transport nccl
  run p2p-channels-1-LL 2 "$two" NCCL_MAX_P2P_NCHANNELS=1 NCCL_PROTO=LL -- --transport nccl
  run p2p-nchannels-per-peer-1 2 "$two" NCCL_NCHANNELS_PER_NET_PEER=1 -- --transport nccl
  run comm-normal 2 "$two" -- --transport nccl --comm-priority normal
  run eager 2 "$two" -- --transport nccl --cuda-graph off
  run one-gpu-again 1 "$one"
  run default-again 2 "$two" -- --transport nccl
}
if [ "${ROWS:-nccl}" = transports ]; then transports; else nccl_settings; fi | tee "$OUT/settings.txt"
python3 - "$OUT/settings.txt" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1]) if len(l.split()) == 2]
one = [float(v) for k, v in rows if k.startswith("one-gpu")]
base = sorted(one)[len(one) // 2] if one else float("nan")
for k, v in rows:
    print(f"{k:28s} {float(v):8.3f} ms  {float(v) / base:6.3f}x the one-GPU run")
PY
