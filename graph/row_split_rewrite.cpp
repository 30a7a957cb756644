// The rewrite of a graph by a spatial plan (apply_spatial, graph/row_split.hpp): each node of a
// region becomes its parts, each part's input is assembled from its producer's parts and the
// neighbours' halos, and the region ends in a gather or a sum of partial pools.
#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "graph/error.hpp"
#include "graph/row_split.hpp"
#include "graph/row_split_detail.hpp"

namespace hios {

using namespace row_split_detail;

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
  static bool is_residual_term(const Node& nd, size_t term) {
    return nd.has_residual() && term + 1 == nd.inputs.size();
  }

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
          for (size_t ti = 0; ti < nd.inputs.size(); ++ti) {
            // A residual convolution reads its residual at its own rows, not under its window.
            const RowRange rows = is_residual_term(nd, ti) ? band.rows : need;
            for (const Value& val : nd.inputs[ti]) {
              auto [it, fresh] = reads_.try_emplace(read_key(val, k), rows);
              if (!fresh) it->second = hull(it->second, rows);
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
          for (size_t ti = 0; ti < nd.inputs.size(); ++ti) {
            Term nt;
            for (const Value& val : nd.inputs[ti]) {
              nt.push_back(is_residual_term(nd, ti) ? source(rg, val, bands[p].rows, k)
                                                    : source(rg, val, need, k, superset, &held_first));
            }
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


}  // namespace hios
