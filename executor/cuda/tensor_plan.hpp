// The general ops' planning helpers that executor/cuda/tensor_ops.cpp (element-wise, movement,
// reductions, norms, resizes) and executor/cuda/matmul_ops.cpp (matrix products, attention)
// share. Internal to executor/cuda.
#pragma once

#include <cstdint>
#include <vector>

#include "executor/cuda/engine.hpp"
#include "executor/cuda/tensor_kernels.hpp"

namespace hios::cuda::tensor_plan {

// A view's per-dim strides in elements: channels-last images by their pixel stride, channel
// slices by their batch stride, every other tensor row-major.
struct Walk {
  int rank = 0;
  int64_t dims[kMaxTensorDims] = {};
  int64_t stride[kMaxTensorDims] = {};
};
Walk walk_of(const View& v);
bool row_major(const View& v);
// v's strides broadcast to `rank` dims of `dims` (NumPy: aligned at the right, ones stretched).
void broadcast_strides(const View& v, int rank, const int64_t* dims, int64_t* out);
// The node's operands in order: its computed inputs' views and its constants, uploaded.
std::vector<View> float_operands(PlanCtx& c, const std::vector<View>& in);
// y = fn(operands) element by element, every operand broadcast to y's shape.
void plan_pointwise(PlanCtx& c, const std::vector<View>& ops, const View& y, MapFn fn, int code, float alpha, float beta);
// A strided copy of `dims` (the output's order) from src into dst; `round` as MapParams::round.
void plan_copy(PlanCtx& c, const void* src, const int64_t* src_stride, void* dst, const int64_t* dst_stride, int rank,
               const int64_t* dims, Elem elem, int round);
void plan_softmax_axis(PlanCtx& c, const Op& op, const View& x, const View& y);

// executor/cuda/matmul_ops.cpp
void plan_matmul(PlanCtx& c, const Op& op, const std::vector<View>& in, const View& y);
void plan_attention(PlanCtx& c, const Op& op, const std::vector<View>& in, const View& y);

}  // namespace hios::cuda::tensor_plan
