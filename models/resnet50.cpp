// TEMPORARY placeholder while the real builder is written.
#include "graph/error.hpp"
#include "models/models.hpp"
namespace hios {
Graph build_resnet50(const ModelParams&) { throw Error("resnet50: not built yet"); }
}  // namespace hios
