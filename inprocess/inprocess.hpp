// Drivers that run a whole graph or schedule inside this process, for the GPU bench tools
// (bench/) and the GPU tests: the sequential single-GPU runner, and every rank of a schedule as
// a thread of this process with a GPU each. Like `hios run`, they are clients of the rank
// session (executor/session.hpp); `hios run` under mpirun is the production path. Built in
// CUDA builds only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "executor/cuda/api.hpp"
#include "executor/init.hpp"
#include "executor/launch_order.hpp"
#include "graph/graph.hpp"
#include "scheduler/schedule.hpp"

namespace hios::cuda {

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
// GPU r), through the registry's cuda backend and a GPU transport (nccl unless told), issuing
// each rank's program the way the executor's host loop does under mpirun. For the GPU tests and the benchmark on a
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
  std::string transport = "nccl";  // or "cuda-ipc"; empty: the session's default (cuda-ipc where the GPUs reach each other)
};
struct InProcessResult {
  std::vector<float> first_output;  // after the first pass, issued eagerly
  std::vector<float> output;        // after the last timed pass (graph replays when cuda_graph)
  TimingResult timing;              // rank 0's device time per pass, all ranks released together
  std::vector<size_t> peak_bytes;   // per rank
  std::vector<int64_t> tensor_bytes;  // per rank: what its tensors occupy (arena or sum of buffers)
  int transfers = 0;                // tensors sent per pass, over all ranks
  std::string transport;            // the one the ranks used
  int compute_streams = 0;          // most compute streams of any rank
  // Row splits, over all ranks: `rows` nodes launched, and those the memory plan made no-ops.
  int rows_launched = 0, rows_in_place = 0;
};
InProcessResult run_schedule_in_process(const Graph& g, const Schedule& s, const InProcessOptions& opts);

}  // namespace hios::cuda
