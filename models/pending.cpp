// TEMPORARY: placeholders while the real builders are written; removed before the issue closes.
#include "graph/error.hpp"
#include "models/models.hpp"
namespace hios {
Graph build_inception_v3(const ModelParams&) { throw Error("inception_v3: not built yet"); }
Graph build_nasnet_large(const ModelParams&) { throw Error("nasnet_large: not built yet"); }
Graph build_randwire_small(const ModelParams&) { throw Error("randwire: not built yet"); }
Graph build_randwire_regular(const ModelParams&) { throw Error("randwire: not built yet"); }
Graph build_squeezenet(const ModelParams&) { throw Error("squeezenet: not built yet"); }
Graph build_resnet50(const ModelParams&) { throw Error("resnet50: not built yet"); }
}  // namespace hios
