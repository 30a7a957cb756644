// The scheduler's side of row splits: whether to split a region's rows across GPUs,
// how many ways and in which mode, decided together with the inter-operator mapping by running
// the algorithm on each split graph and keeping the lowest predicted latency.
#pragma once

#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "graph/row_split.hpp"
#include "scheduler/algorithms.hpp"
#include "scheduler/cost_model.hpp"

namespace hios {

struct SpatialOptions {
  // "off": never split; "auto": try splits and keep one only when it is predicted faster; a
  // number P >= 2: split every region that can be split P ways (tests and experiments).
  std::string spatial = "off";
  // "halo", "recompute", "mixed" (recompute between sync points every 1, 2 or 4 blocks or where
  // the halo is cheapest, halos at them), "mixed-cost" (only the last of those), or "auto" (all
  // of these; the fastest is kept).
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

// How a region is split: its mode, where a mixed split syncs (every `sync_every` blocks, or,
// with `sync_by_cost`, where the halos are cheapest under a cost model: sync_blocks_by_cost)
// and whether middles overlap the halos (halo mode, SplitRegion::overlap).
struct SplitStyle {
  SplitMode mode = SplitMode::Halo;
  int sync_every = 1;
  bool overlap = false;
  bool sync_by_cost = false;
  bool operator<(const SplitStyle& o) const {
    return std::tie(mode, sync_every, overlap, sync_by_cost) < std::tie(o.mode, o.sync_every, o.overlap, o.sync_by_cost);
  }
};
// "halo", "halo+overlap", "recompute", "mixed/2", "mixed/cost".
std::string split_style_name(const SplitStyle& s);
// The region plan of blocks [first, last] in this style (plan_region, then the overlap). A
// style with sync_by_cost needs `cost` (the unsplit graph's node times and its links).
SplitRegion plan_region(const Graph& g, int first, int last, int parts, const SplitStyle& style,
                        const CostModel* cost = nullptr);
// The sync points of a mixed split chosen under `cost` (sync_blocks_by_cost with its node times
// on GPU 0 and its link from GPU 0 to GPU 1).
std::vector<int> sync_blocks_by_cost(const Graph& g, int first, int last, int parts, const CostModel& cost);

// The styles a --spatial-mode setting tries: halo, halo with overlap ("halo-overlap", only when
// named), recompute, and mixed with sync points every 1, 2 or 4 blocks and where the halos are
// cheapest ("mixed-cost": only that one; "auto": all but overlap).
std::vector<SplitStyle> split_modes(const std::string& mode);

// Every one-region plan of g for `parts` parts: each legal region [first, last] inside a
// splittable run (any first block, any last block), in each of `modes`. Longest regions first.
// A recompute or mixed plan computing the same rows as one before it for the same region (two
// sync intervals, or the sync points chosen by cost, can agree) is left out. `cost` is needed
// for the styles with sync_by_cost.
std::vector<SpatialPlan> region_plans(const Graph& g, int parts, const std::vector<SplitStyle>& modes,
                                      const CostModel* cost = nullptr);

// Part k of a split on GPU k (mod the split's parts): "X@k" and its input assembly "X@k:a-b"
// with part k, a halo cut "X@j>k:a-b" with the part it is cut from (so only the halo moves),
// a cut of the graph input with the input on GPU 0 (so only its rows move), and any other node
// of a split (a cut of the region's input) with the first part that reads it; -1 for the nodes
// of no part. The suggested mapping (SchedulerOptions::gpu_hint).
std::vector<int> suggested_part_gpus(const Graph& split);

// A split whose parts overlap their halos (SplitRegion::overlap) pays only if each part's edge
// pieces ("X@k/top", "X@k/bottom") and the halo cuts taken from them ("X@k>j:a-b") run as soon
// as their inputs are there, ahead of the middles ("X@k/mid"): then the halo is on its way
// while the middles compute. A search orders stages by its cost model, which sees no gain in
// that, and on a GPU a stage waits for the one before it. So on every GPU this moves each stage
// holding an edge or a halo cut to just after the last stage holding one of its producers,
// when every producer of the stage in the same block runs on this GPU (so no dependency or
// cross-GPU order is broken: check_schedule still passes). Returns the number of stages moved;
// a split without overlap is left as it is.
int hoist_halo_edges(const Graph& split, Schedule& s);

// Costs of a split graph derived from costs of the graph it was split from, so that plans can
// be ranked before any of their parts is measured: a part of X costs X's time scaled by the
// rows it computes (a partial pool, by the rows it sums), a node outside the regions costs what
// it costs in g, and the rest (row assemblies, halo cuts, gathers, sums of partial pools) comes
// from the analytic model of `preset`. Stages of several groups combine node times with the
// stage model of `preset` (docs/cost-model.md); transfers are `unsplit`'s. Both graphs and
// `unsplit` must outlive it.
std::unique_ptr<CostModel> make_split_cost_model(const Graph& g, const Graph& split, const CostModel& unsplit,
                                                 const DevicePreset& preset);

// A quick latency estimate of a split graph: every node on the GPU suggested_part_gpus gives it
// (GPU 0 for the rest), one stream per GPU, in the graph's order, simulated under `cost`. It
// ranks plans; a search then does better than it.
double split_quick_estimate_ms(const Graph& split, const CostModel& cost, int gpus);

// Runs `algo` on g and, per the options, on split variants of g; returns the fastest predicted.
// The time budget of opt covers every variant together.
SpatialSchedule schedule_spatial(const std::string& algo, const Graph& g, const CostModel& cost,
                                 const SchedulerOptions& opt, const SpatialOptions& sp);

}  // namespace hios
