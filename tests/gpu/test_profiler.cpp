// The profiler on real GPUs: every node's signature measured, CUPTI busy times no larger than
// the wall times, node times that add up to an eager pass, links that fit a line, and stages.
#include "inprocess/inprocess.hpp"
#include "models/models.hpp"
#include "profiler/gpu_profiler.hpp"
#include "profiler/profile_builder.hpp"
#include "scheduler/algorithms.hpp"
#include "scheduler/cost_model.hpp"
#include "tests/catch.hpp"

using namespace hios;

TEST_CASE("the profiler measures every node, its kernels and the stages of a schedule", "[gpu][profiler]") {
  if (cuda::device_count() < 1) HIOS_SKIP("no CUDA device visible");
  REQUIRE(prof::gpu_profiler_built());
  const Graph g = build_model("inception_v3", ModelParams{1, 128, 128});
  auto analytic = make_analytic_cost_model(find_device_preset("h200"));
  SchedulerOptions so;
  so.num_gpus = 1;
  so.max_streams = 4;
  const Schedule one_gpu = run_algorithm("hios-lp", g, *analytic, so);

  prof::ProfileOptions opt;
  opt.device = "h200";
  opt.iters = 10;
  opt.stages = &one_gpu;
  prof::ProfileReport rep;
  const ProfileDb db = prof::profile_gpus(g, opt, &rep);
  REQUIRE(!db.entries.empty());
  for (const ProfileEntry& e : db.entries) {
    INFO(e.example << ": " << e.ms << " ms wall, " << e.kernel_ms << " ms kernels (" << e.kernels << ")");
    CHECK(e.ms > 0);
    CHECK(e.samples >= 10);
    CHECK(e.kernels >= 1);
    CHECK(e.kernel_ms > 0);
    // Busy time cannot exceed the wall time between the events around the node (a small
    // margin for the two passes being different passes).
    CHECK(e.kernel_ms <= e.ms * 1.2 + 0.002);
  }
  // Every node resolves in the cost model built from the database.
  auto cost = make_profile_cost_model(db, "gpu test", find_device_preset("h200"));
  double sum = 0;
  for (int v = 0; v < g.size(); ++v) {
    if (v != g.input()) sum += cost->node_ms(g, v, 0);
  }
  // The per-node times add up to about a sequential pass's device time: not much more than an
  // eager pass (which waits for the host between launches: at this size it is launch-bound,
  // 1.7-3.5 ms against 1.9-2.0 ms of nodes on an H200, by how busy the host is; the events
  // around every node add a few microseconds each), and not much less than a captured pass
  // (no launch gaps).
  cuda::SingleGpuOptions eager;
  eager.cuda_graph = false;
  cuda::SingleGpuRunner runner(g, eager);
  const double pass = runner.time(3, 10).median_ms;
  cuda::SingleGpuOptions captured;
  cuda::SingleGpuRunner replayed(g, captured);
  const double graph_pass = replayed.time(3, 10).median_ms;
  WARN("inception_v3 @128: " << db.entries.size() << " signatures, sum of node medians " << sum
                             << " ms (report " << rep.sequential_sum_ms << "), CUPTI busy " << rep.kernel_sum_ms
                             << " ms, eager pass " << pass << " ms, captured pass " << graph_pass << " ms, "
                             << rep.stages_measured << " stages");
  CHECK(sum <= pass * 1.5);
  CHECK(sum >= graph_pass * 0.65);
  CHECK(rep.kernel_sum_ms > 0);
  CHECK(rep.kernel_sum_ms <= rep.sequential_sum_ms * 1.1);
  CHECK(rep.stages_measured > 0);
  for (const ProfileStage& st : db.stages) CHECK(st.ms > 0);
  // A schedule made with the measured costs passes its checks.
  const Schedule s = run_algorithm("hios-lp", g, *cost, so);
  CHECK(check_schedule(g, s).empty());
}

TEST_CASE("the profiler fits every GPU pair's link", "[gpu][profiler]") {
  if (cuda::device_count() < 2) HIOS_SKIP("fewer than two CUDA devices visible");
  const Graph g = build_model("demo", ModelParams{1, 15, 15});
  prof::ProfileOptions opt;
  opt.gpus = 2;
  opt.iters = 3;
  opt.cupti = false;
  prof::ProfileReport rep;
  const ProfileDb db = prof::profile_gpus(g, opt, &rep);
  REQUIRE(db.links.size() == 2);
  for (size_t i = 0; i < db.links.size(); ++i) {
    const ProfileLink& l = db.links[i];
    WARN("link " << l.src << " -> " << l.dst << ": " << l.latency_us << " us + bytes / " << l.bandwidth_gbs
                 << " GB/s, worst fit error " << rep.link_max_rel_residual[i]);
    CHECK(l.src != l.dst);
    CHECK(l.latency_us < 500);
    CHECK(l.bandwidth_gbs > 5);
    CHECK(l.bandwidth_gbs < 5000);
  }
}
