#include "executor/trace_pass.hpp"

#include <algorithm>
#include <map>

#include "graph/error.hpp"
#include "graph/json_reader.hpp"
#include "scheduler/simulator.hpp"

namespace hios::exec {

namespace {

class Spans final : public PassObserver {
 public:
  explicit Spans(RankSession& s) {
    int n = 1;
    for (const Instr& in : s.program().instrs) n += timed(in) ? 2 : 0;
    first_ = s.reserve_markers(n);
  }
  static bool timed(const Instr& in) {
    return in.kind == InstrKind::Launch || in.kind == InstrKind::Send || in.kind == InstrKind::Recv;
  }
  void pass_begin(RankSession& s, bool captured) override {
    HIOS_CHECK(!captured, "internal error: a traced pass must be issued eagerly");
    s.backend().mark(first_, 0);
    next_ = first_ + 1;
  }
  void before(RankSession& s, const Instr& in) override {
    if (!timed(in)) return;
    s.backend().mark(next_, in.stream);
    items_.push_back({in, next_});
    next_ += 2;
  }
  void after(RankSession& s, const Instr& in) override {
    if (timed(in)) s.backend().mark(items_.back().marker + 1, in.stream);
  }
  // This rank's spans as JSON: [kind, node, stream, peer, block, stage, start_ms, end_ms].
  json spans(RankSession& s) const {
    json out = json::array();
    for (const Item& it : items_) {
      out.push_back(json::array({int(it.in.kind), it.in.node, it.in.stream, it.in.peer, it.in.block, it.in.stage,
                                 s.backend().marker_ms(first_, it.marker), s.backend().marker_ms(first_, it.marker + 1)}));
    }
    return out;
  }

 private:
  struct Item {
    Instr in;
    int marker;
  };
  int first_ = 0, next_ = 0;
  std::vector<Item> items_;
};

}  // namespace

std::string trace_one_pass(RankSession& session) {
  Comm& comm = session.comm();
  Spans spans(session);
  comm.barrier();
  {
    ScopedObserver tracing(session, spans);
    session.pass(/*eager=*/true);  // eager even when passes are replayed: markers cannot live in a graph
  }
  const std::vector<std::string> all = comm.allgather(spans.spans(session).dump());
  if (comm.rank() != 0) return "";

  const Graph& g = session.graph();
  SimResult r;
  Schedule meta_only;
  meta_only.meta.num_gpus = comm.size();
  for (int rank = 0; rank < int(all.size()); ++rank) {
    for (const json& e : json::parse(all[size_t(rank)])) {
      const auto kind = InstrKind(e[0].get<int>());
      const int node = e[1].get<int>();
      const double start = e[6].get<double>(), end = e[7].get<double>();
      if (kind == InstrKind::Launch) {
        SimNode n;
        n.node = node;
        n.gpu = rank;
        n.stream = e[2].get<int>();
        n.block = std::max(0, e[4].get<int>());
        n.stage = e[5].get<int>();
        n.start_ms = start;
        n.end_ms = end;
        r.nodes.push_back(n);
        r.latency_ms = std::max(r.latency_ms, end);
      } else if (kind == InstrKind::Recv) {
        // The receiver's span is the transfer as the consumer sees it: from posting the
        // receive to the data being there.
        SimTransfer t;
        t.node = node;
        t.src = e[3].get<int>();
        t.dst = rank;
        t.bytes = double(g.nodes[size_t(node)].shape.numel()) * 4.0;
        t.start_ms = start;
        t.end_ms = end;
        r.transfers.push_back(t);
      }
    }
  }
  return sim_to_chrome_trace(g, meta_only, r);
}

}  // namespace hios::exec
