"""scripts/report.py on a hios serve JSON (`hios serve -o`, format "hios-serve"): its
latency-throughput and queue plots and a Markdown table of every run.
"""
import json
import os

from report_plots import auto_log, hide_unused, label_axes
from report_rows import ReportError, _num, _str, write_bytes
from report_tables import fmt, table


def load_serve(path):
    """The JSON `hios serve -o` writes, or None when `path` is not one."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if not head.lstrip().startswith(b"{"):
                return None
            f.seek(0)
            d = json.load(f)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(d, dict) or d.get("format") != "hios-serve":
        return None
    runs = d.get("runs")
    if not isinstance(runs, list) or not runs:
        raise ReportError(f"{path}: a hios-serve file without runs")
    for i, r in enumerate(runs):
        where = f"{path}: runs[{i}]"
        _str(r.get("policy"), where + ".policy")
        for m in r.get("models") or []:
            for k in ("answered", "rejected", "offered"):
                _num(m.get(k), f"{where}.{m.get('model')}.{k}", 0, integer=True)
            for k in ("throughput_rps", "p50_ms", "p95_ms", "p99_ms"):
                _num(m.get(k), f"{where}.{m.get('model')}.{k}", 0)
    return d


def serve_report(d, path, outdir, plots, title):
    """Latency against throughput per launcher (one panel per model and 'all'), the queue over
    time at the highest load, and a table of every run."""
    runs = d["runs"]
    budget = d.get("latency_budget_ms") or 0
    fifo_most = d.get("fifo_most_answered_rps") or 0
    policies = list(dict.fromkeys(r["policy"] for r in runs))
    names = [m["model"] for m in runs[0]["models"]]
    fig, axes, ncols = plots.grid(len(names))
    for i, name in enumerate(names):
        ax = axes.flat[i]
        for pol in policies:
            # In the order of the offered load, so that each curve walks from light to heavy load.
            pts = [(m["throughput_rps"], m["p99_ms"])
                   for r in sorted((r for r in runs if r["policy"] == pol), key=lambda r: r.get("load", 0))
                   for m in r["models"] if m["model"] == name and m["answered"] > 0]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], label=pol, **plots.style(pol))
        auto_log(ax, [m["p99_ms"] for r in runs for m in r["models"] if m["model"] == name and m["p99_ms"] > 0])
        # The serving bar, on the panel it is stated for (all models): p99 no worse than fifo's at
        # its lowest load (the budget), at 1.5x the most fifo answered at any load.
        if name == "all" and budget > 0:
            ax.axhline(budget, color="0.4", linestyle="--", linewidth=1, label="fifo's p99 at its lowest load")
        if name == "all" and fifo_most > 0:
            ax.axvline(1.5 * fifo_most, color="0.4", linestyle=":", linewidth=1, label="1.5x fifo's most answered/s")
        label_axes(ax, name, "answered requests/s", "p99 latency (ms)")
    hide_unused(axes, len(names))
    plots.finish(fig, axes, "serve-latency-throughput",
                 "p99 latency (queueing included) against answered requests per second, one point per offered load")
    top = max(r.get("load", 0) for r in runs)
    at_top = [r for r in runs if r.get("load", 0) == top]
    fig, axes, ncols = plots.grid(len(at_top))
    for i, r in enumerate(at_top):
        ax = axes.flat[i]
        by_queue = {}
        for t, q, n in r.get("queue", []):
            by_queue.setdefault(q, ([], []))
            by_queue[q][0].append(t)
            by_queue[q][1].append(n)
        for q, (ts, ns) in by_queue.items():
            ax.step(ts, ns, where="post", label=f"queue {q}", **{"color": plots.style("queue " + q)["color"]})
        label_axes(ax, f"{r['policy']} at load {top:g}", "time (s)", "waiting requests")
    hide_unused(axes, len(at_top))
    plots.finish(fig, axes, "serve-queue", f"Requests waiting over time at the highest load ({top:g} of fifo's capacity)")
    rows = []
    for r in runs:
        for m in r["models"]:
            rows.append([r["policy"], fmt(r.get("load"), "{:g}"), m["model"], str(m["offered"]), str(m["answered"]),
                         str(m["rejected"]), fmt(m["throughput_rps"], "{:.1f}"), fmt(m["p50_ms"]), fmt(m["p99_ms"]),
                         fmt(m.get("mean_batch"), "{:.2f}"), fmt(100 * r.get("busy_fraction", 0), "{:.1f}")])
    text = [f"# {title or 'Serving report: ' + os.path.basename(path)}", "",
            f"{', '.join(d.get('models', []))} at {d.get('size')} on {d.get('device')}; fifo capacity "
            f"{d.get('fifo_capacity_rps', 0):.1f} requests/s.", "",
            "Math {}, batches {}, replicas {}, adaptive latency budget {} ms ({}), hold share {}, drain {}; fifo's "
            "most answered {} requests/s.".format(d.get("math", "?"), ",".join(str(b) for b in d.get("batches", [])) or "?",
                                                  ", ".join(f"{k}={v}" for k, v in (d.get("replicas") or {}).items()) or "?",
                                                  fmt(budget, "{:.3f}"), d.get("latency_budget_source", "?"),
                                                  fmt(d.get("hold_share"), "{:g}"), d.get("drain", "max"),
                                                  fmt(fifo_most, "{:.1f}")), "",
            *table(["launcher", "load", "model", "offered", "answered", "rejected", "answered/s", "p50 ms", "p99 ms",
                    "batch", "busy %"], rows), ""]
    for name, caption in plots.written:
        text += [f"![{caption}]({name}.png)", "", caption, ""]
    write_bytes(os.path.join(outdir, "report.md"), "\n".join(text).encode())


def serve_label(d):
    """'2 GPUs' or '1 CPU device': how many devices a hios serve JSON's models were spread over."""
    n = max(1, len(d.get("devices") or []))
    kind = "CPU device" if str(d.get("device", "")).lower().startswith(("cpu", "0: cpu")) else "GPU"
    return f"{n} {kind}{'s' if n > 1 else ''}"


def serve_scaling_report(ds, paths, outdir, plots, title):
    """Several hios serve JSONs of one model mix, on one device and on several: the p99 of every
    request against answered/s, a curve per file and launcher with each file's budget, and a table
    of what each launcher answered within its budget against fifo's most in the same file, with
    each device's busy share and host time per request at that load."""
    labels = [serve_label(d) for d in ds]
    if len(set(labels)) < len(labels):  # two files on as many devices: tell them apart by name
        labels = [f"{lab} ({os.path.basename(p)})" for lab, p in zip(labels, paths)]
    fig, axes, _ = plots.grid(1, width=12, height=5.5)  # wide enough for a legend of four columns
    ax = axes.flat[0]
    all_p99 = []
    for d, lab in zip(ds, labels):
        runs = d["runs"]
        for pol in dict.fromkeys(r["policy"] for r in runs):
            pts = [(m["throughput_rps"], m["p99_ms"])
                   for r in sorted((r for r in runs if r["policy"] == pol), key=lambda r: r.get("load", 0))
                   for m in r["models"] if m["model"] == "all" and m["answered"] > 0]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], label=f"{lab}: {pol}", **plots.style(f"{lab}: {pol}"))
                all_p99 += [p[1] for p in pts]
        budget = d.get("latency_budget_ms") or 0
        if budget > 0:
            ax.axhline(budget, linestyle="--", linewidth=1, label=f"{lab}: budget (fifo's p99 at its lowest load)",
                       color=plots.style(f"{lab}: fifo")["color"])
    auto_log(ax, all_p99)
    label_axes(ax, "all models", "answered requests/s", "p99 latency (ms)")
    plots.finish(fig, axes, "serve-scaling",
                 "p99 latency of every request against answered requests per second, one point per offered load, "
                 "per device count and launcher")
    rows, dev_rows = [], []
    for d, lab, path in zip(ds, labels, paths):
        fifo_most = d.get("fifo_most_answered_rps") or 0
        for pol, best in (d.get("within_budget") or {}).items():
            rps = best.get("answered_rps", 0)
            rows.append([lab, pol, fmt(rps, "{:.1f}"), fmt(best.get("load"), "{:g}"), fmt(best.get("p99_ms")),
                         fmt(rps / fifo_most if fifo_most else None, "{:.2f}x"), os.path.basename(path)])
            run = next((r for r in d["runs"] if r["policy"] == pol and r.get("load") == best.get("load")), None)
            for dev, t in sorted(((run or {}).get("devices") or {}).items()):
                w = t.get("worker_ms") or {}
                total = sum(w.values()) or 0
                share = (lambda k: fmt(100 * w.get(k, 0) / total, "{:.0f}")) if total else (lambda k: "")
                dev_rows.append([lab, pol, fmt(best.get("load"), "{:g}"), dev, str(t.get("workers", "")),
                                 fmt(100 * t.get("busy_fraction", 0), "{:.1f}"), fmt(100 * t.get("pass_fraction", 0), "{:.1f}"),
                                 share("wait"), share("stage"), share("pass"), share("book"),
                                 fmt(t.get("host_ms_per_request"))])
    text = [f"# {title or 'Serving on one device and several'}", "",
            "Each launcher's most answered requests/s within its file's budget (fifo's p99 at its lowest load, "
            "nothing rejected), against fifo's most answered/s at any load in the same file.", "",
            *table(["devices", "launcher", "answered/s", "load", "p99 ms", "x fifo's most", "file"], rows), "",
            "Where each device's workers spent that run (shares of their summed time; several workers on a "
            "device each count their own), the share of the wall time with a pass running there (with and "
            "without the staging), and the host time per request.", "",
            *table(["devices", "launcher", "load", "device", "workers", "busy %", "passes %", "wait %", "stage %",
                    "pass %", "book %", "host ms/request"], dev_rows), ""]
    for name, caption in plots.written:
        text += [f"![{caption}]({name}.png)", "", caption, ""]
    write_bytes(os.path.join(outdir, "report.md"), "\n".join(text).encode())
