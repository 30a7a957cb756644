// ONNX models as hios graphs (onnx_import.hpp): the importer's run in phases and the graph it
// assembles: reading the initializers and the input, mapping each node through the table of
// handlers (the converters themselves are in onnx_ops.cpp), refusing with every problem
// listed, pruning, finding the blocks and emitting through GraphBuilder.
#include "importer/onnx_import.hpp"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "graph/error.hpp"
#include "importer/onnx_fold.hpp"
#include "importer/onnx_import_internal.hpp"
#include "importer/onnx_model.hpp"

namespace hios::importer {

namespace detail {

namespace {

namespace fs = std::filesystem;

std::string sanitize(const std::string& raw) {
  std::string s;
  for (char ch : raw) {
    const bool keep = std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '.' || ch == '-';
    s += keep ? ch : (ch == '/' || ch == ':') ? '.' : '_';
  }
  const size_t b = s.find_first_not_of('.');
  s = b == std::string::npos ? "" : s.substr(b);
  return s.empty() ? "node" : s;
}

}  // namespace

OnnxImport Importer::run() {
  read_initializers();
  count_uses();
  read_graph_input();
  map_nodes();
  refuse_problems();
  Value out = read_graph_output();
  const std::vector<int> kept = prune(out.node);
  const auto blocks = find_blocks(kept);
  return emit(kept, blocks);
}

// --- reading ---------------------------------------------------------------------------

void Importer::read_initializers() {
  for (const auto& t : m_.proto.graph().initializer()) values_[t.name()].constant = read_tensor(m_, t, t.name());
}

void Importer::count_uses() {
  for (const auto& n : m_.proto.graph().node()) {
    for (const auto& i : n.input()) {
      if (!i.empty()) ++uses_[i];
    }
  }
  for (const auto& o : m_.proto.graph().output()) ++uses_[o.name()];
}

void Importer::read_graph_input() {
  const auto& g = m_.proto.graph();
  std::vector<const onnx::ValueInfoProto*> inputs;
  for (const auto& i : g.input()) {
    if (!values_.count(i.name())) inputs.push_back(&i);  // initializers may be listed as inputs
  }
  HIOS_CHECK(inputs.size() == 1, "%s: the model has %zu inputs; hios graphs take one image tensor", m_.file.c_str(),
             inputs.size());
  const onnx::ValueInfoProto& in = *inputs[0];
  input_name_ = in.name();
  const auto& tt = in.type().tensor_type();
  HIOS_CHECK(tt.elem_type() == onnx::TensorProto::FLOAT, "%s: input '%s' is not float32 (element type %d)",
             m_.file.c_str(), in.name().c_str(), int(tt.elem_type()));
  HIOS_CHECK(tt.shape().dim_size() == 4, "%s: input '%s' has rank %d; hios graphs take an N x C x H x W image tensor",
             m_.file.c_str(), in.name().c_str(), tt.shape().dim_size());
  int64_t dims[4];
  const int64_t given[4] = {o_.batch, 0, o_.height, o_.width};
  const char* option[4] = {"--batch", "", "--height", "--width"};
  for (int k = 0; k < 4; ++k) {
    const auto& d = tt.shape().dim(k);
    dims[k] = given[k] > 0 ? given[k] : d.has_dim_value() ? d.dim_value() : 0;
    HIOS_CHECK(dims[k] > 0, "%s: input '%s' dimension %d is '%s' in the model; give it with %s", m_.file.c_str(),
               in.name().c_str(), k, d.dim_param().c_str(), k == 1 ? "the model (channels must be fixed)" : option[k]);
    HIOS_CHECK(dims[k] <= (k == 1 ? (int64_t(1) << 20) : 65536), "%s: input '%s' dimension %d is %lld, out of range",
               m_.file.c_str(), in.name().c_str(), k, (long long)dims[k]);
  }
  Pending p;
  p.name = unique_name(in.name());
  p.op = make_op(OpKind::Input);
  std::get<InputAttrs>(p.op.attrs).channels = dims[1];
  p.shape = Shape{dims[0], dims[1], dims[2], dims[3]};
  nodes_.push_back(p);
  values_[in.name()].live = node_live(0);
}

Value Importer::read_graph_output() {
  const auto& g = m_.proto.graph();
  HIOS_CHECK(g.output_size() == 1, "%s: the model has %d outputs; hios graphs have one", m_.file.c_str(), g.output_size());
  const std::string& name = g.output(0).name();
  auto it = values_.find(name);
  HIOS_CHECK(it != values_.end() && it->second.live, "%s: output '%s' is a constant or is never computed",
             m_.file.c_str(), name.c_str());
  try {
    apply_pending_pad(name);
    const Value out = materialize(*it->second.live, name);
    HIOS_CHECK(out.node != 0, "%s: output '%s' is the input itself: the model computes nothing", m_.file.c_str(),
               name.c_str());
    return out;
  } catch (const Refused& r) {
    throw_error("%s: output '%s': %s", m_.file.c_str(), name.c_str(), r.why.c_str());
  }
}

// --- node mapping ----------------------------------------------------------------------

void Importer::map_nodes() {
  // Each op's handler and how many inputs it needs at least (all of them named).
  struct Entry {
    Handler handler;
    int min_inputs;
  };
  static const std::map<std::string, Entry> handlers = {
      {"Conv", {&Importer::conv, 2}},
      {"BatchNormalization", {&Importer::batch_norm, 5}},
      {"Relu", {&Importer::activation, 1}},
      {"Sigmoid", {&Importer::activation, 1}},
      {"Tanh", {&Importer::activation, 1}},
      {"Clip", {&Importer::clip, 1}},
      {"MaxPool", {&Importer::pool, 1}},
      {"AveragePool", {&Importer::pool, 1}},
      {"GlobalAveragePool", {&Importer::global_pool, 1}},
      {"GlobalMaxPool", {&Importer::global_pool, 1}},
      {"ReduceMean", {&Importer::reduce_mean, 1}},
      {"Concat", {&Importer::concat, 1}},
      {"Add", {&Importer::binary, 2}},
      {"Sub", {&Importer::binary, 2}},
      {"Mul", {&Importer::binary, 2}},
      {"Div", {&Importer::binary, 2}},
      {"Pad", {&Importer::pad, 1}},
      {"Identity", {&Importer::alias, 1}},
      {"Dropout", {&Importer::alias, 1}},
      {"Flatten", {&Importer::reshape, 1}},
      {"Reshape", {&Importer::reshape, 2}},
      {"Squeeze", {&Importer::reshape, 1}},
      {"Unsqueeze", {&Importer::reshape, 1}},
      {"Gemm", {&Importer::gemm, 2}},
      {"MatMul", {&Importer::gemm, 2}},
      {"Softmax", {&Importer::softmax, 1}},
      {"Shape", {&Importer::shape_of, 1}},
  };
  for (const auto& n : m_.proto.graph().node()) {
    if (std::any_of(n.input().begin(), n.input().end(), [&](const std::string& i) { return failed_.count(i) > 0; })) {
      fail_outputs(n);  // already reported upstream
      continue;
    }
    if (!n.domain().empty() && n.domain() != "ai.onnx") {
      refuse(n, "domain '" + n.domain() + "' is not supported");
      continue;
    }
    for (const auto& i : n.input()) {
      if (!i.empty() && !values_.count(i)) {
        refuse(n, "input '" + i + "' is never computed");
        break;
      }
    }
    if (n.output_size() == 0 || n.output(0).empty()) {
      refuse(n, "has no output");
      continue;
    }
    if (failed_.count(n.output(0))) continue;
    auto it = handlers.find(n.op_type());
    if (it != handlers.end()) {
      bool named = n.input_size() >= it->second.min_inputs;
      for (int k = 0; named && k < it->second.min_inputs; ++k) named = !n.input(k).empty();
      if (!named) {
        refuse(n, strprintf("needs at least %d inputs", it->second.min_inputs));
        continue;
      }
    }
    if (fold_if_constant(n)) continue;
    if (it == handlers.end()) {
      refuse(n, "not supported");
      continue;
    }
    try {
      (this->*(it->second.handler))(n);
    } catch (const Refused& r) {
      refuse(n, r.why);
    }
  }
}

void Importer::refuse(const onnx::NodeProto& n, const std::string& why) {
  problems_.push_back(strprintf("%s '%s' (opset %d): %s", n.op_type().c_str(), n.name().c_str(), m_.opset, why.c_str()));
  fail_outputs(n);
}
void Importer::fail_outputs(const onnx::NodeProto& n) {
  for (const auto& o : n.output()) failed_.insert(o);
}

void Importer::refuse_problems() {
  if (problems_.empty()) return;
  std::string list;
  for (size_t k = 0; k < problems_.size(); ++k) list += (k ? "; " : "") + problems_[k];
  throw_error("%s: cannot import %zu node%s: %s", m_.file.c_str(), problems_.size(), problems_.size() == 1 ? "" : "s",
              list.c_str());
}

// A node whose inputs are all constant is evaluated now.
bool Importer::fold_if_constant(const onnx::NodeProto& n) {
  std::vector<const ConstTensor*> in;
  for (const auto& i : n.input()) {
    if (i.empty()) {
      in.push_back(nullptr);
      continue;
    }
    const OnnxValue& v = values_.at(i);
    if (!v.constant) return false;
    in.push_back(&*v.constant);
  }
  std::vector<ConstTensor> out;
  std::string why;
  if (!fold_constant_node(m_, n, in, out, why)) {
    refuse(n, "constant, but " + why);
    return true;
  }
  for (int k = 0; k < n.output_size() && k < int(out.size()); ++k) values_[n.output(k)].constant = std::move(out[size_t(k)]);
  if (n.op_type() != "Constant") ++folded_["constant computations"];
  return true;
}

// --- helpers ---------------------------------------------------------------------------

std::string Importer::unique_name(const std::string& raw) {
  std::string base = sanitize(raw), name = base;
  for (int k = 2; names_.count(name); ++k) name = base + "_" + std::to_string(k);
  names_.insert(name);
  return name;
}


// The computed value `name`; a pending Pad is applied first (a pad node) unless the reader
// takes it (pad_ok).
const Live& Importer::live(const std::string& name, bool pad_ok) {
  const OnnxValue& v = values_.at(name);
  if (!v.live) refused("input '" + name + "' is a constant where hios needs a computed tensor");
  if (!pad_ok) apply_pending_pad(name);
  return *v.live;
}
void Importer::apply_pending_pad(const std::string& name) {
  Live& l = *values_.at(name).live;
  if (!l.pad.any()) return;
  l = pad_node(l, l.pad, name);
}
// A pad node computing `x` padded by `pad` (x's own pending pad ignored).
Live Importer::pad_node(const Live& x, const PendingPad& pad, const std::string& raw) {
  Pending p;
  p.name = unique_name(raw + ".pad");
  p.op = make_op(OpKind::Pad);
  std::get<PadAttrs>(p.op.attrs) = PadAttrs{{pad.top, pad.left, pad.bottom, pad.right}, pad.fill};
  p.inputs = x.terms;
  ++folded_["Pads as explicit pad nodes"];
  return node_live(add_node(std::move(p)));
}
const ConstTensor& Importer::constant(const onnx::NodeProto& n, int k, const char* what) {
  if (k >= n.input_size() || n.input(k).empty()) refused(std::string("has no ") + what);
  const OnnxValue& v = values_.at(n.input(k));
  if (!v.constant) refused(std::string(what) + " '" + n.input(k) + "' is computed; hios needs it constant");
  return *v.constant;
}
const ConstTensor* Importer::optional_constant(const onnx::NodeProto& n, int k, const char* what) {
  if (k >= n.input_size() || n.input(k).empty()) return nullptr;
  return &constant(n, k, what);
}
int Importer::uses(const std::string& value) const {
  auto it = uses_.find(value);
  return it == uses_.end() ? 0 : it->second;
}
void Importer::only_first_output_used(const onnx::NodeProto& n) {
  for (int k = 1; k < n.output_size(); ++k) {
    if (!n.output(k).empty() && uses(n.output(k))) refused("its output " + std::to_string(k) + " is used");
  }
}

int Importer::add_node(Pending p) {
  std::vector<Shape> in;
  const OpDef& def = op_def(p.op.kind);
  if (def.terms_are_operands) {
    for (const Term& t : p.inputs) in.push_back(term_shape(t));
  } else {
    Shape s = term_shape(p.inputs[0]);
    for (size_t k = 1; k < p.inputs.size(); ++k) s.c += term_shape(p.inputs[k]).c;
    in.push_back(s);
  }
  const Shape& first = in[0];
  try {
    p.shape = infer_op(p.op, in, InferContext{p.name, first.n, first.h, first.w});
  } catch (const Error& e) {
    refused(e.what());
  }
  nodes_.push_back(std::move(p));
  return int(nodes_.size()) - 1;
}
Shape Importer::term_shape(const Term& t) const {
  const Value& v = t[0];
  Shape s = nodes_[size_t(v.node)].shape;
  if (v.end >= 0) s.c = v.end - v.begin;
  return s;
}

// One whole value for `l`: the node itself, or an identity (a concat or a sum) assembling
// its terms.
Value Importer::materialize(Live& l, const std::string& onnx_name) {
  if (l.single() && l.terms[0][0].end < 0) return l.terms[0][0];
  Pending p;
  p.name = unique_name(onnx_name);
  p.op = make_op(OpKind::Identity);
  p.inputs = l.terms;
  const int idx = add_node(std::move(p));
  l.terms = {{Value{idx}}};
  return Value{idx};
}

Live Importer::node_live(int idx, bool flat) const {
  Live l;
  l.terms = {{Value{idx}}};
  l.shape = nodes_[size_t(idx)].shape;
  l.flat = flat;
  return l;
}


// The conv or linear node that alone computes `value`, when its output may still change:
// read by this node only.
Pending* Importer::sole_producer(const std::string& value, OpKind kind) {
  const Live& l = *values_.at(value).live;
  if (!l.single() || l.terms[0][0].end >= 0 || uses(value) != 1 || l.pad.any()) return nullptr;
  Pending& p = nodes_[size_t(l.terms[0][0].node)];
  return p.op.kind == kind ? &p : nullptr;
}

// --- structure -------------------------------------------------------------------------

// The nodes the output depends on, in order (the input placeholder first).
std::vector<int> Importer::prune(int output) const {
  std::vector<char> keep(nodes_.size(), 0);
  keep[size_t(output)] = 1;
  for (int i = output; i >= 0; --i) {
    if (!keep[size_t(i)]) continue;
    for (const Term& t : nodes_[size_t(i)].inputs) {
      for (const Value& v : t) keep[size_t(v.node)] = 1;
    }
  }
  keep[0] = 1;
  std::vector<int> kept;
  for (int i = 0; i <= output; ++i) {
    if (keep[size_t(i)]) kept.push_back(i);
  }
  return kept;
}

// Blocks as lists of positions in `kept` (position 0 is the input), the last of each its
// exit. A block ends at a node e where no earlier node is read after e: a cut every path
// passes through, so branches that can run together stay in one block (an Inception module,
// a residual block). A cut-free run longer than kMaxBlock (DenseNet's dense blocks, NASNet's
// cells, which read the two previous cells) is cut further at a node e once at least
// kMinPiece open nodes lead to it: those form the block, and the open nodes that do not (the
// next cell's path from the previous cell's output) move to a later block, which they may,
// as they read nothing of the new block.
std::vector<std::vector<int>> Importer::find_blocks(const std::vector<int>& kept) const {
  constexpr int kMaxBlock = 48, kMinPiece = 8;
  const int n = int(kept.size());
  std::vector<int> pos(nodes_.size(), -1);
  for (int k = 0; k < n; ++k) pos[size_t(kept[size_t(k)])] = k;
  std::vector<std::vector<int>> preds(static_cast<size_t>(n));
  std::vector<int> last_use(static_cast<size_t>(n));
  for (int k = 0; k < n; ++k) last_use[size_t(k)] = k;
  for (int k = 1; k < n; ++k) {
    for (const Term& t : nodes_[size_t(kept[size_t(k)])].inputs) {
      for (const Value& v : t) {
        const int p = pos[size_t(v.node)];
        last_use[size_t(p)] = std::max(last_use[size_t(p)], k);
        preds[size_t(k)].push_back(p);
      }
    }
  }
  // k is a cut when no node before it is read after it (the input included).
  std::vector<std::pair<int, int>> strict;
  int first = 1, reach = last_use[0];
  for (int k = 1; k < n; ++k) {
    if (reach <= k) {
      strict.emplace_back(first, k);
      first = k + 1;
    }
    reach = std::max(reach, last_use[size_t(k)]);
  }
  if (first < n) strict.emplace_back(first, n - 1);
  std::vector<std::vector<int>> blocks;
  for (auto [b, e] : strict) {
    if (e - b + 1 <= kMaxBlock) {
      std::vector<int> all;
      for (int k = b; k <= e; ++k) all.push_back(k);
      blocks.push_back(std::move(all));
      continue;
    }
    // leads[k - b][j - b]: node j of the run leads to node k (the run's nodes only)
    const int len = e - b + 1;
    std::vector<std::vector<char>> leads(static_cast<size_t>(len), std::vector<char>(static_cast<size_t>(len), 0));
    for (int k = b; k <= e; ++k) {
      leads[size_t(k - b)][size_t(k - b)] = 1;
      for (int p : preds[size_t(k)]) {
        if (p < b) continue;
        for (int j = 0; j < len; ++j) leads[size_t(k - b)][size_t(j)] |= leads[size_t(p - b)][size_t(j)];
      }
    }
    std::vector<int> open;
    for (int k = b; k <= e; ++k) {
      open.push_back(k);
      std::vector<int> in, rest;
      for (int u : open) (leads[size_t(k - b)][size_t(u - b)] ? in : rest).push_back(u);
      bool movable = true;  // no node left open reads one of the block
      for (int u : rest) {
        for (int p : preds[size_t(u)]) movable = movable && !(p >= b && leads[size_t(k - b)][size_t(p - b)]);
      }
      if (k == e || (int(in.size()) >= kMinPiece && movable)) {
        blocks.push_back(std::move(in));
        open = std::move(rest);
      }
    }
    HIOS_CHECK(open.empty(), "%s: internal: %zu nodes left outside the blocks", m_.file.c_str(), open.size());
  }
  return blocks;
}

OnnxImport Importer::emit(const std::vector<int>& kept, const std::vector<std::vector<int>>& blocks) {
  const Pending& in = nodes_[0];
  std::string name = o_.name;
  if (name.empty()) name = m_.proto.graph().name();
  if (name.empty() || name == "main_graph" || name == "torch_jit" || name == "torch-jit-export") {
    name = fs::path(m_.file).stem().string();
  }
  GraphBuilder b(sanitize(name), in.shape.n, in.shape.h, in.shape.w);
  std::vector<Value> at(nodes_.size());
  at[0] = b.input(in.shape.c, in.name);
  OnnxImport r;
  for (const std::vector<int>& block : blocks) {
    const Pending& exit = nodes_[size_t(kept[size_t(block.back())])];
    b.begin_block(exit.name);
    for (int k : block) {
      const Pending& p = nodes_[size_t(kept[size_t(k)])];
      std::vector<Term> inputs = p.inputs;
      for (Term& t : inputs) {
        for (Value& v : t) v = Value{at[size_t(v.node)].node, v.begin, v.end};
      }
      at[size_t(kept[size_t(k)])] = b.node(p.name, p.op, std::move(inputs));
      if (p.op.kind == OpKind::Conv || p.op.kind == OpKind::Linear) {
        r.weights[p.name + ".weight"] = exec::TensorEntry{p.weight_dims, p.weight};
        if (!p.bias.empty()) r.weights[p.name + ".bias"] = exec::TensorEntry{{int64_t(p.bias.size())}, p.bias};
      }
    }
    b.end_block(at[size_t(kept[size_t(block.back())])]);
  }
  r.graph = b.finish();
  r.opset = m_.opset;
  r.onnx_nodes = m_.proto.graph().node_size();
  for (const auto& [what, count] : folded_) r.folded.push_back(std::to_string(count) + " " + what);
  return r;
}

}  // namespace detail

OnnxImport import_onnx(const OnnxImportOptions& options) {
  const OnnxModel model = read_onnx_model(options.model_file);
  return detail::Importer(model, options).run();
}

}  // namespace hios::importer
