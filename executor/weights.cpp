#include "executor/weights.hpp"

#include "graph/elements.hpp"
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

namespace {

// One op's parameter sizes: the fan-in of one output, the outputs, and whether it has a bias.
// make_op_params and node_param_counts both read them here, so a count can never disagree
// with the values built.
struct ParamDims {
  int64_t fan_in = 0, outputs = 0;
  bool bias = false;
  int64_t bias_outputs = -1;  // the bias's length where it is not `outputs` (a transposed conv's)
  int64_t biases() const { return bias ? (bias_outputs >= 0 ? bias_outputs : outputs) : 0; }
};
ParamDims param_dims(const Op& op, const Shape& in) {
  if (op.kind == OpKind::ConvTranspose) {
    // [in][out / groups][kh][kw]: "outputs" are the input channels, each scattering a patch.
    const ConvTransposeAttrs& a = op.as<ConvTransposeAttrs>();
    return {(a.out_channels / a.groups) * a.kernel[0] * a.kernel[1], in.c, a.bias, a.out_channels};
  }
  if (op.kind == OpKind::Conv) {
    const ConvAttrs& a = op.conv();
    return {(in.c / a.groups) * a.kernel[0] * a.kernel[1], a.out_channels, a.bias};
  }
  if (op.kind == OpKind::Linear) {
    const LinearAttrs& a = op.linear();
    return {in.c * in.h * in.w, a.out_features, a.bias};
  }
  return {};
}

// Calls f(op, its input shape, its index) for every parameterised op of node v (the node's own
// op, or each step of a sequential, steps without parameters included).
template <class F>
void for_each_param_op(const Graph& g, int v, F&& f) {
  const Node& nd = g.nodes[v];
  if (nd.op.kind == OpKind::Conv || nd.op.kind == OpKind::Linear || nd.op.kind == OpKind::ConvTranspose) {
    f(nd.op, assembled_input_shape(g, v), -1);
  } else if (nd.op.kind == OpKind::Sequential) {
    Shape cur = assembled_input_shape(g, v);
    InferContext ctx{nd.name, cur.n, cur.h, cur.w};
    const auto& steps = nd.op.sequential().steps;
    for (size_t i = 0; i < steps.size(); ++i) {
      f(steps[i], cur, int(i));
      cur = infer_op(steps[i], {cur}, ctx);
    }
  }
}

}  // namespace

OpParams make_op_params(const Op& op, const Shape& in, const std::string& prefix, uint64_t seed) {
  OpParams p;
  const ParamDims d = param_dims(op, in);
  if (d.outputs == 0) return p;
  const float bound = init::weight_bound(double(d.fan_in));
  p.weight = uniform_values(seed, prefix + ".weight", d.outputs * d.fan_in, bound);
  if (d.bias) p.bias = uniform_values(seed, prefix + ".bias", d.biases(), init::kBiasBound);
  return p;
}

Shape assembled_input_shape(const Graph& g, int v) {
  const Node& nd = g.nodes[v];
  HIOS_CHECK(!nd.inputs.empty() && !nd.inputs[0].empty(), "node '%s' has no input to assemble", nd.name.c_str());
  Shape s = g.value_shape(nd.inputs[0][0]);
  if (op_def(nd.op.kind).terms_are_operands) return s;
  s.c = 0;
  for (size_t t = 0; t < nd.input_terms(); ++t) s.c += g.value_shape(nd.inputs[t][0]).c;
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
  } else if (op.kind == OpKind::ConvTranspose) {
    // cuDNN's NHWC filter for the backward-data convolution: [in][kh][kw][out / groups].
    const ConvTransposeAttrs& a = op.as<ConvTransposeAttrs>();
    p.weight = nchw_to_nhwc(p.weight, Shape{in.c, a.out_channels / a.groups, a.kernel[0], a.kernel[1]});
  } else if (op.kind == OpKind::Linear && in.h * in.w > 1) {
    p.weight = nchw_to_nhwc(p.weight, Shape{op.linear().out_features, in.c, in.h, in.w});
  }
}

}  // namespace

namespace {

// Parameters of `op` named `prefix` from a weights file: "<prefix>.weight" (and ".bias" when the
// op has one), with the element counts make_op_params would give.
OpParams file_op_params(const Graph& g, const std::map<std::string, TensorEntry>& file, const Op& op, const Shape& in,
                        const std::string& prefix) {
  OpParams p;
  const ParamDims d = param_dims(op, in);
  if (d.outputs == 0) return p;
  auto take = [&](const std::string& name, int64_t count) {
    auto it = file.find(name);
    HIOS_CHECK(it != file.end(), "%s: no tensor '%s' (graph '%s' needs one of %lld values)", g.weights.c_str(),
               name.c_str(), g.name.c_str(), (long long)count);
    HIOS_CHECK(int64_t(it->second.values.size()) == count, "%s: tensor '%s' holds %zu values, graph '%s' needs %lld",
               g.weights.c_str(), name.c_str(), it->second.values.size(), g.name.c_str(), (long long)count);
    return it->second.values;
  };
  p.weight = take(prefix + ".weight", d.outputs * d.fan_in);
  if (d.bias) p.bias = take(prefix + ".bias", d.biases());
  return p;
}

}  // namespace

std::vector<OpParams> make_node_params(const Graph& g, int v, uint64_t seed, Layout layout) {
  std::vector<OpParams> out;
  const std::string& owner = g.nodes[v].params_name();
  std::shared_ptr<const std::map<std::string, TensorEntry>> file;
  if (!g.weights.empty()) file = load_safetensors(g.weights);
  for_each_param_op(g, v, [&](const Op& op, const Shape& in, int step) {
    const std::string prefix = step < 0 ? owner : owner + ".steps[" + std::to_string(step) + "]";
    out.push_back(file ? file_op_params(g, *file, op, in, prefix) : make_op_params(op, in, prefix, seed));
    reorder_for_layout(op, in, layout, out.back());
  });
  return out;
}

std::vector<std::vector<uint8_t>> make_node_constants(const Graph& g, int v, uint64_t seed) {
  const Node& nd = g.nodes[size_t(v)];
  std::vector<std::vector<uint8_t>> out;
  std::shared_ptr<const std::map<std::string, TensorEntry>> file;
  for (const Constant& c : nd.constants) {
    const int64_t count = c.shape.numel();
    const DType storage = is_float(c.dtype) ? DType::F32 : c.dtype;
    std::vector<uint8_t> bytes(size_t(count) * dtype_size(storage));
    if (!c.data.empty()) {
      convert_elements(c.data.data(), c.dtype, bytes.data(), storage, count);
      out.push_back(std::move(bytes));
      continue;
    }
    const std::string name = nd.params_name() + ".c" + std::to_string(c.operand);
    HIOS_CHECK(is_float(c.dtype) || !g.weights.empty(),
               "node '%s': constant operand %d is %s and has no values (integer constants are given inline or in a "
               "weights file)", nd.name.c_str(), c.operand, dtype_name(c.dtype));
    std::vector<float> values;
    if (!g.weights.empty()) {
      if (!file) file = load_safetensors(g.weights);
      auto it = file->find(name);
      HIOS_CHECK(it != file->end(), "%s: no tensor '%s' for constant operand %d of node '%s' in graph '%s'",
                 g.weights.c_str(), name.c_str(), c.operand, nd.name.c_str(), g.name.c_str());
      HIOS_CHECK(int64_t(it->second.values.size()) == count, "%s: tensor '%s' has %zu values, node '%s' needs %lld",
                 g.weights.c_str(), name.c_str(), it->second.values.size(), nd.name.c_str(), (long long)count);
      values = it->second.values;
    } else {
      values = uniform_values(seed, name, count, init::kInputBound);
    }
    convert_elements(values.data(), DType::F32, bytes.data(), storage, count);
    out.push_back(std::move(bytes));
  }
  return out;
}

std::map<std::string, TensorEntry> seeded_weight_tensors(const Graph& g, uint64_t seed) {
  std::map<std::string, TensorEntry> out;
  for (int v = g.first_computed(); v < g.size(); ++v) {
    const std::string& owner = g.nodes[size_t(v)].params_name();
    for_each_param_op(g, v, [&](const Op& op, const Shape& in, int step) {
      const std::string prefix = step < 0 ? owner : owner + ".steps[" + std::to_string(step) + "]";
      if (out.count(prefix + ".weight")) return;  // a split's parts share their node's
      OpParams p = make_op_params(op, in, prefix, seed);
      if (p.weight.empty()) return;
      const ParamDims d = param_dims(op, in);
      std::vector<int64_t> shape{d.outputs, d.fan_in};
      if (op.kind == OpKind::Conv) {
        const ConvAttrs& a = op.conv();
        shape = {a.out_channels, in.c / a.groups, a.kernel[0], a.kernel[1]};
      } else if (op.kind == OpKind::ConvTranspose) {
        const ConvTransposeAttrs& a = op.as<ConvTransposeAttrs>();
        shape = {in.c, a.out_channels / a.groups, a.kernel[0], a.kernel[1]};
      }
      out[prefix + ".weight"] = TensorEntry{shape, std::move(p.weight)};
      if (!p.bias.empty()) out[prefix + ".bias"] = TensorEntry{{d.biases()}, std::move(p.bias)};
    });
  }
  return out;
}

std::vector<std::pair<int64_t, int64_t>> node_param_counts(const Graph& g, int v) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for_each_param_op(g, v, [&](const Op& op, const Shape& in, int) {
    const ParamDims d = param_dims(op, in);
    out.emplace_back(d.outputs * d.fan_in, d.biases());
  });
  return out;
}

std::string shape_variant_problem(const Graph& a, const Graph& b) {
  if (a.size() != b.size()) {
    return strprintf("graph '%s' has %d nodes and '%s' %d: not the same model at another shape", b.name.c_str(),
                     b.size(), a.name.c_str(), a.size());
  }
  for (int v = 0; v < a.size(); ++v) {
    const Node &x = a.nodes[size_t(v)], &y = b.nodes[size_t(v)];
    if (x.name != y.name || x.op.kind != y.op.kind) {
      return strprintf("node %d is '%s' (%s) in '%s' but '%s' (%s) in '%s': not the same model at another shape", v,
                       x.name.c_str(), op_def(x.op.kind).name, a.name.c_str(), y.name.c_str(), op_def(y.op.kind).name,
                       b.name.c_str());
    }
    if (node_param_counts(a, v) != node_param_counts(b, v)) {
      return strprintf("node '%s' has other parameter counts at %lldx%lldx%lld than at %lldx%lldx%lld (its weights "
                       "depend on the image size)",
                       x.name.c_str(), (long long)b.batch, (long long)b.height, (long long)b.width, (long long)a.batch,
                       (long long)a.height, (long long)a.width);
    }
  }
  return "";
}

}  // namespace hios::exec
