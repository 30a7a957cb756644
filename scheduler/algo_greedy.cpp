// "greedy": IOS's greedy baseline. Per block, on GPU 0, every node whose producers have run
// goes into the next stage, one group each, at most max_streams of them (lowest index first).
#include <chrono>

#include "scheduler/algorithms.hpp"

namespace hios {

Schedule schedule_greedy(const Graph& g, const CostModel& cost, const SchedulerOptions& opt) {
  validate_options(opt);
  auto t0 = std::chrono::steady_clock::now();
  Plan p;
  p.num_gpus = opt.num_gpus;
  p.gpu_stages.assign(opt.num_gpus, {});
  for (size_t b = 0; b < g.blocks.size(); ++b) {
    for (auto& stage : greedy_stages(g, g.blocks[b].nodes, opt.max_streams)) {
      p.gpu_stages[0].push_back(p.add_stage(static_cast<int>(b), std::move(stage)));
    }
  }
  Schedule s = plan_to_schedule(g, p);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  finish_schedule(g, cost, opt, "greedy", json{{"streams", opt.max_streams}}, secs, s);
  return s;
}

}  // namespace hios
