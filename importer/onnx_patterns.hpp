// Rewrites of an ONNX graph before import: the patterns exporters write out in primitives that
// hios runs as one op. Today: GELU in its erf form, 0.5 * x * (1 + erf(x / sqrt(2))) (PyTorch's
// TorchScript exporter writes it so for nn.GELU), and in its tanh form, 0.5 * x * (1 +
// tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))) (GPT-2's), each of which becomes one Gelu node,
// and so one activation on every backend instead of five to nine element-wise passes; and layer
// norm written out as the TorchScript exporter writes nn.LayerNorm (ReduceMean, Sub, Pow,
// ReduceMean, Add, Sqrt, Div, Mul, Add), which becomes one LayerNormalization node, and so one
// norm node (graph/ops.hpp, NormAttrs) instead of nine; and attention, softmax(scale * Q K^T +
// mask) V with K^T a transpose and the scale a Mul or Div by a constant (on the product, or on
// Q and K^T each, as the SDPA decomposition writes it), which becomes ONNX's Attention, and so
// one attention node instead of four to seven.
#pragma once

#include "importer/onnx_model.hpp"

namespace hios::importer {

// Rewrites `g` in place; returns how many of each it fused. Linear in the graph's size.
struct PatternCounts {
  int gelus = 0;
  int layer_norms = 0;
  int attentions = 0;
};
PatternCounts fuse_patterns(onnx::GraphProto& g);

}  // namespace hios::importer
