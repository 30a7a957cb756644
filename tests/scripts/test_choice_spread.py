"""scripts/choice_spread.py over small databases: a spread past the ratio is counted per card,
one within it, another implementation or a single database is not, and bad input fails."""
import gzip
import json
import os
import subprocess
import sys
import tempfile

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "choice_spread.py")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import check, finish  # noqa: E402


def db(path, card, choices, gz=False):
    data = {"format": "hios-profile", "identity": {"device": card}, "choices": choices}
    with (gzip.open(path, "wt") if gz else open(path, "w")) as f:
        json.dump(data, f)
    return path


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


with tempfile.TemporaryDirectory() as d:
    fused = lambda ms: {"impl": "graph-fused", "config": 0, "ms": ms}
    a = db(os.path.join(d, "a.json"), "H100", {"conv1": fused(0.020), "conv2": fused(0.010), "conv3": fused(0.010),
                                              "conv4": fused(0.010)})
    b = db(os.path.join(d, "b.json.gz"), "H100", {"conv1": fused(0.134), "conv2": fused(0.012),
                                                  "conv3": {"impl": "graph", "config": 4, "ms": 0.050}}, gz=True)
    c = db(os.path.join(d, "c.json"), "H200", {"conv1": fused(0.100)})
    r = run(a, b, c)
    check(r.returncode == 0, f"exit {r.returncode}: {r.stderr}")
    # conv1 6.7x counts; conv2 1.2x does not; conv3 changed implementation; conv4 is in one database.
    check("H100: 1 of 2 signatures" in r.stdout, f"H100 count: {r.stdout}")
    check("H200" not in r.stdout.split("\n")[0] and "H200:" not in r.stdout, f"H200 has one database: {r.stdout}")
    check("6.70x H100 graph-fused 0 conv1" in r.stdout, f"worst line: {r.stdout}")
    r = run(a, b, "--ratio", "1.1")
    check("H100: 2 of 2 signatures" in r.stdout, f"--ratio 1.1: {r.stdout}")
    r = run(a, "--ratio", "1")
    check(r.returncode != 0 and "--ratio" in r.stderr, f"--ratio 1 accepted: {r.returncode} {r.stderr}")
    bad = os.path.join(d, "bad.json")
    with open(bad, "w") as f:
        f.write("{not json")
    r = run(a, bad)
    check(r.returncode != 0 and "bad.json" in r.stderr and len(r.stderr.strip().splitlines()) == 1,
          f"bad input: {r.returncode} {r.stderr}")

finish("choice_spread")
