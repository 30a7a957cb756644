// The scheduler's side of row splits (issue 10): whether to split a region's rows across GPUs,
// how many ways and in which mode, decided together with the inter-operator mapping by running
// the algorithm on each split graph and keeping the lowest predicted latency.
#pragma once

#include <string>

#include "graph/row_split.hpp"
#include "scheduler/algorithms.hpp"
#include "scheduler/cost_model.hpp"

namespace hios {

struct SpatialOptions {
  // "off": never split; "auto": try splits and keep one only when it is predicted faster; a
  // number P >= 2: split every region that can be split P ways (tests and experiments).
  std::string spatial = "off";
  // "halo", "recompute", "mixed" (recompute between sync points every 1, 2 or 4 blocks, halos
  // at them), or "auto" (all of these; the fastest is kept).
  std::string mode = "auto";
};

// Parses and range-checks the two settings; throws hios::Error naming the bad one.
void check_spatial_options(const SpatialOptions& sp);

struct SpatialSchedule {
  Graph graph;        // the split graph (g itself when nothing is split)
  Schedule schedule;  // for `graph`; meta.spatial and meta.params.spatial filled in
  SpatialPlan plan;
  std::string summary;  // one line per region, or "no row split" and why
};

// Runs `algo` on g and, per the options, on split variants of g; returns the fastest predicted.
// The time budget of opt covers every variant together.
SpatialSchedule schedule_spatial(const std::string& algo, const Graph& g, const CostModel& cost,
                                 const SchedulerOptions& opt, const SpatialOptions& sp);

}  // namespace hios
