#!/usr/bin/env python3
"""Refit an analytic device preset to whole schedules that `hios tune` timed.

`hios fit-preset` fits a preset to node times measured one node at a time. Those sum to the
sequential pass within a few percent, but the preset's few efficiencies cannot follow every
node, and the errors do not cancel in a schedule (docs/cost-model.md). This fits the same
parameters to what a user of `hios schedule` sees: the simulated latency of every schedule a
tune timed, against its measured median.

  python3 scripts/preset_refit.py --hios build/cli/hios --device h100 --name h100 -o fitted.json \\
      --tune G1.json DB1.json[.gz] TUNED1.json  --tune G2.json DB2.json TUNED2.json ...

Each --tune names the graph a tune ran on, its profile database (its `searched.candidates`: the
schedules and their quick-round times) and the schedule it wrote (its `meta.tune.candidates`:
the receive-lead variants, whose fastest stands for the schedule, as the simulator does not tell
them apart). Candidates of the calibrated second round are left out. The fit minimises the mean
squared log error over all schedules, every tune weighted alike and errors past 10% weighted
more, by Nelder-Mead over the
compute (1x1 and wider filters), depthwise, gemm and memory efficiencies, the launch and stage overheads, the
concurrency alpha and short_node_us (docs/cost-model.md, "One stage"; the search starts it at
10 us when the base preset has none), less any that --fix names; the peaks, SM count and links
stay the base preset's. It prints every
schedule's error before and after, and writes the fitted preset as a devices file for
`--devices` (atomically; an existing file of another kind is refused).
"""
import argparse
import concurrent.futures
import json
import math
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from preset_check import best_postings, fail, load, searched_candidates, simulated_ms, write_schedule  # noqa: E402

PARAMS = ["conv_efficiency", "spatial_conv_efficiency", "depthwise_efficiency", "gemm_efficiency", "memory_efficiency",
          "launch_overhead_us", "stage_overhead_us", "alpha", "short_node_us"]
BOUNDS = {"conv_efficiency": (0.02, 1.0), "spatial_conv_efficiency": (0.02, 1.0), "depthwise_efficiency": (0.01, 1.0), "gemm_efficiency": (0.01, 1.0),
          "memory_efficiency": (0.05, 1.0), "launch_overhead_us": (0.0, 30.0), "stage_overhead_us": (0.0, 30.0),
          "alpha": (0.0, 1.0), "short_node_us": (0.0, 200.0)}
# Errors past this cost more than their square: the aim is every schedule within 15%.
SOFT_LIMIT = 0.10


def schedules_of(graph, db_path, tuned_path):
    """Every first-round candidate of one tune: its label, its schedule in a temporary file and
    its fastest measurement with any receive posting."""
    cands = searched_candidates(db_path)
    best = best_postings(tuned_path)
    # Named by the database's folder and file: tunes of one configuration on two days (or one
    # and two GPUs) keep their file names and must still count as separate tunes.
    tune = os.path.join(os.path.basename(os.path.dirname(os.path.abspath(db_path))), os.path.basename(db_path))
    return [{"tune": tune, "graph": graph, "label": c["label"], "file": write_schedule(c["schedule"]),
             "measured": min([c["measured_ms"]] + best.get(c["label"], []))} for c in cands]


def write_devices(path, preset):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"format": "hios-devices", "version": 1, "devices": [preset]}, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hios", default="build/cli/hios")
    ap.add_argument("--device", required=True, help="the preset to start from, e.g. h100")
    ap.add_argument("--devices", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "schedules",
                                                      "devices.json"),
                    help="the devices file holding --device (default: the repository's, which hios embeds)")
    ap.add_argument("--name", help="the fitted preset's name (default: --device)")
    ap.add_argument("--description", help="its description (default: what it was fitted to)")
    ap.add_argument("--tune", nargs=3, action="append", required=True, metavar=("GRAPH", "DB", "TUNED"))
    ap.add_argument("--fix", default="", metavar="P1,P2",
                    help="parameters kept at the base preset's values, e.g. depthwise_efficiency when no tune has "
                         "depthwise convs (choices: " + ", ".join(PARAMS) + ")")
    ap.add_argument("--evaluations", type=int, default=400, help="most simulations of the whole set (default 400)")
    ap.add_argument("-o", "--output", required=True, help="devices file to write")
    a = ap.parse_args()
    if os.path.lexists(a.output) and not os.path.isfile(a.output):
        fail(f"{a.output}: exists and is not a regular file; not replaced")
    presets = {d["name"]: d for d in load(a.devices).get("devices", [])}
    if a.device not in presets:
        fail(f"--device {a.device}: not in {a.devices} (has {', '.join(sorted(presets))})")
    base = dict(presets[a.device])
    name = a.name or a.device
    fixed = [k for k in a.fix.split(",") if k]
    for k in fixed:
        if k not in PARAMS:
            fail(f"--fix {k}: not a fitted parameter (choices: {', '.join(PARAMS)})")
    free = [k for k in PARAMS if k not in fixed]
    scheds = [s for t in a.tune for s in schedules_of(*t)]
    tunes = sorted({s["tune"] for s in scheds})
    workdir = tempfile.mkdtemp(prefix="preset_refit.")
    devices = os.path.join(workdir, "devices.json")

    def predict(values):
        p = dict(base, name=name, **values)
        write_devices(devices, p)
        with concurrent.futures.ThreadPoolExecutor(max(1, os.cpu_count() or 1)) as ex:
            return list(ex.map(lambda s: simulated_ms(a.hios, s["graph"], name, devices, s["file"]), scheds))

    def loss(values):
        pred = predict(values)
        per = {t: [] for t in tunes}
        for s, ms in zip(scheds, pred):
            e = math.log(ms / s["measured"])
            per[s["tune"]].append(e * e + 10 * max(0.0, abs(e) - SOFT_LIMIT) ** 2)
        return sum(sum(v) / len(v) for v in per.values()) / len(per)

    def to_values(x):
        out = {k: start[k] for k in fixed}
        for k, xi in zip(free, x):
            lo, hi = BOUNDS[k]
            out[k] = lo + (hi - lo) / (1 + math.exp(-xi))  # a logistic map keeps every value in bounds
        return out

    def from_values(v):
        x = []
        for k in free:
            lo, hi = BOUNDS[k]
            f = min(max((v[k] - lo) / (hi - lo), 1e-4), 1 - 1e-4)
            x.append(math.log(f / (1 - f)))
        return x

    from scipy.optimize import minimize  # Debian's python3-scipy

    start = {k: float(base.get(k, 0.0)) for k in PARAMS}  # short_node_us is absent from older presets
    # A preset without its own efficiency for wider filters prices them as 1x1s.
    start["spatial_conv_efficiency"] = start["spatial_conv_efficiency"] or start["conv_efficiency"]
    before = predict(start)
    loss_before = loss(start)
    # The simplex moves each value by a share of itself: one at its lower bound would stay there.
    seed = dict(start, short_node_us=start["short_node_us"] or 10.0)
    res = minimize(lambda x: loss(to_values(x)), from_values(seed), method="Nelder-Mead",
                   options={"maxfev": a.evaluations, "xatol": 1e-3, "fatol": 1e-6})
    fitted = {k: round(v, 4) for k, v in to_values(res.x).items()}  # as written
    loss_after = loss(fitted)
    if loss_after > loss_before:  # the simplex found nothing better than its start
        fitted, loss_after = start, loss_before
    after = predict(fitted)
    preset = dict(base, name=name, **fitted)
    preset["description"] = a.description or (
        f"{base.get('description', a.device)}; refitted by scripts/preset_refit.py to {len(scheds)} schedules "
        f"timed by hios tune ({', '.join(tunes)})")
    write_devices(a.output, preset)
    for s in scheds:
        os.unlink(s["file"])
    os.unlink(devices)
    os.rmdir(workdir)
    print(f"| tune | schedule | measured ms | `{a.device}` ms | error | refitted ms | error |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for s, b, f in zip(scheds, before, after):
        print(f"| {s['tune']} | {s['label']} | {s['measured']:.3f} | {b:.3f} | {b / s['measured'] - 1:+.1%} | "
              f"{f:.3f} | {f / s['measured'] - 1:+.1%} |")
    worst = lambda pred: max(abs(p / s["measured"] - 1) for s, p in zip(scheds, pred))
    print(f"\nworst error {worst(before):.1%} -> {worst(after):.1%} over {len(scheds)} schedules of {len(tunes)} tunes; "
          f"loss {loss_before:.5f} -> {loss_after:.5f} ({res.nfev} evaluations); fitted: " +
          ", ".join(f"{k} {preset[k]}" for k in PARAMS))
    print(f"wrote {a.output}")


if __name__ == "__main__":
    main()
