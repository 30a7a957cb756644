// TEMPORARY placeholder while the real builder is written.
#include "graph/error.hpp"
#include "models/models.hpp"
namespace hios {
Graph build_nasnet_large(const ModelParams&) { throw Error("nasnet_large: not built yet"); }
}  // namespace hios
