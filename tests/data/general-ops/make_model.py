#!/usr/bin/python3
"""Writes general-ops.onnx: one small model reaching every general op family the CUDA backend runs
(resize, broadcasting binaries, reductions, transposes, reshapes across layouts, softmax on the
last axis, slices, concats, gathers, casts, extended activations) and a grouped transposed
convolution, with several outputs.

    /usr/bin/python3 tests/data/general-ops/make_model.py tests/data/general-ops/general-ops.onnx
    build/cli/hios import tests/data/general-ops/general-ops.onnx -o tests/data/general-ops/general-ops.json

The graph JSON and its weights are committed: the GPU machine has no ONNX importer.
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(20261202)
C, H, W = 6, 10, 14
inits, nodes = [], []


def const(name, values, dtype=np.float32):
    inits.append(numpy_helper.from_array(np.asarray(values, dtype=dtype), name))
    return name


def node(op, ins, out, **attrs):
    nodes.append(helper.make_node(op, ins, [out], name=out, **attrs))
    return out


x = "image"
w = const("w", rng.uniform(-0.5, 0.5, (C, 3, 3, 3)))
b = const("b", rng.uniform(-0.1, 0.1, (C,)))
a = node("Conv", [x, w, b], "conv", pads=[1, 1, 1, 1])
up = node("Resize", [a, "", const("up_scales", [1, 1, 2, 2])], "up_linear", mode="linear",
          coordinate_transformation_mode="half_pixel")
near = node("Resize", [a, "", const("near_scales", [1, 1, 2, 2])], "up_nearest", mode="nearest")
ct = node("ConvTranspose", [a, const("wt", rng.uniform(-0.5, 0.5, (C, C // 2, 3, 3))), const("bt", rng.uniform(-0.1, 0.1, (C,)))],
          "deconv", strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1], group=2)
s = node("Add", [node("Add", [up, near], "sum2"), ct], "sum")
s = node("Add", [s, const("shift", rng.uniform(-1, 1, (C, 1, 1)))], "shifted")
hs = node("HardSwish", [s], "hswish")
g = node("ReduceMean", [hs], "gap", axes=[2, 3], keepdims=1)
g = node("HardSigmoid", [g], "gate", alpha=0.2, beta=0.5)
se = node("Mul", [hs, g], "excite")
d = node("Div", [se, const("two", [2.0])], "half")
d = node("Max", [d, node("Neg", [d], "negated")], "absval")
d = node("Pow", [node("Add", [d, const("one", [1.0])], "plus_one"), const("p", [1.5])], "power")
t = node("Transpose", [d], "nhwc", perm=[0, 2, 3, 1])
r = node("Reshape", [t, const("tokens_shape", [1, -1, C], np.int64)], "tokens")
sm = node("Softmax", [r], "attn", axis=-1)
ln_mean = node("ReduceMean", [r], "ln_mean", axes=[-1], keepdims=1)
ln_c = node("Sub", [r, ln_mean], "ln_centered")
ln_v = node("ReduceMean", [node("Mul", [ln_c, ln_c], "ln_sq")], "ln_var", axes=[-1], keepdims=1)
ln = node("Div", [ln_c, node("Sqrt", [node("Add", [ln_v, const("eps", [1e-5])], "ln_var_eps")], "ln_std")], "ln")
ln = node("Mul", [ln, const("ln_w", rng.uniform(0.5, 1.5, (C,)))], "ln_scaled")
back = node("Reshape", [ln, const("image_shape", [1, 2 * H, 2 * W, C], np.int64)], "ln_image")
back = node("Transpose", [back], "ln_nchw", perm=[0, 3, 1, 2])
sl = node("Slice", [back, const("starts", [1, 0], np.int64), const("ends", [C, 100], np.int64),
                    const("axes", [1, 3], np.int64), const("steps", [2, 3], np.int64)], "sliced")
gath = node("Gather", [back, const("pick", [4, 0, -1], np.int64)], "gathered", axis=1)
cat = node("Concat", [sl, node("Slice", [gath, const("s0", [0], np.int64), const("e0", [10], np.int64),
                                          const("a0", [3], np.int64), const("st0", [1], np.int64)], "gathered_cut")],
           "joined", axis=1)
cat = node("Cast", [node("Cast", [cat], "as_half", to=TensorProto.FLOAT16)], "as_float", to=TensorProto.FLOAT)
ex = node("Expand", [node("ReduceMax", [sm], "attn_max", axes=[1], keepdims=1), const("ex_shape", [1, 4, C], np.int64)],
          "expanded")
out = [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n, shape in
       ((cat, [1, 6, 2 * H, 10]), (ex, [1, 4, C]), ("attn", [1, 4 * H * W, C]))]
graph = helper.make_graph(nodes, "general_ops", [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 3, H, W])],
                          out, inits)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
onnx.checker.check_model(model)
onnx.save(model, sys.argv[1])
