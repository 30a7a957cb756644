// Turning measurements into a profile database (the format of docs/cost-model.md). The GPU
// side (profiler/cuda/) measures; this side, free of CUDA, pools the samples by signature,
// fits the links and assembles the database, so it is tested on any machine.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/graph.hpp"
#include "graph/stats.hpp"
#include "scheduler/cost_model.hpp"
#include "scheduler/schedule.hpp"

namespace hios::prof {

// One node's measurements: wall time per run (CUDA events around the node alone on its
// stream) and, when CUPTI ran, the busy time of its kernels and copies per run.
struct NodeSamples {
  int node = -1;
  std::vector<double> wall_ms;
  std::vector<double> kernel_ms;  // empty: CUPTI did not run
  int64_t kernels = 0;            // kernels and copies per run
};

// One transfer size between two GPUs, timed `ms` per run (medians are taken by the caller).
struct LinkSample {
  int64_t bytes = 0;
  double ms = 0;
};

struct LinkFit {
  double latency_us = 0;
  double bandwidth_gbs = 0;
  double max_rel_residual = 0;  // worst |fit - sample| / sample: how well a line explains it
};

// Least squares ms = a + bytes * b over the samples, weighted to minimise relative error:
// latency a (clamped at 0), bandwidth 1/b. Needs at least two distinct sizes and positive
// times; throws otherwise, or when time does not grow with size.
LinkFit fit_link(const std::vector<LinkSample>& samples);

// Median and sample standard deviation (0 for fewer than two values).
using ::hios::median;  // graph/stats.hpp
double stddev(const std::vector<double>& v);

// Pools the samples of every node with the same node_signature (one entry per signature,
// median over all their runs, the first node's name as the example). Nodes without samples
// (the graph input) are left out.
// With `peaks`, every entry is also classed by what its example node achieved against the
// preset's peaks (ProfileEntry::achieved_tflops, achieved_gbs, memory_bound); `half` doubles
// the compute peak and halves the bytes (fp16/bf16 storage).
std::vector<ProfileEntry> pool_by_signature(const Graph& g, const std::vector<NodeSamples>& nodes,
                                            const DevicePreset* peaks = nullptr, bool half = false);

// A stage measured with its groups on concurrent streams.
struct StageSamples {
  Stage stage;
  std::vector<double> wall_ms;
};
// One entry per distinct stage_key (samples pooled), only stages of two or more groups: a
// single group is the sum of its nodes, which the cost model computes itself.
std::vector<ProfileStage> pool_stages(const Graph& g, const std::vector<StageSamples>& stages);

// "NVIDIA H200" -> "h200": the longest shipped preset name (schedules/devices.json) found in
// the GPU's name, ignoring case and the "-fp32" variants; "" when none is.
std::string preset_for_gpu_name(const std::string& gpu_name);

}  // namespace hios::prof
