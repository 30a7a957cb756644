#!/usr/bin/env bash
# A sweep preset on the GPU machine in one device call: build hios, run
# scripts/sweep.py on the preset until it finishes or the time budget ends (SIGTERM: the
# results file stays whole and a later call resumes it), then scripts/report.py. The device
# returns at most 8 files, so the report's plots come back as one tarball.
#
#   OUT=/some/dir bash scripts/gpu.sh sweep [PRESET]        # PRESET: scripts/sweeps/hios-paper.json
#
# To resume in a second call, keep the results in the repository tree and carry them, with the
# CPU references the first call computed (it returns them as references.tgz; unpack it into
# output/ here):
#   RESULTS=output/paper.jsonl bash scripts/gpu.sh sweep
#   (run's carry: ["output/paper.jsonl", "output/references"])
#
# Environment: BUILD_DIR (/tmp/b), BUDGET_S (480: seconds from the script's start, build
# included, after which the sweep is stopped; a cold build takes about 90 s of it), RESULTS
# ($OUT/results.jsonl), ONLY (sweep.py --only patterns, space-separated, e.g.
# "inception_v3/331x331/*"), REFERENCES (output/references: CPU reference outputs to start from,
# hios run --reference-cache).
set -uo pipefail
cd "$(dirname "$0")/../.."
PRESET=${1:-scripts/sweeps/hios-paper.json}
OUT=${OUT:-$PWD/output/gpu-sweep}
B=${BUILD_DIR:-/tmp/b}
BUDGET_S=${BUDGET_S:-480}
RESULTS=${RESULTS:-$OUT/results.jsonl}
REFERENCES=${REFERENCES:-output/references}
mkdir -p "$OUT" "$(dirname "$RESULTS")" "$OUT/work/references"
# The CPU reference of a large graph takes minutes; one computed by an earlier call is reused.
[ -d "$REFERENCES" ] && find "$REFERENCES" -maxdepth 1 -name '*.ref' -exec cp {} "$OUT/work/references/" \;
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
t0=$(date +%s)
source scripts/gpu/build.sh
gpu_build hios
echo "GPUs: $( (nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null || echo "no GPU") | sort | uniq -c | xargs)"
only=()
for p in ${ONLY:-}; do only+=(--only "$p"); done
# SIGTERM at the budget: sweep.py finishes the row being written, ends the running job and
# exits 143 with every finished row in RESULTS.
# The budget counts from the script's start, so a cold build cannot push the report and the
# copies below past the device call's limit.
sweep_s=$(( BUDGET_S - ($(date +%s) - t0) ))
[ "$sweep_s" -lt 10 ] && sweep_s=10
echo "sweep budget: $sweep_s s"
timeout -s TERM "$sweep_s" python3 scripts/sweep.py "$PRESET" -o "$RESULTS" --hios "$B/cli/hios" \
  --workdir "$OUT/work" "${only[@]}" 2>&1 | tee "$OUT/sweep.log" | grep -E "^\[|error|interrupted" | tail -40
rc=${PIPESTATUS[0]}
rows=0
[ -f "$RESULTS" ] && rows=$(wc -l <"$RESULTS")
echo "sweep: exit $rc, $rows rows in $RESULTS ($(( $(date +%s) - t0 )) s)"
[ "$RESULTS" != "$OUT/results.jsonl" ] && cp "$RESULTS" "$OUT/results.jsonl"
if python3 scripts/report.py "$RESULTS" -o "$OUT/report" >"$OUT/report.log" 2>&1; then
  cp "$OUT/report/report.md" "$OUT/report.md"
  tar czf "$OUT/report.tgz" -C "$OUT" report
  echo "report: $OUT/report.md, plots in $OUT/report.tgz"
else
  echo "report failed:"; tail -5 "$OUT/report.log"
fi
tar czf "$OUT/references.tgz" -C "$OUT/work" references
echo "references: $(find "$OUT/work/references" -name '*.ref' | wc -l) CPU reference outputs in $OUT/references.tgz"
rm -rf "$OUT/work" "$OUT/report"  # only the files above come back from the device
echo "total: $(( $(date +%s) - t0 )) s"
