#!/usr/bin/env python3
"""The analytic preset's prediction of every schedule a `hios tune` timed, against its measurement.

A tune's profile database keeps each candidate it searched, with its schedule and what it
measured (`searched.candidates`). This replays each schedule under `--cost analytic --device
DEVICE` with `hios show` and prints a Markdown table: measured ms, the preset's ms, error.

  python3 scripts/preset_check.py --hios build/cli/hios --graph G.json --device h100 DB.json[.gz]

Candidates of the calibrated second round are left out (the same schedules as the first
round's, searched with a fitted cost); a row split is replayed on the split graph its
schedule's `meta.spatial` names, as `hios run` does. Measured times are the database's: the
quick round's (5 passes, receives posted at once) unless the candidate was a finalist.
"""
import argparse
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rt") as f:
            db = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"preset_check.py: {path}: not a readable JSON profile database ({e})")
    if not isinstance(db, dict):
        sys.exit(f"preset_check.py: {path}: not a profile database (a JSON object)")
    return db


def analytic_ms(hios, graph, device, schedule):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(schedule, f)
        path = f.name
    try:
        r = subprocess.run([hios, "show", path, "--graph", graph, "--cost", "analytic", "--device", device],
                           capture_output=True, text=True)
    finally:
        os.unlink(path)
    m = re.search(r"simulated ([\d.]+) ms", r.stdout)
    if r.returncode != 0 or not m:
        sys.exit(f"preset_check.py: hios show failed: {(r.stderr or r.stdout).strip().splitlines()[-1:]}")
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hios", default="build/cli/hios")
    ap.add_argument("--graph", required=True, help="the graph the tune ran on")
    ap.add_argument("--device", required=True, help="the analytic preset, e.g. h100 or h100-bf16")
    ap.add_argument("db", help="the tune's profile database (.json or .json.gz)")
    a = ap.parse_args()
    cands = load(a.db).get("searched", {}).get("candidates", [])
    if not cands:
        sys.exit(f"preset_check.py: {a.db} keeps no searched candidates (not written by hios tune?)")
    print(f"| schedule | measured ms | `{a.device}` ms | error |")
    print("|---|---:|---:|---:|")
    for c in cands:
        if "(calibrated)" in c["label"] or not c.get("verified", True):
            continue
        ms = analytic_ms(a.hios, a.graph, a.device, c["schedule"])
        print(f"| {c['label']} | {c['measured_ms']:.3f} | {ms:.3f} | {ms / c['measured_ms'] - 1:+.1%} |")


if __name__ == "__main__":
    main()
