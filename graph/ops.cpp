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
static Activation parse_activation(const std::string& s, const std::string& path, bool allow_none, bool epilogue = true) {
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

static PoolKind parse_pool_kind(const std::string& s, const std::string& path) {
  if (s == "max") return PoolKind::Max;
  if (s == "avg") return PoolKind::Avg;
  if (s == "global_max") return PoolKind::GlobalMax;
  if (s == "global_avg") return PoolKind::GlobalAvg;
  throw_error("%s: unknown pool kind '%s' (expected max, avg, global_max or global_avg)", path.c_str(), s.c_str());
}

static json pair_json(const std::array<int, 2>& p) { return json::array({p[0], p[1]}); }

static bool is_global(PoolKind k) { return k == PoolKind::GlobalMax || k == PoolKind::GlobalAvg; }

// ---------------------------------------------------------------------------------------------
// Shared helpers for inference and counting.

static double bytes_of(const Shape& s, DType t) { return double(s.numel()) * double(dtype_size(t)); }

static double bytes_of(const std::vector<Shape>& in, DType t) {
  double b = 0;
  for (const Shape& s : in) b += bytes_of(s, t);
  return b;
}

static void check_positive(const Shape& s, const InferContext& ctx, const char* what) {
  HIOS_CHECK(s.n > 0 && s.c > 0 && s.h > 0 && s.w > 0, "node '%s': %s shape %s has a non-positive size",
             ctx.node.c_str(), what, s.str().c_str());
}

// Output extent of a sliding window, following PyTorch's conv and pool rules: floor (or, with
// ceil_mode, ceiling) of (in + 2p - span) / s, plus one, where the division rounds towards
// negative infinity. So a 2x2 input under a 3x3/2 ceil-mode pool still gives one output.
static int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

static int64_t window_out(int64_t in, int k, int s, int p, int d, bool ceil_mode) {
  int64_t span = int64_t(d) * (k - 1) + 1;
  int64_t num = in + 2 * int64_t(p) - span;
  int64_t out = floor_div(ceil_mode ? num + s - 1 : num, s) + 1;
  // PyTorch drops a last window that would start inside the right padding.
  if (ceil_mode && out > 0 && (out - 1) * s >= in + p) --out;
  return out < 0 ? 0 : out;
}

static const Shape& single_input(const std::vector<Shape>& in, const InferContext& ctx) {
  HIOS_CHECK(in.size() == 1, "node '%s': expected one input tensor, got %zu", ctx.node.c_str(), in.size());
  return in[0];
}
// The convolution-network ops (conv, pool, pad, rows) take image tensors, N x C x H x W.
static const Shape& image_input(const std::vector<Shape>& in, const InferContext& ctx, const char* op) {
  const Shape& s = single_input(in, ctx);
  HIOS_CHECK(s.rank == 4, "node '%s': a %s takes an N x C x H x W tensor, not a rank-%d one", ctx.node.c_str(), op, s.rank);
  return s;
}

static RowRange window_input_rows(const Op& op, RowRange out, int64_t in_h);

// The output shape of a window op that computes the band `r` of `full_out` from an input
// tensor `in`; checks that the band lies in the output and that `in` holds every input row the
// band's windows read (the halo), naming the node and the rows when it does not.
static Shape band_shape(const Op& op, const RowWindow& r, const Shape& in, Shape full_out, const InferContext& ctx) {
  if (!r.banded()) return full_out;
  HIOS_CHECK(r.out_count > 0 && r.out_first >= 0 && r.out_first <= full_out.h - r.out_count,
             "node '%s': band rows %lld-%lld lie outside the output's %lld rows", ctx.node.c_str(),
             (long long)r.out_first, (long long)(r.out_first + r.out_count), (long long)full_out.h);
  HIOS_CHECK(r.in_first >= 0 && r.in_first <= r.in_full - in.h,
             "node '%s': input rows %lld-%lld lie outside the whole input's %lld rows", ctx.node.c_str(),
             (long long)r.in_first, (long long)(r.in_first + in.h), (long long)r.in_full);
  const RowRange need = window_input_rows(op, {r.out_first, r.out_first + r.out_count}, r.in_full);
  HIOS_CHECK(need.begin >= r.in_first && need.end <= r.in_first + in.h,
             "node '%s': rows %lld-%lld read input rows %lld-%lld but the input holds rows %lld-%lld (halo too small)",
             ctx.node.c_str(), (long long)r.out_first, (long long)(r.out_first + r.out_count), (long long)need.begin,
             (long long)need.end, (long long)r.in_first, (long long)(r.in_first + in.h));
  full_out.h = r.out_count;
  return full_out;
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
  c.bytes_written = bytes_of(out, t);
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
// conv

static Shape infer_conv(const Op& op, const std::vector<Shape>& ins, const InferContext& ctx) {
  const ConvAttrs& a = op.conv();
  // A residual convolution's operands are its input and the residual (Node::residual_term).
  HIOS_CHECK(!a.residual || ins.size() == 2, "node '%s': a residual conv takes an input and a residual, got %zu tensors",
             ctx.node.c_str(), ins.size());
  const std::vector<Shape> first(ins.begin(), ins.begin() + (a.residual ? 1 : std::ptrdiff_t(ins.size())));
  const Shape& in = image_input(first, ctx, "conv");
  HIOS_CHECK(a.groups > 0 && a.out_channels > 0, "node '%s': conv needs positive groups and out_channels",
             ctx.node.c_str());
  for (int i = 0; i < 2; ++i) {
    HIOS_CHECK(a.kernel[i] > 0 && a.stride[i] > 0 && a.dilation[i] > 0 && a.padding[i] >= 0,
               "node '%s': conv kernel, stride and dilation must be positive and padding non-negative",
               ctx.node.c_str());
  }
  HIOS_CHECK(in.c % a.groups == 0, "node '%s': conv input has %lld channels, not divisible by groups=%lld",
             ctx.node.c_str(), (long long)in.c, (long long)a.groups);
  HIOS_CHECK(a.out_channels % a.groups == 0, "node '%s': out_channels=%lld not divisible by groups=%lld",
             ctx.node.c_str(), (long long)a.out_channels, (long long)a.groups);
  const int64_t in_h = a.rows.banded() ? a.rows.in_full : in.h;
  Shape out{in.n, a.out_channels, window_out(in_h, a.kernel[0], a.stride[0], a.padding[0], a.dilation[0], false),
            window_out(in.w, a.kernel[1], a.stride[1], a.padding[1], a.dilation[1], false)};
  check_positive(out, ctx, "conv output");
  const Shape result = band_shape(op, a.rows, in, out, ctx);
  HIOS_CHECK(!a.residual || ins[1] == result, "node '%s': the residual is %s but the conv gives %s", ctx.node.c_str(),
             ins[1].str().c_str(), result.str().c_str());
  return result;
}
static OpCost count_conv(const Op& op, const std::vector<Shape>& in, const Shape& out, DType t) {
  const ConvAttrs& a = op.conv();
  OpCost c;
  double weights = double(a.out_channels) * double(in[0].c / a.groups) * a.kernel[0] * a.kernel[1];
  c.params = weights + (a.bias ? a.out_channels : 0);
  c.macs = double(out.numel()) * double(in[0].c / a.groups) * a.kernel[0] * a.kernel[1];
  c.flops = 2 * c.macs + (a.bias ? out.numel() : 0) + (a.activation != Activation::None ? out.numel() : 0) +
            (a.residual ? out.numel() : 0);
  c.bytes_read = bytes_of(in, t) + c.params * dtype_size(t);  // the residual, in[1], included
  c.bytes_written = bytes_of(out, t);
  return c;
}
static void write_conv(const Op& op, json& j) {
  const ConvAttrs& a = op.conv();
  j["out_channels"] = a.out_channels;
  j["kernel"] = pair_json(a.kernel);
  j["stride"] = pair_json(a.stride);
  j["padding"] = pair_json(a.padding);
  j["dilation"] = pair_json(a.dilation);
  j["groups"] = a.groups;
  j["bias"] = a.bias;
  j["activation"] = activation_name(a.activation);
  if (a.residual) j["residual"] = true;
  if (a.rows.banded()) j["rows"] = row_window_json(a.rows);
}
static void read_conv(Op& op, JsonObject& o) {
  ConvAttrs a;
  a.out_channels = o.get_int("out_channels");
  a.kernel = o.get_pair("kernel", a.kernel);
  a.stride = o.get_pair("stride", a.stride);
  a.padding = o.get_pair("padding", a.padding);
  a.dilation = o.get_pair("dilation", a.dilation);
  a.groups = o.get_int("groups", 1);
  a.bias = o.get_bool("bias", true);
  a.activation = parse_activation(o.get_string("activation", "none"), o.child_path("activation"), true);
  a.residual = o.get_bool("residual", false);
  a.rows = read_row_window(o);
  op.attrs = a;
}

// ---------------------------------------------------------------------------------------------
// pool

static Shape infer_pool(const Op& op, const std::vector<Shape>& ins, const InferContext& ctx) {
  const PoolAttrs& a = op.pool();
  const Shape& in = image_input(ins, ctx, "pool");
  if (is_global(a.kind)) {
    const RowWindow& r = a.rows;
    if (r.banded()) {
      // A partial pool: it sums every row its input holds, which must lie in the whole tensor.
      HIOS_CHECK(a.kind == PoolKind::GlobalAvg,
                 "node '%s': a global max pool has no partial form (partial maxima would need an element-wise max)",
                 ctx.node.c_str());
      HIOS_CHECK(r.out_first == 0 && r.out_count == 1,
                 "node '%s': a partial global pool computes output row 0 only (out_first 0, out_count 1)",
                 ctx.node.c_str());
      HIOS_CHECK(r.in_first >= 0 && r.in_first <= r.in_full - in.h,
                 "node '%s': input rows %lld-%lld lie outside the whole input's %lld rows", ctx.node.c_str(),
                 (long long)r.in_first, (long long)(r.in_first + in.h), (long long)r.in_full);
    }
    return Shape{in.n, in.c, 1, 1};
  }
  for (int i = 0; i < 2; ++i) {
    HIOS_CHECK(a.kernel[i] > 0 && a.stride[i] > 0 && a.padding[i] >= 0,
               "node '%s': pool kernel and stride must be positive and padding non-negative", ctx.node.c_str());
    HIOS_CHECK(2 * a.padding[i] <= a.kernel[i], "node '%s': pool padding %d exceeds half the kernel %d",
               ctx.node.c_str(), a.padding[i], a.kernel[i]);
  }
  const int64_t in_h = a.rows.banded() ? a.rows.in_full : in.h;
  Shape out{in.n, in.c, window_out(in_h, a.kernel[0], a.stride[0], a.padding[0], 1, a.ceil_mode),
            window_out(in.w, a.kernel[1], a.stride[1], a.padding[1], 1, a.ceil_mode)};
  check_positive(out, ctx, "pool output");
  return band_shape(op, a.rows, in, out, ctx);
}
static OpCost count_pool(const Op& op, const std::vector<Shape>& in, const Shape& out, DType t) {
  const PoolAttrs& a = op.pool();
  OpCost c;
  double window = is_global(a.kind) ? double(in[0].h) * in[0].w : double(a.kernel[0]) * a.kernel[1];
  c.flops = double(out.numel()) * window;
  c.bytes_read = bytes_of(in, t);
  c.bytes_written = bytes_of(out, t);
  return c;
}
static void write_pool(const Op& op, json& j) {
  const PoolAttrs& a = op.pool();
  j["pool"] = pool_kind_name(a.kind);
  if (is_global(a.kind)) {
    if (a.rows.banded()) j["rows"] = row_window_json(a.rows);  // a partial pool
    return;
  }
  j["kernel"] = pair_json(a.kernel);
  j["stride"] = pair_json(a.stride);
  j["padding"] = pair_json(a.padding);
  j["ceil_mode"] = a.ceil_mode;
  if (a.kind == PoolKind::Avg) j["count_include_pad"] = a.count_include_pad;
  if (a.rows.banded()) j["rows"] = row_window_json(a.rows);
}
static void read_pool(Op& op, JsonObject& o) {
  PoolAttrs a;
  a.kind = parse_pool_kind(o.get_string("pool"), o.child_path("pool"));
  if (!is_global(a.kind)) {
    a.kernel = o.get_pair("kernel", a.kernel);
    a.stride = o.get_pair("stride", a.stride);
    a.padding = o.get_pair("padding", a.padding);
    a.ceil_mode = o.get_bool("ceil_mode", false);
    if (a.kind == PoolKind::Avg) a.count_include_pad = o.get_bool("count_include_pad", true);
  }
  a.rows = read_row_window(o);  // global kinds too: a partial pool (shape inference checks it)
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
  c.bytes_read = bytes_of(in, t);
  c.bytes_written = bytes_of(out, t);
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
  c.bytes_read = bytes_of(in, t);
  c.bytes_written = bytes_of(out, t);
  return c;
}
static void write_none(const Op&, json&) {}
static void read_none(Op& op, JsonObject&) { op.attrs = std::monostate{}; }

// ---------------------------------------------------------------------------------------------
// identity: the node's value is its assembled input (sum within terms, concat across terms).

static OpCost count_identity(const Op&, const std::vector<Shape>& in, const Shape& out, DType t) {
  OpCost c;
  c.bytes_read = bytes_of(in, t);
  c.bytes_written = bytes_of(out, t);
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
  c.bytes_read = bytes_of(in, t) + c.params * dtype_size(t);
  c.bytes_written = bytes_of(out, t);
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
  c.bytes_read = bytes_of(in, t);
  c.bytes_written = bytes_of(out, t);
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
  c.bytes_read = bytes_of(out, t);
  c.bytes_written = bytes_of(out, t);
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
// sequential

static Shape infer_sequential(const Op& op, const std::vector<Shape>& ins, const InferContext& ctx) {
  const auto& steps = op.sequential().steps;
  HIOS_CHECK(!steps.empty(), "node '%s': a sequential needs at least one step", ctx.node.c_str());
  Shape cur = single_input(ins, ctx);
  for (const Op& step : steps) cur = infer_op(step, {cur}, ctx);
  return cur;
}
static OpCost count_sequential(const Op& op, const std::vector<Shape>& ins, const Shape&, DType t) {
  // Each step runs as its own kernel, so intermediates are written and read back: the bytes
  // are the sum over steps.
  OpCost total;
  Shape cur = ins[0];
  std::string name = "(step)";
  InferContext ctx{name, cur.n, cur.h, cur.w};
  for (const Op& step : op.sequential().steps) {
    Shape next = infer_op(step, {cur}, ctx);
    total += count_op(step, {cur}, next, t);
    cur = next;
  }
  return total;
}
static void write_sequential(const Op& op, json& j) {
  json steps = json::array();
  for (const Op& step : op.sequential().steps) {
    json s;
    write_op(step, s);
    steps.push_back(std::move(s));
  }
  j["steps"] = std::move(steps);
}
static void read_sequential(Op& op, JsonObject& o) {
  SequentialAttrs a;
  const json& steps = o.get_array("steps");
  for (size_t i = 0; i < steps.size(); ++i) {
    JsonObject so(steps[i], o.child_path("steps") + strprintf("[%zu]", i));
    Op step = read_op(so);
    HIOS_CHECK(op_def(step.kind).step_allowed, "%s.op: '%s' cannot be a step of a sequential", so.path().c_str(),
               op_def(step.kind).name);
    so.finish();
    a.steps.push_back(std::move(step));
  }
  op.attrs = std::move(a);
}

// ---------------------------------------------------------------------------------------------
// Short labels.

static std::string describe_plain(const Op& op) { return op_def(op.kind).name; }
static std::string describe_conv(const Op& op) {
  const ConvAttrs& a = op.conv();
  std::string s = strprintf("conv %dx%d/%d %lld", a.kernel[0], a.kernel[1], a.stride[0], (long long)a.out_channels);
  if (a.groups > 1) s += strprintf(" g%lld", (long long)a.groups);
  if (a.residual) s += " +residual";
  if (a.activation != Activation::None) s += std::string(" ") + activation_name(a.activation);
  return s;
}
static std::string describe_pool(const Op& op) {
  const PoolAttrs& a = op.pool();
  if (is_global(a.kind)) {
    const std::string s = std::string("pool ") + pool_kind_name(a.kind);
    return a.rows.banded() ? s + " partial" : s;
  }
  return strprintf("pool %s %dx%d/%d", pool_kind_name(a.kind), a.kernel[0], a.kernel[1], a.stride[0]);
}
static std::string describe_activation(const Op& op) { return activation_name(op.act().activation); }
static std::string describe_linear(const Op& op) {
  return strprintf("linear %lld", (long long)op.linear().out_features);
}
static std::string describe_sequential(const Op& op) {
  std::string s = "seq(";
  bool first = true;
  for (const Op& step : op.sequential().steps) {
    s += (first ? "" : ", ") + describe_op(step);
    first = false;
  }
  return s + ")";
}

// ---------------------------------------------------------------------------------------------
// Row dependence (row splits)

static RowRange clip_rows(int64_t begin, int64_t end, int64_t in_h) {
  RowRange r{std::max<int64_t>(begin, 0), std::min<int64_t>(end, in_h)};
  return r.empty() ? RowRange{} : r;
}
// Output row o's window starts at o * stride - pad and spans dilation * (kernel - 1) + 1 rows;
// a ceil_mode window past the input is clipped like the padding.
static RowRange window_rows(RowRange out, int k, int s, int p, int d, int64_t in_h) {
  if (out.empty()) return {};
  return clip_rows(out.begin * s - p, (out.end - 1) * s - p + int64_t(d) * (k - 1) + 1, in_h);
}
static RowRange rows_none(const Op&, RowRange, int64_t) { return {}; }
RowRange rows_same(const Op&, RowRange out, int64_t in_h) { return clip_rows(out.begin, out.end, in_h); }
static RowRange rows_whole(const Op&, RowRange out, int64_t in_h) {
  return out.empty() ? RowRange{} : RowRange{0, in_h};
}
// Output row o of a pad is input row o - top (or padding).
static RowRange rows_pad(const Op& op, RowRange out, int64_t in_h) {
  return out.empty() ? RowRange{} : clip_rows(out.begin - op.pad().pads[0], out.end - op.pad().pads[0], in_h);
}
static int64_t out_rows_pad(const Op& op, int64_t in_h) { return in_h + op.pad().pads[0] + op.pad().pads[2]; }
static RowRange rows_conv(const Op& op, RowRange out, int64_t in_h) {
  const ConvAttrs& a = op.conv();
  return window_rows(out, a.kernel[0], a.stride[0], a.padding[0], a.dilation[0], in_h);
}
static RowRange rows_pool(const Op& op, RowRange out, int64_t in_h) {
  const PoolAttrs& a = op.pool();
  if (is_global(a.kind)) return rows_whole(op, out, in_h);
  return window_rows(out, a.kernel[0], a.stride[0], a.padding[0], 1, in_h);
}
static RowRange window_input_rows(const Op& op, RowRange out, int64_t in_h) {
  return op.kind == OpKind::Conv ? rows_conv(op, out, in_h) : rows_pool(op, out, in_h);
}
int64_t out_rows_same(const Op&, int64_t in_h) { return in_h; }
static int64_t out_rows_one(const Op&, int64_t) { return 1; }
static int64_t out_rows_conv(const Op& op, int64_t in_h) {
  const ConvAttrs& a = op.conv();
  return window_out(in_h, a.kernel[0], a.stride[0], a.padding[0], a.dilation[0], false);
}
static int64_t out_rows_pool(const Op& op, int64_t in_h) {
  const PoolAttrs& a = op.pool();
  return is_global(a.kind) ? 1 : window_out(in_h, a.kernel[0], a.stride[0], a.padding[0], 1, a.ceil_mode);
}
static int64_t out_rows_sequential(const Op& op, int64_t in_h) {
  for (const Op& step : op.sequential().steps) in_h = op_def(step.kind).output_rows(step, in_h);
  return in_h;
}
// Backwards through the steps, each reading the rows its successor needs.
static RowRange rows_sequential(const Op& op, RowRange out, int64_t in_h) {
  const std::vector<Op>& steps = op.sequential().steps;
  std::vector<int64_t> h{in_h};
  for (const Op& step : steps) h.push_back(op_def(step.kind).output_rows(step, h.back()));
  RowRange r = out;
  for (size_t i = steps.size(); i-- > 0;) r = op_def(steps[i].kind).input_rows(steps[i], r, h[i]);
  return r;
}

RowRange input_rows_op(const Op& op, RowRange out, int64_t in_h) { return op_def(op.kind).input_rows(op, out, in_h); }

const RowWindow& row_window(const Op& op) {
  static const RowWindow kNone;
  if (op.kind == OpKind::Conv) return op.conv().rows;
  if (op.kind == OpKind::Pool) return op.pool().rows;
  if (op.kind == OpKind::Resize) return op.as<ResizeAttrs>().rows;
  return kNone;
}

Op band_op(const Op& op, RowRange out, int64_t in_full, int64_t in_first, RowRange* needed) {
  Op b = op;
  RowRange need = input_rows_op(op, out, in_full);
  if (op.kind == OpKind::Conv || op.kind == OpKind::Pool) {
    RowWindow w{out.begin, out.size(), in_first, in_full};
    if (op.kind == OpKind::Conv) {
      std::get<ConvAttrs>(b.attrs).rows = w;
    } else {
      std::get<PoolAttrs>(b.attrs).rows = w;
    }
  } else if (op.kind == OpKind::Resize) {
    std::get<ResizeAttrs>(b.attrs).rows = RowWindow{out.begin, out.size(), in_first, in_full};
  } else if (op.kind == OpKind::ConvTranspose) {
    // Its input holds exactly the rows it needs (row_split.cpp gives a band of a taller input
    // only to convolutions and pools).
    b = conv_transpose_band(op, out, in_first, need.end - in_first);
  } else if (op.kind == OpKind::Sequential) {
    // Step i reads what step i+1 needs; its input holds exactly those rows, except the first
    // step's, which holds what the node was given.
    std::vector<Op>& steps = std::get<SequentialAttrs>(b.attrs).steps;
    std::vector<int64_t> h{in_full};
    for (const Op& step : steps) h.push_back(op_def(step.kind).output_rows(step, h.back()));
    std::vector<RowRange> want(steps.size() + 1);
    want[steps.size()] = out;
    for (size_t i = steps.size(); i-- > 0;) want[i] = input_rows_op(steps[i], want[i + 1], h[i]);
    for (size_t i = 0; i < steps.size(); ++i) {
      steps[i] = band_op(steps[i], want[i + 1], h[i], i == 0 ? in_first : want[i].begin);
    }
  }
  if (needed) *needed = need;
  return b;
}

Op partial_pool_op(const Op& op, RowRange in_rows, int64_t in_full) {
  HIOS_CHECK(op.kind == OpKind::Pool && op.pool().kind == PoolKind::GlobalAvg,
             "partial_pool_op: '%s' is not a global average pool", describe_op(op).c_str());
  Op b = op;
  std::get<PoolAttrs>(b.attrs).rows = RowWindow{0, 1, in_rows.begin, in_full};
  return b;
}

bool row_local_op(const Op& op) {
  if (op.kind == OpKind::Pool) return !is_global(op.pool().kind);
  if (op.kind == OpKind::Sequential) {
    for (const Op& step : op.sequential().steps) {
      if (!row_local_op(step)) return false;
    }
    return true;
  }
  return op_def(op.kind).row_local;
}

std::vector<RowRange> split_rows(int64_t rows, int parts) {
  HIOS_CHECK(parts >= 1 && rows >= 0, "split_rows: %lld rows into %d parts", (long long)rows, parts);
  std::vector<RowRange> out;
  int64_t at = 0;
  for (int i = 0; i < parts; ++i) {
    const int64_t n = rows / parts + (i < rows % parts ? 1 : 0);
    out.push_back({at, at + n});
    at += n;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// The table. Order matches OpKind.

static const std::vector<OpDef>& table() {
  static const std::vector<OpDef> t = {
      {OpKind::Input, "input", "a graph input: the image (N x channels x H x W) or a tensor of any rank and type",
       false, false, infer_input, count_input, write_input, read_input, describe_plain, rows_none, out_rows_same, false,
       dtype_input},
      {OpKind::Conv, "conv", "2-D convolution with optional bias, groups, dilation and fused activation", true,
       false, infer_conv, count_conv, write_conv, read_conv, describe_conv, rows_conv, out_rows_conv, true},
      {OpKind::Pool, "pool", "max / avg / global max / global avg pooling", true, false, infer_pool, count_pool,
       write_pool, read_pool, describe_pool, rows_pool, out_rows_pool, true},
      {OpKind::Activation, "activation", "an element-wise function: relu, sigmoid, gelu, clip, exp, ...", true, false,
       infer_activation, count_pointwise, write_activation, read_activation, describe_activation, rows_same,
       out_rows_same, true, dtype_activation},
      {OpKind::Add, "add", "element-wise sum of its operands (one per input term)", false, true,
       infer_elementwise, count_elementwise, write_none, read_none, describe_plain, rows_same, out_rows_same, true},
      {OpKind::Mul, "mul", "element-wise product of its operands (one per input term)", false, true,
       infer_elementwise, count_elementwise, write_none, read_none, describe_plain, rows_same, out_rows_same, true},
      {OpKind::Identity, "identity", "its assembled input: sum within terms, concat across terms", true, false,
       infer_same, count_identity, write_none, read_none, describe_plain, rows_same, out_rows_same, true},
      {OpKind::Sequential, "sequential", "a chain of single-input ops scheduled as one unit", false, false,
       infer_sequential, count_sequential, write_sequential, read_sequential, describe_sequential, rows_sequential,
       out_rows_sequential, true},
      {OpKind::Linear, "linear", "fully connected layer over the flattened input", true, false, infer_linear,
       count_linear, write_linear, read_linear, describe_linear, rows_whole, out_rows_one, false},
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
