// Shared by the executor tests: small graphs and schedules, and an in-process replay of a whole
// job (every rank's program on its own CPU backend, tensors moved through in-memory queues).
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "executor/backend.hpp"
#include "executor/memory_plan.hpp"
#include "executor/program.hpp"
#include "executor/registry.hpp"
#include "graph/error.hpp"
#include "models/models.hpp"
#include "scheduler/algorithms.hpp"
#include "scheduler/cost_model.hpp"
#include "tests/test_util.hpp"

namespace hios::test {

// The executor tests need traffic between ranks, so the multi-GPU mapping is kept even where
// the scheduler would predict one GPU to be faster on these small graphs.
inline Schedule schedule_with(const std::string& algo, const Graph& g, int gpus) {
  auto cost = make_analytic_cost_model(test_device_preset());
  SchedulerOptions opt;
  opt.num_gpus = gpus;
  opt.single_gpu_fallback = false;
  return run_algorithm(algo, g, *cost, opt);
}

// Walks one rank program's instructions in one of the orders a GPU could run its streams in:
// at every step a random stream whose next instruction may start (a Wait only once its event
// is recorded), handed to `step`; a false from `step` stops the walk. Returns whether every
// stream ran to its end.
inline bool interleave(const exec::RankProgram& p, uint32_t seed, const std::function<bool(const exec::Instr&)>& step) {
  std::vector<std::vector<const exec::Instr*>> queue(p.streams.size());
  for (const exec::Instr& in : p.instrs) {
    if (in.kind != exec::InstrKind::Alloc) queue[size_t(in.stream)].push_back(&in);
  }
  std::vector<size_t> head(queue.size(), 0);
  std::vector<char> recorded(size_t(p.num_events), 0);
  std::mt19937 rng(seed);
  for (;;) {
    std::vector<size_t> ready;
    for (size_t s = 0; s < queue.size(); ++s) {
      if (head[s] == queue[s].size()) continue;
      const exec::Instr& in = *queue[s][head[s]];
      if (in.kind != exec::InstrKind::Wait || recorded[size_t(in.event)]) ready.push_back(s);
    }
    if (ready.empty()) break;
    const size_t s = ready[std::uniform_int_distribution<size_t>(0, ready.size() - 1)(rng)];
    const exec::Instr& in = *queue[s][head[s]++];
    if (in.kind == exec::InstrKind::Record) recorded[size_t(in.event)] = 1;
    if (!step(in)) return false;
  }
  for (size_t s = 0; s < queue.size(); ++s) {
    if (head[s] != queue[s].size()) return false;
  }
  return true;
}

// Runs every rank's program in one process, one instruction at a time, round robin; a Recv
// whose message has not been sent yet blocks that rank (sends never block), exactly like the
// CPU backend with mpi-host. Returns the rank-0 backend; throws if the job deadlocks.
//
// With `rendezvous`, a send is a non-blocking send whose data is read from the sender's buffer
// only when the receiver takes it (as MPI may do for a large message), and a wait on an event
// recorded on a send stream after n sends blocks until the receiver has taken those n: a send
// fence waiting too early deadlocks, and a shared buffer reused before its send completes
// corrupts what the receiver gets. With `shared`, every program gets its shared memory plan.
struct LocalJob {
  std::vector<exec::RankProgram> programs;
  std::vector<std::unique_ptr<exec::Backend>> backends;
  std::vector<std::string> trace;  // "r<rank>:<instr index>" in execution order
  bool rendezvous = false;

  LocalJob(const Graph& g, const Schedule& s, const exec::BackendConfig& cfg = exec::BackendConfig{},
           bool shared = false, bool rendezvous_sends = false)
      : programs(exec::lower_all(g, s)), rendezvous(rendezvous_sends) {
    for (exec::RankProgram& p : programs) {
      if (shared) exec::plan_and_check_shared_buffers(g, p);
    }
    for (const exec::RankProgram& p : programs) {
      backends.push_back(exec::make_backend("cpu", cfg));
      backends.back()->prepare(g, p);
    }
  }

  void run(const std::vector<float>& input) {
    backends[0]->set_input(input);
    const size_t n = programs.size();
    std::map<std::pair<int, int>, std::deque<std::pair<int, std::vector<float>>>> queue;  // (src, dst)
    std::map<std::pair<int, int>, int> sent, taken;                // (src, dst) -> messages
    std::vector<std::map<int, std::pair<int, int>>> fence(n);      // per rank: event -> (dst, sends)
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
            if (rendezvous) {
              const std::vector<float> data = backends[size_t(in.peer)]->read_tensor(in.node);
              b.copy_from_host(in.node, data.data(), in.stream);
            } else {
              b.copy_from_host(in.node, q.front().second.data(), in.stream);
            }
            q.pop_front();
            ++taken[{in.peer, int(r)}];
          } else if (in.kind == exec::InstrKind::Send) {
            queue[{int(r), in.peer}].push_back({in.node, rendezvous ? std::vector<float>() : b.read_tensor(in.node)});
            ++sent[{int(r), in.peer}];
          } else if (in.kind == exec::InstrKind::Launch) {
            b.launch(in.node, in.stream);
          } else if (in.kind == exec::InstrKind::Record) {
            const exec::StreamDesc& sd = programs[r].streams[size_t(in.stream)];
            if (sd.kind == exec::StreamKind::Send) fence[r][in.event] = {sd.peer, sent[{int(r), sd.peer}]};
            b.record(in.event, in.stream);
          } else if (in.kind == exec::InstrKind::Wait) {
            auto f = fence[r].find(in.event);
            if (rendezvous && f != fence[r].end() && taken[{int(r), f->second.first}] < f->second.second) break;
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
