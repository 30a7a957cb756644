// The model zoo: functions that build Graphs. Inference path only; batch norm is folded into
// the preceding conv (which then carries a bias), so no model contains a BN node.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "graph/graph.hpp"

namespace hios {

struct ModelParams {
  int64_t batch = 1;
  int64_t height = 0;  // 0: the model's standard resolution
  int64_t width = 0;
};

struct ModelInfo {
  std::string name;
  std::string description;  // one line
  int64_t default_size;     // standard square resolution
  std::function<Graph(const ModelParams&)> build;
};

// Every model, in the order `hios models` lists them.
const std::vector<ModelInfo>& model_registry();
const ModelInfo* find_model(const std::string& name);  // nullptr when unknown
// Builds by name; unknown names and bad sizes are hios::Error. Zero height/width mean the
// model's standard resolution.
Graph build_model(const std::string& name, ModelParams params);

// The builders (each in its own file).
Graph build_demo(const ModelParams& p);
Graph build_inception_v3(const ModelParams& p);
Graph build_nasnet_large(const ModelParams& p);
Graph build_randwire_small(const ModelParams& p);
Graph build_randwire_regular(const ModelParams& p);
Graph build_randwire_large(const ModelParams& p);  // regular regime, C=154
Graph build_squeezenet(const ModelParams& p);
Graph build_resnet50(const ModelParams& p);

}  // namespace hios
