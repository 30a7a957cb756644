// The general converters' working object (importer/onnx_tensor_ops.cpp): one ONNX node, its
// attributes, and the helpers that build general nodes from its operands. The converters of the
// ops ONNX defines as compositions (normalizations, Pad, Resize, the losses, ...) are in
// importer/onnx_tensor_compositions.cpp. Internal to importer/.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "graph/error.hpp"
#include "importer/onnx_import_internal.hpp"

namespace hios::importer::detail {

using Operand = Importer::Operand;

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
    // Hard-swish after a convolution that alone computes its input (MobileNetV3's blocks) is that
    // convolution's epilogue, as relu, sigmoid and tanh are (Importer::apply_activation).
    if (a == Activation::HardSwish && output == 0 && suffix.empty() && n.input_size() == 1) {
      if (Pending* p = im.sole_producer(n.input(0), OpKind::Conv);
          p && p->op.conv().activation == Activation::None && p->dtype == DType::F32) {
        std::get<ConvAttrs>(p->op.attrs).activation = a;
        ++im.folded_["activations into the convolution before them"];
        im.set_live(n, *im.values_.at(n.input(0)).live);
        return x.value.node;
      }
    }
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
  // Add of a constant along the last dim to a product by a matmul that nothing else reads (every
  // exporter's linear layer: MatMul by the weight, then Add of the bias): the bias becomes the
  // product's addend (MatMulAttrs, beta 1), one node instead of two, which the CUDA backend
  // adds in cuBLAS's epilogue. False, and nothing changed, where the Add is anything else.
  bool bias_into_matmul() {
    if (n.input_size() != 2 || !has(0) || !has(1)) return false;
    const Operand a = in(0), b = in(1);
    if (a.constant.has_value() == b.constant.has_value()) return false;  // one computed, one constant
    const int k = a.constant ? 1 : 0;
    const Operand& bias = a.constant ? a : b;
    Pending* p = im.sole_producer(n.input(k), OpKind::MatMul);
    if (!p || p->inputs.size() + p->constants.size() != 2 || !is_float(p->dtype) || bias.constant->integer) return false;
    const MatMulAttrs& m = p->op.as<MatMulAttrs>();
    const Shape& y = p->shape;
    const std::vector<int64_t>& d = bias.constant->dims;
    if (m.alpha != 1 || m.beta != 1 || y.rank < 1 || d.empty() || int(d.size()) > y.rank || d.back() != y.dim(y.rank - 1) ||
        bias.constant->numel() != d.back()) {
      return false;
    }
    Operand c = bias;
    c.dtype = p->dtype;
    im.add_constant_operand(*p, 2, c);
    im.set_live(n, *im.values_.at(n.input(k)).live);
    ++im.folded_["Adds of a bias into the matrix product before them"];
    return true;
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
    // A permutation that moves only dims of size 1 keeps every element where it was in row-major
    // order: it is a reshape, which the memory plan can make a view (an exported transformer
    // swaps its batch of 1 with the tokens twice a layer). Anything else, a malformed
    // permutation included, stays a transpose for its own checks.
    const Shape s = im.operand_shape(x);
    if (int(perm.size()) == s.rank) {
      std::vector<bool> seen(size_t(s.rank), false);
      std::vector<int64_t> dims;
      int last = -1;
      bool moves_data = false;
      for (int d : perm) {
        if (d < 0 || d >= s.rank || seen[size_t(d)]) {
          moves_data = true;
          break;
        }
        seen[size_t(d)] = true;
        dims.push_back(s.dim(d));
        if (s.dim(d) == 1) continue;
        if (d < last) moves_data = true;
        last = d;
      }
      if (!moves_data) return reshape(x, dims, output, suffix);
    }
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
    if (rank > kMaxRank) Importer::refused(strprintf("gives rank %d; hios tensors have rank %d at most", rank, kMaxRank));
    std::vector<int> axes;
    for (int64_t a : raw) {
      const int axis = norm_axis(a, rank);
      // ONNX forbids a repeated axis; counting it twice would read past the input's dims.
      if (std::find(axes.begin(), axes.end(), axis) != axes.end()) Importer::refused(strprintf("lists axis %d twice", axis));
      axes.push_back(axis);
    }
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
  int normalize(Operand x, const std::vector<int>& axes, double eps, int k_scale, int k_bias, const Shape& affine, int mean_out = -1, int inv_out = -1);
  void layer_norm();
  void attention();
  void instance_norm();
  void batch_norm();
  void mvn();

  void depth_space(bool to_space);

  void where();

  // A constant mask (bool, of x's last two dims) selecting x, else zero.
  void trilu();

  // Along `axis`: a matmul by a constant triangle of ones (exclusive, reverse: ONNX's forms).
  void cumsum();

  void onehot();

  // constant, edge and reflect padding as slices and concatenations, axis by axis.
  void pad();

  // NegativeLogLikelihoodLoss of log-probabilities x [N, C, d...] at integer targets [N, d...]:
  // -x[n, t, d] (times weight[t]), with ignore_index's targets counting nothing, then reduced.
  void nll(Operand x, Operand target, int k_weight);
  void softmax_cross_entropy();

  // Resize (opset 10: X, scales; 11 on: X, roi, scales, sizes) and Upsample (X, scales).
  void resize(bool upsample);

  void eyelike();
};

}  // namespace hios::importer::detail
