"""scripts/profile_summary.py over a small profile database: an entry's share of a pass is its
median times its node count (samples / iters), summed per op kind and ranked; bad input fails
in one line."""
import json
import os
import subprocess
import sys
import tempfile

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "profile_summary.py")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import check, finish  # noqa: E402


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


with tempfile.TemporaryDirectory() as d:
    entries = [
        # three nodes share this signature: 3 x 0.5 ms
        {"key": '{"op":"activation","activation":"hard_swish"} in=[1x8x4x4] out=1x8x4x4 float32', "ms": 0.5,
         "samples": 30, "example": "act"},
        {"key": '{"op":"conv","out_channels":8} in=[1x8x4x4] out=1x8x4x4 float32', "ms": 1.0, "samples": 10,
         "example": "conv"},
        {"key": '{"op":"conv","out_channels":4} in=[1x8x4x4] out=1x4x4x4 float32', "ms": 0.25, "samples": 10,
         "example": "conv_small"},
    ]
    db = os.path.join(d, "db.json")
    with open(db, "w") as f:
        json.dump({"entries": entries}, f)
    r = run(db, "--iters", "10", "--top", "2")
    check(r.returncode == 0, f"exit {r.returncode}: {r.stderr}")
    lines = r.stdout.splitlines()
    check("sum of node times 2.750 ms" in lines[0], f"total: {lines[:1]}")
    # activation (1.5 ms over 3 nodes) before conv (1.25 ms over 2 nodes)
    check(lines[1].split()[:2] == ["activation", "1.500"] and lines[1].split()[-2] == "3", f"activation row: {lines[1]}")
    check(lines[2].split()[:2] == ["conv", "1.250"] and lines[2].split()[-2] == "2", f"conv row: {lines[2]}")
    ranked = [l for l in lines if " = " in l]
    check(len(ranked) == 2 and "act " in ranked[0] and "conv " in ranked[1], f"top two: {ranked}")

    bad = os.path.join(d, "bad.json")
    with open(bad, "w") as f:
        f.write("{not json")
    r = run(bad)
    check(r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1 and "bad.json" in r.stderr, f"bad input: {r.stderr}")

finish("profile_summary")
