// Fitting a device preset to measured node times: a preset's own estimates are recovered from a
// wrong starting point, every sample counts by its time, a database's samples follow node
// signatures, the written entry reads back as a devices file, and nothing usable is refused.
#include <cmath>
#include <string>
#include <vector>

#include "graph/error.hpp"
#include "models/models.hpp"
#include "scheduler/cost_model.hpp"
#include "scheduler/preset_fit.hpp"
#include "tests/catch.hpp"
#include "tests/test_util.hpp"

using namespace hios;
using test::error_of;

namespace {

Graph inception(int size) { return build_model("inception_v3", ModelParams{1, size, size}); }

// Every node of g as `truth` estimates it: what a perfectly fitted preset would have measured.
std::vector<PresetSample> samples_of(const Graph& g, const DevicePreset& truth) {
  std::vector<PresetSample> out;
  for (int v = 0; v < g.size(); ++v) {
    if (v != g.input()) out.push_back({&g, v, analytic_node_estimate(truth, g, v).ms});
  }
  return out;
}

}  // namespace

TEST_CASE("preset fit: recovers the efficiencies and launch overhead a preset's own estimates came from") {
  const Graph g = inception(299);
  DevicePreset truth = find_device_preset("h100");
  truth.conv_efficiency = 0.42;
  truth.spatial_conv_efficiency = 0.27;
  truth.memory_efficiency = 0.55;
  truth.launch_overhead_us = 3.0;
  DevicePreset start = truth;
  start.conv_efficiency = 0.1;
  start.memory_efficiency = 0.9;
  start.launch_overhead_us = 8.0;
  const PresetFit f = fit_device_preset(start, samples_of(g, truth));
  CHECK(f.samples == g.size() - 1);
  CHECK(f.error_before > 0.2);
  CHECK(f.error_after < 0.01);
  CHECK(f.preset.conv_efficiency == Approx(0.42).epsilon(0.03));
  CHECK(f.preset.spatial_conv_efficiency == Approx(0.27).epsilon(0.03));
  CHECK(f.preset.launch_overhead_us == Approx(3.0).epsilon(0.1));
  // Inception has no depthwise convolution: that efficiency keeps its starting value.
  CHECK(f.preset.depthwise_efficiency == start.depthwise_efficiency);
}

TEST_CASE("preset fit: a database's samples follow node signatures, and the entry reads back") {
  const Graph g = inception(107);
  const DevicePreset truth = find_device_preset("h100");
  ProfileDb db;
  db.device = "h100";
  // Only the first node's signature is measured: every node sharing it is a sample, no other.
  ProfileEntry e;
  e.key = node_signature(g, 1);
  e.ms = 0.05;
  db.entries.push_back(e);
  int sharing = 0;
  for (int v = 1; v < g.size(); ++v) sharing += node_signature(g, v) == e.key ? 1 : 0;
  const std::vector<PresetSample> s = preset_samples(g, db);
  CHECK(int(s.size()) == sharing);
  for (const PresetSample& x : s) CHECK(x.ms == 0.05);

  DevicePreset p = fit_device_preset(truth, samples_of(g, truth)).preset;
  p.name = "mine";
  const json file = json{{"format", "hios-devices"}, {"version", 1}, {"devices", json::array({device_preset_to_json(p)})}};
  const std::vector<DevicePreset> back = device_presets_from_json(file);
  REQUIRE(back.size() == 1);
  CHECK(back[0].name == "mine");
  CHECK(back[0].conv_efficiency == Approx(p.conv_efficiency));
  CHECK(spatial_conv_efficiency(back[0]) == Approx(spatial_conv_efficiency(p)));
  CHECK(back[0].tensor_core_channels == p.tensor_core_channels);
  CHECK(back[0].launch_overhead_us == Approx(p.launch_overhead_us));
}

TEST_CASE("preset fit: kernel busy times are the samples when asked for, and the report shows every sample") {
  const Graph g = inception(107);
  ProfileDb db;
  ProfileEntry with, without;
  with.key = node_signature(g, 1);
  with.ms = 0.05;
  with.kernel_ms = 0.02;
  without.key = node_signature(g, g.size() - 1);
  without.ms = 0.04;  // measured without CUPTI: no kernel time
  db.entries = {with, without};
  const std::vector<PresetSample> wall = preset_samples(g, db, NodeTime::Wall);
  const std::vector<PresetSample> kernels = preset_samples(g, db, NodeTime::Kernels);
  REQUIRE(!kernels.empty());
  CHECK(wall.size() > kernels.size());
  for (const PresetSample& x : kernels) CHECK(x.ms == 0.02);

  const DevicePreset base = find_device_preset("h200");
  DevicePreset fitted = base;
  fitted.conv_efficiency = 0.5;
  const std::string report = preset_fit_report(base, fitted, wall);
  std::vector<std::string> lines;
  for (size_t at = 0; at < report.size();) {
    const size_t nl = report.find('\n', at);
    lines.push_back(report.substr(at, nl - at));
    at = nl == std::string::npos ? report.size() : nl + 1;
  }
  REQUIRE(lines.size() == wall.size() + 1);
  CHECK(lines[0] == "graph\tsize\tnode\tclass\tmeasured_ms\tbase_ms\tfitted_ms");
  // The stem convolution is priced by the conv efficiency, so its two estimates differ.
  const std::string stem = g.nodes[1].name;
  bool seen = false;
  for (const std::string& l : lines) {
    if (l.rfind("inception_v3\t107x107\t" + stem + "\tconv\t", 0) != 0) continue;
    seen = true;
    CHECK(l.find("0.050000") != std::string::npos);
  }
  CHECK(seen);
}

TEST_CASE("preset fit: no usable sample is one error naming the preset") {
  const Graph g = inception(107);
  const DevicePreset base = find_device_preset("h200");
  CHECK_THAT(error_of([&] { fit_device_preset(base, {}); }), Catch::Contains("no measured node") && Catch::Contains("h200"));
  CHECK_THAT(error_of([&] { fit_device_preset(base, {{&g, 1, 0.0}, {&g, 2, -1.0}, {&g, g.input(), 1.0}}); }),
             Catch::Contains("no measured node"));
}

TEST_CASE("preset fit: measured links set the preset's, per graph byte under 16-bit math") {
  DevicePreset p = find_device_preset("h200");
  CHECK(with_measured_links(p, {}).link_bandwidth_gbs == p.link_bandwidth_gbs);  // nothing timed: unchanged
  ProfileDb tf32, bf16;
  tf32.identity = json{{"math", "tf32"}};
  tf32.links = {{0, 1, 12.0, 340.0}, {1, 0, 11.0, 330.0}};
  bf16.identity = json{{"math", "bf16"}};
  bf16.links = {{0, 1, 10.0, 345.0}};
  const DevicePreset a = with_measured_links(p, {tf32});
  CHECK(a.link_latency_us == Approx(11.5));
  CHECK(a.link_bandwidth_gbs == Approx(335.0));
  // A bf16 run sends 2 bytes of each element the graph counts at 4: per graph byte its link is
  // twice as fast, as a bf16 preset's memory bandwidth is doubled.
  const DevicePreset b = with_measured_links(p, {bf16});
  CHECK(b.link_latency_us == Approx(10.0));
  CHECK(b.link_bandwidth_gbs == Approx(690.0));
  CHECK(with_measured_links(p, {tf32, bf16}).link_bandwidth_gbs == Approx((340.0 + 330.0 + 690.0) / 3));
}
