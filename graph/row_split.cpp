#include "graph/row_split.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "graph/error.hpp"

namespace hios {

const char* split_mode_name(SplitMode m) {
  return m == SplitMode::Halo ? "halo" : m == SplitMode::Recompute ? "recompute" : "mixed";
}

namespace {

std::string rows_str(RowRange r) { return strprintf("%lld-%lld", (long long)r.begin, (long long)r.end); }

int find_block(const Graph& g, const std::string& name) {
  for (size_t b = 0; b < g.blocks.size(); ++b) {
    if (g.blocks[b].name == name) return int(b);
  }
  return -1;
}

// Rows of the tensor node v reads, whatever its terms (they share H).
int64_t input_height(const Graph& g, int v) { return g.value_shape(g.nodes[size_t(v)].inputs[0][0]).h; }

bool is_global_pool(const Op& op) {
  return op.kind == OpKind::Pool && (op.pool().kind == PoolKind::GlobalAvg || op.pool().kind == PoolKind::GlobalMax);
}

// Whether node v's bands read bands of its operands: its op reads bounded rows (row_local_op),
// on N x C x H x W tensors whose H is the rows (the general ops see tensors of any rank). An
// element-wise op splits where every operand that is an input term has the node's rows and its
// constants have none of their own (a constant is broadcast to every band); a resize where it
// keeps N and C; a softmax where its axis is not the rows.
bool row_local_node(const Graph& g, int v) {
  const Node& nd = g.nodes[size_t(v)];
  if (!row_local_op(nd.op) || nd.shape.rank != 4) return false;
  for (const Term& t : nd.inputs) {
    for (const Value& val : t) {
      if (g.nodes[size_t(val.node)].shape.rank != 4) return false;
    }
  }
  switch (nd.op.kind) {
    case OpKind::Binary:
    case OpKind::Where:
      for (const Term& t : nd.inputs) {
        for (const Value& val : t) {
          if (g.nodes[size_t(val.node)].shape.h != nd.shape.h) return false;
        }
      }
      for (const Constant& k : nd.constants) {
        if (k.shape.rank >= 2 && k.shape.dim(k.shape.rank - 2) > 1) return false;
      }
      return true;
    case OpKind::Resize: {
      const ResizeAttrs& a = nd.op.as<ResizeAttrs>();
      return a.scales.size() == 4 && a.scales[0] == 1 && a.scales[1] == 1;
    }
    case OpKind::Softmax:
      return nd.op.as<SoftmaxAttrs>().axis != 2;
    default:
      return true;
  }
}

// A global pool inside a legal region is the region's reduction (region_legal allows no other):
// its parts are partial pools, and its plan rows are the rows of its input each part sums.
bool reduces(const Graph& g, int v) { return is_global_pool(g.nodes[size_t(v)].op); }

// The height the plan's rows of node v refer to: its own, or its input's for the reduction.
int64_t plan_height(const Graph& g, int v) {
  return reduces(g, v) ? input_height(g, v) : g.nodes[size_t(v)].shape.h;
}

// The rows of its input that node c reads to produce (plan) rows `out`; a partial pool reads
// exactly the input rows it sums.
RowRange needed_rows(const Graph& g, int c, RowRange out) {
  if (reduces(g, c)) return out;
  return input_rows_op(g.nodes[size_t(c)].op, out, input_height(g, c));
}

RowRange hull(RowRange a, RowRange b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  return {std::min(a.begin, b.begin), std::max(a.end, b.end)};
}
bool inside(RowRange inner, RowRange outer) { return inner.begin >= outer.begin && inner.end <= outer.end; }

std::vector<int> region_nodes(const Graph& g, int first, int last) {
  std::vector<int> out;
  for (int b = first; b <= last; ++b) {
    const std::vector<int>& members = g.blocks[size_t(b)].nodes;
    out.insert(out.end(), members.begin(), members.end());
  }
  std::sort(out.begin(), out.end());  // node indices are topological
  return out;
}

// How the nodes of blocks [first, last] split. The first global pool of the last block, if
// any, is the reduction that ends the region (`reduce`): its parts are partial pools whose sum
// (an add that keeps its name) is the whole pool. The nodes of the last block that depend on
// it (`tail`: a linear, a softmax) stay whole and read that sum. Every other node, the
// reduction included, is `split` by rows (region_legal says whether that is possible).
struct Layout {
  std::vector<int> split;  // topological order
  int reduce = -1;
  std::vector<int> tail;  // topological order
};

Layout region_layout(const Graph& g, int first, int last) {
  Layout l;
  std::vector<char> after(g.nodes.size(), 0);  // the reduction or a node that depends on it
  for (int v : g.blocks[size_t(last)].nodes) {  // topological
    const Node& nd = g.nodes[size_t(v)];
    if (l.reduce < 0 && is_global_pool(nd.op)) {
      l.reduce = v;
      after[size_t(v)] = 1;
      continue;
    }
    for (const Term& t : nd.inputs) {
      for (const Value& val : t) {
        if (after[size_t(val.node)]) after[size_t(v)] = 1;
      }
    }
  }
  for (int v : region_nodes(g, first, last)) {
    if (v != l.reduce && after[size_t(v)]) {
      l.tail.push_back(v);
    } else {
      l.split.push_back(v);
    }
  }
  return l;
}

}  // namespace

bool region_legal(const Graph& g, int first, int last, int parts, std::string* why) {
  auto fail = [&](std::string msg) {
    if (why) *why = std::move(msg);
    return false;
  };
  if (first < 0 || last < first || last >= int(g.blocks.size())) return fail("no such run of blocks");
  const std::vector<int> nodes = region_nodes(g, first, last);
  const Layout layout = region_layout(g, first, last);
  std::vector<char> in_region(g.nodes.size(), 0), split(g.nodes.size(), 0);
  for (int v : nodes) in_region[size_t(v)] = 1;
  for (int v : layout.split) split[size_t(v)] = 1;
  for (int v : layout.split) {
    const Node& nd = g.nodes[size_t(v)];
    if (row_window(nd.op).banded()) return fail(strprintf("node '%s' is already a band of a split", nd.name.c_str()));
    if (v == layout.reduce && nd.op.pool().kind == PoolKind::GlobalMax) {
      return fail(strprintf("node '%s' is a global max pool: partial maxima would need an element-wise max to "
                            "combine them, which the op table lacks",
                            nd.name.c_str()));
    }
    if (v != layout.reduce &&
        (nd.op.kind == OpKind::Input || nd.op.kind == OpKind::Rows || !row_local_node(g, v))) {
      return fail(strprintf("node '%s' (%s) reads every row of its input, so it cannot be split by rows",
                            nd.name.c_str(), describe_op(nd.op).c_str()));
    }
    if (plan_height(g, v) < parts) {
      return fail(strprintf("node '%s' has %lld rows%s, fewer than %d parts", nd.name.c_str(),
                            (long long)plan_height(g, v), v == layout.reduce ? " in its input" : "", parts));
    }
  }
  // The nodes after the reduction stay whole, so they may read only its sum, each other, or
  // whole tensors from before the region.
  for (int v : layout.tail) {
    const Node& nd = g.nodes[size_t(v)];
    if (nd.op.kind == OpKind::Rows) return fail(strprintf("node '%s' is already a band of a split", nd.name.c_str()));
    for (const Term& t : nd.inputs) {
      for (const Value& val : t) {
        if (split[size_t(val.node)] && val.node != layout.reduce) {
          return fail(strprintf("node '%s' reads '%s', whose rows are split, next to the reduction '%s'; only the "
                                "reduction's sum is whole after it",
                                nd.name.c_str(), g.nodes[size_t(val.node)].name.c_str(),
                                g.nodes[size_t(layout.reduce)].name.c_str()));
        }
      }
    }
  }
  const int exit = g.blocks[size_t(last)].exit;
  for (size_t c = 0; c < g.nodes.size(); ++c) {
    if (in_region[c]) continue;
    for (const Term& t : g.nodes[c].inputs) {
      for (const Value& val : t) {
        if (in_region[size_t(val.node)] && val.node != exit) {
          return fail(strprintf("node '%s' after the region reads '%s', which is not the region's last node",
                                g.nodes[c].name.c_str(), g.nodes[size_t(val.node)].name.c_str()));
        }
      }
    }
  }
  return true;
}

std::vector<std::pair<int, int>> splittable_runs(const Graph& g, int parts) {
  // Grow each run as far as it stays legal; a legal run's prefix can be illegal (a later block
  // reads an inner node) while the longer run is legal, so try every end and keep the longest.
  std::vector<std::pair<int, int>> runs;
  const int nb = int(g.blocks.size());
  int b = 0;
  while (b < nb) {
    int best = -1;
    for (int e = b; e < nb; ++e) {
      bool nodes_ok = true;
      for (int v : g.blocks[size_t(e)].nodes) {
        const Node& nd = g.nodes[size_t(v)];
        if (nd.op.kind == OpKind::Rows || !row_local_node(g, v) || nd.shape.h < parts) nodes_ok = false;
      }
      // A block that is not row-local throughout can only end a run: the one with a global
      // average pool reduces partial results there (region_legal decides).
      if (region_legal(g, b, e, parts)) best = e;
      if (!nodes_ok) break;
    }
    if (best >= 0) {
      runs.push_back({b, best});
      b = best + 1;
    } else {
      ++b;
    }
  }
  return runs;
}

namespace {

// The rows each part of every split node of blocks [first, last] computes, by node index. In
// halo mode every node is partitioned. Otherwise a node computes, per part, the hull of what
// that part's consumers read, walking backwards; a sync point (`sync`, by node index: the
// region's last node, the reduction, and in mixed mode the chosen block exits) is partitioned
// instead, so its consumers get their halos from neighbours and the overlap stops growing there.
std::vector<std::vector<RowRange>> plan_rows(const Graph& g, const Layout& layout, int exit, int parts, SplitMode mode,
                                             const std::vector<char>& sync) {
  std::vector<std::vector<RowRange>> rows(g.nodes.size());
  std::vector<char> in_region(g.nodes.size(), 0);
  for (int v : layout.split) in_region[size_t(v)] = 1;
  if (mode == SplitMode::Halo) {
    for (int v : layout.split) rows[size_t(v)] = split_rows(plan_height(g, v), parts);
    return rows;
  }
  const auto succ = g.successors();
  for (auto it = layout.split.rbegin(); it != layout.split.rend(); ++it) {
    const int v = *it;
    if (v == exit || v == layout.reduce || sync[size_t(v)]) {
      rows[size_t(v)] = split_rows(plan_height(g, v), parts);
      continue;
    }
    rows[size_t(v)].assign(size_t(parts), RowRange{});
    for (int c : succ[size_t(v)]) {
      if (!in_region[size_t(c)]) continue;
      for (int k = 0; k < parts; ++k) {
        rows[size_t(v)][size_t(k)] = hull(rows[size_t(v)][size_t(k)], needed_rows(g, c, rows[size_t(c)][size_t(k)]));
      }
    }
  }
  return rows;
}

// The sync flags, by node index, of a mixed split synchronising at the exits of `sync_blocks`.
std::vector<char> sync_at(const Graph& g, const std::vector<int>& sync_blocks) {
  std::vector<char> sync(g.nodes.size(), 0);
  for (int b : sync_blocks) sync[size_t(g.blocks[size_t(b)].exit)] = 1;
  return sync;
}

void check_plan_legal(const Graph& g, int first, int last, int parts) {
  std::string why;
  HIOS_CHECK(region_legal(g, first, last, parts, &why), "blocks '%s'..'%s' cannot be split by rows: %s",
             g.blocks.at(size_t(first)).name.c_str(), g.blocks.at(size_t(last)).name.c_str(), why.c_str());
}

SplitRegion region_of(const Graph& g, int first, int last, int parts, SplitMode mode, const Layout& layout,
                      const std::vector<std::vector<RowRange>>& rows) {
  SplitRegion r;
  r.first_block = g.blocks[size_t(first)].name;
  r.last_block = g.blocks[size_t(last)].name;
  r.parts = parts;
  r.mode = mode;
  for (int v : layout.split) r.rows[g.nodes[size_t(v)].name] = rows[size_t(v)];
  return r;
}

}  // namespace

std::vector<int> sync_blocks_every(int first, int last, int sync_every) {
  HIOS_CHECK(sync_every >= 1, "plan_region: sync_every %d", sync_every);
  std::vector<int> blocks;
  for (int b = last; b >= first; b -= sync_every) blocks.push_back(b);
  std::reverse(blocks.begin(), blocks.end());
  return blocks;
}

SplitRegion plan_region(const Graph& g, int first, int last, int parts, SplitMode mode, int sync_every) {
  if (mode == SplitMode::Mixed) return plan_region_synced(g, first, last, parts, sync_blocks_every(first, last, sync_every));
  check_plan_legal(g, first, last, parts);
  // The tail after a reduction stays whole: it has no rows.
  const Layout layout = region_layout(g, first, last);
  const int exit = g.blocks[size_t(last)].exit;
  const auto rows = plan_rows(g, layout, exit, parts, mode, std::vector<char>(g.nodes.size(), 0));
  return region_of(g, first, last, parts, mode, layout, rows);
}

SplitRegion plan_region_synced(const Graph& g, int first, int last, int parts, const std::vector<int>& sync_blocks) {
  check_plan_legal(g, first, last, parts);
  for (int b : sync_blocks) {
    HIOS_CHECK(b >= first && b <= last, "plan_region: sync block %d outside blocks %d..%d", b, first, last);
  }
  const Layout layout = region_layout(g, first, last);
  const int exit = g.blocks[size_t(last)].exit;
  const auto rows = plan_rows(g, layout, exit, parts, SplitMode::Mixed, sync_at(g, sync_blocks));
  return region_of(g, first, last, parts, SplitMode::Mixed, layout, rows);
}

// The busiest part's time under a mixed plan's rows: its share of every split node's time (the
// rows it computes over the node's rows, overlap included) plus, for every tensor its nodes
// read from a sync point or from before the region, one message per neighbouring part carrying
// the rows it reads beyond its own (before the region: everything but part 0's, whose GPU is
// taken to hold the input).
double mixed_split_estimate_ms(const Graph& g, int first, int last, int parts, const std::vector<int>& sync_blocks,
                               const SyncCosts& costs) {
  const Layout layout = region_layout(g, first, last);
  const int exit = g.blocks[size_t(last)].exit;
  const std::vector<char> sync = sync_at(g, sync_blocks);
  const auto rows = plan_rows(g, layout, exit, parts, SplitMode::Mixed, sync);
  std::vector<char> in_region(g.nodes.size(), 0);
  for (int v : layout.split) in_region[size_t(v)] = 1;
  const auto succ = g.successors();
  const size_t elem = dtype_size(g.dtype);
  std::vector<double> part_ms(size_t(parts), 0.0);
  for (int v : layout.split) {
    const double t = costs.node_ms(v);
    const double h = double(plan_height(g, v));
    for (int k = 0; k < parts; ++k) part_ms[size_t(k)] += t * double(rows[size_t(v)][size_t(k)].size()) / h;
  }
  // The tensors that arrive partitioned: sync points inside the region and producers before it.
  std::set<int> sources;
  for (int v : layout.split) {
    if (sync[size_t(v)] && v != exit) sources.insert(v);
    for (int p : g.predecessors(v)) {
      if (!in_region[size_t(p)]) sources.insert(p);
    }
  }
  for (int s : sources) {
    const Shape& sh = g.nodes[size_t(s)].shape;
    const double row_bytes = double(sh.n * sh.c * sh.w) * double(elem);
    const bool before = !in_region[size_t(s)];
    const std::vector<RowRange> own = before ? std::vector<RowRange>(size_t(parts)) : rows[size_t(s)];
    for (int k = 0; k < parts; ++k) {
      RowRange need;
      for (int c : succ[size_t(s)]) {
        if (in_region[size_t(c)]) need = hull(need, needed_rows(g, c, rows[size_t(c)][size_t(k)]));
      }
      if (need.empty()) continue;
      if (before) {
        if (k > 0) part_ms[size_t(k)] += costs.transfer_ms(double(need.size()) * row_bytes);
        continue;
      }
      const RowRange mine = own[size_t(k)];
      if (need.begin < mine.begin) part_ms[size_t(k)] += costs.transfer_ms(double(mine.begin - need.begin) * row_bytes);
      if (need.end > mine.end) part_ms[size_t(k)] += costs.transfer_ms(double(need.end - mine.end) * row_bytes);
    }
  }
  return *std::max_element(part_ms.begin(), part_ms.end());
}

std::vector<int> sync_blocks_by_cost(const Graph& g, int first, int last, int parts, const SyncCosts& costs) {
  check_plan_legal(g, first, last, parts);
  // Greedy from a sync point at every block exit: drop the one whose removal lowers the
  // estimate most, while one does. The last block always syncs (its exit is gathered).
  std::vector<int> chosen = sync_blocks_every(first, last, 1);
  double best = mixed_split_estimate_ms(g, first, last, parts, chosen, costs);
  for (;;) {
    int drop = -1;
    double drop_ms = best;
    for (size_t i = 0; i + 1 < chosen.size(); ++i) {
      std::vector<int> trial = chosen;
      trial.erase(trial.begin() + std::ptrdiff_t(i));
      const double ms = mixed_split_estimate_ms(g, first, last, parts, trial, costs);
      if (ms < drop_ms - 1e-12) {
        drop_ms = ms;
        drop = int(i);
      }
    }
    if (drop < 0) return chosen;
    chosen.erase(chosen.begin() + drop);
    best = drop_ms;
  }
}

// ---------------------------------------------------------------------------------------------
// Checks

namespace {

struct ResolvedRegion {
  int first = -1, last = -1;
  std::vector<int> nodes;  // the split nodes, the reduction included (not its whole tail)
  int reduce = -1;
  std::vector<std::vector<RowRange>> rows;  // by node index (empty outside the region)
};

// Appends the violations of one region; returns false when the region is too broken to check
// its rows further.
bool resolve_region(const Graph& g, const SplitRegion& r, size_t index, ResolvedRegion& out,
                    std::vector<std::string>& errs) {
  const std::string where = strprintf("spatial region %zu", index);
  out.first = find_block(g, r.first_block);
  out.last = find_block(g, r.last_block);
  if (out.first < 0 || out.last < 0) {
    errs.push_back(strprintf("%s: unknown block '%s'", where.c_str(),
                             (out.first < 0 ? r.first_block : r.last_block).c_str()));
    return false;
  }
  if (out.last < out.first) {
    errs.push_back(strprintf("%s: block '%s' comes after '%s'", where.c_str(), r.first_block.c_str(),
                             r.last_block.c_str()));
    return false;
  }
  if (r.parts < 2 || r.parts > 64) {
    errs.push_back(strprintf("%s: %d parts (a split has 2 to 64)", where.c_str(), r.parts));
    return false;
  }
  std::string why;
  if (!region_legal(g, out.first, out.last, r.parts, &why)) {
    errs.push_back(
        strprintf("%s (%s..%s): %s", where.c_str(), r.first_block.c_str(), r.last_block.c_str(), why.c_str()));
    return false;
  }
  const Layout layout = region_layout(g, out.first, out.last);
  out.nodes = layout.split;
  out.reduce = layout.reduce;
  out.rows.assign(g.nodes.size(), {});
  bool ok = true;
  std::set<std::string> members, tail;
  for (int v : layout.tail) tail.insert(g.nodes[size_t(v)].name);
  for (int v : out.nodes) {
    const Node& nd = g.nodes[size_t(v)];
    members.insert(nd.name);
    auto it = r.rows.find(nd.name);
    if (it == r.rows.end()) {
      errs.push_back(strprintf("%s: node '%s' has no rows", where.c_str(), nd.name.c_str()));
      ok = false;
      continue;
    }
    if (int(it->second.size()) != r.parts) {
      errs.push_back(strprintf("%s: node '%s' has rows for %zu parts, not %d", where.c_str(), nd.name.c_str(),
                               it->second.size(), r.parts));
      ok = false;
      continue;
    }
    for (int k = 0; k < r.parts; ++k) {
      const RowRange& rr = it->second[size_t(k)];
      const int64_t h = plan_height(g, v);
      if (rr.begin < 0 || rr.end > h || rr.empty()) {
        errs.push_back(strprintf("%s: node '%s' part %d %s rows %s, not a non-empty band of its %s%lld rows",
                                 where.c_str(), nd.name.c_str(), k, v == out.reduce ? "sums" : "computes",
                                 rows_str(rr).c_str(), v == out.reduce ? "input's " : "", (long long)h));
        ok = false;
      }
    }
    out.rows[size_t(v)] = it->second;
  }
  for (const auto& kv : r.rows) {
    if (tail.count(kv.first)) {
      errs.push_back(strprintf("%s: node '%s' reads the sum of the partial pools of '%s', so it is not split and "
                               "has no rows",
                               where.c_str(), kv.first.c_str(), g.nodes[size_t(out.reduce)].name.c_str()));
      ok = false;
    } else if (!members.count(kv.first)) {
      errs.push_back(strprintf("%s: node '%s' is not in blocks %s..%s", where.c_str(), kv.first.c_str(),
                               r.first_block.c_str(), r.last_block.c_str()));
      ok = false;
    }
  }
  return ok;
}

// Whether the parts' rows of v cover its rows exactly once, in part order.
bool partitions(const Graph& g, int v, const std::vector<RowRange>& rows) {
  int64_t at = 0;
  for (const RowRange& r : rows) {
    if (r.begin != at) return false;
    at = r.end;
  }
  return at == plan_height(g, v);
}

// "rows a-b of node 'X' are computed", or for the reduction, whose parts each sum a band of its
// input, "rows a-b of the input of node 'X' are summed".
std::string rows_of(const Graph& g, int v, RowRange r) {
  const char* name = g.nodes[size_t(v)].name.c_str();
  return reduces(g, v) ? strprintf("rows %s of the input of node '%s' are summed", rows_str(r).c_str(), name)
                       : strprintf("rows %s of node '%s' are computed", rows_str(r).c_str(), name);
}

// Every row of node v computed by exactly one part, in part order (for the reduction: every
// row of its input summed by exactly one partial pool, or the parts would not add up to the
// mean).
void check_partition(const Graph& g, int v, const std::vector<RowRange>& rows, const std::string& where,
                     std::vector<std::string>& errs) {
  const int64_t h = plan_height(g, v);
  int64_t at = 0;
  for (size_t k = 0; k < rows.size(); ++k) {
    if (rows[k].begin > at) {
      errs.push_back(strprintf("%s: %s by no part", where.c_str(), rows_of(g, v, {at, rows[k].begin}).c_str()));
    } else if (rows[k].begin < at) {
      errs.push_back(strprintf("%s: %s by parts %zu and %zu", where.c_str(),
                               rows_of(g, v, {rows[k].begin, std::min(at, rows[k].end)}).c_str(), k - 1, k));
    }
    at = std::max(at, rows[k].end);
  }
  if (at < h) errs.push_back(strprintf("%s: %s by no part", where.c_str(), rows_of(g, v, {at, h}).c_str()));
}

}  // namespace

std::vector<std::string> check_spatial(const Graph& g, const SpatialPlan& plan) {
  std::vector<std::string> errs;
  std::vector<int> owner(g.blocks.size(), -1);
  for (size_t i = 0; i < plan.regions.size(); ++i) {
    const SplitRegion& r = plan.regions[i];
    ResolvedRegion rr;
    if (!resolve_region(g, r, i, rr, errs)) continue;
    bool overlap = false;
    for (int b = rr.first; b <= rr.last; ++b) {
      if (owner[size_t(b)] >= 0) {
        errs.push_back(strprintf("spatial region %zu: block '%s' is already in region %d", i,
                                 g.blocks[size_t(b)].name.c_str(), owner[size_t(b)]));
        overlap = true;
      }
      owner[size_t(b)] = int(i);
    }
    if (overlap) continue;
    const std::string where = strprintf("spatial region %zu", i);
    if (r.overlap && r.mode != SplitMode::Halo) {
      errs.push_back(strprintf("%s: overlap splits parts into edges and a middle, which needs halo mode, not %s",
                               where.c_str(), split_mode_name(r.mode)));
    }
    const int exit = g.blocks[size_t(rr.last)].exit;
    std::vector<char> in_region(g.nodes.size(), 0);
    for (int v : rr.nodes) in_region[size_t(v)] = 1;
    for (int v : rr.nodes) {
      if (v == exit || v == rr.reduce || r.mode == SplitMode::Halo) {
        check_partition(g, v, rr.rows[size_t(v)], where, errs);
      }
    }
    if (r.mode == SplitMode::Halo) continue;
    // Each part must hold, of every producer in the region, the rows its windows read; in mixed
    // mode a producer whose rows partition it may also lend its neighbours' rows (a halo).
    for (int c : rr.nodes) {
      const Node& cn = g.nodes[size_t(c)];
      std::set<int> producers;
      for (const Term& t : cn.inputs) {
        for (const Value& val : t) {
          if (in_region[size_t(val.node)]) producers.insert(val.node);
        }
      }
      for (int v : producers) {
        if (r.mode == SplitMode::Mixed && partitions(g, v, rr.rows[size_t(v)])) continue;
        for (int k = 0; k < r.parts; ++k) {
          const RowRange need = needed_rows(g, c, rr.rows[size_t(c)][size_t(k)]);
          const RowRange have = rr.rows[size_t(v)][size_t(k)];
          if (!inside(need, have)) {
            errs.push_back(strprintf("%s: part %d of node '%s' reads rows %s of '%s', but that part computes rows %s "
                                     "(halo too small)",
                                     where.c_str(), k, cn.name.c_str(), rows_str(need).c_str(),
                                     g.nodes[size_t(v)].name.c_str(), rows_str(have).c_str()));
          }
        }
      }
    }
  }
  return errs;
}

// ---------------------------------------------------------------------------------------------
// The rewrite

namespace {

class Splitter {
 public:
  Splitter(const Graph& g, const SpatialPlan& plan) : g_(g) {
    region_of_block_.assign(g.blocks.size(), -1);
    for (size_t i = 0; i < plan.regions.size(); ++i) {
      const SplitRegion& r = plan.regions[i];
      Region rg;
      rg.spec = &r;
      rg.first = find_block(g, r.first_block);
      rg.last = find_block(g, r.last_block);
      Layout layout = region_layout(g, rg.first, rg.last);
      rg.nodes = std::move(layout.split);
      rg.reduce = layout.reduce;
      rg.tail = std::move(layout.tail);
      rg.exit = g.blocks[size_t(rg.last)].exit;
      for (int b = rg.first; b <= rg.last; ++b) region_of_block_[size_t(b)] = int(i);
      regions_.push_back(std::move(rg));
    }
    region_of_node_.assign(g.nodes.size(), -1);
    for (size_t i = 0; i < regions_.size(); ++i) {
      for (int v : regions_[i].nodes) region_of_node_[size_t(v)] = int(i);
    }
  }

  Graph run() {
    out_.name = g_.name;
    out_.batch = g_.batch;
    out_.height = g_.height;
    out_.width = g_.width;
    out_.dtype = g_.dtype;
    out_.weights = g_.weights;  // the parts take their node's parameters (params_from)
    new_index_.assign(g_.nodes.size(), -1);
    pieces_.assign(g_.nodes.size(), {});
    plan_.assign(g_.nodes.size(), {});
    successors_ = g_.successors();
    // Blocks in order; a region's blocks become one.
    std::vector<int> node_block(g_.nodes.size(), -1);
    for (size_t b = 0; b < g_.blocks.size(); ++b) {
      for (int v : g_.blocks[b].nodes) node_block[size_t(v)] = int(b);
    }
    // The input placeholder first, unchanged.
    copy_node(g_.input(), -1);
    for (size_t b = 0; b < g_.blocks.size();) {
      const int ri = region_of_block_[b];
      Block nb;
      const int block_index = int(out_.blocks.size());
      if (ri < 0) {
        nb.name = g_.blocks[b].name;
        out_.blocks.push_back(nb);
        for (int v : g_.blocks[b].nodes) out_.blocks.back().nodes.push_back(copy_node(v, block_index));
        out_.blocks.back().exit = new_index_[size_t(g_.blocks[b].exit)];
        out_.blocks.back().enter = new_index_[size_t(g_.blocks[b].enter)];
        ++b;
        continue;
      }
      const Region& rg = regions_[size_t(ri)];
      nb.name = rg.first == rg.last ? g_.blocks[size_t(rg.first)].name
                                    : g_.blocks[size_t(rg.first)].name + ".." + g_.blocks[size_t(rg.last)].name;
      nb.name += strprintf("/rows%d", rg.spec->parts);
      out_.blocks.push_back(nb);
      current_block_ = block_index;
      plan_pieces(rg);
      plan_reads(rg);
      for (int v : rg.nodes) split_node(rg, v);
      if (rg.reduce >= 0) {
        sum_partial_pools(rg);
        for (int v : rg.tail) out_.blocks.back().nodes.push_back(copy_node(v, block_index));
      } else {
        gather_exit(rg);
      }
      out_.blocks.back().exit = new_index_[size_t(rg.exit)];
      out_.blocks.back().enter = new_index_[size_t(g_.blocks[size_t(rg.first)].enter)];
      b = size_t(rg.last) + 1;
    }
    out_.finalize();
    return std::move(out_);
  }

 private:
  struct Band {
    RowRange rows;
    const char* suffix = "";  // of the piece's name: "", "/top", "/mid", "/bottom"
  };
  struct Region {
    const SplitRegion* spec = nullptr;
    int first = -1, last = -1, exit = -1;
    std::vector<int> nodes;  // split by rows, the reduction included
    int reduce = -1;         // the global average pool that ends the region, or -1
    std::vector<int> tail;   // whole nodes after the reduction
  };

  int add_node(Node nd, int block) {
    nd.block = block;
    out_.nodes.push_back(std::move(nd));
    const int i = int(out_.nodes.size()) - 1;
    if (block >= 0) out_.blocks[size_t(block)].nodes.push_back(i);
    return i;
  }

  Value remap(const Value& v) const {
    Value r = v;
    r.node = new_index_[size_t(v.node)];
    HIOS_CHECK(r.node >= 0, "row split: node reads '%s' before it exists", g_.nodes[size_t(v.node)].name.c_str());
    return r;
  }

  // A node outside every region, unchanged but for its inputs' indices (the caller records
  // its block membership; block -1 is the graph input).
  int copy_node(int v, int block) {
    Node nd = g_.nodes[size_t(v)];
    for (Term& t : nd.inputs) {
      for (Value& val : t) val = remap(val);
    }
    nd.block = block;
    out_.nodes.push_back(std::move(nd));
    new_index_[size_t(v)] = int(out_.nodes.size()) - 1;
    return new_index_[size_t(v)];
  }

  static std::string slice_suffix(const Graph& g, const Value& v) {
    if (v.begin == 0 && (v.end < 0 || v.end == g.nodes[size_t(v.node)].shape.c)) return "";
    return strprintf("[c%lld-%lld]", (long long)v.begin, (long long)g.value_end(v));
  }

  // A `rows` node: rows `want` of a tensor `full` rows high, from operands holding `held`.
  int rows_node(const std::string& name, RowRange want, int64_t full, const std::vector<Value>& operands,
                const std::vector<int64_t>& held, const std::string& params_from = "") {
    auto it = rows_cache_.find(name);
    if (it != rows_cache_.end()) return it->second;
    Node nd;
    nd.name = name;
    nd.op = make_op(OpKind::Rows);
    RowsAttrs& a = std::get<RowsAttrs>(nd.op.attrs);
    a.first = want.begin;
    a.count = want.size();
    a.full = full;
    a.held = held;
    for (const Value& v : operands) nd.inputs.push_back(Term{v});
    nd.params_from = params_from;
    const int i = add_node(std::move(nd), current_block_);
    rows_cache_[name] = i;
    return i;
  }

  // A value holding rows `need` of (the channel slice `val` of) producer u, for part k: exactly
  // those rows, or, where the reader is a window op that reads a band of a taller input
  // (`superset`), any value whose rows include them; *held_first gets the first row it holds.
  // Reading the producer's own part (or the whole tensor from before the region) in place
  // saves a copy of the band per reader: in NHWC at batch 1 a band of rows is a pointer offset.
  Value source(const Region& rg, const Value& val, RowRange need, int k, bool superset = false,
               int64_t* held_first = nullptr) {
    const int u = val.node;
    const std::string sfx = slice_suffix(g_, val);
    const std::string& uname = g_.nodes[size_t(u)].name;
    const int64_t full = g_.nodes[size_t(u)].shape.h;
    if (held_first) *held_first = need.begin;
    if (region_of_node_[size_t(u)] != region_index(rg)) {
      // A whole tensor from before the region: cut the rows this part reads.
      Value whole = remap(val);
      if (need.begin == 0 && need.end == full) return whole;
      // The graph input is resident on GPU 0, where the suggested mapping puts part 0: that
      // part reads it whole, in place. A part elsewhere that read it whole would have the
      // whole tensor sent (50 MB for inception_v3 at 2048) where its band suffices, so the
      // other parts read a cut, which runs on GPU 0 and moves only its rows. Any other tensor
      // from before the region may live on another GPU, where the cut moves only its rows too.
      if (superset && u == g_.input() && k == 0) {
        if (held_first) *held_first = 0;
        return whole;
      }
      // One cut of everything this part's readers read of the tensor: one message, not one per
      // reader (an Inception block's four branches read four different bands of its input).
      const RowRange wide = read_hull(val, k, need);
      const int cut = rows_node(strprintf("%s%s:%s", uname.c_str(), sfx.c_str(), rows_str(wide).c_str()), wide,
                                full, {whole}, {0});
      if (wide == need) return Value{cut, 0, -1};
      if (superset) {
        if (held_first) *held_first = wide.begin;
        return Value{cut, 0, -1};
      }
      const int n = rows_node(strprintf("%s%s:%s<%s", uname.c_str(), sfx.c_str(), rows_str(need).c_str(),
                                        rows_str(wide).c_str()),
                              need, full, {Value{cut, 0, -1}}, {wide.begin});
      return Value{n, 0, -1};
    }
    const std::vector<RowRange>& have = rg.spec->rows.at(uname);
    const std::vector<Piece>& mine = pieces_[size_t(u)].at(size_t(k));
    auto value_of = [&](const Piece& p) { return Value{p.node, val.begin, val.end}; };
    // One piece of this part holds the rows: read it, in place where the reader allows.
    for (const Piece& p : mine) {
      if (!inside(need, p.rows)) continue;
      if (p.rows == need) return value_of(p);
      if (superset) {
        if (held_first) *held_first = p.rows.begin;
        return value_of(p);
      }
      const int n = rows_node(strprintf("%s@%d%s:%s", uname.c_str(), k, sfx.c_str(), rows_str(need).c_str()), need,
                              full, {value_of(p)}, {p.rows.begin});
      return Value{n, 0, -1};
    }
    // This part's pieces and the halos cut from the neighbours' pieces, in row order. A halo cut
    // carries every row that this part's readers need of the neighbour's piece, so readers with
    // different windows (parallel branches) share one message instead of one each.
    const RowRange wide = read_hull(val, k, need);
    std::vector<Value> operands;
    std::vector<int64_t> held;
    for (int j = 0; j < rg.spec->parts; ++j) {
      const RowRange want{std::max(need.begin, have[size_t(j)].begin), std::min(need.end, have[size_t(j)].end)};
      if (want.empty()) continue;
      for (const Piece& p : pieces_[size_t(u)][size_t(j)]) {
        const RowRange piece{std::max(want.begin, p.rows.begin), std::min(want.end, p.rows.end)};
        if (piece.empty()) continue;
        if (j == k) {
          operands.push_back(value_of(p));
          held.push_back(p.rows.begin);
          continue;
        }
        const RowRange cut{std::max({wide.begin, have[size_t(j)].begin, p.rows.begin}),
                           std::min({wide.end, have[size_t(j)].end, p.rows.end})};
        const int h = rows_node(strprintf("%s@%d>%d%s:%s", uname.c_str(), j, k, sfx.c_str(), rows_str(cut).c_str()),
                                cut, full, {value_of(p)}, {p.rows.begin});
        operands.push_back(Value{h, 0, -1});
        held.push_back(cut.begin);
      }
    }
    HIOS_CHECK(!operands.empty(), "row split: no part of '%s' holds rows %s", uname.c_str(), rows_str(need).c_str());
    if (operands.size() == 1 && held[0] == need.begin && operands[0].begin == 0 && operands[0].end < 0 &&
        out_.nodes[size_t(operands[0].node)].op.kind == OpKind::Rows &&
        out_.nodes[size_t(operands[0].node)].op.rows().count == need.size()) {
      return operands[0];  // the whole need is one neighbour's halo
    }
    const int n = rows_node(strprintf("%s@%d%s:%s", uname.c_str(), k, sfx.c_str(), rows_str(need).c_str()), need,
                            full, operands, held);
    return Value{n, 0, -1};
  }

  int region_index(const Region& rg) const { return int(&rg - regions_.data()); }

  // A node whose band may read an input holding more rows than its windows need: one value in,
  // read first by a convolution or a (non-global) pool, whose RowWindow places the band in the
  // rows the input holds. Element-wise ops, concats and sums need exactly their rows.
  static bool reads_band_of_taller_input(const Node& nd) {
    if (nd.inputs.size() != 1 || nd.inputs[0].size() != 1) return false;
    const Op* first = &nd.op;
    if (nd.op.kind == OpKind::Sequential) {
      const auto& steps = nd.op.sequential().steps;
      if (steps.empty()) return false;
      first = &steps.front();
    }
    if (first->kind == OpKind::Conv) return true;
    return first->kind == OpKind::Pool && !is_global_pool(*first);
  }

  // The edges of part k of node v, {top rows, bottom rows}, with overlap (halo mode): an edge
  // holds the rows whose windows read a neighbour's halo, the rows the neighbour reads as its
  // halo, and, for a node read row for row, what its readers' edges read of it (so an edge
  // never waits for a whole part). {0, 0}: the part stays one piece. `edges` holds the
  // readers' edges (filled in reverse topological order).
  std::pair<int64_t, int64_t> part_edges(const Region& rg, int v, int k,
                                         const std::map<int, std::vector<std::pair<int64_t, int64_t>>>& edges) const {
    const RowRange own = rg.spec->rows.at(g_.nodes[size_t(v)].name)[size_t(k)];
    if (!rg.spec->overlap || v == rg.reduce || own.empty()) return {0, 0};
    const Node& nd = g_.nodes[size_t(v)];
    int64_t top = 0, bottom = 0;
    // Rows whose windows read past the producer's part (its neighbours' halo).
    if (reads_band_of_taller_input(nd)) {
      const int u = nd.inputs[0][0].node;
      if (region_of_node_[size_t(u)] == region_index(rg)) {
        const RowRange have = rg.spec->rows.at(g_.nodes[size_t(u)].name)[size_t(k)];
        const int64_t in_h = input_height(g_, v);
        auto reads = [&](int64_t r) { return input_rows_op(nd.op, {r, r + 1}, in_h); };
        while (top < own.size() && reads(own.begin + top).begin < have.begin) ++top;
        while (bottom < own.size() && reads(own.end - bottom - 1).end > have.end) ++bottom;
      }
    }
    const int64_t h = nd.shape.h;
    for (int c : successors_[size_t(v)]) {
      if (region_of_node_[size_t(c)] != region_index(rg) || c == rg.reduce) continue;
      const Node& cn = g_.nodes[size_t(c)];
      const std::vector<RowRange>& crows = rg.spec->rows.at(cn.name);
      // What the neighbours above and below read of this part.
      if (k > 0) {
        const RowRange need = input_rows_op(cn.op, crows[size_t(k - 1)], h);
        if (need.end > own.begin) top = std::max(top, need.end - own.begin);
      }
      if (k + 1 < rg.spec->parts) {
        const RowRange need = input_rows_op(cn.op, crows[size_t(k + 1)], h);
        if (need.begin < own.end) bottom = std::max(bottom, own.end - need.begin);
      }
      // A reader row for row: its edges read the same rows of this part.
      const auto it = edges.find(c);
      if (!reads_band_of_taller_input(cn) && it != edges.end()) {
        top = std::max(top, it->second[size_t(k)].first);
        bottom = std::max(bottom, it->second[size_t(k)].second);
      }
    }
    if (top + bottom >= own.size()) return {0, 0};
    return {top, bottom};
  }

  // Every node's pieces per part (plan_), readers before producers.
  void plan_pieces(const Region& rg) {
    std::map<int, std::vector<std::pair<int64_t, int64_t>>> edges;  // node -> per part (top, bottom)
    std::vector<int> order = rg.nodes;
    std::sort(order.begin(), order.end(), std::greater<int>());
    for (int v : order) {
      const std::vector<RowRange>& rows = rg.spec->rows.at(g_.nodes[size_t(v)].name);
      plan_[size_t(v)].clear();
      for (int k = 0; k < rg.spec->parts; ++k) {
        const auto [top, bottom] = part_edges(rg, v, k, edges);
        edges[v].emplace_back(top, bottom);
        const RowRange own = rows[size_t(k)];
        std::vector<Band> bands;
        if (top > 0) bands.push_back({{own.begin, own.begin + top}, "/top"});
        bands.push_back({{own.begin + top, own.end - bottom}, top + bottom > 0 ? "/mid" : ""});
        if (bottom > 0) bands.push_back({{own.end - bottom, own.end}, "/bottom"});
        plan_[size_t(v)].push_back(std::move(bands));
      }
    }
  }

  // The input rows piece `band` of part k of node v reads.
  RowRange band_need(const Region& rg, int v, int k, const Band& band) const {
    const Node& nd = g_.nodes[size_t(v)];
    if (v == rg.reduce) return rg.spec->rows.at(nd.name)[size_t(k)];  // a partial pool reads exactly the rows it sums
    return input_rows_op(nd.op, band.rows, input_height(g_, v));
  }

  // Per value read in the region and reading part: the hull of the rows its pieces read
  // (reads_), so that a halo or a cut from before the region moves once per part.
  void plan_reads(const Region& rg) {
    reads_.clear();
    for (int v : rg.nodes) {
      const Node& nd = g_.nodes[size_t(v)];
      for (int k = 0; k < rg.spec->parts; ++k) {
        for (const Band& band : plan_[size_t(v)].at(size_t(k))) {
          const RowRange need = band_need(rg, v, k, band);
          for (const Term& t : nd.inputs) {
            for (const Value& val : t) {
              auto [it, fresh] = reads_.try_emplace(read_key(val, k), need);
              if (!fresh) it->second = hull(it->second, need);
            }
          }
        }
      }
    }
  }
  static std::tuple<int, int64_t, int64_t, int> read_key(const Value& val, int k) {
    return {val.node, val.begin, val.end, k};
  }
  RowRange read_hull(const Value& val, int k, RowRange need) const {
    const auto it = reads_.find(read_key(val, k));
    return it == reads_.end() ? need : hull(it->second, need);
  }

  void split_node(const Region& rg, int v) {
    const Node& nd = g_.nodes[size_t(v)];
    const int64_t in_h = input_height(g_, v);
    pieces_[size_t(v)].assign(size_t(rg.spec->parts), {});
    for (int k = 0; k < rg.spec->parts; ++k) {
      const std::vector<Band>& bands = plan_[size_t(v)].at(size_t(k));
      for (size_t p = 0; p < bands.size(); ++p) {
        Node part;
        part.name = strprintf("%s@%d%s", nd.name.c_str(), k, bands[p].suffix);
        part.params_from = nd.params_name();
        part.constants = nd.constants;  // an element-wise op's broadcast operands, the same for every band
        if (v == rg.reduce) {
          const RowRange need = band_need(rg, v, k, bands[p]);
          part.op = partial_pool_op(nd.op, need, in_h);
          for (const Term& t : nd.inputs) {  // a pool may read a concat or a sum (an imported model's)
            Term nt;
            for (const Value& val : t) nt.push_back(source(rg, val, need, k));
            part.inputs.push_back(std::move(nt));
          }
        } else {
          const RowRange need = band_need(rg, v, k, bands[p]);
          int64_t held_first = need.begin;
          const bool superset = reads_band_of_taller_input(nd);
          for (const Term& t : nd.inputs) {
            Term nt;
            for (const Value& val : t) nt.push_back(source(rg, val, need, k, superset, &held_first));
            part.inputs.push_back(std::move(nt));
          }
          part.op = band_op(nd.op, bands[p].rows, in_h, held_first);
        }
        pieces_[size_t(v)][size_t(k)].push_back(Piece{add_node(std::move(part), current_block_), bands[p].rows});
      }
    }
  }

  // The reduction keeps its name as the sum of its partial pools, one operand each, in part
  // order (so every rank that runs it adds them in the same order).
  void sum_partial_pools(const Region& rg) {
    Node sum;
    sum.name = g_.nodes[size_t(rg.reduce)].name;
    sum.op = make_op(OpKind::Add);
    for (const auto& part : pieces_[size_t(rg.reduce)]) sum.inputs.push_back(Term{Value{part.at(0).node, 0, -1}});
    new_index_[size_t(rg.reduce)] = add_node(std::move(sum), current_block_);
  }

  void gather_exit(const Region& rg) {
    const Node& x = g_.nodes[size_t(rg.exit)];
    std::vector<Value> operands;
    std::vector<int64_t> held;
    for (int k = 0; k < rg.spec->parts; ++k) {
      for (const Piece& p : pieces_[size_t(rg.exit)][size_t(k)]) {
        operands.push_back(Value{p.node, 0, -1});
        held.push_back(p.rows.begin);
      }
    }
    new_index_[size_t(rg.exit)] = rows_node(x.name, {0, x.shape.h}, x.shape.h, operands, held);
  }

  const Graph& g_;
  Graph out_;
  std::vector<Region> regions_;
  std::vector<int> region_of_block_, region_of_node_;
  std::vector<int> new_index_;
  // Per node of a region, per part: its pieces in row order (one, the part itself, unless the
  // region overlaps middles with halos).
  struct Piece {
    int node = -1;
    RowRange rows;
  };
  std::vector<std::vector<std::vector<Piece>>> pieces_;
  std::vector<std::vector<std::vector<Band>>> plan_;  // per node, per part: its pieces' rows
  std::vector<std::vector<int>> successors_;
  std::map<std::string, int> rows_cache_;
  std::map<std::tuple<int, int64_t, int64_t, int>, RowRange> reads_;  // plan_reads
  int current_block_ = -1;
};

}  // namespace

Graph apply_spatial(const Graph& g, const SpatialPlan& plan) {
  const std::vector<std::string> errs = check_spatial(g, plan);
  if (!errs.empty()) {
    throw Error(errs.size() == 1 ? errs[0] : errs[0] + strprintf(" (and %zu more)", errs.size() - 1));
  }
  if (plan.empty()) return g;
  return Splitter(g, plan).run();
}

// ---------------------------------------------------------------------------------------------
// JSON

json spatial_to_json(const SpatialPlan& plan) {
  json regions = json::array();
  for (const SplitRegion& r : plan.regions) {
    json rows = json::object();
    for (const auto& kv : r.rows) {
      json parts = json::array();
      for (const RowRange& rr : kv.second) parts.push_back(json::array({rr.begin, rr.end}));
      rows[kv.first] = std::move(parts);
    }
    json region{{"blocks", json::array({r.first_block, r.last_block})},
                {"parts", r.parts},
                {"mode", split_mode_name(r.mode)},
                {"rows", std::move(rows)}};
    if (r.overlap) region["overlap"] = true;
    regions.push_back(std::move(region));
  }
  return json{{"regions", std::move(regions)}};
}

SpatialPlan spatial_from_json(const json& j, const std::string& path) {
  JsonObject o(j, path);
  SpatialPlan plan;
  const json& regions = o.get_array("regions");
  for (size_t i = 0; i < regions.size(); ++i) {
    JsonObject ro(regions[i], o.child_path("regions") + strprintf("[%zu]", i));
    SplitRegion r;
    const json& blocks = ro.get_array("blocks");
    HIOS_CHECK(blocks.size() == 2, "%s: expected [first block, last block]", ro.child_path("blocks").c_str());
    r.first_block = json_string(blocks[0], ro.child_path("blocks") + "[0]");
    r.last_block = json_string(blocks[1], ro.child_path("blocks") + "[1]");
    r.parts = int(ro.get_int_in("parts", 2, 64));
    const std::string mode = ro.get_string("mode");
    HIOS_CHECK(mode == "halo" || mode == "recompute" || mode == "mixed",
               "%s: unknown mode '%s' (expected halo, recompute or mixed)", ro.child_path("mode").c_str(),
               mode.c_str());
    r.mode = mode == "halo" ? SplitMode::Halo : mode == "recompute" ? SplitMode::Recompute : SplitMode::Mixed;
    r.overlap = ro.get_bool("overlap", false);
    const json& rows = ro.get_object("rows");
    for (const auto& kv : rows.items()) {
      const std::string npath = ro.child_path("rows") + "." + kv.key();
      const json& parts = json_array(kv.value(), npath);
      std::vector<RowRange> ranges;
      for (size_t k = 0; k < parts.size(); ++k) {
        const std::string ppath = npath + strprintf("[%zu]", k);
        const json& pr = json_array(parts[k], ppath);
        HIOS_CHECK(pr.size() == 2, "%s: expected [begin, end]", ppath.c_str());
        const int64_t b = json_int(pr[0], ppath + "[0]"), e = json_int(pr[1], ppath + "[1]");
        HIOS_CHECK(b >= 0 && e >= 0 && b < (int64_t(1) << 31) && e < (int64_t(1) << 31),
                   "%s: rows must lie in [0, 2^31)", ppath.c_str());
        ranges.push_back({b, e});
      }
      r.rows[kv.key()] = std::move(ranges);
    }
    ro.finish();
    plan.regions.push_back(std::move(r));
  }
  o.finish();
  return plan;
}

bool rows_copy_is_view(const Graph& g, int v) {
  const Node& nd = g.nodes.at(size_t(v));
  if (nd.op.kind != OpKind::Rows || nd.shape.n != 1) return false;
  for (const Term& t : nd.inputs) {
    if (t.size() != 1) return false;
    const Shape& s = g.nodes[size_t(t[0].node)].shape;
    const bool whole = t[0].begin == 0 && (t[0].end < 0 || t[0].end == s.c);
    if (!whole || s.c != nd.shape.c || s.w != nd.shape.w || t[0].node == g.input()) return false;
  }
  return true;
}

std::string split_graph_stats(const Graph& split) {
  int parts = 0, halos = 0, assemblies = 0, gathers = 0, sums = 0;
  double halo_bytes = 0;
  for (const Node& nd : split.nodes) {
    // The sum that ends a region at a global pool: an add of partial pools.
    if (nd.op.kind == OpKind::Add) {
      bool partial = true;
      for (const Term& t : nd.inputs) {
        const Op& op = split.nodes[size_t(t.at(0).node)].op;
        partial = partial && op.kind == OpKind::Pool && row_window(op).banded() &&
                  op.pool().kind == PoolKind::GlobalAvg;
      }
      sums += partial;
    }
    const SplitName sn = parse_split_name(nd.name);
    if (nd.op.kind != OpKind::Rows) {
      parts += sn.kind == SplitName::Kind::Part || sn.kind == SplitName::Kind::Piece;
      continue;
    }
    if (sn.kind == SplitName::Kind::HaloCut) {
      ++halos;
      halo_bytes += double(nd.shape.numel()) * double(dtype_size(split.dtype));
    } else if (sn.kind == SplitName::Kind::Assembly || nd.name.find(':') != std::string::npos) {  // or a cut "X:a-b"
      ++assemblies;
    } else {
      ++gathers;
    }
  }
  return strprintf("%d parts, %d halo cuts (%.3f MB), %d input assemblies, %d gathers, %d sums of partial pools",
                   parts, halos, halo_bytes / 1e6, assemblies, gathers, sums);
}

SplitName parse_split_name(const std::string& name) {
  SplitName out;
  const size_t at = name.rfind('@');
  if (at == std::string::npos) return out;
  size_t i = at + 1;
  int k = 0;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9' && k < 1000000) k = k * 10 + (name[i++] - '0');
  if (i == at + 1) return out;
  const std::string rest = name.substr(i);
  if (rest.empty()) {
    out.kind = SplitName::Kind::Part;
  } else if (rest == "/top" || rest == "/mid" || rest == "/bottom") {
    out.kind = SplitName::Kind::Piece;
    out.piece = rest;
  } else if (rest[0] == '>' && rest.find(':') != std::string::npos) {
    out.kind = SplitName::Kind::HaloCut;
  } else if ((rest[0] == ':' || rest[0] == '[') && rest.find(':') != std::string::npos) {
    out.kind = SplitName::Kind::Assembly;
  } else {
    return out;
  }
  out.base = name.substr(0, at);
  out.part = k;
  return out;
}

std::string SplitName::part_name() const { return base + "@" + std::to_string(part); }

std::string describe_spatial(const Graph& g, const SpatialPlan& plan) {
  std::string out;
  for (const SplitRegion& r : plan.regions) {
    const int first = find_block(g, r.first_block), last = find_block(g, r.last_block);
    std::string span = r.first_block == r.last_block ? r.first_block : r.first_block + " .. " + r.last_block;
    std::string next;
    if (first >= 0 && last >= first && last + 1 < int(g.blocks.size())) {
      next = " until " + g.blocks[size_t(last) + 1].name;
    }
    if (first >= 0 && last >= first) {
      const int reduce = region_layout(g, first, last).reduce;
      if (reduce >= 0) next = ", summing partial pools at " + g.nodes[size_t(reduce)].name + next;
    }
    out += strprintf("rows of %s split %d ways%s (%s%s, %zu nodes)\n", span.c_str(), r.parts, next.c_str(),
                     split_mode_name(r.mode), r.overlap ? ", middles overlap the halos" : "", r.rows.size());
  }
  return out;
}

}  // namespace hios
