// The simulator on hand-made schedules under a toy cost model whose answers are worked out by
// hand in the comments.
#include <algorithm>
#include <map>
#include <string>

#include "graph/error.hpp"
#include "models/models.hpp"
#include "scheduler/simulator.hpp"
#include "tests/catch.hpp"
#include "tests/scheduler/helpers.hpp"

using namespace hios;
using test::grp;

namespace {

// Every node takes 1 ms (or what `ms` says), every transfer 0.5 ms, and a stage takes its
// longest group (no contention) or, with `serialise`, the sum of its groups.
class ToyCost : public CostModel {
 public:
  std::map<std::string, double> ms;
  bool serialise = false;
  std::string name() const override { return "toy"; }
  std::string device() const override { return "toy"; }
  double node_ms(const Graph& g, int node, int) const override {
    auto it = ms.find(g.nodes[node].name);
    return it == ms.end() ? 1.0 : it->second;
  }
  double transfer_ms(double, int src, int dst) const override { return src == dst ? 0 : 0.5; }
  double stage_ms(const Graph& g, const Stage& st, int gpu) const override {
    double longest = 0, sum = 0;
    for (const Group& gr : st.groups) {
      double t = 0;
      for (int v : gr.nodes) t += node_ms(g, v, gpu);
      longest = std::max(longest, t);
      sum += t;
    }
    return serialise ? sum : longest;
  }
};

// x -> a -> c, x -> b -> d, out = concat(c, d): one block.
Graph cross() {
  GraphBuilder gb("cross", 1, 8, 8);
  Value x = gb.input(4);
  gb.begin_block("blk");
  Value a = gb.conv("a", {x}, 4, 3, 1, 1);
  Value b = gb.conv("b", {x}, 4, 3, 1, 1);
  Value c = gb.conv("c", {a}, 4, 3, 1, 1);
  Value d = gb.conv("d", {b}, 4, 3, 1, 1);
  gb.end_block(gb.concat("out", {c, d}));
  return gb.finish();
}

const SimNode& node_of(const Graph& g, const SimResult& r, const char* name) {
  int v = g.find(name);
  auto it = std::find_if(r.nodes.begin(), r.nodes.end(), [&](const SimNode& n) { return n.node == v; });
  REQUIRE(it != r.nodes.end());
  return *it;
}

const SimTransfer& transfer_of(const Graph& g, const SimResult& r, const char* name) {
  int v = g.find(name);
  auto it = std::find_if(r.transfers.begin(), r.transfers.end(), [&](const SimTransfer& t) { return t.node == v; });
  REQUIRE(it != r.transfers.end());
  return *it;
}

}  // namespace

TEST_CASE("simulator: two GPUs, cross-GPU waits and transfers") {
  Graph g = build_model("demo", ModelParams{});
  Schedule s = make_schedule_skeleton(g, 2);
  s.meta.max_streams = 2;
  for (int b = 0; b < 2; ++b) {
    std::string p = "b" + std::to_string(b + 1) + ".";
    s.blocks[b][0] = {Stage{{grp(g, {(p + "conv1").c_str()}), grp(g, {(p + "conv2").c_str()})}},
                      Stage{{grp(g, {(p + "out").c_str()})}}};
    s.blocks[b][1] = {Stage{{grp(g, {(p + "conv3").c_str()})}}};
  }
  s.derive_transfers(g);
  ToyCost cost;
  SimResult r = simulate(g, s, cost);
  // input -> GPU 1 arrives at 0.5; b1.conv3 runs 0.5..1.5 and is home at 2.0, so b1.out runs
  // 2.0..3.0 (GPU 0 idles from 1.0). b1.out reaches GPU 1 at 3.5; b2.conv3 runs 3.5..4.5 and
  // is home at 5.0; b2.out runs 5.0..6.0.
  CHECK(r.latency_ms == Approx(6.0));
  CHECK(node_of(g, r, "b1.conv1").start_ms == Approx(0.0));
  CHECK(node_of(g, r, "b1.conv2").end_ms == Approx(1.0));
  CHECK(node_of(g, r, "b1.conv2").stream == 1);
  CHECK(node_of(g, r, "b1.conv3").start_ms == Approx(0.5));
  CHECK(node_of(g, r, "b1.conv3").gpu == 1);
  CHECK(node_of(g, r, "b1.out").start_ms == Approx(2.0));
  CHECK(node_of(g, r, "b2.conv1").start_ms == Approx(3.0));
  CHECK(node_of(g, r, "b2.conv3").start_ms == Approx(3.5));
  CHECK(node_of(g, r, "b2.out").end_ms == Approx(6.0));
  CHECK(transfer_of(g, r, "input").end_ms == Approx(0.5));
  CHECK(transfer_of(g, r, "b1.out").start_ms == Approx(3.0));
  // b1.out is concat(conv1 + conv2, conv3): 96 channels.
  CHECK(transfer_of(g, r, "b1.out").bytes == Approx(96.0 * 15 * 15 * 4));
  REQUIRE(r.nodes.size() == 8);
  REQUIRE(r.transfers.size() == 4);
  REQUIRE(r.stages.size() == 6);

  SECTION("the output finishing on GPU 1 pays for the trip home") {
    s.blocks[1][0].pop_back();
    s.blocks[1][1].push_back(Stage{{grp(g, {"b2.out"})}});
    s.derive_transfers(g);
    // b2.conv1 and b2.conv2 end at 4.0 and reach GPU 1 one after the other (4.5, 5.0);
    // b2.out runs 5.0..6.0 on GPU 1 and is home at 6.5.
    SimResult r2 = simulate(g, s, cost);
    CHECK(transfer_of(g, r2, "b2.conv1").end_ms == Approx(4.5));
    CHECK(transfer_of(g, r2, "b2.conv2").start_ms == Approx(4.5));
    CHECK(node_of(g, r2, "b2.out").start_ms == Approx(5.0));
    CHECK(r2.latency_ms == Approx(6.5));
  }
}

// cross() with a and b on GPU 0, c and d on GPU 1, out back on GPU 0: two transfers each way
// that become ready at the same time, over `lanes` link lanes.
static Schedule cross_there_and_back(const Graph& g, int lanes) {
  Schedule s = make_schedule_skeleton(g, 2);
  s.meta.max_streams = 2;
  s.meta.link_lanes = lanes;
  s.blocks[0][0] = {Stage{{grp(g, {"a"}), grp(g, {"b"})}}, Stage{{grp(g, {"out"})}}};
  s.blocks[0][1] = {Stage{{grp(g, {"c"}), grp(g, {"d"})}}};
  s.derive_transfers(g);
  REQUIRE(check_schedule(g, s).empty());
  return s;
}

TEST_CASE("simulator: one link carries one transfer at a time") {
  Graph g = cross();
  Schedule s = cross_there_and_back(g, 1);
  ToyCost cost;
  SimResult r = simulate(g, s, cost);
  // a and b end at 1.0 and share link 0->1: a 1.0..1.5, b 1.5..2.0. c and d run 2.0..3.0; back
  // on link 1->0: c 3.0..3.5, d 3.5..4.0. out runs 4.0..5.0.
  CHECK(transfer_of(g, r, "a").start_ms == Approx(1.0));
  CHECK(transfer_of(g, r, "b").start_ms == Approx(1.5));
  CHECK(node_of(g, r, "c").start_ms == Approx(2.0));
  CHECK(transfer_of(g, r, "d").end_ms == Approx(4.0));
  CHECK(r.latency_ms == Approx(5.0));

  SECTION("a stage's groups stretch to the stage's length") {
    cost.serialise = true;
    cost.ms["a"] = 1.0;
    cost.ms["b"] = 3.0;
    SimResult r2 = simulate(g, s, cost);
    // Stage {a | b} lasts 1 + 3 = 4; the slowest group (b) is stretched by 4/3, a by the same.
    CHECK(r2.stages.front().end_ms - r2.stages.front().start_ms == Approx(4.0));
    CHECK(node_of(g, r2, "b").end_ms == Approx(4.0));
    CHECK(node_of(g, r2, "a").end_ms == Approx(4.0 / 3.0));
    // a leaves at 4/3, b at 4.0: the link is free again by then.
    CHECK(transfer_of(g, r2, "a").start_ms == Approx(4.0 / 3.0));
    CHECK(transfer_of(g, r2, "b").start_ms == Approx(4.0));
  }
}

TEST_CASE("simulator: with two link lanes a pair's transfers take the lanes in turn") {
  Graph g = cross();
  Schedule s = cross_there_and_back(g, 2);
  ToyCost cost;
  SimResult r = simulate(g, s, cost);
  // a and b end at 1.0 and move at once on lanes 0 and 1: 1.0..1.5. c and d run 1.5..2.5 and
  // go back at once: 2.5..3.0. out runs 3.0..4.0, a whole transfer earlier on each way than
  // with one lane.
  CHECK(transfer_of(g, r, "a").start_ms == Approx(1.0));
  CHECK(transfer_of(g, r, "b").start_ms == Approx(1.0));
  CHECK(transfer_of(g, r, "d").end_ms == Approx(3.0));
  CHECK(r.latency_ms == Approx(4.0));
  // The schedule's JSON keeps its lanes.
  CHECK(schedule_from_json(g, schedule_to_json(g, s)).meta.link_lanes == 2);
}

TEST_CASE("simulator: one GPU, one stream is the sum of node times") {
  Graph g = build_model("demo", ModelParams{});
  Schedule s = make_schedule_skeleton(g, 1);
  for (size_t b = 0; b < g.blocks.size(); ++b) {
    for (int v : g.blocks[b].nodes) s.blocks[b][0].push_back(Stage{{Group{{v}}}});
  }
  ToyCost cost;
  cost.ms["b1.conv2"] = 2.5;
  REQUIRE(check_schedule(g, s).empty());
  SimResult r = simulate(g, s, cost);
  CHECK(r.latency_ms == Approx(7 * 1.0 + 2.5));
  CHECK(r.transfers.empty());
}

TEST_CASE("simulator: refuses schedules that cannot run") {
  Graph g = cross();
  ToyCost cost;
  auto error_of = [&](const Schedule& s) {
    try {
      simulate(g, s, cost);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  Schedule s = make_schedule_skeleton(g, 2);
  s.blocks[0][0] = {Stage{{grp(g, {"d"})}}, Stage{{grp(g, {"a"})}}, Stage{{grp(g, {"out"})}}};
  s.blocks[0][1] = {Stage{{grp(g, {"c"})}}, Stage{{grp(g, {"b"})}}};
  s.derive_transfers(g);
  CHECK(error_of(s).find("deadlock: GPU 0 stage 0 of block 'blk' waits forever for 'b'") != std::string::npos);

  s.blocks[0][1] = {Stage{{grp(g, {"b"})}}, Stage{{grp(g, {"c"})}}};
  s.derive_transfers(g);
  CHECK(error_of(s).empty());
  s.transfers.pop_back();
  CHECK(!error_of(s).empty());

  Schedule order = make_schedule_skeleton(g, 1);
  order.blocks[0][0] = {Stage{{grp(g, {"c"}), grp(g, {"a"})}}, Stage{{grp(g, {"b", "d", "out"})}}};
  CHECK(error_of(order).find("'c' reads 'a', which does not run before it") != std::string::npos);
}

TEST_CASE("simulator: a partial schedule reports its makespan") {
  Graph g = cross();
  Schedule s = make_schedule_skeleton(g, 2);
  s.blocks[0][0] = {Stage{{grp(g, {"a"})}}};
  s.blocks[0][1] = {Stage{{grp(g, {"b"})}}};
  s.derive_transfers(g);  // only the input to GPU 1
  ToyCost cost;
  SimResult r = simulate(g, s, cost);
  CHECK(r.latency_ms == Approx(1.5));  // b waits 0.5 for the input
}
