// "heft": classic HEFT list scheduling (Topcuoglu et al., 2002) for the GPUs, then streams.
//
// Pass A is plain HEFT with one processor per GPU: nodes are taken by decreasing upward rank
// (mean node_ms plus the heaviest path below, edges at mean transfer_ms) and placed on the GPU
// giving the earliest finish time, inserted into idle gaps. A producer's output reaches
// another GPU transfer_ms after it finishes.
//
// Pass B keeps pass A's GPU for every node and list-schedules again with max_streams
// processors (streams) per GPU, so that nodes of one GPU may overlap in time. Streams are
// optimistic there (a node on a stream is timed as if alone); the stage model corrects that
// when the plan is evaluated, and the plan of pass B is kept only if its evaluated latency is
// lower than pass A's (one node per stage).
//
// Stages: nodes are swept in (block, start time, index) order, a topological order. A node
// joins the open stage of its GPU when it overlaps that stage in time, is independent of all
// its members, is in the same block, and all its producers sit in stages opened earlier;
// otherwise it opens a new stage. Its group is its stream's group in that stage. Because every
// producer's stage was opened before its consumer's, the stage graph across GPUs is acyclic:
// the schedule cannot deadlock.
//
// Then, as for hios-lp and hios-mr (both on by default, see SchedulerOptions): the IOS
// packing of every GPU's share of every block (intra_gpu_pass), and the same passes with
// every node on GPU 0, returned when that is faster.
#include <algorithm>
#include <chrono>
#include <limits>

#include "graph/dag.hpp"
#include "graph/error.hpp"
#include "scheduler/algorithms.hpp"

namespace hios {

namespace {

struct ListResult {
  std::vector<int> proc_of;  // processor = gpu * streams + stream
  std::vector<double> start, finish;
  double makespan = 0;
};

// HEFT's processor selection over `streams` processors per GPU, nodes in `order`. With
// fixed_gpu non-empty every node stays on that GPU and only its stream is chosen.
ListResult list_schedule(const Graph& g, PlanEvaluator& ev, const std::vector<int>& order, int streams,
                         const std::vector<int>& fixed_gpu) {
  const int n = g.size();
  const int G = ev.num_gpus();
  const int P = G * streams;
  struct Slot {
    double start, end;
  };
  std::vector<std::vector<Slot>> busy(P);  // sorted by start
  ListResult r;
  r.proc_of.assign(n, 0);
  r.start.assign(n, 0.0);
  r.finish.assign(n, 0.0);
  const auto& preds = ev.preds();
  size_t done = 0;
  for (int v : order) {
    // Out of time: the remaining nodes go to the first processor their fixed GPU allows (GPU 0
    // when free), after everything already there, with no search for a gap.
    const bool hurry = ev.budget().expired("heft placement");
    if (!hurry) ev.budget().note("heft placement", strprintf("%zu of %zu nodes placed", done, order.size()));
    ++done;
    int best_p = -1;
    double best_start = 0, best_finish = std::numeric_limits<double>::infinity();
    for (int p = 0; p < P; ++p) {
      const int gpu = p / streams;
      if (!fixed_gpu.empty() && fixed_gpu[v] != gpu) continue;
      if (hurry && best_p >= 0) break;
      double ready = 0;
      for (int q : preds[v]) {
        int qg = q == 0 ? 0 : r.proc_of[q] / streams;
        ready = std::max(ready, r.finish[q] + ev.transfer_ms(q, qg, gpu));
      }
      const double dur = ev.node_ms(v, gpu);
      // Insertion: the first idle gap at or after `ready` long enough for the node.
      double t = ready;
      if (hurry && !busy[p].empty()) t = std::max(ready, busy[p].back().end);  // slots never overlap
      for (const Slot& s : busy[p]) {
        if (hurry) break;
        if (s.end <= t) continue;
        if (s.start >= t + dur) break;
        t = std::max(t, s.end);
      }
      if (t + dur < best_finish) {
        best_p = p;
        best_start = t;
        best_finish = t + dur;
      }
    }
    r.proc_of[v] = best_p;
    r.start[v] = best_start;
    r.finish[v] = best_finish;
    r.makespan = std::max(r.makespan, best_finish);
    auto& list = busy[best_p];
    Slot s{best_start, best_finish};
    list.insert(std::upper_bound(list.begin(), list.end(), s,
                                 [](const Slot& a, const Slot& b) { return a.start < b.start; }),
                s);
  }
  return r;
}

// Stages from a list schedule, as described at the top of the file.
Plan stages_from_list(const Graph& g, PlanEvaluator& ev, const ListResult& lr, int streams, BlockReachability& reach) {
  const int n = g.size();
  const int G = ev.num_gpus();
  const auto& preds = ev.preds();
  std::vector<int> sweep;
  for (int v = g.first_computed(); v < n; ++v) sweep.push_back(v);
  std::sort(sweep.begin(), sweep.end(), [&](int a, int b) {
    if (g.nodes[a].block != g.nodes[b].block) return g.nodes[a].block < g.nodes[b].block;
    if (lr.start[a] != lr.start[b]) return lr.start[a] < lr.start[b];
    return a < b;
  });
  Plan plan;
  plan.num_gpus = G;
  plan.gpu_stages.assign(G, {});
  struct Open {
    int stage = -1;  // index into plan.stages
    int seq = -1;    // opening order across all GPUs
    double span_end = 0;
    std::vector<int> members;
    std::vector<int> group_of_stream;  // per stream: group index in the stage, -1 if none
  };
  std::vector<Open> open(G);
  std::vector<int> seq_of(n, -1);  // the input counts as opened before everything
  int next_seq = 0;
  for (int v : sweep) {
    const int gpu = lr.proc_of[v] / streams, stream = lr.proc_of[v] % streams;
    Open& o = open[gpu];
    bool join = o.stage >= 0 && plan.stages[o.stage].block == g.nodes[v].block && lr.start[v] < o.span_end;
    for (size_t i = 0; join && i < o.members.size(); ++i) join = reach.independent(o.members[i], v);
    for (size_t i = 0; join && i < preds[v].size(); ++i) join = seq_of[preds[v][i]] < o.seq;
    if (!join) {
      if (o.stage >= 0) plan.gpu_stages[gpu].push_back(o.stage);
      o = Open{};
      o.stage = plan.add_stage(g.nodes[v].block, {});
      o.seq = next_seq++;
      o.group_of_stream.assign(streams, -1);
    }
    PlanStage& st = plan.stages[o.stage];
    if (o.group_of_stream[stream] < 0) {
      o.group_of_stream[stream] = static_cast<int>(st.groups.size());
      st.groups.push_back({});
    }
    st.groups[o.group_of_stream[stream]].push_back(v);
    o.members.push_back(v);
    o.span_end = std::max(o.span_end, lr.finish[v]);
    seq_of[v] = o.seq;
  }
  for (int gpu = 0; gpu < G; ++gpu) {
    if (open[gpu].stage >= 0) plan.gpu_stages[gpu].push_back(open[gpu].stage);
  }
  return plan;
}

}  // namespace

Schedule schedule_heft(const Graph& g, const CostModel& cost, const SchedulerOptions& opt) {
  validate_options(opt);
  auto t0 = std::chrono::steady_clock::now();
  const int n = g.size();
  const int K = opt.max_streams;
  const int G = opt.num_gpus;
  PlanEvaluator ev(g, cost, G, &opt);
  std::vector<double> node_w, edge_w;
  hios_weights(g, ev, node_w, edge_w);
  std::vector<double> rank = bottom_levels(g, node_w, edge_w);
  std::vector<int> order;
  for (int v = g.first_computed(); v < n; ++v) order.push_back(v);
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return rank[a] > rank[b] || (rank[a] == rank[b] && a < b); });
  BlockReachability reach(g);  // stages join nodes of one block only

  // Pass A (GPUs chosen unless fixed_gpu says), then pass B on its GPUs; the faster plan.
  struct Passes {
    Plan plan;
    ListResult a;
    double stream_makespan = 0;
    bool used_streams = false;
  };
  auto passes = [&](const std::vector<int>& fixed_gpu) {
    Passes r;
    r.a = list_schedule(g, ev, order, 1, fixed_gpu);
    r.plan = stages_from_list(g, ev, r.a, 1, reach);
    r.stream_makespan = r.a.makespan;
    if (K > 1) {
      std::vector<int> gpu_of(n, 0);
      for (int v = g.first_computed(); v < n; ++v) gpu_of[v] = r.a.proc_of[v];
      ListResult b = list_schedule(g, ev, order, K, gpu_of);
      r.stream_makespan = b.makespan;
      Plan pb = stages_from_list(g, ev, b, K, reach);
      if (ev.latency(pb) < ev.latency(r.plan)) {
        r.plan = std::move(pb);
        r.used_streams = true;
      }
    }
    return r;
  };
  auto intra = [&](Passes& r, IntraStats* is) {
    if (opt.intra_ios) r.plan = intra_gpu_pass(g, cost, ev, opt, r.plan, is);
  };

  Passes multi = passes({});
  const double own_ms = ev.latency(multi.plan);
  IntraStats is;
  intra(multi, &is);
  double best = ev.latency(multi.plan);
  Plan plan = std::move(multi.plan);
  json params = {{"streams", K},
                 {"gpu_makespan_ms", multi.a.makespan},
                 {"stream_makespan_ms", multi.stream_makespan},
                 {"used_streams", multi.used_streams},
                 {"intra_pass", opt.intra_ios ? "streams+ios" : "streams"},
                 {"heft_ms", own_ms}};
  if (opt.intra_ios) {
    params["intra_candidates"] = is.candidates;
    params["packed_segments"] = is.packed_segments;
    params["segments"] = is.segments;
    params["ios_states"] = is.ios.states;
    params["ios_capped_parts"] = static_cast<int>(is.ios.fallback.size());
  }
  params["multi_gpu_ms"] = best;
  std::string fallback = "none";
  // Not tried when the one-GPU lower bound already says it cannot be faster (it costs an IOS
  // run).
  const double single_bound = opt.single_gpu_fallback && G > 1 ? lower_bound_ms(g, cost, 1) : 0.0;
  if (opt.single_gpu_fallback && G > 1) params["single_gpu_bound_ms"] = single_bound;
  if (opt.single_gpu_fallback && G > 1 && single_bound < best && !ev.budget().expired("one-GPU fallback")) {
    Passes one = passes(std::vector<int>(n, 0));
    intra(one, nullptr);
    const double single = ev.latency(one.plan);
    params["single_gpu_ms"] = single;
    if (single < best) {
      best = single;
      plan = std::move(one.plan);
      fallback = "single-gpu";
    }
  }
  std::vector<int> per_gpu = plan_nodes_per_gpu(plan);
  params["nodes_per_gpu"] = per_gpu;
  params["used_gpus"] = static_cast<int>(std::count_if(per_gpu.begin(), per_gpu.end(), [](int c) { return c > 0; }));
  params["fallback"] = fallback;
  if (!ev.budget().cut().empty()) params["budget"] = {{"seconds", opt.time_budget_s}, {"cut", ev.budget().cut()}};

  Schedule s = plan_to_schedule(g, plan);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  finish_schedule(g, cost, opt, "heft", std::move(params), secs, s);
  return s;
}

}  // namespace hios
