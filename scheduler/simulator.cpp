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

SimResult simulate(const Graph& g, const Schedule& s, const CostModel& cost) {
  const int n = g.size();
  int gpus = std::max(1, s.meta.num_gpus);
  for (const auto& per_gpu : s.blocks) gpus = std::max(gpus, static_cast<int>(per_gpu.size()));

  // Placement and each GPU's run of stages, blocks concatenated.
  std::vector<Where> where(n);
  where[g.input()] = {0, -1, -1, -1};
  std::vector<std::vector<StageRef>> run(gpus);
  for (size_t b = 0; b < s.blocks.size(); ++b) {
    for (size_t d = 0; d < s.blocks[b].size(); ++d) {
      for (size_t k = 0; k < s.blocks[b][d].size(); ++k) {
        const Stage& st = s.blocks[b][d][k];
        int seq = static_cast<int>(run[d].size());
        run[d].push_back({static_cast<int>(b), static_cast<int>(k), &st});
        for (size_t q = 0; q < st.groups.size(); ++q) {
          const auto& nodes = st.groups[q].nodes;
          for (size_t i = 0; i < nodes.size(); ++i) {
            int v = nodes[i];
            HIOS_CHECK(v > 0 && v < n, "simulate: block %zu GPU %zu stage %zu holds node #%d, not a schedulable node of '%s'",
                       b, d, k, v, g.name.c_str());
            HIOS_CHECK(where[v].gpu < 0, "simulate: node '%s' is scheduled twice", g.nodes[v].name.c_str());
            where[v] = {static_cast<int>(d), seq, static_cast<int>(q), static_cast<int>(i)};
          }
        }
      }
    }
  }

  // Transfers by (node, dst), and the ones each node starts when it ends.
  std::vector<std::vector<int>> sends(n);
  std::map<std::pair<int, int>, int> transfer_of;
  for (size_t t = 0; t < s.transfers.size(); ++t) {
    const Transfer& tr = s.transfers[t];
    HIOS_CHECK(tr.node >= 0 && tr.node < n, "simulate: transfers[%zu] moves node #%d, not in graph '%s'", t, tr.node,
               g.name.c_str());
    const std::string& name = g.nodes[tr.node].name;
    HIOS_CHECK(tr.src >= 0 && tr.src < gpus && tr.dst >= 0 && tr.dst < gpus && tr.src != tr.dst,
               "simulate: transfers[%zu] of '%s' goes from GPU %d to GPU %d", t, name.c_str(), tr.src, tr.dst);
    HIOS_CHECK(where[tr.node].gpu == tr.src, "simulate: transfers[%zu] sends '%s' from GPU %d but it runs on GPU %d", t,
               name.c_str(), tr.src, where[tr.node].gpu);
    HIOS_CHECK(transfer_of.emplace(std::pair{tr.node, tr.dst}, static_cast<int>(t)).second,
               "simulate: '%s' is sent to GPU %d twice", name.c_str(), tr.dst);
    sends[tr.node].push_back(static_cast<int>(t));
  }

  SimResult r;
  std::vector<double> end_of(n, -1.0);
  end_of[g.input()] = 0;
  std::vector<char> arrived(size_t(n) * gpus, 0);
  std::vector<double> arrival(size_t(n) * gpus, 0);
  std::map<std::pair<int, int>, double> link_free;
  std::vector<size_t> next(gpus, 0);
  std::vector<char> busy(gpus, 0);
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events;
  for (int t : sends[g.input()]) events.push({0.0, kReady, g.input(), s.transfers[t].dst});

  auto try_start = [&](int d, double now) {
    if (busy[d] || next[d] >= run[d].size()) return;
    const StageRef& ref = run[d][next[d]];
    const int seq = static_cast<int>(next[d]);
    for (size_t q = 0; q < ref.st->groups.size(); ++q) {
      const auto& nodes = ref.st->groups[q].nodes;
      for (size_t i = 0; i < nodes.size(); ++i) {
        int v = nodes[i];
        for (int u : g.predecessors(v)) {
          const Where& wu = where[u];
          HIOS_CHECK(wu.gpu >= 0, "simulate: '%s' reads '%s', which is not scheduled", g.nodes[v].name.c_str(),
                     g.nodes[u].name.c_str());
          if (wu.gpu != d) {
            HIOS_CHECK(transfer_of.count({u, d}), "simulate: '%s' on GPU %d reads '%s' from GPU %d, but no transfer sends it",
                       g.nodes[v].name.c_str(), d, g.nodes[u].name.c_str(), wu.gpu);
            if (!arrived[size_t(u) * gpus + d]) return;  // woken again by the arrival
            continue;
          }
          if (u == g.input()) continue;
          bool before = wu.seq < seq || (wu.seq == seq && wu.group == static_cast<int>(q) && wu.index < static_cast<int>(i));
          HIOS_CHECK(before, "simulate: '%s' reads '%s', which does not run before it on GPU %d",
                     g.nodes[v].name.c_str(), g.nodes[u].name.c_str(), d);
        }
      }
    }
    // Start now: lay the groups out back to back, stretched so the slowest ends with the stage.
    double stage = cost.stage_ms(g, *ref.st, d);
    double longest = 0;
    std::vector<std::vector<double>> times(ref.st->groups.size());
    for (size_t q = 0; q < ref.st->groups.size(); ++q) {
      double sum = 0;
      for (int v : ref.st->groups[q].nodes) {
        times[q].push_back(cost.node_ms(g, v, d));
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
        r.nodes.push_back({nodes[i], d, static_cast<int>(q), ref.block, ref.stage, t, e});
        end_of[nodes[i]] = e;
        for (int tr : sends[nodes[i]]) events.push({e, kReady, nodes[i], s.transfers[tr].dst});
        t = e;
      }
    }
    r.stages.push_back({d, ref.block, ref.stage, now, now + stage});
    busy[d] = 1;
    ++next[d];
    events.push({now + stage, kGpuFree, d, 0});
  };

  for (int d = 0; d < gpus; ++d) try_start(d, 0.0);
  while (!events.empty()) {
    auto [now, kind, a, b] = events.top();
    events.pop();
    if (kind == kGpuFree) {
      busy[a] = 0;
      try_start(a, now);
    } else if (kind == kArrive) {
      arrived[size_t(a) * gpus + b] = 1;
      arrival[size_t(a) * gpus + b] = now;
      try_start(b, now);
    } else {
      // Transfers on one directed link go one at a time, in the order they became ready.
      const Transfer& tr = s.transfers[transfer_of.at({a, b})];
      double bytes = double(g.nodes[a].shape.numel()) * dtype_size(g.dtype);
      double& free_at = link_free[{tr.src, tr.dst}];
      double start = std::max(now, free_at);
      double end = start + cost.transfer_ms(bytes, tr.src, tr.dst);
      free_at = end;
      r.transfers.push_back({a, tr.src, tr.dst, bytes, start, end});
      events.push({end, kArrive, a, b});
    }
  }

  for (int d = 0; d < gpus; ++d) {
    if (next[d] >= run[d].size()) continue;
    const StageRef& ref = run[d][next[d]];
    std::string waiting;
    for (const Group& gr : ref.st->groups) {
      for (int v : gr.nodes) {
        for (int u : g.predecessors(v)) {
          if (where[u].gpu != d && !arrived[size_t(u) * gpus + d]) {
            waiting += (waiting.empty() ? "'" : ", '") + g.nodes[u].name + "'";
          }
        }
      }
    }
    throw_error("simulate: deadlock: GPU %d stage %d of block '%s' waits forever for %s (run 'hios check')", d,
                ref.stage, ref.block < static_cast<int>(g.blocks.size()) ? g.blocks[ref.block].name.c_str() : "?",
                waiting.c_str());
  }

  const int out = g.output();
  if (where[out].gpu < 0) {
    // A partial schedule (a scheduler weighing a prefix): report its makespan.
    for (const SimNode& sn : r.nodes) r.latency_ms = std::max(r.latency_ms, sn.end_ms);
    for (const SimTransfer& st : r.transfers) r.latency_ms = std::max(r.latency_ms, st.end_ms);
    for (const SimStage& ss : r.stages) r.latency_ms = std::max(r.latency_ms, ss.end_ms);
  } else if (where[out].gpu == 0) {
    r.latency_ms = end_of[out];
  } else {
    HIOS_CHECK(arrived[size_t(out) * gpus + 0], "simulate: the graph output '%s' ends on GPU %d and no transfer brings it to GPU 0",
               g.nodes[out].name.c_str(), where[out].gpu);
    r.latency_ms = arrival[size_t(out) * gpus + 0];
  }
  return r;
}

std::string schedule_to_pretty(const Graph& g, const Schedule& s, const SimResult& r, const std::string& cost_label) {
  std::vector<StageTime> stages;
  for (const SimStage& st : r.stages) stages.push_back({st.block, st.gpu, st.stage, st.start_ms, st.end_ms});
  std::vector<TransferTime> transfers;
  for (const SimTransfer& t : r.transfers) transfers.push_back({t.node, t.src, t.dst, t.start_ms, t.end_ms});
  return schedule_to_pretty_timed(g, s, stages, transfers, r.latency_ms, cost_label);
}

}  // namespace hios
