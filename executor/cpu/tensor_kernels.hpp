// CPU reference kernels of the general tensor ops (graph/ops_tensor.cpp) and of the element-wise
// and softmax ops on tensors of any rank and element type. Row-major tensors; floats are held
// as float32 (whatever float type the graph names: a float16 node's values are rounded to it
// after its kernel) and computed in double; integers and bools in their own width, computed in
// int64_t, so index and shape arithmetic is exact.
#pragma once

#include <vector>

#include "graph/graph.hpp"

namespace hios::exec::cpu {

// The element type a tensor of type t is stored in on the CPU backend: float32 for every float
// type, t itself otherwise.
inline DType storage_type(DType t) { return is_float(t) ? DType::F32 : t; }

struct TensorArg {
  const void* data = nullptr;
  Shape shape;
  DType dtype = DType::F32;  // a storage type
};
struct TensorOut {
  void* data = nullptr;
  Shape shape;
  DType dtype = DType::F32;  // a storage type
};

// Runs a general op (OpDef::general), or an activation or softmax, on operands in operand order.
void run_tensor_op(const Op& op, const std::vector<TensorArg>& in, const TensorOut& out);

// The attention op (executor/cpu/attention_kernel.cpp): operands q, k, v[, mask] in float32.
void attention(const Op& op, const std::vector<TensorArg>& in, const TensorOut& out);

// One element of an activation (any function, its alpha and beta), in double.
double activate(const ActivationAttrs& a, double x);

// Rounds `count` float32 values to float16 or bfloat16 precision in place (a node of that type).
void round_to_type(float* values, int64_t count, DType t);

}  // namespace hios::exec::cpu
