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

#include "graph/elements.hpp"
#include "graph/error.hpp"
#include "graph/npy.hpp"
#include "importer/onnx_fold.hpp"
#include "importer/onnx_import_internal.hpp"
#include "importer/onnx_patterns.hpp"
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
  std::vector<Value> outs = read_graph_outputs();
  fold_head_transposes(outs);
  if (outs.size() > 1) {
    // Several results: the last block ends in a join of them (graph/ops_tensor.cpp).
    Pending j;
    j.name = unique_name("results");
    j.op = make_op(OpKind::Join);
    for (const Value& v : outs) j.inputs.push_back({v});
    outs.insert(outs.begin(), Value{add_node(std::move(j))});
  }
  const std::vector<int> kept = prune(outs[0].node);
  const auto blocks = find_blocks(kept);
  OnnxImport r = emit(kept, blocks);
  for (size_t k = 1; k < outs.size(); ++k) r.graph.outputs.push_back(r.graph.find(nodes_[size_t(outs[k].node)].name));
  if (outs.size() > 1) r.graph.finalize();
  return r;
}

// --- reading ---------------------------------------------------------------------------

void Importer::read_initializers() {
  for (const auto& t : m_.proto.graph().initializer()) values_[t.name()].constant = read_tensor(m_, t, t.name());
  // Frozen inputs: constants from their .npy files.
  for (const auto& [name, file] : o_.frozen) {
    bool found = false;
    for (const auto& i : m_.proto.graph().input()) found = found || i.name() == name;
    HIOS_CHECK(found, "--freeze %s=%s: the model has no input '%s'", name.c_str(), file.c_str(), name.c_str());
    const NpyArray a = read_npy(file);
    ConstTensor c;
    c.dims = a.shape;
    c.integer = !is_float(a.dtype);
    if (c.integer) {
      for (int64_t k = 0; k < a.numel(); ++k) c.i.push_back(load_int(a.raw.data(), a.dtype, k));
    } else {
      c.f = a.data;
    }
    static const int kOnnx[] = {1, 10, 16, 11, 7, 6, 5, 3, 2, 4, 12, 13, 9};  // TensorProto type of each DType
    c.onnx_type = kOnnx[size_t(a.dtype)];
    values_[name].constant = std::move(c);
  }
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
    if (!values_.count(i.name()) || !values_.at(i.name()).constant) inputs.push_back(&i);  // initializers may be listed as inputs
  }
  HIOS_CHECK(!inputs.empty(), "%s: the model has no input (every one is a constant or frozen)", m_.file.c_str());
  // One float32 rank-4 input is the image of a convolution network (N, H, W from --batch,
  // --height, --width); any other input is a tensor input of its own dims and type.
  const auto& first = inputs[0]->type().tensor_type();
  const bool image = inputs.size() == 1 && first.elem_type() == onnx::TensorProto::FLOAT && first.shape().dim_size() == 4;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const onnx::ValueInfoProto& in = *inputs[k];
    HIOS_CHECK(!in.name().empty(), "%s: graph input %zu has an empty name", m_.file.c_str(), k);
    const auto& tt = in.type().tensor_type();
    HIOS_CHECK(in.type().has_tensor_type(), "%s: input '%s' is not a tensor (sequences, maps and optionals are not supported)",
               m_.file.c_str(), in.name().c_str());
    DType dtype;
    HIOS_CHECK(dtype_of_onnx(tt.elem_type(), &dtype), "%s: input '%s' has element type %d, which hios does not hold",
               m_.file.c_str(), in.name().c_str(), int(tt.elem_type()));
    HIOS_CHECK(tt.shape().dim_size() <= kMaxRank, "%s: input '%s' has rank %d (at most %d)", m_.file.c_str(),
               in.name().c_str(), tt.shape().dim_size(), kMaxRank);
    std::vector<int64_t> dims;
    for (int d = 0; d < tt.shape().dim_size(); ++d) {
      const auto& dim = tt.shape().dim(d);
      int64_t v = dim.has_dim_value() ? dim.dim_value() : 0;
      if (dim.has_dim_param() && o_.dims.count(dim.dim_param())) v = o_.dims.at(dim.dim_param());
      const int64_t given = image ? (d == 0 ? o_.batch : d == 2 ? o_.height : d == 3 ? o_.width : 0) : 0;
      if (given > 0) v = given;
      HIOS_CHECK(v > 0, "%s: input '%s' dimension %d is '%s' in the model; give it with %s", m_.file.c_str(),
                 in.name().c_str(), d, dim.dim_param().c_str(),
                 image ? (d == 1 ? "the model (channels must be fixed)" : d == 0 ? "--batch" : d == 2 ? "--height" : "--width")
                       : ("--dim " + (dim.dim_param().empty() ? std::string("NAME") : dim.dim_param()) + "=V").c_str());
      HIOS_CHECK(v <= (image && d == 1 ? (int64_t(1) << 20) : 65536) || !image,
                 "%s: input '%s' dimension %d is %lld, out of range", m_.file.c_str(), in.name().c_str(), d, (long long)v);
      HIOS_CHECK(v < (int64_t(1) << 31), "%s: input '%s' dimension %d is %lld, out of range", m_.file.c_str(),
                 in.name().c_str(), d, (long long)v);
      dims.push_back(v);
    }
    Pending p;
    p.name = unique_name(in.name());
    p.op = make_op(OpKind::Input);
    if (image) {
      std::get<InputAttrs>(p.op.attrs).channels = dims[1];
    } else {
      p.op.attrs = TensorInputAttrs{Shape::of(dims), dtype};
    }
    p.shape = Shape::of(dims);  // bounds the element count (an image is rank 4 the same)
    p.dtype = dtype;
    nodes_.push_back(p);
    Live l = node_live(int(nodes_.size()) - 1);
    l.dtype = dtype;
    values_[in.name()].live = l;
    if (k == 0) input_name_ = in.name();
  }
}

std::vector<Value> Importer::read_graph_outputs() {
  const auto& g = m_.proto.graph();
  HIOS_CHECK(g.output_size() >= 1, "%s: the model has no output", m_.file.c_str());
  std::vector<Value> outs;
  for (const auto& o : g.output()) {
    const std::string& name = o.name();
    auto it = values_.find(name);
    HIOS_CHECK(it != values_.end() && (it->second.live || it->second.constant), "%s: output '%s' is never computed",
               m_.file.c_str(), name.c_str());
    try {
      if (!it->second.live) {
        // A result the model computes from constants alone: a node holding it.
        const ConstTensor& c = *it->second.constant;
        Op copy = make_op(OpKind::Reshape);
        std::get<ReshapeAttrs>(copy.attrs).dims = c.dims;
        outs.push_back(Value{general_node(name, copy, {const_operand(c, const_dtype(c))})});
        output_names_.push_back(name);
        continue;
      }
      // Pending pads and lazy flattens applied (a flattened result as [N, rest], following the batch).
      Value out = operand(name).value;
      if (nodes_[size_t(out.node)].op.kind == OpKind::Input ||
          std::any_of(outs.begin(), outs.end(), [&](const Value& v) { return v.node == out.node; })) {
        // An input or another output passed through: a copy of its own, named as the output.
        Operand x;
        x.value = out;
        Op copy = make_op(OpKind::Reshape);
        std::get<ReshapeAttrs>(copy.attrs).dims = nodes_[size_t(out.node)].shape.dims();
        out = Value{general_node(name, copy, {x})};
      } else if (nodes_[size_t(out.node)].name != sanitize(name)) {
        // The result is named as the model names its output (--save-output DIR writes NAME.npy);
        // a node that had the name already takes another.
        const std::string want = sanitize(name);
        if (names_.count(want)) {
          for (Pending& q : nodes_) {
            if (q.name == want && q.op.kind != OpKind::Input) q.name = unique_name(want + ".value");
          }
        }
        if (!std::any_of(nodes_.begin(), nodes_.end(), [&](const Pending& q) { return q.name == want; })) {
          names_.insert(want);
          nodes_[size_t(out.node)].name = want;
        }
      }
      outs.push_back(out);
      output_names_.push_back(name);
    } catch (const Refused& r) {
      throw_error("%s: output '%s': %s", m_.file.c_str(), name.c_str(), r.why.c_str());
    }
  }
  return outs;
}

// --- node mapping ----------------------------------------------------------------------

// The model's nodes in an order where every value is made before it is read: the file's order
// where it already is (ONNX asks for it, but ONNX Runtime sorts, and some exporters rely on that),
// otherwise a stable topological sort. A cycle leaves its nodes last, where they are refused as
// reading values never computed.
static std::vector<const onnx::NodeProto*> topological_nodes(const onnx::GraphProto& g) {
  std::unordered_map<std::string, int> maker;
  for (int k = 0; k < g.node_size(); ++k) {
    for (const auto& o : g.node(k).output()) {
      if (!o.empty()) maker.emplace(o, k);
    }
  }
  std::vector<std::vector<int>> readers(size_t(g.node_size()));
  std::vector<int> waiting(size_t(g.node_size()), 0);
  for (int k = 0; k < g.node_size(); ++k) {
    std::set<int> from;
    for (const auto& i : g.node(k).input()) {
      auto it = maker.find(i);
      if (it != maker.end() && it->second != k) from.insert(it->second);
    }
    waiting[size_t(k)] = int(from.size());
    for (int f : from) readers[size_t(f)].push_back(k);
  }
  std::set<int> ready;
  for (int k = 0; k < g.node_size(); ++k) {
    if (waiting[size_t(k)] == 0) ready.insert(k);
  }
  std::vector<const onnx::NodeProto*> order;
  std::vector<char> placed(size_t(g.node_size()), 0);
  while (!ready.empty()) {
    const int k = *ready.begin();
    ready.erase(ready.begin());
    order.push_back(&g.node(k));
    placed[size_t(k)] = 1;
    for (int r : readers[size_t(k)]) {
      if (--waiting[size_t(r)] == 0) ready.insert(r);
    }
  }
  for (int k = 0; k < g.node_size(); ++k) {
    if (!placed[size_t(k)]) order.push_back(&g.node(k));
  }
  return order;
}

void Importer::map_nodes() {
  // Each op's handler and how many inputs it needs at least (all of them named).
  struct Entry {
    Handler handler;
    int min_inputs;
  };
  static const std::map<std::string, Entry> handlers = {
      {"Conv", {&Importer::conv, 2}},
      {"ConvTranspose", {&Importer::conv_transpose, 2}},
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
  for (const onnx::NodeProto* np : topological_nodes(m_.proto.graph())) {
    const onnx::NodeProto& n = *np;
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
    // A convolution network's handler takes the op where every computed input is an image
    // (float32, N x C x H x W, or its flattened logits) and it can fuse it; the general
    // converters take the rest, and what the image handler refuses.
    bool image = true;
    for (const auto& i : n.input()) {
      if (i.empty() || !values_.at(i).live) continue;
      const Live& l = *values_.at(i).live;
      image = image && l.dtype == DType::F32 && (l.shape.rank == 4 || l.flat);
    }
    try {
      if (it != handlers.end() && image) {
        try {
          (this->*(it->second.handler))(n);
        } catch (const Refused& r) {
          if (!general(n)) throw;
        }
      } else if (!general(n)) {
        if (it == handlers.end()) refused("not supported");
        (this->*(it->second.handler))(n);
      }
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
    return false;  // not evaluated at import: the converters compute it in the pass, from constants
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
  if (def.general) {
    std::vector<DType> types;
    size_t term = 0;
    for (int k = 0; k < int(p.inputs.size() + p.constants.size()); ++k) {
      const auto c = std::find_if(p.constants.begin(), p.constants.end(), [&](const Constant& x) { return x.operand == k; });
      if (c != p.constants.end()) {
        in.push_back(c->shape);
        types.push_back(c->dtype);
      } else {
        const Pending& src = nodes_[size_t(p.inputs[term++][0].node)];
        in.push_back(src.shape);
        types.push_back(src.dtype);
      }
    }
    try {
      InferContext ctx{p.name, 1, 1, 1, types};
      p.shape = infer_op(p.op, in, ctx);
      p.dtype = infer_dtype_op(p.op, types);
    } catch (const Error& e) {
      refused(e.what());
    }
    nodes_.push_back(std::move(p));
    return int(nodes_.size()) - 1;
  }
  if (def.terms_are_operands) {
    for (const Term& t : p.inputs) in.push_back(term_shape(t));
  } else {
    Shape s = term_shape(p.inputs[0]);
    for (size_t k = 1; k < p.inputs.size(); ++k) s.c += term_shape(p.inputs[k]).c;
    in.push_back(s);
  }
  const Shape& first = in[0];
  std::vector<DType> types;
  for (const Term& t : p.inputs) {
    for (const Value& v : t) types.push_back(nodes_[size_t(v.node)].dtype);
  }
  try {
    p.shape = infer_op(p.op, in, InferContext{p.name, first.n, first.h, first.w, types});
    p.dtype = infer_dtype_op(p.op, types);
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
  l.dtype = nodes_[size_t(idx)].dtype;
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

void Importer::fold_head_transposes(const std::vector<Value>& results) {
  std::vector<int> readers(nodes_.size(), 0), only_reader(nodes_.size(), -1);
  for (size_t i = 0; i < nodes_.size(); ++i) {
    for (const Term& t : nodes_[i].inputs) {
      for (const Value& v : t) {
        ++readers[size_t(v.node)];
        only_reader[size_t(v.node)] = int(i);
      }
    }
  }
  for (const Value& v : results) readers[size_t(v.node)] += 2;  // a result is never folded away
  // A whole-value transpose swapping the two dims before the last, and nothing else.
  auto head_swap = [&](int node) {
    const Pending& p = nodes_[size_t(node)];
    if (p.op.kind != OpKind::Transpose || p.inputs.size() != 1 || p.inputs[0].size() != 1) return false;
    const std::vector<int>& perm = p.op.as<TransposeAttrs>().perm;
    const int r = int(perm.size());
    if (r < 3) return false;
    for (int d = 0; d < r; ++d) {
      const int want = d == r - 3 ? r - 2 : d == r - 2 ? r - 3 : d;
      if (perm[size_t(d)] != want) return false;
    }
    const Value& src = p.inputs[0][0];
    return src.begin == 0 && src.end < 0;
  };
  int folded = 0;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    Pending& at = nodes_[i];
    if (at.op.kind != OpKind::Attention || at.op.as<AttentionAttrs>().token_major) continue;
    if (readers[i] != 1 || !head_swap(only_reader[i]) || at.inputs.size() < 3) continue;
    bool operands = true;
    for (int k = 0; k < 3 && operands; ++k) {
      const Term& t = at.inputs[size_t(k)];
      operands = t.size() == 1 && t[0].begin == 0 && t[0].end < 0 && readers[size_t(t[0].node)] == 1 && head_swap(t[0].node);
    }
    if (!operands) continue;
    const int back = only_reader[i];
    Pending moved = at;
    for (int k = 0; k < 3; ++k) moved.inputs[size_t(k)] = nodes_[size_t(at.inputs[size_t(k)][0].node)].inputs[0];
    std::get<AttentionAttrs>(moved.op.attrs).token_major = true;
    moved.name = nodes_[size_t(back)].name;
    moved.shape = nodes_[size_t(back)].shape;
    moved.dtype = nodes_[size_t(back)].dtype;
    // The transpose back becomes the attention (its readers and its name stay); the attention
    // and the three transposes before it are left unread, and pruned.
    nodes_[size_t(back)] = std::move(moved);
    at.inputs.clear();
    at.constants.clear();
    at.stored_constants.clear();
    at.op = make_op(OpKind::Identity);
    ++folded;
  }
  if (folded) folded_["head transposes around an attention into it"] += 4 * folded;
}

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
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].op.kind == OpKind::Input) keep[i] = 1;  // every input stays, read or not
  }
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
  int m = 0;  // the inputs come first
  while (m < n && nodes_[size_t(kept[size_t(m)])].op.kind == OpKind::Input) ++m;
  std::vector<int> pos(nodes_.size(), -1);
  for (int k = 0; k < n; ++k) pos[size_t(kept[size_t(k)])] = k;
  std::vector<std::vector<int>> preds(static_cast<size_t>(n));
  std::vector<int> last_use(static_cast<size_t>(n));
  for (int k = 0; k < n; ++k) last_use[size_t(k)] = k;
  for (int k = m; k < n; ++k) {
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
  int first = m, reach = 0;
  for (int k = 0; k < m; ++k) reach = std::max(reach, last_use[size_t(k)]);
  for (int k = m; k < n; ++k) {
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
  std::string name = o_.name;
  if (name.empty()) name = m_.proto.graph().name();
  if (name.empty() || name == "main_graph" || name == "torch_jit" || name == "torch-jit-export") {
    name = fs::path(m_.file).stem().string();
  }
  OnnxImport r;
  Graph& g = r.graph;
  g.name = sanitize(name);
  // The image input gives the graph's N, H and W; a graph of tensor inputs has no image (1s).
  const Pending& in0 = nodes_[0];
  const bool image = !in0.op.tensor_input();
  g.batch = image ? in0.shape.n : 1;
  g.height = image ? in0.shape.h : 1;
  g.width = image ? in0.shape.w : 1;
  std::vector<int> at(nodes_.size(), -1);
  auto add = [&](const Pending& p, int block) {
    Node nd;
    nd.name = p.name;
    nd.op = p.op;
    nd.inputs = p.inputs;
    for (Term& t : nd.inputs) {
      for (Value& v : t) v.node = at[size_t(v.node)];
    }
    nd.constants = p.constants;
    nd.block = block;
    at[size_t(&p - nodes_.data())] = g.size();
    g.nodes.push_back(std::move(nd));
  };
  for (int k : kept) {
    if (nodes_[size_t(k)].op.kind == OpKind::Input) add(nodes_[size_t(k)], -1);
  }
  for (const std::vector<int>& block : blocks) {
    Block b;
    b.name = nodes_[size_t(kept[size_t(block.back())])].name;
    const int bi = int(g.blocks.size());
    for (int k : block) {
      const Pending& p = nodes_[size_t(kept[size_t(k)])];
      add(p, bi);
      if (p.op.kind == OpKind::Conv || p.op.kind == OpKind::Linear || p.op.kind == OpKind::ConvTranspose) {
        r.weights[p.name + ".weight"] = exec::TensorEntry{p.weight_dims, p.weight};
        if (!p.bias.empty()) r.weights[p.name + ".bias"] = exec::TensorEntry{{int64_t(p.bias.size())}, p.bias};
      }
      for (const Constant& c : p.constants) {
        auto it = p.stored_constants.find(c.operand);
        if (it != p.stored_constants.end()) {
          r.weights[p.name + ".c" + std::to_string(c.operand)] = exec::TensorEntry{c.shape.dims(), it->second};
        }
      }
    }
    b.exit = at[size_t(kept[size_t(block.back())])];
    g.blocks.push_back(std::move(b));
  }
  g.finalize();
  r.opset = m_.opset;
  r.onnx_nodes = m_.proto.graph().node_size();
  for (const auto& [what, count] : folded_) r.folded.push_back(std::to_string(count) + " " + what);
  return r;
}

}  // namespace detail

OnnxImport import_onnx(const OnnxImportOptions& options) {
  OnnxModel model = read_onnx_model(options.model_file);
  const int nodes_in_file = model.proto.graph().node_size();
  const PatternCounts fused = fuse_patterns(*model.proto.mutable_graph());
  OnnxImport r = detail::Importer(model, options).run();
  r.onnx_nodes = nodes_in_file;
  if (fused.gelus > 0) {
    r.folded.push_back(strprintf("%d GELU%s written out as one Gelu", fused.gelus, fused.gelus == 1 ? "" : "s"));
  }
  if (fused.layer_norms > 0) {
    r.folded.push_back(strprintf("%d layer norm%s written out as one LayerNormalization", fused.layer_norms,
                                 fused.layer_norms == 1 ? "" : "s"));
  }
  if (fused.attentions > 0) {
    r.folded.push_back(strprintf("%d attention%s written out (MatMul, scale, mask, Softmax, MatMul) as one Attention",
                                 fused.attentions, fused.attentions == 1 ? "" : "s"));
  }
  return r;
}

}  // namespace hios::importer
