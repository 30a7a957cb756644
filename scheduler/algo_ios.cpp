// "ios": IOS's dynamic programme over operator subsets (Ding et al., MLSys 2021), one block at
// a time on GPU 0.
//
// For a set S of a block's nodes that is closed under predecessors (everything S needs from
// the block is in S), cost(S) is the least total stage latency that runs S. The last stage E
// of such a schedule is an "ending" of S: no node of E has a successor in S \ E. E splits
// into its weakly connected components; each component is one group (run in index order on
// one stream) and different components share no path, so they may run concurrently. Then
//   cost(S) = min over endings E of cost(S \ E) + stage_ms(E),
// subject to IOS's pruning: at most r nodes per group and at most s groups (and at most
// max_streams). States and endings are 64-bit masks over a part of at most 64 nodes.
//
// The same DP (ios_stages) packs one GPU's share of a block for the intra-GPU pass of the
// multi-GPU algorithms; there a context adds "far" pairs (nodes linked through another GPU)
// and release times, and cost(S) becomes the finish time of S (see solve()).
//
// Endings are built from their components: the connected endings with at most r nodes are
// enumerated once per state (adding nodes in decreasing index order, so each comes up once),
// then combined into sets of at most s pairwise disjoint, non-adjacent ones, in list order, so
// each ending comes up exactly once.
#include <algorithm>
#include <chrono>
#include <limits>
#include <unordered_map>

#include "graph/dag.hpp"
#include "graph/error.hpp"
#include "scheduler/algorithms.hpp"

namespace hios {

namespace {

inline int low_bit(uint64_t m) { return __builtin_ctzll(m); }
inline int high_bit(uint64_t m) { return 63 - __builtin_clzll(m); }
inline uint64_t bit(int i) { return uint64_t(1) << i; }

struct CapReached {};

class PartSolver {
 public:
  // With a context the part is one GPU's share of a block (intra_gpu_pass): u is "far" from v
  // when v waits on u through work outside the share. u must then run first (an extra order
  // edge) and never in v's stage: a stage waits for all of its remote inputs before it
  // starts, so it would wait on itself. The context's release times make cost(S) the finish
  // time of S rather than the sum of its stages (see solve()).
  PartSolver(const Graph& g, const CostModel& cost, const std::vector<int>& nodes, int gpu, int r, int s,
             int64_t max_states, const PackContext* ctx, double offset)
      : g_(g), cost_(cost), nodes_(nodes), gpu_(gpu), r_(r), s_(s), max_states_(max_states) {
    const int m = static_cast<int>(nodes.size());
    std::unordered_map<int, int> local;
    for (int i = 0; i < m; ++i) local[nodes[i]] = i;
    succ_.assign(m, 0);
    pred_.assign(m, 0);
    far_.assign(m, 0);
    rel_.assign(m, 0.0);
    for (int i = 0; i < m; ++i) {
      for (int q : g.predecessors(nodes[i])) {
        auto it = local.find(q);
        if (it == local.end()) continue;
        pred_[i] |= bit(it->second);
        succ_[it->second] |= bit(i);
      }
      if (ctx && ctx->far) {
        // `nodes` is a topological order of the direct and far edges: only earlier nodes.
        for (int u = 0; u < i; ++u) {
          if (ctx->far(nodes[u], nodes[i])) far_[i] |= bit(u);
        }
      }
      if (ctx && !ctx->release.empty()) rel_[i] = std::max(0.0, ctx->release[nodes[i]] - offset);
    }
    // Groups are components of direct edges only; far pairs never share a stage anyway.
    adj_.resize(m);
    for (int i = 0; i < m; ++i) adj_[i] = succ_[i] | pred_[i];
    for (int i = 0; i < m; ++i) {
      pred_[i] |= far_[i];
      for (uint64_t f = far_[i]; f; f &= f - 1) succ_[low_bit(f)] |= bit(i);
      any_far_ = any_far_ || far_[i] != 0;
      any_rel_ = any_rel_ || rel_[i] > 0;
    }
  }

  // Stages of the optimal schedule, each a list of groups of global node ids.
  std::vector<std::vector<std::vector<int>>> solve_all() {
    const int m = static_cast<int>(nodes_.size());
    uint64_t full = m == 64 ? ~uint64_t(0) : bit(m) - 1;
    solve(full);
    std::vector<std::vector<std::vector<int>>> stages;
    for (uint64_t S = full; S != 0;) {
      uint64_t E = memo_.at(S).ending;
      stages.push_back(groups_of(E));
      S &= ~E;
    }
    std::reverse(stages.begin(), stages.end());
    return stages;
  }

  double optimum() const {
    const int m = static_cast<int>(nodes_.size());
    return memo_.at(m == 64 ? ~uint64_t(0) : bit(m) - 1).cost;
  }
  int64_t states() const { return static_cast<int64_t>(memo_.size()); }
  int64_t transitions() const { return transitions_; }

 private:
  struct Entry {
    double cost;
    uint64_t ending;
  };

  // The connected component of U (undirected edges) that holds U's lowest node.
  uint64_t component(uint64_t U) const {
    uint64_t comp = bit(low_bit(U)), frontier = comp;
    while (frontier) {
      int u = low_bit(frontier);
      frontier &= frontier - 1;
      uint64_t add = adj_[u] & U & ~comp;
      comp |= add;
      frontier |= add;
    }
    return comp;
  }

  // Components of E in index order, each a group of global ids in index order.
  std::vector<std::vector<int>> groups_of(uint64_t E) const {
    std::vector<std::vector<int>> groups;
    uint64_t left = E;
    while (left) {
      const uint64_t comp = component(left);  // whole components leave, so left suffices
      left &= ~comp;
      std::vector<int> grp;
      for (uint64_t c = comp; c; c &= c - 1) grp.push_back(nodes_[low_bit(c)]);
      groups.push_back(std::move(grp));
    }
    return groups;
  }

  // No node of E waits on a remote input that another node of E feeds.
  bool allowed(uint64_t E) const {
    if (!any_far_) return true;
    for (uint64_t t = E; t; t &= t - 1) {
      if (far_[low_bit(t)] & E) return false;
    }
    return true;
  }

  bool connected(uint64_t U) const {
    return component(U) == U;
  }

  double stage_cost(uint64_t E) {
    auto it = stage_cache_.find(E);
    if (it != stage_cache_.end()) return it->second;
    Stage st;
    for (auto& grp : groups_of(E)) st.groups.push_back(Group{std::move(grp)});
    double c = cost_.stage_ms(g_, st, gpu_);
    stage_cache_.emplace(E, c);
    return c;
  }

  // Connected endings of S with at most r nodes: nodes are added in decreasing index order
  // (a node's successors have larger indices, so they are already in), each set once.
  void upsets(uint64_t S, uint64_t E, uint64_t includable, uint64_t below, int size, std::vector<uint64_t>& out) const {
    uint64_t cand = includable & below;
    while (cand) {
      int v = high_bit(cand);
      cand &= ~bit(v);
      uint64_t E2 = E | bit(v);
      if (!allowed(E2)) continue;  // so is every superset
      if (connected(E2)) out.push_back(E2);
      if (size + 1 < r_) {
        uint64_t inc2 = includable & ~bit(v);
        for (uint64_t ps = pred_[v] & S & ~E2; ps; ps &= ps - 1) {
          int q = low_bit(ps);
          if ((succ_[q] & S & ~E2) == 0) inc2 |= bit(q);
        }
        upsets(S, E2, inc2, bit(v) - 1, size + 1, out);
      }
    }
  }

  double solve(uint64_t S) {
    if (S == 0) return 0.0;
    auto it = memo_.find(S);
    if (it != memo_.end()) return it->second.cost;
    if (static_cast<int64_t>(memo_.size()) >= max_states_) throw CapReached{};
    uint64_t sinks = 0;
    for (uint64_t t = S; t; t &= t - 1) {
      int v = low_bit(t);
      if ((succ_[v] & S) == 0) sinks |= bit(v);
    }
    std::vector<uint64_t> comps;
    upsets(S, 0, sinks, ~uint64_t(0), 0, comps);
    std::vector<uint64_t> nbr(comps.size());
    for (size_t i = 0; i < comps.size(); ++i) {
      uint64_t n = 0;
      for (uint64_t c = comps[i]; c; c &= c - 1) n |= adj_[low_bit(c)];
      nbr[i] = n & ~comps[i];
    }
    Entry best{kInf, 0};
    combine(S, comps, nbr, 0, 0, 0, 0, best);
    HIOS_CHECK(best.ending != 0, "ios: no valid last stage for a state of %d nodes", __builtin_popcountll(S));
    memo_[S] = best;
    return best.cost;
  }

  void combine(uint64_t S, const std::vector<uint64_t>& comps, const std::vector<uint64_t>& nbr, size_t from,
               uint64_t E, uint64_t blocked, int count, Entry& best) {
    for (size_t i = from; i < comps.size(); ++i) {
      if (comps[i] & blocked) continue;
      uint64_t E2 = E | comps[i];
      if (!allowed(E2)) continue;  // and every superset
      if (++transitions_ > max_states_ * 64) throw CapReached{};
      // The stage starts when the rest has run and its inputs from other GPUs are there:
      // max(...) + duration is monotone in the finish of the rest, so the optimum of S
      // extends optimal finishes of its subsets and the DP stays exact. With no release
      // times this is IOS's sum of stage latencies, computed the same way.
      double before = solve(S & ~E2);
      if (any_rel_) {
        for (uint64_t t = E2; t; t &= t - 1) before = std::max(before, rel_[low_bit(t)]);
      }
      double val = stage_cost(E2) + before;
      if (val < best.cost) best = {val, E2};
      if (count + 1 < s_) combine(S, comps, nbr, i + 1, E2, blocked | comps[i] | nbr[i], count + 1, best);
    }
  }

  const Graph& g_;
  const CostModel& cost_;
  std::vector<int> nodes_;
  int gpu_;
  int r_, s_;
  int64_t max_states_;
  std::vector<uint64_t> succ_, pred_, adj_, far_;
  std::vector<double> rel_;  // release time of each node, from the part's start
  bool any_far_ = false, any_rel_ = false;
  std::unordered_map<uint64_t, Entry> memo_;
  std::unordered_map<uint64_t, double> stage_cache_;
  int64_t transitions_ = 0;
};

}  // namespace

namespace {

struct IosRun {
  const Graph& g;
  const CostModel& cost;
  int gpu;
  const PackContext* ctx;
  int r, s;
  int64_t max_states;
  int max_streams;
  IosStats& st;
  double offset = 0;  // when the stages so far finish, from the start of the first part

  double stage_ms(const std::vector<std::vector<int>>& sg) const {
    Stage stage;
    for (const auto& grp : sg) stage.groups.push_back(Group{grp});
    return cost.stage_ms(g, stage, gpu);
  }
  double release(const std::vector<std::vector<int>>& sg) const {
    double t = 0;
    if (ctx && !ctx->release.empty()) {
      for (const auto& grp : sg) {
        for (int v : grp) t = std::max(t, ctx->release[v]);
      }
    }
    return t;
  }
  // Appends stages and moves `offset` to their finish, so that the next part sees its release
  // times from its own start.
  void append(StageList& stages, StageList& out) {
    for (auto& sg : stages) {
      offset = std::max(offset, release(sg)) + stage_ms(sg);
      out.push_back(std::move(sg));
    }
  }
  double finish(const StageList& stages) const {
    // Without release times only the sum matters; starting it at 0 keeps IOS's arithmetic.
    double t = ctx && !ctx->release.empty() ? offset : 0.0;
    for (const auto& sg : stages) t = std::max(t, release(sg)) + stage_ms(sg);
    return t;
  }

  // Optimal stages of `nodes` (consecutive in the given order) cut into parts of at most
  // `part` nodes. A part that hits the cap is cut in half and solved again, down to 8 nodes
  // (at most 256 states, so the cap is never hit below that); what still fails is scheduled
  // greedily.
  void solve(const std::vector<int>& nodes, size_t part, const std::string& label, StageList& out) {
    for (size_t begin = 0; begin < nodes.size(); begin += part) {
      std::vector<int> chunk(nodes.begin() + begin, nodes.begin() + std::min(nodes.size(), begin + part));
      std::string name = nodes.size() > part ? strprintf("%s[%zu..%zu)", label.c_str(), begin, begin + chunk.size())
                                             : label;
      PartSolver solver(g, cost, chunk, gpu, r, s, max_states, ctx, offset);
      try {
        auto stages = solver.solve_all();
        ++st.parts;
        st.states += solver.states();
        st.transitions += solver.transitions();
        append(stages, out);
      } catch (const CapReached&) {
        st.states += solver.states();
        st.transitions += solver.transitions();
        st.fallback.push_back(name);
        if (chunk.size() > 8) {
          ++st.split;
          solve(chunk, (chunk.size() + 1) / 2, name, out);
        } else {
          ++st.greedy;
          // Greedy packs every ready node into one stage, which the stage model can price
          // above running them one by one; keep whichever of the two is cheaper so a capped
          // part is never worse than the sequential order the DP would have considered.
          StageList serial;
          for (int v : chunk) serial.push_back({{v}});
          StageList packed;
          // Greedy only sees this GPU's edges; with far pairs (linked through another GPU)
          // in the part it is not an option, the given order is.
          bool linked = false;
          for (size_t i = 0; ctx && ctx->far && i < chunk.size() && !linked; ++i) {
            for (size_t j = i + 1; j < chunk.size() && !linked; ++j) linked = ctx->far(chunk[i], chunk[j]);
          }
          if (!linked) packed = greedy_stages(g, chunk, max_streams);
          StageList& best = !linked && finish(packed) <= finish(serial) ? packed : serial;
          append(best, out);
        }
      }
    }
  }
};

}  // namespace

StageList ios_stages(const Graph& g, const CostModel& cost, const SchedulerOptions& opt,
                     const std::vector<int>& nodes, int gpu, const PackContext* ctx, const std::string& label,
                     IosStats& stats) {
  IosRun run{g,
             cost,
             gpu,
             ctx,
             opt.ios_max_group,
             std::min(opt.ios_max_groups, opt.max_streams),
             opt.ios_max_states,
             opt.max_streams,
             stats};
  StageList stages;
  // Parts of at most 64 consecutive nodes, as IOS cuts large blocks (its max_part_size).
  run.solve(nodes, 64, label, stages);
  return stages;
}

Schedule schedule_ios(const Graph& g, const CostModel& cost, const SchedulerOptions& opt) {
  validate_options(opt);
  auto t0 = std::chrono::steady_clock::now();
  IosStats run;
  Plan p;
  p.num_gpus = opt.num_gpus;
  p.gpu_stages.assign(opt.num_gpus, {});
  for (size_t b = 0; b < g.blocks.size(); ++b) {
    std::vector<int> nodes = g.blocks[b].nodes;
    std::sort(nodes.begin(), nodes.end());  // index order is topological
    StageList stages = ios_stages(g, cost, opt, nodes, 0, nullptr, g.blocks[b].name, run);
    for (auto& st : stages) p.gpu_stages[0].push_back(p.add_stage(static_cast<int>(b), std::move(st)));
  }
  Schedule out = plan_to_schedule(g, p);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  json params = {{"r", opt.ios_max_group},
                 {"s", opt.ios_max_groups},
                 {"streams", opt.max_streams},
                 {"max_states", opt.ios_max_states},
                 {"parts", run.parts},
                 {"states", run.states},
                 {"transitions", run.transitions},
                 {"capped_parts", static_cast<int>(run.fallback.size())},
                 {"split_parts", run.split},
                 {"greedy_parts", run.greedy},
                 {"fallback", run.fallback}};
  finish_schedule(g, cost, opt, "ios", std::move(params), secs, out);
  return out;
}

}  // namespace hios
