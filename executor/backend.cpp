#include "executor/backend.hpp"

#include <cstring>

#include "graph/error.hpp"

namespace hios::exec {

// Backends that cannot capture say so by name; the runner checks can_capture() first, so
// reaching these means a caller skipped that check.
void Backend::begin_capture() { throw_error("the %s backend cannot capture a pass into a graph", name().c_str()); }
void Backend::end_capture() { throw_error("the %s backend cannot capture a pass into a graph", name().c_str()); }
void Backend::replay() { throw_error("the %s backend cannot replay a captured pass", name().c_str()); }
void Backend::reserve_arena(size_t /*bytes*/) {
  throw_error("the %s backend cannot keep one tensor arena across programs", name().c_str());
}
void Backend::keep(int /*slot*/) { throw_error("the %s backend cannot keep captured passes", name().c_str()); }
PassContents Backend::kept_contents(int /*slot*/, const void* /*data*/, size_t /*bytes*/) const {
  throw_error("the %s backend cannot keep captured passes", name().c_str());
}
void Backend::switch_to(int /*slot*/) { throw_error("the %s backend cannot keep captured passes", name().c_str()); }

// A backend that stores 16-bit elements knows their rounding and overrides this.
void Backend::encode_host(const float* src, size_t count, void* dst) const {
  if (element_bytes() != sizeof(float)) {
    throw_error("the %s backend stores %zu-byte elements and does not say how to encode them", name().c_str(),
                element_bytes());
  }
  if (count) std::memcpy(dst, src, count * sizeof(float));
}

}  // namespace hios::exec
