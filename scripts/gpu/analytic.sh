#!/usr/bin/env bash
# One device call: what the analytic presets predict for the schedules they make, against what
# those schedules measure. For each MODEL:SIZE[:MATH], `hios schedule` (hios-lp on GPUS GPUs,
# --cost analytic with the preset of that math) writes the unsplit schedule and, with
# --spatial SPATIAL, the row split it would choose; each runs under `mpirun -np GPUS hios run`
# (cuda-ipc, the default on one host; median of 7 x 10 passes). The table is $OUT/table.md.
#   OUT=/some/dir bash scripts/gpu.sh analytic inception_v3:2048 inception_v3:2048:bf16 ...
# Environment: BUILD_DIR (/tmp/b), DEVICE (h200; bf16 runs use DEVICE-bf16), GPUS (2), SPATIAL
# (auto; a number P splits every region P ways, e.g. GPUS=1 SPATIAL=2: both parts of a split on
# one GPU, the node and stage model without transfers), SPLIT_BUDGET_S (the split search's
# --time-budget, 60).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/output/gpu-analytic-check}
B=${BUILD_DIR:-/tmp/b}
DEVICE=${DEVICE:-h200}
GPUS=${GPUS:-2}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
source scripts/gpu/build.sh
gpu_hios_and_env
echo "| configuration | schedule | preset | predicted ms | measured ms | error |" >"$OUT/table.md"
echo "|---|---|---|---:|---:|---:|" >>"$OUT/table.md"
for spec in "$@"; do
  IFS=: read -r model size math <<<"$spec"
  math=${math:-tf32}
  dev=$DEVICE; [ "$math" = bf16 ] && dev=$DEVICE-bf16
  name=$model-$size-$math
  g=$OUT/$name.graph.json
  "$H" graph --model "$model" --height "$size" --width "$size" -o "$g" >/dev/null || continue
  for kind in lp$GPUS split; do
    extra=(); [ $kind = split ] && extra=(--spatial "${SPATIAL:-auto}" --time-budget "${SPLIT_BUDGET_S:-60}")
    s=$OUT/$name.$kind.json
    timeout 300 "$H" schedule --graph "$g" --algo hios-lp --gpus "$GPUS" --cost analytic --device "$dev" "${extra[@]}" \
      -o "$s" >"$OUT/$name.$kind.schedule.log" 2>&1 || { echo "$name $kind: schedule failed"; continue; }
    timeout 150 mpirun -np "$GPUS" "$H" run --graph "$g" --schedule "$s" --backend cuda --math "$math" --warmup 5 \
      --number 10 --repeat 7 --timeout 140 -o none >"$OUT/$name.$kind.run.log" 2>&1
    python3 - "$s" "$OUT/$name.$kind.run.log" "$name" "$kind" "$dev" >>"$OUT/table.md" <<'PY'
import json, re, sys
s, log, name, kind, dev = sys.argv[1:]
meta = json.load(open(s))["meta"]
m = re.search(r"^# latency \(ms\):.*median ([0-9.]+)", open(log).read(), re.M)
regions = (meta.get("spatial") or {}).get("regions", [])
label = kind if kind.startswith("lp") else "split " + ", ".join(
    f"{r['blocks'][0]}..{r['blocks'][-1]} {r['parts']} ways, {r['mode']}" for r in regions) if regions else "split: none chosen"
if m:
    ms = float(m.group(1))
    print(f"| {name} | {label} | {dev} | {meta['predicted_ms']:.3f} | {ms:.3f} | {meta['predicted_ms'] / ms - 1:+.1%} |")
else:
    print(f"| {name} | {label} | {dev} | {meta['predicted_ms']:.3f} | run failed | |")
PY
    tail -n 1 "$OUT/table.md"
  done
done
