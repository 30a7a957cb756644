// Pieces every algorithm shares: the registry, options, the lower bound, plans and their fast
// evaluator, list priorities, and the final bookkeeping that turns a plan into a checked,
// simulated Schedule.
#include <algorithm>
#include <cmath>
#include <limits>

#include "graph/dag.hpp"
#include "graph/error.hpp"
#include "graph/json_codec.hpp"
#include "scheduler/algorithms.hpp"
#include "scheduler/simulator.hpp"

namespace hios {

// ---------------------------------------------------------------------------------------------
// Registry and options

std::vector<std::string> algorithm_names() { return {"sequential", "greedy", "ios", "hios-lp", "hios-mr", "heft"}; }

// Every bound names the option a user sets and the range that means something: IOS's groups and
// stages take at most the 64 nodes of a block part, and a stage has at most 64 streams; past
// 1e8 states a part's DP would run for hours before the cap that is meant to bound it applies.
void validate_options(const SchedulerOptions& opt) {
  HIOS_CHECK(opt.num_gpus >= 1 && opt.num_gpus <= 64, "--gpus must be from 1 to 64 (got %d)", opt.num_gpus);
  HIOS_CHECK(opt.max_streams >= 1 && opt.max_streams <= 64, "--streams must be from 1 to 64 (got %d)", opt.max_streams);
  HIOS_CHECK(opt.window >= 0 && opt.window <= 16, "--window must be from 0 to 16 (got %d)", opt.window);
  HIOS_CHECK(opt.ios_max_group >= 1 && opt.ios_max_group <= 64, "--ios-r must be from 1 to 64 (got %d)",
             opt.ios_max_group);
  HIOS_CHECK(opt.ios_max_groups >= 1 && opt.ios_max_groups <= 64, "--ios-s must be from 1 to 64 (got %d)",
             opt.ios_max_groups);
  HIOS_CHECK(opt.ios_max_states >= 1 && opt.ios_max_states <= 100000000,
             "--ios-max-states must be from 1 to 1e8 DP states per block part (got %lld)", (long long)opt.ios_max_states);
  HIOS_CHECK(std::isfinite(opt.time_budget_s) && opt.time_budget_s >= 0 && opt.time_budget_s <= 1e6,
             "--time-budget must be 0 to 1e6 seconds (got %g)", opt.time_budget_s);
}

Schedule run_algorithm(const std::string& name, const Graph& g, const CostModel& cost, const SchedulerOptions& opt) {
  if (name == "sequential") return schedule_sequential(g, cost, opt);
  if (name == "greedy") return schedule_greedy(g, cost, opt);
  if (name == "ios") return schedule_ios(g, cost, opt);
  if (name == "hios-lp") return schedule_hios_lp(g, cost, opt);
  if (name == "hios-mr") return schedule_hios_mr(g, cost, opt);
  if (name == "heft") return schedule_heft(g, cost, opt);
  std::string known;
  for (const std::string& n : algorithm_names()) known += (known.empty() ? "" : ", ") + n;
  throw_error("unknown algorithm '%s' (known: %s)", name.c_str(), known.c_str());
}

// ---------------------------------------------------------------------------------------------
// Lower bound

double lower_bound_ms(const Graph& g, const CostModel& cost, int num_gpus) {
  HIOS_CHECK(num_gpus >= 1, "lower bound: GPUs must be at least 1 (got %d)", num_gpus);
  std::vector<double> w(g.size(), 0.0);
  double work = 0;
  for (int v = g.first_computed(); v < g.size(); ++v) {
    double best = kInf;
    for (int d = 0; d < num_gpus; ++d) best = std::min(best, cost.node_ms(g, v, d));
    w[v] = best;
    work += best;
  }
  // Concurrent groups on one GPU can finish sooner than the sum of their node_ms (that is the
  // point of streams), so the sum is no bound on a GPU's busy time. Under the stage model of
  // docs/cost-model.md (a blend of the sum and the contended resources, which only add up
  // across stages) no split of the nodes into stages and GPUs beats running all of them as one
  // fully concurrent stage, so the work term uses the smaller of the two.
  if (g.size() > 2) {
    Stage all;
    for (int v = g.first_computed(); v < g.size(); ++v) all.groups.push_back(Group{{v}});
    for (int d = 0; d < num_gpus; ++d) work = std::min(work, cost.stage_floor_ms(g, all, d));
  }
  Dag d = Dag::from_graph(g);
  double cp = longest_path(d, [&](int v) { return w[v]; }).length;
  return std::max(cp, work / num_gpus);
}

// ---------------------------------------------------------------------------------------------
// Plans

int Plan::add_stage(int block, std::vector<std::vector<int>> groups) {
  PlanStage st;
  st.block = block;
  st.groups = std::move(groups);
  stages.push_back(std::move(st));
  return static_cast<int>(stages.size()) - 1;
}

Plan plan_from_order(const Graph& g, const std::vector<int>& gpu_of, const std::vector<int>& order, int num_gpus) {
  Plan p;
  p.num_gpus = num_gpus;
  p.gpu_stages.assign(num_gpus, {});
  p.stages.reserve(order.size());
  for (int v : order) {
    HIOS_CHECK(v > 0 && v < g.size(), "plan: node index %d out of range", v);
    int gpu = gpu_of[v];
    HIOS_CHECK(gpu >= 0 && gpu < num_gpus, "plan: node '%s' on GPU %d of %d", g.nodes[v].name.c_str(), gpu, num_gpus);
    p.gpu_stages[gpu].push_back(p.add_stage(g.nodes[v].block, {{v}}));
  }
  return p;
}

Schedule plan_to_schedule(const Graph& g, const Plan& p) {
  Schedule s = make_schedule_skeleton(g, p.num_gpus);
  s.blocks.assign(g.blocks.size(), std::vector<std::vector<Stage>>(p.num_gpus));
  for (int gpu = 0; gpu < p.num_gpus; ++gpu) {
    int last_block = 0;
    for (int id : p.gpu_stages[gpu]) {
      const PlanStage& ps = p.stages[id];
      // A GPU runs its stages block by block; a plan that interleaves blocks is a bug upstream.
      HIOS_CHECK(ps.block >= last_block, "plan: GPU %d runs block %d after block %d", gpu, ps.block, last_block);
      last_block = ps.block;
      Stage st;
      for (const std::vector<int>& grp : ps.groups) st.groups.push_back(Group{grp});
      s.blocks[ps.block][gpu].push_back(std::move(st));
    }
  }
  s.meta.num_gpus = p.num_gpus;
  return s;
}

Plan plan_from_schedule(const Graph& g, const Schedule& s) {
  Plan p;
  p.num_gpus = s.meta.num_gpus;
  p.gpu_stages.assign(p.num_gpus, {});
  for (size_t b = 0; b < s.blocks.size(); ++b) {
    HIOS_CHECK(s.blocks[b].size() == size_t(p.num_gpus), "schedule block %zu lists %zu GPUs, meta says %d", b,
               s.blocks[b].size(), p.num_gpus);
    for (int gpu = 0; gpu < p.num_gpus; ++gpu) {
      for (const Stage& st : s.blocks[b][gpu]) {
        std::vector<std::vector<int>> groups;
        for (const Group& grp : st.groups) groups.push_back(grp.nodes);
        p.gpu_stages[gpu].push_back(p.add_stage(static_cast<int>(b), std::move(groups)));
      }
    }
  }
  return p;
}

// ---------------------------------------------------------------------------------------------
// BlockReachability

BlockReachability::BlockReachability(const Graph& g) : g_(g), local_(size_t(g.size()), -1) {}

void BlockReachability::load(int block) {
  if (block_ >= 0) {
    for (int v : g_.blocks[size_t(block_)].nodes) local_[size_t(v)] = -1;
  }
  block_ = block;
  const std::vector<int>& nodes = g_.blocks[size_t(block)].nodes;
  for (size_t i = 0; i < nodes.size(); ++i) local_[size_t(nodes[i])] = int(i);
  Dag d(int(nodes.size()));
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (int q : g_.predecessors(nodes[i])) {
      if (local_[size_t(q)] >= 0) d.add_edge(local_[size_t(q)], int(i));
    }
  }
  reach_ = Reachability(d);
}

bool BlockReachability::reaches(int u, int v) {
  const int b = g_.nodes[size_t(u)].block;
  HIOS_CHECK(b >= 0 && b == g_.nodes[size_t(v)].block,
             "internal error: reachability asked across blocks ('%s', '%s')", g_.nodes[size_t(u)].name.c_str(),
             g_.nodes[size_t(v)].name.c_str());
  if (b != block_) load(b);
  return reach_.reaches(local_[size_t(u)], local_[size_t(v)]);
}

bool BlockReachability::independent(int u, int v) { return u != v && !reaches(u, v) && !reaches(v, u); }

// ---------------------------------------------------------------------------------------------
// SearchBudget

SearchBudget::SearchBudget(const SchedulerOptions& opt) : budget_s_(opt.time_budget_s), progress_(opt.progress) {}

double SearchBudget::seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
}

bool SearchBudget::expired(const char* phase) {
  if (!expired_ && budget_s_ > 0 && (calls_++ & 15u) == 0 && seconds() > budget_s_) expired_ = true;
  if (expired_ && std::find(cut_.begin(), cut_.end(), phase) == cut_.end()) cut_.push_back(phase);
  return expired_;
}

void SearchBudget::note(const char* phase, const std::string& what) {
  if (!progress_) return;
  const auto now = std::chrono::steady_clock::now();
  if (std::chrono::duration<double>(now - last_note_).count() < 1.0) return;
  last_note_ = now;
  progress_(strprintf("[%6.1f s] %s: %s", seconds(), phase, what.c_str()));
}

// ---------------------------------------------------------------------------------------------
// PlanEvaluator

PlanEvaluator::PlanEvaluator(const Graph& g, const CostModel& cost, int num_gpus, const SchedulerOptions* opt)
    : g_(g),
      cost_(cost),
      num_gpus_(num_gpus),
      lanes_(opt ? opt->link_lanes : 1),
      budget_(opt ? SearchBudget(*opt) : SearchBudget()) {
  HIOS_CHECK(num_gpus >= 1, "plan evaluator: GPUs must be at least 1 (got %d)", num_gpus);
  HIOS_CHECK(lanes_ >= 1 && lanes_ <= kMaxLinkLanes, "plan evaluator: link lanes must be 1 to %d (got %d)",
             kMaxLinkLanes, lanes_);
  const int n = g.size();
  preds_.resize(n);
  for (int v = 0; v < n; ++v) preds_[v] = g.predecessors(v);
  succs_ = g.successors();
  for (auto& s : succs_) {
    std::sort(s.begin(), s.end());
    s.erase(std::unique(s.begin(), s.end()), s.end());
  }
  node_ms_.assign(size_t(n) * num_gpus, 0.0);
  for (int v = g.first_computed(); v < n; ++v) {
    for (int d = 0; d < num_gpus; ++d) node_ms_[size_t(v) * num_gpus + d] = cost.node_ms(g, v, d);
  }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  single_ms_.assign(size_t(n) * num_gpus, nan);
  transfer_ms_.assign(size_t(n) * num_gpus * num_gpus, nan);
  bytes_.resize(n);
  for (int v = 0; v < n; ++v) bytes_[v] = double(g.nodes[v].shape.numel()) * double(dtype_size(g.dtype));
  gpu_of_.assign(n, -1);
  done_stamp_.assign(n, 0);
  end_.assign(n, 0.0);
  arrive_.assign(size_t(n) * num_gpus, -1.0);
  link_free_.assign(size_t(num_gpus) * num_gpus * size_t(lanes_), 0.0);
  sent_.assign(size_t(num_gpus) * num_gpus, 0);
  want_.assign(size_t(num_gpus), 0);
}

double PlanEvaluator::node_ms(int v, int gpu) const { return node_ms_[size_t(v) * num_gpus_ + gpu]; }

double PlanEvaluator::transfer_ms(int v, int src, int dst) {
  if (src == dst) return 0.0;
  double& c = transfer_ms_[(size_t(v) * num_gpus_ + src) * num_gpus_ + dst];
  if (std::isnan(c)) c = cost_.transfer_ms(bytes_[v], src, dst);
  return c;
}

double PlanEvaluator::mean_transfer_ms(int v) {
  if (num_gpus_ == 1) return 0.0;
  double sum = 0;
  for (int s = 0; s < num_gpus_; ++s) {
    for (int d = 0; d < num_gpus_; ++d) {
      if (s != d) sum += transfer_ms(v, s, d);
    }
  }
  return sum / (double(num_gpus_) * (num_gpus_ - 1));
}

double PlanEvaluator::stage_ms(const PlanStage& st, int gpu) {
  if (st.groups.size() == 1 && st.groups[0].size() == 1) {
    int v = st.groups[0][0];
    double& c = single_ms_[size_t(v) * num_gpus_ + gpu];
    if (std::isnan(c)) {
      Stage s;
      s.groups.push_back(Group{{v}});
      c = cost_.stage_ms(g_, s, gpu);
    }
    return c;
  }
  if (st.ms_gpu != gpu) {
    Stage s;
    for (const std::vector<int>& grp : st.groups) s.groups.push_back(Group{grp});
    st.ms = cost_.stage_ms(g_, s, gpu);
    st.ms_gpu = gpu;
  }
  return st.ms;
}

// done_stamp_ holds -stamp for "placed, not run" and +stamp for "finished" in the evaluation of
// that stamp, so a new evaluation starts without clearing arrays.
void PlanEvaluator::place(const Plan& p, int placed) {
  gpu_of_[0] = 0;
  for (int gpu = 0; gpu < num_gpus_; ++gpu) {
    for (int id : p.gpu_stages[gpu]) {
      for (const auto& grp : p.stages[id].groups) {
        for (int v : grp) {
          gpu_of_[v] = gpu;
          done_stamp_[v] = -placed;
        }
      }
    }
  }
}

// Sends v's output from its GPU to every other GPU that reads it (and the graph output to GPU
// 0), in destination order. Lane l of link (src, dst) is free at link_free_[(src * G + dst) *
// lanes + l]; a link's transfers take its lanes in turn (sent_[src * G + dst] so far), as the
// executor's do.
void PlanEvaluator::send_output(int v, int placed) {
  const int G = num_gpus_;
  const int src = gpu_of_[v];
  std::fill(want_.begin(), want_.end(), 0);
  for (int c : succs_[v]) {
    if (done_stamp_[c] != -placed && done_stamp_[c] != placed) continue;  // not in the plan
    if (gpu_of_[c] != src) want_[gpu_of_[c]] = 1;
  }
  if (g_.is_result(v) && src != 0) want_[0] = 1;
  for (int d = 0; d < G; ++d) {
    if (!want_[d]) continue;
    const size_t link = size_t(src) * G + d;
    double& lf = link_free_[link * size_t(lanes_) + size_t(sent_[link]++ % lanes_)];
    const double start = std::max(end_[v], lf);
    lf = start + transfer_ms(v, src, d);
    arrive_[size_t(v) * G + d] = lf;
  }
}

// When stage st can start on gpu, free from `free_at`: once every input from another GPU has
// arrived. kNotReady while one has not been sent yet; kInf when a node is ordered before its
// producer on the same GPU (the plan is invalid).
double PlanEvaluator::stage_start(const PlanStage& st, int gpu, double free_at, int placed) const {
  double start = free_at;
  for (const auto& grp : st.groups) {
    for (size_t i = 0; i < grp.size(); ++i) {
      for (int q : preds_[grp[i]]) {
        if (gpu_of_[q] == gpu) {
          if (done_stamp_[q] == placed) continue;
          // Not finished yet: legal only as an earlier member of the same group.
          if (std::find(grp.begin(), grp.begin() + i, q) != grp.begin() + i) continue;
          return kInf;
        }
        const double a = arrive_[size_t(q) * num_gpus_ + gpu];
        if (a < 0) return kNotReady;
        start = std::max(start, a);
      }
    }
  }
  return start;
}

// Runs stage st on gpu from `start`: its groups laid back to back and stretched so the slowest
// one ends with the stage, every node's output sent in the order the nodes finish (links
// serialise in the order transfers become ready). Returns when the stage ends.
double PlanEvaluator::run_stage(const PlanStage& st, int gpu, double start, int placed) {
  const double dur = stage_ms(st, gpu);
  double longest = 0;
  for (const auto& grp : st.groups) {
    double sum = 0;
    for (int v : grp) sum += node_ms(v, gpu);
    longest = std::max(longest, sum);
  }
  const double scale = longest > 0 ? dur / longest : 0.0;
  finished_.clear();
  for (const auto& grp : st.groups) {
    double t = start;
    for (int v : grp) {
      t += node_ms(v, gpu) * scale;
      end_[v] = t;  // all-zero groups end at the stage's start, as in simulate()
      done_stamp_[v] = placed;
      finished_.emplace_back(end_[v], v);
    }
  }
  std::sort(finished_.begin(), finished_.end());
  for (const auto& [t, v] : finished_) send_output(v, placed);
  return start + dur;
}

double PlanEvaluator::latency(const Plan& p) {
  ++evaluations_;
  const int G = num_gpus_;
  HIOS_CHECK(p.num_gpus == G, "plan evaluator: plan has %d GPUs, evaluator %d", p.num_gpus, G);
  if (++stamp_ == std::numeric_limits<int>::max()) {
    std::fill(done_stamp_.begin(), done_stamp_.end(), 0);
    stamp_ = 1;
  }
  const int placed = stamp_;
  std::fill(arrive_.begin(), arrive_.end(), -1.0);
  std::fill(link_free_.begin(), link_free_.end(), 0.0);
  std::fill(sent_.begin(), sent_.end(), 0);
  place(p, placed);

  // The graph input is resident on GPU 0 at time 0.
  end_[0] = 0;
  done_stamp_[0] = placed;
  send_output(0, placed);

  // Every GPU runs its stages in order as far as their inputs allow, round after round, until
  // all have run or a round runs none (a stage waits on a tensor that never comes: deadlock).
  std::vector<double> gpu_time(G, 0.0);
  std::vector<size_t> next(G, 0);
  size_t remaining = 0;
  for (int gpu = 0; gpu < G; ++gpu) remaining += p.gpu_stages[gpu].size();
  bool progress = true;
  while (remaining > 0 && progress) {
    progress = false;
    for (int gpu = 0; gpu < G; ++gpu) {
      while (next[gpu] < p.gpu_stages[gpu].size()) {
        const PlanStage& st = p.stages[p.gpu_stages[gpu][next[gpu]]];
        const double start = stage_start(st, gpu, gpu_time[gpu], placed);
        if (start == kInf) return kInf;
        if (start == kNotReady) break;
        gpu_time[gpu] = run_stage(st, gpu, start, placed);
        ++next[gpu];
        --remaining;
        progress = true;
      }
    }
  }
  if (remaining > 0) return kInf;
  const int out = g_.output();
  if (done_stamp_[out] != placed) return kInf;
  return gpu_of_[out] == 0 ? end_[out] : arrive_[size_t(out) * G + 0];
}

// ---------------------------------------------------------------------------------------------
// Priorities

std::vector<double> bottom_levels(const Graph& g, const std::vector<double>& node_w, const std::vector<double>& edge_w,
                                  const std::vector<int>& gpu_of) {
  const int n = g.size();
  std::vector<std::vector<int>> succ = g.successors();
  std::vector<double> level(n, 0.0);
  // Node indices are a topological order (Graph::finalize guarantees it).
  for (int v = n - 1; v >= 0; --v) {
    double tail = 0;
    for (int s : succ[v]) {
      bool cross = gpu_of.empty() || gpu_of[v] != gpu_of[s];
      tail = std::max(tail, level[s] + (cross ? edge_w[v] : 0.0));
    }
    level[v] = tail + node_w[v];
  }
  return level;
}

std::vector<int> priority_order(const Graph& g, const std::vector<double>& level) {
  std::vector<int> order;
  for (int v = g.first_computed(); v < g.size(); ++v) order.push_back(v);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    if (g.nodes[a].block != g.nodes[b].block) return g.nodes[a].block < g.nodes[b].block;
    if (level[a] != level[b]) return level[a] > level[b];
    return a < b;
  });
  return order;
}

void hios_weights(const Graph& g, PlanEvaluator& ev, std::vector<double>& node_w, std::vector<double>& edge_w) {
  const int n = g.size();
  node_w.assign(n, 0.0);
  edge_w.assign(n, 0.0);
  for (int v = 0; v < n; ++v) {
    if (v > 0) {
      double sum = 0;
      for (int d = 0; d < ev.num_gpus(); ++d) sum += ev.node_ms(v, d);
      node_w[v] = sum / ev.num_gpus();
    }
    edge_w[v] = ev.mean_transfer_ms(v);
  }
}

// ---------------------------------------------------------------------------------------------
// Intra-GPU sliding window (HIOS phase 2)

namespace {

// The subsets of a window of m stages that a merge may take (at most max_streams - 1 of them,
// beside the visited node), largest first, then earlier window slots first.
std::vector<uint32_t> window_masks(int m, int max_streams) {
  std::vector<uint32_t> masks;
  for (uint32_t mask = 1; mask < (1u << m); ++mask) {
    if (__builtin_popcount(mask) + 1 <= max_streams) masks.push_back(mask);
  }
  std::stable_sort(masks.begin(), masks.end(), [](uint32_t a, uint32_t b) {
    int ca = __builtin_popcount(a), cb = __builtin_popcount(b);
    if (ca != cb) return ca > cb;
    // Earlier window slots first: compare bit-reversed so slot 0 is most significant.
    for (int i = 0; i < 32; ++i) {
      bool ba = (a >> i) & 1u, bb = (b >> i) & 1u;
      if (ba != bb) return ba;
    }
    return false;
  });
  return masks;
}

// One GPU's stage list while the window pass visits it.
struct WindowState {
  const Plan& p;
  BlockReachability& reach;
  // The node of a single-node stage, else -1.
  int single(int id) const {
    const PlanStage& st = p.stages[id];
    return st.groups.size() == 1 && st.groups[0].size() == 1 ? st.groups[0][0] : -1;
  }
  // v with the window stages `mask` takes, when they are pairwise independent and no skipped
  // stage between feeds a taken one (it would run after its reader); empty otherwise.
  std::vector<int> merge_members(const std::vector<int>& list, const std::vector<int>& win, uint32_t mask, int v) {
    std::vector<int> members{v};
    for (int j = 0; j < int(win.size()); ++j) {
      if (!((mask >> j) & 1u)) continue;
      const int u = single(list[win[j]]);
      for (int w : members) {
        if (!reach.independent(w, u)) return {};
      }
      for (int k = 0; k < j; ++k) {
        if (!((mask >> k) & 1u) && reach.reaches(single(list[win[k]]), u)) return {};
      }
      members.push_back(u);
    }
    return members;
  }
};

// `list` with the stage at `pos` replaced by stage `id` and the window stages `mask` takes left out.
std::vector<int> merged_list(const std::vector<int>& list, int pos, int id, const std::vector<int>& win, uint32_t mask) {
  std::vector<int> merged;
  merged.reserve(list.size());
  for (int i = 0; i < static_cast<int>(list.size()); ++i) {
    if (i == pos) {
      merged.push_back(id);
      continue;
    }
    auto it = std::find(win.begin(), win.end(), i);
    if (it != win.end() && ((mask >> (it - win.begin())) & 1u)) continue;
    merged.push_back(list[i]);
  }
  return merged;
}

}  // namespace

WindowStats window_pass(const Graph& g, PlanEvaluator& ev, Plan& p, const std::vector<int>& visit, int window,
                        int max_streams) {
  WindowStats stats;
  if (window <= 1 || max_streams <= 1) return stats;
  const int n = g.size();
  BlockReachability reach(g);  // a window never leaves its block
  WindowState ws{p, reach};
  // Where every node's stage sits: GPU and position in that GPU's list. Only single-node
  // stages are merged, and a merge only touches the head of a GPU's pending suffix, so the
  // positions are refreshed for one GPU after each accepted merge.
  std::vector<int> gpu_of(n, -1), pos_of(n, -1);
  auto index_gpu = [&](int gpu) {
    const auto& list = p.gpu_stages[gpu];
    for (size_t i = 0; i < list.size(); ++i) {
      for (const auto& grp : p.stages[list[i]].groups) {
        for (int v : grp) {
          gpu_of[v] = gpu;
          pos_of[v] = static_cast<int>(i);
        }
      }
    }
  };
  for (int gpu = 0; gpu < p.num_gpus; ++gpu) index_gpu(gpu);
  std::vector<int> head(p.num_gpus, 0);  // stages before head[gpu] are settled
  double current = ev.latency(p);

  size_t visited = 0;
  for (int v : visit) {
    if (ev.budget().expired("window pass")) break;  // out of time: the merges so far stand
    ev.budget().note("window pass", strprintf("%zu of %zu nodes visited, %d merges", visited, visit.size(), stats.merges));
    ++visited;
    const int gpu = gpu_of[v];
    if (gpu < 0) continue;
    const int pos = pos_of[v];
    if (pos < head[gpu] || ws.single(p.gpu_stages[gpu][pos]) != v) continue;  // already merged
    head[gpu] = pos + 1;
    std::vector<int>& list = p.gpu_stages[gpu];
    const int block = p.stages[list[pos]].block;
    // The window: the next stages on this GPU, same block, each a single pending node.
    std::vector<int> win;  // positions after pos
    for (int i = pos + 1; i < static_cast<int>(list.size()) && static_cast<int>(win.size()) < window - 1; ++i) {
      if (p.stages[list[i]].block != block || ws.single(list[i]) < 0) break;
      win.push_back(i);
    }
    if (win.empty()) continue;
    // Every legal merge of v with a subset of the window is evaluated; the best is kept when it
    // is no slower than the plan as it stands.
    double best = std::numeric_limits<double>::infinity();
    std::vector<int> best_list;
    for (uint32_t mask : window_masks(static_cast<int>(win.size()), max_streams)) {
      const std::vector<int> members = ws.merge_members(list, win, mask, v);
      if (members.empty()) continue;
      ++stats.candidates;
      std::vector<std::vector<int>> groups;
      for (int u : members) groups.push_back({u});
      const int id = p.add_stage(block, std::move(groups));
      std::vector<int> saved = merged_list(list, pos, id, win, mask);
      std::swap(list, saved);
      const double lat = ev.latency(p);
      std::swap(list, saved);
      if (!(lat < std::numeric_limits<double>::infinity())) ++stats.rejected_deadlock;
      if (lat < best) {
        best = lat;
        best_list = std::move(saved);
      }
    }
    if (!best_list.empty() && best <= current) {
      list = std::move(best_list);
      current = best;
      ++stats.merges;
      index_gpu(gpu);
    }
  }
  return stats;
}

// ---------------------------------------------------------------------------------------------
// Intra-GPU IOS packing

std::vector<int> plan_nodes_per_gpu(const Plan& p) {
  std::vector<int> count(p.num_gpus, 0);
  for (int gpu = 0; gpu < p.num_gpus; ++gpu) {
    for (int id : p.gpu_stages[gpu]) {
      for (const auto& grp : p.stages[id].groups) count[gpu] += static_cast<int>(grp.size());
    }
  }
  return count;
}

// The waits are modelled as a graph of the nodes plus, for every stage of the other GPUs, a
// start and an end vertex: a stage starts after the previous stage on its GPU ends and after
// every remote input of every member arrives; its members run after it starts and it ends
// after all of them. The segment's own stage order and GPU `gpu`'s other blocks (which cannot
// lead back into this block) add nothing.
std::vector<std::vector<char>> segment_far_pairs(const Graph& g, const Plan& p, int gpu, const std::vector<int>& seg,
                                                 const std::vector<std::vector<int>>& preds) {
  const int n = g.size();
  std::vector<int> gpu_of(n, 0), stage_of(n, -1);
  std::vector<std::vector<int>> out(n);
  int k = 0;
  for (int h = 0; h < p.num_gpus; ++h) {
    for (int id : p.gpu_stages[h]) {
      for (const auto& grp : p.stages[id].groups) {
        for (int v : grp) gpu_of[v] = h;
      }
    }
  }
  for (int h = 0; h < p.num_gpus; ++h) {
    if (h == gpu) continue;
    for (size_t i = 0; i < p.gpu_stages[h].size(); ++i, ++k) {
      for (const auto& grp : p.stages[p.gpu_stages[h][i]].groups) {
        for (int v : grp) stage_of[v] = k;
      }
    }
  }
  const int stages = k;
  out.resize(size_t(n) + 2 * stages);
  auto start = [&](int s) { return n + 2 * s; };
  k = 0;
  for (int h = 0; h < p.num_gpus; ++h) {
    if (h == gpu) continue;
    for (size_t i = 0; i < p.gpu_stages[h].size(); ++i, ++k) {
      for (const auto& grp : p.stages[p.gpu_stages[h][i]].groups) {
        for (int v : grp) {
          out[start(k)].push_back(v);
          out[v].push_back(start(k) + 1);
        }
      }
      if (i + 1 < p.gpu_stages[h].size()) out[start(k) + 1].push_back(start(k + 1));
    }
  }
  for (int v = g.first_computed(); v < n; ++v) {
    for (int q : preds[v]) {
      const bool staged = stage_of[v] >= 0 && gpu_of[q] != gpu_of[v];
      out[q].push_back(staged ? start(stage_of[v]) : v);
    }
  }
  const int m = static_cast<int>(seg.size());
  std::vector<int> local(n, -1);
  for (int i = 0; i < m; ++i) local[seg[i]] = i;
  std::vector<std::vector<char>> far(m, std::vector<char>(m, 0));
  std::vector<int> seen(out.size(), -1), stack;
  for (int i = 0; i < m; ++i) {
    stack.assign(1, seg[i]);
    seen[seg[i]] = i;
    while (!stack.empty()) {
      int x = stack.back();
      stack.pop_back();
      for (int y : out[x]) {
        if (seen[y] == i) continue;
        seen[y] = i;
        stack.push_back(y);
      }
    }
    for (int j = 0; j < m; ++j) {
      for (int q : preds[seg[j]]) {
        if (local[q] < 0 && seen[q] == i) far[i][j] = 1;
      }
    }
  }
  return far;
}

namespace {

// The intra-GPU pass over one plan: each GPU's segment of each block repacked by IOS's DP, kept
// where the whole plan gets faster.
class IntraPass {
 public:
  IntraPass(const Graph& g, const CostModel& cost, PlanEvaluator& ev, const SchedulerOptions& opt, const Plan& own,
            IntraStats& st)
      : g_(g), cost_(cost), ev_(ev), opt_(opt), cur_(own), st_(st), gpu_of_(size_t(g.size()), 0) {
    for (int gpu = 0; gpu < cur_.num_gpus; ++gpu) {
      for (int id : cur_.gpu_stages[gpu]) {
        for (const auto& grp : cur_.stages[id].groups) {
          for (int v : grp) gpu_of_[v] = gpu;
        }
      }
    }
  }

  Plan run() {
    best_ = ev_.latency(cur_);
    st_.own_ms = st_.best_ms = best_;
    if (!(best_ < kInf)) return cur_;
    best_flow_ = flow();
    // One pass, block by block (the order things run in). A second pass over all segments,
    // with the far pairs and release times of the improved plan, gained under 0.1% on the
    // models and nothing on the random DAGs, for twice the DP work.
    const int B = static_cast<int>(g_.blocks.size());
    for (int b = 0; b < B && !ev_.budget().expired("intra-GPU IOS pass"); ++b) {
      ev_.budget().note("intra-GPU IOS pass", strprintf("%d of %d blocks", b, B));
      for (int gpu = 0; gpu < cur_.num_gpus; ++gpu) repack_segment(b, gpu);
    }
    st_.best_ms = best_;
    return cur_;
  }

 private:
  // Ties on latency (common: only the GPU on the critical path decides it) go to the plan whose
  // nodes finish earlier in total, which leaves the other segments more room.
  double flow() const {
    double sum = 0;
    for (int v = g_.first_computed(); v < g_.size(); ++v) sum += ev_.end_ms(v);
    return sum;
  }

  // Block b's stages on gpu, [lo, hi) of its list: consecutive, since a GPU runs its stages
  // block by block.
  std::pair<int, int> segment(int b, int gpu) const {
    const std::vector<int>& list = cur_.gpu_stages[gpu];
    int lo = 0;
    while (lo < static_cast<int>(list.size()) && cur_.stages[list[lo]].block < b) ++lo;
    int hi = lo;
    while (hi < static_cast<int>(list.size()) && cur_.stages[list[hi]].block == b) ++hi;
    return {lo, hi};
  }

  // When each node of the segment may start, relative to when the GPU is free of the stages
  // before it (lo), in the current plan: its inputs from other GPUs arrive later.
  std::vector<double> release_times(int gpu, int lo, const std::vector<int>& seg) {
    const std::vector<int>& list = cur_.gpu_stages[gpu];
    ev_.latency(cur_);
    double t0 = 0;
    for (int i = 0; i < lo; ++i) {
      for (const auto& grp : cur_.stages[list[i]].groups) {
        for (int v : grp) t0 = std::max(t0, ev_.end_ms(v));
      }
    }
    std::vector<double> release(size_t(g_.size()), 0.0);
    for (int v : seg) {
      for (int q : ev_.preds()[v]) {
        if (gpu_of_[q] != gpu) release[v] = std::max(release[v], ev_.arrive_ms(q, gpu) - t0);
      }
    }
    return release;
  }

  void repack_segment(int b, int gpu) {
    const auto [lo, hi] = segment(b, gpu);
    if (lo == hi) return;
    ++st_.segments;
    std::vector<int>& list = cur_.gpu_stages[gpu];
    std::vector<int> seg;  // in the current run order, a topological order of everything
    for (int i = lo; i < hi; ++i) {
      for (const auto& grp : cur_.stages[list[i]].groups) seg.insert(seg.end(), grp.begin(), grp.end());
    }
    if (seg.size() < 2) return;
    const std::vector<std::vector<char>> far = segment_far_pairs(g_, cur_, gpu, seg, ev_.preds());
    const int m = static_cast<int>(seg.size());
    std::vector<int> pos(size_t(g_.size()), -1);
    for (int i = 0; i < m; ++i) pos[seg[i]] = i;
    // Index order (IOS's, so a single GPU gets IOS's parts) when the far pairs allow it.
    std::vector<int> nodes = seg;
    std::sort(nodes.begin(), nodes.end());
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < m; ++j) {
        if (far[i][j] && seg[i] > seg[j]) nodes = seg;
      }
    }
    PackContext ctx;
    ctx.far = [&](int u, int v) { return far[pos[u]][pos[v]] != 0; };
    const std::vector<double> release = release_times(gpu, lo, seg);
    const bool any_release = std::any_of(seg.begin(), seg.end(), [&](int v) { return release[v] > 0; });
    const std::vector<int> saved = list;
    const size_t pool = cur_.stages.size();
    std::vector<int> keep;
    // Variant 0 with the release times, 1 without (the same when nothing waits). The first
    // brings most of the gains; the second, IOS's plain sum, still wins some segments of the
    // models, where an early-ready output can matter more to the other GPUs than when this
    // segment finishes.
    for (int variant = any_release ? 0 : 1; variant < 2; ++variant) {
      ctx.release = variant == 0 ? release : std::vector<double>{};
      StageList stages = ios_stages(g_, cost_, opt_, nodes, gpu, &ctx,
                                    strprintf("%s@gpu%d", g_.blocks[b].name.c_str(), gpu), st_.ios);
      bool same = static_cast<int>(stages.size()) == hi - lo;
      for (int i = 0; same && i < hi - lo; ++i) same = cur_.stages[saved[lo + i]].groups == stages[i];
      if (same) continue;
      std::vector<int> next(saved.begin(), saved.begin() + lo);
      for (auto& sg : stages) next.push_back(cur_.add_stage(b, std::move(sg)));
      next.insert(next.end(), saved.begin() + hi, saved.end());
      list = next;
      ++st_.candidates;
      const double lat = ev_.latency(cur_);
      const double fl = flow();
      if (lat < best_ || (lat == best_ && fl < best_flow_)) {
        best_ = lat;
        best_flow_ = fl;
        keep = std::move(next);
      }
      list = saved;
    }
    if (!keep.empty()) {
      list = std::move(keep);
      ++st_.packed_segments;
    } else {
      cur_.stages.resize(pool);  // nothing refers to the rejected stages
    }
  }

  const Graph& g_;
  const CostModel& cost_;
  PlanEvaluator& ev_;
  const SchedulerOptions& opt_;
  Plan cur_;
  IntraStats& st_;
  std::vector<int> gpu_of_;
  double best_ = kInf, best_flow_ = 0;
};

}  // namespace

Plan intra_gpu_pass(const Graph& g, const CostModel& cost, PlanEvaluator& ev, const SchedulerOptions& opt,
                    const Plan& own, IntraStats* stats) {
  IntraStats local;
  IntraStats& st = stats ? *stats : local;
  st = IntraStats{};
  return IntraPass(g, cost, ev, opt, own, st).run();
}

// ---------------------------------------------------------------------------------------------
// Greedy stages (IOS's greedy rule)

std::vector<std::vector<std::vector<int>>> greedy_stages(const Graph& g, const std::vector<int>& nodes,
                                                         int max_groups) {
  std::vector<int> sorted = nodes;
  std::sort(sorted.begin(), sorted.end());
  std::vector<char> member(g.size(), 0), done(g.size(), 0);
  for (int v : sorted) member[v] = 1;
  std::vector<std::vector<std::vector<int>>> stages;
  size_t placed = 0;
  while (placed < sorted.size()) {
    std::vector<int> ready;
    for (int v : sorted) {
      if (done[v]) continue;
      bool ok = true;
      for (int q : g.predecessors(v)) {
        if (member[q] && !done[q]) {
          ok = false;
          break;
        }
      }
      if (ok) ready.push_back(v);
      if (int(ready.size()) == max_groups) break;
    }
    HIOS_CHECK(!ready.empty(), "greedy: no ready node among %zu left (cycle?)", sorted.size() - placed);
    std::vector<std::vector<int>> stage;
    for (int v : ready) {
      stage.push_back({v});
      done[v] = 1;
    }
    placed += ready.size();
    stages.push_back(std::move(stage));
  }
  return stages;
}

// ---------------------------------------------------------------------------------------------
// Final bookkeeping

void finish_schedule(const Graph& g, const CostModel& cost, const SchedulerOptions& opt, const std::string& algorithm,
                     json params, double search_seconds, Schedule& s) {
  ScheduleMeta& m = s.meta;
  m.algorithm = algorithm;
  m.params = std::move(params);
  m.num_gpus = opt.num_gpus;
  if (s.blocks.empty() && !g.blocks.empty()) s.blocks.assign(g.blocks.size(), {});
  for (auto& b : s.blocks) b.resize(opt.num_gpus);
  // The most groups any stage may hold: what the algorithm was allowed, not what it used.
  m.max_streams = algorithm == "sequential" ? 1 : opt.max_streams;
  m.link_lanes = opt.num_gpus > 1 ? opt.link_lanes : 1;
  m.batch = g.batch;
  m.height = g.height;
  m.width = g.width;
  m.device = cost.device();
  m.cost_model = cost.name();
  m.graph_name = g.name;
  m.graph_digest = graph_digest(g);
  s.derive_transfers(g);
  require_valid_schedule(g, s);
  m.predicted_ms = simulate(g, s, cost).latency_ms;
  m.lower_bound_ms = lower_bound_ms(g, cost, opt.num_gpus);
  m.search_seconds = search_seconds;
}

}  // namespace hios
