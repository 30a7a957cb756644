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

CublasApi open_cublas() {
  // The toolkit's own copy first (the one the build found), then the loader's search path.
  const std::string soname = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
  std::string tried;
  void* lib = nullptr;
  std::string path;
  for (const std::string& p : {std::string(HIOS_CUDA_LIBRARY_DIR) + "/" + soname, soname}) {
    lib = dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib) {
      path = p;
      break;
    }
    tried += (tried.empty() ? "" : ", ") + p;
  }
  HIOS_CHECK(lib != nullptr, "cannot open cuBLAS (tried %s): %s", tried.c_str(), dlerror());
  CublasApi a;
  resolve(lib, "cublasCreate_v2", &a.create, path);
  resolve(lib, "cublasDestroy_v2", &a.destroy, path);
  resolve(lib, "cublasSetStream_v2", &a.set_stream, path);
  resolve(lib, "cublasSetWorkspace_v2", &a.set_workspace, path);
  resolve(lib, "cublasGetStatusString", &a.status_string, path);
  resolve(lib, "cublasGemmStridedBatchedEx", &a.gemm_strided_batched, path);
  return a;  // the library stays open for the process's life
}

}  // namespace

const CublasApi& cublas_api() {
  static const CublasApi api = open_cublas();
  return api;
}

}  // namespace hios::cuda
