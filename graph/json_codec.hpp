// Graph <-> JSON. The format is documented in docs/graph-format.md.
#pragma once

#include <string>

#include "graph/graph.hpp"
#include "graph/json_reader.hpp"

namespace hios {

json graph_to_json(const Graph& g);
// Canonical text: two-space indentation with one node per line, ending in a newline. Writing a
// graph, reading it back and writing again gives identical bytes.
std::string graph_to_text(const Graph& g);
Graph graph_from_json(const json& j, const std::string& source = "$");
Graph load_graph(const std::string& file);
void save_graph(const Graph& g, const std::string& file);  // atomic

// A digest of the graph's canonical JSON ("fnv1a64:<16 hex digits>"). Schedules record it so
// a schedule is never replayed against a different graph.
std::string graph_digest(const Graph& g);

}  // namespace hios
