#include "importer/onnx_patterns.hpp"

#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>


namespace hios::importer {

namespace {

// What the pass knows of the graph: each value's producer and how often it is read.
struct GraphIndex {
  std::map<std::string, int> producer;  // value -> node index
  std::map<std::string, int> uses;      // value -> readers (graph outputs count)
  std::map<std::string, const onnx::TensorProto*> initializers;
  std::map<std::string, int> reader;    // value -> its last reader node
  std::map<std::string, std::vector<int>> readers;  // value -> every reader node (once per input slot)

  explicit GraphIndex(const onnx::GraphProto& g) {
    for (int i = 0; i < g.node_size(); ++i) {
      for (const std::string& o : g.node(i).output()) producer[o] = i;
      for (const std::string& in : g.node(i).input()) {
        ++uses[in];
        reader[in] = i;
        readers[in].push_back(i);
      }
    }
    for (const auto& o : g.output()) ++uses[o.name()];
    for (const auto& t : g.initializer()) initializers[t.name()] = &t;
  }
};

// A scalar float constant's value (an initializer, or a Constant node's value), if `value` is one.
bool scalar_value(const onnx::GraphProto& g, const GraphIndex& ix, const std::string& value, double* out) {
  const onnx::TensorProto* t = nullptr;
  if (auto it = ix.initializers.find(value); it != ix.initializers.end()) {
    t = it->second;
  } else if (auto p = ix.producer.find(value); p != ix.producer.end()) {
    const onnx::NodeProto& n = g.node(p->second);
    if (n.op_type() != "Constant" || !n.domain().empty()) return false;
    for (const auto& a : n.attribute()) {
      if (a.name() == "value" && a.has_t()) t = &a.t();
    }
  }
  if (!t) return false;
  int64_t count = 1;
  for (int64_t d : t->dims()) count *= d;
  if (count != 1) return false;
  if (t->data_type() == onnx::TensorProto::FLOAT) {
    if (t->float_data_size() == 1) {
      *out = t->float_data(0);
    } else if (t->raw_data().size() == 4) {
      float f;
      std::memcpy(&f, t->raw_data().data(), 4);
      *out = f;
    } else {
      return false;
    }
    return true;
  }
  if (t->data_type() == onnx::TensorProto::DOUBLE) {
    if (t->double_data_size() == 1) {
      *out = t->double_data(0);
    } else if (t->raw_data().size() == 8) {
      std::memcpy(out, t->raw_data().data(), 8);
    } else {
      return false;
    }
    return true;
  }
  return false;
}

bool near(double v, double want) { return std::fabs(v - want) <= 1e-6 * std::fabs(want); }

const onnx::NodeProto* node_of(const onnx::GraphProto& g, const GraphIndex& ix, const std::string& value) {
  auto p = ix.producer.find(value);
  return p == ix.producer.end() ? nullptr : &g.node(p->second);
}

// For a binary node of `type` with operands (x, c) in either order, where c is a scalar
// constant near `want`: x. Empty when it is not that.
std::string operand_beside(const onnx::GraphProto& g, const GraphIndex& ix, const onnx::NodeProto* n,
                           const char* type, double want, bool commutes = true) {
  if (!n || n->op_type() != type || !n->domain().empty() || n->input_size() != 2) return "";
  double v = 0;
  if (scalar_value(g, ix, n->input(1), &v) && near(v, want)) return n->input(0);
  if (commutes && scalar_value(g, ix, n->input(0), &v) && near(v, want)) return n->input(1);
  return "";
}

// The reader of `value` when it has exactly one.
const onnx::NodeProto* sole_reader(const onnx::GraphProto& g, const GraphIndex& ix, const std::string& value,
                                   std::vector<int>* idx) {
  auto u = ix.uses.find(value);
  if (u == ix.uses.end() || u->second != 1 || !ix.reader.count(value)) return nullptr;
  const int i = ix.reader.at(value);
  idx->push_back(i);
  return &g.node(i);
}

// The other operand of binary node n, beside `value`.
std::string other_operand(const onnx::NodeProto& n, const std::string& value) {
  if (n.input_size() != 2) return "";
  return n.input(0) == value ? n.input(1) : n.input(1) == value ? n.input(0) : "";
}

// A matched GELU chain: the node indices to remove, x, the value the last node writes, and
// whether it is the tanh approximation.
struct GeluMatch {
  std::vector<int> nodes;
  std::string x, out;
  bool tanh = false;
};

// The tail both GELU forms share, after f(x) (erf or tanh): (1 + f) * x * 0.5, with the 0.5
// applied to x first or to the product last. `f_out` is f's output; indices go to m->nodes.
bool match_gelu_tail(const onnx::GraphProto& g, const GraphIndex& ix, const std::string& f_out, const std::string& x,
                     GeluMatch* m) {
  const onnx::NodeProto* add = sole_reader(g, ix, f_out, &m->nodes);
  if (!add || add->op_type() != "Add" || !add->domain().empty()) return false;
  double one = 0;
  if (!scalar_value(g, ix, other_operand(*add, f_out), &one) || !near(one, 1.0)) return false;
  const onnx::NodeProto* mul = sole_reader(g, ix, add->output(0), &m->nodes);
  if (!mul || mul->op_type() != "Mul" || !mul->domain().empty()) return false;
  const std::string beside = other_operand(*mul, add->output(0));
  if (beside == x) {  // x * (1 + f): then * 0.5
    const onnx::NodeProto* half = sole_reader(g, ix, mul->output(0), &m->nodes);
    if (operand_beside(g, ix, half, "Mul", 0.5) != mul->output(0)) return false;
    m->out = half->output(0);
  } else {  // (0.5 * x) * (1 + f)
    const onnx::NodeProto* halfx = node_of(g, ix, beside);
    if (operand_beside(g, ix, halfx, "Mul", 0.5) != x || ix.uses.at(beside) != 1) return false;
    m->nodes.push_back(ix.producer.at(beside));
    m->out = mul->output(0);
  }
  m->x = x;
  return true;
}

// GELU in its erf form, as TorchScript exports nn.GELU: 0.5 * x * (1 + erf(x / sqrt(2))),
// x / sqrt(2) also as x * (1 / sqrt(2)).
bool match_gelu_erf(const onnx::GraphProto& g, const GraphIndex& ix, int erf_index, GeluMatch* m) {
  const onnx::NodeProto& erf = g.node(erf_index);
  if (erf.op_type() != "Erf" || !erf.domain().empty() || erf.input_size() != 1 || erf.output_size() != 1) return false;
  const onnx::NodeProto* scale = node_of(g, ix, erf.input(0));
  std::string x = operand_beside(g, ix, scale, "Div", std::sqrt(2.0), false);
  if (x.empty()) x = operand_beside(g, ix, scale, "Mul", 1 / std::sqrt(2.0));
  if (x.empty() || ix.uses.at(erf.input(0)) != 1) return false;
  m->nodes = {ix.producer.at(erf.input(0)), erf_index};
  return match_gelu_tail(g, ix, erf.output(0), x, m);
}

// x cubed: Pow(x, 3), or x * x * x in either grouping. Its nodes go to `idx`.
std::string cube_root_of(const onnx::GraphProto& g, const GraphIndex& ix, const std::string& value,
                         std::vector<int>* idx) {
  const onnx::NodeProto* n = node_of(g, ix, value);
  if (!n || ix.uses.at(value) != 1) return "";
  const std::string base = operand_beside(g, ix, n, "Pow", 3.0, false);
  if (!base.empty()) {
    idx->push_back(ix.producer.at(value));
    return base;
  }
  if (n->op_type() != "Mul" || !n->domain().empty() || n->input_size() != 2) return "";
  for (int k = 0; k < 2; ++k) {  // (x * x) * x or x * (x * x)
    const std::string sq = n->input(k), x = n->input(1 - k);
    const onnx::NodeProto* s = node_of(g, ix, sq);
    if (s && s->op_type() == "Mul" && s->domain().empty() && s->input_size() == 2 && s->input(0) == x &&
        s->input(1) == x && ix.uses.at(sq) == 1) {
      idx->push_back(ix.producer.at(value));
      idx->push_back(ix.producer.at(sq));
      return x;
    }
  }
  return "";
}

// GELU's tanh approximation: 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))).
bool match_gelu_tanh(const onnx::GraphProto& g, const GraphIndex& ix, int tanh_index, GeluMatch* m) {
  const onnx::NodeProto& th = g.node(tanh_index);
  if (th.op_type() != "Tanh" || !th.domain().empty() || th.input_size() != 1 || th.output_size() != 1) return false;
  const std::string inner = operand_beside(g, ix, node_of(g, ix, th.input(0)), "Mul", std::sqrt(2 / M_PI));
  if (inner.empty() || ix.uses.at(th.input(0)) != 1 || ix.uses.at(inner) != 1) return false;
  const onnx::NodeProto* sum = node_of(g, ix, inner);
  if (!sum || sum->op_type() != "Add" || !sum->domain().empty() || sum->input_size() != 2) return false;
  m->nodes = {ix.producer.at(th.input(0)), ix.producer.at(inner), tanh_index};
  for (int k = 0; k < 2; ++k) {  // x + 0.044715 * x^3, in either order
    const std::string x = sum->input(k), term = sum->input(1 - k);
    const std::string cube = operand_beside(g, ix, node_of(g, ix, term), "Mul", 0.044715);
    if (cube.empty() || ix.uses.at(term) != 1) continue;
    std::vector<int> idx = m->nodes;
    if (cube_root_of(g, ix, cube, &idx) != x) continue;
    idx.push_back(ix.producer.at(term));
    m->nodes = idx;
    m->tanh = true;
    return match_gelu_tail(g, ix, th.output(0), x, m);
  }
  return false;
}

// A matched layer norm written out: the node indices to remove, x, the scale and bias (the bias
// may be empty), the value the last node writes, the first normalised axis (negative) and epsilon.
struct NormMatch {
  std::vector<int> nodes;
  std::string x, scale, bias, out;
  int axis = -1;
  double eps = 0;
};

// An int64 constant's values (an initializer or a Constant node's), if `value` is one.
bool int_values(const onnx::GraphProto& g, const GraphIndex& ix, const std::string& value, std::vector<int64_t>* out) {
  const onnx::TensorProto* t = nullptr;
  if (auto it = ix.initializers.find(value); it != ix.initializers.end()) {
    t = it->second;
  } else if (const onnx::NodeProto* n = node_of(g, ix, value); n && n->op_type() == "Constant" && n->domain().empty()) {
    for (const auto& a : n->attribute()) {
      if (a.name() == "value" && a.has_t()) t = &a.t();
    }
  }
  if (!t || t->data_type() != onnx::TensorProto::INT64 || t->dims_size() > 1) return false;
  out->assign(t->int64_data().begin(), t->int64_data().end());
  if (out->empty() && t->raw_data().size() % 8 == 0) {
    out->resize(t->raw_data().size() / 8);
    if (!out->empty()) std::memcpy(out->data(), t->raw_data().data(), t->raw_data().size());
  }
  return !out->empty() && out->size() <= 8;
}

// A ReduceMean over the last k dims with kept dims (axes as an attribute, or opset 18's input):
// k, else 0. Only negative axes say "the last dims" without the rank.
int mean_over_last_dims(const onnx::GraphProto& g, const GraphIndex& ix, const onnx::NodeProto* n) {
  if (!n || n->op_type() != "ReduceMean" || !n->domain().empty() || n->output_size() != 1) return 0;
  std::vector<int64_t> axes;
  for (const auto& a : n->attribute()) {
    if (a.name() == "keepdims" && a.i() != 1) return 0;
    if (a.name() == "noop_with_empty_axes" && a.i() != 0) return 0;
    if (a.name() == "axes") axes.assign(a.ints().begin(), a.ints().end());
  }
  if (n->input_size() == 2 && !int_values(g, ix, n->input(1), &axes)) return 0;
  if (n->input_size() > 2 || axes.empty()) return 0;
  std::set<int64_t> set(axes.begin(), axes.end());
  const int k = int(axes.size());
  if (int(set.size()) != k || *set.begin() != -k || *set.rbegin() != -1) return 0;
  return k;
}

// A layer norm as the TorchScript exporter writes nn.LayerNorm: mean = ReduceMean(x), d = x -
// mean, var = ReduceMean(d^2) (Pow(d, 2) or d * d), (d / Sqrt(var + eps)) * scale, + bias.
bool match_layer_norm(const onnx::GraphProto& g, const GraphIndex& ix, int mean_index, NormMatch* m) {
  const onnx::NodeProto& mean = g.node(mean_index);
  const int k = mean_over_last_dims(g, ix, &mean);
  if (k == 0) return false;
  const std::string x = mean.input(0);
  m->nodes = {mean_index};
  const onnx::NodeProto* sub = sole_reader(g, ix, mean.output(0), &m->nodes);
  if (!sub || sub->op_type() != "Sub" || !sub->domain().empty() || sub->input_size() != 2 || sub->input(0) != x ||
      sub->input(1) != mean.output(0)) {
    return false;
  }
  const std::string d = sub->output(0);
  auto r = ix.readers.find(d);
  if (r == ix.readers.end() || ix.uses.at(d) != int(r->second.size())) return false;  // a graph output too
  const onnx::NodeProto *square = nullptr, *div = nullptr;
  for (int i : r->second) {
    const onnx::NodeProto& n = g.node(i);
    if (!n.domain().empty() || n.input_size() != 2) return false;
    if (n.op_type() == "Div" && n.input(0) == d && !div) {
      div = &n;
    } else if (!square && ((n.op_type() == "Mul" && n.input(0) == d && n.input(1) == d) ||
                           operand_beside(g, ix, &n, "Pow", 2.0, false) == d)) {
      square = &n;
    } else if (&n != square) {
      return false;
    }
  }
  const size_t want = square && square->op_type() == "Mul" ? 3 : 2;
  if (!square || !div || r->second.size() != want) return false;
  m->nodes.push_back(ix.producer.at(square->output(0)));
  m->nodes.push_back(ix.producer.at(div->output(0)));
  const onnx::NodeProto* var = sole_reader(g, ix, square->output(0), &m->nodes);
  if (mean_over_last_dims(g, ix, var) != k) return false;
  const onnx::NodeProto* add_eps = sole_reader(g, ix, var->output(0), &m->nodes);
  if (!add_eps || add_eps->op_type() != "Add" || !add_eps->domain().empty() || add_eps->input_size() != 2) return false;
  if (!scalar_value(g, ix, other_operand(*add_eps, var->output(0)), &m->eps) || !(m->eps >= 0)) return false;
  const onnx::NodeProto* root = sole_reader(g, ix, add_eps->output(0), &m->nodes);
  if (!root || root->op_type() != "Sqrt" || !root->domain().empty() || div->input(1) != root->output(0) ||
      ix.uses.at(root->output(0)) != 1) {
    return false;
  }
  const onnx::NodeProto* mul = sole_reader(g, ix, div->output(0), &m->nodes);
  if (!mul || mul->op_type() != "Mul" || !mul->domain().empty() || mul->input_size() != 2) return false;
  m->scale = other_operand(*mul, div->output(0));
  if (m->scale.empty() || m->scale == div->output(0)) return false;
  m->out = mul->output(0);
  std::vector<int> with_bias = m->nodes;
  const onnx::NodeProto* add = sole_reader(g, ix, mul->output(0), &with_bias);
  if (add && add->op_type() == "Add" && add->domain().empty() && add->input_size() == 2) {
    const std::string bias = other_operand(*add, mul->output(0));
    if (!bias.empty() && bias != mul->output(0)) {
      m->bias = bias;
      m->out = add->output(0);
      m->nodes = with_bias;
    }
  }
  m->x = x;
  m->axis = -k;
  return true;
}

// A matched attention chain: softmax(scale * Q K^T + mask) V, as both PyTorch exporters write
// it. The nodes to remove, Q, the tensor K^T is a transpose of (`k_source`, with `k_perm` the
// permutation giving K itself; empty when it is K), V, the mask (may be empty), the scale and the
// value the last product writes.
struct AttentionMatch {
  std::vector<int> nodes;
  std::string q, k_source, v, mask, out, k_transposed;
  std::vector<int64_t> k_perm;
  double scale = 1;
  bool default_scale = false;  // 1 / sqrt(Q's last dim), computed in the graph from Q's shape
  int rank = 0;  // of the scores (K^T's transpose says it)
};

// `value` through any Casts that produce it.
std::string through_casts(const onnx::GraphProto& g, const GraphIndex& ix, std::string value) {
  for (const onnx::NodeProto* n = node_of(g, ix, value); n && n->op_type() == "Cast" && n->domain().empty() &&
                                                         n->input_size() == 1;
       n = node_of(g, ix, value)) {
    value = n->input(0);
  }
  return value;
}
bool is_op(const onnx::NodeProto* n, const char* type, int inputs) {
  return n && n->op_type() == type && n->domain().empty() && n->input_size() == inputs && n->output_size() == 1;
}

// Whether `value` is the square root of 1 / sqrt(q's last dim) computed from q's shape: PyTorch's
// TorchScript exporter writes scaled_dot_product_attention's default scale so (Sqrt of the Cast
// of Div(1, Sqrt(Cast(Slice(Shape(q), [-1], [INT64_MAX]))))) and multiplies Q and K^T by it each.
bool root_of_default_scale(const onnx::GraphProto& g, const GraphIndex& ix, const std::string& value,
                           const std::string& q) {
  const onnx::NodeProto* root = node_of(g, ix, through_casts(g, ix, value));
  if (!is_op(root, "Sqrt", 1)) return false;
  const onnx::NodeProto* div = node_of(g, ix, through_casts(g, ix, root->input(0)));
  double one = 0;
  if (!is_op(div, "Div", 2) || !scalar_value(g, ix, div->input(0), &one) || one != 1) return false;
  const onnx::NodeProto* root_d = node_of(g, ix, through_casts(g, ix, div->input(1)));
  if (!is_op(root_d, "Sqrt", 1)) return false;
  const onnx::NodeProto* slice = node_of(g, ix, through_casts(g, ix, root_d->input(0)));
  if (!slice || slice->op_type() != "Slice" || !slice->domain().empty() || slice->input_size() < 3 ||
      slice->input_size() > 4) {
    return false;
  }
  std::vector<int64_t> starts, ends, axes{0};
  if (!int_values(g, ix, slice->input(1), &starts) || starts != std::vector<int64_t>{-1} ||
      !int_values(g, ix, slice->input(2), &ends) || ends.size() != 1 || ends[0] < (int64_t(1) << 31)) {
    return false;
  }
  if (slice->input_size() == 4 && (!int_values(g, ix, slice->input(3), &axes) || axes.size() != 1)) return false;
  if (axes[0] != 0 && axes[0] != -1) return false;
  const onnx::NodeProto* shape = node_of(g, ix, slice->input(0));
  return is_op(shape, "Shape", 1) && shape->attribute_size() == 0 && shape->input(0) == q;
}

// Value = x times the root of the default scale of `q` (x itself when q is empty), either
// operand order: x, else empty.
std::string default_root_scaled(const onnx::GraphProto& g, const GraphIndex& ix, const std::string& value,
                                const std::string& q) {
  const onnx::NodeProto* n = node_of(g, ix, value);
  if (!is_op(n, "Mul", 2) || ix.uses.at(value) != 1) return "";
  for (int k = 0; k < 2; ++k) {
    const std::string& x = n->input(k);
    if (root_of_default_scale(g, ix, n->input(1 - k), q.empty() ? x : q)) return x;
  }
  return "";
}

// Value times a scalar constant (Mul either way round, Div by it): the other operand and the
// factor, else empty.
std::string scaled_operand(const onnx::GraphProto& g, const GraphIndex& ix, const std::string& value, double* factor) {
  const onnx::NodeProto* n = node_of(g, ix, value);
  if (!n || !n->domain().empty() || n->input_size() != 2 || ix.uses.at(value) != 1) return "";
  double c = 0;
  if (n->op_type() == "Div" && scalar_value(g, ix, n->input(1), &c) && c != 0) {
    *factor = 1 / c;
    return n->input(0);
  }
  if (n->op_type() != "Mul") return "";
  for (int k = 0; k < 2; ++k) {
    if (scalar_value(g, ix, n->input(1 - k), &c)) {
      *factor = c;
      return n->input(k);
    }
  }
  return "";
}

// scale * Q K^T, ending at value `scores`: an optional Mul or Div by a constant, then the
// MatMul of Q and K^T, each optionally scaled too (the SDPA decomposition's form), with K^T a
// Transpose. Appends its nodes to m->nodes and sets q, k and the scale.
bool match_scaled_product(const onnx::GraphProto& g, const GraphIndex& ix, std::string scores, AttentionMatch* m) {
  double factor = 1;
  if (std::string inner = scaled_operand(g, ix, scores, &factor); !inner.empty()) {
    m->nodes.push_back(ix.producer.at(scores));
    m->scale *= factor;
    scores = inner;
  }
  const onnx::NodeProto* qk = node_of(g, ix, scores);
  if (!qk || qk->op_type() != "MatMul" || !qk->domain().empty() || qk->input_size() != 2 || ix.uses.at(scores) != 1) {
    return false;
  }
  m->nodes.push_back(ix.producer.at(scores));
  std::string q = qk->input(0), kt = qk->input(1);
  // Q and K^T each times the root of Q's default scale: the nodes computing it stay (they read
  // only Q's shape, and nothing reads them once the products are gone).
  if (const std::string qi = default_root_scaled(g, ix, q, ""); !qi.empty()) {
    if (const std::string ki = default_root_scaled(g, ix, kt, qi); !ki.empty()) {
      m->nodes.push_back(ix.producer.at(q));
      m->nodes.push_back(ix.producer.at(kt));
      m->default_scale = true;
      q = qi;
      kt = ki;
    }
  }
  for (std::string* operand : {&q, &kt}) {
    double f = 1;
    if (std::string inner = scaled_operand(g, ix, *operand, &f); !inner.empty()) {
      m->nodes.push_back(ix.producer.at(*operand));
      m->scale *= f;
      *operand = inner;
    }
  }
  const onnx::NodeProto* t = node_of(g, ix, kt);
  if (!t || t->op_type() != "Transpose" || !t->domain().empty() || t->input_size() != 1 || ix.uses.at(kt) != 1) return false;
  std::vector<int64_t> perm;
  for (const auto& a : t->attribute()) {
    if (a.name() == "perm") perm.assign(a.ints().begin(), a.ints().end());
  }
  if (perm.size() < 2 || perm.size() > 8) return false;
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);  // K: K^T with its last two dims swapped back
  bool identity = true;
  for (size_t d = 0; d < perm.size(); ++d) identity = identity && perm[d] == int64_t(d);
  m->nodes.push_back(ix.producer.at(kt));
  m->rank = int(perm.size());
  m->k_transposed = kt;
  m->k_source = t->input(0);
  if (!identity) m->k_perm = perm;
  m->q = q;
  // Another factor besides the default scale would need Q's last dim, which this pass does
  // not know.
  if (m->default_scale && m->scale != 1) return false;
  return std::isfinite(m->scale);
}

// From a Softmax over the last axis (-1, or the scores' rank less one: before opset 13 a softmax
// at the last axis is one over it too): its sole reader, the product with V, and its input, the
// scaled product (match_scaled_product), or that plus a mask in either order.
bool match_attention(const onnx::GraphProto& g, const GraphIndex& ix, int softmax_index, AttentionMatch* m) {
  const onnx::NodeProto& sm = g.node(softmax_index);
  if (sm.op_type() != "Softmax" || !sm.domain().empty() || sm.input_size() != 1 || sm.output_size() != 1) return false;
  int64_t axis = 1 << 20;  // absent: opset 13's -1 or older opsets' 1, which this pass cannot tell apart
  for (const auto& a : sm.attribute()) {
    if (a.name() == "axis") axis = a.i();
  }
  if (axis != -1 && (axis < 1 || axis > 7)) return false;
  m->nodes = {softmax_index};
  const onnx::NodeProto* pv = sole_reader(g, ix, sm.output(0), &m->nodes);
  if (!pv || pv->op_type() != "MatMul" || !pv->domain().empty() || pv->input_size() != 2 || pv->input(0) != sm.output(0) ||
      pv->input(1) == sm.output(0)) {
    return false;
  }
  m->v = pv->input(1);
  m->out = pv->output(0);
  auto over_last = [&] { return axis == -1 || axis == m->rank - 1; };
  const std::string scores = sm.input(0);
  const AttentionMatch head = *m;
  if (match_scaled_product(g, ix, scores, m)) return over_last();
  const onnx::NodeProto* add = node_of(g, ix, scores);
  if (!add || add->op_type() != "Add" || !add->domain().empty() || add->input_size() != 2 || ix.uses.at(scores) != 1 ||
      add->input(0) == add->input(1)) {
    return false;
  }
  for (int k = 0; k < 2; ++k) {
    *m = head;
    m->nodes.push_back(ix.producer.at(scores));
    m->mask = add->input(1 - k);
    if (match_scaled_product(g, ix, add->input(k), m)) return over_last();
  }
  return false;
}

}  // namespace

PatternCounts fuse_patterns(onnx::GraphProto& g) {
  // Every match in one pass over the index (chains do not share nodes: each intermediate has
  // one reader, a layer norm's centred x two), then one rewrite: linear in the graph's size.
  const GraphIndex ix(g);
  std::vector<GeluMatch> matches;
  std::vector<NormMatch> norms;
  std::vector<AttentionMatch> attentions;
  std::set<int> taken;
  auto claim = [&](const std::vector<int>& nodes) {
    for (int k : nodes) {
      if (taken.count(k)) return false;
    }
    taken.insert(nodes.begin(), nodes.end());
    return true;
  };
  for (int i = 0; i < g.node_size(); ++i) {
    AttentionMatch am;
    if (match_attention(g, ix, i, &am)) {
      if (claim(am.nodes)) attentions.push_back(std::move(am));
      continue;
    }
    NormMatch nm;
    if (match_layer_norm(g, ix, i, &nm)) {
      if (claim(nm.nodes)) norms.push_back(std::move(nm));
      continue;
    }
    GeluMatch m;
    if (!match_gelu_erf(g, ix, i, &m) && !(m = GeluMatch{}, match_gelu_tanh(g, ix, i, &m))) continue;
    if (claim(m.nodes)) matches.push_back(std::move(m));
  }
  if (matches.empty() && norms.empty() && attentions.empty()) return {};
  // One node where each chain's last node was: its readers come after it, and its inputs are
  // computed before the chain's first node.
  std::map<int, onnx::NodeProto> replace;
  auto rewritten = [&](const std::string& out, const char* type, const std::vector<std::string>& inputs) {
    const int last = ix.producer.at(out);
    onnx::NodeProto& n = replace[last];
    n.set_op_type(type);
    n.set_name(g.node(last).name().empty() ? out : g.node(last).name());
    for (const std::string& in : inputs) n.add_input(in);
    n.add_output(out);
    return &n;
  };
  auto attribute = [](onnx::NodeProto* n, const char* name, onnx::AttributeProto::AttributeType type) {
    onnx::AttributeProto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(type);
    return a;
  };
  for (const GeluMatch& m : matches) {
    onnx::NodeProto* gelu = rewritten(m.out, "Gelu", {m.x});
    if (m.tanh) attribute(gelu, "approximate", onnx::AttributeProto::STRING)->set_s("tanh");
  }
  for (const NormMatch& m : norms) {
    std::vector<std::string> inputs{m.x, m.scale};
    if (!m.bias.empty()) inputs.push_back(m.bias);
    onnx::NodeProto* ln = rewritten(m.out, "LayerNormalization", inputs);
    attribute(ln, "axis", onnx::AttributeProto::INT)->set_i(m.axis);
    attribute(ln, "epsilon", onnx::AttributeProto::FLOAT)->set_f(float(m.eps));
  }
  for (const AttentionMatch& m : attentions) {
    // K from the tensor K^T was transposed from, where that transpose was (its input is
    // computed before it), unless the two transposes cancel.
    std::string k = m.k_source;
    if (!m.k_perm.empty()) {
      k = m.k_transposed + ".k";
      onnx::NodeProto* t = rewritten(m.k_transposed, "Transpose", {m.k_source});
      t->set_output(0, k);
      t->set_name(t->name() + ".k");
      onnx::AttributeProto* perm = attribute(t, "perm", onnx::AttributeProto::INTS);
      for (int64_t d : m.k_perm) perm->add_ints(d);
    }
    std::vector<std::string> inputs{m.q, k, m.v};
    if (!m.mask.empty()) inputs.push_back(m.mask);
    onnx::NodeProto* at = rewritten(m.out, "Attention", inputs);
    // No scale attribute: ONNX's default, 1 / sqrt of Q's last dim.
    if (!m.default_scale) attribute(at, "scale", onnx::AttributeProto::FLOAT)->set_f(float(m.scale));
  }
  google::protobuf::RepeatedPtrField<onnx::NodeProto> rest;
  for (int k = 0; k < g.node_size(); ++k) {
    if (auto r = replace.find(k); r != replace.end()) {
      *rest.Add() = r->second;
    } else if (!taken.count(k)) {
      *rest.Add() = g.node(k);
    }
  }
  g.mutable_node()->Swap(&rest);
  return {int(matches.size()), int(norms.size()), int(attentions.size())};
}

}  // namespace hios::importer
