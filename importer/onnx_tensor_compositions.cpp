// The general converters of the ONNX ops defined as compositions of others: the
// normalizations, DepthToSpace and SpaceToDepth, Where, Trilu, CumSum, OneHot, Pad, Resize,
// EyeLike and the losses, each a few general nodes (importer/onnx_general_ops.hpp).
#include <cmath>
#include <map>
#include <numeric>

#include "graph/elements.hpp"
#include "graph/ops_tensor.hpp"
#include "importer/onnx_general_ops.hpp"

namespace hios::importer::detail {

// (x - mean) / sqrt(var + eps) over `axes`, then * scale + bias (operands k_scale, k_bias).
int GeneralOps::normalize(Operand x, const std::vector<int>& axes, double eps, int k_scale, int k_bias, const Shape& affine, int mean_out, int inv_out) {
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

void GeneralOps::layer_norm() {
  Operand x = in(0);
  const Shape s = im.operand_shape(x);
  const int axis = norm_axis(at.i("axis", -1), s.rank);
  // One norm node where only Y is read and the scale and bias fit it (graph/ops.hpp, NormAttrs);
  // the mean and inverse deviation as outputs of their own take the composition below.
  const bool more_outputs = (n.output_size() > 1 && !n.output(1).empty()) || (n.output_size() > 2 && !n.output(2).empty());
  const bool fits = s.rank > 0 && norm_operand_fits(shape(1), s, axis) && (!has(2) || norm_operand_fits(shape(2), s, axis));
  if (!more_outputs && fits && is_float(im.operand_dtype(x))) {
    NormAttrs a{NormFn::Layer, axis, double(at.f("epsilon", 1e-5f))};
    std::vector<Operand> ops{x};
    // x = u + v of two computed values of x's shape that only this norm reads (a transformer's
    // residual sum): the norm adds them as it reads them, and the add node goes unread.
    if (Pending* add = im.sole_producer(n.input(0), OpKind::Binary);
        add && add->op.as<BinaryAttrs>().fn == BinaryFn::Add && add->constants.empty() && add->inputs.size() == 2) {
      std::vector<Operand> sum;
      for (const Term& t : add->inputs) {
        if (t.size() == 1 && t[0].end < 0 && shape_of(t[0].node) == s) sum.push_back(val(t[0].node));
      }
      if (sum.size() == 2) {
        a.residual = true;
        ops = sum;
      }
    }
    ops.push_back(in(1));
    if (has(2)) ops.push_back(in(2));
    unify(ops);
    Op op = make_op(OpKind::Norm);
    op.attrs = a;
    emit(std::move(op), ops);
    return;
  }
  std::vector<int> axes;
  for (int d = axis; d < s.rank; ++d) axes.push_back(d);
  normalize(x, axes, at.f("epsilon", 1e-5f), 1, has(2) ? 2 : -1, Shape::of({}), n.output_size() > 1 ? 1 : -1,
            n.output_size() > 2 ? 2 : -1);
}

// ONNX's Attention (opset 23) with Q, K and V of one rank and one head count (4-D: batch, heads,
// sequence, head size; the pattern pass also writes other ranks): one attention node
// (graph/ops.hpp, AttentionAttrs). A bool mask (true: attend) becomes the additive mask 0 or
// -infinity first; a float mask is added as it is. The 3-D form (q_num_heads), past keys and
// values, the soft cap, the optional outputs and grouped heads are refused by name.
void GeneralOps::attention() {
  const Shape q = shape(0), k = shape(1), v = shape(2);
  if (at.i("q_num_heads", 0) != 0 || at.i("kv_num_heads", 0) != 0) {
    Importer::refused("takes Q, K and V with their heads in the hidden dim (q_num_heads), which is not supported");
  }
  if (q.rank < 2 || k.rank != q.rank || v.rank != q.rank) {
    Importer::refused(strprintf("takes Q, K and V of one rank (batch, heads, sequence, head size), got %s, %s and %s",
                                q.str().c_str(), k.str().c_str(), v.str().c_str()));
  }
  if (q.rank == 4 && (k.dim(1) != q.dim(1) || v.dim(1) != q.dim(1))) {
    Importer::refused(strprintf("groups %lld query heads over %lld key heads; only equal head counts are supported",
                                (long long)q.dim(1), (long long)k.dim(1)));
  }
  if (has(4) || has(5)) Importer::refused("reads past keys and values (a key-value cache), which are not supported");
  for (int o = 1; o < n.output_size(); ++o) {
    if (!n.output(o).empty()) Importer::refused(strprintf("output %d is read; only Y is supported", o));
  }
  if (at.f("softcap", 0.0f) != 0.0f) Importer::refused("has a soft cap, which is not supported");
  AttentionAttrs a;
  a.scale = at.f("scale", float(1.0 / std::sqrt(double(q.dim(q.rank - 1)))));
  a.causal = at.i("is_causal", 0) != 0;
  std::vector<Operand> ops{in(0), in(1), in(2)};
  if (has(3)) {
    Operand mask = in(3);
    const DType t = im.operand_dtype(ops[0]);
    if (im.operand_dtype(mask) == DType::Bool) {
      mask = val(emit(make_op(OpKind::Where), {mask, scalar(0.0, t), scalar(-INFINITY, t)}, -1, ".mask"));
    } else if (!is_float(im.operand_dtype(mask))) {
      Importer::refused(strprintf("has a mask of %s values (bool or float)", dtype_name(im.operand_dtype(mask))));
    }
    ops.push_back(mask);
    a.mask = true;
  }
  unify(ops);
  Op op = make_op(OpKind::Attention);
  op.attrs = a;
  emit(std::move(op), ops);
}

void GeneralOps::instance_norm() {
  Operand x = in(0);
  const Shape s = im.operand_shape(x);
  std::vector<int> axes;
  for (int d = 2; d < s.rank; ++d) axes.push_back(d);
  std::vector<int64_t> aff(static_cast<size_t>(s.rank - 1), 1);
  aff[0] = s.dim(1);
  normalize(x, axes, at.f("epsilon", 1e-5f), 1, 2, Shape::of(aff));
}

void GeneralOps::batch_norm() {
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

void GeneralOps::mvn() {
  Operand x = in(0);
  const Shape s = im.operand_shape(x);
  std::vector<int> axes;
  for (int64_t a : at.ints("axes", {0, 2, 3})) axes.push_back(norm_axis(a, s.rank));
  normalize(x, axes, 1e-9, -1, -1, Shape::of({}));
}

void GeneralOps::depth_space(bool to_space) {
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

void GeneralOps::where() {
  std::vector<Operand> ops{in(0), in(1), in(2)};
  if (ops[0].constant) ops[0].dtype = DType::Bool;
  std::vector<Operand> xy{ops[1], ops[2]};
  unify(xy);
  ops[1] = xy[0];
  ops[2] = xy[1];
  emit(make_op(OpKind::Where), ops);
}

// A constant mask (bool, of x's last two dims) selecting x, else zero.
void GeneralOps::trilu() {
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
void GeneralOps::cumsum() {
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

void GeneralOps::onehot() {
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
void GeneralOps::pad() {
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
    constexpr int64_t kMaxPad = int64_t(1) << 31;  // past any dim: keeps the crop arithmetic in range
    if (std::abs(std::max(before, -kMaxPad)) >= kMaxPad || std::abs(std::max(after, -kMaxPad)) >= kMaxPad) {
      Importer::refused(strprintf("pads of %lld and %lld are out of range", (long long)before, (long long)after));
    }
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
void GeneralOps::nll(Operand x, Operand target, int k_weight) {
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

void GeneralOps::softmax_cross_entropy() {
  Op op = make_op(OpKind::Softmax);
  op.attrs = SoftmaxAttrs{SoftmaxFn::LogSoftmax, 1};
  const int lp = unary_like(op, in(0), n.output_size() > 1 && !n.output(1).empty() ? 1 : -1, ".log_prob");
  nll(val(lp), in(1), 2);
}

// Resize (opset 10: X, scales; 11 on: X, roi, scales, sizes) and Upsample (X, scales).
void GeneralOps::resize(bool upsample) {
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

void GeneralOps::eyelike() {
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

}  // namespace hios::importer::detail
