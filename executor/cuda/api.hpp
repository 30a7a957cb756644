// The CUDA backend's public face. CUDA-free: nothing here names a CUDA, cuDNN or NCCL type, so
// the CLI, the executor and the tests include it without the toolkit's headers.
//
// Everything behind it lives in executor/cuda and is built only when HIOS_HAVE_CUDA is on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "executor/init.hpp"
#include "executor/launch_order.hpp"
#include "executor/tensor_layout.hpp"
#include "graph/graph.hpp"
#include "scheduler/schedule.hpp"

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

// Number of usable CUDA devices; 0 when there is no driver or no GPU. Never throws, so tests
// can decide to skip.
int device_count() noexcept;
// One line: name, multiprocessors, memory, compute capability, driver/runtime/cuDNN versions.
std::string device_description(int device);

struct SingleGpuOptions {
  int device = 0;
  MathMode math = MathMode::Tf32;
  bool cuda_graph = true;          // capture the forward pass once and replay it
  uint64_t seed = init::kDefaultSeed;
  bool reuse_memory = true;        // share activation buffers between values whose lives do not overlap
  ConvImpl conv_impl = ConvImpl::Auto;
  exec::Layout layout = exec::Layout::Nhwc;  // how activations are stored (values come back NCHW)
  bool fold_relu = true;           // BackendConfig::fold_relu (run_single_node never folds)
};

struct TimingResult {
  double median_ms = 0, min_ms = 0, max_ms = 0;
  std::vector<double> samples_ms;
};
TimingResult summarise_ms(const std::vector<double>& samples);

// Runs a whole graph on one GPU, one node after another on one stream, in the graph's
// topological order: the sequential executor. All memory is allocated in the constructor,
// before anything is timed.
class SingleGpuRunner {
 public:
  SingleGpuRunner(const Graph& g, const SingleGpuOptions& opts);
  ~SingleGpuRunner();
  SingleGpuRunner(const SingleGpuRunner&) = delete;
  SingleGpuRunner& operator=(const SingleGpuRunner&) = delete;

  void run();        // one forward pass (the captured graph when cuda_graph), waited for
  void run_eager();  // one forward pass issued node by node, even when a graph was captured
  // Forward passes timed with device events, after `warmup` untimed ones.
  TimingResult time(int warmup, int iters);
  // Device time of every node (index = node; 0 for the input), the mean of `iters` eager passes
  // with an event between consecutive nodes: where a pass spends its time. `around(node,
  // true)` is called just before a node's launches are issued and `around(node, false)` just
  // after (the profiler tags the node's kernels for CUPTI there).
  std::vector<double> node_times_ms(int iters, const std::function<void(int, bool)>& around = nullptr);
  std::vector<float> output() const;        // the graph output, copied to the host
  std::vector<float> value(int node) const; // any node's output (only valid without reuse_memory)
  size_t peak_bytes() const;                // device memory this runner holds at its peak
  std::string summary() const;              // algorithms chosen, memory, launch counts

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Runs every rank of a schedule inside this process, one thread and one GPU per rank (rank r on
// GPU r), through the registry's cuda backend and nccl transport, issuing each rank's program
// the way the executor's host loop does under mpirun. For the GPU tests and the benchmark on a
// machine where MPI is not wanted; `hios run` under mpirun is the production path.
struct InProcessOptions {
  std::string math = "tf32";
  bool cuda_graph = true;
  bool share_memory = true;    // tensors share one arena per rank (exec::share_buffers), as in hios run
  int warmup = 5, iters = 20;  // timed passes (iters 0: none)
  uint64_t seed = init::kDefaultSeed;
  std::string layout = "nhwc";  // BackendConfig::layout
  bool fold_relu = true;        // BackendConfig::fold_relu
  // A rank stuck this long (in NCCL, say) ends the process with a message naming the rank and
  // what it was doing, instead of hanging the caller; 0: wait forever.
  double timeout_s = 180;
  exec::LaunchOrder launch_order;  // how each stage's launches interleave (executor/launch_order.hpp)
};
struct InProcessResult {
  std::vector<float> first_output;  // after the first pass, issued eagerly
  std::vector<float> output;        // after the last timed pass (graph replays when cuda_graph)
  TimingResult timing;              // rank 0's device time per pass, all ranks released together
  std::vector<size_t> peak_bytes;   // per rank
  std::vector<int64_t> tensor_bytes;  // per rank: what its tensors occupy (arena or sum of buffers)
  int transfers = 0;                // tensors sent per pass, over all ranks
  int compute_streams = 0;          // most compute streams of any rank
  // Row splits, over all ranks: `rows` nodes launched, and those the memory plan made no-ops.
  int rows_launched = 0, rows_in_place = 0;
};
InProcessResult run_schedule_in_process(const Graph& g, const Schedule& s, const InProcessOptions& opts);

// Runs node `node` of g alone: its producers' values are given on the host (indexed by node;
// only the producers' entries are read), its output comes back. Weights are the deterministic
// ones of init.hpp. Used by the per-op tests.
std::vector<float> run_single_node(const Graph& g, int node, const std::vector<std::vector<float>>& values,
                                   const SingleGpuOptions& opts);

}  // namespace hios::cuda
