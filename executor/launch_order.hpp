// The order in which a stage's launches are issued across its streams (after Opara).
//
// A stage's groups run on their own streams; within a group the order is the group's. What is
// free is how the launches of different groups interleave when the host issues them (eagerly)
// or when a pass is captured (the order of a CUDA Graph's nodes): a stream starts only when its
// first launch is issued, and a GPU runs best when a compute-bound kernel and a memory-bound one
// share it rather than two of a kind.
//
//   topo      group after group, each in its own order (what the lowering always did).
//   opara     Opara's rule (IEEE TC 2024): alternate memory-intensive and compute-intensive
//             launches across the groups, the class taken from the op's name (pools,
//             activations, element-wise ops and concatenations are memory-intensive).
//   measured  the same alternation with each node's class measured on the device: the achieved
//             FLOP/s and bytes/s of the node (its counted FLOPs and bytes over its measured time)
//             as shares of the device's peaks; memory-bound when the byte share is the larger.
//
// Every rank lowers with the same order (its classes come from rank 0), since the send order
// that the receivers follow is derived from it.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "graph/graph.hpp"
#include "scheduler/cost_model.hpp"
#include "scheduler/schedule.hpp"

namespace hios::exec {

enum class LaunchOrderKind : uint8_t { Topo, Opara, Measured };
LaunchOrderKind parse_launch_order(const std::string& s);  // topo | opara | measured, else hios::Error
const char* launch_order_name(LaunchOrderKind k);

struct LaunchOrder {
  LaunchOrderKind kind = LaunchOrderKind::Topo;
  // Index: node; 1 when memory-bound. Required (one entry per node) for opara and measured.
  std::vector<uint8_t> memory_bound;
};

// Opara's classes: by op name.
LaunchOrder opara_order(const Graph& g);

// The measured order from per-node times (index: node; nodes without a time, like the graph
// input, count as memory-bound), classed by scheduler/cost_model.hpp's node_rates against the
// device's peaks (`half`: fp16/bf16 storage).
LaunchOrder measured_order(const Graph& g, const std::vector<double>& node_ms, const DevicePreset& device, bool half);

// The (group, node) launches of one stage in issue order. Each group's own order is kept; with
// opara and measured the next launch is the head of a group whose class differs from the last
// launch's, preferring the group with the most launches left (its stream has the longest way
// to go), then the lowest group.
std::vector<std::pair<int, int>> stage_launches(const Stage& st, const LaunchOrder& order);

// The order as a compact string for listings: "opara (52 memory-bound of 121)".
std::string launch_order_summary(const LaunchOrder& order);

}  // namespace hios::exec
