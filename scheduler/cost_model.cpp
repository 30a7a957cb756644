// Device presets, the analytic (roofline) cost model, the stage model shared with the profile
// model, and the CLI's choice between them. The reasoning behind every formula is in
// docs/cost-model.md.
#include "scheduler/cost_model.hpp"

#include <algorithm>
#include <cmath>

#include "graph/error.hpp"
#include "graph/row_split.hpp"
#include "scheduler/devices_json.hpp"

namespace hios {

// ---------------------------------------------------------------------------------------------
// Presets

std::vector<DevicePreset> device_presets_from_json(const json& j, const std::string& source) {
  JsonObject root(j, source);
  root.expect_header("hios-devices", 1);
  const json& devices = root.get_array("devices");
  std::vector<DevicePreset> out;
  for (size_t i = 0; i < devices.size(); ++i) {
    JsonObject o(devices[i], root.child_path("devices") + strprintf("[%zu]", i));
    DevicePreset p;
    p.name = o.get_string("name");
    p.description = o.get_string("description", "");
    auto positive = [&](const char* key) {
      double v = o.get_number(key);
      HIOS_CHECK(v > 0 && std::isfinite(v), "%s: must be positive (got %g)", o.child_path(key).c_str(), v);
      HIOS_CHECK(v <= 1e9, "%s: %g is more than 1e9", o.child_path(key).c_str(), v);
      return v;
    };
    auto fraction = [&](const char* key, double def) {
      double v = o.get_number(key, def);
      HIOS_CHECK(v > 0 && v <= 1, "%s: must be in (0, 1] (got %g)", o.child_path(key).c_str(), v);
      return v;
    };
    p.peak_tflops = positive("peak_tflops");
    p.fp32_tflops = o.has("fp32_tflops") ? positive("fp32_tflops") : p.peak_tflops;
    p.mem_bandwidth_gbs = positive("mem_bandwidth_gbs");
    p.launch_overhead_us = o.get_number("launch_overhead_us");
    p.sm_count = static_cast<int>(o.get_int_in("sm_count", 1, 1 << 20));
    p.link_latency_us = o.get_number("link_latency_us");
    p.link_bandwidth_gbs = positive("link_bandwidth_gbs");
    p.stage_overhead_us = o.get_number("stage_overhead_us");
    p.alpha = o.get_number("alpha");
    p.short_node_us = o.get_number("short_node_us", 0.0);
    for (auto [key, v] : {std::pair<const char*, double>{"launch_overhead_us", p.launch_overhead_us},
                          {"link_latency_us", p.link_latency_us},
                          {"stage_overhead_us", p.stage_overhead_us},
                          {"short_node_us", p.short_node_us}}) {
      HIOS_CHECK(v >= 0 && std::isfinite(v), "%s: must be non-negative (got %g)", o.child_path(key).c_str(), v);
    }
    HIOS_CHECK(p.alpha >= 0 && p.alpha <= 1, "%s: must be in [0, 1] (got %g)", o.child_path("alpha").c_str(), p.alpha);
    p.conv_efficiency = fraction("conv_efficiency", p.conv_efficiency);
    if (o.has("spatial_conv_efficiency")) p.spatial_conv_efficiency = fraction("spatial_conv_efficiency", 1);
    if (o.has("tensor_core_channels")) p.tensor_core_channels = static_cast<int>(o.get_int_in("tensor_core_channels", 1, 64));
    p.depthwise_efficiency = fraction("depthwise_efficiency", p.depthwise_efficiency);
    p.gemm_efficiency = fraction("gemm_efficiency", p.gemm_efficiency);
    p.memory_efficiency = fraction("memory_efficiency", p.memory_efficiency);
    o.finish();
    for (const DevicePreset& q : out) {
      HIOS_CHECK(q.name != p.name, "%s: duplicate device '%s'", o.child_path("name").c_str(), p.name.c_str());
    }
    out.push_back(std::move(p));
  }
  root.finish();
  return out;
}

json device_preset_to_json(const DevicePreset& p) {
  return json{{"name", p.name},
              {"description", p.description},
              {"peak_tflops", p.peak_tflops},
              {"fp32_tflops", p.fp32_tflops},
              {"mem_bandwidth_gbs", p.mem_bandwidth_gbs},
              {"launch_overhead_us", p.launch_overhead_us},
              {"sm_count", p.sm_count},
              {"link_latency_us", p.link_latency_us},
              {"link_bandwidth_gbs", p.link_bandwidth_gbs},
              {"stage_overhead_us", p.stage_overhead_us},
              {"alpha", p.alpha},
              {"short_node_us", p.short_node_us},
              {"conv_efficiency", p.conv_efficiency},
              {"spatial_conv_efficiency", spatial_conv_efficiency(p)},
              {"tensor_core_channels", p.tensor_core_channels},
              {"depthwise_efficiency", p.depthwise_efficiency},
              {"gemm_efficiency", p.gemm_efficiency},
              {"memory_efficiency", p.memory_efficiency}};
}

double spatial_conv_efficiency(const DevicePreset& p) {
  return p.spatial_conv_efficiency > 0 ? p.spatial_conv_efficiency : p.conv_efficiency;
}

std::vector<DevicePreset> load_device_presets(const std::string& file) {
  if (file.empty()) return device_presets_from_json(parse_json_text(kEmbeddedDevicesJson, "devices.json (built in)"));
  json j = read_json_file(file);
  try {
    return device_presets_from_json(j);
  } catch (const Error& e) {
    throw Error(file + ": " + e.what());
  }
}

DevicePreset find_device_preset(const std::string& name, const std::string& file) {
  std::vector<DevicePreset> all = load_device_presets(file);
  std::string known;
  for (const DevicePreset& p : all) {
    if (p.name == name) return p;
    known += (known.empty() ? "" : ", ") + p.name;
  }
  throw_error("unknown device '%s' in %s (known: %s)", name.c_str(),
              file.empty() ? "the built-in presets" : file.c_str(), known.c_str());
}

// ---------------------------------------------------------------------------------------------
// Analytic node model

namespace {

// A thread block of an implicit-GEMM conv computes a 64x64 output tile; cuDNN picks tiles this
// small when the problem is small, so fewer tiles than SMs means idle SMs.
constexpr double kTile = 64;
// Streaming kernels need about 2048 resident threads per SM (one element each) to fill it.
constexpr double kThreadsPerSm = 2048;

struct Kernel {
  double flops = 0, bytes = 0;
  double tflops = 0;      // the unit it runs on: tensor cores (peak_tflops) or CUDA cores
  double efficiency = 1;  // share of that rate the kernel's arithmetic reaches
  double parallel = 0;    // share of the SMs it can occupy, (0, 1]
};

// A conv whose channels per group miss the tensor cores' multiple (a 3-channel image, randwire's
// 39- and 78-channel stems) runs on CUDA cores: measured 2-6x slower than the same FLOPs in
// aligned channels on an H200.
bool on_tensor_cores(const DevicePreset& p, int64_t in_per_group, int64_t out_per_group) {
  const int64_t m = std::max(1, p.tensor_core_channels);
  return in_per_group % m == 0 && out_per_group % m == 0;
}

Kernel kernel_for(const DevicePreset& p, const Op& op, const Shape& in, const Shape& out, const OpCost& c) {
  Kernel k;
  k.flops = c.flops;
  k.bytes = c.bytes_read + c.bytes_written;
  const double sms = p.sm_count;
  const double fp32 = p.fp32_tflops > 0 ? p.fp32_tflops : p.peak_tflops;
  double threads = double(out.numel());
  k.tflops = fp32;
  switch (op.kind) {
    case OpKind::Conv: {
      const ConvAttrs& a = op.conv();
      if (kernel_class(op, in) == KernelClass::Depthwise) {
        k.efficiency = p.depthwise_efficiency;
        k.parallel = threads / (sms * kThreadsPerSm);
      } else {
        double m = double(out.n) * out.h * out.w;
        double per_group = double(a.out_channels / a.groups);
        double tiles = double(a.groups) * std::ceil(m / kTile) * std::ceil(per_group / kTile);
        const bool spatial = a.kernel[0] * a.kernel[1] > 1;
        k.tflops = on_tensor_cores(p, in.c / a.groups, a.out_channels / a.groups) ? p.peak_tflops : fp32;
        k.efficiency = spatial ? spatial_conv_efficiency(p) : p.conv_efficiency;
        k.parallel = tiles / sms;
      }
      break;
    }
    case OpKind::Linear: {
      double tiles = std::ceil(double(out.n) / kTile) * std::ceil(double(op.linear().out_features) / kTile);
      k.efficiency = p.gemm_efficiency;
      k.parallel = tiles / sms;
      break;
    }
    default:
      // Pooling, activations, element-wise ops, copies, softmax: one thread per output element
      // and bound by memory; the FLOP rate of plain CUDA cores at full occupancy.
      k.parallel = threads / (sms * kThreadsPerSm);
      break;
  }
  k.parallel = std::clamp(k.parallel, 1.0 / sms, 1.0);
  return k;
}

void add_kernel(const DevicePreset& p, const Kernel& k, NodeEstimate& e) {
  double compute = k.flops / (k.tflops * 1e9 * k.efficiency * k.parallel);  // ms
  double memory = k.bytes / (p.mem_bandwidth_gbs * 1e6 * p.memory_efficiency);   // ms
  double busy = std::max(compute, memory);
  double launch = p.launch_overhead_us * 1e-3;
  e.compute_ms += compute;
  e.memory_ms += memory;
  e.launch_ms += launch;
  e.sm_ms += busy * k.parallel;
  e.ms += busy + launch;
  e.kernels += 1;
}

}  // namespace

namespace {

// The assembled input (terms concatenated along channels); add/mul read operands instead, for
// which the first operand's shape is what the kernel iterates over.
Shape assembled_input(const Graph& g, const Node& nd) {
  if (nd.inputs.empty()) return nd.constants.empty() ? nd.shape : nd.constants[0].shape;  // from constants alone
  Shape in = g.value_shape(nd.inputs[0][0]);
  if (!op_def(nd.op.kind).terms_are_operands) {
    for (size_t t = 1; t < nd.input_terms(); ++t) in.c += g.value_shape(nd.inputs[t][0]).c;
  }
  return in;
}

}  // namespace

bool math_stores_16_bit(const std::string& math) { return math == "fp16" || math == "bf16"; }

KernelClass kernel_class(const Op& op, const Shape& in) {
  if (op.kind == OpKind::Linear) return KernelClass::Gemm;
  if (op.kind != OpKind::Conv) return KernelClass::Memory;
  const ConvAttrs& a = op.conv();
  return a.groups > 1 && in.c == a.groups ? KernelClass::Depthwise : KernelClass::Conv;
}

KernelClass node_kernel_class(const Graph& g, int node) {
  const Node& nd = g.nodes.at(size_t(node));
  if (nd.op.kind == OpKind::Input) return KernelClass::Memory;
  const Op* op = &nd.op;
  if (op->kind == OpKind::Sequential && !op->sequential().steps.empty()) op = &op->sequential().steps.front();
  return kernel_class(*op, assembled_input(g, nd));
}

const char* kernel_class_name(KernelClass k) {
  switch (k) {
    case KernelClass::Conv: return "conv";
    case KernelClass::Depthwise: return "depthwise";
    case KernelClass::Gemm: return "gemm";
    case KernelClass::Memory: return "memory";
  }
  return "memory";
}

NodeEstimate analytic_node_estimate(const DevicePreset& p, const Graph& g, int node) {
  HIOS_CHECK(node >= 0 && node < g.size(), "cost model: node #%d is not in graph '%s'", node, g.name.c_str());
  const Node& nd = g.nodes[node];
  NodeEstimate e;
  if (nd.op.kind == OpKind::Input) return e;  // resident before anything runs
  // A band copy the memory plan holds in place issues no kernel (rows_copy_is_view).
  if (rows_copy_is_view(g, node)) return e;
  Shape in = assembled_input(g, nd);
  if (nd.op.kind != OpKind::Sequential) {
    add_kernel(p, kernel_for(p, nd.op, in, nd.shape, nd.cost), e);
    return e;
  }
  // One kernel per step; the input assembly (node.cost minus the steps) rides on the first.
  std::vector<Kernel> kernels;
  OpCost steps_total;
  Shape cur = in;
  InferContext ctx{nd.name, g.batch, g.height, g.width};
  for (const Op& step : nd.op.sequential().steps) {
    Shape next = infer_op(step, {cur}, ctx);
    OpCost c = count_op(step, {cur}, next, g.dtype);
    steps_total += c;
    kernels.push_back(kernel_for(p, step, cur, next, c));
    cur = next;
  }
  kernels.front().bytes += std::max(0.0, nd.cost.bytes_read + nd.cost.bytes_written - steps_total.bytes_read -
                                              steps_total.bytes_written);
  kernels.front().flops += std::max(0.0, nd.cost.flops - steps_total.flops);
  for (const Kernel& k : kernels) add_kernel(p, k, e);
  return e;
}

// ---------------------------------------------------------------------------------------------
// Stage model

double combine_stage_ms(const DevicePreset& p, const std::vector<std::vector<StageItem>>& groups) {
  double longest = 0, sum = 0, sm = 0, memory = 0, launch = 0;
  int busy_groups = 0, items = 0;
  for (const auto& gr : groups) {
    double t = 0;
    items += int(gr.size());
    for (const StageItem& it : gr) {
      t += it.ms;
      sm += it.sm_ms;
      memory += it.memory_ms;
      launch += it.launch_ms;
    }
    longest = std::max(longest, t);
    sum += t;
    if (!gr.empty()) ++busy_groups;
  }
  // One stream needs no cross-stream events and shares the GPU with nobody.
  if (busy_groups <= 1) return sum;
  double contended = std::max({longest, sm, memory, launch});
  // Short nodes overlap less than their SM and bandwidth shares say (a row split's half-height
  // bands at 1024 pixels ran their branches almost one after the other on an H100).
  double alpha = p.alpha;
  if (p.short_node_us > 0 && sum > 0) {
    const double tau = p.short_node_us * 1e-3, mean = sum / items;
    alpha += (1 - alpha) * tau / (tau + mean);
  }
  return alpha * sum + (1 - alpha) * contended + p.stage_overhead_us * 1e-3;
}

double combine_stage_floor_ms(const DevicePreset& p, const std::vector<std::vector<StageItem>>& groups) {
  // The short-node term raises alpha for stages of short nodes only; base alpha is its floor,
  // under which the sum and the contended resources only add up across stages.
  DevicePreset floor = p;
  floor.short_node_us = 0;
  return combine_stage_ms(floor, groups);
}

// ---------------------------------------------------------------------------------------------
// The analytic cost model

namespace {

class AnalyticCostModel : public CostModel {
 public:
  explicit AnalyticCostModel(DevicePreset p) : p_(std::move(p)) {}
  std::string name() const override { return "analytic"; }
  std::string device() const override { return p_.name; }
  double node_ms(const Graph& g, int node, int) const override { return analytic_node_estimate(p_, g, node).ms; }
  double transfer_ms(double bytes, int src, int dst) const override {
    if (src == dst) return 0;
    // Every pair is assumed one NVLink/NVSwitch hop apart (the DGX/HGX topology).
    return p_.link_latency_us * 1e-3 + bytes / (p_.link_bandwidth_gbs * 1e6);
  }
  double stage_ms(const Graph& g, const Stage& stage, int) const override { return combine_stage_ms(p_, items(g, stage)); }
  double stage_floor_ms(const Graph& g, const Stage& stage, int) const override {
    return combine_stage_floor_ms(p_, items(g, stage));
  }

 private:
  std::vector<std::vector<StageItem>> items(const Graph& g, const Stage& stage) const {
    std::vector<std::vector<StageItem>> groups;
    for (const Group& gr : stage.groups) {
      std::vector<StageItem> items;
      for (int v : gr.nodes) {
        NodeEstimate e = analytic_node_estimate(p_, g, v);
        items.push_back({e.ms, e.sm_ms, e.memory_ms, e.launch_ms});
      }
      groups.push_back(std::move(items));
    }
    return groups;
  }

  DevicePreset p_;
};

}  // namespace

std::unique_ptr<CostModel> make_analytic_cost_model(const DevicePreset& preset) {
  HIOS_CHECK(preset.peak_tflops > 0 && preset.mem_bandwidth_gbs > 0 && preset.sm_count > 0 &&
                 preset.link_bandwidth_gbs > 0,
             "device preset '%s': peak_tflops, mem_bandwidth_gbs, sm_count and link_bandwidth_gbs must be positive",
             preset.name.c_str());
  return std::make_unique<AnalyticCostModel>(preset);
}

NodeRates node_rates(const Node& nd, double ms, const DevicePreset& device, bool half) {
  NodeRates r;
  if (!(ms > 0)) return r;
  const double peak_flops = device.peak_tflops * 1e12 * (half ? 2 : 1);
  const double peak_bytes = device.mem_bandwidth_gbs * 1e9;
  r.flops_per_s = nd.cost.flops / (ms * 1e-3);
  r.bytes_per_s = (nd.cost.bytes_read + nd.cost.bytes_written) * (half ? 0.5 : 1.0) / (ms * 1e-3);
  r.compute_share = peak_flops > 0 ? r.flops_per_s / peak_flops : 0;
  r.memory_share = peak_bytes > 0 ? r.bytes_per_s / peak_bytes : 0;
  r.memory_bound = r.memory_share >= r.compute_share;
  return r;
}

}  // namespace hios
