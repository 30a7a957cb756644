#include "graph/row_split.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "graph/error.hpp"
#include "graph/row_split_detail.hpp"

namespace hios {

const char* split_mode_name(SplitMode m) {
  return m == SplitMode::Halo ? "halo" : m == SplitMode::Recompute ? "recompute" : "mixed";
}

namespace row_split_detail {

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

}  // namespace row_split_detail

using namespace row_split_detail;

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
