#include "importer/onnx_import.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "graph/error.hpp"
#include "importer/onnx_attrs.hpp"
#include "importer/onnx_fold.hpp"
#include "importer/onnx_model.hpp"

namespace hios::importer {

namespace {

namespace fs = std::filesystem;

// A hios node being built: ops are still changed after creation (a batch norm folded into a
// conv, an activation fused), so nodes are kept here until the blocks are known.
struct Pending {
  std::string name;
  Op op;
  std::vector<Term> inputs;  // Value::node indexes `Importer::nodes_`
  Shape shape;
  // conv and linear parameters, PyTorch's layout ([out][in/groups][kh][kw], [out][in])
  std::vector<int64_t> weight_dims;
  std::vector<float> weight, bias;
};

// A Pad not yet applied: its reader takes it into its own padding where it can (a zero pad
// before a convolution or an average pool, a -inf pad before a max pool, symmetric in all);
// otherwise a `pad` node applies it first. Rows top/bottom, columns left/right; negative crops.
struct PendingPad {
  int64_t top = 0, left = 0, bottom = 0, right = 0;
  PadFill fill = PadFill::Zero;
  bool any() const { return top || left || bottom || right; }
};

// A non-constant ONNX value: the hios input terms that compute it. Usually one whole node,
// but a Concat or an Add read by one node only is left as terms for that reader to assemble.
struct Live {
  std::vector<Term> terms;
  Shape shape;        // NCHW of what the terms assemble (before any pending pad)
  bool flat = false;  // seen as rank 2, [N, C*H*W] (after Flatten, Reshape, Gemm)
  PendingPad pad;
  std::vector<int64_t> dims() const {
    if (flat) return {shape.n, shape.c * shape.h * shape.w};
    return {shape.n, shape.c, shape.h + pad.top + pad.bottom, shape.w + pad.left + pad.right};
  }
  bool single() const { return terms.size() == 1 && terms[0].size() == 1; }
};

struct OnnxValue {
  std::optional<ConstTensor> constant;
  std::optional<Live> live;
};

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

class Importer {
 public:
  Importer(const OnnxModel& model, const OnnxImportOptions& options) : m_(model), o_(options) {}

  OnnxImport run() {
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

 private:
  using Handler = void (Importer::*)(const onnx::NodeProto&);

  const OnnxModel& m_;
  const OnnxImportOptions& o_;
  std::unordered_map<std::string, OnnxValue> values_;
  std::unordered_map<std::string, int> uses_;
  std::vector<Pending> nodes_;
  std::set<std::string> names_;
  std::vector<std::string> problems_;
  std::set<std::string> failed_;  // values not computed because a node was refused
  std::map<std::string, int> folded_;
  std::string input_name_;

  // --- reading ---------------------------------------------------------------------------

  void read_initializers() {
    for (const auto& t : m_.proto.graph().initializer()) values_[t.name()].constant = read_tensor(m_, t, t.name());
  }

  void count_uses() {
    for (const auto& n : m_.proto.graph().node()) {
      for (const auto& i : n.input()) {
        if (!i.empty()) ++uses_[i];
      }
    }
    for (const auto& o : m_.proto.graph().output()) ++uses_[o.name()];
  }

  void read_graph_input() {
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

  Value read_graph_output() {
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

  void map_nodes() {
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

  struct Refused {
    std::string why;
  };
  [[noreturn]] static void refused(const std::string& why) { throw Refused{why}; }

  void refuse(const onnx::NodeProto& n, const std::string& why) {
    problems_.push_back(strprintf("%s '%s' (opset %d): %s", n.op_type().c_str(), n.name().c_str(), m_.opset, why.c_str()));
    fail_outputs(n);
  }
  void fail_outputs(const onnx::NodeProto& n) {
    for (const auto& o : n.output()) failed_.insert(o);
  }

  void refuse_problems() {
    if (problems_.empty()) return;
    std::string list;
    for (size_t k = 0; k < problems_.size(); ++k) list += (k ? "; " : "") + problems_[k];
    throw_error("%s: cannot import %zu node%s: %s", m_.file.c_str(), problems_.size(), problems_.size() == 1 ? "" : "s",
                list.c_str());
  }

  // A node whose inputs are all constant is evaluated now.
  bool fold_if_constant(const onnx::NodeProto& n) {
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

  std::string unique_name(const std::string& raw) {
    std::string base = sanitize(raw), name = base;
    for (int k = 2; names_.count(name); ++k) name = base + "_" + std::to_string(k);
    names_.insert(name);
    return name;
  }

  static const std::string& raw_name(const onnx::NodeProto& n) { return n.name().empty() ? n.output(0) : n.name(); }
  std::string node_name(const onnx::NodeProto& n) { return unique_name(raw_name(n)); }

  // The computed value `name`; a pending Pad is applied first (a pad node) unless the reader
  // takes it (pad_ok).
  const Live& live(const std::string& name, bool pad_ok = false) {
    const OnnxValue& v = values_.at(name);
    if (!v.live) refused("input '" + name + "' is a constant where hios needs a computed tensor");
    if (!pad_ok) apply_pending_pad(name);
    return *v.live;
  }
  void apply_pending_pad(const std::string& name) {
    Live& l = *values_.at(name).live;
    if (!l.pad.any()) return;
    l = pad_node(l, l.pad, name);
  }
  // A pad node computing `x` padded by `pad` (x's own pending pad ignored).
  Live pad_node(const Live& x, const PendingPad& pad, const std::string& raw) {
    Pending p;
    p.name = unique_name(raw + ".pad");
    p.op = make_op(OpKind::Pad);
    std::get<PadAttrs>(p.op.attrs) = PadAttrs{{pad.top, pad.left, pad.bottom, pad.right}, pad.fill};
    p.inputs = x.terms;
    ++folded_["Pads as explicit pad nodes"];
    return node_live(add_node(std::move(p)));
  }
  const ConstTensor& constant(const onnx::NodeProto& n, int k, const char* what) {
    if (k >= n.input_size() || n.input(k).empty()) refused(std::string("has no ") + what);
    const OnnxValue& v = values_.at(n.input(k));
    if (!v.constant) refused(std::string(what) + " '" + n.input(k) + "' is computed; hios needs it constant");
    return *v.constant;
  }
  const ConstTensor* optional_constant(const onnx::NodeProto& n, int k, const char* what) {
    if (k >= n.input_size() || n.input(k).empty()) return nullptr;
    return &constant(n, k, what);
  }
  int uses(const std::string& value) const {
    auto it = uses_.find(value);
    return it == uses_.end() ? 0 : it->second;
  }
  void only_first_output_used(const onnx::NodeProto& n) {
    for (int k = 1; k < n.output_size(); ++k) {
      if (!n.output(k).empty() && uses(n.output(k))) refused("its output " + std::to_string(k) + " is used");
    }
  }

  int add_node(Pending p) {
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
  Shape term_shape(const Term& t) const {
    const Value& v = t[0];
    Shape s = nodes_[size_t(v.node)].shape;
    if (v.end >= 0) s.c = v.end - v.begin;
    return s;
  }

  // One whole value for `l`: the node itself, or an identity (a concat or a sum) assembling
  // its terms.
  Value materialize(Live& l, const std::string& onnx_name) {
    if (l.single() && l.terms[0][0].end < 0) return l.terms[0][0];
    Pending p;
    p.name = unique_name(onnx_name);
    p.op = make_op(OpKind::Identity);
    p.inputs = l.terms;
    const int idx = add_node(std::move(p));
    l.terms = {{Value{idx}}};
    return Value{idx};
  }

  Live node_live(int idx, bool flat = false) const {
    Live l;
    l.terms = {{Value{idx}}};
    l.shape = nodes_[size_t(idx)].shape;
    l.flat = flat;
    return l;
  }
  void set_live(const onnx::NodeProto& n, Live l) { values_[n.output(0)].live = std::move(l); }

  // The conv or linear node that alone computes `value`, when its output may still change:
  // read by this node only.
  Pending* sole_producer(const std::string& value, OpKind kind) {
    const Live& l = *values_.at(value).live;
    if (!l.single() || l.terms[0][0].end >= 0 || uses(value) != 1 || l.pad.any()) return nullptr;
    Pending& p = nodes_[size_t(l.terms[0][0].node)];
    return p.op.kind == kind ? &p : nullptr;
  }

  // --- op handlers -----------------------------------------------------------------------

  // Kernel sizes, strides and dilations: two values from 1 to 65536.
  static std::array<int, 2> pair_of(const std::vector<int64_t>& v, int def) {
    if (v.empty()) return {def, def};
    if (v.size() != 2) refused("only 2-D windows are supported");
    for (int64_t x : v) {
      if (x < 1 || x > 65536) refused("window attribute " + std::to_string(x) + " out of range [1, 65536]");
    }
    return {int(v[0]), int(v[1])};
  }

  // The op's own pads (ONNX's pads or auto_pad), top, left, bottom, right.
  std::array<int64_t, 4> own_pads(const NodeAttrs& at, const Live& x, std::array<int, 2> kernel, std::array<int, 2> stride,
                                  std::array<int, 2> dilation) {
    std::vector<int64_t> pads = at.ints("pads", {0, 0, 0, 0});
    if (pads.size() != 4) refused("only 2-D pads are supported");
    const std::string autopad = at.s("auto_pad", "NOTSET");
    if (autopad == "SAME_UPPER" || autopad == "SAME_LOWER") {
      const int64_t in[2] = {x.dims()[2], x.dims()[3]};
      for (int d = 0; d < 2; ++d) {
        const int64_t out = (in[d] + stride[d] - 1) / stride[d];
        const int64_t total = std::max<int64_t>(0, (out - 1) * stride[d] + (kernel[d] - 1) * dilation[d] + 1 - in[d]);
        const int64_t small = total / 2, large = total - small;
        pads[size_t(d)] = autopad == "SAME_UPPER" ? small : large;
        pads[size_t(d) + 2] = autopad == "SAME_UPPER" ? large : small;
      }
    } else if (autopad != "NOTSET" && autopad != "VALID") {
      refused("auto_pad '" + autopad + "' is not supported");
    }
    for (int64_t v : pads) {
      if (v < 0 || v > 65536) refused("pads out of range");
    }
    return {pads[0], pads[1], pads[2], pads[3]};
  }

  // The op's padding, taking in x's pending Pad: where own plus pending padding is symmetric
  // (and the pending Pad fills with what the op pads with), all of it goes into the op;
  // otherwise a pad node pads x first and the op pads nothing. `x` is replaced by what the op
  // reads.
  std::array<int, 2> take_padding(Live& x, const std::string& x_name, std::array<int64_t, 4> own, PadFill fill) {
    if (x.pad.any() && x.pad.fill != fill) x = pad_node(x, x.pad, x_name);
    const PendingPad& q = x.pad;
    const int64_t top = own[0] + q.top, left = own[1] + q.left, bottom = own[2] + q.bottom, right = own[3] + q.right;
    if (top >= 0 && left >= 0 && top == bottom && left == right) {
      if (q.any()) ++folded_["Pads into the padding of the op after them"];
      x.pad = PendingPad{};
      return {int(top), int(left)};
    }
    PendingPad all{top, left, bottom, right, fill};
    x.pad = PendingPad{};
    x = pad_node(x, all, x_name);
    return {0, 0};
  }

  void conv(const onnx::NodeProto& n) {
    const NodeAttrs at(n);
    Live x = live(n.input(0), true);
    if (x.flat) refused("reads a rank-2 tensor");
    const ConstTensor& w = constant(n, 1, "weight");
    const ConstTensor* b = optional_constant(n, 2, "bias");
    if (w.dims.size() != 4 || w.integer) refused("the weight is not a 4-D float tensor");
    const int64_t groups = at.i("group", 1);
    if (groups < 1 || groups > x.shape.c || x.shape.c % groups || w.dims[1] * groups != x.shape.c) {
      refused(strprintf("a weight of %lld input channels in %lld groups does not fit an input of %lld channels",
                        (long long)w.dims[1], (long long)groups, (long long)x.shape.c));
    }
    if (b && (b->integer || b->numel() != w.dims[0])) refused("the bias does not match the weight's output channels");
    const auto kernel = pair_of(at.ints("kernel_shape", {w.dims[2], w.dims[3]}), 1);
    if (kernel[0] != w.dims[2] || kernel[1] != w.dims[3]) refused("kernel_shape differs from the weight's");
    const auto stride = pair_of(at.ints("strides"), 1), dilation = pair_of(at.ints("dilations"), 1);
    const auto padding = take_padding(x, n.input(0), own_pads(at, x, kernel, stride, dilation), PadFill::Zero);
    Pending p;
    p.name = node_name(n);
    p.op = conv_op(w.dims[0], kernel, stride, padding, Activation::None, groups, b != nullptr, dilation);
    p.inputs = x.terms;
    p.weight_dims = w.dims;
    p.weight = w.f;
    if (b) p.bias = b->f;
    const int idx = add_node(std::move(p));
    set_live(n, node_live(idx));
  }

  // y = x * scale[c] + shift[c]: folded into the conv or linear that alone computes x (before
  // its activation), else a depthwise 1x1 convolution.
  void affine(const onnx::NodeProto& n, const std::string& x_name, std::vector<float> scale, std::vector<float> shift,
              const char* what) {
    Live x = live(x_name);
    const int64_t c = x.flat ? x.shape.c * x.shape.h * x.shape.w : x.shape.c;
    if (int64_t(scale.size()) == 1) scale.assign(size_t(c), scale[0]);
    if (int64_t(shift.size()) == 1) shift.assign(size_t(c), shift[0]);
    if (int64_t(scale.size()) != c || int64_t(shift.size()) != c) refused("its constant is not per channel");
    Pending* p = sole_producer(x_name, OpKind::Conv);
    if (p && p->op.conv().activation != Activation::None) p = nullptr;
    if (!p) p = sole_producer(x_name, OpKind::Linear);
    if (p) {
      const int64_t per_out = int64_t(p->weight.size()) / c;
      for (int64_t o = 0; o < c; ++o) {
        for (int64_t k = 0; k < per_out; ++k) p->weight[size_t(o * per_out + k)] *= scale[size_t(o)];
      }
      if (p->bias.empty()) p->bias.assign(size_t(c), 0.f);
      for (int64_t o = 0; o < c; ++o) p->bias[size_t(o)] = p->bias[size_t(o)] * scale[size_t(o)] + shift[size_t(o)];
      if (p->op.kind == OpKind::Conv) std::get<ConvAttrs>(p->op.attrs).bias = true;
      else std::get<LinearAttrs>(p->op.attrs).bias = true;
      ++folded_[std::string(what) + " into the layer before it"];
      set_live(n, x);
      return;
    }
    if (x.flat) refused("a per-feature scale of a rank-2 tensor not computed by a linear layer alone");
    Pending d;
    d.name = node_name(n);
    d.op = conv_op(c, {1, 1}, {1, 1}, {0, 0}, Activation::None, c, true);
    d.inputs = x.terms;
    d.weight_dims = {c, 1, 1, 1};
    d.weight = std::move(scale);
    d.bias = std::move(shift);
    const int idx = add_node(std::move(d));
    ++folded_[std::string(what) + " as depthwise 1x1 convolutions"];
    set_live(n, node_live(idx));
  }

  void batch_norm(const onnx::NodeProto& n) {
    const NodeAttrs at(n);
    if (at.i("training_mode", 0)) refused("training_mode is set");
    only_first_output_used(n);
    const ConstTensor &gamma = constant(n, 1, "scale"), &beta = constant(n, 2, "bias"), &mean = constant(n, 3, "mean"),
                      &var = constant(n, 4, "variance");
    const double eps = at.f("epsilon", 1e-5f);
    const int64_t c = gamma.numel();
    if (beta.numel() != c || mean.numel() != c || var.numel() != c) refused("its parameters differ in length");
    std::vector<float> scale(static_cast<size_t>(c)), shift(static_cast<size_t>(c));
    for (int64_t k = 0; k < c; ++k) {
      const double s = gamma.at(k) / std::sqrt(var.at(k) + eps);
      scale[size_t(k)] = float(s);
      shift[size_t(k)] = float(beta.at(k) - mean.at(k) * s);
    }
    affine(n, n.input(0), std::move(scale), std::move(shift), "BatchNormalization");
  }

  void apply_activation(const onnx::NodeProto& n, Activation a) {
    const Live& x = live(n.input(0));
    if (Pending* p = sole_producer(n.input(0), OpKind::Conv); p && p->op.conv().activation == Activation::None) {
      std::get<ConvAttrs>(p->op.attrs).activation = a;
      ++folded_["activations into the convolution before them"];
      set_live(n, x);
      return;
    }
    Pending p;
    p.name = node_name(n);
    p.op = activation_op(a);
    p.inputs = x.terms;
    const int idx = add_node(std::move(p));
    const Live out = node_live(idx, x.flat);
    set_live(n, out);
  }

  void activation(const onnx::NodeProto& n) {
    const std::string& t = n.op_type();
    apply_activation(n, t == "Relu" ? Activation::Relu : t == "Sigmoid" ? Activation::Sigmoid : Activation::Tanh);
  }

  void clip(const onnx::NodeProto& n) {
    const NodeAttrs at(n);
    double lo = -std::numeric_limits<double>::infinity(), hi = std::numeric_limits<double>::infinity();
    if (m_.opset < 11) {
      lo = at.f("min", -std::numeric_limits<float>::infinity());
      hi = at.f("max", std::numeric_limits<float>::infinity());
    } else {
      if (const ConstTensor* c = optional_constant(n, 1, "min")) lo = c->at(0);
      if (const ConstTensor* c = optional_constant(n, 2, "max")) hi = c->at(0);
    }
    if (lo == 0 && std::isinf(hi) && hi > 0) return apply_activation(n, Activation::Relu);
    if (lo == 0 && hi == 6) return apply_activation(n, Activation::Relu6);
    refused(strprintf("clipping to [%g, %g]; hios clips to [0, inf) (relu) and [0, 6] (relu6) only", lo, hi));
  }

  void pool(const onnx::NodeProto& n) {
    const NodeAttrs at(n);
    const bool avg = n.op_type() == "AveragePool";
    only_first_output_used(n);
    Live x = live(n.input(0), true);
    if (x.flat) refused("reads a rank-2 tensor");
    if (at.i("storage_order", 0)) refused("storage_order 1 is not supported");
    if (!at.has("kernel_shape")) refused("no kernel_shape");
    const auto kernel = pair_of(at.ints("kernel_shape"), 1);
    const auto stride = pair_of(at.ints("strides"), 1), dilation = pair_of(at.ints("dilations"), 1);
    if (dilation[0] != 1 || dilation[1] != 1) refused("dilated pooling is not supported");
    bool count_include_pad = at.i("count_include_pad", 0) != 0;
    const auto own = own_pads(at, x, kernel, stride, {1, 1});
    const bool own_any = own[0] || own[1] || own[2] || own[3];
    if (avg && !count_include_pad && (x.pad.any() || own[0] != own[2] || own[1] != own[3]) && own_any) {
      // Zeros of an explicit Pad count in the divisor, the pool's own padding does not: one
      // padding cannot do both.
      refused("its own padding is left out of the divisor, but a Pad before it or asymmetric pads would be counted");
    }
    if (avg && x.pad.any()) count_include_pad = true;  // the explicit Pad's zeros are elements of the window
    const auto padding = take_padding(x, n.input(0), own, avg ? PadFill::Zero : PadFill::NegInf);
    Pending p;
    p.name = node_name(n);
    p.op = make_op(OpKind::Pool);
    PoolAttrs& a = std::get<PoolAttrs>(p.op.attrs);
    a.kind = avg ? PoolKind::Avg : PoolKind::Max;
    a.kernel = kernel;
    a.stride = stride;
    a.padding = padding;
    a.ceil_mode = at.i("ceil_mode", 0) != 0;
    a.count_include_pad = !avg || count_include_pad;
    p.inputs = x.terms;
    const int idx = add_node(std::move(p));
    set_live(n, node_live(idx));
  }

  void add_global_pool(const onnx::NodeProto& n, PoolKind kind, bool flat) {
    const Live& x = live(n.input(0));
    if (x.flat) refused("reads a rank-2 tensor");
    Pending p;
    p.name = node_name(n);
    p.op = make_op(OpKind::Pool);
    std::get<PoolAttrs>(p.op.attrs).kind = kind;
    p.inputs = x.terms;
    const int idx = add_node(std::move(p));
    const Live out = node_live(idx, flat);
    set_live(n, out);
  }

  void global_pool(const onnx::NodeProto& n) {
    add_global_pool(n, n.op_type() == "GlobalAveragePool" ? PoolKind::GlobalAvg : PoolKind::GlobalMax, false);
  }

  void reduce_mean(const onnx::NodeProto& n) {
    const NodeAttrs at(n);
    std::vector<int64_t> axes = at.ints("axes");
    if (m_.opset >= 18) {
      const ConstTensor* c = optional_constant(n, 1, "axes");
      axes.clear();
      if (c) {
        for (int64_t k = 0; k < c->numel(); ++k) axes.push_back(int64_t(c->at(k)));
      }
    }
    for (auto& a : axes) a = a < 0 ? a + 4 : a;
    std::sort(axes.begin(), axes.end());
    if (axes != std::vector<int64_t>{2, 3}) refused("only a mean over H and W (axes 2 and 3) is supported");
    add_global_pool(n, PoolKind::GlobalAvg, at.i("keepdims", 1) == 0);
  }

  void concat(const onnx::NodeProto& n) {
    const NodeAttrs at(n);
    int64_t axis = at.i("axis", 1);
    Live out;
    for (int k = 0; k < n.input_size(); ++k) {
      const Live& x = live(n.input(k));
      if (x.flat) refused("concatenates rank-2 tensors");
      if (axis < 0) axis += 4;
      if (axis != 1) refused("only concatenation along channels (axis 1) is supported");
      if (k == 0) {
        out.shape = x.shape;
        out.shape.c = 0;
      } else if (x.shape.n != out.shape.n || x.shape.h != out.shape.h || x.shape.w != out.shape.w) {
        refused("its inputs differ in N, H or W");
      }
      out.shape.c += x.shape.c;
      out.terms.insert(out.terms.end(), x.terms.begin(), x.terms.end());
    }
    // Read by one node: that node assembles the terms itself; else one identity does, once.
    if (uses(n.output(0)) != 1) materialize(out, raw_name(n));
    else ++folded_["Concat into the input of its only reader"];
    set_live(n, out);
  }

  // Add, Sub, Mul and Div: with a per-channel constant an affine map; with two computed
  // tensors of one shape an element-wise op (Add as a sum term when one node reads it).
  void binary(const onnx::NodeProto& n) {
    const std::string& t = n.op_type();
    const OnnxValue &a = values_.at(n.input(0)), &b = values_.at(n.input(1));
    if (a.constant || b.constant) {
      const bool const_first = bool(a.constant);
      const ConstTensor& c = const_first ? *a.constant : *b.constant;
      const std::string& x = const_first ? n.input(1) : n.input(0);
      if (const_first && (t == "Sub" || t == "Div")) refused("a constant minus or over a tensor is not supported");
      const Live& xl = live(x);
      const int64_t channels = xl.flat ? xl.shape.c * xl.shape.h * xl.shape.w : xl.shape.c;
      if (!per_channel(c, xl.flat, channels)) refused("its constant is not a scalar or per-channel");
      std::vector<float> v(size_t(c.numel()));
      for (int64_t k = 0; k < c.numel(); ++k) v[size_t(k)] = float(c.at(k));
      if (t == "Add") return affine(n, x, {1.f}, v, "Add of a constant");
      if (t == "Sub") {
        for (auto& e : v) e = -e;
        return affine(n, x, {1.f}, v, "Sub of a constant");
      }
      if (t == "Mul") return affine(n, x, v, {0.f}, "Mul by a constant");
      for (auto& e : v) e = 1.f / e;
      return affine(n, x, v, {0.f}, "Div by a constant");
    }
    if (t == "Sub" || t == "Div") refused("of two computed tensors is not supported");
    live(n.input(0));
    live(n.input(1));
    Live &x = *values_.at(n.input(0)).live, &y = *values_.at(n.input(1)).live;  // materialized in place
    if (x.shape != y.shape || x.flat != y.flat) refused("its operands differ in shape (hios does not broadcast)");
    if (t == "Add" && uses(n.output(0)) == 1 && x.single() && y.single()) {
      Live out = x;  // one sum term, assembled by the reader
      out.terms = {{x.terms[0][0], y.terms[0][0]}};
      ++folded_["Add into the input of its only reader"];
      return set_live(n, out);
    }
    Pending p;
    p.name = node_name(n);
    p.op = make_op(t == "Add" ? OpKind::Add : OpKind::Mul);
    p.inputs = {{materialize(x, n.input(0))}, {materialize(y, n.input(1))}};
    const int idx = add_node(std::move(p));
    const Live out = node_live(idx, x.flat);
    set_live(n, out);
  }

  static bool per_channel(const ConstTensor& c, bool flat, int64_t channels) {
    if (c.numel() == 1) return true;
    if (c.numel() != channels) return false;
    // [C], [C,1,1], [1,C,1,1] for images; [F], [1,F] for rank 2
    int non_one = 0;
    for (int64_t d : c.dims) non_one += d != 1;
    if (non_one != 1) return false;
    if (flat) return true;
    const size_t r = c.dims.size();
    return r == 1 ? true : (r >= 3 && c.dims[r - 3] == channels);
  }

  void pad(const onnx::NodeProto& n) {
    const NodeAttrs at(n);
    if (at.s("mode", "constant") != "constant") refused("mode '" + at.s("mode", "") + "' is not supported (only zero padding)");
    std::vector<int64_t> pads;
    double value = 0;
    if (m_.opset < 11) {
      pads = at.ints("pads");
      value = at.f("value", 0.f);
    } else {
      const ConstTensor& p = constant(n, 1, "pads");
      for (int64_t k = 0; k < p.numel(); ++k) pads.push_back(int64_t(p.at(k)));
      if (const ConstTensor* v = optional_constant(n, 2, "constant_value")) value = v->numel() ? v->at(0) : 0;
      if (const ConstTensor* axes = optional_constant(n, 3, "axes")) {
        std::vector<int64_t> full(8, 0);
        const int64_t na = axes->numel();
        if (int64_t(pads.size()) != 2 * na) refused("pads and axes differ in length");
        for (int64_t k = 0; k < na; ++k) {
          int64_t ax = int64_t(axes->at(k));
          ax = ax < 0 ? ax + 4 : ax;
          if (ax < 0 || ax > 3) refused("axis out of range");
          full[size_t(ax)] = pads[size_t(k)];
          full[size_t(ax) + 4] = pads[size_t(k + na)];
        }
        pads = full;
      }
    }
    const bool neg_inf = std::isinf(value) && value < 0;
    if (value != 0 && !neg_inf) refused(strprintf("pads with %g (hios pads with 0 or -inf)", value));
    if (pads.size() != 8) refused("only 4-D pads are supported");
    if (pads[0] || pads[1] || pads[4] || pads[5]) refused("pads N or C");
    for (int64_t p : pads) {
      if (p < -65536 || p > 65536) refused("a pad out of range");
    }
    Live x = live(n.input(0), true);
    if (x.flat) refused("pads a rank-2 tensor");
    const PadFill fill = neg_inf ? PadFill::NegInf : PadFill::Zero;
    if (x.pad.any() && x.pad.fill != fill) x = pad_node(x, x.pad, n.input(0));
    x.pad.fill = fill;
    x.pad.top += pads[2];
    x.pad.left += pads[3];
    x.pad.bottom += pads[6];
    x.pad.right += pads[7];
    set_live(n, x);
  }

  void alias(const onnx::NodeProto& n) {
    only_first_output_used(n);
    set_live(n, live(n.input(0)));
  }

  // Flatten, Reshape, Squeeze, Unsqueeze between an N x C x H x W view and an N x (C*H*W) one.
  void reshape(const onnx::NodeProto& n) {
    const NodeAttrs at(n);
    Live x = live(n.input(0));
    const std::vector<int64_t> from = x.dims();
    std::vector<int64_t> to;
    const std::string& t = n.op_type();
    if (t == "Flatten") {
      int64_t axis = at.i("axis", 1);
      if (axis < 0) axis += int64_t(from.size());
      if (axis != 1) refused("only Flatten from axis 1 is supported");
      to = {from[0], from.size() == 2 ? from[1] : from[1] * from[2] * from[3]};
    } else if (t == "Reshape") {
      const ConstTensor& s = constant(n, 1, "shape");
      int64_t known = 1, infer = -1;
      for (int64_t k = 0; k < s.numel(); ++k) {
        int64_t d = int64_t(s.at(k));
        if (d == 0 && !at.i("allowzero", 0)) d = size_t(k) < from.size() ? from[size_t(k)] : 1;
        if (d == -1) infer = k;
        else known *= d;
        to.push_back(d);
      }
      int64_t total = 1;
      for (int64_t d : from) total *= d;
      if (infer >= 0) to[size_t(infer)] = known ? total / known : 0;
    } else {
      std::vector<int64_t> axes = at.ints("axes");
      if (const ConstTensor* c = optional_constant(n, 1, "axes")) {
        axes.clear();
        for (int64_t k = 0; k < c->numel(); ++k) axes.push_back(int64_t(c->at(k)));
      }
      to = from;
      if (t == "Squeeze") {
        std::vector<int64_t> kept;
        const int64_t r = int64_t(from.size());
        for (int64_t k = 0; k < r; ++k) {
          const bool named = axes.empty() ? from[size_t(k)] == 1
                                          : std::any_of(axes.begin(), axes.end(), [&](int64_t a) { return (a < 0 ? a + r : a) == k; });
          if (!named) kept.push_back(from[size_t(k)]);
        }
        to = kept;
      } else {
        const int64_t r = int64_t(from.size() + axes.size());
        for (auto& a : axes) a = a < 0 ? a + r : a;
        std::sort(axes.begin(), axes.end());
        for (int64_t a : axes) {
          if (a < 0 || a > int64_t(to.size())) refused("axis out of range");
          to.insert(to.begin() + a, 1);
        }
      }
    }
    const Shape& s = x.shape;
    if (to == std::vector<int64_t>{s.n, s.c * s.h * s.w}) {
      x.flat = true;
    } else if (to == std::vector<int64_t>{s.n, s.c, s.h, s.w} && !x.flat) {
      // unchanged
    } else if (x.flat && s.h == 1 && s.w == 1 && to == std::vector<int64_t>{s.n, s.c, 1, 1}) {
      x.flat = false;
    } else {
      std::string a, b;
      for (int64_t d : from) a += (a.empty() ? "" : "x") + std::to_string(d);
      for (int64_t d : to) b += (b.empty() ? "" : "x") + std::to_string(d);
      refused("reshapes " + a + " to " + b + "; hios flattens N x C x H x W to N x (C*H*W) only");
    }
    set_live(n, x);
  }

  // Gemm (and MatMul by a constant): a linear layer over the flattened input.
  void gemm(const onnx::NodeProto& n) {
    const NodeAttrs at(n);
    const bool matmul = n.op_type() == "MatMul";
    live(n.input(0));
    Live& x = *values_.at(n.input(0)).live;  // materialized in place
    if (!x.flat) refused("reads a tensor that is not rank 2 (flatten it first)");
    if (!matmul && at.i("transA", 0)) refused("transA is not supported");
    const ConstTensor& w = constant(n, 1, "weight");
    const ConstTensor* c = matmul ? nullptr : optional_constant(n, 2, "bias");
    if (w.dims.size() != 2 || w.integer) refused("the weight is not a 2-D float tensor");
    const bool trans_b = !matmul && at.i("transB", 0);
    const int64_t in = trans_b ? w.dims[1] : w.dims[0], out = trans_b ? w.dims[0] : w.dims[1];
    const int64_t features = x.shape.c * x.shape.h * x.shape.w;
    if (in != features) refused(strprintf("a weight for %lld features reads %lld", (long long)in, (long long)features));
    const float alpha = matmul ? 1.f : at.f("alpha", 1.f), beta = matmul ? 1.f : at.f("beta", 1.f);
    Pending p;
    p.name = node_name(n);
    p.op = make_op(OpKind::Linear);
    std::get<LinearAttrs>(p.op.attrs).out_features = out;
    std::get<LinearAttrs>(p.op.attrs).bias = c != nullptr;
    p.inputs = {{materialize(x, n.input(0))}};
    p.weight_dims = {out, in};
    p.weight.resize(size_t(out * in));
    for (int64_t o = 0; o < out; ++o) {
      for (int64_t i = 0; i < in; ++i) {
        p.weight[size_t(o * in + i)] = alpha * w.f[size_t(trans_b ? o * in + i : i * out + o)];
      }
    }
    if (c) {
      if (c->integer || (c->numel() != out && c->numel() != 1)) refused("the bias is not per output feature");
      for (int64_t o = 0; o < out; ++o) p.bias.push_back(beta * float(c->at(c->numel() == 1 ? 0 : o)));
    }
    const int idx = add_node(std::move(p));
    const Live l = node_live(idx, true);
    set_live(n, l);
  }

  void softmax(const onnx::NodeProto& n) {
    const NodeAttrs at(n);
    const Live& x = live(n.input(0));
    const int64_t rank = x.flat ? 2 : 4;
    int64_t axis = at.i("axis", m_.opset >= 13 ? -1 : 1);
    if (axis < 0) axis += rank;
    if (axis != 1 || (!x.flat && (x.shape.h != 1 || x.shape.w != 1) && m_.opset < 13)) {
      refused("only a softmax over channels (axis 1) is supported");
    }
    Pending p;
    p.name = node_name(n);
    p.op = make_op(OpKind::Softmax);
    p.inputs = x.terms;
    const int idx = add_node(std::move(p));
    const Live l = node_live(idx, x.flat);
    set_live(n, l);
  }

  // Shape of a computed tensor is a constant: its dims are known at import.
  void shape_of(const onnx::NodeProto& n) {
    const NodeAttrs at(n);
    const Live& x = live(n.input(0), true);
    const std::vector<int64_t> d = x.dims();
    const int64_t rank = int64_t(d.size());
    auto clampi = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank); };
    const int64_t b = clampi(at.i("start", 0)), e = clampi(at.i("end", rank));
    values_[n.output(0)].constant =
        ConstTensor::ints({std::max<int64_t>(0, e - b)}, std::vector<int64_t>(d.begin() + b, d.begin() + std::max(b, e)));
    ++folded_["constant computations"];
  }

  // --- structure -------------------------------------------------------------------------

  // The nodes the output depends on, in order (the input placeholder first).
  std::vector<int> prune(int output) const {
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
  std::vector<std::vector<int>> find_blocks(const std::vector<int>& kept) const {
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

  OnnxImport emit(const std::vector<int>& kept, const std::vector<std::vector<int>>& blocks) {
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
};

}  // namespace

OnnxImport import_onnx(const OnnxImportOptions& options) {
  const OnnxModel model = read_onnx_model(options.model_file);
  return Importer(model, options).run();
}

}  // namespace hios::importer
