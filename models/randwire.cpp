// TEMPORARY placeholder while the real builder is written.
#include "graph/error.hpp"
#include "models/models.hpp"
namespace hios {
Graph build_randwire_small(const ModelParams&) { throw Error("randwire: not built yet"); }
Graph build_randwire_regular(const ModelParams&) { throw Error("randwire: not built yet"); }
}  // namespace hios
