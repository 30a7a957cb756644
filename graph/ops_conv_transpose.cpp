// The transposed convolution's row of the op table (graph/ops.hpp, ConvTransposeAttrs): the
// upsampling layer of U-Nets, FPN decoders and text detectors.
//
// A band of its output rows is a transposed convolution of the input rows that reach the band,
// with its own top and bottom pads and output padding: an input row i scatters into the output
// rows i * stride - pad_top + [0, dilation * (kernel - 1)], so a band's first row lies pad'
// rows into the transposed result of its first input row, and the rows below its last input
// row's reach are zeros, which output padding adds. No kernel needs a band form.
#include <algorithm>
#include <string>

#include "graph/error.hpp"
#include "graph/json_reader.hpp"
#include "graph/ops_tensor.hpp"

namespace hios {

namespace {

int64_t transposed_extent(int64_t in, int k, int s, int d, int op, int before, int after) {
  return (in - 1) * s + int64_t(d) * (k - 1) + 1 + op - before - after;
}

Shape infer_conv_transpose(const Op& op, const std::vector<Shape>& ins, const InferContext& ctx) {
  const ConvTransposeAttrs& a = op.as<ConvTransposeAttrs>();
  HIOS_CHECK(ins.size() == 1, "node '%s': conv_transpose takes one input, got %zu", ctx.node.c_str(), ins.size());
  const Shape& in = ins[0];
  HIOS_CHECK(in.rank == 4, "node '%s': a conv_transpose takes an N x C x H x W tensor, not a rank-%d one",
             ctx.node.c_str(), in.rank);
  HIOS_CHECK(a.groups > 0 && a.out_channels > 0 && in.c % a.groups == 0 && a.out_channels % a.groups == 0,
             "node '%s': conv_transpose of %lld channels to %lld in %lld groups: both must divide by the groups",
             ctx.node.c_str(), (long long)in.c, (long long)a.out_channels, (long long)a.groups);
  for (int i = 0; i < 2; ++i) {
    HIOS_CHECK(a.kernel[i] > 0 && a.stride[i] > 0 && a.dilation[i] > 0 && a.pads[i] >= 0 && a.pads[i + 2] >= 0 &&
                   a.output_padding[i] >= 0 && a.output_padding[i] < std::max(a.stride[i], a.dilation[i]),
               "node '%s': conv_transpose kernel, stride and dilation must be positive, pads non-negative and the "
               "output padding below the stride or dilation",
               ctx.node.c_str());
  }
  const Shape out = Shape::of({in.n, a.out_channels,
                               transposed_extent(in.h, a.kernel[0], a.stride[0], a.dilation[0], a.output_padding[0],
                                                 a.pads[0], a.pads[2]),
                               transposed_extent(in.w, a.kernel[1], a.stride[1], a.dilation[1], a.output_padding[1],
                                                 a.pads[1], a.pads[3])});
  HIOS_CHECK(out.h > 0 && out.w > 0, "node '%s': conv_transpose output %s has a non-positive size", ctx.node.c_str(),
             out.str().c_str());
  return out;
}

OpCost count_conv_transpose(const Op& op, const std::vector<Shape>& in, const Shape& out, DType t) {
  const ConvTransposeAttrs& a = op.as<ConvTransposeAttrs>();
  OpCost c;
  const double per_input = double(a.out_channels / a.groups) * a.kernel[0] * a.kernel[1];
  c.params = double(in[0].c) * per_input + (a.bias ? a.out_channels : 0);
  c.macs = double(in[0].numel()) * per_input;
  c.flops = 2 * c.macs + (a.bias ? double(out.numel()) : 0);
  c.bytes_read = (double(in[0].numel()) + c.params) * double(dtype_size(t));
  c.bytes_written = double(out.numel()) * double(dtype_size(t));
  return c;
}

json pair_of(const std::array<int, 2>& p) { return json::array({p[0], p[1]}); }

void write_conv_transpose(const Op& op, json& j) {
  const ConvTransposeAttrs& a = op.as<ConvTransposeAttrs>();
  j["out_channels"] = a.out_channels;
  j["kernel"] = pair_of(a.kernel);
  j["stride"] = pair_of(a.stride);
  j["pads"] = json::array({a.pads[0], a.pads[1], a.pads[2], a.pads[3]});
  j["output_padding"] = pair_of(a.output_padding);
  j["dilation"] = pair_of(a.dilation);
  j["groups"] = a.groups;
  j["bias"] = a.bias;
}

void read_conv_transpose(Op& op, JsonObject& o) {
  ConvTransposeAttrs a;
  a.out_channels = o.get_int_in("out_channels", 1, int64_t(1) << 30);
  a.kernel = o.get_pair("kernel", a.kernel);
  a.stride = o.get_pair("stride", a.stride);
  a.output_padding = o.get_pair("output_padding", a.output_padding);
  a.dilation = o.get_pair("dilation", a.dilation);
  if (o.has("pads")) {
    const json& p = o.get_array("pads");
    HIOS_CHECK(p.size() == 4, "%s: four pads (top, left, bottom, right), got %zu", o.child_path("pads").c_str(), p.size());
    for (size_t k = 0; k < 4; ++k) {
      const std::string path = o.child_path("pads") + strprintf("[%zu]", k);
      HIOS_CHECK(p[k].is_number_integer() && p[k].get<int64_t>() >= 0 && p[k].get<int64_t>() < (int64_t(1) << 20),
                 "%s: expected an integer from 0 to 2^20", path.c_str());
      a.pads[k] = int(p[k].get<int64_t>());
    }
  }
  a.groups = o.get_int_in("groups", 1, int64_t(1) << 30);
  a.bias = o.get_bool("bias", true);
  for (int i = 0; i < 2; ++i) {
    HIOS_CHECK(a.kernel[i] > 0 && a.stride[i] > 0 && a.dilation[i] > 0 && a.output_padding[i] >= 0 &&
                   a.kernel[i] <= 1024 && a.stride[i] <= 1024 && a.dilation[i] <= 1024 && a.output_padding[i] <= 1024,
               "%s: kernel, stride and dilation are 1 to 1024, output_padding 0 to 1024", o.path().c_str());
  }
  op.attrs = a;
}

std::string describe_conv_transpose(const Op& op) {
  const ConvTransposeAttrs& a = op.as<ConvTransposeAttrs>();
  return strprintf("conv_transpose %dx%d/%d -> %lld", a.kernel[0], a.kernel[1], a.stride[0], (long long)a.out_channels);
}

int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// Input rows that reach output rows `out`, widened upwards where needed so that the first one
// starts at or above the band (its pad' >= 0) and never empty: a stride longer than the
// kernel's reach leaves output rows that no input row reaches.
RowRange conv_transpose_rows(const Op& op, RowRange out, int64_t in_h) {
  if (out.empty()) return {};
  const ConvTransposeAttrs& a = op.as<ConvTransposeAttrs>();
  const int64_t s = a.stride[0], reach = int64_t(a.dilation[0]) * (a.kernel[0] - 1);
  const int64_t top = out.begin + a.pads[0], bottom = out.end + a.pads[0];  // in the unpadded result
  int64_t first = std::max<int64_t>(0, -floor_div(-(top - reach), s));
  first = std::min({first, top / s, in_h - 1});
  const int64_t end = std::max(first + 1, std::min(in_h, floor_div(bottom - 1, s) + 1));
  return {first, end};
}
int64_t out_rows_transposed(const Op& op, int64_t in_h) {
  const ConvTransposeAttrs& a = op.as<ConvTransposeAttrs>();
  return transposed_extent(in_h, a.kernel[0], a.stride[0], a.dilation[0], a.output_padding[0], a.pads[0], a.pads[2]);
}

}  // namespace

OpDef conv_transpose_op_row() {
  return {OpKind::ConvTranspose, "conv_transpose",
          "transposed 2-D convolution (learned upsampling) with optional bias and groups", false, false,
          infer_conv_transpose, count_conv_transpose, write_conv_transpose, read_conv_transpose,
          describe_conv_transpose, conv_transpose_rows, out_rows_transposed, true};
}

Op conv_transpose_band(const Op& op, RowRange out, int64_t in_first, int64_t in_rows) {
  Op band = op;
  ConvTransposeAttrs& a = std::get<ConvTransposeAttrs>(band.attrs);
  const int64_t s = a.stride[0], reach = int64_t(a.dilation[0]) * (a.kernel[0] - 1);
  const int64_t top = out.begin + a.pads[0] - in_first * s;                 // pad' above the band
  const int64_t extra = (in_rows - 1) * s + reach + 1 - top - out.size();  // rows below it
  HIOS_CHECK(top >= 0 && in_rows > 0 && -extra < std::max<int64_t>(s, a.dilation[0]),
             "conv_transpose band %lld-%lld cannot be computed from input rows %lld-%lld",
             (long long)out.begin, (long long)out.end, (long long)in_first, (long long)(in_first + in_rows));
  a.pads[0] = int(top);
  a.pads[2] = int(std::max<int64_t>(extra, 0));
  a.output_padding[0] = int(std::max<int64_t>(-extra, 0));
  return band;
}

}  // namespace hios
