// The bandwidth a plain device-to-device copy reaches on the current GPU, read and written
// bytes counted: the yardstick both benchmark tools hold memory-bound kernels against ("memory
// time" = their bytes at this rate: what this GPU really sustains, not its datasheet peak).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>

namespace hios::cuda {

// GB/s over `reps` back-to-back copies of `bytes` after one warm-up; NaN when the buffers do
// not fit.
inline double copy_bandwidth_gbs(size_t bytes = size_t(512) << 20, int reps = 10) {
  void *a = nullptr, *b = nullptr;
  if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess) {
    cudaFree(a);
    return NAN;
  }
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);  // warm-up
  cudaEventRecord(e0);
  for (int i = 0; i < reps; ++i) cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice);
  cudaEventRecord(e1);
  cudaEventSynchronize(e1);
  float ms = 0;
  cudaEventElapsedTime(&ms, e0, e1);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(a);
  cudaFree(b);
  return ms > 0 ? 2.0 * double(bytes) * reps / (double(ms) * 1e6) : NAN;
}

}  // namespace hios::cuda
