// "hios-lp": HIOS (Kundu & Shu, Cluster 2023) with the inter-GPU iterative longest path.
//
// Phase 1 places whole paths: take the longest path through the nodes not yet placed (node
// weights: mean node_ms; edge weights: mean transfer_ms of the producer's output, since the
// endpoints of a not-yet-placed edge may land on different GPUs), try it on every GPU, keep the
// GPU with the lowest evaluated latency (ties: the GPU where the path ends first), mark its
// nodes placed, and repeat until every node is placed. Each GPU runs its nodes one per stage in
// latest-start-time order. Phase 2 is the intra-GPU sliding window (window_pass in
// algo_common.cpp).
//
// Not HIOS's reference code in three ways (docs/algorithms.md, "hios-lp"): a candidate is timed
// on the whole graph with the unplaced nodes on GPU 0 (HIOS times only the placed nodes), a path
// removes its nodes (HIOS removes its edges, so a node may be placed by several paths), and ties
// go to the earliest path end (HIOS keeps the last GPU).
//
// `hios schedule --algo hios-lp` then runs two steps of ours (both on by default, see
// SchedulerOptions): the IOS packing of every GPU's share of every block (intra_gpu_pass),
// and the same pipeline with every node on GPU 0, returned when it is faster.
#include <algorithm>
#include <chrono>
#include <limits>

#include "graph/dag.hpp"
#include "graph/error.hpp"
#include "scheduler/algorithms.hpp"

namespace hios {

std::vector<int> hios_lp_placement(const Graph& g, PlanEvaluator& ev, const std::vector<int>& order, int* paths) {
  const int n = g.size();
  const int G = ev.num_gpus();
  std::vector<int> gpu_of(n, 0);
  if (paths) *paths = 0;
  if (G == 1) return gpu_of;
  std::vector<double> node_w, edge_w;
  hios_weights(g, ev, node_w, edge_w);
  Dag d = Dag::from_graph(g);
  std::vector<char> active(n, 1);
  active[0] = 0;  // the input is resident on GPU 0
  int left = n - 1;

  // One single-node stage per node; candidates only reshuffle the per-GPU lists.
  Plan p;
  p.num_gpus = G;
  p.gpu_stages.assign(G, {});
  std::vector<int> stage_of(n, -1);
  for (int v : order) stage_of[v] = p.add_stage(g.nodes[v].block, {{v}});
  auto rebuild = [&]() {
    for (auto& l : p.gpu_stages) l.clear();
    for (int v : order) p.gpu_stages[gpu_of[v]].push_back(stage_of[v]);
  };

  int count = 0;
  while (left > 0) {
    // Out of time: the nodes not placed yet stay on GPU 0, where every candidate left them.
    if (ev.budget().expired("hios-lp placement")) break;
    ev.budget().note("hios-lp placement", strprintf("%d of %d nodes placed, %d paths", n - 1 - left, n - 1, count));
    PathResult path = longest_path(
        d, [&](int v) { return node_w[v]; }, [&](int u, int) { return edge_w[u]; }, active);
    if (path.nodes.empty()) break;
    if (paths) ++*paths;
    ++count;
    // Lowest latency wins; among equal latencies (common while the unplaced nodes on GPU 0 are
    // the bottleneck) the GPU where the path itself ends first, then the lowest index.
    int best_gpu = 0;
    double best = std::numeric_limits<double>::infinity(), best_end = best;
    for (int r = 0; r < G; ++r) {
      for (int v : path.nodes) gpu_of[v] = r;
      rebuild();
      double lat = ev.latency(p);
      double end = ev.end_ms(path.nodes.back());
      if (lat < best || (lat == best && end < best_end)) {
        best = lat;
        best_end = end;
        best_gpu = r;
      }
    }
    for (int v : path.nodes) {
      gpu_of[v] = best_gpu;
      active[v] = 0;
    }
    left -= static_cast<int>(path.nodes.size());
  }
  return gpu_of;
}

Schedule schedule_hios(const Graph& g, const CostModel& cost, const SchedulerOptions& opt, const HiosVariant& var) {
  validate_options(opt);
  auto t0 = std::chrono::steady_clock::now();
  const int G = opt.num_gpus;
  PlanEvaluator ev(g, cost, G, &opt);
  std::vector<double> node_w, edge_w;
  hios_weights(g, ev, node_w, edge_w);
  // Latest-start-time order on the model graph (every edge weighted, as HIOS computes it):
  // the per-GPU run order and the window pass's visiting order.
  std::vector<int> order = priority_order(g, bottom_levels(g, node_w, edge_w));
  int paths = 0;
  std::vector<int> gpu_of = var.mr ? hios_mr_placement(g, ev, order) : hios_lp_placement(g, ev, order, &paths);
  Plan p = plan_from_order(g, gpu_of, order, G);
  const double phase1 = ev.latency(p);
  WindowStats ws;
  if (var.window) ws = window_pass(g, ev, p, order, opt.window, opt.max_streams);
  json params = {{"window", var.window ? opt.window : 0},
                 {"streams", opt.max_streams},
                 {"phase1_ms", phase1},
                 {"window_merges", ws.merges},
                 {"window_candidates", ws.candidates},
                 {"window_deadlocks_rejected", ws.rejected_deadlock}};
  if (!var.mr) params["paths"] = paths;
  params["intra_pass"] = std::string(var.window ? "window" : "none") + (var.intra_ios ? "+ios" : "");
  params["window_ms"] = ev.latency(p);  // phase1_ms when the window is off
  // Row splits suggest a mapping (gpu_hint, part k on GPU k mod G), usually the best one: it
  // goes through the IOS pass first. That pass is the costliest phase (tens of seconds on a
  // split nasnet_large at 2048) and gains at most a few percent over a window plan (0 to 8% on
  // inception_v3, nasnet_large and randwire, one and two GPUs), so a mapping whose window plan
  // is kIntraGainBound times slower than the best plan so far is not given it. With a bound of
  // 1.25 and the own mapping first, a split nasnet_large at 2048 (two H200s' measured costs)
  // spent about 25 s on the own mapping's pass, which gained nothing, and the suggested mapping
  // won by 14%.
  constexpr double kIntraGainBound = 1.10;
  // Another mapping's plan in the same order, through the same window pass.
  auto windowed_plan = [&](const std::vector<int>& mapping) {
    Plan q = plan_from_order(g, mapping, order, G);
    if (var.window) window_pass(g, ev, q, order, opt.window, opt.max_streams);
    return q;
  };
  const bool hinted = G > 1 && int(opt.gpu_hint.size()) == g.size() && !ev.budget().expired("suggested mapping");
  Plan hinted_plan;
  double hinted_ms = std::numeric_limits<double>::infinity();  // after its IOS pass
  if (hinted) {
    std::vector<int> mapping = gpu_of;
    for (int v = 0; v < g.size(); ++v) {
      if (opt.gpu_hint[size_t(v)] >= 0) mapping[size_t(v)] = opt.gpu_hint[size_t(v)] % G;
    }
    hinted_plan = windowed_plan(mapping);
    if (var.intra_ios) hinted_plan = intra_gpu_pass(g, cost, ev, opt, hinted_plan);
    hinted_ms = ev.latency(hinted_plan);
  }
  std::vector<std::string> ios_skipped;  // mappings whose window plan was too slow for the IOS pass
  auto worth_ios = [&](double window_ms, double best_ms, const char* name) {
    if (window_ms <= kIntraGainBound * best_ms) return true;
    ios_skipped.push_back(name);
    return false;
  };
  if (var.intra_ios && worth_ios(ev.latency(p), hinted_ms, "own")) {
    IntraStats is;
    p = intra_gpu_pass(g, cost, ev, opt, p, &is);
    params["packed_segments"] = is.packed_segments;
    params["segments"] = is.segments;
    params["intra_candidates"] = is.candidates;
    params["ios_states"] = is.ios.states;
    params["ios_capped_parts"] = static_cast<int>(is.ios.fallback.size());
  }
  double best = ev.latency(p);
  params["multi_gpu_ms"] = best;
  std::string fallback = "none";
  // An alternative mapping's plan after the window pass, through the IOS pass where worth it
  // (the suggested mapping's has been through it already), kept when evaluated faster; its
  // latency goes to params[key] and its name to params.fallback.
  auto try_plan = [&](Plan q, const char* key, const char* name, bool ios_done = false) {
    if (var.intra_ios && !ios_done && worth_ios(ev.latency(q), best, name)) q = intra_gpu_pass(g, cost, ev, opt, q);
    const double ms = ev.latency(q);
    params[key] = ms;
    if (ms < best) {
      best = ms;
      p = std::move(q);
      fallback = name;
    }
  };
  if (hinted) try_plan(std::move(hinted_plan), "suggested_mapping_ms", "suggested-mapping", true);
  // Everything on GPU 0, in the same order, through the same intra-GPU passes; not tried
  // when the one-GPU lower bound already says it cannot be faster (it costs an IOS run).
  const double single_bound = var.single_gpu && G > 1 ? lower_bound_ms(g, cost, 1) : 0.0;
  if (var.single_gpu && G > 1) params["single_gpu_bound_ms"] = single_bound;
  if (var.single_gpu && G > 1 && single_bound < best && !ev.budget().expired("one-GPU fallback")) {
    try_plan(windowed_plan(std::vector<int>(g.size(), 0)), "single_gpu_ms", "single-gpu");
  }
  if (!ios_skipped.empty()) params["ios_skipped"] = ios_skipped;
  std::vector<int> per_gpu = plan_nodes_per_gpu(p);
  params["nodes_per_gpu"] = per_gpu;
  params["used_gpus"] = static_cast<int>(std::count_if(per_gpu.begin(), per_gpu.end(), [](int c) { return c > 0; }));
  params["fallback"] = fallback;
  params["evaluations"] = ev.evaluations();
  if (!ev.budget().cut().empty()) params["budget"] = {{"seconds", opt.time_budget_s}, {"cut", ev.budget().cut()}};
  Schedule s = plan_to_schedule(g, p);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  finish_schedule(g, cost, opt, var.mr ? "hios-mr" : "hios-lp", std::move(params), secs, s);
  return s;
}

Schedule schedule_hios(const Graph& g, const CostModel& cost, const SchedulerOptions& opt, bool mr, bool with_window) {
  HiosVariant v;
  v.mr = mr;
  v.window = with_window;
  return schedule_hios(g, cost, opt, v);
}

Schedule schedule_hios_lp(const Graph& g, const CostModel& cost, const SchedulerOptions& opt) {
  HiosVariant v;
  v.window = opt.window > 1;
  v.intra_ios = opt.intra_ios;
  v.single_gpu = opt.single_gpu_fallback;
  return schedule_hios(g, cost, opt, v);
}

}  // namespace hios
