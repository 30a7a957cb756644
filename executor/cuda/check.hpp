// Error checks for CUDA, cuDNN and NCCL calls. Internal to executor/cuda (it names CUDA types).
//
// Each macro is one statement (do/while(0)), evaluates its call exactly once and throws
// hios::Error naming the failing call, file:line, the library's own error name and, once the
// transport has set it, the rank and host ("rank 1 on gpu-host-a"), because a bare "invalid
// argument" out of an mpirun job with two ranks tells nobody which GPU failed.
#pragma once

#include <cuda_runtime.h>
#include <cudnn.h>

#include <climits>
#include <cstdint>
#include <string>

#include "graph/error.hpp"

namespace hios::cuda {

// "rank R on HOST" once a transport knows it; empty before. Per thread (ranks may be threads).
void set_error_location(const std::string& where);
const std::string& error_location();

[[noreturn]] void fail_cuda(cudaError_t err, const char* call, const char* file, int line);
[[noreturn]] void fail_cudnn(cudnnStatus_t st, const char* call, const char* file, int line);
// cuBLAS's status, as an int for the same reason.
[[noreturn]] void fail_cublas(int status, const char* call, const char* file, int line);
// NCCL's result type is an int-compatible enum; taking int keeps nccl.h out of this header.
[[noreturn]] void fail_nccl(int result, const char* message, const char* call, const char* file, int line);

// v as the int a cuDNN descriptor takes (0 to INT_MAX, or any int for to_int_signed); an error
// naming the node and the quantity when it does not fit.
inline int to_int(int64_t v, const std::string& node, const char* what) {
  HIOS_CHECK(v >= 0 && v <= INT_MAX, "node '%s': %s = %lld exceeds what cuDNN's 32-bit descriptors hold",
             node.c_str(), what, (long long)v);
  return int(v);
}
inline int to_int_signed(int64_t v, const std::string& node, const char* what) {
  HIOS_CHECK(v >= INT_MIN && v <= INT_MAX, "node '%s': %s = %lld exceeds 32 bits", node.c_str(), what, (long long)v);
  return int(v);
}

}  // namespace hios::cuda

#define HIOS_CUDA_CHECK(call)                                              \
  do {                                                                     \
    cudaError_t hios_cuda_err_ = (call);                                   \
    if (hios_cuda_err_ != cudaSuccess) {                                   \
      ::hios::cuda::fail_cuda(hios_cuda_err_, #call, __FILE__, __LINE__);  \
    }                                                                      \
  } while (0)

#define HIOS_CUDNN_CHECK(call)                                             \
  do {                                                                     \
    cudnnStatus_t hios_cudnn_st_ = (call);                                 \
    if (hios_cudnn_st_ != CUDNN_STATUS_SUCCESS) {                          \
      ::hios::cuda::fail_cudnn(hios_cudnn_st_, #call, __FILE__, __LINE__); \
    }                                                                      \
  } while (0)

#define HIOS_CUBLAS_CHECK(call)                                                 \
  do {                                                                          \
    const int hios_cublas_st_ = int(call);                                      \
    if (hios_cublas_st_ != 0) {                                                 \
      ::hios::cuda::fail_cublas(hios_cublas_st_, #call, __FILE__, __LINE__);    \
    }                                                                           \
  } while (0)

// After a kernel launch: a bad configuration surfaces here, not at the next API call.
#define HIOS_CUDA_CHECK_LAUNCH() HIOS_CUDA_CHECK(cudaGetLastError())
