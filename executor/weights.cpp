#include "executor/weights.hpp"

#include "graph/error.hpp"

namespace hios::exec {

static std::vector<float> uniform_values(uint64_t seed, const std::string& name, int64_t count, float bound) {
  std::vector<float> v(static_cast<size_t>(count));
  uint64_t key = init::tensor_key(seed, name);
  for (int64_t i = 0; i < count; ++i) v[i] = init::uniform(key, static_cast<uint64_t>(i)) * bound;
  return v;
}

std::vector<float> make_input(const Graph& g, uint64_t seed) {
  const Node& in = g.nodes[g.input()];
  return uniform_values(seed, in.name + ".value", in.shape.numel(), init::kInputBound);
}

OpParams make_op_params(const Op& op, const Shape& in, const std::string& prefix, uint64_t seed) {
  OpParams p;
  if (op.kind == OpKind::Conv) {
    const ConvAttrs& a = op.conv();
    int64_t per_out = (in.c / a.groups) * a.kernel[0] * a.kernel[1];
    p.weight = uniform_values(seed, prefix + ".weight", a.out_channels * per_out,
                              init::weight_bound(double(per_out)));
    if (a.bias) p.bias = uniform_values(seed, prefix + ".bias", a.out_channels, init::kBiasBound);
  } else if (op.kind == OpKind::Linear) {
    const LinearAttrs& a = op.linear();
    int64_t fan_in = in.c * in.h * in.w;
    p.weight = uniform_values(seed, prefix + ".weight", a.out_features * fan_in, init::weight_bound(double(fan_in)));
    if (a.bias) p.bias = uniform_values(seed, prefix + ".bias", a.out_features, init::kBiasBound);
  }
  return p;
}

Shape assembled_input_shape(const Graph& g, int v) {
  const Node& nd = g.nodes[v];
  HIOS_CHECK(!nd.inputs.empty() && !nd.inputs[0].empty(), "node '%s' has no input to assemble", nd.name.c_str());
  Shape s = g.value_shape(nd.inputs[0][0]);
  if (op_def(nd.op.kind).terms_are_operands) return s;
  s.c = 0;
  for (const Term& t : nd.inputs) s.c += g.value_shape(t[0]).c;
  return s;
}

namespace {

// Both reorderings are the NCHW -> NHWC permutation of the weight seen as a 4-d tensor:
// (out, in/groups, kh, kw) for a convolution, (out, C, H, W) for a linear layer.
void reorder_for_layout(const Op& op, const Shape& in, Layout layout, OpParams& p) {
  if (layout == Layout::Nchw || p.weight.empty()) return;
  if (op.kind == OpKind::Conv) {
    const ConvAttrs& a = op.conv();
    p.weight = nchw_to_nhwc(p.weight, Shape{a.out_channels, in.c / a.groups, a.kernel[0], a.kernel[1]});
  } else if (op.kind == OpKind::Linear && in.h * in.w > 1) {
    p.weight = nchw_to_nhwc(p.weight, Shape{op.linear().out_features, in.c, in.h, in.w});
  }
}

}  // namespace

std::vector<OpParams> make_node_params(const Graph& g, int v, uint64_t seed, Layout layout) {
  const Node& nd = g.nodes[v];
  std::vector<OpParams> out;
  if (nd.op.kind == OpKind::Conv || nd.op.kind == OpKind::Linear) {
    const Shape in = assembled_input_shape(g, v);
    out.push_back(make_op_params(nd.op, in, nd.params_name(), seed));
    reorder_for_layout(nd.op, in, layout, out.back());
  } else if (nd.op.kind == OpKind::Sequential) {
    Shape cur = assembled_input_shape(g, v);
    InferContext ctx{nd.name, cur.n, cur.h, cur.w};
    const auto& steps = nd.op.sequential().steps;
    for (size_t i = 0; i < steps.size(); ++i) {
      out.push_back(make_op_params(steps[i], cur, nd.params_name() + ".steps[" + std::to_string(i) + "]", seed));
      reorder_for_layout(steps[i], cur, layout, out.back());
      cur = infer_op(steps[i], {cur}, ctx);
    }
  }
  return out;
}

}  // namespace hios::exec
