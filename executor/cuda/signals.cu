// Flag kernels for the cuda-ipc transport (ipc_transport.cpp) when it signals with kernels
// instead of stream memory operations: one thread each, so they fit beside any compute kernel.
#include "executor/cuda/kernels.hpp"

namespace hios::cuda {

namespace {

__global__ void wait_flag_kernel(unsigned int* flag) {
  // volatile: the peer GPU writes the flag over NVLink; every read must go to memory.
  volatile unsigned int* f = flag;
  while (*f != 1u) __nanosleep(64);
  *f = 0u;  // armed again for the next pass
}

__global__ void set_flag_kernel(unsigned int* flag) {
  __threadfence_system();  // what this stream wrote before (the copy) is visible first
  *reinterpret_cast<volatile unsigned int*>(flag) = 1u;
}

}  // namespace

void launch_wait_flag(unsigned int* flag, cudaStream_t stream) { wait_flag_kernel<<<1, 1, 0, stream>>>(flag); }
void launch_set_flag(unsigned int* flag, cudaStream_t stream) { set_flag_kernel<<<1, 1, 0, stream>>>(flag); }

}  // namespace hios::cuda
