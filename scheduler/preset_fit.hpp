// A device preset fitted to measured node times (docs/cost-model.md, "Fitting a preset"): the
// analytic model's efficiencies and launch overhead chosen so that its node estimates match
// what a profile database measured on the device, and its link and stage-concurrency numbers
// taken from the same database. `hios fit-preset` writes the result as a devices file that
// --devices reads.
#pragma once

#include <string>
#include <vector>

#include "graph/graph.hpp"
#include "scheduler/cost_model.hpp"

namespace hios {

// One measured node: node `node` of `*g` ran alone in `ms`.
struct PresetSample {
  const Graph* g = nullptr;
  int node = -1;
  double ms = 0;
};

struct PresetFit {
  DevicePreset preset;
  int samples = 0;
  // Mean |estimate / measured - 1| over the samples, weighted by the measured time (what a
  // latency sums), with the base preset's numbers and with the fitted ones.
  double error_before = 0, error_after = 0;
};

// Fits conv_efficiency, spatial_conv_efficiency, depthwise_efficiency, gemm_efficiency, memory_efficiency (each in
// [0.01, 1]) and launch_overhead_us (in [0.05, 20]) of `base` to the samples: coordinate descent
// until a sweep gains nothing, a golden-section search per parameter on a log scale, minimising the time-weighted sum of
// squared log errors of analytic_node_estimate. A parameter no sample depends on keeps its
// base value. Deterministic. Throws hios::Error when no sample is usable.
PresetFit fit_device_preset(const DevicePreset& base, const std::vector<PresetSample>& samples);

// One line per sample, tab-separated under a header: the graph, its size, the node, its kernel
// class (conv, depthwise, gemm, memory: the efficiency that prices it), the measured ms and the
// estimates of `base` and `fitted`. Where a fitted model still misses, and by what.
std::string preset_fit_report(const DevicePreset& base, const DevicePreset& fitted,
                              const std::vector<PresetSample>& samples);

// Which time of a profile entry a preset is fitted to. Wall: CUDA events around the node alone,
// which include its launches and the gaps of an eager stream. Kernels: the CUPTI busy time of
// its kernels, what a node costs inside a CUDA Graph, where launches cost almost nothing.
enum class NodeTime { Wall, Kernels };

// The samples of one graph from a profile database: every node whose signature the database
// measured (node_signature), with the time `which` asks for; the others are skipped (with
// Kernels, also entries measured without CUPTI).
std::vector<PresetSample> preset_samples(const Graph& g, const ProfileDb& db, NodeTime which = NodeTime::Wall);

// `p` with the mean latency and bandwidth of every link the databases timed, the bandwidth per
// byte the graph counts (profile_link_bytes_per_graph_byte: links timed under --math bf16 moved
// half as many), as a preset's memory bandwidth is. `p` unchanged when no database timed a link.
DevicePreset with_measured_links(DevicePreset p, const std::vector<ProfileDb>& dbs);

}  // namespace hios
