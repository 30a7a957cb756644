// The one interface every scheduler and the simulator use to ask "how long?".
//
// Implementations: AnalyticCostModel (roofline + stage and link models, device presets in
// schedules/devices.json, documented in docs/cost-model.md) and ProfileCostModel (the profile
// database the profiler writes; a missing entry is an error naming it).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "graph/graph.hpp"
#include "graph/json_reader.hpp"
#include "scheduler/schedule.hpp"

namespace hios {

class CostModel {
 public:
  virtual ~CostModel() = default;
  virtual std::string name() const = 0;    // "analytic" or the database path
  virtual std::string device() const = 0;  // "h200", ...
  // Latency of one node running alone on a stream of `gpu`, in milliseconds.
  virtual double node_ms(const Graph& g, int node, int gpu) const = 0;
  // Latency of moving `bytes` from GPU src to GPU dst (0 when src == dst).
  virtual double transfer_ms(double bytes, int src, int dst) const = 0;
  // Latency of a stage: its groups run concurrently on one GPU, each group's nodes in order.
  virtual double stage_ms(const Graph& g, const Stage& stage, int gpu) const = 0;
};

struct DevicePreset {
  std::string name;
  double peak_tflops = 0;         // dense fp32 / tf32 rate the convs see
  double mem_bandwidth_gbs = 0;   // device memory, GB/s
  double launch_overhead_us = 0;  // per kernel
  int sm_count = 0;
  double link_latency_us = 0;     // GPU-to-GPU
  double link_bandwidth_gbs = 0;  // GPU-to-GPU, one direction
  double stage_overhead_us = 0;   // event record/wait per stage boundary
  double alpha = 0;               // stage-model mixing weight (docs/cost-model.md)
};

// Presets shipped in schedules/devices.json (h200, h100, a100, v100). `file` overrides the
// search: empty means the installed copy next to the source tree.
std::vector<DevicePreset> load_device_presets(const std::string& file = "");
DevicePreset find_device_preset(const std::string& name, const std::string& file = "");

std::unique_ptr<CostModel> make_analytic_cost_model(const DevicePreset& preset);
// The profile database format is documented in docs/cost-model.md.
std::unique_ptr<CostModel> load_profile_cost_model(const std::string& file);

// "--cost analytic --device h200" or "--cost profile.json": the CLI's way of choosing.
std::unique_ptr<CostModel> make_cost_model(const std::string& cost, const std::string& device,
                                           const std::string& devices_file = "");

}  // namespace hios
