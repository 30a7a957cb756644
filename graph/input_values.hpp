// Checks of the values a user hands to a graph's inputs, before any backend reads them. Shapes
// and dtypes are the loader's business (run/runner.cpp); here are the values a kernel would
// otherwise meet out of range: token ids and other indices.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/graph.hpp"

namespace hios {

// Input `v`'s values (raw, in its dtype) where a Gather reads them as indices: each must lie in
// [-n, n) for the n entries of the data's axis (ONNX's rule; negative ones count from the end).
// Otherwise one line naming `source`, the input, the element, the node and the data, e.g.
// "ids.npy: input 'ids' element 3 is 150, outside the 100 entries of axis 0 of its constant
// data that node 'Gather_0' gathers". A GPU kernel never sees an index it could read out of bounds with.
void check_index_input(const Graph& g, int v, const std::vector<uint8_t>& raw, const std::string& source);

}  // namespace hios
