// Builds without the CUDA backend or CUPTI: the profiler's measuring side is absent, and
// saying so is its whole job (profile_builder.cpp still serves tests and tools).
#include "graph/error.hpp"
#include "profiler/gpu_profiler.hpp"

namespace hios::prof {

bool gpu_profiler_built() { return false; }

ProfileDb profile_gpus(const Graph&, const ProfileOptions&, ProfileReport*) {
  throw_error(
      "hios profile measures on GPUs, and this build has no CUDA backend with CUPTI (configure on a machine with "
      "CUDA, cuDNN and CUPTI, e.g. cmake -DHIOS_CUDA=ON)");
}

}  // namespace hios::prof
