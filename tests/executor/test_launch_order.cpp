// Launch orders (executor/launch_order.hpp): the interleaving keeps each group's order and
// alternates classes; programs lowered with it pass every structural check, run to the same
// output on one and two ranks, and sender and receiver agree on the send order.
#include <algorithm>
#include <map>

#include "executor/comm.hpp"
#include "executor/launch_order.hpp"
#include "executor/memory_plan.hpp"
#include "executor/program.hpp"
#include "executor/session.hpp"
#include "executor/weights.hpp"
#include "tests/catch.hpp"
#include "tests/executor/helpers.hpp"

using namespace hios;

TEST_CASE("launch orders: each group's order kept, classes alternated, longest group first", "[executor][launch]") {
  Stage st;
  st.groups = {Group{{1, 2, 3}}, Group{{4, 5}}, Group{{6}}};
  exec::LaunchOrder o;
  o.kind = exec::LaunchOrderKind::Opara;
  o.memory_bound.assign(7, 0);
  o.memory_bound[4] = o.memory_bound[5] = o.memory_bound[6] = 1;  // groups 1 and 2 memory-bound
  const auto seq = exec::stage_launches(st, o);
  REQUIRE(seq.size() == 6);
  // The longest group opens; then a memory-bound head; then compute again, and so on.
  CHECK(seq[0] == std::make_pair(0, 1));
  CHECK(o.memory_bound[size_t(seq[1].second)] == 1);
  CHECK(seq[2] == std::make_pair(0, 2));
  std::map<int, std::vector<int>> per_group;
  for (const auto& [gi, v] : seq) per_group[gi].push_back(v);
  CHECK(per_group[0] == std::vector<int>{1, 2, 3});
  CHECK(per_group[1] == std::vector<int>{4, 5});
  CHECK(per_group[2] == std::vector<int>{6});
  // topo: group after group.
  const auto topo = exec::stage_launches(st, exec::LaunchOrder{});
  CHECK(topo == std::vector<std::pair<int, int>>{{0, 1}, {0, 2}, {0, 3}, {1, 4}, {1, 5}, {2, 6}});
  CHECK(exec::parse_launch_order("measured") == exec::LaunchOrderKind::Measured);
  CHECK_THROWS_WITH(exec::parse_launch_order("fifo"), Catch::Contains("topo, opara or measured"));
}

TEST_CASE("launch orders: opara by op name, measured by achieved rates", "[executor][launch]") {
  const Graph g = build_model("inception_v3", ModelParams{1, 75, 75});
  const exec::LaunchOrder o = exec::opara_order(g);
  for (int v = 1; v < g.size(); ++v) {
    const OpKind k = g.nodes[size_t(v)].op.kind;
    INFO(g.nodes[size_t(v)].name);
    CHECK(bool(o.memory_bound[size_t(v)]) == (k == OpKind::Pool || k == OpKind::Identity || k == OpKind::Activation ||
                                              k == OpKind::Add || k == OpKind::Mul || k == OpKind::Softmax));
  }
  // The same node is memory-bound when it takes as long as its bytes need at the device's
  // bandwidth (its FLOP share is then far lower), and compute-bound when it takes as long as
  // its FLOPs need at the peak (its byte share is then far lower).
  const int conv = g.find("Conv2d_2b_3x3");
  REQUIRE(conv > 0);
  const Node& nd = g.nodes[size_t(conv)];
  DevicePreset dev;
  dev.peak_tflops = 100;
  dev.mem_bandwidth_gbs = 1000;
  const double bytes = nd.cost.bytes_read + nd.cost.bytes_written;
  const double memory_ms = bytes / 1e12 * 1e3, compute_ms = nd.cost.flops / 1e14 * 1e3;
  REQUIRE(memory_ms > 0);
  REQUIRE(compute_ms > 0);
  const double at = std::max(memory_ms, compute_ms);
  const NodeRates r = node_rates(nd, at, dev);
  CHECK(r.memory_bound == (memory_ms >= compute_ms));
  CHECK(std::max(r.memory_share, r.compute_share) == Approx(1.0));
  CHECK(node_rates(nd, at, dev, true).memory_share == Approx(r.memory_share / 2));  // 16-bit bytes
  std::vector<double> ms(size_t(g.size()), 0.0);
  ms[size_t(conv)] = at;
  const exec::LaunchOrder m = exec::measured_order(g, ms, dev, false);
  CHECK(bool(m.memory_bound[size_t(conv)]) == r.memory_bound);
  CHECK(m.memory_bound[0] == 1);  // untimed nodes count as memory-bound
}

TEST_CASE("launch orders: lowered programs are sound and compute the same output", "[executor][launch]") {
  const Graph g = build_model("inception_v3", ModelParams{1, 75, 75});
  const std::vector<float> input = exec::make_input(g);
  for (int gpus : {1, 2}) {
    const Schedule s = test::schedule_with("hios-lp", g, gpus);
    test::LocalJob plain(g, s);
    plain.run(input);
    const std::vector<float> want = plain.backends[0]->read_tensor(g.output());
    for (const exec::LaunchOrder& o : {exec::opara_order(g)}) {
      INFO(gpus << " GPU(s), " << exec::launch_order_summary(o));
      std::vector<exec::RankProgram> progs = exec::lower_all(g, s, o);
      // Includes: per (src, dst) pair the receiver's Recvs list the sender's Sends in order.
      const auto problems = exec::check_programs(g, progs);
      CHECK(problems.empty());
      for (exec::RankProgram& p : progs) {
        CHECK(p.launch_order.rfind("opara", 0) == 0);
        exec::plan_and_check_shared_buffers(g, p);  // throws on an unsound arena plan
      }
      // Interleaved: some stage issues a launch on a stream other than the previous launch's.
      bool interleaved = false;
      for (const exec::RankProgram& p : progs) {
        std::map<std::pair<int, int>, std::vector<int>> seen;  // (block, stage) -> streams in launch order
        for (const exec::Instr& in : p.instrs) {
          if (in.kind != exec::InstrKind::Launch) continue;
          auto& streams = seen[{in.block, in.stage}];
          if (!streams.empty() && streams.back() != in.stream &&
              std::find(streams.begin(), streams.end(), in.stream) != streams.end()) {
            interleaved = true;  // a stream came back after another one
          }
          streams.push_back(in.stream);
        }
      }
      CHECK(interleaved);
      test::LocalJob job(g, s);
      job.programs = progs;
      for (size_t r = 0; r < progs.size(); ++r) job.backends[r]->prepare(g, job.programs[r]);
      job.run(input);
      CHECK(job.backends[0]->read_tensor(g.output()) == want);
    }
  }
}

TEST_CASE("launch orders: measured on the cpu backend through a session", "[executor][launch]") {
  const Graph g = build_model("squeezenet", ModelParams{1, 48, 48});
  auto self = exec::make_self_comm();
  exec::SessionOptions so;
  so.backend = "cpu";
  const std::vector<double> ms = exec::measure_node_times(g, so, *self);
  REQUIRE(ms.size() == size_t(g.size()));
  CHECK(ms[0] == 0.0);
  for (int v = 1; v < g.size(); ++v) CHECK(ms[size_t(v)] >= 0.0);
  const exec::LaunchOrder o = exec::make_launch_order("measured", g, so, *self);
  CHECK(o.kind == exec::LaunchOrderKind::Measured);
  CHECK(o.memory_bound.size() == size_t(g.size()));
  CHECK(exec::make_launch_order("topo", g, so, *self).memory_bound.empty());
}
