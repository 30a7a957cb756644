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

// Every rank's streams advanced in simulated time, each as far as its events and its partners'
// messages allow, round after round.
class Replayer {
 public:
  Replayer(const Graph& g, const Schedule& s, const std::vector<RankProgram>& programs, const CostModel& cost)
      : programs_(programs), cost_(cost), dur_(node_durations(g, s, cost)) {
    const int n = static_cast<int>(programs.size());
    streams_.resize(size_t(n));
    event_time_.resize(size_t(n));
    for (int r = 0; r < n; ++r) {
      const RankProgram& p = programs[r];
      streams_[r].resize(p.streams.size());
      event_time_[r].assign(static_cast<size_t>(p.num_events), -1.0);
      for (size_t i = 0; i < p.instrs.size(); ++i) {
        const Instr& in = p.instrs[i];
        if (in.kind == InstrKind::Alloc) continue;
        HIOS_CHECK(in.stream >= 0 && in.stream < static_cast<int>(p.streams.size()),
                   "replay: rank %d instruction %zu uses stream %d", r, i, in.stream);
        streams_[r][in.stream].ops.push_back(i);
      }
    }
    res_.node_start_ms.assign(g.nodes.size(), -1.0);
    res_.node_end_ms.assign(g.nodes.size(), -1.0);
    res_.rank_end_ms.assign(size_t(n), 0.0);
  }

  ReplayResult run() {
    for (;;) {
      bool progress = false, done = true;
      for (int r = 0; r < int(programs_.size()); ++r) {
        for (Cursor& c : streams_[r]) {
          while (c.next < c.ops.size() && step(r, c)) {
            ++c.next;
            progress = true;
          }
          if (c.next < c.ops.size()) done = false;
        }
      }
      if (done) break;
      if (!progress) throw_deadlock();
    }
    for (int r = 0; r < int(programs_.size()); ++r) res_.rank_end_ms[r] = streams_[r].empty() ? 0.0 : streams_[r][0].t;
    return res_;
  }

 private:
  // Rendezvous bookkeeping per (src, dst, lane): when the k-th send and the k-th receive of the
  // lane were reached.
  struct Pair {
    std::vector<double> send_at, recv_at;
  };

  // Runs the next instruction of stream c on rank r; false when it must wait.
  bool step(int r, Cursor& c) {
    const Instr& in = programs_[r].instrs[c.ops[c.next]];
    switch (in.kind) {
      case InstrKind::Launch:
        res_.node_start_ms[in.node] = c.t;
        c.t += dur_[in.node];
        res_.node_end_ms[in.node] = c.t;
        return true;
      case InstrKind::Record: event_time_[r][in.event] = c.t; return true;
      case InstrKind::Wait: {
        const double e = event_time_[r][in.event];
        if (e < 0) return false;
        c.t = std::max(c.t, e);
        return true;
      }
      case InstrKind::Send:
      case InstrKind::Recv: return message(r, c, in);
      case InstrKind::Gather: res_.latency_ms = c.t; return true;
      case InstrKind::Alloc: return true;
    }
    return true;
  }

  // A send or receive: this stream's k-th message on the pair registers its arrival once, then
  // waits for the partner to arrive at its k-th; the transfer starts when both have.
  bool message(int r, Cursor& c, const Instr& in) {
    const RankProgram& p = programs_[r];
    const bool send = in.kind == InstrKind::Send;
    const int lane = p.streams[size_t(in.stream)].lane;
    Pair& pr = pairs_[send ? std::tuple{r, in.peer, lane} : std::tuple{in.peer, r, lane}];
    std::vector<double>& mine = send ? pr.send_at : pr.recv_at;
    std::vector<double>& theirs = send ? pr.recv_at : pr.send_at;
    size_t k = 0;
    for (size_t j = 0; j < c.next; ++j) {
      const Instr& prev = p.instrs[c.ops[j]];
      if (prev.kind == in.kind && prev.peer == in.peer) ++k;
    }
    if (mine.size() == k) mine.push_back(c.t);
    if (theirs.size() <= k) return false;
    const double start = std::max(mine[k], theirs[k]);
    c.t = start + cost_.transfer_ms(double(in.bytes), send ? r : in.peer, send ? in.peer : r);
    return true;
  }

  [[noreturn]] void throw_deadlock() const {
    for (int r = 0; r < int(programs_.size()); ++r) {
      for (size_t k = 0; k < streams_[r].size(); ++k) {
        const Cursor& c = streams_[r][k];
        if (c.next < c.ops.size()) {
          const Instr& in = programs_[r].instrs[c.ops[c.next]];
          throw_error("replay: the programs deadlock; rank %d stream %zu is stuck at '%s' (instruction %zu)", r, k,
                      instr_kind_name(in.kind), c.ops[c.next]);
        }
      }
    }
    throw_error("replay: the programs deadlock");
  }

  const std::vector<RankProgram>& programs_;
  const CostModel& cost_;
  const std::vector<double> dur_;
  std::vector<std::vector<Cursor>> streams_;
  std::vector<std::vector<double>> event_time_;
  std::map<std::tuple<int, int, int>, Pair> pairs_;
  ReplayResult res_;
};

}  // namespace

ReplayResult replay_programs(const Graph& g, const Schedule& s, const std::vector<RankProgram>& programs,
                             const CostModel& cost) {
  return Replayer(g, s, programs, cost).run();
}

}  // namespace hios::exec
