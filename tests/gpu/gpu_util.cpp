#include "tests/gpu/gpu_util.hpp"

#include <cmath>

#include "executor/cpu/kernels.hpp"
#include "executor/cpu/tensor_kernels.hpp"
#include "executor/weights.hpp"
#include "graph/error.hpp"

namespace hios::gputest {

std::string Error::str() const {
  return strprintf("rel %.3g, max abs %.3g, |ref| %.3g%s", rel, max_abs, ref_norm, finite ? "" : ", NOT FINITE");
}

Error compare(const std::vector<float>& got, const std::vector<float>& ref) {
  Error e;
  HIOS_CHECK(got.size() == ref.size(), "compare: %zu values against %zu", got.size(), ref.size());
  double diff2 = 0, ref2 = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) e.finite = false;
    const double d = double(got[i]) - double(ref[i]);
    diff2 += d * d;
    ref2 += double(ref[i]) * double(ref[i]);
    e.max_abs = std::max(e.max_abs, std::fabs(d));
  }
  e.ref_norm = std::sqrt(ref2);
  e.rel = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
  if (!e.finite) e.rel = INFINITY;
  return e;
}

std::vector<float> random_values(int64_t count, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(count));
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<float> cpu_node(const Graph& g, int v, const std::vector<std::vector<float>>& values, uint64_t seed) {
  const Node& nd = g.nodes[size_t(v)];
  if (op_def(nd.op.kind).general) {
    // A general op (binary, resize, ...) takes its operands and constants in operand order,
    // as the CPU backend gives them; a float graph keeps every value in float32.
    HIOS_CHECK(is_float(nd.dtype), "cpu_node: %s is not a float tensor", nd.name.c_str());
    const std::vector<std::vector<uint8_t>> constants = exec::make_node_constants(g, v, seed);
    std::vector<exec::cpu::TensorArg> args;
    size_t term = 0, constant = 0;
    for (int k = 0; k < nd.operands(); ++k) {
      if (const Constant* c = nd.constant(k)) {
        args.push_back({constants[constant++].data(), c->shape, exec::cpu::storage_type(c->dtype)});
      } else {
        const Value& src = nd.inputs[term++][0];
        args.push_back({values[size_t(src.node)].data(), g.nodes[size_t(src.node)].shape, DType::F32});
      }
    }
    std::vector<float> y(static_cast<size_t>(nd.shape.numel()));
    exec::cpu::run_tensor_op(nd.op, args, {y.data(), nd.shape, DType::F32});
    return y;
  }
  std::vector<const float*> in;
  std::vector<Shape> shapes;
  std::vector<std::vector<float>> assembled;
  if (exec::cpu::reads_one_whole_tensor(g, v)) {
    const int p = nd.inputs[0][0].node;
    in.push_back(values[size_t(p)].data());
    shapes.push_back(g.nodes[size_t(p)].shape);
  } else {
    std::vector<const float*> producers;
    for (const Term& t : nd.inputs) {
      for (const Value& val : t) producers.push_back(values[size_t(val.node)].data());
    }
    exec::cpu::assemble_terms(g, v, producers, assembled);
    const bool operands = op_def(nd.op.kind).terms_are_operands;
    for (size_t i = 0; i < assembled.size(); ++i) {
      in.push_back(assembled[i].data());
      // A residual convolution's second buffer is its residual, of the output's shape.
      shapes.push_back(operands ? g.value_shape(nd.inputs[i][0]) : i == 0 ? exec::assembled_input_shape(g, v) : nd.shape);
    }
  }
  const std::vector<exec::OpParams> params = exec::make_node_params(g, v, seed);
  std::vector<exec::cpu::OpParamsView> views;
  for (const exec::OpParams& p : params) {
    views.push_back({p.weight.empty() ? nullptr : p.weight.data(), p.bias.empty() ? nullptr : p.bias.data()});
  }
  std::vector<float> y(static_cast<size_t>(nd.shape.numel()));
  exec::cpu::Scratch scratch;
  exec::cpu::run_op(nd.op, in, shapes, nd.shape, y.data(), views, scratch);
  return y;
}

std::vector<std::vector<float>> cpu_forward(const Graph& g, uint64_t seed) {
  std::vector<std::vector<float>> values(size_t(g.size()));
  values[size_t(g.input())] = exec::make_input(g, seed);
  for (int v = 0; v < g.size(); ++v) {
    if (v != g.input()) values[size_t(v)] = cpu_node(g, v, values, seed);
  }
  return values;
}

OpGraph make_op_graph(int64_t batch, int64_t h, int64_t w, const std::vector<int64_t>& producer_channels,
                      const std::function<Value(GraphBuilder&, const std::vector<Value>&)>& body) {
  GraphBuilder b("op_test", batch, h, w);
  Value x = b.input(3);
  b.begin_block("b");
  std::vector<Value> prods;
  for (size_t i = 0; i < producer_channels.size(); ++i) {
    prods.push_back(b.conv(strprintf("p%zu", i), {x}, producer_channels[i], 1, 1, 0, Activation::None));
  }
  Value out = body(b, prods);
  b.end_block(out);
  OpGraph og;
  og.g = b.finish();
  og.node = og.g.find(og.g.nodes[size_t(out.node)].name);
  for (size_t i = 0; i < producer_channels.size(); ++i) og.producers.push_back(og.g.find(strprintf("p%zu", i)));
  return og;
}

OpCheck check_op(const OpGraph& og, cuda::MathMode math, std::mt19937& rng, cuda::ConvImpl conv_impl,
                 cuda::PhaseSplit phase_split, cuda::ChannelPad channel_pad) {
  std::vector<std::vector<float>> values(size_t(og.g.size()));
  for (int p : og.producers) values[size_t(p)] = random_values(og.g.nodes[size_t(p)].shape.numel(), rng);
  cuda::SingleGpuOptions opts;
  opts.math = math;
  opts.conv_impl = conv_impl;
  opts.phase_split = phase_split;
  opts.channel_pad = channel_pad;
  OpCheck c;
  c.cpu = cpu_node(og.g, og.node, values);
  bool first = true;
  for (exec::Layout l : kLayouts) {
    opts.layout = l;
    std::vector<float> gpu = cuda::run_single_node(og.g, og.node, values, opts);
    const Error e = compare(gpu, c.cpu);
    if (first || !e.finite || (c.err.finite && e.rel > c.err.rel)) {
      c.err = e;
      c.gpu = std::move(gpu);
      c.layout = l;
    }
    first = false;
  }
  return c;
}

std::string OpCheck::str() const { return err.str() + " (worse layout " + exec::layout_name(layout) + ")"; }

double op_tolerance(OpKind kind, cuda::MathMode math) {
  // 16-bit storage rounds the inputs, the weights and the output of every op, whatever it is:
  // a unit roundoff of 4.9e-4 (fp16) or 3.9e-3 (bf16) per element, norm-wise about half that.
  if (math == cuda::MathMode::Fp16) return 3e-3;
  if (math == cuda::MathMode::Bf16) return 2e-2;
  switch (kind) {
    case OpKind::Conv:
    case OpKind::Sequential:
      // fp32: cuDNN's FFT and Winograd algorithms are fp32 algorithms too (PyTorch runs them);
      // cudnnFind picks them by timing, so by chance, and they land near 3e-4.
      return math == cuda::MathMode::Tf32 ? 4e-3 : 1e-3;
    case OpKind::Linear:
      // One row runs as an fp32 matrix-vector kernel; more rows run as one cuBLAS product, on
      // TF32 tensor cores in --math tf32 (inputs rounded to 10 mantissa bits, 4.9e-4 unit roundoff).
      return math == cuda::MathMode::Tf32 ? 2e-3 : 2e-5;
    default:
      return 2e-6;
  }
}

}  // namespace hios::gputest
