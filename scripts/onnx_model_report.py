#!/usr/bin/python3
"""Print a short structural report of an ONNX model.

Usage: /usr/bin/python3 scripts/onnx_model_report.py MODEL.onnx [--markdown]

Prints the opset imports, producer (and graph name and metadata, which say
where a model came from when producer_name is empty), graph inputs and outputs (with their
dims and element types), a count of initializers by element type, and a
histogram of op types over the main graph and every subgraph (If/Loop/Scan
bodies). Only the onnx package is needed (Debian's python3-onnx 1.12 works);
the model's weights are read but nothing is executed.

With --markdown the same facts are printed as Markdown tables, ready to paste
into docs/data/trained-models/README.md.
"""

import collections
import os
import signal
import sys

import onnx
from onnx import TensorProto


def elem_type_name(code):
    try:
        return TensorProto.DataType.Name(code).lower()
    except ValueError:
        return "type%d" % code


def describe_value_info(vi):
    t = vi.type
    kind = t.WhichOneof("value")
    if kind != "tensor_type":
        return vi.name, kind or "?", "?"
    tt = t.tensor_type
    dims = []
    if tt.HasField("shape"):
        for d in tt.shape.dim:
            if d.HasField("dim_value"):
                dims.append(str(d.dim_value))
            elif d.HasField("dim_param"):
                dims.append(d.dim_param)
            else:
                dims.append("?")
        shape = "[" + ", ".join(dims) + "]"
    else:
        shape = "(unranked)"
    return vi.name, elem_type_name(tt.elem_type), shape


def walk_graphs(graph):
    """Yield graph and every subgraph nested in its nodes' attributes."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from walk_graphs(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from walk_graphs(g)


def walk_nodes(graph):
    """Yield every node of graph and of any subgraph inside its attributes."""
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from walk_nodes(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from walk_nodes(g)


def numel(dims):
    n = 1
    for d in dims:
        n *= d
    return n


def collect(path):
    model = onnx.load(path)
    g = model.graph
    init_names = {t.name for t in g.initializer}
    info = {
        "file": os.path.basename(path),
        "bytes": os.path.getsize(path),
        "ir_version": model.ir_version,
        "producer": "%s %s" % (model.producer_name or "(none)",
                               model.producer_version or ""),
        "graph_name": g.name,
        "metadata": [(p.key, p.value) for p in model.metadata_props],
        "opsets": [(o.domain or "ai.onnx", o.version) for o in model.opset_import],
        "inputs": [describe_value_info(v) for v in g.input if v.name not in init_names],
        "outputs": [describe_value_info(v) for v in g.output],
    }
    counts = collections.Counter()
    params = collections.Counter()
    for sub in walk_graphs(g):
        for t in sub.initializer:
            name = elem_type_name(t.data_type)
            counts[name] += 1
            params[name] += numel(t.dims)
    # Some exporters (paddle2onnx among them) store the weights as Constant
    # nodes instead of initializers: count those tensors too.
    const_counts = collections.Counter()
    const_params = collections.Counter()
    ops = collections.Counter()
    for node in walk_nodes(g):
        key = node.op_type if node.domain in ("", "ai.onnx") else "%s:%s" % (node.domain, node.op_type)
        ops[key] += 1
        if node.op_type == "Constant":
            for a in node.attribute:
                if a.type == onnx.AttributeProto.TENSOR:
                    const_counts[elem_type_name(a.t.data_type)] += 1
                    const_params[elem_type_name(a.t.data_type)] += numel(a.t.dims)
    info["initializers"] = counts
    info["init_params"] = params
    info["constants"] = const_counts
    info["const_params"] = const_params
    info["ops"] = ops
    info["nodes"] = sum(ops.values())
    return info


def print_text(info):
    print("file:        %s (%d bytes)" % (info["file"], info["bytes"]))
    print("producer:    %s" % info["producer"].strip())
    print("graph name:  %s" % (info["graph_name"] or "(none)"))
    for k, v in info["metadata"]:
        print("metadata:    %s = %s" % (k, v if len(v) <= 80 else v[:77] + "..."))
    print("ir_version:  %d" % info["ir_version"])
    print("opset:       %s" % ", ".join("%s %d" % o for o in info["opsets"]))
    print("inputs:")
    for name, typ, shape in info["inputs"]:
        print("  %-30s %-8s %s" % (name, typ, shape))
    print("outputs:")
    for name, typ, shape in info["outputs"]:
        print("  %-30s %-8s %s" % (name, typ, shape))
    print("initializers by dtype (subgraphs included):")
    if not info["initializers"]:
        print("  (none)")
    for typ, n in sorted(info["initializers"].items()):
        print("  %-10s %5d tensors %12d elements" % (typ, n, info["init_params"][typ]))
    if info["constants"]:
        print("Constant-node tensors by dtype:")
        for typ, n in sorted(info["constants"].items()):
            print("  %-10s %5d tensors %12d elements" % (typ, n, info["const_params"][typ]))
    print("ops (%d nodes, %d types):" % (info["nodes"], len(info["ops"])))
    for op, n in sorted(info["ops"].items(), key=lambda kv: (-kv[1], kv[0])):
        print("  %-28s %5d" % (op, n))


def plural(n, word):
    return "%d %s%s" % (n, word, "" if n == 1 else "s")


def print_markdown(info):
    print("- file: `%s` (%d bytes)" % (info["file"], info["bytes"]))
    print("- producer: `%s`; graph name `%s`" % (info["producer"].strip(), info["graph_name"]))
    print("- opset: %s; IR version %d" % (
        ", ".join("%s %d" % o for o in info["opsets"]), info["ir_version"]))
    inits = ", ".join("%s: %s / %d elements" % (t, plural(n, "tensor"), info["init_params"][t])
                      for t, n in sorted(info["initializers"].items())) or "none"
    print("- initializers: %s" % inits)
    if info["constants"]:
        print("- Constant-node tensors: %s" % ", ".join(
            "%s: %s / %d elements" % (t, plural(n, "tensor"), info["const_params"][t])
            for t, n in sorted(info["constants"].items())))
    print()
    print("| | name | type | dims |")
    print("| --- | --- | --- | --- |")
    for name, typ, shape in info["inputs"]:
        print("| input | `%s` | %s | %s |" % (name, typ, shape))
    for name, typ, shape in info["outputs"]:
        print("| output | `%s` | %s | %s |" % (name, typ, shape))
    print()
    print("Ops (%d nodes, %d types): " % (info["nodes"], len(info["ops"])) + ", ".join(
        "%s %d" % kv for kv in sorted(info["ops"].items(), key=lambda kv: (-kv[1], kv[0]))))


def main(argv):
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet under `| head`
    args = [a for a in argv[1:] if not a.startswith("--")]
    flags = [a for a in argv[1:] if a.startswith("--")]
    if len(args) != 1 or any(f not in ("--markdown",) for f in flags):
        sys.stderr.write("usage: %s MODEL.onnx [--markdown]\n" % argv[0])
        return 2
    info = collect(args[0])
    if "--markdown" in flags:
        print_markdown(info)
    else:
        print_text(info)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
