#!/usr/bin/env python3
"""Resumable experiment sweeps over model x image size x batch x GPUs x algorithm.

    scripts/sweep.py SPEC.json -o RESULTS.jsonl [--hios PATH] [--workdir DIR] [--only PATTERN]
                     [--dry-run] [--retry-failed]

Every configuration of the spec runs the real pipeline through the hios binary:

    hios graph --model M --height H --width W --batch B -o graph.json        (once per graph;
                                   a model "x.onnx" is `hios import x.onnx ...` from the spec's folder)
    hios schedule --graph graph.json --algo A --gpus G --cost C ... -o schedule.json
      or  mpirun -np G hios tune ... -o schedule.json                      (algorithm "tuned")
    mpirun -np G hios run --graph graph.json --schedule schedule.json --backend ... --verify -o run.json

and appends one JSON line to RESULTS: the configuration, its key, ok/failed/timeout, the
error, the measured numbers and the environment. A key already in RESULTS is skipped, so the
same command resumes an interrupted sweep. Each line is appended with one write() and fsync'ed:
Ctrl-C, SIGTERM or SIGKILL leave every earlier line whole, and a partial last line (a kill in
the middle of the write, or a full disk) is cut off on the next start.

docs/experiments.md describes the spec, the presets in scripts/sweeps/ and the row format.
Exit status: 0 when every configuration run now is ok, 1 when one failed or timed out (the
sweep still ran the others), 2 for a bad spec or option, 130/143 when interrupted.
"""
import argparse
import ctypes
import fcntl
import fnmatch
import glob
import hashlib
import itertools
import json
import math
import os
import platform
import re
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time

PROG = "sweep.py"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ALGORITHMS = ["sequential", "greedy", "ios", "hios-lp", "hios-mr", "heft", "tuned"]
COSTS = ["analytic", "profile", "tune"]
BACKENDS = ["cpu", "cuda"]
MATHS = ["default", "fp32", "tf32", "fp16", "bf16"]
# How much of the scheduler's intra-GPU work a configuration keeps (docs/algorithms.md):
#   full: the algorithm's own pass plus hios's IOS packing (what `hios schedule` does by default);
#   own:  the algorithm's own pass only (HIOS as published: mapping + sliding window);
#   none: the inter-GPU mapping alone, every GPU running its nodes one at a time.
INTRA = ["full", "own", "none"]
INTRA_FLAGS = {"full": [], "own": ["--no-intra-ios"], "none": ["--window", "1", "--streams", "1", "--no-intra-ios"]}
# Only these three have an intra-GPU pass to switch off; the others get "full" in their key.
INTRA_ALGOS = {"hios-lp", "hios-mr", "heft"}
MAX_SIZE = 65536  # hios graph's range for --height/--width/--batch
MAX_GPUS = 1024   # hios tune's range for --gpus

NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")  # model and device names end up in file names
ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class SpecError(Exception):
    """A bad spec or option: one line, exit 2."""


class Interrupted(Exception):
    def __init__(self, signum):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


# ----------------------------------------------------------------------------------------------
# The spec
# ----------------------------------------------------------------------------------------------

def _show(v):
    s = json.dumps(v)
    return s if len(s) <= 60 else s[:57] + "..."


def check_int(v, where, lo, hi):
    # bool is an int in Python; true for a batch size is a mistake, not 1.
    if isinstance(v, bool) or not isinstance(v, int):
        raise SpecError(f"{where}: expected an integer {lo} to {hi}, got {_show(v)}")
    if not lo <= v <= hi:
        raise SpecError(f"{where}: {v} is not in range {lo} to {hi}")
    return v


def check_number(v, where, lo, hi, lo_open=False):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise SpecError(f"{where}: expected a number {lo} to {hi}, got {_show(v)}")
    if v > hi or v < lo or (lo_open and v == lo):
        raise SpecError(f"{where}: {v} is not in range {'above ' if lo_open else ''}{lo:g} to {hi:g}")
    return v


def check_bool(v, where):
    if not isinstance(v, bool):
        raise SpecError(f"{where}: expected true or false, got {_show(v)}")
    return v


def check_str(v, where, choices=None, pattern=None):
    if not isinstance(v, str) or not v:
        raise SpecError(f"{where}: expected a non-empty string, got {_show(v)}")
    if choices is not None and v not in choices:
        raise SpecError(f"{where}: unknown value {_show(v)} (known: {', '.join(choices)})")
    if pattern is not None and not pattern.match(v):
        raise SpecError(f"{where}: {_show(v)} may hold only letters, digits, '_', '.' and '-'")
    return v


def check_size(v, where):
    if isinstance(v, list):
        if len(v) != 2:
            raise SpecError(f"{where}: expected a size or [height, width], got {_show(v)}")
        return (check_int(v[0], where + "[0]", 1, MAX_SIZE), check_int(v[1], where + "[1]", 1, MAX_SIZE))
    s = check_int(v, where, 1, MAX_SIZE)
    return (s, s)


def check_list(v, where, item):
    if not isinstance(v, list):
        raise SpecError(f"{where}: expected a list, got {_show(v)}")
    if not v:
        raise SpecError(f"{where}: empty list")
    out = []
    for i, x in enumerate(v):
        y = item(x, f"{where}[{i}]")
        if y in out:
            raise SpecError(f"{where}[{i}]: {_show(x)} is listed twice")
        out.append(y)
    return out


# Axis keys: each a list, the configurations are their cross product.
AXES = {
    "models": lambda v, w: check_list(v, w, lambda x, ww: check_str(x, ww, pattern=NAME_RE)),
    "sizes": lambda v, w: check_list(v, w, check_size),
    "batches": lambda v, w: check_list(v, w, lambda x, ww: check_int(x, ww, 1, MAX_SIZE)),
    "gpus": lambda v, w: check_list(v, w, lambda x, ww: check_int(x, ww, 1, MAX_GPUS)),
    "algorithms": lambda v, w: check_list(v, w, lambda x, ww: check_str(x, ww, ALGORITHMS)),
    "costs": lambda v, w: check_list(v, w, lambda x, ww: check_str(x, ww, COSTS)),
    "backends": lambda v, w: check_list(v, w, lambda x, ww: check_str(x, ww, BACKENDS)),
    "maths": lambda v, w: check_list(v, w, lambda x, ww: check_str(x, ww, MATHS)),
    "intra": lambda v, w: check_list(v, w, lambda x, ww: check_str(x, ww, INTRA)),
}
AXIS_DEFAULTS = {"batches": [1], "gpus": [1], "costs": ["analytic"], "maths": ["default"], "intra": ["full"]}
REQUIRED_AXES = ["models", "sizes", "algorithms", "backends"]

# Option sections: passed to the hios commands. Each value's range is hios's own (or tighter).
SECTIONS = {
    "schedule": {
        "device": lambda v, w: check_str(v, w, pattern=NAME_RE),
        "streams": lambda v, w: check_int(v, w, 1, 16),
        "window": lambda v, w: check_int(v, w, 0, 16),
        "single_gpu_fallback": check_bool,
        "time_budget_s": lambda v, w: check_number(v, w, 0, 1e6),
    },
    "run": {
        "warmup": lambda v, w: check_int(v, w, 0, 100000),
        "number": lambda v, w: check_int(v, w, 1, 100000),
        "repeat": lambda v, w: check_int(v, w, 1, 100000),
        "threads": lambda v, w: check_int(v, w, 0, 1024),
        "verify": check_bool,
        "layout": lambda v, w: check_str(v, w, ["default", "nchw", "nhwc"]),
    },
    "tune": {
        "warmup": lambda v, w: check_int(v, w, 0, 1000),
        "passes": lambda v, w: check_int(v, w, 1, 100000),
        "stage_budget_s": lambda v, w: check_number(v, w, 0, 86400),
    },
}
SCALARS = {
    "repeats": lambda v, w: check_int(v, w, 1, 1000),
    "timeout_s": lambda v, w: check_number(v, w, 0, 1e7, lo_open=True),
}
SCALAR_DEFAULTS = {"repeats": 1, "timeout_s": 1800}
TOP_ONLY = ["name", "description", "mpirun", "pytorch", "groups"]
GROUP_KEYS = list(AXES) + list(SECTIONS) + list(SCALARS)


def _reject_duplicates(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise SpecError(f"duplicate key '{k}'")
        out[k] = v
    return out


def _reject_constant(name):
    raise SpecError(f"{name} is not a number JSON allows")


def read_json_text(text, where):
    try:
        return json.loads(text, object_pairs_hook=_reject_duplicates, parse_constant=_reject_constant)
    except json.JSONDecodeError as e:
        raise SpecError(f"{where}: malformed JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    except SpecError as e:
        raise SpecError(f"{where}: {e}") from None


def check_section(name, v, where):
    if not isinstance(v, dict):
        raise SpecError(f"{where}: expected an object, got {_show(v)}")
    out = {}
    for k, x in v.items():
        if k not in SECTIONS[name]:
            raise SpecError(f"{where}.{k}: unknown key (known: {', '.join(SECTIONS[name])})")
        out[k] = SECTIONS[name][k](x, f"{where}.{k}")
    return out


def check_mpirun(v, where):
    if not isinstance(v, dict):
        raise SpecError(f"{where}: expected an object, got {_show(v)}")
    out = {"command": "mpirun", "args": [], "env": {}}
    for k, x in v.items():
        w = f"{where}.{k}"
        if k == "command":
            out[k] = check_str(x, w)
        elif k == "args":
            if not isinstance(x, list):
                raise SpecError(f"{w}: expected a list of strings, got {_show(x)}")
            out[k] = [check_str(a, f"{w}[{i}]") for i, a in enumerate(x)]
        elif k == "env":
            if not isinstance(x, dict):
                raise SpecError(f"{w}: expected an object of strings, got {_show(x)}")
            for name, val in x.items():
                if not ENV_RE.match(name):
                    raise SpecError(f"{w}: '{name}' is not an environment variable name")
                if not isinstance(val, str):
                    raise SpecError(f"{w}.{name}: expected a string, got {_show(val)}")
            out[k] = dict(x)
        else:
            raise SpecError(f"{w}: unknown key (known: command, args, env)")
    return out


def check_pytorch(v, where):
    # A list of variants, or {"variants": [...], "warmup": N, "iters": N}.
    if isinstance(v, list):
        v = {"variants": v}
    if not isinstance(v, dict):
        raise SpecError(f"{where}: expected a list of variants or an object, got {_show(v)}")
    out = {"variants": None, "warmup": 10, "iters": 30}
    for k, x in v.items():
        w = f"{where}.{k}"
        if k == "variants":
            out[k] = check_list(x, w, lambda y, ww: check_str(y, ww, pattern=NAME_RE))
        elif k == "warmup":
            out[k] = check_int(x, w, 0, 100000)
        elif k == "iters":
            out[k] = check_int(x, w, 1, 100000)
        else:
            raise SpecError(f"{w}: unknown key (known: variants, warmup, iters)")
    if out["variants"] is None:
        raise SpecError(f"{where}.variants: missing")
    return out


def check_level(d, where, allowed):
    """Validates one level of the spec (the top or one group) into {key: checked value}."""
    if not isinstance(d, dict):
        raise SpecError(f"{where or 'the spec'}: expected an object, got {_show(d)}")
    out = {}
    for k, v in d.items():
        w = f"{where}.{k}" if where else k
        if k not in allowed:
            raise SpecError(f"{w}: unknown key (known: {', '.join(allowed)})")
        if k in AXES:
            out[k] = AXES[k](v, w)
        elif k in SECTIONS:
            out[k] = check_section(k, v, w)
        elif k in SCALARS:
            out[k] = SCALARS[k](v, w)
        else:
            out[k] = v
    return out


def load_spec(path):
    try:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8")
    except OSError as e:
        raise SpecError(f"{path}: cannot read: {e.strerror}") from None
    except UnicodeDecodeError:
        raise SpecError(f"{path}: not UTF-8 text") from None
    raw = read_json_text(text, path)
    try:
        top = check_level(raw, "", GROUP_KEYS + TOP_ONLY)
        spec = {
            "name": check_str(top.get("name", os.path.splitext(os.path.basename(path))[0]), "name"),
            # A model named "x.onnx" is that ONNX file in the spec's folder, imported at each size.
            "folder": os.path.dirname(os.path.abspath(path)),
            "description": top.get("description", ""),
            "mpirun": check_mpirun(top.get("mpirun", {}), "mpirun"),
            "pytorch": check_pytorch(top["pytorch"], "pytorch") if "pytorch" in top else None,
            "groups": [],
        }
        if not isinstance(spec["description"], str):
            raise SpecError(f"description: expected a string, got {_show(spec['description'])}")
        groups = top.get("groups")
        if groups is None:
            groups = [{}]
        elif not isinstance(groups, list) or not groups:
            raise SpecError(f"groups: expected a non-empty list of objects, got {_show(groups)}")
        for i, g in enumerate(groups):
            where = f"groups[{i}]" if "groups" in top else ""
            level = check_level(g, where, GROUP_KEYS)
            merged = {}
            for k in AXES:
                merged[k] = level.get(k, top.get(k, AXIS_DEFAULTS.get(k)))
                if merged[k] is None:
                    raise SpecError(f"{where + '.' if where else ''}{k}: missing" +
                                    (" (set it at the top level or in the group)" if where else ""))
            for k in SCALARS:
                merged[k] = level.get(k, top.get(k, SCALAR_DEFAULTS[k]))
            for k in SECTIONS:
                sec = dict(top.get(k, {}))
                sec.update(level.get(k, {}))
                merged[k] = sec
            spec["groups"].append(merged)
    except SpecError as e:
        raise SpecError(f"{path}: {e}") from None
    return spec


# ----------------------------------------------------------------------------------------------
# Configurations
# ----------------------------------------------------------------------------------------------

def config_key(c):
    return (f"{c['model']}/{c['height']}x{c['width']}/b{c['batch']}/g{c['gpus']}/{c['algorithm']}/"
            f"{c['cost']}/{c['backend']}/{c['math']}/{c['intra']}/r{c['rep']}")


def digest(obj):
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:12]


def expand(spec):
    """The configurations in run order, each once. Normalised so that equal work has one key:
    sequential runs on one GPU (a sequential schedule leaves every other rank idle), "tuned"
    chooses its own costs (cost "tune") and algorithms without an intra-GPU pass keep "full"."""
    configs, seen = [], {}
    for gi, g in enumerate(spec["groups"]):
        settings = {k: g[k] for k in SECTIONS}
        axes = (g["models"], g["sizes"], g["batches"], g["gpus"], g["algorithms"], g["costs"], g["backends"],
                g["maths"], g["intra"], range(g["repeats"]))
        for model, (h, w), batch, gpus, algo, cost, backend, m, intra, rep in itertools.product(*axes):
            c = {"model": model, "height": h, "width": w, "batch": batch,
                 "gpus": 1 if algo == "sequential" else gpus,
                 "algorithm": algo, "cost": "tune" if algo == "tuned" else cost,
                 "backend": backend, "math": m, "intra": intra if algo in INTRA_ALGOS else "full",
                 "rep": rep, "timeout_s": g["timeout_s"], "settings": settings}
            key = config_key(c)
            if key in seen:
                prev = seen[key]
                if prev["settings"] != settings or prev["timeout_s"] != g["timeout_s"]:
                    raise SpecError(f"groups[{prev['group']}] and groups[{gi}] both make {key} "
                                    "with different options; give them different axes")
                continue
            c.update(group=gi, kind="hios", key=key)
            seen[key] = c
            configs.append(c)
    if spec["pytorch"]:
        # PyTorch rows: one per (model, size, batch) of the hios configurations and variant, on
        # one GPU; bench_pytorch.py decides the math from the variant.
        triples = []
        for c in configs:
            t = (c["model"], c["height"], c["width"], c["batch"], c["rep"], c["timeout_s"])
            if t not in triples:
                triples.append(t)
        for (model, h, w, batch, rep, timeout_s) in triples:
            for v in spec["pytorch"]["variants"]:
                c = {"model": model, "height": h, "width": w, "batch": batch, "gpus": 1,
                     "algorithm": "pytorch-" + v, "cost": "-", "backend": "cuda", "math": "-", "intra": "-",
                     "rep": rep, "timeout_s": timeout_s, "kind": "pytorch", "variant": v,
                     "settings": {"pytorch": {k: spec["pytorch"][k] for k in ("warmup", "iters")}}}
                c["key"] = config_key(c)
                if c["key"] not in seen:
                    seen[c["key"]] = c
                    configs.append(c)
    return configs


def key_selected(key, patterns):
    if not patterns:
        return True
    for p in patterns:
        if any(ch in p for ch in "*?["):
            if fnmatch.fnmatchcase(key, p):
                return True
        elif p in key:
            return True
    return False


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
# Environment
# ----------------------------------------------------------------------------------------------

def _capture(argv, timeout=20):
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        return r.stdout.strip() if r.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        return None


def environment(hios, spec):
    commit = _capture(["git", "-C", REPO, "rev-parse", "HEAD"])
    dirty = _capture(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"])
    gpus = _capture(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"]) if shutil.which("nvidia-smi") else None
    mpi = _capture([spec["mpirun"]["command"], "--version"])
    return {"host": socket.gethostname(), "commit": commit or "unknown",
            "commit_dirty": bool(dirty) if dirty is not None else None,
            "gpus": [g.strip() for g in gpus.splitlines() if g.strip()] if gpus else [],
            "mpirun": mpi.splitlines()[0] if mpi else None,
            "python": platform.python_version(), "hios": os.path.abspath(hios)}


def fmt_s(s):
    s = int(round(s))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


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


def pytorch_skip_reason(c, state):
    """Why a PyTorch configuration cannot run here (None: it can). A skipped configuration gets
    no row, so a later sweep on a machine with PyTorch fills it in."""
    if not state["script"]:
        return "scripts/bench_pytorch.py not found"
    if state["torch"] is None:
        ok = _capture([sys.executable, "-c", "import torch"], timeout=300)
        state["torch"] = ok is not None
        help_text = _capture([sys.executable, state["script"], "--help"], timeout=60) or ""
        state["batch"] = "--batch" in help_text
    if not state["torch"]:
        return "PyTorch does not import"
    if c["height"] != c["width"]:
        return "bench_pytorch.py takes square sizes only"
    if c["batch"] != 1 and not state["batch"]:
        return "bench_pytorch.py has no --batch"
    return None


# ----------------------------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="docs/experiments.md has the spec format, the presets and the row format.")
    ap.add_argument("spec", help="sweep spec (JSON), e.g. scripts/sweeps/smoke-cpu.json")
    ap.add_argument("-o", "--output", required=True, help="results file (JSON lines), appended to")
    ap.add_argument("--hios", default=os.environ.get("HIOS", os.path.join(REPO, "build", "cli", "hios")),
                    help="the hios binary (default: $HIOS or build/cli/hios)")
    ap.add_argument("--workdir", help="graphs, schedules, cost databases, run results and logs "
                                      "(default: RESULTS without .jsonl, plus .work)")
    ap.add_argument("--only", action="append", default=[], metavar="PATTERN",
                    help="run only keys matching PATTERN (a glob with * ? [ ], else a substring); repeatable")
    ap.add_argument("--dry-run", action="store_true", help="list the configurations and their commands, run nothing")
    ap.add_argument("--retry-failed", action="store_true", help="run again the keys whose last row is not ok")
    args = ap.parse_args(argv)

    try:
        spec = load_spec(args.spec)
        try:
            configs = expand(spec)
        except SpecError as e:
            raise SpecError(f"{args.spec}: {e}") from None
        configs = [c for c in configs if key_selected(c["key"], args.only)]
        if not configs:
            raise SpecError(f"no configuration matches --only {' '.join(args.only)}")
        out = args.output
        work = args.workdir or (out[:-6] if out.endswith(".jsonl") else out) + ".work"
        if os.path.exists(work) and not os.path.isdir(work):
            raise SpecError(f"{work}: exists and is not a folder (--workdir)")
        hios = args.hios
        if not args.dry_run:
            if not (os.path.isfile(hios) and os.access(hios, os.X_OK)):
                raise SpecError(f"{hios}: no hios binary there; build it (make) or pass --hios PATH")
            if not shutil.which(spec["mpirun"]["command"]):
                raise SpecError(f"mpirun.command: '{spec['mpirun']['command']}' not found on PATH")
        results = Results(out, write=not args.dry_run)
    except SpecError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2

    done = results.done(args.retry_failed)
    todo = [c for c in configs if c["key"] not in done]
    # A key names the axes, not the options (schedule, run, tune); rows made with other options
    # are still skipped, but say so.
    digests = {r["key"]: (r.get("sweep") or {}).get("settings_digest") for r in results.rows}
    other = [c["key"] for c in configs if c["key"] in done and digests.get(c["key"]) != digest(c["settings"])]
    bench = os.path.join(REPO, "scripts", "bench_pytorch.py")
    pt_state = {"script": bench if os.path.isfile(bench) else None, "torch": None, "batch": False}
    if results.repaired and not args.dry_run:
        print(f"{PROG}: cut a partial last line ({results.repaired} bytes) off {out}", flush=True)
    print(f"sweep {spec['name']}: {len(configs)} configuration(s), {len(configs) - len(todo)} already in {out}, "
          f"{len(todo)} to run; work dir {work}", flush=True)

    if other:
        print(f"{PROG}: note: {len(other)} configuration(s) in {out} were run with other schedule/run/tune "
              f"options (e.g. {other[0]}); they are kept: use another results file to run them with these", flush=True)
    if args.dry_run:
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `--dry-run | head` ends quietly
        todo_keys = {c["key"] for c in todo}
        for k, c in enumerate(configs, 1):
            state = "todo" if c["key"] in todo_keys else "done"
            print(f"[{k}/{len(configs)}] {c['key']}  {state}")
            for step in plan(spec, hios, c, Paths(work, c), bench):
                print(f"    {shlex.join(step.argv)}" + ("    (once: skipped when the file exists)" if step.makes else ""))
        return 0

    env = dict(os.environ)
    env.update(spec["mpirun"]["env"])
    os.makedirs(work, exist_ok=True)
    runner = Runner(work, env)
    runner.clean_leftovers()

    def on_signal(signum, frame):
        raise Interrupted(signum)

    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, on_signal)
    env_info = environment(hios, spec)
    counts = {"ok": 0, "failed": 0, "timeout": 0, "skipped": 0}
    t_start = time.monotonic()
    ran, ran_s = 0, 0.0
    current = None
    try:
        for k, c in enumerate(todo, 1):
            current = c["key"]
            t0 = time.monotonic()
            if c["kind"] == "pytorch":
                reason = pytorch_skip_reason(c, pt_state)
                if reason:
                    counts["skipped"] += 1
                    print(f"[{k}/{len(todo)}] {c['key']} ... skipped ({reason}; no row)", flush=True)
                    continue
            row = run_config(spec, hios, c, work, runner, env_info, bench)
            results.append(row)
            counts[row["status"]] += 1
            ran += 1
            ran_s += time.monotonic() - t0
            elapsed = time.monotonic() - t_start
            eta = ran_s / ran * (len(todo) - k)
            if row["status"] == "ok":
                med = row["result"].get("latency_ms", {}).get("median")
                what = f"ok {med:.3f} ms" if _finite(med) else "ok"
            else:
                what = f"{row['status']} ({row.get('step')}: {row.get('error')})"
            print(f"[{k}/{len(todo)}] {c['key']} ... {what}  [{time.monotonic() - t0:.1f} s; "
                  f"elapsed {fmt_s(elapsed)}, ETA {fmt_s(eta)}]", flush=True)
    except (KeyboardInterrupt, Interrupted) as e:
        signum = e.signum if isinstance(e, Interrupted) else signal.SIGINT
        print(f"\n{PROG}: interrupted ({signal.Signals(signum).name}) during {current}: not recorded; "
              f"{out} holds every finished row; run the same command to resume", file=sys.stderr, flush=True)
        return 128 + int(signum)
    print(f"sweep {spec['name']}: {counts['ok']} ok, {counts['failed']} failed, {counts['timeout']} timed out"
          + (f", {counts['skipped']} PyTorch skipped" if counts["skipped"] else "")
          + f" in {fmt_s(time.monotonic() - t_start)}; results in {out}", flush=True)
    return 1 if counts["failed"] or counts["timeout"] else 0


if __name__ == "__main__":
    sys.exit(main())
