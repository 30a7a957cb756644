// The profiler's CUDA-free side: link fits, pooling by signature and stage key, and a database
// built from samples that the scheduler's profile cost model reads back exactly.
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <string>

#include <unistd.h>

#include "graph/error.hpp"
#include "models/models.hpp"
#include "profiler/gpu_profiler.hpp"
#include "profiler/profile_builder.hpp"
#include "scheduler/algorithms.hpp"
#include "scheduler/cost_model.hpp"
#include "tests/catch.hpp"
#include "tests/test_util.hpp"

using namespace hios;
using namespace hios::prof;

TEST_CASE("profiler: a link fit recovers latency and bandwidth") {
  const double lat_us = 27.5, bw = 310.0;
  std::vector<LinkSample> exact;
  for (int64_t b : {int64_t(4096), int64_t(1) << 16, int64_t(1) << 20, int64_t(1) << 24, int64_t(1) << 26}) {
    exact.push_back({b, lat_us / 1000.0 + double(b) / (bw * 1e6)});
  }
  LinkFit f = fit_link(exact);
  CHECK(f.latency_us == Approx(lat_us).epsilon(1e-9));
  CHECK(f.bandwidth_gbs == Approx(bw).epsilon(1e-9));
  CHECK(f.max_rel_residual < 1e-9);

  // 3% multiplicative noise: still close, and the residual says how close.
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> noise(0.97, 1.03);
  std::vector<LinkSample> noisy = exact;
  for (LinkSample& s : noisy) s.ms *= noise(rng);
  f = fit_link(noisy);
  CHECK(f.bandwidth_gbs == Approx(bw).epsilon(0.05));
  CHECK(f.latency_us == Approx(lat_us).margin(5.0));
  CHECK(f.max_rel_residual > 0);
  CHECK(f.max_rel_residual < 0.1);
}

namespace {
// The message of the hios::Error that fit_link throws ("" if it does not throw).
std::string fit_error(const std::vector<LinkSample>& samples) {
  return test::error_of([&] { fit_link(samples); });
}
}  // namespace

TEST_CASE("profiler: one slow size moves the fitted latency by under a microsecond") {
  // The profiler's default sweep, 4 KiB to 64 MiB, each size in turn 10% slow. The weighted fit
  // keeps the latency within 1 us (an unweighted one is off by up to 1.4 us here: the large
  // sizes dominate its squares).
  const double lat_us = 30.0, bw = 300.0;
  const prof::ProfileOptions defaults;
  for (size_t slow = 0; slow < defaults.link_bytes.size(); ++slow) {
    std::vector<LinkSample> s;
    for (int64_t b : defaults.link_bytes) s.push_back({b, lat_us / 1000.0 + double(b) / (bw * 1e6)});
    s[slow].ms *= 1.10;
    const LinkFit f = fit_link(s);
    INFO("size " << s[slow].bytes << " slow: " << f.latency_us << " us, " << f.bandwidth_gbs << " GB/s");
    CHECK(f.latency_us == Approx(lat_us).margin(1.0));
    CHECK(f.bandwidth_gbs == Approx(bw).epsilon(0.08));  // the 64 MiB point alone sets it
    CHECK(f.max_rel_residual > 0.03);
  }
}

TEST_CASE("profiler: a link fit refuses samples a line cannot explain") {
  CHECK(fit_error({{1024, 0.01}}).find("at least two transfer sizes") != std::string::npos);
  CHECK(fit_error({{1024, 0.01}, {1024, 0.02}}).find("same size") != std::string::npos);
  CHECK(fit_error({{1024, 0.05}, {1 << 20, 0.01}}).find("does not grow") != std::string::npos);
}

TEST_CASE("profiler: median and standard deviation") {
  CHECK(median({}) == 0);
  CHECK(median({3, 1, 2}) == 2);
  CHECK(median({4, 1, 3, 2}) == 2.5);
  CHECK(stddev({5}) == 0);
  CHECK(stddev({1, 2, 3, 4}) == Approx(std::sqrt(5.0 / 3.0)));
}

TEST_CASE("profiler: samples pool by signature into a database the cost model reads back") {
  const Graph g = build_model("inception_v3", ModelParams{1, 75, 75});
  // Each node's samples depend on its signature only, plus a node-specific spread, so pooled
  // medians are predictable: signature s gets times base(s) + {0, 1, 2} * 1e-3.
  std::map<std::string, double> base;
  std::vector<NodeSamples> nodes;
  for (int v = 0; v < g.size(); ++v) {
    NodeSamples ns;
    ns.node = v;
    if (v != g.input()) {
      const std::string sig = node_signature(g, v);
      auto [it, fresh] = base.emplace(sig, 0.01 * double(base.size() + 1));
      ns.wall_ms = {it->second, it->second + 1e-3, it->second + 2e-3};
      ns.kernel_ms = {it->second * 0.9, it->second * 0.9, it->second * 0.9};
      ns.kernels = 2;
    }
    nodes.push_back(ns);
  }
  ProfileDb db;
  db.device = "h200";
  const DevicePreset h200 = find_device_preset("h200");
  db.entries = pool_by_signature(g, nodes, &h200);
  REQUIRE(db.entries.size() == base.size());
  // Each entry is classed by what its example node achieved (the measured launch order's rule).
  for (const ProfileEntry& e : db.entries) {
    const int v = g.find(e.example);
    REQUIRE(v > 0);
    const NodeRates r = node_rates(g.nodes[size_t(v)], e.ms, h200);
    CHECK(e.achieved_tflops == Approx(r.flops_per_s / 1e12));
    CHECK(e.achieved_gbs == Approx(r.bytes_per_s / 1e9));
    CHECK(e.memory_bound == int(r.memory_bound));
  }
  REQUIRE(db.entries.size() < size_t(g.size() - 1));  // inception repeats signatures
  int64_t samples = 0;
  for (const ProfileEntry& e : db.entries) {
    INFO(e.key);
    CHECK(e.ms == Approx(base.at(e.key) + 1e-3));
    CHECK(e.kernel_ms == Approx(base.at(e.key) * 0.9));
    CHECK(e.kernels == 2);
    CHECK(e.samples % 3 == 0);
    CHECK(!e.example.empty());
    samples += e.samples;
  }
  CHECK(samples == 3 * int64_t(g.size() - 1));
  db.links = {{0, 1, 30.0, 300.0}, {1, 0, 31.0, 290.0}};

  // Through a file, byte for byte, and into the cost model.
  char path[] = "/tmp/hios-profile-XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  save_profile_db(db, path);
  const ProfileDb back = load_profile_db(path);
  CHECK(profile_db_to_text(back) == profile_db_to_text(db));
  std::remove(path);
  auto cost = make_profile_cost_model(back, "test", find_device_preset("h200"));
  for (int v = 0; v < g.size(); ++v) {
    if (v == g.input()) continue;
    CHECK(cost->node_ms(g, v, 0) == Approx(base.at(node_signature(g, v)) + 1e-3));
  }
  CHECK(cost->transfer_ms(1000000, 0, 1) == Approx(0.030 + 1.0 / 300.0));
  // And the scheduler runs on it.
  SchedulerOptions so;
  so.num_gpus = 2;
  const Schedule s = run_algorithm("hios-lp", g, *cost, so);
  CHECK(check_schedule(g, s).empty());
}

TEST_CASE("profiler: only multi-group stages are kept, pooled by stage key") {
  const Graph g = build_model("demo", ModelParams{1, 15, 15});
  const int a = g.find("b1.conv1"), b = g.find("b1.conv2"), c = g.find("b1.conv3");
  StageSamples two{Stage{{Group{{a}}, Group{{b}}}}, {0.02, 0.03}};
  StageSamples swapped{Stage{{Group{{b}}, Group{{a}}}}, {0.04}};  // same key: groups are sorted
  StageSamples one{Stage{{Group{{c}}}}, {0.01}};
  const std::vector<ProfileStage> st = pool_stages(g, {two, swapped, one});
  REQUIRE(st.size() == 1);
  CHECK(st[0].samples == 3);
  CHECK(st[0].ms == Approx(0.03));
  CHECK(st[0].key == stage_key(g, two.stage));
}

TEST_CASE("profiler: the device preset follows the GPU's name") {
  CHECK(preset_for_gpu_name("GPU 0: NVIDIA H200, 132 SMs, 139.80 GiB") == "h200");
  CHECK(preset_for_gpu_name("NVIDIA H100 80GB HBM3") == "h100");
  CHECK(preset_for_gpu_name("NVIDIA A100-SXM4-80GB") == "a100");
  CHECK(preset_for_gpu_name("Tesla V100-SXM2-16GB") == "v100");
  CHECK(preset_for_gpu_name("NVIDIA GeForce RTX 4090") == "");
}
