// Row splits through the layers of segmentation decoders on the CPU reference backend:
// transposed convolutions, resizes (linear, nearest and cubic, at scales that are not whole
// numbers), element-wise ops with broadcast constants, comparisons and where. A split must equal
// the unsplit graph bit for bit, on 1 to 3 ranks, in every split style.
#include <cstring>
#include <fstream>
#include <string>

#include "executor/weights.hpp"
#include "graph/json_codec.hpp"
#include "graph/row_split.hpp"
#include "helpers.hpp"
#include "scheduler/spatial.hpp"
#include "tests/catch.hpp"
#include "tests/test_util.hpp"

using namespace hios;

namespace {

// A small U-Net (tests/data/row-split-unet.json, which the GPU tests run too): two strided
// convs down, a 3x3/2 transposed conv (pads 1, output padding 1) and a linear resize by 11/12
// back to the skip's rows, an add with the skip, a 2x2/2 transposed conv, cubic and nearest
// resizes by 21/22 to the input's size, and their maximum. where_unet() ends it in a
// comparison and a where instead (bool tensors: the CPU backend's).
json unet_json() {
  std::ifstream f(std::string(HIOS_SOURCE_DIR) + "/tests/data/row-split-unet.json");
  REQUIRE(f.good());
  return json::parse(f);
}
Graph unet() { return graph_from_json(unet_json(), "unet"); }
Graph where_unet() {
  json j = unet_json();
  json& nodes = j["blocks"][3]["nodes"];
  nodes.back() = json::parse(R"({"name": "positive", "op": "binary", "fn": "greater", "dtype": "bool",
    "inputs": [["full"]], "constants": [{"operand": 1, "dims": [1], "dtype": "float32", "values": [0]}]})");
  nodes.push_back(json::parse(R"({"name": "out", "op": "where", "inputs": [["positive"], ["full"], ["near"]]})"));
  return graph_from_json(j, "where_unet");
}

std::vector<float> run_unet_job(const Graph& g, const Schedule& s) {
  test::LocalJob job(g, s);
  job.run(exec::make_input(g, 0));
  return job.backends[0]->read_tensor(g.output());
}

bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("row split: a U-Net splits through transposed convs, resizes and where, bit for bit") {
  // Every style on the float U-Net; the where variant (bool tensors) in one style, on 1 to 3 ranks.
  for (const bool with_where : {false, true}) {
    const Graph g = with_where ? where_unet() : unet();
    INFO((with_where ? "with where" : "float only"));
    // The whole graph is one splittable run: every node reads bounded rows.
    const auto runs = splittable_runs(g, 3);
    REQUIRE(runs.size() == 1);
    CHECK(runs[0] == std::make_pair(0, int(g.blocks.size()) - 1));
    const std::vector<float> ref = run_unet_job(g, test::schedule_with("sequential", g, 1));
    const auto cost = make_analytic_cost_model(test::test_device_preset());  // for the styles that weigh sync points
    std::vector<SplitStyle> styles = split_modes("auto");
    for (const SplitStyle& s : split_modes("halo-overlap")) styles.push_back(s);
    if (with_where) styles.resize(1);
    for (int parts : {2, 3}) {
      for (const SplitStyle& style : styles) {
        SpatialPlan plan{{plan_region(g, 0, int(g.blocks.size()) - 1, parts, style, cost.get())}};
        REQUIRE(check_spatial(g, plan).empty());
        const Graph sg = apply_spatial(g, plan);
        // Every part of the transposed convs and resizes is a band of its own.
        for (const char* name : {"deconv@0", "deconv2@1", "fit@1", "full@0"}) {
          bool found = false;
          for (const Node& nd : sg.nodes) found = found || nd.name.rfind(name, 0) == 0;
          CHECK(found);
        }
        for (int gpus : {1, 2, 3}) {
          INFO(parts << " parts, " << split_style_name(style) << ", " << gpus << " ranks");
          Schedule s = test::schedule_with(gpus == 1 ? "sequential" : "hios-lp", sg, gpus);
          REQUIRE(check_schedule(sg, s).empty());
          CHECK(bit_equal(run_unet_job(sg, s), ref));
        }
      }
    }
  }
}

TEST_CASE("row split: a band of a resize or transposed conv round-trips and is checked") {
  const Graph g = unet();
  const Graph sg = apply_spatial(g, {{plan_region(g, 0, int(g.blocks.size()) - 1, 2, SplitMode::Halo)}});
  const Graph back = graph_from_json(graph_to_json(sg), "split");
  REQUIRE(back.nodes.size() == sg.nodes.size());
  for (size_t v = 0; v < sg.nodes.size(); ++v) CHECK(back.nodes[v].shape == sg.nodes[v].shape);
  // A band that claims input rows its operand does not hold is refused naming the node.
  json j = graph_to_json(sg);
  bool edited = false;
  for (json& b : j["blocks"]) {
    for (json& n : b["nodes"]) {
      if (!edited && n["op"] == "resize" && n.contains("rows") && n["rows"]["in_first"].get<int64_t>() > 0) {
        n["rows"]["in_first"] = 0;
        edited = true;
      }
    }
  }
  REQUIRE(edited);
  CHECK_THROWS_WITH(graph_from_json(j, "split"), Catch::Contains("input holds rows"));
}

TEST_CASE("row split: element-wise ops with rows broadcast, and a softmax over the rows, end a region") {
  // The mul reads a 1x8x1x1 gate (squeeze-excite): its bands would need the whole gate, which
  // the band rules do not give, so the region stops before it; a softmax over H reads every row.
  json j = unet_json();
  json& enc = j["blocks"][0]["nodes"];
  enc[2] = {{"name", "gate"}, {"op", "pool"}, {"pool", "global_avg"}, {"inputs", {{"c1"}}}};
  enc.push_back({{"name", "e1"}, {"op", "binary"}, {"fn", "mul"}, {"inputs", {{"hs"}, {"gate"}}}});
  const Graph se = graph_from_json(j, "se");
  const auto se_runs = splittable_runs(se, 2);
  REQUIRE(!se_runs.empty());
  for (const auto& run : se_runs) CHECK(run.first > 0);
  json k = unet_json();
  k["blocks"][3]["nodes"].push_back({{"name", "rows_softmax"}, {"op", "softmax"}, {"axis", 2}, {"inputs", {{"out"}}}});
  k["blocks"][3]["exit"] = "rows_softmax";
  const Graph sm = graph_from_json(k, "softmax");
  const auto sm_runs = splittable_runs(sm, 2);
  REQUIRE(!sm_runs.empty());
  for (const auto& run : sm_runs) CHECK(run.second < 3);
}
