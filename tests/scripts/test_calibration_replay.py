#!/usr/bin/env python3
"""scripts/calibration_replay.py on a tune saved from two H100s (inception_v3 512, whose unsplit
two-GPU schedules the isolated links put 8-18% above their measurements): fitted from 0 up, the
replay gives back the tune's own printed prediction; fitted from minus the link latency up, as
the tune does now, the per-transfer cost is negative but no lower than that, and the chosen
schedule's prediction comes within 10% of its measurement.
  test_calibration_replay.py HIOS PROJECT_SOURCE_DIR"""
import os
import sys
import tempfile

hios, root = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(root, "scripts"))
import calibration_replay  # noqa: E402

data = os.path.join(root, "docs/data/two-h100-2026-11-28-default")
with tempfile.TemporaryDirectory() as tmp:
    row = calibration_replay.replay(hios, data, "inception_v3-512-b1-tf32", tmp)
m = row["measured_ms"]
zero, neg = row["from_zero"], row["from_minus_latency"]
print(row)
assert row["peers"] >= 2, row
assert zero["transfer_us"] == 0.0, zero
assert abs(zero["predicted_ms"] / row["tune_predicted_ms"] - 1) < 0.02, (zero, row["tune_predicted_ms"])
assert -row["min_link_latency_us"] - 1e-9 <= neg["transfer_us"] < 0, neg
assert abs(neg["predicted_ms"] / m - 1) < 0.10 < abs(zero["predicted_ms"] / m - 1), (neg, zero, m)
print("calibration replay: ok")
