// The kernel that holds a stream while the host queues the work it times (time_on_stream in
// device.cpp): the events around the work then measure the GPU, not how long the host took to
// submit it.
#include "executor/cuda/kernels.hpp"

namespace hios::cuda {

namespace {

__device__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void hold_kernel(const unsigned int* release, unsigned int* timed_out, unsigned long long timeout_ns) {
  // volatile: the host writes the flag through mapped memory; every read must go to memory.
  const volatile unsigned int* r = release;
  const unsigned long long start = global_ns();
  while (*r == 0u) {
    if (global_ns() - start > timeout_ns) {
      *reinterpret_cast<volatile unsigned int*>(timed_out) = 1u;
      return;
    }
    __nanosleep(256);
  }
}

}  // namespace

void launch_hold(const unsigned int* release, unsigned int* timed_out, unsigned long long timeout_ns,
                 cudaStream_t stream) {
  hold_kernel<<<1, 1, 0, stream>>>(release, timed_out, timeout_ns);
}

}  // namespace hios::cuda
