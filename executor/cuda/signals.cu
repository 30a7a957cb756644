// Flag kernels of the cuda-ipc transport (ipc_transport.cpp): one thread each, so they fit
// beside any compute kernel. A wait spins inside a kernel, as NCCL's do, rather than in a
// stream memory operation (cuStreamWaitValue32): a blocked memory operation stalls the GPU's
// hardware queue it sits in, and with more streams than queues that stalls unrelated streams,
// which can close a cycle through the peer GPU (a two-GPU nasnet_large pass hung that way).
#include "executor/cuda/kernels.hpp"

namespace hios::cuda {

namespace {

__device__ void spin_until_set(unsigned int* flag) {
  // volatile: the peer GPU writes the flag over NVLink; every read must go to memory.
  volatile unsigned int* f = flag;
  while (*f != 1u) __nanosleep(32);
  *f = 0u;  // armed again for the next pass
}

__global__ void wait_flag_kernel(unsigned int* flag) { spin_until_set(flag); }

__global__ void set_flag_kernel(unsigned int* flag) {
  __threadfence_system();  // what this stream wrote before (the copy) is visible first
  *reinterpret_cast<volatile unsigned int*>(flag) = 1u;
}

__global__ void set_then_wait_kernel(unsigned int* remote, unsigned int* local) {
  *reinterpret_cast<volatile unsigned int*>(remote) = 1u;
  spin_until_set(local);
}

}  // namespace

void launch_wait_flag(unsigned int* flag, cudaStream_t stream) { wait_flag_kernel<<<1, 1, 0, stream>>>(flag); }
void launch_set_flag(unsigned int* flag, cudaStream_t stream) { set_flag_kernel<<<1, 1, 0, stream>>>(flag); }
void launch_set_then_wait_flag(unsigned int* remote, unsigned int* local, cudaStream_t stream) {
  set_then_wait_kernel<<<1, 1, 0, stream>>>(remote, local);
}

}  // namespace hios::cuda
