#!/usr/bin/env bash
# On a 2-GPU machine: which transport `hios run` takes when told none, and that it matches the
# sequential run. An untuned hios-lp schedule of MODEL at SIZE over two GPUs runs under mpirun
# with no --transport (on one host with peer access: cuda-ipc), then with --transport nccl,
# each verified; the one-GPU hios-lp schedule runs beside them.
#   OUT=/some/dir bash scripts/gpu-default-transport.sh [MODEL:SIZE]   (inception_v3:512)
# BUILD_DIR (/tmp/b) is built when hios is missing. Prints one line per run: transport, median
# ms, verified or not; exits 1 when the default run did not verify or took another transport
# than EXPECT (cuda-ipc).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/output/gpu-default-transport}
B=${BUILD_DIR:-/tmp/b}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
IFS=: read -r model size <<<"${1:-inception_v3:512}"
if [ ! -x "$B/cli/hios" ]; then
  source scripts/gpu-build.sh
  gpu_build hios
fi
H=$B/cli/hios
g=$OUT/graph.json
"$H" graph --model "$model" --height "$size" --width "$size" -o "$g" >/dev/null || exit 1
"$H" schedule --graph "$g" --algo hios-lp --gpus 1 --device h100 -o "$OUT/one.json" >/dev/null || exit 1
"$H" schedule --graph "$g" --algo hios-lp --gpus 2 --device h100 --no-single-gpu-fallback -o "$OUT/two.json" >/dev/null || exit 1
run() {  # LABEL NP SCHEDULE [hios run options]
  local label=$1 np=$2 s=$3; shift 3
  timeout 120 mpirun -np "$np" -x NCCL_NVLS_ENABLE "$H" run --graph "$g" --schedule "$s" --backend cuda --verify \
    --warmup 5 --number 10 --repeat 7 --timeout 110 -o "$OUT/$label.json" "$@" >"$OUT/$label.log" 2>&1 ||
    { echo "$label failed: $(grep -m1 -i error "$OUT/$label.log")"; return 1; }
  python3 - "$OUT/$label.json" "$label" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]:10s} transport {r['config']['transport']:32s} {r['latency_ms']['median']:8.3f} ms  "
      f"{'verified' if r['ok'] else 'NOT VERIFIED'}")
PY
}
run one-gpu 1 "$OUT/one.json"
run default 2 "$OUT/two.json" || exit 1
run nccl 2 "$OUT/two.json" --transport nccl
python3 - "$OUT/default.json" "${EXPECT:-cuda-ipc}" <<'PY' || exit 1
import json, sys
r = json.load(open(sys.argv[1]))
took = r["config"]["transport"].split()[0]
assert r["ok"], "the default run did not verify"
assert took == sys.argv[2], f"the default run took {took}, not {sys.argv[2]}"
print(f"default transport: {took}, verified")
PY
