#include "executor/program.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "graph/error.hpp"
#include "graph/json_codec.hpp"

namespace hios::exec {

const char* instr_kind_name(InstrKind k) {
  switch (k) {
    case InstrKind::Alloc: return "alloc";
    case InstrKind::Launch: return "launch";
    case InstrKind::Record: return "record";
    case InstrKind::Wait: return "wait";
    case InstrKind::Send: return "send";
    case InstrKind::Recv: return "recv";
    case InstrKind::Gather: return "gather";
  }
  return "?";
}

static int comm_stream(const std::vector<StreamDesc>& streams, StreamKind kind, int peer, int lane) {
  for (size_t i = 0; i < streams.size(); ++i) {
    if (streams[i].kind == kind && streams[i].peer == peer && streams[i].lane == lane) return static_cast<int>(i);
  }
  return -1;
}

int RankProgram::send_stream(int peer, int lane) const { return comm_stream(streams, StreamKind::Send, peer, lane); }

int RankProgram::recv_stream(int peer, int lane) const { return comm_stream(streams, StreamKind::Recv, peer, lane); }

bool RankProgram::resident(int node) const {
  for (const Instr& in : instrs) {
    if (in.kind == InstrKind::Alloc && in.node == node) return true;
  }
  return false;
}

int64_t RankProgram::bytes_allocated() const {
  int64_t b = 0;
  for (const Instr& in : instrs) {
    if (in.kind == InstrKind::Alloc) b += in.bytes;
  }
  return b;
}

int64_t RankProgram::tensor_memory() const { return arena_bytes > 0 ? arena_bytes : bytes_allocated(); }

static int64_t tensor_bytes(const Graph& g, int v) { return g.tensor_bytes(v); }

// ---------------------------------------------------------------------------------------------
// The one walk over a rank's part of a schedule. Sender and receiver both derive the send order
// from it, which is what keeps NCCL's in-order matching right.

namespace {

struct StageRef {
  int block, stage;
  const Stage* st;
};

std::vector<StageRef> rank_stages(const Schedule& s, int rank) {
  std::vector<StageRef> out;
  for (size_t b = 0; b < s.blocks.size(); ++b) {
    if (rank >= static_cast<int>(s.blocks[b].size())) continue;
    const auto& stages = s.blocks[b][rank];
    for (size_t i = 0; i < stages.size(); ++i) out.push_back({int(b), int(i), &stages[i]});
  }
  return out;
}

// Destinations of each node's transfers, in the schedule's transfer-list order.
std::vector<std::vector<int>> destinations(const Graph& g, const Schedule& s) {
  std::vector<std::vector<int>> dst(g.nodes.size());
  for (const Transfer& t : s.transfers) dst[t.node].push_back(t.dst);
  return dst;
}

// Tensors rank `src` sends, in issue order: (node, dst) pairs.
std::vector<std::pair<int, int>> sends_of(const Graph& g, const Schedule& s, int src,
                                          const std::vector<std::vector<int>>& dst, const LaunchOrder& order) {
  std::vector<std::pair<int, int>> out;
  if (src == 0) {
    for (int in : g.inputs()) {
      for (int d : dst[size_t(in)]) out.push_back({in, d});
    }
  }
  for (const StageRef& sr : rank_stages(s, src)) {
    for (const auto& [group, v] : stage_launches(*sr.st, order)) {
      for (int d : dst[v]) out.push_back({v, d});
    }
  }
  return out;
}

void check_lowerable(const Graph& g, const Schedule& s, int rank) {
  int n = s.meta.num_gpus;
  HIOS_CHECK(rank >= 0 && rank < n, "rank %d is out of range: schedule '%s' uses %d GPU(s)", rank,
             s.meta.algorithm.c_str(), n);
  require_valid_schedule(g, s);
}

}  // namespace

std::vector<int> send_order(const Graph& g, const Schedule& s, int src, int dst, const LaunchOrder& launch) {
  std::vector<int> order;
  for (const auto& [node, d] : sends_of(g, s, src, destinations(g, s), launch)) {
    if (d == dst) order.push_back(node);
  }
  return order;
}

// ---------------------------------------------------------------------------------------------
// Send fences (schedules with a receive lead): when a sent tensor's memory may be reused.
//
// A sent tensor stays live until its Send completes, and nothing on the compute streams waits
// for a send stream before the pass's final join, so without a fence a sent tensor holds its
// memory for the whole pass. A fence is a Wait of every compute stream of a later stage on an
// event recorded after the Send. It is placed only where the receiver has provably consumed the
// tensor already: at the start of stage F of the sender, where some node of a stage after the
// one in which the receiver posts the Recv completes before the sender's stage F-1 does (through
// transfers, over any chain of ranks). Then the wait costs nothing, and it adds no cycle: the
// receiver reached the Recv without anything the sender does from stage F on. That holds for
// host replay too (blocking receives in program order), where the transport completes the
// non-blocking send at the fence (Transport::complete_sends). With link lanes the receiver's
// later stage proves only the receives of the lanes its consumers waited on; the fenced one was
// posted by then and its lane waits on nothing the sender does from stage F on, so the fence
// still closes no cycle, but it may wait for that lane.

namespace {

// The index of `rank`'s stage at which its lowering posts each tensor it receives: the walk of
// Lowerer::emit_stage and receive_up_to (which checks that it agrees).
std::map<int, int> receive_post_stages(const Graph& g, const Schedule& s, int rank, const std::vector<int>& gpu,
                                       const LaunchOrder& order) {
  std::map<int, std::vector<int>> recv_order;
  std::map<int, size_t> next;
  for (const Transfer& t : s.transfers) {
    if (t.dst == rank && !recv_order.count(t.src)) recv_order[t.src] = send_order(g, s, t.src, rank, order);
  }
  std::map<int, int> at;
  const std::vector<StageRef> stages = rank_stages(s, rank);
  for (size_t i = 0; i < stages.size(); ++i) {
    for (const auto& [group, v] : stage_launches(*stages[i].st, order)) {
      for (int u : g.predecessors(v)) {
        if (gpu[size_t(u)] == rank || at.count(u)) continue;
        const std::vector<int>& from = recv_order[gpu[size_t(u)]];
        size_t& k = next[gpu[size_t(u)]];
        while (k < from.size()) {
          const int t = from[k++];
          at[t] = int(i);
          if (t == u) break;
        }
      }
    }
  }
  return at;
}

// reach[r][i][q]: the highest index of a stage of rank q one of whose nodes completes before
// rank r's stage i does, through transfers (-1: none); reach[r][i][r] = i. A fixpoint over the
// stage graph across ranks, which check_schedule keeps acyclic.
std::vector<std::vector<std::vector<int>>> stage_reach(const Graph& g, const Schedule& s, const std::vector<int>& gpu,
                                                       const LaunchOrder& order) {
  const int ranks = s.meta.num_gpus;
  std::vector<std::vector<StageRef>> stages(static_cast<size_t>(ranks));
  std::vector<int> pos(g.nodes.size(), -1);
  for (int r = 0; r < ranks; ++r) {
    stages[size_t(r)] = rank_stages(s, r);
    for (size_t i = 0; i < stages[size_t(r)].size(); ++i) {
      for (const Group& gr : stages[size_t(r)][i].st->groups) {
        for (int v : gr.nodes) pos[size_t(v)] = int(i);
      }
    }
  }
  std::vector<std::vector<std::vector<int>>> reach(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) reach[size_t(r)].assign(stages[size_t(r)].size(), std::vector<int>(size_t(ranks), -1));
  for (bool changed = true; changed;) {
    changed = false;
    for (int r = 0; r < ranks; ++r) {
      for (size_t i = 0; i < stages[size_t(r)].size(); ++i) {
        std::vector<int> known = i > 0 ? reach[size_t(r)][i - 1] : std::vector<int>(size_t(ranks), -1);
        for (const auto& [group, v] : stage_launches(*stages[size_t(r)][i].st, order)) {
          for (int u : g.predecessors(v)) {
            const int q = gpu[size_t(u)], j = pos[size_t(u)];
            if (q == r || j < 0) continue;  // local, or the graph input (no stage)
            known[size_t(q)] = std::max(known[size_t(q)], j);
            if (j == 0) continue;
            // What completed before q's stage j-1 did completed before u, which starts after it.
            const std::vector<int>& before = reach[size_t(q)][size_t(j) - 1];
            for (int k = 0; k < ranks; ++k) known[size_t(k)] = std::max(known[size_t(k)], before[size_t(k)]);
          }
        }
        known[size_t(r)] = int(i);
        if (known != reach[size_t(r)][i]) {
          reach[size_t(r)][i] = std::move(known);
          changed = true;
        }
      }
    }
  }
  return reach;
}

}  // namespace

// (tensor, destination) -> the index of rank's stage at whose start every compute stream
// waits for that Send; sends without a provably free fence are absent.
std::map<std::pair<int, int>, int> send_fence_stages(const Graph& g, const Schedule& s, int rank,
                                                     const LaunchOrder& order) {
  std::map<std::pair<int, int>, int> out;
  if (s.meta.recv_lead < 0) return out;
  const std::vector<int> gpu = s.gpu_of(g);
  const std::vector<StageRef> mine = rank_stages(s, rank);
  std::vector<int> pos(g.nodes.size(), -1);
  for (size_t i = 0; i < mine.size(); ++i) {
    for (const Group& gr : mine[i].st->groups) {
      for (int v : gr.nodes) pos[size_t(v)] = int(i);
    }
  }
  const auto reach = stage_reach(g, s, gpu, order);
  std::map<int, std::map<int, int>> posted;  // destination -> tensor -> its Recv's stage there
  for (const Transfer& t : s.transfers) {
    if (t.src != rank || pos[size_t(t.node)] < 0) continue;  // the graph input is never reused
    if (!posted.count(t.dst)) posted[t.dst] = receive_post_stages(g, s, t.dst, gpu, order);
    auto at = posted[t.dst].find(t.node);
    if (at == posted[t.dst].end()) continue;  // the output gather: read after the pass
    for (size_t f = size_t(pos[size_t(t.node)]) + 1; f < mine.size(); ++f) {
      if (reach[size_t(rank)][f - 1][size_t(t.dst)] > at->second) {
        out[{t.node, t.dst}] = int(f);
        break;
      }
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Lowering.

namespace {

class Lowerer {
 public:
  Lowerer(const Graph& g, const Schedule& s, int rank, const LaunchOrder& order)
      : g_(g), s_(s), rank_(rank), order_(order) {}

  RankProgram run() {
    gpu_ = s_.gpu_of(g_);
    dst_ = destinations(g_, s_);
    stages_ = rank_stages(s_, rank_);
    p_.rank = rank_;
    p_.num_ranks = s_.meta.num_gpus;
    p_.graph_name = g_.name;
    p_.graph_digest = graph_digest(g_);
    p_.algorithm = s_.meta.algorithm;
    p_.launch_order = launch_order_summary(order_);
    p_.output = g_.output();

    make_streams();
    make_allocs();
    fence_stage_ = send_fence_stages(g_, s_, rank_, order_);
    if (s_.meta.recv_lead >= 0) posted_at_ = receive_post_stages(g_, s_, rank_, gpu_, order_);
    fork();
    if (rank_ == 0) {
      for (int in : g_.inputs()) emit_sends(in, -1, -1, -1);
    }
    for (size_t i = 0; i < stages_.size(); ++i) {
      if (i > 0) barrier(stages_[i - 1], stages_[i]);
      stage_index_ = static_cast<int>(i);
      emit_send_fences(stages_[i]);
      mark_stage_start(stages_[i]);
      emit_stage(stages_[i]);
    }
    stage_index_ = static_cast<int>(stages_.size());
    // The output gather: every result not computed on rank 0 is posted like any other receive,
    // then joined into stream 0 below.
    const std::vector<int> results = g_.results();
    for (int out : results) {
      if (rank_ == 0 && gpu_[size_t(out)] != 0) receive_up_to(out, -1, -1);
    }
    for (const auto& [peer, order] : recv_order_) {
      HIOS_CHECK(next_recv_[peer] == order.size(),
                 "internal error: rank %d leaves %zu receive(s) from rank %d unposted", rank_,
                 order.size() - next_recv_[peer], peer);
    }
    join();
    if (rank_ == 0) {
      for (int out : results) push({InstrKind::Gather, out, 0});
    }
    p_.num_events = next_event_;
    return std::move(p_);
  }

 private:
  void push(Instr in) { p_.instrs.push_back(in); }
  // Tagged with the stage it belongs to, for listings and error messages.
  void push_at(Instr in, int block, int stage) {
    in.block = block;
    in.stage = stage;
    push(in);
  }
  int new_event() { return next_event_++; }

  void make_streams() {
    int compute = 1;
    for (const StageRef& sr : stages_) compute = std::max(compute, static_cast<int>(sr.st->groups.size()));
    p_.num_compute_streams = compute;
    for (int i = 0; i < compute; ++i) p_.streams.push_back({StreamKind::Compute, -1});
    std::map<int, int> to, from;  // peer -> transfers of the pair
    for (const Transfer& t : s_.transfers) {
      if (t.src == rank_) ++to[t.dst];
      if (t.dst == rank_) ++from[t.src];
    }
    // A pair uses as many lanes as it has transfers, up to meta.link_lanes: both sides count
    // the same transfers, so they agree.
    const int lanes = std::max(1, s_.meta.link_lanes);
    for (const auto& [d, count] : to) {
      for (int l = 0; l < std::min(lanes, count); ++l) p_.streams.push_back({StreamKind::Send, d, l});
    }
    for (const auto& [src, count] : from) {
      for (int l = 0; l < std::min(lanes, count); ++l) p_.streams.push_back({StreamKind::Recv, src, l});
      // What this rank receives from src, in src's send order.
      recv_order_[src] = send_order(g_, s_, src, rank_, order_);
      next_recv_[src] = 0;
    }
  }

  // The lane of the pair's index-th transfer in its send order.
  int lane_of(size_t index) const { return static_cast<int>(index % size_t(std::max(1, s_.meta.link_lanes))); }

  void make_allocs() {
    std::set<int> resident;
    if (rank_ == 0) resident.insert(g_.inputs().begin(), g_.inputs().end());
    for (const StageRef& sr : stages_) {
      for (const Group& gr : sr.st->groups) {
        for (int v : gr.nodes) resident.insert(v);
      }
    }
    for (const auto& [peer, order] : recv_order_) resident.insert(order.begin(), order.end());
    for (int v : resident) {
      Instr in{InstrKind::Alloc, v};
      in.bytes = tensor_bytes(g_, v);
      push(in);
    }
  }

  // Every stream starts after stream 0 (the capture origin).
  void fork() {
    if (p_.streams.size() <= 1) return;
    int e = new_event();
    push({InstrKind::Record, -1, 0, e});
    for (size_t k = 1; k < p_.streams.size(); ++k) push({InstrKind::Wait, -1, int(k), e});
  }

  // Every stream ends before stream 0 does.
  void join() {
    for (size_t k = 1; k < p_.streams.size(); ++k) {
      int e = new_event();
      push({InstrKind::Record, -1, int(k), e});
      push({InstrKind::Wait, -1, 0, e});
    }
  }

  // Stage barrier: each stream of the previous stage records; each stream of the next stage
  // waits on every event but its own stream's (stream order already covers that one).
  void barrier(const StageRef& prev, const StageRef& next) {
    std::vector<int> events;
    const size_t next_groups = next.st->groups.size();
    for (size_t k = 0; k < prev.st->groups.size(); ++k) {
      // Only streams another stream of the next stage must wait for record an event.
      bool needed = next_groups > 1 || (next_groups == 1 && k != 0);
      if (!needed) {
        events.push_back(-1);
        continue;
      }
      int e = new_event();
      push_at({InstrKind::Record, -1, int(k), e}, prev.block, prev.stage);
      events.push_back(e);
    }
    for (size_t j = 0; j < next.st->groups.size(); ++j) {
      for (size_t k = 0; k < events.size(); ++k) {
        if (k == j || events[k] < 0) continue;
        push_at({InstrKind::Wait, -1, int(j), events[k]}, next.block, next.stage);
      }
    }
    // What any stream of the previous stage waited for is now visible to every stream.
    for (const auto& [stream, tensors] : waited_) covered_.insert(tensors.begin(), tensors.end());
    waited_.clear();
  }

  // With a receive lead, stream 0 records where each stage starts (after the barrier: the
  // previous stage is complete), so a receive stream can wait for it.
  void mark_stage_start(const StageRef& sr) {
    if (s_.meta.recv_lead < 0 || recv_order_.empty()) return;
    int e = new_event();
    push_at({InstrKind::Record, -1, 0, e}, sr.block, sr.stage);
    stage_start_event_.push_back(e);
  }

  // Posts the pending receives from y's producer up to and including y. With a receive lead L,
  // the receive stream first waits until stage (this stage - L) has started, so the NCCL
  // receive kernel is not launched, and does not hold SMs, long before its data can come.
  // Receives are posted in send order at nondecreasing stages, so these gates are monotone and
  // cannot deadlock: a stage before the gate never needs a tensor queued behind it.
  void receive_up_to(int y, int block, int stage) {
    int peer = gpu_[y];
    auto it = recv_order_.find(peer);
    HIOS_CHECK(it != recv_order_.end(), "internal error: rank %d needs '%s' from rank %d, which sends nothing here",
               rank_, g_.nodes[y].name.c_str(), peer);
    const std::vector<int>& order = it->second;
    size_t& next = next_recv_[peer];
    if (ready_event_.count(y)) return;
    const int gate_stage = std::min(stage_index_, static_cast<int>(stage_start_event_.size()) - 1) - s_.meta.recv_lead;
    while (next < order.size()) {
      const int stream = p_.recv_stream(peer, lane_of(next));
      if (s_.meta.recv_lead >= 0 && gate_stage > 0 && gate_stage > recv_gate_[stream]) {
        push_at({InstrKind::Wait, -1, stream, stage_start_event_.at(static_cast<size_t>(gate_stage))}, block, stage);
        recv_gate_[stream] = gate_stage;
      }
      int t = order[next++];
      Instr r{InstrKind::Recv, t, stream};
      r.peer = peer;
      r.bytes = tensor_bytes(g_, t);
      push_at(r, block, stage);
      auto planned = posted_at_.find(t);
      HIOS_CHECK(planned == posted_at_.end() || planned->second == stage_index_,
                 "internal error: rank %d posts the receive of '%s' at stage %d, its send fences assumed %d", rank_,
                 g_.nodes[t].name.c_str(), stage_index_, planned->second);
      int e = new_event();
      push_at({InstrKind::Record, -1, stream, e}, block, stage);
      ready_event_[t] = e;
      if (t == y) return;
    }
    throw_error("internal error: rank %d needs '%s' from rank %d, which never sends it", rank_,
                g_.nodes[y].name.c_str(), peer);
  }

  void emit_sends(int v, int stream, int block, int stage) {
    if (dst_[v].empty()) return;
    int e = -1;
    if (stream >= 0) {
      e = new_event();
      push_at({InstrKind::Record, -1, stream, e}, block, stage);
    }
    for (int d : dst_[v]) {
      const int ss = p_.send_stream(d, lane_of(sent_[d]++));
      if (e >= 0) {
        push_at({InstrKind::Wait, -1, ss, e}, block, stage);
      }
      Instr snd{InstrKind::Send, v, ss};
      snd.peer = d;
      snd.bytes = tensor_bytes(g_, v);
      push_at(snd, block, stage);
      auto fence = fence_stage_.find({v, d});
      if (fence != fence_stage_.end()) {
        const int done = new_event();
        push_at({InstrKind::Record, -1, ss, done}, block, stage);
        fence_events_[fence->second].push_back(done);
      }
    }
  }

  // Every compute stream of the stage waits for the sends fenced here (send_fence_stages), so
  // the memory plan may give their tensors' memory to what this stage and later ones write.
  void emit_send_fences(const StageRef& sr) {
    auto it = fence_events_.find(stage_index_);
    if (it == fence_events_.end()) return;
    for (size_t j = 0; j < sr.st->groups.size(); ++j) {
      for (int e : it->second) push_at({InstrKind::Wait, -1, int(j), e}, sr.block, sr.stage);
    }
  }

  // Group j runs on compute stream j; the launches of the groups interleave in the launch
  // order's sequence (executor/launch_order.hpp), each group's own order kept.
  void emit_stage(const StageRef& sr) {
    for (const auto& [group, v] : stage_launches(*sr.st, order_)) {
      const int stream = group;
      for (int u : g_.predecessors(v)) {
        if (gpu_[u] == rank_) continue;
        receive_up_to(u, sr.block, sr.stage);
        if (covered_.count(u) || waited_[stream].count(u)) continue;
        push_at({InstrKind::Wait, -1, stream, ready_event_.at(u)}, sr.block, sr.stage);
        waited_[stream].insert(u);
      }
      push_at({InstrKind::Launch, v, stream}, sr.block, sr.stage);
      p_.launched.push_back(v);
      emit_sends(v, stream, sr.block, sr.stage);
    }
  }

  const Graph& g_;
  const Schedule& s_;
  int rank_;
  const LaunchOrder& order_;
  RankProgram p_;
  std::vector<int> gpu_;
  std::vector<std::vector<int>> dst_;
  std::vector<StageRef> stages_;
  int next_event_ = 0;
  std::map<int, std::vector<int>> recv_order_;  // peer -> tensors in its send order
  std::map<int, size_t> next_recv_;             // peer -> first unposted index
  std::map<int, int> ready_event_;              // received tensor -> event recorded after its Recv
  int stage_index_ = 0;                         // index into stages_ of the stage being emitted
  std::vector<int> stage_start_event_;          // with a receive lead: event where stage i starts
  std::map<int, int> recv_gate_;                // receive stream -> latest stage it waited for
  std::map<int, size_t> sent_;                  // peer -> tensors sent to it so far
  std::map<std::pair<int, int>, int> fence_stage_;  // (sent tensor, destination) -> stage fencing it
  std::map<int, std::vector<int>> fence_events_;    // stage index -> send-done events it waits for
  std::map<int, int> posted_at_;                    // with a receive lead: tensor -> stage of its Recv
  std::set<int> covered_;                       // received tensors every compute stream has seen
  std::map<int, std::set<int>> waited_;         // this stage: stream -> received tensors waited on
};

}  // namespace

void check_launch_order(const Graph& g, const LaunchOrder& order) {
  HIOS_CHECK(order.kind == LaunchOrderKind::Topo || order.memory_bound.size() == size_t(g.size()),
             "launch order %s has classes for %zu nodes, the graph has %d", launch_order_name(order.kind),
             order.memory_bound.size(), g.size());
}

RankProgram lower(const Graph& g, const Schedule& s, int rank, const LaunchOrder& order) {
  check_lowerable(g, s, rank);
  check_launch_order(g, order);
  return Lowerer(g, s, rank, order).run();
}

std::vector<RankProgram> lower_all(const Graph& g, const Schedule& s, const LaunchOrder& order) {
  check_lowerable(g, s, 0);
  check_launch_order(g, order);
  std::vector<RankProgram> out;
  for (int r = 0; r < s.meta.num_gpus; ++r) out.push_back(Lowerer(g, s, r, order).run());
  return out;
}

RankProgram with_element_bytes(RankProgram p, size_t element_bytes) {
  const int64_t from = 4, to = int64_t(element_bytes);
  HIOS_CHECK(to == 2 || to == 4, "internal error: tensors of %zu-byte elements", element_bytes);
  if (to == from) return p;
  auto scale = [&](int64_t& v, const char* what) {
    HIOS_CHECK(v % from == 0, "internal error: %s of %lld bytes is not whole float32 elements", what, (long long)v);
    v = v / from * to;
  };
  for (Instr& in : p.instrs) {
    if (in.kind != InstrKind::Alloc && in.kind != InstrKind::Send && in.kind != InstrKind::Recv) continue;
    scale(in.bytes, "a tensor");
    if (in.offset > 0) scale(in.offset, "an arena offset");
  }
  scale(p.arena_bytes, "the arena");
  for (RowGroup& grp : p.row_groups) scale(grp.row_bytes, "a row group's row");
  for (ArenaView& v : p.views) scale(v.offset, "a view's offset");
  return p;
}

RankProgram with_element_bytes(const Graph& g, RankProgram p, size_t element_bytes) {
  if (element_bytes == 4) return with_element_bytes(std::move(p), element_bytes);
  for (int v = 0; v < g.size(); ++v) {
    const Node& nd = g.nodes[size_t(v)];
    HIOS_CHECK(is_float(nd.dtype) || g.is_input(v),
               "node '%s' holds %s values: 16-bit storage (--math fp16 or bf16) takes integer tensors as graph inputs "
               "only", nd.name.c_str(), dtype_name(nd.dtype));
  }
  p = with_element_bytes(std::move(p), element_bytes);
  for (Instr& in : p.instrs) {
    if (in.kind != InstrKind::Alloc && in.kind != InstrKind::Send && in.kind != InstrKind::Recv) continue;
    if (is_float(g.nodes.at(size_t(in.node)).dtype)) continue;
    in.bytes = g.tensor_bytes(in.node);
    if (in.kind == InstrKind::Alloc) in.offset = -1;
  }
  return p;
}

Schedule sequential_schedule(const Graph& g) {
  Schedule s = make_schedule_skeleton(g, 1);
  s.meta.algorithm = "sequential";
  s.meta.max_streams = 1;
  for (size_t b = 0; b < g.blocks.size(); ++b) {
    Stage st;
    st.groups.push_back(Group{g.blocks[b].nodes});
    s.blocks[b][0].push_back(std::move(st));
  }
  s.derive_transfers(g);
  return s;
}

// ---------------------------------------------------------------------------------------------
// Listing.

static std::string stream_label(const RankProgram& p, int k) {
  if (k < 0 || k >= static_cast<int>(p.streams.size())) return strprintf("s%d(?)", k);
  return strprintf("s%d", k);
}

static std::string stream_desc(const StreamDesc& d) {
  switch (d.kind) {
    case StreamKind::Compute: return "compute";
    // Lane 0 keeps the name a schedule without lanes has; lane l > 0 adds "/l".
    case StreamKind::Send: return strprintf("send->r%d", d.peer) + (d.lane ? strprintf("/%d", d.lane) : "");
    case StreamKind::Recv: return strprintf("recv<-r%d", d.peer) + (d.lane ? strprintf("/%d", d.lane) : "");
  }
  return "?";
}

std::string program_to_text(const Graph& g, const RankProgram& p) {
  auto name = [&](int v) { return v >= 0 && v < g.size() ? g.nodes[v].name : strprintf("#%d", v); };
  std::string out;
  out += strprintf("# hios rank program: graph %s (%s), schedule %s, rank %d of %d\n", p.graph_name.c_str(),
                   p.graph_digest.c_str(), p.algorithm.c_str(), p.rank, p.num_ranks);
  out += "# launch order: " + p.launch_order + "\n";
  out += "# streams:";
  for (size_t k = 0; k < p.streams.size(); ++k) out += strprintf(" s%zu=%s", k, stream_desc(p.streams[k]).c_str());
  out += "\n";
  int allocs = 0;
  for (const Instr& in : p.instrs) allocs += in.kind == InstrKind::Alloc;
  out += strprintf("# %d tensors (%.3f MB), %zu launches, %d events, %zu instructions\n", allocs,
                   double(p.bytes_allocated()) / 1e6, p.launched.size(), p.num_events, p.instrs.size());
  if (p.arena_bytes > 0) {
    out += strprintf("# shared arena: %.3f MB (%.2fx less than separate buffers)\n", double(p.arena_bytes) / 1e6,
                     double(p.bytes_allocated()) / double(p.arena_bytes));
  }
  if (!p.row_groups.empty()) {
    size_t members = 0;
    for (const RowGroup& grp : p.row_groups) members += grp.members.size();
    out += strprintf("# row groups: %zu, holding %zu tensors at the addresses of their rows\n", p.row_groups.size(),
                     members);
  }
  if (!p.views.empty()) {
    out += strprintf("# tensor views: %zu reshapes and gathers inside the tensor they read\n", p.views.size());
  }
  for (const Instr& in : p.instrs) {
    std::string line = strprintf("%-7s", instr_kind_name(in.kind));
    switch (in.kind) {
      case InstrKind::Alloc:
        line += strprintf(" %s %s %lld B", name(in.node).c_str(), g.nodes[in.node].shape.str().c_str(),
                          (long long)in.bytes);
        if (in.offset >= 0) line += strprintf(" @%lld", (long long)in.offset);
        for (size_t k = 0; k < p.row_groups.size(); ++k) {
          for (const auto& [node, row] : p.row_groups[k].members) {
            if (node == in.node) line += strprintf(" (row group %zu, row %lld)", k, (long long)row);
          }
        }
        break;
      case InstrKind::Launch:
        line += strprintf(" %s %s", name(in.node).c_str(), stream_label(p, in.stream).c_str());
        break;
      case InstrKind::Record:
      case InstrKind::Wait:
        line += strprintf(" e%d %s", in.event, stream_label(p, in.stream).c_str());
        break;
      case InstrKind::Send:
        line += strprintf(" %s -> r%d %s %lld B", name(in.node).c_str(), in.peer, stream_label(p, in.stream).c_str(),
                          (long long)in.bytes);
        break;
      case InstrKind::Recv:
        line += strprintf(" %s <- r%d %s %lld B", name(in.node).c_str(), in.peer, stream_label(p, in.stream).c_str(),
                          (long long)in.bytes);
        break;
      case InstrKind::Gather:
        line += strprintf(" %s %s", name(in.node).c_str(), stream_label(p, in.stream).c_str());
        break;
    }
    if (in.block >= 0) line += strprintf("  [block %d stage %d]", in.block, in.stage);
    out += line + "\n";
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Checks.

std::vector<std::string> check_programs(const Graph& g, const std::vector<RankProgram>& programs) {
  std::vector<std::string> errs;
  int n = static_cast<int>(programs.size());
  std::vector<int> launches(g.nodes.size(), 0);
  // (src, dst) -> tensors, sizes and lanes in order
  std::map<std::pair<int, int>, std::vector<std::tuple<int, int64_t, int>>> sends, recvs;
  for (int r = 0; r < n; ++r) {
    const RankProgram& p = programs[r];
    if (p.rank != r) errs.push_back(strprintf("rank mismatch: program %d says it is rank %d", r, p.rank));
    std::set<int> resident, ready, recorded;
    if (r == 0) ready.insert(g.inputs().begin(), g.inputs().end());
    int nstreams = static_cast<int>(p.streams.size());
    bool seen_pass = false;
    for (size_t i = 0; i < p.instrs.size(); ++i) {
      const Instr& in = p.instrs[i];
      std::string at = strprintf("rank %d instruction %zu (%s)", r, i, instr_kind_name(in.kind));
      if (in.kind == InstrKind::Alloc) {
        if (seen_pass) errs.push_back(at + ": alloc after the pass started");
        if (!resident.insert(in.node).second) errs.push_back(at + ": tensor allocated twice");
        continue;
      }
      seen_pass = true;
      if (in.stream < 0 || in.stream >= nstreams) {
        errs.push_back(at + strprintf(": stream %d out of range", in.stream));
        continue;
      }
      const StreamDesc& sd = p.streams[in.stream];
      switch (in.kind) {
        case InstrKind::Launch: {
          const std::string& nm = g.nodes[in.node].name;
          if (sd.kind != StreamKind::Compute) errs.push_back(at + ": '" + nm + "' launched on a comm stream");
          if (!resident.count(in.node)) errs.push_back(at + ": '" + nm + "' launched without an alloc");
          for (int u : g.predecessors(in.node)) {
            if (!ready.count(u)) {
              errs.push_back(at + ": '" + nm + "' launched before its input '" + g.nodes[u].name + "' is on rank " +
                             std::to_string(r));
            }
          }
          ++launches[in.node];
          ready.insert(in.node);
          break;
        }
        case InstrKind::Record:
          if (in.event < 0 || in.event >= p.num_events) errs.push_back(at + ": event out of range");
          if (!recorded.insert(in.event).second) errs.push_back(at + strprintf(": event e%d recorded twice", in.event));
          break;
        case InstrKind::Wait:
          if (!recorded.count(in.event)) errs.push_back(at + strprintf(": waits on e%d before it is recorded", in.event));
          break;
        case InstrKind::Send:
          if (sd.kind != StreamKind::Send || sd.peer != in.peer) errs.push_back(at + ": not on the send stream for its peer");
          if (!ready.count(in.node)) errs.push_back(at + ": sends '" + g.nodes[in.node].name + "' before it exists");
          sends[{r, in.peer}].push_back({in.node, in.bytes, sd.lane});
          break;
        case InstrKind::Recv:
          if (sd.kind != StreamKind::Recv || sd.peer != in.peer) errs.push_back(at + ": not on the recv stream for its peer");
          if (!resident.count(in.node)) errs.push_back(at + ": receives into '" + g.nodes[in.node].name + "' without an alloc");
          recvs[{in.peer, r}].push_back({in.node, in.bytes, sd.lane});
          ready.insert(in.node);
          break;
        case InstrKind::Gather:
          if (r != 0) errs.push_back(at + ": gather on a rank other than 0");
          if (!g.is_result(in.node)) errs.push_back(at + ": gathers a node that is not a graph result");
          if (!ready.count(in.node)) errs.push_back(at + ": gathers the output before it is on rank 0");
          for (size_t j = i + 1; j < p.instrs.size(); ++j) {
            if (p.instrs[j].kind != InstrKind::Gather) {
              errs.push_back(at + ": a gather is followed by other instructions");
              break;
            }
          }
          break;
        case InstrKind::Alloc: break;
      }
    }
    if (r == 0) {
      bool gathered = !p.instrs.empty() && p.instrs.back().kind == InstrKind::Gather;
      if (!gathered) errs.push_back("rank 0 does not end with the gather of the output");
    }
  }
  for (int v = g.first_computed(); v < g.size(); ++v) {
    if (launches[v] != 1) {
      errs.push_back(strprintf("node '%s' launched %d times across ranks", g.nodes[v].name.c_str(), launches[v]));
    }
  }
  std::set<std::pair<int, int>> pairs;
  for (const auto& [k, v] : sends) pairs.insert(k);
  for (const auto& [k, v] : recvs) pairs.insert(k);
  for (const auto& pr : pairs) {
    const auto& s = sends[pr];
    const auto& rv = recvs[pr];
    if (s != rv) {
      size_t i = 0;
      while (i < s.size() && i < rv.size() && s[i] == rv[i]) ++i;
      errs.push_back(strprintf("rank %d -> rank %d: %zu send(s) but %zu recv(s), first difference at message %zu",
                               pr.first, pr.second, s.size(), rv.size(), i));
    }
  }
  return errs;
}

}  // namespace hios::exec
