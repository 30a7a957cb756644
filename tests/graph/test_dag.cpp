// DAG algorithms against brute force on small random DAGs.
#include <algorithm>
#include <cstdint>

#include "graph/dag.hpp"
#include "tests/catch.hpp"

using namespace hios;

namespace {

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

Dag random_dag(int n, double p, uint64_t seed) {
  Dag d(n);
  for (int u = 0; u < n; ++u) {
    for (int v = u + 1; v < n; ++v) {
      if (double(splitmix(seed) >> 11) / double(1ull << 53) < p) d.add_edge(u, v);
    }
  }
  return d;
}

bool reaches_dfs(const Dag& d, int u, int v) {
  std::vector<int> stack(d.succ[u].begin(), d.succ[u].end());
  std::vector<char> seen(d.size(), 0);
  while (!stack.empty()) {
    int x = stack.back();
    stack.pop_back();
    if (x == v) return true;
    if (seen[x]) continue;
    seen[x] = 1;
    for (int s : d.succ[x]) stack.push_back(s);
  }
  return false;
}

}  // namespace

TEST_CASE("reachability matches DFS", "[graph][dag]") {
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    Dag d = random_dag(70, 0.05, seed);  // > 64 nodes: crosses a bitset word
    Reachability r(d);
    for (int u = 0; u < d.size(); ++u) {
      for (int v = 0; v < d.size(); ++v) REQUIRE(r.reaches(u, v) == reaches_dfs(d, u, v));
    }
  }
}

TEST_CASE("topological order respects every edge", "[graph][dag]") {
  Dag d = random_dag(50, 0.1, 42);
  // Relabel so that index order is not already topological.
  Dag rev(d.size());
  for (int u = 0; u < d.size(); ++u) {
    for (int v : d.succ[u]) rev.add_edge(d.size() - 1 - u, d.size() - 1 - v);
  }
  std::vector<int> order = topological_order(rev);
  std::vector<int> pos(rev.size());
  for (int i = 0; i < rev.size(); ++i) pos[order[i]] = i;
  for (int u = 0; u < rev.size(); ++u) {
    for (int v : rev.succ[u]) CHECK(pos[u] < pos[v]);
  }
  bool threw = false;
  try {
    Dag cyc(2);
    cyc.add_edge(0, 1);
    cyc.add_edge(1, 0);
    topological_order(cyc);
  } catch (const std::exception&) {
    threw = true;
  }
  CHECK(threw);
}

TEST_CASE("width equals the largest antichain found by brute force", "[graph][dag]") {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    int n = 6 + int(seed % 7);
    Dag d = random_dag(n, 0.3, seed * 7);
    Reachability r(d);
    int best = 0;
    for (uint32_t mask = 1; mask < (1u << n); ++mask) {
      bool ok = true;
      for (int u = 0; u < n && ok; ++u) {
        for (int v = u + 1; v < n && ok; ++v) {
          if ((mask >> u & 1) && (mask >> v & 1) && !r.independent(u, v)) ok = false;
        }
      }
      if (ok) best = std::max(best, __builtin_popcount(mask));
    }
    std::vector<int> anti;
    REQUIRE(dag_width(d, &anti) == best);
    REQUIRE(static_cast<int>(anti.size()) == best);
    for (size_t i = 0; i < anti.size(); ++i) {
      for (size_t j = i + 1; j < anti.size(); ++j) CHECK(r.independent(anti[i], anti[j]));
    }
  }
}

TEST_CASE("longest path with node and edge weights", "[graph][dag]") {
  // 0 -> 1 -> 3, 0 -> 2 -> 3; node 2 is heavy, but edge 1->3 is heavier still.
  Dag d(4);
  d.add_edge(0, 1);
  d.add_edge(1, 3);
  d.add_edge(0, 2);
  d.add_edge(2, 3);
  std::vector<double> w = {1, 1, 5, 1};
  PathResult p = longest_path(d, [&](int v) { return w[v]; });
  CHECK(p.length == Approx(7));
  CHECK(p.nodes == std::vector<int>{0, 2, 3});
  PathResult q = longest_path(d, [&](int v) { return w[v]; }, [](int u, int v) { return u == 1 && v == 3 ? 10.0 : 0.0; });
  CHECK(q.length == Approx(13));
  CHECK(q.nodes == std::vector<int>{0, 1, 3});
  std::vector<char> active = {1, 1, 0, 1};
  PathResult r = longest_path(d, [&](int v) { return w[v]; }, nullptr, active);
  CHECK(r.nodes == std::vector<int>{0, 1, 3});
}
