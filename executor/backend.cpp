#include "executor/backend.hpp"

#include "graph/error.hpp"

namespace hios::exec {

// Backends that cannot capture say so by name; the runner checks can_capture() first, so
// reaching these means a caller skipped that check.
void Backend::begin_capture() { throw_error("the %s backend cannot capture a pass into a graph", name().c_str()); }
void Backend::end_capture() { throw_error("the %s backend cannot capture a pass into a graph", name().c_str()); }
void Backend::replay() { throw_error("the %s backend cannot replay a captured pass", name().c_str()); }

}  // namespace hios::exec
