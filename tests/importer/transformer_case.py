#!/usr/bin/env python3
"""A small transformer encoder layer as ONNX files, with NumPy's output, for hios import on the
CPU backend (test_transformer.sh). Token ids and a padding mask are int64 graph inputs; the
layer is what PyTorch's exporters write for BERT: embeddings gathered by the ids plus position
embeddings, LayerNorm, multi-head attention (Q/K/V projections, reshape to heads, transposes,
scaled Q.K^T plus the mask's -10000, Softmax over the last axis, the product with V), the
output projection and a residual, LayerNorm, an MLP with GELU and a residual, LayerNorm.

Two forms: opset 13 with LayerNorm written out (ReduceMean, Sub, Pow, Sqrt, Div), GELU in
its erf form and the scores divided by sqrt(d), as the TorchScript exporter writes them; opset 17
with LayerNormalization, GELU in its tanh form, and Q and K^T each times the root of a scale
computed from Q's shape, as that exporter writes scaled_dot_product_attention.

    transformer_case.py OUT_DIR      writes bert13.onnx, bert17.onnx, ids.npy, mask.npy,
                                     expected13.npy, expected17.npy and the refused inputs
"""
import math
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

S, E, HEADS, VOCAB, FF = 16, 64, 4, 100, 128
D = E // HEADS


def erf(x):
    return np.vectorize(math.erf)(x).astype(np.float32)


def build(opset, rng):
    inits, nodes, ref = [], [], {}

    def const(name, a):
        a = np.asarray(a)
        inits.append(nh.from_array(a, name))
        ref[name] = a
        return name

    def weight(name, *shape, scale=0.05):
        return const(name, (rng.standard_normal(shape) * scale).astype(np.float32))

    def node(op, ins, out, **attrs):
        nodes.append(h.make_node(op, ins, [out], **attrs))
        return out

    def layernorm(x, pre, xs):
        g = const(pre + "g", (1 + 0.1 * rng.standard_normal(E)).astype(np.float32))
        b = const(pre + "b", (0.1 * rng.standard_normal(E)).astype(np.float32))
        m = xs.mean(-1, keepdims=True)
        v = ((xs - m) ** 2).mean(-1, keepdims=True)
        ys = (xs - m) / np.sqrt(v + 1e-5) * ref[g] + ref[b]
        if opset >= 17:
            return node("LayerNormalization", [x, g, b], pre + "o", axis=-1, epsilon=1e-5), ys
        mean = node("ReduceMean", [x], pre + "m", axes=[-1])
        d = node("Sub", [x, mean], pre + "d")
        sq = node("Pow", [d, const(pre + "two", np.array(2.0, np.float32))], pre + "sq")
        var = node("ReduceMean", [sq], pre + "v", axes=[-1])
        s = node("Sqrt", [node("Add", [var, const(pre + "eps", np.array(1e-5, np.float32))], pre + "ve")], pre + "s")
        return node("Add", [node("Mul", [node("Div", [d, s], pre + "n"), g], pre + "ng"), b], pre + "o"), ys

    def linear(x, xs, i, o, pre):
        w, b = weight(pre + "w", i, o), weight(pre + "b", o)
        return node("Add", [node("MatMul", [x, w], pre + "mm"), b], pre + "o"), xs @ ref[w] + ref[b]

    ids = rng.integers(0, VOCAB, size=(1, S)).astype(np.int64)
    mask = np.ones((1, S), np.int64)
    mask[0, 12:] = 0
    tok, pos = weight("tok", VOCAB, E, scale=0.5), weight("pos", S, E, scale=0.5)
    x = node("Add", [node("Gather", [tok, "ids"], "tok_e"),
                     node("Gather", [pos, const("pos_ids", np.arange(S, dtype=np.int64).reshape(1, S))], "pos_e")], "emb")
    xs = ref[tok][ids] + ref[pos][np.arange(S).reshape(1, S)]
    x, xs = layernorm(x, "ln0_", xs)
    (q, qs), (k, ks), (v, vs) = (linear(x, xs, E, E, n + "_") for n in "qkv")
    heads = const("heads", np.array([1, S, HEADS, D], np.int64))

    def split(t, n, perm):
        return node("Transpose", [node("Reshape", [t, heads], n + "_r")], n + "_t", perm=perm)

    qh, kh, vh = split(q, "q", [0, 2, 1, 3]), split(k, "k", [0, 2, 3, 1]), split(v, "v", [0, 2, 1, 3])
    qhs = qs.reshape(1, S, HEADS, D).transpose(0, 2, 1, 3)
    khs = ks.reshape(1, S, HEADS, D).transpose(0, 2, 3, 1)
    vhs = vs.reshape(1, S, HEADS, D).transpose(0, 2, 1, 3)
    if opset >= 17:
        # As PyTorch's TorchScript exporter writes scaled_dot_product_attention's default scale:
        # from Q's shape, its root applied to Q and K^T each.
        d = node("Cast", [node("Slice", [node("Shape", [qh], "q_shape"), const("minus1", np.array([-1], np.int64)),
                                         const("int64_max", np.array([2 ** 63 - 1], np.int64))], "q_last")],
                 "q_d", to=T.FLOAT)
        inv = node("Div", [const("one_s", np.array([1.0], np.float32)), node("Sqrt", [d], "q_root")], "q_inv")
        sc = node("Cast", [inv], "q_scale", to=T.FLOAT)
        qk = node("MatMul", [node("Mul", [qh, node("Sqrt", [sc], "root_q")], "q_scaled"),
                             node("Mul", [kh, node("Sqrt", [sc], "root_k")], "k_scaled")], "qk")
        scores = qk
    else:
        scores = node("Div", [node("MatMul", [qh, kh], "qk"), const("scale", np.array(math.sqrt(D), np.float32))], "qk_s")
    maskf = node("Cast", ["mask"], "mask_f", to=T.FLOAT)
    bias = node("Mul", [node("Sub", [const("one", np.array(1.0, np.float32)), maskf], "mask_i"),
                        const("neg", np.array(-10000.0, np.float32))], "mask_b")
    bias = node("Unsqueeze", [bias, const("axes12", np.array([1, 2], np.int64))], "mask_b4")
    probs = node("Softmax", [node("Add", [scores, bias], "qk_m")], "probs", axis=-1)
    ss = qhs @ khs / np.float32(math.sqrt(D)) + ((1 - mask.astype(np.float32)) * -10000.0)[:, None, None, :]
    ps = np.exp(ss - ss.max(-1, keepdims=True))
    ps = ps / ps.sum(-1, keepdims=True)
    ctx = node("Transpose", [node("MatMul", [probs, vh], "ctx")], "ctx_t", perm=[0, 2, 1, 3])
    ctx = node("Reshape", [ctx, const("tokens", np.array([1, S, E], np.int64))], "ctx_r")
    cs = (ps @ vhs).transpose(0, 2, 1, 3).reshape(1, S, E)
    a, as_ = linear(ctx, cs, E, E, "attn_out_")
    x, xs = layernorm(node("Add", [a, x], "res1"), "ln1_", as_ + xs)
    f, fs = linear(x, xs, E, FF, "ff1_")
    if opset >= 17:  # tanh form
        c = math.sqrt(2 / math.pi)
        inner = node("Mul", [node("Add", [f, node("Mul", [const("k044", np.array(0.044715, np.float32)),
                                                          node("Pow", [f, const("three", np.array(3.0, np.float32))], "f3")], "f3k")], "fi"),
                             const("c", np.array(c, np.float32))], "fic")
        g = node("Mul", [node("Mul", [f, const("half", np.array(0.5, np.float32))], "fh"),
                         node("Add", [node("Tanh", [inner], "ft"), const("one_t", np.array(1.0, np.float32))], "ft1")], "gelu")
        gs = 0.5 * fs * (1 + np.tanh(np.float32(c) * (fs + np.float32(0.044715) * fs ** 3)))
    else:  # erf form
        e = node("Erf", [node("Div", [f, const("sqrt2", np.array(math.sqrt(2), np.float32))], "fd")], "fe")
        g = node("Mul", [node("Mul", [f, node("Add", [e, const("one_e", np.array(1.0, np.float32))], "fe1")], "fm"),
                         const("half", np.array(0.5, np.float32))], "gelu")
        gs = fs * (erf(fs / np.float32(math.sqrt(2))) + 1) * 0.5
    f2, f2s = linear(g, gs, FF, E, "ff2_")
    x, xs = layernorm(node("Add", [f2, x], "res2"), "ln2_", f2s + xs)
    node("Identity", [x], "hidden")
    graph = h.make_graph(nodes, "tiny_bert%d" % opset,
                         [h.make_tensor_value_info("ids", T.INT64, [1, S]), h.make_tensor_value_info("mask", T.INT64, [1, S])],
                         [h.make_tensor_value_info("hidden", T.FLOAT, [1, S, E])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model, ids, mask, xs.astype(np.float32)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for opset in (13, 17):
        model, ids, mask, expected = build(opset, np.random.default_rng(opset))
        onnx.save(model, os.path.join(out, "bert%d.onnx" % opset))
        np.save(os.path.join(out, "expected%d.npy" % opset), expected)
        np.save(os.path.join(out, "ids%d.npy" % opset), ids)
        np.save(os.path.join(out, "mask%d.npy" % opset), mask)
    bad = ids.copy()
    bad[0, 3] = VOCAB + 50
    np.save(os.path.join(out, "ids-out-of-vocabulary.npy"), bad)
    neg = ids.copy()
    neg[0, 5] = -VOCAB - 1
    np.save(os.path.join(out, "ids-negative.npy"), neg)
    np.save(os.path.join(out, "ids-too-long.npy"), np.zeros((1, 2 * S), np.int64))
    np.save(os.path.join(out, "mask-wrong-shape.npy"), np.ones((1, S // 2), np.int64))
    np.save(os.path.join(out, "mask-float.npy"), np.ones((1, S), np.float32))


if __name__ == "__main__":
    main()
