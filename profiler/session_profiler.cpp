#include "profiler/session_profiler.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "graph/error.hpp"
#include "graph/json_reader.hpp"

namespace hios::prof {

using exec::Instr;
using exec::InstrKind;
using exec::RankProgram;
using exec::StreamDesc;
using exec::StreamKind;

namespace {

Instr instr(InstrKind kind, int node, int stream, int event = -1, int peer = -1, int64_t bytes = 0) {
  Instr in;
  in.kind = kind;
  in.node = node;
  in.stream = stream;
  in.event = event;
  in.peer = peer;
  in.bytes = bytes;
  return in;
}

int64_t output_bytes(const Graph& g, int v) { return g.nodes[size_t(v)].shape.numel() * int64_t(sizeof(float)); }

}  // namespace

RankProgram empty_program(const Graph& g, int rank, int num_ranks) {
  RankProgram p;
  p.rank = rank;
  p.num_ranks = num_ranks;
  p.graph_name = g.name;
  p.algorithm = "measurement";
  p.num_compute_streams = 1;
  p.streams.assign(1, StreamDesc{});
  return p;
}

RankProgram measurement_program(const Graph& g, int rank, int num_ranks, int streams, int measuring_rank) {
  HIOS_CHECK(streams >= 1 && streams <= 64, "measurement program: %d streams (expected 1 to 64)", streams);
  RankProgram p = empty_program(g, rank, num_ranks);
  if (rank != measuring_rank) return p;
  p.num_compute_streams = streams;
  p.streams.assign(size_t(streams), StreamDesc{});
  for (int v = 0; v < g.size(); ++v) p.instrs.push_back(instr(InstrKind::Alloc, v, -1, -1, -1, output_bytes(g, v)));
  // Nodes are stored in topological order: index order is a valid sequential pass.
  for (int v = 0; v < g.size(); ++v) {
    if (v == g.input()) continue;
    p.instrs.push_back(instr(InstrKind::Launch, v, 0));
    p.launched.push_back(v);
    for (int j = 1; j < streams; ++j) p.standby.emplace_back(v, j);
  }
  p.output = g.output();
  p.num_events = streams;  // a stage's fork (0) and one join per stream after the first
  return p;
}

StageTimer::StageTimer(exec::RankSession& s) : s_(s) {
  HIOS_CHECK(s.program().algorithm == "measurement" && !s.program().launched.empty(),
             "internal error: stages are timed on the measuring rank of a session that loaded "
             "measurement_program()");
  marks_ = s.reserve_markers(2);
}

std::vector<NodeSamples> StageTimer::nodes(int warmup, int iters, const std::function<void(int, bool)>& around) {
  const Graph& g = s_.graph();
  for (int i = 0; i < warmup; ++i) s_.pass(true);
  exec::LaunchMarks marks(s_, around);
  std::vector<NodeSamples> out(size_t(g.size()));
  for (int v = 0; v < g.size(); ++v) out[size_t(v)].node = v;
  exec::ScopedObserver marking(s_, marks);
  for (int it = 0; it < iters; ++it) {
    s_.pass(true);
    for (int v : marks.nodes()) out[size_t(v)].wall_ms.push_back(marks.ms_since_previous(s_, v));
  }
  return out;
}

std::vector<double> StageTimer::samples(const Stage& st, int warmup, int iters, double expected_ms) {
  const int k = int(st.groups.size());
  HIOS_CHECK(k >= 1 && k <= s_.program().num_compute_streams,
             "internal error: a stage of %d groups on a measurement program of %d streams", k,
             s_.program().num_compute_streams);
  std::vector<Instr> instrs;
  if (k > 1) instrs.push_back(instr(InstrKind::Record, -1, 0, 0));
  for (int j = 1; j < k; ++j) instrs.push_back(instr(InstrKind::Wait, -1, j, 0));
  for (int j = 0; j < k; ++j) {
    for (int v : st.groups[size_t(j)].nodes) instrs.push_back(instr(InstrKind::Launch, v, j));
  }
  for (int j = 1; j < k; ++j) {
    instrs.push_back(instr(InstrKind::Record, -1, j, j));
    instrs.push_back(instr(InstrKind::Wait, -1, 0, j));
  }
  exec::Backend& b = s_.backend();
  std::vector<double> t;
  if (!b.can_capture()) {
    for (int it = -warmup; it < iters; ++it) {
      b.mark(marks_, 0);
      s_.issue(instrs);
      b.mark(marks_ + 1, 0);
      b.synchronize();
      if (it >= 0) t.push_back(b.marker_ms(marks_, marks_ + 1));
    }
    return t;
  }
  // Candidates run as CUDA Graphs, where launching costs far less than issuing eagerly; a
  // stage is timed the same way. The stage is captured `reps` times back to back in one
  // graph, so that the replay's own launch latency is spread over enough work to vanish,
  // while each copy still pays the cross-stream events a stage boundary costs in a pass.
  const int reps = expected_ms > 0 ? std::clamp(int(std::ceil(kGraphTargetMs / expected_ms)), 1, kMaxReps) : 1;
  b.begin_capture();
  try {
    for (int r = 0; r < reps; ++r) s_.issue(instrs);
  } catch (...) {
    try {
      b.end_capture();
    } catch (...) {
    }
    b.release_capture();
    throw;
  }
  b.end_capture();
  for (int it = -warmup; it < iters; ++it) {
    b.mark(marks_, 0);
    b.replay();
    b.mark(marks_ + 1, 0);
    b.synchronize();
    if (it >= 0) t.push_back(b.marker_ms(marks_, marks_ + 1) / reps);
  }
  b.release_capture();
  return t;
}

double StageTimer::stage_ms(const Stage& st, int warmup, int iters, double expected_ms) {
  return median(samples(st, warmup, iters, expected_ms));
}

namespace {

// Times the receive on the receiving rank: markers just before and after it on its stream.
class RecvTimes final : public exec::PassObserver {
 public:
  explicit RecvTimes(exec::RankSession& s) { first_ = s.reserve_markers(2); }
  void before(exec::RankSession& s, const Instr& in) override {
    if (in.kind == InstrKind::Recv) s.backend().mark(first_, in.stream);
  }
  void after(exec::RankSession& s, const Instr& in) override {
    if (in.kind == InstrKind::Recv) {
      s.backend().mark(first_ + 1, in.stream);
      pending_ = true;
    }
  }
  void pass_end(exec::RankSession& s) override {
    if (pending_) ms.push_back(s.backend().marker_ms(first_, first_ + 1));
    pending_ = false;
  }
  std::vector<double> ms;

 private:
  int first_ = 0;
  bool pending_ = false;
};

// Rank src sends node v's output to rank dst once per pass; everyone else idles.
RankProgram link_program(const Graph& g, int rank, int num_ranks, int src, int dst, int v) {
  RankProgram p = empty_program(g, rank, num_ranks);
  p.algorithm = "link measurement";
  if (rank != src && rank != dst) return p;
  const bool sender = rank == src;
  p.streams.push_back(StreamDesc{sender ? StreamKind::Send : StreamKind::Recv, sender ? dst : src});
  p.num_events = 2;
  const int64_t bytes = output_bytes(g, v);
  p.instrs.push_back(instr(InstrKind::Alloc, v, -1, -1, -1, bytes));
  p.instrs.push_back(instr(InstrKind::Record, -1, 0, 0));
  p.instrs.push_back(instr(InstrKind::Wait, -1, 1, 0));
  p.instrs.push_back(instr(sender ? InstrKind::Send : InstrKind::Recv, v, 1, -1, sender ? dst : src, bytes));
  p.instrs.push_back(instr(InstrKind::Record, -1, 1, 1));
  p.instrs.push_back(instr(InstrKind::Wait, -1, 0, 1));
  return p;
}

}  // namespace

std::vector<int> link_probe_nodes(const Graph& g, int most) {
  std::map<int64_t, int> by_size;  // bytes -> first node with that output size that feeds another
  const std::vector<std::vector<int>> succ = g.successors();
  for (int v = 0; v < g.size(); ++v) {
    if (!succ[size_t(v)].empty()) by_size.emplace(output_bytes(g, v), v);
  }
  std::vector<int> out;
  if (by_size.empty() || most < 1) return out;
  std::vector<std::pair<int64_t, int>> sizes(by_size.begin(), by_size.end());
  if (int(sizes.size()) <= most) {
    for (const auto& [b, v] : sizes) out.push_back(v);
    return out;
  }
  // Evenly in log scale between the smallest and the largest: the link model is a line
  // through sizes spanning orders of magnitude, and each decade should weigh in.
  const double lo = std::log(double(sizes.front().first)), hi = std::log(double(sizes.back().first));
  std::vector<char> taken(sizes.size(), 0);
  for (int i = 0; i < most; ++i) {
    const double want = lo + (hi - lo) * i / std::max(1, most - 1);
    size_t best = 0;
    double dist = 1e300;
    for (size_t k = 0; k < sizes.size(); ++k) {
      const double d = std::fabs(std::log(double(sizes[k].first)) - want);
      if (!taken[k] && d < dist) {
        dist = d;
        best = k;
      }
    }
    taken[best] = 1;
  }
  for (size_t k = 0; k < sizes.size(); ++k) {
    if (taken[k]) out.push_back(sizes[k].second);
  }
  return out;
}

std::vector<LinkMeasurement> measure_links(exec::RankSession& s, const std::vector<int>& nodes, int warmup,
                                           int iters) {
  exec::Comm& comm = s.comm();
  const Graph& g = s.graph();
  const int n = comm.size(), rank = comm.rank();
  HIOS_CHECK(iters >= 1 && warmup >= 0, "link measurement needs iters >= 1 and warmup >= 0");
  std::vector<LinkMeasurement> out;
  if (n < 2) return out;
  HIOS_CHECK(nodes.size() >= 2, "link measurement needs two or more transfer sizes (the graph's edges carry %zu)",
             nodes.size());
  RecvTimes recv(s);
  json mine = json::array();  // [src, dst, bytes, median ms] for the pairs this rank receives on
  {
    exec::ScopedObserver timing(s, recv);
    for (int src = 0; src < n; ++src) {
      for (int dst = 0; dst < n; ++dst) {
        if (src == dst) continue;
        for (int v : nodes) {
          s.load(link_program(g, rank, n, src, dst, v));
          recv.ms.clear();
          s.timed_passes(warmup + iters);
          if (rank == dst) {
            std::vector<double> t(recv.ms.begin() + std::min<ptrdiff_t>(warmup, ptrdiff_t(recv.ms.size())), recv.ms.end());
            // The bytes that moved: the session stores 16-bit elements under --math fp16|bf16.
            const int64_t moved = output_bytes(g, v) / 4 * int64_t(s.backend().element_bytes());
            mine.push_back(json::array({src, dst, moved, median(t)}));
          }
        }
      }
    }
  }
  std::map<std::pair<int, int>, std::vector<LinkSample>> pairs;
  for (const std::string& text : comm.allgather(mine.dump())) {
    for (const json& e : json::parse(text)) {
      pairs[{e[0].get<int>(), e[1].get<int>()}].push_back({e[2].get<int64_t>(), e[3].get<double>()});
    }
  }
  for (auto& [pair, samples] : pairs) {
    LinkMeasurement m;
    m.samples = samples;
    try {
      const LinkFit f = fit_link(samples);
      m.link = ProfileLink{pair.first, pair.second, f.latency_us, f.bandwidth_gbs};
      m.max_rel_residual = f.max_rel_residual;
    } catch (const Error& e) {
      // Time that does not grow with size (host transports of small tensors): the sizes
      // cost the same, so a constant is the honest model; it is reported as such.
      std::vector<double> t;
      for (const LinkSample& x : samples) t.push_back(x.ms);
      m.link = ProfileLink{pair.first, pair.second, median(t) * 1e3, 1e9};
      m.fit_note = e.what();
    }
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace hios::prof
