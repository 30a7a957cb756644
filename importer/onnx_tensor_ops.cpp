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
#include "importer/onnx_import_internal.hpp"

namespace hios::importer::detail {

using Operand = Importer::Operand;

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
    const ConstTensor& c = *o.constant;
    if (c.dims.size() > size_t(kMaxRank)) refused("a constant of rank over 8");
    for (int64_t d : c.dims) {
      if (d <= 0) refused("a constant with an empty dim (hios tensors have no zero-size dims)");
    }
    Constant k2;
    k2.operand = int(k);
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
      float_constants_[p.name + ".c" + std::to_string(k)] = c.integer ? std::vector<float>(c.i.begin(), c.i.end()) : c.f;
    }
    p.constants.push_back(std::move(k2));
  }
  return add_node(std::move(p));
}

void Importer::set_general(const std::string& onnx_name, int idx) { values_[onnx_name].live = node_live(idx); }

// ---------------------------------------------------------------------------------------------

struct GeneralOps {
  Importer& im;
  const onnx::NodeProto& n;
  NodeAttrs at;

  bool has(int k) const { return k < n.input_size() && !n.input(k).empty(); }
  Operand in(int k) {
    if (!has(k)) Importer::refused(strprintf("has no input %d", k));
    return im.operand(n.input(k));
  }
  Shape shape(int k) { return im.operand_shape(in(k)); }
  const ConstTensor& need_const(int k, const char* what) {
    if (!has(k)) Importer::refused(std::string("has no ") + what);
    const OnnxValue& v = im.values_.at(n.input(k));
    if (!v.constant) Importer::refused("input '" + n.input(k) + "' must be a constant (" + what + ")");
    return *v.constant;
  }
  std::vector<int64_t> ints_of(const ConstTensor& c) {
    std::vector<int64_t> v;
    for (int64_t k = 0; k < c.numel(); ++k) v.push_back(c.integer ? c.i[size_t(k)] : int64_t(c.f[size_t(k)]));
    return v;
  }
  std::string base() const { return n.name().empty() ? n.output(0) : n.name(); }
  // The node computing output 0, and the output bound to it.
  int emit(Op op, const std::vector<Operand>& ops, int output = 0, const std::string& suffix = "") {
    if (output >= n.output_size()) Importer::refused(strprintf("has no output %d", output));
    const int idx = im.general_node(base() + suffix, std::move(op), ops);
    if (output >= 0) im.set_general(n.output(output), idx);
    return idx;
  }
  Operand val(int idx) {
    Operand o;
    o.value = Value{idx};
    return o;
  }
  Shape shape_of(int idx) const { return im.nodes_[size_t(idx)].shape; }
  int norm_axis(int64_t a, int rank) const {
    if (a < -rank || a >= std::max(rank, 1)) Importer::refused(strprintf("axis %lld is outside rank %d", (long long)a, rank));
    return int(a < 0 ? a + rank : a);
  }
  Operand scalar(double v, DType t) {
    ConstTensor c = is_float(t) ? ConstTensor::floats({1}, {float(v)}) : ConstTensor::ints({1}, {int64_t(v)});
    return im.const_operand(c, t);
  }
  // A constant operand converted to the element type of the computed one (ONNX has one type
  // for both; a folded constant may have lost it).
  void unify(std::vector<Operand>& ops) {
    DType live = DType::F32;
    bool any = false;
    for (const Operand& o : ops) {
      if (!o.constant) {
        live = im.operand_dtype(o);
        any = true;
        break;
      }
    }
    if (!any) return;
    for (Operand& o : ops) {
      if (o.constant && o.dtype != live && (is_float(o.dtype) == is_float(live) || o.constant->onnx_type == 0)) o.dtype = live;
    }
  }

  Op activation_op(Activation a, double alpha = 0, double beta = 0) {
    Op op = make_op(OpKind::Activation);
    op.attrs = ActivationAttrs{a, alpha, beta};
    return op;
  }
  // An activation reads a term (it is not a general op); its operand must be computed.
  int unary(Activation a, double alpha, double beta, Operand x, int output = 0, const std::string& suffix = "") {
    if (x.constant) Importer::refused("its input is a constant that could not be folded");
    Pending p;
    p.name = im.unique_name(base() + suffix);
    p.op = activation_op(a, alpha, beta);
    p.inputs = {{x.value}};
    const int idx = im.add_node(std::move(p));
    if (output >= 0) im.set_general(n.output(output), idx);
    return idx;
  }
  int binary(BinaryFn f, Operand a, Operand b, int output = 0, const std::string& suffix = "") {
    std::vector<Operand> ops{std::move(a), std::move(b)};
    if (f != BinaryFn::Pow) unify(ops);
    Op op = make_op(OpKind::Binary);
    op.attrs = BinaryAttrs{f};
    return emit(op, ops, output, suffix);
  }
  int reduce(ReduceFn f, Operand x, std::vector<int> axes, bool keep, int output = 0, const std::string& suffix = "") {
    std::sort(axes.begin(), axes.end());
    axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
    Op op = make_op(OpKind::Reduce);
    op.attrs = ReduceAttrs{f, axes, keep, false};
    return emit(op, {x}, output, suffix);
  }
  int reshape(Operand x, std::vector<int64_t> dims, int output = 0, const std::string& suffix = "") {
    Op op = make_op(OpKind::Reshape);
    op.attrs = ReshapeAttrs{std::move(dims)};
    return emit(op, {x}, output, suffix);
  }
  int transpose(Operand x, std::vector<int> perm, int output = 0, const std::string& suffix = "") {
    Op op = make_op(OpKind::Transpose);
    op.attrs = TransposeAttrs{std::move(perm)};
    return emit(op, {x}, output, suffix);
  }
  int slice(Operand x, const SliceAttrs& a, int output = 0, const std::string& suffix = "") {
    Op op = make_op(OpKind::Slice);
    op.attrs = a;
    return emit(op, {x}, output, suffix);
  }
  int concat(std::vector<Operand> xs, int axis, int output = 0, const std::string& suffix = "") {
    if (xs.size() == 1) return reshape(xs[0], im.operand_shape(xs[0]).dims(), output, suffix);
    Op op = make_op(OpKind::Concat);
    op.attrs = ConcatAttrs{axis};
    return emit(op, xs, output, suffix);
  }
  int expand(Operand x, std::vector<int64_t> dims, int output = 0, const std::string& suffix = "") {
    Op op = make_op(OpKind::Expand);
    op.attrs = ExpandAttrs{std::move(dims)};
    return emit(op, {x}, output, suffix);
  }
  SliceAttrs whole(const Shape& s) {
    SliceAttrs a;
    for (int d = 0; d < s.rank; ++d) {
      a.starts.push_back(0);
      a.steps.push_back(1);
      a.counts.push_back(s.dim(d));
    }
    return a;
  }
  std::vector<int> axes_input_or_attr(int input, const char* attr, int rank) {
    std::vector<int64_t> raw;
    if (has(input)) raw = ints_of(need_const(input, "the axes"));
    else raw = at.ints(attr);
    std::vector<int> axes;
    for (int64_t a : raw) axes.push_back(norm_axis(a, rank));
    return axes;
  }

  // ---- the converters ---------------------------------------------------------------------

  void clip() {
    Operand x = in(0);
    const DType t = im.operand_dtype(x);
    double lo = -1e300, hi = 1e300;
    bool computed = false;
    if (im.m_.opset < 11) {
      lo = at.f("min", -3.4028234663852886e38f);
      hi = at.f("max", 3.4028234663852886e38f);
    } else {
      for (int k = 1; k <= 2; ++k) {
        if (!has(k)) continue;
        const OnnxValue& v = im.values_.at(n.input(k));
        if (!v.constant) {
          computed = true;
          continue;
        }
        (k == 1 ? lo : hi) = v.constant->at(0);
      }
    }
    if (!computed) {
      unary(Activation::Clip, lo, hi, x);
      return;
    }
    int cur = -1;
    if (has(1)) cur = binary(BinaryFn::Max, x, in(1), has(2) ? -1 : 0, has(2) ? ".min" : "");
    if (has(2)) binary(BinaryFn::Min, cur >= 0 ? val(cur) : x, in(2));
    (void)t;
  }

  void variadic(BinaryFn f, bool mean) {
    if (n.input_size() == 1 && !mean) {
      reshape(in(0), shape(0).dims());
      return;
    }
    Operand acc = in(0);
    for (int k = 1; k < n.input_size(); ++k) {
      const bool last = k + 1 == n.input_size() && !mean;
      acc = val(binary(f, acc, in(k), last ? 0 : -1, last ? "" : ".part" + std::to_string(k)));
    }
    if (mean) binary(BinaryFn::Div, acc, scalar(double(n.input_size()), im.operand_dtype(acc)));
  }

  void reduce_op(ReduceFn f) {
    Operand x = in(0);
    const int rank = im.operand_shape(x).rank;
    const bool keep = at.i("keepdims", 1) != 0;
    // ReduceSum takes its axes as an input from opset 13, the others from opset 18.
    std::vector<int> axes = axes_input_or_attr(1, "axes", rank);
    if (axes.empty() && at.i("noop_with_empty_axes", 0)) {
      reshape(x, im.operand_shape(x).dims());
      return;
    }
    if (rank == 0) {
      reshape(x, {});
      return;
    }
    reduce(f, x, axes, keep);
  }

  void arg(ReduceFn f) {
    Operand x = in(0);
    const int rank = im.operand_shape(x).rank;
    Op op = make_op(OpKind::Reduce);
    op.attrs = ReduceAttrs{f, {norm_axis(at.i("axis", 0), rank)}, at.i("keepdims", 1) != 0, at.i("select_last_index", 0) != 0};
    emit(op, {x});
  }

  void softmax(SoftmaxFn f) {
    Operand x = in(0);
    const Shape s = im.operand_shape(x);
    const int rank = std::max(s.rank, 1);
    const int axis = norm_axis(at.i("axis", im.m_.opset >= 13 ? -1 : 1), rank);
    Op op = make_op(OpKind::Softmax);
    if (im.m_.opset >= 13 || axis == s.rank - 1) {
      op.attrs = SoftmaxAttrs{f, s.rank == 0 ? 0 : axis};
      unary_like(op, x);
      return;
    }
    // Before opset 13: over the input flattened to 2-D at `axis`.
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < s.rank; ++d) (d < axis ? outer : inner) *= s.dim(d);
    const int flat = reshape(x, {outer, inner}, -1, ".2d");
    op.attrs = SoftmaxAttrs{f, 1};
    const int sm = unary_like(op, val(flat), -1, ".softmax");
    reshape(val(sm), s.dims());
  }
  // Softmax reads a term, like an activation.
  int unary_like(Op op, Operand x, int output = 0, const std::string& suffix = "") {
    if (x.constant) Importer::refused("its input is a constant that could not be folded");
    Pending p;
    p.name = im.unique_name(base() + suffix);
    p.op = std::move(op);
    p.inputs = {{x.value}};
    const int idx = im.add_node(std::move(p));
    if (output >= 0) im.set_general(n.output(output), idx);
    return idx;
  }

  void matmul() {
    Op op = make_op(OpKind::MatMul);
    std::vector<Operand> ops{in(0), in(1)};
    unify(ops);
    emit(op, ops);
  }
  void gemm() {
    Op op = make_op(OpKind::MatMul);
    MatMulAttrs a;
    a.trans_a = at.i("transA", 0) != 0;
    a.trans_b = at.i("transB", 0) != 0;
    a.alpha = at.f("alpha", 1.f);
    a.beta = at.f("beta", 1.f);
    op.attrs = a;
    std::vector<Operand> ops{in(0), in(1)};
    if (has(2)) ops.push_back(in(2));
    unify(ops);
    emit(op, ops);
  }

  void transpose_op() {
    Operand x = in(0);
    const int rank = im.operand_shape(x).rank;
    std::vector<int64_t> p = at.ints("perm");
    std::vector<int> perm;
    if (p.empty()) {
      for (int d = rank - 1; d >= 0; --d) perm.push_back(d);
    } else {
      for (int64_t d : p) perm.push_back(norm_axis(d, rank));
    }
    transpose(x, perm);
  }

  void reshape_op() {
    Operand x = in(0);
    const Shape s = im.operand_shape(x);
    std::vector<int64_t> want = ints_of(need_const(1, "the target shape"));
    const bool allowzero = at.i("allowzero", 0) != 0;
    int64_t known = 1;
    int infer = -1;
    for (size_t d = 0; d < want.size(); ++d) {
      if (want[d] == 0 && !allowzero) {
        if (int(d) >= s.rank) Importer::refused("a 0 in the target shape copies a dim the input lacks");
        want[d] = s.dim(int(d));
      }
      if (want[d] == -1) {
        if (infer >= 0) Importer::refused("more than one -1 in the target shape");
        infer = int(d);
        continue;
      }
      if (want[d] <= 0) Importer::refused("the target shape has an empty or negative dim");
      known *= want[d];
    }
    if (infer >= 0) want[size_t(infer)] = known > 0 ? s.numel() / known : 0;
    reshape(x, want);
  }
  void flatten() {
    Operand x = in(0);
    const Shape s = im.operand_shape(x);
    int64_t axis = at.i("axis", 1);  // in [-rank, rank]
    if (axis < -s.rank || axis > s.rank) Importer::refused(strprintf("axis %lld is outside [-%d, %d]", (long long)axis, s.rank, s.rank));
    if (axis < 0) axis += s.rank;
    int64_t a = 1, b = 1;
    for (int d = 0; d < s.rank; ++d) (d < axis ? a : b) *= s.dim(d);
    reshape(x, {a, b});
  }
  void squeeze() {
    Operand x = in(0);
    const Shape s = im.operand_shape(x);
    std::vector<int> axes = axes_input_or_attr(1, "axes", s.rank);
    std::vector<int64_t> dims;
    for (int d = 0; d < s.rank; ++d) {
      const bool listed = std::find(axes.begin(), axes.end(), d) != axes.end();
      if (listed && s.dim(d) != 1) Importer::refused(strprintf("squeezes dim %d of size %lld", d, (long long)s.dim(d)));
      if (axes.empty() ? s.dim(d) != 1 : !listed) dims.push_back(s.dim(d));
    }
    reshape(x, dims);
  }
  void unsqueeze() {
    Operand x = in(0);
    const Shape s = im.operand_shape(x);
    std::vector<int64_t> raw = has(1) ? ints_of(need_const(1, "the axes")) : at.ints("axes");
    const int rank = s.rank + int(raw.size());
    std::vector<int> axes;
    for (int64_t a : raw) axes.push_back(norm_axis(a, rank));
    std::vector<int64_t> dims;
    int src = 0;
    for (int d = 0; d < rank; ++d) {
      if (std::find(axes.begin(), axes.end(), d) != axes.end()) dims.push_back(1);
      else dims.push_back(s.dim(src++));
    }
    reshape(x, dims);
  }

  void concat_op() {
    std::vector<Operand> xs;
    for (int k = 0; k < n.input_size(); ++k) xs.push_back(in(k));
    unify(xs);
    concat(xs, norm_axis(at.i("axis", 0), im.operand_shape(xs[0]).rank));
  }
  void split() {
    Operand x = in(0);
    const Shape s = im.operand_shape(x);
    const int axis = norm_axis(at.i("axis", 0), s.rank);
    std::vector<int64_t> sizes = has(1) ? ints_of(need_const(1, "the split sizes")) : at.ints("split");
    if (sizes.empty()) {
      const int64_t parts = n.output_size(), dim = s.dim(axis), each = (dim + parts - 1) / parts;
      for (int64_t k = 0, left = dim; k < parts; ++k, left -= each) sizes.push_back(std::min(each, left));
    }
    if (int(sizes.size()) != n.output_size()) Importer::refused("the split sizes do not match the outputs");
    int64_t at0 = 0;
    for (int k = 0; k < n.output_size(); ++k) {
      SliceAttrs a = whole(s);
      a.starts[size_t(axis)] = at0;
      a.counts[size_t(axis)] = sizes[size_t(k)];
      if (sizes[size_t(k)] <= 0) Importer::refused("an empty split part");
      at0 += sizes[size_t(k)];
      if (!n.output(k).empty()) slice(x, a, k, "." + std::to_string(k));
    }
  }
  void slice_op() {
    Operand x = in(0);
    const Shape s = im.operand_shape(x);
    std::vector<int64_t> starts, ends, axes, steps;
    if (im.m_.opset < 10) {
      starts = at.ints("starts");
      ends = at.ints("ends");
      axes = at.ints("axes");
    } else {
      starts = ints_of(need_const(1, "the starts"));
      ends = ints_of(need_const(2, "the ends"));
      if (has(3)) axes = ints_of(need_const(3, "the axes"));
      if (has(4)) steps = ints_of(need_const(4, "the steps"));
    }
    if (axes.empty()) {
      for (size_t k = 0; k < starts.size(); ++k) axes.push_back(int64_t(k));
    }
    if (steps.empty()) steps.assign(starts.size(), 1);
    if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size()) {
      Importer::refused("starts, ends, axes and steps differ in length");
    }
    SliceAttrs a = whole(s);
    for (size_t k = 0; k < starts.size(); ++k) {
      const int d = norm_axis(axes[k], s.rank);
      const int64_t dim = s.dim(d), step = steps[k];
      if (step == 0) Importer::refused("a step of 0");
      int64_t b = starts[k], e = ends[k];
      if (b < 0) b += dim;
      if (e < 0) e += dim;
      if (step > 0) {
        b = std::clamp<int64_t>(b, 0, dim);
        e = std::clamp<int64_t>(e, 0, dim);
      } else {
        b = std::clamp<int64_t>(b, 0, dim - 1);
        e = std::clamp<int64_t>(e, -1, dim - 1);
      }
      const int64_t count = step > 0 ? (e - b + step - 1) / step : (b - e + (-step) - 1) / (-step);
      if (count <= 0) Importer::refused("an empty slice (hios tensors have no zero-size dims)");
      a.starts[size_t(d)] = b;
      a.steps[size_t(d)] = step;
      a.counts[size_t(d)] = count;
    }
    slice(x, a);
  }
  void gather(bool elements) {
    Operand x = in(0);
    Op op = make_op(OpKind::Gather);
    op.attrs = GatherAttrs{norm_axis(at.i("axis", 0), im.operand_shape(x).rank), elements};
    Operand idx = in(1);
    if (idx.constant) idx.dtype = DType::I64;
    emit(op, {x, idx});
  }
  void cast(DType to) {
    Op op = make_op(OpKind::Cast);
    op.attrs = CastAttrs{to};
    emit(op, {in(0)});
  }
  void expand_op() {
    Operand x = in(0);
    expand(x, ints_of(need_const(1, "the shape")));
  }
  void tile() {
    Operand x = in(0);
    const Shape s = im.operand_shape(x);
    const std::vector<int64_t> r = ints_of(need_const(1, "the repeats"));
    if (int(r.size()) != s.rank) Importer::refused("repeats do not match the input's rank");
    if (2 * s.rank > kMaxRank) Importer::refused("tiles a tensor of rank over 4");
    std::vector<int64_t> split, big, out;
    for (int d = 0; d < s.rank; ++d) {
      if (r[size_t(d)] <= 0) Importer::refused("a repeat of 0 or less");
      split.insert(split.end(), {1, s.dim(d)});
      big.insert(big.end(), {r[size_t(d)], s.dim(d)});
      out.push_back(r[size_t(d)] * s.dim(d));
    }
    const int a = reshape(x, split, -1, ".split");
    const int b = expand(val(a), big, -1, ".expand");
    reshape(val(b), out);
  }
  void shape_op() {
    const Shape s = im.operand_shape(in(0));
    const int64_t rank = s.rank;
    auto clampi = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank); };
    const int64_t b = clampi(at.i("start", 0)), e = clampi(at.i("end", rank));
    const std::vector<int64_t> d = s.dims();
    im.values_[n.output(0)].constant =
        ConstTensor::ints({std::max<int64_t>(0, e - b)}, std::vector<int64_t>(d.begin() + b, d.begin() + std::max(b, e)));
  }
  void size_op() { im.values_[n.output(0)].constant = ConstTensor::ints({}, {shape(0).numel()}); }

  // (x - mean) / sqrt(var + eps) over `axes`, then * scale + bias (operands k_scale, k_bias).
  int normalize(Operand x, const std::vector<int>& axes, double eps, int k_scale, int k_bias, const Shape& affine,
                int mean_out = -1, int inv_out = -1) {
    const DType t = im.operand_dtype(x);
    const int mean = reduce(ReduceFn::Mean, x, axes, true, mean_out, ".mean");
    const int d = binary(BinaryFn::Sub, x, val(mean), -1, ".centred");
    const int sq = binary(BinaryFn::Mul, val(d), val(d), -1, ".square");
    const int var = reduce(ReduceFn::Mean, val(sq), axes, true, -1, ".var");
    const int ve = binary(BinaryFn::Add, val(var), scalar(eps, t), -1, ".var_eps");
    const int sd = unary(Activation::Sqrt, 0, 0, val(ve), -1, ".std");
    const int inv = unary(Activation::Reciprocal, 0, 0, val(sd), inv_out, ".inv_std");
    const bool more = k_scale >= 0 || k_bias >= 0;
    int y = binary(BinaryFn::Mul, val(d), val(inv), more ? -1 : 0, more ? ".normed" : "");
    auto shaped = [&](int k) {
      Operand o = in(k);
      if (affine.rank == 0) return o;
      if (o.constant) {
        o.constant->dims = affine.dims();
        return o;
      }
      return val(reshape(o, affine.dims(), -1, ".affine" + std::to_string(k)));
    };
    if (k_scale >= 0) y = binary(BinaryFn::Mul, val(y), shaped(k_scale), k_bias >= 0 ? -1 : 0, k_bias >= 0 ? ".scaled" : "");
    if (k_bias >= 0) y = binary(BinaryFn::Add, val(y), shaped(k_bias));
    return y;
  }
  void layer_norm() {
    Operand x = in(0);
    const Shape s = im.operand_shape(x);
    const int axis = norm_axis(at.i("axis", -1), s.rank);
    std::vector<int> axes;
    for (int d = axis; d < s.rank; ++d) axes.push_back(d);
    normalize(x, axes, at.f("epsilon", 1e-5f), 1, has(2) ? 2 : -1, Shape::of({}), n.output_size() > 1 ? 1 : -1,
              n.output_size() > 2 ? 2 : -1);
  }
  void instance_norm() {
    Operand x = in(0);
    const Shape s = im.operand_shape(x);
    std::vector<int> axes;
    for (int d = 2; d < s.rank; ++d) axes.push_back(d);
    std::vector<int64_t> aff(static_cast<size_t>(s.rank - 1), 1);
    aff[0] = s.dim(1);
    normalize(x, axes, at.f("epsilon", 1e-5f), 1, 2, Shape::of(aff));
  }
  void batch_norm() {
    Operand x = in(0);
    const Shape s = im.operand_shape(x);
    const ConstTensor &scale = need_const(1, "the scale"), &bias = need_const(2, "the bias");
    const ConstTensor &mean = need_const(3, "the mean"), &var = need_const(4, "the variance");
    const double eps = at.f("epsilon", 1e-5f);
    std::vector<float> mul, add;
    for (int64_t c = 0; c < scale.numel(); ++c) {
      const double m = scale.at(c) / std::sqrt(var.at(c) + eps);
      mul.push_back(float(m));
      add.push_back(float(bias.at(c) - mean.at(c) * m));
    }
    std::vector<int64_t> aff(static_cast<size_t>(std::max(s.rank - 1, 1)), 1);
    aff[0] = scale.numel();
    const DType t = im.operand_dtype(x);
    const int y = binary(BinaryFn::Mul, x, im.const_operand(ConstTensor::floats(aff, mul), t), -1, ".scaled");
    binary(BinaryFn::Add, val(y), im.const_operand(ConstTensor::floats(aff, add), t));
  }
  void mvn() {
    Operand x = in(0);
    const Shape s = im.operand_shape(x);
    std::vector<int> axes;
    for (int64_t a : at.ints("axes", {0, 2, 3})) axes.push_back(norm_axis(a, s.rank));
    normalize(x, axes, 1e-9, -1, -1, Shape::of({}));
  }

  void depth_space(bool to_space) {
    Operand x = in(0);
    const Shape s = im.operand_shape(x);
    if (s.rank != 4) Importer::refused("takes N x C x H x W tensors");
    const int64_t b = at.i("blocksize", 0), N = s.n, C = s.c, H = s.h, W = s.w;
    if (b < 1) Importer::refused("a blocksize below 1");
    if (to_space) {
      if (C % (b * b)) Importer::refused("channels not divisible by blocksize^2");
      const bool crd = at.s("mode", "DCR") == "CRD";
      const int r = crd ? reshape(x, {N, C / (b * b), b, b, H, W}, -1, ".split")
                        : reshape(x, {N, b, b, C / (b * b), H, W}, -1, ".split");
      const int t = transpose(val(r), crd ? std::vector<int>{0, 1, 4, 2, 5, 3} : std::vector<int>{0, 3, 4, 1, 5, 2}, -1,
                              ".perm");
      reshape(val(t), {N, C / (b * b), H * b, W * b});
    } else {
      if (H % b || W % b) Importer::refused("H or W not divisible by blocksize");
      const int r = reshape(x, {N, C, H / b, b, W / b, b}, -1, ".split");
      const int t = transpose(val(r), {0, 3, 5, 1, 2, 4}, -1, ".perm");
      reshape(val(t), {N, C * b * b, H / b, W / b});
    }
  }

  void where() {
    std::vector<Operand> ops{in(0), in(1), in(2)};
    if (ops[0].constant) ops[0].dtype = DType::Bool;
    std::vector<Operand> xy{ops[1], ops[2]};
    unify(xy);
    ops[1] = xy[0];
    ops[2] = xy[1];
    emit(make_op(OpKind::Where), ops);
  }

  // A constant mask (bool, of x's last two dims) selecting x, else zero.
  void trilu() {
    Operand x = in(0);
    const Shape s = im.operand_shape(x);
    if (s.rank < 2) Importer::refused("takes a tensor of rank 2 or more");
    const int64_t k = has(1) ? ints_of(need_const(1, "k"))[0] : 0;
    const bool upper = at.i("upper", 1) != 0;
    const int64_t R = s.dim(s.rank - 2), C = s.dim(s.rank - 1);
    std::vector<int64_t> mask;
    for (int64_t i = 0; i < R; ++i) {
      for (int64_t j = 0; j < C; ++j) mask.push_back(upper ? (j - i >= k) : (j - i <= k));
    }
    const DType t = im.operand_dtype(x);
    emit(make_op(OpKind::Where), {im.const_operand(ConstTensor::ints({R, C}, mask), DType::Bool), x, scalar(0, t)});
  }

  // Along `axis`: a matmul by a constant triangle of ones (exclusive, reverse: ONNX's forms).
  void cumsum() {
    Operand x = in(0);
    const Shape s = im.operand_shape(x);
    const int axis = norm_axis(ints_of(need_const(1, "the axis"))[0], s.rank);
    const bool exclusive = at.i("exclusive", 0) != 0, reverse = at.i("reverse", 0) != 0;
    const int64_t D = s.dim(axis);
    std::vector<float> tri;
    std::vector<int64_t> itri;
    for (int64_t i = 0; i < D; ++i) {  // row i: input position; column j: output position
      for (int64_t j = 0; j < D; ++j) {
        const bool on = reverse ? (exclusive ? i > j : i >= j) : (exclusive ? i < j : i <= j);
        tri.push_back(on ? 1.f : 0.f);
        itri.push_back(on);
      }
    }
    const DType t = im.operand_dtype(x);
    std::vector<int> perm;
    for (int d = 0; d < s.rank; ++d) {
      if (d != axis) perm.push_back(d);
    }
    perm.push_back(axis);
    std::vector<int> back(perm.size());
    for (size_t d = 0; d < perm.size(); ++d) back[size_t(perm[d])] = int(d);
    Operand moved = axis == s.rank - 1 ? x : val(transpose(x, perm, -1, ".last"));
    Operand m = is_float(t) ? im.const_operand(ConstTensor::floats({D, D}, tri), t)
                            : im.const_operand(ConstTensor::ints({D, D}, itri), t);
    const bool last = axis == s.rank - 1;
    const int prod = emit(make_op(OpKind::MatMul), {moved, m}, last ? 0 : -1, last ? "" : ".sum");
    if (!last) transpose(val(prod), back);
  }

  void onehot() {
    Operand idx = in(0);
    const ConstTensor& depth_c = need_const(1, "the depth");
    const ConstTensor& values = need_const(2, "the values");
    const int64_t depth = int64_t(depth_c.at(0));
    if (depth <= 0) Importer::refused("a depth of 0 or less");
    const Shape s = im.operand_shape(idx);
    const int axis = norm_axis(at.i("axis", -1), s.rank + 1);
    Op c = make_op(OpKind::Cast);
    c.attrs = CastAttrs{DType::I64};
    const int ii = emit(c, {idx}, -1, ".index");
    // Negative indices count from the end.
    const int neg = binary(BinaryFn::Less, val(ii), scalar(0, DType::I64), -1, ".negative");
    const int wrapped = binary(BinaryFn::Add, val(ii), scalar(double(depth), DType::I64), -1, ".wrapped");
    const int fixed = emit(make_op(OpKind::Where), {val(neg), val(wrapped), val(ii)}, -1, ".fixed");
    std::vector<int64_t> ud = s.dims();
    ud.insert(ud.begin() + axis, 1);
    const int un = reshape(val(fixed), ud, -1, ".unsqueezed");
    std::vector<int64_t> range(static_cast<size_t>(depth)), rd(ud.size(), 1);
    std::iota(range.begin(), range.end(), 0);
    rd[size_t(axis)] = depth;
    const int eq = binary(BinaryFn::Equal, val(un), im.const_operand(ConstTensor::ints(rd, range), DType::I64), -1, ".hot");
    const DType vt = const_dtype(values);
    ConstTensor off = values.integer ? ConstTensor::ints({1}, {values.i[0]}) : ConstTensor::floats({1}, {values.f[0]});
    ConstTensor on = values.integer ? ConstTensor::ints({1}, {values.i[1]}) : ConstTensor::floats({1}, {values.f[1]});
    emit(make_op(OpKind::Where), {val(eq), im.const_operand(on, vt), im.const_operand(off, vt)});
  }

  // constant, edge and reflect padding as slices and concatenations, axis by axis.
  void pad() {
    Operand x = in(0);
    const Shape s0 = im.operand_shape(x);
    std::vector<int64_t> pads = im.m_.opset < 11 ? at.ints("pads") : ints_of(need_const(1, "the pads"));
    const std::string mode = at.s("mode", "constant");
    double value = at.f("value", 0.f);
    if (im.m_.opset >= 11 && has(2)) value = need_const(2, "the constant value").at(0);
    std::vector<int64_t> axes;
    if (has(3)) axes = ints_of(need_const(3, "the axes"));
    if (axes.empty()) {
      for (int d = 0; d < s0.rank; ++d) axes.push_back(d);
    }
    if (pads.size() != 2 * axes.size()) Importer::refused("pads do not match the axes");
    if (mode != "constant" && mode != "edge" && mode != "reflect") Importer::refused("mode '" + mode + "' is not supported");
    const DType t = im.operand_dtype(x);
    Operand cur = x;
    bool any = false;
    for (size_t k = 0; k < axes.size(); ++k) {
      const int d = norm_axis(axes[k], s0.rank);
      const int64_t before = pads[k], after = pads[k + axes.size()];
      if (!before && !after) continue;
      Shape s = im.operand_shape(cur);
      const std::string tag = ".axis" + std::to_string(d);
      if (before < 0 || after < 0) {  // crop first
        SliceAttrs a = whole(s);
        a.starts[size_t(d)] = std::max<int64_t>(0, -before);
        a.counts[size_t(d)] = s.dim(d) - std::max<int64_t>(0, -before) - std::max<int64_t>(0, -after);
        if (a.counts[size_t(d)] <= 0) Importer::refused("crops a dim away");
        cur = val(slice(cur, a, -1, tag + ".crop"));
        s = im.operand_shape(cur);
      }
      std::vector<Operand> parts;
      auto side = [&](int64_t width, bool left) {
        if (width <= 0) return;
        const std::string st = tag + (left ? ".before" : ".after");
        if (mode == "constant") {
          std::vector<int64_t> dims = s.dims();
          dims[size_t(d)] = width;
          parts.push_back(val(expand(scalar(value, t), dims, -1, st)));
          return;
        }
        SliceAttrs a = whole(s);
        if (mode == "edge") {
          a.starts[size_t(d)] = left ? 0 : s.dim(d) - 1;
          a.counts[size_t(d)] = 1;
          std::vector<int64_t> dims = s.dims();
          dims[size_t(d)] = width;
          parts.push_back(val(expand(val(slice(cur, a, -1, st + ".edge")), dims, -1, st)));
          return;
        }
        if (width >= s.dim(d)) Importer::refused("reflects more than the dim holds");
        a.starts[size_t(d)] = left ? width : s.dim(d) - 2;
        a.steps[size_t(d)] = -1;
        a.counts[size_t(d)] = width;
        parts.push_back(val(slice(cur, a, -1, st)));
      };
      side(before, true);
      parts.push_back(cur);
      side(after, false);
      if (parts.size() > 1) cur = val(concat(parts, d, -1, tag));
      any = true;
    }
    reshape(cur, im.operand_shape(cur).dims());
    (void)any;
  }

  // NegativeLogLikelihoodLoss of log-probabilities x [N, C, d...] at integer targets [N, d...]:
  // -x[n, t, d] (times weight[t]), with ignore_index's targets counting nothing, then reduced.
  void nll(Operand x, Operand target, int k_weight) {
    const Shape ts = im.operand_shape(target);
    const DType ft = im.operand_dtype(x);
    const std::string reduction = at.s("reduction", "mean");
    if (reduction != "none" && reduction != "sum" && reduction != "mean") Importer::refused("reduction '" + reduction + "'");
    if (target.constant) target.dtype = DType::I64;
    const bool ignore = at.has("ignore_index");
    Operand t = target, mask;
    if (ignore) {
      const DType it = im.operand_dtype(target);
      const int eq = binary(BinaryFn::Equal, target, scalar(double(at.i("ignore_index", 0)), it), -1, ".ignored");
      mask = val(unary(Activation::Not, 0, 0, val(eq), -1, ".counted"));
      t = val(emit(make_op(OpKind::Where), {mask, target, scalar(0, it)}, -1, ".target"));
    }
    std::vector<int64_t> ud = ts.dims();
    ud.insert(ud.begin() + 1, 1);
    const int tu = reshape(t, ud, -1, ".target1");
    Op ge = make_op(OpKind::Gather);
    ge.attrs = GatherAttrs{1, true};
    const int picked = emit(ge, {x, val(tu)}, -1, ".picked");
    const int flat = reshape(val(picked), ts.dims(), -1, ".picked_flat");
    Operand loss = val(unary(Activation::Neg, 0, 0, val(flat), -1, ".loss"));
    // The weight of every element: weight[t] (or 1), zero where ignored.
    Operand w;
    bool weighted = false;
    if (k_weight >= 0 && has(k_weight)) {
      Op g = make_op(OpKind::Gather);
      g.attrs = GatherAttrs{0, false};
      w = val(emit(g, {in(k_weight), t}, -1, ".weight"));
      weighted = true;
    }
    if (ignore) {
      w = val(emit(make_op(OpKind::Where), {mask, weighted ? w : scalar(1, ft), scalar(0, ft)}, -1, ".weight_counted"));
      weighted = true;
    }
    const bool last = reduction == "none";
    if (weighted) loss = val(binary(BinaryFn::Mul, loss, w, last ? 0 : -1, last ? "" : ".weighted"));
    else if (last) loss = val(reshape(loss, ts.dims()));
    if (last) return;
    std::vector<int> all;
    for (int d = 0; d < ts.rank; ++d) all.push_back(d);
    if (reduction == "sum") {
      reduce(ReduceFn::Sum, loss, all, false);
    } else if (!weighted) {
      reduce(ReduceFn::Mean, loss, all, false);
    } else {
      const int num = reduce(ReduceFn::Sum, loss, all, false, -1, ".total");
      const int den = reduce(ReduceFn::Sum, w, all, false, -1, ".weight_total");
      binary(BinaryFn::Div, val(num), val(den));
    }
  }
  void softmax_cross_entropy() {
    Op op = make_op(OpKind::Softmax);
    op.attrs = SoftmaxAttrs{SoftmaxFn::LogSoftmax, 1};
    const int lp = unary_like(op, in(0), n.output_size() > 1 && !n.output(1).empty() ? 1 : -1, ".log_prob");
    nll(val(lp), in(1), 2);
  }

  // Resize (opset 10: X, scales; 11 on: X, roi, scales, sizes) and Upsample (X, scales).
  void resize(bool upsample) {
    Operand x = in(0);
    const Shape s = im.operand_shape(x);
    ResizeAttrs a;
    const std::string mode = at.s("mode", "nearest");
    if (mode == "nearest") a.mode = ResizeMode::Nearest;
    else if (mode == "linear" || mode == "bilinear") a.mode = ResizeMode::Linear;
    else if (mode == "cubic") a.mode = ResizeMode::Cubic;
    else Importer::refused("mode '" + mode + "'");
    const std::string coord = upsample || im.m_.opset < 11 ? "asymmetric" : at.s("coordinate_transformation_mode", "half_pixel");
    static const std::map<std::string, ResizeCoord> kCoord = {
        {"half_pixel", ResizeCoord::HalfPixel}, {"pytorch_half_pixel", ResizeCoord::PytorchHalfPixel},
        {"align_corners", ResizeCoord::AlignCorners}, {"asymmetric", ResizeCoord::Asymmetric},
        {"tf_half_pixel_for_nn", ResizeCoord::TfHalfPixelForNn}};
    if (!kCoord.count(coord)) Importer::refused("coordinate_transformation_mode '" + coord + "' is not supported");
    a.coord = kCoord.at(coord);
    const std::string nearest = upsample || im.m_.opset < 11 ? "floor" : at.s("nearest_mode", "round_prefer_floor");
    static const std::map<std::string, NearestRound> kNearest = {
        {"round_prefer_floor", NearestRound::RoundPreferFloor}, {"round_prefer_ceil", NearestRound::RoundPreferCeil},
        {"floor", NearestRound::Floor}, {"ceil", NearestRound::Ceil}};
    if (!kNearest.count(nearest)) Importer::refused("nearest_mode '" + nearest + "'");
    a.nearest = kNearest.at(nearest);
    a.cubic_a = at.f("cubic_coeff_a", -0.75f);
    a.exclude_outside = at.i("exclude_outside", 0) != 0;
    if (at.i("antialias", 0)) Importer::refused("antialias is not supported");
    std::vector<double> scales;
    std::vector<int64_t> sizes;
    const int k_scales = upsample || im.m_.opset < 11 ? 1 : 2, k_sizes = 3;
    if (has(k_scales) && im.values_.at(n.input(k_scales)).constant &&
        im.values_.at(n.input(k_scales)).constant->numel() > 0) {
      const ConstTensor& c = need_const(k_scales, "the scales");
      for (int64_t k = 0; k < c.numel(); ++k) scales.push_back(c.at(k));
    } else if (has(k_sizes)) {
      sizes = ints_of(need_const(k_sizes, "the sizes"));
    } else if (has(k_scales)) {
      need_const(k_scales, "the scales");
    } else {
      Importer::refused("has neither scales nor sizes");
    }
    std::vector<int64_t> axes = at.ints("axes");
    if (axes.empty()) {
      for (int d = 0; d < s.rank; ++d) axes.push_back(d);
    }
    const size_t given = scales.empty() ? sizes.size() : scales.size();
    if (given != axes.size()) Importer::refused("scales or sizes do not match the axes");
    a.dims = s.dims();
    a.scales.assign(size_t(s.rank), 1.0);
    for (size_t k = 0; k < axes.size(); ++k) {
      const int d = norm_axis(axes[k], s.rank);
      if (scales.empty()) {
        if (sizes[k] <= 0) Importer::refused("an output size of 0");
        a.dims[size_t(d)] = sizes[k];
        a.scales[size_t(d)] = double(sizes[k]) / double(s.dim(d));
      } else {
        if (scales[k] <= 0) Importer::refused("a scale of 0 or less");
        a.scales[size_t(d)] = scales[k];
        a.dims[size_t(d)] = int64_t(std::floor(double(s.dim(d)) * scales[k]));
        if (a.dims[size_t(d)] <= 0) Importer::refused("scales to an empty dim");
      }
    }
    if (!scales.empty() || sizes.empty()) {
      // keep_aspect_ratio_policy (opset 18) is not in the 1.12 cases; refuse it where given
    }
    if (at.s("keep_aspect_ratio_policy", "stretch") != "stretch") Importer::refused("keep_aspect_ratio_policy");
    Op op = make_op(OpKind::Resize);
    op.attrs = a;
    emit(op, {x});
  }

  void eyelike() {
    const Shape s = shape(0);
    if (s.rank != 2) Importer::refused("takes a rank-2 tensor");
    const int64_t k = at.i("k", 0);
    DType t = im.operand_dtype(in(0));
    if (at.has("dtype") && !dtype_of_onnx(int(at.i("dtype", 1)), &t)) Importer::refused("an unsupported dtype");
    std::vector<int64_t> v;
    for (int64_t i = 0; i < s.dim(0); ++i) {
      for (int64_t j = 0; j < s.dim(1); ++j) v.push_back(j - i == k);
    }
    ConstTensor c = ConstTensor::ints(s.dims(), v);
    if (is_float(t)) c = ConstTensor::floats(s.dims(), std::vector<float>(v.begin(), v.end()));
    DType ct;
    static const std::map<DType, int> kOnnx = {{DType::F32, 1}, {DType::I64, 7}, {DType::I32, 6}, {DType::F64, 11},
                                               {DType::F16, 10}, {DType::Bool, 9}, {DType::U8, 2}, {DType::I8, 3}};
    c.onnx_type = kOnnx.count(t) ? kOnnx.at(t) : 0;
    (void)ct;
    im.values_[n.output(0)].constant = std::move(c);
  }
};

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
      {"Add", bin(BinaryFn::Add)},
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
