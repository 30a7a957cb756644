#!/usr/bin/env python3
"""Small ONNX models for `hios import`'s tests, each with an input and the output NumPy computes.

  python3 onnx_cases.py OUTDIR

writes, per case, OUTDIR/CASE.onnx (CASE.onnx.data for the external-data case), CASE.input.npy
and CASE.expected.npy. The expected output comes from a float64 NumPy evaluation of the ONNX
graph itself (`evaluate` below), independent of hios. Needs the onnx and numpy packages
(Debian: python3-onnx).

Cases:
  branchy   opset 13, the older exporter's style: Conv+BN+Relu, a zero Pad before a conv,
            asymmetric zero padding before a conv, -inf padding before a max pool, a cropping Pad,
            max and average pools (count_include_pad 0, ceil_mode), Concat, a per-channel Mul
            and Add, a residual Add, shape arithmetic (Shape, Gather, Unsqueeze, Concat,
            Reshape), Dropout, Identity, Gemm, Softmax
  dynamo    opset 18, the dynamo exporter's style: BatchNormalization left for the importer,
            a depthwise conv, Clip to [0, 6] (ReLU6), ReduceMean with axes as an input, Reshape to [1, -1], Gemm; weights as external data
  more      opset 17: auto_pad SAME_UPPER with stride 2, Sigmoid, Tanh, Sub and Div by
            constants, GlobalMaxPool, Slice, Cast and Squeeze in shape arithmetic, MatMul + Add
  unsupported  three nodes hios cannot import, on separate branches
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.RandomState(7)


def t(name, a):
    return numpy_helper.from_array(np.asarray(a), name)


def randn(*shape, scale=0.3):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def bn_params(prefix, c):
    return [t(prefix + ".g", rng.uniform(0.5, 1.5, c).astype(np.float32)),
            t(prefix + ".b", randn(c)),
            t(prefix + ".m", randn(c)),
            t(prefix + ".v", rng.uniform(0.5, 1.5, c).astype(np.float32))]


def branchy():
    inits, nodes = [], []
    def conv(name, x, w, b=None, **kw):
        inits.append(t(name + ".w", w))
        ins = [x, name + ".w"]
        if b is not None:
            inits.append(t(name + ".bias", b))
            ins.append(name + ".bias")
        nodes.append(helper.make_node("Conv", ins, [name], name=name, **kw))
        return name
    def bn(name, x, c):
        inits.extend(bn_params(name, c))
        nodes.append(helper.make_node("BatchNormalization", [x, name + ".g", name + ".b", name + ".m", name + ".v"],
                                      [name], name=name, epsilon=1e-3))
        return name
    def op(kind, ins, name, **kw):
        nodes.append(helper.make_node(kind, ins, [name], name=name, **kw))
        return name
    c1 = op("Relu", [bn("stem.bn", conv("stem.conv", "x", randn(8, 3, 3, 3), strides=[2, 2], pads=[1, 1, 1, 1]), 8)], "stem.relu")
    b1 = op("Relu", [conv("b1.conv", c1, randn(4, 8, 1, 1), randn(4))], "b1.relu")
    inits.append(t("b2.pads", np.array([0, 0, 1, 1, 0, 0, 1, 1], dtype=np.int64)))
    p = op("Pad", [c1, "b2.pads"], "b2.pad")
    b2 = op("Relu", [bn("b2.bn", conv("b2.conv", p, randn(6, 8, 3, 3)), 6)], "b2.relu")
    b3 = op("MaxPool", [c1], "b3.pool", kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
    b4 = op("AveragePool", [c1], "b4.pool", kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1], count_include_pad=0)
    # Padding hios's ops cannot take in: more below than above (TensorFlow's "same"), -inf
    # before a max pool, and a negative pad that crops (shifts the image up and left).
    inits.append(t("b5.pads", np.array([0, 0, 0, 0, 0, 0, 2, 2], dtype=np.int64)))
    b5 = conv("b5.conv", op("Pad", [c1, "b5.pads"], "b5.pad"), randn(4, 8, 3, 3), randn(4))
    inits.append(t("b6.pads", np.array([0, 0, 0, 0, 0, 0, 2, 2], dtype=np.int64)))
    inits.append(t("minus_inf", np.array(-np.inf, dtype=np.float32)))
    b6 = op("MaxPool", [op("Pad", [c1, "b6.pads", "minus_inf"], "b6.pad")], "b6.pool", kernel_shape=[3, 3])
    inits.append(t("b7.pads", np.array([0, 0, -1, -1, 0, 0, 1, 1], dtype=np.int64)))
    b7 = op("Pad", [c1, "b7.pads"], "b7.crop")
    cat = op("Concat", [b1, b2, b3, b4, b5, b6, b7], "cat", axis=1)
    inits.append(t("scale", rng.uniform(0.5, 1.5, (1, 46, 1, 1)).astype(np.float32)))
    inits.append(t("shift", randn(46, 1, 1)))
    a = op("Add", [op("Mul", [cat, "scale"], "scaled"), "shift"], "shifted")
    r = conv("res.conv", a, randn(46, 46, 1, 1), randn(46))
    s = op("Relu", [op("Add", [r, a], "res.add")], "res.relu")
    mp = op("MaxPool", [s], "pool2", kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)
    g = op("GlobalAveragePool", [mp], "gap")
    shape = op("Shape", [g], "gap.shape")
    inits.append(t("zero", np.array(0, dtype=np.int64)))
    inits.append(t("axes0", np.array([0], dtype=np.int64)))
    inits.append(t("minus1", np.array([-1], dtype=np.int64)))
    n = op("Unsqueeze", [op("Gather", [shape, "zero"], "gap.n", axis=0), "axes0"], "gap.n1")
    flat = op("Reshape", [g, op("Concat", [n, "minus1"], "gap.target", axis=0)], "flat")
    d = op("Identity", [op("Dropout", [flat], "drop")], "ident")
    inits.append(t("fc.w", randn(10, 46)))
    inits.append(t("fc.b", randn(10)))
    fc = op("Gemm", [d, "fc.w", "fc.b"], "fc", transB=1, alpha=0.5)
    op("Softmax", [fc], "prob", axis=1)
    graph = helper.make_graph(nodes, "branchy", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 19, 19])],
                              [helper.make_tensor_value_info("prob", TensorProto.FLOAT, [1, 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), (1, 3, 19, 19)


def resnet():
    """Skip connections as ResNet and MobileNet export them (and MobileNetV3's hard-swish after a
    convolution, which becomes its epilogue): a bottleneck whose sum feeds a ReLU, a
    downsampling bottleneck whose shortcut convolution comes after the main branch's last one, and
    a sum with no activation read by two nodes; each Add goes into the epilogue of the convolution
    before it."""
    inits, nodes = [], []
    def conv(name, x, cin, cout, k=1, s=1):
        inits.append(t(name + ".w", randn(cout, cin, k, k)))
        nodes.append(helper.make_node("Conv", [x, name + ".w"], [name], name=name, strides=[s, s],
                                      pads=[k // 2] * 4))
        inits.extend(bn_params(name + ".bn", cout))
        nodes.append(helper.make_node("BatchNormalization", [name] + [name + ".bn" + p for p in (".g", ".b", ".m", ".v")],
                                      [name + ".bn"], name=name + ".bn"))
        return name + ".bn"
    def op(kind, ins, name, **kw):
        nodes.append(helper.make_node(kind, ins, [name], name=name, **kw))
        return name
    stem = op("Relu", [conv("stem", "x", 3, 8, 3, 2)], "stem.relu")
    a = op("Relu", [conv("a1", stem, 8, 4)], "a1.relu")
    a = op("HardSwish", [conv("a2", a, 4, 4, 3)], "a2.hswish")  # MobileNetV3's: the conv's epilogue too
    b1 = op("Relu", [op("Add", [conv("a3", a, 4, 8), stem], "a.add")], "a.relu")
    d = op("Relu", [conv("d1", b1, 8, 4)], "d1.relu")
    d = op("Relu", [conv("d2", d, 4, 4, 3, 2)], "d2.relu")
    main = conv("d3", d, 4, 16)
    b2 = op("Relu", [op("Add", [main, conv("down", b1, 8, 16, 1, 2)], "d.add")], "d.relu")
    m = op("Add", [b2, conv("m1", b2, 16, 16, 3)], "m.add")
    o = op("Add", [conv("m2", m, 16, 16), m], "m2.add")
    g = op("GlobalAveragePool", [o], "gap")
    inits.append(t("shape", np.array([1, 16], dtype=np.int64)))
    inits.append(t("fc.w", randn(5, 16)))
    inits.append(t("fc.b", randn(5)))
    op("Gemm", [op("Reshape", [g, "shape"], "flat"), "fc.w", "fc.b"], "fc", transB=1)
    graph = helper.make_graph(nodes, "resnet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 20, 20])],
                              [helper.make_tensor_value_info("fc", TensorProto.FLOAT, [1, 5])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), (1, 3, 20, 20)


def dynamo():
    inits, nodes = [], []
    inits.append(t("conv.w", randn(16, 3, 3, 3)))
    nodes.append(helper.make_node("Conv", ["x", "conv.w"], ["c"], name="node_Conv_0", pads=[1, 1, 1, 1]))
    inits.extend(bn_params("bn", 16))
    nodes.append(helper.make_node("BatchNormalization", ["c", "bn.g", "bn.b", "bn.m", "bn.v"], ["n"], name="node_bn"))
    nodes.append(helper.make_node("Relu", ["n"], ["r"], name="node_relu"))
    inits.append(t("dw.w", randn(16, 1, 3, 3)))
    nodes.append(helper.make_node("Conv", ["r", "dw.w"], ["dw"], name="node_dw", group=16, pads=[1, 1, 1, 1], strides=[2, 2]))
    inits.extend([t("zero", np.array(0, np.float32)), t("six", np.array(6, np.float32))])
    nodes.append(helper.make_node("Clip", ["dw", "zero", "six"], ["dw6"], name="node_hardtanh"))
    inits.append(t("axes", np.array([-1, -2], dtype=np.int64)))
    nodes.append(helper.make_node("ReduceMean", ["dw6", "axes"], ["mean"], name="node_mean", keepdims=1))
    inits.append(t("shape", np.array([1, -1], dtype=np.int64)))
    nodes.append(helper.make_node("Reshape", ["mean", "shape"], ["flat"], name="node_view"))
    inits.append(t("fc.w", randn(5, 16)))
    inits.append(t("fc.b", randn(5)))
    nodes.append(helper.make_node("Gemm", ["flat", "fc.w", "fc.b"], ["y"], name="node_linear", transB=1))
    graph = helper.make_graph(nodes, "main_graph", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 24, 20])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), (1, 3, 24, 20)


def more():
    """opset 17: auto_pad SAME_UPPER with stride 2 (one row more below), Sigmoid, Tanh, Sub and
    Div by constants, GlobalMaxPool, shape arithmetic through Slice, Cast and Squeeze, MatMul
    plus Add as a linear layer."""
    inits = [t("w", randn(6, 4, 3, 3)), t("w1", randn(6, 6, 1, 1)), t("sub", randn(6, 1, 1)),
             t("two", np.array(2.0, np.float32)), t("mm", randn(6, 3)), t("bias", randn(3)),
             t("s0", np.array([0], np.int64)), t("s1", np.array([1], np.int64)), t("m1", np.array([-1], np.int64)),
             t("ax0", np.array([0], np.int64))]
    n = helper.make_node
    nodes = [n("Conv", ["x", "w"], ["a"], name="same_conv", auto_pad="SAME_UPPER", strides=[2, 2]),
             n("Sigmoid", ["a"], ["b"], name="sig"),
             n("Conv", ["b", "w1"], ["c0"], name="pw"),
             n("Tanh", ["c0"], ["c"], name="tanh"),
             n("Sub", ["c", "sub"], ["d"], name="minus"),
             n("Div", ["d", "two"], ["e"], name="half"),
             n("GlobalMaxPool", ["e"], ["g"], name="gmp"),
             n("Shape", ["g"], ["sh"], name="shape"),
             n("Slice", ["sh", "s0", "s1"], ["n1"], name="batch_of"),
             n("Cast", ["n1"], ["n1c"], name="cast", to=TensorProto.INT64),
             n("Squeeze", ["n1c", "ax0"], ["n0"], name="squeeze"),
             n("Unsqueeze", ["n0", "ax0"], ["n2"], name="unsqueeze"),
             n("Concat", ["n2", "m1"], ["target"], name="target", axis=0),
             n("Reshape", ["g", "target"], ["flat"], name="flatten"),
             n("MatMul", ["flat", "mm"], ["h"], name="matmul"),
             n("Add", ["h", "bias"], ["y"], name="plus_bias")]
    graph = helper.make_graph(nodes, "more", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 10, 10])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), (1, 4, 10, 10)


def segnet():
    """opset 13, a small U-Net with two heads, for the toolkit on a segmentation network (no NumPy
    reference: the sweep verifies its schedules against the sequential run): a max-pooled
    encoder, a transposed-conv upsampling and a linear Resize by scales (so the file imports at
    any even size), skips concatenated, a sigmoid mask at full size and coarse logits."""
    c = 8
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["e1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["e1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["e2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["e2"], ["r2"]),
        helper.make_node("MaxPool", ["r2"], ["p2"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p2", "w3", "b3"], ["e3"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["e3"], ["r3"]),
        helper.make_node("Conv", ["r3", "wa", "ba"], ["aux"], kernel_shape=[1, 1]),
        helper.make_node("ConvTranspose", ["r3", "wt", "bt"], ["u2"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Concat", ["u2", "r2"], ["k2"], axis=1),
        helper.make_node("Conv", ["k2", "w4", "b4"], ["d2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["d2"], ["s2"]),
        helper.make_node("Resize", ["s2", "", "scales"], ["u1"], mode="linear", coordinate_transformation_mode="half_pixel"),
        helper.make_node("Concat", ["u1", "r1"], ["k1"], axis=1),
        helper.make_node("Conv", ["k1", "w5", "b5"], ["d1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["d1"], ["s1"]),
        helper.make_node("Conv", ["s1", "w6", "b6"], ["logit"], kernel_shape=[1, 1]),
        helper.make_node("Sigmoid", ["logit"], ["mask"]),
    ]
    init = [t("w1", randn(c, 3, 3, 3)), t("b1", randn(c)), t("w2", randn(2 * c, c, 3, 3)), t("b2", randn(2 * c)),
            t("w3", randn(2 * c, 2 * c, 3, 3)), t("b3", randn(2 * c)), t("wa", randn(3, 2 * c, 1, 1)), t("ba", randn(3)),
            t("wt", randn(2 * c, c, 2, 2)), t("bt", randn(c)), t("w4", randn(c, 3 * c, 3, 3)), t("b4", randn(c)),
            t("scales", np.array([1, 1, 2, 2], np.float32)), t("w5", randn(c, 2 * c, 3, 3)), t("b5", randn(c)),
            t("w6", randn(1, c, 1, 1)), t("b6", randn(1))]
    graph = helper.make_graph(nodes, "segnet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, 1, 16, 16]),
                               helper.make_tensor_value_info("aux", TensorProto.FLOAT, [1, 3, 4, 4])], init)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), (1, 3, 16, 16)


def unsupported():
    inits = [t("w", randn(4, 3, 3, 3)), t("w2", randn(4, 4, 3, 3)), t("lo", np.array(-1, np.float32)),
             t("hi", np.array(1, np.float32)), t("pads", np.array([0, 0, 0, 0, 0, 0, 1, 1], np.int64)),
             t("one", np.array(1, np.float32))]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("LpNormalization", ["c"], ["a"], name="leaky"),
             helper.make_node("Unique", ["c"], ["b"], name="hardtanh"),
             helper.make_node("Pad", ["c", "pads", "one"], ["p"], name="pad_with_ones", mode="wrap"),
             helper.make_node("Conv", ["p", "w2"], ["d"], name="after_pad"),
             helper.make_node("Concat", ["a", "b", "d"], ["y"], name="cat", axis=1)]
    graph = helper.make_graph(nodes, "unsupported", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 12, 8, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), (1, 3, 8, 8)


# --- a float64 NumPy evaluation of the ops above ---------------------------------------------

def attrs_of(node):
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def conv_ref(x, w, b, a):
    s, d = a.get("strides", [1, 1]), a.get("dilations", [1, 1])
    p, g = a.get("pads", [0, 0, 0, 0]), a.get("group", 1)
    if a.get("auto_pad", b"NOTSET") in (b"SAME_UPPER", "SAME_UPPER"):
        p = [0, 0, 0, 0]
        for k in range(2):
            size = x.shape[2 + k]
            total = max(0, (-(-size // s[k]) - 1) * s[k] + d[k] * (w.shape[2 + k] - 1) + 1 - size)
            p[k], p[k + 2] = total // 2, total - total // 2
    x = np.pad(x, ((0, 0), (0, 0), (p[0], p[2]), (p[1], p[3])))
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh, ow = (h - d[0] * (kh - 1) - 1) // s[0] + 1, (wd - d[1] * (kw - 1) - 1) // s[1] + 1
    out = np.zeros((n, o, oh, ow))
    og = o // g
    for gi in range(g):
        xs, ws = x[:, gi * cg:(gi + 1) * cg], w[gi * og:(gi + 1) * og]
        for ky in range(kh):
            for kx in range(kw):
                patch = xs[:, :, ky * d[0]:ky * d[0] + s[0] * (oh - 1) + 1:s[0], kx * d[1]:kx * d[1] + s[1] * (ow - 1) + 1:s[1]]
                out[:, gi * og:(gi + 1) * og] += np.einsum("nchw,oc->nohw", patch, ws[:, :, ky, kx])
    return out + (b.reshape(1, -1, 1, 1) if b is not None else 0)


def pool_ref(x, a, kind):
    k, s, p = a["kernel_shape"], a.get("strides", [1, 1]), a.get("pads", [0, 0, 0, 0])
    n, c, h, w = x.shape
    def size(i, d):
        span = i + p[d] + p[d + 2] - k[d]
        o = (-(-span // s[d]) if a.get("ceil_mode", 0) else span // s[d]) + 1
        if a.get("ceil_mode", 0) and (o - 1) * s[d] >= i + p[d]:
            o -= 1
        return o
    oh, ow = size(h, 0), size(w, 1)
    out = np.zeros((n, c, oh, ow))
    for y in range(oh):
        for xx in range(ow):
            y0, x0 = y * s[0] - p[0], xx * s[1] - p[1]
            ys, xs = slice(max(y0, 0), min(y0 + k[0], h)), slice(max(x0, 0), min(x0 + k[1], w))
            win = x[:, :, ys, xs]
            if kind == "max":
                out[:, :, y, xx] = win.max(axis=(2, 3))
            else:
                inside = win.shape[2] * win.shape[3]
                full = (min(y0 + k[0], h + p[2]) - y0) * (min(x0 + k[1], w + p[3]) - x0)
                out[:, :, y, xx] = win.sum(axis=(2, 3)) / (full if a.get("count_include_pad", 0) else inside)
    return out


def evaluate(model, x):
    v = {i.name: numpy_helper.to_array(i).astype(np.float64) if numpy_helper.to_array(i).dtype.kind == "f"
         else numpy_helper.to_array(i) for i in model.graph.initializer}
    v[model.graph.input[0].name] = x.astype(np.float64)
    for node in model.graph.node:
        a, i = attrs_of(node), [v[n] if n else None for n in node.input]
        op = node.op_type
        if op == "Conv":
            r = conv_ref(i[0], i[1], i[2] if len(i) > 2 else None, a)
        elif op == "BatchNormalization":
            sh = (1, -1, 1, 1)
            r = (i[0] - i[3].reshape(sh)) / np.sqrt(i[4].reshape(sh) + a.get("epsilon", 1e-5)) * i[1].reshape(sh) + i[2].reshape(sh)
        elif op == "Relu":
            r = np.maximum(i[0], 0)
        elif op == "HardSwish":
            r = i[0] * np.clip(i[0] / 6 + 0.5, 0, 1)
        elif op == "Sigmoid":
            r = 1 / (1 + np.exp(-i[0]))
        elif op == "Tanh":
            r = np.tanh(i[0])
        elif op in ("Sub", "Div", "MatMul"):
            r = i[0] - i[1] if op == "Sub" else i[0] / i[1] if op == "Div" else i[0] @ i[1]
        elif op == "GlobalMaxPool":
            r = i[0].max(axis=(2, 3), keepdims=True)
        elif op == "Slice":
            r = i[0][int(i[1][0]):int(i[2][0])]
        elif op == "Cast":
            r = i[0].astype(np.int64)
        elif op == "Squeeze":
            r = np.squeeze(i[0], axis=tuple(int(d) for d in i[1]))
        elif op == "Clip":
            r = np.clip(i[0], i[1], i[2])
        elif op == "Pad":
            pads, value = i[1], (float(i[2]) if len(i) > 2 and i[2] is not None else 0.0)
            r = np.pad(i[0], [(max(pads[d], 0), max(pads[d + 4], 0)) for d in range(4)], constant_values=value)
            r = r[tuple(slice(-min(pads[d], 0), r.shape[d] + min(pads[d + 4], 0)) for d in range(4))]
        elif op in ("MaxPool", "AveragePool"):
            r = pool_ref(i[0], a, "max" if op == "MaxPool" else "avg")
        elif op == "GlobalAveragePool":
            r = i[0].mean(axis=(2, 3), keepdims=True)
        elif op == "ReduceMean":
            r = i[0].mean(axis=tuple(int(d) for d in i[1]), keepdims=bool(a.get("keepdims", 1)))
        elif op == "Concat":
            r = np.concatenate(i, axis=a["axis"])
        elif op in ("Add", "Mul"):
            r = i[0] + i[1] if op == "Add" else i[0] * i[1]
        elif op == "Shape":
            r = np.array(i[0].shape, dtype=np.int64)
        elif op == "Gather":
            r = np.take(i[0], i[1], axis=a.get("axis", 0))
        elif op == "Unsqueeze":
            r = np.expand_dims(i[0], tuple(int(d) for d in i[1]))
        elif op == "Reshape":
            r = i[0].reshape([int(d) for d in i[1]])
        elif op in ("Dropout", "Identity"):
            r = i[0]
        elif op == "Gemm":
            w = i[1].T if a.get("transB", 0) else i[1]
            r = a.get("alpha", 1.0) * i[0] @ w + a.get("beta", 1.0) * i[2]
        elif op == "Softmax":
            e = np.exp(i[0] - i[0].max(axis=a.get("axis", -1), keepdims=True))
            r = e / e.sum(axis=a.get("axis", -1), keepdims=True)
        else:
            raise SystemExit(f"onnx_cases.py: no reference for {op}")
        v[node.output[0]] = r
    return v[model.graph.output[0].name]


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, build in (("branchy", branchy), ("dynamo", dynamo), ("more", more), ("unsupported", unsupported),
                        ("segnet", segnet), ("resnet", resnet)):
        model, shape = build()
        if name != "dynamo" or onnx.defs.onnx_opset_version() >= 18:  # Debian's onnx 1.12 stops at opset 17
            onnx.checker.check_model(model)
        path = os.path.join(out, name + ".onnx")
        x = rng.standard_normal(shape).astype(np.float32)
        np.save(os.path.join(out, name + ".input.npy"), x)
        if name not in ("unsupported", "segnet"):  # before saving: saving as external data empties the tensors
            np.save(os.path.join(out, name + ".expected.npy"), evaluate(model, x).astype(np.float32))
        if name == "dynamo":
            onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                            location=name + ".onnx.data", size_threshold=0)
        else:
            onnx.save_model(model, path)
    print(f"wrote {out}: branchy, dynamo, more, unsupported, segnet, resnet")


if __name__ == "__main__":
    main()
