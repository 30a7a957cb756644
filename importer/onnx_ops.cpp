// The ONNX importer's converters (onnx_import_internal.hpp): one handler per supported op,
// each mapping a node onto the op table, or folding it into its neighbour (batch norms and
// per-channel affines into the layer before them, activations into a convolution, Pads into
// the padding after them, Concats and Adds into their only reader). Apart from the graph's
// assembly (onnx_import.cpp) because each handler reads one node alone; docs/onnx-import.md
// has the mapping.
#include <algorithm>
#include <cmath>
#include <limits>

#include "graph/error.hpp"
#include "importer/onnx_import_internal.hpp"

namespace hios::importer::detail {

// --- op handlers -----------------------------------------------------------------------

// Kernel sizes, strides and dilations: two values from 1 to 65536.
std::array<int, 2> Importer::pair_of(const std::vector<int64_t>& v, int def) {
  if (v.empty()) return {def, def};
  if (v.size() != 2) refused("only 2-D windows are supported");
  for (int64_t x : v) {
    if (x < 1 || x > 65536) refused("window attribute " + std::to_string(x) + " out of range [1, 65536]");
  }
  return {int(v[0]), int(v[1])};
}

// The op's own pads (ONNX's pads or auto_pad), top, left, bottom, right.
std::array<int64_t, 4> Importer::own_pads(const NodeAttrs& at, const Live& x, std::array<int, 2> kernel,
                                          std::array<int, 2> stride, std::array<int, 2> dilation) {
  std::vector<int64_t> pads = at.ints("pads", {0, 0, 0, 0});
  if (pads.size() != 4) refused("only 2-D pads are supported");
  const std::string autopad = at.s("auto_pad", "NOTSET");
  if (autopad == "SAME_UPPER" || autopad == "SAME_LOWER") {
    const int64_t in[2] = {x.dims()[2], x.dims()[3]};
    for (int d = 0; d < 2; ++d) {
      const int64_t out = (in[d] + stride[d] - 1) / stride[d];
      const int64_t total = std::max<int64_t>(0, (out - 1) * stride[d] + (kernel[d] - 1) * dilation[d] + 1 - in[d]);
      const int64_t small = total / 2, large = total - small;
      pads[size_t(d)] = autopad == "SAME_UPPER" ? small : large;
      pads[size_t(d) + 2] = autopad == "SAME_UPPER" ? large : small;
    }
  } else if (autopad != "NOTSET" && autopad != "VALID") {
    refused("auto_pad '" + autopad + "' is not supported");
  }
  for (int64_t v : pads) {
    if (v < 0 || v > 65536) refused("pads out of range");
  }
  return {pads[0], pads[1], pads[2], pads[3]};
}

// The op's padding, taking in x's pending Pad: where own plus pending padding is symmetric
// (and the pending Pad fills with what the op pads with), all of it goes into the op;
// otherwise a pad node pads x first and the op pads nothing. `x` is replaced by what the op
// reads.
std::array<int, 2> Importer::take_padding(Live& x, const std::string& x_name, std::array<int64_t, 4> own, PadFill fill) {
  if (x.pad.any() && x.pad.fill != fill) x = pad_node(x, x.pad, x_name);
  const PendingPad& q = x.pad;
  const int64_t top = own[0] + q.top, left = own[1] + q.left, bottom = own[2] + q.bottom, right = own[3] + q.right;
  if (top >= 0 && left >= 0 && top == bottom && left == right) {
    if (q.any()) ++folded_["Pads into the padding of the op after them"];
    x.pad = PendingPad{};
    return {int(top), int(left)};
  }
  PendingPad all{top, left, bottom, right, fill};
  x.pad = PendingPad{};
  x = pad_node(x, all, x_name);
  return {0, 0};
}

void Importer::conv(const onnx::NodeProto& n) {
  const NodeAttrs at(n);
  Live x = live(n.input(0), true);
  if (x.flat) refused("reads a rank-2 tensor");
  const ConstTensor& w = constant(n, 1, "weight");
  const ConstTensor* b = optional_constant(n, 2, "bias");
  if (w.dims.size() != 4 || w.integer) refused("the weight is not a 4-D float tensor");
  const int64_t groups = at.i("group", 1);
  if (groups < 1 || groups > x.shape.c || x.shape.c % groups || w.dims[1] * groups != x.shape.c) {
    refused(strprintf("a weight of %lld input channels in %lld groups does not fit an input of %lld channels",
                      (long long)w.dims[1], (long long)groups, (long long)x.shape.c));
  }
  if (b && (b->integer || b->numel() != w.dims[0])) refused("the bias does not match the weight's output channels");
  const auto kernel = pair_of(at.ints("kernel_shape", {w.dims[2], w.dims[3]}), 1);
  if (kernel[0] != w.dims[2] || kernel[1] != w.dims[3]) refused("kernel_shape differs from the weight's");
  const auto stride = pair_of(at.ints("strides"), 1), dilation = pair_of(at.ints("dilations"), 1);
  const auto padding = take_padding(x, n.input(0), own_pads(at, x, kernel, stride, dilation), PadFill::Zero);
  Pending p;
  p.name = node_name(n);
  p.op = conv_op(w.dims[0], kernel, stride, padding, Activation::None, groups, b != nullptr, dilation);
  p.inputs = x.terms;
  p.weight_dims = w.dims;
  p.weight = w.f;
  if (b) p.bias = b->f;
  const int idx = add_node(std::move(p));
  set_live(n, node_live(idx));
}

// ONNX's ConvTranspose: weight [in][out / group][kh][kw]; the pads from pads, or, with
// output_shape or a SAME auto_pad, from the output size the specification's rules give.
void Importer::conv_transpose(const onnx::NodeProto& n) {
  const NodeAttrs at(n);
  Live x = live(n.input(0), true);
  if (x.flat) refused("reads a rank-2 tensor");
  const ConstTensor& w = constant(n, 1, "weight");
  const ConstTensor* b = optional_constant(n, 2, "bias");
  if (w.dims.size() != 4 || w.integer) refused("the weight is not a 4-D float tensor");
  const int64_t groups = at.i("group", 1);
  if (groups < 1 || w.dims[0] != x.shape.c || x.shape.c % groups || w.dims[1] < 1 || w.dims[1] > (int64_t(1) << 24)) {
    refused(strprintf("a weight of %lld input channels does not fit an input of %lld channels in %lld groups",
                      (long long)w.dims[0], (long long)x.shape.c, (long long)groups));
  }
  ConvTransposeAttrs a;
  a.out_channels = w.dims[1] * groups;
  a.groups = groups;
  if (b && (b->integer || b->numel() != a.out_channels)) refused("the bias does not match the output channels");
  a.bias = b != nullptr;
  a.kernel = pair_of(at.ints("kernel_shape", {w.dims[2], w.dims[3]}), 1);
  if (a.kernel[0] != w.dims[2] || a.kernel[1] != w.dims[3]) refused("kernel_shape differs from the weight's");
  a.stride = pair_of(at.ints("strides"), 1);
  a.dilation = pair_of(at.ints("dilations"), 1);
  a.output_padding = pair_of(at.ints("output_padding"), 0);
  const std::string auto_pad = at.s("auto_pad", "NOTSET");
  std::vector<int64_t> out_shape = at.ints("output_shape");
  if (out_shape.size() == 4) out_shape.erase(out_shape.begin(), out_shape.begin() + 2);
  if (!out_shape.empty() && out_shape.size() != 2) refused("output_shape is not two sizes");
  const int64_t in_hw[2] = {x.shape.h, x.shape.w};
  if (out_shape.empty() && (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER")) {
    out_shape = {in_hw[0] * a.stride[0], in_hw[1] * a.stride[1]};
  }
  if (!out_shape.empty()) {
    for (int i = 0; i < 2; ++i) {
      const int64_t total = int64_t(a.stride[i]) * (in_hw[i] - 1) + a.output_padding[i] +
                            int64_t(a.kernel[i] - 1) * a.dilation[i] + 1 - out_shape[size_t(i)];
      if (total < -(int64_t(1) << 20) || total > (int64_t(1) << 20)) {
        refused(strprintf("output_shape %lld is out of range", (long long)out_shape[size_t(i)]));
      }
      // The specification's halves round down (its reference is Python); a negative pad after
      // is output rows past the kernel's reach, which is what output_padding adds.
      const int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);
      int64_t before = auto_pad == "SAME_UPPER" ? half : total - half, after = total - before;
      if (after < 0) {
        a.output_padding[i] += int(-after);
        after = 0;
      }
      if (before < 0) refused(strprintf("output_shape %lld is past what the kernel reaches", (long long)out_shape[size_t(i)]));
      a.pads[i] = int(before);
      a.pads[i + 2] = int(after);
    }
  } else if (auto_pad == "NOTSET") {
    const std::vector<int64_t> pads = at.ints("pads", {0, 0, 0, 0});
    if (pads.size() != 4) refused("pads are not four values");
    for (int i = 0; i < 4; ++i) {
      if (pads[size_t(i)] < 0 || pads[size_t(i)] > (int64_t(1) << 20)) refused("a pad is out of range");
      a.pads[size_t(i)] = int(pads[size_t(i)]);
    }
  } else if (auto_pad != "VALID") {
    refused("auto_pad '" + auto_pad + "' is not supported");
  }
  Pending p;
  p.name = node_name(n);
  p.op = make_op(OpKind::ConvTranspose);
  p.op.attrs = a;
  p.inputs = x.terms;
  p.weight_dims = w.dims;
  p.weight = w.f;
  if (b) p.bias = b->f;
  const int idx = add_node(std::move(p));
  set_live(n, node_live(idx));
}

// y = x * scale[c] + shift[c]: folded into the conv or linear that alone computes x (before
// its activation), else a depthwise 1x1 convolution.
void Importer::affine(const onnx::NodeProto& n, const std::string& x_name, std::vector<float> scale,
                      std::vector<float> shift, const char* what) {
  Live x = live(x_name);
  const int64_t c = x.flat ? x.shape.c * x.shape.h * x.shape.w : x.shape.c;
  if (int64_t(scale.size()) == 1) scale.assign(size_t(c), scale[0]);
  if (int64_t(shift.size()) == 1) shift.assign(size_t(c), shift[0]);
  if (int64_t(scale.size()) != c || int64_t(shift.size()) != c) refused("its constant is not per channel");
  Pending* p = sole_producer(x_name, OpKind::Conv);
  // After an activation or a residual sum the affine map is not one of the weights'.
  if (p && (p->op.conv().activation != Activation::None || p->op.conv().residual)) p = nullptr;
  if (!p) p = sole_producer(x_name, OpKind::Linear);
  if (p) {
    const int64_t per_out = int64_t(p->weight.size()) / c;
    for (int64_t o = 0; o < c; ++o) {
      for (int64_t k = 0; k < per_out; ++k) p->weight[size_t(o * per_out + k)] *= scale[size_t(o)];
    }
    if (p->bias.empty()) p->bias.assign(size_t(c), 0.f);
    for (int64_t o = 0; o < c; ++o) p->bias[size_t(o)] = p->bias[size_t(o)] * scale[size_t(o)] + shift[size_t(o)];
    if (p->op.kind == OpKind::Conv) std::get<ConvAttrs>(p->op.attrs).bias = true;
    else std::get<LinearAttrs>(p->op.attrs).bias = true;
    ++folded_[std::string(what) + " into the layer before it"];
    set_live(n, x);
    return;
  }
  if (x.flat) refused("a per-feature scale of a rank-2 tensor not computed by a linear layer alone");
  Pending d;
  d.name = node_name(n);
  d.op = conv_op(c, {1, 1}, {1, 1}, {0, 0}, Activation::None, c, true);
  d.inputs = x.terms;
  d.weight_dims = {c, 1, 1, 1};
  d.weight = std::move(scale);
  d.bias = std::move(shift);
  const int idx = add_node(std::move(d));
  ++folded_[std::string(what) + " as depthwise 1x1 convolutions"];
  set_live(n, node_live(idx));
}

void Importer::batch_norm(const onnx::NodeProto& n) {
  const NodeAttrs at(n);
  if (at.i("training_mode", 0)) refused("training_mode is set");
  only_first_output_used(n);
  const ConstTensor &gamma = constant(n, 1, "scale"), &beta = constant(n, 2, "bias"), &mean = constant(n, 3, "mean"),
                    &var = constant(n, 4, "variance");
  const double eps = at.f("epsilon", 1e-5f);
  const int64_t c = gamma.numel();
  if (beta.numel() != c || mean.numel() != c || var.numel() != c) refused("its parameters differ in length");
  std::vector<float> scale(static_cast<size_t>(c)), shift(static_cast<size_t>(c));
  for (int64_t k = 0; k < c; ++k) {
    const double s = gamma.at(k) / std::sqrt(var.at(k) + eps);
    scale[size_t(k)] = float(s);
    shift[size_t(k)] = float(beta.at(k) - mean.at(k) * s);
  }
  affine(n, n.input(0), std::move(scale), std::move(shift), "BatchNormalization");
}

void Importer::apply_activation(const onnx::NodeProto& n, Activation a) {
  const Live& x = live(n.input(0));
  if (Pending* p = sole_producer(n.input(0), OpKind::Conv); p && p->op.conv().activation == Activation::None) {
    std::get<ConvAttrs>(p->op.attrs).activation = a;
    ++folded_["activations into the convolution before them"];
    set_live(n, x);
    return;
  }
  Pending p;
  p.name = node_name(n);
  p.op = activation_op(a);
  p.inputs = x.terms;
  const int idx = add_node(std::move(p));
  const Live out = node_live(idx, x.flat);
  set_live(n, out);
}

void Importer::activation(const onnx::NodeProto& n) {
  const std::string& t = n.op_type();
  apply_activation(n, t == "Relu" ? Activation::Relu : t == "Sigmoid" ? Activation::Sigmoid : Activation::Tanh);
}

void Importer::clip(const onnx::NodeProto& n) {
  const NodeAttrs at(n);
  double lo = -std::numeric_limits<double>::infinity(), hi = std::numeric_limits<double>::infinity();
  if (m_.opset < 11) {
    lo = at.f("min", -std::numeric_limits<float>::infinity());
    hi = at.f("max", std::numeric_limits<float>::infinity());
  } else {
    if (const ConstTensor* c = optional_constant(n, 1, "min")) lo = c->at(0);
    if (const ConstTensor* c = optional_constant(n, 2, "max")) hi = c->at(0);
  }
  if (lo == 0 && std::isinf(hi) && hi > 0) return apply_activation(n, Activation::Relu);
  if (lo == 0 && hi == 6) return apply_activation(n, Activation::Relu6);
  refused(strprintf("clipping to [%g, %g]; hios clips to [0, inf) (relu) and [0, 6] (relu6) only", lo, hi));
}

void Importer::pool(const onnx::NodeProto& n) {
  const NodeAttrs at(n);
  const bool avg = n.op_type() == "AveragePool";
  only_first_output_used(n);
  Live x = live(n.input(0), true);
  if (x.flat) refused("reads a rank-2 tensor");
  if (at.i("storage_order", 0)) refused("storage_order 1 is not supported");
  if (!at.has("kernel_shape")) refused("no kernel_shape");
  const auto kernel = pair_of(at.ints("kernel_shape"), 1);
  const auto stride = pair_of(at.ints("strides"), 1), dilation = pair_of(at.ints("dilations"), 1);
  if (dilation[0] != 1 || dilation[1] != 1) refused("dilated pooling is not supported");
  bool count_include_pad = at.i("count_include_pad", 0) != 0;
  const auto own = own_pads(at, x, kernel, stride, {1, 1});
  const bool own_any = own[0] || own[1] || own[2] || own[3];
  if (avg && !count_include_pad && (x.pad.any() || own[0] != own[2] || own[1] != own[3]) && own_any) {
    // Zeros of an explicit Pad count in the divisor, the pool's own padding does not: one
    // padding cannot do both.
    refused("its own padding is left out of the divisor, but a Pad before it or asymmetric pads would be counted");
  }
  if (avg && x.pad.any()) count_include_pad = true;  // the explicit Pad's zeros are elements of the window
  const auto padding = take_padding(x, n.input(0), own, avg ? PadFill::Zero : PadFill::NegInf);
  Pending p;
  p.name = node_name(n);
  p.op = make_op(OpKind::Pool);
  PoolAttrs& a = std::get<PoolAttrs>(p.op.attrs);
  a.kind = avg ? PoolKind::Avg : PoolKind::Max;
  a.kernel = kernel;
  a.stride = stride;
  a.padding = padding;
  a.ceil_mode = at.i("ceil_mode", 0) != 0;
  a.count_include_pad = !avg || count_include_pad;
  p.inputs = x.terms;
  const int idx = add_node(std::move(p));
  set_live(n, node_live(idx));
}

void Importer::add_global_pool(const onnx::NodeProto& n, PoolKind kind, bool flat) {
  const Live& x = live(n.input(0));
  if (x.flat) refused("reads a rank-2 tensor");
  Pending p;
  p.name = node_name(n);
  p.op = make_op(OpKind::Pool);
  std::get<PoolAttrs>(p.op.attrs).kind = kind;
  p.inputs = x.terms;
  const int idx = add_node(std::move(p));
  const Live out = node_live(idx, flat);
  set_live(n, out);
}

void Importer::global_pool(const onnx::NodeProto& n) {
  add_global_pool(n, n.op_type() == "GlobalAveragePool" ? PoolKind::GlobalAvg : PoolKind::GlobalMax, false);
}

void Importer::reduce_mean(const onnx::NodeProto& n) {
  const NodeAttrs at(n);
  std::vector<int64_t> axes = at.ints("axes");
  if (m_.opset >= 18) {
    const ConstTensor* c = optional_constant(n, 1, "axes");
    axes.clear();
    if (c) {
      for (int64_t k = 0; k < c->numel(); ++k) axes.push_back(int64_t(c->at(k)));
    }
  }
  for (auto& a : axes) a = a < 0 ? a + 4 : a;
  std::sort(axes.begin(), axes.end());
  if (axes != std::vector<int64_t>{2, 3}) refused("only a mean over H and W (axes 2 and 3) is supported");
  add_global_pool(n, PoolKind::GlobalAvg, at.i("keepdims", 1) == 0);
}

void Importer::concat(const onnx::NodeProto& n) {
  const NodeAttrs at(n);
  int64_t axis = at.i("axis", 1);
  Live out;
  for (int k = 0; k < n.input_size(); ++k) {
    const Live& x = live(n.input(k));
    if (x.flat) refused("concatenates rank-2 tensors");
    if (axis < 0) axis += 4;
    if (axis != 1) refused("only concatenation along channels (axis 1) is supported");
    if (k == 0) {
      out.shape = x.shape;
      out.shape.c = 0;
    } else if (x.shape.n != out.shape.n || x.shape.h != out.shape.h || x.shape.w != out.shape.w) {
      refused("its inputs differ in N, H or W");
    }
    out.shape.c += x.shape.c;
    out.terms.insert(out.terms.end(), x.terms.begin(), x.terms.end());
  }
  // Read by one node: that node assembles the terms itself; else one identity does, once.
  if (uses(n.output(0)) != 1) materialize(out, raw_name(n));
  else ++folded_["Concat into the input of its only reader"];
  set_live(n, out);
}

// Add, Sub, Mul and Div: with a per-channel constant an affine map; with two computed
// tensors of one shape an element-wise op (Add as a sum term when one node reads it).
void Importer::binary(const onnx::NodeProto& n) {
  const std::string& t = n.op_type();
  const OnnxValue &a = values_.at(n.input(0)), &b = values_.at(n.input(1));
  if (a.constant || b.constant) {
    const bool const_first = bool(a.constant);
    const ConstTensor& c = const_first ? *a.constant : *b.constant;
    const std::string& x = const_first ? n.input(1) : n.input(0);
    if (const_first && (t == "Sub" || t == "Div")) refused("a constant minus or over a tensor is not supported");
    const Live& xl = live(x);
    const int64_t channels = xl.flat ? xl.shape.c * xl.shape.h * xl.shape.w : xl.shape.c;
    if (!per_channel(c, xl.flat, channels)) refused("its constant is not a scalar or per-channel");
    std::vector<float> v(size_t(c.numel()));
    for (int64_t k = 0; k < c.numel(); ++k) v[size_t(k)] = float(c.at(k));
    if (t == "Add") return affine(n, x, {1.f}, v, "Add of a constant");
    if (t == "Sub") {
      for (auto& e : v) e = -e;
      return affine(n, x, {1.f}, v, "Sub of a constant");
    }
    if (t == "Mul") return affine(n, x, v, {0.f}, "Mul by a constant");
    for (auto& e : v) e = 1.f / e;
    return affine(n, x, v, {0.f}, "Div by a constant");
  }
  if (t == "Sub" || t == "Div") refused("of two computed tensors is not supported");
  live(n.input(0));
  live(n.input(1));
  Live &x = *values_.at(n.input(0)).live, &y = *values_.at(n.input(1)).live;  // materialized in place
  if (x.shape != y.shape || x.flat != y.flat) refused("its operands differ in shape (hios does not broadcast)");
  if (t == "Add" && (fuse_residual(n, n.input(0), y) || fuse_residual(n, n.input(1), x))) return;
  if (t == "Add" && uses(n.output(0)) == 1 && x.single() && y.single()) {
    Live out = x;  // one sum term, assembled by the reader
    out.terms = {{x.terms[0][0], y.terms[0][0]}};
    ++folded_["Add into the input of its only reader"];
    return set_live(n, out);
  }
  Pending p;
  p.name = node_name(n);
  p.op = make_op(t == "Add" ? OpKind::Add : OpKind::Mul);
  p.inputs = {{materialize(x, n.input(0))}, {materialize(y, n.input(1))}};
  const int idx = add_node(std::move(p));
  const Live out = node_live(idx, x.flat);
  set_live(n, out);
}

// conv_out + other, where a convolution alone computes conv_out: a skip connection, added in
// that convolution's epilogue (ConvAttrs::residual) instead of a pass of its own. An activation
// after the sum then folds into the same convolution (apply_activation).
bool Importer::fuse_residual(const onnx::NodeProto& n, const std::string& conv_out, const Live& other) {
  Pending* p = sole_producer(conv_out, OpKind::Conv);
  if (!p || !other.single() || other.pad.any() || other.flat) return false;
  const ConvAttrs& a = p->op.conv();
  if (a.residual || a.activation != Activation::None || a.rows.banded()) return false;
  // The convolution moves to the end of the nodes, after the residual's producer (a ResNet's
  // downsampling branch comes after the convolution it is added to), so that nodes_ stays in
  // topological order. Nothing else reads it where it was: the Add was its one use, and the
  // husk left there is pruned as unread.
  Pending q = std::move(*p);
  *p = Pending{};
  p->name = unique_name(q.name + ".moved");
  p->op = make_op(OpKind::Identity);
  p->inputs = q.inputs;
  p->shape = q.shape;
  q.inputs.push_back(Term{other.terms[0][0]});
  std::get<ConvAttrs>(q.op.attrs).residual = true;
  nodes_.push_back(std::move(q));
  ++folded_["Adds into the epilogue of the convolution before them"];
  set_live(n, node_live(int(nodes_.size()) - 1));
  return true;
}

bool Importer::per_channel(const ConstTensor& c, bool flat, int64_t channels) {
  if (c.numel() == 1) return true;
  if (c.numel() != channels) return false;
  // [C], [C,1,1], [1,C,1,1] for images; [F], [1,F] for rank 2
  int non_one = 0;
  for (int64_t d : c.dims) non_one += d != 1;
  if (non_one != 1) return false;
  if (flat) return true;
  // A rank-1 or rank-2 constant broadcasts along W (and H), not along the channels.
  const size_t r = c.dims.size();
  return r >= 3 && c.dims[r - 3] == channels;
}

void Importer::pad(const onnx::NodeProto& n) {
  const NodeAttrs at(n);
  if (at.s("mode", "constant") != "constant") refused("mode '" + at.s("mode", "") + "' is not supported (only zero padding)");
  std::vector<int64_t> pads;
  double value = 0;
  if (m_.opset < 11) {
    pads = at.ints("pads");
    value = at.f("value", 0.f);
  } else {
    const ConstTensor& p = constant(n, 1, "pads");
    for (int64_t k = 0; k < p.numel(); ++k) pads.push_back(int64_t(p.at(k)));
    if (const ConstTensor* v = optional_constant(n, 2, "constant_value")) value = v->numel() ? v->at(0) : 0;
    if (const ConstTensor* axes = optional_constant(n, 3, "axes")) {
      std::vector<int64_t> full(8, 0);
      const int64_t na = axes->numel();
      if (int64_t(pads.size()) != 2 * na) refused("pads and axes differ in length");
      for (int64_t k = 0; k < na; ++k) {
        int64_t ax = int64_t(axes->at(k));
        ax = ax < 0 ? ax + 4 : ax;
        if (ax < 0 || ax > 3) refused("axis out of range");
        full[size_t(ax)] = pads[size_t(k)];
        full[size_t(ax) + 4] = pads[size_t(k + na)];
      }
      pads = full;
    }
  }
  const bool neg_inf = std::isinf(value) && value < 0;
  if (value != 0 && !neg_inf) refused(strprintf("pads with %g (hios pads with 0 or -inf)", value));
  if (pads.size() != 8) refused("only 4-D pads are supported");
  if (pads[0] || pads[1] || pads[4] || pads[5]) refused("pads N or C");
  for (int64_t p : pads) {
    if (p < -65536 || p > 65536) refused("a pad out of range");
  }
  Live x = live(n.input(0), true);
  if (x.flat) refused("pads a rank-2 tensor");
  const PadFill fill = neg_inf ? PadFill::NegInf : PadFill::Zero;
  if (x.pad.any() && x.pad.fill != fill) x = pad_node(x, x.pad, n.input(0));
  x.pad.fill = fill;
  x.pad.top += pads[2];
  x.pad.left += pads[3];
  x.pad.bottom += pads[6];
  x.pad.right += pads[7];
  set_live(n, x);
}

void Importer::alias(const onnx::NodeProto& n) {
  only_first_output_used(n);
  set_live(n, live(n.input(0)));
}

// Flatten, Reshape, Squeeze, Unsqueeze between an N x C x H x W view and an N x (C*H*W) one.
void Importer::reshape(const onnx::NodeProto& n) {
  const NodeAttrs at(n);
  Live x = live(n.input(0));
  const std::vector<int64_t> from = x.dims();
  std::vector<int64_t> to;
  const std::string& t = n.op_type();
  if (t == "Flatten") {
    int64_t axis = at.i("axis", 1);
    if (axis < 0) axis += int64_t(from.size());
    if (axis != 1) refused("only Flatten from axis 1 is supported");
    to = {from[0], from.size() == 2 ? from[1] : from[1] * from[2] * from[3]};
  } else if (t == "Reshape") {
    const ConstTensor& s = constant(n, 1, "shape");
    int64_t known = 1, infer = -1;
    for (int64_t k = 0; k < s.numel(); ++k) {
      int64_t d = int64_t(s.at(k));
      if (d == 0 && !at.i("allowzero", 0)) d = size_t(k) < from.size() ? from[size_t(k)] : 1;
      if (d < -1 || d > (int64_t(1) << 40)) refused(strprintf("reshapes to a dim of %lld", (long long)d));
      if (d == -1) {
        infer = k;
      } else {
        if (d > 1 && known > (int64_t(1) << 48) / d) refused("reshapes to over 2^48 elements");
        known *= d;
      }
      to.push_back(d);
    }
    int64_t total = 1;
    for (int64_t d : from) total *= d;
    if (infer >= 0) to[size_t(infer)] = known ? total / known : 0;
  } else {
    std::vector<int64_t> axes = at.ints("axes");
    if (const ConstTensor* c = optional_constant(n, 1, "axes")) {
      axes.clear();
      for (int64_t k = 0; k < c->numel(); ++k) axes.push_back(int64_t(c->at(k)));
    }
    to = from;
    if (t == "Squeeze") {
      std::vector<int64_t> kept;
      const int64_t r = int64_t(from.size());
      for (int64_t k = 0; k < r; ++k) {
        const bool named = axes.empty() ? from[size_t(k)] == 1
                                        : std::any_of(axes.begin(), axes.end(), [&](int64_t a) { return (a < 0 ? a + r : a) == k; });
        if (!named) kept.push_back(from[size_t(k)]);
      }
      to = kept;
    } else {
      const int64_t r = int64_t(from.size() + axes.size());
      for (auto& a : axes) a = a < 0 ? a + r : a;
      std::sort(axes.begin(), axes.end());
      for (int64_t a : axes) {
        if (a < 0 || a > int64_t(to.size())) refused("axis out of range");
        to.insert(to.begin() + a, 1);
      }
    }
  }
  const Shape& s = x.shape;
  if (to == std::vector<int64_t>{s.n, s.c * s.h * s.w}) {
    x.flat = true;
  } else if (to == std::vector<int64_t>{s.n, s.c, s.h, s.w} && !x.flat) {
    // unchanged
  } else if (x.flat && s.h == 1 && s.w == 1 && to == std::vector<int64_t>{s.n, s.c, 1, 1}) {
    x.flat = false;
  } else {
    std::string a, b;
    for (int64_t d : from) a += (a.empty() ? "" : "x") + std::to_string(d);
    for (int64_t d : to) b += (b.empty() ? "" : "x") + std::to_string(d);
    refused("reshapes " + a + " to " + b + "; hios flattens N x C x H x W to N x (C*H*W) only");
  }
  set_live(n, x);
}

// Gemm (and MatMul by a constant): a linear layer over the flattened input.
void Importer::gemm(const onnx::NodeProto& n) {
  const NodeAttrs at(n);
  const bool matmul = n.op_type() == "MatMul";
  live(n.input(0));
  Live& x = *values_.at(n.input(0)).live;  // materialized in place
  if (!x.flat) refused("reads a tensor that is not rank 2 (flatten it first)");
  if (!matmul && at.i("transA", 0)) refused("transA is not supported");
  const ConstTensor& w = constant(n, 1, "weight");
  const ConstTensor* c = matmul ? nullptr : optional_constant(n, 2, "bias");
  if (w.dims.size() != 2 || w.integer) refused("the weight is not a 2-D float tensor");
  const bool trans_b = !matmul && at.i("transB", 0);
  const int64_t in = trans_b ? w.dims[1] : w.dims[0], out = trans_b ? w.dims[0] : w.dims[1];
  const int64_t features = x.shape.c * x.shape.h * x.shape.w;
  if (in != features) refused(strprintf("a weight for %lld features reads %lld", (long long)in, (long long)features));
  const float alpha = matmul ? 1.f : at.f("alpha", 1.f), beta = matmul ? 1.f : at.f("beta", 1.f);
  Pending p;
  p.name = node_name(n);
  p.op = make_op(OpKind::Linear);
  std::get<LinearAttrs>(p.op.attrs).out_features = out;
  std::get<LinearAttrs>(p.op.attrs).bias = c != nullptr;
  p.inputs = {{materialize(x, n.input(0))}};
  p.weight_dims = {out, in};
  p.weight.resize(size_t(out * in));
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) {
      p.weight[size_t(o * in + i)] = alpha * w.f[size_t(trans_b ? o * in + i : i * out + o)];
    }
  }
  if (c) {
    if (c->integer || (c->numel() != out && c->numel() != 1)) refused("the bias is not per output feature");
    for (int64_t o = 0; o < out; ++o) p.bias.push_back(beta * float(c->at(c->numel() == 1 ? 0 : o)));
  }
  const int idx = add_node(std::move(p));
  const Live l = node_live(idx, true);
  set_live(n, l);
}

void Importer::softmax(const onnx::NodeProto& n) {
  const NodeAttrs at(n);
  const Live& x = live(n.input(0));
  const int64_t rank = x.flat ? 2 : 4;
  int64_t axis = at.i("axis", m_.opset >= 13 ? -1 : 1);
  if (axis < 0) axis += rank;
  if (axis != 1 || (!x.flat && (x.shape.h != 1 || x.shape.w != 1) && m_.opset < 13)) {
    refused("only a softmax over channels (axis 1) is supported");
  }
  Pending p;
  p.name = node_name(n);
  p.op = make_op(OpKind::Softmax);
  p.inputs = x.terms;
  const int idx = add_node(std::move(p));
  const Live l = node_live(idx, x.flat);
  set_live(n, l);
}

// Shape of a computed tensor is a constant: its dims are known at import.
void Importer::shape_of(const onnx::NodeProto& n) {
  const NodeAttrs at(n);
  const Live& x = live(n.input(0), true);
  const std::vector<int64_t> d = x.dims();
  const int64_t rank = int64_t(d.size());
  auto clampi = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank); };
  const int64_t b = clampi(at.i("start", 0)), e = clampi(at.i("end", rank));
  values_[n.output(0)].constant =
      ConstTensor::ints({std::max<int64_t>(0, e - b)}, std::vector<int64_t>(d.begin() + b, d.begin() + std::max(b, e)));
  ++folded_["constant computations"];
}

}  // namespace hios::importer::detail
