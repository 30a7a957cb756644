"""The rows of scripts/sweep.py: run_config runs one configuration's steps and makes its row from
what they wrote (the schedule's meta, hios run's JSON, bench_pytorch.py's line), and Results, the
results file: read and repaired at the start (a partial last line cut), locked, each row appended
with one write and fsync'ed.
"""
import fcntl
import json
import math
import os
import signal
import stat
import time

from sweep_jobs import Paths, error_line, plan, write_json_atomic
from sweep_spec import SpecError, digest


# ----------------------------------------------------------------------------------------------
# Results: parsing what the steps wrote
# ----------------------------------------------------------------------------------------------

def _finite(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def read_json_file(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def schedule_result(path):
    s = read_json_file(path)
    if not isinstance(s, dict) or not isinstance(s.get("meta"), dict):
        return {}
    m = s["meta"]
    params = m.get("params") if isinstance(m.get("params"), dict) else {}
    out = {"algorithm": m.get("algorithm"), "gpus": m.get("gpus"), "cost_model": m.get("cost_model"),
           "device": m.get("device"), "transfers": len(s.get("transfers", []) or [])}
    for k in ("predicted_ms", "lower_bound_ms"):
        if _finite(m.get(k)):
            out[k] = m[k]
    for k in ("used_gpus", "fallback", "intra_pass", "phase1_ms", "window_ms", "nodes_per_gpu"):
        if k in params:
            out[k] = params[k]
    oc = m.get("optimisation_cost")
    if isinstance(oc, dict):
        out["search_s"] = oc.get("search_s")
        out["profiling_s"] = oc.get("profiling_s")
    tune = m.get("tune")
    if isinstance(tune, dict):
        out["tune"] = {k: tune.get(k) for k in ("chosen", "measured_ms", "passes", "seconds", "stages",
                                                "nodes_measured", "searches_reused")}
    return out


def run_result(path, batch):
    r = read_json_file(path)
    if not isinstance(r, dict) or r.get("format") != "hios-run":
        return None
    lat = r.get("latency_ms") if isinstance(r.get("latency_ms"), dict) else {}
    out = {"latency_ms": {k: lat.get(k) for k in ("median", "mean", "min", "max", "std", "repeats")},
           "run_ok": r.get("ok"), "run_config": r.get("config"), "versions": r.get("versions")}
    if _finite(lat.get("median")) and lat["median"] > 0:
        out["throughput_ips"] = batch * 1000.0 / lat["median"]
    verify = []
    for v in r.get("verify", []) or []:
        if isinstance(v, dict):
            d = v.get("diff") if isinstance(v.get("diff"), dict) else {}
            verify.append({"against": v.get("against"), "ok": v.get("ok"), "tolerance": v.get("tolerance"),
                           "max_abs": d.get("max_abs"), "max_rel": d.get("max_rel")})
    out["verify"] = verify
    out["verified"] = all(v["ok"] is True for v in verify) if verify else None
    ranks = [x for x in r.get("ranks", []) or [] if isinstance(x, dict)]
    peaks = [x.get("peak_memory_mb") for x in ranks if _finite(x.get("peak_memory_mb"))]
    if peaks:
        out["peak_memory_mb"] = max(peaks)
    out["devices"] = sorted({str(x.get("device")) for x in ranks})
    sched = r.get("schedule") if isinstance(r.get("schedule"), dict) else {}
    if _finite(sched.get("predicted_ms")):
        out["predicted_ms"] = sched["predicted_ms"]
    return out


def verify_failure(res):
    for v in res.get("verify", []):
        if v.get("ok") is not True:
            return (f"verification failed against {v.get('against')}: max_rel {v.get('max_rel')} "
                    f"(tolerance {v.get('tolerance')})")
    return None


def pytorch_result(path, c):
    rows = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    pass
    except OSError:
        return None
    for r in rows:
        if isinstance(r, dict) and r.get("variant") == c["variant"] and _finite(r.get("median_ms")):
            out = {"latency_ms": {"median": r["median_ms"], "min": r.get("min_ms"), "max": r.get("max_ms")},
                   "math": r.get("math"), "peak_memory_mb": r.get("peak_mib"), "devices": [r.get("device")],
                   "versions": f"torch {r.get('torch')}, cuDNN {r.get('cudnn')}"}
            if r["median_ms"] > 0:
                out["throughput_ips"] = c["batch"] * 1000.0 / r["median_ms"]
            for k in ("compile_s", "first_pass_s", "flops", "cuda_graph"):
                if k in r:
                    out[k] = r[k]
            return out
    return None


# ----------------------------------------------------------------------------------------------
# The results file
# ----------------------------------------------------------------------------------------------

class Results:
    def __init__(self, path, write):
        self.path = path
        self.fd = None
        self.rows = []
        self.repaired = 0
        try:
            st = os.stat(path)  # follows a symlink: its target is what gets appended to
            if not stat.S_ISREG(st.st_mode):
                raise SpecError(f"{path}: not a regular file; results are appended to a file")
        except FileNotFoundError:
            if not write:
                return
        if write:
            d = os.path.dirname(os.path.abspath(path))
            os.makedirs(d, exist_ok=True)
            try:
                self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o666)
            except OSError as e:
                raise SpecError(f"{path}: cannot open for appending: {e.strerror}") from None
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                raise SpecError(f"{path}: another sweep is appending to it (its lock is held)") from None
            with open(path, "rb") as f:
                data = f.read()
        else:
            with open(path, "rb") as f:
                data = f.read()
        end = data.rfind(b"\n") + 1
        if end < len(data):
            # Only the last line can be partial (each row is one write): a kill or a full disk
            # in the middle of it. Cut it so the next row starts on a line of its own.
            self.repaired = len(data) - end
            if write:
                os.ftruncate(self.fd, end)
                os.fsync(self.fd)
            data = data[:end]
        for i, line in enumerate(data.decode("utf-8", "replace").split("\n"), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as e:
                raise SpecError(f"{path}:{i}: not a JSON row ({e.msg}); fix or remove that line") from None
            if not isinstance(row, dict) or not isinstance(row.get("key"), str):
                raise SpecError(f"{path}:{i}: a row without a 'key'; fix or remove that line")
            self.rows.append(row)

    def done(self, retry_failed):
        last = {}
        for r in self.rows:
            last[r["key"]] = r
        return {k for k, r in last.items() if not retry_failed or r.get("status") == "ok"}

    def append(self, row):
        data = (json.dumps(row, sort_keys=False, separators=(",", ":")) + "\n").encode()
        # No signal may run a handler (and raise) between the write and the fsync.
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
        try:
            before = os.lseek(self.fd, 0, os.SEEK_END)
            n = os.write(self.fd, data)
            if n != len(data):
                os.ftruncate(self.fd, before)
                raise OSError(f"short write to {self.path} ({n} of {len(data)} bytes)")
            os.fsync(self.fd)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


# ----------------------------------------------------------------------------------------------
# One configuration
# ----------------------------------------------------------------------------------------------

def run_config(spec, hios, c, work, runner, env_info, bench_pytorch):
    p = Paths(work, c)
    steps = plan(spec, hios, c, p, bench_pytorch)
    for d in ("graphs", "schedules", "runs", "logs", "profiles"):
        os.makedirs(os.path.join(work, d), exist_ok=True)
    t0 = time.monotonic()
    deadline = t0 + c["timeout_s"]
    row = {"format": "hios-sweep", "version": 1, "key": c["key"], "status": "ok",
           "config": {k: c[k] for k in ("model", "height", "width", "batch", "gpus", "algorithm", "cost", "backend",
                                        "math", "intra", "rep", "timeout_s")} | {"settings": c["settings"]},
           "sweep": {"spec": spec["name"], "settings_digest": digest(c["settings"]), "mpirun": spec["mpirun"]},
           "result": {}, "files": {"log": os.path.relpath(p.log, work)}}
    if c["kind"] == "hios":
        row["files"].update({"graph": os.path.relpath(p.graph, work), "schedule": os.path.relpath(p.schedule, work),
                             "run": os.path.relpath(p.run, work)})
    res = row["result"]
    opt = {}
    for f in (p.schedule, p.run, p.pytorch):  # never read what an earlier attempt left
        try:
            os.unlink(f)
        except FileNotFoundError:
            pass
    failed = None
    log_start = os.path.getsize(p.log) if os.path.exists(p.log) else 0  # earlier attempts are above
    for step in steps:
        measures_costs = step.makes is not None and step.sidecar is not None  # profile, or tune for costs
        if step.makes and os.path.exists(step.makes):
            if measures_costs:
                side = read_json_file(step.sidecar + ".wall.json") or {}
                opt["profile_wall_s"] = side.get("wall_s") if _finite(side.get("wall_s")) else None
                opt["profile_reused"] = True
            continue
        existed = os.path.exists(step.sidecar) if step.sidecar else False
        since = os.path.getsize(p.log) if os.path.exists(p.log) else 0
        rc, wall, timed_out = runner.run(step.argv, p.log, deadline, c["key"])
        if step.name == "schedule":
            opt["schedule_wall_s"] = wall
        elif measures_costs:
            opt["profile_wall_s"] = wall
            opt["profile_reused"] = False
        elif step.name == "tune":
            opt["tune_wall_s"] = wall
            opt["profile_db_existed"] = existed
        elif step.name == "run":
            res["run_wall_s"] = wall
        if step.sidecar and rc == 0 and not existed:
            write_json_atomic(step.sidecar + ".wall.json", {"wall_s": wall, "step": step.name, "key": c["key"]})
        if timed_out:
            row["status"] = "timeout"
            failed = (step.name, f"{step.name} step killed after the configuration's {c['timeout_s']:g} s timeout")
            break
        if rc != 0:
            failed = (step.name, error_line(p.log, since) or f"{step.name} exited with {rc}")
            break
    if c["kind"] == "hios":
        sched = schedule_result(p.schedule)
        if sched:
            res["schedule"] = sched
            if "predicted_ms" in sched:
                res["predicted_ms"] = sched["predicted_ms"]
            opt["search_s"] = sched.pop("search_s", None)
            opt["profiling_s"] = sched.pop("profiling_s", None)
        walls = [opt.get("schedule_wall_s"), opt.get("tune_wall_s"),
                 opt.get("profile_wall_s") if c["algorithm"] != "tuned" else None]
        if any(_finite(w) for w in walls[:2]):
            opt["total_s"] = sum(w for w in walls if _finite(w))
        res["optimisation"] = opt
        run = run_result(p.run, c["batch"])
        if run:
            run.pop("predicted_ms", None)  # the schedule's own, kept above
            res.update(run)
            if failed is None and run.get("run_ok") is not True:
                failed = ("run", verify_failure(run) or "hios run reported ok: false")
            elif failed and failed[0] == "run" and verify_failure(run):
                failed = ("run", verify_failure(run))
        elif failed is None:
            failed = ("run", f"hios run wrote no results to {os.path.relpath(p.run, work)}")
    else:
        pt = pytorch_result(p.pytorch, c)
        if pt:
            res.update(pt)
        elif failed is None:
            failed = ("pytorch", error_line(p.log, log_start) or "bench_pytorch.py wrote no row for this variant")
    if failed:
        if row["status"] == "ok":
            row["status"] = "failed"
        row["step"], row["error"] = failed
    row["wall_s"] = round(time.monotonic() - t0, 3)
    row["env"] = dict(env_info, date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    return row
