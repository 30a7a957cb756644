// A cache of CPU-reference outputs on disk (hios run --verify --reference-cache DIR).
//
// The CPU reference is the slow part of verifying a large configuration: nasnet_large at 1280
// pixels takes about three minutes of CPU time, while the GPU run it checks takes
// milliseconds. A sweep verifies the same graph (model, size, batch) under many schedules, GPU
// counts and algorithms, and the reference output depends on none of them: only on the graph
// and the seed of the weights and input. So it is computed once and kept, keyed by both.
//
// One file per (graph digest, seed): DIR/<digest>-seed<seed>.ref, a one-line JSON header
// naming what it holds, then the output as little-endian float32 in NCHW order. A file that
// does not match its key or its header's length is ignored (and replaced), never trusted.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "executor/session.hpp"
#include "graph/graph.hpp"

namespace hios::exec {

std::string reference_cache_file(const std::string& dir, const Graph& g, uint64_t seed);
// The cached reference output of g under seed, if DIR holds a whole one.
std::optional<std::vector<float>> load_reference(const std::string& dir, const Graph& g, uint64_t seed);
// Writes it atomically (creating DIR if needed).
void store_reference(const std::string& dir, const Graph& g, uint64_t seed, const std::vector<float>& output);

// The output of the first image of g's batch under the reference session `ref` (the CPU
// backend), computed on that image alone: the batch-1 graph of g (graph_at_shape) on the first
// image of `input`. Images are independent and weights depend on node names and the seed, not
// the batch, so it is the first image of g's whole-batch output at 1/batch of the cost. With a
// cache folder, it is read from and left in DIR as the batch-1 graph's reference: a sweep's
// batch-1 rows and every batch of the same model and size share one file. `cached` says
// whether it came from DIR.
std::vector<float> first_image_reference(const Graph& g, const SessionOptions& ref, const std::vector<float>& input,
                                         const std::string& cache_dir, uint64_t seed, bool* cached = nullptr);

}  // namespace hios::exec
