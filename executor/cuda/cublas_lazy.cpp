#include "executor/cuda/cublas_lazy.hpp"

#include <dlfcn.h>

#include <mutex>
#include <string>

#include "graph/error.hpp"

namespace hios::cuda {

namespace {

template <class F>
void resolve(void* lib, const char* name, F* out, const std::string& path) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  HIOS_CHECK(*out != nullptr, "%s has no symbol %s", path.c_str(), name);
}

// The library `stem` (libcublas, libcublasLt) of the toolkit's major version: the toolkit's own
// copy first (the one the build found), then the loader's search path. Stays open for the
// process's life.
void* open_library(const std::string& stem, const char* what, std::string* path) {
  const std::string soname = stem + ".so." + std::to_string(CUBLAS_VER_MAJOR);
  std::string tried;
  for (const std::string& p : {std::string(HIOS_CUDA_LIBRARY_DIR) + "/" + soname, soname}) {
    if (void* lib = dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      *path = p;
      return lib;
    }
    tried += (tried.empty() ? "" : ", ") + p;
  }
  throw_error("cannot open %s (tried %s): %s", what, tried.c_str(), dlerror());
}

CublasApi open_cublas() {
  std::string path;
  void* lib = open_library("libcublas", "cuBLAS", &path);
  CublasApi a;
  resolve(lib, "cublasCreate_v2", &a.create, path);
  resolve(lib, "cublasDestroy_v2", &a.destroy, path);
  resolve(lib, "cublasSetStream_v2", &a.set_stream, path);
  resolve(lib, "cublasSetWorkspace_v2", &a.set_workspace, path);
  resolve(lib, "cublasGetStatusString", &a.status_string, path);
  resolve(lib, "cublasGemmStridedBatchedEx", &a.gemm_strided_batched, path);
  return a;
}

CublasLtApi open_cublas_lt() {
  std::string path;
  void* lib = open_library("libcublasLt", "cuBLASLt", &path);
  CublasLtApi a;
  resolve(lib, "cublasLtCreate", &a.create, path);
  resolve(lib, "cublasLtDestroy", &a.destroy, path);
  resolve(lib, "cublasLtMatmulDescCreate", &a.desc_create, path);
  resolve(lib, "cublasLtMatmulDescDestroy", &a.desc_destroy, path);
  resolve(lib, "cublasLtMatmulDescSetAttribute", &a.desc_set, path);
  resolve(lib, "cublasLtMatrixLayoutCreate", &a.layout_create, path);
  resolve(lib, "cublasLtMatrixLayoutDestroy", &a.layout_destroy, path);
  resolve(lib, "cublasLtMatmulPreferenceCreate", &a.preference_create, path);
  resolve(lib, "cublasLtMatmulPreferenceDestroy", &a.preference_destroy, path);
  resolve(lib, "cublasLtMatmulPreferenceSetAttribute", &a.preference_set, path);
  resolve(lib, "cublasLtMatmulAlgoGetHeuristic", &a.heuristic, path);
  resolve(lib, "cublasLtMatmul", &a.matmul, path);
  return a;
}

}  // namespace

const CublasApi& cublas_api() {
  static const CublasApi api = open_cublas();
  return api;
}

const CublasLtApi& cublas_lt_api() {
  static const CublasLtApi api = open_cublas_lt();
  return api;
}

}  // namespace hios::cuda
