#!/usr/bin/env bash
# One short device call: build with the GPU tests, run the profiler's GPU tests, and trace one
# two-GPU pass of inception_v3 (hios-lp, analytic) to see what its transfers cost inside a
# pass against the link measured on idle GPUs (the open problem of docs/tuner.md).
#   OUT=/some/dir bash scripts/gpu-trace-check.sh [SIZE]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/output/gpu-trace}
B=${BUILD_DIR:-/tmp/b}
SIZE=${1:-2048}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
{ cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DHIOS_CUDA=ON -DHIOS_BUILD_TESTS=ON &&
  cmake --build "$B" -j 32; } >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
(cd "$B" && timeout 120 ctest -L gpu -R profiler --output-on-failure) >"$OUT/ctest.log" 2>&1
echo "ctest -L gpu -R profiler: $(grep -E 'tests passed|tests failed' "$OUT/ctest.log" | tail -1)"
H=$B/cli/hios
g=$OUT/g.json
"$H" graph --model inception_v3 --height "$SIZE" --width "$SIZE" -o "$g" >/dev/null
"$H" schedule --graph "$g" --algo hios-lp --gpus 2 --no-single-gpu-fallback -o "$OUT/s.json" >/dev/null
timeout 120 mpirun -np 2 "$H" run --graph "$g" --schedule "$OUT/s.json" --backend cuda --trace "$OUT/trace.json" \
  --timeout 100 -o none >"$OUT/run.log" 2>&1
grep -E "^# latency|^# correctness" "$OUT/run.log"
python3 - "$OUT/trace.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
ev = t["traceEvents"]
xs = [e for e in ev if e.get("cat") == "transfer" or (e.get("ph") == "X" and "bytes" in e.get("args", {}))]
rows = []
for e in xs:
    b = e["args"]["bytes"]; ms = e["dur"] / 1000
    rows.append((b, ms))
rows.sort()
print(f"{len(rows)} transfers in the traced (eager) pass; bytes, ms, GB/s:")
for b, ms in rows:
    print(f"  {b/1e6:9.2f} MB  {ms:8.3f} ms  {b/ms/1e6 if ms > 0 else 0:8.1f} GB/s")
tot_b = sum(b for b, _ in rows); tot_ms = sum(ms for _, ms in rows)
print(f"total {tot_b/1e6:.1f} MB in {tot_ms:.3f} ms of receive spans")
PY
