// The general tensor ops on the CUDA backend (graph/ops_tensor.cpp): a row-major reshape is a
// copy; the others have no kernels yet and are refused when a program is prepared, naming the
// node, so a graph that needs them runs on the CPU reference (--backend cpu) instead.
#include "executor/cuda/check.hpp"
#include "executor/cuda/engine.hpp"
#include "graph/error.hpp"

namespace hios::cuda {

void refuse_general(const PlanCtx& c, const char* what) {
  throw_error("node '%s': the cuda backend has no kernel for %s yet (--backend cpu runs it)", c.node_name.c_str(), what);
}
void check_general_node(const Node& nd) {
  HIOS_CHECK(nd.constants.empty() && is_float(nd.dtype),
             "node '%s': the cuda backend has no kernel for a %s of %s values or with constants yet (--backend cpu runs it)",
             nd.name.c_str(), op_def(nd.op.kind).name, dtype_name(nd.dtype));
}

void plan_general(PlanCtx& c, const Op& op, const std::string&, const std::vector<View>&, const View&) {
  refuse_general(c, op_def(op.kind).name);
}

// A reshape moves no element where both tensors hold theirs in row-major order: a tensor that is
// not an image, an image stored channels-first, or one of H x W = 1 x 1 (a classifier's logits
// flattened to N x K): a copy of the bytes, or nothing where the memory plan shares them.
void plan_reshape(PlanCtx& c, const Op&, const std::string&, const std::vector<View>& in, const View& y) {
  const View x = in.at(0);
  auto row_major = [](const View& v) { return v.packed() && (v.shape.rank != 4 || !v.nhwc() || v.shape.h * v.shape.w == 1); };
  if (!row_major(x) || !row_major(y)) refuse_general(c, "a reshape of a channels-last image (--layout nchw stores it row-major)");
  if (c.dry || x.ptr == y.ptr) return;
  const size_t bytes = size_t(y.shape.numel()) * elem_bytes(y.elem);
  c.emit([src = x.ptr, dst = y.ptr, bytes](StreamResources& r) {
    HIOS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, r.stream()));
  });
}

}  // namespace hios::cuda
