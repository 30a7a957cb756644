// run_schedule_in_process: every rank of a schedule as a thread of this process.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <cstdio>
#include <thread>

#include "executor/cuda/api.hpp"
#include "executor/cuda/check.hpp"
#include "executor/cuda/thread_comm.hpp"
#include "executor/memory_plan.hpp"
#include "executor/program.hpp"
#include "executor/registry.hpp"
#include "executor/weights.hpp"

namespace hios::cuda {

namespace {

void issue_pass(const exec::RankProgram& p, exec::Backend& b, exec::Transport* t) {
  for (const exec::Instr& in : p.instrs) {
    switch (in.kind) {
      case exec::InstrKind::Alloc: break;
      case exec::InstrKind::Launch: b.launch(in.node, in.stream); break;
      case exec::InstrKind::Record: b.record(in.event, in.stream); break;
      case exec::InstrKind::Wait: b.wait(in.event, in.stream); break;
      case exec::InstrKind::Send: t->send(in.node, in.peer, in.stream); break;
      case exec::InstrKind::Recv: t->recv(in.node, in.peer, in.stream); break;
      case exec::InstrKind::Gather: break;  // the output is on rank 0's stream 0 when the pass ends
    }
  }
  if (t) t->end_pass();
}

TimingResult summarise(std::vector<double> samples) {
  TimingResult r;
  r.samples_ms = samples;
  if (samples.empty()) return r;
  std::sort(samples.begin(), samples.end());
  r.min_ms = samples.front();
  r.max_ms = samples.back();
  const size_t n = samples.size();
  r.median_ms = n % 2 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
  return r;
}

}  // namespace

InProcessResult run_schedule_in_process(const Graph& g, const Schedule& s, const InProcessOptions& o) {
  InProcessResult res;
  std::vector<exec::RankProgram> progs = exec::lower_all(g, s);
  const int n = int(progs.size());
  for (exec::RankProgram& p : progs) {
    if (o.share_memory) exec::plan_and_check_shared_buffers(g, p);
    res.tensor_bytes.push_back(p.tensor_memory());
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
    const exec::RankProgram& p = progs[size_t(r)];
    exec::BackendConfig cfg;
    cfg.device = r;
    cfg.math = o.math;
    cfg.seed = o.seed;
    at("preparing the backend");
    std::unique_ptr<exec::Backend> b = exec::make_backend("cuda", cfg);
    b->prepare(g, p);
    std::unique_ptr<exec::Transport> t;
    if (n > 1) {
      at("setting up NCCL");
      t = exec::make_transport("nccl", comm, *b);
      t->prepare(g, p);
    }
    at("running the first (eager) pass");
    if (r == 0) b->set_input(exec::make_input(g, o.seed));
    comm.barrier();
    issue_pass(p, *b, t.get());
    b->synchronize();
    comm.barrier();
    if (r == 0) res.first_output = b->read_tensor(p.output);
    at(o.cuda_graph ? "capturing a pass" : "timing passes");
    if (o.cuda_graph) {
      b->begin_capture();
      issue_pass(p, *b, t.get());
      b->end_capture();
      at("timing passes");
    }
    auto pass = [&] {
      if (o.cuda_graph) {
        b->replay();
        if (t) t->end_pass();
      } else {
        issue_pass(p, *b, t.get());
      }
    };
    cudaStream_t st = static_cast<cudaStream_t>(b->native_stream(0));
    cudaEvent_t start = nullptr, stop = nullptr;
    HIOS_CUDA_CHECK(cudaEventCreate(&start));
    HIOS_CUDA_CHECK(cudaEventCreate(&stop));
    for (int i = 0; i < o.warmup + o.iters; ++i) {
      comm.barrier();  // every rank starts its pass together, as after the runner's barrier
      if (r == 0) HIOS_CUDA_CHECK(cudaEventRecord(start, st));
      pass();
      if (r == 0) HIOS_CUDA_CHECK(cudaEventRecord(stop, st));
      b->synchronize();
      if (r == 0 && i >= o.warmup) {
        float ms = 0;
        HIOS_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
        samples.push_back(double(ms));
      }
    }
    comm.barrier();
    (void)cudaEventDestroy(start);
    (void)cudaEventDestroy(stop);
    if (r == 0) res.output = b->read_tensor(p.output);
    res.peak_bytes[size_t(r)] = b->peak_memory_bytes();
    at("tearing down");
    b->release_capture();  // before the transport: ncclCommDestroy waits for graphs holding the comm
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
  std::mutex mu;
  std::condition_variable cv;
  bool finished = false;
  std::thread watchdog;
  if (o.timeout_s > 0) {
    watchdog = std::thread([&] {
      std::unique_lock<std::mutex> lock(mu);
      if (cv.wait_for(lock, std::chrono::duration<double>(o.timeout_s), [&] { return finished; })) return;
      for (int r = 0; r < n; ++r) {
        std::fprintf(stderr, "hios: error: in-process run of '%s' timed out after %.0f s; rank %d (GPU %d) was %s\n",
                     g.name.c_str(), o.timeout_s, r, r, phase[size_t(r)].load());
      }
      std::fflush(stderr);
      std::_Exit(3);
    });
  }
  auto stop_watchdog = [&] {
    {
      std::lock_guard<std::mutex> lock(mu);
      finished = true;
    }
    cv.notify_all();
    if (watchdog.joinable()) watchdog.join();
  };
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
  res.timing = summarise(samples);
  return res;
}

}  // namespace hios::cuda
