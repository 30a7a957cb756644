"""The spec of scripts/sweep.py: the axes, option sections and their ranges, reading and checking
a spec file (load_spec), and its configurations in run order with their keys (expand). Also PROG,
the name the sweep's messages start with, and SpecError, a bad spec or option.
"""
import fnmatch
import hashlib
import itertools
import json
import math
import os
import re

PROG = "sweep.py"

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
        "reference": lambda v, w: check_str(v, w, ["all", "first-image"]),
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
