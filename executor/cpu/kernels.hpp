// CPU reference kernels: the correctness oracle for every other backend. Straightforward loops,
// NCHW float tensors, sums accumulated in double, and a fixed summation order per output
// element whatever the thread count, so results are bit-for-bit reproducible across runs,
// ranks and schedules.
//
// Window conventions follow PyTorch: conv and pool output sizes as in graph/ops.cpp; max pool
// ignores padding; avg pool divides by the window clipped to the padded input (when
// count_include_pad) or by the in-bounds part of the window (when not); with ceil_mode a
// window may run past the padding and is clipped.
#pragma once

#include <cstdint>
#include <vector>

#include "graph/graph.hpp"

namespace hios::exec::cpu {

// y = act(conv(x, w) + b), or with a residual z (of y's shape) act(conv(x, w) + b + z); w is
// [out][in/groups][kh][kw]; b and z may be nullptr.
void conv2d(const ConvAttrs& a, const Shape& in, const float* x, const Shape& out, float* y, const float* w,
            const float* b, const float* z = nullptr);
void pool2d(const PoolAttrs& a, const Shape& in, const float* x, const Shape& out, float* y);
void activation(Activation act, int64_t count, const float* x, float* y);
// y[i] = sum (add) or product (mul) over operands of operands[k][i], in operand order.
void elementwise(OpKind kind, const std::vector<const float*>& operands, int64_t count, float* y);
// y[n][o] = b[o] + sum_i w[o][i] * x[n][i], x flattened over C*H*W; b may be nullptr.
void linear(const LinearAttrs& a, const Shape& in, const float* x, const Shape& out, float* y, const float* w,
            const float* b);
// Softmax over channels at every (n, h, w).
void softmax_channels(const Shape& s, const float* x, float* y);

// Reusable buffers for intermediates (the steps of a sequential); they grow on first use and
// keep their capacity, so a backend that sizes them in prepare() allocates nothing per pass.
struct Scratch {
  std::vector<float> a, b;
};

// Applies one op (any kind but Input) to already assembled inputs: `in` holds one tensor for
// ordinary ops and one per operand for add/mul. `params` holds the op's parameters, one entry
// per step for a sequential. Dispatches through a table indexed by OpKind.
struct OpParamsView {
  const float* weight = nullptr;
  const float* bias = nullptr;
};
void run_op(const Op& op, const std::vector<const float*>& in, const std::vector<Shape>& in_shapes, const Shape& out,
            float* y, const std::vector<OpParamsView>& params, Scratch& scratch);
// Elements of the largest intermediate run_op needs in scratch for `op` reading `in`.
int64_t scratch_elems(const Op& op, const Shape& in);

// The completeness check of the kernel table: throws hios::Error naming the first OpKind
// without a kernel (run once when the CPU backend is created, and by the tests).
void check_kernel_table();

// Term assembly of node v: values summed within a term (in double, in reading order; channel
// slices honoured) and terms concatenated along channels into out[0]; for add/mul (terms are
// operands) one tensor per term instead. producers[k] is the output of the node of the k-th
// value in reading order (term by term). `out` is resized as needed and keeps its capacity.
void assemble_terms(const Graph& g, int v, const std::vector<const float*>& producers,
                    std::vector<std::vector<float>>& out);
// True when node v reads exactly one whole tensor (one term, one value, no slice), so its
// producer's output can be used directly without assembly.
bool reads_one_whole_tensor(const Graph& g, int v);

}  // namespace hios::exec::cpu
