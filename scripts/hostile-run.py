#!/usr/bin/env python3
"""Hostile run: hammer the `hios` CLI with hostile option values, damaged input files and
awkward output paths, and classify every outcome.

Standard library only. Not a CTest test (it takes minutes); docs/testing.md, "Hostile runs".

    python3 scripts/hostile-run.py --hios build/cli/hios --out hostile.jsonl

Every case runs in a fresh temporary directory (`case/work` is its working directory; `case/`
also holds sentinel files that no command may touch), with a timeout. Classes:

  crash     killed by a signal, or a sanitizer report on stderr
  hang      ran past its timeout
  clobber   a file outside the case's output paths changed, a symlink/FIFO/device replaced, or
            a file left behind after a failure
  unclear   non-zero exit, but stderr is not exactly one line, or it says "internal error",
            "json.exception", "what():", "terminate called", or holds an unescaped control byte
            (also: exit 0 with one of those on stderr, or an exit code other than 0 and 2)
  ok-error  exit 2 with one clear line on stderr
  accepted  exit 0 (not judged: read the JSON lines for values that should have been refused)

Under mpirun, Open MPI's own notices (the blocks between dashed lines, "[host:pid] ..." lines)
and the line each rank repeats (equal but for its rank number) are removed before the "one line" rule is applied;
the raw stderr stays in the JSON lines. `check` prints its violations on stdout by contract,
so there an empty stderr with exit 2 and a non-empty stdout is an ok-error.
"""

import argparse
import collections
import hashlib
import json
import os
import random
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile_loaders  # noqa: E402  (the loaders of databases, weights and named inputs)

HOSTILE_VALUES = ["", "-1", "0", "1e20", "1.5", "nan", "inf", "0x10", "+3", "2,,4", "1,", ",",
                  "99999999999999999999", "9" * 10000, "\x1b[31mred", "a\nb"]

MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1"}

UNCLEAR_MARKERS = ["internal error", "json.exception", "what():", "terminate called"]
SANITIZER_MARKERS = ["AddressSanitizer", "UndefinedBehaviorSanitizer", "LeakSanitizer",
                     "ThreadSanitizer", "MemorySanitizer", "runtime error:"]


# ----------------------------------------------------------------------------------------------
# Inputs


def nested(depth, leaf="1"):
    return "[" * depth + leaf + "]" * depth


def graph_mutations(text):
    """Damaged copies of a valid graph JSON: name -> bytes."""
    g = json.loads(text)
    out = {}
    b = text.encode()
    out["truncated-half"] = b[: len(b) // 2]
    out["truncated-1-byte"] = b[:1]
    out["empty"] = b""
    out["nested-100000-value"] = text.replace('"dtype": "float32"',
                                              '"dtype": ' + nested(100000), 1).encode()
    out["nested-100000-doc"] = ('{"a":' * 100000 + "1" + "}" * 100000).encode()
    out["nested-100000-unclosed"] = ("[" * 100000).encode()

    def dump(obj):
        return json.dumps(obj, indent=1).encode()

    def rename_all(old, new):
        return text.replace('"%s"' % old, json.dumps(new)).encode()

    first = g["blocks"][0]["nodes"][0]["name"]
    last_block = g["blocks"][-1]
    last = last_block["nodes"][-1]["name"]
    g2 = json.loads(text)
    g2["blocks"][0]["nodes"][0]["inputs"] = [[last]]
    out["cycle-across-blocks"] = dump(g2)
    g2 = json.loads(text)
    g2["blocks"][0]["nodes"][0]["inputs"] = [[first]]
    out["cycle-self"] = dump(g2)
    g2 = json.loads(text)
    blk = g2["blocks"][0]["nodes"]
    blk[0]["inputs"] = [[blk[1]["name"]]]
    blk[1]["inputs"] = [[blk[0]["name"]]]
    out["cycle-two-nodes"] = dump(g2)
    g2 = json.loads(text)
    g2["blocks"][0]["nodes"][0]["inputs"] = [["no-such-node"]]
    out["unknown-input"] = dump(g2)
    out["nul-escaped-in-name"] = rename_all(first, first + "\u0000x")
    out["nul-raw-in-name"] = text.replace('"%s"' % first, '"%s\x00x"' % first).encode()
    out["nul-raw-in-graph-name"] = text.replace('"name": "%s"' % g["name"],
                                                '"name": "de\x00mo"', 1).encode()
    out["name-dotdot-node"] = rename_all(first, "a/../../x")
    g2 = json.loads(text)
    g2["name"] = "a/../../x"
    out["name-dotdot-graph"] = dump(g2)
    g2 = json.loads(text)
    g2["name"] = "/dev/stdout"
    out["name-dev-stdout-graph"] = dump(g2)
    out["name-10000-chars"] = rename_all(first, "n" * 10000)
    out["name-esc-raw"] = text.replace('"%s"' % first, '"\x1b[31m%s"' % first).encode()
    out["name-esc-escaped"] = rename_all(first, "\x1b[31m" + first)
    out["name-newline-escaped"] = rename_all(first, first + "\nsecond line")
    out["name-invalid-utf8"] = text.replace('"%s"' % first, '"%s"' % first).encode().replace(
        first.encode(), first.encode() + b"\xff\xfe", 1)
    out["name-empty"] = rename_all(first, "")
    out["name-duplicate"] = rename_all(first, g["blocks"][0]["nodes"][1]["name"])
    for key, vals in (("out_channels", ["1e400", "99999999999999999999", "4294967299", "-1", "0",
                                        "1.5", "4611686018427387904", "nan"]),
                      ("height", ["1e20", "-15", "0", "2147483648"]),
                      ("batch", ["99999999999999999999", "-1", "0", "65537"])):
        for v in vals:
            pat = re.compile(r'("%s"\s*:\s*)-?[0-9][0-9.eE+-]*' % key)
            out["number-%s=%s" % (key, v)] = pat.sub(lambda m: m.group(1) + v, text, count=1).encode()
    out["kernel-4294967299"] = text.replace('"kernel":[3,3]', '"kernel":[4294967299,3]', 1).encode()
    out["channels-2^62"] = re.sub(r'"channels":\d+', '"channels":4611686018427387904', text,
                                  count=1).encode()
    out["duplicate-key"] = text.replace('"version": 1,', '"version": 1, "version": 1,', 1).encode()
    out["trailing-garbage"] = b + b"}}garbage"
    out["not-json-binary"] = bytes(random.Random(7).randrange(256) for _ in range(4096))
    out["json-array"] = b"[]"
    out["json-null"] = b"null"
    out["bom"] = b"\xef\xbb\xbf" + b
    return out


def schedule_mutations(text, graph_text):
    s = json.loads(text)
    g = json.loads(graph_text)
    out = {}
    b = text.encode()

    def dump(obj):
        return json.dumps(obj, indent=1).encode()

    out["truncated-half"] = b[: len(b) // 2]
    out["empty"] = b""
    out["nested-100000-value"] = text.replace('"transfers": []', '"transfers": ' + nested(100000)).encode()
    out["nested-100000-doc"] = ('{"a":' * 100000 + "1" + "}" * 100000).encode()
    first = g["blocks"][0]["nodes"][0]["name"]
    second = g["blocks"][0]["nodes"][1]["name"]
    out["node-twice"] = text.replace('["%s"]' % second, '["%s"]' % first, 1).encode()
    out["node-missing"] = text.replace('["%s"], ' % first, "", 1).encode()
    out["node-unknown"] = text.replace('"%s"' % first, '"no-such-node"', 1).encode()
    out["node-nul-raw"] = text.replace('"%s"' % first, '"%s\x00"' % first, 1).encode()
    out["node-dotdot"] = text.replace('"%s"' % first, '"a/../../x"', 1).encode()
    for v in ["a/../../x", "x/../../victim", "/dev/stdout", "a\x1bb", "", "n" * 300]:
        s2 = json.loads(text)
        s2["meta"]["algorithm"] = v
        out["algorithm=%r" % v[:20]] = dump(s2)
    s2 = json.loads(text)
    s2["meta"]["algorithm"] = "a\x00b"
    out["algorithm-nul-escaped"] = dump(s2)
    for v in ["99999999999999999999", "-1", "0", "1e20", "1.5", "2147483648", "1024"]:
        out["gpus=%s" % v] = re.sub(r'("gpus":\s*)\d+', lambda m: m.group(1) + v, text, count=1).encode()
    for v in ["99999999999999999999", "-1", "0", "1e400"]:
        out["max_streams=%s" % v] = re.sub(r'("max_streams":\s*)\d+', lambda m: m.group(1) + v, text,
                                           count=1).encode()
    s2 = json.loads(text)
    s2["transfers"] = [{"node": first, "from": 0, "to": 99999, "block": "block1"}]
    out["transfer-to-gpu-99999"] = dump(s2)
    s2 = json.loads(text)
    s2["meta"]["spatial"] = {"parts": 99999999999}
    out["spatial-huge"] = dump(s2)
    s2 = json.loads(text)
    s2["blocks"][0]["name"] = "block2"
    out["block-renamed-duplicate"] = dump(s2)
    out["graph-digest-wrong"] = re.sub(r'fnv1a64:[0-9a-f]+', "fnv1a64:0000000000000000", text).encode()
    out["not-json-binary"] = bytes(random.Random(8).randrange(256) for _ in range(4096))
    return out


def npy_mutations(good_npy):
    out = {}
    out["npy-truncated"] = good_npy[: len(good_npy) // 2]
    out["npy-header-only"] = good_npy[:128]
    out["npy-empty"] = b""
    out["npy-shape-huge"] = good_npy.replace(b"(1, 375, 15, 15)", b"(99999999999999999999, 375, 15, 15)", 1)
    out["npy-shape-negative"] = good_npy.replace(b"(1, 375, 15, 15)", b"(-1, 375, 15, 15)", 1)
    out["npy-dtype-complex"] = good_npy.replace(b"'<f4'", b"'<c8'", 1)
    out["npy-not-npy"] = b"this is not a numpy file\n" * 10
    return out


def make_npy(shape, value=0.5):
    import struct
    n = 1
    for d in shape:
        n *= d
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }" % ", ".join(str(d) for d in shape)
    pad = 64 - (10 + len(header) + 1) % 64
    header = header + " " * pad + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + struct.pack("<f", value) * n


# ----------------------------------------------------------------------------------------------
# Cases

class Case:
    __slots__ = ("id", "sub", "kind", "what", "argv", "files", "outputs", "mpi", "timeout", "prep",
                 "stdout_file")

    def __init__(self, sub, kind, what, argv, files=None, outputs=(), mpi=0, prep=None,
                 stdout_file=False):
        self.sub, self.kind, self.what, self.argv = sub, kind, what, argv
        self.files = files or {}
        self.outputs = list(outputs)
        self.mpi = mpi
        self.prep = prep
        self.stdout_file = stdout_file
        self.id = None
        self.timeout = None


# The options tried with hostile values, per subcommand: (base argv after `hios SUB`, files,
# mpi ranks, options). Options a base sets are overridden by the hostile one (CLI11 takes the last).
def build_cases(base_files, values_cheap, values_costly, rng):
    G = {"g.json": base_files["graph"]}
    GS1 = dict(G, **{"s1.json": base_files["s1"]})
    GS2 = dict(G, **{"s2.json": base_files["s2"]})
    cases = []
    run_base = ["run", "--graph", "g.json", "--backend", "cpu", "--warmup", "0", "--number", "1",
                "--repeat", "1", "--threads", "1", "-o", "none"]
    tune_base = ["tune", "--graph", "g.json", "--backend", "cpu", "--warmup", "0", "--passes", "1",
                 "--node-iters", "1", "--stage-iters", "1", "--link-iters", "1", "--stage-budget", "1",
                 "--split-budget", "1", "--threads", "1", "-q", "-o", "t.json"]
    serve_base = ["serve", "--backend", "cpu", "--models", "demo", "--size", "15", "--batches", "1,2",
                  "--loads", "0.5", "--duration", "0.05", "--policy", "fifo", "--threads", "1",
                  "-o", "serve.json"]
    specs = [
        ("graph", ["graph", "--model", "demo", "--height", "15", "--width", "15", "-o", "o.json"], {}, 0,
         ["--batch", "--height", "--width", "--model"], False),
        ("import", ["import", "notonnx.onnx", "-o", "o.json"], {"notonnx.onnx": base_files["graph"]}, 0,
         ["--batch", "--height", "--width", "--name", "--weights"], False),
        ("schedule", ["schedule", "--graph", "g.json", "-o", "o.json"], G, 0,
         ["--gpus", "--window", "--streams", "--ios-r", "--ios-s", "--ios-max-states", "--time-budget",
          "--spatial", "--spatial-mode", "--algo", "--device", "--cost", "--devices"], False),
        ("show", ["show", "s2.json", "--graph", "g.json", "--cost", "analytic"], GS2, 0,
         ["--cost", "--device", "--devices"], False),
        ("trace", ["trace", "--graph", "g.json", "--schedule", "s2.json", "-o", "o.json"], GS2, 0,
         ["--cost", "--device", "--devices"], False),
        ("lower", ["lower", "--graph", "g.json", "--schedule", "s2.json"], GS2, 0,
         ["--rank", "--launch-order", "--memory", "--layout", "--cost", "--device"], False),
        ("info", ["info", "g.json"], G, 0, ["--schedule"], False),
        ("dot", ["dot", "g.json", "-o", "o.dot"], G, 0, ["--schedule"], False),
        ("run", run_base + ["--schedule", "s1.json"], GS1, 1,
         ["--warmup", "--number", "--repeat", "--timeout", "--stall-timeout", "--threads", "--seed",
          "--devices", "--transport", "--math", "--cuda-graph", "--layout", "--memory",
          "--launch-order", "--input", "--reference-cache"], True),
        ("run", run_base + ["--schedule", "s2.json"], GS2, 2,
         ["--warmup", "--number", "--timeout", "--stall-timeout", "--threads", "--seed", "--devices",
          "--transport"], True),
        ("run", run_base, G, 1, ["--shapes", "--batches"], True),
        ("tune", tune_base + ["--gpus", "1"], G, 1,
         ["--gpus", "--streams", "--passes", "--node-iters", "--stage-budget", "--timeout",
          "--spatial", "--split-shortlist", "--split-finalists", "--seed", "--threads"], True),
        ("tune", tune_base + ["--gpus", "2"], G, 2, ["--gpus", "--spatial", "--split-finalists"], True),
        ("serve", serve_base, {}, 0,
         ["--size", "--batches", "--threads", "--latency-budget-ms", "--budget-duration", "--hold-share",
          "--static-batch", "--static-wait-ms", "--queue-limit", "--verify-every", "--loads", "--rate",
          "--burst-on", "--burst-off", "--duration", "--seed", "--devices", "--placement", "--replicas",
          "--models", "--policy", "--algo"], True),
    ]
    for sub, base, files, mpi, opts, costly in specs:
        for opt in opts:
            vals = values_cheap
            if costly:
                vals = rng.sample(HOSTILE_VALUES, min(values_costly, len(HOSTILE_VALUES)))
            for v in vals:
                extra = [opt, v]
                # serve runs every policy unless told: hostile policy values replace fifo
                cases.append(Case(sub, "value", "%s=%r" % (opt, v[:24]), base + extra, files,
                                  outputs=["o.json", "o.dot", "t.json", "serve.json", "output"], mpi=mpi))

    # Damaged graphs: every consumer
    gm = graph_mutations(base_files["graph"].decode())
    consumers = [
        ("info", lambda: ["info", "g.json"], 0),
        ("info", lambda: ["info", "g.json", "--json"], 0),
        ("validate", lambda: ["validate", "g.json"], 0),
        ("dot", lambda: ["dot", "g.json", "-o", "o.dot"], 0),
        ("schedule", lambda: ["schedule", "--graph", "g.json", "--gpus", "2", "-o", "o.json"], 0),
        ("check", lambda: ["check", "--graph", "g.json", "--schedule", "s2.json"], 0),
        ("show", lambda: ["show", "s2.json", "--graph", "g.json", "--cost", "analytic"], 0),
        ("trace", lambda: ["trace", "--graph", "g.json", "--schedule", "s2.json", "-o", "o.json"], 0),
        ("lower", lambda: ["lower", "--graph", "g.json", "--schedule", "s2.json", "--all"], 0),
        ("import", lambda: ["import", "g.json", "-o", "o.json"], 0),
    ]
    for name, data in gm.items():
        for sub, argv, mpi in consumers:
            cases.append(Case(sub, "graph-file", name, argv(), {"g.json": data, "s2.json": base_files["s2"]},
                              outputs=["o.json", "o.dot", "o.safetensors"], mpi=mpi))
    for name in ["truncated-half", "nested-100000-doc", "cycle-across-blocks", "nul-raw-in-name",
                 "name-dotdot-graph", "number-out_channels=4611686018427387904", "channels-2^62",
                 "kernel-4294967299", "name-esc-escaped"]:
        cases.append(Case("run", "graph-file", name, run_base[:-2] + ["--schedule", "s1.json"],
                          {"g.json": gm[name], "s1.json": base_files["s1"]}, outputs=["output"], mpi=1))
    cases.append(Case("serve", "graph-file", "models=damaged graph (nested)",
                      serve_base + ["--models", "g.json"], {"g.json": gm["nested-100000-doc"]},
                      outputs=["serve.json", "output"]))
    cases.append(Case("serve", "graph-file", "models=damaged graph (cycle)",
                      serve_base + ["--models", "g.json"], {"g.json": gm["cycle-across-blocks"]},
                      outputs=["serve.json", "output"]))
    # Damaged schedules
    sm = schedule_mutations(base_files["s2"].decode(), base_files["graph"].decode())
    sconsumers = [
        ("check", ["check", "--graph", "g.json", "--schedule", "s2.json"]),
        ("show", ["show", "s2.json", "--graph", "g.json", "--cost", "analytic"]),
        ("trace", ["trace", "--graph", "g.json", "--schedule", "s2.json", "-o", "o.json"]),
        ("lower", ["lower", "--graph", "g.json", "--schedule", "s2.json", "--all"]),
        ("info", ["info", "g.json", "--schedule", "s2.json"]),
        ("dot", ["dot", "g.json", "--schedule", "s2.json", "-o", "o.dot"]),
    ]
    for name, data in sm.items():
        for sub, argv in sconsumers:
            cases.append(Case(sub, "schedule-file", name, argv, {"g.json": base_files["graph"], "s2.json": data},
                              outputs=["o.json", "o.dot"]))
    for name in ["truncated-half", "nested-100000-doc", "node-twice", "node-missing", "algorithm='a/../../x'",
                 "algorithm='x/../../victim'", "algorithm='/dev/stdout'", "algorithm='a\\x1bb'",
                 "algorithm-nul-escaped", "gpus=99999999999999999999", "gpus=1", "gpus=-1",
                 "transfer-to-gpu-99999", "spatial-huge"]:
        if name not in sm:
            continue
        argv = [a for a in run_base if a not in ("-o", "none")] + ["--schedule", "s2.json"]
        cases.append(Case("run", "schedule-file", name, argv,
                          {"g.json": base_files["graph"], "s2.json": sm[name]}, outputs=["output"], mpi=2))
    # Damaged .npy inputs and serve traces
    for name, data in npy_mutations(base_files["npy"]).items():
        cases.append(Case("run", "input-file", name, run_base + ["--schedule", "s1.json", "--input", "x.npy"],
                          dict(GS1, **{"x.npy": data}), outputs=["output"], mpi=1))
    for name, data in {"trace-garbage": b"\x00\x01\x02garbage\n", "trace-negative-time": b"-1,demo\n",
                       "trace-nan-time": b"nan,demo\n", "trace-huge-time": b"1e20,demo\n",
                       "trace-unknown-model": b"0.01,nosuchmodel\n", "trace-empty": b"",
                       "trace-long-line": b"0.01," + b"d" * 100000 + b"\n",
                       "trace-esc": b"0.01,\x1b[31mdemo\n"}.items():
        cases.append(Case("serve", "input-file", name, serve_base + ["--trace", "arrivals.txt"],
                          {"arrivals.txt": data}, outputs=["serve.json", "output"]))
    # The loaders of databases, weights, named inputs and tune identities (hostile_loaders.py)
    for name, data in hostile_loaders.profile_db_mutations(base_files["db"].decode()).items():
        cases.append(Case("schedule", "database-file", name, ["schedule", "--graph", "g.json", "--cost", "db.json",
                                                               "-o", "o.json"], dict(G, **{"db.json": data}),
                          outputs=["o.json"]))
        cases.append(Case("tune", "database-file", name, tune_base + ["--gpus", "1", "--profile-db", "db.json"],
                          dict(G, **{"db.json": data}), outputs=["t.json", "db.json"], mpi=1))
    for name, data in hostile_loaders.safetensors_mutations(base_files["weights"]).items():
        cases.append(Case("run", "weights-file", name, run_base[:2] + ["gw.json"] + run_base[3:] + ["--schedule", "s1.json"],
                          {"gw.json": base_files["weighted_graph"], "w.safetensors": data, "s1.json": base_files["s1"]},
                          outputs=["output"], mpi=1))
    for what, values, files in hostile_loaders.named_input_cases("input", (1, 375, 15, 15)):
        argv = run_base + ["--schedule", "s1.json"]
        for v in values:
            argv = argv + ["--input", v]
        cases.append(Case("run", "input-file", what, argv, dict(GS1, **files), outputs=["output"], mpi=1))
    for name, data in hostile_loaders.schedule_identity_mutations(base_files["s1"].decode()).items():
        cases.append(Case("run", "schedule-file", name, run_base + ["--schedule", "s1.json"],
                          dict(G, **{"s1.json": data}), outputs=["output"], mpi=1))
        cases.append(Case("check", "schedule-file", name, ["check", "--graph", "g.json", "--schedule", "s1.json"],
                          dict(G, **{"s1.json": data})))
    # Non-ONNX files to import
    for name, data in {"import-json": base_files["graph"], "import-empty": b"",
                       "import-binary": bytes(random.Random(9).randrange(256) for _ in range(8192)),
                       "import-protobuf-like": b"\x08\x07\x12\x04test\x1a\xff\xff\xff\xff\x0f",
                       "import-nested-protobuf": b"\x3a\x05" * 50000}.items():
        cases.append(Case("import", "input-file", name, ["import", "m.onnx", "-o", "o.json"], {"m.onnx": data},
                          outputs=["o.json", "o.safetensors", "m.safetensors"]))
    # Inputs that are not regular files
    for sub, argv in [("info", ["info", "X"]), ("validate", ["validate", "X"]), ("import", ["import", "X", "-o", "o.json"]),
                      ("check", ["check", "--graph", "g.json", "--schedule", "X"]),
                      ("schedule", ["schedule", "--graph", "X", "-o", "o.json"])]:
        for what, prep in [("input-directory", "dir"), ("input-missing", "missing"), ("input-dev-null", "devnull"),
                           ("input-symlink-loop", "symloop")]:
            cases.append(Case(sub, "input-file", what, argv, dict(G), outputs=["o.json"], prep=("input", prep)))

    # Output paths
    out_opts = [
        ("graph", ["graph", "--model", "demo", "--height", "15", "--width", "15", "-o", "{}"], {}, 0),
        ("graph", ["graph", "--model", "demo", "--height", "15", "--width", "15", "-o", "o.json", "--save-weights", "{}"], {}, 0),
        ("dot", ["dot", "g.json", "-o", "{}"], G, 0),
        ("trace", ["trace", "--graph", "g.json", "--schedule", "s2.json", "-o", "{}"], GS2, 0),
        ("schedule", ["schedule", "--graph", "g.json", "-o", "{}"], G, 0),
        ("lower", ["lower", "--graph", "g.json", "--schedule", "s2.json", "-o", "{}"], GS2, 0),
        ("import", ["import", "m.onnx", "-o", "{}"], {"m.onnx": b"not onnx"}, 0),
        ("run", run_base[:-2] + ["--schedule", "s1.json", "-o", "{}"], GS1, 1),
        ("run", run_base + ["--schedule", "s1.json", "--save-output", "{}"], GS1, 1),
        ("run", run_base + ["--schedule", "s2.json", "--trace", "{}"], GS2, 2),
        ("tune", tune_base[:-2] + ["--gpus", "1", "-o", "{}"], G, 1),
        ("serve", serve_base[:-2] + ["-o", "{}"], {}, 0),
    ]
    kinds = ["symlink-loop", "missing-dir", "dev-stdout-to-file", "fifo", "directory", "name-255",
             "name-256", "readonly-dir", "readonly-file", "symlink-to-file", "dev-null", "dangling-symlink",
             "existing-file", "sentinel-dotdot"]
    for sub, argv, files, mpi in out_opts:
        for k in kinds:
            cases.append(Case(sub, "output-path", k, argv, files, mpi=mpi, prep=("output", k),
                              stdout_file=(k == "dev-stdout-to-file")))
    return cases


# ----------------------------------------------------------------------------------------------
# Running


def snapshot(root):
    snap = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            rel = os.path.relpath(p, root)
            if stat.S_ISLNK(st.st_mode):
                snap[rel] = ("link", os.readlink(p))
            elif stat.S_ISREG(st.st_mode):
                h = hashlib.sha1()
                try:
                    with open(p, "rb") as f:
                        h.update(f.read())
                except OSError:
                    pass
                snap[rel] = ("file", st.st_size, h.hexdigest(), stat.S_IMODE(st.st_mode))
            elif stat.S_ISDIR(st.st_mode):
                snap[rel] = ("dir", stat.S_IMODE(st.st_mode))
            elif stat.S_ISFIFO(st.st_mode):
                snap[rel] = ("fifo",)
            else:
                snap[rel] = ("other", st.st_mode)
    return snap


def fifo_reader(path, stop, sink):
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                chunk = None
            if chunk:
                sink.append(len(chunk))
                continue
            if stop.is_set():
                return
            time.sleep(0.02)
    finally:
        os.close(fd)


def prepare(case, casedir, work):
    """Lays out the case's files; returns (argv, output rel paths allowed to change, fifo path)."""
    for name, data in case.files.items():
        with open(os.path.join(work, name), "wb") as f:
            f.write(data)
    # sentinels outside work/: nothing may touch them
    with open(os.path.join(casedir, "x"), "w") as f:
        f.write("sentinel x\n")
    with open(os.path.join(casedir, "victim"), "w") as f:
        f.write("sentinel victim\n")
    with open(os.path.join(work, "keep.txt"), "w") as f:
        f.write("keep me\n")
    argv = list(case.argv)
    allowed = set(case.outputs)
    fifo = None
    if case.prep and case.prep[0] == "input":
        k = case.prep[1]
        if k == "dir":
            os.mkdir(os.path.join(work, "X"))
        elif k == "devnull":
            os.symlink("/dev/null", os.path.join(work, "X"))
        elif k == "symloop":
            os.symlink("Y", os.path.join(work, "X"))
            os.symlink("X", os.path.join(work, "Y"))
    if case.prep and case.prep[0] == "output":
        k = case.prep[1]
        target = "out.json"
        if k == "symlink-loop":
            os.symlink("loop2", os.path.join(work, "out.json"))
            os.symlink("out.json", os.path.join(work, "loop2"))
        elif k == "missing-dir":
            target = "missing/dir/out.json"
        elif k == "dev-stdout-to-file":
            target = "/dev/stdout"
        elif k == "fifo":
            os.mkfifo(os.path.join(work, "out.json"))
            fifo = os.path.join(work, "out.json")
        elif k == "directory":
            os.mkdir(os.path.join(work, "out.json"))
        elif k == "name-255":
            target = "o" * 250 + ".json"
        elif k == "name-256":
            target = "o" * 251 + ".json"
        elif k == "readonly-dir":
            os.mkdir(os.path.join(work, "ro"))
            target = "ro/out.json"
        elif k == "readonly-file":
            with open(os.path.join(work, "out.json"), "w") as f:
                f.write("read-only original\n")
            os.chmod(os.path.join(work, "out.json"), 0o444)
        elif k == "symlink-to-file":
            with open(os.path.join(work, "real.json"), "w") as f:
                f.write("old\n")
            os.symlink("real.json", os.path.join(work, "out.json"))
            allowed.add("real.json")
        elif k == "dev-null":
            target = "/dev/null"
        elif k == "dangling-symlink":
            os.symlink("nowhere/real.json", os.path.join(work, "out.json"))
        elif k == "existing-file":
            with open(os.path.join(work, "out.json"), "w") as f:
                f.write("old contents\n")
        elif k == "sentinel-dotdot":
            target = "../victim"
            allowed.add("../victim")
        argv = [target if a == "{}" else a for a in argv]
        if k not in ("dev-stdout-to-file", "dev-null", "sentinel-dotdot"):
            allowed.add(target)
            allowed.add(target.split("/")[0])
        if k == "readonly-dir":
            os.chmod(os.path.join(work, "ro"), 0o555)
        # temporary files beside the target count as outputs while the command succeeds
    return argv, allowed, fifo


def printable(text):
    """Control bytes as \\xNN, so that a report never moves the terminal's cursor."""
    return re.sub(r"[\x00-\x08\x0b-\x1f\x7f]", lambda m: "\\x%02x" % ord(m.group(0)), text)


def quote(arg):
    if len(arg) > 200:
        arg = arg[:40] + "...(%d chars)" % len(arg)
    if re.search(r"[\x00-\x1f\x7f]", arg):  # bash's $'...' form, pasteable
        return "$'" + re.sub(r"[\x00-\x1f\x7f'\\]", lambda m: "\\x%02x" % ord(m.group(0)), arg) + "'"
    return shlex.quote(arg)


def clean_mpi_stderr(text):
    lines = text.splitlines()
    out = []
    keys = set()
    in_block = False
    for ln in lines:
        if re.match(r"^-{20,}$", ln.strip()):
            in_block = not in_block
            continue
        if in_block:
            continue
        if re.match(r"^\[[^\]]+:\d+\] ", ln) or ln.startswith("mpirun") or ln.startswith("prterun") \
                or ln.startswith("Primary job") or ln.startswith("MPI_ABORT"):
            continue
        if ln.strip() == "":
            continue
        # every rank prints the same error with its own rank number: one line
        key = re.sub(r"\brank \d+", "rank N", ln)
        if key not in keys:
            keys.add(key)
            out.append(ln)
    return out


def run_case(case, args, root):
    casedir = tempfile.mkdtemp(prefix="c%05d-" % case.id, dir=root)
    work = os.path.join(casedir, "work")
    os.mkdir(work)
    argv, allowed, fifo = prepare(case, casedir, work)
    hios = os.path.abspath(args.hios)
    cmd = [hios] + argv
    env = dict(os.environ)
    if case.mpi:
        cmd = [args.mpirun, "--oversubscribe", "-np", str(case.mpi)] + cmd
        env.update(MPI_ENV)
    env["OMP_NUM_THREADS"] = "1"
    timeout = args.mpi_timeout if case.mpi else args.timeout
    if case.sub in ("serve", "tune"):
        timeout = args.mpi_timeout
    case.timeout = timeout
    before = snapshot(casedir)
    dev_before = os.stat("/dev/null")
    stop = threading.Event()
    sink = []
    reader = None
    if fifo:
        reader = threading.Thread(target=fifo_reader, args=(fifo, stop, sink), daemon=True)
        reader.start()
        time.sleep(0.01)
    stdout_target = subprocess.PIPE
    stdout_path = None
    if case.stdout_file:
        stdout_path = os.path.join(casedir, "stdout.txt")
        stdout_target = open(stdout_path, "ab")
    t0 = time.time()
    timed_out = False
    p = subprocess.Popen(cmd, cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=stdout_target,
                         stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
        out, err = p.communicate()
    wall = time.time() - t0
    if case.stdout_file:
        stdout_target.close()
        with open(stdout_path, "rb") as f:
            out = f.read()
    stop.set()
    if reader:
        reader.join(5)
    rc = p.returncode
    # let read-only dirs be inspected and removed
    for dirpath, dirnames, _ in os.walk(casedir):
        for d in dirnames:
            try:
                os.chmod(os.path.join(dirpath, d), 0o755)
            except OSError:
                pass
    after = snapshot(casedir)
    after.pop("stdout.txt", None)
    before.pop("stdout.txt", None)
    dev_after = os.stat("/dev/null")

    allowed_rel = [os.path.normpath(os.path.join("work", a)) for a in allowed]

    def is_allowed(rel):
        return any(rel == a or rel.startswith(a + os.sep) for a in allowed_rel)

    clobbers = []
    for rel, was in before.items():
        now = after.get(rel)
        if now == was:
            continue
        if was[0] in ("link", "fifo", "other") and (now is None or now[0] != was[0]):
            clobbers.append("%s: a %s replaced by %s" % (rel, was[0], now[0] if now else "nothing"))
        elif not is_allowed(rel):
            clobbers.append("%s changed (%s -> %s)" % (rel, was[0], now[0] if now else "removed"))
        elif rc != 0 and was[0] == "file":
            clobbers.append("%s changed by a failed command" % rel)
    for rel, now in after.items():
        if rel in before or now[0] == "dir":
            continue
        if rc != 0:
            clobbers.append("%s left behind by a failed command" % rel)
        elif not rel.startswith("work" + os.sep):
            clobbers.append("%s created outside the work directory" % rel)
    if (stat.S_IFMT(dev_after.st_mode), dev_after.st_rdev) != (stat.S_IFMT(dev_before.st_mode), dev_before.st_rdev):
        clobbers.append("/dev/null replaced")
    shutil.rmtree(casedir, ignore_errors=True)

    err_text = err.decode("utf-8", "backslashreplace")
    lines = clean_mpi_stderr(err_text) if case.mpi else [ln for ln in err_text.splitlines()]
    reasons = []
    cls = None
    if timed_out:
        cls = "hang"
        reasons.append("timeout %ss" % timeout)
    elif rc < 0 or rc > 128 or any(m in err_text for m in SANITIZER_MARKERS) \
            or (case.mpi and "on signal" in err_text):
        cls = "crash"
        reasons.append("signal %d" % -rc if rc < 0 else "rc %d" % rc)
    elif clobbers:
        cls = "clobber"
        reasons += clobbers
    else:
        ctrl = [ln for ln in lines if re.search(r"[\x00-\x08\x0b-\x1f\x7f]", ln)]
        markers = [m for m in UNCLEAR_MARKERS if m in err_text]
        if rc == 0:
            cls = "accepted"
            if markers:
                cls = "unclear"
                reasons.append("exit 0 but stderr says " + ", ".join(markers))
        else:
            if rc != 2:
                reasons.append("exit %d" % rc)
            if markers:
                reasons.append("stderr says " + ", ".join(markers))
            if ctrl:
                reasons.append("unescaped control byte on stderr")
            stdout_ok = case.sub == "check" and len(lines) == 0 and out and rc == 2
            if len(lines) != 1 and not stdout_ok:
                reasons.append("%d stderr lines" % len(lines))
            cls = "unclear" if reasons else "ok-error"
    return {
        "id": case.id, "sub": case.sub, "kind": case.kind, "what": case.what, "class": cls,
        "reasons": reasons, "rc": rc, "wall_s": round(wall, 3), "timeout_s": timeout,
        "cmd": " ".join(quote(os.path.basename(a) if i == 0 and not case.mpi else a) for i, a in enumerate(cmd)),
        "stderr_head": err_text[:600], "stderr_lines": len(lines),
        "stdout_bytes": len(out or b""), "fifo_bytes": sum(sink),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hios", default="build/cli/hios")
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--out", default="hostile.jsonl", help="JSON lines, one per case")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=30)
    ap.add_argument("--mpi-timeout", type=float, default=60, help="for mpirun, tune and serve cases")
    ap.add_argument("--costly-values", type=int, default=6,
                    help="hostile values tried per option of run, tune and serve (a seeded sample; 16: all)")
    ap.add_argument("--only", default="", help="comma-separated subcommands")
    ap.add_argument("--limit", type=int, default=0, help="run only the first N cases (after --only)")
    ap.add_argument("--list", action="store_true", help="print the cases and exit")
    args = ap.parse_args()
    if not os.access(args.hios, os.X_OK):
        sys.exit("hostile-run: %s is not an executable (--hios)" % args.hios)
    if shutil.which(args.mpirun) is None:
        sys.exit("hostile-run: %s not on PATH (--mpirun)" % args.mpirun)
    rng = random.Random(args.seed)
    root = tempfile.mkdtemp(prefix="hios-hostile-")
    hios = os.path.abspath(args.hios)
    base = os.path.join(root, "base")
    os.mkdir(base)
    subprocess.run([hios, "graph", "--model", "demo", "--height", "15", "--width", "15", "-o", "g.json"],
                   cwd=base, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    subprocess.run([hios, "schedule", "--graph", "g.json", "--algo", "sequential", "-o", "s1.json"],
                   cwd=base, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    subprocess.run([hios, "schedule", "--graph", "g.json", "--gpus", "2", "--no-single-gpu-fallback",
                    "-o", "s2.json"], cwd=base, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    subprocess.run([hios, "graph", "--model", "demo", "--height", "15", "--width", "15", "-o", "gw.json",
                    "--save-weights", "w.safetensors"], cwd=base, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    subprocess.run([hios, "tune", "--graph", "g.json", "--gpus", "1", "--backend", "cpu", "--passes", "1",
                    "--warmup", "0", "--stage-budget", "1", "--threads", "1", "-q", "--profile-db", "db.json",
                    "-o", "t.json"], cwd=base, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    files = {}
    for k, n in (("graph", "g.json"), ("s1", "s1.json"), ("s2", "s2.json"), ("db", "db.json"),
                 ("weighted_graph", "gw.json"), ("weights", "w.safetensors")):
        with open(os.path.join(base, n), "rb") as f:
            files[k] = f.read()
    files["npy"] = make_npy((1, 375, 15, 15))
    cases = build_cases(files, HOSTILE_VALUES, args.costly_values, rng)
    if args.only:
        keep = set(args.only.split(","))
        cases = [c for c in cases if c.sub in keep]
    if args.limit:
        cases = cases[: args.limit]
    for i, c in enumerate(cases):
        c.id = i
    if args.list:
        for c in cases:
            print(c.id, c.sub, c.kind, c.what, "mpi=%d" % c.mpi)
        return
    # cheap cases first in the queue would leave the long ones to the end: interleave
    order = sorted(cases, key=lambda c: (0 if (c.mpi or c.sub in ("serve", "tune")) else 1, c.id))
    print("hostile-run: %d cases, %d jobs, seed %d, %s" % (len(cases), args.jobs, args.seed, hios), flush=True)
    results = [None] * len(cases)
    lock = threading.Lock()
    queue = list(order)
    done = [0]
    t0 = time.time()

    def worker():
        while True:
            with lock:
                if not queue:
                    return
                c = queue.pop(0)
            r = run_case(c, args, root)
            with lock:
                results[c.id] = r
                done[0] += 1
                if done[0] % 100 == 0:
                    print("  %d/%d cases, %.0f s" % (done[0], len(cases), time.time() - t0), flush=True)

    threads = [threading.Thread(target=worker) for _ in range(max(1, args.jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    shutil.rmtree(root, ignore_errors=True)
    with open(args.out, "w") as f:
        for r in results:
            f.write(json.dumps(r) + "\n")
    classes = ["crash", "hang", "clobber", "unclear", "ok-error", "accepted"]
    per = collections.OrderedDict()
    for r in results:
        per.setdefault(r["sub"], collections.Counter())[r["class"]] += 1
    total = collections.Counter(r["class"] for r in results)
    print("\n%d cases in %.0f s; JSON lines in %s\n" % (len(results), time.time() - t0, args.out))
    print("| subcommand | cases | " + " | ".join(classes) + " |")
    print("|---|---:|" + "---:|" * len(classes))
    for sub, cnt in per.items():
        print("| %s | %d | %s |" % (sub, sum(cnt.values()), " | ".join(str(cnt[k]) for k in classes)))
    print("| **all** | %d | %s |" % (len(results), " | ".join(str(total[k]) for k in classes)))
    for k in ["crash", "hang", "unclear", "clobber"]:
        bad = [r for r in results if r["class"] == k]
        if not bad:
            continue
        print("\n## %s (%d)" % (k, len(bad)))
        for r in bad:
            first = r["stderr_head"].splitlines()[:2]
            print("- [%d] %s %s: %s\n    %s\n    stderr: %s" % (r["id"], r["sub"], r["what"], "; ".join(r["reasons"]),
                                                           r["cmd"], printable(" | ".join(first))[:300]))
    sys.exit(1 if any(total[k] for k in ["crash", "hang", "unclear", "clobber"]) else 0)


if __name__ == "__main__":
    main()
