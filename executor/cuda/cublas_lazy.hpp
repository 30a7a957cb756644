// cuBLAS, opened on first use rather than linked. Loading libcublas pulls in cuBLASLt, whose
// initialisers fault in about 100 MB when the library loads: half a second of every hios
// process's start (26,000 page faults), paid by `hios graph` and the CPU backend too, and
// thousands of times over by the conformance suite and the command-line tests. Only a graph
// with a matmul on the CUDA backend needs cuBLAS, so it is opened when the first handle is made.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>

namespace hios::cuda {

// The entry points hios calls, resolved from the library once (thread-safe). A machine without
// the library gets one error naming it and the paths tried.
struct CublasApi {
  cublasStatus_t (*create)(cublasHandle_t*) = nullptr;
  cublasStatus_t (*destroy)(cublasHandle_t) = nullptr;
  cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t) = nullptr;
  cublasStatus_t (*set_workspace)(cublasHandle_t, void*, size_t) = nullptr;
  const char* (*status_string)(cublasStatus_t) = nullptr;
  // The C entry point (the header's C++ overload taking a cudaDataType compute type is inline).
  cublasStatus_t (*gemm_strided_batched)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                         const void*, const void*, cudaDataType, int, long long int, const void*,
                                         cudaDataType, int, long long int, const void*, void*, cudaDataType, int,
                                         long long int, int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
};
const CublasApi& cublas_api();

// cuBLASLt's entry points, for products with a bias added in the epilogue (the library is the
// one cuBLAS loads anyway), opened the same way.
struct CublasLtApi {
  decltype(&::cublasLtCreate) create = nullptr;
  decltype(&::cublasLtDestroy) destroy = nullptr;
  decltype(&::cublasLtMatmulDescCreate) desc_create = nullptr;
  decltype(&::cublasLtMatmulDescDestroy) desc_destroy = nullptr;
  decltype(&::cublasLtMatmulDescSetAttribute) desc_set = nullptr;
  decltype(&::cublasLtMatrixLayoutCreate) layout_create = nullptr;
  decltype(&::cublasLtMatrixLayoutDestroy) layout_destroy = nullptr;
  decltype(&::cublasLtMatmulPreferenceCreate) preference_create = nullptr;
  decltype(&::cublasLtMatmulPreferenceDestroy) preference_destroy = nullptr;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) preference_set = nullptr;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) heuristic = nullptr;
  decltype(&::cublasLtMatmul) matmul = nullptr;
};
const CublasLtApi& cublas_lt_api();

}  // namespace hios::cuda
