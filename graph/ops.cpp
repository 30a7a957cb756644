#include "graph/ops.hpp"

#include <algorithm>
#include <cmath>

#include "graph/error.hpp"
#include "graph/ops_tensor.hpp"

namespace hios {
OpCost& OpCost::operator+=(const OpCost& o) {
  flops += o.flops;
  macs += o.macs;
  params += o.params;
  bytes_read += o.bytes_read;
  bytes_written += o.bytes_written;
  return *this;
}

// A conv's epilogue takes what its kernels fuse (conv_epilogue_activation); the activation op any.
Activation parse_activation(const std::string& s, const std::string& path, bool allow_none, bool epilogue) {
  for (int k = 0; k < kNumActivations; ++k) {
    const Activation a = Activation(k);
    if (s != activation_name(a)) continue;
    if (a == Activation::None && !allow_none) break;
    if (epilogue && !conv_epilogue_activation(a)) break;
    return a;
  }
  throw_error("%s: unknown activation '%s' (expected %srelu, relu6, sigmoid, tanh or hard_swish%s)", path.c_str(),
              s.c_str(), allow_none ? "none, " : "",
              epilogue ? "" : ", or a function of docs/graph-format.md's activation list");
}

const char* pool_kind_name(PoolKind p) {
  switch (p) {
    case PoolKind::Max: return "max";
    case PoolKind::Avg: return "avg";
    case PoolKind::GlobalMax: return "global_max";
    case PoolKind::GlobalAvg: return "global_avg";
  }
  return "max";
}




// ---------------------------------------------------------------------------------------------
// Shared helpers for inference and counting.

double value_bytes(const Shape& s, DType t) { return double(s.numel()) * double(dtype_size(t)); }

double value_bytes(const std::vector<Shape>& in, DType t) {
  double b = 0;
  for (const Shape& s : in) b += value_bytes(s, t);
  return b;
}

void check_positive(const Shape& s, const InferContext& ctx, const char* what) {
  HIOS_CHECK(s.n > 0 && s.c > 0 && s.h > 0 && s.w > 0, "node '%s': %s shape %s has a non-positive size",
             ctx.node.c_str(), what, s.str().c_str());
}

// Output extent of a sliding window, following PyTorch's conv and pool rules: floor (or, with
// ceil_mode, ceiling) of (in + 2p - span) / s, plus one, where the division rounds towards
// negative infinity. So a 2x2 input under a 3x3/2 ceil-mode pool still gives one output.
static int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

int64_t window_out(int64_t in, int k, int s, int p, int d, bool ceil_mode) {
  int64_t span = int64_t(d) * (k - 1) + 1;
  int64_t num = in + 2 * int64_t(p) - span;
  int64_t out = floor_div(ceil_mode ? num + s - 1 : num, s) + 1;
  // PyTorch drops a last window that would start inside the right padding.
  if (ceil_mode && out > 0 && (out - 1) * s >= in + p) --out;
  return out < 0 ? 0 : out;
}

const Shape& single_input(const std::vector<Shape>& in, const InferContext& ctx) {
  HIOS_CHECK(in.size() == 1, "node '%s': expected one input tensor, got %zu", ctx.node.c_str(), in.size());
  return in[0];
}
// The convolution-network ops (conv, pool, pad, rows) take image tensors, N x C x H x W.
const Shape& image_input(const std::vector<Shape>& in, const InferContext& ctx, const char* op) {
  const Shape& s = single_input(in, ctx);
  HIOS_CHECK(s.rank == 4, "node '%s': a %s takes an N x C x H x W tensor, not a rank-%d one", ctx.node.c_str(), op, s.rank);
  return s;
}

json row_window_json(const RowWindow& r) {
  return json{{"out_first", r.out_first}, {"out_count", r.out_count}, {"in_first", r.in_first},
              {"in_full", r.in_full}};
}
RowWindow read_row_window(JsonObject& o) {
  RowWindow r;
  if (!o.has("rows")) return r;
  JsonObject ro(o.get_object("rows"), o.child_path("rows"));
  const int64_t kMax = int64_t(1) << 31;
  r.out_first = ro.get_int_in("out_first", 0, kMax);
  r.out_count = ro.get_int_in("out_count", 1, kMax);
  r.in_first = ro.get_int_in("in_first", 0, kMax);
  r.in_full = ro.get_int_in("in_full", 1, kMax);
  ro.finish();
  return r;
}

// ---------------------------------------------------------------------------------------------
// input

static Shape infer_input(const Op& op, const std::vector<Shape>& in, const InferContext& ctx) {
  HIOS_CHECK(in.empty(), "node '%s': the input placeholder takes no inputs", ctx.node.c_str());
  if (op.tensor_input()) return op.as<TensorInputAttrs>().shape;
  Shape s{ctx.batch, op.input().channels, ctx.height, ctx.width};
  check_positive(s, ctx, "input");
  return s;
}
static DType dtype_input(const Op& op, const std::vector<DType>&) {
  return op.tensor_input() ? op.as<TensorInputAttrs>().dtype : DType::F32;
}
static OpCost count_input(const Op&, const std::vector<Shape>&, const Shape& out, DType t) {
  OpCost c;
  c.bytes_written = value_bytes(out, t);
  return c;
}
// The image input says its channels (N, H and W are the graph's); a tensor input its dims and
// element type.
static void write_input(const Op& op, json& j) {
  if (!op.tensor_input()) {
    j["channels"] = op.input().channels;
    return;
  }
  j["dims"] = op.as<TensorInputAttrs>().shape.dims();
  j["dtype"] = dtype_name(op.as<TensorInputAttrs>().dtype);
}
static void read_input(Op& op, JsonObject& o) {
  if (!o.has("dims")) {
    InputAttrs a;
    a.channels = o.get_int("channels");
    op.attrs = a;
    return;
  }
  TensorInputAttrs a;
  const json& dims = o.get_array("dims");
  HIOS_CHECK(dims.size() <= size_t(kMaxRank), "%s: rank %zu (at most %d)", o.child_path("dims").c_str(), dims.size(),
             kMaxRank);
  std::vector<int64_t> d;
  for (size_t k = 0; k < dims.size(); ++k) d.push_back(json_int(dims[k], o.child_path("dims") + strprintf("[%zu]", k)));
  a.shape = Shape::of(d);
  const std::string dt = o.get_string("dtype", "float32");
  HIOS_CHECK(parse_dtype(dt, &a.dtype), "%s: unknown element type '%s'", o.child_path("dtype").c_str(), printable(dt).c_str());
  op.attrs = a;
}

// ---------------------------------------------------------------------------------------------
// activation

static Shape infer_same(const Op&, const std::vector<Shape>& ins, const InferContext& ctx) {
  return single_input(ins, ctx);
}
static OpCost count_pointwise(const Op&, const std::vector<Shape>& in, const Shape& out, DType t) {
  OpCost c;
  c.flops = double(out.numel()) * double(in.size());
  c.bytes_read = value_bytes(in, t);
  c.bytes_written = value_bytes(out, t);
  return c;
}
static void write_activation(const Op& op, json& j) {
  const ActivationAttrs& a = op.act();
  j["activation"] = activation_name(a.activation);
  if (activation_reads_alpha(a.activation)) j["alpha"] = a.alpha;
  if (activation_reads_beta(a.activation)) j["beta"] = a.beta;
}
static void read_activation(Op& op, JsonObject& o) {
  ActivationAttrs a;
  a.activation = parse_activation(o.get_string("activation"), o.child_path("activation"), false, false);
  if (activation_reads_alpha(a.activation)) a.alpha = o.get_number("alpha");
  if (activation_reads_beta(a.activation)) a.beta = o.get_number("beta");
  op.attrs = a;
}
// Element-wise on any rank; integer operands only for the functions that keep integers exact.
static Shape infer_activation(const Op& op, const std::vector<Shape>& ins, const InferContext& ctx) {
  const Activation f = op.act().activation;
  HIOS_CHECK(ctx.dtypes.empty() || is_float(ctx.dtypes[0]) || activation_takes_integers(f) ||
                 (ctx.dtypes[0] == DType::Bool && f == Activation::Not),
             "node '%s': %s of a %s tensor (it takes floats)", ctx.node.c_str(), activation_name(f),
             dtype_name(ctx.dtypes[0]));
  HIOS_CHECK(f != Activation::Not || ctx.dtypes.empty() || ctx.dtypes[0] == DType::Bool,
             "node '%s': not of a %s tensor (it takes bool)", ctx.node.c_str(), dtype_name(ctx.dtypes[0]));
  return single_input(ins, ctx);
}
static DType dtype_activation(const Op& op, const std::vector<DType>& in) {
  const Activation f = op.act().activation;
  if (f == Activation::IsNan || f == Activation::IsInf) return DType::Bool;
  return in.empty() ? DType::F32 : in[0];
}

// ---------------------------------------------------------------------------------------------
// add / mul: each term is an operand; all operands must have one shape.

static Shape infer_elementwise(const Op& op, const std::vector<Shape>& ins, const InferContext& ctx) {
  HIOS_CHECK(ins.size() >= 2, "node '%s': %s needs at least two operands (input terms), got %zu", ctx.node.c_str(),
             op_def(op.kind).name, ins.size());
  for (size_t i = 1; i < ins.size(); ++i) {
    HIOS_CHECK(ins[i] == ins[0], "node '%s': %s operand %zu has shape %s but operand 0 has %s", ctx.node.c_str(),
               op_def(op.kind).name, i, ins[i].str().c_str(), ins[0].str().c_str());
  }
  return ins[0];
}
static OpCost count_elementwise(const Op&, const std::vector<Shape>& in, const Shape& out, DType t) {
  OpCost c;
  c.flops = double(out.numel()) * double(in.size() - 1);
  c.bytes_read = value_bytes(in, t);
  c.bytes_written = value_bytes(out, t);
  return c;
}
static void write_none(const Op&, json&) {}
static void read_none(Op& op, JsonObject&) { op.attrs = std::monostate{}; }

// ---------------------------------------------------------------------------------------------
// identity: the node's value is its assembled input (sum within terms, concat across terms).

static OpCost count_identity(const Op&, const std::vector<Shape>& in, const Shape& out, DType t) {
  OpCost c;
  c.bytes_read = value_bytes(in, t);
  c.bytes_written = value_bytes(out, t);
  return c;
}

// ---------------------------------------------------------------------------------------------
// linear

static Shape infer_linear(const Op& op, const std::vector<Shape>& ins, const InferContext& ctx) {
  const Shape& in = single_input(ins, ctx);
  HIOS_CHECK(op.linear().out_features > 0, "node '%s': linear needs positive out_features", ctx.node.c_str());
  HIOS_CHECK(in.rank == 4 || in.rank == 2, "node '%s': a linear layer takes N x C x H x W or N x K, not rank %d",
             ctx.node.c_str(), in.rank);
  Shape out{in.n, op.linear().out_features, 1, 1};
  out.rank = in.rank;  // [N, out] from [N, K]: the dims past rank 2 are ones either way
  return out;
}
static OpCost count_linear(const Op& op, const std::vector<Shape>& in, const Shape& out, DType t) {
  const LinearAttrs& a = op.linear();
  OpCost c;
  double in_features = double(in[0].c) * in[0].h * in[0].w;
  c.params = in_features * a.out_features + (a.bias ? a.out_features : 0);
  c.macs = double(in[0].n) * in_features * a.out_features;
  c.flops = 2 * c.macs + (a.bias ? out.numel() : 0);
  c.bytes_read = value_bytes(in, t) + c.params * dtype_size(t);
  c.bytes_written = value_bytes(out, t);
  return c;
}
static void write_linear(const Op& op, json& j) {
  j["out_features"] = op.linear().out_features;
  j["bias"] = op.linear().bias;
}
static void read_linear(Op& op, JsonObject& o) {
  LinearAttrs a;
  a.out_features = o.get_int("out_features");
  a.bias = o.get_bool("bias", true);
  op.attrs = a;
}

// ---------------------------------------------------------------------------------------------
// softmax, log_softmax, hardmax over one axis (channels by default)

static const char* softmax_fn_name(SoftmaxFn f) {
  return f == SoftmaxFn::Softmax ? "softmax" : f == SoftmaxFn::LogSoftmax ? "log_softmax" : "hardmax";
}
static Shape infer_softmax(const Op& op, const std::vector<Shape>& ins, const InferContext& ctx) {
  const Shape& in = single_input(ins, ctx);
  const int axis = op.as<SoftmaxAttrs>().axis;
  HIOS_CHECK(axis >= 0 && axis < std::max(in.rank, 1), "node '%s': %s over axis %d of a rank-%d tensor", ctx.node.c_str(),
             softmax_fn_name(op.as<SoftmaxAttrs>().fn), axis, in.rank);
  HIOS_CHECK(ctx.dtypes.empty() || is_float(ctx.dtypes[0]), "node '%s': %s of a %s tensor (it takes floats)",
             ctx.node.c_str(), softmax_fn_name(op.as<SoftmaxAttrs>().fn), dtype_name(ctx.dtypes[0]));
  return in;
}
// The JSON of existing graphs has no attributes: the defaults are left out.
static void write_softmax(const Op& op, json& j) {
  const SoftmaxAttrs& a = op.as<SoftmaxAttrs>();
  if (a.fn != SoftmaxFn::Softmax) j["fn"] = softmax_fn_name(a.fn);
  if (a.axis != 1) j["axis"] = a.axis;
}
static void read_softmax(Op& op, JsonObject& o) {
  SoftmaxAttrs a;
  const std::string fn = o.get_string("fn", "softmax");
  HIOS_CHECK(fn == "softmax" || fn == "log_softmax" || fn == "hardmax",
             "%s: unknown fn '%s' (expected softmax, log_softmax or hardmax)", o.child_path("fn").c_str(), fn.c_str());
  a.fn = fn == "softmax" ? SoftmaxFn::Softmax : fn == "log_softmax" ? SoftmaxFn::LogSoftmax : SoftmaxFn::Hardmax;
  a.axis = o.has("axis") ? int(o.get_int_in("axis", 0, kMaxRank - 1)) : 1;
  op.attrs = a;
}
static std::string describe_softmax(const Op& op) {
  const SoftmaxAttrs& a = op.as<SoftmaxAttrs>();
  return a.axis == 1 ? softmax_fn_name(a.fn) : strprintf("%s axis %d", softmax_fn_name(a.fn), a.axis);
}

static OpCost count_softmax(const Op&, const std::vector<Shape>& in, const Shape& out, DType t) {
  OpCost c;
  c.flops = 5.0 * double(out.numel());  // max, subtract, exp, sum, divide
  c.bytes_read = value_bytes(in, t);
  c.bytes_written = value_bytes(out, t);
  return c;
}

// ---------------------------------------------------------------------------------------------
// rows: a band of a tensor assembled from operands holding bands of it

static Shape infer_rows(const Op& op, const std::vector<Shape>& ins, const InferContext& ctx) {
  const RowsAttrs& a = op.rows();
  HIOS_CHECK(!ins.empty() && ins.size() == a.held.size(), "node '%s': rows has %zu operands but %zu held offsets",
             ctx.node.c_str(), ins.size(), a.held.size());
  HIOS_CHECK(a.count > 0 && a.first >= 0 && a.full > 0 && a.first <= a.full - a.count,
             "node '%s': rows %lld-%lld lie outside the tensor's %lld rows", ctx.node.c_str(), (long long)a.first,
             (long long)(a.first + a.count), (long long)a.full);
  // Walk the wanted rows in order; every row must come from some operand.
  int64_t covered = a.first;
  std::vector<bool> used(ins.size(), false);
  while (covered < a.first + a.count) {
    int64_t reach = covered;
    for (size_t k = 0; k < ins.size(); ++k) {
      if (a.held[k] <= covered && a.held[k] + ins[k].h > covered) reach = std::max(reach, a.held[k] + ins[k].h);
    }
    HIOS_CHECK(reach > covered, "node '%s': no operand holds row %lld of rows %lld-%lld", ctx.node.c_str(),
               (long long)covered, (long long)a.first, (long long)(a.first + a.count));
    covered = reach;
  }
  for (size_t k = 0; k < ins.size(); ++k) {
    HIOS_CHECK(ins[k].n == ins[0].n && ins[k].c == ins[0].c && ins[k].w == ins[0].w,
               "node '%s': rows operand %zu has shape %s but operand 0 has %s (only H may differ)", ctx.node.c_str(),
               k, ins[k].str().c_str(), ins[0].str().c_str());
    HIOS_CHECK(a.held[k] >= 0 && a.held[k] <= a.full - ins[k].h,
               "node '%s': rows operand %zu holds rows %lld-%lld, outside the tensor's %lld rows", ctx.node.c_str(), k,
               (long long)a.held[k], (long long)(a.held[k] + ins[k].h), (long long)a.full);
  }
  return Shape{ins[0].n, ins[0].c, a.count, ins[0].w};
}
// rows and pad: the output written once, at most as much read (a copy of the wanted rows; a
// padded copy of the input).
static OpCost count_output_copy(const Op&, const std::vector<Shape>&, const Shape& out, DType t) {
  OpCost c;
  c.bytes_read = value_bytes(out, t);
  c.bytes_written = value_bytes(out, t);
  return c;
}
static void write_rows(const Op& op, json& j) {
  const RowsAttrs& a = op.rows();
  j["first"] = a.first;
  j["count"] = a.count;
  j["full"] = a.full;
  j["held"] = a.held;
}
static void read_rows(Op& op, JsonObject& o) {
  RowsAttrs a;
  const int64_t kMax = int64_t(1) << 31;
  a.first = o.get_int_in("first", 0, kMax);
  a.count = o.get_int_in("count", 1, kMax);
  a.full = o.get_int_in("full", 1, kMax);
  const json& held = o.get_array("held");
  for (size_t k = 0; k < held.size(); ++k) {
    const std::string path = o.child_path("held") + strprintf("[%zu]", k);
    HIOS_CHECK(held[k].is_number_integer(), "%s: expected an integer", path.c_str());
    const int64_t v = held[k].get<int64_t>();
    HIOS_CHECK(v >= 0 && v < kMax, "%s: %lld is out of range [0, %lld)", path.c_str(), (long long)v, (long long)kMax);
    a.held.push_back(v);
  }
  op.attrs = std::move(a);
}
static std::string describe_rows(const Op& op) {
  const RowsAttrs& a = op.rows();
  return strprintf("rows %lld-%lld of %lld", (long long)a.first, (long long)(a.first + a.count), (long long)a.full);
}

// ---------------------------------------------------------------------------------------------
// pad: explicit padding (or cropping) of H and W

static Shape infer_pad(const Op& op, const std::vector<Shape>& ins, const InferContext& ctx) {
  const Shape& in = image_input(ins, ctx, "pad");
  const auto& p = op.pad().pads;
  const Shape out{in.n, in.c, in.h + p[0] + p[2], in.w + p[1] + p[3]};
  HIOS_CHECK(out.h > 0 && out.w > 0 && -p[0] < in.h && -p[2] < in.h && -p[1] < in.w && -p[3] < in.w,
             "node '%s': pads %lld,%lld,%lld,%lld of a %s input crop it away", ctx.node.c_str(), (long long)p[0],
             (long long)p[1], (long long)p[2], (long long)p[3], in.str().c_str());
  return out;
}
static void write_pad(const Op& op, json& j) {
  const PadAttrs& a = op.pad();
  j["pads"] = a.pads;
  j["fill"] = a.fill == PadFill::NegInf ? "-inf" : "zero";
}
static void read_pad(Op& op, JsonObject& o) {
  PadAttrs a;
  const json& pads = o.get_array("pads");
  HIOS_CHECK(pads.size() == 4, "%s: expected 4 pads (top, left, bottom, right)", o.child_path("pads").c_str());
  for (size_t k = 0; k < 4; ++k) {
    const std::string path = o.child_path("pads") + strprintf("[%zu]", k);
    HIOS_CHECK(pads[k].is_number_integer(), "%s: expected an integer", path.c_str());
    const int64_t v = pads[k].get<int64_t>();
    HIOS_CHECK(v > -65536 && v < 65536, "%s: %lld is out of range (-65536, 65536)", path.c_str(), (long long)v);
    a.pads[k] = v;
  }
  const std::string fill = o.get_string("fill", "zero");
  HIOS_CHECK(fill == "zero" || fill == "-inf", "%s: unknown fill '%s' (expected zero or -inf)", o.child_path("fill").c_str(),
             fill.c_str());
  a.fill = fill == "-inf" ? PadFill::NegInf : PadFill::Zero;
  op.attrs = a;
}
static std::string describe_pad(const Op& op) {
  const auto& p = op.pad().pads;
  return strprintf("pad %lld,%lld,%lld,%lld%s", (long long)p[0], (long long)p[1], (long long)p[2], (long long)p[3],
                   op.pad().fill == PadFill::NegInf ? " -inf" : "");
}

// ---------------------------------------------------------------------------------------------
// Short labels.

static std::string describe_plain(const Op& op) { return op_def(op.kind).name; }
static std::string describe_activation(const Op& op) { return activation_name(op.act().activation); }
static std::string describe_linear(const Op& op) {
  return strprintf("linear %lld", (long long)op.linear().out_features);
}

// ---------------------------------------------------------------------------------------------
// The table. Order matches OpKind.

static const std::vector<OpDef>& table() {
  static const std::vector<OpDef> t = {
      {OpKind::Input, "input", "a graph input: the image (N x channels x H x W) or a tensor of any rank and type",
       false, false, infer_input, count_input, write_input, read_input, describe_plain, rows_none, out_rows_same, false,
       dtype_input},
      conv_op_row(),
      pool_op_row(),
      {OpKind::Activation, "activation", "an element-wise function: relu, sigmoid, gelu, clip, exp, ...", true, false,
       infer_activation, count_pointwise, write_activation, read_activation, describe_activation, rows_same,
       out_rows_same, true, dtype_activation},
      {OpKind::Add, "add", "element-wise sum of its operands (one per input term)", false, true,
       infer_elementwise, count_elementwise, write_none, read_none, describe_plain, rows_same, out_rows_same, true},
      {OpKind::Mul, "mul", "element-wise product of its operands (one per input term)", false, true,
       infer_elementwise, count_elementwise, write_none, read_none, describe_plain, rows_same, out_rows_same, true},
      {OpKind::Identity, "identity", "its assembled input: sum within terms, concat across terms", true, false,
       infer_same, count_identity, write_none, read_none, describe_plain, rows_same, out_rows_same, true},
      sequential_op_row(),
      {OpKind::Linear, "linear", "fully connected layer over the flattened input", true, false, infer_linear,
       count_linear, write_linear, read_linear, describe_linear, rows_all, out_rows_one, false},
      {OpKind::Softmax, "softmax", "softmax, log-softmax or hardmax over an axis (channels by default)", true, false,
       infer_softmax, count_softmax, write_softmax, read_softmax, describe_softmax, rows_same, out_rows_same, true},
      // A rows op as a consumer reads "the same rows" of its operands (which operand supplies a
      // row is its own business).
      {OpKind::Rows, "rows", "a band of rows assembled from operands holding bands (row splits)", false, true,
       infer_rows, count_output_copy, write_rows, read_rows, describe_rows, rows_same, out_rows_same, true},
      // Not split by rows: a band of a pad would need its place in the whole tensor, as a
      // conv's RowWindow gives it, and nothing does yet. A row split's region stops before one.
      {OpKind::Pad, "pad", "explicit padding or cropping of H and W (zero or -inf)", true, false, infer_pad, count_output_copy,
       write_pad, read_pad, describe_pad, rows_pad, out_rows_pad, false},
  };
  return t;
}

static const std::vector<OpDef>& full_table() {
  static const std::vector<OpDef> t = [] {
    std::vector<OpDef> all = table();
    for (OpDef& d : tensor_op_rows()) all.push_back(d);
    all.push_back(conv_transpose_op_row());
    all.push_back(norm_op_row());
    all.push_back(attention_op_row());
    HIOS_CHECK(all.size() == size_t(kNumOpKinds), "op table: %zu rows for %d kinds", all.size(), kNumOpKinds);
    for (size_t k = 0; k < all.size(); ++k) {
      HIOS_CHECK(all[k].kind == OpKind(k), "op table: row %zu is '%s', out of OpKind order", k, all[k].name);
    }
    return all;
  }();
  return t;
}

const std::vector<OpDef>& op_table() { return full_table(); }

const OpDef& op_def(OpKind kind) { return full_table()[static_cast<size_t>(kind)]; }

const OpDef* find_op(std::string_view name) {
  for (const OpDef& d : full_table()) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

Op make_op(OpKind kind) {
  // Reading an empty object installs the op's attribute struct with its defaults. Required
  // attributes (such as a conv's out_channels) are left at zero for the builder to fill in.
  Op op;
  op.kind = kind;
  switch (kind) {
    case OpKind::Input: op.attrs = InputAttrs{}; break;
    case OpKind::Conv: op.attrs = ConvAttrs{}; break;
    case OpKind::Pool: op.attrs = PoolAttrs{}; break;
    case OpKind::Activation: op.attrs = ActivationAttrs{}; break;
    case OpKind::Linear: op.attrs = LinearAttrs{}; break;
    case OpKind::Sequential: op.attrs = SequentialAttrs{}; break;
    case OpKind::Rows: op.attrs = RowsAttrs{}; break;
    case OpKind::Pad: op.attrs = PadAttrs{}; break;
    case OpKind::Softmax: op.attrs = SoftmaxAttrs{}; break;
    case OpKind::Binary: op.attrs = BinaryAttrs{}; break;
    case OpKind::Reduce: op.attrs = ReduceAttrs{}; break;
    case OpKind::MatMul: op.attrs = MatMulAttrs{}; break;
    case OpKind::Transpose: op.attrs = TransposeAttrs{}; break;
    case OpKind::Reshape: op.attrs = ReshapeAttrs{}; break;
    case OpKind::Concat: op.attrs = ConcatAttrs{}; break;
    case OpKind::Slice: op.attrs = SliceAttrs{}; break;
    case OpKind::Gather: op.attrs = GatherAttrs{}; break;
    case OpKind::Cast: op.attrs = CastAttrs{}; break;
    case OpKind::Expand: op.attrs = ExpandAttrs{}; break;
    case OpKind::Resize: op.attrs = ResizeAttrs{}; break;
    case OpKind::ConvTranspose: op.attrs = ConvTransposeAttrs{}; break;
    case OpKind::Norm: op.attrs = NormAttrs{}; break;
    default: op.attrs = std::monostate{}; break;
  }
  return op;
}

Shape infer_op(const Op& op, const std::vector<Shape>& in, const InferContext& ctx) {
  return op_def(op.kind).infer(op, in, ctx);
}

DType infer_dtype_op(const Op& op, const std::vector<DType>& in) {
  const OpDef& d = op_def(op.kind);
  if (d.infer_dtype) return d.infer_dtype(op, in);
  return in.empty() ? DType::F32 : in[0];
}

OpCost count_op(const Op& op, const std::vector<Shape>& in, const Shape& out, DType dtype) {
  return op_def(op.kind).count(op, in, out, dtype);
}

void write_op(const Op& op, json& out) {
  const OpDef& d = op_def(op.kind);
  out["op"] = d.name;
  d.write_attrs(op, out);
}

Op read_op(JsonObject& obj) {
  std::string name = obj.get_string("op");
  const OpDef* d = find_op(name);
  if (!d) {
    std::string known;
    for (const OpDef& e : full_table()) known += (known.empty() ? "" : ", ") + std::string(e.name);
    throw_error("%s: unknown op '%s' (known: %s)", obj.child_path("op").c_str(), name.c_str(), known.c_str());
  }
  Op op = make_op(d->kind);
  d->read_attrs(op, obj);
  return op;
}

std::string describe_op(const Op& op) { return op_def(op.kind).describe(op); }

}  // namespace hios
