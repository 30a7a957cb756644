// Constant folding: a node whose inputs are all constant is evaluated at import time. The
// older PyTorch exporter writes padding and reshape targets as shape arithmetic (Shape,
// Gather, Unsqueeze, Concat, Slice, Cast, Div, ...), thousands of nodes for NASNet; hios
// needs only their results.
#pragma once

#include <string>
#include <vector>

#include "importer/onnx_model.hpp"

namespace hios::importer {

// Evaluates `n`, whose inputs `in` are all constant (a missing optional input is nullptr).
// Returns false, with the reason in `why`, for an op it does not evaluate.
bool fold_constant_node(const OnnxModel& m, const onnx::NodeProto& n, const std::vector<const ConstTensor*>& in,
                        std::vector<ConstTensor>& out, std::string& why);

}  // namespace hios::importer
