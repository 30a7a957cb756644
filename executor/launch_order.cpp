#include "executor/launch_order.hpp"

#include <algorithm>

#include "graph/error.hpp"

namespace hios::exec {

LaunchOrderKind parse_launch_order(const std::string& s) {
  for (LaunchOrderKind k : {LaunchOrderKind::Topo, LaunchOrderKind::Opara, LaunchOrderKind::Measured}) {
    if (s == launch_order_name(k)) return k;
  }
  throw_error("--launch-order must be topo, opara or measured, not '%s'", s.c_str());
}

const char* launch_order_name(LaunchOrderKind k) {
  switch (k) {
    case LaunchOrderKind::Topo: return "topo";
    case LaunchOrderKind::Opara: return "opara";
    case LaunchOrderKind::Measured: return "measured";
  }
  return "?";
}

LaunchOrder opara_order(const Graph& g) {
  LaunchOrder o;
  o.kind = LaunchOrderKind::Opara;
  o.memory_bound.assign(size_t(g.size()), 1);
  for (int v = 0; v < g.size(); ++v) {
    const OpKind k = g.nodes[size_t(v)].op.kind;
    // Opara's table lists the memory-intensive op types; everything with a GEMM inside (conv,
    // linear, and hios's sequential nodes, which hold convolutions) is compute-intensive.
    o.memory_bound[size_t(v)] = (k == OpKind::Conv || k == OpKind::Linear || k == OpKind::Sequential) ? 0 : 1;
  }
  return o;
}

LaunchOrder measured_order(const Graph& g, const std::vector<double>& node_ms, const DevicePreset& device, bool half) {
  HIOS_CHECK(node_ms.size() == size_t(g.size()), "internal error: %zu node times for %d nodes", node_ms.size(),
             g.size());
  LaunchOrder o;
  o.kind = LaunchOrderKind::Measured;
  o.memory_bound.assign(size_t(g.size()), 1);
  for (int v = 0; v < g.size(); ++v) {
    if (node_ms[size_t(v)] > 0) {
      o.memory_bound[size_t(v)] = node_rates(g.nodes[size_t(v)], node_ms[size_t(v)], device, half).memory_bound;
    }
  }
  return o;
}

std::vector<std::pair<int, int>> stage_launches(const Stage& st, const LaunchOrder& order) {
  std::vector<std::pair<int, int>> out;
  const size_t k = st.groups.size();
  if (order.kind == LaunchOrderKind::Topo || k < 2) {
    for (size_t j = 0; j < k; ++j) {
      for (int v : st.groups[j].nodes) out.emplace_back(int(j), v);
    }
    return out;
  }
  auto is_memory = [&](int v) {
    HIOS_CHECK(v >= 0 && size_t(v) < order.memory_bound.size(), "internal error: launch order has no class for node %d",
               v);
    return order.memory_bound[size_t(v)] != 0;
  };
  std::vector<size_t> next(k, 0);
  int last = -1;  // class of the last launch: -1 none, 0 compute, 1 memory
  for (;;) {
    int pick = -1;
    bool pick_differs = false;
    size_t pick_left = 0;
    for (size_t j = 0; j < k; ++j) {
      const auto& nodes = st.groups[j].nodes;
      if (next[j] >= nodes.size()) continue;
      const bool differs = last < 0 || int(is_memory(nodes[next[j]])) != last;
      const size_t left = nodes.size() - next[j];
      if (pick < 0 || (differs && !pick_differs) || (differs == pick_differs && left > pick_left)) {
        pick = int(j);
        pick_differs = differs;
        pick_left = left;
      }
    }
    if (pick < 0) break;
    const int v = st.groups[size_t(pick)].nodes[next[size_t(pick)]++];
    out.emplace_back(pick, v);
    last = int(is_memory(v));
  }
  return out;
}

std::string launch_order_summary(const LaunchOrder& order) {
  if (order.kind == LaunchOrderKind::Topo) return "topo";
  const auto memory = std::count(order.memory_bound.begin(), order.memory_bound.end(), uint8_t(1));
  return strprintf("%s (%lld memory-bound of %zu nodes)", launch_order_name(order.kind), (long long)memory,
                   order.memory_bound.size());
}

}  // namespace hios::exec
