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

A hios serve JSON (`hios serve -o`) gives its latency-throughput and queue plots and a table; several
(the same mix on one device and on more) give one plot of p99 against answered/s per device count.

--benchmarks writes docs/benchmarks.md, today's tables one per question, from docs/data/:
docs/data/tables/<section>.json names each table's card, date, commit, command and data (the
files a GPU script wrote, parsed here, or transcribed rows where no raw output was kept). It
needs no matplotlib.
"""
import argparse
import os
import sys

# The modules beside this file; found also where Python does not put the script's folder on the path.
_HERE = os.path.dirname(os.path.realpath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from report_benchmarks import bench_page
from report_plots import (Plots, plot_batch, plot_latency_vs_size, plot_optimisation, plot_predicted,
                          plot_pytorch, plot_speedup)
from report_rows import ReportError, combine, load_rows, varies, write_bytes
from report_serve import load_serve, serve_report, serve_scaling_report
from report_tables import markdown

PROG = "report.py"


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
    ap.add_argument("results", nargs="*", help="results of scripts/sweep.py (JSON lines), or hios serve JSONs (several: one plot "
                         "of p99 against answered/s per device count)")
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
        serves = [load_serve(p) for p in args.results]
        if any(s is not None for s in serves):
            if any(s is None for s in serves):
                raise ReportError("give hios serve JSONs or sweep results, not both: "
                                  + ", ".join(p for p, s in zip(args.results, serves) if s is None))
            outdir = args.output
            if os.path.exists(outdir) and not os.path.isdir(outdir):
                raise ReportError(f"{outdir}: exists and is not a folder")
            plt = import_matplotlib()
            os.makedirs(outdir, exist_ok=True)
            plots = Plots(plt, outdir, formats)
            if len(serves) == 1:
                serve_report(serves[0], args.results[0], outdir, plots, args.title)
            else:
                serve_scaling_report(serves, args.results, outdir, plots, args.title)
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
