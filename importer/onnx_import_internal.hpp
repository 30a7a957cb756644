// The ONNX importer's working state, shared by its two source files: onnx_import.cpp assembles
// the graph (reading, mapping each node through the table of handlers, pruning, blocks,
// emitting) and onnx_ops.cpp holds the handlers, one converter per ONNX op. Internal: only
// importer/ includes it; onnx_import.hpp stays the interface.
#pragma once

#include <array>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "importer/onnx_attrs.hpp"
#include "importer/onnx_import.hpp"
#include "importer/onnx_model.hpp"

namespace hios::importer::detail {

// A hios node being built: ops are still changed after creation (a batch norm folded into a
// conv, an activation fused), so nodes are kept here until the blocks are known.
struct Pending {
  std::string name;
  Op op;
  std::vector<Term> inputs;  // Value::node indexes `Importer::nodes_`
  Shape shape;
  DType dtype = DType::F32;
  std::vector<Constant> constants;  // a general op's constant operands
  // Float constants too large to inline, by operand, written to the weights file as NAME.cK.
  // They stay with the node, so that naming it after a graph output later keeps them.
  std::map<int, std::vector<float>> stored_constants;
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
  DType dtype = DType::F32;
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

class Importer {
 public:
  Importer(const OnnxModel& model, const OnnxImportOptions& options) : m_(model), o_(options) {}
  OnnxImport run();

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
  std::vector<std::string> output_names_;

  // --- reading (onnx_import.cpp)
  void read_initializers();
  void count_uses();
  void read_graph_input();
  std::vector<Value> read_graph_outputs();

  // --- node mapping (onnx_import.cpp)
  void map_nodes();
  struct Refused {
    std::string why;
  };
  [[noreturn]] static void refused(const std::string& why) { throw Refused{why}; }
  void refuse(const onnx::NodeProto& n, const std::string& why);
  void fail_outputs(const onnx::NodeProto& n);
  void refuse_problems();
  bool fold_if_constant(const onnx::NodeProto& n);

  // --- helpers (onnx_import.cpp)
  std::string unique_name(const std::string& raw);
  static const std::string& raw_name(const onnx::NodeProto& n) { return n.name().empty() ? n.output(0) : n.name(); }
  std::string node_name(const onnx::NodeProto& n) { return unique_name(raw_name(n)); }
  const Live& live(const std::string& name, bool pad_ok = false);
  void apply_pending_pad(const std::string& name);
  Live pad_node(const Live& x, const PendingPad& pad, const std::string& raw);
  const ConstTensor& constant(const onnx::NodeProto& n, int k, const char* what);
  const ConstTensor* optional_constant(const onnx::NodeProto& n, int k, const char* what);
  int uses(const std::string& value) const;
  void only_first_output_used(const onnx::NodeProto& n);
  int add_node(Pending p);
  Shape term_shape(const Term& t) const;
  Value materialize(Live& l, const std::string& onnx_name);
  Live node_live(int idx, bool flat = false) const;
  void set_live(const onnx::NodeProto& n, Live l) { values_[n.output(0)].live = std::move(l); }
  Pending* sole_producer(const std::string& value, OpKind kind);

  // --- op handlers (onnx_ops.cpp)
  static std::array<int, 2> pair_of(const std::vector<int64_t>& v, int def);
  std::array<int64_t, 4> own_pads(const NodeAttrs& at, const Live& x, std::array<int, 2> kernel, std::array<int, 2> stride,
                                  std::array<int, 2> dilation);
  std::array<int, 2> take_padding(Live& x, const std::string& x_name, std::array<int64_t, 4> own, PadFill fill);
  void conv(const onnx::NodeProto& n);
  void conv_transpose(const onnx::NodeProto& n);
  void affine(const onnx::NodeProto& n, const std::string& x_name, std::vector<float> scale, std::vector<float> shift,
              const char* what);
  void batch_norm(const onnx::NodeProto& n);
  void apply_activation(const onnx::NodeProto& n, Activation a);
  void activation(const onnx::NodeProto& n);
  void clip(const onnx::NodeProto& n);
  void pool(const onnx::NodeProto& n);
  void add_global_pool(const onnx::NodeProto& n, PoolKind kind, bool flat);
  void global_pool(const onnx::NodeProto& n);
  void reduce_mean(const onnx::NodeProto& n);
  void concat(const onnx::NodeProto& n);
  void binary(const onnx::NodeProto& n);
  bool fuse_residual(const onnx::NodeProto& n, const std::string& conv_out, const Live& other);
  static bool per_channel(const ConstTensor& c, bool flat, int64_t channels);
  void pad(const onnx::NodeProto& n);
  void alias(const onnx::NodeProto& n);
  void reshape(const onnx::NodeProto& n);
  void gemm(const onnx::NodeProto& n);
  void softmax(const onnx::NodeProto& n);
  void shape_of(const onnx::NodeProto& n);

  // --- general tensor ops (onnx_tensor_ops.cpp)
 public:
  // An operand of a general op: a computed value, or a constant.
  struct Operand {
    Value value;                       // when !constant
    std::optional<ConstTensor> constant;
    DType dtype = DType::F32;          // the constant's element type
  };
 private:
  // Maps n onto the general ops; false when no general converter exists for its op.
  bool general(const onnx::NodeProto& n);
  Operand operand(const std::string& onnx_name);
  Operand const_operand(ConstTensor c, DType t);
  Shape operand_shape(const Operand& o) const;
  DType operand_dtype(const Operand& o) const;
  // A general node named after `raw` reading `operands`; returns its index in nodes_.
  int general_node(const std::string& raw, Op op, const std::vector<Operand>& operands);
  // Constant operand `o` as operand k of p: inline, or kept for the weights file when large.
  void add_constant_operand(Pending& p, int k, const Operand& o);
  void set_general(const std::string& onnx_name, int idx);
  friend struct GeneralOps;

  // --- structure (onnx_import.cpp)
  std::vector<int> prune(int output) const;
  // Attention whose Q, K and V are head transposes ([.., S, H, D] to [.., H, S, D]) that only it
  // reads, and whose result only a transpose back reads: token-major attention reading the
  // transposes' inputs, in the place of the transpose back (AttentionAttrs::token_major).
  void fold_head_transposes(const std::vector<Value>& results);
  std::vector<std::vector<int>> find_blocks(const std::vector<int>& kept) const;
  OnnxImport emit(const std::vector<int>& kept, const std::vector<std::vector<int>>& blocks);
};

}  // namespace hios::importer::detail
