// Shape inference, counts and the builder's error reporting.
#include "graph/error.hpp"
#include "graph/graph.hpp"
#include "tests/catch.hpp"
#include "tests/test_util.hpp"

using namespace hios;
using test::contains;
using test::error_of;

TEST_CASE("conv output size follows PyTorch's formula", "[graph]") {
  GraphBuilder b("t", 2, 35, 35);
  Value x = b.input(3);
  b.begin_block("b");
  Value s2 = b.conv("s2", {x}, 32, 3, 2, 0);                      // (35 - 3) / 2 + 1 = 17
  Value p1 = b.conv("p1", {x}, 16, 3, 1, 1);                      // same size
  Value dil = b.conv("dil", {x}, 8, 3, 1, 2, Activation::None, 1, true, 2);  // dilation 2, pad 2: same
  Value asym = b.conv("asym", {x}, 8, {1, 7}, {1, 1}, {0, 3});    // 1x7 keeps size with pad (0, 3)
  Value out = b.concat("out", {p1, dil, asym});
  b.end_block(out);
  (void)s2;
  // s2 does not lead to the exit, so finish() must refuse the graph...
  std::string err = error_of([&] { b.finish(); });
  CHECK(contains(err, "node 's2'"));
  CHECK(contains(err, "does not lead to the block's exit"));
}

TEST_CASE("shapes and counts of a small graph", "[graph]") {
  GraphBuilder b("t", 2, 35, 35);
  Value x = b.input(3);
  b.begin_block("b");
  Value s2 = b.conv("s2", {x}, 32, 3, 2, 0);
  Value pool = b.pool("pool", x, PoolKind::Max, 3, 2, 0);
  Value cat = b.concat("cat", {s2, pool});
  b.end_block(cat);
  b.begin_block("head");
  Value gap = b.pool("gap", cat, PoolKind::GlobalAvg);
  Value fc = b.linear("fc", gap, 10);
  Value sm = b.softmax("sm", fc);
  b.end_block(sm);
  Graph g = b.finish();

  const Node& conv = g.nodes[g.find("s2")];
  CHECK(conv.shape == Shape{2, 32, 17, 17});
  // MACs = N * Cout * Ho * Wo * Cin/groups * kh * kw
  CHECK(conv.cost.macs == Approx(2.0 * 32 * 17 * 17 * 3 * 9));
  CHECK(conv.cost.flops == Approx(2 * conv.cost.macs + 2 * (2.0 * 32 * 17 * 17)));  // + bias + relu
  CHECK(conv.cost.params == Approx(32 * 3 * 9 + 32));
  CHECK(g.nodes[g.find("pool")].shape == Shape{2, 3, 17, 17});
  CHECK(g.nodes[g.find("cat")].shape == Shape{2, 35, 17, 17});
  CHECK(g.nodes[g.find("gap")].shape == Shape{2, 35, 1, 1});
  CHECK(g.nodes[g.find("fc")].shape == Shape{2, 10, 1, 1});
  CHECK(g.nodes[g.find("fc")].cost.params == Approx(35 * 10 + 10));
  CHECK(g.output() == g.find("sm"));
  CHECK(g.blocks[1].enter == g.find("cat"));
  CHECK(g.total_cost().params == Approx(32 * 27 + 32 + 350 + 10));
}

TEST_CASE("pool ceil_mode matches PyTorch", "[graph]") {
  // SqueezeNet: 111 -> maxpool 3/2 ceil -> 55; floor would also give 55. 112 -> ceil 56, floor 55.
  for (auto [in, ceil_out, floor_out] : {std::tuple{111, 55, 55}, std::tuple{112, 56, 55}, std::tuple{5, 2, 2}, std::tuple{2, 1, 0}, std::tuple{3, 1, 1}}) {
    GraphBuilder b("t", 1, in, in);
    Value x = b.input(1);
    b.begin_block("b");
    Value c = b.pool("c", x, PoolKind::Max, 3, 2, 0, true);
    CHECK(b.shape(c).h == ceil_out);
    if (floor_out > 0) {
      Value f = b.pool("f", x, PoolKind::Max, 3, 2, 0, false);
      CHECK(b.shape(f).h == floor_out);
    } else {
      bool threw = false;
      try {
        b.pool("f", x, PoolKind::Max, 3, 2, 0, false);
      } catch (const Error&) {
        threw = true;  // PyTorch: "output size is too small"
      }
      CHECK(threw);
    }
  }
}

TEST_CASE("sequential chains its steps", "[graph]") {
  GraphBuilder b("t", 1, 16, 16);
  Value x = b.input(8);
  b.begin_block("b");
  Value sep = b.sequential("sep", {x},
                           {activation_op(Activation::Relu), conv_op(8, {3, 3}, {2, 2}, {1, 1}, Activation::None, 8, false),
                            conv_op(24, {1, 1}, {1, 1}, {0, 0})});
  b.end_block(sep);
  Graph g = b.finish();
  const Node& n = g.nodes[g.find("sep")];
  CHECK(n.shape == Shape{1, 24, 8, 8});
  double dw_macs = 8.0 * 8 * 8 * 1 * 9, pw_macs = 24.0 * 8 * 8 * 8;
  CHECK(n.cost.macs == Approx(dw_macs + pw_macs));
  CHECK(n.cost.params == Approx(8 * 9 + 24 * 8 + 24));
}

TEST_CASE("term semantics: sum within a term, concat across terms, slices", "[graph]") {
  GraphBuilder b("t", 1, 8, 8);
  Value x = b.input(4);
  b.begin_block("b");
  Value a = b.conv("a", {x}, 16, 1, 1, 0);
  Value c = b.conv("c", {x}, 16, 1, 1, 0);
  Value o = b.node("o", make_op(OpKind::Identity),
                   {Term{GraphBuilder::slice(a, 0, 8), GraphBuilder::slice(c, 8, 16)}, Term{a}});
  b.end_block(o);
  Graph g = b.finish();
  CHECK(g.nodes[g.find("o")].shape.c == 8 + 16);
  // Add takes its terms as operands: two 16-channel operands give 16 channels.
  GraphBuilder b2("t", 1, 8, 8);
  Value x2 = b2.input(4);
  b2.begin_block("b");
  Value a2 = b2.conv("a", {x2}, 16, 1, 1, 0);
  Value c2 = b2.conv("c", {x2}, 16, 1, 1, 0);
  b2.end_block(b2.add("sum", {a2, c2}));
  Graph g2 = b2.finish();
  CHECK(g2.nodes[g2.output()].shape.c == 16);
}

TEST_CASE("each bad-graph class is an error naming the node", "[graph]") {
  SECTION("channel mismatch inside a sum") {
    GraphBuilder b("t", 1, 8, 8);
    Value x = b.input(4);
    b.begin_block("b");
    Value a = b.conv("a", {x}, 16, 1, 1, 0);
    Value c = b.conv("c", {x}, 8, 1, 1, 0);
    std::string err = error_of([&] { b.sum("s", {a, c}); });
    CHECK(contains(err, "node 's'"));
  }
  SECTION("spatial mismatch in a concat") {
    GraphBuilder b("t", 1, 8, 8);
    Value x = b.input(4);
    b.begin_block("b");
    Value a = b.conv("a", {x}, 16, 1, 1, 0);
    Value c = b.conv("c", {x}, 16, 1, 2, 0);
    std::string err = error_of([&] { b.concat("cat", {a, c}); });
    CHECK(contains(err, "node 'cat'"));
    CHECK(contains(err, "spatial mismatch in a concat"));
  }
  SECTION("non-positive size") {
    GraphBuilder b("t", 1, 4, 4);
    Value x = b.input(4);
    b.begin_block("b");
    std::string err = error_of([&] { b.conv("big", {x}, 16, 7, 1, 0); });
    CHECK(contains(err, "node 'big'"));
    CHECK(contains(err, "non-positive"));
  }
  SECTION("duplicate name") {
    GraphBuilder b("t", 1, 4, 4);
    Value x = b.input(4);
    b.begin_block("b");
    b.conv("a", {x}, 16, 1, 1, 0);
    std::string err = error_of([&] { b.conv("a", {x}, 16, 1, 1, 0); });
    CHECK(contains(err, "duplicate node name 'a'"));
  }
  SECTION("groups must divide channels") {
    GraphBuilder b("t", 1, 4, 4);
    Value x = b.input(6);
    b.begin_block("b");
    std::string err = error_of([&] { b.conv("g", {x}, 16, 1, 1, 0, Activation::None, 4); });
    CHECK(contains(err, "node 'g'"));
    CHECK(contains(err, "groups"));
  }
  SECTION("add operands must agree") {
    GraphBuilder b("t", 1, 8, 8);
    Value x = b.input(4);
    b.begin_block("b");
    Value a = b.conv("a", {x}, 16, 1, 1, 0);
    Value c = b.conv("c", {x}, 8, 1, 1, 0);
    std::string err = error_of([&] { b.add("plus", {a, c}); });
    CHECK(contains(err, "node 'plus'"));
  }
}

TEST_CASE("finalize orders nodes topologically and detects cycles", "[graph]") {
  Graph g;
  g.name = "manual";
  g.batch = 1;
  g.height = g.width = 4;
  Node in;
  in.name = "input";
  in.op = make_op(OpKind::Input);
  Node a, c;
  a.name = "a";
  a.op = make_op(OpKind::Identity);
  a.block = 0;
  c.name = "c";
  c.op = make_op(OpKind::Identity);
  c.block = 0;
  // Listed consumer-first: finalize must reorder.
  g.nodes = {in, c, a};
  g.nodes[1].inputs = {Term{Value{2}}};  // c reads a
  g.nodes[2].inputs = {Term{Value{0}}};  // a reads input
  Block blk;
  blk.name = "b";
  blk.exit = 1;
  g.blocks = {blk};
  g.finalize();
  CHECK(g.nodes[1].name == "a");
  CHECK(g.nodes[2].name == "c");
  CHECK(g.output() == 2);

  g.nodes[1].inputs = {Term{Value{2}}};  // a now reads c: a cycle
  std::string err = error_of([&] { g.finalize(); });
  CHECK(contains(err, "cycle through"));
  CHECK(contains(err, "'a'"));
  CHECK(contains(err, "'c'"));
}
