#include "graph/graph.hpp"

#include <algorithm>
#include <climits>
#include <set>

#include "graph/dag.hpp"
#include "graph/error.hpp"

namespace hios {

int Graph::find(std::string_view node_name) const {
  auto it = index_.find(std::string(node_name));
  return it == index_.end() ? -1 : it->second;
}

Shape Graph::value_shape(const Value& v) const {
  Shape s = nodes[v.node].shape;
  if (v.begin == 0 && v.end < 0) return s;  // a whole value, of any rank
  s.c = value_end(v) - v.begin;
  return s;
}

const Constant* Node::constant(int k) const {
  for (const Constant& c : constants) {
    if (c.operand == k) return &c;
  }
  return nullptr;
}

int Node::term_of_operand(int k) const {
  int term = 0;
  for (int i = 0; i < k; ++i) term += constant(i) ? 0 : 1;
  return term;
}

bool Graph::is_result(int v) const {
  if (outputs.empty()) return v == output();
  return std::find(outputs.begin(), outputs.end(), v) != outputs.end();
}

int64_t Graph::tensor_bytes(int v) const {
  const Node& nd = nodes[size_t(v)];
  return nd.shape.numel() * int64_t(is_float(nd.dtype) ? sizeof(float) : dtype_size(nd.dtype));
}

std::vector<int> Graph::predecessors(int i) const {
  std::vector<int> out;
  for (const Term& t : nodes[i].inputs) {
    for (const Value& v : t) {
      if (std::find(out.begin(), out.end(), v.node) == out.end()) out.push_back(v.node);
    }
  }
  return out;
}

std::vector<std::vector<int>> Graph::successors() const {
  std::vector<std::vector<int>> succ(nodes.size());
  for (int i = 0; i < size(); ++i) {
    for (int p : predecessors(i)) succ[p].push_back(i);
  }
  return succ;
}

OpCost Graph::total_cost() const {
  OpCost total;
  // The parts of a row split share their operator's weights: count each owner's once.
  std::unordered_map<std::string, double> shared;
  for (const Node& n : nodes) {
    OpCost c = n.cost;
    if (!n.params_from.empty()) {
      double& p = shared[n.params_from];
      p = std::max(p, c.params);
      c.params = 0;
    }
    total += c;
  }
  for (const auto& kv : shared) total.params += kv.second;
  return total;
}

int64_t Graph::edge_count() const {
  int64_t e = 0;
  for (int i = 0; i < size(); ++i) e += static_cast<int64_t>(predecessors(i).size());
  return e;
}

// ---------------------------------------------------------------------------------------------
// finalize

namespace {

// Finds one cycle among nodes that Kahn's algorithm could not order, for the error message.
std::string describe_cycle(const Graph& g, const std::vector<char>& unsorted) {
  // An iterative depth-first search (a cycle may be 100,000 nodes long: recursion would
  // overflow the stack); the path walks consumer -> producer.
  std::vector<int> state(g.nodes.size(), 0);  // 0 new, 1 on the path, 2 done
  struct Frame {
    int node;
    std::vector<int> preds;
    size_t next = 0;
  };
  for (int root = 0; root < g.size(); ++root) {
    if (!unsorted[size_t(root)] || state[size_t(root)] != 0) continue;
    std::vector<Frame> path;
    path.push_back({root, g.predecessors(root)});
    state[size_t(root)] = 1;
    while (!path.empty()) {
      Frame& f = path.back();
      if (f.next == f.preds.size()) {
        state[size_t(f.node)] = 2;
        path.pop_back();
        continue;
      }
      const int p = f.preds[f.next++];
      if (!unsorted[size_t(p)] || state[size_t(p)] == 2) continue;
      if (state[size_t(p)] == 0) {
        state[size_t(p)] = 1;
        path.push_back({p, g.predecessors(p)});
        continue;
      }
      // p is on the path: the cycle is p's frame to the top, printed in data-flow order, at most
      // kShown names of it.
      constexpr size_t kShown = 8;
      size_t at = path.size();
      while (at > 0 && path[at - 1].node != p) --at;
      std::vector<int> cyc;
      for (size_t k = path.size(); k-- > at - 1;) cyc.push_back(path[k].node);
      std::string out;
      for (size_t k = 0; k < cyc.size() && k < kShown; ++k) out += "'" + g.nodes[size_t(cyc[k])].name + "' -> ";
      if (cyc.size() > kShown) out += strprintf("... (%zu nodes in all) -> ", cyc.size());
      out += "'" + g.nodes[size_t(cyc.front())].name + "'";
      return out;
    }
  }
  return "";
}

}  // namespace

// The limit on one tensor (documented in docs/graph-format.md): every dimension positive and
// at most 2^31 - 1, and at most 2^38 elements (1 TiB of float32). The product is computed with
// overflow checks, so that a channel count of 2^62 is refused instead of wrapping into a small
// tensor that every later byte count would get wrong.
constexpr int64_t kMaxDimension = INT32_MAX;
constexpr int64_t kMaxElements = int64_t(1) << 38;

static void check_size(const Shape& s, const std::string& node, const char* what) {
  HIOS_CHECK(s.rank >= 0 && s.rank <= kMaxRank, "node '%s': %s has rank %d (at most %d)", node.c_str(), what, s.rank,
             kMaxRank);
  int64_t e = 1;
  bool overflow = false;
  for (int d = 0; d < kMaxRank; ++d) {
    const int64_t v = s.dim(d);
    HIOS_CHECK(d < s.rank || v == 1, "node '%s': %s %s has dim %d past its rank", node.c_str(), what, s.str().c_str(), d);
    HIOS_CHECK(v > 0, "node '%s': %s has a non-positive size %s", node.c_str(), what, s.str().c_str());
    HIOS_CHECK(v <= kMaxDimension, "node '%s': %s %s has a dimension over %lld", node.c_str(), what, s.str().c_str(),
               (long long)kMaxDimension);
    overflow = overflow || __builtin_mul_overflow(e, v, &e);
  }
  HIOS_CHECK(!overflow && e <= kMaxElements, "node '%s': %s %s has more than 2^38 elements, the limit on one tensor",
             node.c_str(), what, s.str().c_str());
}

// Rebuilds the name index, orders the nodes topologically, checks the blocks and infers every
// shape: the phases below, in order.
void Graph::finalize() {
  check_dimensions();
  index_names();
  check_placeholder_and_terms();
  const std::vector<int> new_index = sort_topologically();
  rebuild_blocks(new_index);
  for (Node& nd : nodes) infer_node(nd);
  check_shared_parameters();
}

void Graph::check_dimensions() const {
  HIOS_CHECK(!nodes.empty(), "graph '%s': has no nodes", name.c_str());
  HIOS_CHECK(batch > 0 && height > 0 && width > 0,
             "graph '%s': batch, height and width must be positive (got %lld, %lld, %lld)", name.c_str(),
             (long long)batch, (long long)height, (long long)width);
  HIOS_CHECK(batch <= kMaxDimension && height <= kMaxDimension && width <= kMaxDimension,
             "graph '%s': batch, height and width must be at most %lld (got %lld, %lld, %lld)", name.c_str(),
             (long long)kMaxDimension, (long long)batch, (long long)height, (long long)width);
  HIOS_CHECK(!blocks.empty(), "graph '%s': has no blocks", name.c_str());
}

void Graph::index_names() {
  index_.clear();
  for (int i = 0; i < size(); ++i) {
    const std::string& nm = nodes[i].name;
    HIOS_CHECK(!nm.empty(), "graph '%s': node #%d has an empty name", name.c_str(), i);
    HIOS_CHECK(index_.emplace(nm, i).second, "duplicate node name '%s'", nm.c_str());
  }
}

// Input placeholders outside every block (at least one); every other node inside one. A general
// op reads whole values, one per term, and its constants sit at distinct operand positions.
void Graph::check_placeholder_and_terms() const {
  int inputs = 0;
  for (const Node& n : nodes) {
    const OpDef& def = op_def(n.op.kind);
    if (def.general) {
      for (const Term& t : n.inputs) {
        HIOS_CHECK(t.size() == 1 && t[0].begin == 0 && t[0].end < 0,
                   "node '%s': a %s reads whole values, one per input term", n.name.c_str(), def.name);
      }
    }
    HIOS_CHECK(n.constants.empty() || def.general, "node '%s': a %s takes no constants", n.name.c_str(), def.name);
    for (size_t k = 0; k < n.constants.size(); ++k) {
      const Constant& c = n.constants[k];
      HIOS_CHECK(c.operand >= 0 && c.operand < n.operands() && (k == 0 || c.operand > n.constants[k - 1].operand),
                 "node '%s': constant operand positions must be distinct, ascending and below its %d operands",
                 n.name.c_str(), n.operands());
      check_size(c.shape, n.name, "a constant");
      HIOS_CHECK(c.data.empty() || int64_t(c.data.size()) == c.shape.numel() * int64_t(dtype_size(c.dtype)),
                 "node '%s': constant operand %d holds %zu bytes, not %lld elements of %s", n.name.c_str(), c.operand,
                 c.data.size(), (long long)c.shape.numel(), dtype_name(c.dtype));
    }
    if (n.op.kind == OpKind::Input) {
      ++inputs;
      HIOS_CHECK(n.block < 0, "node '%s': the input placeholder cannot be inside a block", n.name.c_str());
      HIOS_CHECK(n.inputs.empty(), "node '%s': the input placeholder takes no inputs", n.name.c_str());
    } else {
      HIOS_CHECK(n.block >= 0 && n.block < static_cast<int>(blocks.size()), "node '%s': belongs to no block",
                 n.name.c_str());
      // A general op may compute from constants alone (a result the model gives as a constant).
      HIOS_CHECK(!n.inputs.empty() || (def.general && !n.constants.empty()), "node '%s': has no inputs", n.name.c_str());
    }
    for (const Term& t : n.inputs) {
      HIOS_CHECK(!t.empty(), "node '%s': has an empty input term", n.name.c_str());
      for (const Value& v : t) {
        HIOS_CHECK(v.node >= 0 && v.node < size(), "node '%s': refers to a node that does not exist",
                   n.name.c_str());
      }
    }
  }
  HIOS_CHECK(inputs >= 1, "graph '%s': needs an input placeholder", name.c_str());
  for (size_t k = 0; k < outputs.size(); ++k) {
    HIOS_CHECK(outputs[k] >= 0 && outputs[k] < size() && nodes[size_t(outputs[k])].op.kind != OpKind::Input,
               "graph '%s': result %zu is not a computed node", name.c_str(), k);
  }
}

// Topological order, stable with respect to the current order; the permutation applied to the
// nodes and their references.
std::vector<int> Graph::sort_topologically() {
  const int n = size();
  Dag dag(n);
  for (int i = 0; i < n; ++i) {
    for (int p : predecessors(i)) dag.add_edge(p, i);
  }
  std::vector<int> order = topological_prefix(dag);
  // The inputs first (they read nothing, so the order stays topological).
  std::stable_partition(order.begin(), order.end(), [&](int v) { return nodes[size_t(v)].op.kind == OpKind::Input; });
  if (static_cast<int>(order.size()) != n) {
    std::vector<char> unsorted(n, 1);
    for (int u : order) unsorted[u] = 0;
    throw_error("graph '%s': cycle through %s", name.c_str(), describe_cycle(*this, unsorted).c_str());
  }

  std::vector<int> new_index(n);
  for (int i = 0; i < n; ++i) new_index[order[i]] = i;
  std::vector<Node> sorted;
  sorted.reserve(n);
  for (int old : order) sorted.push_back(std::move(nodes[old]));
  nodes = std::move(sorted);
  for (Node& nd : nodes) {
    for (Term& t : nd.inputs) {
      for (Value& v : t) v.node = new_index[v.node];
    }
  }
  for (int i = 0; i < n; ++i) index_[nodes[i].name] = i;
  for (int& o : outputs) o = new_index[size_t(o)];
  inputs_.clear();
  for (int i = 0; i < n; ++i) {
    if (nodes[size_t(i)].op.kind == OpKind::Input) inputs_.push_back(i);
  }
  HIOS_CHECK(nodes[0].op.kind == OpKind::Input, "graph '%s': node '%s' has no inputs but is not the input",
             name.c_str(), nodes[0].name.c_str());
  return new_index;
}

// Blocks: membership comes from Node::block; the lists rebuilt in topological order, each exit
// remapped, no read from a later block, every node leading to its block's exit.
void Graph::rebuild_blocks(const std::vector<int>& new_index) {
  const int n = size();
  std::vector<int> old_exit;
  for (Block& b : blocks) old_exit.push_back(b.exit);
  for (Block& b : blocks) b.nodes.clear();
  for (int i = 0; i < n; ++i) {
    if (nodes[i].block >= 0) blocks[nodes[i].block].nodes.push_back(i);
  }
  for (size_t bi = 0; bi < blocks.size(); ++bi) {
    Block& b = blocks[bi];
    HIOS_CHECK(!b.nodes.empty(), "block '%s': has no nodes", b.name.c_str());
    HIOS_CHECK(old_exit[bi] >= 0 && old_exit[bi] < n, "block '%s': has no exit node", b.name.c_str());
    b.exit = new_index[old_exit[bi]];
    HIOS_CHECK(nodes[b.exit].block == static_cast<int>(bi), "block '%s': exit '%s' is not a node of the block",
               b.name.c_str(), nodes[b.exit].name.c_str());
    b.enter = bi == 0 ? 0 : blocks[bi - 1].exit;
    for (int i : b.nodes) {
      for (int p : predecessors(i)) {
        HIOS_CHECK(nodes[p].block <= static_cast<int>(bi), "node '%s' (block '%s'): reads '%s' of a later block '%s'",
                   nodes[i].name.c_str(), b.name.c_str(), nodes[p].name.c_str(),
                   blocks[nodes[p].block].name.c_str());
      }
    }
    // Every node of the block must lead to the exit.
    std::set<int> reached{b.exit};
    std::vector<int> work{b.exit};
    while (!work.empty()) {
      int u = work.back();
      work.pop_back();
      for (int p : predecessors(u)) {
        if (nodes[p].block == static_cast<int>(bi) && reached.insert(p).second) work.push_back(p);
      }
    }
    for (int i : b.nodes) {
      HIOS_CHECK(reached.count(i), "node '%s' (block '%s'): does not lead to the block's exit '%s'",
                 nodes[i].name.c_str(), b.name.c_str(), nodes[b.exit].name.c_str());
    }
  }
}

// Shape inference and counting for one node whose producers are inferred already.
void Graph::infer_node(Node& nd) {
  InferContext ctx{nd.name, batch, height, width};
  const OpDef& def = op_def(nd.op.kind);
  if (def.general) {
    // Operands in order: input terms (one whole value each) and constants at their positions.
    std::vector<Shape> in;
    size_t term = 0;
    for (int k = 0; k < nd.operands(); ++k) {
      if (const Constant* c = nd.constant(k)) {
        in.push_back(c->shape);
        ctx.dtypes.push_back(c->dtype);
      } else {
        const Node& src = nodes[size_t(nd.inputs[term++][0].node)];
        in.push_back(src.shape);
        ctx.dtypes.push_back(src.dtype);
      }
    }
    nd.shape = infer_op(nd.op, in, ctx);
    check_size(nd.shape, nd.name, "output");
    nd.dtype = infer_dtype_op(nd.op, ctx.dtypes);
    nd.cost = count_op(nd.op, in, nd.shape, nd.dtype);
    for (const Constant& c : nd.constants) nd.cost.params += double(c.shape.numel());
    return;
  }
  for (const Term& t : nd.inputs) {
    for (const Value& v : t) ctx.dtypes.push_back(nodes[size_t(v.node)].dtype);
  }
  for (DType t : ctx.dtypes) {
    HIOS_CHECK(t == ctx.dtypes[0], "node '%s': a %s of %s and %s values", nd.name.c_str(), def.name,
               dtype_name(ctx.dtypes[0]), dtype_name(t));
    HIOS_CHECK(is_float(t) || nd.op.kind == OpKind::Activation || nd.op.kind == OpKind::Identity ||
                   nd.op.kind == OpKind::Add || nd.op.kind == OpKind::Mul,
               "node '%s': a %s of %s values (it takes floats)", nd.name.c_str(), def.name, dtype_name(t));
  }
  if (nd.op.kind == OpKind::Input) ctx.dtypes.clear();
  std::vector<Shape> terms;
  double value_bytes = 0, sum_flops = 0;
  for (size_t ti = 0; ti < nd.inputs.size(); ++ti) {
    const Term& t = nd.inputs[ti];
    Shape ts;
    for (size_t vi = 0; vi < t.size(); ++vi) {
      const Value& v = t[vi];
      const Node& src = nodes[v.node];
      int64_t end = value_end(v);
      HIOS_CHECK(v.begin >= 0 && v.begin < end && end <= src.shape.c,
                 "node '%s': input slice [%lld, %lld) of '%s' is outside its %lld channels", nd.name.c_str(),
                 (long long)v.begin, (long long)end, src.name.c_str(), (long long)src.shape.c);
      Shape vs = value_shape(v);
      value_bytes += double(vs.numel()) * dtype_size(dtype);
      if (vi == 0) {
        ts = vs;
        continue;
      }
      const Node& first = nodes[t[0].node];
      HIOS_CHECK(vs.c == ts.c, "node '%s': channel mismatch inside a sum: '%s' gives %lld channels but '%s' gives %lld",
                 nd.name.c_str(), first.name.c_str(), (long long)ts.c, src.name.c_str(), (long long)vs.c);
      HIOS_CHECK(vs == ts, "node '%s': shape mismatch inside a sum: '%s' is %s but '%s' is %s", nd.name.c_str(),
                 first.name.c_str(), ts.str().c_str(), src.name.c_str(), vs.str().c_str());
    }
    if (!t.empty()) sum_flops += double(t.size() - 1) * double(ts.numel());
    terms.push_back(ts);
  }
  std::vector<Shape> in;
  if (def.terms_are_operands || terms.empty()) {
    in = terms;
  } else {
    Shape cat = terms[0];
    for (size_t ti = 1; ti < nd.input_terms(); ++ti) {
      const Shape& s = terms[ti];
      HIOS_CHECK(s.n == cat.n && s.h == cat.h && s.w == cat.w,
                 "node '%s': spatial mismatch in a concat: term 0 ('%s') is %s but term %zu ('%s') is %s",
                 nd.name.c_str(), nodes[nd.inputs[0][0].node].name.c_str(), terms[0].str().c_str(), ti,
                 nodes[nd.inputs[ti][0].node].name.c_str(), s.str().c_str());
      cat.c += s.c;
    }
    in = {cat};
    if (nd.has_residual()) in.push_back(terms.back());
  }
  for (const Shape& s : in) check_size(s, nd.name, "input");
  nd.shape = infer_op(nd.op, in, ctx);
  check_size(nd.shape, nd.name, "output");
  nd.dtype = infer_dtype_op(nd.op, ctx.dtypes);
  nd.cost = count_op(nd.op, in, nd.shape, dtype);
  // Assembling the input reads every value once; summing within a term costs one FLOP per
  // extra addend element.
  double assembled = 0;
  for (const Shape& s : in) assembled += double(s.numel()) * dtype_size(dtype);
  nd.cost.bytes_read += value_bytes - assembled;
  nd.cost.flops += sum_flops;
}

// A node taking another's parameters (params_from) must name a node of the graph with the same
// op and as many parameters, or, for a row-split part "X@k", the operator X it is a part of
// (which the split graph no longer holds). Anything else would run with weights nobody meant.
void Graph::check_shared_parameters() const {
  for (const Node& nd : nodes) {
    if (nd.params_from.empty()) continue;
    // A part X@k of a row split takes X's parameters; X's name is then the gather's or gone.
    const size_t at = nd.name.rfind('@');
    if (at != std::string::npos && at == nd.params_from.size() && nd.name.compare(0, at, nd.params_from) == 0) continue;
    const int owner = find(nd.params_from);
    HIOS_CHECK(owner >= 0, "node '%s': params_from '%s' names no node of graph '%s'", nd.name.c_str(),
               nd.params_from.c_str(), name.c_str());
    const Node& o = nodes[size_t(owner)];
    HIOS_CHECK(o.op.kind != OpKind::Input, "node '%s': params_from '%s' names the graph input", nd.name.c_str(),
               nd.params_from.c_str());
    HIOS_CHECK(owner != find(nd.name), "node '%s': params_from names the node itself", nd.name.c_str());
    HIOS_CHECK(o.op.kind == nd.op.kind && o.cost.params == nd.cost.params,
               "node '%s': params_from '%s' names a node with other parameters (%s with %.0f, this %s has %.0f)",
               nd.name.c_str(), nd.params_from.c_str(), op_def(o.op.kind).name, o.cost.params, op_def(nd.op.kind).name,
               nd.cost.params);
  }
}

// ---------------------------------------------------------------------------------------------
// GraphBuilder

GraphBuilder::GraphBuilder(std::string name, int64_t batch, int64_t height, int64_t width) {
  g_.name = std::move(name);
  g_.batch = batch;
  g_.height = height;
  g_.width = width;
}

Value GraphBuilder::input(int64_t channels, const std::string& name) {
  HIOS_CHECK(g_.nodes.empty(), "graph '%s': input() must come first", g_.name.c_str());
  Op op = make_op(OpKind::Input);
  op.attrs = InputAttrs{channels};
  Node nd;
  nd.name = name;
  nd.op = op;
  std::string nm = name;
  InferContext ctx{nm, g_.batch, g_.height, g_.width};
  nd.shape = infer_op(op, {}, ctx);
  g_.nodes.push_back(std::move(nd));
  g_.index_[name] = 0;
  return Value{0, 0, -1};
}

void GraphBuilder::begin_block(const std::string& name) {
  HIOS_CHECK(open_block_ < 0, "graph '%s': begin_block('%s') while block '%s' is open", g_.name.c_str(), name.c_str(),
             g_.blocks[open_block_].name.c_str());
  Block b;
  b.name = name;
  b.enter = g_.blocks.empty() ? 0 : g_.blocks.back().exit;
  g_.blocks.push_back(b);
  open_block_ = static_cast<int>(g_.blocks.size()) - 1;
}

void GraphBuilder::end_block(Value exit) {
  HIOS_CHECK(open_block_ >= 0, "graph '%s': end_block without begin_block", g_.name.c_str());
  HIOS_CHECK(g_.nodes[exit.node].block == open_block_ && exit.begin == 0 && exit.end < 0,
             "block '%s': exit must be a whole node of the block", g_.blocks[open_block_].name.c_str());
  g_.blocks[open_block_].exit = exit.node;
  open_block_ = -1;
}

Value GraphBuilder::node(const std::string& name, Op op, std::vector<Term> inputs) {
  HIOS_CHECK(open_block_ >= 0, "node '%s': created outside a block", name.c_str());
  HIOS_CHECK(!g_.index_.count(name), "duplicate node name '%s'", name.c_str());
  // Infer now so model code can ask for shapes; finish() re-checks everything.
  std::vector<Shape> terms;
  for (const Term& t : inputs) {
    HIOS_CHECK(!t.empty(), "node '%s': empty input term", name.c_str());
    Shape ts = g_.value_shape(t[0]);
    for (const Value& v : t) {
      Shape vs = g_.value_shape(v);
      HIOS_CHECK(vs == ts, "node '%s': mismatch inside a sum: '%s' is %s but '%s' is %s", name.c_str(),
                 g_.nodes[t[0].node].name.c_str(), ts.str().c_str(), g_.nodes[v.node].name.c_str(), vs.str().c_str());
    }
    terms.push_back(ts);
  }
  std::vector<Shape> in = terms;
  if (!op_def(op.kind).terms_are_operands && !terms.empty()) {
    const bool residual = op.kind == OpKind::Conv && op.conv().residual && terms.size() >= 2;  // as Node::has_residual
    const size_t concatenated = terms.size() - (residual ? 1 : 0);
    Shape cat = terms[0];
    for (size_t i = 1; i < concatenated; ++i) {
      HIOS_CHECK(terms[i].h == cat.h && terms[i].w == cat.w, "node '%s': spatial mismatch in a concat (%s vs %s)",
                 name.c_str(), cat.str().c_str(), terms[i].str().c_str());
      cat.c += terms[i].c;
    }
    in = {cat};
    if (residual) in.push_back(terms.back());
  }
  InferContext ctx{name, g_.batch, g_.height, g_.width};
  Node nd;
  nd.name = name;
  nd.shape = infer_op(op, in, ctx);
  nd.op = std::move(op);
  nd.inputs = std::move(inputs);
  nd.block = open_block_;
  int id = static_cast<int>(g_.nodes.size());
  g_.nodes.push_back(std::move(nd));
  g_.index_[name] = id;
  return Value{id, 0, -1};
}

Op conv_op(int64_t out_channels, std::array<int, 2> kernel, std::array<int, 2> stride, std::array<int, 2> padding,
           Activation act, int64_t groups, bool bias, std::array<int, 2> dilation) {
  Op op = make_op(OpKind::Conv);
  ConvAttrs a;
  a.out_channels = out_channels;
  a.kernel = kernel;
  a.stride = stride;
  a.padding = padding;
  a.dilation = dilation;
  a.groups = groups;
  a.bias = bias;
  a.activation = act;
  op.attrs = a;
  return op;
}

Op pool_op(PoolKind kind, int kernel, int stride, int padding, bool ceil_mode, bool count_include_pad) {
  Op op = make_op(OpKind::Pool);
  PoolAttrs a;
  a.kind = kind;
  a.kernel = {kernel, kernel};
  a.stride = {stride, stride};
  a.padding = {padding, padding};
  a.ceil_mode = ceil_mode;
  a.count_include_pad = count_include_pad;
  op.attrs = a;
  return op;
}

Op activation_op(Activation act) {
  Op op = make_op(OpKind::Activation);
  op.attrs = ActivationAttrs{act};
  return op;
}

Op sequential_op(std::vector<Op> steps) {
  Op op = make_op(OpKind::Sequential);
  op.attrs = SequentialAttrs{std::move(steps)};
  return op;
}

static std::vector<Term> one_term_each(const std::vector<Value>& vs) {
  std::vector<Term> terms;
  for (const Value& v : vs) terms.push_back(Term{v});
  return terms;
}

Value GraphBuilder::conv(const std::string& name, const std::vector<Value>& pieces, int64_t out_channels, int kernel, int stride,
                         int padding, Activation act, int64_t groups, bool bias, int dilation) {
  return node(name,
              conv_op(out_channels, {kernel, kernel}, {stride, stride}, {padding, padding}, act, groups, bias,
                      {dilation, dilation}),
              one_term_each(pieces));
}

Value GraphBuilder::conv(const std::string& name, const std::vector<Value>& pieces, int64_t out_channels, std::array<int, 2> kernel,
                         std::array<int, 2> stride, std::array<int, 2> padding, Activation act, int64_t groups,
                         bool bias) {
  return node(name, conv_op(out_channels, kernel, stride, padding, act, groups, bias), one_term_each(pieces));
}

Value GraphBuilder::pool(const std::string& name, Value in, PoolKind kind, int kernel, int stride, int padding,
                         bool ceil_mode, bool count_include_pad) {
  return node(name, pool_op(kind, kernel, stride, padding, ceil_mode, count_include_pad), {Term{in}});
}

Value GraphBuilder::activation(const std::string& name, Value in, Activation act) {
  return node(name, activation_op(act), {Term{in}});
}

Value GraphBuilder::add(const std::string& name, const std::vector<Value>& operands) {
  return node(name, make_op(OpKind::Add), one_term_each(operands));
}

Value GraphBuilder::mul(const std::string& name, const std::vector<Value>& operands) {
  return node(name, make_op(OpKind::Mul), one_term_each(operands));
}

Value GraphBuilder::sum(const std::string& name, const std::vector<Value>& values) {
  return node(name, make_op(OpKind::Identity), {Term(values.begin(), values.end())});
}

Value GraphBuilder::concat(const std::string& name, const std::vector<Value>& values) {
  return node(name, make_op(OpKind::Identity), one_term_each(values));
}

Value GraphBuilder::sequential(const std::string& name, const std::vector<Value>& pieces, std::vector<Op> steps) {
  return node(name, sequential_op(std::move(steps)), one_term_each(pieces));
}

Value GraphBuilder::linear(const std::string& name, Value in, int64_t out_features, bool bias) {
  Op op = make_op(OpKind::Linear);
  op.attrs = LinearAttrs{out_features, bias};
  return node(name, std::move(op), {Term{in}});
}

Value GraphBuilder::softmax(const std::string& name, Value in) {
  return node(name, make_op(OpKind::Softmax), {Term{in}});
}

Graph GraphBuilder::finish() {
  HIOS_CHECK(open_block_ < 0, "graph '%s': block '%s' was never ended", g_.name.c_str(),
             g_.blocks[open_block_].name.c_str());
  Graph g = std::move(g_);
  g_ = Graph{};
  g.finalize();
  return g;
}

Graph graph_at_shape(const Graph& g, int64_t batch, int64_t height, int64_t width) {
  Graph out = g;
  out.batch = batch;
  out.height = height;
  out.width = width;
  for (Node& n : out.nodes) {
    n.shape = Shape{};
    n.cost = OpCost{};
  }
  out.finalize();
  return out;
}

}  // namespace hios
