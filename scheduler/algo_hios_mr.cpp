// "hios-mr": HIOS's DP mapping. Nodes are visited in latest-start-time order; for every GPU g
// the DP keeps the best partial mapping whose latest node sits on g. Extending a mapping by
// node v on GPU t starts v when GPU t is free and every producer's output has arrived (its
// finish time plus transfer_ms when the producer sits on another GPU); among the G mappings
// to extend, the one giving the smallest partial makespan wins (then the earliest finish of v,
// then the lowest GPU). At the end the mapping whose output reaches GPU 0 first is kept, and
// the intra-GPU window pass, the IOS packing and the single-GPU candidate follow as in hios-lp.
#include <algorithm>
#include <limits>

#include "graph/error.hpp"
#include "scheduler/algorithms.hpp"

namespace hios {

namespace {

struct Partial {
  std::vector<int> gpu;
  std::vector<double> finish;
  std::vector<double> free_at;  // per GPU
  double makespan = 0;
};

}  // namespace

std::vector<int> hios_mr_placement(const Graph& g, PlanEvaluator& ev, const std::vector<int>& order) {
  const int n = g.size();
  const int G = ev.num_gpus();
  if (G == 1) return std::vector<int>(n, 0);
  std::vector<Partial> states(1);
  states[0].gpu.assign(n, 0);
  states[0].finish.assign(n, 0.0);
  states[0].free_at.assign(G, 0.0);
  const auto& preds = ev.preds();
  size_t done = 0;
  for (int v : order) {
    // Out of time: the nodes not visited yet stay on GPU 0 in every partial mapping.
    if (ev.budget().expired("hios-mr placement")) break;
    ev.budget().note("hios-mr placement", strprintf("%zu of %zu nodes placed", done, order.size()));
    ++done;
    std::vector<Partial> next(G);
    for (int t = 0; t < G; ++t) {
      int best = -1;
      double best_mk = 0, best_fin = 0;
      for (int s = 0; s < static_cast<int>(states.size()); ++s) {
        const Partial& ps = states[s];
        double start = ps.free_at[t];
        for (int q : preds[v]) {
          double arrive = ps.finish[q] + ev.transfer_ms(q, ps.gpu[q], t);
          start = std::max(start, arrive);
        }
        double fin = start + ev.node_ms(v, t);
        double mk = std::max(ps.makespan, fin);
        if (best < 0 || mk < best_mk || (mk == best_mk && fin < best_fin)) {
          best = s;
          best_mk = mk;
          best_fin = fin;
        }
      }
      next[t] = states[best];
      next[t].gpu[v] = t;
      next[t].finish[v] = best_fin;
      next[t].free_at[t] = best_fin;
      next[t].makespan = best_mk;
    }
    states = std::move(next);
  }
  const int out = g.output();
  int best = 0;
  double best_lat = std::numeric_limits<double>::infinity();
  for (int s = 0; s < static_cast<int>(states.size()); ++s) {
    const Partial& ps = states[s];
    double lat = std::max(ps.makespan, ps.finish[out] + ev.transfer_ms(out, ps.gpu[out], 0));
    if (lat < best_lat) {
      best_lat = lat;
      best = s;
    }
  }
  return states[best].gpu;
}

Schedule schedule_hios_mr(const Graph& g, const CostModel& cost, const SchedulerOptions& opt) {
  HiosVariant v;
  v.mr = true;
  v.window = opt.window > 1;
  v.intra_ios = opt.intra_ios;
  v.single_gpu = opt.single_gpu_fallback;
  return schedule_hios(g, cost, opt, v);
}

}  // namespace hios
