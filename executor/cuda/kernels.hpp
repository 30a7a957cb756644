// The few CUDA kernels hios writes itself, for what cuDNN has no call for: term assembly (sums
// within terms, concatenation across terms, products of operands), pooling with PyTorch's
// ceil_mode, a bias + activation epilogue in one pass (cuDNN needs two), a depthwise
// convolution that applies the ReLU before it on the fly, and a matrix-vector product for
// linear layers at small batch (cuDNN's 1x1 convolution over a 1x1 map leaves most of the GPU
// idle). Internal to executor/cuda.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace hios::cuda {

// Term assembly. One launch writes up to kMaxCombineTerms disjoint channel ranges of dst, each
// the sum of its sources (mode Sum), or one range holding the product over terms of each
// term's sum (mode Product, for mul). Offsets and lengths are in elements of one batch item;
// batch items are batch_stride apart. Larger nodes are split into several launches by the
// caller (accumulate = add into / multiply into what dst holds).
constexpr int kMaxCombineTerms = 12;
constexpr int kMaxCombineSrcs = 24;

struct CombineSrc {
  const float* ptr = nullptr;  // first element of the slice in batch item 0
  int64_t batch_stride = 0;
};
struct CombineTerm {
  int64_t dst_offset = 0;
  int64_t len = 0;  // elements per batch item
  int first = 0;    // index into srcs
  int count = 0;
  int vec4 = 0;     // every address and length is a multiple of 4 floats: use 16-byte accesses
};
enum class CombineMode : int { Sum = 0, Product = 1 };
struct CombineParams {
  float* dst = nullptr;
  int64_t dst_batch_stride = 0;
  int batch = 1;
  int num_terms = 0;
  CombineMode mode = CombineMode::Sum;
  int accumulate = 0;
  CombineTerm terms[kMaxCombineTerms];
  CombineSrc srcs[kMaxCombineSrcs];
};
void launch_combine(const CombineParams& p, cudaStream_t stream);

// Max or average pooling with PyTorch's window rules (ceil_mode, count_include_pad). Used where
// cuDNN cannot express the op: ceil_mode windows that hang past the padded input.
struct PoolParams {
  const float* x = nullptr;
  float* y = nullptr;
  int n = 0, c = 0, h = 0, w = 0, oh = 0, ow = 0;
  int kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0;
  int is_max = 1;
  int count_include_pad = 1;
  int64_t x_batch_stride = 0;
};
void launch_pool(const PoolParams& p, cudaStream_t stream);
// The same function, one block per 32x32 patch of outputs with its input patch staged in shared
// memory: faster than cuDNN's NCHW pooling on large maps (planning times both). Windows up to
// kMaxTiledPoolWindow, strides up to kMaxTiledPoolStride.
constexpr int kMaxTiledPoolWindow = 7;
constexpr int kMaxTiledPoolStride = 2;
void launch_pool_tiled(const PoolParams& p, cudaStream_t stream);

// Activation codes shared by the kernels below: 0 none, 1 relu, 2 sigmoid, 3 tanh (the order of
// hios::Activation).
// y = act(x + bias[c]) over packed NCHW tensors (x == y is fine); bias may be null.
void launch_bias_act(const float* x, float* y, const float* bias, int act, int64_t n, int64_t c, int64_t hw,
                     cudaStream_t stream);

// Depthwise convolution (groups = in = out channels): y = act(conv(relu?(x), w) + b).
struct DepthwiseParams {
  const float* x = nullptr;
  const float* w = nullptr;  // [c][kh][kw]
  const float* b = nullptr;  // may be null
  float* y = nullptr;
  int n = 0, c = 0, h = 0, w_in = 0, oh = 0, ow = 0;
  int kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0;
  int input_relu = 0;
  int act = 0;
};
constexpr int kMaxDepthwiseKernel = 7;
constexpr int kMaxDepthwiseStride = 2;
void launch_depthwise(const DepthwiseParams& p, cudaStream_t stream);

// y[n][o] = b[o] + sum_i w[o][i] * x[n][i], x flattened, in fp32 (no TF32, as PyTorch's
// default matmul); b may be null.
void launch_linear(const float* x, const float* w, const float* b, float* y, int64_t n, int64_t in, int64_t out,
                   cudaStream_t stream);

}  // namespace hios::cuda
