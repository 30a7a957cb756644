"""The jobs of scripts/sweep.py: the commands of one configuration (plan: hios graph or import,
profile, schedule or mpirun hios tune, mpirun hios run), and running them, each in its own session
with a deadline, killed as a whole on a timeout or an interrupt. Runner notes the running job so
that a restarted sweep ends what a killed one left behind; error_line picks the line of a log
that says what went wrong.
"""
import ctypes
import glob
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time

from sweep_spec import INTRA_FLAGS, PROG


# ----------------------------------------------------------------------------------------------
# The commands of one configuration
# ----------------------------------------------------------------------------------------------

class Paths:
    def __init__(self, work, c):
        stem = f"{c['model']}-{c['height']}x{c['width']}-b{c['batch']}"
        slug = c["key"].replace("/", "_")
        layout = c["settings"].get("run", {}).get("layout", "default")
        self.graph = os.path.join(work, "graphs", stem + ".json")
        self.schedule = os.path.join(work, "schedules", slug + ".json")
        self.run = os.path.join(work, "runs", slug + ".json")
        self.log = os.path.join(work, "logs", slug + ".log")
        self.pytorch = os.path.join(work, "runs", slug + ".pytorch.jsonl")
        # The CPU reference's outputs, one per graph and seed (hios run --reference-cache): every
        # configuration of a graph is verified against it, but it is computed only once.
        self.references = os.path.join(work, "references")
        # Cost databases are shared by every configuration of the same graph, GPU count,
        # backend and precision: measuring them is the expensive part of "profile" and "tune".
        base = f"{stem}-g{c['gpus']}-{c['backend']}-{c['math']}-{layout}"
        self.profile_db = os.path.join(work, "profiles", base + ".profile.json")
        self.tune_db = os.path.join(work, "profiles", base + ".tune.json")
        self.tune_out = os.path.join(work, "profiles", base + ".tuned-schedule.json")


class Step:
    """One command. `makes` is a file that, when it exists, makes the step unnecessary (graphs and
    cost databases shared between configurations; hios writes them atomically, so an existing
    one is whole). `sidecar` is the cost database whose measuring time is kept beside it
    (DB.wall.json), so that a configuration reusing the database can still report that cost."""

    def __init__(self, name, argv, makes=None, sidecar=None):
        self.name, self.argv, self.makes, self.sidecar = name, argv, makes, sidecar


def mpi_argv(spec, gpus, argv):
    m = spec["mpirun"]
    return [m["command"], *m["args"], "-np", str(gpus), *argv]


def tune_argv(hios, c, graph, db, out):
    s = c["settings"]
    argv = [hios, "tune", "--graph", graph, "--gpus", str(c["gpus"]), "--backend", c["backend"],
            "--profile-db", db, "-o", out, "--quiet"]
    argv += run_common_flags(c)
    t = s.get("tune", {})
    for k, flag in (("warmup", "--warmup"), ("passes", "--passes"), ("stage_budget_s", "--stage-budget")):
        if k in t:
            argv += [flag, str(t[k])]
    return argv


def run_common_flags(c):
    """Flags hios run and hios tune share: precision, layout, CPU threads."""
    r = c["settings"].get("run", {})
    out = []
    if c["math"] != "default":
        out += ["--math", c["math"]]
    if r.get("layout", "default") != "default":
        out += ["--layout", r["layout"]]
    if "threads" in r:
        out += ["--threads", str(r["threads"])]
    return out


def plan(spec, hios, c, p, bench_pytorch):
    """The steps of configuration c, in order."""
    if c["kind"] == "pytorch":
        s = c["settings"]["pytorch"]
        argv = [sys.executable, bench_pytorch, "--models", c["model"], "--sizes", str(c["height"]),
                "--variants", c["variant"], "--warmup", str(s["warmup"]), "--iters", str(s["iters"]),
                "--json", p.pytorch]
        if c["batch"] != 1:
            argv += ["--batch", str(c["batch"])]
        return [Step("pytorch", argv)]
    if c["model"].endswith(".onnx"):  # the user's model, imported with its weights at this size
        onnx = os.path.join(spec["folder"], c["model"])
        steps = [Step("graph", [hios, "import", onnx, "--height", str(c["height"]), "--width", str(c["width"]),
                                "--batch", str(c["batch"]), "-o", p.graph], makes=p.graph)]
    else:
        steps = [Step("graph", [hios, "graph", "--model", c["model"], "--height", str(c["height"]), "--width",
                                str(c["width"]), "--batch", str(c["batch"]), "-o", p.graph], makes=p.graph)]
    s = c["settings"]
    if c["algorithm"] == "tuned":
        steps.append(Step("tune", mpi_argv(spec, c["gpus"], tune_argv(hios, c, p.graph, p.tune_db, p.schedule)),
                          sidecar=p.tune_db))
    else:
        cost = "analytic"
        if c["cost"] == "profile":
            argv = [hios, "profile", "--graph", p.graph, "--gpus", str(c["gpus"]), "-o", p.profile_db]
            if c["math"] != "default":
                argv += ["--math", c["math"]]
            if s.get("run", {}).get("layout", "default") != "default":
                argv += ["--layout", s["run"]["layout"]]
            steps.append(Step("profile", argv, makes=p.profile_db, sidecar=p.profile_db))
            cost = p.profile_db
        elif c["cost"] == "tune":
            # The tuner measures the costs; the algorithm then searches on them.
            steps.append(Step("tune", mpi_argv(spec, c["gpus"], tune_argv(hios, c, p.graph, p.tune_db, p.tune_out)),
                              makes=p.tune_db, sidecar=p.tune_db))
            cost = p.tune_db
        argv = [hios, "schedule", "--graph", p.graph, "--algo", c["algorithm"], "--gpus", str(c["gpus"]),
                "--cost", cost]
        sc = s.get("schedule", {})
        if "device" in sc:
            argv += ["--device", sc["device"]]
        if "streams" in sc and c["intra"] != "none":
            argv += ["--streams", str(sc["streams"])]
        if "window" in sc and c["intra"] != "none":
            argv += ["--window", str(sc["window"])]
        if "time_budget_s" in sc:
            argv += ["--time-budget", str(sc["time_budget_s"])]
        if not sc.get("single_gpu_fallback", True):
            argv += ["--no-single-gpu-fallback"]
        argv += INTRA_FLAGS[c["intra"]] + ["-o", p.schedule]
        steps.append(Step("schedule", argv))
    r = s.get("run", {})
    argv = [hios, "run", "--graph", p.graph, "--schedule", p.schedule, "--backend", c["backend"]]
    argv += run_common_flags(c)
    for k in ("warmup", "number", "repeat"):
        if k in r:
            argv += [f"--{k}", str(r[k])]
    if r.get("verify", True):
        argv += ["--verify", "--reference-cache", p.references]
        if r.get("reference") == "first-image":
            argv += ["--reference-first-image"]
    argv += ["-o", p.run]
    steps.append(Step("run", mpi_argv(spec, c["gpus"], argv)))
    return steps


# ----------------------------------------------------------------------------------------------
# Child processes: own session, killed as a whole
# ----------------------------------------------------------------------------------------------

_libc = None
try:
    _libc = ctypes.CDLL(None, use_errno=True)
except OSError:
    pass
PR_SET_PDEATHSIG = 1


def _child_setup(parent):
    # SIGTERM to the child (mpirun forwards it to its ranks) if the sweep dies, even by SIGKILL,
    # so that a killed sweep leaves no job running beside the one a restart starts.
    if _libc is not None and sys.platform.startswith("linux"):
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the sweep died before prctl took effect
            os._exit(143)


def _proc_stat(pid):
    """(state, ppid, pgrp, session, starttime) of a process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    rest = data[data.rfind(")") + 2:].split()  # the command name may hold spaces and ')'
    return rest[0], int(rest[1]), int(rest[2]), int(rest[3]), int(rest[19])


def _all_pids():
    return [int(d) for d in os.listdir("/proc") if d.isdigit()] if os.path.isdir("/proc") else []


def _descendants(pid):
    children = {}
    for p in _all_pids():
        st = _proc_stat(p)
        if st:
            children.setdefault(st[1], []).append(p)
    out, todo = [], [pid]
    while todo:
        for ch in children.get(todo.pop(), []):
            out.append(ch)
            todo.append(ch)
    return out


def _session_members(sid):
    out = []
    for p in _all_pids():
        st = _proc_stat(p)
        if st and st[3] == sid and st[0] != "Z":
            out.append(p)
    return out


def _alive(pid):
    st = _proc_stat(pid)
    return st is not None and st[0] != "Z"


def _signal(pids, sig):
    for p in pids:
        try:
            os.kill(p, sig)
        except (ProcessLookupError, PermissionError):
            pass


def kill_tree(pid, proc=None, grace=5.0):
    """SIGTERM to the child's whole session and every descendant (Open MPI may give ranks their
    own groups), then SIGKILL to whatever is left after `grace` seconds."""
    targets = set(_descendants(pid)) | set(_session_members(pid)) | {pid}
    _signal(targets, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if proc is not None:
            proc.poll()
        if not any(_alive(p) for p in targets):
            break
        time.sleep(0.05)
    targets |= set(_descendants(pid)) | set(_session_members(pid))
    _signal([p for p in targets if _alive(p)], signal.SIGKILL)
    if proc is not None:
        proc.wait()


def write_json_atomic(path, obj):
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class Runner:
    """Runs steps with a deadline. The running child is noted in WORK/running.json so that a
    restart after SIGKILL can end what the killed sweep left behind."""

    def __init__(self, work, env):
        self.work, self.env = work, env
        self.note = os.path.join(work, "running.json")

    def clean_leftovers(self):
        # A SIGKILL between writing the note's temporary file and renaming it leaves the note
        # there: read those too.
        notes = [self.note] + sorted(glob.glob(glob.escape(self.note) + ".tmp.*"))
        for path in notes:
            try:
                with open(path) as f:
                    n = json.load(f)
                sid, start = int(n["pid"]), int(n["start"])
            except (OSError, ValueError, KeyError, TypeError):
                sid = None
            if sid is not None:
                self._end_session(sid, start, n.get("key", "?"))
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    @staticmethod
    def _end_session(sid, start, key):
        # The session id is the child's pid; while anything lives in that session the pid cannot
        # be reused, so a live leader with another start time is someone else's process.
        st = _proc_stat(sid)
        if st is not None and st[4] != start:
            return
        members = _session_members(sid)
        if not members:
            return
        print(f"{PROG}: ending {len(members)} process(es) left by an interrupted sweep ({key})", flush=True)
        _signal(members, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(_alive(p) for p in members):
            time.sleep(0.05)
        _signal([p for p in members if _alive(p)], signal.SIGKILL)

    def run(self, argv, log, deadline, key):
        """(returncode, wall seconds, timed_out). The child writes into the log directly, so a
        chatty job never blocks on a pipe."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None, 0.0, True
        with open(log, "ab") as out:
            out.write(("$ " + shlex.join(argv) + "\n").encode())
            out.flush()
            t0 = time.monotonic()
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    env=self.env, start_new_session=True,
                                    preexec_fn=lambda parent=os.getpid(): _child_setup(parent))
            st = _proc_stat(proc.pid)
            write_json_atomic(self.note, {"pid": proc.pid, "start": st[4] if st else 0, "key": key})
            timed_out = False
            try:
                proc.wait(timeout=remaining)
            except subprocess.TimeoutExpired:
                timed_out = True
                kill_tree(proc.pid, proc)
            except BaseException:
                kill_tree(proc.pid, proc)
                raise
            finally:
                wall = time.monotonic() - t0
                try:
                    os.unlink(self.note)
                except FileNotFoundError:
                    pass
            out.write(f"# exit {proc.returncode}, {wall:.2f} s{', timed out' if timed_out else ''}\n".encode())
        return proc.returncode, wall, timed_out


def error_line(log, since):
    """The line that says what went wrong. hios prints one 'hios: error: ...' line (every rank
    the same, so the first one); mpirun and Python put banners and tracebacks around it."""
    try:
        with open(log, "rb") as f:
            f.seek(since)
            lines = [ln.strip() for ln in f.read().decode("utf-8", "replace").splitlines()]
    except OSError:
        return ""
    lines = [ln for ln in lines if ln and not ln.startswith("$ ") and not ln.startswith("# exit")
             and not set(ln) <= set("-=*")]
    hios_errors = [ln for ln in lines if "hios: error:" in ln]
    if hios_errors:
        return hios_errors[0][:500]
    errors = [ln for ln in lines if re.search(r"error|fail", ln, re.IGNORECASE)]
    return (errors or lines or [""])[-1][:500]
