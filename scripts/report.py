#!/usr/bin/env python3
"""Tables and plots from the results of scripts/sweep.py.

    scripts/report.py RESULTS.jsonl [MORE.jsonl ...] -o DIR [--formats png,svg] [--title TEXT]
    scripts/report.py SERVE.json -o DIR [--formats png,svg] [--title TEXT]
    scripts/report.py --benchmarks -o docs/benchmarks.md [--data docs/data]

Writes DIR/report.md (every configuration, the best runs and the speed-ups as Markdown
tables) and the plots, each as PNG and SVG:

    latency_vs_size       latency against image size, one line per algorithm and GPU count
    speedup_vs_size       speed-up over the sequential run and over the best one-GPU run
    batch                 latency and throughput (images/s) against batch size
    predicted_vs_measured the schedule's predicted latency against the measured one
    optimisation_cost     seconds spent choosing the schedule (schedule or tune, with profiling)
    pytorch               PyTorch rows next to hios's best, where the results have them

When a key appears more than once (--retry-failed), its last row counts; repeats of one
configuration (rep 0, 1, ...) are combined: the median of their medians, the lowest minimum and
the highest maximum. Needs matplotlib (Debian: python3-matplotlib). Outputs are written
atomically (a temporary file, then a rename); a symlink is followed and kept, and a FIFO or a
device is written into, never replaced.

A hios serve JSON (`hios serve -o`) gives its latency-throughput and queue plots and a table.

--benchmarks writes docs/benchmarks.md, today's tables one per question, from docs/data/:
docs/data/tables/<section>.json names each table's card, date, commit, command and data (the
files a GPU script wrote, parsed here, or transcribed rows where no raw output was kept). It
needs no matplotlib.
"""
import argparse
import io
import json
import math
import os
import re
import statistics
import stat
import sys

PROG = "report.py"
MAX_SIZE = 65536
MAX_GPUS = 1024
STATUSES = ("ok", "failed", "timeout")


class ReportError(Exception):
    """A bad input or option: one line, exit 2."""


def import_matplotlib():
    try:
        import matplotlib
    except ImportError:
        # pyenv or venv interpreters do not see Debian's dist-packages, where python3-matplotlib
        # lives: try the system interpreter once before giving up.
        system = "/usr/bin/python3"
        if (os.environ.get("HIOS_REPORT_REEXEC") != "1" and os.path.exists(system)
                and os.path.realpath(sys.executable) != os.path.realpath(system)):
            os.environ["HIOS_REPORT_REEXEC"] = "1"
            os.execv(system, [system, os.path.abspath(__file__)] + sys.argv[1:])
        raise ReportError("matplotlib is missing: install python3-matplotlib (scripts/install-deps.sh does)")
    matplotlib.use("Agg")  # no display: files only
    import matplotlib.pyplot as plt
    return plt


# ----------------------------------------------------------------------------------------------
# Reading and checking rows
# ----------------------------------------------------------------------------------------------

def _num(v, where, lo, hi=math.inf, lo_open=False, integer=False):
    kind = "an integer" if integer else "a number"
    if isinstance(v, bool) or not isinstance(v, int if integer else (int, float)) or \
            (isinstance(v, float) and not math.isfinite(v)):
        raise ReportError(f"{where}: expected {kind}, got {json.dumps(v)[:60]}")
    if v < lo or v > hi or (lo_open and v == lo):
        rng = f"{'above ' if lo_open else ''}{lo:g}" + ("" if hi == math.inf else f" to {hi:g}")
        raise ReportError(f"{where}: {v} is not in range {rng}")
    return v


def _str(v, where):
    if not isinstance(v, str) or not v:
        raise ReportError(f"{where}: expected a non-empty string, got {json.dumps(v)[:60]}")
    return v


def _get(d, path):
    for p in path.split("."):
        if not isinstance(d, dict) or p not in d:
            return None
        d = d[p]
    return d


def check_row(row, where):
    """Checks the fields the report uses, and returns the row flattened for it."""
    if not isinstance(row, dict):
        raise ReportError(f"{where}: expected a JSON object")
    key = _str(row.get("key"), f"{where}: key")
    status = row.get("status")
    if status not in STATUSES:
        raise ReportError(f"{where}: status: expected one of {', '.join(STATUSES)}, got {json.dumps(status)[:60]}")
    c = row.get("config")
    if not isinstance(c, dict):
        raise ReportError(f"{where}: config: missing")
    f = {"key": key, "status": status, "error": row.get("error") or "", "step": row.get("step") or "",
         "env": row.get("env") if isinstance(row.get("env"), dict) else {}}
    for k in ("model", "algorithm", "cost", "backend", "math", "intra"):
        f[k] = _str(c.get(k), f"{where}: config.{k}")
    for k, lo, hi in (("height", 1, MAX_SIZE), ("width", 1, MAX_SIZE), ("batch", 1, MAX_SIZE),
                      ("gpus", 1, MAX_GPUS), ("rep", 0, 1000)):
        f[k] = _num(c.get(k), f"{where}: config.{k}", lo, hi, integer=True)
    f["pytorch"] = f["algorithm"].startswith("pytorch-")
    res = row.get("result") if isinstance(row.get("result"), dict) else {}
    lat = res.get("latency_ms") if isinstance(res.get("latency_ms"), dict) else {}
    f["median"] = f["min"] = f["max"] = None
    if status == "ok" or lat.get("median") is not None:
        f["median"] = _num(lat.get("median"), f"{where}: result.latency_ms.median", 0, lo_open=True)
        f["min"] = _num(lat["min"], f"{where}: result.latency_ms.min", 0) if lat.get("min") is not None else f["median"]
        f["max"] = _num(lat["max"], f"{where}: result.latency_ms.max", 0) if lat.get("max") is not None else f["median"]
    for name, path in (("predicted", "predicted_ms"), ("opt_total", "optimisation.total_s"),
                       ("opt_search", "optimisation.search_s"), ("peak_mb", "peak_memory_mb")):
        v = _get(res, path)
        f[name] = None if v is None else _num(v, f"{where}: result.{path}", 0)
    if f["predicted"] == 0:
        f["predicted"] = None
    f["verified"] = res.get("verified") if isinstance(res.get("verified"), bool) else None
    f["used_gpus"] = _get(res, "schedule.used_gpus")
    # Show and group by the precision that ran: "default" is the backend's (fp32 on cpu, tf32 on
    # cuda), which hios run writes down; PyTorch rows take theirs from the variant.
    ran = _get(res, "run_config.math") if not f["pytorch"] else res.get("math")
    if isinstance(ran, str) and ran and (f["math"] in ("default", "-")):
        f["math"] = ran
    devices = res.get("devices") if isinstance(res.get("devices"), list) else []
    f["device"] = ", ".join(str(d) for d in devices)
    return f


def load_rows(paths):
    last = {}
    warnings = []
    for path in paths:
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except OSError as e:
            raise ReportError(f"{path}: cannot read: {e.strerror}") from None
        end = data.rfind(b"\n") + 1
        if end < len(data):
            # A sweep killed in the middle of a row's write leaves a partial last line; the sweep
            # cuts it on its next start. Read around it.
            warnings.append(f"{path}: ignored a partial last line ({len(data) - end} bytes)")
            data = data[:end]
        for i, line in enumerate(data.decode("utf-8", "replace").split("\n"), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line, parse_constant=lambda c: float("nan"))
            except ValueError as e:
                raise ReportError(f"{path}:{i}: not a JSON row ({e.msg})") from None
            f = check_row(row, f"{path}:{i}")
            last.pop(f["key"], None)  # keep file order, the last row of a key wins
            last[f["key"]] = f
    if not last:
        raise ReportError(f"{', '.join(paths)}: no rows")
    return list(last.values()), warnings


# ----------------------------------------------------------------------------------------------
# Combining repeats, references, speed-ups
# ----------------------------------------------------------------------------------------------

CELL_FIELDS = ("model", "height", "width", "batch", "gpus", "algorithm", "cost", "backend", "math", "intra")
PROBLEM_FIELDS = ("model", "height", "width", "batch", "backend", "math")


def combine(rows):
    """One cell per configuration without its repeat index, from the ok rows."""
    groups = {}
    for r in rows:
        if r["status"] == "ok":
            groups.setdefault(tuple(r[k] for k in CELL_FIELDS), []).append(r)
    cells = []
    for key, rs in groups.items():
        c = dict(zip(CELL_FIELDS, key))
        c["pytorch"] = rs[0]["pytorch"]
        c["reps"] = len(rs)
        c["median"] = statistics.median(r["median"] for r in rs)
        c["min"] = min(r["min"] for r in rs)
        c["max"] = max(r["max"] for r in rs)
        for k in ("predicted", "opt_total", "peak_mb"):
            vals = [r[k] for r in rs if r[k] is not None]
            c[k] = statistics.median(vals) if vals else None
        c["throughput"] = c["batch"] * 1000.0 / c["median"]
        c["side"] = math.sqrt(c["height"] * c["width"])
        c["used_gpus"] = rs[0]["used_gpus"]
        cells.append(c)
    problems = {}
    for c in cells:
        problems.setdefault(tuple(c[k] for k in PROBLEM_FIELDS), []).append(c)
    for c in cells:
        peers = [p for p in problems[tuple(c[k] for k in PROBLEM_FIELDS)] if not p["pytorch"]]
        seq = [p for p in peers if p["algorithm"] == "sequential"]
        # A sequential schedule is the same whatever the cost model: take the same cost's when
        # there is one, else any.
        same = [p for p in seq if p["cost"] == c["cost"]] or seq
        c["seq"] = min(same, key=lambda p: p["median"]) if same else None
        one = [p for p in peers if p["gpus"] == 1]
        c["best1"] = min(one, key=lambda p: p["median"]) if one else None
        c["vs_seq"] = c["seq"]["median"] / c["median"] if c["seq"] else None
        c["vs_best1"] = c["best1"]["median"] / c["median"] if c["best1"] else None
    return cells, problems


def varies(cells, field):
    return len({c[field] for c in cells if not c["pytorch"]}) > 1


def comparable(r):
    """Whether a row's prediction models the backend it ran on: the analytic model and hios
    profile describe GPUs; hios tune measures whichever backend it runs."""
    return r["backend"] != "cpu" or r["cost"] == "tune"


def series_label(c, show_cost, show_intra):
    if c["pytorch"]:
        return c["algorithm"]
    s = f"{c['algorithm']} {c['gpus']} GPU" + ("s" if c["gpus"] > 1 else "")
    if show_cost and c["algorithm"] != "tuned":  # tuned always measures its own costs
        s += f" {c['cost']}"
    if show_intra and c["algorithm"] in ("hios-lp", "hios-mr", "heft"):
        s += f" intra={c['intra']}"
    return s


def facet_title(c, fields):
    parts = []
    for f in fields:
        if f == "model":
            parts.append(c["model"])
        elif f == "size":
            parts.append(f"{c['height']}x{c['width']}")
        elif f == "batch":
            parts.append(f"batch {c['batch']}")
        elif f == "backend":
            parts.append(f"{c['backend']} {c['math']}")
    return ", ".join(parts)


# ----------------------------------------------------------------------------------------------
# Output files
# ----------------------------------------------------------------------------------------------

def write_bytes(path, data):
    """The project's output rule (graph/json_reader.hpp, write_file_atomic): a regular file is
    replaced atomically (temporary file, fsync, rename, the old mode kept); a symlink is followed
    and its target replaced; a FIFO or device is written into, never replaced; a file nobody may
    write is refused."""
    target = os.path.realpath(path) if os.path.islink(path) else path
    try:
        st = os.stat(target)
    except FileNotFoundError:
        st = None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise ReportError(f"{path}: is a directory")
        if not stat.S_ISREG(st.st_mode):
            fd = os.open(target, os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
            return
        if st.st_mode & 0o222 == 0:
            raise ReportError(f"{path}: is read-only (mode {stat.S_IMODE(st.st_mode):04o}); refusing to replace it")
    tmp = f"{target}.tmp.{os.getpid()}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC,
                     stat.S_IMODE(st.st_mode) if st else 0o666)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if st is not None:
                os.fchmod(fd, stat.S_IMODE(st.st_mode))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


class Plots:
    def __init__(self, plt, outdir, formats):
        self.plt, self.outdir, self.formats = plt, outdir, formats
        self.written = []  # (name, caption)
        self.skipped = []  # (name, why)
        self.styles = {}

    def style(self, label):
        """One colour and marker per series label, the same in every plot."""
        if label not in self.styles:
            i = len(self.styles)
            colours = self.plt.rcParams["axes.prop_cycle"].by_key()["color"]
            self.styles[label] = {"color": colours[i % len(colours)], "marker": "os^vD<>ph*"[i // len(colours) % 10]}
        return self.styles[label]

    def grid(self, n, rows_per_facet=1, width=4.6, height=3.3):
        ncols = min(n, 3)
        nrows = (n + ncols - 1) // ncols
        fig, axes = self.plt.subplots(nrows * rows_per_facet, ncols, figsize=(width * ncols, height * nrows * rows_per_facet),
                                      squeeze=False)
        return fig, axes, ncols

    def finish(self, fig, axes, name, caption):
        """One legend under all panels (every panel shares the series), then the files."""
        handles, labels = {}, []
        for ax in axes.flat:
            if not ax.get_visible():
                continue
            for h, lab in zip(*ax.get_legend_handles_labels()):
                if lab not in handles:
                    handles[lab] = h
                    labels.append(lab)
        bottom = 0.0
        if labels:
            ncol = min(4, len(labels))
            fig.legend([handles[lab] for lab in labels], labels, loc="lower center", ncol=ncol, fontsize=8,
                       frameon=False)
            bottom = (0.22 * ((len(labels) + ncol - 1) // ncol) + 0.1) / fig.get_size_inches()[1]
        fig.tight_layout(rect=(0, bottom, 1, 1))
        for fmt in self.formats:
            buf = io.BytesIO()
            # No timestamp in SVG metadata: the same results give the same files.
            fig.savefig(buf, format=fmt, dpi=90, metadata={"Date": None} if fmt == "svg" else {})
            write_bytes(os.path.join(self.outdir, f"{name}.{fmt}"), buf.getvalue())
        self.plt.close(fig)
        self.written.append((name, caption))


def lines_by_series(ax, plots, cells, x, y, show_cost, show_intra, err=False):
    series = {}
    for c in cells:
        series.setdefault(series_label(c, show_cost, show_intra), []).append(c)
    for label in sorted(series, key=lambda s: (not s.startswith("sequential"), s)):
        pts = sorted(series[label], key=lambda c: c[x])
        xs = [c[x] for c in pts]
        ys = [y(c) for c in pts]
        keep = [(a, b, c) for a, b, c in zip(xs, ys, pts) if b is not None]
        if not keep:
            continue
        xs, ys, pts = zip(*keep)
        st = plots.style(label)
        if err:
            lo = [b - c["min"] for b, c in zip(ys, pts)]
            hi = [c["max"] - b for b, c in zip(ys, pts)]
            ax.errorbar(xs, ys, yerr=[lo, hi], label=label, capsize=2, lw=1.2, ms=4, **st)
        else:
            ax.plot(xs, ys, label=label, lw=1.2, ms=4, **st)


def log_axis(ax, axis="y"):
    """Log scale with plain labels at 1, 2 and 5 of each decade (no 2x10^2), none on minor ticks."""
    import matplotlib.ticker as tk
    (ax.set_yscale if axis == "y" else ax.set_xscale)("log")
    a = ax.yaxis if axis == "y" else ax.xaxis
    a.set_major_locator(tk.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    a.set_major_formatter(tk.FuncFormatter(lambda v, _: f"{v:g}"))
    a.set_minor_formatter(tk.NullFormatter())


def auto_log(ax, values, axis="y"):
    """Log scale when the values span more than about a decade (sizes and batches grow latency
    by orders of magnitude); linear otherwise, where a log axis would show one tick or none."""
    vals = [v for v in values if v is not None and v > 0]
    if vals and max(vals) / min(vals) > 8:
        log_axis(ax, axis)


def no_data(ax, what):
    if not ax.get_lines() and not ax.collections:
        ax.text(0.5, 0.5, what, ha="center", va="center", transform=ax.transAxes, fontsize=8, color="grey")


def label_axes(ax, title, xlabel, ylabel, minor_grid=True):
    """Every panel's title, axis labels, grid and tick size, in one style."""
    ax.set_title(title, fontsize=9)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.grid(True, which="both" if minor_grid else "major", alpha=0.3)
    ax.tick_params(labelsize=7)


def hide_unused(axes, used):
    for ax in list(axes.flat)[used:]:
        ax.set_visible(False)


def facets(cells, fields):
    out = {}
    for c in cells:
        out.setdefault(tuple(c[f] for f in fields), []).append(c)
    return [out[k] for k in sorted(out)]


def plot_against_size(plots, cells, value, err, show_cost, show_intra, name, ylabel, caption):
    """One panel per model, batch, backend and precision: value(cell) against image size, one line
    per algorithm and GPU count."""
    fs = facets(cells, ("model", "batch", "backend", "math"))
    fig, axes, _ = plots.grid(len(fs))
    for ax, fc in zip(axes.flat, fs):
        lines_by_series(ax, plots, fc, "side", value, show_cost, show_intra, err=err)
        auto_log(ax, [value(c) for c in fc])
        label_axes(ax, facet_title(fc[0], ("model", "batch", "backend")), "image size (px, H = W)", ylabel)
    hide_unused(axes, len(fs))
    plots.finish(fig, axes, name, caption)


def plot_latency_vs_size(plots, cells, show_cost, show_intra):
    plot_against_size(plots, [c for c in cells if not c["pytorch"]], lambda c: c["median"], True, show_cost,
                      show_intra, "latency_vs_size", "latency (ms, median; bars: min-max)",
                      "Latency against image size, one line per algorithm and GPU count (median of the repeats; "
                      "bars from the fastest to the slowest repeat).")


def plot_speedup(plots, cells, show_cost, show_intra):
    hios = [c for c in cells if not c["pytorch"]]
    fs = facets(hios, ("model", "batch", "backend", "math"))
    fig, axes, ncols = plots.grid(len(fs), rows_per_facet=2, height=3.0)  # a pair of panels per facet
    used = []
    for i, fc in enumerate(fs):
        r, col = divmod(i, ncols)
        for row, (field, what) in enumerate((("vs_seq", "sequential"), ("vs_best1", "best one-GPU run"))):
            ax = axes[2 * r + row][col]
            used.append(ax)
            pts = [c for c in fc if c[field] is not None and not (field == "vs_seq" and c["algorithm"] == "sequential")]
            lines_by_series(ax, plots, pts, "side", lambda c: c[field], show_cost, show_intra)
            no_data(ax, "nothing to compare")
            ax.axhline(1.0, color="grey", lw=0.8, ls="--")
            label_axes(ax, f"{facet_title(fc[0], ('model', 'batch', 'backend'))}: over {what}",
                       "image size (px, H = W)", "speed-up (x)", minor_grid=False)
    for ax in axes.flat:
        if ax not in used:
            ax.set_visible(False)
    plots.finish(fig, axes, "speedup_vs_size",
                 "Speed-up over the sequential run (top of each pair) and over the fastest one-GPU run of any "
                 "algorithm (bottom), same model, size, batch, backend and precision; above 1 is faster.")


def plot_batch(plots, cells, show_cost, show_intra):
    hios = [c for c in cells if not c["pytorch"]]
    fs = [fc for fc in facets(hios, ("model", "height", "width", "backend", "math"))
          if len({c["batch"] for c in fc}) > 1]
    if not fs:
        plots.skipped.append(("batch", "every model and size was run at one batch size only"))
        return
    fig, axes, ncols = plots.grid(len(fs), rows_per_facet=2, height=3.0)  # a pair of panels per facet
    used = []
    for i, fc in enumerate(fs):
        r, col = divmod(i, ncols)
        for row, (y, ylabel) in enumerate(((lambda c: c["median"], "latency (ms, median)"),
                                           (lambda c: c["throughput"], "throughput (images/s)"))):
            ax = axes[2 * r + row][col]
            used.append(ax)
            lines_by_series(ax, plots, fc, "batch", y, show_cost, show_intra, err=(row == 0))
            auto_log(ax, [y(c) for c in fc])
            ax.set_xscale("log", base=2)
            ax.set_xticks(sorted({c["batch"] for c in fc}))
            ax.set_xticklabels([str(b) for b in sorted({c["batch"] for c in fc})])
            label_axes(ax, facet_title(fc[0], ("model", "size", "backend")), "batch size", ylabel, minor_grid=False)
    for ax in axes.flat:
        if ax not in used:
            ax.set_visible(False)
    plots.finish(fig, axes, "batch",
                 "Latency (top of each pair) and throughput = batch / latency (bottom) against batch size.")


def plot_predicted(plots, cells, show_cost, show_intra):
    pts = [c for c in cells if c["predicted"] is not None and not c["pytorch"] and comparable(c)]
    if not pts:
        plots.skipped.append(("predicted_vs_measured", "no row has a prediction made for the backend it ran on "
                                                       "(CPU-backend rows scheduled with GPU cost models are left out)"))
        return
    backends = sorted({(c["backend"], c["math"]) for c in pts})
    fig, axes, _ = plots.grid(len(backends), width=4.8, height=4.2)
    for ax, (backend, m) in zip(axes.flat, backends):
        sub = [c for c in pts if (c["backend"], c["math"]) == (backend, m)]
        series = {}
        for c in sub:
            series.setdefault(series_label(c, show_cost, show_intra), []).append(c)
        for label in sorted(series):
            st = plots.style(label)
            ax.scatter([c["median"] for c in series[label]], [c["predicted"] for c in series[label]], label=label,
                       s=18, color=st["color"], marker=st["marker"])
        lo = min(min(c["median"], c["predicted"]) for c in sub) / 1.5
        hi = max(max(c["median"], c["predicted"]) for c in sub) * 1.5
        ax.plot([lo, hi], [lo, hi], color="grey", lw=0.8, ls="--")
        log_axis(ax, "x")
        log_axis(ax, "y")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        label_axes(ax, f"{backend} {m}", "measured latency (ms, median)", "predicted latency (ms)")
    hide_unused(axes, len(backends))
    plots.finish(fig, axes, "predicted_vs_measured",
                 "The schedule's predicted latency (its cost model: analytic, profile or tune) against the "
                 "measured median; on the dashed line they agree. CPU-backend rows appear only with costs "
                 "measured on the CPU ranks (cost `tune`, algorithm `tuned`): the analytic and profile costs "
                 "model GPUs.")


def plot_optimisation(plots, cells, show_cost, show_intra):
    pts = [c for c in cells if c["opt_total"] is not None and not c["pytorch"]]
    if not pts:
        plots.skipped.append(("optimisation_cost", "no row has an optimisation cost"))
        return
    plot_against_size(plots, pts, lambda c: c["opt_total"], False, show_cost, show_intra, "optimisation_cost",
                      "optimisation cost (s, wall)",
                      "Seconds spent choosing the schedule: the wall time of `hios schedule` (or of `mpirun hios "
                      "tune`), plus the profile or tune that measured its costs.")


def plot_pytorch(plots, cells, show_cost, show_intra):
    pt = [c for c in cells if c["pytorch"]]
    if not pt:
        plots.skipped.append(("pytorch", "no PyTorch rows"))
        return
    fs = facets(pt, ("model", "batch"))
    fig, axes, _ = plots.grid(len(fs))
    for ax, fc in zip(axes.flat, fs):
        model, batch = fc[0]["model"], fc[0]["batch"]
        hios = [c for c in cells if not c["pytorch"] and c["model"] == model and c["batch"] == batch
                and c["backend"] == "cuda"]
        best = {}  # (size, tag) -> hios's fastest cell: on one GPU, and on any number
        for c in hios:
            tags = ["hios best"] + (["hios best 1 GPU"] if c["gpus"] == 1 else [])
            for tag in tags:
                k = (c["side"], tag)
                if k not in best or c["median"] < best[k]["median"]:
                    best[k] = c
        rows = list(fc)
        for (side, tag), c in best.items():
            rows.append(dict(c, algorithm=tag, pytorch=True))
        lines_by_series(ax, plots, rows, "side", lambda c: c["median"], False, False)
        auto_log(ax, [c["median"] for c in rows])
        label_axes(ax, f"{model}, batch {batch}", "image size (px, H = W)", "latency (ms, median)")
    hide_unused(axes, len(fs))
    plots.finish(fig, axes, "pytorch",
                 "PyTorch variants (scripts/bench_pytorch.py) next to hios's fastest CUDA run of the same model, "
                 "size and batch (on one GPU, and on any number).")


# ----------------------------------------------------------------------------------------------
# Markdown
# ----------------------------------------------------------------------------------------------

def md_cell(v):
    return str(v).replace("|", "\\|").replace("\n", " ")


def fmt(v, spec="{:.3f}"):
    return "" if v is None else spec.format(v)


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(md_cell(x) for x in r) + " |" for r in rows]
    return out


def order(r):
    return (r["model"], r["height"], r["width"], r["batch"], r["backend"], r["math"], r["pytorch"],
            r["algorithm"] != "sequential", r["gpus"], r["algorithm"], r["cost"], r["intra"], r.get("rep", 0))


def markdown(title, paths, rows, cells, problems, plots, warnings):
    out = [f"# {title}", ""]
    envs = [r["env"] for r in rows if r["env"]]

    def uniq(k):
        vals = []
        for e in envs:
            v = e.get(k)
            v = ", ".join(v) if isinstance(v, list) else v
            if v not in (None, "") and v not in vals:
                vals.append(str(v))
        return ", ".join(vals) if vals else "unknown"

    dates = sorted(str(e.get("date")) for e in envs if e.get("date"))
    counts = {s: sum(1 for r in rows if r["status"] == s) for s in STATUSES}
    out += [f"Results: {', '.join(f'`{p}`' for p in paths)}; {len(rows)} configuration(s): "
            f"{counts['ok']} ok, {counts['failed']} failed, {counts['timeout']} timed out.", "",
            f"- hosts: {uniq('host')}", f"- hios commits: {uniq('commit')}", f"- GPUs: {uniq('gpus')}",
            f"- MPI: {uniq('mpirun')}",
            f"- dates (UTC): {dates[0] + ' to ' + dates[-1] if dates else 'unknown'}", ""]
    if any(r["backend"] == "cpu" for r in rows):
        out += ["Rows on the `cpu` backend are timings of hios's CPU reference backend: they show the pipeline "
                "and its checks working and say nothing about GPU schedules. Their predictions come from GPU cost "
                "models unless the costs were measured by `hios tune` on the CPU ranks, so `pred err` is `n/a` "
                "for them.", ""]
    for w in warnings:
        out += [f"Note: {w}.", ""]

    out += ["## Best per problem", "",
            "Per model, size, batch, backend and precision: the sequential run, the fastest one-GPU run and the "
            "fastest run on more GPUs (medians in ms), and their speed-ups.", ""]
    body = []
    for pk in sorted(problems):
        pc = [c for c in problems[pk] if not c["pytorch"]]
        if not pc:
            continue
        seq = [c for c in pc if c["algorithm"] == "sequential"]
        seq = min(seq, key=lambda c: c["median"]) if seq else None
        one = [c for c in pc if c["gpus"] == 1]
        one = min(one, key=lambda c: c["median"]) if one else None
        many = [c for c in pc if c["gpus"] > 1]
        many = min(many, key=lambda c: c["median"]) if many else None
        m = problems[pk][0]

        def who(c):
            return "" if c is None else f"{c['algorithm']} ({c['cost']}" + (
                f", intra={c['intra']})" if c["algorithm"] in ("hios-lp", "hios-mr", "heft") else ")")

        body.append([m["model"], f"{m['height']}x{m['width']}", m["batch"], f"{m['backend']} {m['math']}",
                     fmt(seq and seq["median"]), fmt(one and one["median"]), who(one),
                     fmt(many and many["median"]), f"{who(many)}" + (f" on {many['gpus']}" if many else ""),
                     fmt(seq and many and seq["median"] / many["median"], "{:.2f}x"),
                     fmt(one and many and one["median"] / many["median"], "{:.2f}x")])
    out += table(["model", "size", "batch", "backend", "sequential", "best 1 GPU", "via", "best >1 GPU", "via",
                  "x seq", "x best 1 GPU"], body) if body else ["No ok rows."]
    out += ["", "## Every configuration", "",
            "One row per configuration and repeat (the last row of each key). `x seq`: the sequential "
            "median over this one; `x best1`: the fastest one-GPU median over this one; `pred err`: "
            "predicted / measured - 1; `opt s`: the optimisation cost in seconds.", ""]
    cell_of = {tuple(c[k] for k in CELL_FIELDS): c for c in cells}
    body = []
    for r in sorted(rows, key=order):
        c = cell_of.get(tuple(r[k] for k in CELL_FIELDS))
        err = (r["predicted"] / r["median"] - 1) * 100 if r["predicted"] and r["median"] and comparable(r) else None
        body.append([r["model"], f"{r['height']}x{r['width']}", r["batch"], r["gpus"], r["algorithm"], r["cost"],
                     r["intra"], f"{r['backend']} {r['math']}", r["rep"], r["status"], fmt(r["median"]),
                     f"{fmt(r['min'])}-{fmt(r['max'])}" if r["median"] is not None else "",
                     fmt(r["batch"] * 1000.0 / r["median"] if r["median"] else None, "{:.1f}"),
                     fmt(r["predicted"]), fmt(err, "{:+.0f}%") if comparable(r) else "n/a",
                     fmt(c and c["seq"] and c["seq"]["median"] / r["median"] if r["median"] else None, "{:.2f}x"),
                     fmt(c and c["best1"] and c["best1"]["median"] / r["median"] if r["median"] else None, "{:.2f}x"),
                     fmt(r["opt_total"], "{:.3g}"),
                     {True: "ok", False: "FAIL", None: ""}[r["verified"]],
                     (f"{r['step']}: {r['error']}" if r["error"] else "")[:160]])
    out += table(["model", "size", "batch", "GPUs", "algorithm", "cost", "intra", "backend", "rep", "status",
                  "median ms", "min-max ms", "img/s", "pred ms", "pred err", "x seq", "x best1", "opt s",
                  "verify", "error"], body)
    out += ["", "## Plots", ""]
    for name, caption in plots.written:
        out += [f"### {name}", "", caption, "", f"![{name}]({name}.png)", "",
                "Files: " + ", ".join(f"[{name}.{f}]({name}.{f})" for f in plots.formats), ""]
    for name, why in plots.skipped:
        out += [f"No `{name}` plot: {why}.", ""]
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------------------------
# hios serve results (one JSON object, format "hios-serve")
# ----------------------------------------------------------------------------------------------

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


# ----------------------------------------------------------------------------------------------
# docs/benchmarks.md (--benchmarks): today's tables, one per question, from docs/data/
# ----------------------------------------------------------------------------------------------
#
# The page is made from docs/data/tables/<section>.json, in the order of BENCH_SECTIONS. Each
# section file has a title, prose ("about") and tables. A table names its card, date, commit and
# command, and either the raw data it is parsed from ("kind" is one of BENCH_KINDS: the files a
# GPU script writes, under docs/data/) or, where no raw output was kept, its transcribed rows
# ("kind": "transcribed", with columns and rows). Nothing here needs matplotlib.

BENCH_SECTIONS = ("one-gpu-vs-torch", "two-gpus", "tune", "row-splits", "serving", "shape-sets", "launch-orders",
                  "kernels", "tried")
BENCH_COMMAND = "python3 scripts/report.py --benchmarks -o docs/benchmarks.md"


def _bench_path(data, rel):
    if not isinstance(rel, str) or not rel or os.path.isabs(rel) or ".." in rel.split("/"):
        raise ReportError(f"{data}: expected a path inside the data folder, got {json.dumps(rel)[:80]}")
    return os.path.join(data, rel)


def _bench_text(data, rel):
    path = _bench_path(data, rel)
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        raise ReportError(f"{path}: not found")


def _bench_json(data, rel):
    path = _bench_path(data, rel)
    try:
        return json.loads(_bench_text(data, rel))
    except ValueError as e:
        raise ReportError(f"{path}: not JSON ({e})")


def _bench_jsonl(data, rel):
    rows = []
    for i, line in enumerate(_bench_text(data, rel).splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except ValueError as e:
                raise ReportError(f"{_bench_path(data, rel)}:{i}: not JSON ({e})")
    return rows


def _need(d, key, where):
    if key not in d:
        raise ReportError(f"{where}: missing \"{key}\"")
    return d[key]


def bench_slug(title):
    """The anchor GitHub gives a heading."""
    return "".join(c for c in title.lower() if c.isalnum() or c in " -_").replace(" ", "-")


def bench_table(columns, rows, align=None):
    align = align or ["l"] + ["r"] * (len(columns) - 1)
    out = ["| " + " | ".join(columns) + " |", "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    for r in rows:
        if len(r) != len(columns):
            raise ReportError(f"a row of {len(r)} cells under {len(columns)} columns: {r}")
        out.append("| " + " | ".join(str(c).replace("\n", " ") for c in r) + " |")
    return out


def bench_verdict(criteria):
    """criteria: [(name, [(label, ok, detail)])] -> 'Met: ... Missed: ...' lines."""
    met, missed = [], []
    for name, checks in criteria:
        if not checks:
            continue
        bad = [c for c in checks if not c[1]]
        n = len(checks)
        if not bad:
            met.append(name + (f", {n} of {n}" if n > 1 else ""))
        else:
            detail = "; ".join(f"{label} {d}".strip() for label, _, d in bad)
            ok = n - len(bad)
            missed.append(f"{name}" + (f", met in {ok} of {n}" if ok else (f", all {n}" if n > 1 else "")) +
                          f" ({detail})")
    return [f"**Met:** {'; '.join(met) if met else 'none'}. **Missed:** {'; '.join(missed) if missed else 'none'}."]


def _math_name(m):
    return {"tf32": "TF32", "fp32": "fp32"}.get(m, m)


def _config(spec):
    parts = spec.split(":")
    model, size, batch = parts[0], int(parts[1]), int(parts[2])
    math_ = parts[3] if len(parts) > 3 else "tf32"
    label = f"{model} {size}" + (f" batch {batch}" if batch != 1 else "") + f" {_math_name(math_)}"
    return {"model": model, "size": size, "batch": batch, "math": math_, "name": f"{model}-{size}-b{batch}-{math_}",
            "key": f"{model} {size} {math_}", "label": label}


def _walls(text):
    walls = {}
    for line in text.splitlines():
        m = re.match(r"(\S+) (tune|retune) rc=(\d+) wall ([\d.e-]+) s", line)
        if m:
            walls[(m.group(1), m.group(2))] = (int(m.group(3)), float(m.group(4)))
    return walls


def _short_label(label):
    """A tune candidate's label, its streams and window left out where it splits rows."""
    return re.sub(r", \d+ streams, window \d+, rows ", ", rows ", label)


def _tune_meta(data, d, c):
    rel = f"{d}/{c['name']}.tuned.json"
    if not os.path.exists(_bench_path(data, rel)):
        return None
    t = _bench_json(data, rel)
    try:
        return t["meta"]["tune"]
    except (KeyError, TypeError):
        raise ReportError(f"{_bench_path(data, rel)}: no meta.tune")


def _run_json(data, d, c, kind):
    rel = f"{d}/{c['name']}.{kind}.run.json"
    if not os.path.exists(_bench_path(data, rel)):
        return None, None
    r = _bench_json(data, rel)
    return r["latency_ms"]["median"], max(x["peak_memory_mb"] for x in r["ranks"])


def bench_tune_runs(data, t, sec):
    """scripts/gpu-tune.sh's summary: tuned against the best one-GPU candidate of the same job."""
    d = _need(t, "dir", "tune-runs")
    targets = sec.get("targets", {})
    walls = _walls(_bench_text(data, f"{d}/walls.txt"))
    rows, speed, worse, pred, tune, retune, mem = [], [], [], [], [], [], []
    for spec in _need(t, "configs", "tune-runs"):
        c = _config(spec)
        tm = _tune_meta(data, d, c)
        target = targets.get("ratio", {}).get(c["key"])
        if tm is None:
            w = walls.get((c["name"], "tune"))
            rows.append([c["label"], "", "", "", fmt(target, "{:.2f}"), "no schedule written" +
                         (f" (rc {w[0]} after {w[1]:.0f} s)" if w else ""), "", "", "", "", ""])
            continue
        cands = [x for x in tm["candidates"] if x.get("verified")]
        by = {x["label"]: x for x in tm["candidates"]}
        for dup in tm.get("duplicates", []):
            by.setdefault(dup["label"], by.get(dup["same_as"]))
        b1 = min((x for x in cands if x["gpus_used"] == 1), key=lambda x: x["measured_ms"])
        ch = by[tm["chosen"]]
        ratio = ch["measured_ms"] / b1["measured_ms"]
        err = ch["predicted_ms"] / ch["measured_ms"] - 1
        total = tm["seconds"]["total"]
        rw = walls.get((c["name"], "retune"))
        lt, mt = _run_json(data, d, c, "tuned")
        l1, m1 = _run_json(data, d, c, "best1")
        rows.append([c["label"], f"{b1['measured_ms']:.3f}", f"{ch['measured_ms']:.3f}", f"**{ratio:.2f}**",
                     fmt(target, "{:.2f}"), _short_label(tm["chosen"]), f"{100 * err:+.1f}%", f"{total:.1f}",
                     fmt(rw and rw[1], "{:.1f}"),
                     f"{fmt(lt)} / {fmt(l1)}" if lt is not None else "",
                     f"{mt:.0f} / {m1:.0f}" if mt is not None and m1 is not None else ""])
        if target is not None:
            speed.append((c["label"], ratio <= target, f"{ratio:.2f} against {target:.2f}"))
        worse.append((c["label"], ratio <= targets.get("never_worse", 1.01), f"{ratio:.2f}"))
        pred.append((c["label"], abs(err) <= targets.get("prediction_within", 0.10), f"{100 * err:+.1f}%"))
        lim = targets.get("tune_s", {}).get(c["model"])
        if lim is not None:
            tune.append((c["label"], total <= lim, f"{total:.1f} s"))
        if rw is not None and "retune_s" in targets:
            retune.append((c["label"], rw[1] <= targets["retune_s"], f"{rw[1]:.1f} s"))
        if mt is not None and m1 is not None:
            mem.append((c["label"], mt <= m1, f"{mt:.0f} against {m1:.0f} MB"))
    out = bench_table(["configuration", "best one GPU (ms)", "tuned (ms)", "tuned / best one GPU", "target", "chosen",
                       "prediction error", "tune (s)", "re-tune (s)", "`hios run`: tuned / best one GPU (ms)",
                       "peak MB per rank: tuned / one GPU"], rows,
                      ["l", "r", "r", "r", "r", "l", "r", "r", "r", "r", "r"])
    lims = targets.get("tune_s", {})
    out += [""] + bench_verdict([
        ("tuned / best one GPU at its target", speed),
        (f"never worse than one GPU (at most {targets.get('never_worse', 1.01):.2f}x)", worse),
        (f"predictions within {100 * targets.get('prediction_within', 0.10):.0f}%", pred),
        ("tune within " + " and ".join(f"{v} s ({k})" for k, v in lims.items()), tune),
        (f"re-tune within {targets.get('retune_s')} s", retune),
        ("peak memory per rank no more than one GPU's", mem)])
    return out, [f"{d}/"]


def bench_memory_runs(data, t, sec):
    rel = _need(t, "file", "memory-runs")
    labels = t.get("labels", {})
    rows = []
    for line in _bench_text(data, rel).splitlines():
        m = re.match(r"(\S+) (\S+) \(rc (\d+)\): median ([\d.]+) ms (.*)$", line)
        if not m:
            continue
        ranks = re.findall(r"tensors ([\d.]+) MB peak ([\d.]+) MB", m.group(5))
        rows.append([labels.get(m.group(2), m.group(2)), f"{float(m.group(4)):.3f}",
                     " / ".join(f"{float(p):,.0f}" for _, p in ranks), " / ".join(f"{float(a):,.0f}" for a, _ in ranks)])
    if not rows:
        raise ReportError(f"{_bench_path(data, rel)}: no runs")
    return bench_table(["schedule", "median (ms)", "peak MB per rank", "tensor arena MB per rank"], rows), [rel]


def bench_make_run(data, t, sec):
    rows, links = [], []
    for r in _need(t, "runs", "make-run"):
        text = _bench_text(data, r["file"])
        links.append(r["file"])
        m = re.search(r"# summary: sequential 1 rank ([\d.]+) ms .*best one-GPU ([\d.]+) ms .*tuned 2 ranks ([\d.]+) ms"
                      r".*speed-up ([\d.]+)x over sequential, ([\d.]+)x over the best one-GPU run", text)
        if not m:
            raise ReportError(f"{_bench_path(data, r['file'])}: no '# summary:' line")
        summary = next(line for line in text.splitlines() if line.startswith("# summary:"))
        checks = re.findall(r"verify [^:]*: (\w+)|, (?:cpu reference[^:]*): (\w+)", summary)
        oks = [a or b for a, b in checks]
        chosen = [line.strip().split("  ")[0] for line in text.splitlines() if line.rstrip().endswith("<- chosen")]
        rows.append([r["label"], m.group(1), m.group(2), m.group(3), f"**{m.group(5)}x**", f"{m.group(4)}x",
                     f"{oks.count('OK')} of {len(oks)} OK", _short_label(chosen[-1]) if chosen else ""])
    return bench_table(["`make run`", "sequential, 1 rank (ms)", "best one GPU (ms)", "tuned, 2 ranks (ms)",
                        "over best one GPU", "over sequential", "checks (against the sequential run and the CPU)",
                        "chosen"], rows, ["l", "r", "r", "r", "r", "r", "l", "l"]), links


def bench_tune_cost(data, t, sec):
    d = _need(t, "dir", "tune-cost")
    targets = sec.get("targets", {})
    walls = _walls(_bench_text(data, f"{d}/walls.txt"))
    rows, tune, retune = [], [], []
    for spec in _need(t, "configs", "tune-cost"):
        c = _config(spec)
        tm = _tune_meta(data, d, c)
        tw, rw = walls.get((c["name"], "tune")), walls.get((c["name"], "retune"))
        if tm is None:
            rows.append([c["label"], "no schedule written", "", "", "", "", fmt(tw and tw[1], "{:.1f}"), ""])
            continue
        s = tm["seconds"]
        rest = s["total"] - s["measure"] - s["search"] - s["time"]
        rows.append([c["label"], f"{s['total']:.1f}", f"{s['measure']:.1f}", f"{s['search']:.1f}", f"{s['time']:.1f}",
                     f"{rest:.1f}", fmt(tw and tw[1], "{:.1f}"), fmt(rw and rw[1], "{:.1f}")])
        lim = targets.get("tune_s", {}).get(c["model"])
        if lim is not None:
            tune.append((c["label"], s["total"] <= lim, f"{s['total']:.1f} s"))
        if rw is not None and "retune_s" in targets:
            retune.append((c["label"], rw[1] <= targets["retune_s"], f"{rw[1]:.1f} s"))
    lims = targets.get("tune_s", {})
    out = bench_table(["configuration", "tune (s)", "measuring", "searching", "timing", "rest", "tune wall (s)",
                       "re-tune wall (s)"], rows)
    out += [""] + bench_verdict([
        ("tune (s) within " + " and ".join(f"{v} s ({k})" for k, v in lims.items()), tune),
        (f"re-tune within {targets.get('retune_s')} s", retune)])
    return out, [f"{d}/"]


def bench_tune_walls(data, t, sec):
    rel = _need(t, "file", "tune-walls")
    targets = sec.get("targets", {})
    walls = _walls(_bench_text(data, rel))
    rows, tune, retune = [], [], []
    for spec in _need(t, "configs", "tune-walls"):
        c = _config(spec)
        tw, rw = walls.get((c["name"], "tune")), walls.get((c["name"], "retune"))
        rows.append([c["label"], fmt(tw and tw[1], "{:.1f}") or "not measured",
                     fmt(rw and rw[1], "{:.1f}") or "not measured"])
        lim = targets.get("tune_s", {}).get(c["model"])
        if tw is not None and lim is not None:
            tune.append((c["label"], tw[1] <= lim, f"{tw[1]:.1f} s"))
        if rw is not None and "retune_s" in targets:
            retune.append((c["label"], rw[1] <= targets["retune_s"], f"{rw[1]:.1f} s"))
    lims = targets.get("tune_s", {})
    out = bench_table(["configuration", "tune wall (s)", "re-tune wall (s)"], rows)
    out += [""] + bench_verdict([
        ("tune wall within " + " and ".join(f"{v} s ({k})" for k, v in lims.items()), tune),
        (f"re-tune within {targets.get('retune_s')} s", retune)])
    return out, [os.path.dirname(rel) + "/"]


def _hios_run_text(text, line_id):
    """One `hios run`'s report: a log, or one line 'ID rc=...' of a file of runs."""
    if line_id is not None:
        for line in text.splitlines():
            if line.startswith(f"{line_id} rc="):
                return line
        return None
    return text


def bench_split_runs(data, t, sec):
    found, links = {}, []
    for run in _need(t, "runs", "split-runs"):
        for name, (rel, line_id) in run["schedules"].items():
            text = _hios_run_text(_bench_text(data, rel), line_id)
            if rel not in links:
                links.append(rel)
            if text is None:
                continue
            med = re.search(r"median ([\d.]+)", text)
            pred = re.search(r"\(predicted ([\d.]+)\)", text)
            peaks = re.findall(r"peak\s+([\d.]+) MB", text)
            if med:
                found.setdefault(run["id"], {})[name] = (float(med.group(1)), pred and float(pred.group(1)),
                                                        [float(p) for p in peaks])
    base = _need(t, "baseline", "split-runs")
    rows = []
    for name in _need(t, "order", "split-runs"):
        for run in t["runs"]:
            got = found.get(run["id"], {})
            if name in got:
                med, pred, peaks = got[name]
                b = got.get(base)
                rows.append([name, run["id"], f"{med:.3f}", f"**{med / b[0]:.2f}**" if b else "",
                             fmt(pred), " / ".join(f"{p:.0f}" for p in peaks)])
                break
    return bench_table(["schedule", "run (commit)", "median (ms)", "/ one GPU", "predicted (ms)", "peak MB per rank"],
                       rows, ["l", "l", "r", "r", "r", "r"]), links


def _tune_log_rows(text, rel):
    """A `hios tune` log's candidate table: (label, measured ms) per row, the chosen one's index,
    and the seconds its `# stages:` line ends with."""
    rows, chosen, seconds = [], None, None
    for line in text.splitlines():
        m = re.match(r"\s+(\S.*?)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s+[+-][\d.]+%\s+\S+\s*(<- chosen)?\s*$", line)
        if m:
            if m.group(5):
                chosen = len(rows)
            rows.append((m.group(1), float(m.group(3))))
        s = re.match(r"# stages: .*; ([\d.]+) s$", line)
        if s:
            seconds = float(s.group(1))
    if chosen is None:
        raise ReportError(f"{rel}: no candidate marked '<- chosen'")
    return rows, chosen, seconds


def bench_tune_logs(data, t, sec):
    """Tuned against the best one-GPU candidate of the same job, from `hios tune` logs."""
    rows, links = [], []
    for c in _need(t, "configs", "tune-logs"):
        rel = _need(c, "file", "tune-logs")
        links.append(rel)
        cands, chosen, seconds = _tune_log_rows(_bench_text(data, rel), rel)
        one = [x for x in cands if " 1 GPU" in x[0]]
        if not one:
            raise ReportError(f"{rel}: no one-GPU candidate")
        best1 = min(one, key=lambda x: x[1])
        label, ms = cands[chosen]
        ratio = ms / best1[1]
        target = c.get("target")
        rows.append([c["label"], _short_label(label), f"{ms:.3f}", f"{best1[1]:.3f} ({best1[0].split(' ')[0]})",
                     f"**{ratio:.2f}**", f"{target:.2f}" if target else "", fmt(seconds, "{:.1f}")])
    return bench_table(["model, size, math", "tuned", "tuned (ms)", "best one GPU (ms)", "ratio", "target",
                        "tune (s)"], rows, ["l", "l", "r", "r", "r", "r", "r"]), links


def bench_torch_table(data, t, sec):
    rel = _need(t, "file", "torch-table")
    rows = _bench_jsonl(data, rel)
    peak = t.get("peak_tflops", {"tf32": 494.7, "bf16": 989.4})
    hv = t.get("hios_variant", "hios-lp-1gpu")

    def cells(rows):
        pt, hi = {}, {}
        for r in rows:
            k = (r["model"], r["size"], r["math"])
            if r.get("impl") == "pytorch" and (k not in pt or r["median_ms"] < pt[k]["median_ms"]):
                pt[k] = r
            elif r.get("impl") == "hios" and r.get("variant") == hv:
                hi[k] = r
        return pt, hi

    pt, hi = cells(rows)
    keys = sorted(k for k in pt if k in hi)
    if not keys:
        raise ReportError(f"{_bench_path(data, rel)}: no cell with both a PyTorch and a {hv} row")
    body, ratios, mem = [], [], []
    for k in keys:
        p, h = pt[k], hi[k]
        flops = p.get("flops")
        tc = (lambda ms: f"{100 * flops / (ms * 1e-3) / (peak[k[2]] * 1e12):.1f}%") if flops and k[2] in peak \
            else (lambda ms: "")
        r = h["median_ms"] / p["median_ms"]
        ratios.append((f"{k[0]} {k[1]} {_math_name(k[2])}", r <= 1.0, f"{r:.2f}"))
        mem.append((f"{k[0]} {k[1]} {_math_name(k[2])}", h["peak_mib"] < p["peak_mib"],
                    f"{h['peak_mib']:.0f} against {p['peak_mib']:.0f} MiB"))
        body.append([k[0], k[1], _math_name(k[2]), f"{p['median_ms']:.3f}", tc(p["median_ms"]), f"{p['peak_mib']:.0f}",
                     f"{h['median_ms']:.3f}", tc(h["median_ms"]), f"{h['peak_mib']:.0f}",
                     f"**{r:.2f}**" if r <= 1.0 else f"{r:.2f}"])
    out = bench_table(["model", "size", "math", "torch.compile (ms)", "TC%", "peak MiB", "hios (ms)", "TC%", "peak MiB",
                       "hios / PyTorch"], body, ["l", "r", "l", "r", "r", "r", "r", "r", "r", "r"])
    vals = [float(x[2]) for x in ratios]
    targets = []
    for tg in t.get("targets_ms", []):
        k = (tg["model"], tg["size"], tg["math"])
        if k in hi:
            ms = hi[k]["median_ms"]
            targets.append((f"{k[0]} {k[1]} {_math_name(k[2])}", ms <= tg["at_most_ms"],
                            f"{ms:.3f} ms against {tg['at_most_ms']:.1f}"))
    out += [""] + bench_verdict([
        (f"hios at or below torch.compile (hios / PyTorch {min(vals):.2f}-{max(vals):.2f})", ratios),
        ("hios's peak memory below PyTorch's", mem),
        ("inception_v3 2048 within its time targets (" +
         ", ".join(f"{_math_name(x['math'])} {x['at_most_ms']:.1f} ms" for x in t.get("targets_ms", [])) + ")", targets)])
    links = [rel]
    if t.get("compare_file"):
        crel = t["compare_file"]
        cpt, chi = cells(_bench_jsonl(data, crel))
        links.append(crel)

        def spread(a, b):
            best = None
            for k in a:
                if k in b:
                    x, y = a[k]["median_ms"], b[k]["median_ms"]
                    f = max(x / y, y / x)
                    if best is None or f > best[0]:
                        best = (f, k, x, y)
            return best

        sp, sh = spread(pt, cpt), spread(hi, chi)
        if sp and sh:
            def say(s):
                return f"{s[0]:.2f}x ({s[1][0]} {s[1][1]} {_math_name(s[1][2])}: {s[2]:.3f} against {s[3]:.3f} ms)"
            out += ["", f"The same table from an earlier run the same day (commit {t.get('compare_commit', '?')}, "
                        f"[data/{crel}](data/{crel})): torch.compile's medians differ from these by up to {say(sp)}, "
                        f"hios's by up to {say(sh)}. Each ratio above is its own run's."]
    return out, links


def bench_serve(data, t, sec):
    rel = _need(t, "file", "serve")

    def load(rel):
        d = _bench_json(data, rel)
        if not isinstance(d, dict) or d.get("format") != "hios-serve":
            raise ReportError(f"{_bench_path(data, rel)}: not a hios-serve JSON")
        return d

    def all_of(run):
        return next(m for m in run["models"] if m["model"] == "all")

    def judge(d):
        budget, most = d["latency_budget_ms"], d["fifo_most_answered_rps"]
        res = {}
        for pol in ("static", "adaptive"):
            ok = [(all_of(r)["throughput_rps"], r["load"], all_of(r)["p99_ms"]) for r in d["runs"]
                  if r["policy"] == pol and all_of(r)["p99_ms"] <= budget]
            res[pol] = max(ok) if ok else None
        return budget, most, res

    d = load(rel)
    loads = sorted({r["load"] for r in d["runs"]})
    by = {(r["policy"], r["load"]): r for r in d["runs"]}
    budget, most, res = judge(d)
    body = []
    for ld in loads:
        row = [f"{ld:g}" + ("" if "." in f"{ld:g}" else ".0"),
               f"{by[('fifo', ld)]['offered_rps']:.1f}" if ("fifo", ld) in by else ""]
        for pol in ("fifo", "static", "adaptive"):
            r = by.get((pol, ld))
            if r is None:
                row += ["", ""]
                continue
            a = all_of(r)
            ans = f"{a['throughput_rps']:.1f}" + (f" ({a['rejected']:,} rejected)" if a["rejected"] else "")
            p99 = f"{a['p99_ms']:.3f}"
            if pol == "fifo" and abs(a["p99_ms"] - budget) < 1e-9:
                p99 = f"**{p99}** (the budget" + (f", {r['duration_s']:g} s" if r.get("duration_s") else "") + ")"
            elif pol != "fifo" and res[pol] and res[pol][1] == ld and res[pol][0] / most >= 1.5:
                ans, p99 = f"**{ans}**", f"**{p99}**"
            row += [ans, p99]
        ad = by.get(("adaptive", ld))
        row.append(f"{all_of(ad)['mean_batch']:.2f}" if ad else "")
        body.append(row)
    out = bench_table(["load", "offered/s", "fifo answered/s", "fifo p99", "static answered/s", "static p99",
                       "adaptive answered/s", "adaptive p99", "adaptive mean batch"], body, ["r"] * 9)

    def say(d, budget, most, res):
        parts = []
        for pol in ("static", "adaptive"):
            r = res[pol]
            if r is None:
                parts.append(f"{pol}: nothing within the budget")
            else:
                parts.append(f"{pol} {r[0]:.1f} requests/s (**{r[0] / most:.2f}x**) at load {r[1]:g}, p99 {r[2]:.3f} ms")
        met = [p for p in ("static", "adaptive") if res[p] and res[p][0] / most >= 1.5]
        verdict = ("**Met** by " + " and ".join(met)) if met else "**Missed**"
        worst = max((r.get("worst_verify_max_rel", 0) for r in d["runs"]), default=0)
        return (f"{verdict}: fifo's most is {most:.1f} requests/s (1.5x is {1.5 * most:.1f}) and its half-load p99 "
                f"{budget:.3f} ms; within that p99, {'; '.join(parts)}. The worst spot check (every 50th request "
                f"against its input alone at batch 1) was {worst:.2e}.")

    out += ["", say(d, budget, most, res)]
    links = [rel]
    for extra in t.get("also", []):
        e = load(extra["file"])
        links.append(extra["file"])
        eb, em, er = judge(e)
        out += ["", f"{extra.get('label', 'Another run')} ([data/{extra['file']}](data/{extra['file']})): " +
                say(e, eb, em, er)]
    return out, links


def bench_shapes(data, t, sec):
    rel = _need(t, "file", "shapes")
    d = _bench_json(data, rel)
    mm = d["memory_mb"]
    target = t.get("target_ratio", 1.3)
    largest = max(d["shapes"], key=lambda s: (s["batch"] * s["height"] * s["width"]))
    r_large = mm["set"] / mm["largest_alone"]
    out = [f"The set held {mm['set']:.1f} MiB of device memory, one arena of {mm['arena']:.1f} MiB included.", ""]
    out += bench_table(["compared with", "MiB", "set / it", "target"], [
        [f"the largest shape alone ({largest['batch']}x{largest['height']}x{largest['width']})",
         f"{mm['largest_alone']:.1f}", f"**{r_large:.2f}x**",
         f"at most {target:g}x, {'met' if r_large <= target else 'missed'}"],
        ["every shape alone, summed", f"{mm['sum_alone']:.1f}", f"**{mm['sum_alone'] and mm['set'] / mm['sum_alone']:.2f}x**",
         ""]])
    body, switch, ok = [], [], True
    for s in d["shapes"]:
        p, v = s.get("pass", {}), s.get("verify", {})
        ok = ok and bool(v.get("ok"))
        if s.get("after_switch_ms") is not None:
            switch.append(s["after_switch_ms"] - s["median_ms"])
        body.append([f"{s['batch']}x{s['height']}x{s['width']}", f"{s['arena_mb']:.1f}", f"{s['median_ms']:.4f}",
                     fmt(s.get("after_switch_ms"), "{:.4f}"), f"{s['alone_mb']:.1f}", p.get("kernels", ""),
                     p.get("copies_reading_input", ""), fmt(v.get("max_rel"), "{:.2e}")])
    out += ["", f"Preparing all {len(d['shapes'])} shapes took {d['prepare_s']:.2f} s, with {d['captures']} captures "
                f"({d['recaptures']} of them recaptures after a workspace grew). "
                f"{'Every shape verified against the CPU reference' if ok else 'NOT every shape verified'}"
                f" (max_rel below), and no copy node read the input"
                f"{'' if all(not s.get('pass', {}).get('copies_reading_input') for s in d['shapes']) else ' except where the table says'}."
                f" A switch between shapes costs {min(switch):.3f} to {max(switch):.3f} ms (the median of passes that "
                f"follow another shape's pass, less the back-to-back median).", ""]
    out += bench_table(["shape", "arena MiB", "median ms", "after a switch ms", "alone MiB", "kernels",
                        "copies of the input", "max_rel vs CPU"], body)
    return out, [rel]


def bench_launch_order(data, t, sec):
    rel = _need(t, "file", "launch-order")
    rows = _bench_jsonl(data, rel)
    keys, by = [], {}
    for r in rows:
        k = (r["model"], r["size"], r["batch"])
        if k not in by:
            keys.append(k)
            by[k] = {}
        by[k][(r["impl"], r["variant"])] = r
    body, op, me, lp, ptr, err = [], [], [], [], [], 0.0
    for k in keys:
        g = by[k]
        seq, topo = g.get(("hios", "sequential")), g.get(("hios", "hios-lp-1gpu"))
        opara, meas = g.get(("hios", "hios-lp-1gpu-opara")), g.get(("hios", "hios-lp-1gpu-measured"))
        pt = g.get(("pytorch", "cuda-graph"))
        if not topo:
            continue
        tm = topo["median_ms"]
        for x in (topo, opara, meas):
            if x:
                err = max(err, x.get("rel_err_vs_sequential", 0.0))

        def rel_(x, acc):
            if not x:
                return ""
            acc.append(x["median_ms"] / tm)
            return f"{x['median_ms']:.3f} ({x['median_ms'] / tm:.3f}x)"

        if seq:
            lp.append(seq["median_ms"] / tm)
        if pt:
            ptr.append(pt["median_ms"] / tm)
        body.append([k[0], k[1], k[2], fmt(seq and seq["median_ms"]), f"{tm:.3f}", rel_(opara, op), rel_(meas, me),
                     fmt(pt and pt["median_ms"]) or "-", f"{pt['median_ms'] / tm:.2f}x" if pt else "-"])
    out = bench_table(["model", "size", "batch", "hios sequential graph (ms)", "hios-lp topo (ms)", "opara (ms)",
                       "measured (ms)", "PyTorch graph (ms)", "PyTorch / topo"], body)
    out += ["", f"opara runs at {min(op):.3f}-{max(op):.3f}x of topo and measured at {min(me):.3f}-{max(me):.3f}x; "
                f"hios-lp topo is {min(lp):.2f}-{max(lp):.2f}x faster than hios's own sequential graph and "
                f"{min(ptr):.2f}-{max(ptr):.2f}x faster than PyTorch's. Every hios row's output matched hios's "
                f"sequential run (largest rel_err {err:.2e})."]
    return out, [rel]


def bench_transcribed(data, t, sec):
    return bench_table(_need(t, "columns", "transcribed table"), _need(t, "rows", "transcribed table"),
                       t.get("align")), []


BENCH_KINDS = {"torch-table": bench_torch_table, "tune-runs": bench_tune_runs, "memory-runs": bench_memory_runs,
               "make-run": bench_make_run, "tune-cost": bench_tune_cost, "tune-walls": bench_tune_walls,
               "split-runs": bench_split_runs, "tune-logs": bench_tune_logs, "serve": bench_serve, "shapes": bench_shapes,
               "launch-order": bench_launch_order, "transcribed": bench_transcribed}


def bench_tried(data, sec, section_file):
    out = []
    for i, it in enumerate(_need(sec, "items", section_file)):
        where = f"{section_file}: items[{i}]"
        head = f"- **{_need(it, 'what', where)}** ({_need(it, 'card', where)}, {_need(it, 'date', where)}): "
        text = _need(it, "text", where)
        if it.get("kind") == "nccl-ctas":
            runs = re.findall(r"NCCL_MAX_CTAS=(\S+) \(rc \d+\): median ([\d.]+) ms", _bench_text(data, it["file"]))
            capped = [(c, float(m)) for c, m in runs if c != "default"]
            default = [float(m) for c, m in runs if c == "default"]
            if not capped or not default:
                raise ReportError(f"{_bench_path(data, it['file'])}: no NCCL_MAX_CTAS runs")

            def lst(xs):
                return ", ".join(xs[:-1]) + " and " + xs[-1] if len(xs) > 1 else xs[0]

            folder = os.path.dirname(it["file"]) + "/"
            text = (f"{it.get('subject', 'the schedule')} ran {lst([f'{m:.2f}' for _, m in capped])} ms with "
                    f"{lst([c for c, _ in capped])} CTAs, against {lst([f'{m:.2f}' for m in default])} ms with NCCL's "
                    f"default ([data/{folder}](data/{folder}), `{os.path.basename(it.get('logs', it['file']))}`). "
                    + text)
        out.append(head + text)
    return out


def bench_page(data):
    """The whole of docs/benchmarks.md, as text."""
    data = os.path.normpath(data)
    if not os.path.isdir(data):
        raise ReportError(f"{data}: not a folder")
    secs = []
    for name in BENCH_SECTIONS:
        rel = f"tables/{name}.json"
        sec = _bench_json(data, rel)
        secs.append((name, rel, sec, _need(sec, "title", rel)))
    out = ["# Benchmarks", "",
           f"<!-- Generated by `{BENCH_COMMAND}` from docs/data/: edit the data, not this page. -->", "",
           "Today's measurements, one table per question, each the newest run of its question. Every table names its "
           "card, date, commit, the command that produced it and its data under [data/](data/). Tables whose raw "
           "output was not kept are transcribed into [data/tables/](data/tables/) and say so. To refresh a table, "
           "run its command on the GPU machine, put its output where the table's data line points (or point the "
           "table's file in data/tables/ at the new output), then regenerate the page:", "",
           "```sh", BENCH_COMMAND, "```", "",
           "Unless a table says otherwise: batch 1, activations channels-last (NHWC), CUDA Graphs, medians; TF32 is "
           "fp32 tensors with TF32 convolutions, bf16 is 16-bit tensors and weights with fp32 accumulation. Earlier "
           "measurements are in git history.", "",
           " · ".join(f"[{title}](#{bench_slug(title)})" for _, _, _, title in secs), ""]
    for name, rel, sec, title in secs:
        out += [f"## {title}", ""]
        for p in sec.get("about", []):
            out += [p, ""]
        if name == "tried":
            out += bench_tried(data, sec, rel) + [""]
            continue
        for i, t in enumerate(_need(sec, "tables", rel)):
            where = f"{_bench_path(data, rel)}: tables[{i}]"
            kind = _need(t, "kind", where)
            if kind not in BENCH_KINDS:
                raise ReportError(f"{where}: unknown kind {kind!r} (known: {', '.join(BENCH_KINDS)})")
            if t.get("heading"):
                out += [f"### {t['heading']}", ""]
            try:
                body, links = BENCH_KINDS[kind](data, t, sec)
            except (KeyError, TypeError, ValueError, IndexError, StopIteration) as e:
                raise ReportError(f"{where}: the data for kind {kind!r} lacks what it needs ({type(e).__name__}: {e})")
            src = ", ".join(f"[data/{x}](data/{x})" for x in links) if links else f"[data/{rel}](data/{rel})"
            how = "parsed from" if kind != "transcribed" else "transcribed in"
            out += [f"Measured on {_need(t, 'card', where)}, {_need(t, 'date', where)}, commit "
                    f"{_need(t, 'commit', where)}. Data {how} {src}.", ""]
            out += ["```sh"] + list(_need(t, "command", where)) + ["```", ""]
            for p in t.get("before", []):
                out += [p, ""]
            out += body + [""]
            for p in t.get("notes", []):
                out += [p, ""]
    while out and out[-1] == "":
        out.pop()
    return "\n".join(out) + "\n"


def report_failed(e):
    """Prints the one line a failed report gives (naming the file for an OS error); exit status 2."""
    if isinstance(e, OSError):
        print(f"{PROG}: error: {e.filename or ''}: {e.strerror}", file=sys.stderr)
    else:
        print(f"{PROG}: error: {e}", file=sys.stderr)
    return 2


def main(argv=None):
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="docs/experiments.md describes every table and plot.")
    ap.add_argument("results", nargs="*", help="results of scripts/sweep.py (JSON lines), or one hios serve JSON")
    ap.add_argument("-o", "--output", required=True, metavar="DIR",
                    help="folder for report.md and the plots (with --benchmarks: the page's file)")
    ap.add_argument("--formats", default="png,svg", help="comma-separated image formats (default png,svg)")
    ap.add_argument("--title", default="", help="the report's heading (default: from the results' file names)")
    ap.add_argument("--benchmarks", action="store_true",
                    help="write the benchmarks page (docs/benchmarks.md) from --data instead of a report")
    ap.add_argument("--data", metavar="DIR",
                    default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "data"),
                    help="with --benchmarks: the data folder (default: docs/data of this checkout)")
    args = ap.parse_args(argv)
    if args.benchmarks:
        if args.results:
            ap.error("--benchmarks takes no results files")
        try:
            if os.path.isdir(args.output):
                raise ReportError(f"{args.output}: is a folder; --benchmarks writes a file")
            text = bench_page(args.data)
            write_bytes(args.output, text.encode())
        except (ReportError, OSError) as e:
            return report_failed(e)
        print(f"{PROG}: wrote {args.output} ({text.count(chr(10))} lines)")
        return 0
    if not args.results:
        ap.error("the following arguments are required: results")
    try:
        formats = [f for f in args.formats.split(",") if f]
        bad = [f for f in formats if f not in ("png", "svg", "pdf")]
        if bad or not formats:
            raise ReportError(f"--formats: expected png, svg or pdf, got {args.formats!r}")
        serve = load_serve(args.results[0]) if len(args.results) == 1 else None
        if serve is not None:
            outdir = args.output
            if os.path.exists(outdir) and not os.path.isdir(outdir):
                raise ReportError(f"{outdir}: exists and is not a folder")
            plt = import_matplotlib()
            os.makedirs(outdir, exist_ok=True)
            plots = Plots(plt, outdir, formats)
            serve_report(serve, args.results[0], outdir, plots, args.title)
            print(f"{PROG}: wrote {os.path.join(outdir, 'report.md')} and {len(plots.written)} plot(s) "
                  f"({', '.join(n for n, _ in plots.written)}) as {', '.join(formats)}")
            return 0
        rows, warnings = load_rows(args.results)
        outdir = args.output
        if os.path.exists(outdir) and not os.path.isdir(outdir):
            raise ReportError(f"{outdir}: exists and is not a folder")
        plt = import_matplotlib()
        os.makedirs(outdir, exist_ok=True)
        cells, problems = combine(rows)
        plots = Plots(plt, outdir, formats)
        show_cost, show_intra = varies(cells, "cost"), varies(cells, "intra")
        if cells:
            for fn in (plot_latency_vs_size, plot_speedup, plot_batch, plot_predicted, plot_optimisation,
                       plot_pytorch):
                fn(plots, cells, show_cost, show_intra)
        else:
            plots.skipped.append(("any", "no configuration is ok"))
        title = args.title or "Sweep report: " + ", ".join(os.path.basename(p) for p in args.results)
        text = markdown(title, args.results, rows, cells, problems, plots, warnings)
        write_bytes(os.path.join(outdir, "report.md"), text.encode())
    except (ReportError, OSError) as e:
        return report_failed(e)
    for w in warnings:
        print(f"{PROG}: note: {w}", file=sys.stderr)
    print(f"{PROG}: wrote {os.path.join(outdir, 'report.md')} and {len(plots.written)} plot(s) "
          f"({', '.join(n for n, _ in plots.written)}) as {', '.join(formats)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
