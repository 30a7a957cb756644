#include "executor/memory_plan.hpp"

#include <algorithm>
#include <cstdint>

#include "graph/error.hpp"

namespace hios::exec {

namespace {

int64_t align_up(int64_t v) { return (v + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment; }

// Per resident tensor: the instruction that writes it during a pass (-1: none, written before
// the pass) and every instruction that touches it, the write included.
struct TensorUse {
  int node = -1;
  int64_t bytes = 0;
  int alloc = -1;   // index of its Alloc
  int writer = -1;
  std::vector<int> accesses;
  bool pinned = false;  // lives across passes: never shares
};

std::vector<TensorUse> tensor_uses(const Graph& g, const RankProgram& p) {
  std::vector<int> slot(g.nodes.size(), -1);
  std::vector<TensorUse> uses;
  for (int i = 0; i < int(p.instrs.size()); ++i) {
    const Instr& in = p.instrs[size_t(i)];
    if (in.kind != InstrKind::Alloc) continue;
    slot[size_t(in.node)] = int(uses.size());
    TensorUse u;
    u.node = in.node;
    u.bytes = in.bytes;
    u.alloc = i;
    uses.push_back(u);
  }
  auto touch = [&](int node, int i) {
    if (node >= 0 && slot[size_t(node)] >= 0) uses[size_t(slot[size_t(node)])].accesses.push_back(i);
  };
  for (int i = 0; i < int(p.instrs.size()); ++i) {
    const Instr& in = p.instrs[size_t(i)];
    switch (in.kind) {
      case InstrKind::Launch:
        touch(in.node, i);
        if (slot[size_t(in.node)] >= 0) uses[size_t(slot[size_t(in.node)])].writer = i;
        for (const Term& t : g.nodes[size_t(in.node)].inputs) {
          for (const Value& v : t) touch(v.node, i);
        }
        break;
      case InstrKind::Recv:
        touch(in.node, i);
        if (slot[size_t(in.node)] >= 0) uses[size_t(slot[size_t(in.node)])].writer = i;
        break;
      case InstrKind::Send:
      case InstrKind::Gather: touch(in.node, i); break;
      default: break;
    }
  }
  for (TensorUse& u : uses) {
    std::sort(u.accesses.begin(), u.accesses.end());
    u.accesses.erase(std::unique(u.accesses.begin(), u.accesses.end()), u.accesses.end());
    u.pinned = u.writer < 0 || u.node == p.output || u.node == g.output();
  }
  return uses;
}

// Vector clocks: start_[i*S + s] is the highest position on stream s known to have completed
// before instruction i starts. A Record snapshots its stream's clock; a Wait merges it in.
class StreamOrder {
 public:
  explicit StreamOrder(const RankProgram& p) : streams_(int(p.streams.size())) {
    const size_t n = p.instrs.size(), S = size_t(streams_);
    stream_.assign(n, -1);
    pos_.assign(n, 0);
    start_.assign(n * S, 0);
    std::vector<std::vector<int>> cur(S, std::vector<int>(S, 0));
    std::vector<std::vector<int>> event(size_t(p.num_events));
    std::vector<int> count(S, 0);
    for (size_t i = 0; i < n; ++i) {
      const Instr& in = p.instrs[i];
      if (in.kind == InstrKind::Alloc) continue;
      HIOS_CHECK(in.stream >= 0 && in.stream < streams_, "memory plan: instruction %zu names stream %d of %d", i,
                 in.stream, streams_);
      std::vector<int>& c = cur[size_t(in.stream)];
      if (in.kind == InstrKind::Record) {
        event.at(size_t(in.event)) = c;
      } else if (in.kind == InstrKind::Wait) {
        const std::vector<int>& e = event.at(size_t(in.event));
        HIOS_CHECK(!e.empty(), "memory plan: instruction %zu waits on event %d before any Record of it", i, in.event);
        for (size_t s = 0; s < S; ++s) c[s] = std::max(c[s], e[s]);
      } else {
        stream_[i] = in.stream;
        std::copy(c.begin(), c.end(), start_.begin() + std::ptrdiff_t(i * S));
        pos_[i] = ++count[size_t(in.stream)];
        c[size_t(in.stream)] = pos_[i];
      }
    }
  }
  bool before(int a, int b) const {
    return start_[size_t(b) * size_t(streams_) + size_t(stream_[size_t(a)])] >= pos_[size_t(a)];
  }

 private:
  int streams_;
  std::vector<int> stream_, pos_, start_;
};

// Every access to x completes before y is written (so y may take x's memory).
template <class Order>
bool dead_before_written(const TensorUse& x, const TensorUse& y, const Order& order) {
  if (y.writer < 0) return false;
  for (int a : x.accesses) {
    if (!order.before(a, y.writer)) return false;
  }
  return true;
}

template <class Order>
bool may_share(const TensorUse& x, const TensorUse& y, const Order& order) {
  if (x.pinned || y.pinned) return false;
  return dead_before_written(x, y, order) || dead_before_written(y, x, order);
}

// The checker's ordering: reachability over the instruction graph (stream successors and
// Record -> Wait edges), closed transitively with one bit set per instruction. Edges only run
// forward in program order, so one backward sweep computes it.
class ReachOrder {
 public:
  explicit ReachOrder(const RankProgram& p) : words_((p.instrs.size() + 63) / 64), reach_(p.instrs.size()) {
    const int n = int(p.instrs.size());
    std::vector<std::vector<int>> succ(p.instrs.size(), std::vector<int>());
    std::vector<int> last(p.streams.size(), -1), recorded_at(size_t(p.num_events), -1);
    for (int i = 0; i < n; ++i) {
      const Instr& in = p.instrs[size_t(i)];
      if (in.kind == InstrKind::Alloc) continue;
      const size_t s = size_t(in.stream);
      if (last[s] >= 0) succ[size_t(last[s])].push_back(i);
      last[s] = i;
      if (in.kind == InstrKind::Record) recorded_at[size_t(in.event)] = i;
      if (in.kind == InstrKind::Wait && recorded_at[size_t(in.event)] >= 0) {
        succ[size_t(recorded_at[size_t(in.event)])].push_back(i);
      }
    }
    for (int i = n - 1; i >= 0; --i) {
      std::vector<uint64_t>& r = reach_[size_t(i)];
      r.assign(words_, 0);
      for (int w : succ[size_t(i)]) {
        r[size_t(w) / 64] |= uint64_t(1) << (w % 64);
        for (size_t k = 0; k < words_; ++k) r[k] |= reach_[size_t(w)][k];
      }
    }
  }
  bool before(int a, int b) const { return (reach_[size_t(a)][size_t(b) / 64] >> (b % 64)) & 1; }

 private:
  size_t words_;
  std::vector<std::vector<uint64_t>> reach_;
};

}  // namespace

void share_buffers(const Graph& g, RankProgram& p) {
  std::vector<TensorUse> uses = tensor_uses(g, p);
  const StreamOrder order(p);
  // Pinned tensors first, each alone; then the rest in a given order, each at the lowest offset
  // that no conflicting, already placed tensor covers. Returns the arena size.
  auto place = [&](const std::vector<size_t>& sequence, std::vector<int64_t>& offset) {
    offset.assign(uses.size(), -1);
    std::vector<size_t> placed;
    int64_t arena = 0;
    for (size_t k : sequence) {
      const TensorUse& y = uses[k];
      std::vector<std::pair<int64_t, int64_t>> busy;  // [begin, end) of conflicting tensors
      for (size_t j : placed) {
        if (!may_share(uses[j], y, order)) busy.emplace_back(offset[j], offset[j] + align_up(uses[j].bytes));
      }
      std::sort(busy.begin(), busy.end());
      const int64_t need = align_up(y.bytes);
      int64_t at = 0;
      for (const auto& [b, e] : busy) {
        if (b >= at + need) break;  // the gap before this range fits
        at = std::max(at, e);
      }
      offset[k] = at;
      arena = std::max(arena, at + need);
      placed.push_back(k);
    }
    return arena;
  };
  // Two orders, the smaller arena kept. In write order a short-lived early tensor can push a
  // long-lived large one up (inception_v3 at 2048 pixels: 584.6 MB against 450.6); largest first
  // puts the large tensors low and fits the small ones around them, which is usually better but
  // not always, so both are tried (ties keep write order).
  std::vector<size_t> by_write(uses.size());
  for (size_t i = 0; i < uses.size(); ++i) by_write[i] = i;
  std::stable_sort(by_write.begin(), by_write.end(), [&](size_t a, size_t b) {
    if (uses[a].pinned != uses[b].pinned) return uses[a].pinned;
    return uses[a].writer < uses[b].writer;
  });
  std::vector<size_t> by_size = by_write;
  std::stable_sort(by_size.begin(), by_size.end(), [&](size_t a, size_t b) {
    if (uses[a].pinned != uses[b].pinned) return uses[a].pinned;
    return align_up(uses[a].bytes) > align_up(uses[b].bytes);
  });
  std::vector<int64_t> offset, sized;
  int64_t arena = place(by_write, offset);
  const int64_t arena_by_size = place(by_size, sized);
  if (arena_by_size < arena) {
    arena = arena_by_size;
    offset = std::move(sized);
  }
  for (size_t k = 0; k < uses.size(); ++k) p.instrs[size_t(uses[k].alloc)].offset = offset[k];
  p.arena_bytes = arena;
}

std::vector<std::string> check_shared_buffers(const Graph& g, const RankProgram& p) {
  std::vector<std::string> errs;
  const std::vector<TensorUse> uses = tensor_uses(g, p);
  const ReachOrder order(p);
  auto name = [&](const TensorUse& u) { return g.nodes[size_t(u.node)].name; };
  for (const TensorUse& u : uses) {
    const int64_t off = p.instrs[size_t(u.alloc)].offset;
    if (off < 0 || off % kArenaAlignment != 0 || off + u.bytes > p.arena_bytes) {
      errs.push_back(strprintf("rank %d: tensor '%s' at offset %lld (%lld B) is not an aligned place inside the "
                               "%lld-byte arena",
                               p.rank, name(u).c_str(), (long long)off, (long long)u.bytes, (long long)p.arena_bytes));
    }
  }
  for (size_t i = 0; i < uses.size(); ++i) {
    for (size_t j = i + 1; j < uses.size(); ++j) {
      const int64_t a0 = p.instrs[size_t(uses[i].alloc)].offset, b0 = p.instrs[size_t(uses[j].alloc)].offset;
      if (a0 + uses[i].bytes <= b0 || b0 + uses[j].bytes <= a0) continue;
      if (!may_share(uses[i], uses[j], order)) {
        errs.push_back(strprintf("rank %d: tensors '%s' and '%s' overlap in memory but may be live at the same time",
                                 p.rank, name(uses[i]).c_str(), name(uses[j]).c_str()));
      }
    }
  }
  return errs;
}

std::string arena_description(const Graph& g, const RankProgram& p) {
  int tensors = 0;
  const Instr* largest = nullptr;
  for (const Instr& in : p.instrs) {
    if (in.kind != InstrKind::Alloc) continue;
    ++tensors;
    if (!largest || in.bytes > largest->bytes) largest = &in;
  }
  if (!largest) return "the tensor arena (no tensors)";
  const Node& nd = g.nodes[size_t(largest->node)];
  return strprintf("the tensor arena shared by %d tensors (largest: tensor '%s' (%s), %lld bytes)", tensors,
                   nd.name.c_str(), nd.shape.str().c_str(), (long long)largest->bytes);
}

void plan_and_check_shared_buffers(const Graph& g, RankProgram& p) {
  share_buffers(g, p);
  const std::vector<std::string> errs = check_shared_buffers(g, p);
  HIOS_CHECK(errs.empty(), "internal error: the shared memory plan fails its check (%zu problems): %s", errs.size(),
             errs[0].c_str());
}

}  // namespace hios::exec
