#!/usr/bin/env python3
"""Where a graph's time goes, from a profile database (`hios profile -o DB`).

    python3 scripts/profile_summary.py DB.json [--iters N] [--top K]

Each entry of the database is one node signature, timed over every node that has it; its
samples are N per node (`hios profile --iters N`), so an entry's share of a pass is its median
times samples / N. Prints the total per op kind, then the K signatures that cost the most.
"""
import argparse
import json
import re
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("db")
    ap.add_argument("--iters", type=int, default=10, help="the --iters the profile was taken with")
    ap.add_argument("--top", type=int, default=15)
    a = ap.parse_args()
    try:
        entries = json.load(open(a.db))["entries"]
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"profile_summary: {a.db}: not a profile database ({e})")
    rows = []
    for e in entries:
        nodes = max(1, round(e.get("samples", a.iters) / a.iters))
        op = re.match(r'\{"op":"([^"]+)"', e["key"])
        rows.append((e["ms"] * nodes, nodes, op.group(1) if op else "?", e))
    total = sum(r[0] for r in rows)
    by_op = {}
    for t, n, op, _ in rows:
        s = by_op.setdefault(op, [0.0, 0])
        s[0] += t
        s[1] += n
    print(f"  sum of node times {total:.3f} ms")
    for op, (t, n) in sorted(by_op.items(), key=lambda kv: -kv[1][0]):
        print(f"  {op:18} {t:8.3f} ms {100 * t / total:5.1f}%  {n:4d} nodes")
    for t, n, op, e in sorted(rows, key=lambda r: -r[0])[: a.top]:
        print(f"  {t:8.4f} ms = {n:3d} x {e['ms']:.4f} {e.get('achieved_gbs', -1):6.0f} GB/s "
              f"{e.get('achieved_tflops', -1):6.1f} TF/s {e.get('example', '')[:28]:28} {e['key'][:150]}")


if __name__ == "__main__":
    main()
