// Rewrites of an ONNX graph before import: the patterns exporters write out in primitives that
// hios runs as one op. Today: GELU in its erf form, 0.5 * x * (1 + erf(x / sqrt(2))) (PyTorch's
// TorchScript exporter writes it so for nn.GELU), and in its tanh form, 0.5 * x * (1 +
// tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))) (GPT-2's), each of which becomes one Gelu node,
// and so one activation on every backend instead of five to nine element-wise passes.
#pragma once

#include "importer/onnx_model.hpp"

namespace hios::importer {

// Rewrites `g` in place; returns how many GELUs it fused. Linear in the graph's size.
int fuse_patterns(onnx::GraphProto& g);

}  // namespace hios::importer
