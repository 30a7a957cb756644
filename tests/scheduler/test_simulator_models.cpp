// The schedule format, check_schedule and the simulator on every model of the zoo, and the
// Chrome trace export.
#include <algorithm>
#include <functional>
#include <map>
#include <string>

#include "graph/dag.hpp"
#include "graph/json_codec.hpp"
#include "models/models.hpp"
#include "scheduler/simulator.hpp"
#include "tests/catch.hpp"

using namespace hios;

namespace {

// One stage per node in topological order; GPU of block b is gpu_of_block(b).
Schedule chain(const Graph& g, int gpus, const std::function<int(int)>& gpu_of_block) {
  Schedule s = make_schedule_skeleton(g, gpus);
  s.meta.algorithm = "test-chain";
  for (size_t b = 0; b < g.blocks.size(); ++b) {
    for (int v : g.blocks[b].nodes) s.blocks[b][gpu_of_block(static_cast<int>(b))].push_back(Stage{{Group{{v}}}});
  }
  s.derive_transfers(g);
  return s;
}

}  // namespace

TEST_CASE("every model: chains on one and two GPUs check, simulate and round-trip") {
  auto cost = make_analytic_cost_model(find_device_preset("h200"));
  for (const ModelInfo& m : model_registry()) {
    SECTION(m.name) {
      Graph g = build_model(m.name, ModelParams{});

      Schedule one = chain(g, 1, [](int) { return 0; });
      REQUIRE(check_schedule(g, one).empty());
      CHECK(one.transfers.empty());
      double sum = 0;
      for (int v = 1; v < g.size(); ++v) sum += cost->node_ms(g, v, 0);
      SimResult r1 = simulate(g, one, *cost);
      CHECK(r1.latency_ms == Approx(sum));
      CHECK(static_cast<int>(r1.nodes.size()) == g.size() - 1);

      Schedule two = chain(g, 2, [](int b) { return b % 2; });
      REQUIRE(check_schedule(g, two).empty());
      CHECK(!two.transfers.empty());
      SimResult r2 = simulate(g, two, *cost);
      // No node can run faster than alone, so the latency is at least the critical path.
      Dag d = Dag::from_graph(g);
      double critical = longest_path(d, [&](int v) { return cost->node_ms(g, v, 0); }).length;
      CHECK(r2.latency_ms >= critical - 1e-9);
      for (const SimNode& n : r2.nodes) CHECK(n.end_ms - n.start_ms >= cost->node_ms(g, n.node, n.gpu) - 1e-12);
      // Every consumer starts after its producers' data is on its GPU.
      std::map<int, const SimNode*> at;
      for (const SimNode& n : r2.nodes) at[n.node] = &n;
      std::map<std::pair<int, int>, double> arrive;
      for (const SimTransfer& t : r2.transfers) arrive[{t.node, t.dst}] = t.end_ms;
      for (const SimNode& n : r2.nodes) {
        for (int u : g.predecessors(n.node)) {
          double ready = u == g.input() ? 0.0 : at.at(u)->end_ms;
          int where = u == g.input() ? 0 : at.at(u)->gpu;
          if (where != n.gpu) ready = arrive.at({u, n.gpu});
          CHECK(n.start_ms >= ready - 1e-9);
        }
      }

      std::string text = schedule_to_text(g, two);
      CHECK(schedule_to_text(g, schedule_from_json(g, parse_json_text(text, m.name))) == text);

      // Moving a block's exit to the front of its GPU's run breaks the order.
      Schedule bad = one;
      auto& stages = bad.blocks.back()[0];
      std::rotate(stages.begin(), stages.end() - 1, stages.end());
      auto problems = check_schedule(g, bad);
      CHECK(!problems.empty());
      CHECK(std::all_of(problems.begin(), problems.end(),
                        [](const std::string& p) { return p.rfind("dependency order:", 0) == 0; }));
    }
  }
}

TEST_CASE("chrome trace: a process per GPU, a thread per stream, a links process") {
  Graph g = build_model("demo", ModelParams{});
  Schedule s = make_schedule_skeleton(g, 2);
  s.meta.max_streams = 2;
  s.meta.algorithm = "hand";
  for (int b = 0; b < 2; ++b) {
    std::string p = "b" + std::to_string(b + 1) + ".";
    s.blocks[b][0] = {Stage{{Group{{g.find(p + "conv1")}}, Group{{g.find(p + "conv2")}}}}, Stage{{Group{{g.find(p + "out")}}}}};
    s.blocks[b][1] = {Stage{{Group{{g.find(p + "conv3")}}}}};
  }
  s.derive_transfers(g);
  auto cost = make_analytic_cost_model(find_device_preset("h200"));
  SimResult r = simulate(g, s, *cost);
  json t = parse_json_text(sim_to_chrome_trace(g, s, r), "trace");
  REQUIRE(t["traceEvents"].is_array());
  CHECK(t["otherData"]["latency_ms"].get<double>() == Approx(r.latency_ms));

  std::map<int, std::string> process;
  std::map<std::pair<int, int>, std::string> thread;
  std::map<std::string, int> spans;
  for (const json& e : t["traceEvents"]) {
    std::string ph = e["ph"];
    if (ph == "M" && e["name"].get<std::string>() == "process_name") process[e["pid"]] = e["args"]["name"];
    if (ph == "M" && e["name"].get<std::string>() == "thread_name") thread[{e["pid"], e["tid"]}] = e["args"]["name"];
    if (ph != "X") continue;
    spans[e["cat"]]++;
    if (e["cat"].get<std::string>() == "node") {
      const SimNode& n = *std::find_if(r.nodes.begin(), r.nodes.end(),
                                       [&](const SimNode& x) { return g.nodes[x.node].name == e["name"].get<std::string>(); });
      CHECK(e["pid"].get<int>() == n.gpu);
      CHECK(e["tid"].get<int>() == n.stream + 1);
      CHECK(e["ts"].get<double>() == Approx(n.start_ms * 1000));
      CHECK(e["dur"].get<double>() == Approx((n.end_ms - n.start_ms) * 1000));
    }
    if (e["cat"] == "transfer") CHECK(e["pid"] == 2);
  }
  CHECK(process == std::map<int, std::string>{{0, "GPU 0"}, {1, "GPU 1"}, {2, "links"}});
  CHECK(thread[{0, 1}] == "stream 0");
  CHECK(thread[{0, 2}] == "stream 1");
  CHECK(thread[{1, 1}] == "stream 0");
  CHECK(thread[{0, 0}] == "stages");
  CHECK(thread[{2, 0}] == "GPU 0 -> GPU 1");
  CHECK(thread[{2, 1}] == "GPU 1 -> GPU 0");
  CHECK(spans["node"] == 8);
  CHECK(spans["stage"] == 6);
  CHECK(spans["transfer"] == 4);
}
