// TEMPORARY placeholder while the real builder is written.
#include "graph/error.hpp"
#include "models/models.hpp"
namespace hios {
Graph build_squeezenet(const ModelParams&) { throw Error("squeezenet: not built yet"); }
}  // namespace hios
