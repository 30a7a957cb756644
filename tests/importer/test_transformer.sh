#!/usr/bin/env bash
# A transformer encoder layer through hios import on the CPU backend (transformer_case.py: token
# ids and a padding mask as int64 inputs, attention, LayerNorm and GELU in both exporters'
# forms, each one node): imported, run on one rank and, under mpirun, on two (hios-lp on 2 GPUs), each output
# within 1e-5 of NumPy's and the two runs alike bit for bit. Then the inputs a user can get
# wrong: ids outside the vocabulary (and below it), a sequence longer than the graph's, a mask
# of the wrong shape or dtype, each one line naming the input, exit 2.
#
#   bash test_transformer.sh HIOS MPIRUN
here=$(cd "$(dirname "$0")" && pwd)
source "$here/importer_test_setup.sh" "$@"

"$PY" "$here/transformer_case.py" "$W" || { echo "FAIL: transformer_case.py"; exit 1; }
cd "$W" || exit 1
RUN=(--backend cpu --threads 1 --warmup 0 --number 1 --repeat 1 -o none)

close() {  # EXPECTED GOT LABEL
  "$PY" - "$@" <<'PY' || fails=$((fails + 1))
import sys
import numpy as np
want, got = np.load(sys.argv[1]), np.load(sys.argv[2])
err = float(np.abs(want - got).max() / np.abs(want).max()) if want.shape == got.shape else float("inf")
print(("ok: " if err < 1e-5 else "FAIL: ") + "%s: max |difference| / max |expected| %.2e" % (sys.argv[3], err))
sys.exit(0 if err < 1e-5 else 1)
PY
}

for o in 13 17; do
  "$H" import "bert$o.onnx" -o "b$o.json" >"import$o.log" 2>&1 || { fail "import bert$o.onnx: $(tail -1 "import$o.log")"; continue; }
  # hios info lists the tensor inputs and the result with their types and dims.
  "$H" info "b$o.json" >"info$o.txt" 2>&1 && grep -q "^inputs  *ids int64 1x16, mask int64 1x16" "info$o.txt" &&
    grep -q "^results  *hidden float32 1x16x64" "info$o.txt" || fail "hios info b$o.json: $(head -3 "info$o.txt")"
  # GELU, in its erf form (opset 13's) and its tanh form (opset 17's), is one Gelu node.
  grep -q "1 GELU written out as one Gelu" "import$o.log" || fail "bert$o: GELU not fused: $(grep folded "import$o.log")"
  # The three layer norms, written out (opset 13) or LayerNormalization (17), are three norm nodes.
  [ "$(grep -o '"op":"norm"' "b$o.json" | wc -l)" = 3 ] || fail "bert$o: not three norm nodes: $(grep folded "import$o.log")"
  [ "$o" = 17 ] || grep -q "3 layer norms written out as one LayerNormalization" "import$o.log" ||
    fail "bert$o: layer norms not fused: $(grep folded "import$o.log")"
  # The attention (MatMul, Div, Add of the mask, Softmax, MatMul) is one attention node.
  grep -q "1 attention written out" "import$o.log" && [ "$(grep -o '"op":"attention"' "b$o.json" | wc -l)" = 1 ] ||
    fail "bert$o: attention not fused: $(grep folded "import$o.log")"
  # The two after a residual sum add it as they read it: no add node of their own.
  [ "$(grep -o '"residual":true' "b$o.json" | wc -l)" = 2 ] || fail "bert$o: the residual sums are not in the norms"
  "$H" schedule --graph "b$o.json" --algo hios-lp --gpus 1 -o "s1-$o.json" >/dev/null 2>&1 || fail "schedule, 1 GPU"
  "$H" schedule --graph "b$o.json" --algo hios-lp --gpus 2 --no-single-gpu-fallback -o "s2-$o.json" >/dev/null 2>&1 ||
    fail "schedule, 2 GPUs"
  inputs=(--input "ids=ids$o.npy" --input "mask=mask$o.npy")
  "$H" run --graph "b$o.json" --schedule "s1-$o.json" "${RUN[@]}" "${inputs[@]}" --save-output "one$o.npy" --verify \
    >"run1-$o.log" 2>&1 || fail "opset $o on one rank: $(tail -1 "run1-$o.log")"
  close "expected$o.npy" "one$o.npy" "opset $o, one rank"
  timeout 120 "$MPIRUN" -np 2 "$H" run --graph "b$o.json" --schedule "s2-$o.json" "${RUN[@]}" "${inputs[@]}" \
    --save-output "two$o.npy" --verify >"run2-$o.log" 2>&1 || fail "opset $o on two ranks: $(grep -m1 error "run2-$o.log")"
  grep -q "verify vs sequential cpu run .*max_abs 0.000e+00.*OK" "run2-$o.log" ||
    fail "opset $o: two ranks differ from the sequential run: $(grep verify "run2-$o.log")"
  close "expected$o.npy" "two$o.npy" "opset $o, two ranks"
done

refused() {  # NAME PATTERN --input ... : exit 2, one line matching PATTERN
  local name=$1 pattern=$2
  shift 2
  "$H" run --graph b13.json --schedule s1-13.json "${RUN[@]}" "$@" >out.txt 2>err.txt
  local rc=$?
  if [ $rc -ne 2 ] || [ "$(wc -l <err.txt)" -ne 1 ] || ! grep -qE -e "$pattern" err.txt; then
    fail "$name: rc $rc, wanted one line /$pattern/: $(head -3 err.txt)"
  else
    echo "ok: $name: $(cat err.txt)"
  fi
}
refused "ids outside the vocabulary" "ids-out-of-vocabulary.npy: input 'ids' element 3 is 150, outside the 100 entries of axis 0" \
  --input ids=ids-out-of-vocabulary.npy --input mask=mask13.npy
refused "ids below the vocabulary" "input 'ids' element 5 is -101, outside the 100 entries" --input ids=ids-negative.npy --input mask=mask13.npy
refused "a sequence longer than the graph's" "input 'ids' takes int64 \(1, 16\), the file holds int64 \(1, 32\)" \
  --input ids=ids-too-long.npy --input mask=mask13.npy
refused "a mask of the wrong shape" "input 'mask' takes int64 \(1, 16\), the file holds int64 \(1, 8\)" \
  --input ids=ids13.npy --input mask=mask-wrong-shape.npy
refused "a mask of floats" "input 'mask' takes int64 \(1, 16\), the file holds float32 \(1, 16\)" \
  --input ids=ids13.npy --input mask=mask-float.npy

[ $fails -eq 0 ] && echo "all checks passed"
exit $((fails > 0))
