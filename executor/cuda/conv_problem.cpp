// A convolution problem's derived forms (conv_problem.hpp).
#include "executor/cuda/conv_problem.hpp"

#include "executor/cuda/check.hpp"

namespace hios::cuda {

namespace {

// The arguments hios's own kernels (depthwise, direct) share, from a problem: shared by
// autotuning and execution so the timed launch is exactly the launch that runs.
template <typename Params>
Params kernel_params(const ConvProblem& p) {
  Params dp;
  dp.x = p.x.ptr;
  dp.w = p.w;
  dp.b = p.b;
  dp.y = p.y.ptr;
  dp.n = int(p.x.shape.n);
  dp.c = int(p.x.shape.c);
  dp.h = int(p.x.shape.h);
  dp.w_in = int(p.x.shape.w);
  dp.oh = int(p.y.shape.h);
  dp.ow = int(p.y.shape.w);
  dp.kh = p.kernel[0];
  dp.kw = p.kernel[1];
  dp.sh = p.stride[0];
  dp.sw = p.stride[1];
  dp.ph = p.padding[0];
  dp.pw = p.padding[1];
  dp.input_relu = p.input_relu;
  // With a residual the activation comes after the sum: residual_epilogue applies both.
  dp.act = p.residual() ? 0 : act_code(p.act);
  dp.nhwc = p.x.nhwc() ? 1 : 0;
  dp.elem = p.x.elem;
  return dp;
}

}  // namespace

ResidualEpilogue residual_epilogue(const ConvProblem& p) {
  return {p.y.ptr, p.z.ptr, act_code(p.act), p.y.shape, p.y.nhwc() ? 1 : 0, p.y.elem};
}

DepthwiseParams depthwise_params(const ConvProblem& p) {
  DepthwiseParams dp = kernel_params<DepthwiseParams>(p);
  dp.dh = p.dilation[0];
  dp.dw = p.dilation[1];
  return dp;
}

// The direct kernel's arguments: the fallback for problems nothing else takes.
DirectConvParams direct_params(const ConvProblem& p) {
  DirectConvParams dp = kernel_params<DirectConvParams>(p);
  dp.oc = int(p.out_channels);
  dp.groups = int(p.groups);
  dp.dh = p.dilation[0];
  dp.dw = p.dilation[1];
  return dp;
}

// The phase split's inner problem: the dilation-1 convolution of x's phases into y's phases,
// with the padding that keeps a phase's size; bias and activation as the whole one's.
ConvProblem inner_problem(const ConvProblem& p) {
  ConvProblem ip = p;
  ip.x = p.phase_x;
  ip.y = p.phase_y;
  ip.dilation = {1, 1};
  ip.padding = {p.kernel[0] / 2, p.kernel[1] / 2};
  ip.pad_bottom = ip.padding[0];
  ip.phases = 0;
  ip.phase_x = ip.phase_y = View{};
  ip.channel_pads.clear();
  return ip;
}

// The channel pad's inner problem: the padded image convolved with the padded weights.
ConvProblem padded_problem(const ConvProblem& p, const ConvProblem::ChannelPad& pad) {
  ConvProblem ip = p;
  ip.x = pad.x;
  ip.w = pad.w;
  ip.channel_pads.clear();
  return ip;
}

const ConvProblem::ChannelPad* channel_pad_of(const ConvProblem& p, int64_t channels) {
  for (const ConvProblem::ChannelPad& pad : p.channel_pads) {
    if (pad.channels == channels) return &pad;
  }
  return nullptr;
}

// x into its phases (merge false), or y's phases into y.
PhaseParams phase_params(const ConvProblem& p, bool merge) {
  PhaseParams pp;
  const View& image = merge ? p.y : p.x;
  pp.src = merge ? p.phase_y.ptr : p.x.ptr;
  pp.dst = merge ? p.y.ptr : p.phase_x.ptr;
  pp.elem = p.x.elem;
  pp.n = image.shape.n;
  pp.h = image.shape.h;
  pp.w = image.shape.w;
  pp.channels = image.shape.c;
  pp.dilation = p.phases;
  pp.p = p.phase_x.shape.h;
  pp.q = p.phase_x.shape.w;
  pp.merge = merge ? 1 : 0;
  return pp;
}

LegacyDescs::LegacyDescs(const ConvProblem& p) {
  HIOS_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x));
  HIOS_CUDNN_CHECK(cudnnCreateTensorDescriptor(&y));
  HIOS_CUDNN_CHECK(cudnnCreateTensorDescriptor(&b));
  HIOS_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w));
  HIOS_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv));
  HIOS_CUDNN_CHECK(cudnnCreateActivationDescriptor(&act));
  const Shape& xs = p.x.shape;
  const Shape& ys = p.y.shape;
  // NHWC: activations channels-last and the filter KRSC (Engine::to_channels_last).
  const cudnnTensorFormat_t fmt = p.x.nhwc() ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  // 16-bit storage: x, w, y and the bias in that type, fp32 compute ("pseudo-half").
  const cudnnDataType_t st = cudnn_type(p.x.elem);
  HIOS_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x, fmt, st, int(xs.n), int(xs.c), int(xs.h), int(xs.w)));
  HIOS_CUDNN_CHECK(cudnnSetTensor4dDescriptor(y, fmt, st, int(ys.n), int(ys.c), int(ys.h), int(ys.w)));
  HIOS_CUDNN_CHECK(cudnnSetTensor4dDescriptor(b, CUDNN_TENSOR_NCHW, st, 1, int(ys.c), 1, 1));
  HIOS_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w, st, fmt, int(p.out_channels), int(xs.c / p.groups),
                                              p.kernel[0], p.kernel[1]));
  HIOS_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv, p.padding[0], p.padding[1], p.stride[0], p.stride[1],
                                                   p.dilation[0], p.dilation[1], CUDNN_CROSS_CORRELATION,
                                                   CUDNN_DATA_FLOAT));
  HIOS_CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv, int(p.groups)));
  // CUDNN_DEFAULT_MATH lets cuDNN use TF32 tensor cores for float data; FMA forbids them;
  // 16-bit data asks for tensor cores outright.
  HIOS_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, p.fp32                ? CUDNN_FMA_MATH
                                                     : p.x.elem != Elem::F32 ? CUDNN_TENSOR_OP_MATH
                                                                             : CUDNN_DEFAULT_MATH));
  const cudnnActivationMode_t m = p.act == Activation::Relu      ? CUDNN_ACTIVATION_RELU
                                  : p.act == Activation::Sigmoid ? CUDNN_ACTIVATION_SIGMOID
                                  : p.act == Activation::Tanh    ? CUDNN_ACTIVATION_TANH
                                  : p.act == Activation::Relu6   ? CUDNN_ACTIVATION_CLIPPED_RELU
                                                                 : CUDNN_ACTIVATION_IDENTITY;
  HIOS_CUDNN_CHECK(cudnnSetActivationDescriptor(act, m, CUDNN_PROPAGATE_NAN, p.act == Activation::Relu6 ? 6.0 : 0.0));
}

LegacyDescs::~LegacyDescs() {
  (void)cudnnDestroyTensorDescriptor(x);
  (void)cudnnDestroyTensorDescriptor(y);
  (void)cudnnDestroyTensorDescriptor(b);
  (void)cudnnDestroyFilterDescriptor(w);
  (void)cudnnDestroyConvolutionDescriptor(conv);
  (void)cudnnDestroyActivationDescriptor(act);
}

}  // namespace hios::cuda
