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
// Endings are built from their components: the connected endings with at most r nodes are
// enumerated once per state (adding nodes in decreasing index order, so each comes up once),
// then combined into sets of at most s pairwise disjoint, non-adjacent ones, in list order, so
// each ending comes up exactly once.
#include <algorithm>
#include <chrono>
#include <limits>
#include <unordered_map>

#include "graph/error.hpp"
#include "scheduler/algorithms.hpp"

namespace hios {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

inline int low_bit(uint64_t m) { return __builtin_ctzll(m); }
inline int high_bit(uint64_t m) { return 63 - __builtin_clzll(m); }
inline uint64_t bit(int i) { return uint64_t(1) << i; }

struct CapReached {};

class PartSolver {
 public:
  PartSolver(const Graph& g, const CostModel& cost, const std::vector<int>& nodes, int r, int s, int64_t max_states)
      : g_(g), cost_(cost), nodes_(nodes), r_(r), s_(s), max_states_(max_states) {
    const int m = static_cast<int>(nodes.size());
    std::unordered_map<int, int> local;
    for (int i = 0; i < m; ++i) local[nodes[i]] = i;
    succ_.assign(m, 0);
    pred_.assign(m, 0);
    for (int i = 0; i < m; ++i) {
      for (int q : g.predecessors(nodes[i])) {
        auto it = local.find(q);
        if (it == local.end()) continue;
        pred_[i] |= bit(it->second);
        succ_[it->second] |= bit(i);
      }
    }
    adj_.resize(m);
    for (int i = 0; i < m; ++i) adj_[i] = succ_[i] | pred_[i];
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

  // Components of E in index order, each a group of global ids in index order.
  std::vector<std::vector<int>> groups_of(uint64_t E) const {
    std::vector<std::vector<int>> groups;
    uint64_t left = E;
    while (left) {
      uint64_t comp = bit(low_bit(left)), frontier = comp;
      while (frontier) {
        int u = low_bit(frontier);
        frontier &= frontier - 1;
        uint64_t add = adj_[u] & E & ~comp;
        comp |= add;
        frontier |= add;
      }
      left &= ~comp;
      std::vector<int> grp;
      for (uint64_t c = comp; c; c &= c - 1) grp.push_back(nodes_[low_bit(c)]);
      groups.push_back(std::move(grp));
    }
    return groups;
  }

  bool connected(uint64_t U) const {
    uint64_t comp = bit(low_bit(U)), frontier = comp;
    while (frontier) {
      int u = low_bit(frontier);
      frontier &= frontier - 1;
      uint64_t add = adj_[u] & U & ~comp;
      comp |= add;
      frontier |= add;
    }
    return comp == U;
  }

  double stage_cost(uint64_t E) {
    auto it = stage_cache_.find(E);
    if (it != stage_cache_.end()) return it->second;
    Stage st;
    for (auto& grp : groups_of(E)) st.groups.push_back(Group{std::move(grp)});
    double c = cost_.stage_ms(g_, st, 0);
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
      if (++transitions_ > max_states_ * 64) throw CapReached{};
      double val = stage_cost(E2) + solve(S & ~E2);
      if (val < best.cost) best = {val, E2};
      if (count + 1 < s_) combine(S, comps, nbr, i + 1, E2, blocked | comps[i] | nbr[i], count + 1, best);
    }
  }

  const Graph& g_;
  const CostModel& cost_;
  std::vector<int> nodes_;
  int r_, s_;
  int64_t max_states_;
  std::vector<uint64_t> succ_, pred_, adj_;
  std::unordered_map<uint64_t, Entry> memo_;
  std::unordered_map<uint64_t, double> stage_cache_;
  int64_t transitions_ = 0;
};

}  // namespace

namespace {

struct IosRun {
  const Graph& g;
  const CostModel& cost;
  int r, s;
  int64_t max_states;
  int max_streams;
  int parts = 0, split = 0, greedy = 0;
  int64_t states = 0, transitions = 0;
  json fallback = json::array();

  // Optimal stages of `nodes` (consecutive in index order) cut into parts of at most `part`
  // nodes. A part that hits the cap is cut in half and solved again, down to 8 nodes (at most
  // 256 states, so the cap is never hit below that); what still fails is scheduled greedily.
  void solve(const std::vector<int>& nodes, size_t part, const std::string& label,
             std::vector<std::vector<std::vector<int>>>& out) {
    for (size_t begin = 0; begin < nodes.size(); begin += part) {
      std::vector<int> chunk(nodes.begin() + begin, nodes.begin() + std::min(nodes.size(), begin + part));
      std::string name = nodes.size() > part ? strprintf("%s[%zu..%zu)", label.c_str(), begin, begin + chunk.size())
                                             : label;
      PartSolver solver(g, cost, chunk, r, s, max_states);
      try {
        auto stages = solver.solve_all();
        ++parts;
        states += solver.states();
        transitions += solver.transitions();
        for (auto& st : stages) out.push_back(std::move(st));
      } catch (const CapReached&) {
        states += solver.states();
        transitions += solver.transitions();
        fallback.push_back(name);
        if (chunk.size() > 8) {
          ++split;
          solve(chunk, (chunk.size() + 1) / 2, name, out);
        } else {
          ++greedy;
          // Greedy packs every ready node into one stage, which the stage model can price
          // above running them one by one; keep whichever of the two is cheaper so a capped
          // part is never worse than the sequential order the DP would have considered.
          auto packed = greedy_stages(g, chunk, max_streams);
          std::vector<std::vector<std::vector<int>>> serial;
          for (int v : chunk) serial.push_back({{v}});
          auto total = [&](const std::vector<std::vector<std::vector<int>>>& stages) {
            double ms = 0;
            for (const auto& st : stages) {
              Stage stage;
              for (const auto& grp : st) stage.groups.push_back(Group{grp});
              ms += cost.stage_ms(g, stage, 0);
            }
            return ms;
          };
          auto& best = total(packed) <= total(serial) ? packed : serial;
          for (auto& st : best) out.push_back(std::move(st));
        }
      }
    }
  }
};

}  // namespace

Schedule schedule_ios(const Graph& g, const CostModel& cost, const SchedulerOptions& opt) {
  validate_options(opt);
  auto t0 = std::chrono::steady_clock::now();
  IosRun run{g, cost, opt.ios_max_group, std::min(opt.ios_max_groups, opt.max_streams), opt.ios_max_states,
             opt.max_streams};
  Plan p;
  p.num_gpus = opt.num_gpus;
  p.gpu_stages.assign(opt.num_gpus, {});
  for (size_t b = 0; b < g.blocks.size(); ++b) {
    std::vector<int> nodes = g.blocks[b].nodes;
    std::sort(nodes.begin(), nodes.end());  // index order is topological
    // Parts of at most 64 consecutive nodes, as IOS cuts large blocks (its max_part_size).
    std::vector<std::vector<std::vector<int>>> stages;
    run.solve(nodes, 64, g.blocks[b].name, stages);
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
