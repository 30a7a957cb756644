#!/usr/bin/env bash
# Scheduling-time benchmark (not a test): every algorithm on the big branchy models with the
# analytic cost model, one `hios schedule` run each, as a Markdown table. "search s" is the
# schedule's meta.search_seconds (steady clock, the search alone); "wall s" is the whole
# command (graph load, search, the sequential baseline, simulation and writing the file).
#
# Usage: scripts/bench-scheduler.sh [HIOS_BINARY]
#   env: MODELS (default "inception_v3 nasnet_large randwire"), SIZE (1024), GPUS (2),
#        DEVICE (h200), OUT (a scratch folder, default a fresh temporary one)
set -euo pipefail
HIOS=${1:-build/cli/hios}
MODELS=${MODELS:-"inception_v3 nasnet_large randwire"}
SIZE=${SIZE:-1024}
GPUS=${GPUS:-2}
DEVICE=${DEVICE:-h200}
OUT=${OUT:-$(mktemp -d)}
[ -x "$HIOS" ] || { echo "bench-scheduler: no hios binary at $HIOS (build first or pass its path)" >&2; exit 2; }
mkdir -p "$OUT"

# name|extra options: the defaults (w=4, k=4, IOS r=3 s=3), plus IOS with IOS's own default of
# up to 8 groups per stage to show how the DP scales with s.
CONFIGS=(
  "sequential|"
  "greedy|"
  "ios|"
  "ios|--ios-s 8 --streams 8"
  "hios-lp|"
  "hios-mr|"
  "heft|"
)

echo "# hios scheduler benchmark: $SIZE x $SIZE, batch 1, $GPUS GPUs, analytic $DEVICE"
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
echo
echo "| model | nodes | algorithm | options | search s | wall s | predicted ms | speed-up vs sequential |"
echo "|---|---:|---|---|---:|---:|---:|---:|"
for model in $MODELS; do
  graph="$OUT/$model-$SIZE.json"
  "$HIOS" graph --model "$model" --height "$SIZE" --width "$SIZE" -o "$graph" 2>/dev/null
  nodes=$("$HIOS" info "$graph" --json | grep -m1 '"nodes"' | tr -dc '0-9')
  for cfg in "${CONFIGS[@]}"; do
    algo=${cfg%%|*}
    extra=${cfg#*|}
    sched="$OUT/$model-$algo.json"
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086
    summary=$("$HIOS" schedule --graph "$graph" --algo "$algo" --gpus "$GPUS" --cost analytic --device "$DEVICE" \
      $extra -o "$sched")
    t1=$(date +%s.%N)
    search=$(echo "$summary" | awk '/search time/ {print $3}')
    predicted=$(echo "$summary" | awk '/predicted latency/ {print $3}')
    speedup=$(echo "$summary" | sed -n 's/.*speed-up \([0-9.]*\)x.*/\1/p')
    wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}')
    echo "| $model | $nodes | $algo | ${extra:--} | $search | $wall | $predicted | ${speedup}x |"
  done
done
