#!/usr/bin/env python3
"""Where a reduced math mode loses accuracy: a graph cut after each block, run on the CPU backend
(fp32) and on another backend and math mode, with the error of each block's exit.

    python3 scripts/precision_probe.py GRAPH --input x=FILE.npy --math tf32 bf16 [--blocks 0:38:2]

For every chosen block k, the graph's first k+1 blocks are written beside GRAPH (so that its
relative weights path still holds; the files are removed afterwards), given a sequential schedule,
and run once on `--backend cpu` and once per math mode on `--backend` (default cuda). One line per
block: the exit's shape, max |difference| / max |CPU result|, and the share of elements whose
difference is above 1% of that maximum. The first block whose error jumps is the op to look at.
Needs NumPy and the hios binary only.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def run(hios, args):
    p = subprocess.run([hios] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise RuntimeError((p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1])


def parse_range(text, count):
    start, _, rest = text.partition(":")
    stop, _, step = rest.partition(":")
    return range(int(start or 0), min(count, int(stop or count)), int(step or 1))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("graph")
    ap.add_argument("--input", action="append", default=[], help="NAME=FILE.npy, as for hios run")
    ap.add_argument("--math", nargs="+", default=["tf32", "bf16"])
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--blocks", default="0:", help="START:STOP:STEP over the graph's blocks (default all)")
    ap.add_argument("--hios", default=os.environ.get("HIOS", os.path.join(REPO, "build", "cli", "hios")))
    args = ap.parse_args(argv)
    with open(args.graph) as f:
        graph = json.load(f)
    blocks = graph["blocks"]
    folder = os.path.dirname(os.path.abspath(args.graph))
    inputs = []
    for item in args.input:
        name, _, file = item.partition("=")
        inputs += ["--input", f"{name}={os.path.abspath(file)}"]
    print(f"{'block':>5} {'exit':40} {'shape':>18} " + " ".join(f"{m + ' rel':>10} {m + ' >1%':>9}" for m in args.math))
    with tempfile.TemporaryDirectory(prefix="probe.") as tmp:
        for k in parse_range(args.blocks, len(blocks)):
            cut = dict(graph, blocks=blocks[:k + 1])
            cut.pop("outputs", None)
            exit_name = blocks[k]["exit"]
            path = os.path.join(folder, f".probe-{os.getpid()}-{k}.json")
            sched = os.path.join(tmp, f"s{k}.json")
            try:
                with open(path, "w") as f:
                    json.dump(cut, f)
                run(args.hios, ["schedule", "--graph", path, "--algo", "sequential", "-o", sched])
                results = {}
                for label, backend, math in [("ref", "cpu", None)] + [(m, args.backend, m) for m in args.math]:
                    out = os.path.join(tmp, f"{k}-{label}")
                    os.makedirs(out, exist_ok=True)
                    extra = ["--math", math] if math else []
                    try:
                        run(args.hios, ["run", "--graph", path, "--schedule", sched, "--backend", backend, "-o", "none",
                                        "--save-output", out] + extra + inputs)
                        files = [x for x in os.listdir(out) if x.endswith(".npy")]
                        results[label] = np.load(os.path.join(out, files[0])).astype(np.float64)
                    except RuntimeError as e:
                        results[label] = str(e)
            finally:
                os.path.exists(path) and os.remove(path)
            ref = results["ref"]
            if isinstance(ref, str):
                print(f"{k:5d} {exit_name[:40]:40} cpu failed: {ref}")
                continue
            scale = float(np.max(np.abs(ref))) or 1.0
            cells = []
            for m in args.math:
                got = results[m]
                if isinstance(got, str):
                    cells.append(f"{'failed':>10} {'':>9}")
                    continue
                diff = np.abs(got - ref)
                cells.append(f"{diff.max() / scale:10.2e} {np.mean(diff > 0.01 * scale) * 100:8.3f}%")
            print(f"{k:5d} {exit_name[:40]:40} {'x'.join(map(str, ref.shape)):>18} " + " ".join(cells), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
