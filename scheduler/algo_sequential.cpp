// "sequential": the baseline every speed-up is measured against. One GPU, one stream, one node
// per stage, in the graph's topological (index) order.
#include <chrono>

#include "scheduler/algorithms.hpp"

namespace hios {

Schedule schedule_sequential(const Graph& g, const CostModel& cost, const SchedulerOptions& opt) {
  validate_options(opt);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<int> order, gpu_of(g.size(), 0);
  for (int v = g.first_computed(); v < g.size(); ++v) order.push_back(v);
  Plan p = plan_from_order(g, gpu_of, order, opt.num_gpus);
  Schedule s = plan_to_schedule(g, p);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  finish_schedule(g, cost, opt, "sequential", json::object(), secs, s);
  return s;
}

}  // namespace hios
