// What graph/row_split.cpp (the plans, their checks and the regions) and
// graph/row_split_rewrite.cpp (the graph rewrite) share: the geometry of a region's rows.
#pragma once

#include <string>
#include <vector>

#include "graph/graph.hpp"
#include "graph/row_split.hpp"

namespace hios::row_split_detail {

std::string rows_str(RowRange r);  // "a-b"
int find_block(const Graph& g, const std::string& name);  // -1 when there is none
// Rows of the tensor node v reads, whatever its terms (they share H).
int64_t input_height(const Graph& g, int v);
bool is_global_pool(const Op& op);
// Whether node v's bands read bands of its operands (row_split.cpp says when).
bool row_local_node(const Graph& g, int v);
bool reduces(const Graph& g, int v);
int64_t plan_height(const Graph& g, int v);
RowRange needed_rows(const Graph& g, int c, RowRange out);
RowRange hull(RowRange a, RowRange b);
bool inside(RowRange inner, RowRange outer);
std::vector<int> region_nodes(const Graph& g, int first, int last);

// How the nodes of blocks [first, last] split: `split` by rows (topological), the global
// average pool that ends the region (`reduce`, or -1), and the whole nodes after it (`tail`).
struct Layout {
  std::vector<int> split;
  int reduce = -1;
  std::vector<int> tail;
};
Layout region_layout(const Graph& g, int first, int last);

}  // namespace hios::row_split_detail
