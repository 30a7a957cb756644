// The operator-graph IR.
//
// A Graph is an input placeholder followed by ordered Blocks. A Block has an enter node (the
// previous block's exit, or the graph input for the first block), inner nodes forming a DAG,
// and an exit node. Nodes read their input as a list of terms: the values inside a term are
// summed and the terms are concatenated along channels, so [[a, b], [c]] is concat(a + b, c).
// A value may be a channel slice of a node's output. Add and mul are the exception: each of
// their terms is one operand.
//
// A node may read any node of its own block, the block's enter, or any node of an earlier
// block (NASNet cells read the two previous cells). Every node of a block must lead to the
// block's exit, so a block finishes when its exit does.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "graph/ops.hpp"

namespace hios {

// A node's output, or the channel slice [begin, end) of it. end < 0 means "to the last channel".
struct Value {
  int node = -1;
  int64_t begin = 0;
  int64_t end = -1;
  bool operator==(const Value& o) const { return node == o.node && begin == o.begin && end == o.end; }
};
using Term = std::vector<Value>;

// A constant operand of a general tensor op (OpDef::general): operand `operand` of the node is
// this tensor. Its values are `data` (little-endian, inline in the graph JSON) when given,
// otherwise tensor "<owner>.c<operand>" of the graph's weights file, otherwise (float types
// only) drawn from the seed like a weight.
struct Constant {
  int operand = 0;
  Shape shape;
  DType dtype = DType::F32;
  std::vector<uint8_t> data;
  bool operator==(const Constant& o) const {
    return operand == o.operand && shape == o.shape && dtype == o.dtype && data == o.data;
  }
};

struct Node {
  std::string name;
  Op op;
  // The node whose parameters (weights, bias) this one uses; empty: its own. The parts of a row
  // split are the same operator, so they carry the original node's weights.
  std::string params_from;
  const std::string& params_name() const { return params_from.empty() ? name : params_from; }
  std::vector<Term> inputs;
  std::vector<Constant> constants;  // general ops only, sorted by operand
  int block = -1;    // index into Graph::blocks; -1 for a graph input
  Shape shape;       // output shape, filled by shape inference
  DType dtype = DType::F32;  // output element type, filled by inference
  OpCost cost;       // counts, filled by shape inference (term assembly included)
  int operands() const { return int(inputs.size() + constants.size()); }
  // The input terms concatenated into the op's input: all of them but a residual convolution's
  // last (ConvAttrs::residual), which is residual_term().
  size_t input_terms() const { return inputs.size() - (has_residual() ? 1 : 0); }
  bool has_residual() const { return op.kind == OpKind::Conv && op.conv().residual && inputs.size() >= 2; }
  const Term* residual_term() const { return has_residual() ? &inputs.back() : nullptr; }
  // Operand k's constant, or nullptr when operand k is an input term.
  const Constant* constant(int k) const;
  // The input term holding operand k (operands not constant, in order).
  int term_of_operand(int k) const;
};

struct Block {
  std::string name;
  int enter = -1;          // node index: graph input or the previous block's exit
  int exit = -1;           // node index, a member of `nodes`
  std::vector<int> nodes;  // inner nodes and the exit, in topological order
};

class Graph {
 public:
  std::string name;
  int64_t batch = 1, height = 0, width = 0;
  DType dtype = DType::F32;
  // The parameters' file (safetensors, executor/safetensors.hpp); "" for the seeded weights.
  // A path relative to the graph file is resolved when the graph is loaded. Not part of the
  // graph's digest: a schedule is the same whatever the weights' values.
  std::string weights;
  std::vector<Node> nodes;  // topologically ordered; nodes[0] is the input placeholder
  std::vector<Block> blocks;

  // Graph outputs besides the last block's exit: when a model has several results, they are
  // listed here (in order) and the last block ends in a `join` of them. Empty: the one result
  // is the last block's exit.
  std::vector<int> outputs;

  int input() const { return 0; }  // the first graph input (the image of a convolution network)
  int output() const { return blocks.empty() ? 0 : blocks.back().exit; }
  // Every graph input (input ops, outside the blocks, in node order) and every result.
  const std::vector<int>& inputs() const { return inputs_; }
  std::vector<int> results() const { return outputs.empty() ? std::vector<int>{output()} : outputs; }
  bool is_input(int v) const { return nodes[size_t(v)].op.kind == OpKind::Input; }
  // The inputs are nodes 0 .. first_computed() - 1; every node from there on is computed.
  int first_computed() const { return int(inputs_.size()); }
  bool is_result(int v) const;
  // Bytes of node v's output in its element type (float32 for every float type: the size a
  // program is lowered in, executor/program.hpp).
  int64_t tensor_bytes(int v) const;
  int size() const { return static_cast<int>(nodes.size()); }
  int find(std::string_view node_name) const;  // -1 when absent
  int64_t value_begin(const Value& v) const { return v.begin; }
  int64_t value_end(const Value& v) const { return v.end < 0 ? nodes[v.node].shape.c : v.end; }
  Shape value_shape(const Value& v) const;
  // Distinct producers of node i, in first-use order.
  std::vector<int> predecessors(int i) const;
  // Consumers of every node (built on demand; O(edges)).
  std::vector<std::vector<int>> successors() const;
  // params_from names a node with the same op and parameter count, or the operator of a split part.
  void check_shared_parameters() const;
  OpCost total_cost() const;  // parameters shared by a split's parts (params_from) counted once
  int64_t edge_count() const;  // distinct producer -> consumer pairs

  // Rebuilds the name index, orders nodes topologically, checks the block structure and runs
  // shape inference and counting. Throws hios::Error naming the culprit on: an empty or
  // duplicate name, a dangling reference, a cycle, a reference into a later block, a node
  // that does not lead to its block's exit, a channel or spatial mismatch in a term, a
  // non-positive size, or an invalid op attribute.
  void finalize();

 private:
  // finalize's phases, in order.
  void check_dimensions() const;
  void index_names();
  void check_placeholder_and_terms() const;
  std::vector<int> sort_topologically();  // returns old index -> new index
  void rebuild_blocks(const std::vector<int>& new_index);
  void infer_node(Node& nd);

  std::unordered_map<std::string, int> index_;
  std::vector<int> inputs_;
  friend class GraphBuilder;
};

// `g` at another input size and batch: the same nodes, shapes inferred again. Convolutions and
// pools follow any size; a linear layer over a flattened C x H x W input changes its input
// features with H and W, which its weights then refuse. Serving a graph file at many shapes
// (an imported model's) uses it.
Graph graph_at_shape(const Graph& g, int64_t batch, int64_t height, int64_t width);

// Builds a Graph node by node, inferring shapes as it goes so that model code can ask for the
// channels of what it has built so far.
class GraphBuilder {
 public:
  GraphBuilder(std::string name, int64_t batch, int64_t height, int64_t width);

  Value input(int64_t channels, const std::string& name = "input");
  void begin_block(const std::string& name);
  // Ends the current block with `exit` (a whole node of the block) as its exit.
  void end_block(Value exit);

  // The general form: an op reading `inputs` under term semantics.
  Value node(const std::string& name, Op op, std::vector<Term> inputs);

  // Conveniences for model code. `pieces` are concatenated along channels (one term each), so
  // conv("c", {a, b}, ...) convolves concat(a, b); to convolve a + b, use node() with Term{a, b}.
  Value conv(const std::string& name, const std::vector<Value>& pieces, int64_t out_channels, int kernel, int stride, int padding,
             Activation act = Activation::Relu, int64_t groups = 1, bool bias = true, int dilation = 1);
  Value conv(const std::string& name, const std::vector<Value>& pieces, int64_t out_channels, std::array<int, 2> kernel,
             std::array<int, 2> stride, std::array<int, 2> padding, Activation act = Activation::Relu,
             int64_t groups = 1, bool bias = true);
  Value pool(const std::string& name, Value in, PoolKind kind, int kernel = 1, int stride = 1, int padding = 0,
             bool ceil_mode = false, bool count_include_pad = true);
  Value activation(const std::string& name, Value in, Activation act);
  Value add(const std::string& name, const std::vector<Value>& operands);  // element-wise, one term each
  Value mul(const std::string& name, const std::vector<Value>& operands);
  Value sum(const std::string& name, const std::vector<Value>& values);     // identity over one term
  Value concat(const std::string& name, const std::vector<Value>& values);  // identity, one term each
  Value sequential(const std::string& name, const std::vector<Value>& pieces, std::vector<Op> steps);
  Value linear(const std::string& name, Value in, int64_t out_features, bool bias = true);
  Value softmax(const std::string& name, Value in);

  static Value slice(Value v, int64_t begin, int64_t end) { return Value{v.node, begin, end}; }
  const Shape& shape(Value v) const { return g_.nodes[v.node].shape; }
  int64_t channels(Value v) const { return v.end < 0 ? g_.nodes[v.node].shape.c - v.begin : v.end - v.begin; }
  bool in_block() const { return open_block_ >= 0; }

  // Finalizes and returns the graph; the builder is left empty.
  Graph finish();

 private:
  Graph g_;
  int open_block_ = -1;
};

// Op constructors usable for sequential steps.
Op conv_op(int64_t out_channels, std::array<int, 2> kernel, std::array<int, 2> stride, std::array<int, 2> padding,
           Activation act = Activation::None, int64_t groups = 1, bool bias = true,
           std::array<int, 2> dilation = {1, 1});
Op pool_op(PoolKind kind, int kernel = 1, int stride = 1, int padding = 0, bool ceil_mode = false,
           bool count_include_pad = true);
Op activation_op(Activation act);
Op sequential_op(std::vector<Op> steps);

}  // namespace hios
