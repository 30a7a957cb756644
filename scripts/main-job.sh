#!/usr/bin/env bash
# The main job behind `make run`: build a model, schedule it, run it, verify it.
#
#   With GPUs (nvidia-smi lists at least one and hios was built with CUDA): inception_v3 at
#   1024x1024, tuned by `hios tune` over every local GPU (row splits included) with its profile
#   database kept under output/, so a second `make run` re-tunes in seconds. Then the tuned
#   schedule, the best one-GPU schedule the tune measured and the sequential one each run under
#   mpirun (CUDA backend, NCCL, CUDA Graphs) with --verify, and the summary compares them.
#   MATH=bf16 (or fp16) does the same in 16-bit storage.
#   Without a GPU: inception_v3 at 75x75 on the CPU backend with 2 MPI ranks. The GPU
#   preset's schedule would say nothing about CPU ranks (it kept all 120 nodes on rank 0), so
#   here the schedule comes from `hios tune --backend cpu`: measured on these ranks, with a
#   small stage budget, and verified like every candidate.
#
# Environment overrides: MODEL, SIZE, GPUS, ALGO (a `hios schedule` algorithm instead of the
# tune), BACKEND, MATH.
set -euo pipefail
BUILD_DIR=${1:-build}
HIOS="$BUILD_DIR/cli/hios"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1  # CI and the GPU machine run as root
export NCCL_NVLS_ENABLE=0                                          # never NVLink multicast

gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true); fi
# The CUDA backend is built when CMake found cuDNN and HIOS_CUDA was not OFF.
has_cuda=no
cache="$BUILD_DIR/CMakeCache.txt"
if grep -Eq "^HIOS_CUDNN_LIB:FILEPATH=/" "$cache" 2>/dev/null && ! grep -q "^HIOS_CUDA:STRING=OFF" "$cache"; then
  has_cuda=yes
fi

MODEL=${MODEL:-inception_v3}
ALGO=${ALGO:-hios-lp}
if [ "$gpus" -ge 1 ] && [ "$has_cuda" = yes ]; then
  BACKEND=${BACKEND:-cuda}
  SIZE=${SIZE:-1024}
  GPUS=${GPUS:-$gpus}
  TIMING=(--warmup 5 --number 10 --repeat 6)
  echo "# make run: $gpus GPU(s) found; $MODEL at ${SIZE}x${SIZE} on $GPUS GPU(s), cuda backend"
else
  BACKEND=${BACKEND:-cpu}
  SIZE=${SIZE:-75}
  GPUS=${GPUS:-2}
  # One OpenMP thread per rank: the sequential run and each parallel rank get one core each,
  # so the comparison is between schedules, not between thread counts.
  TIMING=(--warmup 1 --number 2 --repeat 5 --threads 1)
  echo "# make run: no GPU; $MODEL at ${SIZE}x${SIZE} on $GPUS CPU ranks (the embedded default)"
fi

MATH=${MATH:-}
# Bad settings are named in one line before anything is written.
bad() { echo "make run: $1" >&2; exit 2; }
case "$MATH" in "" | tf32 | fp32 | fp16 | bf16) ;; *) bad "MATH='$MATH': expected tf32, fp32, fp16 or bf16" ;; esac
[[ "$SIZE" =~ ^[1-9][0-9]{0,4}$ ]] || bad "SIZE='$SIZE': expected an image size in pixels, 1 to 99999"
[[ "$GPUS" =~ ^[1-9][0-9]{0,3}$ ]] || bad "GPUS='$GPUS': expected a number of GPUs or ranks, 1 to 9999"
mkdir -p output
# The analytic preset of this machine's card where hios has one (the printed predictions of
# `hios schedule`; the tune measures).
preset=()
if [ "$BACKEND" = cuda ]; then
  card=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  case "$card" in
    *H100*) case "$MATH" in bf16|fp16) preset=(--device h100-bf16) ;; fp32) preset=(--device h100-fp32) ;; *) preset=(--device h100) ;; esac ;;
    *H200*) case "$MATH" in bf16|fp16) preset=(--device h200-bf16) ;; fp32) preset=(--device h200-fp32) ;; *) preset=(--device h200) ;; esac ;;
  esac
fi
math=()
[ -n "$MATH" ] && math=(--math "$MATH")
tag="$MODEL-$SIZE${MATH:+-$MATH}"
graph="output/$MODEL-$SIZE.json"
mpi=(mpirun --oversubscribe)
# CPU ranks share the cores they compute on: a rank waiting for a message must yield its core
# instead of spinning on it (Open MPI busy-polls by default).
[ "$BACKEND" = cpu ] && mpi+=(--mca mpi_yield_when_idle 1)
"$HIOS" graph --model "$MODEL" --height "$SIZE" --width "$SIZE" -o "$graph"
"$HIOS" info "$graph"
echo
"$HIOS" schedule --graph "$graph" --algo sequential --gpus 1 "${preset[@]}" -o "output/$tag.sequential.json"
best1=
if [ "$ALGO" = hios-lp ] && [ "$BACKEND" = cpu ]; then
  ALGO=tuned
  "${mpi[@]}" -np "$GPUS" "$HIOS" tune --graph "$graph" --gpus "$GPUS" --backend cpu --threads 1 --node-iters 2 \
    --stage-iters 1 --stage-budget 10 --warmup 1 --passes 3 --timeout 600 -o "output/$tag.$ALGO.json"
elif [ "$ALGO" = hios-lp ]; then
  # The measured choice: every candidate (one GPU, all GPUs, row splits) timed on these GPUs.
  ALGO=tuned
  best1="output/$tag.best-one-gpu.json"
  "${mpi[@]}" -np "$GPUS" "$HIOS" tune --graph "$graph" --gpus "$GPUS" --backend "$BACKEND" "${math[@]}" \
    --profile-db "output/$tag.db.json" --profile-db-mismatch remeasure --timeout 600 -o "output/$tag.$ALGO.json" \
    --one-gpu-output "$best1"
else
  "$HIOS" schedule --graph "$graph" --algo "$ALGO" --gpus "$GPUS" "${preset[@]}" -o "output/$tag.$ALGO.json"
fi
"$HIOS" check --graph "$graph" --schedule "output/$tag.$ALGO.json"
echo

# run NAME SCHEDULE RANKS: one mpirun, --verify against the sequential run and the CPU reference
# (computed once per graph: --reference-cache).
run() {
  local out="output/run-$tag-$1-$BACKEND.json"
  "${mpi[@]}" -np "$3" "$HIOS" run --graph "$graph" --schedule "$2" --backend "$BACKEND" "${math[@]}" \
    "${TIMING[@]}" --verify --reference-cache output/references --timeout 600 -o "$out"
  echo
}
run sequential "output/$tag.sequential.json" 1
[ -n "$best1" ] && run best-one-gpu "$best1" 1
run "$ALGO-${GPUS}gpu" "output/$tag.$ALGO.json" "$GPUS"

python3 - "$tag" "$BACKEND" "$ALGO" "$GPUS" "${best1:+best-one-gpu}" <<'PY'
import json, sys
tag, backend, algo, gpus, best1 = sys.argv[1:6]
def load(name):
    return json.load(open(f"output/run-{tag}-{name}-{backend}.json"))
def med(r):
    return r["latency_ms"]["median"]
def ok(r):
    checks = r.get("verify") or []
    if not checks:
        return "not run"
    return ", ".join(f"{c['against']}: {'OK' if c['ok'] else 'FAILED'} (max_rel {c['diff']['max_rel']:.1e})" for c in checks)
seq, par = load("sequential"), load(f"{algo}-{gpus}gpu")
s, p = med(seq), med(par)
line = f"# summary: sequential 1 rank {s:.3f} ms (verify {ok(seq)}), "
if best1:
    one = load(best1)
    b = med(one)
    line += f"best one-GPU {b:.3f} ms (verify {ok(one)}), "
line += f"{algo} {gpus} ranks {p:.3f} ms (verify {ok(par)}), speed-up {s / p:.3f}x over sequential"
if best1:
    line += f", {b / p:.3f}x over the best one-GPU run"
print(line + " (medians)")
if backend == "cpu":
    print("# note: on CPU ranks the schedule was tuned for CPU ranks; these timings show the pipeline and its")
    print("# checks working, and say nothing about GPU schedules (see docs/benchmarks.md for those)")
PY
