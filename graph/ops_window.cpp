// The convolution, pooling and sequential rows of the op table (graph/ops.hpp: ConvAttrs,
// PoolAttrs, SequentialAttrs, a chain of them scheduled as one node):
// shape inference with row bands (a split's part computes a band of the output from the rows
// its input holds), FLOP and byte counts, JSON and short labels. graph/ops.cpp puts the rows
// into its table; their row dependence is in graph/ops_rows.cpp.
#include <algorithm>
#include <array>
#include <string>

#include "graph/error.hpp"
#include "graph/json_reader.hpp"
#include "graph/ops_tensor.hpp"

namespace hios {

namespace {

PoolKind parse_pool_kind(const std::string& s, const std::string& path) {
  if (s == "max") return PoolKind::Max;
  if (s == "avg") return PoolKind::Avg;
  if (s == "global_max") return PoolKind::GlobalMax;
  if (s == "global_avg") return PoolKind::GlobalAvg;
  throw_error("%s: unknown pool kind '%s' (expected max, avg, global_max or global_avg)", path.c_str(), s.c_str());
}

json pair_json(const std::array<int, 2>& p) { return json::array({p[0], p[1]}); }


// The output shape of a window op that computes the band `r` of `full_out` from an input
// tensor `in`; checks that the band lies in the output and that `in` holds every input row the
// band's windows read (the halo), naming the node and the rows when it does not.
Shape band_shape(const Op& op, const RowWindow& r, const Shape& in, Shape full_out, const InferContext& ctx) {
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

// ---------------------------------------------------------------------------------------------
// conv

Shape infer_conv(const Op& op, const std::vector<Shape>& ins, const InferContext& ctx) {
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
OpCost count_conv(const Op& op, const std::vector<Shape>& in, const Shape& out, DType t) {
  const ConvAttrs& a = op.conv();
  OpCost c;
  double weights = double(a.out_channels) * double(in[0].c / a.groups) * a.kernel[0] * a.kernel[1];
  c.params = weights + (a.bias ? a.out_channels : 0);
  c.macs = double(out.numel()) * double(in[0].c / a.groups) * a.kernel[0] * a.kernel[1];
  c.flops = 2 * c.macs + (a.bias ? out.numel() : 0) + (a.activation != Activation::None ? out.numel() : 0) +
            (a.residual ? out.numel() : 0);
  c.bytes_read = value_bytes(in, t) + c.params * dtype_size(t);  // the residual, in[1], included
  c.bytes_written = value_bytes(out, t);
  return c;
}
void write_conv(const Op& op, json& j) {
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
void read_conv(Op& op, JsonObject& o) {
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

Shape infer_pool(const Op& op, const std::vector<Shape>& ins, const InferContext& ctx) {
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
OpCost count_pool(const Op& op, const std::vector<Shape>& in, const Shape& out, DType t) {
  const PoolAttrs& a = op.pool();
  OpCost c;
  double window = is_global(a.kind) ? double(in[0].h) * in[0].w : double(a.kernel[0]) * a.kernel[1];
  c.flops = double(out.numel()) * window;
  c.bytes_read = value_bytes(in, t);
  c.bytes_written = value_bytes(out, t);
  return c;
}
void write_pool(const Op& op, json& j) {
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
void read_pool(Op& op, JsonObject& o) {
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

std::string describe_conv(const Op& op) {
  const ConvAttrs& a = op.conv();
  std::string s = strprintf("conv %dx%d/%d %lld", a.kernel[0], a.kernel[1], a.stride[0], (long long)a.out_channels);
  if (a.groups > 1) s += strprintf(" g%lld", (long long)a.groups);
  if (a.residual) s += " +residual";
  if (a.activation != Activation::None) s += std::string(" ") + activation_name(a.activation);
  return s;
}
std::string describe_pool(const Op& op) {
  const PoolAttrs& a = op.pool();
  if (is_global(a.kind)) {
    const std::string s = std::string("pool ") + pool_kind_name(a.kind);
    return a.rows.banded() ? s + " partial" : s;
  }
  return strprintf("pool %s %dx%d/%d", pool_kind_name(a.kind), a.kernel[0], a.kernel[1], a.stride[0]);
}

// ---------------------------------------------------------------------------------------------
// sequential

Shape infer_sequential(const Op& op, const std::vector<Shape>& ins, const InferContext& ctx) {
  const auto& steps = op.sequential().steps;
  HIOS_CHECK(!steps.empty(), "node '%s': a sequential needs at least one step", ctx.node.c_str());
  Shape cur = single_input(ins, ctx);
  for (const Op& step : steps) cur = infer_op(step, {cur}, ctx);
  return cur;
}
OpCost count_sequential(const Op& op, const std::vector<Shape>& ins, const Shape&, DType t) {
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
void write_sequential(const Op& op, json& j) {
  json steps = json::array();
  for (const Op& step : op.sequential().steps) {
    json s;
    write_op(step, s);
    steps.push_back(std::move(s));
  }
  j["steps"] = std::move(steps);
}
void read_sequential(Op& op, JsonObject& o) {
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

std::string describe_sequential(const Op& op) {
  std::string s = "seq(";
  bool first = true;
  for (const Op& step : op.sequential().steps) {
    s += (first ? "" : ", ") + describe_op(step);
    first = false;
  }
  return s + ")";
}

}  // namespace

OpDef conv_op_row() {
  return {OpKind::Conv, "conv", "2-D convolution with optional bias, groups, dilation and fused activation", true,
          false, infer_conv, count_conv, write_conv, read_conv, describe_conv, rows_conv, out_rows_conv, true};
}

OpDef pool_op_row() {
  return {OpKind::Pool, "pool", "max / avg / global max / global avg pooling", true, false, infer_pool, count_pool,
          write_pool, read_pool, describe_pool, rows_pool, out_rows_pool, true};
}

OpDef sequential_op_row() {
  return {OpKind::Sequential, "sequential", "a chain of single-input ops scheduled as one unit", false, false,
          infer_sequential, count_sequential, write_sequential, read_sequential, describe_sequential, rows_sequential,
          out_rows_sequential, true};
}

}  // namespace hios
