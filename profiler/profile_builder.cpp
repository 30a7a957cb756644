#include "profiler/profile_builder.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>

#include "graph/error.hpp"

namespace hios::prof {

double stddev(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  double mean = 0;
  for (double x : v) mean += x;
  mean /= double(v.size());
  double ss = 0;
  for (double x : v) ss += (x - mean) * (x - mean);
  return std::sqrt(ss / double(v.size() - 1));
}

LinkFit fit_link(const std::vector<LinkSample>& samples) {
  HIOS_CHECK(samples.size() >= 2, "link fit: needs at least two transfer sizes, got %zu", samples.size());
  // Weighted least squares with weights 1/ms^2, i.e. minimising the relative error: sizes span
  // four orders of magnitude, and unweighted squares are dominated by the largest transfers,
  // whose noise then leaks into the latency that every small tensor pays (tests: one size 10%
  // slow moves it by under 1 us here, by up to 1.4 us unweighted). Bytes in MB for conditioning.
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const LinkSample& s : samples) {
    HIOS_CHECK(s.ms > 0, "link fit: a transfer of %lld bytes took %g ms", (long long)s.bytes, s.ms);
    const double w = 1.0 / (s.ms * s.ms);
    const double x = double(s.bytes) / 1e6;
    sw += w;
    sx += w * x;
    sy += w * s.ms;
    sxx += w * x * x;
    sxy += w * x * s.ms;
  }
  const double den = sw * sxx - sx * sx;
  HIOS_CHECK(den > 1e-12 * sw * sxx, "link fit: every sample has the same size (%lld bytes)",
             (long long)samples[0].bytes);
  const double slope = (sw * sxy - sx * sy) / den;  // ms per MB
  const double intercept = (sy - slope * sx) / sw;  // ms
  HIOS_CHECK(slope > 0, "link fit: transfer time does not grow with size (%.4g ms per MB): the samples are noise",
             slope);
  LinkFit f;
  f.latency_us = std::max(intercept, 0.0) * 1000.0;
  f.bandwidth_gbs = 1.0 / slope;  // MB per ms = GB per s
  for (const LinkSample& s : samples) {
    const double fit = f.latency_us / 1000.0 + double(s.bytes) / (f.bandwidth_gbs * 1e6);
    f.max_rel_residual = std::max(f.max_rel_residual, std::fabs(fit - s.ms) / s.ms);
  }
  return f;
}

std::vector<ProfileEntry> pool_by_signature(const Graph& g, const std::vector<NodeSamples>& nodes,
                                            const DevicePreset* peaks, bool half) {
  struct Pool {
    std::string example;
    int node = -1;
    std::vector<double> wall, kernel;
    int64_t kernels = 0;
  };
  std::map<std::string, Pool> pools;
  std::vector<std::string> order;  // first appearance, so the database reads in graph order
  for (const NodeSamples& ns : nodes) {
    if (ns.wall_ms.empty()) continue;
    HIOS_CHECK(ns.node >= 0 && ns.node < g.size(), "profile: samples for node %d, which is not in the graph", ns.node);
    const std::string key = node_signature(g, ns.node);
    auto [it, fresh] = pools.emplace(key, Pool{});
    if (fresh) {
      it->second.example = g.nodes[size_t(ns.node)].name;
      it->second.node = ns.node;
      order.push_back(key);
    }
    Pool& p = it->second;
    p.wall.insert(p.wall.end(), ns.wall_ms.begin(), ns.wall_ms.end());
    p.kernel.insert(p.kernel.end(), ns.kernel_ms.begin(), ns.kernel_ms.end());
    p.kernels = std::max(p.kernels, ns.kernels);
  }
  std::vector<ProfileEntry> out;
  for (const std::string& key : order) {
    const Pool& p = pools.at(key);
    ProfileEntry e;
    e.key = key;
    e.ms = median(p.wall);
    e.samples = int64_t(p.wall.size());
    e.stddev_ms = stddev(p.wall);
    e.example = p.example;
    if (!p.kernel.empty()) {
      e.kernel_ms = median(p.kernel);
      e.kernels = p.kernels;
    }
    if (peaks && e.ms > 0) {
      const NodeRates r = node_rates(g.nodes[size_t(p.node)], e.ms, *peaks, half);
      e.achieved_tflops = r.flops_per_s / 1e12;
      e.achieved_gbs = r.bytes_per_s / 1e9;
      e.memory_bound = r.memory_bound ? 1 : 0;
    }
    out.push_back(std::move(e));
  }
  return out;
}

std::vector<ProfileStage> pool_stages(const Graph& g, const std::vector<StageSamples>& stages) {
  std::map<std::string, std::pair<json, std::vector<double>>> pools;
  std::vector<std::string> order;
  for (const StageSamples& s : stages) {
    if (s.stage.groups.size() < 2 || s.wall_ms.empty()) continue;
    json key = stage_key(g, s.stage);
    const std::string text = key.dump();
    auto [it, fresh] = pools.emplace(text, std::make_pair(std::move(key), std::vector<double>{}));
    if (fresh) order.push_back(text);
    it->second.second.insert(it->second.second.end(), s.wall_ms.begin(), s.wall_ms.end());
  }
  std::vector<ProfileStage> out;
  for (const std::string& text : order) {
    const auto& [key, wall] = pools.at(text);
    ProfileStage st;
    st.key = key;
    st.ms = median(wall);
    st.samples = int64_t(wall.size());
    out.push_back(std::move(st));
  }
  return out;
}

std::string preset_for_gpu_name(const std::string& gpu_name) {
  auto lower = [](std::string t) {
    for (char& c : t) c = char(std::tolower(static_cast<unsigned char>(c)));
    return t;
  };
  const std::string name = lower(gpu_name);
  std::string best;
  for (const DevicePreset& p : load_device_presets()) {
    const std::string pn = lower(p.name);
    if (pn.find("-fp32") != std::string::npos) continue;
    if (name.find(pn) != std::string::npos && pn.size() > best.size()) best = p.name;
  }
  return best;
}

}  // namespace hios::prof
