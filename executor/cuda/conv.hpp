// Convolutions: every candidate implementation is timed on the real buffers once per distinct
// problem (and device), and the fastest runs. Internal to executor/cuda.
//
// Candidates:
//  * cuDNN's graph API (conv_graph_api.hpp): the convolution fused with its residual, bias and
//    activation in one operation graph, when an engine takes it, and the convolution alone
//    followed by hios's bias + residual + activation kernel. The graph API reaches every engine cuDNN has for the GPU (the
//    Hopper-specific ones included), which the legacy API below does not.
//  * cuDNN's legacy API: cudnnFindConvolutionForwardAlgorithmEx's best algorithm, with
//    cudnnConvolutionBiasActivationForward where allowed.
//  * hios's depthwise kernel (groups = in = out channels, kernels up to 7x7, strides up to 2).
//  * hios's direct kernel, only when nothing above takes the problem (never timed against them).
//
//  * The phase split of a dilated convolution: with dilation d and the padding that keeps the
//    size, output pixel (i * d + a, j * d + b) reads only input pixels of the same phase (a, b),
//    so the convolution is the dilation-1 convolution of the batch of the input's d x d phases
//    (TensorFlow's space-to-batch form of atrous convolution), copied apart before and back
//    after. On an H200 in TF32, cuDNN's best engines ran DeepLab's ASPP convolutions (3x3,
//    dilations 12 to 36) at half the throughput of its backbone's 3x3 convolutions of dilation
//    2 and 4 (205 against 410 TFLOP/s); the split costs two copies and the zeros that pad each
//    phase to a whole image. It is timed as one more candidate, with the best implementation of
//    its inner convolution (PhaseSplit).
//  * The channel pad of an NHWC image whose pixel is narrower than 16 bytes (an RGB stem: 3
//    channels): copied into a pixel of 4 or 8 channels, the extra ones zero, and convolved with
//    weights that have zeros in those channels, which adds nothing to any sum. cuDNN's
//    tensor-core engines need channels in multiples of 16 bytes' worth (or of 8 bytes for its
//    first-layer kernels); at 3 channels it ran ResNet-50's 7x7 stem at under a tenth of the
//    bandwidth its output needs. Timed as one more candidate per width, with the best
//    implementation of its inner convolution (ChannelPad).
//
// A band of a row split (graph/ops.hpp, RowWindow) is an ordinary convolution of the rows its
// input holds with its own H padding above and below (plan_conv_spec works it out): the graph API
// takes pre- and post-paddings, the legacy API only equal ones (it declines the others), the
// depthwise and direct kernels any, even a negative top padding (input rows above the ones
// read). Such a problem has a signature of its own (the paddings are part of the key).
// When the step before the convolution is a ReLU (NASNet's separable convolutions), the
// depthwise kernel applies it while loading its input; the cuDNN candidates run it first as a
// separate pass into scratch, and that pass is part of their timed cost.
//
// Numerics follow the math mode: in fp32 mode no engine with the tensor-core note (TF32 for
// float data) is used; in fp16 and bf16 modes x, w, y and the bias are 16-bit and cuDNN
// accumulates in fp32 (its "pseudo-half" configurations); engines that down-convert their inputs to half precision and
// non-deterministic ones are never used, so a captured graph replays the eager result bit for bit.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "executor/cuda/engine.hpp"

namespace hios::cuda {

// cuDNN's alpha and beta for an fp32 or 16-bit computation: y = 1 * op(x) + 0 * y.
inline constexpr float kOne = 1.0f;
inline constexpr float kZero = 0.0f;

struct ConvProblem {
  View x;  // packed
  View y;  // packed
  const void* w = nullptr;  // in x's element type, as every tensor
  const void* b = nullptr;  // may be null
  int64_t out_channels = 0, groups = 1;
  // padding: above x's first row (H) and either side (W). pad_bottom: below x's last row; equal
  // to padding[0] for a whole tensor. A band may have any pair, and with cudnn_ok false (only
  // hios's kernels may run it) a negative padding[0] or pad_bottom: x holds rows the
  // convolution does not read (the output height is y's).
  std::array<int, 2> kernel{1, 1}, stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int pad_bottom = 0;
  bool cudnn_ok = true;
  Activation act = Activation::None;
  bool fp32 = false;        // forbid TF32
  bool input_relu = false;  // the convolution reads relu(x)
  View relu_tmp;            // scratch of x's shape for the cuDNN candidates when input_relu
  View z;                   // the residual added before the activation (ConvAttrs::residual); null ptr: none
  bool residual() const { return z.ptr != nullptr; }
  // The phase split may run (phases = the dilation d, else 0): scratch for x's d x d phases
  // (batch n * d * d of ceil(h / d) x ceil(w / d) images, launch_phases) and y's.
  int phases = 0;
  View phase_x, phase_y;
  // The channel pad may run, one entry per width: x copied into `x` (packed NHWC, `channels`
  // per pixel, the ones past x's zero) and convolved with `w` (the weights, zero there).
  struct ChannelPad {
    int64_t channels = 0;
    View x;
    const void* w = nullptr;
  };
  std::vector<ChannelPad> channel_pads;
};

// A convolution node's (or a sequential's convolution step's) attributes, as ConvAttrs has them.
struct ConvSpec {
  int64_t out_channels, groups;
  std::array<int, 2> kernel, stride, padding, dilation;
  bool bias;
  Activation act;
  RowWindow rows;  // a band of a row split, or the whole tensor
};

// Plans convolution `a` of x into y: a band's paddings, packed operands, the parameters' check,
// then plan_convolution. input_relu: the step before was a ReLU that this convolution applies to
// its input itself (plan_sequential decides). residual: ConvAttrs::residual's operand.
void plan_conv_spec(PlanCtx& c, const ConvSpec& a, const std::string& prefix, View x, const View& y,
                    bool input_relu = false, const View* residual = nullptr);

// Picks (or recalls) the fastest implementation and emits its launches; raises
// c.workspace_need to what it needs.
void plan_convolution(PlanCtx& c, const ConvProblem& p);

// The choices made on a device so far (and the recipes adopted there), as signature key ->
// recipe JSON: {"impl": "graph-fused" | "graph" | "legacy" | "depthwise" | "direct", ...}.
json conv_choices(int device);
// Recipes to rebuild instead of timing, for keys not chosen yet in this process.
void adopt_conv_choices(int device, const json& recipes);

// Whether hios's depthwise kernel can compute this convolution.
bool depthwise_kernel_fits(const ConvProblem& p);

}  // namespace hios::cuda
