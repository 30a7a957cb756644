// Scheduling algorithms. Each returns a schedule valid for any number of GPUs >= 1 (passing
// check_schedule), with meta.predicted_ms, meta.lower_bound_ms and meta.search_seconds filled
// in. docs/algorithms.md explains each one.
#pragma once

#include <string>
#include <vector>

#include "graph/graph.hpp"
#include "scheduler/cost_model.hpp"
#include "scheduler/schedule.hpp"

namespace hios {

struct SchedulerOptions {
  int num_gpus = 1;
  int max_streams = 4;   // k: most concurrent groups in one stage
  int window = 4;        // w: sliding-window size of the intra-GPU pass (hios-lp, hios-mr)
  int ios_max_group = 3; // IOS pruning r: most nodes in one group
  int ios_max_groups = 3;// IOS pruning s: most groups in one stage
};

// Every algorithm by name: "sequential", "greedy", "ios", "hios-lp", "hios-mr", "heft".
std::vector<std::string> algorithm_names();
Schedule run_algorithm(const std::string& name, const Graph& g, const CostModel& cost, const SchedulerOptions& opt);

Schedule schedule_sequential(const Graph& g, const CostModel& cost, const SchedulerOptions& opt);
Schedule schedule_greedy(const Graph& g, const CostModel& cost, const SchedulerOptions& opt);
Schedule schedule_ios(const Graph& g, const CostModel& cost, const SchedulerOptions& opt);
Schedule schedule_hios_lp(const Graph& g, const CostModel& cost, const SchedulerOptions& opt);
Schedule schedule_hios_mr(const Graph& g, const CostModel& cost, const SchedulerOptions& opt);
Schedule schedule_heft(const Graph& g, const CostModel& cost, const SchedulerOptions& opt);

// max(critical path with zero communication, total work / GPUs), each node at node_ms.
double lower_bound_ms(const Graph& g, const CostModel& cost, int num_gpus);

}  // namespace hios
