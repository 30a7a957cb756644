#!/usr/bin/env python3
"""Digests of the built-in models' graphs and schedules, to show that a change to the IR changes
none of them (the 13 configurations of scripts/gpu.sh tune, every algorithm on one and two GPUs,
and the row-split search on two).

    python3 scripts/builtin_digests.py build/cli/hios > now.txt
    python3 scripts/builtin_digests.py build/cli/hios --check tests/data/builtin-digests.txt

Each line is `config what sha256`, where `what` is `graph` (the graph JSON as written) or
`ALGO:GPUS[:split]` (the schedule JSON with its measured search times removed: everything
else in it, predictions included, is deterministic). --check compares with a stored list and
exits 1 naming every line that differs.
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

CONFIGS = ["inception_v3:331:1", "inception_v3:512:1", "inception_v3:1024:1", "inception_v3:2048:1",
           "inception_v3:512:8", "nasnet_large:331:1", "nasnet_large:512:1", "nasnet_large:1024:1",
           "nasnet_large:2048:1", "randwire:331:1", "randwire:512:1", "randwire:1024:1", "randwire:2048:1"]
ALGOS = ["sequential", "greedy", "ios", "hios-lp", "hios-mr", "heft"]


def strip_times(obj):
    """The schedule without what the clock measured (search and profiling seconds)."""
    if isinstance(obj, dict):
        return {k: strip_times(v) for k, v in obj.items() if k not in ("optimisation_cost", "search_s", "elapsed_s")}
    if isinstance(obj, list):
        return [strip_times(v) for v in obj]
    return obj


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def digests(hios: str, configs):
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        for cfg in configs:
            model, size, batch = cfg.split(":")
            graph = os.path.join(tmp, "g.json")
            subprocess.run([hios, "graph", "--model", model, "--height", size, "--width", size, "--batch", batch,
                            "-o", graph], check=True, capture_output=True)
            with open(graph, "rb") as f:
                lines.append(f"{cfg} graph {sha(f.read())}")
            runs = [(a, g, False) for a in ALGOS for g in (1, 2)] + [("hios-lp", 2, True)]
            for algo, gpus, split in runs:
                out = os.path.join(tmp, "s.json")
                cmd = [hios, "schedule", "--graph", graph, "--algo", algo, "--gpus", str(gpus), "--time-budget", "0",
                       "-o", out] + (["--spatial", "auto"] if split else [])
                subprocess.run(cmd, check=True, capture_output=True)
                with open(out) as f:
                    s = strip_times(json.load(f))
                text = json.dumps(s, sort_keys=True).encode()
                lines.append(f"{cfg} {algo}:{gpus}{':split' if split else ''} {sha(text)}")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("hios")
    ap.add_argument("--check", help="a stored list to compare with")
    ap.add_argument("--configs", help="comma-separated MODEL:SIZE:BATCH (default: the 13)")
    args = ap.parse_args()
    configs = args.configs.split(",") if args.configs else CONFIGS
    lines = digests(args.hios, configs)
    if not args.check:
        print("\n".join(lines))
        return 0
    with open(args.check) as f:
        want = {" ".join(l.split()[:2]): l.split()[2] for l in f if l.strip() and not l.startswith("#")}
    bad = []
    for l in lines:
        key, got = " ".join(l.split()[:2]), l.split()[2]
        if want.get(key) != got:
            bad.append(f"{key}: {got}, stored {want.get(key, 'nothing')}")
    for b in bad:
        print("builtin_digests: changed:", b, file=sys.stderr)
    print(f"builtin_digests: {len(lines) - len(bad)} of {len(lines)} unchanged")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
