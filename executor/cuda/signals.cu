// Kernels of the cuda-ipc transport (ipc_transport.cpp): the push that copies a tensor into the
// peer's buffer and signals it, and one-thread flag kernels. A wait spins inside a kernel, as NCCL's do, rather than in a
// stream memory operation (cuStreamWaitValue32): a blocked memory operation stalls the GPU's
// hardware queue it sits in, and with more streams than queues that stalls unrelated streams,
// which can close a cycle through the peer GPU (a two-GPU nasnet_large pass hung that way).
#include <algorithm>

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

// Every block waits for the receiver's "ready", copies its share in 16-byte words (the bytes
// past the last whole word go to block 0), and counts itself done; the last block re-arms
// "ready" and the counter and sets the receiver's "done" once every block's stores are visible.
__global__ void push_kernel(const uint4* src, uint4* dst, size_t words, const unsigned char* src_tail,
                            unsigned char* dst_tail, int tail_bytes, unsigned int* ready, unsigned int* done_remote,
                            unsigned int* blocks_done) {
  if (threadIdx.x == 0) {
    volatile unsigned int* r = ready;
    while (*r != 1u) __nanosleep(32);
  }
  __syncthreads();
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < words; i += size_t(gridDim.x) * blockDim.x) {
    dst[i] = src[i];
  }
  if (blockIdx.x == 0 && int(threadIdx.x) < tail_bytes) dst_tail[threadIdx.x] = src_tail[threadIdx.x];
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x == 0 && atomicAdd(blocks_done, 1u) == gridDim.x - 1) {
    *reinterpret_cast<volatile unsigned int*>(ready) = 0u;
    *reinterpret_cast<volatile unsigned int*>(blocks_done) = 0u;
    __threadfence_system();
    *reinterpret_cast<volatile unsigned int*>(done_remote) = 1u;
  }
}

__global__ void set_flag_kernel(unsigned int* flag) {
  __threadfence_system();  // what this stream wrote before (the copy) is visible first
  *reinterpret_cast<volatile unsigned int*>(flag) = 1u;
}

__global__ void set_then_wait_kernel(unsigned int* remote, unsigned int* local) {
  *reinterpret_cast<volatile unsigned int*>(remote) = 1u;
  spin_until_set(local);
}

}  // namespace

void launch_push(const void* src, void* dst, size_t bytes, unsigned int* ready, unsigned int* done_remote,
                 unsigned int* blocks_done, cudaStream_t stream) {
  constexpr int kThreads = 512;
  const size_t words = bytes / 16;
  const int tail = int(bytes % 16);
  // About 64 KiB per block, at most 32 blocks: a few SMs, enough to keep NVLink busy.
  const int blocks = int(std::min<size_t>(32, std::max<size_t>(1, bytes / 65536)));
  push_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<const uint4*>(src), static_cast<uint4*>(dst), words,
                                               static_cast<const unsigned char*>(src) + words * 16,
                                               static_cast<unsigned char*>(dst) + words * 16, tail, ready, done_remote,
                                               blocks_done);
}

cudaError_t load_signal_kernels() {
  cudaFuncAttributes a{};
  for (const void* k : {reinterpret_cast<const void*>(&push_kernel), reinterpret_cast<const void*>(&wait_flag_kernel),
                        reinterpret_cast<const void*>(&set_flag_kernel),
                        reinterpret_cast<const void*>(&set_then_wait_kernel)}) {
    const cudaError_t e = cudaFuncGetAttributes(&a, k);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

void launch_wait_flag(unsigned int* flag, cudaStream_t stream) { wait_flag_kernel<<<1, 1, 0, stream>>>(flag); }
void launch_set_flag(unsigned int* flag, cudaStream_t stream) { set_flag_kernel<<<1, 1, 0, stream>>>(flag); }
void launch_set_then_wait_flag(unsigned int* remote, unsigned int* local, cudaStream_t stream) {
  set_then_wait_kernel<<<1, 1, 0, stream>>>(remote, local);
}

}  // namespace hios::cuda
