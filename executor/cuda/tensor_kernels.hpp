// Kernels of the general tensor ops (graph/ops_tensor.cpp) on tensors of any rank up to 8, each
// addressed by per-dim strides in elements of the engine's storage type: a row-major tensor, an
// image stored channels-last, a channel slice and a broadcast operand (stride 0) are all the same
// to them. One strided map (copies, element-wise functions, broadcasting binaries, gathers on
// one axis), a reduction, a softmax along an axis, a resize by per-axis tap tables and a
// reshape between two index spaces. They compute in fp32 whatever the storage type is, as the
// CUDA backend's other kernels do (executor/cuda/kernels.hpp). Internal to executor/cuda.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "executor/cuda/kernels.hpp"

namespace hios::cuda {

constexpr int kMaxTensorDims = 8;

// One operand of a map: where it starts and how far apart its elements are along each of the
// map's dims (0 along a dim it is broadcast over).
struct StridedOperand {
  const void* ptr = nullptr;
  int64_t stride[kMaxTensorDims] = {};
};

// FromInt64: operand a holds int64 values (a graph input's token ids or mask), converted.
enum class MapFn : int { Copy = 0, Activation = 1, Binary = 2, FromInt64 = 3 };

// y[i] = fn(a[i]) or fn(a[i], b[i]) for every index i of `dims`. With gather_dim >= 0, operand
// a's coordinate along that dim is gather_table[coordinate] (ONNX's Gather on one axis, the
// table's values already in range).
struct MapParams {
  Elem elem = Elem::F32;
  int rank = 0;
  int64_t dims[kMaxTensorDims] = {};
  void* y = nullptr;
  int64_t y_stride[kMaxTensorDims] = {};
  int operands = 1;
  StridedOperand in[2];
  MapFn fn = MapFn::Copy;
  int code = 0;  // an Activation or a BinaryFn (graph/ops.hpp), as an int
  float alpha = 0, beta = 0;
  int gather_dim = -1;
  const int64_t* gather_table = nullptr;  // device memory
  int64_t gather_wrap = 0;  // > 0: a negative table value v stands for v + gather_wrap (ONNX)
  int round = 0;  // 1, 2: round each result to float16, bfloat16 before storing it (fp32 storage)
};
void launch_map(const MapParams& p, cudaStream_t stream);

// Element-wise functions the map kernel evaluates (by Activation / BinaryFn code). The planner
// refuses the rest by name, so a new function in graph/ops.hpp cannot run unnoticed.
bool map_activation_supported(int code);
bool map_binary_supported(int code);

// Over the dims with red_dims > 1, for every output index of `dims` (the input's dims with the
// reduced ones 1): fn is a ReduceFn code (Sum, Mean, Max, Min, Prod, L1, L2, LogSum, LogSumExp,
// SumSquare); x_stride and red_stride address the input, y_stride the output in the same index
// space (keepdims or not, the caller maps the output's strides onto it).
struct ReduceParams {
  Elem elem = Elem::F32;
  int rank = 0;
  int64_t dims[kMaxTensorDims] = {};
  const void* x = nullptr;
  int64_t x_stride[kMaxTensorDims] = {};
  void* y = nullptr;
  int64_t y_stride[kMaxTensorDims] = {};
  int red_rank = 0;
  int64_t red_dims[kMaxTensorDims] = {};
  int64_t red_stride[kMaxTensorDims] = {};
  int fn = 0;
};
void launch_reduce(const ReduceParams& p, cudaStream_t stream);
bool reduce_supported(int code);

// A layer or RMS norm (a NormFn code) of every row: the output index `dims` (the normalised dims
// 1) with x's and y's strides, the normalised dims `red_dims` with theirs. scale and bias hold
// one value (count 1) or one per normalised element in row-major order; bias may be null.
struct NormParams {
  Elem elem = Elem::F32;
  int fn = 0;
  float epsilon = 0;
  int rank = 0;
  int64_t dims[kMaxTensorDims] = {};
  const void* x = nullptr;
  int64_t x_stride[kMaxTensorDims] = {};
  void* y = nullptr;
  int64_t y_stride[kMaxTensorDims] = {};
  int red_rank = 0;
  int64_t red_dims[kMaxTensorDims] = {};
  int64_t red_x_stride[kMaxTensorDims] = {};
  int64_t red_y_stride[kMaxTensorDims] = {};
  const void* scale = nullptr;
  const void* bias = nullptr;
  int64_t scale_count = 1, bias_count = 1;
  // NormAttrs::residual: x + r is normalised (r walked with its own strides); null: x alone.
  const void* r = nullptr;
  int64_t r_stride[kMaxTensorDims] = {};
  int64_t red_r_stride[kMaxTensorDims] = {};
};
void launch_norm(const NormParams& p, cudaStream_t stream);

// Softmax, log-softmax or hardmax (a SoftmaxFn code) along one axis of `len` elements, for every
// index of `dims` (the tensor's dims with that axis 1).
struct SoftmaxAxisParams {
  Elem elem = Elem::F32;
  int rank = 0;
  int64_t dims[kMaxTensorDims] = {};
  const void* x = nullptr;
  int64_t x_stride[kMaxTensorDims] = {};
  void* y = nullptr;
  int64_t y_stride[kMaxTensorDims] = {};
  int64_t len = 0, x_axis_stride = 0, y_axis_stride = 0;
  int fn = 0;
};
void launch_softmax_axis(const SoftmaxAxisParams& p, cudaStream_t stream);

// Output element (o_0 .. o_r-1) is the sum over the product of its axes' taps of weight times
// x at the taps' indices. An axis with taps[d] == 0 is not resized (index o_d, weight 1); one
// with taps[d] = t reads t (index, weight) pairs per output coordinate from its tables, at
// [o_d * t, o_d * t + t).
struct ResizeParams {
  Elem elem = Elem::F32;
  int rank = 0;
  int64_t dims[kMaxTensorDims] = {};  // the output's
  int64_t x_dims[kMaxTensorDims] = {};
  const void* x = nullptr;
  int64_t x_stride[kMaxTensorDims] = {};
  void* y = nullptr;
  int64_t y_stride[kMaxTensorDims] = {};
  int taps[kMaxTensorDims] = {};
  const int* tap_index[kMaxTensorDims] = {};      // device memory
  const float* tap_weight[kMaxTensorDims] = {};   // device memory
  // Which kernel walks it (the same sums in the same order, so the same bits): 0, the general
  // walk (runs of the innermost dim where it is kept whole); 1, one thread per element of an
  // image resized along its two middle dims of four (an NHWC upsampling), where that applies
  // (resize_image_fits); 2, the same image a stretch of an output row per block, where its
  // pixels are packed (resize_image_rows_fit).
  int image_kernel = 0;
};
void launch_resize(const ResizeParams& p, cudaStream_t stream);

// Attention as one kernel (executor/cuda/attention.cu): for each of `batch` entries, Q
// [sq, d], K [sk, d], V [sk, dv] and Y [sq, dv] at their batch and row strides (elements, each
// row's elements consecutive), an additive mask broadcast to the scores [sq, sk] (its offset
// per entry from the entry's coordinates in lead_dims, the scores' dims before the last two),
// optionally causal. Head sizes 64 and 128, d = dv; compute capability 8 and up.
struct FlashAttentionParams {
  Elem elem = Elem::F32;
  const void *q = nullptr, *k = nullptr, *v = nullptr, *mask = nullptr;
  void* y = nullptr;
  int64_t batch = 0, sq = 0, sk = 0, d = 0, dv = 0;
  int64_t q_batch = 0, q_row = 0, k_batch = 0, k_row = 0, v_batch = 0, v_row = 0, y_batch = 0, y_row = 0;
  int lead_rank = 0;
  int64_t lead_dims[kMaxTensorDims] = {};
  int64_t mask_lead_stride[kMaxTensorDims] = {};
  int64_t mask_row = 0, mask_col = 0;
  float scale = 1;
  int causal = 0;
};
bool flash_attention_fits(const FlashAttentionParams& p, int compute_capability_major);
// Lets the kernel of this type and head size have its shared memory (over the default 48 KB)
// on the current device: called while planning, outside any capture, before the first launch.
void prepare_flash_attention(Elem elem, int64_t d);
void launch_flash_attention(const FlashAttentionParams& p, cudaStream_t stream);
bool resize_image_fits(const ResizeParams& p);
bool resize_image_rows_fit(const ResizeParams& p);

// y's elements in its own index space (y_dims, y_stride) take x's in x's (x_dims, x_stride), in
// row-major order of both: a reshape between layouts that are not both row-major.
struct ReshapeParams {
  Elem elem = Elem::F32;
  int x_rank = 0, y_rank = 0;
  int64_t x_dims[kMaxTensorDims] = {}, y_dims[kMaxTensorDims] = {};
  const void* x = nullptr;
  int64_t x_stride[kMaxTensorDims] = {};
  void* y = nullptr;
  int64_t y_stride[kMaxTensorDims] = {};
};
void launch_reshape(const ReshapeParams& p, cudaStream_t stream);

}  // namespace hios::cuda
