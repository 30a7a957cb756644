// ReLU folding: which nodes store relu(value) instead of their value.
//
// NASNet's cells end in an assembly (pairs summed, six pairs concatenated) that is read only by
// the next cells' "ReLU, then 1x1 convolution" squeezes. Each squeeze's ReLU is a pass of its
// own over the whole concatenation: at 2048 pixels that is a read and a write of up to 130 MB
// per reader, with nothing computed. Storing relu(value) at the producer costs nothing where the
// producer ends in an epilogue anyway (the assembly's write, a convolution's activation), and a
// reader whose ReLU is a step of its own may then skip it. ReLU is idempotent, so a reader that
// applies it again (an activation node, a depthwise step that applies it on load) still gets
// what it got before: the graph output does not change.
//
// Every backend stores these nodes the same way (the CPU reference too), so node-by-node
// comparisons (--verify-nodes) and transfers between GPUs agree; which nodes they are depends
// on the graph alone.
#pragma once

#include <vector>

#include "graph/graph.hpp"

namespace hios {

// Whether `op` can end in a ReLU applied to its output as an epilogue: a convolution whose
// activation is none or relu, a sequential whose last step is such a convolution or a ReLU,
// and an assembly (identity) of more than one value (`values`: how many it reads; an identity
// of one value may share its producer's storage).
bool can_end_in_relu(const Op& op, size_t values);
// `op` with its output passed through a ReLU (can_end_in_relu(op) must hold): a convolution's
// activation, or that of a sequential's last convolution, becomes relu. An identity is
// returned as it is; its assembly applies the ReLU (the caller's business).
Op with_output_relu(const Op& op);
// Whether `op` applies a ReLU to its whole input before anything else: a relu activation, or
// a sequential whose first step is one.
bool starts_with_relu(const Op& op);

// stores_relu[v] is true for node v when v is not the graph output, has readers, can end in a
// ReLU, and every reader reads v whole or sliced as its only input value and starts with a
// ReLU (so none sees a difference). fold = false (BackendConfig::fold_relu off): none.
std::vector<bool> nodes_storing_relu(const Graph& g, bool fold = true);

}  // namespace hios
