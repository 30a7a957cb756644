// ONNX models as hios graphs: `hios import model.onnx -o model.json`.
//
// The importer reads an ONNX model (protobuf, through Debian's libonnx-dev schema), evaluates
// what is constant (initializers, shape arithmetic, Identity, Dropout), maps the rest onto the
// op table (graph/ops.hpp) and finds the DAG's blocks. Along the way it folds what hios
// computes in one op: BatchNormalization and per-channel Mul/Add into the convolution before
// them (or a depthwise 1x1 convolution where there is none), an activation into the op that
// produces its input, a zero Pad into the padding of the convolution or average pool after
// it, Concat and a two-input Add into the input terms of their only reader, and
// Flatten/Reshape/Squeeze before a Gemm into the linear layer's flattening. The parameters go
// to a safetensors file under the names hios reads (executor/safetensors.hpp).
//
// What cannot be imported is refused in one error listing every such node (op, node name,
// opset and why), not only the first.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "executor/safetensors.hpp"
#include "graph/graph.hpp"

namespace hios::importer {

struct OnnxImportOptions {
  std::string model_file;
  // The input's size; 0 takes the model's own (a dimension the model leaves symbolic must be
  // given). Convolutions and pools follow any size; shape arithmetic is re-evaluated for it.
  int64_t batch = 0, height = 0, width = 0;
  std::string name;  // the graph's name; empty: the model's graph name, else the file's stem
  // Symbolic dims bound by name (--dim NAME=V), for inputs beyond the image's N, H and W.
  std::map<std::string, int64_t> dims;
  // Inputs whose values are fixed at import (--freeze NAME=FILE.npy): they become constants, so
  // shape arithmetic on them folds (a Reshape's target shape given as a graph input).
  std::map<std::string, std::string> frozen;
};

struct OnnxImport {
  Graph graph;  // graph.weights is left empty: the caller names the file it writes
  std::map<std::string, exec::TensorEntry> weights;
  int opset = 0;             // of the default ("" / ai.onnx) domain
  int onnx_nodes = 0;        // nodes in the model's graph
  std::vector<std::string> folded;  // what was folded, one short line each ("94 BatchNormalization into convolutions")
};

// Throws hios::Error naming the file (and every unsupported node) on a model it cannot import.
OnnxImport import_onnx(const OnnxImportOptions& options);

}  // namespace hios::importer
