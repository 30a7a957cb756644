// The cuDNN graph API as the convolutions use it: descriptors that free themselves, the
// operation graph of one convolution with its fused epilogue (bias, residual, activation), the
// heuristics' engine configurations, execution plans and variant packs. executor/cuda/conv.cpp
// times the candidates these give beside the legacy API's and hios's own kernels.
#pragma once

#include <cudnn.h>

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "executor/cuda/check.hpp"
#include "executor/cuda/conv.hpp"

namespace hios::cuda::graph_api {

struct Be {
  cudnnBackendDescriptor_t d = nullptr;
  explicit Be(cudnnBackendDescriptorType_t t) { HIOS_CUDNN_CHECK(cudnnBackendCreateDescriptor(t, &d)); }
  ~Be() {
    if (d) (void)cudnnBackendDestroyDescriptor(d);
  }
  Be(const Be&) = delete;
  Be& operator=(const Be&) = delete;
};
using BeP = std::shared_ptr<Be>;

BeP be(cudnnBackendDescriptorType_t t);
void be_set(const BeP& b, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, int64_t n, const void* v);

// The byte alignment of a pointer, up to 16: what a graph-API tensor promises. Bands of 16-bit
// tensors start at any element, so 2, 4 and 8 occur, and an engine finalized for one may refuse
// another at execution (CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER): the promise is the real one.
int64_t alignment_of(const void* p, Elem e);

// The unique ids of a convolution graph's tensors in a variant pack.
constexpr int64_t kUidX = 1, kUidW = 2, kUidY = 3, kUidB = 4, kUidZ = 5;

// An operation graph (a convolution, optionally + residual + bias + activation) and everything it
// refers to.
struct BeGraph {
  std::vector<BeP> keep;
  BeP graph;
  bool has_bias = false;
  bool has_residual = false;  // reads the residual (kUidZ)
};

// The graph of p reading x (the input, or the ReLU's output in scratch): the convolution
// alone, or with `fused` its epilogue (residual, bias, activation) too. Null when cuDNN cannot
// express or finalize it.
std::shared_ptr<BeGraph> build_graph(cudnnHandle_t h, const ConvProblem& p, const void* x, bool fused);

struct EngineInfo {
  int64_t index = -1;
  bool tensor_core = false, down_convert = false, nondeterministic = false, runtime_compiled = false;
};
EngineInfo engine_info(const BeP& cfg);

// Up to `most` engine configurations of the heuristics in `mode`, best first.
std::vector<BeP> heuristic_configs(const BeGraph& g, cudnnBackendHeurMode_t mode, int most);
BeP make_plan(cudnnHandle_t h, const BeP& cfg);  // null when the configuration does not finalize
int64_t plan_workspace(const BeP& plan);
BeP make_variant_pack(const std::vector<int64_t>& uids, const std::vector<void*>& ptrs, void* ws);

// A graph-API plan and the node's pointers. The variant pack names the workspace, which is
// only known once every node of the stream is planned: it is built on first use (the eager
// pass before any capture) and again should the stream's workspace ever move.
struct BeExec {
  std::shared_ptr<BeGraph> graph;
  BeP plan;
  std::vector<int64_t> uids;
  std::vector<void*> ptrs;
  BeP pack;
  void* pack_ws = nullptr;
  void run(cudnnHandle_t h, void* ws);
};

}  // namespace hios::cuda::graph_api
