#include "scheduler/preset_fit.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "graph/error.hpp"
#include "scheduler/golden_section.hpp"

namespace hios {

namespace {

// The weighted loss and mean relative error of a preset over the samples.
struct Score {
  double loss = 0, error = 0;
};

Score score(const DevicePreset& p, const std::vector<PresetSample>& samples) {
  Score s;
  double weight = 0;
  for (const PresetSample& x : samples) {
    const double est = analytic_node_estimate(p, *x.g, x.node).ms;
    const double r = std::log(std::max(est, 1e-9) / x.ms);
    s.loss += x.ms * r * r;
    s.error += x.ms * std::fabs(est / x.ms - 1);
    weight += x.ms;
  }
  if (weight > 0) s.error /= weight;
  return s;
}

// Golden-section search of `knob` over [lo, hi] on a log scale; keeps the best value seen,
// which is the starting value unless another is strictly better.
void search(DevicePreset& p, double DevicePreset::*knob, double lo, double hi,
            const std::vector<PresetSample>& samples) {
  const double start = p.*knob;
  double best_x = start, best = score(p, samples).loss;
  auto at = [&](double logx) {
    p.*knob = std::exp(logx);
    const double l = score(p, samples).loss;
    if (l < best * (1 - 1e-12)) {
      best = l;
      best_x = p.*knob;
    }
    return l;
  };
  (void)golden_section_min(at, std::log(lo), std::log(hi), 40);
  p.*knob = best_x;
}

}  // namespace

PresetFit fit_device_preset(const DevicePreset& base, const std::vector<PresetSample>& samples) {
  std::vector<PresetSample> usable;
  for (const PresetSample& x : samples) {
    if (x.g && x.node >= 0 && x.node < x.g->size() && x.node != x.g->input() && std::isfinite(x.ms) && x.ms > 0) {
      usable.push_back(x);
    }
  }
  HIOS_CHECK(!usable.empty(), "fit-preset: no measured node to fit the preset '%s' to", base.name.c_str());
  PresetFit f;
  f.samples = int(usable.size());
  f.preset = base;
  f.error_before = score(base, usable).error;
  // The launch overhead is searched from a small positive floor: a log scale has no zero.
  if (f.preset.launch_overhead_us <= 0) f.preset.launch_overhead_us = 0.5;
  // Spatial convs start at the 1x1s' efficiency where the base does not tell them apart.
  f.preset.spatial_conv_efficiency = spatial_conv_efficiency(f.preset);
  // The parameters are coupled (a node costs the larger of its compute and memory terms plus
  // the launch), so sweep until a sweep gains nothing.
  double loss = score(f.preset, usable).loss;
  for (int sweep = 0; sweep < 40; ++sweep) {
    search(f.preset, &DevicePreset::conv_efficiency, 0.01, 1.0, usable);
    search(f.preset, &DevicePreset::spatial_conv_efficiency, 0.01, 1.0, usable);
    search(f.preset, &DevicePreset::memory_efficiency, 0.01, 1.0, usable);
    search(f.preset, &DevicePreset::depthwise_efficiency, 0.01, 1.0, usable);
    search(f.preset, &DevicePreset::gemm_efficiency, 0.01, 1.0, usable);
    search(f.preset, &DevicePreset::launch_overhead_us, 0.05, 20.0, usable);
    const double now = score(f.preset, usable).loss;
    if (now >= loss * (1 - 1e-9)) break;
    loss = now;
  }
  f.error_after = score(f.preset, usable).error;
  return f;
}

std::string preset_fit_report(const DevicePreset& base, const DevicePreset& fitted,
                              const std::vector<PresetSample>& samples) {
  std::string out = "graph\tsize\tnode\tclass\tmeasured_ms\tbase_ms\tfitted_ms\n";
  for (const PresetSample& x : samples) {
    const char* cls = kernel_class_name(node_kernel_class(*x.g, x.node));
    out += strprintf("%s\t%lldx%lld\t%s\t%s\t%.6f\t%.6f\t%.6f\n", x.g->name.c_str(), (long long)x.g->height,
                     (long long)x.g->width, x.g->nodes[size_t(x.node)].name.c_str(), cls, x.ms,
                     analytic_node_estimate(base, *x.g, x.node).ms, analytic_node_estimate(fitted, *x.g, x.node).ms);
  }
  return out;
}

std::vector<PresetSample> preset_samples(const Graph& g, const ProfileDb& db, NodeTime which) {
  std::map<std::string, double> ms;
  for (const ProfileEntry& e : db.entries) {
    if (which == NodeTime::Wall) {
      ms[e.key] = e.ms;
    } else if (e.kernel_ms > 0) {
      ms[e.key] = e.kernel_ms;
    }
  }
  std::vector<PresetSample> out;
  for (int v = 0; v < g.size(); ++v) {
    if (v == g.input()) continue;
    auto it = ms.find(node_signature(g, v));
    if (it != ms.end()) out.push_back(PresetSample{&g, v, it->second});
  }
  return out;
}

DevicePreset with_measured_links(DevicePreset p, const std::vector<ProfileDb>& dbs) {
  double latency = 0, bandwidth = 0;
  int links = 0;
  for (const ProfileDb& db : dbs) {
    for (const ProfileLink& l : db.links) {
      latency += l.latency_us;
      bandwidth += l.bandwidth_gbs / profile_link_bytes_per_graph_byte(db);
      ++links;
    }
  }
  if (links > 0) {
    p.link_latency_us = latency / links;
    p.link_bandwidth_gbs = bandwidth / links;
  }
  return p;
}

}  // namespace hios
