// The ONNX importer's converters onto the general tensor ops (graph/ops_tensor.cpp): every op
// of any rank and element type that the convolution-network handlers (onnx_ops.cpp) do not
// take. One small converter per ONNX op with its opset forms; ops ONNX defines as compositions
// (LayerNormalization, Tile, DepthToSpace, Pad's reflect mode, ...) become a few general nodes.
// What an op needs known at import (a Reshape's shape, a Slice's starts) must be a constant,
// and the refusal says so naming the input.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>

#include "graph/elements.hpp"
#include "graph/error.hpp"
#include "graph/ops_tensor.hpp"
#include "importer/onnx_general_ops.hpp"

namespace hios::importer::detail {

// Constants up to this many elements, and every integer or bool one, are written inline in the
// graph JSON; larger float ones go to the weights file.
constexpr int64_t kInlineFloats = 16;

Importer::Operand Importer::const_operand(ConstTensor c, DType t) {
  Operand o;
  o.constant = std::move(c);
  o.dtype = t;
  return o;
}

Importer::Operand Importer::operand(const std::string& nm) {
  const OnnxValue& v = values_.at(nm);
  if (v.constant) return const_operand(*v.constant, const_dtype(*v.constant));
  apply_pending_pad(nm);
  Live& l = *values_.at(nm).live;
  if (l.flat) {
    // A Flatten the convolution handlers left for a linear layer: a real [N, C*H*W] tensor here.
    Operand x;
    x.value = materialize(l, nm);
    Op r = make_op(OpKind::Reshape);
    std::get<ReshapeAttrs>(r.attrs).dims = {0, -1};  // [N, C*H*W], whatever the batch
    l = node_live(general_node(nm + ".flat", r, {x}));
  }
  Operand o;
  o.value = materialize(l, nm);
  return o;
}

Shape Importer::operand_shape(const Operand& o) const {
  return o.constant ? Shape::of(o.constant->dims) : nodes_[size_t(o.value.node)].shape;
}
DType Importer::operand_dtype(const Operand& o) const {
  return o.constant ? o.dtype : nodes_[size_t(o.value.node)].dtype;
}

int Importer::general_node(const std::string& raw, Op op, const std::vector<Operand>& operands) {
  Pending p;
  p.name = unique_name(raw);
  p.op = std::move(op);
  for (size_t k = 0; k < operands.size(); ++k) {
    const Operand& o = operands[k];
    if (!o.constant) {
      p.inputs.push_back({o.value});
      continue;
    }
    add_constant_operand(p, int(k), o);
  }
  return add_node(std::move(p));
}

void Importer::add_constant_operand(Pending& p, int k, const Operand& o) {
  const ConstTensor& c = *o.constant;
  if (c.dims.size() > size_t(kMaxRank)) refused("a constant of rank over 8");
  for (int64_t d : c.dims) {
    if (d <= 0) refused("a constant with an empty dim (hios tensors have no zero-size dims)");
  }
  Constant k2;
  k2.operand = k;
  k2.shape = Shape::of(c.dims);
  k2.dtype = o.dtype;
  const int64_t n = c.numel();
  if (!is_float(o.dtype) || n <= kInlineFloats) {
    k2.data.resize(size_t(n) * dtype_size(o.dtype));
    for (int64_t i = 0; i < n; ++i) {
      if (c.integer && !is_float(o.dtype)) store_int(k2.data.data(), o.dtype, i, c.i[size_t(i)]);
      else store_double(k2.data.data(), o.dtype, i, c.at(i));
    }
  } else {
    p.stored_constants[k] = c.integer ? std::vector<float>(c.i.begin(), c.i.end()) : c.f;
  }
  p.constants.push_back(std::move(k2));
}

void Importer::set_general(const std::string& onnx_name, int idx) { values_[onnx_name].live = node_live(idx); }

// ---------------------------------------------------------------------------------------------

bool Importer::general(const onnx::NodeProto& n) {
  using F = std::function<void(GeneralOps&)>;
  auto act = [](Activation a, const char* alpha = nullptr, double da = 0, const char* beta = nullptr, double db = 0) {
    return F([=](GeneralOps& g) {
      g.unary(a, alpha ? g.at.f(alpha, float(da)) : da, beta ? g.at.f(beta, float(db)) : db, g.in(0));
    });
  };
  auto bin = [](BinaryFn f) { return F([=](GeneralOps& g) { g.binary(f, g.in(0), g.in(1)); }); };
  auto red = [](ReduceFn f) { return F([=](GeneralOps& g) { g.reduce_op(f); }); };
  static const std::map<std::string, F> table = {
      {"Relu", act(Activation::Relu)},
      {"Sigmoid", act(Activation::Sigmoid)},
      {"Tanh", act(Activation::Tanh)},
      {"LeakyRelu", act(Activation::LeakyRelu, "alpha", 0.01)},
      {"Elu", act(Activation::Elu, "alpha", 1.0)},
      {"Selu", act(Activation::Selu, "alpha", 1.67326319217681884765625, "gamma", 1.05070102214813232421875)},
      {"Celu", act(Activation::Celu, "alpha", 1.0)},
      {"HardSigmoid", act(Activation::HardSigmoid, "alpha", 0.2, "beta", 0.5)},
      {"HardSwish", act(Activation::HardSwish)},
      {"Softplus", act(Activation::Softplus)},
      {"Softsign", act(Activation::Softsign)},
      {"Erf", act(Activation::Erf)},
      {"Mish", act(Activation::Mish)},
      {"Exp", act(Activation::Exp)},
      {"Log", act(Activation::Log)},
      {"Sqrt", act(Activation::Sqrt)},
      {"Reciprocal", act(Activation::Reciprocal)},
      {"Abs", act(Activation::Abs)},
      {"Neg", act(Activation::Neg)},
      {"Floor", act(Activation::Floor)},
      {"Ceil", act(Activation::Ceil)},
      {"Round", act(Activation::Round)},
      {"Sign", act(Activation::Sign)},
      {"Sin", act(Activation::Sin)},
      {"Cos", act(Activation::Cos)},
      {"Tan", act(Activation::Tan)},
      {"Asin", act(Activation::Asin)},
      {"Acos", act(Activation::Acos)},
      {"Atan", act(Activation::Atan)},
      {"Sinh", act(Activation::Sinh)},
      {"Cosh", act(Activation::Cosh)},
      {"Asinh", act(Activation::Asinh)},
      {"Acosh", act(Activation::Acosh)},
      {"Atanh", act(Activation::Atanh)},
      {"Not", act(Activation::Not)},
      {"IsNaN", act(Activation::IsNan)},
      {"IsInf", act(Activation::IsInf, "detect_positive", 1, "detect_negative", 1)},
      {"ThresholdedRelu", act(Activation::ThresholdedRelu, "alpha", 1.0)},
      {"Shrink", act(Activation::Shrink, "lambd", 0.5, "bias", 0.0)},
      {"Gelu", F([](GeneralOps& g) {
         g.unary(g.at.s("approximate", "none") == "tanh" ? Activation::GeluTanh : Activation::Gelu, 0, 0, g.in(0));
       })},
      {"Clip", F([](GeneralOps& g) { g.clip(); })},
      {"Add", F([](GeneralOps& g) {
         if (!g.bias_into_matmul()) g.binary(BinaryFn::Add, g.in(0), g.in(1));
       })},
      {"Sub", bin(BinaryFn::Sub)},
      {"Mul", bin(BinaryFn::Mul)},
      {"Div", bin(BinaryFn::Div)},
      {"Pow", bin(BinaryFn::Pow)},
      {"Equal", bin(BinaryFn::Equal)},
      {"Less", bin(BinaryFn::Less)},
      {"LessOrEqual", bin(BinaryFn::LessEqual)},
      {"Greater", bin(BinaryFn::Greater)},
      {"GreaterOrEqual", bin(BinaryFn::GreaterEqual)},
      {"And", bin(BinaryFn::And)},
      {"Or", bin(BinaryFn::Or)},
      {"Xor", bin(BinaryFn::Xor)},
      {"PRelu", bin(BinaryFn::PRelu)},
      {"BitwiseAnd", bin(BinaryFn::BitAnd)},
      {"BitwiseOr", bin(BinaryFn::BitOr)},
      {"BitwiseXor", bin(BinaryFn::BitXor)},
      {"Mod", F([](GeneralOps& g) { g.binary(g.at.i("fmod", 0) ? BinaryFn::FMod : BinaryFn::Mod, g.in(0), g.in(1)); })},
      {"BitShift", F([](GeneralOps& g) {
         g.binary(g.at.s("direction", "") == "LEFT" ? BinaryFn::ShiftLeft : BinaryFn::ShiftRight, g.in(0), g.in(1));
       })},
      {"Sum", F([](GeneralOps& g) { g.variadic(BinaryFn::Add, false); })},
      {"Max", F([](GeneralOps& g) { g.variadic(BinaryFn::Max, false); })},
      {"Min", F([](GeneralOps& g) { g.variadic(BinaryFn::Min, false); })},
      {"Mean", F([](GeneralOps& g) { g.variadic(BinaryFn::Add, true); })},
      {"Where", F([](GeneralOps& g) { g.where(); })},
      {"ReduceSum", red(ReduceFn::Sum)},
      {"ReduceMean", red(ReduceFn::Mean)},
      {"ReduceMax", red(ReduceFn::Max)},
      {"ReduceMin", red(ReduceFn::Min)},
      {"ReduceProd", red(ReduceFn::Prod)},
      {"ReduceL1", red(ReduceFn::L1)},
      {"ReduceL2", red(ReduceFn::L2)},
      {"ReduceLogSum", red(ReduceFn::LogSum)},
      {"ReduceLogSumExp", red(ReduceFn::LogSumExp)},
      {"ReduceSumSquare", red(ReduceFn::SumSquare)},
      {"ArgMax", F([](GeneralOps& g) { g.arg(ReduceFn::ArgMax); })},
      {"ArgMin", F([](GeneralOps& g) { g.arg(ReduceFn::ArgMin); })},
      {"Softmax", F([](GeneralOps& g) { g.softmax(SoftmaxFn::Softmax); })},
      {"LogSoftmax", F([](GeneralOps& g) { g.softmax(SoftmaxFn::LogSoftmax); })},
      {"Hardmax", F([](GeneralOps& g) { g.softmax(SoftmaxFn::Hardmax); })},
      {"MatMul", F([](GeneralOps& g) { g.matmul(); })},
      {"Gemm", F([](GeneralOps& g) { g.gemm(); })},
      {"Transpose", F([](GeneralOps& g) { g.transpose_op(); })},
      {"Reshape", F([](GeneralOps& g) { g.reshape_op(); })},
      {"Flatten", F([](GeneralOps& g) { g.flatten(); })},
      {"Squeeze", F([](GeneralOps& g) { g.squeeze(); })},
      {"Unsqueeze", F([](GeneralOps& g) { g.unsqueeze(); })},
      {"Concat", F([](GeneralOps& g) { g.concat_op(); })},
      {"Split", F([](GeneralOps& g) { g.split(); })},
      {"Slice", F([](GeneralOps& g) { g.slice_op(); })},
      {"Gather", F([](GeneralOps& g) { g.gather(false); })},
      {"GatherElements", F([](GeneralOps& g) { g.gather(true); })},
      {"Cast", F([](GeneralOps& g) {
         DType t;
         if (!dtype_of_onnx(int(g.at.i("to", 0)), &t)) Importer::refused("casts to a type hios does not hold");
         g.cast(t);
       })},
      {"CastLike", F([](GeneralOps& g) { g.cast(g.im.operand_dtype(g.in(1))); })},
      {"Expand", F([](GeneralOps& g) { g.expand_op(); })},
      {"Tile", F([](GeneralOps& g) { g.tile(); })},
      {"Shape", F([](GeneralOps& g) { g.shape_op(); })},
      {"Size", F([](GeneralOps& g) { g.size_op(); })},
      {"LayerNormalization", F([](GeneralOps& g) { g.layer_norm(); })},
      {"Attention", F([](GeneralOps& g) { g.attention(); })},
      {"InstanceNormalization", F([](GeneralOps& g) { g.instance_norm(); })},
      {"BatchNormalization", F([](GeneralOps& g) { g.batch_norm(); })},
      {"MeanVarianceNormalization", F([](GeneralOps& g) { g.mvn(); })},
      {"DepthToSpace", F([](GeneralOps& g) { g.depth_space(true); })},
      {"SpaceToDepth", F([](GeneralOps& g) { g.depth_space(false); })},
      {"Trilu", F([](GeneralOps& g) { g.trilu(); })},
      {"CumSum", F([](GeneralOps& g) { g.cumsum(); })},
      {"OneHot", F([](GeneralOps& g) { g.onehot(); })},
      {"Pad", F([](GeneralOps& g) { g.pad(); })},
      {"EyeLike", F([](GeneralOps& g) { g.eyelike(); })},
      {"Resize", F([](GeneralOps& g) { g.resize(false); })},
      {"Upsample", F([](GeneralOps& g) { g.resize(true); })},
      {"NegativeLogLikelihoodLoss", F([](GeneralOps& g) { g.nll(g.in(0), g.in(1), 2); })},
      {"SoftmaxCrossEntropyLoss", F([](GeneralOps& g) { g.softmax_cross_entropy(); })},
      {"Identity", F([](GeneralOps& g) { g.reshape(g.in(0), g.shape(0).dims()); })},
      {"Dropout", F([](GeneralOps& g) {
         for (int k = 1; k < g.n.output_size(); ++k) {
           if (!g.n.output(k).empty() && g.im.uses(g.n.output(k))) Importer::refused("its mask output is used");
         }
         if (g.has(2)) {
           const OnnxValue& t = g.im.values_.at(g.n.input(2));
           if (!t.constant || t.constant->at(0) != 0) Importer::refused("training mode (random dropout) is not inference");
         }
         g.reshape(g.in(0), g.shape(0).dims());
       })},
  };
  auto it = table.find(n.op_type());
  if (it == table.end()) return false;
  GeneralOps g{*this, n, NodeAttrs(n)};
  it->second(g);
  return true;
}

}  // namespace hios::importer::detail
