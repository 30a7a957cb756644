#!/usr/bin/env bash
# One call on a GPU machine for the profiler: build, the profiler's GPU tests, then per model
# profile it (nodes + CUPTI, links, the one-GPU hios-lp schedule's stages) and time hios-lp
# schedules made with analytic costs against ones made with the measured profile, in the same
# call. Everything goes under $OUT; the table is printed last.
#
#   OUT=/some/dir bash scripts/gpu.sh profile          (from the repository root)
#
# Environment: BUILD_DIR (/tmp/b), JOBS (32), MODELS (inception_v3,nasnet_large), SIZE (1024),
# GPUS (2), ITERS (20), DEADLINE_S (420: no new model starts after this many seconds).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/output/gpu-profile}
B=${BUILD_DIR:-/tmp/b}
JOBS=${JOBS:-32}
MODELS=${MODELS:-inception_v3,nasnet_large}
SIZE=${SIZE:-1024}
GPUS=${GPUS:-2}
ITERS=${ITERS:-20}
DEADLINE_S=${DEADLINE_S:-420}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # never NVLink multicast
mkdir -p "$OUT"
t0=$(date +%s)
LOG="$OUT/profile.log"
JSON="$OUT/bench.jsonl"
: >"$LOG"
: >"$JSON"

{ cmake -B "$B" -DCMAKE_CUDA_ARCHITECTURES=90 -DHIOS_CUDA=ON && cmake --build "$B" -j"$JOBS"; } >"$OUT/build.log" 2>&1 ||
  { echo "build failed"; tail -20 "$OUT/build.log"; exit 1; }
H="$B/cli/hios"
BENCH="$B/bench/hios-gpu-bench"
"$B/tests/test_gpu" "[profiler]" >"$OUT/test-profiler.log" 2>&1
tests_rc=$?

IFS=, read -r -a models <<<"$MODELS"
for m in "${models[@]}"; do
  if [ $(( $(date +%s) - t0 )) -ge "$DEADLINE_S" ]; then echo "# deadline: skipping $m" | tee -a "$LOG"; continue; fi
  g="$OUT/$m-$SIZE.json"
  {
    echo "## $m $SIZE"
    "$H" graph --model "$m" --height "$SIZE" --width "$SIZE" -o "$g"
    "$H" schedule --graph "$g" --algo hios-lp --gpus 1 --streams 4 -o "$OUT/$m.hios-lp-1gpu.analytic.json"
    echo "# $H profile --graph $g --gpus $GPUS --iters $ITERS --stages $OUT/$m.hios-lp-1gpu.analytic.json -o $OUT/$m-$SIZE.profile.json"
    "$H" profile --graph "$g" --gpus "$GPUS" --iters "$ITERS" --stages "$OUT/$m.hios-lp-1gpu.analytic.json" \
      -o "$OUT/$m-$SIZE.profile.json"
    for n in 1 "$GPUS"; do
      "$H" schedule --graph "$g" --algo hios-lp --gpus "$n" --streams 4 --cost "$OUT/$m-$SIZE.profile.json" \
        -o "$OUT/$m.hios-lp-${n}gpu.profile.json"
    done
    for cost in analytic "$OUT/$m-$SIZE.profile.json"; do
      echo "# $BENCH --model $m --size $SIZE --algo hios-lp --gpus $GPUS --streams 4 --cost $cost"
      timeout 240 "$BENCH" --model "$m" --size "$SIZE" --algo hios-lp --gpus "$GPUS" --streams 4 --warmup 10 \
        --iters 30 --cost "$cost" --json "$JSON" || echo "# bench failed (exit $?)"
    done
  } >>"$LOG" 2>&1
done

python3 - "$JSON" <<'PY' | tee "$OUT/table.txt"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print("# hios-lp with analytic costs vs with the measured profile (same call, CUDA Graphs, medians)")
print(f"#  {'model':<14}{'size':>5}  {'variant':<22}{'cost':<10}{'predicted':>10}{'measured':>10}{'pred/meas':>10}{'transfers':>10}{'err vs seq':>12}")
for r in rows:
    if not r.get("cuda_graph"):
        continue
    cost = r.get("cost", "-")
    cost = "profile" if cost not in ("-", "analytic") else cost
    p = r.get("predicted_ms")
    ratio = f"{p / r['median_ms']:10.2f}" if p else f"{'-':>10}"
    err = r.get("rel_err_vs_sequential")
    print(f"   {r['model']:<14}{r['size']:>5}  {r['variant']:<22}{cost:<10}"
          f"{(f'{p:10.3f}' if p else f'{chr(45):>10}')}{r['median_ms']:10.3f}{ratio}{r.get('transfers', 0):>10}"
          f"{(f'{err:12.1e}' if err is not None else f'{chr(45):>12}')}")
PY
echo "profiler GPU tests: $(grep -E "test cases|All tests passed" "$OUT/test-profiler.log" | tail -1) (exit $tests_rc)"
grep -E "^  (link|sum of|node sig|stages)" "$LOG" | head -12
echo "total $(( $(date +%s) - t0 )) s"
