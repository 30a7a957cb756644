// The values every backend loads: graph input, conv and linear weights and biases, built from
// executor/init.hpp on the host. All backends and ranks call these functions, so a node's
// parameters are the same wherever it runs and results can be compared element by element.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "executor/init.hpp"
#include "executor/safetensors.hpp"
#include "executor/tensor_layout.hpp"
#include "graph/graph.hpp"

namespace hios::exec {

// The parameters of one conv or linear op (a node's op or one step of a sequential).
struct OpParams {
  std::vector<float> weight;  // conv: [out][in/groups][kh][kw]; linear: [out][in] over C*H*W
  std::vector<float> bias;    // empty when the op has no bias
};

// The graph input "<input>.value": N*C*H*W floats, uniform in [-kInputBound, kInputBound).
std::vector<float> make_input(const Graph& g, uint64_t seed = init::kDefaultSeed);

// Parameters of `op` reading `in` (the op's assembled input shape), named `prefix` ("<node>"
// or "<node>.steps[i]"). Ops without parameters give empty vectors. Weights are
// uniform(-b, b) with b = init::weight_bound(fan_in), fan_in = in/groups*kh*kw (conv) or
// C*H*W (linear); biases are uniform(-kBiasBound, kBiasBound).
OpParams make_op_params(const Op& op, const Shape& in, const std::string& prefix,
                        uint64_t seed = init::kDefaultSeed);

// The assembled input shape of node v: one shape per operand for add/mul, otherwise the
// concatenation of its terms (channels summed).
Shape assembled_input_shape(const Graph& g, int v);

// The parameters of every parameterised op of node v: one entry for a conv or linear node,
// one per step for a sequential (empty entries for steps without parameters), none otherwise.
// With layout NHWC, weights are ordered as channels-last kernels read them: a convolution's
// [out][in/groups][kh][kw] becomes [out][kh][kw][in/groups] (cuDNN's KRSC), and a linear
// layer reading more than one pixel takes its input flattened as (h, w, c), so its columns
// are permuted to match. The values are the NCHW ones, only reordered.
// A graph naming a weights file (Graph::weights) takes every parameter from it instead
// (executor/safetensors.hpp); a missing tensor or one of another size is an error naming both.
std::vector<OpParams> make_node_params(const Graph& g, int v, uint64_t seed = init::kDefaultSeed,
                                       Layout layout = Layout::Nchw);

// The constant operands of node v (Node::constants), in order, each as the bytes of its
// values in `storage` (DType::F32 for every float constant on a backend computing in float32;
// integers and bools keep their own type): the constant's inline values, else tensor
// "<owner>.c<operand>" of the graph's weights file, else (floats only) seeded values.
std::vector<std::vector<uint8_t>> make_node_constants(const Graph& g, int v, uint64_t seed = init::kDefaultSeed);

// Every parameter make_node_params would make from `seed`, as the tensors of a weights file
// (conv weights shaped [out][in/groups][kh][kw], linear [out][in], biases [out]).
std::map<std::string, TensorEntry> seeded_weight_tensors(const Graph& g, uint64_t seed = init::kDefaultSeed);

// How many weights and biases each parameterised op of node v has (make_node_params's entries,
// without building their values).
std::vector<std::pair<int64_t, int64_t>> node_param_counts(const Graph& g, int v);

// Empty when `b` is a shape variant of `a`: the same model at another image size or batch (the
// same nodes by name and op in the same order, every node with the same parameter counts), so
// a backend may keep a's weights for b, since their values depend only on the name, the counts
// and the seed. Otherwise the first difference, naming the node.
std::string shape_variant_problem(const Graph& a, const Graph& b);

}  // namespace hios::exec
