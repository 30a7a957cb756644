#!/usr/bin/python3
"""scripts/onnx_conformance.py on two tiny backend-test cases: a Conv + Relu that hios imports and
runs (pass) and an op of a custom domain that it refuses (refused); --check fails when a
passlisted case does not pass, and passes when only passing cases are listed.

Run with Debian's python3 (python3-onnx, numpy): /usr/bin/python3 tests/scripts/test_onnx_conformance.py
Needs the hios binary ($HIOS, else build/cli/hios); exits 77 (skipped) without it or without onnx."""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
SCRIPT = os.path.join(REPO, "scripts", "onnx_conformance.py")
HIOS = os.environ.get("HIOS", os.path.join(REPO, "build", "cli", "hios"))

try:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
except ImportError as e:
    print(f"onnx_conformance: skipped ({e}; run it with /usr/bin/python3)")
    sys.exit(77)
if not os.access(HIOS, os.X_OK):
    print(f"onnx_conformance: skipped (no hios binary at {HIOS})")
    sys.exit(77)

spec = importlib.util.spec_from_file_location("onnx_conformance", SCRIPT)
oc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(oc)


def conv_relu_reference(x, w, b):
    """Conv (3x3, pads 1, stride 1) + Relu in NumPy."""
    n, c, h, wd = x.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    y = np.zeros((n, w.shape[0], h, wd))
    for i in range(3):
        for j in range(3):
            y += np.einsum("nchw,oc->nohw", xp[:, :, i:i + h, j:j + wd], w[:, :, i, j].astype(np.float64))
    y += b.reshape(1, -1, 1, 1)
    return np.maximum(y, 0).astype(np.float32)


def write_case(root, name, model, inputs, outputs):
    folder = os.path.join(root, name)
    data = os.path.join(folder, "test_data_set_0")
    os.makedirs(data)
    onnx.save(model, os.path.join(folder, "model.onnx"))
    for k, (vi, value) in enumerate(zip(model.graph.input, inputs)):
        with open(os.path.join(data, f"input_{k}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(value, vi.name).SerializeToString())
    for k, (vi, value) in enumerate(zip(model.graph.output, outputs)):
        with open(os.path.join(data, f"output_{k}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(value, vi.name).SerializeToString())


def make_cases(root):
    rng = np.random.RandomState(0)
    x = rng.randn(1, 3, 8, 8).astype(np.float32)
    w = rng.randn(4, 3, 3, 3).astype(np.float32)
    b = rng.randn(4).astype(np.float32)
    # An input name with characters hios maps in file names ('/' and ':' to '.', others to '_').
    xname, yname = "/in:x", "out y"
    graph = helper.make_graph(
        [helper.make_node("Conv", [xname, "w", "b"], ["c"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
         helper.make_node("Relu", ["c"], [yname])],
        "conv_relu",
        [helper.make_tensor_value_info(xname, TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info(yname, TensorProto.FLOAT, [1, 4, 8, 8])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    write_case(root, "test_conv_relu", model, [x], [conv_relu_reference(x, w, b)])

    graph = helper.make_graph(
        [helper.make_node("Foo", ["x"], ["y"], domain="com.example.custom")],
        "foo",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                    helper.make_opsetid("com.example.custom", 1)])
    write_case(root, "test_foo_custom", model, [x], [x])

# A stand-in for the hios that is coming: `import --freeze NAME=FILE`, `run --input NAME=FILE` and
# `--save-output DIR`. It "imports" a Reshape whose shape must be a constant and runs it with NumPy.
FAKE_HIOS = r"""#!/usr/bin/python3
import json, os, sys
import numpy as np
import onnx
args = sys.argv[1:]
if args == ["--version"]:
    print("fake-hios 0"); sys.exit(0)
if args[1:] == ["--help"]:
    if args[0] == "import":
        print("Options:\n  -o,--output TEXT REQUIRED   The graph JSON to write\n"
              "  --freeze TEXT ...           NAME=FILE.npy: take this input as a constant\n")
    else:
        print("Options:\n  -g,--graph TEXT REQUIRED    Graph JSON\n"
              "  --warmup INT                Untimed passes\n  --number INT  Passes\n  --repeat INT  Repeats\n"
              "  --input TEXT ...            NAME=FILE.npy: one graph input\n"
              "  --save-output TEXT          Write every output to this folder as <name>.npy\n")
    sys.exit(0)
def opt(name):
    return [args[i + 1] for i in range(len(args) - 1) if args[i] == name]
if args[0] == "import":
    model = onnx.load(args[1])
    frozen = dict(f.split("=", 1) for f in opt("--freeze"))
    if "shape" not in frozen:
        sys.stderr.write("hios: error: " + args[1] + ": cannot import 1 node: Reshape 'r' (opset 13): "
                         "input 'shape' must be a constant\n")
        sys.exit(2)
    with open(opt("-o")[0], "w") as f:
        json.dump({"shape": np.load(frozen["shape"]).tolist(), "output": model.graph.output[0].name}, f)
    sys.exit(0)
if args[0] == "run":
    with open(opt("--graph")[0]) as f:
        g = json.load(f)
    inputs = dict(i.split("=", 1) for i in opt("--input"))
    if set(inputs) != {"data"}:
        sys.stderr.write("hios: error: inputs " + ",".join(sorted(inputs)) + ": expected data\n")
        sys.exit(2)
    np.save(os.path.join(opt("--save-output")[0], g["output"] + ".npy"), np.load(inputs["data"]).reshape(g["shape"]))
    sys.exit(0)
sys.exit(3)
"""


def fake_hios_checks(d):
    fake = os.path.join(d, "fake-hios")
    with open(fake, "w") as f:
        f.write(FAKE_HIOS)
    os.chmod(fake, 0o755)
    cases = os.path.join(d, "fake-cases")
    data = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    shape = np.array([4, 6], np.int64)
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["data", "shape"], ["reshaped"], name="r")], "reshape",
        [helper.make_tensor_value_info("data", TensorProto.FLOAT, [2, 3, 4]),
         helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("reshaped", TensorProto.FLOAT, [4, 6])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    write_case(cases, "test_reshape_frozen", model, [data, shape], [data.reshape(4, 6)])
    js = os.path.join(d, "fake.json")
    r = subprocess.run([sys.executable, SCRIPT, "--hios", fake, "--cases-dir", cases, "--json", js,
                        "--markdown", "none"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"fake hios: exit {r.returncode}: {r.stdout} {r.stderr}"
    with open(js) as f:
        row = json.load(f)["cases"][0]
    assert row["status"] == "pass" and row["frozen"] == ["shape"] and row["op"] == "Reshape", row


def harness(*args):
    return subprocess.run([sys.executable, SCRIPT, "--hios", HIOS, *args], capture_output=True, text=True,
                          timeout=300)


def unit_checks():
    assert oc.sanitize("/in:x") == "in.x", oc.sanitize("/in:x")
    assert oc.sanitize("out y") == "out_y"
    assert oc.sanitize("a-b_c.d") == "a-b_c.d"
    assert oc.sanitize("...") == "node" and oc.sanitize("") == "node"
    assert oc.sanitize("é") == "_"
    ok, _, err = oc.compare(np.array([1.0, np.nan, np.inf], np.float32), np.array([1.0, np.nan, np.inf]))
    assert ok and err == 0.0, (ok, err)
    ok, _, _ = oc.compare(np.array([1.0, -np.inf], np.float32), np.array([1.0, np.inf], np.float32))
    assert not ok
    ok, _, err = oc.compare(np.array([1.0005], np.float32), np.array([1.0], np.float32))
    assert ok, err
    ok, _, err = oc.compare(np.array([1.01], np.float32), np.array([1.0], np.float32))
    assert not ok and abs(err - 0.01) < 1e-6, err
    assert oc.compare(np.array([2.0], np.float32), np.array(2.0, np.float32))[0]  # rank 0 as (1,)
    assert not oc.compare(np.zeros((1, 3)), np.zeros((1, 3, 1, 1)))[0]
    assert not oc.compare(np.array([1.0], np.float32), np.array([1], np.int64))[0]  # dtype kind
    assert oc.compare(np.array([1, 2], np.int32), np.array([1, 2], np.int64))[0]
    assert not oc.compare(np.array([1, 3], np.int64), np.array([1, 2], np.int64))[0]
    reason = ("cannot import 2 nodes: Reshape 'r' (opset 13): input 'shape' must be a constant; "
              "Slice 's' (opset 13): input 'starts' must be a constant")
    assert oc.constant_inputs(reason, ["data", "shape", "starts"]) == ["shape", "starts"]
    assert oc.constant_inputs("input 'x' has rank 3", ["x"]) == []


def main():
    unit_checks()
    with tempfile.TemporaryDirectory() as d:
        cases = os.path.join(d, "cases")
        make_cases(cases)
        js, md = os.path.join(d, "r.json"), os.path.join(d, "r.md")
        passlist = os.path.join(d, "pass.txt")
        r = harness("--cases-dir", cases, "--json", js, "--markdown", md, "--write-passlist", passlist)
        assert r.returncode == 0, f"exit {r.returncode}: {r.stdout} {r.stderr}"
        with open(js) as f:
            rows = {row["case"]: row for row in json.load(f)["cases"]}
        assert set(rows) == {"test_conv_relu", "test_foo_custom"}, rows
        conv, foo = rows["test_conv_relu"], rows["test_foo_custom"]
        assert conv["status"] == "pass", conv
        assert conv["ops"] == ["Conv", "Relu"] and conv["op"] == "Conv", conv
        assert conv["max_abs_err"] is not None and conv["max_abs_err"] < 1e-3, conv
        assert foo["status"] == "refused", foo
        assert foo["op"] == "Foo" and foo["reason"] and "\n" not in foo["reason"], foo
        assert cases not in foo["reason"] and "model.onnx" not in foo["reason"], foo  # path prefix stripped
        with open(passlist) as f:
            assert f.read().split() == ["test_conv_relu"]
        with open(md) as f:
            page = f.read()
        assert "do not edit" in page and "scripts/onnx_conformance.py" in page, page
        assert "1 pass / 1 refused / 0 wrong / 0 crash / 0 timeout of 2" in page, page
        assert "| Conv | 1 | 1 | 0 |" in page and "| Foo | 1 | 0 | 1 |" in page, page
        assert "`Conv`" in page.split("## Supported ops")[1].split("##")[0], page

        # --check: the passing case alone is fine; a passlisted case that is refused fails, named.
        r = harness("--cases-dir", cases, "--json", "none", "--markdown", "none", "--check", passlist)
        assert r.returncode == 0, f"--check with a good passlist: exit {r.returncode}: {r.stdout} {r.stderr}"
        stale = os.path.join(d, "stale.txt")
        with open(stale, "w") as f:
            f.write("# passed before\ntest_conv_relu\ntest_foo_custom\n")
        r = harness("--cases-dir", cases, "--json", "none", "--markdown", "none", "--check", stale)
        assert r.returncode == 1, f"--check with a stale passlist: exit {r.returncode}: {r.stdout} {r.stderr}"
        assert "test_foo_custom" in r.stdout and "refused" in r.stdout, r.stdout

        # --cases filters by name.
        r = harness("--cases-dir", cases, "--cases", "conv", "--json", js, "--markdown", "none")
        assert r.returncode == 0, r.stderr
        with open(js) as f:
            assert [row["case"] for row in json.load(f)["cases"]] == ["test_conv_relu"]
        fake_hios_checks(d)
    print("onnx_conformance: ok")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except AssertionError as e:
        print(f"onnx_conformance: FAIL: {e}")
        sys.exit(1)
