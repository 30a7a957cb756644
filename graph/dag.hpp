// Plain DAG algorithms shared by every scheduler: topological order, transitive reachability as
// bitsets, longest path under a weight function, and width (the largest antichain).
//
// They work on a bare adjacency structure so that the random-DAG experiment and sub-DAGs
// (one block, one GPU) use the same code as whole model graphs.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace hios {

class Graph;

struct Dag {
  std::vector<std::vector<int>> succ, pred;

  explicit Dag(int n = 0) : succ(n), pred(n) {}
  int size() const { return static_cast<int>(succ.size()); }
  void add_edge(int u, int v);  // ignores duplicates
  static Dag from_graph(const Graph& g);
};

// Kahn's algorithm, smallest index first among ready nodes (deterministic). The prefix
// version returns what it could order: fewer than size() nodes means the rest sit on or behind
// a cycle. topological_order throws hios::Error on a cycle.
std::vector<int> topological_prefix(const Dag& d);
std::vector<int> topological_order(const Dag& d);

// reaches(u, v): is there a path of length >= 1 from u to v. Memory is n^2 / 8 bytes.
class Reachability {
 public:
  explicit Reachability(const Dag& d = Dag(0));
  bool reaches(int u, int v) const { return (bits_[size_t(u) * words_ + (v >> 6)] >> (v & 63)) & 1u; }
  // Neither reaches the other: the two can run concurrently.
  bool independent(int u, int v) const { return u != v && !reaches(u, v) && !reaches(v, u); }
  int size() const { return n_; }

 private:
  int n_ = 0;
  size_t words_ = 0;
  std::vector<uint64_t> bits_;
};

struct PathResult {
  double length = 0;
  std::vector<int> nodes;  // source to sink
};

// Longest path where a path's length is the sum of its node weights plus, when edge_weight
// is given, the weights of the edges it uses. Nodes with active[v] == false are skipped
// (pass an empty vector for "all").
PathResult longest_path(const Dag& d, const std::function<double(int)>& node_weight,
                        const std::function<double(int, int)>& edge_weight = nullptr,
                        const std::vector<char>& active = {});

// The size of the largest set of pairwise independent nodes (Dilworth: n minus a maximum
// matching in the reachability bipartite graph, found with Hopcroft-Karp). When antichain is
// given it receives one such set (through Konig's theorem).
int dag_width(const Dag& d, std::vector<int>* antichain = nullptr);

}  // namespace hios
