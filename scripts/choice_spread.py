#!/usr/bin/env python3
"""How steady the CUDA backend's implementation choices are across profile databases.

Every database `hios tune` writes keeps its algorithm choices ("choices": per convolution
signature, the implementation kept and the time it measured). The same signature with the same
implementation and engine configuration should time about the same on the same card in every
database; a spread means the timing measured something other than the GPU's work
(docs/cuda-kernels.md, "Timing the candidates of a choice"). For each card, this counts the signatures chosen with one
implementation in two or more databases whose largest recorded time exceeds RATIO x the smallest,
and prints the worst.

    python3 scripts/choice_spread.py docs/data/*/*.db.json.gz [--ratio 1.5] [--show 10]
"""
import argparse
import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from preset_check import fail, load  # noqa: E402  (a database, gzipped or not; one line on failure)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("db", nargs="+", help="profile databases written by hios tune (.json or .json.gz)")
    ap.add_argument("--ratio", type=float, default=1.5, help="spread counted past this ratio (default 1.5)")
    ap.add_argument("--show", type=int, default=10, help="worst signatures to print (default 10)")
    a = ap.parse_args()
    if a.ratio <= 1:
        fail("--ratio must be above 1")
    times = collections.defaultdict(list)  # (card, signature, impl, config) -> [(ms, file)]
    for path in a.db:
        d = load(path)
        card = d.get("identity", {}).get("device", "?")
        for key, c in (d.get("choices") or {}).items():
            if isinstance(c, dict) and c.get("ms", 0) > 0:
                times[(card, key, c.get("impl"), c.get("config", c.get("variant", c.get("algo"))))].append((c["ms"], path))
    seen, spread, worst = collections.Counter(), collections.Counter(), []
    for (card, key, impl, config), ts in times.items():
        if len(ts) < 2:
            continue
        seen[card] += 1
        lo, hi = min(ts), max(ts)
        if hi[0] > a.ratio * lo[0]:
            spread[card] += 1
            worst.append((hi[0] / lo[0], card, key, impl, config, lo, hi))
    for card in sorted(seen):
        print(f"{card}: {spread[card]} of {seen[card]} signatures kept with one implementation in two or more "
              f"databases spread over {a.ratio}x")
    for r, card, key, impl, config, lo, hi in sorted(worst, reverse=True)[:a.show]:
        print(f"  {r:.2f}x {card} {impl} {config} {key}\n    {lo[0] * 1e3:.1f} us in {lo[1]}\n    {hi[0] * 1e3:.1f} us in {hi[1]}")


if __name__ == "__main__":
    main()
