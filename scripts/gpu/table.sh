#!/usr/bin/env bash
# The one-GPU table (hios against torch.compile, every model, size and precision) timed in one
# device call. torch.compile takes 15-95 s per model, size and variant, more than one call's ten
# minutes for the whole table, so the work comes in two phases, two calls on the same machine
# (a call that follows within the machine's idle time finds /tmp as the last one left it):
#
#   PHASE=warm   build, then compile every torch.compile variant of the table in parallel
#                processes, PAR at a time, into Inductor's on-disk caches (FX graphs, AOT
#                autograd, Triton kernels, in $TORCHINDUCTOR_CACHE_DIR). Nothing is timed for
#                the table; each compile's time is printed, then one warm recompile's.
#   PHASE=table  scripts/gpu/bench.sh: PyTorch (compiling from the warm caches) and hios, every
#                row of the table in this one call. Compile time is never part of a timing, so
#                a warm cache changes how long the call takes, not what it measures.
#
#   OUT=/some/dir PHASE=warm bash scripts/gpu.sh table; OUT=/some/dir PHASE=table bash scripts/gpu.sh table
#
# Environment: BUILD_DIR (/tmp/b), MODELS (inception_v3,nasnet_large), SIZES (331,512,1024,2048),
# MATH (tf32,bf16), PT_VARIANTS (compile-ro-cl,compile-ro-cl-bf16-pure: the strongest TF32 and
# bf16 variants of earlier calls), PAR (8), DEADLINE_S (560), PT_TIMEOUT_S (360).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/output/gpu-table}
B=${BUILD_DIR:-/tmp/b}
MODELS=${MODELS:-inception_v3,nasnet_large}
SIZES=${SIZES:-331,512,1024,2048}
PT_VARIANTS=${PT_VARIANTS:-compile-ro-cl,compile-ro-cl-bf16-pure}
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/hios-inductor}
export TORCHINDUCTOR_FX_GRAPH_CACHE=1 TORCHINDUCTOR_AUTOGRAD_CACHE=1
mkdir -p "$OUT"
t0=$(date +%s)
{ nvidia-smi --query-gpu=index,name,driver_version --format=csv; date -u +%FT%TZ; } >"$OUT/env.txt" 2>&1
source scripts/gpu/build.sh
gpu_build hios hios-gpu-bench

case "${PHASE:-table}" in
  warm)
    IFS=, read -r -a models <<<"$MODELS"
    IFS=, read -r -a sizes <<<"$SIZES"
    IFS=, read -r -a variants <<<"$PT_VARIANTS"
    jobs_run=0
    for m in "${models[@]}"; do
      for s in "${sizes[@]}"; do
        for v in "${variants[@]}"; do
          # One process per variant: the compiles are CPU work and run side by side.
          timeout "${WARM_TIMEOUT_S:-400}" python3 scripts/bench_pytorch.py --models "$m" --sizes "$s" --variants "$v" \
            --warmup 1 --iters 1 --json "$OUT/warm-$m-$s-$v.jsonl" >"$OUT/warm-$m-$s-$v.log" 2>&1 &
          jobs_run=$((jobs_run + 1))
          if [ $((jobs_run % ${PAR:-8})) -eq 0 ]; then wait; fi
        done
      done
    done
    wait
    echo "warm compiles done ($(( $(date +%s) - t0 )) s); compile_s per variant, cold:"
    cat "$OUT"/warm-*.jsonl 2>/dev/null | python3 <(cat <<'PY'
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    if r.get("variant", "").startswith("compile"):
        print("  %-14s %5d %-26s compile %6.1f s" % (r["model"], r["size"], r["variant"], r.get("compile_s", 0)))
PY
)
    grep -l "failed\|Error" "$OUT"/warm-*.log 2>/dev/null | head
    # One warm recompile, to know what the table call will spend per variant.
    last_m=${models[-1]}; last_s=${sizes[-1]}; last_v=${variants[-1]}
    python3 scripts/bench_pytorch.py --models "$last_m" --sizes "$last_s" --variants "$last_v" --warmup 1 --iters 1 \
      --json "$OUT/rewarm.jsonl" >"$OUT/rewarm.log" 2>&1
    echo "warm recompile $last_m $last_s $last_v: $(grep -o '"compile_s": [0-9.]*' "$OUT/rewarm.jsonl") ($(( $(date +%s) - t0 )) s)"
    du -sh "$TORCHINDUCTOR_CACHE_DIR" 2>/dev/null
    ;;
  table)
    MODELS=$MODELS SIZES=$SIZES MATH=${MATH:-tf32,bf16} LAYOUT=nhwc GPUS=1 PT_VARIANTS=$PT_VARIANTS \
      DEADLINE_S=${DEADLINE_S:-560} PT_TIMEOUT_S=${PT_TIMEOUT_S:-360} bash scripts/gpu/bench.sh "$B" "$OUT" | tail -40
    ;;
  *) echo "gpu.sh table: PHASE must be warm or table, not '${PHASE}'"; exit 2 ;;
esac
echo "total: $(( $(date +%s) - t0 )) s"
