#!/usr/bin/env bash
# hios import, end to end on the CPU backend: small ONNX models (onnx_cases.py: the older
# exporter's style at opset 13, the dynamo exporter's at opset 18 with external data, and one
# more at opset 17 for the remaining ops) are
# imported, run with `hios run --input --save-output --verify` on one rank and, under mpirun, on
# two (hios-lp on 2 GPUs, and row splits in halo and recompute mode), and every output is
# compared with NumPy's evaluation of the ONNX graph. Then the refusals: every unsupported
# node listed in one line, and files that are not models.
#
#   bash test_import.sh HIOS MPIRUN
here=$(cd "$(dirname "$0")" && pwd)
source "$here/importer_test_setup.sh" "$@"

"$PY" "$here/onnx_cases.py" "$W" || { echo "FAIL: onnx_cases.py"; exit 1; }

close() {  # EXPECTED GOT LABEL: max_rel below 1e-5 and the same shape
  "$PY" - "$1" "$2" "$3" <<'PY' || fails=$((fails + 1))
import sys
import numpy as np
a, b = np.load(sys.argv[1]).astype(np.float64), np.load(sys.argv[2]).astype(np.float64)
if a.shape != b.shape:
    sys.exit(f"FAIL: {sys.argv[3]}: shape {b.shape}, expected {a.shape}")
rel = np.abs(a - b).max() / np.abs(a).max()
print(f"{sys.argv[3]}: max_rel {rel:.2e} against NumPy")
if not rel < 1e-5:
    sys.exit(f"FAIL: {sys.argv[3]}: max_rel {rel}")
PY
}

for c in branchy dynamo more resnet; do
  "$H" import "$W/$c.onnx" -o "$W/$c.json" 2>"$W/$c.import.log" || { fail "$c: import: $(cat "$W/$c.import.log")"; continue; }
  grep -q "hios nodes in" "$W/$c.import.log" || fail "$c: no summary line"
  [ -f "$W/$c.safetensors" ] || fail "$c: no weights file beside the graph"
  grep -q "\"weights\": *\"$c.safetensors\"" "$W/$c.json" || fail "$c: the graph does not name its weights file"
  "$H" schedule --graph "$W/$c.json" --algo hios-lp --gpus 1 -o "$W/$c.lp1.json" >/dev/null 2>&1 || fail "$c: schedule"
  "$H" run --graph "$W/$c.json" --schedule "$W/$c.lp1.json" --backend cpu --input "$W/$c.input.npy" \
    --save-output "$W/$c.out.npy" --verify -o none >"$W/$c.run.log" 2>&1 || fail "$c: run: $(grep -m1 error "$W/$c.run.log")"
  grep -q "correctness: OK" "$W/$c.run.log" || fail "$c: not verified"
  close "$W/$c.expected.npy" "$W/$c.out.npy" "$c, 1 rank"
done
grep -q '"activation": *"relu6"' "$W/dynamo.json" || fail "dynamo: Clip to [0, 6] did not become relu6"
grep -q "BatchNormalization into the layer before it" "$W/branchy.import.log" || fail "branchy: batch norms not folded"
grep -q '"activation":"hard_swish"' "$W/resnet.json" || fail "resnet: the hard-swish is not the convolution's epilogue"
grep -q "4 Adds into the epilogue of the convolution before them" "$W/resnet.import.log" ||
  fail "resnet: the skip connections are not in their convolutions' epilogues: $(grep folded "$W/resnet.import.log")"
grep -q "Pads into the padding" "$W/branchy.import.log" || fail "branchy: the symmetric Pad was not merged"
[ "$(grep -c '"op": *"pad"' "$W/branchy.json")" -ge 3 ] || fail "branchy: asymmetric, -inf and cropping Pads are not pad nodes"

# Another input size: convolutions follow it and the shape arithmetic is evaluated again.
"$PY" - "$here" "$W" <<'PY' || fail "reference at 23x21"
import sys
import numpy as np
import onnx
sys.path.insert(0, sys.argv[1])
from onnx_cases import evaluate
x = np.random.RandomState(3).standard_normal((1, 3, 23, 21)).astype(np.float32)
np.save(sys.argv[2] + "/x23.npy", x)
np.save(sys.argv[2] + "/y23.npy", evaluate(onnx.load(sys.argv[2] + "/branchy.onnx"), x).astype(np.float32))
PY
"$H" import "$W/branchy.onnx" -o "$W/b23.json" --height 23 --width 21 2>/dev/null || fail "import at 23x21"
"$H" schedule --graph "$W/b23.json" --algo sequential -o "$W/b23.seq.json" >/dev/null 2>&1 || fail "schedule at 23x21"
"$H" run --graph "$W/b23.json" --schedule "$W/b23.seq.json" --backend cpu --input "$W/x23.npy" --save-output "$W/o23.npy" \
  -o none >/dev/null 2>&1 || fail "run at 23x21"
close "$W/y23.npy" "$W/o23.npy" "branchy at 23x21"

# Two ranks: inter-operator, and row splits of the imported graph (its global pool reads a concat).
"$H" schedule --graph "$W/branchy.json" --algo hios-lp --gpus 2 -o "$W/lp2.json" >/dev/null 2>&1 || fail "lp2 schedule"
for mode in halo recompute; do
  "$H" schedule --graph "$W/branchy.json" --algo hios-lp --gpus 2 --spatial 2 --spatial-mode $mode \
    -o "$W/split-$mode.json" >"$W/split-$mode.log" 2>&1 || fail "split $mode: $(grep -m1 error "$W/split-$mode.log")"
done
for s in lp2 split-halo split-recompute; do
  timeout 240 "$MPIRUN" -np 2 "$H" run --graph "$W/branchy.json" --schedule "$W/$s.json" --backend cpu \
    --input "$W/branchy.input.npy" --save-output "$W/branchy.$s.npy" --verify --timeout 200 -o none \
    >"$W/$s.run.log" 2>&1 || fail "$s: run: $(grep -m1 error "$W/$s.run.log")"
  grep -q "correctness: OK" "$W/$s.run.log" || fail "$s: not verified"
  close "$W/branchy.expected.npy" "$W/branchy.$s.npy" "branchy, 2 ranks, $s"
done

# Row splits through convolutions with their skip connections fused: a part reads the residual
# at its own rows and the convolution's input under its window.
for mode in halo recompute; do
  "$H" schedule --graph "$W/resnet.json" --algo hios-lp --gpus 2 --spatial 2 --spatial-mode $mode \
    -o "$W/rsplit-$mode.json" >"$W/rsplit-$mode.log" 2>&1 || fail "resnet split $mode: $(grep -m1 error "$W/rsplit-$mode.log")"
  grep -q "split 2 ways" "$W/rsplit-$mode.log" || fail "resnet split $mode: no region split: $(head -3 "$W/rsplit-$mode.log")"
  timeout 240 "$MPIRUN" -np 2 "$H" run --graph "$W/resnet.json" --schedule "$W/rsplit-$mode.json" --backend cpu \
    --input "$W/resnet.input.npy" --save-output "$W/resnet.$mode.npy" --verify --timeout 200 -o none \
    >"$W/rsplit-$mode.run.log" 2>&1 || fail "resnet split $mode: run: $(grep -m1 error "$W/rsplit-$mode.run.log")"
  grep -q "correctness: OK" "$W/rsplit-$mode.run.log" || fail "resnet split $mode: not verified"
  close "$W/resnet.expected.npy" "$W/resnet.$mode.npy" "resnet, 2 ranks, split-$mode"
done

# The rest of the toolkit on the imported graph: info, dot, check, and a tune on CPU ranks
# whose schedule runs, verifies and matches NumPy.
"$H" info "$W/branchy.json" >"$W/info.txt" 2>&1 && grep -q "blocks" "$W/info.txt" || fail "info: $(head -2 "$W/info.txt")"
"$H" dot "$W/branchy.json" -o "$W/branchy.dot" >/dev/null 2>&1 && grep -q "digraph" "$W/branchy.dot" || fail "dot"
"$H" check --graph "$W/branchy.json" --schedule "$W/split-halo.json" >"$W/check.txt" 2>&1 || fail "check: $(tail -1 "$W/check.txt")"
timeout 280 "$MPIRUN" -np 2 "$H" tune --graph "$W/branchy.json" --gpus 2 --backend cpu -o "$W/tuned.json" --timeout 250 \
  >"$W/tune.log" 2>&1 || fail "tune: $(grep -m1 error "$W/tune.log")"
timeout 240 "$MPIRUN" -np 2 "$H" run --graph "$W/branchy.json" --schedule "$W/tuned.json" --backend cpu \
  --input "$W/branchy.input.npy" --save-output "$W/branchy.tuned.npy" --verify --timeout 200 -o none \
  >"$W/tuned.run.log" 2>&1 || fail "tuned run: $(grep -m1 error "$W/tuned.run.log")"
close "$W/branchy.expected.npy" "$W/branchy.tuned.npy" "branchy, 2 ranks, tuned"

# A sweep over an imported model (the spec names "branchy.onnx" beside it), two sizes.
cat >"$W/sweep.json" <<'JSON'
{"name": "onnx", "models": ["branchy.onnx"], "sizes": [19, 23], "backends": ["cpu"], "costs": ["analytic"], "timeout_s": 120,
 "run": {"warmup": 0, "number": 1, "repeat": 1, "threads": 1, "verify": true},
 "groups": [{"batches": [1], "gpus": [1, 2], "algorithms": ["hios-lp"]}],
 "mpirun": {"args": ["--oversubscribe"], "env": {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}}}
JSON
timeout 280 "$PY" "$here/../../scripts/sweep.py" "$W/sweep.json" -o "$W/sweep.jsonl" --hios "$H" >"$W/sweep.log" 2>&1 ||
  fail "sweep: $(tail -2 "$W/sweep.log")"
grep -q "4 ok, 0 failed" "$W/sweep.log" || fail "sweep: $(tail -1 "$W/sweep.log")"

# A sweep over a segmentation network (onnx_cases.py's segnet: a transposed conv, a linear
# Resize by scales, skips, two heads) at two sizes on one and two ranks, every run verified;
# on two ranks a head computed on rank 1 is gathered to rank 0.
cat >"$W/sweep-seg.json" <<'JSON'
{"name": "segnet", "models": ["segnet.onnx"], "sizes": [16, 24], "backends": ["cpu"], "costs": ["analytic"], "timeout_s": 120,
 "run": {"warmup": 0, "number": 1, "repeat": 1, "threads": 1, "verify": true},
 "groups": [{"batches": [1], "gpus": [1, 2], "algorithms": ["hios-lp", "ios"]}],
 "mpirun": {"args": ["--oversubscribe"], "env": {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}}}
JSON
timeout 280 "$PY" "$here/../../scripts/sweep.py" "$W/sweep-seg.json" -o "$W/sweep-seg.jsonl" --hios "$H" >"$W/sweep-seg.log" 2>&1 ||
  fail "segmentation sweep: $(tail -2 "$W/sweep-seg.log")"
grep -q "8 ok, 0 failed" "$W/sweep-seg.log" || fail "segmentation sweep: $(tail -1 "$W/sweep-seg.log")"

# Served like a built-in model: the graph file in --models, rebuilt at each batch, answers verified.
timeout 300 "$H" serve --models "$W/branchy.json",demo --size 19 --duration 0.3 --loads 0.5 --batches 1,2 --static-batch 2 \
  --verify-every 1 -o "$W/serve.json" >"$W/serve.log" 2>&1 || fail "serve: $(grep -m1 error "$W/serve.log")"
grep -qE "^fifo .*branchy.json +[1-9]" "$W/serve.log" || fail "serve: no answered requests of the imported model: $(head -c 600 "$W/serve.log")"
grep -q "every request answered or rejected" "$W/serve.log" || fail "serve: no summary"

# Refusals: one line, exit 2, every unsupported node named.
refused() {  # LABEL PATTERN... -- COMMAND...
  local label=$1 pats=()
  shift
  while [ "$1" != "--" ]; do pats+=("$1"); shift; done
  shift
  local out rc
  out=$("$@" 2>&1 >/dev/null)
  rc=$?
  [ "$rc" = 2 ] || fail "$label: exit $rc, expected 2 ($out)"
  [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] || fail "$label: not one line: $out"
  for p in "${pats[@]}"; do
    printf '%s' "$out" | grep -q -- "$p" || fail "$label: no '$p' in: $out"
  done
}
refused "unsupported ops" "cannot import 3 nodes" "LpNormalization 'leaky' (opset 17)" "Unique 'hardtanh'" \
  "Pad 'pad_with_ones'.*mode 'wrap'" -- "$H" import "$W/unsupported.onnx" -o "$W/u.json"
[ ! -e "$W/u.json" ] && [ ! -e "$W/u.safetensors" ] || fail "a refused import wrote files"
refused "missing file" "no such file" -- "$H" import "$W/none.onnx" -o "$W/x.json"
head -c 4096 /dev/urandom >"$W/junk.onnx"
refused "not a model" "junk.onnx" -- "$H" import "$W/junk.onnx" -o "$W/x.json"
mv "$W/dynamo.onnx.data" "$W/moved.data"
refused "external data missing" "external data file" -- "$H" import "$W/dynamo.onnx" -o "$W/x.json"
refused "stdout" "-o must name a file" -- "$H" import "$W/branchy.onnx" -o -

if [ "$fails" -gt 0 ]; then
  echo "$fails failure(s)"
  exit 1
fi
echo "hios import: all checks passed"
