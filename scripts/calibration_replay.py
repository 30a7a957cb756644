#!/usr/bin/env python3
"""Replay hios tune's calibrated prediction of the chosen schedule from a tune's saved files,
with the per-transfer cost fitted from 0 up (LOWEST=0) or from minus the fastest link's
latency up (the tune's rule, docs/tuner.md "Calibration"). No GPU needed: what was measured
(stages and links in the profile database, every candidate's time in the tuned schedule's
meta.tune) stays; only the prediction is recomputed.

  python3 scripts/calibration_replay.py --hios build/cli/hios DIR CONFIG [CONFIG ...]

DIR holds CONFIG.graph.json (or the graph is rebuilt with `hios graph` from the name),
CONFIG.db.json[.gz] and CONFIG.tuned.json, as scripts/gpu.sh tune writes them, e.g.
CONFIG = inception_v3-512-b1-tf32. A candidate's simulated latency as a function of the
per-transfer cost x comes from `hios show --cost DB` on a copy of the database whose links'
latencies are shifted by x (the same as the tune's replaying cost model for a transfer, since
a link costs its latency plus bytes over bandwidth). Its peers are the tune's: verified
multi-GPU candidates of another structure, of its kind (unsplit, a split exchanging halos, or
a split by recompute alone), with its receive lead if any has it, else with receives posted
at once. The launch gap is left out (the tune takes it or none, whichever fits the peers
better), so a replay can differ from the tune's print by a few tenths of a percent.
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from preset_check import load, shown_ms  # noqa: E402

LEAD = re.compile(r", receives (\d+) stages? ahead")
UNSPLIT, HALO_SPLIT, RECOMPUTE_SPLIT = 0, 1, 2


def kind(c):
    """The tune's calibration kind (CalibrationKind) from a candidate's label."""
    label = c["label"]
    if " rows " not in label:
        return UNSPLIT
    return HALO_SPLIT if ("halo" in label or "mixed" in label) else RECOMPUTE_SPLIT


def find(d, config, suffixes, required=True):
    for s in suffixes:
        p = os.path.join(d, config + s)
        if os.path.exists(p):
            return p
    if required:
        sys.exit(f"calibration_replay: no {config}{' or '.join(suffixes)} in {d}")
    return None


class Replay:
    def __init__(self, hios, graph, db, tmp):
        self.hios, self.graph, self.db, self.tmp = hios, graph, db, tmp
        self.min_latency_us = min(l["latency_us"] for l in db["links"])
        lo = -self.min_latency_us
        self.shifts = sorted({lo, 0.75 * lo, 0.5 * lo, 0.25 * lo, 0, 5, 10, 25, 50, 100, 200, 400})
        self.dbs = []
        for k, s in enumerate(self.shifts):
            shifted = json.loads(json.dumps(db))
            for l in shifted["links"]:
                l["latency_us"] = max(0.0, l["latency_us"] + s)
            p = os.path.join(tmp, f"db{k}.json")
            with open(p, "w") as f:
                json.dump(shifted, f)
            self.dbs.append(p)
        self.curves = {}

    def curve(self, label, schedule):
        if label not in self.curves:
            sp = os.path.join(self.tmp, "schedule.json")
            with open(sp, "w") as f:
                json.dump(schedule, f)
            self.curves[label] = [shown_ms(self.hios, self.graph, sp, ["--cost", p]) for p in self.dbs]
        return self.curves[label]

    def at(self, ys, v):
        i = 1
        while i + 1 < len(self.shifts) and v > self.shifts[i]:
            i += 1
        x0, x1 = self.shifts[i - 1], self.shifts[i]
        return ys[i - 1] + (ys[i] - ys[i - 1]) * (v - x0) / (x1 - x0)


def replay(hios, d, config, tmp):
    tuned = load(find(d, config, [".tuned.json"]))
    db = load(find(d, config, [".db.json", ".db.json.gz"]))
    graph = find(d, config, [".graph.json"], required=False)
    if graph is None:  # rebuild it: MODEL-SIZE-bBATCH-MATH
        model, size, batch = re.match(r"(.+)-(\d+)-b(\d+)-", config).groups()
        graph = os.path.join(tmp, "graph.json")
        subprocess.run([hios, "graph", "--model", model, "--height", size, "--width", size,
                        "--batch", batch, "-o", graph], capture_output=True, check=True)
    t = tuned["meta"]["tune"]
    overhead = db["pass_overhead_ms"]
    searched = {c["label"]: c for c in db["searched"]["candidates"]}
    r = Replay(hios, graph, db, tmp)

    def base(c):
        return searched.get(LEAD.sub("", c["label"]))

    def multi(c):
        b = base(c)
        return b is not None and b["gpus"] > 1 and c.get("measured_ms", 0) > 0

    cands = [c for c in t["candidates"] if multi(c)]
    def lead(c):  # the receive lead, -1 posted at once
        m = LEAD.search(c["label"])
        return int(m.group(1)) if m else -1
    chosen = next(c for c in t["candidates"] if c["label"] == t["chosen"])

    def peers(me):
        for same_lead in (True, False):
            out = [c for c in cands if LEAD.sub("", c["label"]) != LEAD.sub("", me["label"])
                   and kind(c) == kind(me) and (lead(c) == lead(me) if same_lead else lead(c) < 0)]
            if out:
                return out
        return []

    def fit(ps, lowest):
        hi = max(c["measured_ms"] for c in ps) * 1e3
        def loss(v):
            return sum(math.log((r.at(r.curve(LEAD.sub("", c["label"]), base(c)["schedule"]), v) + overhead)
                                / c["measured_ms"]) ** 2 for c in ps)
        lo = min(lowest, 0.0)
        best = min((lo + (min(hi, 400) - lo) * k / 4000 for k in range(4001)), key=loss)
        return best if loss(best) < loss(0) else 0.0

    m = chosen["measured_ms"]
    row = {"config": config, "measured_ms": m, "tune_predicted_ms": chosen["predicted_ms"],
           "min_link_latency_us": r.min_latency_us}
    ps = peers(chosen) if multi(chosen) else []
    row["one_gpu"] = not multi(chosen)
    row["peers"] = len(ps)
    row["uncalibrated_ms"] = chosen.get("predicted_uncalibrated_ms")
    if ps:
        ys = r.curve(LEAD.sub("", chosen["label"]), base(chosen)["schedule"])
        for name, lowest in (("from_zero", 0.0), ("from_minus_latency", -r.min_latency_us)):
            x = fit(ps, lowest)
            row[name] = {"transfer_us": x, "predicted_ms": r.at(ys, x) + overhead}
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hios", default="build/cli/hios")
    ap.add_argument("dir")
    ap.add_argument("configs", nargs="+")
    a = ap.parse_args()
    print(f"{'configuration':28s} {'measured':>9s} {'tune':>16s} {'fit from 0':>24s} {'fit from -latency':>24s}")
    for config in a.configs:
        with tempfile.TemporaryDirectory() as tmp:
            row = replay(a.hios, a.dir, config, tmp)
        m = row["measured_ms"]
        err = lambda p: f"{p:7.3f} ({(p / m - 1) * 100:+5.1f}%)"
        line = f"{config:28s} {m:9.3f} {err(row['tune_predicted_ms']):>16s}"
        if row["peers"]:
            for name in ("from_zero", "from_minus_latency"):
                f = row[name]
                line += f"   x {f['transfer_us']:+6.1f} us {err(f['predicted_ms'])}"
        elif row["one_gpu"]:
            line += "   one GPU: no transfers (its launch gap is not replayed here)"
        else:
            line += "   no other candidate of its kind: uncalibrated"
            u = row.get("uncalibrated_ms")
            if u:
                line += f" {err(u)}"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
