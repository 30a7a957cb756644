// The cuda backend and the nccl transport driven by rank programs, as the executor's host loop
// drives them: one GPU with several streams, CUDA Graph capture against eager replay, the
// out-of-memory path, and a two-GPU NCCL schedule against one GPU (two threads, one rank each).
#include <algorithm>

#include "executor/program.hpp"
#include "graph/error.hpp"
#include "executor/registry.hpp"
#include "executor/weights.hpp"
#include "models/models.hpp"
#include "scheduler/algorithms.hpp"
#include "scheduler/cost_model.hpp"
#include "tests/catch.hpp"
#include "tests/gpu/gpu_util.hpp"

using namespace hios;

namespace {

Schedule make_schedule(const Graph& g, const std::string& algo, int gpus, int streams) {
  auto cost = make_analytic_cost_model(find_device_preset("h200"));
  SchedulerOptions opt;
  opt.num_gpus = gpus;
  opt.max_streams = streams;
  return run_algorithm(algo, g, *cost, opt);
}

cuda::InProcessOptions quick(const std::string& math) {
  cuda::InProcessOptions o;
  o.math = math;
  o.warmup = 1;
  o.iters = 2;
  return o;
}

}  // namespace

TEST_CASE("cuda backend runs multi-stream programs, captured and not", "[gpu][backend]") {
  if (cuda::device_count() < 1) HIOS_SKIP("no CUDA device visible");
  const Graph g = build_model("inception_v3", ModelParams{1, 75, 75});
  const std::vector<float> ref = gputest::cpu_forward(g)[size_t(g.output())];
  for (const char* algo : {"sequential", "ios", "greedy", "hios-lp"}) {
    const Schedule s = make_schedule(g, algo, 1, 4);
    const cuda::InProcessResult r = cuda::run_schedule_in_process(g, s, quick("tf32"));
    const gputest::Error e = gputest::compare(r.first_output, ref);
    WARN(algo << " (" << r.compute_streams << " compute streams): vs CPU " << e.str() << ", peak "
              << r.peak_bytes[0] / (1 << 20) << " MiB");
    CHECK(e.within(3e-2));
    // The first pass is issued eagerly, the last is a graph replay of the same plans: the
    // same bits.
    CHECK(r.output == r.first_output);
  }
}

TEST_CASE("cuda backend fails cleanly when out of memory", "[gpu][backend]") {
  if (cuda::device_count() < 1) HIOS_SKIP("no CUDA device visible");
  const Graph g = build_model("demo", ModelParams{1, 64, 64});
  const exec::RankProgram p = exec::lower(g, exec::sequential_schedule(g), 0);
  exec::BackendConfig cfg;
  cfg.device = 0;
  cfg.math = "tf32";
  cfg.memory_limit = 64 * 1024;  // less than one activation of this graph
  auto b = exec::make_backend("cuda", cfg);
  try {
    b->prepare(g, p);
    FAIL("prepare() succeeded under a 64 KiB memory limit");
  } catch (const hios::Error& e) {
    const std::string msg = e.what();
    INFO(msg);
    CHECK(msg.find("out of device memory") != std::string::npos);
    CHECK(msg.find("tensor '") != std::string::npos);
  }
}

TEST_CASE("a two-GPU NCCL schedule matches one GPU", "[gpu][backend][nccl]") {
  if (cuda::device_count() < 2) HIOS_SKIP("fewer than two CUDA devices visible");
  const std::vector<std::string> transports = exec::transport_names();
  if (std::find(transports.begin(), transports.end(), "nccl") == transports.end()) HIOS_SKIP("built without NCCL");
  for (const char* model : {"inception_v3", "nasnet_large"}) {
    const Graph g = build_model(model, ModelParams{1, 96, 96});
    // fp32 on both sides so that only the order of operations differs.
    const cuda::InProcessResult one = cuda::run_schedule_in_process(g, exec::sequential_schedule(g), quick("fp32"));
    const Schedule s = make_schedule(g, "hios-lp", 2, 4);
    const cuda::InProcessResult two = cuda::run_schedule_in_process(g, s, quick("fp32"));
    const gputest::Error e = gputest::compare(two.first_output, one.first_output);
    WARN(model << ": hios-lp on 2 GPUs (" << two.transfers << " transfers) vs 1 GPU: " << e.str());
    CHECK(two.transfers > 0);
    CHECK(e.within(1e-4));
    CHECK(two.output == two.first_output);
    cuda::InProcessOptions eager = quick("fp32");
    eager.cuda_graph = false;
    const cuda::InProcessResult two_eager = cuda::run_schedule_in_process(g, s, eager);
    CHECK(gputest::compare(two_eager.output, one.first_output).within(1e-4));
  }
}
