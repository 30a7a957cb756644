#!/usr/bin/env bash
# The GPU benchmark: hios against PyTorch on the same GPU in the same call, then the table.
#
#   scripts/gpu/bench.sh BUILD_DIR OUT_DIR
#
# Environment: MODELS (inception_v3,nasnet_large), SIZES (331,512,1024,2048), WARMUP (10),
# ITERS (30), GPUS (2: also the two-GPU hios-lp rows when two GPUs are visible), STREAMS (4),
# DEADLINE_S (420: no new run starts after this many seconds), PT_TIMEOUT_S (DEADLINE_S / 2: the
# most bench_pytorch.py may take), PROFILE (0: passes of the
# per-node profile printed to bench.log for each configuration), LAYOUT (both: hios rows with
# NCHW and NHWC activations; nchw or nhwc for one), MATH (tf32: hios's math modes, a comma-separated
# list of tf32, fp32, fp16, bf16; the table pairs each with PyTorch's rows of the same precision),
# RELU_FOLD (on: hios-gpu-bench --relu-fold; "both" adds rows ending in -unfolded).
# Writes OUT_DIR/bench.jsonl (one JSON object per row, both stacks), OUT_DIR/bench.log and
# OUT_DIR/bench-table.txt (nccl-tests-style), and prints the table last.
set -uo pipefail
BUILD=${1:?usage: gpu/bench.sh BUILD_DIR OUT_DIR}
OUTDIR=${2:?usage: gpu/bench.sh BUILD_DIR OUT_DIR}
MODELS=${MODELS:-inception_v3,nasnet_large}
SIZES=${SIZES:-331,512,1024,2048}
WARMUP=${WARMUP:-10}
ITERS=${ITERS:-30}
GPUS=${GPUS:-2}
STREAMS=${STREAMS:-4}
DEADLINE_S=${DEADLINE_S:-420}
PROFILE=${PROFILE:-0}
LAYOUT=${LAYOUT:-both}
MATH=${MATH:-tf32}
RELU_FOLD=${RELU_FOLD:-on}
# PyTorch variants (bench_pytorch.py --variants). Each torch.compile takes 17-65 s and
# max-autotune minutes per shape, so the default keeps the two strongest reduce-overhead ones.
PT_VARIANTS=${PT_VARIANTS:-eager,cuda-graph,compile-ro-cl,compile-ro-cl-bf16}
HERE=$(cd "$(dirname "$0")/.." && pwd)  # scripts/
BENCH="$BUILD/bench/hios-gpu-bench"
export NCCL_NVLS_ENABLE=0  # never NVLink multicast

mkdir -p "$OUTDIR"
JSON="$OUTDIR/bench.jsonl"
LOG="$OUTDIR/bench.log"
: >"$JSON"
: >"$LOG"
t0=$(date +%s)
late() { [ $(( $(date +%s) - t0 )) -ge "$DEADLINE_S" ]; }

[ -x "$BENCH" ] || { echo "gpu/bench.sh: $BENCH not built" | tee -a "$LOG"; exit 2; }
echo "# $(date -u +%FT%TZ) models=$MODELS sizes=$SIZES warmup=$WARMUP iters=$ITERS gpus=$GPUS streams=$STREAMS" >>"$LOG"

# PyTorch first, every configuration in one process (its imports take seconds).
echo "# python3 scripts/bench_pytorch.py --models $MODELS --sizes $SIZES" >>"$LOG"
timeout "${PT_TIMEOUT_S:-$(( DEADLINE_S / 2 ))}" python3 "$HERE/bench_pytorch.py" --models "$MODELS" --sizes "$SIZES" \
  --warmup "$WARMUP" --iters "$ITERS" --variants "$PT_VARIANTS" --json "$JSON" >>"$LOG" 2>&1 ||
  echo "# bench_pytorch.py failed or timed out (exit $?)" | tee -a "$LOG"

IFS=, read -r -a models <<<"$MODELS"
IFS=, read -r -a sizes <<<"$SIZES"
for m in "${models[@]}"; do
  for s in "${sizes[@]}"; do
    if late; then
      echo "# deadline: skipping hios $m $s" | tee -a "$LOG"
      continue
    fi
    args=(--model "$m" --size "$s" --warmup "$WARMUP" --iters "$ITERS" --algo hios-lp --gpus "$GPUS"
          --streams "$STREAMS" --layout "$LAYOUT" --math "$MATH" --relu-fold "$RELU_FOLD" --json "$JSON")
    [ "$PROFILE" -gt 0 ] && args+=(--profile "$PROFILE" --summary)
    echo "# $BENCH ${args[*]}" >>"$LOG"
    timeout 240 "$BENCH" "${args[@]}" >>"$LOG" 2>&1 || echo "# hios-gpu-bench $m $s failed (exit $?)" | tee -a "$LOG"
  done
done

python3 "$HERE/bench_pytorch.py" --report "$JSON" >"$OUTDIR/bench-table.txt" 2>&1
cat "$OUTDIR/bench-table.txt"
