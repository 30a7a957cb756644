// The importer's pattern rewrites (importer/onnx_patterns.hpp) on graphs built here: GELU in
// its erf and tanh forms, layer norm and attention as the exporters write them become one node
// each; near misses stay as they are.
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "importer/onnx_patterns.hpp"
#include "tests/catch.hpp"
#include "tests/importer/onnx_builders.hpp"

using namespace hios;

namespace {

constexpr auto add = test::onnx_node;

void scalar(onnx::GraphProto& g, const std::string& name, float v) {
  onnx::TensorProto* t = g.add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  t->add_float_data(v);
}

// x -> Relu -> GELU chain -> y, the chain as `form` writes it.
onnx::GraphProto gelu_graph(int form) {
  onnx::GraphProto g;
  g.add_output()->set_name("y");
  scalar(g, "sqrt2", float(std::sqrt(2.0)));
  scalar(g, "inv_sqrt2", float(1 / std::sqrt(2.0)));
  scalar(g, "one", 1.0f);
  scalar(g, "half", 0.5f);
  scalar(g, "two", 2.0f);
  scalar(g, "three", 3.0f);
  scalar(g, "k", 0.044715f);
  scalar(g, "c", float(std::sqrt(2 / M_PI)));
  add(g, "Relu", {"in"}, "x");
  switch (form) {
    case 0:  // TorchScript's nn.GELU: x * (1 + erf(x / sqrt2)) * 0.5
    case 2:  // the same, erf's output also a graph output
      add(g, "Div", {"x", "sqrt2"}, "d");
      add(g, "Erf", {"d"}, "e");
      add(g, "Add", {"e", "one"}, "e1");
      add(g, "Mul", {"x", "e1"}, "m");
      add(g, "Mul", {"m", "half"}, "y");
      if (form == 2) g.add_output()->set_name("e");
      break;
    case 1:  // (0.5 * x) * (1 + erf(x * (1 / sqrt2))), constants first where they commute
      add(g, "Mul", {"inv_sqrt2", "x"}, "d");
      add(g, "Erf", {"d"}, "e");
      add(g, "Add", {"one", "e"}, "e1");
      add(g, "Mul", {"half", "x"}, "hx");
      add(g, "Mul", {"hx", "e1"}, "y");
      break;
    case 4:  // the tanh form with Pow(x, 3), the 0.5 on x first
    case 5:  // the same with x * x * x and the 0.5 last
      if (form == 4) {
        add(g, "Pow", {"x", "three"}, "cube");
      } else {
        add(g, "Mul", {"x", "x"}, "sq");
        add(g, "Mul", {"sq", "x"}, "cube");
      }
      add(g, "Mul", {"k", "cube"}, "kc");
      add(g, "Add", {"x", "kc"}, "inner");
      add(g, "Mul", {"inner", "c"}, "scaled");
      add(g, "Tanh", {"scaled"}, "t");
      add(g, "Add", {"t", "one"}, "t1");
      if (form == 4) {
        add(g, "Mul", {"x", "half"}, "hx");
        add(g, "Mul", {"hx", "t1"}, "y");
      } else {
        add(g, "Mul", {"t1", "x"}, "m");
        add(g, "Mul", {"m", "half"}, "y");
      }
      break;
    case 3:  // x / 2 is not x / sqrt2
      add(g, "Div", {"x", "two"}, "d");
      add(g, "Erf", {"d"}, "e");
      add(g, "Add", {"e", "one"}, "e1");
      add(g, "Mul", {"x", "e1"}, "m");
      add(g, "Mul", {"m", "half"}, "y");
      break;
  }
  return g;
}

std::vector<std::string> op_types(const onnx::GraphProto& g) {
  std::vector<std::string> out;
  for (const auto& n : g.node()) out.push_back(n.op_type());
  return out;
}

}  // namespace

TEST_CASE("import patterns: GELU's erf and tanh forms become one Gelu node reading x and writing the chain's output") {
  for (int form : {0, 1, 4, 5}) {
    onnx::GraphProto g = gelu_graph(form);
    CHECK(importer::fuse_patterns(g).gelus == 1);
    REQUIRE(op_types(g) == std::vector<std::string>{"Relu", "Gelu"});
    CHECK(g.node(1).input(0) == "x");
    CHECK(g.node(1).output(0) == "y");
    const bool tanh = g.node(1).attribute_size() == 1 && g.node(1).attribute(0).s() == "tanh";
    CHECK(tanh == (form >= 4));
  }
}

TEST_CASE("import patterns: a GELU chain whose intermediate is read elsewhere, or with another constant, stays") {
  for (int form : {2, 3}) {
    onnx::GraphProto g = gelu_graph(form);
    CHECK(importer::fuse_patterns(g).gelus == 0);
    CHECK(op_types(g) == std::vector<std::string>{"Relu", "Div", "Erf", "Add", "Mul", "Mul"});
  }
}

TEST_CASE("import patterns: many GELUs in a chain are fused in one pass") {
  onnx::GraphProto g;
  scalar(g, "sqrt2", float(std::sqrt(2.0)));
  scalar(g, "one", 1.0f);
  scalar(g, "half", 0.5f);
  std::string x = "in";
  for (int i = 0; i < 2000; ++i) {
    const std::string p = "g" + std::to_string(i) + "_";
    add(g, "Div", {x, "sqrt2"}, p + "d");
    add(g, "Erf", {p + "d"}, p + "e");
    add(g, "Add", {p + "e", "one"}, p + "e1");
    add(g, "Mul", {x, p + "e1"}, p + "m");
    add(g, "Mul", {p + "m", "half"}, p + "y");
    x = p + "y";
  }
  g.add_output()->set_name(x);
  CHECK(importer::fuse_patterns(g).gelus == 2000);
  REQUIRE(g.node_size() == 2000);
  CHECK(g.node(0).input(0) == "in");
  CHECK(g.node(1999).output(0) == x);
}

namespace {

void ints(onnx::GraphProto& g, const std::string& name, std::vector<int64_t> v) {
  onnx::TensorProto* t = g.add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::INT64);
  t->add_dims(int64_t(v.size()));
  for (int64_t x : v) t->add_int64_data(x);
}

void ints_attr(onnx::NodeProto* n, const char* name, std::vector<int64_t> values) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : values) a->add_ints(x);
}

// x -> Relu -> layer norm written out -> y, the norm as `form` writes it: 0 TorchScript's
// (Pow, axes attribute, bias), 1 d * d, axes as an input (opset 18) and no bias, 2 over the last
// two dims; near misses: 3 the second mean over another axis, 4 d also a graph output, 5 the
// epsilon a tensor of two values.
onnx::GraphProto norm_graph(int form) {
  onnx::GraphProto g;
  g.add_output()->set_name("y");
  scalar(g, "two", 2.0f);
  scalar(g, "eps", 1e-5f);
  scalar(g, "gamma", 1.5f);
  scalar(g, "beta", 0.25f);
  ints(g, "last", {-1});
  add(g, "Relu", {"in"}, "x");
  const std::vector<int64_t> axes = form == 2 ? std::vector<int64_t>{-2, -1} : std::vector<int64_t>{-1};
  if (form == 1) {
    add(g, "ReduceMean", {"x", "last"}, "m");
  } else {
    ints_attr(add(g, "ReduceMean", {"x"}, "m"), "axes", axes);
  }
  add(g, "Sub", {"x", "m"}, "d");
  if (form == 1) {
    add(g, "Mul", {"d", "d"}, "sq");
    add(g, "ReduceMean", {"sq", "last"}, "v");
  } else {
    add(g, "Pow", {"d", "two"}, "sq");
    ints_attr(add(g, "ReduceMean", {"sq"}, "v"), "axes", form == 3 ? std::vector<int64_t>{-2} : axes);
  }
  if (form == 5) {
    onnx::TensorProto* t = g.add_initializer();
    t->set_name("eps2");
    t->set_data_type(onnx::TensorProto::FLOAT);
    t->add_dims(2);
    t->add_float_data(1e-5f);
    t->add_float_data(1e-5f);
  }
  add(g, "Add", {"v", form == 5 ? "eps2" : "eps"}, "ve");
  add(g, "Sqrt", {"ve"}, "s");
  add(g, "Div", {"d", "s"}, "n");
  if (form == 1) {
    add(g, "Mul", {"gamma", "n"}, "y");
  } else {
    add(g, "Mul", {"n", "gamma"}, "ng");
    add(g, "Add", {"ng", "beta"}, "y");
  }
  if (form == 4) g.add_output()->set_name("d");
  return g;
}

}  // namespace

TEST_CASE("import patterns: a layer norm written out becomes one LayerNormalization node with its axis and epsilon") {
  for (int form : {0, 1, 2}) {
    INFO("form " << form);
    onnx::GraphProto g = norm_graph(form);
    const importer::PatternCounts fused = importer::fuse_patterns(g);
    CHECK(fused.layer_norms == 1);
    CHECK(fused.gelus == 0);
    REQUIRE(op_types(g) == std::vector<std::string>{"Relu", "LayerNormalization"});
    const onnx::NodeProto& ln = g.node(1);
    CHECK(ln.input(0) == "x");
    CHECK(ln.input(1) == "gamma");
    CHECK(ln.input_size() == (form == 1 ? 2 : 3));
    if (form != 1) CHECK(ln.input(2) == "beta");
    CHECK(ln.output(0) == "y");
    for (const auto& a : ln.attribute()) {
      if (a.name() == "axis") CHECK(a.i() == (form == 2 ? -2 : -1));
      if (a.name() == "epsilon") CHECK(a.f() == 1e-5f);
    }
  }
}

TEST_CASE("import patterns: a written-out norm over mixed axes, with a centred value read elsewhere or a tensor epsilon stays") {
  for (int form : {3, 4, 5}) {
    INFO("form " << form);
    onnx::GraphProto g = norm_graph(form);
    const int before = g.node_size();
    CHECK(importer::fuse_patterns(g).layer_norms == 0);
    CHECK(g.node_size() == before);
  }
}

namespace {

void int_attr(onnx::NodeProto* n, const char* name, int64_t v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

// q, k (batch, sequence, heads, size), v and mask in; attention written out -> y, as `form`
// writes it: 0 TorchScript's BERT (K^T = Transpose(k, [0,2,3,1]), Div by sqrt(d), Add of the
// mask); 1 the SDPA decomposition (K^T = Transpose(kh, [0,1,3,2]) of heads-first K, Q and K^T
// each times sqrt(scale), the mask added first); 2 no mask, Mul by the scale, Softmax over axis
// 3 (the last, as opset 9 writes it); near misses: 3 the scores also a graph output, 4 Softmax
// over axis 1, 5 K^T not a transpose; 6 PyTorch's TorchScript SDPA with its default scale,
// computed from Q's shape (Sqrt of 1 / Sqrt(Cast(Slice(Shape(q), -1, MAX)))) and applied to Q
// and K^T each; near miss 7: the same, from K's shape.
onnx::GraphProto attention_graph(int form) {
  onnx::GraphProto g;
  g.add_output()->set_name("y");
  scalar(g, "root_d", 8.0f);
  scalar(g, "scale", 0.125f);
  scalar(g, "root_scale", float(std::sqrt(0.125)));
  if (form == 6 || form == 7) {
    scalar(g, "one", 1.0f);
    for (auto [name, v] : {std::pair<const char*, int64_t>{"minus1", -1}, {"int64_max", INT64_MAX}}) {
      onnx::TensorProto* t = g.add_initializer();
      t->set_name(name);
      t->set_data_type(onnx::TensorProto::INT64);
      t->add_dims(1);
      t->add_int64_data(v);
    }
    add(g, "Shape", {form == 6 ? "q" : "k"}, "qshape");
    add(g, "Slice", {"qshape", "minus1", "int64_max"}, "qlast");
    int_attr(add(g, "Cast", {"qlast"}, "qd"), "to", onnx::TensorProto::FLOAT);
    add(g, "Sqrt", {"qd"}, "qroot");
    add(g, "Div", {"one", "qroot"}, "inv");
    int_attr(add(g, "Cast", {"inv"}, "sc"), "to", onnx::TensorProto::FLOAT);
    add(g, "Sqrt", {"sc"}, "s1");
    add(g, "Sqrt", {"sc"}, "s2");
    add(g, "Mul", {"q", "s1"}, "qs");
    ints_attr(add(g, "Transpose", {"k"}, "kt"), "perm", {0, 1, 3, 2});
    add(g, "Mul", {"s2", "kt"}, "kts");
    add(g, "MatMul", {"qs", "kts"}, "scores");
  } else if (form == 1) {
    add(g, "Mul", {"q", "root_scale"}, "qs");
    ints_attr(add(g, "Transpose", {"k"}, "kt"), "perm", {0, 1, 3, 2});
    add(g, "Mul", {"kt", "root_scale"}, "kts");
    add(g, "MatMul", {"qs", "kts"}, "qk");
    add(g, "Add", {"mask", "qk"}, "scores");
  } else {
    if (form == 5) {
      add(g, "Relu", {"k"}, "kt");
    } else {
      ints_attr(add(g, "Transpose", {"k"}, "kt"), "perm", {0, 2, 3, 1});
    }
    add(g, "MatMul", {"q", "kt"}, "qk");
    if (form == 2) {
      add(g, "Mul", {"qk", "scale"}, "scores");
    } else {
      add(g, "Div", {"qk", "root_d"}, "qk_s");
      add(g, "Add", {"qk_s", "mask"}, "scores");
    }
  }
  int_attr(add(g, "Softmax", {"scores"}, "p"), "axis", form == 4 ? 1 : form == 2 ? 3 : -1);
  add(g, "MatMul", {"p", "v"}, "y");
  if (form == 3) g.add_output()->set_name("scores");
  return g;
}

}  // namespace

TEST_CASE("import patterns: both exporters' attention becomes one Attention node with the scale, K untransposed") {
  for (int form : {0, 1, 2}) {
    INFO("form " << form);
    onnx::GraphProto g = attention_graph(form);
    const importer::PatternCounts fused = importer::fuse_patterns(g);
    CHECK(fused.attentions == 1);
    const std::vector<std::string> want_ops =
        form == 1 ? std::vector<std::string>{"Attention"} : std::vector<std::string>{"Transpose", "Attention"};
    REQUIRE(op_types(g) == want_ops);
    const onnx::NodeProto& at = g.node(g.node_size() - 1);
    CHECK(at.input(0) == "q");
    CHECK(at.input(2) == "v");
    CHECK(at.input_size() == (form == 2 ? 3 : 4));
    if (form != 2) CHECK(at.input(3) == "mask");
    CHECK(at.output(0) == "y");
    REQUIRE(at.attribute_size() == 1);
    CHECK(std::fabs(at.attribute(0).f() - 0.125f) < 1e-7f);
    if (form == 1) {
      CHECK(at.input(1) == "k");  // the two transposes cancel
    } else {
      const onnx::NodeProto& t = g.node(0);
      CHECK(t.input(0) == "k");
      CHECK(at.input(1) == t.output(0));
      REQUIRE(t.attribute_size() == 1);
      CHECK(std::vector<int64_t>(t.attribute(0).ints().begin(), t.attribute(0).ints().end()) ==
            std::vector<int64_t>{0, 2, 1, 3});
    }
  }
}

TEST_CASE("import patterns: PyTorch's SDPA with the default scale from Q's shape becomes Attention without a scale") {
  onnx::GraphProto g = attention_graph(6);
  CHECK(importer::fuse_patterns(g).attentions == 1);
  const onnx::NodeProto& at = g.node(g.node_size() - 1);
  REQUIRE(at.op_type() == "Attention");
  CHECK(at.input_size() == 3);
  CHECK(at.input(0) == "q");
  CHECK(at.input(1) == "k");  // the two transposes cancel
  CHECK(at.input(2) == "v");
  CHECK(at.attribute_size() == 0);  // ONNX's default: 1 / sqrt(Q's last dim)
  for (const auto& n : g.node()) CHECK(n.op_type() != "MatMul");
}

TEST_CASE("import patterns: attention whose scores are read elsewhere, over another axis or without a K transpose stays") {
  for (int form : {3, 4, 5, 7}) {
    INFO("form " << form);
    onnx::GraphProto g = attention_graph(form);
    const int before = g.node_size();
    CHECK(importer::fuse_patterns(g).attentions == 0);
    CHECK(g.node_size() == before);
  }
}
