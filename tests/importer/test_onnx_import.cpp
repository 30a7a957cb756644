// The ONNX importer on models built here with the protobuf API: what it folds and how, and a
// mutation fuzzer. The fuzzer changes a valid model both as a message (an attribute, a
// dimension or a tensor's data set to an extreme, an op renamed, an input dropped) and as bytes
// (a byte changed, a span deleted or duplicated, a truncation), writes it and imports it. The
// importer may accept the result or throw hios::Error; anything else (another exception, a
// crash, a sanitizer report in the sanitizer build) fails. Fixed-seed, so a failure reproduces;
// HIOS_FUZZ_CASES sets the number of cases (default 1500), HIOS_FUZZ_SEED another seed.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "graph/error.hpp"
#include "importer/onnx_import.hpp"
#include "importer/onnx_model.hpp"
#include "tests/catch.hpp"
#include "tests/importer/onnx_builders.hpp"
#include "tests/test_util.hpp"

using namespace hios;

namespace {

namespace fs = std::filesystem;

onnx::TensorProto tensor(const std::string& name, std::vector<int64_t> dims, std::vector<float> values) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t.add_dims(d);
  for (float v : values) t.add_float_data(v);
  return t;
}
onnx::TensorProto ints(const std::string& name, std::vector<int64_t> dims, std::vector<int64_t> values) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(onnx::TensorProto::INT64);
  for (int64_t d : dims) t.add_dims(d);
  for (int64_t v : values) t.add_int64_data(v);
  return t;
}
std::vector<float> ramp(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t k = 0; k < n; ++k) v[k] = scale * float(int(k % 7) - 3);
  return v;
}

using test::onnx_node;
constexpr auto node = onnx_node;
void attr_ints(onnx::NodeProto* n, const std::string& name, std::vector<int64_t> v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}
void attr_int(onnx::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

// A model of one float input "x" of the given dims, its graph named `name`, for the cases to
// fill with initializers and nodes.
onnx::ModelProto model_with_input(const std::string& name, int64_t opset, std::vector<int64_t> dims) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(opset);
  onnx::GraphProto& g = *m.mutable_graph();
  g.set_name(name);
  auto* in = g.add_input();
  in->set_name("x");
  auto* tt = in->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) tt->mutable_shape()->add_dim()->set_dim_value(d);
  return m;
}

// x (1x3x8x8) -> Conv 3x3 pad 1 (4) -> BN -> Relu -> [Pad bottom/right 2 -> Conv 3x3 (4)],
// [MaxPool 3x3 pad 1], [Clip 0..6] -> Concat -> GlobalAveragePool -> Shape/Gather/Unsqueeze/
// Concat -> Reshape -> Gemm (5)
onnx::ModelProto small_model() {
  onnx::ModelProto m = model_with_input("small", 13, {1, 3, 8, 8});
  onnx::GraphProto& g = *m.mutable_graph();
  g.add_output()->set_name("y");
  *g.add_initializer() = tensor("c1.w", {4, 3, 3, 3}, ramp(108, 0.1f));
  *g.add_initializer() = tensor("bn.g", {4}, {1.f, 2.f, 0.5f, 1.5f});
  *g.add_initializer() = tensor("bn.b", {4}, {0.1f, -0.2f, 0.3f, 0.f});
  *g.add_initializer() = tensor("bn.m", {4}, {0.5f, 0.f, -0.5f, 1.f});
  *g.add_initializer() = tensor("bn.v", {4}, {1.f, 4.f, 0.25f, 2.f});
  *g.add_initializer() = ints("pads", {8}, {0, 0, 0, 0, 0, 0, 2, 2});
  *g.add_initializer() = tensor("c2.w", {4, 4, 3, 3}, ramp(144, 0.05f));
  *g.add_initializer() = tensor("lo", {}, {0.f});
  *g.add_initializer() = tensor("hi", {}, {6.f});
  *g.add_initializer() = ints("zero", {}, {0});
  *g.add_initializer() = ints("axes0", {1}, {0});
  *g.add_initializer() = ints("minus1", {1}, {-1});
  *g.add_initializer() = tensor("fc.w", {5, 12}, ramp(60, 0.2f));
  *g.add_initializer() = tensor("fc.b", {5}, {1.f, 2.f, 3.f, 4.f, 5.f});
  attr_ints(node(g, "Conv", {"x", "c1.w"}, "c1"), "pads", {1, 1, 1, 1});
  node(g, "BatchNormalization", {"c1", "bn.g", "bn.b", "bn.m", "bn.v"}, "bn");
  node(g, "Relu", {"bn"}, "r");
  node(g, "Pad", {"r", "pads"}, "p");
  node(g, "Conv", {"p", "c2.w"}, "c2");
  auto* mp = node(g, "MaxPool", {"r"}, "mp");
  attr_ints(mp, "kernel_shape", {3, 3});
  attr_ints(mp, "pads", {1, 1, 1, 1});
  node(g, "Clip", {"r", "lo", "hi"}, "r6");
  attr_int(node(g, "Concat", {"c2", "mp", "r6"}, "cat"), "axis", 1);
  node(g, "GlobalAveragePool", {"cat"}, "gap");
  node(g, "Shape", {"gap"}, "shape");
  attr_int(node(g, "Gather", {"shape", "zero"}, "n"), "axis", 0);
  node(g, "Unsqueeze", {"n", "axes0"}, "n1");
  attr_int(node(g, "Concat", {"n1", "minus1"}, "target"), "axis", 0);
  node(g, "Reshape", {"gap", "target"}, "flat");
  attr_int(node(g, "Gemm", {"flat", "fc.w", "fc.b"}, "y"), "transB", 1);
  return m;
}

std::string temp_file(const std::string& tag) {
  return (fs::temp_directory_path() / ("hios-onnx-" + std::to_string(::getpid()) + "-" + tag + ".onnx")).string();
}

importer::OnnxImport import_bytes(const std::string& bytes, const std::string& file) {
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), std::streamsize(bytes.size()));
  }
  importer::OnnxImportOptions o;
  o.model_file = file;
  return importer::import_onnx(o);
}

// The model imported through a temporary file, which is removed again.
importer::OnnxImport import_model(const onnx::ModelProto& m, const std::string& tag) {
  std::string bytes;
  REQUIRE(m.SerializeToString(&bytes));
  const std::string file = temp_file(tag);
  importer::OnnxImport r = import_bytes(bytes, file);
  fs::remove(file);
  return r;
}

using Rng = test::SplitMix;

const int64_t kExtremes[] = {0, -1, 1, 2, 7, -65537, 65537, int64_t(1) << 31, -(int64_t(1) << 31), int64_t(1) << 40,
                             INT64_MAX, INT64_MIN, 3, 1000000};
const char* kOps[] = {"Conv", "Relu", "MaxPool", "AveragePool", "Pad", "Concat", "Add", "Mul", "Gemm", "Reshape",
                      "Flatten", "Shape", "Gather", "Slice", "Clip", "BatchNormalization", "GlobalAveragePool",
                      "ReduceMean", "Softmax", "Transpose", "Expand", "ConstantOfShape", "Range", "Squeeze",
                      "Unsqueeze", "Div", "Where", "Identity", "Dropout", "MatMul", "Nonexistent"};

int64_t extreme(Rng& r) { return kExtremes[r.below(sizeof kExtremes / sizeof *kExtremes)]; }

// One change to the message.
void mutate_message(onnx::ModelProto& m, Rng& r) {
  onnx::GraphProto& g = *m.mutable_graph();
  switch (r.below(7)) {
    case 0: {  // an attribute value
      auto* n = g.mutable_node(int(r.below(size_t(g.node_size()))));
      if (n->attribute_size() == 0) break;
      auto* a = n->mutable_attribute(int(r.below(size_t(n->attribute_size()))));
      if (a->ints_size() > 0) a->set_ints(int(r.below(size_t(a->ints_size()))), extreme(r));
      else a->set_i(extreme(r));
      break;
    }
    case 1: {  // a dimension of an initializer, with its data left as it was
      auto* t = g.mutable_initializer(int(r.below(size_t(g.initializer_size()))));
      if (t->dims_size() > 0) t->set_dims(int(r.below(size_t(t->dims_size()))), extreme(r));
      break;
    }
    case 2: {  // an integer tensor's value (pads, axes, shape targets)
      auto* t = g.mutable_initializer(int(r.below(size_t(g.initializer_size()))));
      if (t->int64_data_size() > 0) t->set_int64_data(int(r.below(size_t(t->int64_data_size()))), extreme(r));
      else if (t->float_data_size() > 0) t->set_float_data(int(r.below(size_t(t->float_data_size()))), float(extreme(r)));
      break;
    }
    case 3:  // another op
      g.mutable_node(int(r.below(size_t(g.node_size()))))->set_op_type(kOps[r.below(sizeof kOps / sizeof *kOps)]);
      break;
    case 4: {  // an input dropped or renamed
      auto* n = g.mutable_node(int(r.below(size_t(g.node_size()))));
      if (n->input_size() == 0) break;
      if (r.below(2)) n->mutable_input()->RemoveLast();
      else n->set_input(int(r.below(size_t(n->input_size()))), g.node(int(r.below(size_t(g.node_size())))).output(0));
      break;
    }
    case 5: {  // the graph input's shape
      auto* d = g.mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(int(r.below(4)));
      d->set_dim_value(extreme(r));
      break;
    }
    default:  // the opset
      m.mutable_opset_import(0)->set_version(int64_t(r.below(25)));
      break;
  }
}

void mutate_bytes(std::string& b, Rng& r) {
  const size_t at = r.below(b.size());
  switch (r.below(4)) {
    case 0: b[at] = char(r.below(256)); break;
    case 1: b.erase(at, r.below(40)); break;
    case 2: b.insert(at, b.substr(at, r.below(80))); break;
    default: b.resize(at); break;
  }
}

}  // namespace

TEST_CASE("import: batch norm folded into the conv, activations fused, pads merged or made pad nodes, shape arithmetic evaluated") {
  const std::string file = temp_file("small");
  std::string bytes;
  REQUIRE(small_model().SerializeToString(&bytes));
  const importer::OnnxImport r = import_bytes(bytes, file);
  fs::remove(file);
  const Graph& g = r.graph;
  const Node& c1 = g.nodes[size_t(g.find("c1"))];
  REQUIRE(c1.op.kind == OpKind::Conv);
  CHECK(c1.op.conv().activation == Activation::Relu);  // BN folded, then the Relu fused
  CHECK(c1.op.conv().bias);
  CHECK(g.find("bn") < 0);
  // The folded weight: w * gamma / sqrt(var + eps), the bias beta - mean * gamma / sqrt(var + eps).
  const auto& w = r.weights.at("c1.weight").values;
  const auto& b = r.weights.at("c1.bias").values;
  const std::vector<float> w0 = ramp(108, 0.1f);
  const double s1 = 2.0 / std::sqrt(4.0 + 1e-5);
  CHECK(std::fabs(w[27] - w0[27] * s1) < 1e-6);
  CHECK(std::fabs(b[1] - (-0.2 - 0.0 * s1)) < 1e-6);
  // Pad bottom/right 2 cannot go into a conv's symmetric padding: a pad node does it.
  const int pad = g.find("p.pad");
  REQUIRE(pad >= 0);
  CHECK(g.nodes[size_t(pad)].op.kind == OpKind::Pad);
  CHECK(g.nodes[size_t(pad)].op.pad().pads == std::array<int64_t, 4>{0, 0, 2, 2});
  CHECK(g.nodes[size_t(g.find("r6"))].op.act().activation == Activation::Relu6);
  // The concat is the pool's input terms; the reshape is the linear layer's flattening.
  const Node& gap = g.nodes[size_t(g.find("gap"))];
  CHECK(gap.inputs.size() == 3);
  // The result keeps the model's output name: a flattening of the linear layer's N x 5 x 1 x 1 to
  // ONNX's [N, 5], which follows the batch.
  const Node& fc = g.nodes[size_t(g.find("y.value"))];
  CHECK(fc.op.kind == OpKind::Linear);
  CHECK(fc.shape == Shape{1, 5, 1, 1});
  CHECK(r.weights.at("y.value.weight").shape == std::vector<int64_t>{5, 12});
  const Node& y = g.nodes[size_t(g.find("y"))];
  CHECK(y.op.kind == OpKind::Reshape);
  CHECK(y.shape.dims() == std::vector<int64_t>{1, 5});
}

TEST_CASE("import: initializers also listed as graph inputs are constants (older exporters)") {
  onnx::ModelProto m = small_model();
  onnx::GraphProto& g = *m.mutable_graph();
  for (const auto& t : std::vector<onnx::TensorProto>(g.initializer().begin(), g.initializer().end())) {
    auto* in = g.add_input();
    in->set_name(t.name());
    in->mutable_type()->mutable_tensor_type()->set_elem_type(t.data_type());
  }
  std::string bytes;
  REQUIRE(m.SerializeToString(&bytes));
  const std::string file = temp_file("init-inputs");
  const importer::OnnxImport r = import_bytes(bytes, file);
  fs::remove(file);
  CHECK(r.graph.nodes[0].name == "x");
  CHECK(r.graph.nodes[size_t(r.graph.output())].shape.dims() == std::vector<int64_t>{1, 5});  // Gemm's [N, out]
}


// A vision transformer's classifier head: the output's node has its own name ('head'), takes
// the output's name ('y') at the end of the import, and has a constant too large to inline. The
// weights file must hold that constant under the name the graph gives it.
TEST_CASE("import: an output node renamed after the output keeps its stored constants") {
  onnx::ModelProto m = model_with_input("head", 17, {1, 40});
  onnx::GraphProto& g = *m.mutable_graph();
  g.add_output()->set_name("y");
  std::vector<float> bias(40);
  for (size_t k = 0; k < bias.size(); ++k) bias[k] = 0.25f * float(k);
  *g.add_initializer() = tensor("bias", {40}, bias);
  node(g, "Relu", {"x"}, "r");
  node(g, "Add", {"r", "bias"}, "y")->set_name("head");
  const importer::OnnxImport r = import_model(m, "renamed-output");
  const int y = r.graph.find("y");
  REQUIRE(y >= 0);
  const Node& add = r.graph.nodes[size_t(y)];
  REQUIRE(add.constants.size() == 1);
  CHECK(add.constants[0].data.empty());  // stored in the weights file, not inline
  const std::string key = "y.c" + std::to_string(add.constants[0].operand);
  REQUIRE(r.weights.count(key) == 1);
  CHECK(r.weights.at(key).values == bias);
}
// Transposes of a transformer export: [1, T, C] to [T, 1, C] moves only the batch of 1 and is
// a reshape (a view in the memory plan); [T, 1, H, D] to [H, T, 1, D] moves data and stays.
TEST_CASE("import: a transpose that moves only dims of size 1 becomes a reshape") {
  onnx::ModelProto m = model_with_input("tokens", 17, {1, 6, 8});
  onnx::GraphProto& g = *m.mutable_graph();
  g.add_output()->set_name("y");
  *g.add_initializer() = ints("heads", {4}, {6, 1, 2, 4});
  attr_ints(node(g, "Transpose", {"x"}, "t"), "perm", {1, 0, 2});
  node(g, "Reshape", {"t", "heads"}, "h");
  attr_ints(node(g, "Transpose", {"h"}, "y"), "perm", {2, 0, 1, 3});
  const importer::OnnxImport r = import_model(m, "unit-transpose");
  int transposes = 0;
  for (const Node& n : r.graph.nodes) transposes += n.op.kind == OpKind::Transpose;
  CHECK(transposes == 1);
  const int t = r.graph.find("t");
  REQUIRE(t >= 0);
  CHECK(r.graph.nodes[size_t(t)].op.kind == OpKind::Reshape);
  CHECK(r.graph.nodes[size_t(t)].shape.dims() == std::vector<int64_t>{6, 1, 8});
  const int y = r.graph.find("y");
  REQUIRE(y >= 0);
  CHECK(r.graph.nodes[size_t(y)].op.kind == OpKind::Transpose);
  CHECK(r.graph.nodes[size_t(y)].shape.dims() == std::vector<int64_t>{2, 6, 1, 4});
}
// Every exporter's linear layer is MatMul by the weight, then Add of the bias: one matmul node
// with the bias as its addend, whichever side of the Add the bias is on. A bias that is not
// along the last dim, or a product read by another node too, stays an Add.
TEST_CASE("import: a MatMul then an Add of a bias along the last dim is one matmul with the bias as its addend") {
  struct Case {
    bool bias_first, across_rows, product_read_again;
    bool fused() const { return !across_rows && !product_read_again; }
  };
  for (const Case& cs : {Case{false, false, false}, Case{true, false, false}, Case{false, true, false},
                         Case{false, false, true}}) {
    onnx::ModelProto m = model_with_input("linear", 17, {1, 6, 8});
    onnx::GraphProto& g = *m.mutable_graph();
    g.add_output()->set_name("y");
    *g.add_initializer() = tensor("w", {8, 5}, ramp(40, 0.1f));
    *g.add_initializer() = cs.across_rows ? tensor("b", {6, 1}, ramp(6, 0.5f)) : tensor("b", {1, 5}, ramp(5, 0.5f));
    node(g, "MatMul", {"x", "w"}, "mm");
    node(g, "Add", cs.bias_first ? std::vector<std::string>{"b", "mm"} : std::vector<std::string>{"mm", "b"}, "y");
    if (cs.product_read_again) {
      node(g, "Relu", {"mm"}, "r");
      g.add_output()->set_name("r");
    }
    const importer::OnnxImport r = import_model(m, "linear-bias");
    INFO("bias first " << cs.bias_first << ", across rows " << cs.across_rows << ", product read again "
                       << cs.product_read_again);
    int matmuls = 0, binaries = 0;
    for (const Node& n : r.graph.nodes) {
      matmuls += n.op.kind == OpKind::MatMul;
      binaries += n.op.kind == OpKind::Binary;
    }
    CHECK(matmuls == 1);
    CHECK(binaries == (cs.fused() ? 0 : 1));
    for (const Node& n : r.graph.nodes) {
      if (n.op.kind != OpKind::MatMul) continue;
      CHECK(n.shape.dims() == std::vector<int64_t>{1, 6, 5});
      REQUIRE(n.constants.size() == (cs.fused() ? 2u : 1u));
      if (cs.fused()) CHECK(n.constants[1].operand == 2);
    }
    const bool said = std::find(r.folded.begin(), r.folded.end(),
                                "1 Adds of a bias into the matrix product before them") != r.folded.end();
    CHECK(said == cs.fused());
  }
}
// An exporter's attention reads Q, K and V transposed from [1, S, H, D] to [1, H, S, D] and its
// result is transposed back: one token-major attention reading the untransposed tensors, in the
// place of the transpose back. Where the result is also read as it is, nothing is folded.
TEST_CASE("import: the head transposes around an attention fold into a token-major attention") {
  for (bool result_read_too : {false, true}) {
    onnx::ModelProto m = model_with_input("heads", 17, {1, 6, 2, 4});
    onnx::GraphProto& g = *m.mutable_graph();
    g.add_output()->set_name("y");
    *g.add_initializer() = tensor("two", {}, {2.f});
    node(g, "Relu", {"x"}, "qs");
    node(g, "Sigmoid", {"x"}, "ks");
    node(g, "Tanh", {"x"}, "vs");
    attr_ints(node(g, "Transpose", {"qs"}, "q"), "perm", {0, 2, 1, 3});
    attr_ints(node(g, "Transpose", {"ks"}, "k"), "perm", {0, 2, 1, 3});
    attr_ints(node(g, "Transpose", {"vs"}, "v"), "perm", {0, 2, 1, 3});
    attr_ints(node(g, "Transpose", {"k"}, "kt"), "perm", {0, 1, 3, 2});
    node(g, "MatMul", {"q", "kt"}, "s");
    node(g, "Div", {"s", "two"}, "sd");
    attr_int(node(g, "Softmax", {"sd"}, "p"), "axis", -1);
    node(g, "MatMul", {"p", "v"}, "o");
    attr_ints(node(g, "Transpose", {"o"}, "y"), "perm", {0, 2, 1, 3});
    if (result_read_too) {
      node(g, "Relu", {"o"}, "o2");
      g.add_output()->set_name("o2");
    }
    const importer::OnnxImport r = import_model(m, "head-transposes");
    INFO("result read too " << result_read_too);
    int transposes = 0, attentions = 0;
    for (const Node& n : r.graph.nodes) {
      transposes += n.op.kind == OpKind::Transpose;
      attentions += n.op.kind == OpKind::Attention;
    }
    CHECK(attentions == 1);
    CHECK(transposes == (result_read_too ? 4 : 0));
    const int y = r.graph.find("y");
    REQUIRE(y >= 0);
    const Node& ny = r.graph.nodes[size_t(y)];
    CHECK((ny.op.kind == OpKind::Attention) == !result_read_too);
    CHECK(ny.shape.dims() == std::vector<int64_t>{1, 6, 2, 4});
    if (!result_read_too) {
      CHECK(ny.op.as<AttentionAttrs>().token_major);
      CHECK(r.graph.nodes[size_t(ny.inputs[0][0].node)].name == "qs");
    }
  }
}
// NASNet's shape: cell k reads cells k-1 and k-2, so no node is a cut every path passes through.
TEST_CASE("import: cells that read the two previous cells are blocks of their own, not one block") {
  onnx::ModelProto m = model_with_input("cells", 17, {1, 8, 6, 6});
  onnx::GraphProto& g = *m.mutable_graph();
  *g.add_initializer() = tensor("w", {4, 8, 1, 1}, ramp(32, 0.1f));
  std::string prev2 = "x", prev = "x";
  const int cells = 12;
  for (int c = 0; c < cells; ++c) {
    const std::string k = "cell" + std::to_string(c);
    node(g, "Relu", {prev2}, k + ".prev_relu");
    node(g, "Conv", {k + ".prev_relu", "w"}, k + ".prev_conv");
    node(g, "Relu", {prev}, k + ".relu");
    node(g, "Conv", {k + ".relu", "w"}, k + ".conv");
    node(g, "Conv", {k + ".relu", "w"}, k + ".conv2");
    node(g, "Add", {k + ".conv", k + ".prev_conv"}, k + ".add");
    node(g, "Relu", {k + ".add"}, k + ".add_relu");
    attr_int(node(g, "Concat", {k + ".add_relu", k + ".conv2"}, k + ".out"), "axis", 1);
    prev2 = prev;
    prev = k + ".out";
  }
  node(g, "GlobalAveragePool", {prev}, "gap");
  g.add_output()->set_name("gap");
  const importer::OnnxImport r = import_model(m, "cells");  // finalize checks every block's nodes lead to its exit
  INFO(r.graph.size() << " nodes in " << r.graph.blocks.size() << " blocks");
  CHECK(r.graph.size() > 60);
  CHECK(r.graph.blocks.size() >= 6);
  size_t largest = 0;
  for (const Block& b : r.graph.blocks) largest = std::max(largest, b.nodes.size());
  CHECK(largest <= 24);
}

TEST_CASE("import: every unsupported node is listed in one error") {
  onnx::ModelProto m = small_model();
  m.mutable_graph()->mutable_node(2)->set_op_type("LpNormalization");  // r
  m.mutable_graph()->mutable_node(6)->set_op_type("Celu");   // r6, reads r: listed? no, r failed
  m.mutable_graph()->mutable_node(5)->set_op_type("LRN");    // mp, reads r too
  std::string bytes;
  REQUIRE(m.SerializeToString(&bytes));
  const std::string file = temp_file("unsupported");
  try {
    import_bytes(bytes, file);
    FAIL("imported a model with an LpNormalization");
  } catch (const Error& e) {
    const std::string msg = e.what();
    CHECK(msg.find("cannot import 1 node: LpNormalization 'r' (opset 13): not supported") != std::string::npos);
  }
  // Independent branches: each listed.
  m = small_model();
  m.mutable_graph()->mutable_node(6)->set_op_type("Unique");
  m.mutable_graph()->mutable_node(5)->set_op_type("Einsum");
  REQUIRE(m.SerializeToString(&bytes));
  try {
    import_bytes(bytes, file);
    FAIL("imported a model with a Unique");
  } catch (const Error& e) {
    const std::string msg = e.what();
    CHECK(msg.find("cannot import 2 nodes") != std::string::npos);
    CHECK(msg.find("Einsum 'mp'") != std::string::npos);
    CHECK(msg.find("Unique 'r6'") != std::string::npos);
  }
  fs::remove(file);
}

TEST_CASE("fuzz: the ONNX importer refuses mutated models with hios::Error only") {
  const char* env = std::getenv("HIOS_FUZZ_CASES");
  const int cases = env ? std::atoi(env) : 1500;
  const std::string file = temp_file("fuzz");
  std::string valid;
  REQUIRE(small_model().SerializeToString(&valid));
  const char* seed = std::getenv("HIOS_FUZZ_SEED");
  Rng rng{seed ? std::strtoull(seed, nullptr, 10) : 20261126ull};
  int accepted = 0, refused = 0;
  for (int c = 0; c < cases; ++c) {
    std::string bytes;
    if (c % 3 == 2) {
      bytes = valid;
      const int edits = 1 + int(rng.below(3));
      for (int e = 0; e < edits && !bytes.empty(); ++e) mutate_bytes(bytes, rng);
    } else {
      onnx::ModelProto m = small_model();
      const int edits = 1 + int(rng.below(3));
      for (int e = 0; e < edits; ++e) mutate_message(m, rng);
      m.SerializeToString(&bytes);
    }
    try {
      import_bytes(bytes, file);
      ++accepted;
    } catch (const Error& e) {
      INFO("case " << c << ": " << e.what());
      CHECK(std::string(e.what()).size() > 0);
      ++refused;
    }
  }
  fs::remove(file);
  CHECK(accepted + refused == cases);
  CHECK(refused > 0);
}
