"""Reading and checking the rows of scripts/sweep.py's results files, combining the repeats of a
configuration into cells (with their sequential and best one-GPU references), the labels plots and
tables share, and write_bytes, the rule every output file of scripts/report.py is written by.
"""
import json
import math
import os
import statistics
import stat

MAX_SIZE = 65536
MAX_GPUS = 1024
STATUSES = ("ok", "failed", "timeout")


class ReportError(Exception):
    """A bad input or option: one line, exit 2."""


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
