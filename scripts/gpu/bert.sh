#!/usr/bin/env bash
# BERT encoders from Hugging Face configs with seeded weights (scripts/bert_case.py): exported,
# imported, run on the CUDA backend with their int64 token ids and padding mask, each output
# compared with PyTorch's (max |difference| / max |reference|), and torch.compile timed in the
# same call.
#
#   BERT_CONFIGS="base" BERT_SEQS="128 512" BERT_MATH="fp32 tf32 bf16" bash scripts/gpu/bert.sh
#
# Environment: OUT (results), BUILD_DIR (a build with the importer, default /tmp/b), BERT_RUN_S
# (the limit of one `hios run`, default 200). Writes OUT/bert.txt and OUT/bert-torch.jsonl.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/output/gpu/bert}
B=${BUILD_DIR:-/tmp/b}
H=$B/cli/hios
mkdir -p "$OUT"
t=$OUT/bert.txt
: >"$t"
for cfg in ${BERT_CONFIGS:-base}; do
  for seq in ${BERT_SEQS:-128 512}; do
    d=/tmp/bert/$cfg-$seq
    mkdir -p "$d"
    python3 scripts/bert_case.py --config "$cfg" --seq "$seq" --out "$d" >"$d.export.log" 2>&1 ||
      { echo "bert $cfg $seq: export failed: $(tail -1 "$d.export.log")" | tee -a "$t"; continue; }
    "$H" import "$d/model.onnx" -o "$d/g.json" >"$d.import.log" 2>&1 ||
      { echo "bert $cfg $seq: import refused: $(grep -m1 error "$d.import.log")" | tee -a "$t"; continue; }
    grep -m1 "^folded" "$d.import.log" | tee -a "$t"
    "$H" schedule --graph "$d/g.json" --algo hios-lp --gpus 1 -o "$d/s.json" >/dev/null 2>&1
    for math in ${BERT_MATH:-fp32 tf32 bf16}; do
      rc=0
      timeout "${BERT_RUN_S:-200}" "$H" run --graph "$d/g.json" --schedule "$d/s.json" --backend cuda --math "$math" \
        --input "input_ids=$d/input_ids.npy" --input "attention_mask=$d/attention_mask.npy" \
        --save-output "$d/out-$math.npy" --warmup 5 --number 10 --repeat 7 -o "$d/run-$math.json" >"$d.run-$math.log" 2>&1 || rc=$?
      if [ "$rc" != 0 ]; then
        echo "bert $cfg $seq $math: run failed (exit $rc): $(grep -m1 error "$d.run-$math.log")" | tee -a "$t"
        continue
      fi
      python3 - "$d/torch.npy" "$d/out-$math.npy" "$d/run-$math.json" "bert_$cfg $seq $math" <<'PY' | tee -a "$t"
import json, sys
import numpy as np
want, got = np.load(sys.argv[1]), np.load(sys.argv[2])
err = float(np.abs(want - got).max() / np.abs(want).max()) if want.shape == got.shape else float("inf")
ms = json.load(open(sys.argv[3]))["latency_ms"]["median"]
print(f"{sys.argv[4]} hios-lp {ms:.3f} ms, max |difference| / max |PyTorch fp32| {err:.2e}")
PY
    done
    python3 scripts/bert_case.py --config "$cfg" --seq "$seq" --out "$d" --no-export --bench "$OUT/bert-torch.jsonl" \
      2>&1 | grep -v Warning | tail -2 | tee -a "$t"
  done
done
