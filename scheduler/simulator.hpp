// Discrete-event simulation of a schedule under a cost model.
//
// Each GPU walks its stages in order. A stage starts when the previous stage on that GPU has
// ended and every tensor it reads from another GPU has arrived. Its duration is
// CostModel::stage_ms; within it, each group's nodes are laid out back to back, stretched so
// that the slowest group ends with the stage. A transfer starts when its producer ends (and
// its link is free: transfers on one directed link are serialised in start order) and lasts
// CostModel::transfer_ms. The latency is when the graph output is available on GPU 0.
#pragma once

#include <string>
#include <vector>

#include "graph/graph.hpp"
#include "scheduler/cost_model.hpp"
#include "scheduler/schedule.hpp"

namespace hios {

struct SimNode {
  int node = -1;
  int gpu = 0, stream = 0;  // stream = group index within its stage
  int block = 0, stage = 0;
  double start_ms = 0, end_ms = 0;
};

struct SimTransfer {
  int node = -1;
  int src = 0, dst = 0;
  double bytes = 0;
  double start_ms = 0, end_ms = 0;
};

struct SimStage {
  int gpu = 0, block = 0, stage = 0;
  double start_ms = 0, end_ms = 0;
};

struct SimResult {
  double latency_ms = 0;
  std::vector<SimNode> nodes;  // one per scheduled node
  std::vector<SimTransfer> transfers;
  std::vector<SimStage> stages;
};

// Throws hios::Error if the schedule deadlocks (a stage waits on a transfer that can never
// arrive); run check_schedule first for a full diagnosis. Also throws, naming the node, when a
// node reads a tensor from another GPU that no transfer sends, or one on its own GPU that does
// not run before it. A partial schedule (the graph output not placed yet, every placed node's
// producers placed) is allowed: its latency is then the makespan, the last end of any stage
// or transfer, so that a scheduler can weigh a prefix.
SimResult simulate(const Graph& g, const Schedule& s, const CostModel& cost);

// schedule_to_pretty plus the simulated start and end of every stage and transfer (`hios show
// --cost`); `cost_label` says which cost model produced them, e.g. "analytic (v100)".
std::string schedule_to_pretty(const Graph& g, const Schedule& s, const SimResult& r, const std::string& cost_label = "");

// Chrome trace JSON (opens in Perfetto / chrome://tracing): one process per GPU, one thread per
// stream, plus one process "links" with a thread per directed GPU pair.
std::string sim_to_chrome_trace(const Graph& g, const Schedule& s, const SimResult& r);

}  // namespace hios
