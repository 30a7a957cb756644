// TEMPORARY placeholder while the real builder is written.
#include "graph/error.hpp"
#include "models/models.hpp"
namespace hios {
Graph build_inception_v3(const ModelParams&) { throw Error("inception_v3: not built yet"); }
}  // namespace hios
