#!/usr/bin/env bash
# Real mpirun jobs through the hios binary with the CPU backend: parallel outputs must equal the
# sequential run exactly, and failures must end the whole job quickly with one line naming the
# rank and host. Usage: test_mpi_run.sh HIOS MPIRUN SCENARIO (demo | inception | randwire | rowsplit | segmentation | failure)
set -u
HIOS=$1
MPIRUN=$2
SCENARIO=$3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# Open MPI refuses to run as root (CI containers) unless told twice.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Two CPU cores on CI: one OpenMP thread per rank, and oversubscription for 3 ranks.
MPI=("$MPIRUN" --oversubscribe)
FAST=(--backend cpu --threads 1 --warmup 1 --number 1 --repeat 2)
fails=0
total_sends=0  # over the scenario: the jobs must have moved tensors between ranks

fail() {
  echo "FAIL: $*"
  fails=$((fails + 1))
}

# graph NAME MODEL SIZE
graph() {
  "$HIOS" graph --model "$2" --height "$3" --width "$3" -o "$TMP/$1.json" >/dev/null 2>"$TMP/err" ||
    { fail "hios graph $2 $3"; cat "$TMP/err"; }
}

# schedule NAME ALGO GPUS -> $TMP/NAME.ALGO.GPUS.json
schedule() {
  "$HIOS" schedule --graph "$TMP/$1.json" --algo "$2" --gpus "$3" --no-single-gpu-fallback -o "$TMP/$1.$2.$3.json" >/dev/null 2>"$TMP/err" ||
    fail "hios schedule $1 $2 --gpus $3"
}

# run_ok NAME ALGO GPUS [extra run options]: mpirun -np GPUS ... --verify must pass, with the
# parallel output equal to the sequential one (max_abs 0) and the JSON results written.
run_ok() {
  local name=$1 algo=$2 gpus=$3
  shift 3
  local out="$TMP/run.$name.$algo.$gpus.json"
  "${MPI[@]}" -np "$gpus" "$HIOS" run --graph "$TMP/$name.json" --schedule "$TMP/$name.$algo.$gpus.json" \
    "${FAST[@]}" --verify -o "$out" "$@" >"$TMP/stdout" 2>"$TMP/stderr"
  local rc=$?
  if [ $rc -ne 0 ]; then
    fail "$name $algo on $gpus ranks: exit $rc"
    sed 's/^/    /' "$TMP/stderr" | head -20
    return
  fi
  grep -q '^# correctness: OK' "$TMP/stdout" || fail "$name $algo on $gpus ranks: no '# correctness: OK'"
  grep -qE '^# verify vs sequential cpu run +max_abs 0\.000e\+00' "$TMP/stdout" ||
    fail "$name $algo on $gpus ranks: output differs from the sequential run"
  [ "$(grep -c '^#  Rank' "$TMP/stdout")" -eq "$gpus" ] || fail "$name $algo on $gpus ranks: not one line per rank"
  grep -q '"ok": true' "$out" 2>/dev/null || fail "$name $algo on $gpus ranks: results JSON missing or not ok"
  local sends
  sends=$(sed -n 's/^#  Rank.* sends *\([0-9]*\) .*/\1/p' "$TMP/stdout" | awk '{s += $1} END {print s + 0}')
  total_sends=$((total_sends + sends))
  echo "ok: $name $algo on $gpus ranks ($sends tensors sent)"
}

# run_fails NAME ALGO GPUS PATTERN MAX_SECONDS [options]: exits non-zero within MAX_SECONDS
# with a stderr line 'hios: error: ...' matching PATTERN.
run_fails() {
  local name=$1 algo=$2 gpus=$3 pattern=$4 limit=$5
  shift 5
  local start end rc
  start=$(date +%s)
  timeout 120 "${MPI[@]}" -np "$gpus" "$HIOS" run --graph "$TMP/$name.json" \
    --schedule "$TMP/$name.$algo.2.json" "${FAST[@]}" -o none "$@" >"$TMP/stdout" 2>"$TMP/stderr"
  rc=$?
  end=$(date +%s)
  if [ $rc -eq 0 ]; then
    fail "$* on $gpus ranks: exit 0, expected a failure"
    sed 's/^/    /' "$TMP/stderr" | head -10
    sed 's/^/    /' "$TMP/stdout" | head -10
  elif ! grep -E '^hios: error: ' "$TMP/stderr" | grep -qE "$pattern"; then
    fail "$* on $gpus ranks: no 'hios: error:' line matching /$pattern/:"
    sed 's/^/    /' "$TMP/stderr" | head -10
  elif [ $((end - start)) -gt "$limit" ]; then
    fail "$* on $gpus ranks: took $((end - start)) s, more than $limit s"
  else
    echo "ok: fails as expected in $((end - start)) s: $(grep -E '^hios: error: ' "$TMP/stderr" | head -1)"
  fi
}

# The pid of rank 1 of the demo job just started, found by its environment once it runs (up to
# 10 s); empty when it never started.
rank1_pid() {
  local p
  for _ in $(seq 1 100); do
    for p in $(pgrep -f "$HIOS run --graph $TMP/demo.json" || true); do
      if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1"; then echo "$p"; return; fi
    done
    sleep 0.1
  done
}

# Starts the demo job on 2 ranks with endless timed passes (and any extra options), sends
# signal SIG to rank 1 once the passes run, and waits at most 40 s for the job to end. Sets
# victim (empty when rank 1 never started), rc and took (seconds from the signal to the end).
signal_rank1() {
  local sig=$1 err=$2 job guard start
  shift 2
  "${MPI[@]}" -np 2 "$HIOS" run --graph "$TMP/demo.json" --schedule "$TMP/demo.hios-lp.2.json" --backend cpu \
    --threads 1 --warmup 1 --number 1 --repeat 100000 "$@" -o none >/dev/null 2>"$err" &
  job=$!
  victim=$(rank1_pid)
  if [ -z "$victim" ]; then
    kill "$job" 2>/dev/null
    return
  fi
  sleep 1.5  # into the timed passes
  kill -"$sig" "$victim"
  start=$(date +%s)
  ( sleep 40; kill -KILL "$job" 2>/dev/null; kill -CONT "$victim" 2>/dev/null ) &
  guard=$!
  wait "$job"
  rc=$?
  took=$(($(date +%s) - start))
  kill -CONT "$victim" 2>/dev/null
  kill "$guard" 2>/dev/null
}

# signal_ends_job NAME MAX_S PATTERN SIG [run options]: rank 1 gets SIG during the timed passes;
# the job must fail within MAX_S seconds with a line matching PATTERN (VICTIM: rank 1's pid).
signal_ends_job() {
  local name=$1 max=$2 pattern=$3 sig=$4 err="$TMP/signal.err"
  shift 4
  signal_rank1 "$sig" "$err" "$@"
  if [ -z "$victim" ]; then
    fail "$name: rank 1 never started"
    return
  fi
  [ "$rc" -ne 0 ] || fail "$name: the job exited 0"
  [ "$took" -le "$max" ] || fail "$name: the job took $took s to end (at most $max s wanted)"
  grep -qE "${pattern//VICTIM/$victim}" "$err" || { fail "$name: no line matching /$pattern/"; cat "$err"; }
}

case "$SCENARIO" in
  demo)
    graph demo demo 15
    for a in hios-lp heft; do
      schedule demo $a 2
      schedule demo $a 3
      run_ok demo $a 2 --verify-nodes
      grep -q ', memory separate,' "$TMP/stdout" || fail "demo $a: --verify-nodes did not run with separate buffers"
      run_ok demo $a 3 --verify-nodes
    done
    # The default shares one arena per rank; --memory separate gives each tensor its own buffer.
    run_ok demo heft 2
    grep -q ', memory shared,' "$TMP/stdout" || fail "demo heft: the default run did not share memory"
    run_ok demo heft 2 --memory separate
    grep -q ', memory separate,' "$TMP/stdout" || fail "demo heft: --memory separate was not honoured"
    # Without mpirun: one process, a one-GPU schedule.
    schedule demo hios-lp 1
    "$HIOS" run --graph "$TMP/demo.json" --schedule "$TMP/demo.hios-lp.1.json" "${FAST[@]}" --verify -o none \
      >"$TMP/stdout" 2>"$TMP/stderr" && grep -q '^# correctness: OK' "$TMP/stdout" ||
      fail "one process without mpirun: $(cat "$TMP/stderr")"
    # An input from a .npy file: every rank runs on it (--verify-nodes compares every node
    # against the reference on the same input) and the output written is the one-process run's.
    python3 -c "import struct,sys; n=375*15*15; h=\"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 375, 15, 15), }\"; h+=' '*((64-(11+len(h))%64)%64)+'\\n'; open(sys.argv[1],'wb').write(b'\\x93NUMPY\\x01\\x00'+struct.pack('<H',len(h))+h.encode()+struct.pack('<%df'%n,*[((k*29)%53)/26.0-1 for k in range(n)]))" "$TMP/in.npy"
    "$HIOS" run --graph "$TMP/demo.json" --schedule "$TMP/demo.hios-lp.1.json" "${FAST[@]}" --input "$TMP/in.npy" \
      --save-output "$TMP/out1.npy" -o none >"$TMP/stdout" 2>"$TMP/stderr" || fail "--input on one process: $(cat "$TMP/stderr")"
    run_ok demo hios-lp 2 --verify-nodes --input "$TMP/in.npy" --save-output "$TMP/out2.npy"
    cmp -s "$TMP/out1.npy" "$TMP/out2.npy" || fail "--save-output of 2 ranks differs from one process's on the same input"
    ;;
  inception)
    graph inception inception_v3 75
    for a in hios-lp heft; do
      for n in 2 3; do
        schedule inception $a $n
        run_ok inception $a $n
      done
    done
    ;;
  randwire)
    graph randwire randwire_small 64
    for a in hios-lp heft; do
      for n in 2 3; do
        schedule randwire $a $n
        run_ok randwire $a $n --verify-nodes
      done
    done
    # Receive lead 0: receives gated by stage, sends fenced where the receiver has consumed them,
    # and the shared memory plan reusing both (MPI completes the fenced non-blocking sends first).
    for n in 2 3; do
      python3 -c 'import json, sys; s = json.load(open(sys.argv[1])); s["meta"]["recv_lead"] = 0; json.dump(s, open(sys.argv[2], "w"))' \
        "$TMP/randwire.hios-lp.$n.json" "$TMP/randwire.lead0.$n.json"
      run_ok randwire lead0 $n
      "$HIOS" lower --graph "$TMP/randwire.json" --schedule "$TMP/randwire.lead0.$n.json" --all >"$TMP/lower.out" 2>&1 ||
        fail "hios lower of the lead-0 schedule"
    done
    ;;
  rowsplit)
    # Row splits: every split schedule equals the sequential run bit for bit (run_ok
    # asks for max_abs 0; the reference is the split graph run on one rank, so this holds for the
    # partial global pools too), and a bad split is refused before anything launches. At 107 the
    # last blocks have two rows: a 2-way split reaches the global pool, a 3-way one stops before.
    graph inc inception_v3 107
    split() {  # split NAME PARTS MODE GPUS -> $TMP/inc.NAME.GPUS.json
      "$HIOS" schedule --graph "$TMP/inc.json" --gpus "$4" --spatial "$2" --spatial-mode "$3" \
        --no-single-gpu-fallback -o "$TMP/inc.$1.$4.json" >"$TMP/sched.out" 2>"$TMP/err" ||
        { fail "hios schedule --spatial $2 --spatial-mode $3: $(cat "$TMP/err")"; return; }
      grep -q "spatial: rows of Conv2d_1a_3x3 .. .* split $2 ways" "$TMP/sched.out" ||
        fail "--spatial $2: no split reported: $(cat "$TMP/sched.out")"
    }
    split halo2 2 halo 2
    grep -q "split 2 ways, summing partial pools at avgpool" "$TMP/sched.out" ||
      fail "--spatial 2 does not reach the global pool: $(cat "$TMP/sched.out")"
    run_ok inc halo2 2
    split recompute3 3 recompute 3
    run_ok inc recompute3 3
    split halo3 3 halo 2  # three parts on two ranks: two parts share a GPU's streams
    run_ok inc halo3 2
    # Overlapped halos, measured: a halo-overlap split whose parts sit on two ranks (the v100
    # preset makes the second GPU pay at this size), traced. On each rank a halo is cut from its
    # part's edge and sent, and before the neighbour's halo of the same layer has arrived the rank
    # computes middle rows: the exchange overlaps interior rows. Counted over the layers whose
    # sending part has a middle; where a middle's inputs need that very halo nothing can overlap,
    # so at least three in four, not all (hoisting the edges ahead of the middles makes 33 of 40
    # at this size; the search's own order alone, 16).
    "$HIOS" schedule --graph "$TMP/inc.json" --gpus 2 --spatial 2 --spatial-mode halo-overlap --device v100 \
      --no-single-gpu-fallback -o "$TMP/inc.overlap2.2.json" >"$TMP/sched.out" 2>"$TMP/err" ||
      fail "hios schedule --spatial-mode halo-overlap: $(cat "$TMP/err")"
    run_ok inc overlap2 2 --trace "$TMP/overlap.trace.json"
    python3 - "$TMP/overlap.trace.json" >"$TMP/overlap.out" 2>&1 <<'PY'
import json, re, sys
events = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e["ph"] == "X"]
nodes = [e for e in events if e["cat"] == "node"]
recvs = [e for e in events if e["cat"] == "transfer"]
cut = re.compile(r"^(.*)@(\d+)>(\d+):")  # a halo cut "X@k>j:a-b", sent from part k to part j
ranks = {n["pid"] for n in nodes if "@" in n["name"]}
assert ranks == {0, 1}, f"the parts should sit on ranks 0 and 1, not {sorted(ranks)}"
exchanges = overlapped = 0
for c in nodes:
    m = cut.match(c["name"])
    if not m:
        continue
    layer, part, rank = m.group(1), m.group(2), c["pid"]
    if not any(n["pid"] == rank and n["name"] == f"{layer}@{part}/mid" for n in nodes):
        continue
    sent = c["ts"] + c["dur"]
    back = [r["ts"] + r["dur"] for r in recvs
            if r["args"]["dst"] == rank and cut.match(r["name"]) and cut.match(r["name"]).group(1) == layer]
    if not back:
        continue
    exchanges += 1
    arrived = max(back)
    overlapped += any(n["pid"] == rank and n["name"].endswith("/mid") and sent <= n["ts"] < arrived for n in nodes)
print(f"{overlapped} of {exchanges} halo exchanges overlap middle rows")
assert exchanges >= 20 and 4 * overlapped >= 3 * exchanges
PY
    if [ $? -eq 0 ]; then echo "ok: $(cat "$TMP/overlap.out")"; else fail "halo exchange and middle rows: $(cat "$TMP/overlap.out")"; fi
    "$HIOS" check --graph "$TMP/inc.json" --schedule "$TMP/inc.halo2.2.json" >"$TMP/check.out" 2>&1 ||
      fail "hios check of a split schedule: $(cat "$TMP/check.out")"
    grep -q "halo cuts.*, 1 sums of partial pools" "$TMP/check.out" ||
      fail "hios check does not describe the split: $(cat "$TMP/check.out")"
    "$HIOS" lower --graph "$TMP/inc.json" --schedule "$TMP/inc.halo2.2.json" --rank 1 >"$TMP/lower.out" 2>&1 &&
      grep -q '^alloc .*@[0-9]' "$TMP/lower.out" || fail "hios lower does not show the parts"
    "$HIOS" dot "$TMP/inc.json" --schedule "$TMP/inc.halo2.2.json" -o "$TMP/split.dot" 2>"$TMP/err" &&
      grep -q '>0:' "$TMP/split.dot" || fail "hios dot --schedule does not show the halo cuts: $(cat "$TMP/err")"
    # Bad splits: rows computed twice, a recompute overlap too small for a window, and partial
    # global pools that sum a row twice.
    python3 - "$TMP/inc.halo2.2.json" "$TMP/bad-overlap.json" "$TMP/inc.recompute3.3.json" "$TMP/bad-halo.json" \
      "$TMP/bad-sum.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s["meta"]["spatial"]["regions"][0]["rows"]["Conv2d_2b_3x3"][1][0] -= 2
json.dump(s, open(sys.argv[2], "w"))
s = json.load(open(sys.argv[1]))
s["meta"]["spatial"]["regions"][0]["rows"]["avgpool"][1][0] -= 1
json.dump(s, open(sys.argv[5], "w"))
s = json.load(open(sys.argv[3]))
s["meta"]["spatial"]["regions"][0]["rows"]["Conv2d_2a_3x3"][1][0] += 1
json.dump(s, open(sys.argv[4], "w"))
PY
    refused() {  # refused FILE GPUS WHAT: check and run both exit non-zero with one line naming WHAT
      "$HIOS" check --graph "$TMP/inc.json" --schedule "$1" >"$TMP/out" 2>"$TMP/err"
      local rc=$?
      [ $rc -eq 2 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -q "$3" "$TMP/err" ||
        fail "hios check $1: rc $rc, wanted one line naming '$3': $(cat "$TMP/err")"
      "${MPI[@]}" -np "$2" "$HIOS" run --graph "$TMP/inc.json" --schedule "$1" "${FAST[@]}" -o none \
        >"$TMP/out" 2>"$TMP/err"
      rc=$?
      [ $rc -ne 0 ] && grep -q "$3" "$TMP/err" && ! grep -q '^#  Rank' "$TMP/out" ||
        fail "hios run $1: rc $rc, wanted a refusal naming '$3' before any pass: $(head -3 "$TMP/err")"
    }
    refused "$TMP/bad-overlap.json" 2 "rows 2[0-9]*-2[0-9]* of node 'Conv2d_2b_3x3' are computed by parts 0 and 1"
    refused "$TMP/bad-sum.json" 2 "rows 0-1 of the input of node 'avgpool' are summed by parts 0 and 1"
    refused "$TMP/bad-halo.json" 3 "of node 'Conv2d_2b_3x3' reads rows .* of 'Conv2d_2a_3x3', but that part computes rows .* (halo too small)"
    echo "ok: bad split schedules refused by check and run"
    ;;
  failure)
    graph demo demo 15
    schedule demo hios-lp 2
    run_fails demo hios-lp 2 'rank 1 on host .*injected failure' 20 --inject-failure 1:run
    run_fails demo hios-lp 2 'rank 0 on host .*injected failure' 20 --inject-failure 0:prepare
    HIOS_INJECT_FAILURE=1:verify run_fails demo hios-lp 2 'rank 1 on host .*injected failure' 20 --verify
    # A rank that hangs: the --timeout watchdog ends the whole job.
    # Every rank's limit ran out alike, so rank 0 says it once, naming the files where each rank
    # left its main thread's call stack (the hung rank's names where it was stuck).
    TMPDIR=$TMP run_fails demo hios-lp 2 'rank 0 on host .*timed out after 3 s.*every rank.s limit; 2 ranks' 20 --inject-failure 1:hang --timeout 3
    [ "$(grep -c '^hios' "$TMP/stderr")" -eq 1 ] || fail "a shared --timeout printed $(grep -c '^hios' "$TMP/stderr") hios lines: $(grep '^hios' "$TMP/stderr" | head -3)"
    stacks=$(grep -o "call stacks: [^)]*" "$TMP/stderr" | sed 's/call stacks: //; s/\*\.txt$//')
    { [ -n "$stacks" ] && grep -q "^hios: the rank's main thread was here:" "${stacks}1.txt" &&
      grep -q "run_schedule" "${stacks}1.txt" && grep -q "run_schedule" "${stacks}0.txt"; } ||
      fail "a timed-out job left no named call stacks at '${stacks}*.txt': $(grep '^hios' "$TMP/stderr" | head -2)"
    run_fails demo hios-lp 3 'is for 2 GPU\(s\) but the job has 3 rank' 20
    run_fails demo hios-lp 2 "out of memory .*tensor 'input'.*337500 bytes" 20 --memory-limit 200000
    run_fails demo hios-lp 2 "mpi-cuda-aware|unknown transport" 20 --transport mpi-cuda-aware
    # A rank stopped with SIGSTOP, no --timeout: the stall watchdog (here 3 s) of the rank left
    # waiting ends the whole job with one line naming it and the phase.
    signal_ends_job stall 20 "rank 0 on host .*no pass finished for [0-9]+ s during timed runs" STOP --stall-timeout 3
    # The same without --stall-timeout: the automatic limit (max(10 s, 50x the slowest pass),
    # passes of milliseconds here) ends the job within a minute, naming the stopped rank.
    signal_ends_job "automatic stall" 35 \
      "rank 0 on host .*no pass finished for [0-9]+ s during timed runs \(stall limit [0-9]+ s\): rank 1 \(pid VICTIM on this host\) is stopped" STOP
    # A rank killed (SIGKILL) during the passes: its peer says which rank died, and in which
    # phase, before mpirun's own notice; the job ends at once.
    signal_ends_job "dead rank" 20 "rank 0 on host .*: rank 1 \(pid VICTIM on this host\) died during timed runs" KILL
    # Errors every rank shares are printed once, by rank 0, and the ranks end together: a
    # result path rank 0 cannot write (checked before the run) and a bad option value.
    one_error() {  # one_error NAME PATTERN [run options, -o included]
      local name=$1 pattern=$2
      shift 2
      timeout 120 "${MPI[@]}" -np 2 "$HIOS" run --graph "$TMP/demo.json" --schedule "$TMP/demo.hios-lp.2.json" \
        "${FAST[@]}" "$@" >"$TMP/stdout" 2>"$TMP/stderr"
      local rc=$? lines
      lines=$(grep -c '^hios' "$TMP/stderr")
      if [ $rc -eq 0 ] || [ "$lines" -ne 1 ] || ! grep '^hios' "$TMP/stderr" | grep -qE -e "$pattern" ||
         grep -q "SIGTERM" "$TMP/stderr"; then
        fail "$name: rc $rc, $lines hios lines, wanted one matching /$pattern/:"
        sed 's/^/    /' "$TMP/stderr" | head -10
      else
        echo "ok: $name: $(grep '^hios' "$TMP/stderr")"
      fi
    }
    mkdir -p "$TMP/a-folder"
    ln -sf loop-b "$TMP/loop-a"
    ln -sf loop-a "$TMP/loop-b"
    one_error "--trace onto a folder" "a-folder: is a directory" -o none --trace "$TMP/a-folder"
    one_error "--trace into a symlink loop" "loop-a: is a symlink loop" -o none --trace "$TMP/loop-a"
    one_error "--trace into a missing folder" "cannot write: folder .*/nope: No such file" -o none --trace "$TMP/nope/t.json"
    one_error "-o onto a folder" "a-folder: is a directory" -o "$TMP/a-folder"
    # --save-output onto a folder writes every result into it, NAME.npy each.
    timeout 120 "${MPI[@]}" -np 2 "$HIOS" run --graph "$TMP/demo.json" --schedule "$TMP/demo.hios-lp.2.json" \
      "${FAST[@]}" -o none --save-output "$TMP/a-folder" >"$TMP/stdout" 2>"$TMP/stderr"
    if [ -s "$TMP/a-folder/b2.out.npy" ]; then echo "ok: --save-output onto a folder writes b2.out.npy there"; else
      echo "FAIL: --save-output onto a folder wrote no b2.out.npy: $(tail -1 "$TMP/stderr")"; fails=$((fails + 1)); fi
    one_error "--save-output of a missing result" "has no result 'nope'" -o none --save-output "nope=$TMP/x.npy"
    one_error "a 10,000-digit --timeout" "--timeout: '1111.*\(10000 characters\) is not a number" -o none --timeout "$(printf '1%.0s' $(seq 1 10000))"
    one_error "a hexadecimal --seed" "--seed: '0x10' is not a decimal integer" -o none --seed 0x10
    # A graph file every rank fails to read: one line from rank 0, and no rank killed.
    timeout 120 "${MPI[@]}" -np 2 "$HIOS" run --graph "$TMP/missing.json" --schedule "$TMP/demo.hios-lp.2.json" \
      "${FAST[@]}" -o none >"$TMP/stdout" 2>"$TMP/stderr"
    rc=$?
    if [ $rc -eq 0 ] || [ "$(grep -c '^hios' "$TMP/stderr")" -ne 1 ] ||
       ! grep -q "^hios: error: .*missing.json: cannot open" "$TMP/stderr" || grep -q "SIGTERM\|MPI_ABORT" "$TMP/stderr"; then
      fail "a missing graph on two ranks: rc $rc: $(head -4 "$TMP/stderr")"
    else
      echo "ok: a missing graph on two ranks: $(grep '^hios' "$TMP/stderr")"
    fi
    # hios tune the same: a missing graph, and a job of another size than --gpus, on three ranks.
    for why in "missing.json: cannot open" "--gpus 2 but the job has 3 rank"; do
      graph_file=$TMP/demo.json
      [ "$why" = "missing.json: cannot open" ] && graph_file=$TMP/missing.json
      timeout 120 "${MPI[@]}" -np 3 "$HIOS" tune --graph "$graph_file" --gpus 2 --backend cpu -o "$TMP/t.json" -q \
        >"$TMP/stdout" 2>"$TMP/stderr"
      rc=$?
      if [ $rc -ne 2 ] || [ "$(grep -c '^hios' "$TMP/stderr")" -ne 1 ] || ! grep -q -e "^hios: error: .*$why" "$TMP/stderr" ||
         grep -q "SIGTERM\|MPI_ABORT" "$TMP/stderr" || [ -e "$TMP/t.json" ]; then
        fail "hios tune on three ranks, $why: rc $rc: $(head -4 "$TMP/stderr")"
      else
        echo "ok: hios tune on three ranks: $(grep '^hios' "$TMP/stderr")"
      fi
    done
    ;;
  segmentation)
    # The toolkit on a segmentation network: a small U-Net of transposed convolutions, resizes
    # and a skip (tests/data/row-split-unet.json). Every algorithm on one and two ranks, row
    # splits through the decoder, the lowering, a tune on CPU ranks and a short serving run,
    # every parallel output equal to the sequential one bit for bit.
    cp "$(dirname "$0")/../data/row-split-unet.json" "$TMP/unet.json"
    "$HIOS" validate "$TMP/unet.json" >"$TMP/out" 2>&1 || fail "hios validate: $(tail -1 "$TMP/out")"
    "$HIOS" info "$TMP/unet.json" >"$TMP/out" 2>&1 && grep -q "nodes  *12 in 4 blocks" "$TMP/out" ||
      fail "hios info: $(head -3 "$TMP/out")"
    "$HIOS" dot "$TMP/unet.json" -o "$TMP/unet.dot" >/dev/null 2>&1 && grep -q "deconv" "$TMP/unet.dot" || fail "hios dot"
    for algo in sequential greedy ios hios-lp hios-mr heft; do
      for gpus in 1 2; do
        [ "$algo" = sequential ] && [ $gpus = 2 ] && continue
        "$HIOS" schedule --graph "$TMP/unet.json" --algo "$algo" --gpus $gpus -o "$TMP/unet.$algo.$gpus.json" \
          >/dev/null 2>"$TMP/err" || { fail "hios schedule --algo $algo --gpus $gpus: $(cat "$TMP/err")"; continue; }
        "$HIOS" check --graph "$TMP/unet.json" --schedule "$TMP/unet.$algo.$gpus.json" >/dev/null 2>"$TMP/err" ||
          fail "hios check $algo $gpus: $(cat "$TMP/err")"
        run_ok unet "$algo" $gpus
      done
    done
    for spec in "2 halo 2" "3 recompute 2" "2 mixed 2"; do
      read -r parts mode gpus <<<"$spec"
      "$HIOS" schedule --graph "$TMP/unet.json" --gpus "$gpus" --spatial "$parts" --spatial-mode "$mode" \
        --no-single-gpu-fallback -o "$TMP/unet.split$parts$mode.$gpus.json" >"$TMP/sched.out" 2>"$TMP/err" ||
        { fail "hios schedule --spatial $parts --spatial-mode $mode: $(cat "$TMP/err")"; continue; }
      grep -q "spatial: rows of enc .. up2 split $parts ways" "$TMP/sched.out" ||
        fail "--spatial $parts $mode: the split does not run through the decoder: $(grep spatial "$TMP/sched.out")"
      "$HIOS" check --graph "$TMP/unet.json" --schedule "$TMP/unet.split$parts$mode.$gpus.json" >"$TMP/out" 2>&1 ||
        fail "hios check of the $mode split: $(tail -1 "$TMP/out")"
      run_ok unet "split$parts$mode" "$gpus"
    done
    "$HIOS" lower --graph "$TMP/unet.json" --schedule "$TMP/unet.split2halo.2.json" >"$TMP/out" 2>&1 &&
      grep -q "deconv@1" "$TMP/out" || fail "hios lower of the split: $(tail -1 "$TMP/out")"
    if "${MPI[@]}" -np 2 "$HIOS" tune --graph "$TMP/unet.json" --gpus 2 --backend cpu --threads 1 --warmup 1 --passes 3 \
      --node-iters 2 --stage-iters 2 --link-iters 3 --timeout 240 -q -o "$TMP/unet.tuned.2.json" >"$TMP/out" 2>&1; then
      run_ok unet tuned 2
    else
      fail "mpirun hios tune: $(grep -m1 error "$TMP/out")"
    fi
    "$HIOS" serve --models "$TMP/unet.json" --size 21 --duration 0.2 --loads 0.3 --batches 1,2 --policy fifo,adaptive \
      -o "$TMP/serve.json" >"$TMP/out" 2>&1 && grep -q '"policy"' "$TMP/serve.json" ||
      fail "hios serve of the U-Net: $(tail -2 "$TMP/out")"
    ;;
  *)
    echo "unknown scenario '$SCENARIO'"
    exit 2
    ;;
esac

# Which nodes a scheduler spreads depends on the cost model; across a scenario's jobs some
# tensors must have crossed ranks, or the jobs tested nothing about communication.
if [ "$SCENARIO" != failure ] && [ "$total_sends" -eq 0 ]; then
  fail "no job of scenario $SCENARIO sent a tensor between ranks (every schedule used one GPU)"
fi
if [ $fails -ne 0 ]; then
  echo "$fails check(s) failed"
  exit 1
fi
echo "all checks passed"
