// Scheduling algorithms. Each returns a schedule valid for any number of GPUs >= 1 (passing
// check_schedule), with meta.predicted_ms, meta.lower_bound_ms and meta.search_seconds filled
// in. docs/algorithms.md explains each one.
//
// Besides the six algorithms this header exposes their building blocks (a plan of stages, a
// fast plan evaluator, the intra-GPU sliding-window pass, the HIOS inter-GPU phases) so that
// the random-DAG experiment can report the phases separately and tests can check each piece.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "graph/dag.hpp"
#include "graph/graph.hpp"
#include "scheduler/cost_model.hpp"
#include "scheduler/schedule.hpp"

namespace hios {

// An unreached finish time or an unbounded cost, in every algorithm's searches.
inline constexpr double kInf = std::numeric_limits<double>::infinity();

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
  // The intra-GPU pass of hios-lp, hios-mr and heft after their GPU mapping. false: only the
  // algorithm's own pass (HIOS's sliding window; HEFT's stream stages). true (default): also
  // IOS's DP on each GPU's share of every block, keeping per GPU and block whichever stages
  // evaluate faster (intra_gpu_pass below).
  bool intra_ios = true;
  // hios-lp, hios-mr and heft also schedule every node on GPU 0 (same intra-GPU pass) and
  // return that when it is faster: using fewer GPUs is always allowed.
  bool single_gpu_fallback = true;
  // Wall-clock budget of one search, in seconds; 0: none. Once it has passed, every phase
  // keeps what it has: the placement leaves the nodes it has not placed on GPU 0, the window,
  // IOS and intra-GPU passes stop improving, the one-GPU fallback is not tried. The schedule is
  // still complete and valid; meta.params.budget says which phases were cut. A clock, so with a
  // budget a search is no longer deterministic: off by default in the library, 60 s in
  // `hios schedule`.
  double time_budget_s = 0;
  // A suggested GPU per node (-1: none; empty: no suggestion), tried by hios-lp and hios-mr as
  // one more candidate mapping: their own mapping with the suggested nodes moved, through the
  // same intra-GPU passes, kept when evaluated faster. Row splits suggest part k on GPU
  // k mod G, which a longest-path mapping does not find by itself (scheduler/spatial.cpp).
  std::vector<int> gpu_hint;
  // Transfers one GPU pair carries at once (ScheduleMeta::link_lanes): the searches time a
  // pair's transfers on this many lanes, taken in turn, and the schedule records it.
  int link_lanes = 1;
  // Progress of long phases, at most one line a second: e.g. "hios-lp placement: 41000 of
  // 100000 nodes placed". Null: silent.
  std::function<void(const std::string&)> progress;
};

// The budget and progress of one search (SchedulerOptions::time_budget_s and progress),
// carried by its PlanEvaluator so every phase can ask it.
class SearchBudget {
 public:
  SearchBudget() = default;
  explicit SearchBudget(const SchedulerOptions& opt);
  // True once the budget has passed (reads the clock every 16th call); the first phase to see
  // it is recorded as cut.
  bool expired(const char* phase);
  // A progress line for a phase, when a second has passed since the last one.
  void note(const char* phase, const std::string& what);
  const std::vector<std::string>& cut() const { return cut_; }
  double seconds() const;

 private:
  double budget_s_ = 0;
  std::function<void(const std::string&)> progress_;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now(), last_note_ = t0_;
  bool expired_ = false;
  unsigned calls_ = 0;
  std::vector<std::string> cut_;
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
// Reachability between two nodes of one block, one block's bitsets at a time. A graph's edges
// never go back to an earlier block, so a path between two nodes of a block stays inside it and
// the block's sub-DAG answers exactly, in (block size)^2 / 8 bytes instead of the whole graph's
// n^2 / 8 (1.25 GB at 100,000 nodes). Asking about another block rebuilds: ask block by block.
class BlockReachability {
 public:
  explicit BlockReachability(const Graph& g);
  bool reaches(int u, int v);      // u and v in the same block (checked)
  bool independent(int u, int v);  // neither reaches the other

 private:
  void load(int block);
  const Graph& g_;
  int block_ = -1;
  std::vector<int> local_;  // node -> index in the loaded block, -1 elsewhere
  Reachability reach_;
};

class PlanEvaluator {
 public:
  PlanEvaluator(const Graph& g, const CostModel& cost, int num_gpus, const SchedulerOptions* opt = nullptr);
  SearchBudget& budget() { return budget_; }

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
  // When v's output reached GPU gpu in the last evaluated plan; negative when it was not sent.
  double arrive_ms(int v, int gpu) const { return arrive_[size_t(v) * num_gpus_ + gpu]; }

 private:
  const Graph& g_;
  const CostModel& cost_;
  int num_gpus_;
  int lanes_;  // SchedulerOptions::link_lanes
  std::vector<std::vector<int>> preds_, succs_;
  std::vector<double> node_ms_;      // [v * G + gpu]
  std::vector<double> single_ms_;    // stage_ms of {{v}} on gpu; NaN until asked
  std::vector<double> transfer_ms_;  // [(v * G + src) * G + dst]; NaN until asked
  std::vector<double> bytes_;
  int64_t evaluations_ = 0;
  SearchBudget budget_;
  // The phases of latency().
  static constexpr double kNotReady = -1.0;
  void place(const Plan& p, int placed);
  void send_output(int v, int placed);
  double stage_start(const PlanStage& st, int gpu, double free_at, int placed) const;
  double run_stage(const PlanStage& st, int gpu, double start, int placed);
  // Scratch reused across evaluations.
  std::vector<int> gpu_of_, done_stamp_;
  std::vector<double> end_, arrive_;
  std::vector<double> link_free_;  // [(src * G + dst) * lanes + lane]
  std::vector<int> sent_;          // [src * G + dst]: transfers sent on the link so far
  std::vector<char> want_;         // [dst]: GPUs the node being sent goes to
  std::vector<std::pair<double, int>> finished_;  // (end, node) of the stage just run
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

// IOS's DP (scheduler/algo_ios.cpp, with its state cap and halving) on `nodes`, listed in a
// topological order (index order for a whole block); parts are at most 64 consecutive nodes of
// that list, stages are timed on `gpu` and come out in run order. Without a context the
// nodes are a whole block and the DP minimises the sum of stage latencies (schedule_ios).
// With one they are one GPU's share of a block (intra_gpu_pass):
//  * far(u, v) says that v waits on u through work outside the share (another GPU's nodes and
//    stage order). Then u runs in an earlier stage than v (`nodes` must list u first) and
//    never in v's stage, which would wait on itself: a cross-GPU deadlock.
//  * release[v] (indexed by node, empty for none) is the earliest time v can start, measured
//    from the share's start: its inputs from other GPUs arrive then. The DP then minimises
//    the share's finish time, max(finish of the rest, release of the last stage) + its
//    latency, which is still exact because that is monotone in the finish of the rest.
struct PackContext {
  std::function<bool(int, int)> far;
  std::vector<double> release;
};
using StageList = std::vector<std::vector<std::vector<int>>>;  // stages of groups of nodes
struct IosStats {
  int parts = 0, split = 0, greedy = 0;
  int64_t states = 0, transitions = 0;
  json fallback = json::array();  // names of the capped parts
};
StageList ios_stages(const Graph& g, const CostModel& cost, const SchedulerOptions& opt,
                     const std::vector<int>& nodes, int gpu, const PackContext* ctx, const std::string& label,
                     IosStats& stats);

struct IntraStats {
  double own_ms = 0;         // the plan handed in
  double best_ms = 0;        // the plan returned
  int segments = 0;          // non-empty (GPU, block) pairs
  int packed_segments = 0;   // of those, how many run IOS-packed stages in the result
  int candidates = 0;        // packed segments evaluated
  IosStats ios;
};
// The stronger intra-GPU pass. The GPU of every node is taken from `own`, the algorithm's own
// plan (HIOS's window result, HEFT's stages). One "segment" is what one GPU runs of one block.
// Segments are visited block by block; each is packed again by IOS's DP (ios_stages) with the
// rest of the current plan fixed: far pairs from the other GPUs' stage orders (so the new
// segment cannot deadlock) and, as one alternative, release times from the current plan's
// timing, as another none (IOS's plain sum). An alternative replaces the segment when the
// evaluated latency drops (or stays and the nodes' end times add up to less). One pass over
// the segments; never slower than `own`.
Plan intra_gpu_pass(const Graph& g, const CostModel& cost, PlanEvaluator& ev, const SchedulerOptions& opt,
                    const Plan& own, IntraStats* stats = nullptr);

// The far pairs of one segment (intra_gpu_pass): `seg` lists nodes GPU `gpu` runs in plan p,
// in a topological order; far[i][j] says that seg[j] has a producer outside `seg` that seg[i]
// reaches through data edges and the other GPUs' stage order in p, so that seg[j] cannot
// start before seg[i] has finished whatever order GPU `gpu` picks. preds: PlanEvaluator::preds.
std::vector<std::vector<char>> segment_far_pairs(const Graph& g, const Plan& p, int gpu, const std::vector<int>& seg,
                                                 const std::vector<std::vector<int>>& preds);

// Nodes each GPU runs in a plan.
std::vector<int> plan_nodes_per_gpu(const Plan& p);

// The HIOS pipeline piece by piece: the mapping (mr: hios-mr's DP, else hios-lp's longest
// paths), HIOS's sliding window, the IOS packing of intra_gpu_pass, and the all-on-GPU-0
// candidate.
struct HiosVariant {
  bool mr = false;
  bool window = true;
  bool intra_ios = false;
  bool single_gpu = false;
};
Schedule schedule_hios(const Graph& g, const CostModel& cost, const SchedulerOptions& opt, const HiosVariant& v);
// HIOS as published, with the window pass switched on or off ("hios-lp" vs "hios-lp +
// window" in the random-DAG table): no IOS packing, no single-GPU candidate, whatever opt
// says. schedule_hios_lp / _mr (what `hios schedule` runs) use window = opt.window > 1,
// intra_ios = opt.intra_ios and single_gpu = opt.single_gpu_fallback instead.
Schedule schedule_hios(const Graph& g, const CostModel& cost, const SchedulerOptions& opt, bool mr, bool with_window);

// Fills meta (algorithm, params, GPUs, streams, device, cost model, graph name and digest,
// predicted_ms from simulate(), lower bound, search seconds), derives transfers and checks the
// schedule with require_valid_schedule. Every algorithm ends with it.
void finish_schedule(const Graph& g, const CostModel& cost, const SchedulerOptions& opt, const std::string& algorithm,
                     json params, double search_seconds, Schedule& s);

}  // namespace hios
