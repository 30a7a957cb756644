#include "executor/replay.hpp"

#include <algorithm>
#include <map>
#include <tuple>

#include "graph/error.hpp"

namespace hios::exec {

namespace {

// Each node's duration: its stage's time shared out as the simulator does.
std::vector<double> node_durations(const Graph& g, const Schedule& s, const CostModel& cost) {
  std::vector<double> dur(g.nodes.size(), 0.0);
  for (const auto& per_gpu : s.blocks) {
    for (size_t d = 0; d < per_gpu.size(); ++d) {
      for (const Stage& st : per_gpu[d]) {
        double stage = cost.stage_ms(g, st, static_cast<int>(d));
        double longest = 0;
        for (const Group& gr : st.groups) {
          double sum = 0;
          for (int v : gr.nodes) sum += cost.node_ms(g, v, static_cast<int>(d));
          longest = std::max(longest, sum);
        }
        double stretch = longest > 0 ? stage / longest : 0.0;
        for (const Group& gr : st.groups) {
          for (int v : gr.nodes) dur[v] = cost.node_ms(g, v, static_cast<int>(d)) * stretch;
        }
      }
    }
  }
  return dur;
}

struct Cursor {
  std::vector<size_t> ops;  // instruction indices on this stream, in program order
  size_t next = 0;
  double t = 0;
};

}  // namespace

ReplayResult replay_programs(const Graph& g, const Schedule& s, const std::vector<RankProgram>& programs,
                             const CostModel& cost) {
  const std::vector<double> dur = node_durations(g, s, cost);
  const int n = static_cast<int>(programs.size());
  std::vector<std::vector<Cursor>> streams(n);
  std::vector<std::vector<double>> event_time(n);
  for (int r = 0; r < n; ++r) {
    const RankProgram& p = programs[r];
    streams[r].resize(p.streams.size());
    event_time[r].assign(static_cast<size_t>(p.num_events), -1.0);
    for (size_t i = 0; i < p.instrs.size(); ++i) {
      const Instr& in = p.instrs[i];
      if (in.kind == InstrKind::Alloc) continue;
      HIOS_CHECK(in.stream >= 0 && in.stream < static_cast<int>(p.streams.size()),
                 "replay: rank %d instruction %zu uses stream %d", r, i, in.stream);
      streams[r][in.stream].ops.push_back(i);
    }
  }
  // Rendezvous bookkeeping per (src, dst, lane): when the k-th send and the k-th receive of the
  // lane were reached.
  struct Pair {
    std::vector<double> send_at, recv_at;
  };
  std::map<std::tuple<int, int, int>, Pair> pairs;
  ReplayResult res;
  res.node_start_ms.assign(g.nodes.size(), -1.0);
  res.node_end_ms.assign(g.nodes.size(), -1.0);
  res.rank_end_ms.assign(n, 0.0);

  // Advance every stream as far as it can go; repeat until all are done or none can move.
  for (;;) {
    bool progress = false, done = true;
    for (int r = 0; r < n; ++r) {
      const RankProgram& p = programs[r];
      for (Cursor& c : streams[r]) {
        while (c.next < c.ops.size()) {
          const Instr& in = p.instrs[c.ops[c.next]];
          bool moved = true;
          switch (in.kind) {
            case InstrKind::Launch:
              res.node_start_ms[in.node] = c.t;
              c.t += dur[in.node];
              res.node_end_ms[in.node] = c.t;
              break;
            case InstrKind::Record: event_time[r][in.event] = c.t; break;
            case InstrKind::Wait: {
              double e = event_time[r][in.event];
              if (e < 0) {
                moved = false;
              } else {
                c.t = std::max(c.t, e);
              }
              break;
            }
            case InstrKind::Send:
            case InstrKind::Recv: {
              bool send = in.kind == InstrKind::Send;
              const int lane = p.streams[size_t(in.stream)].lane;
              Pair& pr = pairs[send ? std::tuple{r, in.peer, lane} : std::tuple{in.peer, r, lane}];
              std::vector<double>& mine = send ? pr.send_at : pr.recv_at;
              std::vector<double>& theirs = send ? pr.recv_at : pr.send_at;
              // This stream's k-th message on the pair; register arrival once, then wait for
              // the partner to arrive at its k-th.
              size_t k = 0;
              for (size_t j = 0; j < c.next; ++j) {
                const Instr& prev = p.instrs[c.ops[j]];
                if (prev.kind == in.kind && prev.peer == in.peer) ++k;
              }
              if (mine.size() == k) mine.push_back(c.t);
              if (theirs.size() <= k) {
                moved = false;
              } else {
                double start = std::max(mine[k], theirs[k]);
                c.t = start + cost.transfer_ms(double(in.bytes), send ? r : in.peer, send ? in.peer : r);
              }
              break;
            }
            case InstrKind::Gather: res.latency_ms = c.t; break;
            case InstrKind::Alloc: break;
          }
          if (!moved) break;
          ++c.next;
          progress = true;
        }
        if (c.next < c.ops.size()) done = false;
      }
    }
    if (done) break;
    if (!progress) {
      for (int r = 0; r < n; ++r) {
        for (size_t k = 0; k < streams[r].size(); ++k) {
          const Cursor& c = streams[r][k];
          if (c.next < c.ops.size()) {
            const Instr& in = programs[r].instrs[c.ops[c.next]];
            throw_error("replay: the programs deadlock; rank %d stream %zu is stuck at '%s' (instruction %zu)", r, k,
                        instr_kind_name(in.kind), c.ops[c.next]);
          }
        }
      }
    }
  }
  for (int r = 0; r < n; ++r) res.rank_end_ms[r] = streams[r].empty() ? 0.0 : streams[r][0].t;
  return res;
}

}  // namespace hios::exec
