#!/usr/bin/env bash
# On a 2-GPU machine, one device call: build with CUDA, then for every configuration tune a
# schedule with a fresh profile database (row splits included), tune again with the saved
# database, and run the tuned schedule and the best one-GPU schedule the tune measured under
# mpirun (their peak memory per rank). The table comes last. Every baseline is a candidate of
# the same tune job, so the ratios compare numbers timed the same way in the same process:
#   best1   the fastest verified one-GPU candidate (sequential, IOS, hios-lp measured/analytic)
#   lp2     hios-lp on two GPUs with analytic costs (what `hios schedule` gives today)
#   split   the fastest row-split candidate
#   tuned   the schedule hios tune writes
# error: the tuned schedule's prediction (launch gap and transfers calibrated on the other
# candidates) against its measurement; uncalibrated error: the same from the isolated
# measurements alone (stages on one GPU, links between idle GPUs).
# mem: peak MB per rank of `mpirun hios run` (the run's own report), tuned (max over ranks)
# against the best one-GPU schedule.
#
#   OUT=/some/dir bash scripts/gpu/tune.sh inception_v3:331:1 nasnet_large:2048:1:bf16 ...
#
# Arguments: MODEL:SIZE:BATCH[:MATH] (default: the 13 configurations below, TF32). Environment:
# BUILD_DIR (/tmp/b), JOBS (32), GPUS (2), TUNE_S (270, the tune's --timeout), STALL_S (120), TUNE_ARGS (extra hios tune options), RUN_ARGS
# (extra options of the two-GPU hios run, e.g. the tune's --transport), SMOKE=1 also
# runs `ctest -L gpu` and `mpirun hios run --verify --trace` on the first configuration,
# NORUN=1 skips the hios runs, PACK=0 leaves the files loose (by default all but summary.txt and
# env.txt go into gpu-tune.tgz: a device call returns at most 8 files).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/output/gpu-tune}
B=${BUILD_DIR:-/tmp/b}
JOBS=${JOBS:-32}
GPUS=${GPUS:-2}
TUNE_S=${TUNE_S:-270}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # never NVLink multicast
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
configs=("$@")
if [ ${#configs[@]} -eq 0 ]; then
  configs=(inception_v3:331:1 inception_v3:512:1 inception_v3:1024:1 inception_v3:2048:1 inception_v3:512:8
           nasnet_large:331:1 nasnet_large:512:1 nasnet_large:1024:1 nasnet_large:2048:1
           randwire:331:1 randwire:512:1 randwire:1024:1 randwire:2048:1)
fi

if [ ! -x "$B/cli/hios" ] || [ -n "${REBUILD:-}" ] || [ -n "${SMOKE:-}" ]; then
  tests=OFF; [ -n "${SMOKE:-}" ] && tests=ON
  { cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DHIOS_CUDA=ON -DHIOS_BUILD_TESTS=$tests &&
    cmake --build "$B" -j "$JOBS"; } >"$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
fi
H=$B/cli/hios
{ nvidia-smi --query-gpu=index,name,driver_version --format=csv; git rev-parse --short HEAD; date -u +%FT%TZ; } >"$OUT/env.txt" 2>&1

if [ -n "${SMOKE:-}" ]; then
  (cd "$B" && timeout 300 ctest -L gpu --output-on-failure) >"$OUT/ctest-gpu.log" 2>&1
  echo "ctest -L gpu: $(grep -E 'tests passed|tests failed' "$OUT/ctest-gpu.log" | tail -1)"
fi

# A tune still running after STALL_S seconds (default 120) gets its state written to FILE:
# each hios process's threads (gdb's backtraces where gdb exists, else the kernel's wait
# channels), its CPU use and the GPUs' utilisation, so a stall can be told from slow work.
watch_stall() {  # FILE
  sleep "${STALL_S:-120}" || return
  {
    date -u +%FT%TZ
    nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv
    for pid in $(pgrep -f "hios tune" | grep -v "^$$\$"); do
      [ "$(cat /proc/$pid/comm 2>/dev/null)" = hios ] || continue
      echo "== pid $pid"; ps -o pid,pcpu,etime,nlwp,args -p "$pid"
      if command -v gdb >/dev/null; then
        timeout 60 gdb -p "$pid" -batch -ex "thread apply all bt 25" 2>&1 | grep -E "^#|^Thread" | head -300
      else
        for t in /proc/$pid/task/*; do echo "$(basename "$t") $(cat "$t/comm") $(cat "$t/wchan" 2>/dev/null) $(cut -d' ' -f3 "$t/stat")"; done
      fi
    done
  } >"$1" 2>&1
}

for spec in "${configs[@]}"; do
  IFS=: read -r model size batch math <<<"$spec"
  math=${math:-tf32}
  name=$model-$size-b$batch-$math
  g=$OUT/$name.graph.json
  "$H" graph --model "$model" --height "$size" --width "$size" --batch "$batch" -o "$g" >/dev/null || continue
  rm -f "$OUT/$name.db.json"
  s0=$(date +%s%N)
  watch_stall "$OUT/$name.stall.txt" &
  watcher=$!
  timeout $((TUNE_S + 10)) mpirun -np "$GPUS" "$H" tune --graph "$g" --gpus "$GPUS" --backend cuda --math "$math" \
    --profile-db "$OUT/$name.db.json" -o "$OUT/$name.tuned.json" --one-gpu-output "$OUT/$name.best1.json" \
    --timeout "$TUNE_S" ${TUNE_ARGS:-} >"$OUT/$name.tune.log" 2>&1
  rc=$?
  kill "$watcher" 2>/dev/null; wait "$watcher" 2>/dev/null
  echo "$name tune rc=$rc wall $(( ($(date +%s%N) - s0) / 1000000 ))e-3 s" | tee -a "$OUT/walls.txt"
  grep -E "^hios: error" "$OUT/$name.tune.log" | head -3
  [ "$rc" = 0 ] || continue
  s0=$(date +%s%N)
  timeout 120 mpirun -np "$GPUS" "$H" tune --graph "$g" --gpus "$GPUS" --backend cuda --math "$math" \
    --profile-db "$OUT/$name.db.json" -o "$OUT/$name.retuned.json" --timeout 110 ${TUNE_ARGS:-} \
    >"$OUT/$name.retune.log" 2>&1
  echo "$name retune rc=$? wall $(( ($(date +%s%N) - s0) / 1000000 ))e-3 s" | tee -a "$OUT/walls.txt"
  if [ -z "${NORUN:-}" ]; then
    for kind in tuned best1; do
      np=$GPUS; [ "$kind" = best1 ] && np=1
      timeout 120 mpirun -np "$np" "$H" run --graph "$g" --schedule "$OUT/$name.$kind.json" --backend cuda \
        --math "$math" --warmup 5 --number 10 --repeat 7 --timeout 110 -o "$OUT/$name.$kind.run.json" \
        $([ "$kind" = tuned ] && echo "${RUN_ARGS:-}") >"$OUT/$name.$kind.run.log" 2>&1 || echo "$name $kind run failed: $(grep -m1 error "$OUT/$name.$kind.run.log")"
    done
  fi
  if [ -n "${SMOKE:-}" ] && [ -z "${smoked:-}" ]; then
    smoked=1
    timeout 120 mpirun -np "$GPUS" "$H" run --graph "$g" --schedule "$OUT/$name.tuned.json" --backend cuda --verify \
      --trace "$OUT/$name.trace.json" --timeout 100 -o none >"$OUT/$name.run.log" 2>&1
    echo "$name hios run rc=$?: $(grep -E '^# latency|^# correctness' "$OUT/$name.run.log" | tr '\n' ' ')"
  fi
done

python3 - "$OUT" "${configs[@]}" <<'PY' | tee "$OUT/summary.txt"
import json, os, re, sys
out, configs = sys.argv[1], sys.argv[2:]
walls = {}
for line in open(os.path.join(out, "walls.txt")):
    m = re.match(r"(\S+) (tune|retune) rc=(\d+) wall ([\d.e-]+) s", line)
    if m: walls[(m.group(1), m.group(2))] = (int(m.group(3)), float(m.group(4)))
def peak(name, kind):
    try:
        r = json.load(open(os.path.join(out, f"{name}.{kind}.run.json")))
        return max(x["peak_memory_mb"] for x in r["ranks"]), r["latency_ms"]["median"]
    except Exception:
        return float("nan"), float("nan")
print("| config | best1 ms | lp2 ms | split ms | tuned ms | tuned / best1 | predicted ms | error | uncalibrated error | chosen | tune s | re-tune s | run: tuned / best1 ms | mem MB tuned / best1 |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|")
for spec in configs:
    parts = spec.split(":")
    model, size, batch = parts[:3]
    math = parts[3] if len(parts) > 3 else "tf32"
    name = f"{model}-{size}-b{batch}-{math}"
    try:
        t = json.load(open(os.path.join(out, name + ".tuned.json")))["meta"]["tune"]
    except Exception as e:
        print(f"| {name} | failed: {walls.get((name, 'tune'))} |"); continue
    c = [x for x in t["candidates"] if x["verified"]]
    by = {x["label"]: x for x in t["candidates"]}
    for d in t["duplicates"]: by.setdefault(d["label"], by.get(d["same_as"]))
    b1 = min((x for x in c if x["gpus_used"] == 1), key=lambda x: x["measured_ms"], default=None)
    l2 = by.get("hios-lp 2 GPUs, 4 streams, window 4 (analytic)")
    sp = min((x for x in c if "split" in x), key=lambda x: x["measured_ms"], default=None)
    ch = by[t["chosen"]]
    f = lambda x: f"{x['measured_ms']:.3f} ({x['passes']})" if x else "-"
    err = ch["predicted_ms"] / ch["measured_ms"] - 1
    ierr = ch["predicted_uncalibrated_ms"] / ch["measured_ms"] - 1
    rw = walls.get((name, "retune"), (None, float("nan")))[1]
    mt, lt = peak(name, "tuned"); m1, l1 = peak(name, "best1")
    print(f"| {name} | {f(b1)} | {f(l2)} | {f(sp)} | {ch['measured_ms']:.3f} | {ch['measured_ms']/b1['measured_ms']:.3f} | "
          f"{ch['predicted_ms']:.3f} | {100*err:+.1f}% | {100*ierr:+.1f}% | {t['chosen']} | {t['seconds']['total']:.1f} | {rw:.1f} | "
          f"{lt:.3f} / {l1:.3f} | {mt:.0f} / {m1:.0f} |")
PY

# A device call returns at most 8 files: unless PACK=0, everything but the summary and env.txt
# goes into one archive (unpack it with tar xzf where the data is kept).
if [ "${PACK:-1}" != 0 ]; then
  (cd "$OUT" && tar czf gpu-tune.tgz --exclude=gpu-tune.tgz --exclude=summary.txt --exclude=env.txt -- * &&
     find . -maxdepth 1 -type f ! -name gpu-tune.tgz ! -name summary.txt ! -name env.txt -delete)
fi
