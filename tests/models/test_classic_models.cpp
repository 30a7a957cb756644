// Inception v3, ResNet-50 and SqueezeNet 1.1 against published figures, hand-computed pieces,
// sizes, batches, determinism and the JSON round trip.
#include <string>
#include <vector>

#include "graph/error.hpp"
#include "graph/json_codec.hpp"
#include "graph/json_reader.hpp"
#include "models/models.hpp"
#include "tests/catch.hpp"
#include "tests/test_util.hpp"

using namespace hios;
using hios::test::node_named;

namespace {

Graph build(const std::string& model, int64_t size, int64_t batch = 1) {
  return build_model(model, ModelParams{batch, size, size});
}


Shape shape_of(const Graph& g, const std::string& name) { return node_named(g, name).shape; }

const Block& block_named(const Graph& g, const std::string& name) {
  int found = -1;
  for (size_t i = 0; i < g.blocks.size(); ++i) {
    if (g.blocks[i].name == name) found = static_cast<int>(i);
  }
  INFO("block " << name);
  REQUIRE(found >= 0);
  return g.blocks[found];
}

double block_macs(const Graph& g, const std::string& block) {
  double m = 0;
  for (int i : block_named(g, block).nodes) m += g.nodes[i].cost.macs;
  return m;
}

double block_params(const Graph& g, const std::string& block) {
  double p = 0;
  for (int i : block_named(g, block).nodes) p += g.nodes[i].cost.params;
  return p;
}

// In a BN-folded model every conv bias stands for one BN layer's channels.
double folded_bn_channels(const Graph& g) {
  double c = 0;
  for (const Node& n : g.nodes) {
    if (n.op.kind == OpKind::Conv && n.op.conv().bias) c += double(n.op.conv().out_channels);
  }
  return c;
}

bool build_throws(const std::string& model, int64_t size) {
  try {
    build(model, size);
  } catch (const Error&) {
    return true;
  }
  return false;
}

Shape nchw(int64_t n, int64_t c, int64_t h, int64_t w) { return Shape{n, c, h, w}; }

}  // namespace

// ---------------------------------------------------------------------------------------------
// Published figures.
//
// torchvision's counts come from models that keep BN as a separate layer. A BN layer owns two
// parameters per channel (weight and bias; running mean and variance are buffers, not
// parameters), while folding it leaves one conv bias per channel, so the folded model has
// exactly one parameter fewer per BN channel. We check that identity exactly against
// torchvision's num_params, and the 3% band against the rounded figures; MACs are unaffected by
// folding (BN's scale and shift are not multiply-accumulates of a conv or fc, and the reference
// counts exclude them as well).

// torchvision inception_v3: 27,161,264 params with the aux head; the aux head (conv0 1x1
// 768->128 + BN, conv1 5x5 128->768 + BN, fc 768->1000) holds 3,326,696, leaving 23,834,568.
// Inception has 17,216 BN channels (one per conv output channel), so the folded count is
// 23,817,352: 0.07% below 23.83M. MACs at 299 come to 5.713 G, within 0.06% of 5.71.
TEST_CASE("inception_v3 matches the published cost at 299", "[classic][inception]") {
  Graph g = build("inception_v3", 299);
  OpCost c = g.total_cost();
  CHECK(c.macs == Approx(5.71e9).epsilon(0.005));
  CHECK(c.params == Approx(23.8e6).epsilon(0.005));
  double bn = folded_bn_channels(g);
  CHECK(bn == 17216);
  CHECK(c.params + bn == 23834568);
  CHECK(c.flops >= 2 * c.macs);
}

// torchvision resnet50: 25,557,032 params, 4.09 GFLOPS (which are MACs). 26,560 BN channels,
// so the folded count is 25,530,472, 0.10% below the unfolded one. The exact MACs were derived
// stage by stage outside hios: conv1 118,013,952, the four stages 667,942,912 + 1,027,604,480 +
// 1,464,336,384 + 809,238,528, fc 2,048,000.
TEST_CASE("resnet50 matches the published cost at 224", "[classic][resnet50]") {
  Graph g = build("resnet50", 224);
  OpCost c = g.total_cost();
  CHECK(c.macs == Approx(4.09e9).epsilon(0.005));
  CHECK(c.params == Approx(25.6e6).epsilon(0.005));
  CHECK(c.macs == 4089184256.0);
  double bn = folded_bn_channels(g);
  CHECK(bn == 26560);
  CHECK(c.params + bn == 25557032);
}

// torchvision squeezenet1_1: 1,235,496 params, 0.35 GFLOPS (MACs). No BN, so the counts match
// exactly; 349.15 M MACs is 0.24% below the rounded 0.35 G.
TEST_CASE("squeezenet matches the published cost at 224", "[classic][squeezenet]") {
  Graph g = build("squeezenet", 224);
  OpCost c = g.total_cost();
  CHECK(c.macs == Approx(0.35e9).epsilon(0.01));
  CHECK(c.params == 1235496);
  CHECK(c.params == Approx(1.24e6).epsilon(0.01));
}

// ---------------------------------------------------------------------------------------------
// Hand-computed pieces: a wrong kernel, stride, padding or channel count changes these.

TEST_CASE("inception_v3 stem and module shapes at 299", "[classic][inception]") {
  Graph g = build("inception_v3", 299);
  CHECK(shape_of(g, "Conv2d_1a_3x3") == nchw(1, 32, 149, 149));
  CHECK(shape_of(g, "Conv2d_2a_3x3") == nchw(1, 32, 147, 147));
  CHECK(shape_of(g, "Conv2d_2b_3x3") == nchw(1, 64, 147, 147));
  CHECK(shape_of(g, "maxpool1") == nchw(1, 64, 73, 73));
  CHECK(shape_of(g, "Conv2d_3b_1x1") == nchw(1, 80, 73, 73));
  CHECK(shape_of(g, "Conv2d_4a_3x3") == nchw(1, 192, 71, 71));
  CHECK(shape_of(g, "maxpool2") == nchw(1, 192, 35, 35));
  CHECK(shape_of(g, "Mixed_5b.concat") == nchw(1, 256, 35, 35));
  CHECK(shape_of(g, "Mixed_5c.concat") == nchw(1, 288, 35, 35));
  CHECK(shape_of(g, "Mixed_5d.concat") == nchw(1, 288, 35, 35));
  CHECK(shape_of(g, "Mixed_6a.concat") == nchw(1, 768, 17, 17));
  for (const char* m : {"Mixed_6b", "Mixed_6c", "Mixed_6d", "Mixed_6e"}) {
    CHECK(shape_of(g, std::string(m) + ".concat") == nchw(1, 768, 17, 17));
  }
  CHECK(shape_of(g, "Mixed_7a.concat") == nchw(1, 1280, 8, 8));
  CHECK(shape_of(g, "Mixed_7b.concat") == nchw(1, 2048, 8, 8));
  CHECK(shape_of(g, "Mixed_7c.concat") == nchw(1, 2048, 8, 8));
  CHECK(shape_of(g, "avgpool") == nchw(1, 2048, 1, 1));
  CHECK(g.output() == g.find("fc"));

  // Stem conv: 149*149 positions x 32 filters x 3x3x3 taps.
  const Node& c1 = node_named(g, "Conv2d_1a_3x3");
  CHECK(c1.cost.macs == 149.0 * 149 * 32 * 27);
  CHECK(c1.cost.params == 32 * 27 + 32);

  // Mixed_5b at 35x35 from 192 channels: 1x1 64 | 1x1 48 -> 5x5 64 | 1x1 64 -> 3x3 96 -> 3x3 96 |
  // pool -> 1x1 32. Every conv keeps the grid, so MACs are weights x positions.
  const double weights = 192.0 * 64 + 192 * 48 + 48 * 64 * 25 + 192 * 64 + 64 * 96 * 9 + 96 * 96 * 9 + 192 * 32;
  CHECK(block_macs(g, "Mixed_5b") == 35.0 * 35 * weights);
  CHECK(block_params(g, "Mixed_5b") == weights + (64 + 48 + 64 + 64 + 96 + 96 + 32));

  // Factorised 7x7: a 1x7 conv at 17x17 with c7 = 128 in Mixed_6b, 160 in Mixed_6c.
  CHECK(node_named(g, "Mixed_6b.branch7x7_2").cost.macs == 17.0 * 17 * 128 * 128 * 7);
  CHECK(node_named(g, "Mixed_6c.branch7x7dbl_2").cost.macs == 17.0 * 17 * 160 * 160 * 7);
  CHECK(node_named(g, "Mixed_6e.branch7x7dbl_5").shape == nchw(1, 192, 17, 17));
  const ConvAttrs& k17 = node_named(g, "Mixed_6b.branch7x7_2").op.conv();
  CHECK((k17.kernel == std::array<int, 2>{1, 7}));
  CHECK((k17.padding == std::array<int, 2>{0, 3}));
  const ConvAttrs& k71 = node_named(g, "Mixed_7a.branch7x7x3_3").op.conv();
  CHECK((k71.kernel == std::array<int, 2>{7, 1}));
  CHECK((k71.padding == std::array<int, 2>{3, 0}));

  // Mixed_7b: the split 1x3 / 3x1 convs each give 384 channels at 8x8 from 384.
  CHECK(node_named(g, "Mixed_7b.branch3x3_2a").cost.macs == 8.0 * 8 * 384 * 384 * 3);
  CHECK(node_named(g, "Mixed_7c.branch3x3dbl_3b").cost.macs == 8.0 * 8 * 384 * 384 * 3);
  CHECK(node_named(g, "Mixed_7b.branch1x1").cost.macs == 8.0 * 8 * 1280 * 320);
  CHECK(node_named(g, "Mixed_7c.branch1x1").cost.macs == 8.0 * 8 * 2048 * 320);

  // The avg-pool branches keep the grid and count padding in the divisor, as F.avg_pool2d does.
  for (const char* m : {"Mixed_5b", "Mixed_6b", "Mixed_7c"}) {
    const Node& p = node_named(g, std::string(m) + ".avg_pool");
    const PoolAttrs& a = p.op.pool();
    CHECK(a.kind == PoolKind::Avg);
    CHECK((a.kernel == std::array<int, 2>{3, 3}));
    CHECK((a.stride == std::array<int, 2>{1, 1}));
    CHECK((a.padding == std::array<int, 2>{1, 1}));
    CHECK(a.count_include_pad);
  }

  // fc: 2048 -> 1000 with bias.
  CHECK(node_named(g, "fc").cost.macs == 2048.0 * 1000);
  CHECK(node_named(g, "fc").cost.params == 2048.0 * 1000 + 1000);
}

TEST_CASE("inception_v3 block structure", "[classic][inception]") {
  Graph g = build("inception_v3", 299);
  std::vector<std::string> names;
  for (const Block& b : g.blocks) names.push_back(b.name);
  const std::vector<std::string> want = {
      "Conv2d_1a_3x3", "Conv2d_2a_3x3", "Conv2d_2b_3x3", "maxpool1", "Conv2d_3b_1x1", "Conv2d_4a_3x3", "maxpool2",
      "Mixed_5b",      "Mixed_5c",      "Mixed_5d",      "Mixed_6a", "Mixed_6b",      "Mixed_6c",      "Mixed_6d",
      "Mixed_6e",      "Mixed_7a",      "Mixed_7b",      "Mixed_7c", "head"};
  CHECK(names == want);
  // Each module's exit is its concat and reads one term per branch output, in torchvision order.
  for (const Block& b : g.blocks) {
    if (b.name.rfind("Mixed_", 0) != 0) continue;
    const Node& exit = g.nodes[b.exit];
    CHECK(exit.name == b.name + ".concat");
    CHECK(exit.op.kind == OpKind::Identity);
  }
  CHECK(node_named(g, "Mixed_5b.concat").inputs.size() == 4);
  CHECK(node_named(g, "Mixed_6a.concat").inputs.size() == 3);
  CHECK(node_named(g, "Mixed_7a.concat").inputs.size() == 3);
  const Node& e = node_named(g, "Mixed_7c.concat");
  REQUIRE(e.inputs.size() == 6);
  const char* order[] = {"branch1x1", "branch3x3_2a", "branch3x3_2b", "branch3x3dbl_3a", "branch3x3dbl_3b",
                         "branch_pool"};
  for (size_t i = 0; i < 6; ++i) CHECK(g.nodes[e.inputs[i][0].node].name == std::string("Mixed_7c.") + order[i]);
}

TEST_CASE("resnet50 bottleneck pieces at 224", "[classic][resnet50]") {
  Graph g = build("resnet50", 224);
  CHECK(g.blocks.size() == 1 + 16 + 1);
  CHECK(shape_of(g, "conv1") == nchw(1, 64, 112, 112));
  CHECK(shape_of(g, "maxpool") == nchw(1, 64, 56, 56));
  CHECK(node_named(g, "conv1").cost.macs == 112.0 * 112 * 64 * 3 * 49);

  // layer1.0 at 56x56: 1x1 64->64, 3x3 64->64, 1x1 64->256, downsample 1x1 64->256.
  CHECK(block_macs(g, "layer1.0") == 56.0 * 56 * (64 * 64 + 64 * 64 * 9 + 64 * 256 + 64 * 256));
  CHECK(block_params(g, "layer1.0") == (64.0 * 64 + 64) + (64 * 64 * 9 + 64) + (64 * 256 + 256) + (64 * 256 + 256));
  // Identity shortcut from layer1.1 on: no downsample conv, and the sum reads the block's enter.
  CHECK(g.find("layer1.1.downsample.0") < 0);
  const Node& relu = node_named(g, "layer1.1.relu");
  REQUIRE(relu.inputs.size() == 1);
  REQUIRE(relu.inputs[0].size() == 2);
  CHECK(g.nodes[relu.inputs[0][1].node].name == "layer1.0.relu");

  // v1.5: layer2.0 runs its first 1x1 at 56x56 and strides on the 3x3.
  CHECK(shape_of(g, "layer2.0.conv1") == nchw(1, 128, 56, 56));
  CHECK(shape_of(g, "layer2.0.conv2") == nchw(1, 128, 28, 28));
  CHECK(shape_of(g, "layer2.0.downsample.0") == nchw(1, 512, 28, 28));
  CHECK(node_named(g, "layer2.0.conv2").cost.macs == 28.0 * 28 * 128 * 128 * 9);
  CHECK(shape_of(g, "layer3.5.relu") == nchw(1, 1024, 14, 14));
  CHECK(g.find("layer3.6.relu") < 0);
  CHECK(shape_of(g, "layer4.2.relu") == nchw(1, 2048, 7, 7));
  // The conv before the residual sum must not apply ReLU itself.
  CHECK(node_named(g, "layer4.2.conv3").op.conv().activation == Activation::None);
  CHECK(node_named(g, "layer4.2.conv2").op.conv().activation == Activation::Relu);
}

TEST_CASE("squeezenet Fire modules and ceil-mode pools", "[classic][squeezenet]") {
  Graph g = build("squeezenet", 224);
  CHECK(g.blocks.size() == 10);
  CHECK(g.blocks.front().name == "stem");
  CHECK(g.blocks.back().name == "classifier");
  CHECK(shape_of(g, "features.0") == nchw(1, 64, 111, 111));
  CHECK(shape_of(g, "features.2") == nchw(1, 64, 55, 55));
  CHECK(shape_of(g, "features.5") == nchw(1, 128, 27, 27));
  CHECK(shape_of(g, "features.8") == nchw(1, 256, 13, 13));
  CHECK(shape_of(g, "features.12.concat") == nchw(1, 512, 13, 13));

  // fire2 at 55x55: squeeze 64->16, expand 16->64 (1x1) and 16->64 (3x3), all with bias.
  CHECK(block_macs(g, "fire2") == 55.0 * 55 * (64 * 16 + 16 * 64 + 16 * 64 * 9));
  CHECK(block_params(g, "fire2") == (64.0 * 16 + 16) + (16 * 64 + 64) + (16 * 64 * 9 + 64));
  // fire9 at 13x13: 512->64, 64->256, 64->256 (3x3).
  CHECK(block_macs(g, "fire9") == 13.0 * 13 * (512 * 64 + 64 * 256 + 64 * 256 * 9));
  CHECK(node_named(g, "classifier.1").cost.macs == 13.0 * 13 * 512 * 1000);
  CHECK(node_named(g, "classifier.1").op.conv().activation == Activation::Relu);

  // ceil_mode matters at 225: the conv gives 112, and the first pool 56 rather than floor's 55.
  Graph odd = build("squeezenet", 225);
  CHECK(shape_of(odd, "features.0") == nchw(1, 64, 112, 112));
  CHECK(shape_of(odd, "features.2") == nchw(1, 64, 56, 56));
}

// ---------------------------------------------------------------------------------------------
// Sizes, batches, determinism, round trip.

TEST_CASE("classic models build at several sizes and batches", "[classic]") {
  struct Case {
    const char* model;
    std::vector<int64_t> sizes;
  };
  const Case cases[] = {
      {"inception_v3", {75, 299, 331, 512, 1024, 2048}},
      {"resnet50", {32, 224, 512, 1024}},
      {"squeezenet", {224, 225, 512, 1024}},
  };
  for (const Case& c : cases) {
    for (int64_t size : c.sizes) {
      for (int64_t batch : {1, 2}) {
        INFO(c.model << " at " << size << ", batch " << batch);
        Graph g = build(c.model, size, batch);
        CHECK(g.name == c.model);
        CHECK(g.nodes[g.output()].shape == nchw(batch, 1000, 1, 1));
      }
    }
  }
  // 75 is the smallest input Inception v3 accepts: at 74 Mixed_7a's strided 3x3 has a 2x2 grid.
  CHECK(shape_of(build("inception_v3", 75), "Mixed_7c.concat") == nchw(1, 2048, 1, 1));
  CHECK(build_throws("inception_v3", 74));
}

TEST_CASE("classic model MACs scale with batch", "[classic]") {
  for (const char* model : {"inception_v3", "resnet50", "squeezenet"}) {
    for (int64_t size : {224, 299, 512}) {
      INFO(model << " at " << size);
      OpCost one = build(model, size, 1).total_cost();
      OpCost three = build(model, size, 3).total_cost();
      CHECK(three.macs == 3 * one.macs);
      CHECK(three.flops == Approx(3 * one.flops));
      CHECK(three.params == one.params);
    }
  }
  // MACs grow with the grid; at 2x the side a conv-dominated net does about 4x the work.
  double m299 = build("inception_v3", 299).total_cost().macs;
  double m598 = build("inception_v3", 598).total_cost().macs;
  CHECK(m598 / m299 == Approx(4.0).epsilon(0.15));
}

TEST_CASE("classic models are deterministic and survive a JSON round trip", "[classic]") {
  for (const char* model : {"inception_v3", "resnet50", "squeezenet"}) {
    INFO(model);
    // Size 0 asks for the model's standard resolution.
    Graph a = build(model, 0, 2);
    Graph b = build(model, 0, 2);
    CHECK(a.height == find_model(model)->default_size);
    const std::string text = graph_to_text(a);
    CHECK(text == graph_to_text(b));
    Graph back = graph_from_json(json::parse(text));
    CHECK(graph_to_text(back) == text);
    CHECK(back.total_cost().macs == a.total_cost().macs);
    CHECK(back.total_cost().params == a.total_cost().params);
    CHECK(back.blocks.size() == a.blocks.size());
  }
}
