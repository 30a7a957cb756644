"""The Markdown of scripts/report.py's report.md for a sweep's results: the best run per problem,
every configuration, and the plots with their captions.
"""
from report_rows import CELL_FIELDS, STATUSES, comparable


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
