#include "executor/memory_plan.hpp"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <map>

#include "graph/elements.hpp"
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

std::vector<TensorUse> tensor_uses(const Graph& g, const RankProgram& p, std::vector<int>* slot_out = nullptr) {
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
    u.pinned = u.writer < 0 || u.node == p.output || g.is_result(u.node);
  }
  if (slot_out) *slot_out = std::move(slot);
  return uses;
}

// What the planner places: one tensor, or a row group's tensors as one run of memory. It is
// written by every member's writer and touched by every member's access.
struct Unit {
  std::vector<size_t> members;       // indices into the tensor uses
  std::vector<int64_t> member_start;  // each member's byte offset from the unit's start
  int64_t bytes = 0;
  std::vector<int> writers;  // empty: written before the pass
  std::vector<int> accesses;
  bool pinned = false;
  int first_write() const { return writers.empty() ? -1 : writers.front(); }
};

Unit single_unit(const std::vector<TensorUse>& uses, size_t k) {
  Unit u;
  u.members = {k};
  u.member_start = {0};
  u.bytes = uses[k].bytes;
  if (uses[k].writer >= 0) u.writers = {uses[k].writer};
  u.accesses = uses[k].accesses;
  u.pinned = uses[k].pinned;
  return u;
}

// ---------------------------------------------------------------------------------------------
// Row groups

// [begin, end) row intervals, sorted and disjoint: the rows of a group some member writes with
// data of its own (a kernel, a receive, or a copy that is not in place). Two such writers of
// one row would race.
using Rows = std::vector<std::pair<int64_t, int64_t>>;

bool rows_overlap(const Rows& a, const Rows& b) {
  for (const auto& [b0, e0] : a) {
    for (const auto& [b1, e1] : b) {
      if (b0 < e1 && b1 < e0) return true;
    }
  }
  return false;
}

// The rows of a `rows` node's output that it copies from operands that are not in place (the
// rows each operand is the first holder of, as the kernels take them).
Rows copied_rows(const RowsAttrs& a, const std::vector<int64_t>& heights, const std::vector<bool>& in_place) {
  Rows out;
  for (int64_t r = a.first; r < a.first + a.count;) {
    size_t k = 0;
    while (k < heights.size() && !(a.held[k] <= r && r < a.held[k] + heights[k])) ++k;
    if (k == heights.size()) {  // the kernel refuses it; not the planner's business
      ++r;
      continue;
    }
    int64_t end = std::min(a.held[k] + heights[k], a.first + a.count);
    for (size_t j = 0; j < k; ++j) {
      if (a.held[j] > r) end = std::min(end, a.held[j]);
    }
    if (!in_place[k]) {
      if (!out.empty() && out.back().second == r) {
        out.back().second = end;
      } else {
        out.emplace_back(r, end);
      }
    }
    r = end;
  }
  return out;
}

// The operands of a `rows` node that can share its memory at their rows: whole tensors of its
// batch, channels and width, resident on this rank and written during the pass. -1 for the rest.
std::vector<int> band_operands(const Graph& g, const Node& nd, const std::vector<int>& slot,
                               const std::vector<TensorUse>& uses) {
  std::vector<int> out;
  for (const Term& t : nd.inputs) {
    int k = -1;
    if (t.size() == 1) {
      const Value& v = t[0];
      const Shape& s = g.nodes[size_t(v.node)].shape;
      const bool whole = v.begin == 0 && (v.end < 0 || v.end == s.c);
      if (whole && s.n == 1 && s.c == nd.shape.c && s.w == nd.shape.w && slot[size_t(v.node)] >= 0 &&
          !uses[size_t(slot[size_t(v.node)])].pinned) {
        k = slot[size_t(v.node)];
      }
    }
    out.push_back(k);
  }
  return out;
}

// Union-find over the tensor uses, every member at its global row; a group's rows written with
// data of its own are kept at its root.
class RowGrouper {
 public:
  RowGrouper(const Graph& g, const RankProgram& p, const std::vector<TensorUse>& uses, const std::vector<int>& slot)
      : g_(g), uses_(uses), slot_(slot), parent_(uses.size()), row_(uses.size(), 0), written_(uses.size()) {
    for (size_t i = 0; i < uses.size(); ++i) {
      parent_[i] = i;
      const Node& nd = g.nodes[size_t(uses[i].node)];
      if (uses[i].writer >= 0) written_[i] = {{0, nd.shape.h}};  // a rows node's own: until it joins
    }
    for (const Instr& in : p.instrs) {
      if (in.kind == InstrKind::Launch && g.nodes[size_t(in.node)].op.kind == OpKind::Rows) join_rows_node(in.node);
    }
  }

  std::vector<RowGroup> groups() const {
    std::map<size_t, std::vector<size_t>> by_root;
    for (size_t i = 0; i < uses_.size(); ++i) by_root[find(i)].push_back(i);
    std::vector<RowGroup> out;
    for (const auto& [root, members] : by_root) {
      if (members.size() < 2) continue;
      RowGroup grp;
      grp.row_bytes = row_bytes_.at(root);
      for (size_t i : members) grp.members.emplace_back(uses_[i].node, row_of(i));
      out.push_back(std::move(grp));
    }
    return out;
  }

 private:
  size_t find(size_t i) const {
    while (parent_[i] != i) i = parent_[i];
    return i;
  }
  // The global row member i starts at: its row relative to its parent, summed up to the root.
  int64_t row_of(size_t i) const {
    int64_t r = 0;
    while (parent_[i] != i) {
      r += row_[i];
      i = parent_[i];
    }
    return r + row_[i];
  }

  static Rows shifted(const Rows& rows, int64_t by) {
    Rows out = rows;
    for (auto& [b, e] : out) {
      b += by;
      e += by;
    }
    return out;
  }

  // Rows node v (launched on this rank) takes in place each operand whose rows overlap its own,
  // greedily in operand order: an operand is kept when, with it, the groups joined still agree
  // on where every row is and no row has two writers (v's own copied rows included).
  void join_rows_node(int v) {
    const Node& nd = g_.nodes[size_t(v)];
    if (nd.shape.n != 1 || slot_[size_t(v)] < 0) return;
    const size_t self = size_t(slot_[size_t(v)]);
    // Launched once per pass, so v has joined nothing yet.
    if (uses_[self].pinned || find(self) != self) return;
    const RowsAttrs& a = nd.op.rows();
    const int64_t row_bytes = nd.shape.c * nd.shape.w * 4;
    const std::vector<int> ops = band_operands(g_, nd, slot_, uses_);
    std::vector<int64_t> heights;
    for (const Term& t : nd.inputs) heights.push_back(g_.value_shape(t[0]).h);
    std::vector<bool> candidate(ops.size(), false);
    for (size_t k = 0; k < ops.size(); ++k) {
      // An operand with a row in common with v (the others give v nothing).
      candidate[k] = ops[k] >= 0 && size_t(ops[k]) != self && a.held[k] < a.first + a.count &&
                     a.held[k] + heights[k] > a.first;
    }
    // All of them (their groups may only agree together: the parts of one tensor and the cuts of
    // them on one rank), else one by one.
    Join best = try_join(a, ops, heights, candidate, row_bytes);
    if (!best.ok) {
      std::vector<bool> in_place(ops.size(), false);
      for (size_t k = 0; k < ops.size(); ++k) {
        if (!candidate[k]) continue;
        in_place[k] = true;
        Join j = try_join(a, ops, heights, in_place, row_bytes);
        if (j.ok) {
          best = std::move(j);
        } else {
          in_place[k] = false;
        }
      }
    }
    if (!best.ok) return;
    // Join: v becomes the root at its global rows, each joined group's root its child.
    row_[self] = a.first;
    for (const auto& [r, s] : best.shift) {
      parent_[r] = self;
      row_[r] += s - a.first;
    }
    written_[self] = std::move(best.written);
    row_bytes_[self] = row_bytes;
  }

  struct Join {
    bool ok = false;
    std::map<size_t, int64_t> shift;  // joined group root -> the shift of its rows to v's
    Rows written;                     // every row written with data of its own, v's copies included
  };

  // Whether v can hold the operands marked in_place at their rows.
  Join try_join(const RowsAttrs& a, const std::vector<int>& ops, const std::vector<int64_t>& heights,
                const std::vector<bool>& in_place, int64_t row_bytes) const {
    Join j;
    for (size_t k = 0; k < ops.size(); ++k) {
      if (!in_place[k]) continue;
      const size_t t = size_t(ops[k]), r = find(t);
      const int64_t s = a.held[k] - row_of(t);
      auto [it, fresh] = j.shift.emplace(r, s);
      if (!fresh && it->second != s) return {};  // one group placed two ways
      if (row_bytes_.count(r) && row_bytes_.at(r) != row_bytes) return {};
    }
    if (j.shift.empty()) return {};
    j.written = copied_rows(a, heights, in_place);
    for (const auto& [r, s] : j.shift) {
      const Rows w = shifted(written_[r], s);
      if (rows_overlap(j.written, w)) return {};
      j.written.insert(j.written.end(), w.begin(), w.end());
      std::sort(j.written.begin(), j.written.end());
    }
    j.ok = true;
    return j;
  }

  const Graph& g_;
  const std::vector<TensorUse>& uses_;
  const std::vector<int>& slot_;
  std::vector<size_t> parent_;
  std::vector<int64_t> row_;  // the row member i starts at, relative to its parent (the root: absolute)
  std::vector<Rows> written_;
  std::map<size_t, int64_t> row_bytes_;
};

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

// Every access to x completes before y is first written, by any of its writers (so y may
// take x's memory).
template <class Order>
bool dead_before_written(const Unit& x, const Unit& y, const Order& order) {
  if (y.writers.empty()) return false;
  for (int w : y.writers) {
    for (int a : x.accesses) {
      if (!order.before(a, w)) return false;
    }
  }
  return true;
}

template <class Order>
bool may_share(const Unit& x, const Unit& y, const Order& order) {
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

// Whether a tensor of shape s holds its elements in row-major order in the storage.
bool row_major_storage(const Shape& s, bool nhwc) { return !nhwc || s.rank != 4 || s.c == 1 || s.h * s.w == 1; }

// Per node: 1 where its tensor is a member of one of p's row groups.
std::vector<char> row_group_members(const Graph& g, const RankProgram& p) {
  std::vector<char> in_group(g.nodes.size(), 0);
  for (const RowGroup& grp : p.row_groups) {
    for (const auto& [node, row] : grp.members) in_group[size_t(node)] = 1;
  }
  return in_group;
}

// Whether node nd can be a view inside its one input (`in_bytes` bytes; its own tensor
// `out_bytes`), and at which byte offset: a reshape at 0, a gather of one constant index along an
// axis after dims of 1 at that index's bytes (512-byte aligned in float32 bytes, so that 16-bit
// storage, which halves it, keeps it 256-byte aligned). Both tensors must hold their elements in row-major order in the storage.
bool view_offset(const Graph& g, const Node& nd, int64_t in_bytes, int64_t out_bytes, bool nhwc, int64_t* offset) {
  if (nd.inputs.size() != 1 || nd.inputs[0].size() != 1) return false;
  const Value& x = nd.inputs[0][0];
  const Shape& xs = g.nodes[size_t(x.node)].shape;
  if (x.begin != 0 || (x.end >= 0 && x.end != xs.c)) return false;  // a channel slice, not the whole tensor
  if (!row_major_storage(nd.shape, nhwc) || !row_major_storage(xs, nhwc)) return false;
  if (nd.op.kind == OpKind::Reshape) {
    *offset = 0;
    return in_bytes == out_bytes;
  }
  if (nd.op.kind != OpKind::Gather || nd.op.as<GatherAttrs>().elements) return false;
  const Constant* idx = nd.constant(1);
  if (!idx || nd.constant(0) || idx->shape.numel() != 1 || is_float(idx->dtype) || idx->data.empty()) return false;
  const int axis = nd.op.as<GatherAttrs>().axis;
  if (axis < 0 || axis >= xs.rank) return false;
  int64_t inner = 1;
  for (int d = 0; d < xs.rank; ++d) {
    if (d < axis && xs.dim(d) != 1) return false;  // the rows taken are not one run of memory
    if (d > axis) inner *= xs.dim(d);
  }
  int64_t v = load_int(idx->data.data(), idx->dtype, 0);
  if (v < 0) v += xs.dim(axis);
  if (v < 0 || v >= xs.dim(axis) || in_bytes % xs.numel() != 0) return false;
  const int64_t element = in_bytes / xs.numel();
  *offset = v * inner * element;
  return out_bytes == inner * element && (*offset / element * 4) % (2 * kArenaAlignment) == 0;
}

// The nodes whose tensors can be views inside their input (view_offset): launched on this rank,
// both tensors resident, written during the pass, not kept after it and in no row group. In
// launch order, so a view's input that is a view itself comes first.
std::vector<ArenaView> find_views(const Graph& g, const RankProgram& p, const std::vector<TensorUse>& uses,
                                   const std::vector<int>& slot, const MemoryPlanOptions& opt) {
  const std::vector<char> in_group = row_group_members(g, p);
  auto free_tensor = [&](int node) {
    return slot[size_t(node)] >= 0 && !uses[size_t(slot[size_t(node)])].pinned && !in_group[size_t(node)];
  };
  std::vector<ArenaView> views;
  for (const Instr& in : p.instrs) {
    if (in.kind != InstrKind::Launch) continue;
    const Node& nd = g.nodes[size_t(in.node)];
    if (nd.op.kind != OpKind::Reshape && nd.op.kind != OpKind::Gather) continue;
    if (nd.inputs.size() != 1 || nd.inputs[0].size() != 1) continue;
    const int of = nd.inputs[0][0].node;
    if (!free_tensor(in.node) || !free_tensor(of)) continue;
    ArenaView v;
    v.node = in.node;
    v.of = of;
    if (view_offset(g, nd, uses[size_t(slot[size_t(of)])].bytes, uses[size_t(slot[size_t(in.node)])].bytes, opt.nhwc,
                    &v.offset)) {
      views.push_back(v);
    }
  }
  return views;
}

// The units to place: every row group as one (its members at their rows, the group's first row
// at the unit's start), every chain of views as one (each at its offset from the chain's root),
// every other tensor alone.
std::vector<Unit> make_units(const Graph& g, const std::vector<TensorUse>& uses, const std::vector<int>& slot,
                             const std::vector<RowGroup>& groups, const std::vector<ArenaView>& views) {
  std::vector<Unit> units;
  std::vector<char> grouped(uses.size(), 0);
  // Each view's tensor at its offset from the tensor at the root of its chain of views.
  std::map<int, std::pair<int, int64_t>> place;  // node -> {root node, bytes from the root's start}
  for (const ArenaView& v : views) {
    const auto it = place.find(v.of);
    const std::pair<int, int64_t> at = it == place.end() ? std::pair<int, int64_t>{v.of, 0} : it->second;
    place[v.of] = at;
    place[v.node] = {at.first, at.second + v.offset};
  }
  std::map<int, std::vector<std::pair<size_t, int64_t>>> chains;  // root node -> {use, start}
  for (const auto& [node, at] : place) chains[at.first].emplace_back(size_t(slot.at(size_t(node))), at.second);
  // Member k of u at `start` bytes from its beginning; done() sorts what the members gave.
  auto add_member = [&](Unit& u, size_t k, int64_t start) {
    grouped[k] = 1;
    u.members.push_back(k);
    u.member_start.push_back(start);
    if (uses[k].writer >= 0) u.writers.push_back(uses[k].writer);
    u.accesses.insert(u.accesses.end(), uses[k].accesses.begin(), uses[k].accesses.end());
    u.pinned = u.pinned || uses[k].pinned;
  };
  auto done = [&](Unit& u) {
    std::sort(u.writers.begin(), u.writers.end());
    std::sort(u.accesses.begin(), u.accesses.end());
    u.accesses.erase(std::unique(u.accesses.begin(), u.accesses.end()), u.accesses.end());
    units.push_back(std::move(u));
  };
  for (const RowGroup& grp : groups) {
    Unit u;
    int64_t low = INT64_MAX, high = INT64_MIN;
    for (const auto& [node, row] : grp.members) {
      low = std::min(low, row);
      high = std::max(high, row + g.nodes[size_t(node)].shape.h);
    }
    u.bytes = (high - low) * grp.row_bytes;
    for (const auto& [node, row] : grp.members) add_member(u, size_t(slot.at(size_t(node))), (row - low) * grp.row_bytes);
    done(u);
  }
  for (const auto& [root, members] : chains) {
    Unit u;
    for (const auto& [k, start] : members) {
      add_member(u, k, start);
      u.bytes = std::max(u.bytes, start + uses[k].bytes);
    }
    done(u);
  }
  for (size_t k = 0; k < uses.size(); ++k) {
    if (!grouped[k]) units.push_back(single_unit(uses, k));
  }
  return units;
}

}  // namespace

MemoryPlanOptions memory_plan_options(const std::string& layout, const Graph& g) {
  MemoryPlanOptions o;
  o.rows_in_place = layout == "nhwc" && g.batch == 1;
  o.views = true;
  o.nhwc = layout == "nhwc";
  return o;
}

void share_buffers(const Graph& g, RankProgram& p, const MemoryPlanOptions& opt) {
  std::vector<int> slot;
  const std::vector<TensorUse> uses = tensor_uses(g, p, &slot);
  p.row_groups.clear();
  if (opt.rows_in_place) p.row_groups = RowGrouper(g, p, uses, slot).groups();
  p.views.clear();
  if (opt.views) p.views = find_views(g, p, uses, slot, opt);
  const std::vector<Unit> units = make_units(g, uses, slot, p.row_groups, p.views);
  const StreamOrder order(p);
  // Pinned units first, each alone; then the rest in a given order, each at the lowest offset
  // that no conflicting, already placed unit covers. Returns the arena size.
  auto place = [&](const std::vector<size_t>& sequence, std::vector<int64_t>& offset) {
    offset.assign(units.size(), -1);
    std::vector<size_t> placed;
    int64_t arena = 0;
    for (size_t k : sequence) {
      const Unit& y = units[k];
      std::vector<std::pair<int64_t, int64_t>> busy;  // [begin, end) of conflicting units
      for (size_t j : placed) {
        if (!may_share(units[j], y, order)) busy.emplace_back(offset[j], offset[j] + align_up(units[j].bytes));
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
  std::vector<size_t> by_write(units.size());
  for (size_t i = 0; i < units.size(); ++i) by_write[i] = i;
  std::stable_sort(by_write.begin(), by_write.end(), [&](size_t a, size_t b) {
    if (units[a].pinned != units[b].pinned) return units[a].pinned;
    return units[a].first_write() < units[b].first_write();
  });
  std::vector<size_t> by_size = by_write;
  std::stable_sort(by_size.begin(), by_size.end(), [&](size_t a, size_t b) {
    if (units[a].pinned != units[b].pinned) return units[a].pinned;
    return align_up(units[a].bytes) > align_up(units[b].bytes);
  });
  std::vector<int64_t> offset, sized;
  int64_t arena = place(by_write, offset);
  const int64_t arena_by_size = place(by_size, sized);
  if (arena_by_size < arena) {
    arena = arena_by_size;
    offset = std::move(sized);
  }
  for (size_t k = 0; k < units.size(); ++k) {
    for (size_t m = 0; m < units[k].members.size(); ++m) {
      p.instrs[size_t(uses[units[k].members[m]].alloc)].offset = offset[k] + units[k].member_start[m];
    }
  }
  p.arena_bytes = arena;
}

namespace {

// A row group's own problems: members away from their rows, a member's size not its rows, an
// in-place operand of a member `rows` node not at the row the node reads it from, and a row
// written with data of its own by two members.
void check_row_group(const Graph& g, const RankProgram& p, const RowGroup& grp, const std::vector<TensorUse>& uses,
                     const std::vector<int>& slot, std::vector<std::string>& errs) {
  std::map<int, int64_t> row_of;
  int64_t origin = 0;
  bool first = true;
  for (const auto& [node, row] : grp.members) {
    const Node& nd = g.nodes[size_t(node)];
    if (node < 0 || slot[size_t(node)] < 0) {
      errs.push_back(strprintf("rank %d: row group member %d is not a tensor of the rank", p.rank, node));
      return;
    }
    const TensorUse& u = uses[size_t(slot[size_t(node)])];
    const int64_t off = p.instrs[size_t(u.alloc)].offset;
    if (nd.shape.n != 1 || u.bytes != nd.shape.h * grp.row_bytes) {
      errs.push_back(strprintf("rank %d: tensor '%s' (%s) in a row group of %lld-byte rows is not a band of them",
                               p.rank, nd.name.c_str(), nd.shape.str().c_str(), (long long)grp.row_bytes));
    }
    const int64_t o = off - row * grp.row_bytes;
    if (!first && o != origin) {
      errs.push_back(strprintf("rank %d: tensor '%s' is not at the address of its row %lld in its row group", p.rank,
                               nd.name.c_str(), (long long)row));
    }
    origin = first ? o : origin;
    first = false;
    row_of[node] = row;
  }
  std::vector<std::pair<Rows, int>> written;  // rows, node
  for (const auto& [node, row] : grp.members) {
    const Node& nd = g.nodes[size_t(node)];
    const TensorUse& u = uses[size_t(slot[size_t(node)])];
    if (u.writer < 0) continue;
    Rows rows{{row, row + nd.shape.h}};
    const Instr& w = p.instrs[size_t(u.writer)];
    if (w.kind == InstrKind::Launch && nd.op.kind == OpKind::Rows) {
      const RowsAttrs& a = nd.op.rows();
      std::vector<int64_t> heights;
      std::vector<bool> in_place;
      for (size_t k = 0; k < nd.inputs.size(); ++k) {
        const Value& v = nd.inputs[k].at(0);
        heights.push_back(g.value_shape(v).h);
        auto it = row_of.find(v.node);
        const bool same = it != row_of.end() && nd.inputs[k].size() == 1;
        if (same && it->second != a.held[k]) {
          errs.push_back(strprintf("rank %d: rows node '%s' reads '%s' from row %lld, but the row group holds it at "
                                   "row %lld",
                                   p.rank, nd.name.c_str(), g.nodes[size_t(v.node)].name.c_str(),
                                   (long long)a.held[k], (long long)it->second));
        }
        in_place.push_back(same);
      }
      if (row != a.first) {
        errs.push_back(strprintf("rank %d: rows node '%s' computes rows from %lld but sits at row %lld of its group",
                                 p.rank, nd.name.c_str(), (long long)a.first, (long long)row));
      }
      rows = copied_rows(a, heights, in_place);
    }
    for (const auto& [other, by] : written) {
      if (rows_overlap(rows, other)) {
        errs.push_back(strprintf("rank %d: tensors '%s' and '%s' of one row group both write the same rows", p.rank,
                                 g.nodes[size_t(by)].name.c_str(), nd.name.c_str()));
      }
    }
    written.emplace_back(rows, node);
  }
}

// A view's own problems: not a node that can be a view of that input at that offset (its
// shapes, sizes and index decide it, as when planned; the storage's order is the backend's to
// check, which refuses a view of a tensor not in row-major order), not both tensors resident
// and unpinned, a member of a row group too, or not at its offset from its input's address.
void check_views(const Graph& g, const RankProgram& p, const std::vector<TensorUse>& uses,
                 const std::vector<int>& slot, std::vector<std::string>& errs) {
  const std::vector<char> in_group = row_group_members(g, p);
  for (const ArenaView& v : p.views) {
    if (v.node < 0 || v.node >= g.size() || v.of < 0 || v.of >= g.size()) {
      errs.push_back(strprintf("rank %d: a view names node %d of %d", p.rank, std::max(v.node, v.of), g.size()));
      continue;
    }
    const Node& nd = g.nodes[size_t(v.node)];
    const std::string what = strprintf("rank %d: view '%s' of '%s'", p.rank, nd.name.c_str(),
                                       g.nodes[size_t(v.of)].name.c_str());
    if (slot[size_t(v.node)] < 0 || slot[size_t(v.of)] < 0) {
      errs.push_back(what + ": not both tensors of the rank");
      continue;
    }
    const TensorUse &a = uses[size_t(slot[size_t(v.node)])], &b = uses[size_t(slot[size_t(v.of)])];
    int64_t offset = -1;
    if (nd.inputs.size() != 1 || nd.inputs[0].size() != 1 || nd.inputs[0][0].node != v.of ||
        !view_offset(g, nd, b.bytes, a.bytes, /*nhwc=*/false, &offset) || offset != v.offset) {
      errs.push_back(what + strprintf(": not a view of that tensor at offset %lld", (long long)v.offset));
    } else if (a.pinned || b.pinned || in_group[size_t(v.node)] || in_group[size_t(v.of)]) {
      errs.push_back(what + ": a tensor kept after the pass or in a row group");
    } else if (p.instrs[size_t(a.alloc)].offset != p.instrs[size_t(b.alloc)].offset + v.offset) {
      errs.push_back(what + ": not at its offset from its input's address");
    }
  }
}

}  // namespace

std::vector<std::string> check_shared_buffers(const Graph& g, const RankProgram& p) {
  std::vector<std::string> errs;
  std::vector<int> slot;
  const std::vector<TensorUse> uses = tensor_uses(g, p, &slot);
  for (const RowGroup& grp : p.row_groups) check_row_group(g, p, grp, uses, slot, errs);
  check_views(g, p, uses, slot, errs);
  if (!errs.empty()) return errs;
  const std::vector<Unit> units = make_units(g, uses, slot, p.row_groups, p.views);
  const ReachOrder order(p);
  auto name = [&](const Unit& u) { return g.nodes[size_t(uses[u.members[0]].node)].name; };
  std::vector<int64_t> start(units.size());
  for (size_t k = 0; k < units.size(); ++k) {
    const Unit& u = units[k];
    start[k] = p.instrs[size_t(uses[u.members[0]].alloc)].offset - u.member_start[0];
    if (start[k] < 0 || start[k] % kArenaAlignment != 0 || start[k] + u.bytes > p.arena_bytes) {
      errs.push_back(strprintf("rank %d: tensor '%s' at offset %lld (%lld B) is not an aligned place inside the "
                               "%lld-byte arena",
                               p.rank, name(u).c_str(), (long long)start[k], (long long)u.bytes,
                               (long long)p.arena_bytes));
    }
  }
  for (size_t i = 0; i < units.size(); ++i) {
    for (size_t j = i + 1; j < units.size(); ++j) {
      if (start[i] + units[i].bytes <= start[j] || start[j] + units[j].bytes <= start[i]) continue;
      if (!may_share(units[i], units[j], order)) {
        errs.push_back(strprintf("rank %d: tensors '%s' and '%s' overlap in memory but may be live at the same time",
                                 p.rank, name(units[i]).c_str(), name(units[j]).c_str()));
      }
    }
  }
  return errs;
}

RowsCopies rows_copies(const Graph& g, const RankProgram& p) {
  std::map<int, int64_t> row_of;  // members of every group: their row
  std::map<int, size_t> group_of;
  for (size_t i = 0; i < p.row_groups.size(); ++i) {
    for (const auto& [node, row] : p.row_groups[i].members) {
      row_of[node] = row;
      group_of[node] = i;
    }
  }
  RowsCopies c;
  for (const Instr& in : p.instrs) {
    if (in.kind != InstrKind::Launch) continue;
    const Node& nd = g.nodes[size_t(in.node)];
    if (nd.op.kind != OpKind::Rows) continue;
    ++c.launched;
    const RowsAttrs& a = nd.op.rows();
    std::vector<int64_t> heights;
    std::vector<bool> in_place;
    const auto self = group_of.find(in.node);
    for (size_t k = 0; k < nd.inputs.size(); ++k) {
      const Value& v = nd.inputs[k].at(0);
      heights.push_back(g.value_shape(v).h);
      const auto it = group_of.find(v.node);
      in_place.push_back(self != group_of.end() && it != group_of.end() && it->second == self->second &&
                         row_of.at(v.node) == a.held[k]);
    }
    int64_t rows = 0;
    for (const auto& [b, e] : copied_rows(a, heights, in_place)) rows += e - b;
    if (rows == 0) ++c.in_place;
    c.bytes_copied += rows * nd.shape.n * nd.shape.c * nd.shape.w * 4;
  }
  return c;
}

std::string rows_copies_summary(const Graph& g, const RankProgram& p) {
  const RowsCopies c = rows_copies(g, p);
  if (c.launched == 0) return "";
  return strprintf("rows copies: %d of %d in place (%.1f MB still copied)", c.in_place, c.launched,
                   double(c.bytes_copied) / 1e6);
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

void plan_and_check_shared_buffers(const Graph& g, RankProgram& p, const MemoryPlanOptions& opt) {
  share_buffers(g, p, opt);
  const std::vector<std::string> errs = check_shared_buffers(g, p);
  HIOS_CHECK(errs.empty(), "internal error: the shared memory plan fails its check (%zu problems): %s", errs.size(),
             errs[0].c_str());
}

}  // namespace hios::exec
