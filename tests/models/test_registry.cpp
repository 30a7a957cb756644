// Every registered model, through the same checks: it builds at its standard size and at a
// small one, survives a file round trip byte for byte, and ends in a classifier.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "graph/analysis.hpp"
#include "graph/error.hpp"
#include "graph/json_codec.hpp"
#include "models/models.hpp"
#include "tests/catch.hpp"

using namespace hios;

namespace {

std::string slurp(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("every model round-trips through a file byte for byte", "[models][json]") {
  for (const ModelInfo& m : model_registry()) {
    INFO("model " << m.name);
    Graph g = build_model(m.name, {});
    std::string file = std::string(HIOS_BINARY_DIR) + "/roundtrip-" + m.name + ".json";
    save_graph(g, file);
    std::string first = slurp(file);
    Graph back = load_graph(file);
    save_graph(back, file);
    CHECK(slurp(file) == first);
    CHECK(graph_digest(back) == graph_digest(g));
    std::remove(file.c_str());
  }
}

TEST_CASE("every model ends in a 1000-way classifier (demo excepted)", "[models]") {
  for (const ModelInfo& m : model_registry()) {
    if (m.name == "demo") continue;
    INFO("model " << m.name);
    Graph g = build_model(m.name, {2, 0, 0});
    CHECK(g.nodes[g.output()].shape == Shape{2, 1000, 1, 1});
    CHECK(g.blocks.size() >= 3);
    GraphSummary s = summarize(g);
    CHECK(s.total.macs > 0);
    CHECK(s.longest_path_flops <= s.total.flops);
    CHECK(s.dag_width >= 1);
  }
}

TEST_CASE("unknown models and bad sizes are clear errors", "[models]") {
  auto message = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  CHECK(message([] { build_model("alexnet", {}); }).find("unknown model 'alexnet'") != std::string::npos);
  CHECK(message([] { build_model("inception_v3", {1, 0, -5}); }).find("must be positive") != std::string::npos);
  CHECK(message([] { build_model("inception_v3", {1, 40, 40}); }).find("non-positive") != std::string::npos);
}
