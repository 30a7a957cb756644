#!/usr/bin/env bash
# One device call: the same one-GPU hios-lp schedules run by this tree's build and by a
# reference build of commit REF, alternating, REPEATS times each. Every `hios run` plans its
# convolutions anew (times each candidate engine and keeps the fastest), so the spread across
# runs shows how steady those choices are, and the medians which build chooses better kernels.
# The table is $OUT/table.md; the GPU tests of the timing ([timing]) run first.
#   OUT=/some/dir REF=HEAD~1 bash scripts/gpu.sh ab inception_v3:1024 nasnet_large:331:bf16 ...
# Environment: BUILD_DIR (/tmp/b), REF_BUILD_DIR (/tmp/b-ref), REF (HEAD~1), REPEATS (3), PROFILE=1
# also writes a profile database per build and repeat (`hios profile`: every node timed with the
# convolution engines that build chose) as NAME.SIDE.I.db.json.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/output/gpu-timing-ab}
B=${BUILD_DIR:-/tmp/b}
RB=${REF_BUILD_DIR:-/tmp/b-ref}
REF=${REF:-HEAD~1}
REPEATS=${REPEATS:-3}
mkdir -p "$OUT"
source scripts/gpu/build.sh
ref_tree=/tmp/hios-ref-tree
rm -rf "$ref_tree"
if [ -n "${REF_TARBALL:-}" ]; then
  # The reference as a `git archive` tarball that travels with the tree (the machine's git
  # metadata may not hold REF).
  mkdir -p "$ref_tree" && tar -xzf "$REF_TARBALL" -C "$ref_tree" || { echo "cannot extract $REF_TARBALL"; exit 1; }
  REF="$REF_TARBALL"
else
  git worktree prune
  git worktree add --detach "$ref_tree" "$REF" >"$OUT/ref-worktree.log" 2>&1 || { cat "$OUT/ref-worktree.log"; exit 1; }
fi
# The two builds share the machine's cores.
mkdir -p "$OUT/ref"
(here=$PWD; cd "$ref_tree" && OUT=$OUT/ref B=$RB JOBS=8 && source "$here/scripts/gpu/build.sh" && gpu_build hios) >"$OUT/ref-build.txt" 2>&1 &
ref_build=$!
JOBS=8 gpu_build hios test_gpu
wait $ref_build || { echo "reference build failed"; cat "$OUT/ref-build.txt"; exit 1; }
cat "$OUT/ref-build.txt"
{ nvidia-smi --query-gpu=index,name,driver_version --format=csv; echo "this tree: $(git rev-parse --short HEAD) plus changes: $(git status --short | wc -l) files"; echo "reference: $( [ -n "${REF_TARBALL:-}" ] && echo "$REF_TARBALL" || git rev-parse --short "$REF")"; date -u +%FT%TZ; } >"$OUT/env.txt" 2>&1
(cd "$B" && timeout 120 tests/test_gpu "[timing]") >"$OUT/test-timing.log" 2>&1
echo "test_gpu [timing]: $(tail -n 2 "$OUT/test-timing.log" | tr '\n' ' ')"

median_of() {  # LOG
  sed -n 's/^# latency (ms):.*median \([0-9.]*\).*/\1/p' "$1" | head -n 1
}
echo "| configuration | reference runs (ms) | this tree's runs (ms) | reference median | this tree median | ratio |" >"$OUT/table.md"
echo "|---|---|---|---:|---:|---:|" >>"$OUT/table.md"
for spec in "$@"; do
  IFS=: read -r model size math <<<"$spec"
  math=${math:-tf32}
  dev=h200; [ "$math" = bf16 ] && dev=h200-bf16
  name=$model-$size-$math
  g=$OUT/$name.graph.json s=$OUT/$name.lp1.json
  "$B/cli/hios" graph --model "$model" --height "$size" --width "$size" -o "$g" >/dev/null || continue
  "$B/cli/hios" schedule --graph "$g" --algo hios-lp --gpus 1 --cost analytic --device "$dev" -o "$s" >/dev/null || continue
  ref_ms=() new_ms=()
  for i in $(seq "$REPEATS"); do
    for side in ref new; do
      h=$B/cli/hios; [ $side = ref ] && h=$RB/cli/hios
      log=$OUT/$name.$side.$i.log
      timeout 150 "$h" run --graph "$g" --schedule "$s" --backend cuda --math "$math" --warmup 5 --number 10 \
        --repeat 7 --timeout 140 -o none >"$log" 2>&1
      ms=$(median_of "$log")
      [ $side = ref ] && ref_ms+=("${ms:-failed}") || new_ms+=("${ms:-failed}")
      if [ -n "${PROFILE:-}" ]; then
        timeout 150 "$h" profile --graph "$g" --math "$math" --iters 5 --no-cupti -o "$OUT/$name.$side.$i.db.json" \
          >"$OUT/$name.$side.$i.profile.log" 2>&1 || echo "$name $side $i: profile failed"
      fi
    done
  done
  python3 - "$name" "${ref_ms[*]}" "${new_ms[*]}" >>"$OUT/table.md" <<'PY'
import statistics, sys
name, ref, new = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
num = lambda xs: [float(x) for x in xs if x != "failed"]
r, n = num(ref), num(new)
rm = statistics.median(r) if r else float("nan")
nm = statistics.median(n) if n else float("nan")
print(f"| {name} | {', '.join(ref)} | {', '.join(new)} | {rm:.3f} | {nm:.3f} | {nm / rm:.3f} |")
PY
  tail -n 1 "$OUT/table.md"
done
git worktree remove --force "$ref_tree" >/dev/null 2>&1
