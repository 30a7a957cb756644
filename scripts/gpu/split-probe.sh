#!/usr/bin/env bash
# One device call on two GPUs of one host: where a row split's time goes. Builds hios, then for
# inception_v3 at SIZE schedules the one-GPU and two-GPU hios-lp schedules and the forced 2-way
# splits in every mode (analytic costs), runs each under mpirun (CUDA Graphs), traces the
# splits' eager passes and sums each trace by kind of node (parts, input assemblies, halo cuts,
# whole nodes, transfers). The halo and mixed splits run twice: with their bands held in place
# (the default) and with `--rows-in-place off` (every rows node copies), in the same call.
# MODES picks the split modes (default: halo, halo-overlap, recompute and mixed; mixed-cost is mixed with
# its sync points where the halo is cheapest).
# Then it tunes the configurations named on the command line with a profile database each.
#
#   OUT=/some/dir MATH=tf32 bash scripts/gpu.sh split-probe [SIZE] [MODEL:SIZE:MATH ...]
#
# Environment: MATH (tf32), DEVICE (the analytic preset; hios schedule's default when unset),
# LEADS (receive leads also run per split, e.g. "0 2"), TRACE (0: no traces).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/output/gpu-split-probe}
B=${BUILD_DIR:-/tmp/b}
SIZE=${1:-2048}
MATH=${MATH:-tf32}
shift || true
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
{ nvidia-smi --query-gpu=index,name,driver_version --format=csv; git rev-parse --short HEAD; date -u +%FT%TZ; } \
  >"$OUT/env.txt" 2>&1
source scripts/gpu/build.sh
JOBS=${JOBS:-32} gpu_build hios
H=$B/cli/hios
W=$OUT/work
mkdir -p "$W"
g=$W/inc$SIZE.json
"$H" graph --model inception_v3 --height "$SIZE" --width "$SIZE" -o "$g" >/dev/null
DEV=(${DEVICE:+--device "$DEVICE"})
"$H" schedule --graph "$g" "${DEV[@]}" --algo hios-lp --gpus 1 -o "$W/lp1.json" >/dev/null
"$H" schedule --graph "$g" "${DEV[@]}" --algo hios-lp --gpus 2 --no-single-gpu-fallback -o "$W/lp2.json" >/dev/null
MODES=${MODES:-halo halo-overlap recompute mixed}
for mode in $MODES; do
  "$H" schedule --graph "$g" "${DEV[@]}" --algo hios-lp --gpus 2 --spatial 2 --spatial-mode "$mode" -o "$W/split-$mode.json" \
    >"$W/split-$mode.sched" 2>&1
  grep -E "spatial|predicted" "$W/split-$mode.sched" | head -3
done
run() {  # NAME SCHEDULE NP [extra]
  local name=$1 s=$2 np=$3
  shift 3
  timeout 150 mpirun -np "$np" "$H" run --graph "$g" --schedule "$s" --backend cuda --math "$MATH" --warmup 5 --number 10 \
    --repeat 7 --timeout 140 -o "$W/$name.run.json" "$@" >"$W/$name.log" 2>&1
  echo "$name rc=$?: $(grep -E '^# latency' "$W/$name.log")  $(grep -E 'peak' "$W/$name.log" | sed -E 's/.*(tensors)/\1/' | tr -s ' ' | tr '\n' ' ')"
}
run lp1 "$W/lp1.json" 1
run lp2 "$W/lp2.json" 2
# A receive lead (meta.recv_lead) gates receives and fences sends, so the memory plan can share
# received and sent tensors' memory (docs/executor.md); LEADS lists the leads tried per split.
with_lead() {  # SCHEDULE LEAD OUT
  python3 -c "import json, sys; s = json.load(open(sys.argv[1])); s['meta']['recv_lead'] = int(sys.argv[2]); json.dump(s, open(sys.argv[3], 'w'))" "$@"
}
for mode in $MODES; do
  run "split-$mode" "$W/split-$mode.json" 2
  [ "$mode" = halo ] && run "split-$mode-copies" "$W/split-$mode.json" 2 --rows-in-place off
  for lead in ${LEADS:-}; do
    with_lead "$W/split-$mode.json" "$lead" "$W/split-$mode-lead$lead.json"
    run "split-$mode-lead$lead" "$W/split-$mode-lead$lead.json" 2
  done
  [ "${TRACE:-1}" = 1 ] || continue
  timeout 150 mpirun -np 2 "$H" run --graph "$g" --schedule "$W/split-$mode.json" --backend cuda --math "$MATH" --warmup 3 \
    --number 1 --repeat 1 --trace "$W/split-$mode.trace.json" --timeout 140 -o none >"$W/split-$mode.trace.log" 2>&1
done
python3 - "$W" <<'PY' | tee "$OUT/trace-summary.txt"
import json, re, sys, glob, os
for f in sorted(glob.glob(os.path.join(sys.argv[1], "split-*.trace.json"))):
    try:
        ev = json.load(open(f))["traceEvents"]
    except Exception as e:
        print(f, "unreadable", e); continue
    kinds = {}
    span = {}
    for e in ev:
        if e.get("ph") != "X": continue
        name, pid, dur = e.get("name", ""), e.get("pid"), e.get("dur", 0) / 1000
        cat = e.get("cat", "")
        if cat == "stage": continue
        if cat == "transfer" or "bytes" in e.get("args", {}):
            k = "transfer"
        elif re.search(r"@\d+>\d+:", name): k = "halo cut"
        elif re.search(r"@\d+:\d+-\d+$", name): k = "assembly"
        elif re.search(r"@\d+$", name): k = "part"
        else: k = "whole"
        kinds.setdefault((pid, k), [0, 0.0])
        kinds[(pid, k)][0] += 1; kinds[(pid, k)][1] += dur
        s, t = e.get("ts", 0) / 1000, e.get("ts", 0) / 1000 + dur
        lo, hi = span.get(pid, (s, t)); span[pid] = (min(lo, s), max(hi, t))
    print(os.path.basename(f))
    for (pid, k), (n, ms) in sorted(kinds.items(), key=lambda x: (str(x[0][0]), x[0][1])):
        print(f"  pid {pid} {k:9s} {n:5d} spans {ms:9.3f} ms")
    for pid, (lo, hi) in span.items(): print(f"  pid {pid} pass span {hi - lo:.3f} ms")
PY
for spec in "$@"; do
  IFS=: read -r model size math <<<"$spec"
  name=$model-$size-$math
  gg=$W/$name.graph.json
  "$H" graph --model "$model" --height "$size" --width "$size" -o "$gg" >/dev/null || continue
  s0=$(date +%s)
  timeout 200 mpirun -np 2 "$H" tune --graph "$gg" --gpus 2 --backend cuda --math "$math" --profile-db "$W/$name.db.json" \
    -o "$W/$name.tuned.json" --timeout 190 >"$W/$name.tune.log" 2>&1
  echo "$name tune rc=$? $(( $(date +%s) - s0 )) s"
  sed -n '/^# candidate/,$p' "$W/$name.tune.log"
done
tar czf "$OUT/probe.tgz" -C "$W" . 2>/dev/null
ls -la "$OUT"
