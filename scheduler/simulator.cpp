#include "scheduler/simulator.hpp"

#include <algorithm>
#include <map>
#include <queue>
#include <tuple>

#include "graph/error.hpp"

namespace hios {

namespace {

struct Where {
  int gpu = -1, seq = -1, group = -1, index = -1;
};

struct StageRef {
  int block, stage;
  const Stage* st;
};

// Event kinds in the order they are handled when they fall on the same instant: arrivals and
// freed GPUs first so that a stage can start at the very time its last input lands.
enum Kind { kArrive = 0, kGpuFree = 1, kReady = 2 };
using Event = std::tuple<double, int, int, int>;  // time, kind, a, b

}  // namespace

namespace {

// One event-driven replay of a schedule, as named phases: place the nodes, index the transfers,
// run the events (a GPU starts its next stage once every input has arrived; a transfer waits
// for its link), then name a deadlock or read the latency off the output.
class Simulation {
 public:
  Simulation(const Graph& g, const Schedule& s, const CostModel& cost) : g_(g), s_(s), cost_(cost), n_(g.size()) {
    gpus_ = std::max(1, s.meta.num_gpus);
    for (const auto& per_gpu : s.blocks) gpus_ = std::max(gpus_, static_cast<int>(per_gpu.size()));
  }

  SimResult run() {
    place_nodes();
    index_transfers();
    run_events();
    check_finished();
    r_.latency_ms = latency();
    return std::move(r_);
  }

 private:
  // Placement and each GPU's run of stages, blocks concatenated.
  void place_nodes() {
    where_.assign(size_t(n_), Where{});
    for (int in : g_.inputs()) where_[size_t(in)] = {0, -1, -1, -1};
    run_.assign(size_t(gpus_), {});
    for (size_t b = 0; b < s_.blocks.size(); ++b) {
      for (size_t d = 0; d < s_.blocks[b].size(); ++d) {
        for (size_t k = 0; k < s_.blocks[b][d].size(); ++k) {
          const Stage& st = s_.blocks[b][d][k];
          int seq = static_cast<int>(run_[d].size());
          run_[d].push_back({static_cast<int>(b), static_cast<int>(k), &st});
          for (size_t q = 0; q < st.groups.size(); ++q) {
            const auto& nodes = st.groups[q].nodes;
            for (size_t i = 0; i < nodes.size(); ++i) {
              int v = nodes[i];
              HIOS_CHECK(v > 0 && v < n_, "simulate: block %zu GPU %zu stage %zu holds node #%d, not a schedulable node of '%s'",
                         b, d, k, v, g_.name.c_str());
              HIOS_CHECK(where_[v].gpu < 0, "simulate: node '%s' is scheduled twice", g_.nodes[v].name.c_str());
              where_[v] = {static_cast<int>(d), seq, static_cast<int>(q), static_cast<int>(i)};
            }
          }
        }
      }
    }
  }

  // Transfers by (node, dst), and the ones each node starts when it ends.
  void index_transfers() {
    sends_.assign(size_t(n_), {});
    for (size_t t = 0; t < s_.transfers.size(); ++t) {
      const Transfer& tr = s_.transfers[t];
      HIOS_CHECK(tr.node >= 0 && tr.node < n_, "simulate: transfers[%zu] moves node #%d, not in graph '%s'", t, tr.node,
                 g_.name.c_str());
      const std::string& name = g_.nodes[tr.node].name;
      HIOS_CHECK(tr.src >= 0 && tr.src < gpus_ && tr.dst >= 0 && tr.dst < gpus_ && tr.src != tr.dst,
                 "simulate: transfers[%zu] of '%s' goes from GPU %d to GPU %d", t, name.c_str(), tr.src, tr.dst);
      HIOS_CHECK(where_[tr.node].gpu == tr.src, "simulate: transfers[%zu] sends '%s' from GPU %d but it runs on GPU %d", t,
                 name.c_str(), tr.src, where_[tr.node].gpu);
      HIOS_CHECK(transfer_of_.emplace(std::pair{tr.node, tr.dst}, static_cast<int>(t)).second,
                 "simulate: '%s' is sent to GPU %d twice", name.c_str(), tr.dst);
      sends_[tr.node].push_back(static_cast<int>(t));
    }
  }

  void run_events() {
    end_of_.assign(size_t(n_), -1.0);
    for (int in : g_.inputs()) end_of_[size_t(in)] = 0;
    arrived_.assign(size_t(n_) * gpus_, 0);
    arrival_.assign(size_t(n_) * gpus_, 0);
    next_.assign(size_t(gpus_), 0);
    busy_.assign(size_t(gpus_), 0);
    for (int t : sends_[g_.input()]) events_.push({0.0, kReady, g_.input(), s_.transfers[t].dst});
    for (int d = 0; d < gpus_; ++d) try_start(d, 0.0);
    while (!events_.empty()) {
      auto [now, kind, a, b] = events_.top();
      events_.pop();
      if (kind == kGpuFree) {
        busy_[a] = 0;
        try_start(a, now);
      } else if (kind == kArrive) {
        arrived_[size_t(a) * gpus_ + b] = 1;
        arrival_[size_t(a) * gpus_ + b] = now;
        try_start(b, now);
      } else {
        send(a, b, now);
      }
    }
  }

  // A directed link carries meta.link_lanes transfers at once: its transfers take the lanes in
  // turn, in the order they became ready, and each lane moves one at a time.
  void send(int node, int dst, double now) {
    const Transfer& tr = s_.transfers[transfer_of_.at({node, dst})];
    double bytes = double(g_.nodes[node].shape.numel()) * dtype_size(g_.dtype);
    int& sent = link_sent_[{tr.src, tr.dst}];
    const int lane = sent++ % std::max(1, s_.meta.link_lanes);
    double& free_at = link_free_[{tr.src, tr.dst, lane}];
    double start = std::max(now, free_at);
    double end = start + cost_.transfer_ms(bytes, tr.src, tr.dst);
    free_at = end;
    r_.transfers.push_back({node, tr.src, tr.dst, bytes, start, end});
    events_.push({end, kArrive, node, dst});
  }

  // GPU d's next stage, when d is free and every input of the stage is there (a missing one
  // wakes d again when it arrives).
  void try_start(int d, double now) {
    if (busy_[d] || next_[d] >= run_[d].size()) return;
    if (!inputs_ready(d)) return;
    start_stage(d, now);
  }

  bool inputs_ready(int d) const {
    const StageRef& ref = run_[d][next_[d]];
    const int seq = static_cast<int>(next_[d]);
    for (size_t q = 0; q < ref.st->groups.size(); ++q) {
      const auto& nodes = ref.st->groups[q].nodes;
      for (size_t i = 0; i < nodes.size(); ++i) {
        int v = nodes[i];
        for (int u : g_.predecessors(v)) {
          const Where& wu = where_[u];
          HIOS_CHECK(wu.gpu >= 0, "simulate: '%s' reads '%s', which is not scheduled", g_.nodes[v].name.c_str(),
                     g_.nodes[u].name.c_str());
          if (wu.gpu != d) {
            HIOS_CHECK(transfer_of_.count({u, d}), "simulate: '%s' on GPU %d reads '%s' from GPU %d, but no transfer sends it",
                       g_.nodes[v].name.c_str(), d, g_.nodes[u].name.c_str(), wu.gpu);
            if (!arrived_[size_t(u) * gpus_ + d]) return false;
            continue;
          }
          if (g_.is_input(u)) continue;
          bool before = wu.seq < seq || (wu.seq == seq && wu.group == static_cast<int>(q) && wu.index < static_cast<int>(i));
          HIOS_CHECK(before, "simulate: '%s' reads '%s', which does not run before it on GPU %d",
                     g_.nodes[v].name.c_str(), g_.nodes[u].name.c_str(), d);
        }
      }
    }
    return true;
  }

  // Lays the stage's groups out back to back from now, stretched so the slowest ends with the
  // stage, and queues the transfers its nodes start.
  void start_stage(int d, double now) {
    const StageRef& ref = run_[d][next_[d]];
    double stage = cost_.stage_ms(g_, *ref.st, d);
    double longest = 0;
    std::vector<std::vector<double>> times(ref.st->groups.size());
    for (size_t q = 0; q < ref.st->groups.size(); ++q) {
      double sum = 0;
      for (int v : ref.st->groups[q].nodes) {
        times[q].push_back(cost_.node_ms(g_, v, d));
        sum += times[q].back();
      }
      longest = std::max(longest, sum);
    }
    double stretch = longest > 0 ? stage / longest : 0;
    for (size_t q = 0; q < ref.st->groups.size(); ++q) {
      double t = now;
      const auto& nodes = ref.st->groups[q].nodes;
      for (size_t i = 0; i < nodes.size(); ++i) {
        double e = t + times[q][i] * stretch;
        r_.nodes.push_back({nodes[i], d, static_cast<int>(q), ref.block, ref.stage, t, e});
        end_of_[nodes[i]] = e;
        for (int tr : sends_[nodes[i]]) events_.push({e, kReady, nodes[i], s_.transfers[tr].dst});
        t = e;
      }
    }
    r_.stages.push_back({d, ref.block, ref.stage, now, now + stage});
    busy_[d] = 1;
    ++next_[d];
    events_.push({now + stage, kGpuFree, d, 0});
  }

  // A GPU with stages left when no event remains waits for something never sent: name it.
  void check_finished() const {
    for (int d = 0; d < gpus_; ++d) {
      if (next_[d] >= run_[d].size()) continue;
      const StageRef& ref = run_[d][next_[d]];
      std::string waiting;
      for (const Group& gr : ref.st->groups) {
        for (int v : gr.nodes) {
          for (int u : g_.predecessors(v)) {
            if (where_[u].gpu != d && !arrived_[size_t(u) * gpus_ + d]) {
              waiting += (waiting.empty() ? "'" : ", '") + g_.nodes[u].name + "'";
            }
          }
        }
      }
      throw_error("simulate: deadlock: GPU %d stage %d of block '%s' waits forever for %s (run 'hios check')", d,
                  ref.stage, ref.block < static_cast<int>(g_.blocks.size()) ? g_.blocks[ref.block].name.c_str() : "?",
                  waiting.c_str());
    }
  }

  // When the output is ready on GPU 0; a partial schedule (a scheduler weighing a prefix)
  // reports its makespan.
  double latency() const {
    const int out = g_.output();
    double ms = 0;
    if (where_[out].gpu < 0) {
      for (const SimNode& sn : r_.nodes) ms = std::max(ms, sn.end_ms);
      for (const SimTransfer& st : r_.transfers) ms = std::max(ms, st.end_ms);
      for (const SimStage& ss : r_.stages) ms = std::max(ms, ss.end_ms);
      return ms;
    }
    // Every result must reach GPU 0, where the executor gathers them; with several results the
    // last block's exit is their join, which gathers nothing itself, wherever it runs.
    const std::vector<int> results = g_.results();
    for (int r : results) {
      if (where_[r].gpu == 0) {
        ms = std::max(ms, end_of_[r]);
        continue;
      }
      HIOS_CHECK(where_[r].gpu > 0 && arrived_[size_t(r) * gpus_ + 0],
                 "simulate: the graph output '%s' ends on GPU %d and no transfer brings it to GPU 0",
                 g_.nodes[r].name.c_str(), where_[r].gpu);
      ms = std::max(ms, arrival_[size_t(r) * gpus_ + 0]);
    }
    return ms;
  }

  const Graph& g_;
  const Schedule& s_;
  const CostModel& cost_;
  const int n_;
  int gpus_ = 1;
  std::vector<Where> where_;
  std::vector<std::vector<StageRef>> run_;
  std::vector<std::vector<int>> sends_;
  std::map<std::pair<int, int>, int> transfer_of_;
  SimResult r_;
  std::vector<double> end_of_;
  std::vector<char> arrived_;
  std::vector<double> arrival_;
  std::map<std::tuple<int, int, int>, double> link_free_;  // (src, dst, lane) -> free at
  std::map<std::pair<int, int>, int> link_sent_;          // (src, dst) -> transfers started so far
  std::vector<size_t> next_;
  std::vector<char> busy_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
};

}  // namespace

SimResult simulate(const Graph& g, const Schedule& s, const CostModel& cost) { return Simulation(g, s, cost).run(); }

std::string schedule_to_pretty(const Graph& g, const Schedule& s, const SimResult& r, const std::string& cost_label) {
  std::vector<StageTime> stages;
  for (const SimStage& st : r.stages) stages.push_back({st.block, st.gpu, st.stage, st.start_ms, st.end_ms});
  std::vector<TransferTime> transfers;
  for (const SimTransfer& t : r.transfers) transfers.push_back({t.node, t.src, t.dst, t.start_ms, t.end_ms});
  return schedule_to_pretty_timed(g, s, stages, transfers, r.latency_ms, cost_label);
}

}  // namespace hios
