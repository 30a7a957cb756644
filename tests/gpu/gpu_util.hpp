// Shared helpers of the GPU tests: skipping without GPUs, the CPU oracle, error measures.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "inprocess/inprocess.hpp"
#include "graph/graph.hpp"

// Skips the test (tests/catch.hpp's HIOS_SKIP) on a machine without a visible GPU.
#define REQUIRE_GPU()                                                                  \
  do {                                                                                 \
    if (::hios::cuda::device_count() < 1) HIOS_SKIP("no CUDA device visible");         \
  } while (0)

namespace hios::gputest {

// The math modes every op test runs in, and the convolution families: Auto takes the fastest,
// the others force each family of implementations in turn.
inline constexpr cuda::MathMode kModes[] = {cuda::MathMode::Tf32, cuda::MathMode::Fp32, cuda::MathMode::Fp16,
                                            cuda::MathMode::Bf16};
// The storage types, for ops that never touch tensor cores (TF32 is fp32 storage for them).
inline constexpr cuda::MathMode kStorageModes[] = {cuda::MathMode::Fp32, cuda::MathMode::Fp16, cuda::MathMode::Bf16};
inline constexpr cuda::ConvImpl kImpls[] = {cuda::ConvImpl::Auto, cuda::ConvImpl::Graph, cuda::ConvImpl::Legacy,
                                            cuda::ConvImpl::Hios};

// Norm-wise relative error ||got - ref|| / ||ref|| (element-wise relative errors explode near
// zero), plus the largest absolute difference; any NaN or infinity in `got` makes it fail.
struct Error {
  double rel = 0;
  double max_abs = 0;
  double ref_norm = 0;
  bool finite = true;
  bool within(double tol) const { return finite && rel <= tol; }
  std::string str() const;
};
Error compare(const std::vector<float>& got, const std::vector<float>& ref);

// Uniform values in [-1, 1) from a seeded generator, so every check gets fresh inputs.
std::vector<float> random_values(int64_t count, std::mt19937& rng);

// The CPU reference (executor/cpu) for one node: producers' values indexed by node.
std::vector<float> cpu_node(const Graph& g, int node, const std::vector<std::vector<float>>& values,
                            uint64_t seed = init::kDefaultSeed);
// Every node's value of a whole forward pass on the CPU, from the deterministic input.
std::vector<std::vector<float>> cpu_forward(const Graph& g, uint64_t seed = init::kDefaultSeed);

// A one-block graph for testing a single op: an input of `in_channels`, producers made by
// 1x1 convs of the given channel counts (their values are supplied by the test, not computed),
// then whatever `body` adds reading them; `body` returns the node under test, which is the
// block's exit.
struct OpGraph {
  Graph g;
  int node = -1;
  std::vector<int> producers;
};
OpGraph make_op_graph(int64_t batch, int64_t h, int64_t w, const std::vector<int64_t>& producer_channels,
                      const std::function<Value(GraphBuilder&, const std::vector<Value>&)>& body);

// Runs node `og.node` on the GPU and on the CPU with fresh random producer values, on the GPU
// once per activation layout (NCHW and NHWC, kLayouts); the result is the layout that came
// out worse.
inline constexpr exec::Layout kLayouts[] = {exec::Layout::Nchw, exec::Layout::Nhwc};
struct OpCheck {
  Error err;
  std::vector<float> gpu, cpu;
  exec::Layout layout = exec::Layout::Nchw;  // of err and gpu
  std::string str() const;                    // err.str() and the layout it came from
};
OpCheck check_op(const OpGraph& og, cuda::MathMode math, std::mt19937& rng,
                 cuda::ConvImpl conv_impl = cuda::ConvImpl::Auto,
                 cuda::PhaseSplit phase_split = cuda::PhaseSplit::Timed,
                 cuda::ChannelPad channel_pad = cuda::ChannelPad::Timed);

// Tolerance on the norm-wise relative error of one op: convolutions and linear layers in TF32
// round their operands to 10 mantissa bits (about 5e-4 relative each); everything else is fp32
// arithmetic against a double-accumulated reference.
double op_tolerance(OpKind kind, cuda::MathMode math);

}  // namespace hios::gputest
