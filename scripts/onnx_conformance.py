#!/usr/bin/python3
"""ONNX's backend node tests through hios on the CPU backend: one status per case, a table per op.

Run it with Debian's python3 (python3-onnx 1.12 and numpy):

    /usr/bin/python3 scripts/onnx_conformance.py                    # all 922 node cases, --jobs 2
    /usr/bin/python3 scripts/onnx_conformance.py --cases 'conv|relu' -v
    /usr/bin/python3 scripts/onnx_conformance.py --check tests/data/onnx-passlist.txt

Each case (DIR/node/<case>/model.onnx with test_data_set_0/input_K.pb and output_K.pb) is imported
with `hios import`, run once with `hios run --backend cpu`, and its outputs are compared with the
expected ones. A case ends as one of

    pass      every output has the expected shape, dtype kind and values (rtol 1e-3, atol 1e-7)
    refused   hios declined it with exit code 2 and one line (the reason)
    wrong     hios ran it, an output differs (max_abs_err) or is missing
    crash     a signal or an exit code other than 0 and 2 (stderr's last line)
    timeout   one command ran past --timeout seconds

An import refused because an input "must be a constant" is retried with `--freeze NAME=FILE.npy`
for that input (the case's own data), until it imports or refuses for another reason.

Writes a JSON file with one row per case (--json) and a Markdown page (--markdown) with the totals
and one row per ONNX op. --check PASSLIST exits 1 when a listed case no longer passes or any case
is wrong or crashed; --write-passlist PATH writes the cases that pass now.
"""
import argparse
import collections
import concurrent.futures
import datetime
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
STATUSES = ("pass", "refused", "wrong", "crash", "timeout")

# Case-name prefixes that do not spell their op (checked before the op names themselves).
NAME_ALIASES = {
    "batchnorm": "BatchNormalization",
    "nllloss": "NegativeLogLikelihoodLoss",
    "sce": "SoftmaxCrossEntropyLoss",
    "mvn": "MeanVarianceNormalization",
    "strnorm": "StringNormalizer",
    "greater_equal": "GreaterOrEqual",
    "less_equal": "LessOrEqual",
    "top_k": "TopK",
    "basic_conv": "Conv",
    "constant_pad": "Pad",
    "edge_pad": "Pad",
    "reflect_pad": "Pad",
    "training_dropout": "Dropout",
    "simple_rnn": "RNN",
}


def sanitize(name):
    """hios's file name for a tensor: [A-Za-z0-9_.-] kept, '/' and ':' to '.', others to '_'."""
    out = []
    for ch in name:
        if ch.isascii() and (ch.isalnum() or ch in "_.-"):
            out.append(ch)
        elif ch in "/:":
            out.append(".")
        else:
            out.append("_")
    s = "".join(out).lstrip(".")
    return s or "node"


# ---------------------------------------------------------------------------------------------
# Generating the cases


def generate_cases(data_dir, log):
    """ONNX 1.12's generate-data into data_dir (cached: skipped when data_dir/node holds them)."""
    node_dir = os.path.join(data_dir, "node")
    marker = os.path.join(data_dir, ".generated")
    import onnx

    def present():
        if not os.path.isdir(node_dir):
            return 0
        return sum(1 for c in os.listdir(node_dir) if os.path.isfile(os.path.join(node_dir, c, "model.onnx")))

    if os.path.isfile(marker):
        with open(marker) as f:
            info = json.load(f)
        if info.get("onnx") == onnx.__version__ and present() == info.get("node_cases"):
            return node_dir
    # numpy 1.24 removed these aliases; ONNX 1.12's case generators still use them.
    for alias, builtin in (("float", float), ("int", int), ("bool", bool), ("object", object)):
        if alias not in np.__dict__:
            setattr(np, alias, builtin)
    import onnx.backend.test.case.node as node_test
    expected = len({case.name for case in node_test.collect_testcases(None)})  # two names come twice
    if not os.path.isfile(marker) and present() == expected:
        log(f"using the {expected} node cases already in {node_dir}")
    else:
        log(f"generating ONNX {onnx.__version__}'s backend test data into {data_dir}")
        from onnx.backend.test import cmd_tools
        saved = sys.argv
        sys.argv = ["backend-test-tools", "generate-data", "-o", data_dir]
        try:
            cmd_tools.main()
        finally:
            sys.argv = saved
        if present() != expected:
            raise SystemExit(f"onnx_conformance: generate-data wrote {present()} node cases, expected {expected}")
    with open(marker, "w") as f:
        json.dump({"onnx": onnx.__version__, "node_cases": expected}, f)
    return node_dir


# ---------------------------------------------------------------------------------------------
# hios's command line


def help_options(text):
    """{long option: its help text} from CLI11's help output."""
    opts = {}
    current = None
    for line in text.splitlines():
        m = re.match(r"\s+(?:-\w,)?--([A-Za-z0-9][A-Za-z0-9-]*)\b(.*)", line)
        if m:
            current = m.group(1)
            opts[current] = m.group(2)
        elif current and line.startswith("      ") and line.strip():
            opts[current] += " " + line.strip()
        elif not line.strip():
            current = None
    return opts


class Hios:
    def __init__(self, path, timeout, binary_wait, log):
        self.path = path
        self.timeout = timeout
        self.binary_wait = binary_wait
        self.log = log
        self.lock = threading.Lock()
        self.run_opts = help_options(self.cmd(["run", "--help"], check=True)[1])
        self.import_opts = help_options(self.cmd(["import", "--help"], check=True)[1])
        inp = self.run_opts.get("input", "")
        out = self.run_opts.get("save-output", "")
        # Named inputs (--input NAME=FILE) and an output folder (--save-output DIR) are new; older
        # binaries take one input file and write one output file.
        self.named_inputs = bool(re.search(r"NAME=|name=", inp))
        self.output_dir = bool(re.search(r"\b(folder|directory|DIR)\b", out))
        self.needs_schedule = "schedule" in self.run_opts and "required" in self.run_opts["schedule"].lower()
        self.freeze = "freeze" in self.import_opts
        self.pass_opts = []
        for opt, value in (("warmup", "0"), ("number", "1"), ("repeat", "1")):
            if opt in self.run_opts:
                self.pass_opts += ["--" + opt, value]
        if "'none'" in self.run_opts.get("output", ""):
            self.pass_opts += ["-o", "none"]
        try:
            self.version = self.cmd(["--version"], check=True)[1].strip()
        except SystemExit:
            self.version = "unknown"

    def wait_for_binary(self):
        deadline = time.time() + self.binary_wait
        warned = False
        while not (os.path.isfile(self.path) and os.access(self.path, os.X_OK)):
            if time.time() > deadline:
                raise SystemExit(f"onnx_conformance: {self.path} is not there (waited {self.binary_wait:.0f} s)")
            with self.lock:
                if not warned:
                    self.log(f"waiting for {self.path} (being rebuilt?)")
                    warned = True
            time.sleep(2)

    def cmd(self, args, cwd=None, check=False):
        """(returncode or 'timeout', stdout, stderr) of one hios command."""
        for attempt in range(3):
            self.wait_for_binary()
            try:
                p = subprocess.Popen([self.path, *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, errors="replace", start_new_session=True)
            except OSError:  # replaced under us (text file busy, half-written): wait and try again
                time.sleep(2)
                continue
            try:
                out, err = p.communicate(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                out, err = p.communicate()
                return "timeout", out, err
            if check and p.returncode != 0:
                raise SystemExit(f"onnx_conformance: hios {' '.join(args)} exited {p.returncode}: {last_line(err)}")
            return p.returncode, out, err
        raise SystemExit(f"onnx_conformance: cannot start {self.path}")


def last_line(text):
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else ""


def error_line(text):
    """hios's one-line error: the last 'hios: error:' line, else the last line."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("hios:"):
            return line
    return lines[-1] if lines else ""


def clean_reason(line, paths):
    line = re.sub(r"^hios:\s*(error:\s*)?", "", line)
    for p in sorted(paths, key=len, reverse=True):
        if p:
            line = line.replace(p + ": ", "").replace(p + os.sep, "").replace(p, "")
    return line.strip()


def signal_name(code):
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


# ---------------------------------------------------------------------------------------------
# One case


def model_ops(graph):
    ops = []
    for node in graph.node:
        if node.op_type not in ops:
            ops.append(node.op_type)
        for attr in node.attribute:
            subs = list(attr.graphs) + ([attr.g] if attr.HasField("g") else [])
            for sub in subs:
                for op in model_ops(sub):
                    if op not in ops:
                        ops.append(op)
    return ops


_schema_names = None


def schema_names():
    global _schema_names
    if _schema_names is None:
        import onnx.defs
        _schema_names = sorted({s.name for s in onnx.defs.get_all_schemas_with_history()})
    return _schema_names


def tested_op(case, model, cases_dir):
    """The ONNX op a case tests."""
    import onnx
    if "expanded" not in case and len(model.graph.node) == 1:
        return model.graph.node[0].op_type
    if "expanded" in case:
        # test_softmax_axis_0_expanded tests what test_softmax_axis_0 tests.
        base = case[:case.index("expanded")].rstrip("_")
        sibling = os.path.join(cases_dir, base, "model.onnx")
        if os.path.isfile(sibling):
            sib = onnx.load(sibling)
            if len(sib.graph.node) == 1:
                return sib.graph.node[0].op_type
    name = case[5:] if case.startswith("test_") else case
    for prefix, op in sorted(NAME_ALIASES.items(), key=lambda kv: -len(kv[0])):
        if name == prefix or name.startswith(prefix + "_"):
            return op
    flat = name.replace("_", "").lower()
    candidates = model_ops(model.graph) if "expanded" not in case else schema_names()
    best = None
    for op in candidates:
        if flat.startswith(op.lower()) and (best is None or len(op) > len(best)):
            best = op
    if best is None and "expanded" not in case:
        for op in schema_names():
            if flat.startswith(op.lower()) and (best is None or len(op) > len(best)):
                best = op
    if best is None:
        ops = [op for op in model_ops(model.graph) if op != "Constant"] or model_ops(model.graph)
        best = ops[0] if ops else name.split("_")[0]
    return best


def kind(dtype):
    k = np.dtype(dtype).kind
    return {"f": "float", "i": "int", "u": "int", "b": "bool", "c": "complex"}.get(k, np.dtype(dtype).name)


def compare(got, want, rtol=1e-3, atol=1e-7):
    """(ok, reason, max_abs_err) of one output against the expected one."""
    shape_ok = got.shape == want.shape or (want.ndim == 0 and got.shape in ((), (1,)))
    if not shape_ok:
        return False, f"shape {list(got.shape)}, expected {list(want.shape)}", None
    got = got.reshape(want.shape)
    if kind(got.dtype) != kind(want.dtype):
        return False, f"dtype {got.dtype}, expected {want.dtype}", None
    if kind(want.dtype) == "float":
        g = got.astype(np.float64)
        w = want.astype(np.float64)
        both_nan = np.isnan(g) & np.isnan(w)
        same_inf = np.isinf(g) & np.isinf(w) & (np.sign(g) == np.sign(w))
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.abs(g - w)
        diff = np.where(both_nan | same_inf, 0.0, diff)
        diff = np.where(np.isnan(diff), np.inf, diff)
        err = float(diff.max()) if diff.size else 0.0
        try:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
        except AssertionError:
            return False, f"values differ (max abs error {err:.3g})", err
        return True, "", err
    if kind(want.dtype) in ("int", "bool"):
        if want.size == 0:
            return True, "", 0.0
        diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
        err = float(diff.max())
        if not np.array_equal(got, want):
            return False, f"values differ (max abs error {err:.3g})", err
        return True, "", err
    if not np.array_equal(got, want):
        return False, "values differ", None
    return True, "", None


QUOTED = re.compile(r"'([^']*)'")


def constant_inputs(reason, names):
    """Graph inputs a refusal says must be constants: the last quoted graph-input name before each
    'must be a constant' in its clause."""
    found = []
    # The CNN converters' form: "weight 'W' is computed; hios needs it constant".
    for m in re.finditer(r"'([^']+)' is computed; hios needs it constant", reason):
        if m.group(1) in names and m.group(1) not in found:
            found.append(m.group(1))
    for m in re.finditer(r"must be a constant", reason):
        clause = re.split(r"[;]", reason[:m.start()])[-1]
        quoted = [q for q in QUOTED.findall(clause) if q in names]
        if quoted and quoted[-1] not in found:
            found.append(quoted[-1])
    return found


def load_tensors(folder, prefix, value_infos):
    """{K: array} of folder/PREFIX_K.pb; None for a K whose value is not a tensor (a sequence, an optional)."""
    from onnx import TensorProto, numpy_helper
    out = {}
    for k, value_info in enumerate(value_infos):
        path = os.path.join(folder, f"{prefix}_{k}.pb")
        if not os.path.isfile(path):
            continue
        if not is_tensor(value_info):
            out[k] = None
            continue
        t = TensorProto()
        with open(path, "rb") as f:
            t.ParseFromString(f.read())
        out[k] = numpy_helper.to_array(t)
    return out


def is_tensor(value_info):
    return value_info.type.WhichOneof("value") == "tensor_type"


def export_case(export_dir, case, tmp, graph, run_inputs, graph_outputs, outputs):
    """A passing case as the replay script (scripts/replay_cases.py) runs it on another backend: the
    imported graph with its weights, the inputs it was run with, and the expected outputs."""
    dst = os.path.join(export_dir, case)
    os.makedirs(dst, exist_ok=True)
    for name in (os.path.basename(graph), "g.safetensors", "s.json"):
        if os.path.isfile(os.path.join(tmp, name)):
            shutil.copy(os.path.join(tmp, name), os.path.join(dst, name))
    inputs = []
    for name, path in run_inputs:
        shutil.copy(path, os.path.join(dst, os.path.basename(path)))
        inputs.append([name, os.path.basename(path)])
    expected = []
    for k, value_info in enumerate(graph_outputs):
        file = "expected." + sanitize(value_info.name) + ".npy"
        np.save(os.path.join(dst, file), outputs[k])
        expected.append([value_info.name, sanitize(value_info.name) + ".npy", file])
    with open(os.path.join(dst, "case.json"), "w") as f:
        json.dump({"graph": os.path.basename(graph), "inputs": inputs, "outputs": expected,
                   "schedule": "s.json" if os.path.isfile(os.path.join(tmp, "s.json")) else None}, f, indent=1)


def run_case(case, cases_dir, hios, work_root, keep, export_dir=None):
    import onnx
    t0 = time.time()
    folder = os.path.join(cases_dir, case)
    model_path = os.path.abspath(os.path.join(folder, "model.onnx"))
    row = {"case": case, "op": None, "ops": [], "status": None, "reason": "", "frozen": [], "max_abs_err": None,
           "seconds": 0.0}
    try:
        model = onnx.load(model_path)
    except Exception as e:  # noqa: BLE001 - a broken case file is the harness's problem, reported per case
        row.update(status="crash", reason=f"harness: cannot read model.onnx: {e}")
        return row
    row["ops"] = model_ops(model.graph)
    row["op"] = tested_op(case, model, cases_dir)
    inits = {i.name for i in model.graph.initializer}
    graph_inputs = [i for i in model.graph.input if i.name not in inits]
    data_dir = os.path.join(folder, "test_data_set_0")
    inputs = load_tensors(data_dir, "input", model.graph.input)
    outputs = load_tensors(data_dir, "output", model.graph.output)
    tmp = tempfile.mkdtemp(prefix=case + ".", dir=work_root)
    paths = [model_path, folder, os.path.abspath(folder), tmp]

    def finish(status, reason="", err=None):
        row.update(status=status, reason=reason, max_abs_err=err, seconds=round(time.time() - t0, 3))
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)
        return row

    def outcome(stage, result):
        """None when the command succeeded, else (status, reason)."""
        rc, _, err = result
        prefix = "" if stage == "import" else stage + ": "
        if rc == "timeout":
            return "timeout", f"{prefix}hios {stage} ran past {hios.timeout:g} s"
        if rc == 0:
            return None
        if rc == 2:
            return "refused", prefix + clean_reason(error_line(err), paths)
        what = signal_name(rc) if rc < 0 else f"exit {rc}"
        tail = clean_reason(last_line(err), paths)
        return "crash", f"{prefix}{what}" + (f": {tail}" if tail else "")

    # The inputs, as NAME.npy in their own dtypes.
    files = {}  # graph input name -> npy path
    harness_note = ""
    for k, value_info in enumerate(model.graph.input):
        if k not in inputs:
            continue
        if inputs[k] is None:
            harness_note = f"harness: input '{value_info.name}' is not a tensor"
            continue
        path = os.path.join(tmp, sanitize(value_info.name) + ".npy")
        np.save(path, inputs[k])
        files[value_info.name] = path

    # The import, freezing the inputs it says must be constants.
    graph = os.path.join(tmp, "g.json")
    frozen = row["frozen"]
    names = [i.name for i in graph_inputs]
    for _ in range(len(graph_inputs) + 1):
        args = ["import", model_path, "-o", graph]
        for name in frozen:
            args += ["--freeze", f"{name}={files[name]}"]
        bad = outcome("import", hios.cmd(args, cwd=tmp))
        if bad is None:
            break
        more = [n for n in constant_inputs(bad[1], names) if n not in frozen and n in files]
        if bad[0] != "refused" or not more or not hios.freeze:
            return finish(*bad)
        frozen += more
    else:
        return finish(*bad)
    if harness_note:
        return finish("refused", harness_note)

    # The run: one pass, its outputs saved.
    run_inputs = [(i.name, files[i.name]) for i in graph_inputs if i.name not in frozen and i.name in files]
    graph_outputs = list(model.graph.output)
    out_dir = os.path.join(tmp, "out")
    os.makedirs(out_dir, exist_ok=True)
    sched = os.path.join(tmp, "s.json")

    def schedule():
        return outcome("schedule", hios.cmd(["schedule", "--graph", graph, "--algo", "sequential", "-o", sched],
                                            cwd=tmp))

    def run_args(named_in, dir_out, with_schedule):
        args = ["run", "--graph", graph, "--backend", "cpu"] + (["--schedule", sched] if with_schedule else [])
        for name, path in run_inputs:
            args += ["--input", f"{name}={path}" if named_in else path]
        if dir_out:
            args += ["--save-output", out_dir]
        else:
            args += ["--save-output", os.path.join(out_dir, sanitize(graph_outputs[0].name) + ".npy")]
        return args + hios.pass_opts

    with_schedule = hios.needs_schedule
    if with_schedule:
        bad = schedule()
        if bad:
            return finish(*bad)
    named_in = hios.named_inputs or len(run_inputs) > 1
    dir_out = hios.output_dir or len(graph_outputs) != 1
    result = hios.cmd(run_args(named_in, dir_out, with_schedule), cwd=tmp)
    if result[0] == 2 and not with_schedule and "--schedule" in result[2]:
        bad = schedule()
        if bad:
            return finish(*bad)
        with_schedule = True
        result = hios.cmd(run_args(named_in, dir_out, with_schedule), cwd=tmp)
    if result[0] == 2:
        # A binary older or newer than its help says: try the other form of --input / --save-output.
        err = result[2]
        trouble = re.search(r"--input|--save-output|not expected|NAME=", err) or any(
            f"{n}={p}" in err for n, p in run_inputs) or (dir_out and out_dir in err)
        alt_in = False if named_in and len(run_inputs) <= 1 else True
        alt_out = False if dir_out and len(graph_outputs) == 1 else True
        if trouble and (alt_in, alt_out) != (named_in, dir_out):
            retry = hios.cmd(run_args(alt_in, alt_out, with_schedule), cwd=tmp)
            if retry[0] != 2:
                result = retry
    bad = outcome("run", result)
    if bad:
        return finish(*bad)

    worst = None
    for k, value_info in enumerate(graph_outputs):
        want = outputs.get(k)
        if want is None:
            return finish("wrong", f"harness: no expected tensor for output '{value_info.name}'")
        path = os.path.join(out_dir, sanitize(value_info.name) + ".npy")
        if not os.path.isfile(path):
            return finish("wrong", f"output '{value_info.name}' not written ({sanitize(value_info.name)}.npy)", worst)
        try:
            got = np.load(path, allow_pickle=False)
        except Exception as e:  # noqa: BLE001
            return finish("wrong", f"output '{value_info.name}' unreadable: {e}", worst)
        ok, why, err = compare(got, want)
        if err is not None:
            worst = err if worst is None else max(worst, err)
        if not ok:
            return finish("wrong", f"output '{value_info.name}': {why}", err if err is not None else worst)
    if export_dir:
        export_case(export_dir, case, tmp, graph, run_inputs, graph_outputs, outputs)
    return finish("pass", "", worst)


# ---------------------------------------------------------------------------------------------
# Reports


def shorten(text, n=80):
    return text if len(text) <= n else text[: n - 1].rstrip() + "…"


def reason_key(reason):
    """A refusal with its case-specific names and numbers blanked, to count alike ones together."""
    r = QUOTED.sub("'…'", reason)
    return re.sub(r"\b\d+\b", "N", r)


def totals(rows):
    c = collections.Counter(r["status"] for r in rows)
    return {s: c.get(s, 0) for s in STATUSES}


def totals_line(rows):
    t = totals(rows)
    return " / ".join(f"{t[s]} {s}" for s in STATUSES) + f" of {len(rows)}"


def per_op(rows):
    ops = collections.OrderedDict()
    for r in sorted(rows, key=lambda r: (r["op"] or "").lower()):
        ops.setdefault(r["op"] or "?", []).append(r)
    return ops


def top_reasons(rows, n):
    c = collections.Counter(reason_key(r["reason"]) for r in rows if r["status"] == "refused")
    example = {}
    for r in rows:
        if r["status"] == "refused":
            example.setdefault(reason_key(r["reason"]), r["reason"])
    return [(k, v, example[k]) for k, v in c.most_common(n)]


def md_cell(text):
    return text.replace("|", "\\|").replace("\n", " ")


def git(*args):
    try:
        return subprocess.run(["git", "-C", REPO, *args], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def write_markdown(path, rows, command, hios_version, seconds):
    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = subprocess.run(["git", "-C", REPO, "diff", "--quiet", "HEAD", "--"], capture_output=True).returncode
    lines = [
        "# ONNX backend node tests through hios",
        "",
        "<!-- Generated by scripts/onnx_conformance.py: do not edit by hand, run the script again. -->",
        "",
        "This page is generated by `scripts/onnx_conformance.py`; do not edit it by hand. It runs ONNX's "
        "backend node test suite (the `onnx.backend.test` cases of the installed ONNX) through `hios import` "
        "and `hios run --backend cpu`, and compares every output with the expected one (rtol 1e-3, atol 1e-7; "
        "integers and booleans exactly).",
        "",
        f"- date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- commit: {commit}" + (" (with local changes)" if dirty else ""),
        f"- binary: {hios_version}",
        f"- command: `{command}` ({seconds:.0f} s)",
        "",
        f"**Totals: {totals_line(rows)}.**",
        "",
        "| status | cases | meaning |",
        "|---|---:|---|",
    ]
    meaning = {
        "pass": "every output matches",
        "refused": "hios declined it (exit 2, one line)",
        "wrong": "hios ran it and an output differs",
        "crash": "a signal or an exit code other than 0 and 2",
        "timeout": "a command ran too long",
    }
    t = totals(rows)
    lines += [f"| {s} | {t[s]} | {meaning[s]} |" for s in STATUSES]
    ops = per_op(rows)
    supported = [op for op, rs in ops.items() if all(r["status"] == "pass" for r in rs)]
    lines += ["", "## Supported ops", "",
              "Ops whose every case passes: " + (", ".join(f"`{op}`" for op in supported) if supported else "none") + ".",
              ""]
    partial = [op for op, rs in ops.items() if op not in supported and any(r["status"] == "pass" for r in rs)]
    if partial:
        lines += ["Ops with some cases passing: " + ", ".join(f"`{op}`" for op in partial) + ".", ""]
    lines += ["## Most common refusals", "", "| cases | reason (an example) |", "|---:|---|"]
    for _, count, example in top_reasons(rows, 10):
        lines.append(f"| {count} | {md_cell(shorten(example, 160))} |")
    bad = [r for r in rows if r["status"] in ("wrong", "crash", "timeout")]
    if bad:
        lines += ["", "## Wrong, crashed and timed out", "", "| case | status | reason |", "|---|---|---|"]
        for r in sorted(bad, key=lambda r: r["case"]):
            lines.append(f"| {r['case']} | {r['status']} | {md_cell(shorten(r['reason'], 120))} |")
    lines += ["", "## Per op", "",
              "The op a case tests: its single node's, or for an expanded case (a function's body) the op it expands.",
              "",
              "| op | cases | pass | refused | wrong | crash | timeout | most common refusal |",
              "|---|---:|---:|---:|---:|---:|---:|---|"]
    for op, rs in ops.items():
        c = totals(rs)
        refusals = collections.Counter(reason_key(r["reason"]) for r in rs if r["status"] == "refused")
        common = ""
        if refusals:
            key = refusals.most_common(1)[0][0]
            common = next(r["reason"] for r in rs if r["status"] == "refused" and reason_key(r["reason"]) == key)
        lines.append(f"| {op} | {len(rs)} | {c['pass']} | {c['refused']} | {c['wrong']} | {c['crash']} | "
                     f"{c['timeout']} | {md_cell(shorten(common))} |")
    lines.append("")
    write_text(path, "\n".join(lines))


def write_text(path, text):
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def read_list(path):
    with open(path) as f:
        return [line.split("#", 1)[0].strip() for line in f if line.split("#", 1)[0].strip()]


# ---------------------------------------------------------------------------------------------


def main(argv=None):
    try:
        import onnx  # noqa: F401  (Debian's python3-onnx generates the cases)
    except ImportError:
        print("onnx_conformance: skipped: no onnx module (Debian's python3-onnx; scripts/install-deps.sh installs it)")
        return 77
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hios", default=os.environ.get("HIOS", os.path.join(REPO, "build", "cli", "hios")),
                    help="the hios binary (default: $HIOS, else build/cli/hios)")
    ap.add_argument("--data-dir", default=os.path.join(REPO, "output", "onnx-backend-data"),
                    help="where ONNX's generate-data writes the cases (cached; default output/onnx-backend-data)")
    ap.add_argument("--cases-dir", help="a folder of existing case folders (model.onnx, test_data_set_0/) to run "
                                        "instead of generating ONNX's")
    ap.add_argument("--cases", help="only cases whose name matches this regular expression (re.search)")
    ap.add_argument("--limit", type=int, help="at most this many cases (after --cases)")
    ap.add_argument("--jobs", "-j", type=int, default=2, help="cases run at once (default 2)")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds per hios command (default 30)")
    ap.add_argument("--binary-wait", type=float, default=600.0,
                    help="seconds to wait for a missing hios binary (rebuilt meanwhile) (default 600)")
    ap.add_argument("--json", default=os.path.join(REPO, "output", "onnx-conformance.json"),
                    help="per-case results (default output/onnx-conformance.json; 'none' for none)")
    ap.add_argument("--markdown", default=os.path.join(REPO, "docs", "onnx-conformance.md"),
                    help="the report page (default docs/onnx-conformance.md; 'none' for none)")
    ap.add_argument("--check", metavar="PASSLIST", help="exit 1 if a case listed here no longer passes, or if any "
                                                        "case is wrong or crashed")
    ap.add_argument("--write-passlist", metavar="PATH", help="write the names of the cases that pass")
    ap.add_argument("--known", metavar="FILE", help="cases whose expected output this ONNX release computes otherwise "
                                                    "than the ONNX specification and ONNX Runtime ('case: why' lines); "
                                                    "--check lets them differ, the page says why")
    ap.add_argument("--work-dir", help="where each case's temporary folder goes (default: the system's)")
    ap.add_argument("--keep", action="store_true", help="keep each case's temporary folder")
    ap.add_argument("--export", metavar="DIR", help="write every passing case (graph, weights, inputs, expected "
                                                    "outputs) to DIR/<case>/ for scripts/replay_cases.py")
    ap.add_argument("-v", "--verbose", action="store_true", help="a line per case")
    args = ap.parse_args(argv)
    if args.jobs < 1:
        ap.error("--jobs must be at least 1")

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    start = time.time()
    if args.cases_dir:
        cases_dir = args.cases_dir
        if not os.path.isdir(cases_dir):
            ap.error(f"--cases-dir {cases_dir}: not a folder")
    else:
        cases_dir = generate_cases(args.data_dir, log)
    cases = sorted(c for c in os.listdir(cases_dir) if os.path.isfile(os.path.join(cases_dir, c, "model.onnx")))
    selected = cases
    if args.cases:
        try:
            pattern = re.compile(args.cases)
        except re.error as e:
            ap.error(f"--cases: {e}")
        selected = [c for c in selected if pattern.search(c)]
    if args.limit is not None:
        selected = selected[: args.limit]
    if not selected:
        log(f"onnx_conformance: no cases in {cases_dir}" + (f" match {args.cases!r}" if args.cases else ""))
        return 2
    passlist = read_list(args.check) if args.check else None

    hios = Hios(os.path.abspath(args.hios), args.timeout, args.binary_wait, log)
    if args.work_dir:
        os.makedirs(args.work_dir, exist_ok=True)
    work_root = tempfile.mkdtemp(prefix="onnx-conformance.", dir=args.work_dir)
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // args.jobs)))
    log(f"{len(selected)} cases from {cases_dir}, {args.jobs} at a time, {hios.version} ({hios.path})")

    rows = []
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
            futures = {pool.submit(run_case, c, cases_dir, hios, work_root, args.keep, args.export): c for c in selected}
            for n, fut in enumerate(concurrent.futures.as_completed(futures), 1):
                case = futures[fut]
                try:
                    row = fut.result()
                except SystemExit:
                    raise
                except Exception as e:  # noqa: BLE001 - one case's harness error must not lose the others
                    row = {"case": case, "op": None, "ops": [], "status": "crash", "reason": f"harness: {e!r}",
                           "frozen": [], "max_abs_err": None, "seconds": 0.0}
                rows.append(row)
                if args.verbose:
                    extra = f" (frozen {','.join(row['frozen'])})" if row["frozen"] else ""
                    log(f"[{n}/{len(selected)}] {case}: {row['status']}{extra} {row['reason']}".rstrip())
                elif n % 100 == 0:
                    log(f"  {n}/{len(selected)} cases, {time.time() - start:.0f} s")
    finally:
        if not args.keep:
            shutil.rmtree(work_root, ignore_errors=True)
    rows.sort(key=lambda r: r["case"])
    seconds = time.time() - start

    script = os.path.abspath(sys.argv[0])
    shown = [os.path.relpath(script, REPO) if script.startswith(REPO + os.sep) else sys.argv[0]]
    command = "/usr/bin/python3 " + shlex.join(shown + (sys.argv[1:] if argv is None else list(argv)))
    if args.json != "none":
        write_text(args.json, json.dumps({"format": "hios-onnx-conformance", "command": command,
                                          "commit": git("rev-parse", "--short", "HEAD"), "hios": hios.version,
                                          "totals": totals(rows), "cases": rows}, indent=1) + "\n")
    if args.markdown != "none":
        write_markdown(args.markdown, rows, command, hios.version, seconds)
    if args.write_passlist:
        write_text(args.write_passlist, "".join(r["case"] + "\n" for r in rows if r["status"] == "pass"))

    print(f"onnx conformance: {totals_line(rows)} ({seconds:.0f} s)")
    for _, count, example in top_reasons(rows, 5):
        print(f"  refused {count:4d}: {shorten(example, 110)}")
    written = [p for p in (args.json, args.markdown, args.write_passlist) if p and p != "none"]
    if written:
        print("wrote " + ", ".join(written))

    if passlist is None:
        return 0
    status = {r["case"]: r for r in rows}
    filtered = args.cases is not None or args.limit is not None
    failures = []
    for case in passlist:
        r = status.get(case)
        if r is None:
            if not filtered:
                failures.append(f"{case}: listed in {args.check} but not among the cases")
        elif r["status"] != "pass":
            failures.append(f"{case}: passed before, now {r['status']}: {r['reason']}")
    listed = set(passlist)
    known = read_known(args.known)
    for r in rows:
        if r["status"] == "wrong" and r["case"] in known:
            continue
        if r["status"] in ("wrong", "crash") and r["case"] not in listed:
            failures.append(f"{r['case']}: {r['status']}: {r['reason']}")
    if failures:
        print(f"check against {args.check}: {len(failures)} failure(s)")
        for f in failures:
            print("  " + f)
        return 1
    print(f"check against {args.check}: ok ({len(passlist)} listed)")
    return 0


def read_known(path):
    """{case: why} from a file of 'case: why' lines ('#' comments)."""
    known = {}
    if not path:
        return known
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                case, _, why = line.partition(":")
                known[case.strip()] = why.strip()
    return known


if __name__ == "__main__":
    sys.exit(main())
