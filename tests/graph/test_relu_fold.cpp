// ReLU folding (graph/relu_fold.hpp): which nodes store relu(value).
#include "graph/relu_fold.hpp"
#include "models/models.hpp"
#include "tests/catch.hpp"

using namespace hios;

namespace {

bool stores(const Graph& g, const std::vector<bool>& s, const char* name) {
  const int v = g.find(name);
  REQUIRE(v >= 0);
  return s[size_t(v)];
}

}  // namespace

TEST_CASE("relu fold: a node stores relu(value) only when every reader starts with a ReLU", "[graph][relu]") {
  GraphBuilder b("fold", 1, 8, 8);
  Value x = b.input(3);
  b.begin_block("b");
  Value a = b.conv("a", {x}, 4, 1, 1, 0, Activation::None);
  Value ra = b.activation("ra", a, Activation::Relu);  // a's readers: a ReLU and a ReLU-first chain
  Value sa = b.sequential("sa", {a}, {activation_op(Activation::Relu), conv_op(4, {1, 1}, {1, 1}, {0, 0})});
  Value p = b.conv("p", {x}, 4, 1, 1, 0, Activation::None);
  Value pooled = b.pool("pooled", p, PoolKind::Max, 3, 1, 1);  // p is also pooled: raw
  Value rp = b.activation("rp", p, Activation::Relu);
  Value cat = b.concat("cat", {ra, sa});                        // an assembly of two values
  Value rcat = b.activation("rcat", cat, Activation::Relu);
  Value one = b.sum("one", {rp});                               // an identity of one value
  Value rone = b.activation("rone", one, Activation::Relu);
  Value sig = b.conv("sig", {x}, 4, 1, 1, 0, Activation::Sigmoid);  // a sigmoid cannot end in a ReLU
  Value rsig = b.activation("rsig", sig, Activation::Relu);
  Value q = b.conv("q", {x}, 4, 1, 1, 0, Activation::None);
  Value both = b.node("both", make_op(OpKind::Identity), {Term{q, pooled}});  // q summed with another value
  Value rboth = b.activation("rboth", both, Activation::Relu);
  Value out = b.concat("out", {rcat, rone, rsig, rboth});
  b.end_block(out);
  const Graph g = b.finish();
  const std::vector<bool> s = nodes_storing_relu(g);

  CHECK(stores(g, s, "a"));
  CHECK(stores(g, s, "cat"));
  CHECK_FALSE(stores(g, s, "p"));      // a pool reads it
  CHECK_FALSE(stores(g, s, "one"));    // one value: may share its producer's storage
  CHECK_FALSE(stores(g, s, "sig"));
  CHECK_FALSE(stores(g, s, "q"));      // read inside a sum
  CHECK(stores(g, s, "both"));         // a sum, read whole by a ReLU: relu(q + pooled) is its epilogue
  CHECK_FALSE(stores(g, s, "out"));    // the graph output
  CHECK_FALSE(stores(g, s, "input"));
  CHECK_FALSE(stores(g, s, "ra"));     // read by a concat
}

TEST_CASE("relu fold: the epilogue and the ReLU-first readers", "[graph][relu]") {
  const Op conv = conv_op(4, {3, 3}, {1, 1}, {1, 1}, Activation::None);
  CHECK(can_end_in_relu(conv, 1));
  CHECK(with_output_relu(conv).conv().activation == Activation::Relu);
  CHECK_FALSE(can_end_in_relu(conv_op(4, {1, 1}, {1, 1}, {0, 0}, Activation::Tanh), 1));
  CHECK(can_end_in_relu(make_op(OpKind::Identity), 2));
  CHECK_FALSE(can_end_in_relu(make_op(OpKind::Identity), 1));
  CHECK_FALSE(can_end_in_relu(make_op(OpKind::Add), 2));
  const Op chain = sequential_op({activation_op(Activation::Relu), conv});
  CHECK(starts_with_relu(chain));
  CHECK(can_end_in_relu(chain, 1));
  const Op folded = with_output_relu(chain);
  CHECK(folded.sequential().steps[0].act().activation == Activation::Relu);  // the first step is kept
  CHECK(folded.sequential().steps[1].conv().activation == Activation::Relu);
  CHECK_FALSE(starts_with_relu(sequential_op({conv, activation_op(Activation::Relu)})));
  CHECK_FALSE(starts_with_relu(activation_op(Activation::Sigmoid)));
}

TEST_CASE("relu fold: nasnet_large's cell outputs and conv0 store relu(value)", "[graph][relu]") {
  const Graph g = build_model("nasnet_large", ModelParams{1, 64, 64});
  const std::vector<bool> s = nodes_storing_relu(g);
  CHECK(stores(g, s, "conv0"));
  CHECK(stores(g, s, "cell_stem_0.out"));
  CHECK(stores(g, s, "cell_0.out"));
  CHECK(stores(g, s, "reduction_cell_1.out"));
  CHECK(stores(g, s, "cell_17.out"));  // the head's ReLU reads the last cell
  CHECK_FALSE(stores(g, s, "cell_0.conv_1x1"));  // read by pools and the cell's assembly
  int count = 0;
  for (bool b : s) count += b;
  // conv0, the 22 cell outputs (2 stem, 18 normal, 2 reduction), cell_stem_1's factorized
  // reduction, and the two reduction cells' conv_prev_1x1 squeezes, which only separables read.
  CHECK(stores(g, s, "cell_stem_1.path"));
  CHECK(stores(g, s, "reduction_cell_0.conv_prev_1x1"));
  CHECK(count == 26);
}
