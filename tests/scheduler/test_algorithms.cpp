// The scheduling algorithms: validity on every model, the lower bound, determinism, the fast
// plan evaluator against simulate(), the IOS DP against brute force, the window pass's
// deadlock rejection, and the HIOS-LP done-when on Inception v3.
#include <algorithm>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "graph/dag.hpp"
#include "graph/error.hpp"
#include "graph/json_codec.hpp"
#include "models/models.hpp"
#include "scheduler/algorithms.hpp"
#include "scheduler/cost_model.hpp"
#include "scheduler/random_dag.hpp"
#include "scheduler/simulator.hpp"
#include "tests/catch.hpp"

using namespace hios;

namespace {

std::unique_ptr<CostModel> h200() { return make_cost_model("analytic", "h200"); }

// Small resolutions keep CI fast; Inception v3 needs at least 75 px to stay positive.
int64_t test_size(const std::string& model) {
  if (model == "demo") return 15;
  if (model == "inception_v3") return 96;
  return 64;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

double total_stage_ms(const Graph& g, const Schedule& s, const CostModel& cost) {
  double t = 0;
  for (const auto& per_gpu : s.blocks) {
    for (const Stage& st : per_gpu[0]) t += cost.stage_ms(g, st, 0);
  }
  return t;
}

// Exhaustive search over every sequence of last stages for the nodes of block 0 (no
// memoisation, so it shares nothing with the DP): E is a legal last stage of S when no node of
// E has a successor in S \ E, and its weakly connected components are at most `max_groups`
// groups of at most `max_group` nodes each.
struct BruteForce {
  const Graph& g;
  const CostModel& cost;
  std::vector<int> nodes;  // index order
  int max_group, max_groups;
  std::vector<uint32_t> succ;  // local successor masks

  BruteForce(const Graph& g_, const CostModel& c, std::vector<int> n, int r, int s)
      : g(g_), cost(c), nodes(std::move(n)), max_group(r), max_groups(s), succ(nodes.size(), 0) {
    std::vector<std::vector<int>> all = g.successors();
    for (size_t i = 0; i < nodes.size(); ++i) {
      for (int t : all[nodes[i]]) {
        auto it = std::find(nodes.begin(), nodes.end(), t);
        if (it != nodes.end()) succ[i] |= 1u << (it - nodes.begin());
      }
    }
  }

  double best(uint32_t S) const {
    if (S == 0) return 0;
    const int m = static_cast<int>(nodes.size());
    double result = std::numeric_limits<double>::infinity();
    for (uint32_t E = S; E != 0; E = (E - 1) & S) {
      bool ok = true;
      for (int i = 0; i < m && ok; ++i) {
        if (((E >> i) & 1u) && (succ[i] & S & ~E)) ok = false;
      }
      if (!ok) continue;
      // Components by union-find over the edges inside E.
      std::vector<int> parent(m);
      for (int i = 0; i < m; ++i) parent[i] = i;
      std::function<int(int)> find = [&](int x) { return parent[x] == x ? x : parent[x] = find(parent[x]); };
      for (int i = 0; i < m; ++i) {
        if (!((E >> i) & 1u)) continue;
        for (int j = 0; j < m; ++j) {
          if (((succ[i] & E) >> j) & 1u) parent[find(i)] = find(j);
        }
      }
      Stage st;
      std::vector<int> root_group(m, -1);
      for (int i = 0; i < m; ++i) {
        if (!((E >> i) & 1u)) continue;
        int r = find(i);
        if (root_group[r] < 0) {
          root_group[r] = static_cast<int>(st.groups.size());
          st.groups.push_back({});
        }
        st.groups[root_group[r]].nodes.push_back(nodes[i]);
      }
      if (static_cast<int>(st.groups.size()) > max_groups) continue;
      bool small = true;
      for (const Group& gr : st.groups) small = small && static_cast<int>(gr.nodes.size()) <= max_group;
      if (!small) continue;
      result = std::min(result, cost.stage_ms(g, st, 0) + best(S & ~E));
    }
    return result;
  }
};

}  // namespace

TEST_CASE("algorithms: every algorithm on every model at 1, 2 and 4 GPUs is valid and respects the lower bound",
          "[algorithms]") {
  std::unique_ptr<CostModel> cost = h200();
  for (const ModelInfo& m : model_registry()) {
    Graph g = build_model(m.name, {1, test_size(m.name), test_size(m.name)});
    for (int gpus : {1, 2, 4}) {
      SchedulerOptions opt;
      opt.num_gpus = gpus;
      const double lb = lower_bound_ms(g, *cost, gpus);
      for (const std::string& algo : algorithm_names()) {
        INFO(m.name << " on " << gpus << " GPUs with " << algo);
        Schedule s = run_algorithm(algo, g, *cost, opt);
        std::vector<std::string> problems = check_schedule(g, s);
        INFO((problems.empty() ? std::string("valid") : problems[0]));
        CHECK(problems.empty());
        CHECK(s.meta.algorithm == algo);
        CHECK(s.meta.num_gpus == gpus);
        CHECK(s.meta.graph_digest == graph_digest(g));
        CHECK(s.meta.device == "h200");
        CHECK(s.meta.cost_model == "analytic");
        CHECK(s.meta.search_seconds >= 0);
        CHECK(s.meta.lower_bound_ms == Approx(lb));
        const double sim = simulate(g, s, *cost).latency_ms;
        CHECK(s.meta.predicted_ms == Approx(sim));
        CHECK(sim >= lb * (1 - 1e-9));
        // The searches trust the fast evaluator, so it must agree with simulate() exactly.
        PlanEvaluator ev(g, *cost, gpus);
        CHECK(ev.latency(plan_from_schedule(g, s)) == Approx(sim).epsilon(1e-12));
        if (algo == "sequential" || algo == "greedy" || algo == "ios") {
          // Single-GPU algorithms leave the other GPUs idle.
          for (const auto& per_gpu : s.blocks) {
            for (int d = 1; d < gpus; ++d) CHECK(per_gpu[d].empty());
          }
        }
        if (algo == "hios-lp" || algo == "hios-mr") {
          // The window pass only keeps merges that do not slow the plan down.
          CHECK(sim <= s.meta.params["phase1_ms"].get<double>() * (1 + 1e-12));
        }
      }
    }
  }
}

TEST_CASE("algorithms: results are deterministic", "[algorithms]") {
  std::unique_ptr<CostModel> cost = h200();
  Graph g = build_model("inception_v3", {1, 96, 96});
  SchedulerOptions opt;
  opt.num_gpus = 2;
  for (const std::string& algo : algorithm_names()) {
    INFO(algo);
    Schedule a = run_algorithm(algo, g, *cost, opt);
    Schedule b = run_algorithm(algo, g, *cost, opt);
    a.meta.search_seconds = b.meta.search_seconds = 0;  // the only field measured, not computed
    CHECK(schedule_to_text(g, a) == schedule_to_text(g, b));
  }
}

TEST_CASE("hios-lp: inception_v3 at 1024 on 2 H200s beats sequential and stays above the lower bound",
          "[algorithms][hios-lp]") {
  std::unique_ptr<CostModel> cost = h200();
  Graph g = build_model("inception_v3", {1, 1024, 1024});
  SchedulerOptions opt;
  opt.num_gpus = 2;
  Schedule lp = schedule_hios_lp(g, *cost, opt);
  Schedule seq = schedule_sequential(g, *cost, opt);
  REQUIRE(check_schedule(g, lp).empty());
  CHECK(lp.meta.predicted_ms < seq.meta.predicted_ms);
  CHECK(lp.meta.predicted_ms >= lp.meta.lower_bound_ms);
  // Both GPUs do real work.
  auto per_gpu = lp.meta.params["nodes_per_gpu"];
  CHECK(per_gpu[0].get<int>() > 0);
  CHECK(per_gpu[1].get<int>() > 0);
}

TEST_CASE("ios: the DP equals a brute-force search over stage sequences on tiny random graphs", "[algorithms][ios]") {
  std::unique_ptr<CostModel> analytic = h200();
  int compared = 0;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    RandomDagParams p;
    p.nodes = 3 + static_cast<int>(seed % 4);  // 3..6 nodes plus the exit
    p.layers = 1 + static_cast<int>(seed % 3);
    if (p.layers > p.nodes) p.layers = p.nodes;
    p.edges = p.layers == 1 ? 0 : p.nodes - 1;  // enough to connect the layers, plus maybe a few
    p.seed = seed;
    RandomDag dag = generate_random_dag(p);
    std::unique_ptr<CostModel> synthetic = make_random_dag_cost_model(dag);
    const Graph& g = dag.graph;
    REQUIRE(g.blocks.size() == 1);
    std::vector<int> nodes = g.blocks[0].nodes;
    std::sort(nodes.begin(), nodes.end());
    const uint32_t all = (1u << nodes.size()) - 1;
    for (const CostModel* cost : {synthetic.get(), analytic.get()}) {
      for (auto [r, s] : {std::pair{1, 1}, {2, 2}, {3, 3}, {2, 4}, {8, 8}}) {
        SchedulerOptions opt;
        opt.ios_max_group = r;
        opt.ios_max_groups = s;
        opt.max_streams = 8;
        INFO("seed " << seed << ", " << cost->name() << ", r=" << r << " s=" << s);
        Schedule ios = schedule_ios(g, *cost, opt);
        REQUIRE(check_schedule(g, ios).empty());
        CHECK(ios.meta.params["capped_parts"].get<int>() == 0);
        const double dp = total_stage_ms(g, ios, *cost);
        const double bf = BruteForce(g, *cost, nodes, r, s).best(all);
        CHECK(dp == Approx(bf).epsilon(1e-12));
        // With one GPU and no transfers the simulated latency is the sum of the stages.
        CHECK(ios.meta.predicted_ms == Approx(dp).epsilon(1e-12));
        ++compared;
      }
    }
  }
  CHECK(compared == 12 * 2 * 5);
}

TEST_CASE("ios: a tiny state cap splits parts instead of running away, and stays valid", "[algorithms][ios]") {
  std::unique_ptr<CostModel> cost = h200();
  Graph g = build_model("randwire", {1, 64, 64});
  SchedulerOptions opt;
  opt.ios_max_states = 50;
  Schedule capped = schedule_ios(g, *cost, opt);
  CHECK(check_schedule(g, capped).empty());
  CHECK(capped.meta.params["capped_parts"].get<int>() > 0);
  CHECK(capped.meta.params["split_parts"].get<int>() > 0);
  CHECK(!capped.meta.params["fallback"].empty());
  // Still at least as good as running one node per stage.
  CHECK(capped.meta.predicted_ms <= schedule_sequential(g, *cost, opt).meta.predicted_ms * (1 + 1e-12));
}

TEST_CASE("window pass: a merge that would deadlock across GPUs is rejected", "[algorithms][window]") {
  // GPU 0 runs x1 then y; GPU 1 runs a (reads x1) then b. y reads b. Merging x1 and y (which
  // are independent) into one stage would make that stage wait for b, which waits behind a,
  // which waits for x1: a cycle across the GPUs.
  GraphBuilder gb("knot", 1, 8, 8);
  Value in = gb.input(8);
  gb.begin_block("b");
  Value x1 = gb.conv("x1", {in}, 8, 3, 1, 1);
  Value b = gb.conv("b", {in}, 8, 3, 1, 1);
  Value a = gb.conv("a", {x1}, 8, 3, 1, 1);
  Value y = gb.conv("y", {b}, 8, 3, 1, 1);
  Value out = gb.add("out", {a, y});
  gb.end_block(out);
  Graph g = gb.finish();
  std::unique_ptr<CostModel> cost = h200();
  const int X = g.find("x1"), B = g.find("b"), A = g.find("a"), Y = g.find("y"), O = g.find("out");
  std::vector<int> gpu_of(g.size(), 0);
  gpu_of[A] = gpu_of[B] = 1;
  std::vector<int> order{X, A, B, Y, O};
  Plan p = plan_from_order(g, gpu_of, order, 2);
  PlanEvaluator ev(g, *cost, 2);
  const double before = ev.latency(p);
  REQUIRE(before < std::numeric_limits<double>::infinity());

  // The merged plan itself: the evaluator and check_schedule both call it a deadlock.
  Plan knotted = p;
  knotted.gpu_stages[0] = {knotted.add_stage(0, {{X}, {Y}}), knotted.gpu_stages[0][2]};
  CHECK(ev.latency(knotted) == std::numeric_limits<double>::infinity());
  Schedule ks = plan_to_schedule(g, knotted);
  ks.meta.max_streams = 4;
  ks.derive_transfers(g);
  std::vector<std::string> problems = check_schedule(g, ks);
  REQUIRE(!problems.empty());
  CHECK(contains(problems[0], "deadlock"));

  WindowStats ws = window_pass(g, ev, p, order, 4, 4);
  CHECK(ws.rejected_deadlock >= 1);
  const double after = ev.latency(p);
  CHECK(after <= before);
  Schedule s = plan_to_schedule(g, p);
  s.meta.max_streams = 4;
  s.derive_transfers(g);
  CHECK(check_schedule(g, s).empty());
  // x1 and y never share a stage.
  for (int id : p.gpu_stages[0]) {
    int hits = 0;
    for (const auto& grp : p.stages[id].groups) {
      for (int v : grp) hits += (v == X || v == Y);
    }
    CHECK(hits < 2);
  }
}

TEST_CASE("window pass: off when the window or the stream count is 1", "[algorithms][window]") {
  std::unique_ptr<CostModel> cost = h200();
  Graph g = build_model("demo", {1, 15, 15});
  for (auto [w, k] : {std::pair{1, 4}, {4, 1}}) {
    SchedulerOptions opt;
    opt.window = w;
    opt.max_streams = k;
    Schedule s = schedule_hios_lp(g, *cost, opt);
    CHECK(s.meta.params["window_merges"].get<int>() == 0);
    for (const auto& per_gpu : s.blocks) {
      for (const Stage& st : per_gpu[0]) CHECK(st.groups.size() == 1);
    }
  }
  // On demo's three parallel convs the window does merge.
  SchedulerOptions opt;
  Schedule s = schedule_hios_lp(g, *cost, opt);
  CHECK(s.meta.params["window_merges"].get<int>() > 0);
  CHECK(s.meta.predicted_ms < schedule_sequential(g, *cost, opt).meta.predicted_ms);
}

TEST_CASE("lower bound: the critical path on many GPUs, the work on one", "[algorithms]") {
  std::unique_ptr<CostModel> cost = h200();
  Graph g = build_model("inception_v3", {1, 96, 96});
  std::vector<double> w(g.size(), 0.0);
  double work = 0;
  for (int v = 1; v < g.size(); ++v) work += (w[v] = cost->node_ms(g, v, 0));
  double cp = longest_path(Dag::from_graph(g), [&](int v) { return w[v]; }).length;
  // With 64 GPUs the work term is tiny, so the bound is the critical path.
  CHECK(lower_bound_ms(g, *cost, 64) == Approx(cp));
  // On one GPU the bound lies between the critical path and the plain sum of node times.
  double one = lower_bound_ms(g, *cost, 1);
  CHECK(one >= cp);
  CHECK(one <= work * (1 + 1e-12));
  CHECK(lower_bound_ms(g, *cost, 2) <= one);
}

TEST_CASE("algorithms: bad names and options are one-line errors naming the culprit", "[algorithms]") {
  std::unique_ptr<CostModel> cost = h200();
  Graph g = build_model("demo", {1, 15, 15});
  SchedulerOptions opt;
  std::string e = error_of([&] { run_algorithm("fastest", g, *cost, opt); });
  CHECK(contains(e, "unknown algorithm 'fastest'"));
  CHECK(contains(e, "hios-lp"));
  opt.num_gpus = 0;
  CHECK(contains(error_of([&] { run_algorithm("heft", g, *cost, opt); }), "gpus"));
  opt.num_gpus = 2;
  opt.max_streams = 0;
  CHECK(contains(error_of([&] { run_algorithm("greedy", g, *cost, opt); }), "streams"));
  opt.max_streams = 4;
  opt.ios_max_group = 0;
  CHECK(contains(error_of([&] { run_algorithm("ios", g, *cost, opt); }), "ios-r"));
  CHECK(e.find('\n') == std::string::npos);
}
