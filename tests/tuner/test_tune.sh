#!/usr/bin/env bash
# hios tune under mpirun on the CPU backend (CI has no GPU): the whole job runs, the schedule
# written is the fastest verified candidate its own meta lists, a second tune with the saved
# database measures no node, link or stage again, a database of another graph is refused with
# one line (and replaced with --profile-db-mismatch remeasure), and `hios run --trace` on the
# tuned schedule writes a trace with every node. Usage: test_tune.sh HIOS MPIRUN
set -u
HIOS=$1
MPIRUN=$2
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPI=("$MPIRUN" --oversubscribe -np 2)
FAST=(--gpus 2 --backend cpu --threads 1 --warmup 1 --passes 3 --node-iters 2 --stage-iters 2 --link-iters 3 --timeout 240)
fails=0
fail() {
  echo "FAIL: $*"
  fails=$((fails + 1))
}

"$HIOS" graph --model demo -o "$TMP/demo.json" >/dev/null || fail "hios graph demo"
"$HIOS" graph --model demo --height 24 --width 24 -o "$TMP/demo24.json" >/dev/null || fail "hios graph demo 24"

# 1. A fresh tune.
if ! "${MPI[@]}" "$HIOS" tune --graph "$TMP/demo.json" "${FAST[@]}" --profile-db "$TMP/db.json" -o "$TMP/s.json" \
  >"$TMP/out1" 2>"$TMP/err1"; then
  fail "hios tune exited $?"
  cat "$TMP/out1" "$TMP/err1"
fi
grep -q "<- chosen" "$TMP/out1" || fail "no candidate marked as chosen"
grep -q "links      GPU 0 -> GPU 1" "$TMP/err1" || fail "no progress line for the links"
grep -q "timing     quick 1 of" "$TMP/err1" || fail "no progress line 'item k of n' for the candidates"
"$HIOS" check --graph "$TMP/demo.json" --schedule "$TMP/s.json" >/dev/null || fail "the tuned schedule does not pass hios check"

python3 - "$TMP/s.json" "$TMP/db.json" "$TMP/err1" <<'PY' || fail "meta.tune or the database is wrong (see above)"
import json, sys
s = json.load(open(sys.argv[1]))
t = s["meta"]["tune"]
c = t["candidates"]
assert len(c) >= 3, f"only {len(c)} candidates"
labels = [x["label"] for x in c] + [d["label"] for d in t["duplicates"]]  # a duplicate names the candidate it equals
assert any(x.startswith("hios-lp 1 GPU") for x in labels), labels   # the best one-GPU schedule is always a candidate
assert any(x.startswith("hios-lp 2 GPUs") or x.startswith("hios-mr 2 GPUs") or x.startswith("heft 2 GPUs") for x in labels), labels
for x in c:
    assert x["measured_ms"] > 0 and x["predicted_ms"] > 0, x
    assert x["verified"] and x["max_rel"] == 0.0, x                 # cpu: every schedule equals the sequential run
# Row splits are candidates by default on two GPUs: measured, timed and verified like the rest,
# unless their prediction put them past the tuner's hopeless cutoff (CPU timings on a loaded
# machine can), which the log then says for each.
splits = [x for x in c if "split" in x]
assert all(" rows " in x["label"] and x["passes"] >= 1 for x in splits), splits
if not splits:
    log = open(sys.argv[3]).read()
    assert "the best whole-graph schedule; not measured" in log, "no split candidate, and none was judged hopeless"
# The chosen one is the fastest measured, split or not (a split exactly when one measured fastest),
# unless another within 1% of it needs less tensor memory on its fullest rank.
best = min((x for x in c if x["verified"]), key=lambda x: x["measured_ms"])
chosen = [x for x in c if x["chosen"]]
assert len(chosen) == 1 and chosen[0]["label"] == t["chosen"], (chosen, t["chosen"])
if chosen[0]["label"] != best["label"]:
    assert chosen[0]["measured_ms"] <= 1.01 * best["measured_ms"], (chosen, best)
    assert chosen[0]["tensor_mb"] < best["tensor_mb"], (chosen, best)
else:
    close = [x for x in c if x["verified"] and x["measured_ms"] <= 1.01 * best["measured_ms"]]
    assert all(x["tensor_mb"] >= best["tensor_mb"] for x in close), close
best = chosen[0]
assert ("split" in best) == ("spatial" in s["meta"]), (best, s["meta"].get("spatial"))
assert abs(s["meta"]["predicted_ms"] - best["predicted_ms"]) < 1e-9
assert s["meta"]["gpus"] == 2
assert t["nodes_measured"] and t["links_measured"] and t["stages"]["measured"] > 0, t
db = json.load(open(sys.argv[2]))
# A split schedule names the split graph; meta.spatial names the graph it was split from.
tuned_digest = s["meta"]["spatial"]["graph_digest"] if "spatial" in s["meta"] else s["meta"]["graph"]["digest"]
assert db["identity"]["graph_digest"] == tuned_digest
assert db["identity"]["backend"] == "cpu" and db["identity"]["math"] == "fp32"
assert len(db["links"]) == 2 and len(db["stages"]) > 0 and len(db["entries"]) > 0
assert db["searched"]["gpus"] == 2 and len(db["searched"]["candidates"]) >= 3, "the searches were not kept"
# The fastest unsplit multi-GPU candidate and every row split that can still catch up are
# also timed with their receives posted later: leads 0, 2 and 8 of each base, at most two
# unsplit bases (the fastest of each round of searches).
leads = [x for x in c if x["recv_lead"] >= 0]
bases = {}
for x in leads:
    assert x["label"].startswith(x["posting_of"] + ", receives "), x  # a variant names its base
    bases.setdefault(x["posting_of"], set()).add(x["recv_lead"])
assert all("posting_of" not in x for x in c if x["recv_lead"] < 0)
assert bases and all(v == {0, 2, 8} for v in bases.values()), leads
by_label = {x["label"]: x for x in c}
kinds = [("split" in by_label[b]) for b in bases]
assert all(by_label[b]["gpus_used"] > 1 for b in bases), bases
assert kinds.count(False) <= 2, bases
for x in c:
    assert x["passes"] >= 1, x
# The database keeps, beside each searched candidate, the fastest of its verified lead variants
# where one beat it: a re-tune decides what to time again from that.
for e in db["searched"]["candidates"]:
    variants = [x["measured_ms"] for x in c if x["verified"] and x.get("posting_of") == e["label"]]
    fastest = min(variants + [e["measured_ms"]])
    if fastest < e["measured_ms"]:
        assert abs(e["fastest_posting_ms"] - fastest) < 1e-9, (e["label"], e.get("fastest_posting_ms"), fastest)
    else:
        assert "fastest_posting_ms" not in e, e
    # ...and which posting that was (-1: as searched), wherever its leads were timed.
    timed = [x for x in c if x.get("posting_of") == e["label"]]
    if not timed:
        assert "fastest_posting_lead" not in e, e
    else:
        winner = min([x for x in timed if x["verified"]] + [dict(e, recv_lead=-1)], key=lambda x: x["measured_ms"])
        assert e["fastest_posting_lead"] == winner["recv_lead"], (e["label"], e["fastest_posting_lead"], winner)
# Predictions are calibrated on the other schedules; the uncalibrated ones are kept.
# A transfer may cost less inside a pass than the link measured alone, by at most the fastest
# link's fixed latency; a launch gap is never negative.
cal = t["calibration"]
lowest_us = -min(l["latency_us"] for l in json.load(open(sys.argv[2]))["links"]) - 1e-9
assert cal["launch_gap_us"] >= 0 and cal["transfer_extra_us"] >= lowest_us, (cal, lowest_us)
for x in c:
    assert x["predicted_uncalibrated_ms"] > 0 and x["launch_gap_us"] >= 0 and x["transfer_extra_us"] >= lowest_us, x
    if x["gpus_used"] == 1:
        assert x["transfer_extra_us"] == 0, x   # one GPU moves nothing
# The chosen one was timed in full (the finalists' round).
assert chosen[0]["passes"] == max(x["passes"] for x in c), chosen
# Its launch order was chosen by timing each order (hios run takes it from here).
lo = t["launch_order"]
assert lo["chosen"] in ("topo", "opara", "measured"), lo
assert set(lo["measured_ms"]) == {"topo", "opara", "measured"}, lo
assert lo["measured_ms"][lo["chosen"]] == min(lo["measured_ms"].values()), lo
PY
grep -q "launch order opara" "$TMP/err1" || fail "no progress line for the launch orders"
# scripts/preset_check.py replays every searched candidate from the database under a preset:
# one row per first-round candidate, each with a measured and a predicted time.
CHECK=$(dirname "$0")/../../scripts/preset_check.py
if python3 "$CHECK" --hios "$HIOS" --graph "$TMP/demo.json" --device h200 "$TMP/db.json" >"$TMP/preset.md" 2>&1; then
  python3 - "$TMP/preset.md" "$TMP/db.json" <<'PY' || fail "preset_check.py's table is wrong"
import json, re, sys
rows = [l for l in open(sys.argv[1]) if re.match(r"\| [^-|]", l) and not l.startswith("| schedule")]
searched = [c for c in json.load(open(sys.argv[2]))["searched"]["candidates"] if "(calibrated)" not in c["label"]]
assert len(rows) == len(searched), (rows, [c["label"] for c in searched])
for l, c in zip(rows, searched):
    cells = [x.strip() for x in l.strip().strip("|").split("|")]
    assert cells[0] == c["label"] and float(cells[1]) == round(c["measured_ms"], 3) and float(cells[2]) > 0, (cells, c)
PY
else
  fail "preset_check.py failed: $(tail -1 "$TMP/preset.md")"
fi
python3 "$CHECK" --hios "$HIOS" --graph "$TMP/demo.json" --device h200 "$TMP/demo.json" >"$TMP/bad.out" 2>&1 &&
  fail "preset_check.py accepted a graph as a database"
grep -q "keeps no searched candidates" "$TMP/bad.out" || fail "preset_check.py's refusal does not name the problem: $(cat "$TMP/bad.out")"
# With the schedule the tune wrote, a second measured column: the fastest receive posting, never
# slower than the candidate as the quick round timed it.
if python3 "$CHECK" --hios "$HIOS" --graph "$TMP/demo.json" --device h200 --tuned "$TMP/s.json" "$TMP/db.json" \
  >"$TMP/preset2.md" 2>&1; then
  python3 - "$TMP/preset2.md" <<'PY' || fail "preset_check.py --tuned's table is wrong"
import re, sys
rows = [[x.strip() for x in l.strip().strip("|").split("|")] for l in open(sys.argv[1])
        if re.match(r"\| [^-|]", l) and not l.startswith("| schedule")]
assert rows and all(len(r) == 6 and float(r[2]) <= float(r[1]) for r in rows), rows
PY
else
  fail "preset_check.py --tuned failed: $(tail -1 "$TMP/preset2.md")"
fi
# scripts/preset_refit.py fits a preset to those schedules: it writes a devices file hios takes,
# and the fit never ends worse than its start.
REFIT=$(dirname "$0")/../../scripts/preset_refit.py
SCIPY=""
for py in /usr/bin/python3 python3; do "$py" -c "import scipy" 2>/dev/null && SCIPY=$py && break; done
if [ -z "$SCIPY" ]; then
  echo "SKIP preset_refit.py: no python3 with scipy (Debian's python3-scipy)"
elif "$SCIPY" "$REFIT" --hios "$HIOS" --device h200 --name refitted --evaluations 25 -o "$TMP/refit.json" \
  --tune "$TMP/demo.json" "$TMP/db.json" "$TMP/s.json" >"$TMP/refit.out" 2>&1; then
  "$SCIPY" - "$TMP/refit.out" <<'PY' || fail "preset_refit.py's fit got worse: $(tail -2 "$TMP/refit.out")"
import re, sys
m = re.search(r"loss ([\d.]+) -> ([\d.]+)", open(sys.argv[1]).read())
assert m and float(m.group(2)) <= float(m.group(1)), m
PY
  "$HIOS" schedule --graph "$TMP/demo.json" --gpus 2 --device refitted --devices "$TMP/refit.json" -o "$TMP/refit-s.json" \
    >/dev/null 2>&1 || fail "hios schedule refused the refitted preset"
  "$SCIPY" "$REFIT" --hios "$HIOS" --device h200 -o "$TMP/refit2.json" --tune "$TMP/demo.json" "$TMP/demo.json" "$TMP/s.json" \
    >"$TMP/bad2.out" 2>&1 && fail "preset_refit.py accepted a graph as a database"
  grep -q "keeps no searched candidates" "$TMP/bad2.out" || fail "preset_refit.py's refusal does not name the problem: $(cat "$TMP/bad2.out")"
  [ -e "$TMP/refit2.json" ] && fail "preset_refit.py wrote a devices file after refusing its input"
else
  fail "preset_refit.py failed: $(tail -1 "$TMP/refit.out")"
fi

# 2. The same graph again with the saved database: nothing is measured but the candidates.
if ! "${MPI[@]}" "$HIOS" tune --graph "$TMP/demo.json" "${FAST[@]}" --profile-db "$TMP/db.json" -o "$TMP/s2.json" \
  >"$TMP/out2" 2>"$TMP/err2"; then
  fail "the second hios tune exited $?"
  cat "$TMP/out2" "$TMP/err2"
fi
grep -q "loading the measuring program" "$TMP/err2" && fail "the second tune loaded the measuring program"
grep -q "links      2 ordered" "$TMP/err2" && fail "the second tune measured the links again"
grep -q "reference  the sequential run's output from the database" "$TMP/err2" ||
  fail "the second tune ran the reference again"
python3 - "$TMP/s2.json" "$TMP/s.json" <<'PY' || fail "the second tune measured something again"
import json, sys
t = json.load(open(sys.argv[1]))["meta"]["tune"]
assert not t["nodes_measured"] and not t["links_measured"], t
assert t["stages"]["measured"] == 0, t["stages"]
# Nothing new was measured, so the searches' candidates come from the database.
assert t["searches_reused"], t
first = json.load(open(sys.argv[2]))["meta"]["tune"]
searched = lambda tune: [c["label"] for c in tune["candidates"] if c["recv_lead"] < 0]
assert searched(t) == searched(first), "other candidates"
# It keeps (passes 0) exactly the candidates whose fastest receive posting in the first tune was
# over 1.10x the fastest there, and times the others again.
def fastest_posting(x):
    return min([y["measured_ms"] for y in first["candidates"]
                if y["verified"] and x["label"] in (y["label"], y.get("posting_of"))])
base = [x for x in first["candidates"] if x["recv_lead"] < 0 and x["verified"]]
best = min(fastest_posting(x) for x in base)
again = {x["label"]: x for x in t["candidates"]}
for x in base:
    kept = again[x["label"]]["passes"] == 0
    assert kept == (fastest_posting(x) > 1.10 * best), (x["label"], kept, fastest_posting(x), best)
# Of a schedule whose receive leads the first tune timed, the re-tune times at most the posting
# that was fastest there (none when the schedule as searched was; none either where the re-tune
# kept the schedule or another unsplit one came out faster in its quick round), and the posting
# the first tune chose if that was another of them.
by_label_first = {y["label"]: y for y in first["candidates"]}
chosen_first = by_label_first[first["chosen"]]
for x in base:
    variants = [y for y in first["candidates"] if y.get("posting_of") == x["label"]]
    retimed = sorted(y["recv_lead"] for y in t["candidates"] if y.get("posting_of") == x["label"])
    if not variants:
        continue
    winner = min([y for y in variants if y["verified"]] + [x], key=lambda y: y["measured_ms"])
    allowed = {winner["recv_lead"]}
    if chosen_first.get("posting_of") == x["label"]:
        allowed.add(chosen_first["recv_lead"])
    assert set(retimed) <= (allowed - {-1}), (x["label"], retimed, winner["label"])
# The first tune's choice, if a receive posting of a verified schedule, is timed again.
if chosen_first.get("posting_of") and again.get(chosen_first["posting_of"], {}).get("verified"):
    assert first["chosen"] in again and again[first["chosen"]]["passes"] > 0, first["chosen"]
# Among the candidates within 1% of the fastest, the re-tune keeps the first tune's choice unless
# one of them runs on fewer GPUs. (Not checked where the first choice was a receive posting the
# re-tune did not time, or where the choice was timed over fewer passes: its launch-order timing
# then replaces its time after the choice.)
last = again.get(first["chosen"])
now = again.get(t["chosen"], {})
ties = [y for y in t["candidates"] if y["verified"] and y["passes"] > 0 and
        y["measured_ms"] <= 1.01 * min(z["measured_ms"] for z in t["candidates"] if z["verified"])]
# The re-tune's own choice too: one chosen on a quick-round time shows its full-pass launch-order
# time here, so it may have left the ties it was chosen from.
if (last in ties and all(y["passes"] == t["passes"] for y in ties) and now.get("passes") == t["passes"] and
        min(y["gpus_used"] for y in ties) == last["gpus_used"]):
    assert t["chosen"] == first["chosen"], (t["chosen"], first["chosen"])
PY

# 2b. A stored reference output that no run could give (an edited database) is not taken: the
# re-tune runs the reference again and still verifies its candidates.
python3 - "$TMP/db.json" "$TMP/db-edited.json" <<'PY'
import json, sys
db = json.load(open(sys.argv[1]))
db["searched"]["reference"]["output"][0] = 1e300  # beyond float: not a value any run gives
json.dump(db, open(sys.argv[2], "w"))
PY
if "${MPI[@]}" "$HIOS" tune --graph "$TMP/demo.json" "${FAST[@]}" --profile-db "$TMP/db-edited.json" -o "$TMP/s2b.json" \
  >"$TMP/out2b" 2>"$TMP/err2b"; then
  grep -q "reference  the sequential run on rank 0's device" "$TMP/err2b" ||
    fail "a re-tune took a stored reference output beyond float"
else
  fail "the re-tune with an edited reference exited $?"
  cat "$TMP/err2b"
fi

# 2c. A database whose metadata holds a string where hios reads back a number: exit 2, and a
# line naming the field (not the JSON library's words).
python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); d["meta"]["gpus"] = "two"; json.dump(d, open(sys.argv[2], "w"))' \
  "$TMP/db.json" "$TMP/db-meta.json"
"${MPI[@]}" "$HIOS" tune --graph "$TMP/demo.json" "${FAST[@]}" --profile-db "$TMP/db-meta.json" -o "$TMP/s2c.json" \
  >"$TMP/out2c" 2>"$TMP/err2c"
rc=$?
if [ "$rc" -ne 2 ] || ! grep -q 'db-meta.json: \$.meta.gpus: expected an integer, got string' "$TMP/err2c" ||
   grep -q "json.exception" "$TMP/err2c"; then
  fail "a database with a string meta.gpus: exit $rc, $(grep -c . "$TMP/err2c") lines: $(head -3 "$TMP/err2c")"
fi

# 3. Another graph against that database: refused with one line naming what differs.
cp "$TMP/db.json" "$TMP/db.before"
"${MPI[@]}" "$HIOS" tune --graph "$TMP/demo24.json" "${FAST[@]}" --profile-db "$TMP/db.json" -o "$TMP/s3.json" \
  >"$TMP/out3" 2>"$TMP/err3"
rc=$?
[ "$rc" -ne 0 ] || fail "a mismatched database was accepted"
[ -e "$TMP/s3.json" ] && fail "a refused tune wrote a schedule"
grep -q "^hios: error: .*does not match this run: graph_digest" "$TMP/err3" ||
  { fail "no one-line error naming the graph digest"; cat "$TMP/err3"; }
cmp -s "$TMP/db.json" "$TMP/db.before" || fail "a refused tune changed the database"
if ! "${MPI[@]}" "$HIOS" tune --graph "$TMP/demo24.json" "${FAST[@]}" --profile-db "$TMP/db.json" \
  --profile-db-mismatch remeasure -o "$TMP/s3.json" -q >"$TMP/out4" 2>"$TMP/err4"; then
  fail "--profile-db-mismatch remeasure exited $?"
  cat "$TMP/err4"
fi
python3 -c "
import json,sys
db=json.load(open('$TMP/db.json')); m=json.load(open('$TMP/s3.json'))['meta']
assert db['identity']['graph_digest']==(m['spatial'] if 'spatial' in m else m['graph'])['graph_digest' if 'spatial' in m else 'digest']" ||
  fail "remeasure did not replace the database"

# 4. hios run --trace on the tuned schedule: every node of the graph appears once.
if ! "${MPI[@]}" "$HIOS" run --graph "$TMP/demo.json" --schedule "$TMP/s.json" --backend cpu --threads 1 --warmup 1 \
  --number 1 --repeat 1 --verify --trace "$TMP/trace.json" -o none >"$TMP/out5" 2>&1; then
  fail "hios run --trace exited $?"
  cat "$TMP/out5"
fi
python3 - "$TMP/trace.json" "$TMP/s.json" <<'PY' || fail "the measured trace is wrong"
import json, sys
t = json.load(open(sys.argv[1]))
ev = t["traceEvents"] if isinstance(t, dict) else t
nodes = [e for e in ev if e.get("cat") == "node"]
s = json.load(open(sys.argv[2]))
n = sum(len(gr) for b in s["blocks"] for gpu in b["gpus"] for st in gpu for gr in st)  # the split graph's, if split
assert len(nodes) == n and len({e["name"] for e in nodes}) == n, (len(nodes), n)
assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in nodes)
assert {e["pid"] for e in nodes} <= {0, 1}
PY

# 5. --spatial: off leaves row splits out; a part count and a mode keep only those splits, and a
# split schedule written carries meta.spatial, passes check against the original graph and runs
# equal to the sequential run.
if ! "${MPI[@]}" "$HIOS" tune --graph "$TMP/demo.json" "${FAST[@]}" --spatial off -o "$TMP/nosplit.json" -q \
  >"$TMP/out6" 2>"$TMP/err6"; then
  fail "hios tune --spatial off exited $?"
  cat "$TMP/out6" "$TMP/err6"
fi
grep -q " rows " "$TMP/out6" && fail "hios tune --spatial off timed a row split"
grep -q "^# spatial: the fastest schedule splits no rows" "$TMP/out6" || fail "no '# spatial:' line for --spatial off"
if ! "${MPI[@]}" "$HIOS" tune --graph "$TMP/demo.json" "${FAST[@]}" --spatial 2 --spatial-mode recompute \
  -o "$TMP/split.json" >"$TMP/out7" 2>"$TMP/err7"; then
  fail "hios tune --spatial 2 --spatial-mode recompute exited $?"
  cat "$TMP/out7" "$TMP/err7"
fi
python3 - "$TMP/split.json" <<'PY' || fail "--spatial 2 --spatial-mode recompute timed other splits"
import json, sys
c = json.load(open(sys.argv[1]))["meta"]["tune"]["candidates"]
splits = [x for x in c if "split" in x]
assert splits and all("2 ways, recompute" in x["split"] for x in splits), [x.get("split") for x in c]
PY
"$HIOS" check --graph "$TMP/demo.json" --schedule "$TMP/split.json" >"$TMP/out8" 2>&1 ||
  fail "the tuned schedule does not pass hios check: $(cat "$TMP/out8")"
"${MPI[@]}" "$HIOS" run --graph "$TMP/demo.json" --schedule "$TMP/split.json" --backend cpu --threads 1 --warmup 0 \
  --number 1 --repeat 1 --verify -o none >"$TMP/out9" 2>&1 &&
  grep -qE '^# verify vs sequential cpu run +max_abs 0\.000e\+00' "$TMP/out9" ||
  fail "the tuned schedule does not run equal to the sequential run: $(tail -3 "$TMP/out9")"

if [ "$fails" -eq 0 ]; then echo "tune: all checks passed"; exit 0; fi
echo "tune: $fails check(s) failed"
exit 1
