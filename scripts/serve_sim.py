#!/usr/bin/env python3
"""A queueing model of one model served with batching, for reasoning about tails before a GPU run.

Requests arrive as a Poisson stream. A free worker (one per replica) takes everything that waits,
up to --cap, and runs it as the smallest prepared batch that holds it (padding, as hios serve
does), for that batch's pass time times --slowdown (the share of the device lost to the other
models, which this model does not simulate). Latency is queueing plus the pass, as hios serve
counts it.

With --budget-ms the worker decides as hios serve's adaptive launcher does instead
(serve/batching.cpp, BatchController::adaptive_take, without the hold): the largest batch whose pass
still answers the oldest request within the budget; past it, a drain. --drain picks the drain
rule: 'max' (the batch answering the most requests per ms) or 'bounded' (the same among batches
whose pass is at most a batch-1 pass plus the mean gap between arrivals, hios serve's rule).

It is a model, not a measurement: docs/benchmarks.md (serving: the adaptive hold, the bounded drain) used
it to ask whether preparing every batch from 1 to 8, and a bounded drain, should shorten
nasnet_large's tail, before measuring.

  python3 scripts/serve_sim.py --rate 465 --pass-ms 1:2.31,2:2.71,4:3.64,8:5.85 --sizes 1,2,4,8
  python3 scripts/serve_sim.py --rate 465 --pass-ms 1:2.31,2:2.71,4:3.64,8:5.85 --sizes 1-8 --replicas 2 --slowdown 1.5
  python3 scripts/serve_sim.py --rate 465 --pass-ms 1:2.31,2:2.71,4:3.64,8:5.85 --sizes 1-8 --replicas 2 --slowdown 1.5 \
    --budget-ms 7.05 --drain bounded
"""
import argparse
import bisect
import math
import random
import sys


def parse_pass_ms(text):
    """'1:2.31,2:2.71' -> {1: 2.31, 2: 2.71}: measured pass times (ms) by batch."""
    out = {}
    for item in text.split(","):
        batch, sep, ms = item.partition(":")
        if not sep:
            raise ValueError(f"--pass-ms: expected batch:ms, got '{item}'")
        b, t = int(batch), float(ms)
        if b < 1 or not (math.isfinite(t) and t > 0):
            raise ValueError(f"--pass-ms: '{item}' needs a batch of at least 1 and a time above 0")
        out[b] = t
    if 1 not in out:
        raise ValueError("--pass-ms: the batch-1 time is needed")
    return out


def parse_sizes(text):
    """'1,2,4,8' or '1-8' -> sorted batch sizes, 1 included."""
    if "-" in text:
        lo, hi = (int(x) for x in text.split("-", 1))
        sizes = list(range(lo, hi + 1))
    else:
        sizes = sorted({int(x) for x in text.split(",")})
    if not sizes or sizes[0] != 1:
        raise ValueError("--sizes must start at 1")
    return sizes


def pass_time(measured, b):
    """Measured, or interpolated linearly between the nearest measured batches (held flat past the
    largest, scaled in proportion past it would overstate a device with room to spare)."""
    if b in measured:
        return measured[b]
    keys = sorted(measured)
    lo = max(k for k in keys if k <= b)
    above = [k for k in keys if k >= b]
    if not above:
        return measured[lo] * b / lo
    hi = min(above)
    return measured[lo] + (measured[hi] - measured[lo]) * (b - lo) / (hi - lo)


def poisson_arrivals(rate_per_s, n, seed):
    rng = random.Random(seed)
    lam = rate_per_s / 1000.0  # per ms
    arrivals, t = [], 0.0
    for _ in range(n):
        t += rng.expovariate(lam)
        arrivals.append(t)
    return arrivals


def serve(arrivals, sizes, pass_ms, replicas, decide):
    """The workers: whichever is free first takes decide(waiting, oldest's wait in ms) ->
    (requests, drained?) and runs them as the smallest prepared batch holding them. Returns
    (latencies in ms in arrival order, requests answered by drained passes)."""
    n = len(arrivals)
    free = [0.0] * replicas
    lat = [0.0] * n
    drained = 0
    i = 0
    while i < n:
        w = min(range(replicas), key=lambda k: free[k])
        start = max(free[w], arrivals[i])
        waiting = bisect.bisect_right(arrivals, start, i, n) - i
        take, was_drained = decide(waiting, start - arrivals[i])
        end = start + pass_ms(next(s for s in sizes if s >= take))
        for q in range(i, i + take):
            lat[q] = end - arrivals[q]
        drained += take if was_drained else 0
        free[w] = end
        i += take
    return lat, drained


def simulate(rate_per_s, measured, sizes, replicas=1, slowdown=1.0, cap=None, n=200000, seed=1):
    """Latencies (ms) of n requests, in arrival order: every pass takes all that waits, up to cap."""
    cap = min(cap or sizes[-1], sizes[-1])
    lat, _ = serve(poisson_arrivals(rate_per_s, n, seed), sizes, lambda b: pass_time(measured, b) * slowdown, replicas,
                   lambda waiting, oldest_ms: (min(waiting, cap), False))
    return lat


def adaptive_take(waiting, oldest_ms, sizes, pass_ms, budget_ms, drain, gap_ms):
    """(requests taken, drained?) as BatchController::adaptive_take decides, pass_ms(b) its estimate."""
    top = next((s for s in sizes if s >= waiting), sizes[-1])
    cands = [s for s in sizes if s <= top]

    def served(b):
        return min(waiting, b)

    def at_least_as_fast(x, y):
        return served(x) * pass_ms(y) >= served(y) * pass_ms(x)

    # A padded top batch is kept only where it answers as fast as the next smaller, full one.
    if top > waiting and len(cands) >= 2 and not at_least_as_fast(top, cands[-2]):
        cands.pop()
    for b in reversed(cands):
        if oldest_ms + pass_ms(b) <= budget_ms:
            return served(b), False
    bound = pass_ms(1) + gap_ms if drain == "bounded" else math.inf
    best = cands[0]
    for b in cands:
        if pass_ms(b) <= bound and not at_least_as_fast(best, b):
            best = b
    return served(best), True


def simulate_adaptive(rate_per_s, measured, sizes, budget_ms, drain="bounded", replicas=1, slowdown=1.0, n=200000,
                      seed=1):
    """(latencies in ms in arrival order, requests answered by drained passes)."""
    gap_ms = 1000.0 / rate_per_s

    def pass_ms(b):
        return pass_time(measured, b) * slowdown

    return serve(poisson_arrivals(rate_per_s, n, seed), sizes, pass_ms, replicas,
                 lambda waiting, oldest_ms: adaptive_take(waiting, oldest_ms, sizes, pass_ms, budget_ms, drain, gap_ms))


def percentile(sorted_values, q):
    return sorted_values[min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, required=True, help="requests per second of this model")
    ap.add_argument("--pass-ms", required=True, help="pass time by batch, e.g. 1:2.31,2:2.71,4:3.64,8:5.85")
    ap.add_argument("--sizes", default="1,2,4,8", help="prepared batches: 1,2,4,8 or a range 1-8")
    ap.add_argument("--replicas", type=int, default=1, help="workers taking from the one queue")
    ap.add_argument("--slowdown", type=float, default=1.0, help="pass times scaled by this (device sharing)")
    ap.add_argument("--cap", type=int, default=0, help="most requests a pass takes (0: the largest batch)")
    ap.add_argument("--budget-ms", type=float, default=0, help="decide as the adaptive launcher with this budget")
    ap.add_argument("--drain", choices=("max", "bounded"), default="bounded", help="with --budget-ms: the drain rule")
    ap.add_argument("--requests", type=int, default=200000)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    try:
        measured = parse_pass_ms(a.pass_ms)
        sizes = parse_sizes(a.sizes)
        if not (math.isfinite(a.rate) and a.rate > 0):
            raise ValueError("--rate must be above 0")
        if not (1 <= a.replicas <= 64):
            raise ValueError("--replicas must be from 1 to 64")
        if not (math.isfinite(a.slowdown) and a.slowdown > 0):
            raise ValueError("--slowdown must be above 0")
        if not (0 <= a.cap <= 4096) or not (1000 <= a.requests <= 10**7):
            raise ValueError("--cap must be from 0 to 4096 and --requests from 1000 to 10000000")
        if not (math.isfinite(a.budget_ms) and 0 <= a.budget_ms <= 60000) or (a.budget_ms and a.cap):
            raise ValueError("--budget-ms must be from 0 to 60000, and not with --cap")
    except ValueError as e:
        print(f"serve_sim.py: {e}", file=sys.stderr)
        return 2
    if a.budget_ms:
        lat, drained = simulate_adaptive(a.rate, measured, sizes, a.budget_ms, a.drain, a.replicas, a.slowdown,
                                         a.requests, a.seed)
        rule = f"budget {a.budget_ms:g} ms, drain {a.drain} ({drained} drained)"
    else:
        lat = simulate(a.rate, measured, sizes, a.replicas, a.slowdown, a.cap or None, a.requests, a.seed)
        rule = f"cap {a.cap or sizes[-1]}"
    lat = sorted(lat)
    mean = sum(lat) / len(lat)
    print(f"rate {a.rate:g}/s, sizes {a.sizes}, replicas {a.replicas}, slowdown {a.slowdown:g}, {rule}: "
          f"mean {mean:.3f} p50 {percentile(lat, .5):.3f} p97 {percentile(lat, .97):.3f} "
          f"p99 {percentile(lat, .99):.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
