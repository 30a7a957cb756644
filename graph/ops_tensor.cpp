// The general tensor ops of the op table: shape and type inference, counts, JSON and labels.
// Their operands are their input terms (one whole value each) and the node's constants; the
// graph checks that before calling these. Binary, where and resize split by rows on images
// (graph/row_split.cpp says where); the others read every input row, so a row split's region
// stops before one.
#include "graph/ops_tensor.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "graph/error.hpp"

namespace hios {

namespace {

double bytes_of(const Shape& s, DType t) { return double(s.numel()) * double(dtype_size(t)); }
double bytes_in(const std::vector<Shape>& in, DType t) {
  double b = 0;
  for (const Shape& s : in) b += bytes_of(s, t);
  return b;
}

void need_operands(const std::vector<Shape>& in, size_t lo, size_t hi, const InferContext& ctx, const char* op) {
  HIOS_CHECK(in.size() >= lo && in.size() <= hi, "node '%s': %s takes %zu%s operands, got %zu", ctx.node.c_str(), op, lo,
             hi == lo ? "" : hi > 64 ? " or more" : strprintf(" to %zu", hi).c_str(), in.size());
}
DType operand_type(const InferContext& ctx, size_t k) { return k < ctx.dtypes.size() ? ctx.dtypes[k] : DType::F32; }
bool typed(const InferContext& ctx) { return !ctx.dtypes.empty(); }

std::string dims_text(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? "," : "") + std::to_string(d[i]);
  return s + "]";
}

// Reads a JSON array of integers at `key` (each in [lo, hi]).
template <class T>
std::vector<T> int_list(JsonObject& o, const std::string& key, int64_t lo, int64_t hi) {
  std::vector<T> out;
  const json& a = o.get_array(key);
  HIOS_CHECK(a.size() <= 64, "%s: %zu entries (at most 64)", o.child_path(key).c_str(), a.size());
  for (size_t k = 0; k < a.size(); ++k) {
    const std::string path = o.child_path(key) + strprintf("[%zu]", k);
    HIOS_CHECK(a[k].is_number_integer(), "%s: expected an integer", path.c_str());
    const int64_t v = a[k].get<int64_t>();
    HIOS_CHECK(v >= lo && v <= hi, "%s: %lld is out of range [%lld, %lld]", path.c_str(), (long long)v, (long long)lo,
               (long long)hi);
    out.push_back(T(v));
  }
  return out;
}
constexpr int64_t kMaxDim = (int64_t(1) << 31) - 1;

OpCost count_elementwise(const Op&, const std::vector<Shape>& in, const Shape& out, DType t) {
  OpCost c;
  c.flops = double(out.numel());
  c.bytes_read = bytes_in(in, t);
  c.bytes_written = bytes_of(out, t);
  return c;
}
// Movement: nothing computed, the output written once and at most as much read.
OpCost count_copy(const Op&, const std::vector<Shape>&, const Shape& out, DType t) {
  OpCost c;
  c.bytes_read = bytes_of(out, t);
  c.bytes_written = bytes_of(out, t);
  return c;
}
void write_none(const Op&, json&) {}
void read_none(Op& op, JsonObject&) { op.attrs = std::monostate{}; }
std::string describe_name(const Op& op) { return op_def(op.kind).name; }
RowRange rows_whole(const Op&, RowRange out, int64_t in_h) { return out.empty() ? RowRange{} : RowRange{0, in_h}; }
RowRange resize_input_rows(const ResizeAttrs& a, RowRange out, int64_t in_h);

// ---------------------------------------------------------------------------------------------
// join: waits for its operands (a graph's several results); its value is one zero.

Shape infer_join(const Op&, const std::vector<Shape>& in, const InferContext& ctx) {
  need_operands(in, 1, 1 << 20, ctx, "join");
  return Shape::of({1});
}
OpCost count_join(const Op&, const std::vector<Shape>&, const Shape&, DType) { return {}; }

// ---------------------------------------------------------------------------------------------
// binary

constexpr const char* kBinaryNames[] = {"add", "sub", "mul", "div", "pow", "min", "max", "mod", "fmod", "equal",
                                        "less", "less_equal", "greater", "greater_equal", "and", "or", "xor", "prelu",
                                        "shift_left", "shift_right", "bit_and", "bit_or", "bit_xor"};
static_assert(sizeof(kBinaryNames) / sizeof(kBinaryNames[0]) == kNumBinaryFns, "one name per BinaryFn");

bool logical(BinaryFn f) { return f == BinaryFn::And || f == BinaryFn::Or || f == BinaryFn::Xor; }
bool integer_only(BinaryFn f) {
  return f == BinaryFn::ShiftLeft || f == BinaryFn::ShiftRight || f == BinaryFn::BitAnd || f == BinaryFn::BitOr ||
         f == BinaryFn::BitXor;
}

Shape infer_binary(const Op& op, const std::vector<Shape>& in, const InferContext& ctx) {
  const BinaryFn f = op.as<BinaryAttrs>().fn;
  need_operands(in, 2, 2, ctx, binary_fn_name(f));
  Shape out;
  HIOS_CHECK(broadcast_shapes(in, &out), "node '%s': %s of shapes %s and %s, which do not broadcast", ctx.node.c_str(),
             binary_fn_name(f), in[0].str().c_str(), in[1].str().c_str());
  if (typed(ctx)) {
    const DType a = operand_type(ctx, 0), b = operand_type(ctx, 1);
    HIOS_CHECK(a == b || f == BinaryFn::Pow, "node '%s': %s of a %s and a %s tensor (one type needed)", ctx.node.c_str(),
               binary_fn_name(f), dtype_name(a), dtype_name(b));
    HIOS_CHECK(!logical(f) || a == DType::Bool, "node '%s': %s of %s tensors (it takes bool)", ctx.node.c_str(),
               binary_fn_name(f), dtype_name(a));
    HIOS_CHECK(!integer_only(f) || (!is_float(a) && a != DType::Bool), "node '%s': %s of %s tensors (it takes integers)",
               ctx.node.c_str(), binary_fn_name(f), dtype_name(a));
    HIOS_CHECK(logical(f) || f == BinaryFn::Equal || a != DType::Bool, "node '%s': %s of bool tensors", ctx.node.c_str(),
               binary_fn_name(f));
    HIOS_CHECK(f != BinaryFn::PRelu || out == in[0], "node '%s': prelu's slope %s does not broadcast to its input %s",
               ctx.node.c_str(), in[1].str().c_str(), in[0].str().c_str());
  }
  return out;
}
DType dtype_binary(const Op& op, const std::vector<DType>& in) {
  return binary_fn_compares(op.as<BinaryAttrs>().fn) ? DType::Bool : in.empty() ? DType::F32 : in[0];
}
void write_binary(const Op& op, json& j) { j["fn"] = binary_fn_name(op.as<BinaryAttrs>().fn); }
void read_binary(Op& op, JsonObject& o) {
  const std::string fn = o.get_string("fn");
  for (int k = 0; k < kNumBinaryFns; ++k) {
    if (fn == kBinaryNames[k]) {
      op.attrs = BinaryAttrs{BinaryFn(k)};
      return;
    }
  }
  throw_error("%s: unknown binary fn '%s'", o.child_path("fn").c_str(), printable(fn).c_str());
}
std::string describe_binary(const Op& op) { return binary_fn_name(op.as<BinaryAttrs>().fn); }

// ---------------------------------------------------------------------------------------------
// where(cond, x, y)

Shape infer_where(const Op&, const std::vector<Shape>& in, const InferContext& ctx) {
  need_operands(in, 3, 3, ctx, "where");
  Shape out;
  HIOS_CHECK(broadcast_shapes(in, &out), "node '%s': where of shapes %s, %s and %s, which do not broadcast",
             ctx.node.c_str(), in[0].str().c_str(), in[1].str().c_str(), in[2].str().c_str());
  if (typed(ctx)) {
    HIOS_CHECK(operand_type(ctx, 0) == DType::Bool, "node '%s': where's condition is %s (it takes bool)",
               ctx.node.c_str(), dtype_name(operand_type(ctx, 0)));
    HIOS_CHECK(operand_type(ctx, 1) == operand_type(ctx, 2), "node '%s': where of a %s and a %s tensor",
               ctx.node.c_str(), dtype_name(operand_type(ctx, 1)), dtype_name(operand_type(ctx, 2)));
  }
  return out;
}
DType dtype_where(const Op&, const std::vector<DType>& in) { return in.size() > 1 ? in[1] : DType::F32; }

// ---------------------------------------------------------------------------------------------
// reduce

constexpr const char* kReduceNames[] = {"sum", "mean", "max", "min", "prod", "l1", "l2", "log_sum", "log_sum_exp",
                                        "sum_square", "arg_max", "arg_min"};
bool arg_reduce(ReduceFn f) { return f == ReduceFn::ArgMax || f == ReduceFn::ArgMin; }

Shape infer_reduce(const Op& op, const std::vector<Shape>& in, const InferContext& ctx) {
  const ReduceAttrs& a = op.as<ReduceAttrs>();
  need_operands(in, 1, 1, ctx, "reduce");
  const Shape& x = in[0];
  for (size_t k = 0; k < a.axes.size(); ++k) {
    HIOS_CHECK(a.axes[k] >= 0 && a.axes[k] < x.rank && (k == 0 || a.axes[k] > a.axes[k - 1]),
               "node '%s': reduce axes must be distinct dims of the rank-%d input, ascending", ctx.node.c_str(), x.rank);
  }
  HIOS_CHECK(!arg_reduce(a.fn) || a.axes.size() == 1, "node '%s': %s takes one axis", ctx.node.c_str(),
             reduce_fn_name(a.fn));
  HIOS_CHECK(!typed(ctx) || operand_type(ctx, 0) != DType::Bool, "node '%s': %s of a bool tensor", ctx.node.c_str(),
             reduce_fn_name(a.fn));
  std::vector<int64_t> dims;
  for (int d = 0; d < x.rank; ++d) {
    const bool reduced = a.axes.empty() || std::find(a.axes.begin(), a.axes.end(), d) != a.axes.end();
    if (!reduced) dims.push_back(x.dim(d));
    else if (a.keepdims) dims.push_back(1);
  }
  for (int d = 0; d < x.rank; ++d) {
    const bool reduced = a.axes.empty() || std::find(a.axes.begin(), a.axes.end(), d) != a.axes.end();
    HIOS_CHECK(!reduced || x.dim(d) > 0, "node '%s': reduces an empty dim", ctx.node.c_str());
  }
  return Shape::of(dims);
}
DType dtype_reduce(const Op& op, const std::vector<DType>& in) {
  return arg_reduce(op.as<ReduceAttrs>().fn) ? DType::I64 : in.empty() ? DType::F32 : in[0];
}
OpCost count_reduce(const Op&, const std::vector<Shape>& in, const Shape& out, DType t) {
  OpCost c;
  c.flops = double(in[0].numel());
  c.bytes_read = bytes_of(in[0], t);
  c.bytes_written = bytes_of(out, t);
  return c;
}
void write_reduce(const Op& op, json& j) {
  const ReduceAttrs& a = op.as<ReduceAttrs>();
  j["fn"] = reduce_fn_name(a.fn);
  j["axes"] = a.axes;
  j["keepdims"] = a.keepdims;
  if (arg_reduce(a.fn)) j["select_last"] = a.select_last;
}
void read_reduce(Op& op, JsonObject& o) {
  ReduceAttrs a;
  const std::string fn = o.get_string("fn");
  int k = 0;
  while (k < int(ReduceFn::ArgMin) + 1 && fn != kReduceNames[k]) ++k;
  HIOS_CHECK(k <= int(ReduceFn::ArgMin), "%s: unknown reduce fn '%s'", o.child_path("fn").c_str(), printable(fn).c_str());
  a.fn = ReduceFn(k);
  a.axes = int_list<int>(o, "axes", 0, kMaxRank - 1);
  a.keepdims = o.get_bool("keepdims");
  if (arg_reduce(a.fn)) a.select_last = o.get_bool("select_last", false);
  op.attrs = std::move(a);
}
std::string describe_reduce(const Op& op) {
  const ReduceAttrs& a = op.as<ReduceAttrs>();
  std::string s = strprintf("reduce %s", reduce_fn_name(a.fn));
  for (size_t k = 0; k < a.axes.size(); ++k) s += (k ? "," : " ") + std::to_string(a.axes[k]);
  return s;
}

// ---------------------------------------------------------------------------------------------
// matmul

Shape infer_matmul(const Op& op, const std::vector<Shape>& in, const InferContext& ctx) {
  need_operands(in, 2, 3, ctx, "matmul");
  Shape out;
  std::string why;
  HIOS_CHECK(matmul_shape(op.as<MatMulAttrs>(), in[0], in[1], &out, &why), "node '%s': matmul of %s and %s: %s",
             ctx.node.c_str(), in[0].str().c_str(), in[1].str().c_str(), why.c_str());
  if (in.size() == 3) {
    Shape b;
    HIOS_CHECK(broadcast_shapes({out, in[2]}, &b) && b == out, "node '%s': matmul's addend %s does not broadcast to %s",
               ctx.node.c_str(), in[2].str().c_str(), out.str().c_str());
  }
  if (typed(ctx)) {
    for (size_t k = 0; k < in.size(); ++k) {
      HIOS_CHECK(is_float(operand_type(ctx, k)) || operand_type(ctx, k) == operand_type(ctx, 0),
                 "node '%s': matmul operand %zu is %s", ctx.node.c_str(), k, dtype_name(operand_type(ctx, k)));
    }
    HIOS_CHECK(operand_type(ctx, 0) == operand_type(ctx, 1), "node '%s': matmul of a %s and a %s tensor",
               ctx.node.c_str(), dtype_name(operand_type(ctx, 0)), dtype_name(operand_type(ctx, 1)));
  }
  return out;
}
OpCost count_matmul(const Op& op, const std::vector<Shape>& in, const Shape& out, DType t) {
  const MatMulAttrs& a = op.as<MatMulAttrs>();
  const Shape& A = in[0];
  const int64_t k = A.rank == 1 ? A.dim(0) : a.trans_a ? A.dim(A.rank - 2) : A.dim(A.rank - 1);
  OpCost c;
  c.macs = double(out.numel()) * double(k);
  c.flops = 2 * c.macs + (in.size() == 3 ? double(out.numel()) : 0);
  c.bytes_read = bytes_in(in, t);
  c.bytes_written = bytes_of(out, t);
  return c;
}
void write_matmul(const Op& op, json& j) {
  const MatMulAttrs& a = op.as<MatMulAttrs>();
  j["trans_a"] = a.trans_a;
  j["trans_b"] = a.trans_b;
  j["alpha"] = a.alpha;
  j["beta"] = a.beta;
}
void read_matmul(Op& op, JsonObject& o) {
  MatMulAttrs a;
  a.trans_a = o.get_bool("trans_a", false);
  a.trans_b = o.get_bool("trans_b", false);
  a.alpha = o.get_number("alpha", 1.0);
  a.beta = o.get_number("beta", 1.0);
  op.attrs = a;
}
std::string describe_matmul(const Op& op) {
  const MatMulAttrs& a = op.as<MatMulAttrs>();
  return strprintf("matmul%s%s", a.trans_a ? " A'" : "", a.trans_b ? " B'" : "");
}

// ---------------------------------------------------------------------------------------------
// transpose, reshape, expand: one operand moved

Shape infer_transpose(const Op& op, const std::vector<Shape>& in, const InferContext& ctx) {
  need_operands(in, 1, 1, ctx, "transpose");
  const std::vector<int>& p = op.as<TransposeAttrs>().perm;
  HIOS_CHECK(int(p.size()) == in[0].rank, "node '%s': transpose's perm has %zu entries for a rank-%d input",
             ctx.node.c_str(), p.size(), in[0].rank);
  std::vector<bool> seen(p.size(), false);
  std::vector<int64_t> dims;
  for (int d : p) {
    HIOS_CHECK(d >= 0 && d < int(p.size()) && !seen[size_t(d)], "node '%s': transpose's perm is not a permutation",
               ctx.node.c_str());
    seen[size_t(d)] = true;
    dims.push_back(in[0].dim(d));
  }
  return Shape::of(dims);
}
void write_transpose(const Op& op, json& j) { j["perm"] = op.as<TransposeAttrs>().perm; }
void read_transpose(Op& op, JsonObject& o) { op.attrs = TransposeAttrs{int_list<int>(o, "perm", 0, kMaxRank - 1)}; }
std::string describe_transpose(const Op& op) {
  std::vector<int64_t> p(op.as<TransposeAttrs>().perm.begin(), op.as<TransposeAttrs>().perm.end());
  return "transpose " + dims_text(p);
}

// A 0 copies the input's dim there and one -1 takes what is left (ONNX's Reshape), so a graph
// follows another batch or size (graph_at_shape).
Shape infer_reshape(const Op& op, const std::vector<Shape>& in, const InferContext& ctx) {
  need_operands(in, 1, 1, ctx, "reshape");
  std::vector<int64_t> dims = op.as<ReshapeAttrs>().dims;
  int infer = -1;
  int64_t known = 1;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] == 0) {
      HIOS_CHECK(int(d) < in[0].rank, "node '%s': reshape copies dim %zu of a rank-%d input", ctx.node.c_str(), d, in[0].rank);
      dims[d] = in[0].dim(int(d));
    }
    if (dims[d] == -1) {
      HIOS_CHECK(infer < 0, "node '%s': reshape with two -1 dims", ctx.node.c_str());
      infer = int(d);
      continue;
    }
    known *= dims[d];
  }
  if (infer >= 0) {
    HIOS_CHECK(known > 0 && in[0].numel() % known == 0, "node '%s': reshape of %s to %s", ctx.node.c_str(),
               in[0].str().c_str(), dims_text(op.as<ReshapeAttrs>().dims).c_str());
    dims[size_t(infer)] = in[0].numel() / known;
  }
  const Shape out = Shape::of(dims);
  HIOS_CHECK(out.numel() == in[0].numel(), "node '%s': reshape of %s (%lld elements) to %s", ctx.node.c_str(),
             in[0].str().c_str(), (long long)in[0].numel(), dims_text(op.as<ReshapeAttrs>().dims).c_str());
  return out;
}
void write_reshape(const Op& op, json& j) { j["dims"] = op.as<ReshapeAttrs>().dims; }
void read_reshape(Op& op, JsonObject& o) { op.attrs = ReshapeAttrs{int_list<int64_t>(o, "dims", -1, kMaxDim)}; }
std::string describe_reshape(const Op& op) { return "reshape " + dims_text(op.as<ReshapeAttrs>().dims); }

Shape infer_expand(const Op& op, const std::vector<Shape>& in, const InferContext& ctx) {
  need_operands(in, 1, 1, ctx, "expand");
  Shape out;
  HIOS_CHECK(broadcast_shapes({in[0], Shape::of(op.as<ExpandAttrs>().dims)}, &out),
             "node '%s': expand of %s to %s, which do not broadcast", ctx.node.c_str(), in[0].str().c_str(),
             dims_text(op.as<ExpandAttrs>().dims).c_str());
  return out;
}
void write_expand(const Op& op, json& j) { j["dims"] = op.as<ExpandAttrs>().dims; }
void read_expand(Op& op, JsonObject& o) { op.attrs = ExpandAttrs{int_list<int64_t>(o, "dims", 1, kMaxDim)}; }
std::string describe_expand(const Op& op) { return "expand " + dims_text(op.as<ExpandAttrs>().dims); }

// ---------------------------------------------------------------------------------------------
// concat on any axis

Shape infer_concat(const Op& op, const std::vector<Shape>& in, const InferContext& ctx) {
  need_operands(in, 1, 1 << 20, ctx, "concat");
  const int axis = op.as<ConcatAttrs>().axis;
  Shape out = in[0];
  HIOS_CHECK(axis >= 0 && axis < out.rank, "node '%s': concat on axis %d of rank-%d tensors", ctx.node.c_str(), axis,
             out.rank);
  for (size_t k = 1; k < in.size(); ++k) {
    bool same = in[k].rank == out.rank;
    for (int d = 0; same && d < out.rank; ++d) same = d == axis || in[k].dim(d) == out.dim(d);
    HIOS_CHECK(same, "node '%s': concat on axis %d of %s and %s", ctx.node.c_str(), axis, in[0].str().c_str(),
               in[k].str().c_str());
    HIOS_CHECK(!typed(ctx) || operand_type(ctx, k) == operand_type(ctx, 0), "node '%s': concat of a %s and a %s tensor",
               ctx.node.c_str(), dtype_name(operand_type(ctx, 0)), dtype_name(operand_type(ctx, k)));
    HIOS_CHECK(out.dim(axis) <= kMaxDim - in[k].dim(axis), "node '%s': concat on axis %d grows the dim past %lld",
               ctx.node.c_str(), axis, (long long)kMaxDim);
    out.dim(axis) += in[k].dim(axis);
  }
  return out;
}
void write_concat(const Op& op, json& j) { j["axis"] = op.as<ConcatAttrs>().axis; }
void read_concat(Op& op, JsonObject& o) { op.attrs = ConcatAttrs{int(o.get_int_in("axis", 0, kMaxRank - 1))}; }
std::string describe_concat(const Op& op) { return strprintf("concat axis %d", op.as<ConcatAttrs>().axis); }

// ---------------------------------------------------------------------------------------------
// slice

Shape infer_slice(const Op& op, const std::vector<Shape>& in, const InferContext& ctx) {
  need_operands(in, 1, 1, ctx, "slice");
  const SliceAttrs& a = op.as<SliceAttrs>();
  const Shape& x = in[0];
  HIOS_CHECK(int(a.starts.size()) == x.rank && a.steps.size() == a.starts.size() && a.counts.size() == a.starts.size(),
             "node '%s': slice needs a start, step and count for each of the input's %d dims", ctx.node.c_str(), x.rank);
  std::vector<int64_t> dims;
  for (int d = 0; d < x.rank; ++d) {
    const int64_t s = a.starts[size_t(d)], st = a.steps[size_t(d)], n = a.counts[size_t(d)];
    const int64_t last = s + (n - 1) * st;
    HIOS_CHECK(n >= 1 && st != 0 && s >= 0 && s < x.dim(d) && last >= 0 && last < x.dim(d),
               "node '%s': slice of dim %d (%lld) from %lld by %lld, %lld elements, leaves the dim", ctx.node.c_str(),
               d, (long long)x.dim(d), (long long)s, (long long)st, (long long)n);
    dims.push_back(n);
  }
  return Shape::of(dims);
}
void write_slice(const Op& op, json& j) {
  const SliceAttrs& a = op.as<SliceAttrs>();
  j["starts"] = a.starts;
  j["steps"] = a.steps;
  j["counts"] = a.counts;
}
void read_slice(Op& op, JsonObject& o) {
  SliceAttrs a;
  a.starts = int_list<int64_t>(o, "starts", 0, kMaxDim);
  a.steps = int_list<int64_t>(o, "steps", -kMaxDim, kMaxDim);
  a.counts = int_list<int64_t>(o, "counts", 1, kMaxDim);
  op.attrs = std::move(a);
}
std::string describe_slice(const Op& op) {
  const SliceAttrs& a = op.as<SliceAttrs>();
  return "slice " + dims_text(a.starts) + " by " + dims_text(a.steps) + " x " + dims_text(a.counts);
}

// ---------------------------------------------------------------------------------------------
// gather, gather_elements

Shape infer_gather(const Op& op, const std::vector<Shape>& in, const InferContext& ctx) {
  need_operands(in, 2, 2, ctx, "gather");
  const GatherAttrs& a = op.as<GatherAttrs>();
  const Shape& x = in[0];
  const Shape& idx = in[1];
  HIOS_CHECK(a.axis >= 0 && a.axis < x.rank, "node '%s': gather on axis %d of a rank-%d tensor", ctx.node.c_str(), a.axis,
             x.rank);
  HIOS_CHECK(!typed(ctx) || operand_type(ctx, 1) == DType::I64 || operand_type(ctx, 1) == DType::I32,
             "node '%s': gather's indices are %s (int64 or int32 needed)", ctx.node.c_str(),
             dtype_name(operand_type(ctx, 1)));
  if (a.elements) {
    HIOS_CHECK(idx.rank == x.rank, "node '%s': gather_elements of a rank-%d tensor by rank-%d indices", ctx.node.c_str(),
               x.rank, idx.rank);
    return idx;
  }
  std::vector<int64_t> dims;
  for (int d = 0; d < a.axis; ++d) dims.push_back(x.dim(d));
  for (int d = 0; d < idx.rank; ++d) dims.push_back(idx.dim(d));
  for (int d = a.axis + 1; d < x.rank; ++d) dims.push_back(x.dim(d));
  return Shape::of(dims);
}
void write_gather(const Op& op, json& j) {
  j["axis"] = op.as<GatherAttrs>().axis;
  if (op.as<GatherAttrs>().elements) j["elements"] = true;
}
void read_gather(Op& op, JsonObject& o) {
  op.attrs = GatherAttrs{int(o.get_int_in("axis", 0, kMaxRank - 1)), o.get_bool("elements", false)};
}
std::string describe_gather(const Op& op) {
  return strprintf("gather%s axis %d", op.as<GatherAttrs>().elements ? "_elements" : "", op.as<GatherAttrs>().axis);
}

// ---------------------------------------------------------------------------------------------
// cast

Shape infer_cast(const Op&, const std::vector<Shape>& in, const InferContext& ctx) {
  need_operands(in, 1, 1, ctx, "cast");
  return in[0];
}
DType dtype_cast(const Op& op, const std::vector<DType>&) { return op.as<CastAttrs>().to; }
void write_cast(const Op& op, json& j) { j["to"] = dtype_name(op.as<CastAttrs>().to); }
void read_cast(Op& op, JsonObject& o) {
  CastAttrs a;
  const std::string to = o.get_string("to");
  HIOS_CHECK(parse_dtype(to, &a.to), "%s: unknown element type '%s'", o.child_path("to").c_str(), printable(to).c_str());
  op.attrs = a;
}
std::string describe_cast(const Op& op) { return std::string("cast ") + dtype_name(op.as<CastAttrs>().to); }

// ---------------------------------------------------------------------------------------------
// resize

constexpr const char* kResizeModes[] = {"nearest", "linear", "cubic"};
constexpr const char* kResizeCoords[] = {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                                         "tf_half_pixel_for_nn"};
constexpr const char* kNearestRounds[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
template <size_t N>
int name_index(const char* const (&names)[N], const std::string& s, const std::string& path) {
  for (size_t k = 0; k < N; ++k) {
    if (s == names[k]) return int(k);
  }
  throw_error("%s: unknown value '%s'", path.c_str(), printable(s).c_str());
}

Shape infer_resize(const Op& op, const std::vector<Shape>& in, const InferContext& ctx) {
  need_operands(in, 1, 1, ctx, "resize");
  const ResizeAttrs& a = op.as<ResizeAttrs>();
  HIOS_CHECK(int(a.dims.size()) == in[0].rank && a.scales.size() == a.dims.size(),
             "node '%s': resize needs an output dim and a scale for each of the input's %d dims", ctx.node.c_str(),
             in[0].rank);
  for (double s : a.scales) HIOS_CHECK(s > 0 && std::isfinite(s), "node '%s': resize by a scale of %g", ctx.node.c_str(), s);
  HIOS_CHECK(!typed(ctx) || is_float(operand_type(ctx, 0)) || a.mode == ResizeMode::Nearest,
             "node '%s': %s resize of a %s tensor", ctx.node.c_str(), kResizeModes[int(a.mode)],
             dtype_name(operand_type(ctx, 0)));
  if (!a.rows.banded()) return Shape::of(a.dims);
  // A band: its rows lie in the whole output, and the operand holds every input row they read.
  const RowWindow& r = a.rows;
  HIOS_CHECK(in[0].rank == 4 && a.scales[0] == 1 && a.scales[1] == 1 && a.dims[0] == in[0].n && a.dims[1] == in[0].c,
             "node '%s': a band of a resize resizes the rows and columns of an N x C x H x W tensor only", ctx.node.c_str());
  HIOS_CHECK(r.out_first <= a.dims[2] - r.out_count && r.in_first <= r.in_full - in[0].h,
             "node '%s': band rows %lld-%lld of %lld from input rows %lld-%lld of %lld lie outside the tensors",
             ctx.node.c_str(), (long long)r.out_first, (long long)(r.out_first + r.out_count), (long long)a.dims[2],
             (long long)r.in_first, (long long)(r.in_first + in[0].h), (long long)r.in_full);
  const RowRange need = resize_input_rows(a, {r.out_first, r.out_first + r.out_count}, r.in_full);
  HIOS_CHECK(need.begin >= r.in_first && need.end <= r.in_first + in[0].h,
             "node '%s': rows %lld-%lld read input rows %lld-%lld but the input holds rows %lld-%lld", ctx.node.c_str(),
             (long long)r.out_first, (long long)(r.out_first + r.out_count), (long long)need.begin,
             (long long)need.end, (long long)r.in_first, (long long)(r.in_first + in[0].h));
  std::vector<int64_t> dims = a.dims;
  dims[2] = r.out_count;
  return Shape::of(dims);
}
// The input rows that output rows `out` of a rank-4 resize read (every row of any other rank).
RowRange resize_input_rows(const ResizeAttrs& a, RowRange out, int64_t in_h) {
  if (out.empty()) return {};
  if (a.dims.size() != 4) return {0, in_h};
  int per = 0;
  const ResizeAxis x{in_h, a.dims[2], out.begin, out.size(), 0};
  RowRange r{in_h, 0};
  for (const ResizeTap& t : resize_axis_taps(a, 2, x, &per)) {
    if (!t.used) continue;
    r.begin = std::min(r.begin, t.index);
    r.end = std::max(r.end, t.index + 1);
  }
  return r;
}
RowRange rows_resize(const Op& op, RowRange out, int64_t in_h) { return resize_input_rows(op.as<ResizeAttrs>(), out, in_h); }
int64_t out_rows_resize(const Op& op, int64_t in_h) {
  const ResizeAttrs& a = op.as<ResizeAttrs>();
  return a.dims.size() == 4 ? a.dims[2] : in_h;
}
OpCost count_resize(const Op& op, const std::vector<Shape>& in, const Shape& out, DType t) {
  const ResizeAttrs& a = op.as<ResizeAttrs>();
  OpCost c;
  const double taps = a.mode == ResizeMode::Nearest ? 1 : a.mode == ResizeMode::Linear ? 4 : 16;
  c.flops = double(out.numel()) * 2 * taps;
  c.bytes_read = bytes_of(in[0], t);
  c.bytes_written = bytes_of(out, t);
  return c;
}
void write_resize(const Op& op, json& j) {
  const ResizeAttrs& a = op.as<ResizeAttrs>();
  j["mode"] = kResizeModes[int(a.mode)];
  j["coord"] = kResizeCoords[int(a.coord)];
  if (a.mode == ResizeMode::Nearest) j["nearest"] = kNearestRounds[int(a.nearest)];
  if (a.mode == ResizeMode::Cubic) {
    j["cubic_a"] = a.cubic_a;
    j["exclude_outside"] = a.exclude_outside;
  }
  j["dims"] = a.dims;
  j["scales"] = a.scales;
  if (a.rows.banded()) j["rows"] = row_window_json(a.rows);
}
void read_resize(Op& op, JsonObject& o) {
  ResizeAttrs a;
  a.mode = ResizeMode(name_index(kResizeModes, o.get_string("mode"), o.child_path("mode")));
  a.coord = ResizeCoord(name_index(kResizeCoords, o.get_string("coord"), o.child_path("coord")));
  if (a.mode == ResizeMode::Nearest) {
    a.nearest = NearestRound(name_index(kNearestRounds, o.get_string("nearest", "round_prefer_floor"), o.child_path("nearest")));
  }
  if (a.mode == ResizeMode::Cubic) {
    a.cubic_a = o.get_number("cubic_a", -0.75);
    a.exclude_outside = o.get_bool("exclude_outside", false);
  }
  a.dims = int_list<int64_t>(o, "dims", 1, kMaxDim);
  const json& s = o.get_array("scales");
  for (size_t k = 0; k < s.size(); ++k) a.scales.push_back(json_number(s[k], o.child_path("scales") + strprintf("[%zu]", k)));
  a.rows = read_row_window(o);
  op.attrs = std::move(a);
}
std::string describe_resize(const Op& op) {
  return std::string("resize ") + kResizeModes[int(op.as<ResizeAttrs>().mode)] + " " + dims_text(op.as<ResizeAttrs>().dims);
}

// ---------------------------------------------------------------------------------------------
// norm

constexpr const char* kNormNames[] = {"layer", "rms"};

Shape infer_norm(const Op& op, const std::vector<Shape>& in, const InferContext& ctx) {
  const NormAttrs& a = op.as<NormAttrs>();
  const size_t first = size_t(a.scale_operand());
  need_operands(in, first + 1, first + 2, ctx, a.residual ? "norm with a residual" : "norm");
  const Shape& x = in[0];
  HIOS_CHECK(!a.residual || in[1] == x, "node '%s': norm's residual %s is not the shape of x, %s", ctx.node.c_str(),
             in[1].str().c_str(), x.str().c_str());
  HIOS_CHECK(a.axis >= 0 && a.axis < x.rank, "node '%s': norm axis %d of a rank-%d input", ctx.node.c_str(), a.axis,
             x.rank);
  HIOS_CHECK(a.epsilon >= 0 && std::isfinite(a.epsilon), "node '%s': norm epsilon %g", ctx.node.c_str(), a.epsilon);
  HIOS_CHECK(norm_length(a, x) > 0, "node '%s': norm over an empty dim", ctx.node.c_str());
  for (size_t k = first; k < in.size(); ++k) {
    HIOS_CHECK(norm_operand_fits(in[k], x, a.axis), "node '%s': norm %s %s fits neither one value nor dims %d.. of %s",
               ctx.node.c_str(), k == first ? "scale" : "bias", in[k].str().c_str(), a.axis, x.str().c_str());
  }
  if (typed(ctx)) {
    for (size_t k = 0; k < in.size(); ++k) {
      HIOS_CHECK(is_float(operand_type(ctx, k)), "node '%s': norm of a %s operand", ctx.node.c_str(),
                 dtype_name(operand_type(ctx, k)));
    }
  }
  return x;
}
OpCost count_norm(const Op&, const std::vector<Shape>& in, const Shape& out, DType t) {
  OpCost c;
  c.flops = 8.0 * double(out.numel());  // two sums, a subtraction, a square, the scale and bias
  c.bytes_read = bytes_in(in, t);
  c.bytes_written = bytes_of(out, t);
  return c;
}
void write_norm(const Op& op, json& j) {
  const NormAttrs& a = op.as<NormAttrs>();
  j["fn"] = norm_fn_name(a.fn);
  j["axis"] = a.axis;
  j["epsilon"] = a.epsilon;
  if (a.residual) j["residual"] = true;
}
void read_norm(Op& op, JsonObject& o) {
  NormAttrs a;
  const std::string fn = o.get_string("fn");
  HIOS_CHECK(fn == "layer" || fn == "rms", "%s: unknown norm fn '%s' (layer or rms)", o.child_path("fn").c_str(),
             printable(fn).c_str());
  a.fn = fn == "layer" ? NormFn::Layer : NormFn::Rms;
  a.axis = int(o.get_int_in("axis", 0, kMaxRank - 1));
  a.epsilon = o.get_number("epsilon", 1e-5);
  a.residual = o.get_bool("residual", false);
  HIOS_CHECK(a.epsilon >= 0 && a.epsilon < 1e30, "%s: epsilon %g (from 0 to 1e30)", o.child_path("epsilon").c_str(),
             a.epsilon);
  op.attrs = a;
}
std::string describe_norm(const Op& op) {
  const NormAttrs& a = op.as<NormAttrs>();
  return strprintf("%s norm from %d%s", norm_fn_name(a.fn), a.axis, a.residual ? " of a sum" : "");
}

}  // namespace

const char* binary_fn_name(BinaryFn f) { return kBinaryNames[size_t(f)]; }
bool binary_fn_compares(BinaryFn f) {
  return f == BinaryFn::Equal || f == BinaryFn::Less || f == BinaryFn::LessEqual || f == BinaryFn::Greater ||
         f == BinaryFn::GreaterEqual || logical(f);
}
const char* reduce_fn_name(ReduceFn f) { return kReduceNames[size_t(f)]; }

Shape with_rank(const Shape& s, int rank) {
  std::vector<int64_t> d(size_t(rank - s.rank), 1);
  for (int i = 0; i < s.rank; ++i) d.push_back(s.dim(i));
  return Shape::of(d);
}

bool broadcast_shapes(const std::vector<Shape>& in, Shape* out) {
  int rank = 0;
  for (const Shape& s : in) rank = std::max(rank, s.rank);
  std::vector<int64_t> dims(size_t(rank), 1);
  for (const Shape& s : in) {
    const Shape r = with_rank(s, rank);
    for (int d = 0; d < rank; ++d) {
      const int64_t v = r.dim(d);
      if (v == dims[size_t(d)] || v == 1) continue;
      if (dims[size_t(d)] != 1) return false;
      dims[size_t(d)] = v;
    }
  }
  *out = Shape::of(dims);
  return true;
}

bool matmul_shape(const MatMulAttrs& a, const Shape& A, const Shape& B, Shape* out, std::string* why) {
  if (A.rank < 1 || B.rank < 1) {
    *why = "matmul needs operands of rank 1 or more";
    return false;
  }
  if ((a.trans_a && A.rank < 2) || (a.trans_b && B.rank < 2)) {
    *why = "a transposed operand needs rank 2 or more";
    return false;
  }
  // ONNX's rank-1 rules: A [K] is [1, K] and B [K] is [K, 1], the added dim dropped after.
  const Shape a2 = A.rank == 1 ? Shape::of({1, A.dim(0)}) : A;
  const Shape b2 = B.rank == 1 ? Shape::of({B.dim(0), 1}) : B;
  const int64_t m = a.trans_a ? a2.dim(a2.rank - 1) : a2.dim(a2.rank - 2);
  const int64_t k = a.trans_a ? a2.dim(a2.rank - 2) : a2.dim(a2.rank - 1);
  const int64_t kb = a.trans_b ? b2.dim(b2.rank - 1) : b2.dim(b2.rank - 2);
  const int64_t n = a.trans_b ? b2.dim(b2.rank - 2) : b2.dim(b2.rank - 1);
  if (k != kb) {
    *why = strprintf("inner dims %lld and %lld differ", (long long)k, (long long)kb);
    return false;
  }
  const std::vector<int64_t> ad = a2.dims(), bd = b2.dims();
  const std::vector<int64_t> ba(ad.begin(), ad.end() - 2), bb(bd.begin(), bd.end() - 2);
  Shape batch;
  if (!broadcast_shapes({Shape::of(ba), Shape::of(bb)}, &batch)) {
    *why = "batch dims do not broadcast";
    return false;
  }
  std::vector<int64_t> dims = batch.dims();
  if (A.rank > 1) dims.push_back(m);
  if (B.rank > 1) dims.push_back(n);
  if (int(dims.size()) > kMaxRank) {
    *why = "the result's rank is over 8";
    return false;
  }
  *out = Shape::of(dims);
  return true;
}

// The input coordinate of output coordinate x along an axis of `in` elements resized by `scale`
// to `out`. ONNX measures the resized length as in * scale, unrounded.
double resize_coord(ResizeCoord c, double x, double scale, int64_t in, int64_t out) {
  const double resized = double(in) * scale;
  switch (c) {
    case ResizeCoord::HalfPixel: return (x + 0.5) / scale - 0.5;
    case ResizeCoord::PytorchHalfPixel: return out > 1 ? (x + 0.5) / scale - 0.5 : 0;
    case ResizeCoord::AlignCorners: return resized == 1 ? 0 : x * double(in - 1) / (resized - 1);
    case ResizeCoord::Asymmetric: return x / scale;
    case ResizeCoord::TfHalfPixelForNn: return (x + 0.5) / scale;
  }
  return x;
}
int64_t resize_nearest_index(NearestRound r, double x) {
  const double f = std::floor(x);
  switch (r) {
    case NearestRound::RoundPreferFloor: return int64_t(x - f == 0.5 ? f : std::round(x));
    case NearestRound::RoundPreferCeil: return int64_t(x - f == 0.5 ? f + 1 : std::round(x));
    case NearestRound::Floor: return int64_t(f);
    case NearestRound::Ceil: return int64_t(std::ceil(x));
  }
  return int64_t(f);
}
// Keys' cubic convolution weights of the four taps floor(x) - 1 .. floor(x) + 2.
std::array<double, 4> resize_cubic_weights(double t, double A) {
  auto w = [A](double d) {
    d = std::fabs(d);
    if (d <= 1) return ((A + 2) * d - (A + 3)) * d * d + 1;
    if (d < 2) return ((A * d - 5 * A) * d + 8 * A) * d - 4 * A;
    return 0.0;
  };
  return {w(t + 1), w(t), w(1 - t), w(2 - t)};
}

ResizeAxis resize_axis(const ResizeAttrs& a, int axis, const Shape& in, const Shape& out) {
  if (axis == 2 && a.rows.banded()) {
    return {a.rows.in_full, a.dims.at(2), a.rows.out_first, a.rows.out_count, a.rows.in_first};
  }
  return {in.dim(axis), out.dim(axis), 0, out.dim(axis), 0};
}

std::vector<ResizeTap> resize_axis_taps(const ResizeAttrs& a, int axis, const ResizeAxis& x, int* taps_per_output) {
  const double scale = a.scales.at(size_t(axis));
  const bool same = x.n_in == x.n_out && scale == 1.0;
  const int taps = same || a.mode == ResizeMode::Nearest ? 1 : a.mode == ResizeMode::Linear ? 2 : 4;
  *taps_per_output = taps;
  std::vector<ResizeTap> t(size_t(x.count) * size_t(taps));
  auto held = [&](int64_t i) { return std::clamp<int64_t>(i, 0, x.n_in - 1) - x.in_first; };
  for (int64_t o = 0; o < x.count; ++o) {
    ResizeTap* p = &t[size_t(o) * size_t(taps)];
    const int64_t at = x.out_first + o;  // in the whole output
    if (same) {
      p[0] = {at - x.in_first, 1.0, true};
      continue;
    }
    const double c = resize_coord(a.coord, double(at), scale, x.n_in, x.n_out);
    if (a.mode == ResizeMode::Nearest) {
      p[0] = {held(resize_nearest_index(a.nearest, c)), 1.0, true};
    } else if (a.mode == ResizeMode::Linear) {
      const double cc = std::clamp(c, 0.0, double(x.n_in - 1));
      const int64_t i0 = int64_t(std::floor(cc));
      const double f = cc - double(i0);
      p[0] = {i0 - x.in_first, 1 - f, true};
      p[1] = {held(i0 + 1), f, true};
    } else {
      const int64_t i0 = int64_t(std::floor(c));
      const std::array<double, 4> w = resize_cubic_weights(c - double(i0), a.cubic_a);
      double total = 0;
      for (int k = 0; k < 4; ++k) {
        const int64_t i = i0 - 1 + k;
        const bool used = !(a.exclude_outside && (i < 0 || i >= x.n_in));
        p[k] = {held(i), used ? w[size_t(k)] : 0.0, used};
        if (used) total += w[size_t(k)];
      }
      if (a.exclude_outside && total != 0) {
        for (int k = 0; k < 4; ++k) p[k].weight /= total;
      }
    }
  }
  return t;
}


std::vector<OpDef> tensor_op_rows() {
  // kind, name, summary, step_allowed, terms_are_operands, infer, count, write, read, describe,
  // input_rows, output_rows, row_local, infer_dtype, general
  return {
      {OpKind::Join, "join", "waits for every operand (a graph's several results); one zero", false, true, infer_join,
       count_join, write_none, read_none, describe_name, rows_whole, out_rows_same, false, nullptr, true},
      {OpKind::Binary, "binary", "two operands under NumPy broadcasting: arithmetic, comparisons, logic", false, true,
       infer_binary, count_elementwise, write_binary, read_binary, describe_binary, rows_same, out_rows_same, true,
       dtype_binary, true},
      {OpKind::Where, "where", "condition ? x : y, broadcast", false, true, infer_where, count_elementwise, write_none,
       read_none, describe_name, rows_same, out_rows_same, true, dtype_where, true},
      {OpKind::Reduce, "reduce", "sum, mean, max, min, prod, norms, log-sum-exp, arg max/min over axes", false, true,
       infer_reduce, count_reduce, write_reduce, read_reduce, describe_reduce, rows_whole, out_rows_same, false,
       dtype_reduce, true},
      {OpKind::MatMul, "matmul", "batched, broadcast matrix product with optional addend (MatMul, Gemm)", false, true,
       infer_matmul, count_matmul, write_matmul, read_matmul, describe_matmul, rows_whole, out_rows_same, false, nullptr,
       true},
      {OpKind::Transpose, "transpose", "permutes the dims", false, true, infer_transpose, count_copy, write_transpose,
       read_transpose, describe_transpose, rows_whole, out_rows_same, false, nullptr, true},
      {OpKind::Reshape, "reshape", "the same elements in another shape", false, true, infer_reshape, count_copy,
       write_reshape, read_reshape, describe_reshape, rows_whole, out_rows_same, false, nullptr, true},
      {OpKind::Concat, "concat", "operands joined along one axis", false, true, infer_concat, count_copy, write_concat,
       read_concat, describe_concat, rows_whole, out_rows_same, false, nullptr, true},
      {OpKind::Slice, "slice", "a strided window of every dim", false, true, infer_slice, count_copy, write_slice,
       read_slice, describe_slice, rows_whole, out_rows_same, false, nullptr, true},
      {OpKind::Gather, "gather", "elements picked by integer indices along an axis (Gather, GatherElements)", false,
       true, infer_gather, count_copy, write_gather, read_gather, describe_gather, rows_whole, out_rows_same, false,
       nullptr, true},
      {OpKind::Cast, "cast", "another element type", false, true, infer_cast, count_copy, write_cast, read_cast,
       describe_cast, rows_whole, out_rows_same, false, dtype_cast, true},
      {OpKind::Expand, "expand", "broadcast to a shape", false, true, infer_expand, count_copy, write_expand, read_expand,
       describe_expand, rows_whole, out_rows_same, false, nullptr, true},
      {OpKind::Resize, "resize", "nearest, linear or cubic interpolation to a size (Resize, Upsample)", false, true,
       infer_resize, count_resize, write_resize, read_resize, describe_resize, rows_resize, out_rows_resize, true, nullptr,
       true},
  };
}

OpDef norm_op_row() {
  return {OpKind::Norm, "norm", "layer or RMS normalisation over the last dims, times a scale plus a bias", false,
          true, infer_norm, count_norm, write_norm, read_norm, describe_norm, rows_whole, out_rows_same, false, nullptr,
          true};
}

bool norm_operand_fits(const Shape& s, const Shape& x, int axis) {
  if (s.numel() == 1) return true;
  const int tail = x.rank - axis;
  if (s.rank < tail) return false;
  for (int d = 0; d < s.rank; ++d) {
    const int from_end = s.rank - d;
    if (from_end > tail ? s.dim(d) != 1 : s.dim(d) != x.dim(x.rank - from_end)) return false;
  }
  return true;
}

int64_t norm_length(const NormAttrs& a, const Shape& x) {
  int64_t n = 1;
  for (int d = a.axis; d < x.rank; ++d) n *= x.dim(d);
  return n;
}

const char* norm_fn_name(NormFn f) { return kNormNames[int(f)]; }

}  // namespace hios
