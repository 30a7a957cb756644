// Shared by the executor tests: small graphs and schedules, and an in-process replay of a whole
// job (every rank's program on its own CPU backend, tensors moved through in-memory queues).
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "executor/backend.hpp"
#include "executor/program.hpp"
#include "executor/registry.hpp"
#include "graph/error.hpp"
#include "models/models.hpp"
#include "scheduler/algorithms.hpp"
#include "scheduler/cost_model.hpp"

namespace hios::test {

// The executor tests need traffic between ranks, so the multi-GPU mapping is kept even where
// the scheduler would predict one GPU to be faster on these small graphs.
inline Schedule schedule_with(const std::string& algo, const Graph& g, int gpus) {
  auto cost = make_analytic_cost_model(find_device_preset("h200"));
  SchedulerOptions opt;
  opt.num_gpus = gpus;
  opt.single_gpu_fallback = false;
  return run_algorithm(algo, g, *cost, opt);
}

// Runs every rank's program in one process, one instruction at a time, round robin; a Recv
// whose message has not been sent yet blocks that rank (sends never block), exactly like the
// CPU backend with mpi-host. Returns the rank-0 backend; throws if the job deadlocks.
struct LocalJob {
  std::vector<exec::RankProgram> programs;
  std::vector<std::unique_ptr<exec::Backend>> backends;
  std::vector<std::string> trace;  // "r<rank>:<instr index>" in execution order

  LocalJob(const Graph& g, const Schedule& s, const exec::BackendConfig& cfg = exec::BackendConfig{})
      : programs(exec::lower_all(g, s)) {
    for (const exec::RankProgram& p : programs) {
      backends.push_back(exec::make_backend("cpu", cfg));
      backends.back()->prepare(g, p);
    }
  }

  void run(const std::vector<float>& input) {
    backends[0]->set_input(input);
    const size_t n = programs.size();
    std::map<std::pair<int, int>, std::deque<std::pair<int, std::vector<float>>>> queue;  // (src, dst)
    std::vector<size_t> pc(n, 0);
    for (;;) {
      bool progress = false, done = true;
      for (size_t r = 0; r < n; ++r) {
        const auto& instrs = programs[r].instrs;
        exec::Backend& b = *backends[r];
        while (pc[r] < instrs.size()) {
          const exec::Instr& in = instrs[pc[r]];
          if (in.kind == exec::InstrKind::Recv) {
            auto& q = queue[{in.peer, int(r)}];
            if (q.empty()) break;  // blocked
            HIOS_CHECK(q.front().first == in.node, "rank %zu expected tensor #%d from rank %d but got #%d", r, in.node,
                       in.peer, q.front().first);
            b.copy_from_host(in.node, q.front().second.data(), in.stream);
            q.pop_front();
          } else if (in.kind == exec::InstrKind::Send) {
            queue[{int(r), in.peer}].push_back({in.node, b.read_tensor(in.node)});
          } else if (in.kind == exec::InstrKind::Launch) {
            b.launch(in.node, in.stream);
          } else if (in.kind == exec::InstrKind::Record) {
            b.record(in.event, in.stream);
          } else if (in.kind == exec::InstrKind::Wait) {
            b.wait(in.event, in.stream);
          }
          trace.push_back("r" + std::to_string(r) + ":" + std::to_string(pc[r]));
          ++pc[r];
          progress = true;
        }
        if (pc[r] < instrs.size()) done = false;
      }
      if (done) break;
      HIOS_CHECK(progress, "the job deadlocked: no rank can make progress");
    }
    for (const auto& [pair, q] : queue) {
      HIOS_CHECK(q.empty(), "%zu message(s) from rank %d to rank %d were never received", q.size(), pair.first,
                 pair.second);
    }
  }
};

}  // namespace hios::test
