// run_schedule_in_process: every rank of a schedule as a thread of this process.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "executor/memory_plan.hpp"
#include "executor/program.hpp"
#include "executor/registry.hpp"
#include "executor/session.hpp"
#include "executor/watchdog.hpp"
#include "executor/weights.hpp"
#include "graph/error.hpp"
#include "inprocess/inprocess.hpp"
#include "inprocess/thread_comm.hpp"

namespace hios::cuda {

InProcessResult run_schedule_in_process(const Graph& g, const Schedule& s, const InProcessOptions& o) {
  InProcessResult res;
  std::vector<exec::RankProgram> progs = exec::lower_all(g, s, o.launch_order);
  const int n = int(progs.size());
  for (exec::RankProgram& p : progs) {
    if (o.share_memory) exec::plan_and_check_shared_buffers(g, p, exec::memory_plan_options(o.layout, g));
    res.tensor_bytes.push_back(p.tensor_memory());
    const exec::RowsCopies rows = exec::rows_copies(g, p);
    res.rows_launched += rows.launched;
    res.rows_in_place += rows.in_place;
  }
  HIOS_CHECK(device_count() >= n, "the schedule needs %d GPUs, this process sees %d", n, device_count());
  res.peak_bytes.assign(size_t(n), 0);
  for (const exec::RankProgram& p : progs) {
    res.compute_streams = std::max(res.compute_streams, p.num_compute_streams);
    for (const exec::Instr& in : p.instrs) res.transfers += in.kind == exec::InstrKind::Send;
  }
  ThreadComm::Shared shared(n);
  std::vector<double> samples;
  // What each rank is doing, for the watchdog's message.
  std::vector<std::atomic<const char*>> phase(static_cast<size_t>(n));
  for (auto& ph : phase) ph = "starting";

  auto rank_main = [&](int r) {
    auto at = [&](const char* what) { phase[size_t(r)] = what; };
    ThreadComm comm(shared, r);
    exec::SessionOptions so;
    so.backend = "cuda";
    so.transport = o.transport;
    so.device = r;
    so.math = o.math;
    so.layout = o.layout;
    so.fold_relu = o.fold_relu;
    so.seed = o.seed;
    at("preparing the backend and the transport");
    exec::RankSession session(g, so, comm);
    session.load(progs[size_t(r)]);
    if (r == 0) res.transport = session.transport_name();
    at("running the first (eager) pass");
    if (r == 0) session.backend().set_input(exec::make_input(g, o.seed));
    comm.barrier();
    session.pass();
    comm.barrier();
    if (r == 0) res.first_output = session.backend().read_tensor(g.output());
    if (o.cuda_graph) {
      at("capturing a pass");
      session.capture();
    }
    at("timing passes");
    // Every rank starts each pass together, as after the runner's barrier; rank 0's stream 0
    // brackets the pass, which starts and ends there.
    std::vector<double> ms = session.timed_passes(o.warmup + o.iters, exec::PassClock::Device);
    comm.barrier();
    if (r == 0) {
      samples.assign(ms.begin() + std::min<ptrdiff_t>(o.warmup, ptrdiff_t(ms.size())), ms.end());
      res.output = session.backend().read_tensor(g.output());
    }
    res.peak_bytes[size_t(r)] = session.backend().peak_memory_bytes();
    at("tearing down");
    comm.barrier();  // NCCL teardown waits for every rank
    at("done");
  };

  // A rank that fails leaves the others blocked in a barrier or inside NCCL, exactly as under
  // mpirun; like MPI_Abort, end the process with the failing rank's message.
  auto guarded = [&](int r) {
    try {
      rank_main(r);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "hios: error: rank %d (GPU %d): %s\n", r, r, e.what());
      std::fflush(stderr);
      std::_Exit(2);
    }
  };
  exec::Watchdog watchdog(o.timeout_s, [&] {
    for (int r = 0; r < n; ++r) {
      std::fprintf(stderr, "hios: error: in-process run of '%s' timed out after %.0f s; rank %d (GPU %d) was %s\n",
                   g.name.c_str(), o.timeout_s, r, r, phase[size_t(r)].load());
    }
    std::fflush(stderr);
    std::_Exit(3);
  });
  auto stop_watchdog = [&] { watchdog.stop(); };
  try {
    if (n == 1) {
      rank_main(0);  // one rank: exceptions reach the caller
    } else {
      std::vector<std::thread> threads;
      for (int r = 0; r < n; ++r) threads.emplace_back(guarded, r);
      for (std::thread& th : threads) th.join();
    }
  } catch (...) {
    stop_watchdog();
    throw;
  }
  stop_watchdog();
  res.timing = summarise_ms(samples);
  return res;
}

}  // namespace hios::cuda
