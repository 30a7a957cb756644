// Scheduling algorithms. Each returns a schedule valid for any number of GPUs >= 1 (passing
// check_schedule), with meta.predicted_ms, meta.lower_bound_ms and meta.search_seconds filled
// in. docs/algorithms.md explains each one.
//
// Besides the six algorithms this header exposes their building blocks (a plan of stages, a
// fast plan evaluator, the intra-GPU sliding-window pass, the HIOS inter-GPU phases) so that
// the random-DAG experiment can report the phases separately and tests can check each piece.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "graph/graph.hpp"
#include "scheduler/cost_model.hpp"
#include "scheduler/schedule.hpp"

namespace hios {

struct SchedulerOptions {
  int num_gpus = 1;
  int max_streams = 4;    // k: most concurrent groups in one stage
  int window = 4;         // w: sliding-window size of the intra-GPU pass (hios-lp, hios-mr); <= 1 turns it off
  int ios_max_group = 3;  // IOS pruning r: most nodes in one group
  int ios_max_groups = 3; // IOS pruning s: most groups in one stage
  // IOS work cap, per part of a block (blocks are cut into parts of at most 64 nodes): the DP
  // gives up on a part after this many DP states or 64x as many transitions and solves its two
  // halves instead (down to 8 nodes, then greedy). Deterministic (a count, not a clock);
  // meta.params lists the capped parts.
  int64_t ios_max_states = 20000;
};

// Every algorithm by name: "sequential", "greedy", "ios", "hios-lp", "hios-mr", "heft".
std::vector<std::string> algorithm_names();
// Throws hios::Error for an unknown name (listing the known ones) or invalid options.
Schedule run_algorithm(const std::string& name, const Graph& g, const CostModel& cost, const SchedulerOptions& opt);

Schedule schedule_sequential(const Graph& g, const CostModel& cost, const SchedulerOptions& opt);
Schedule schedule_greedy(const Graph& g, const CostModel& cost, const SchedulerOptions& opt);
Schedule schedule_ios(const Graph& g, const CostModel& cost, const SchedulerOptions& opt);
Schedule schedule_hios_lp(const Graph& g, const CostModel& cost, const SchedulerOptions& opt);
Schedule schedule_hios_mr(const Graph& g, const CostModel& cost, const SchedulerOptions& opt);
Schedule schedule_heft(const Graph& g, const CostModel& cost, const SchedulerOptions& opt);

// max(critical path with zero communication, total work / GPUs), each node at its cheapest
// node_ms over the GPUs.
double lower_bound_ms(const Graph& g, const CostModel& cost, int num_gpus);

// Throws hios::Error naming the first bad field (GPUs < 1, streams < 1, r < 1, s < 1, ...).
void validate_options(const SchedulerOptions& opt);

// ---------------------------------------------------------------------------------------------
// Building blocks

// A schedule under construction. Stages live in an append-only pool so that a search can try
// many orders without copying stages; gpu_stages[g] lists GPU g's stages (indices into
// `stages`) block by block, exactly as Schedule::blocks[b][g] would after concatenating b.
struct PlanStage {
  int block = 0;
  std::vector<std::vector<int>> groups;  // concurrent groups, each run in order on one stream
  // Cache of the stage's duration on one GPU, filled by PlanEvaluator (stages never change
  // after they are added, so the cache stays valid).
  mutable int ms_gpu = -1;
  mutable double ms = 0;
};

struct Plan {
  int num_gpus = 1;
  std::vector<PlanStage> stages;
  std::vector<std::vector<int>> gpu_stages;

  int add_stage(int block, std::vector<std::vector<int>> groups);
};

// One single-node stage per node, GPU gpu_of[v], in the order given (which must be a
// topological order listing every non-input node; nodes are kept block by block).
Plan plan_from_order(const Graph& g, const std::vector<int>& gpu_of, const std::vector<int>& order, int num_gpus);
// Converts to a Schedule (stages, transfers and the graph part of meta; no predictions).
Schedule plan_to_schedule(const Graph& g, const Plan& p);
// The inverse, for evaluating existing schedules.
Plan plan_from_schedule(const Graph& g, const Schedule& s);

// Latency of a plan under the semantics of simulate() (scheduler/simulator.hpp), without
// building a Schedule: node, transfer and stage costs are cached, so one evaluation is
// O(nodes + edges). Returns +infinity when the plan cannot finish: a cross-GPU deadlock (the
// stage graph has a cycle) or a node ordered before a producer on its own GPU. The searches
// use it in their inner loops; the final meta.predicted_ms always comes from simulate().
class PlanEvaluator {
 public:
  PlanEvaluator(const Graph& g, const CostModel& cost, int num_gpus);

  double latency(const Plan& p);
  double node_ms(int v, int gpu) const;        // cost.node_ms, cached
  double transfer_ms(int v, int src, int dst);  // the whole output of v, cached
  double mean_transfer_ms(int v);              // over ordered GPU pairs src != dst; 0 on one GPU
  double stage_ms(const PlanStage& st, int gpu);
  const std::vector<std::vector<int>>& preds() const { return preds_; }
  const std::vector<std::vector<int>>& succs() const { return succs_; }
  int num_gpus() const { return num_gpus_; }
  int64_t evaluations() const { return evaluations_; }
  // When node v finished in the last evaluated plan (meaningless for nodes not in it).
  double end_ms(int v) const { return end_[v]; }

 private:
  const Graph& g_;
  const CostModel& cost_;
  int num_gpus_;
  std::vector<std::vector<int>> preds_, succs_;
  std::vector<double> node_ms_;      // [v * G + gpu]
  std::vector<double> single_ms_;    // stage_ms of {{v}} on gpu; NaN until asked
  std::vector<double> transfer_ms_;  // [(v * G + src) * G + dst]; NaN until asked
  std::vector<double> bytes_;
  int64_t evaluations_ = 0;
  // Scratch reused across evaluations.
  std::vector<int> gpu_of_, done_stamp_;
  std::vector<double> end_, arrive_;
  int stamp_ = 0;
};

// Priority of every node for list orders: the longest remaining path to the graph output,
// node itself included (a "bottom level"), with node weights node_w and, on edges u -> v whose
// endpoints sit on different GPUs (or on every edge when gpu_of is empty), edge weight
// edge_w[u]. Sorting by (block, bottom level descending, index) gives a topological order.
std::vector<double> bottom_levels(const Graph& g, const std::vector<double>& node_w, const std::vector<double>& edge_w,
                                  const std::vector<int>& gpu_of = {});
// Every non-input node by (block, level descending, index).
std::vector<int> priority_order(const Graph& g, const std::vector<double>& level);

// Node and edge weights HIOS works with: node_w[v] = mean node_ms over GPUs; edge_w[v] = mean
// transfer_ms of v's output over GPU pairs (0 on one GPU).
void hios_weights(const Graph& g, PlanEvaluator& ev, std::vector<double>& node_w, std::vector<double>& edge_w);

// HIOS phase 1, inter-GPU iterative longest path: returns the GPU of every node.
std::vector<int> hios_lp_placement(const Graph& g, PlanEvaluator& ev, const std::vector<int>& order, int* paths = nullptr);
// HIOS-MR phase 1, the DP mapping in latest-start-time order: returns the GPU of every node.
std::vector<int> hios_mr_placement(const Graph& g, PlanEvaluator& ev, const std::vector<int>& order);

struct WindowStats {
  int merges = 0;      // accepted stage merges
  int candidates = 0;  // candidate merges evaluated
  int rejected_deadlock = 0;
};
// HIOS phase 2, intra-GPU sliding window: visits nodes in `visit` order; for the node's
// pending stage, tries merging it with independent pending stages among the next `window` on
// its GPU (same block, at most max_streams groups), keeps the best merge if the evaluated
// latency does not grow, and rejects merges that deadlock. Works on plans of single-node
// stages; returns what it did.
WindowStats window_pass(const Graph& g, PlanEvaluator& ev, Plan& p, const std::vector<int>& visit, int window,
                        int max_streams);

// IOS's greedy stage rule on a subset of one block's nodes (in topological order): repeatedly
// put the ready nodes (producers inside the subset all placed) into one stage, one group each,
// at most max_groups of them, lowest index first. Used by "greedy" and as the IOS fallback.
std::vector<std::vector<std::vector<int>>> greedy_stages(const Graph& g, const std::vector<int>& nodes,
                                                         int max_groups);

// The two HIOS variants with the window pass switched on or off ("hios-lp" vs "hios-lp +
// window" in the random-DAG table); schedule_hios_lp / _mr call these with
// with_window = opt.window > 1.
Schedule schedule_hios(const Graph& g, const CostModel& cost, const SchedulerOptions& opt, bool mr, bool with_window);

// Fills meta (algorithm, params, GPUs, streams, device, cost model, graph name and digest,
// predicted_ms from simulate(), lower bound, search seconds), derives transfers and checks the
// schedule with require_valid_schedule. Every algorithm ends with it.
void finish_schedule(const Graph& g, const CostModel& cost, const SchedulerOptions& opt, const std::string& algorithm,
                     json params, double search_seconds, Schedule& s);

}  // namespace hios
