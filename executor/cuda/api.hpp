// The CUDA backend's public face. CUDA-free: nothing here names a CUDA, cuDNN or NCCL type, so
// the CLI, the executor and the tests include it without the toolkit's headers.
//
// Everything behind it lives in executor/cuda and is built only when HIOS_HAVE_CUDA is on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "executor/init.hpp"
#include "executor/tensor_layout.hpp"
#include "graph/graph.hpp"

namespace hios::cuda {

// Convolution arithmetic. Tf32 is PyTorch's default for cuDNN convolutions
// (torch.backends.cudnn.allow_tf32 = True); Fp32 forbids tensor-core TF32. Linear layers always
// run in full FP32, as PyTorch's default matmul does (torch.backends.cuda.matmul.allow_tf32 =
// False), so the two stacks compute the same function.
//
// Fp16 and Bf16 store every tensor, weights included, in that 16-bit type (weights are
// converted once at load, inputs on upload, results back to fp32 on download); convolutions
// accumulate in fp32 on tensor cores, and hios's own kernels compute in fp32 between a 16-bit
// load and a 16-bit store. The precision of torch.autocast with channels_last, without its
// fp32 islands.
enum class MathMode { Tf32, Fp32, Fp16, Bf16 };
const char* math_mode_name(MathMode m);
MathMode parse_math_mode(const std::string& s);  // "tf32", "fp32", "fp16" or "bf16"; otherwise hios::Error
// Bytes per stored element under a math mode: 2 for fp16 and bf16, else 4.
size_t math_element_bytes(MathMode m);

// Which family of convolution implementations may run: Auto times them all and takes the
// fastest (the default everywhere); the others force one family where it can compute the
// convolution (cuDNN's graph API, cuDNN's legacy API, hios's own depthwise kernel), so the
// tests check each against the CPU.
enum class ConvImpl { Auto, Graph, Legacy, Hios };
const char* conv_impl_name(ConvImpl c);
ConvImpl parse_conv_impl(const std::string& s);  // "auto", "graph", "legacy", "hios"; otherwise hios::Error

// Whether a dilated convolution may run as the dilation-1 convolution of its input's d x d
// phases (conv.hpp, "phase split"): Timed times it beside the direct candidates and keeps the
// faster (the default); Always and Never force one where it applies, so the tests check both.
enum class PhaseSplit { Timed, Always, Never };
// The same for the channel pad of an image of few channels (conv.hpp, "channel pad").
enum class ChannelPad { Timed, Always, Never };

// Number of usable CUDA devices; 0 when there is no driver or no GPU. Never throws, so tests
// can decide to skip.
int device_count() noexcept;
// One line: name, multiprocessors, memory, compute capability, driver/runtime/cuDNN versions.
std::string device_description(int device);
// A byte count for people: "512 B", "3.2 MiB", "1.50 GiB".
std::string format_bytes(size_t bytes);

struct SingleGpuOptions {
  int device = 0;
  MathMode math = MathMode::Tf32;
  bool cuda_graph = true;          // capture the forward pass once and replay it
  uint64_t seed = init::kDefaultSeed;
  bool reuse_memory = true;        // share activation buffers between values whose lives do not overlap
  ConvImpl conv_impl = ConvImpl::Auto;
  PhaseSplit phase_split = PhaseSplit::Timed;
  ChannelPad channel_pad = ChannelPad::Timed;
  exec::Layout layout = exec::Layout::Nhwc;  // how activations are stored (values come back NCHW)
  bool fold_relu = true;           // BackendConfig::fold_relu (run_single_node never folds)
};

// Runs node `node` of g alone: its producers' values are given on the host (indexed by node;
// only the producers' entries are read), its output comes back. Weights are the deterministic
// ones of init.hpp. Used by the per-op tests.
std::vector<float> run_single_node(const Graph& g, int node, const std::vector<std::vector<float>>& values,
                                   const SingleGpuOptions& opts);

}  // namespace hios::cuda
