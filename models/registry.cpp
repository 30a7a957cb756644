#include "graph/error.hpp"
#include "models/models.hpp"

namespace hios {

const std::vector<ModelInfo>& model_registry() {
  static const std::vector<ModelInfo> models = {
      {"demo", "HIOS README sample: 2 blocks of three parallel 3x3 convs, then sum + concat", 15, build_demo},
      {"inception_v3", "Inception v3 (torchvision, no aux head), 5.7 GMACs at 299", 299, build_inception_v3},
      {"nasnet_large", "NASNet-A Large 6@4032, 23.8 GMACs at 331", 331, build_nasnet_large},
      {"randwire", "RandWire-WS(4, 0.75) small regime (alias of randwire_small), fixed seed", 224,
       build_randwire_small},
      {"randwire_small", "RandWire-WS(4, 0.75), small regime (C=78), fixed seed", 224, build_randwire_small},
      {"randwire_regular", "RandWire-WS(4, 0.75), regular regime (C=109), fixed seed", 224, build_randwire_regular},
      {"randwire_large", "RandWire-WS(4, 0.75), regular regime (C=154, IOS's and HIOS's), fixed seed", 224,
       build_randwire_large},
      {"squeezenet", "SqueezeNet 1.1, 0.35 GMACs at 224", 224, build_squeezenet},
      {"resnet50", "ResNet-50 (control with little branching), 4.1 GMACs at 224", 224, build_resnet50},
  };
  return models;
}

const ModelInfo* find_model(const std::string& name) {
  for (const ModelInfo& m : model_registry()) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

Graph build_model(const std::string& name, ModelParams params) {
  const ModelInfo* m = find_model(name);
  if (!m) {
    std::string known;
    for (const ModelInfo& e : model_registry()) known += (known.empty() ? "" : ", ") + e.name;
    throw_error("unknown model '%s' (known: %s)", name.c_str(), known.c_str());
  }
  if (params.height == 0) params.height = m->default_size;
  if (params.width == 0) params.width = m->default_size;
  HIOS_CHECK(params.batch > 0 && params.height > 0 && params.width > 0,
             "model '%s': batch, height and width must be positive (got %lld, %lld, %lld)", name.c_str(),
             (long long)params.batch, (long long)params.height, (long long)params.width);
  return m->build(params);
}

}  // namespace hios
