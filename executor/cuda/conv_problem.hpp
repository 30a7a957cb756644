// A convolution problem's derived forms (conv.hpp, ConvProblem): the arguments of hios's own
// kernels, the residual pass they leave, the phase split's and channel pad's inner problems and
// copies, and the legacy API's descriptors. Internal to executor/cuda (conv.cpp's candidates).
#pragma once

#include <cstdint>

#include "executor/cuda/conv.hpp"
#include "executor/cuda/kernels.hpp"

namespace hios::cuda {

inline int act_code(Activation a) { return static_cast<int>(a); }  // kernels.hpp's codes follow the enum

// What hios's kernels leave to a pass of their own: a residual's sum and the activation after
// it (their own epilogues take the bias and an activation only).
struct ResidualEpilogue {
  void* y = nullptr;
  const void* z = nullptr;
  int act = 0;
  Shape ys;
  int nhwc = 0;
  Elem elem = Elem::F32;
  void operator()(cudaStream_t st) const {
    if (z) launch_bias_act(y, y, nullptr, act, ys.n, ys.c, ys.h * ys.w, nhwc, elem, st, z);
  }
};
ResidualEpilogue residual_epilogue(const ConvProblem& p);
// The arguments of hios's depthwise kernel, and of its direct kernel (the fallback for problems
// nothing else takes): the same for the timed launch and the one that runs.
DepthwiseParams depthwise_params(const ConvProblem& p);
DirectConvParams direct_params(const ConvProblem& p);

// The phase split's inner problem: the dilation-1 convolution of x's phases into y's phases,
// with the padding that keeps a phase's size; bias and activation as the whole one's.
ConvProblem inner_problem(const ConvProblem& p);
// x into its phases (merge false), or y's phases into y.
PhaseParams phase_params(const ConvProblem& p, bool merge);
// The channel pad's inner problem: the padded image convolved with the padded weights; and the
// pad of a width among p's (null when p has none of it).
ConvProblem padded_problem(const ConvProblem& p, const ConvProblem::ChannelPad& pad);
const ConvProblem::ChannelPad* channel_pad_of(const ConvProblem& p, int64_t channels);

// The legacy API has one padding per dimension: it takes a band only when the band's H
// paddings above and below are equal.
inline bool legacy_fits(const ConvProblem& p) { return p.cudnn_ok && p.padding[0] == p.pad_bottom; }
inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// The legacy API's descriptors of a problem, made and destroyed together.
struct LegacyDescs {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, b = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnActivationDescriptor_t act = nullptr;
  explicit LegacyDescs(const ConvProblem& p);
  ~LegacyDescs();
  LegacyDescs(const LegacyDescs&) = delete;
  LegacyDescs& operator=(const LegacyDescs&) = delete;
};

}  // namespace hios::cuda
