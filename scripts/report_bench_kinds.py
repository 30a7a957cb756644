"""The tables of docs/benchmarks.md, one function per kind of data (BENCH_KINDS): each reads the
files a GPU script wrote under docs/data/ (or a table's transcribed rows) and returns the table's
Markdown lines with the data files it read. Also the helpers they share: reading a data file,
a Markdown table with aligned columns, and the met/missed line of a table's targets.
"""
import json
import os
import re

from report_rows import ReportError
from report_tables import fmt


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


def _pair(tuned, one_gpu, spec):
    """'tuned / one GPU' for the two runs' numbers, '-' for a run that did not finish."""
    if tuned is None and one_gpu is None:
        return ""
    return " / ".join("-" if v is None else spec.format(v) for v in (tuned, one_gpu))


def bench_tune_runs(data, t, sec):
    """scripts/gpu.sh tune's summary: tuned against the best one-GPU candidate of the same job."""
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
                     _pair(lt, l1, "{:.3f}"), _pair(mt, m1, "{:.0f}")])
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
    # The target: this many times fifo's most answered/s within the budget (1.5x on one GPU), and,
    # where given, each device at least this busy in that run.
    target = t.get("target_x", 1.5)
    min_busy = t.get("min_device_busy")

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
            elif pol != "fifo" and res[pol] and res[pol][1] == ld and res[pol][0] / most >= target:
                ans, p99 = f"**{ans}**", f"**{p99}**"
            row += [ans, p99]
        ad = by.get(("adaptive", ld))
        row.append(f"{all_of(ad)['mean_batch']:.2f}" if ad else "")
        body.append(row)
    out = bench_table(["load", "offered/s", "fifo answered/s", "fifo p99", "static answered/s", "static p99",
                       "adaptive answered/s", "adaptive p99", "adaptive mean batch"], body, ["r"] * 9)

    def busy(d, pol, ld):  # each device's busy share in that run, as "0: 60.7%, 1: 61.1%"
        r = next((r for r in d["runs"] if r["policy"] == pol and r["load"] == ld), None)
        shares = (r or {}).get("device_busy_fraction") or {}
        return {k: v for k, v in sorted(shares.items())}

    def say(d, budget, most, res):
        parts, busy_ok = [], {}
        for pol in ("static", "adaptive"):
            r = res[pol]
            if not any(run["policy"] == pol for run in d["runs"]):
                parts.append(f"{pol}: not run")
            elif r is None:
                parts.append(f"{pol}: nothing within the budget")
            else:
                b = busy(d, pol, r[1])
                busy_ok[pol] = min_busy is None or (b and min(b.values()) >= min_busy)
                # Shown where devices were named (--devices), not for the one default device.
                shown = (", devices busy " + ", ".join(f"{k}: {100 * v:.1f}%" for k, v in b.items())
                         if b and list(b) != ["-1"] else "")
                parts.append(f"{pol} {r[0]:.1f} requests/s (**{r[0] / most:.2f}x**) at load {r[1]:g}, p99 {r[2]:.3f} ms"
                             + shown)
        met = [p for p in ("static", "adaptive") if res[p] and res[p][0] / most >= target and busy_ok.get(p)]
        verdict = ("**Met** by " + " and ".join(met)) if met else "**Missed**"
        if min_busy is not None:
            verdict += f" (the bar: {target:g}x with every device at least {100 * min_busy:.0f}% busy)"
        elif target != 1.5:
            verdict += f" (the bar: {target:g}x)"
        worst = max((r.get("worst_verify_max_rel", 0) for r in d["runs"]), default=0)
        return (f"{verdict}: fifo's most is {most:.1f} requests/s ({target:g}x is {target * most:.1f}) and its half-load p99 "
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


def _ab_rows(text, rel):
    """The rows of a table that scripts/gpu.sh ab wrote: configuration, both builds' runs,
    their medians and the ratio."""
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 6 or cells[0] in ("configuration", "") or cells[0].startswith("---"):
            continue
        try:
            rows.append({"config": cells[0], "ref": cells[1], "new": cells[2], "ref_ms": float(cells[3]),
                         "new_ms": float(cells[4]), "ratio": float(cells[5])})
        except ValueError:
            raise ReportError(f"{rel}: not a row of scripts/gpu/timing-ab.sh: {line.strip()[:80]}")
    if not rows:
        raise ReportError(f"{rel}: no rows of scripts/gpu/timing-ab.sh")
    return rows


def bench_timing_ab(data, t, sec):
    files = _need(t, "files", "timing-ab")
    body, ratios = [], []
    for round_, rel in enumerate(files, 1):
        for r in _ab_rows(_bench_text(data, rel), rel):
            ratios.append(r["ratio"])
            body.append([r["config"], round_, r["ref"], r["new"], f"{r['ref_ms']:.3f}", f"{r['new_ms']:.3f}",
                         f"**{r['ratio']:.3f}**"])
    out = bench_table(["configuration", "round", "reference runs (ms)", "held timing's runs (ms)", "reference median",
                       "held median", "held / reference"], body)
    out += ["", f"{len(ratios)} rows: held / reference {min(ratios):.3f}-{max(ratios):.3f}, "
                f"{sum(1 for r in ratios if r <= 1.0)} at or below 1.000."]
    return out, list(files)


def bench_transcribed(data, t, sec):
    return bench_table(_need(t, "columns", "transcribed table"), _need(t, "rows", "transcribed table"),
                       t.get("align")), []


BENCH_KINDS = {"torch-table": bench_torch_table, "tune-runs": bench_tune_runs, "memory-runs": bench_memory_runs,
               "make-run": bench_make_run, "tune-cost": bench_tune_cost, "tune-walls": bench_tune_walls,
               "split-runs": bench_split_runs, "tune-logs": bench_tune_logs, "serve": bench_serve, "shapes": bench_shapes,
               "launch-order": bench_launch_order, "timing-ab": bench_timing_ab, "transcribed": bench_transcribed}
