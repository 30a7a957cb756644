#include "graph/relu_fold.hpp"

namespace hios {

namespace {

bool is_relu(const Op& op) { return op.kind == OpKind::Activation && op.act().activation == Activation::Relu; }

// A convolution whose activation may become relu without changing anything else it does.
bool conv_can_end_in_relu(const Op& op) {
  return op.kind == OpKind::Conv &&
         (op.conv().activation == Activation::None || op.conv().activation == Activation::Relu);
}

}  // namespace

bool can_end_in_relu(const Op& op, size_t values) {
  switch (op.kind) {
    case OpKind::Identity: return values > 1;
    case OpKind::Conv: return conv_can_end_in_relu(op);
    case OpKind::Sequential: {
      const auto& steps = op.sequential().steps;
      return !steps.empty() && (conv_can_end_in_relu(steps.back()) || is_relu(steps.back()));
    }
    default: return false;
  }
}

Op with_output_relu(const Op& op) {
  Op out = op;
  if (out.kind == OpKind::Conv) {
    ConvAttrs a = out.conv();
    a.activation = Activation::Relu;
    out.attrs = a;
  } else if (out.kind == OpKind::Sequential) {
    SequentialAttrs s = out.sequential();
    s.steps.back() = with_output_relu(s.steps.back());  // a ReLU step stays as it is
    out.attrs = s;
  }
  return out;
}

bool starts_with_relu(const Op& op) {
  if (is_relu(op)) return true;
  return op.kind == OpKind::Sequential && !op.sequential().steps.empty() && is_relu(op.sequential().steps.front());
}

std::vector<bool> nodes_storing_relu(const Graph& g, bool fold) {
  std::vector<bool> stores(size_t(g.size()), false);
  if (!fold) return stores;
  const std::vector<std::vector<int>> readers = g.successors();
  for (int v = 0; v < g.size(); ++v) {
    const Node& nd = g.nodes[size_t(v)];
    if (v == g.input() || v == g.output() || readers[size_t(v)].empty()) continue;
    size_t values = 0;
    for (const Term& t : nd.inputs) values += t.size();
    if (!can_end_in_relu(nd.op, values)) continue;
    bool all = true;
    for (int r : readers[size_t(v)]) {
      const Node& rd = g.nodes[size_t(r)];
      all = all && rd.inputs.size() == 1 && rd.inputs[0].size() == 1 && rd.inputs[0][0].node == v &&
            starts_with_relu(rd.op);
    }
    stores[size_t(v)] = all;
  }
  return stores;
}

}  // namespace hios
