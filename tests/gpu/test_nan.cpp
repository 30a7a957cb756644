// NaN through the ops whose plain CUDA forms drop it: fmaxf(NaN, 0) is 0, so a ReLU or a max
// pool written with it turns a NaN into a finite number, where ONNX Runtime (and the CPU
// reference) keep the NaN. Each op runs on the GPU with NaNs planted in its input, and the
// output must hold a NaN exactly where the CPU reference does.
#include <cmath>
#include <random>

#include "executor/cuda/conv.hpp"
#include "graph/error.hpp"

#include "tests/catch.hpp"
#include "tests/gpu/gpu_util.hpp"

using namespace hios;
using cuda::MathMode;

namespace {

// Runs `og` with every producer's values random and about one in `every` of them NaN, in each
// layout, and returns a description of the first position where the NaN patterns differ (empty
// when they agree everywhere). With `lost_only`, only a NaN the GPU lost counts: cuDNN's FFT and
// Winograd convolutions mix a tile's inputs, so one NaN may spread further than the direct sum. Also fails when the CPU output holds no NaN at all, so the test
// cannot pass by planting NaNs nowhere that reaches the output.
std::string nan_mismatch(const gputest::OpGraph& og, MathMode math, cuda::ConvImpl impl, std::mt19937& rng,
                         int every = 17, bool lost_only = false) {
  std::vector<std::vector<float>> values(size_t(og.g.size()));
  for (int p : og.producers) {
    values[size_t(p)] = gputest::random_values(og.g.nodes[size_t(p)].shape.numel(), rng);
    for (size_t i = 0; i < values[size_t(p)].size(); i += size_t(every)) values[size_t(p)][i] = NAN;
  }
  const std::vector<float> cpu = gputest::cpu_node(og.g, og.node, values);
  int64_t cpu_nans = 0;
  for (float v : cpu) cpu_nans += std::isnan(v) ? 1 : 0;
  if (cpu_nans == 0) return "the CPU output has no NaN (the test planted none that reaches it)";
  cuda::SingleGpuOptions opts;
  opts.math = math;
  opts.conv_impl = impl;
  for (exec::Layout l : gputest::kLayouts) {
    opts.layout = l;
    const std::vector<float> gpu = cuda::run_single_node(og.g, og.node, values, opts);
    if (gpu.size() != cpu.size()) return strprintf("%zu outputs, the CPU %zu", gpu.size(), cpu.size());
    for (size_t i = 0; i < cpu.size(); ++i) {
      if (std::isnan(cpu[i]) ? !std::isnan(gpu[i]) : std::isnan(gpu[i]) && !lost_only)
        // With the convolution choices made so far, to name the algorithm that lost the NaN.
        return strprintf("layout %s, element %zu: GPU %g, CPU %g (%lld NaNs on the CPU); choices %s",
                         exec::layout_name(l), i, double(gpu[i]), double(cpu[i]), (long long)cpu_nans,
                         cuda::conv_choices(opts.device).dump().c_str());
    }
  }
  return "";
}

void expect_nans_kept(const gputest::OpGraph& og, MathMode math, cuda::ConvImpl impl, std::mt19937& rng,
                      const std::string& what, int every = 17, bool lost_only = false) {
  const std::string bad = nan_mismatch(og, math, impl, rng, every, lost_only);
  INFO(what << " [" << cuda::math_mode_name(math) << ", " << cuda::conv_impl_name(impl) << "]: " << bad);
  CHECK(bad.empty());
}

}  // namespace

TEST_CASE("NaN stays NaN through ReLU, ReLU6, hard-swish, max pools and convolution epilogues", "[gpu][ops][nan]") {
  REQUIRE_GPU();
  std::mt19937 rng(2718);
  for (MathMode m : gputest::kStorageModes) {
    for (Activation a : {Activation::Relu, Activation::Relu6, Activation::HardSwish}) {
      auto og = gputest::make_op_graph(1, 9, 11, {13}, [&](GraphBuilder& b, const std::vector<Value>& v) {
        return b.activation("act", v[0], a);
      });
      expect_nans_kept(og, m, cuda::ConvImpl::Auto, rng, activation_name(a));
    }
    // Max pools: the generic window, the NHWC 3x3 kernels at strides 1 and 2 (tiles and rows),
    // and the global one.
    for (int k : {2, 3}) {
      for (int s : {1, 2}) {
        for (int64_t c : {8, 13}) {
          auto og = gputest::make_op_graph(1, 19, 23, {c}, [&](GraphBuilder& b, const std::vector<Value>& v) {
            return b.pool("pool", v[0], PoolKind::Max, k, s, k / 2, false, false);
          });
          expect_nans_kept(og, m, cuda::ConvImpl::Auto, rng, strprintf("max pool %dx%d/%d c%lld", k, k, s, (long long)c));
        }
      }
    }
    auto gp = gputest::make_op_graph(1, 7, 5, {12}, [&](GraphBuilder& b, const std::vector<Value>& v) {
      return b.pool("pool", v[0], PoolKind::GlobalMax);
    });
    expect_nans_kept(gp, m, cuda::ConvImpl::Auto, rng, "global max pool");
  }
  // A convolution's ReLU epilogue, in every implementation and math mode: dense and depthwise
  // (hios's own kernels take the depthwise). NaNs are sparse so most outputs stay finite.
  for (MathMode m : gputest::kModes) {
    for (bool depthwise : {false, true}) {
      for (Activation a : {Activation::Relu, Activation::Relu6}) {
        auto og = gputest::make_op_graph(1, 15, 15, {16}, [&](GraphBuilder& b, const std::vector<Value>& v) {
          return b.node("conv", conv_op(16, {3, 3}, {1, 1}, {1, 1}, a, depthwise ? 16 : 1, true), {Term{v[0]}});
        });
        for (cuda::ConvImpl impl : gputest::kImpls) {
          expect_nans_kept(og, m, impl, rng,
                           std::string("conv 3x3 ") + (depthwise ? "depthwise " : "") + activation_name(a), 997, true);
        }
      }
    }
  }
}
