// hios's profiler: measures a graph on this machine's GPUs and writes the profile database the
// scheduler's `--cost FILE` reads (docs/cost-model.md, docs/profiler.md).
//
//  * nodes: every node alone on one stream, in a sequential eager pass, CUDA events between
//    consecutive nodes for wall time and CUPTI for the busy time of its kernels and copies;
//    samples of nodes with the same signature are pooled.
//  * links: for every ordered GPU pair, transfers of several sizes over NCCL (as the executor
//    moves tensors), timed with events on the receiving stream; latency and bandwidth are a
//    least-squares line through the medians.
//  * stages: optionally, the multi-stream stages of a one-GPU schedule, each run alone with its
//    groups on concurrent streams, timed from fork to join.
//
// Only the CUDA build measures; elsewhere profile_gpus() throws a one-line error.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/graph.hpp"
#include "scheduler/cost_model.hpp"
#include "scheduler/schedule.hpp"

namespace hios::prof {

struct ProfileOptions {
  int gpus = 1;                // links between GPUs 0..gpus-1; nodes and stages on GPU 0
  std::string device;          // preset name for the database ("h200"); empty: from the GPU's name
  std::string math = "tf32";
  std::string layout = "nhwc";  // of the cuda backend's activations (hios run --layout)
  std::string conv_search = "quick";  // BackendConfig::conv_search (hios run --conv-search)
  int warmup = 3, iters = 20;  // per node pass and per stage
  bool cupti = true;
  std::vector<int64_t> link_bytes = {1 << 12, 1 << 16, 1 << 20, 1 << 22, 1 << 24, 1 << 26};
  int link_iters = 20;
  const Schedule* stages = nullptr;  // a one-GPU schedule whose multi-group stages to measure
};

// What profile_gpus() reports besides the database, for the command's summary.
struct ProfileReport {
  std::string gpu;                 // device_description(0)
  double sequential_sum_ms = 0;    // sum over nodes of their median wall time
  double kernel_sum_ms = -1;       // sum over nodes of their CUPTI busy time (-1: not measured)
  int64_t kernels_per_pass = -1;   // CUPTI records (kernels, copies, memsets) of one pass (-1: not measured)
  std::vector<double> link_max_rel_residual;  // per link, how well the line fits
  int stages_measured = 0;
};

bool gpu_profiler_built();

ProfileDb profile_gpus(const Graph& g, const ProfileOptions& opt, ProfileReport* report = nullptr);

}  // namespace hios::prof
