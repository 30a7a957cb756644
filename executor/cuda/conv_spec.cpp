// From a convolution node's attributes to the problem plan_convolution solves (conv.hpp): a
// band's paddings, packed operands, the parameters' check, and the scratch of the phase split.
#include <algorithm>

#include "executor/cuda/check.hpp"
#include "executor/cuda/conv.hpp"

namespace hios::cuda {

// A band (a.rows) is an ordinary convolution of the rows x holds, with H paddings of its own:
// its first output row's window starts at whole-tensor row u0 = out_first * stride - padding,
// and x's first row is whole-tensor row in_first, so pad_top = in_first - u0 rows of zeros lie
// above x (rows above in_first that the window covers are padding: shape inference guarantees
// that x holds every row the band reads, so those rows are below 0), and pad_bottom makes the
// output out_count rows high. Either may be negative, when x holds rows the band does not read
// (a tensor also read by a convolution with a wider window): cuDNN takes neither, so those
// rows are cut off (a pointer offset for a single plane, otherwise a copy of the rows read),
// except for a depthwise convolution that hios's kernel will compute, which reads around them.
void plan_conv_spec(PlanCtx& c, const ConvSpec& a, const std::string& prefix, View x, const View& y, bool input_relu,
                    const View* residual) {
  const int64_t sh = a.stride[0];
  const int64_t span_h = int64_t(a.dilation[0]) * (a.kernel[0] - 1) + 1;
  int64_t pad_top = a.padding[0], pad_bottom = a.padding[0];
  if (a.rows.banded()) {
    pad_top = a.rows.in_first - (a.rows.out_first * sh - a.padding[0]);
    pad_bottom = (a.rows.out_count - 1) * sh + span_h - pad_top - x.shape.h;
  }
  bool cudnn_ok = true;
  if (pad_top < 0 || pad_bottom <= -sh) {
    // Rows x holds that the band never reads: more below it than cuDNN's floor division of the
    // output height absorbs (stride - 1 rows), or any above it.
    ConvProblem probe;
    probe.x.shape = x.shape;
    probe.out_channels = a.out_channels;
    probe.groups = a.groups;
    probe.kernel = a.kernel;
    probe.stride = a.stride;
    probe.dilation = a.dilation;
    const ConvImpl impl = c.eng.conv_impl();
    if (x.shape.n * x.shape.c > 1 && depthwise_kernel_fits(probe) &&
        (impl == ConvImpl::Auto || impl == ConvImpl::Hios)) {
      cudnn_ok = false;  // hios's depthwise kernel reads x as it is
      x = c.packed(x);
    } else {
      const int64_t skip = std::max<int64_t>(0, -pad_top);
      const int64_t used = x.shape.h - skip - std::max<int64_t>(0, -pad_bottom);
      x = c.rows_of(x, skip, used);
      pad_top = std::max<int64_t>(0, pad_top);
      pad_bottom = std::max<int64_t>(0, pad_bottom);
    }
  } else {
    // Strided inputs (slices of batched tensors) are copied: not every cuDNN engine takes them.
    x = c.packed(x);
    // Up to stride - 1 unread rows at the bottom: the output height's floor division drops them.
    pad_bottom = std::max<int64_t>(0, pad_bottom);
  }
  // Scratch for the cuDNN candidates, which need the ReLU's output materialised.
  const View relu_tmp = input_relu && cudnn_ok ? c.scratch(x.shape) : View{};
  // The residual is read as the output is written: packed, in the output's layout.
  const View z = residual ? c.packed(*residual) : View{};
  // The phase split (conv.hpp) of a whole NHWC tensor's dense convolution at stride 1, with one
  // dilation d > 1 in both dimensions and the padding that keeps the size (DeepLab's atrous
  // backbone and ASPP): scratch for the d x d phases of its input and of its output.
  const int d = a.dilation[0];
  const bool same_size = a.kernel[0] % 2 == 1 && a.kernel[1] % 2 == 1 && a.padding[0] == d * (a.kernel[0] / 2) &&
                         a.padding[1] == d * (a.kernel[1] / 2) && pad_top == a.padding[0] && pad_bottom == a.padding[0];
  int phases = 0;
  View phase_x, phase_y;
  if (c.eng.phase_split() != PhaseSplit::Never && x.nhwc() && !a.rows.banded() && cudnn_ok && a.groups == 1 &&
      a.stride[0] == 1 && a.stride[1] == 1 && d > 1 && a.dilation[1] == d && same_size && !input_relu && !residual &&
      x.shape.n <= (int64_t(1) << 20) / (int64_t(d) * d)) {
    phases = d;
    Shape ps = x.shape;
    ps.n = x.shape.n * d * d;
    ps.h = (x.shape.h + d - 1) / d;
    ps.w = (x.shape.w + d - 1) / d;
    phase_x = c.scratch(ps);
    ps.c = a.out_channels;
    phase_y = c.scratch(ps);
  }
  // The channel pad (conv.hpp) of an image whose pixel is narrower than 16 bytes: scratch for
  // the padded image at each width tried, 4 and 8 elements (8 only for 16-bit elements).
  std::vector<ConvProblem::ChannelPad> pads;
  const int64_t per16 = 16 / int64_t(elem_bytes(x.elem));
  if (x.nhwc() && cudnn_ok && a.groups == 1 && !input_relu && phases == 0 && x.shape.c < per16 &&
      c.eng.conv_impl() == ConvImpl::Auto) {
    for (int64_t width : {int64_t(4), int64_t(8)}) {
      if (width <= x.shape.c || width > per16) continue;
      Shape ps = x.shape;
      ps.c = width;
      pads.push_back({width, c.scratch(ps), nullptr});
    }
  }
  if (c.dry) return;
  const std::string& node = c.node_name;
  const int64_t cin_g = x.shape.c / a.groups;
  const int64_t fan_in = cin_g * a.kernel[0] * a.kernel[1];
  const Engine::Params& prm = c.eng.params(prefix);
  HIOS_CHECK(prm.weight_count == a.out_channels * fan_in && prm.bias_count == (a.bias ? a.out_channels : 0),
             "node '%s': parameters of '%s' hold %lld weights and %lld biases, expected %lld and %lld", node.c_str(),
             prefix.c_str(), (long long)prm.weight_count, (long long)prm.bias_count,
             (long long)(a.out_channels * fan_in), (long long)(a.bias ? a.out_channels : 0));
  for (int i = 0; i < 2; ++i) {
    const int64_t in = i == 0 ? x.shape.h : x.shape.w, out = i == 0 ? y.shape.h : y.shape.w;
    const int64_t pads = i == 0 ? pad_top + pad_bottom : 2 * int64_t(a.padding[i]);
    const int64_t span = int64_t(a.dilation[i]) * (a.kernel[i] - 1) + 1;
    HIOS_CHECK(in + pads >= span && (in + pads - span) / a.stride[i] + 1 == out && y.shape.c == a.out_channels,
               "node '%s': convolution of %s gives an output other than the graph's %s", node.c_str(),
               x.shape.str().c_str(), y.shape.str().c_str());
  }
  HIOS_CHECK(!a.rows.banded() || y.shape.h == a.rows.out_count,
             "node '%s': a band of %lld rows has an output of %s", node.c_str(), (long long)a.rows.out_count,
             y.shape.str().c_str());
  to_int(x.item(), node, "input size");
  to_int(y.item(), node, "output size");
  ConvProblem p;
  p.x = x;
  p.y = y;
  p.w = prm.weight;
  p.b = prm.bias;
  p.out_channels = a.out_channels;
  p.groups = a.groups;
  p.kernel = a.kernel;
  p.stride = a.stride;
  p.padding = {to_int_signed(pad_top, node, "top padding"), a.padding[1]};
  p.pad_bottom = to_int_signed(pad_bottom, node, "bottom padding");
  p.cudnn_ok = cudnn_ok;
  p.dilation = a.dilation;
  p.act = a.act;
  p.fp32 = c.eng.math() == MathMode::Fp32;
  p.input_relu = input_relu;
  p.relu_tmp = relu_tmp;
  p.z = z;
  p.phases = phases;
  p.phase_x = phase_x;
  p.phase_y = phase_y;
  for (ConvProblem::ChannelPad& pad : pads) {
    pad.w = c.eng.padded_weights(prefix, a.out_channels * a.kernel[0] * a.kernel[1], x.shape.c, pad.channels);
  }
  p.channel_pads = pads;
  plan_convolution(c, p);
}

}  // namespace hios::cuda
