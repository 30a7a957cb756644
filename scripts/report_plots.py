"""The plots of scripts/report.py: Plots (one style per series, one legend under all panels, the
files in every format) and one function per plot of a sweep's results. matplotlib is passed in
(scripts/report.py imports it only when a report draws) and matplotlib.ticker is imported where
it is used.
"""
import io
import os

from report_rows import comparable, facet_title, series_label, write_bytes


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
