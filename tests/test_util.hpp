// Small helpers every test suite uses: the message of the hios::Error a call throws, a
// substring check that reads well inside CHECK(), and the device preset tests schedule with.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "graph/error.hpp"
#include "graph/graph.hpp"
#include "scheduler/cost_model.hpp"

namespace hios::test {

// Runs f and returns the hios::Error message ("" if nothing was thrown).
template <typename F>
std::string error_of(F&& f) {
  try {
    std::forward<F>(f)();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The node of g called name; a test that names a node the model lacks fails with its name.
inline const Node& node_named(const Graph& g, const std::string& name) {
  int i = g.find(name);
  if (i < 0) throw std::runtime_error("the graph has no node " + name);
  return g.nodes[i];
}

// A fixed H200-like preset for the tests' schedules (the numbers of the first, uncalibrated h200
// preset): the shipped presets are refitted to measurements, and a refit must not decide
// whether a test's small graph spreads over its GPUs.
inline DevicePreset test_device_preset() {
  DevicePreset p = find_device_preset("h200");
  p.launch_overhead_us = 4.0;
  p.link_latency_us = 31.0;
  p.link_bandwidth_gbs = 381.0;
  p.stage_overhead_us = 3.0;
  p.alpha = 0.1;
  p.conv_efficiency = 0.14;
  p.depthwise_efficiency = 0.25;
  p.gemm_efficiency = 0.6;
  p.memory_efficiency = 0.8;
  p.spatial_conv_efficiency = 0;  // as conv_efficiency
  p.tensor_core_channels = 1;
  p.short_node_us = 0;
  return p;
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// max |got - want| / max |want|: a kernel's error against a direct double computation.
inline double relative_error(const std::vector<float>& got, const std::vector<double>& want) {
  double err = 0, top = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::fabs(double(got.at(i)) - want[i]));
    top = std::max(top, std::fabs(want[i]));
  }
  return err / top;
}

// The mutation fuzzers' generator: splitmix64 from a fixed seed, so a failure reproduces.
struct SplitMix {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  size_t below(size_t n) { return n ? size_t(next() % n) : 0; }
};

}  // namespace hios::test
