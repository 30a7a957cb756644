#!/usr/bin/env python3
"""The analytic preset's prediction of every schedule a `hios tune` timed, against its measurement.

A tune's profile database keeps each candidate it searched, with its schedule and what it
measured (`searched.candidates`). This replays each schedule under `--cost analytic --device
DEVICE` with `hios show` and prints a Markdown table: measured ms, the preset's ms, error.

  python3 scripts/preset_check.py --hios build/cli/hios --graph G.json --device h100 DB.json[.gz]
      [--devices FILE]      # a devices file hios fit-preset wrote (default: the built-in presets)
      [--tuned TUNED.json]  # the schedule the same tune wrote: adds the best receive posting

Candidates of the calibrated second round are left out (the same schedules as the first
round's, searched with a fitted cost); a row split is replayed on the split graph its
schedule's `meta.spatial` names, as `hios run` does. Measured times are the database's: the
quick round's (5 passes, receives posted at once) unless the candidate was a finalist. With
--tuned, a second measured column is the fastest of the candidate and its receive-lead
variants (the same schedule with receives posted later, `meta.tune.candidates` of the written
schedule), which the simulator does not tell apart.
"""
import argparse
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile


PROG = os.path.basename(sys.argv[0])


def fail(msg):
    sys.exit(f"{PROG}: {msg}")


def load(path):
    """A JSON object from a file, gzipped or not."""
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rt") as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"{path}: not a readable JSON file ({e})")
    if not isinstance(data, dict):
        fail(f"{path}: not a JSON object")
    return data


def searched_candidates(db_path):
    """The first-round candidates a tune's database keeps, verified (the calibrated second round
    searched the same schedules with a fitted cost)."""
    cands = load(db_path).get("searched", {}).get("candidates", [])
    if not cands:
        fail(f"{db_path}: keeps no searched candidates (not written by hios tune?)")
    return [c for c in cands if "(calibrated)" not in c["label"] and c.get("verified", True)]


def shown_ms(hios, graph, schedule_path, cost_args):
    """`hios show`'s simulated latency of a schedule file under the cost model `cost_args` names
    (e.g. ["--cost", "analytic", "--device", "h100"] or ["--cost", "db.json"])."""
    r = subprocess.run([hios, "show", schedule_path, "--graph", graph] + cost_args, capture_output=True, text=True)
    m = re.search(r"simulated ([\d.]+) ms", r.stdout)
    if r.returncode != 0 or not m:
        fail(f"hios show failed on {schedule_path}: {(r.stderr or r.stdout).strip().splitlines()[-1:]}")
    return float(m.group(1))


def simulated_ms(hios, graph, device, devices, schedule_path):
    """`hios show`'s simulated latency of a schedule file under an analytic preset."""
    extra = ["--devices", devices] if devices else []
    return shown_ms(hios, graph, schedule_path, ["--cost", "analytic", "--device", device] + extra)


def write_schedule(schedule):
    """A schedule in a temporary file, for hios show; the caller removes it."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(schedule, f)
        return f.name


def best_postings(path):
    """Label of a candidate -> the measured times of it and of its receive-lead variants, from
    the schedule a tune wrote (its meta.tune.candidates)."""
    try:
        tune = load(path)["meta"]["tune"]
        out = {}
        for c in tune["candidates"]:
            if c.get("verified", True) and c.get("measured_ms", 0) > 0:
                # Tunes before "posting_of" was written named the base only inside the label.
                base = c.get("posting_of") or c["label"].split(", receives ")[0]
                out.setdefault(base, []).append(c["measured_ms"])
        return out
    except (KeyError, TypeError) as e:
        fail(f"{path}: not a schedule written by hios tune (no {e})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hios", default="build/cli/hios")
    ap.add_argument("--graph", required=True, help="the graph the tune ran on")
    ap.add_argument("--device", required=True, help="the analytic preset, e.g. h100 or h100-bf16")
    ap.add_argument("--devices", help="a devices file (hios fit-preset -o) to find --device in")
    ap.add_argument("--tuned", help="the schedule this tune wrote: its meta.tune.candidates give the best receive posting")
    ap.add_argument("db", help="the tune's profile database (.json or .json.gz)")
    a = ap.parse_args()
    cands = searched_candidates(a.db)
    timed = best_postings(a.tuned) if a.tuned else None
    if timed is None:
        print(f"| schedule | measured ms | `{a.device}` ms | error |")
        print("|---|---:|---:|---:|")
    else:
        print(f"| schedule | measured ms | best receive posting ms | `{a.device}` ms | error | error, best posting |")
        print("|---|---:|---:|---:|---:|---:|")
    for c in cands:
        path = write_schedule(c["schedule"])
        try:
            ms = simulated_ms(a.hios, a.graph, a.device, a.devices, path)
        finally:
            os.unlink(path)
        if timed is None:
            print(f"| {c['label']} | {c['measured_ms']:.3f} | {ms:.3f} | {ms / c['measured_ms'] - 1:+.1%} |")
        else:
            best = min([c["measured_ms"]] + timed.get(c["label"], []))
            print(f"| {c['label']} | {c['measured_ms']:.3f} | {best:.3f} | {ms:.3f} | {ms / c['measured_ms'] - 1:+.1%} | "
                  f"{ms / best - 1:+.1%} |")

if __name__ == "__main__":
    main()
