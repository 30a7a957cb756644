// The random-DAG experiment: the generator's determinism and shape, the synthetic cost model,
// and the experiment's done-when (hios-lp + window <= hios-lp <= seq on average).
#include <cmath>
#include <functional>
#include <memory>
#include <set>
#include <string>

#include "graph/error.hpp"
#include "graph/json_codec.hpp"
#include "scheduler/random_dag.hpp"
#include "scheduler/simulator.hpp"
#include "tests/catch.hpp"
#include "tests/test_util.hpp"

using namespace hios;
using test::contains;
using test::error_of;

TEST_CASE("random dag: splitmix64 matches the reference sequence and draws stay in range", "[random-dag]") {
  // The reference outputs of splitmix64 for seed 1234567 (Vigna's test vector).
  SplitMix64 r(1234567);
  CHECK(r.next() == 6457827717110365317ull);
  CHECK(r.next() == 3203168211198807973ull);
  CHECK(r.next() == 9817491932198370423ull);
  CHECK(r.next() == 4593380528125082431ull);
  CHECK(r.next() == 16408922859458223821ull);
  SplitMix64 q(7);
  std::set<uint64_t> seen;
  for (int i = 0; i < 2000; ++i) {
    uint64_t b = q.below(7);
    CHECK(b < 7);
    seen.insert(b);
    double u = q.uniform(0.5, 1.5);
    CHECK(u >= 0.5);
    CHECK(u < 1.5);
  }
  CHECK(seen.size() == 7);
}

TEST_CASE("random dag: the generated graph has the requested shape and weights", "[random-dag]") {
  RandomDagParams p;
  p.nodes = 120;
  p.edges = 300;
  p.layers = 6;
  p.min_weight = 0.5;
  p.max_weight = 2.0;
  p.ccr = 2.0;
  p.seed = 42;
  RandomDag d = generate_random_dag(p);
  const Graph& g = d.graph;
  REQUIRE(g.size() == p.nodes + 2);  // the input and the exit
  REQUIRE(g.blocks.size() == 1);
  const int exit = g.output();
  CHECK(g.nodes[exit].name == "exit");
  int edges = 0;
  std::set<int> layers;
  double work = 0, comm = 0;
  for (int v = 1; v < g.size(); ++v) {
    if (v == exit) {
      CHECK(d.node_ms[v] == 0);
      continue;
    }
    layers.insert(d.layer[v]);
    CHECK(d.node_ms[v] >= p.min_weight);
    CHECK(d.node_ms[v] < p.max_weight);
    CHECK(d.comm_ms[v] >= p.ccr * p.min_weight - kRandomDagCommQuantumMs);
    CHECK(d.comm_ms[v] <= p.ccr * p.max_weight + kRandomDagCommQuantumMs);
    work += d.node_ms[v];
    comm += d.comm_ms[v];
    bool above = d.layer[v] == 0;
    for (int u : g.predecessors(v)) {
      if (u == g.input()) {
        CHECK(d.layer[v] == 0);  // only first-layer nodes read the input
        continue;
      }
      ++edges;
      CHECK(d.layer[u] < d.layer[v]);
      above = above || d.layer[u] == d.layer[v] - 1;
    }
    CHECK(above);  // every later-layer node has a producer in the layer just above
  }
  CHECK(edges == p.edges);
  CHECK(layers.size() == size_t(p.layers));
  // Means: node weights near the middle of the range, communication near CCR times that.
  CHECK(work / p.nodes == Approx(1.25).margin(0.15));
  CHECK(comm / work == Approx(p.ccr).margin(0.3));
}

TEST_CASE("random dag: deterministic for a seed, different across seeds", "[random-dag]") {
  RandomDagParams p;
  p.seed = 5;
  RandomDag a = generate_random_dag(p), b = generate_random_dag(p);
  CHECK(graph_to_text(a.graph) == graph_to_text(b.graph));
  CHECK(a.node_ms == b.node_ms);
  CHECK(a.comm_ms == b.comm_ms);
  p.seed = 6;
  RandomDag c = generate_random_dag(p);
  CHECK(graph_digest(c.graph) != graph_digest(a.graph));
  CHECK(c.node_ms != a.node_ms);
}

TEST_CASE("random dag: impossible requests are errors naming the parameter", "[random-dag]") {
  RandomDagParams p;
  p.nodes = 10;
  p.layers = 5;
  p.edges = 3;  // 8 are needed to give every later-layer node a producer
  CHECK(contains(error_of([&] { generate_random_dag(p); }), "--edges must be at least 8"));
  p.edges = 1000;
  CHECK(contains(error_of([&] { generate_random_dag(p); }), "--edges must be at most 40"));
  p.edges = 10;
  p.layers = 11;
  CHECK(contains(error_of([&] { generate_random_dag(p); }), "--layers"));
  p.layers = 5;
  p.min_weight = 3;
  p.max_weight = 1;
  CHECK(contains(error_of([&] { generate_random_dag(p); }), "--min-weight"));
  p.min_weight = 0.1;
  p.max_weight = 4;
  p.ccr = -1;
  CHECK(contains(error_of([&] { generate_random_dag(p); }), "--ccr"));
}

TEST_CASE("random dag: the cost model reads the generated weights", "[random-dag]") {
  RandomDagParams p;
  p.nodes = 30;
  p.edges = 50;
  p.layers = 3;
  p.alpha = 0.25;
  RandomDag d = generate_random_dag(p);
  std::unique_ptr<CostModel> cost = make_random_dag_cost_model(d);
  const Graph& g = d.graph;
  for (int v = 1; v < g.size(); ++v) {
    CHECK(cost->node_ms(g, v, 0) == d.node_ms[v]);
    double bytes = double(g.nodes[v].shape.numel()) * 4.0;
    CHECK(cost->transfer_ms(bytes, 0, 1) == Approx(d.comm_ms[v]).margin(1e-12));
    CHECK(cost->transfer_ms(bytes, 1, 1) == 0);
    Stage one;
    one.groups.push_back(Group{{v}});
    CHECK(cost->stage_ms(g, one, 0) == d.node_ms[v]);
  }
  // Two groups: alpha * sum + (1 - alpha) * max(longest, utilisation-weighted sum).
  int a = g.find("n0"), b = g.find("n1"), c = g.find("n2");
  Stage st;
  st.groups.push_back(Group{{a}});
  st.groups.push_back(Group{{b, c}});
  double sum = d.node_ms[a] + d.node_ms[b] + d.node_ms[c];
  double longest = std::max(d.node_ms[a], d.node_ms[b] + d.node_ms[c]);
  double busy = d.utilization[a] * d.node_ms[a] + d.utilization[b] * d.node_ms[b] + d.utilization[c] * d.node_ms[c];
  CHECK(cost->stage_ms(g, st, 0) == Approx(0.25 * sum + 0.75 * std::max(longest, busy)));
  // Bound to its own graph.
  RandomDagParams other = p;
  other.seed = 99;
  other.nodes = 31;
  RandomDag e = generate_random_dag(other);
  CHECK(contains(error_of([&] { cost->node_ms(e.graph, 1, 0); }), "random-DAG cost model"));
}

TEST_CASE("random dag: hios-lp + window <= hios-lp <= seq on average, nothing below the bound", "[random-dag]") {
  RandomDagParams p;
  p.nodes = 80;
  p.edges = 160;
  p.layers = 8;
  p.seed = 11;
  SchedulerOptions opt;
  std::vector<RandomDagRow> rows = run_random_dag_experiment(p, 3, {2, 4}, opt);
  REQUIRE(rows.size() == 2);
  for (const RandomDagRow& r : rows) {
    INFO(r.gpus << " GPUs");
    CHECK(r.seeds == 3);
    CHECK(r.hios_lp_window <= r.hios_lp);
    CHECK(r.hios_lp <= r.seq);
    CHECK(r.hios_mr_window <= r.hios_mr);
    CHECK(r.ios <= r.seq);
    CHECK(r.hios_lp < r.seq);  // more GPUs really help on these graphs
    for (double v : {r.seq, r.ios, r.hios_lp, r.hios_lp_window, r.hios_mr, r.hios_mr_window, r.heft}) {
      CHECK(v >= r.lower_bound * (1 - 1e-9));
    }
  }
  CHECK(rows[1].lower_bound <= rows[0].lower_bound);
  // Same numbers every time.
  std::vector<RandomDagRow> again = run_random_dag_experiment(p, 3, {2, 4}, opt);
  CHECK(random_dag_csv(again) == random_dag_csv(rows));
  std::string csv = random_dag_csv(rows);
  CHECK(csv.rfind("gpus,seq,ios,hios-lp,hios-lp+window,hios-mr,hios-mr+window,heft,lower_bound\n2,", 0) == 0);
  std::string table = random_dag_table(rows);
  CHECK(contains(table, "hios-lp+window"));
}

TEST_CASE("random dag: every algorithm gives a valid schedule on a random DAG", "[random-dag]") {
  RandomDagParams p;
  p.nodes = 60;
  p.edges = 150;
  p.layers = 5;
  p.ccr = 1.0;
  p.seed = 3;
  RandomDag d = generate_random_dag(p);
  std::unique_ptr<CostModel> cost = make_random_dag_cost_model(d);
  for (int gpus : {1, 3, 8}) {
    SchedulerOptions opt;
    opt.num_gpus = gpus;
    for (const std::string& algo : algorithm_names()) {
      INFO(algo << " on " << gpus << " GPUs");
      Schedule s = run_algorithm(algo, d.graph, *cost, opt);
      CHECK(check_schedule(d.graph, s).empty());
      CHECK(s.meta.predicted_ms == Approx(simulate(d.graph, s, *cost).latency_ms));
      CHECK(s.meta.predicted_ms >= s.meta.lower_bound_ms * (1 - 1e-9));
      CHECK(s.meta.device == "synthetic");
    }
  }
}
