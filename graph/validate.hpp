// Multi-problem validation for `hios validate`. Loading stops at the first error; validation
// keeps going where the problems are independent (each node's keys and types, every duplicate
// name, every dangling reference) so a user fixing a hand-written file sees them all at once.
// Semantic problems (cycles, shapes) are reported once the file is structurally sound.
#pragma once

#include <string>
#include <vector>

#include "graph/json_reader.hpp"

namespace hios {

std::vector<std::string> validate_graph_json(const json& j);
std::vector<std::string> validate_graph_file(const std::string& file);  // problems prefixed with the file

}  // namespace hios
