#!/usr/bin/env bash
# scripts/sweep.py and scripts/report.py on the CPU backend, through real mpirun jobs: a sweep
# killed with SIGKILL after its first row and restarted ends with every key exactly once; a
# partial last line is cut; a failing and a timed-out configuration become rows and the sweep
# goes on; the report writes its table and plots. Usage: test_sweep.sh HIOS MPIRUN SOURCE_DIR
set -u
HIOS=$1
MPIRUN=$2
SRC=$3
SWEEP=(python3 "$SRC/scripts/sweep.py")
TMP=$(mktemp -d)
SWEEP_PID=
cleanup() {
  # Only the sweep this test started, by its pid (its children follow it: sweep.py gives them
  # a parent-death signal).
  [ -n "$SWEEP_PID" ] && kill -9 "$SWEEP_PID" 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT
fails=0
fail() {
  echo "FAIL: $*"
  fails=$((fails + 1))
}

# Six configurations on 2 cores: sequential on 1 rank, hios-lp on 1 and 2 ranks, batch 1 and 2.
cat >"$TMP/spec.json" <<EOF
{
  "name": "ci",
  "models": ["inception_v3"], "sizes": [75], "batches": [1, 2], "gpus": [1, 2],
  "algorithms": ["sequential", "hios-lp"], "backends": ["cpu"], "timeout_s": 120,
  "schedule": {"single_gpu_fallback": false},
  "run": {"warmup": 0, "number": 1, "repeat": 2, "threads": 1, "verify": true},
  "mpirun": {"command": "$MPIRUN", "args": ["--oversubscribe"],
             "env": {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}}
}
EOF
EXPECTED="inception_v3/75x75/b1/g1/hios-lp/analytic/cpu/default/full/r0
inception_v3/75x75/b1/g1/sequential/analytic/cpu/default/full/r0
inception_v3/75x75/b1/g2/hios-lp/analytic/cpu/default/full/r0
inception_v3/75x75/b2/g1/hios-lp/analytic/cpu/default/full/r0
inception_v3/75x75/b2/g1/sequential/analytic/cpu/default/full/r0
inception_v3/75x75/b2/g2/hios-lp/analytic/cpu/default/full/r0"
R=$TMP/results.jsonl

# check_rows FILE: every line a JSON object; prints the sorted keys, one per line; fails on a
# duplicated key or a row that is not ok and verified.
check_rows() {
  python3 - "$1" <<'EOF'
import json, sys
keys = []
for i, line in enumerate(open(sys.argv[1], encoding="utf-8"), 1):
    row = json.loads(line)  # a partial or broken line raises: the test fails
    if row["status"] != "ok" or row["result"].get("verified") is not True:
        sys.exit(f"line {i}: {row['key']} is {row['status']} ({row.get('error')})")
    if not row["result"]["latency_ms"]["median"] > 0:
        sys.exit(f"line {i}: no latency")
    for k in ("host", "commit", "date"):
        if not row["env"].get(k):
            sys.exit(f"line {i}: env.{k} missing")
    keys.append(row["key"])
dups = {k for k in keys if keys.count(k) > 1}
if dups:
    sys.exit(f"duplicated keys: {sorted(dups)}")
print("\n".join(sorted(keys)))
EOF
}

# leftovers TEXT: prints the processes whose command line holds TEXT (from /proc: CI images may
# have no pgrep); exit 0 when there is one.
leftovers() {
  python3 - "$1" <<'EOF'
import os, sys
found = False
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        continue
    if sys.argv[1] in cmd and state != "Z" and int(pid) != os.getpid():
        print(f"    {pid} {cmd}")
        found = True
sys.exit(0 if found else 1)
EOF
}

# 1. Bad specs: one line on stderr naming the culprit, exit 2, nothing written.
expect_spec_error() {
  local name=$1 pattern=$2 text=$3
  printf '%s\n' "$text" >"$TMP/bad.json"
  "${SWEEP[@]}" "$TMP/bad.json" -o "$TMP/bad.jsonl" --hios "$HIOS" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  if [ $rc -ne 2 ] || [ "$(wc -l <"$TMP/err")" -ne 1 ] || ! grep -qE -e "$pattern" "$TMP/err"; then
    fail "spec error '$name': rc=$rc, wanted one line /$pattern/:"
    sed 's/^/    /' "$TMP/err"
  fi
  [ -e "$TMP/bad.jsonl" ] && fail "spec error '$name' created the results file"
}
GOOD='"models": ["demo"], "algorithms": ["sequential"], "backends": ["cpu"]'
expect_spec_error "negative size"  'sizes\[1\]: -3 is not in range 1 to 65536' "{$GOOD, \"sizes\": [15, -3]}"
expect_spec_error "unknown key"    'modles: unknown key'                      "{$GOOD, \"sizes\": [15], \"modles\": []}"
expect_spec_error "malformed"      'malformed JSON at line 2 column 1'               "{$GOOD, \"sizes\": [15],"
expect_spec_error "unknown algo"   "algorithms\[0\]: unknown value \"lp\""   '{"models": ["demo"], "algorithms": ["lp"], "backends": ["cpu"], "sizes": [15]}'
expect_spec_error "float repeat"   'run.repeat: expected an integer'          "{$GOOD, \"sizes\": [15], \"run\": {\"repeat\": 2.5}}"
expect_spec_error "zero timeout"   'timeout_s: 0 is not in range'             "{$GOOD, \"sizes\": [15], \"timeout_s\": 0}"
expect_spec_error "missing axis"   'backends: missing'                        '{"models": ["demo"], "algorithms": ["sequential"], "sizes": [15]}'

# 2. --dry-run lists the six configurations and writes nothing.
"${SWEEP[@]}" "$TMP/spec.json" -o "$R" --hios "$HIOS" --dry-run >"$TMP/dry" 2>&1 || fail "dry run exited $?"
[ "$(grep -c '^\[[0-9]*/6\] .* todo$' "$TMP/dry")" -eq 6 ] || { fail "dry run did not list 6 configurations"; cat "$TMP/dry"; }
[ -e "$R" ] || [ -e "$TMP/results.work" ] && fail "dry run wrote files"

# 3. Start the sweep and stop it twice: SIGTERM once a row has landed (it ends its job, says
# so, exits 143), then SIGKILL once one more row has landed.
nrows() { if [ -e "$R" ]; then wc -l <"$R"; else echo 0; fi; }
# start_and_kill SIGNAL MIN_ROWS: starts the sweep, sends SIGNAL once RESULTS has MIN_ROWS rows;
# sets rc and rows.
start_and_kill() {
  "${SWEEP[@]}" "$TMP/spec.json" -o "$R" --hios "$HIOS" >"$TMP/run-$1.log" 2>&1 &
  SWEEP_PID=$!
  for _ in $(seq 1 1200); do  # up to 60 s
    [ "$(nrows)" -ge "$2" ] && break
    kill -0 "$SWEEP_PID" 2>/dev/null || break
    sleep 0.05
  done
  kill -"$1" "$SWEEP_PID" 2>/dev/null
  wait "$SWEEP_PID" 2>/dev/null
  rc=$?
  SWEEP_PID=
  rows=$(nrows)
  echo "$1: the sweep stopped with exit $rc after $rows row(s)"
  if [ "$rows" -lt "$2" ] || [ "$rows" -ge 6 ]; then
    fail "$1 left $rows rows (wanted $2 to 5: after a row landed and before the last)"
    sed 's/^/    /' "$TMP/run-$1.log"
  fi
}
start_and_kill TERM 1
[ $rc -eq 143 ] || fail "SIGTERM: exit $rc, wanted 143"
grep -q "interrupted (SIGTERM) during .*: not recorded" "$TMP/run-TERM.log" || fail "SIGTERM: no 'interrupted' line"
sleep 0.5
leftovers "$TMP/results.work" && fail "SIGTERM left processes of the sweep running"
start_and_kill 9 $((rows + 1))
# A kill in the middle of a row's write leaves a partial line; make one, the restart must cut it.
printf '{"key": "inception_v3/75x75/b2/g2/hios-lp/analytic/cpu/defau' >>"$R"

# 4. Restart: the same command finishes the sweep.
"${SWEEP[@]}" "$TMP/spec.json" -o "$R" --hios "$HIOS" >"$TMP/run2.log" 2>&1
rc=$?
[ $rc -eq 0 ] || { fail "restarted sweep exited $rc"; sed 's/^/    /' "$TMP/run2.log"; }
grep -q "cut a partial last line" "$TMP/run2.log" || fail "restart did not report the partial line"
grep -q "^sweep ci: 6 configuration(s), $rows already in" "$TMP/run2.log" ||
  { fail "restart did not skip the $rows finished rows"; head -3 "$TMP/run2.log"; }
grep -qE '^\[1/[0-9]+\] .* \.\.\. ok .*elapsed [0-9:]+, ETA [0-9:]+\]$' "$TMP/run2.log" || fail "no progress line with elapsed and ETA"
if keys=$(check_rows "$R" 2>"$TMP/err"); then
  [ "$keys" = "$EXPECTED" ] || { fail "final keys differ from the expected set:"; diff <(echo "$EXPECTED") <(echo "$keys"); }
else
  fail "final results: $(cat "$TMP/err")"
fi
# Nothing of the killed sweep may still run (its job got SIGTERM from the parent-death signal, or
# the restart ended it).
sleep 0.5
leftovers "$TMP/results.work" && fail "processes of the sweep still running (listed above)"

# 5. A third run has nothing to do and leaves the file as it was.
before=$(sha256sum <"$R")
"${SWEEP[@]}" "$TMP/spec.json" -o "$R" --hios "$HIOS" >"$TMP/run3.log" 2>&1 || fail "third run exited $?"
grep -q "6 already in .*, 0 to run" "$TMP/run3.log" || fail "third run did not skip everything"
[ "$(sha256sum <"$R")" = "$before" ] || fail "third run changed the results"

# The CPU reference of each graph (batch 1 and 2) was computed once and then read from the cache.
[ "$(find "$TMP/results.work/references" -name '*.ref' | wc -l)" -eq 2 ] ||
  { fail "wanted 2 cached CPU references:"; ls -la "$TMP/results.work/references"; }
cached=$(grep -c '(cached)' "$R")
[ "$cached" -ge 2 ] || fail "only $cached rows were verified against a cached reference"

# 6. Failures are rows: an unknown model (graph step), then two good ones (sequential, and hios
# tune on 2 CPU ranks), then a run killed by its timeout; exit 1 after all four.
cat >"$TMP/fail.json" <<EOF
{
  "groups": [{"models": ["nope", "demo"], "sizes": [15]},
             {"models": ["demo"], "sizes": [15], "algorithms": ["tuned"], "gpus": [2],
              "tune": {"passes": 4, "stage_budget_s": 5}},
             {"models": ["inception_v3"], "sizes": [150], "timeout_s": 1.5, "run": {"repeat": 100}}],
  "algorithms": ["sequential"], "backends": ["cpu"], "timeout_s": 60,
  "run": {"warmup": 0, "number": 1, "repeat": 1, "threads": 1},
  "mpirun": {"command": "$MPIRUN", "args": ["--oversubscribe"],
             "env": {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}}
}
EOF
F=$TMP/fail.jsonl
"${SWEEP[@]}" "$TMP/fail.json" -o "$F" --hios "$HIOS" >"$TMP/fail.log" 2>&1
rc=$?
[ $rc -eq 1 ] || { fail "sweep with a failure exited $rc, wanted 1"; sed 's/^/    /' "$TMP/fail.log"; }
python3 - "$F" <<'EOF' || fail "failure rows"
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
st = {r["key"].split("/")[0] + "/" + r["key"].split("/")[1]: r for r in rows if r["config"]["algorithm"] != "tuned"}
assert len(rows) == 4, f"{len(rows)} rows, wanted 4"
tuned = [r for r in rows if r["config"]["algorithm"] == "tuned"]
assert len(tuned) == 1 and tuned[0]["status"] == "ok", tuned
opt = tuned[0]["result"]["optimisation"]
assert opt["tune_wall_s"] > 0 and opt["total_s"] == opt["tune_wall_s"], opt
assert tuned[0]["result"]["predicted_ms"] > 0 and tuned[0]["result"]["schedule"]["tune"]["chosen"], tuned[0]["result"]
bad = st["nope/15x15"]
assert bad["status"] == "failed" and bad["step"] == "graph", bad
assert "unknown model 'nope'" in bad["error"], bad["error"]
assert st["demo/15x15"]["status"] == "ok", st["demo/15x15"]
slow = st["inception_v3/150x150"]
assert slow["status"] == "timeout" and slow["step"] == "run", slow
assert slow["result"]["run_wall_s"] < 15, slow["result"]  # killed at 1.5 s, not after 100 passes
EOF
sleep 0.5
leftovers "$TMP/fail.work" && fail "the timed-out job is still running (listed above)"

# 7. The report, from the resumed sweep and the failures.
if python3 -c 'import matplotlib' 2>/dev/null || /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  D=$TMP/report
  mkdir -p "$D"
  echo "old" >"$TMP/elsewhere.md"
  ln -s "$TMP/elsewhere.md" "$D/report.md"  # a symlinked output stays a symlink, its target replaced
  python3 "$SRC/scripts/report.py" "$R" "$F" -o "$D" >"$TMP/report.log" 2>&1 ||
    { fail "report.py exited $?"; sed 's/^/    /' "$TMP/report.log"; }
  for p in latency_vs_size speedup_vs_size batch optimisation_cost; do
    head -c 8 "$D/$p.png" 2>/dev/null | grep -q PNG || fail "$p.png missing or not a PNG"
    grep -q "<svg" "$D/$p.svg" 2>/dev/null || fail "$p.svg missing or not an SVG"
  done
  # Predictions are compared only where they model the backend that ran: hios tune's (measured on
  # the CPU ranks), not the analytic GPU model's.
  for p in predicted_vs_measured; do
    head -c 8 "$D/$p.png" 2>/dev/null | grep -q PNG || fail "$p.png missing or not a PNG"
  done
  grep -qE '^\| demo \| 15x15 \| 1 \| 2 \| tuned \| tune \|.* \| ok \| [0-9.]+ \|.*\| [0-9.]+ \| [-+][0-9]+% \|' "$D/report.md" ||
    fail "report.md has no prediction error for the tuned row"
  [ "$(grep -c '^| inception_v3 | 75x75 .* | n/a |' "$D/report.md")" -eq 6 ] ||
    fail "report.md compares the analytic GPU model's predictions with CPU timings"
  [ -L "$D/report.md" ] || fail "report.md symlink was replaced"
  grep -q "^# Sweep report" "$TMP/elsewhere.md" || fail "the symlink's target was not written"
  # Every configuration is a row of the table: the 6 of the sweep, the failure and the timeout.
  [ "$(grep -c '^| inception_v3 | 75x75 | [12] | [12] | \(sequential\|hios-lp\) | .* | ok | [0-9.]* |' "$D/report.md")" -eq 6 ] ||
    fail "report.md does not list the 6 ok configurations"
  grep -q "| failed |.*unknown model 'nope'" "$D/report.md" || fail "report.md does not list the failure"
  grep -q "| timeout |" "$D/report.md" || fail "report.md does not list the timeout"
  # The sequential row's speed-up over itself is 1.00x.
  grep -q '^| inception_v3 | 75x75 | 1 | 1 | sequential | .* | 1.00x |' "$D/report.md" || fail "sequential row not 1.00x over itself"
  # A bad number in the results is named with its file and line.
  sed '2s/"batch":[0-9]*/"batch":-3/' "$R" >"$TMP/badrow.jsonl"
  python3 "$SRC/scripts/report.py" "$TMP/badrow.jsonl" -o "$TMP/r2" >/dev/null 2>"$TMP/err"
  rc=$?
  { [ $rc -eq 2 ] && grep -q "badrow.jsonl:2: config.batch: -3 is not in range 1 to 65536" "$TMP/err"; } ||
    { fail "bad row: rc=$rc"; cat "$TMP/err"; }
  # hios serve on one device and on two: one plot of p99 against answered/s for both, and a
  # table of what each launcher answered within its budget and where each device's time went.
  "$HIOS" serve --backend cpu --models demo,squeezenet --size 17 --batches 1,2 --devices 0 --duration 0.3 --loads 0.5,1 \
    --policy fifo,adaptive -o "$TMP/serve1.json" >/dev/null 2>&1 || fail "hios serve on one device exited $?"
  "$HIOS" serve --backend cpu --models demo,squeezenet --size 17 --batches 1,2 --devices 0,1 --replicas auto --duration 0.3 \
    --loads 0.5,1 --policy fifo,adaptive -o "$TMP/serve2.json" >/dev/null 2>&1 || fail "hios serve on two devices exited $?"
  python3 "$SRC/scripts/report.py" "$TMP/serve1.json" "$TMP/serve2.json" -o "$TMP/rs" --formats png >"$TMP/report.log" 2>&1 ||
    { fail "report.py on two serve JSONs exited $?"; sed 's/^/    /' "$TMP/report.log"; }
  head -c 8 "$TMP/rs/serve-scaling.png" 2>/dev/null | grep -q PNG || fail "serve-scaling.png missing or not a PNG"
  grep -q '^| 1 CPU device | fifo | [0-9.]* |' "$TMP/rs/report.md" || fail "the scaling report has no one-device fifo row"
  grep -q '^| 2 CPU devices | fifo | [0-9.]* | 1 | 1 |' "$TMP/rs/report.md" ||
    fail "the scaling report has no time of device 1 on two devices"
  python3 "$SRC/scripts/report.py" "$TMP/serve1.json" "$R" -o "$TMP/r3" >/dev/null 2>"$TMP/err"
  rc=$?
  { [ $rc -eq 2 ] && grep -q "give hios serve JSONs or sweep results, not both" "$TMP/err"; } ||
    { fail "serve and sweep files mixed: rc=$rc"; cat "$TMP/err"; }
else
  echo "report part skipped: matplotlib is missing (scripts/install-deps.sh installs python3-matplotlib)"
fi

if [ $fails -ne 0 ]; then
  echo "$fails failure(s)"
  exit 1
fi
echo "sweep and report: all checks passed"
