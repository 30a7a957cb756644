// Device presets and the analytic cost model: roofline sanity, monotonicity, the stage model's
// bounds on every model of the zoo, and the link model.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>

#include "graph/dag.hpp"
#include "graph/error.hpp"
#include "models/models.hpp"
#include "scheduler/cost_model.hpp"
#include "tests/catch.hpp"
#include "tests/test_util.hpp"

using namespace hios;
using test::contains;
using test::error_of;

namespace {

// input (cin x hw x hw) -> one conv (cout, k x k, stride 1, same padding) in one block.
Graph one_conv(int64_t cin, int64_t hw, int64_t cout, int k) {
  GraphBuilder gb("one_conv", 1, hw, hw);
  Value x = gb.input(cin);
  gb.begin_block("blk");
  gb.end_block(gb.conv("conv", {x}, cout, k, 1, k / 2));
  return gb.finish();
}

Graph one_relu(int64_t c, int64_t hw) {
  GraphBuilder gb("one_relu", 1, hw, hw);
  Value x = gb.input(c);
  gb.begin_block("blk");
  gb.end_block(gb.activation("relu", x, Activation::Relu));
  return gb.finish();
}

}  // namespace

TEST_CASE("device presets: the shipped GPUs, compiled in") {
  std::vector<DevicePreset> all = load_device_presets();
  std::vector<std::string> names;
  for (const DevicePreset& p : all) names.push_back(p.name);
  CHECK(names ==
        std::vector<std::string>{"h200", "h200-bf16", "h100", "h100-bf16", "a100", "v100", "h200-fp32", "h100-fp32", "a100-fp32"});
  DevicePreset h200 = find_device_preset("h200");
  CHECK(h200.peak_tflops == Approx(494.7));  // TF32 convs, the CUDA backend's default
  CHECK(h200.fp32_tflops == Approx(67.0));
  CHECK(find_device_preset("h200-fp32").peak_tflops == Approx(67.0));
  CHECK(h200.mem_bandwidth_gbs == Approx(4800.0));
  CHECK(h200.sm_count == 132);
  CHECK(h200.launch_overhead_us > 0);
  CHECK(find_device_preset("h200-bf16").peak_tflops == Approx(989.4));
  // The compiled-in copy is the file in the source tree.
  std::vector<DevicePreset> from_file = load_device_presets(std::string(HIOS_SOURCE_DIR) + "/schedules/devices.json");
  REQUIRE(from_file.size() == all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    CHECK(from_file[i].name == all[i].name);
    CHECK(from_file[i].peak_tflops == all[i].peak_tflops);
    CHECK(from_file[i].link_bandwidth_gbs == all[i].link_bandwidth_gbs);
  }
  CHECK(error_of([] { find_device_preset("x80"); }).find("unknown device 'x80'") != std::string::npos);

  SECTION("a user file replaces the presets") {
    std::string file = std::string(HIOS_BINARY_DIR) + "/test_devices_override.json";
    {
      std::ofstream out(file);
      out << R"({"format": "hios-devices", "version": 1, "devices": [{"name": "toy", "peak_tflops": 1,
             "mem_bandwidth_gbs": 100, "launch_overhead_us": 0, "sm_count": 10, "link_latency_us": 1,
             "link_bandwidth_gbs": 10, "stage_overhead_us": 0, "alpha": 0}]})";
    }
    DevicePreset toy = find_device_preset("toy", file);
    CHECK(toy.sm_count == 10);
    CHECK(toy.conv_efficiency == Approx(0.5));  // defaults for the optional fields
    CHECK(spatial_conv_efficiency(toy) == Approx(0.5));  // wider filters priced as 1x1s
    CHECK(toy.tensor_core_channels == 1);
    CHECK(toy.fp32_tflops == Approx(1.0));
    CHECK(error_of([&] { find_device_preset("h200", file); }).find("unknown device 'h200'") != std::string::npos);
    auto cost = make_cost_model("analytic", "toy", file);
    CHECK(cost->device() == "toy");
    std::remove(file.c_str());
  }
  SECTION("strict reading") {
    json j = parse_json_text(R"({"format": "hios-devices", "version": 1, "devices": [{"name": "toy", "peak_tflops": 1,
      "mem_bandwidth_gbs": 100, "launch_overhead_us": 0, "sm_count": 10, "link_latency_us": 1,
      "link_bandwidth_gbs": 10, "stage_overhead_us": 0, "alpha": 0, "peak_tflop": 3}]})",
                             "t");
    CHECK(error_of([&] { device_presets_from_json(j); }) == "$.devices[0].peak_tflop: unknown key");
    j["devices"][0].erase("peak_tflop");
    j["devices"][0]["alpha"] = 1.5;
    CHECK(error_of([&] { device_presets_from_json(j); }).find("$.devices[0].alpha: must be in [0, 1]") == 0);
    j["devices"][0]["alpha"] = 0.5;
    j["devices"][0]["sm_count"] = 1.5;  // never rounded down to 1
    CHECK(error_of([&] { device_presets_from_json(j); }).find("$.devices[0].sm_count: expected an integer") == 0);
    j["devices"][0]["sm_count"] = 132;
    j["devices"][0]["peak_tflops"] = 1e300;
    CHECK(error_of([&] { device_presets_from_json(j); }) == "$.devices[0].peak_tflops: 1e+300 is more than 1e9");
  }
}

TEST_CASE("analytic model: roofline sanity and monotonicity") {
  DevicePreset p = find_device_preset("h200");
  auto cost = make_analytic_cost_model(p);
  const double launch = p.launch_overhead_us * 1e-3;

  SECTION("bigger convs are slower") {
    Graph small = one_conv(64, 56, 64, 3), wide = one_conv(64, 56, 256, 3), big = one_conv(64, 112, 64, 3),
          kernel = one_conv(64, 56, 64, 5);
    double t_small = cost->node_ms(small, 1, 0);
    CHECK(cost->node_ms(wide, 1, 0) > t_small);
    CHECK(cost->node_ms(big, 1, 0) > t_small);
    CHECK(cost->node_ms(kernel, 1, 0) > t_small);
    CHECK(t_small > launch);
  }
  SECTION("a large conv is compute-bound at the conv efficiency") {
    Graph g = one_conv(256, 128, 256, 3);
    NodeEstimate e = analytic_node_estimate(p, g, 1);
    double ideal = g.nodes[1].cost.flops / (p.peak_tflops * 1e9 * spatial_conv_efficiency(p));
    CHECK(e.compute_ms == Approx(ideal));
    auto fp32 = find_device_preset("h200-fp32");
    CHECK(analytic_node_estimate(fp32, g, 1).compute_ms ==
          Approx(g.nodes[1].cost.flops / (fp32.peak_tflops * 1e9 * spatial_conv_efficiency(fp32))));
    CHECK(e.compute_ms > e.memory_ms);
    CHECK(e.ms == Approx(ideal + launch));
    CHECK(e.kernels == 1);
    CHECK(e.sm_ms == Approx(e.compute_ms));  // enough tiles to fill every SM
  }
  SECTION("a tiny conv cannot fill the GPU") {
    Graph g = one_conv(64, 8, 64, 3);  // 64 output pixels, 64 channels: one 64x64 tile
    NodeEstimate e = analytic_node_estimate(p, g, 1);
    double ideal = g.nodes[1].cost.flops / (p.peak_tflops * 1e9 * spatial_conv_efficiency(p));
    CHECK(e.compute_ms == Approx(ideal * p.sm_count));
    CHECK(e.sm_ms == Approx(std::max(e.compute_ms, e.memory_ms) / p.sm_count));
  }
  SECTION("1x1 and wider filters have their own efficiencies") {
    DevicePreset q = p;
    q.conv_efficiency = 0.4;
    q.spatial_conv_efficiency = 0.2;
    Graph pointwise = one_conv(256, 128, 256, 1), spatial = one_conv(256, 128, 256, 3);
    CHECK(analytic_node_estimate(q, pointwise, 1).compute_ms ==
          Approx(pointwise.nodes[1].cost.flops / (q.peak_tflops * 1e9 * 0.4)));
    CHECK(analytic_node_estimate(q, spatial, 1).compute_ms ==
          Approx(spatial.nodes[1].cost.flops / (q.peak_tflops * 1e9 * 0.2)));
    q.spatial_conv_efficiency = 0;  // unset: the 1x1s' efficiency
    CHECK(analytic_node_estimate(q, spatial, 1).compute_ms ==
          Approx(spatial.nodes[1].cost.flops / (q.peak_tflops * 1e9 * 0.4)));
  }
  SECTION("channels off the tensor cores' multiple run at the CUDA-core rate") {
    DevicePreset q = p;
    q.tensor_core_channels = 4;
    Graph aligned = one_conv(64, 128, 64, 3), odd_in = one_conv(39, 128, 64, 3), odd_out = one_conv(64, 128, 78, 3);
    auto rate = [&](const Graph& g) { return g.nodes[1].cost.flops / analytic_node_estimate(q, g, 1).compute_ms; };
    CHECK(rate(aligned) == Approx(q.peak_tflops * 1e9 * spatial_conv_efficiency(q)));
    CHECK(rate(odd_in) == Approx(q.fp32_tflops * 1e9 * spatial_conv_efficiency(q)));
    CHECK(rate(odd_out) == Approx(q.fp32_tflops * 1e9 * spatial_conv_efficiency(q)));
    q.tensor_core_channels = 1;
    CHECK(rate(odd_in) == Approx(rate(aligned)));
  }
  SECTION("an element-wise op is memory-bound") {
    Graph g = one_relu(256, 128);
    NodeEstimate e = analytic_node_estimate(p, g, 1);
    double bytes = g.nodes[1].cost.bytes_read + g.nodes[1].cost.bytes_written;
    CHECK(e.memory_ms == Approx(bytes / (p.mem_bandwidth_gbs * 1e6 * p.memory_efficiency)));
    CHECK(e.memory_ms > e.compute_ms);
    CHECK(cost->node_ms(one_relu(512, 128), 1, 0) > e.ms);
  }
  SECTION("the input placeholder costs nothing") {
    Graph g = one_relu(8, 8);
    CHECK(cost->node_ms(g, g.input(), 0) == 0);
  }
  SECTION("a sequential node launches one kernel per step") {
    GraphBuilder gb("seq", 1, 42, 42);
    Value x = gb.input(96);
    gb.begin_block("blk");
    Value s = gb.sequential("sep", {x},
                            {conv_op(96, {3, 3}, {1, 1}, {1, 1}, Activation::None, 96), conv_op(96, {1, 1}, {1, 1}, {0, 0})});
    gb.end_block(s);
    Graph g = gb.finish();
    NodeEstimate e = analytic_node_estimate(p, g, 1);
    CHECK(e.kernels == 2);
    CHECK(e.launch_ms == Approx(2 * launch));
    CHECK(e.ms > analytic_node_estimate(p, one_conv(96, 42, 96, 1), 1).ms);
  }
  SECTION("slower devices are slower") {
    Graph g = one_conv(128, 56, 128, 3);
    double h200 = cost->node_ms(g, 1, 0);
    double a100 = make_analytic_cost_model(find_device_preset("a100"))->node_ms(g, 1, 0);
    double v100 = make_analytic_cost_model(find_device_preset("v100"))->node_ms(g, 1, 0);
    CHECK(a100 > h200);
    CHECK(v100 > a100);
  }
}

TEST_CASE("analytic model: links") {
  DevicePreset p = find_device_preset("h200");
  auto cost = make_analytic_cost_model(p);
  CHECK(cost->transfer_ms(1e6, 1, 1) == 0);
  CHECK(cost->transfer_ms(1e6, 0, 1) == Approx(p.link_latency_us * 1e-3 + 1e6 / (p.link_bandwidth_gbs * 1e6)));
  CHECK(cost->transfer_ms(2e6, 1, 0) > cost->transfer_ms(1e6, 1, 0));
  CHECK(cost->transfer_ms(0, 0, 1) == Approx(p.link_latency_us * 1e-3));
}

TEST_CASE("stage model: between the slowest group and the sum, on every model") {
  DevicePreset p = find_device_preset("h200");
  auto cost = make_analytic_cost_model(p);
  const double overhead = p.stage_overhead_us * 1e-3;

  SECTION("one group is the sum of its nodes") {
    Graph g = build_model("demo", ModelParams{});
    Stage st{{Group{{g.find("b1.conv1"), g.find("b1.conv2"), g.find("b1.out")}}}};
    double sum = 0;
    for (int v : st.groups[0].nodes) sum += cost->node_ms(g, v, 0);
    CHECK(cost->stage_ms(g, st, 0) == Approx(sum));
  }
  SECTION("two small convs overlap; two GPU-filling convs do not") {
    Graph small = build_model("demo", ModelParams{});
    Stage pair{{Group{{small.find("b1.conv1")}}, Group{{small.find("b1.conv2")}}}};
    double one = cost->node_ms(small, small.find("b1.conv1"), 0);
    double both = cost->stage_ms(small, pair, 0);
    CHECK(both >= one);
    CHECK(both < 2 * one);  // 15x15 outputs fill a handful of SMs: they share the GPU well

    GraphBuilder gb("big", 1, 128, 128);
    Value x = gb.input(256);
    gb.begin_block("blk");
    Value a = gb.conv("a", {x}, 256, 3, 1, 1);
    Value b = gb.conv("b", {x}, 256, 3, 1, 1);
    gb.end_block(gb.concat("out", {a, b}));
    Graph big = gb.finish();
    Stage st{{Group{{big.find("a")}}, Group{{big.find("b")}}}};
    double ta = cost->node_ms(big, big.find("a"), 0);
    // Both want every SM: the stage takes about as long as running them back to back.
    CHECK(cost->stage_ms(big, st, 0) == Approx(2 * ta - 2 * (1 - p.alpha) * p.launch_overhead_us * 1e-3 + overhead)
                                            .epsilon(0.02));
  }
  for (const ModelInfo& m : model_registry()) {
    SECTION("independent pairs of " + m.name) {
      Graph g = build_model(m.name, ModelParams{});
      Dag d = Dag::from_graph(g);
      Reachability reach(d);
      int checked = 0;
      for (const Block& blk : g.blocks) {
        const auto& nodes = blk.nodes;
        for (size_t i = 0; i < nodes.size(); ++i) {
          for (size_t j = i + 1; j < nodes.size(); ++j) {
            int u = nodes[i], v = nodes[j];
            if (!reach.independent(u, v)) continue;
            double tu = cost->node_ms(g, u, 0), tv = cost->node_ms(g, v, 0);
            double st = cost->stage_ms(g, Stage{{Group{{u}}, Group{{v}}}}, 0);
            CHECK(st >= std::max(tu, tv) - 1e-12);
            CHECK(st <= tu + tv + overhead + 1e-12);
            // Group order does not matter.
            CHECK(cost->stage_ms(g, Stage{{Group{{v}}, Group{{u}}}}, 0) == Approx(st));
            ++checked;
          }
        }
      }
      CHECK(checked > 0);
    }
  }
}
