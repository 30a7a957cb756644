// Whole-graph reports: the numbers `hios info` prints, and Graphviz export.
#pragma once

#include <string>
#include <vector>

#include "graph/graph.hpp"
#include "graph/json_reader.hpp"

namespace hios {

// Graphs with more nodes than this (or blocks, for the block width) get no width in their
// summary (-1): the width needs the n^2-bit reachability relation.
inline constexpr int kWidthNodeLimit = 20000;

struct GraphSummary {
  std::string name;
  int64_t batch = 0, height = 0, width = 0;
  int nodes = 0, blocks = 0;
  int64_t edges = 0;
  OpCost total;
  double activation_bytes = 0;  // every node's output, input included
  int dag_width = 0;            // largest set of mutually independent nodes
  int max_block_width = 0;
  double longest_path_flops = 0;
  std::vector<int> longest_path;  // node indices
  std::string digest;
};

GraphSummary summarize(const Graph& g);
json summary_to_json(const Graph& g, const GraphSummary& s);
std::string summary_to_text(const Graph& g, const GraphSummary& s);

// Graphviz DOT with one cluster per block; node labels carry the op and the output shape.
std::string graph_to_dot(const Graph& g);

}  // namespace hios
