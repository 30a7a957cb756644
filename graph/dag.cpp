#include "graph/dag.hpp"

#include <algorithm>
#include <limits>
#include <queue>

#include "graph/error.hpp"
#include "graph/graph.hpp"

namespace hios {

void Dag::add_edge(int u, int v) {
  if (std::find(succ[u].begin(), succ[u].end(), v) != succ[u].end()) return;
  succ[u].push_back(v);
  pred[v].push_back(u);
}

Dag Dag::from_graph(const Graph& g) {
  Dag d(g.size());
  for (int i = 0; i < g.size(); ++i) {
    for (int p : g.predecessors(i)) d.add_edge(p, i);
  }
  return d;
}

std::vector<int> topological_prefix(const Dag& d) {
  const int n = d.size();
  std::vector<int> indeg(n);
  for (int v = 0; v < n; ++v) indeg[v] = static_cast<int>(d.pred[v].size());
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int v = 0; v < n; ++v) {
    if (indeg[v] == 0) ready.push(v);
  }
  std::vector<int> order;
  order.reserve(n);
  while (!ready.empty()) {
    int u = ready.top();
    ready.pop();
    order.push_back(u);
    for (int s : d.succ[u]) {
      if (--indeg[s] == 0) ready.push(s);
    }
  }
  return order;
}

std::vector<int> topological_order(const Dag& d) {
  std::vector<int> order = topological_prefix(d);
  HIOS_CHECK(static_cast<int>(order.size()) == d.size(), "DAG has a cycle (%d of %d nodes ordered)",
             (int)order.size(), d.size());
  return order;
}

Reachability::Reachability(const Dag& d) : n_(d.size()), words_((d.size() + 63) / 64) {
  bits_.assign(size_t(n_) * words_, 0);
  std::vector<int> order = topological_order(d);
  // Reverse topological order: a node reaches its successors and everything they reach.
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    int u = *it;
    uint64_t* row = &bits_[size_t(u) * words_];
    for (int s : d.succ[u]) {
      row[s >> 6] |= uint64_t(1) << (s & 63);
      const uint64_t* srow = &bits_[size_t(s) * words_];
      for (size_t w = 0; w < words_; ++w) row[w] |= srow[w];
    }
  }
}

PathResult longest_path(const Dag& d, const std::function<double(int)>& node_weight,
                        const std::function<double(int, int)>& edge_weight, const std::vector<char>& active) {
  const int n = d.size();
  auto on = [&](int v) { return active.empty() || active[v]; };
  std::vector<int> order = topological_order(d);
  std::vector<double> dist(n, -std::numeric_limits<double>::infinity());
  std::vector<int> from(n, -1);
  PathResult best;
  int best_end = -1;
  double best_len = -std::numeric_limits<double>::infinity();
  for (int u : order) {
    if (!on(u)) continue;
    double w = node_weight(u);
    double start = 0;
    int arg = -1;
    for (int p : d.pred[u]) {
      if (!on(p)) continue;
      double cand = dist[p] + (edge_weight ? edge_weight(p, u) : 0.0);
      if (cand > start || (arg < 0 && cand >= start)) {
        start = cand;
        arg = p;
      }
    }
    dist[u] = start + w;
    from[u] = arg;
    if (dist[u] > best_len) {
      best_len = dist[u];
      best_end = u;
    }
  }
  if (best_end < 0) return best;
  best.length = best_len;
  for (int v = best_end; v >= 0; v = from[v]) best.nodes.push_back(v);
  std::reverse(best.nodes.begin(), best.nodes.end());
  return best;
}

int dag_width(const Dag& d, std::vector<int>* antichain) {
  const int n = d.size();
  if (n == 0) {
    if (antichain) antichain->clear();
    return 0;
  }
  Reachability r(d);
  // Bipartite graph: left u -> right v when u reaches v.
  std::vector<std::vector<int>> adj(n);
  for (int u = 0; u < n; ++u) {
    for (int v = 0; v < n; ++v) {
      if (r.reaches(u, v)) adj[u].push_back(v);
    }
  }
  const int kFree = -1;
  std::vector<int> match_l(n, kFree), match_r(n, kFree), dist(n);
  auto bfs = [&]() {
    std::queue<int> q;
    bool found = false;
    for (int u = 0; u < n; ++u) {
      if (match_l[u] == kFree) {
        dist[u] = 0;
        q.push(u);
      } else {
        dist[u] = -1;
      }
    }
    while (!q.empty()) {
      int u = q.front();
      q.pop();
      for (int v : adj[u]) {
        int w = match_r[v];
        if (w == kFree) {
          found = true;
        } else if (dist[w] < 0) {
          dist[w] = dist[u] + 1;
          q.push(w);
        }
      }
    }
    return found;
  };
  std::vector<size_t> it(n);
  std::function<bool(int)> dfs = [&](int u) -> bool {
    for (; it[u] < adj[u].size(); ++it[u]) {
      int v = adj[u][it[u]];
      int w = match_r[v];
      if (w == kFree || (dist[w] == dist[u] + 1 && dfs(w))) {
        match_l[u] = v;
        match_r[v] = u;
        ++it[u];
        return true;
      }
    }
    dist[u] = -1;
    return false;
  };
  int matching = 0;
  while (bfs()) {
    std::fill(it.begin(), it.end(), 0);
    for (int u = 0; u < n; ++u) {
      if (match_l[u] == kFree && dfs(u)) ++matching;
    }
  }
  int width = n - matching;
  if (antichain) {
    // Konig: Z = vertices reachable from free left vertices by alternating paths. The
    // antichain is every v with left(v) in Z and right(v) not in Z.
    std::vector<char> zl(n, 0), zr(n, 0);
    std::vector<int> stack;
    for (int u = 0; u < n; ++u) {
      if (match_l[u] == kFree) {
        zl[u] = 1;
        stack.push_back(u);
      }
    }
    while (!stack.empty()) {
      int u = stack.back();
      stack.pop_back();
      for (int v : adj[u]) {
        if (zr[v] || match_l[u] == v) continue;
        zr[v] = 1;
        int w = match_r[v];
        if (w != kFree && !zl[w]) {
          zl[w] = 1;
          stack.push_back(w);
        }
      }
    }
    antichain->clear();
    for (int v = 0; v < n; ++v) {
      if (zl[v] && !zr[v]) antichain->push_back(v);
    }
  }
  return width;
}

}  // namespace hios
