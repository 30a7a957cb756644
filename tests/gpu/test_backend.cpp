// The cuda backend and the nccl transport driven by rank programs, as the executor's host loop
// drives them: one GPU with several streams, CUDA Graph capture against eager replay, the
// out-of-memory path, and a two-GPU NCCL schedule against one GPU (two threads, one rank each).
#include <cuda_runtime_api.h>

#include <algorithm>

#include "executor/program.hpp"
#include "graph/error.hpp"
#include "executor/registry.hpp"
#include "executor/weights.hpp"
#include "graph/row_split.hpp"
#include "scheduler/spatial.hpp"
#include "models/models.hpp"
#include "scheduler/algorithms.hpp"
#include "scheduler/cost_model.hpp"
#include "tests/catch.hpp"
#include "tests/gpu/gpu_util.hpp"
#include "tests/test_util.hpp"

using namespace hios;

namespace {

Schedule make_schedule(const Graph& g, const std::string& algo, int gpus, int streams) {
  auto cost = make_analytic_cost_model(test::test_device_preset());
  SchedulerOptions opt;
  opt.num_gpus = gpus;
  opt.max_streams = streams;
  // The tests need every GPU they ask for (traffic between them), even where the scheduler
  // would predict one GPU to be faster on these small inputs.
  opt.single_gpu_fallback = false;
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

TEST_CASE("multi-stream programs in a shared arena match separate buffers, in less memory", "[gpu][backend]") {
  if (cuda::device_count() < 1) HIOS_SKIP("no CUDA device visible");
  for (const char* model : {"inception_v3", "nasnet_large"}) {
    const Graph g = build_model(model, ModelParams{1, 128, 128});
    const Schedule s = make_schedule(g, "hios-lp", 1, 4);
    cuda::InProcessOptions separate = quick("fp32");
    separate.share_memory = false;
    const cuda::InProcessResult own = cuda::run_schedule_in_process(g, s, separate);
    const cuda::InProcessResult shared = cuda::run_schedule_in_process(g, s, quick("fp32"));
    const gputest::Error e = gputest::compare(shared.output, own.output);
    WARN(model << " hios-lp, " << shared.compute_streams << " streams: tensors " << own.tensor_bytes[0] / (1 << 20)
               << " MiB separate, " << shared.tensor_bytes[0] / (1 << 20) << " MiB shared; peak "
               << own.peak_bytes[0] / (1 << 20) << " -> " << shared.peak_bytes[0] / (1 << 20) << " MiB; " << e.str());
    CHECK(shared.compute_streams > 1);
    // Same kernels on the same data: any difference is a tensor overwritten while still live.
    CHECK(e.within(1e-6));
    CHECK(shared.first_output == shared.output);
    CHECK(shared.tensor_bytes[0] * 2 < own.tensor_bytes[0]);
    CHECK(shared.peak_bytes[0] < own.peak_bytes[0]);
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
    // Two link lanes: a communicator and a pair of comm streams per lane, captured and eager.
    Schedule laned = s;
    laned.meta.link_lanes = 2;
    for (bool graph : {true, false}) {
      cuda::InProcessOptions o = quick("fp32");
      o.cuda_graph = graph;
      const cuda::InProcessResult two_lanes = cuda::run_schedule_in_process(g, laned, o);
      CHECK(two_lanes.transfers == two.transfers);
      CHECK(gputest::compare(two_lanes.output, one.first_output).within(1e-4));
    }
  }
}

TEST_CASE("a two-GPU schedule over cuda-ipc matches one GPU, captured and eager", "[gpu][backend][ipc]") {
  if (cuda::device_count() < 2) HIOS_SKIP("fewer than two CUDA devices visible");
  for (const char* model : {"inception_v3", "nasnet_large"}) {
    const Graph g = build_model(model, ModelParams{1, 96, 96});
    const cuda::InProcessResult one = cuda::run_schedule_in_process(g, exec::sequential_schedule(g), quick("fp32"));
    const Schedule s = make_schedule(g, "hios-lp", 2, 4);
    for (bool graph : {true, false}) {
      cuda::InProcessOptions o = quick("fp32");
      o.transport = "cuda-ipc";
      o.cuda_graph = graph;
      const cuda::InProcessResult two = cuda::run_schedule_in_process(g, s, o);
      INFO(model << (graph ? ", captured" : ", eager"));
      CHECK(two.transfers > 0);
      CHECK(gputest::compare(two.first_output, one.first_output).within(1e-4));
      CHECK(gputest::compare(two.output, one.first_output).within(1e-4));
    }
  }
}

TEST_CASE("a two-GPU job that names no transport takes cuda-ipc where the GPUs reach each other", "[gpu][backend][ipc]") {
  if (cuda::device_count() < 2) HIOS_SKIP("fewer than two CUDA devices visible");
  int both_ways = 0, back = 0;
  REQUIRE(cudaDeviceCanAccessPeer(&both_ways, 0, 1) == cudaSuccess);
  REQUIRE(cudaDeviceCanAccessPeer(&back, 1, 0) == cudaSuccess);
  const std::vector<std::string> transports = exec::transport_names();
  const bool nccl = std::find(transports.begin(), transports.end(), "nccl") != transports.end();
  if (!(both_ways && back) && !nccl) HIOS_SKIP("no peer access and no NCCL: no GPU transport to take");
  const Graph g = build_model("inception_v3", ModelParams{1, 96, 96});
  const cuda::InProcessResult one = cuda::run_schedule_in_process(g, exec::sequential_schedule(g), quick("fp32"));
  cuda::InProcessOptions o = quick("fp32");
  o.transport.clear();
  const cuda::InProcessResult two = cuda::run_schedule_in_process(g, make_schedule(g, "hios-lp", 2, 4), o);
  CHECK(two.transport == (both_ways && back ? "cuda-ipc" : "nccl"));
  CHECK(two.transfers > 0);
  CHECK(gputest::compare(two.output, one.first_output).within(1e-4));
}

TEST_CASE("a two-GPU row split over NCCL, its bands in place, matches one GPU", "[gpu][backend][nccl][rows]") {
  if (cuda::device_count() < 2) HIOS_SKIP("fewer than two CUDA devices visible");
  const std::vector<std::string> transports = exec::transport_names();
  if (std::find(transports.begin(), transports.end(), "nccl") == transports.end()) HIOS_SKIP("built without NCCL");
  const Graph g = build_model("inception_v3", ModelParams{1, 96, 96});
  const cuda::InProcessResult one = cuda::run_schedule_in_process(g, exec::sequential_schedule(g), quick("fp32"));
  for (const SplitStyle& style : {SplitStyle{SplitMode::Halo, 1, false}, SplitStyle{SplitMode::Halo, 1, true},
                                  SplitStyle{SplitMode::Mixed, 2, false}}) {
    const auto runs = splittable_runs(g, 2);
    REQUIRE_FALSE(runs.empty());
    const Graph sg = apply_spatial(g, SpatialPlan{{plan_region(g, runs[0].first, runs[0].second, 2, style)}});
    const Schedule s = make_schedule(sg, "hios-lp", 2, 4);
    // Halos are received into the assembled band (NHWC at batch 1), captured and eager.
    for (bool graph : {true, false}) {
      cuda::InProcessOptions o = quick("fp32");
      o.cuda_graph = graph;
      const cuda::InProcessResult two = cuda::run_schedule_in_process(sg, s, o);
      const gputest::Error e = gputest::compare(two.output, one.first_output);
      WARN(split_style_name(style) << (graph ? ", captured" : ", eager") << ": " << two.transfers << " transfers, "
                                 << two.rows_in_place << " of " << two.rows_launched << " rows nodes in place: "
                                 << e.str());
      CHECK(two.transfers > 0);
      CHECK(two.rows_in_place > 0);
      CHECK(e.within(1e-4));
    }
  }
}
