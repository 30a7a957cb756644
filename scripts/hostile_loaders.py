"""Damaged files for the loaders that scripts/hostile-run.py's first generators do not reach:
profile and tune databases, safetensors weights, several named .npy inputs of other dtypes
and ranks, and a schedule's tune identity. Standard library only.

Each function returns {case name: bytes}; hostile-run.py turns them into cases.
"""
import json
import struct


def profile_db_mutations(db_text):
    """A tune's database (hios tune --profile-db), damaged field by field and as a whole."""
    good = json.loads(db_text)
    out = {}

    def variant(name, edit):
        d = json.loads(db_text)
        edit(d)
        out[name] = json.dumps(d).encode()

    def set_path(d, path, value):
        for k in path[:-1]:
            d = d[k]
        d[path[-1]] = value

    variant("db-meta-gpus-string", lambda d: d["meta"].update(gpus="x"))
    variant("db-meta-not-object", lambda d: d.update(meta=[1, 2]))
    variant("db-format-other", lambda d: d.update(format="hios-schedule"))
    variant("db-version-99", lambda d: d.update(version=99))
    variant("db-device-esc", lambda d: d.update(device="h200\x1b[31m"))
    variant("db-device-unknown", lambda d: d.update(device="nosuchgpu"))
    if good.get("entries"):
        variant("db-entry-ms-string", lambda d: set_path(d, ["entries", 0, "ms"], "fast"))
        variant("db-entry-ms-negative", lambda d: set_path(d, ["entries", 0, "ms"], -1))
        variant("db-entry-ms-huge", lambda d: set_path(d, ["entries", 0, "ms"], 1e308))
        variant("db-entry-key-missing", lambda d: d["entries"][0].pop("key"))
        variant("db-entry-duplicate", lambda d: d["entries"].append(dict(d["entries"][0])))
        variant("db-entry-samples-2^63", lambda d: set_path(d, ["entries", 0, "samples"], 2 ** 63))
    variant("db-entries-object", lambda d: d.update(entries={"a": 1}))
    variant("db-choices-not-object", lambda d: d.update(choices={"k": 3}))
    variant("db-choices-bad-recipe", lambda d: d.update(choices={"k": {"impl": 3, "config": "x"}}))
    variant("db-identity-number", lambda d: d.update(identity={"backend": 3}))
    variant("db-identity-string", lambda d: d.update(identity="cpu"))
    variant("db-links-bad", lambda d: d.update(links=[{"from": 0, "to": 1, "bandwidth_gbs": "x"}]))
    variant("db-concurrency-garbage", lambda d: d.update(concurrency={"a": [1, "b"]}))
    variant("db-pass-overhead-huge", lambda d: d.update(pass_overhead_ms=1e9))
    variant("db-searched-garbage", lambda d: d.update(searched=[{"x": 1}]))
    out["db-truncated"] = db_text.encode()[: len(db_text) // 2]
    out["db-nested"] = b"[" * 100000 + b"]" * 100000
    out["db-empty"] = b""
    out["db-duplicate-key"] = db_text.replace('"format"', '"format": "x", "format"', 1).encode()
    return out


def safetensors_mutations(st):
    """A safetensors file (hios graph --save-weights): its header length, header and data."""
    (n,) = struct.unpack("<Q", st[:8])
    header = json.loads(st[8:8 + n])
    data = st[8 + n:]
    out = {}

    def with_header(h, body=data):
        text = json.dumps(h).encode()
        return struct.pack("<Q", len(text)) + text + body

    out["st-empty"] = b""
    out["st-short"] = st[:5]
    out["st-header-length-huge"] = struct.pack("<Q", 2 ** 63) + st[8:]
    out["st-header-length-past-end"] = struct.pack("<Q", len(st)) + st[8:]
    out["st-header-not-json"] = struct.pack("<Q", 8) + b"notjson!" + data
    out["st-data-truncated"] = st[: 8 + n + len(data) // 2]
    names = [k for k in header if k != "__metadata__"]
    if names:
        t = names[0]

        def edit(fn):
            h = json.loads(st[8:8 + n])
            fn(h[t])
            return with_header(h)

        out["st-offsets-past-end"] = edit(lambda e: e.update(data_offsets=[0, len(data) * 4]))
        out["st-offsets-reversed"] = edit(lambda e: e.update(data_offsets=[8, 0]))
        out["st-offsets-2^64"] = edit(lambda e: e.update(data_offsets=[0, 2 ** 64]))
        out["st-dtype-unknown"] = edit(lambda e: e.update(dtype="Q7"))
        out["st-dtype-f64"] = edit(lambda e: e.update(dtype="F64"))
        out["st-shape-mismatch"] = edit(lambda e: e.update(shape=[3]))
        out["st-shape-negative"] = edit(lambda e: e.update(shape=[-1]))
        out["st-shape-huge"] = edit(lambda e: e.update(shape=[2 ** 62, 4]))
        h = json.loads(st[8:8 + n])
        del h[t]
        out["st-tensor-missing"] = with_header(h)
        h = json.loads(st[8:8 + n])
        h[t]["data_offsets"] = h[names[-1]]["data_offsets"] if len(names) > 1 else [0, 0]
        out["st-tensors-overlap"] = with_header(h)
    return out


def npy(shape, descr="<f4", fill=b"\x00\x00\x00\x3f"):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (descr, ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else ""))
    pad = 64 - (10 + len(header) + 1) % 64
    header = header + " " * pad + "\n"
    count = 1
    for d in shape:
        count *= d
    width = int(descr[2:]) if descr[2:].isdigit() else 4
    body = (fill * ((count * width) // len(fill) + 1))[: count * width]
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + body


def named_input_cases(input_name, shape):
    """--input NAME=FILE cases: (what, [--input values], {file: bytes})."""
    good = npy(shape)
    n, c, h, w = shape
    return [
        ("input-unknown-name", ["nosuchinput=x.npy"], {"x.npy": good}),
        ("input-name-twice", [input_name + "=x.npy", input_name + "=x.npy"], {"x.npy": good}),
        ("input-empty-name", ["=x.npy"], {"x.npy": good}),
        ("input-empty-file", [input_name + "="], {}),
        ("input-int64", [input_name + "=x.npy"], {"x.npy": npy(shape, "<i8", b"\x01" + b"\x00" * 7)}),
        ("input-bool", [input_name + "=x.npy"], {"x.npy": npy(shape, "|b1", b"\x01")}),
        ("input-f16", [input_name + "=x.npy"], {"x.npy": npy(shape, "<f2", b"\x00\x38")}),
        ("input-big-endian", [input_name + "=x.npy"], {"x.npy": npy(shape, ">f4", b"\x3f\x00\x00\x00")}),
        ("input-rank-3", [input_name + "=x.npy"], {"x.npy": npy((c, h, w))}),
        ("input-rank-1", [input_name + "=x.npy"], {"x.npy": npy((n * c * h * w,))}),
        ("input-wrong-shape", [input_name + "=x.npy"], {"x.npy": npy((n, c, h + 1, w))}),
        ("input-nan", [input_name + "=x.npy"], {"x.npy": npy(shape, "<f4", b"\x00\x00\xc0\x7f")}),
        ("input-fortran", [input_name + "=x.npy"],
         {"x.npy": good.replace(b"'fortran_order': False", b"'fortran_order': True ", 1)}),
        ("input-path-dotdot", [input_name + "=../victim"], {}),
    ]


def schedule_identity_mutations(s1_text):
    """A one-GPU schedule whose meta.tune carries a damaged identity (hios run reads it)."""
    out = {}
    for name, ident in {"tune-identity-number": {"backend": 3}, "tune-identity-list": [1],
                        "tune-identity-nested": {"backend": {"a": "cpu"}},
                        "tune-identity-wide-cpu": {"backend": "cpu", "conv_search": "wide"},
                        "tune-identity-esc": {"backend": "cpu", "transport": "x\x1b[31m"}}.items():
        s = json.loads(s1_text)
        s["meta"]["tune"] = {"identity": ident}
        out[name] = json.dumps(s).encode()
    s = json.loads(s1_text)
    s["meta"]["tune"] = "tuned"
    out["tune-not-object"] = json.dumps(s).encode()
    return out
