// Device memory and per-stream resources. Internal to executor/cuda.
#pragma once

#include <cuda_runtime.h>
#include <cudnn.h>
#include <cublasLt.h>
#include <cublas_v2.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "executor/cuda/api.hpp"  // format_bytes

namespace hios::cuda {

// Bytes this process holds through DeviceBuffer on each device, now and at its peak. The
// peak is what we report against torch.cuda.max_memory_allocated: both count what the
// framework asked for, not the driver's or the libraries' own reservations.
struct MemoryStats {
  size_t current = 0;
  size_t peak = 0;
};
MemoryStats memory_stats(int device);
void reset_peak_memory(int device);
inline size_t bytes_above(size_t v, size_t base) { return v > base ? v - base : 0; }
// 0: none. Otherwise an allocation that would take the device's total past `bytes` fails as
// out of memory (BackendConfig::memory_limit: tests the out-of-memory path on any GPU).
void set_memory_limit(int device, size_t bytes);

// An owning device allocation. Allocation failure names the tensor and its size.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(int device, size_t bytes, const std::string& what);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return ptr_; }
  float* f32() const { return static_cast<float*>(ptr_); }
  size_t bytes() const { return bytes_; }
  explicit operator bool() const { return ptr_ != nullptr; }
  void reset();

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  int device_ = -1;
};

// One stream with its own cuDNN handle and workspace. Work on different streams never shares
// a handle (a cuDNN handle is bound to one stream) or a workspace (two convolutions running
// concurrently would overwrite each other's scratch). The scratch arena holds assembled node
// inputs and the intermediates of sequential nodes; nodes on one stream run in order, so they
// can all reuse it.
class StreamResources {
 public:
  StreamResources(int device, int index, int priority = 0);
  ~StreamResources();
  StreamResources(const StreamResources&) = delete;
  StreamResources& operator=(const StreamResources&) = delete;

  cudaStream_t stream() const { return stream_; }
  cudnnHandle_t cudnn() const { return cudnn_; }
  // Made on first use (while planning: never inside a capture), bound to this stream.
  cublasHandle_t cublas();
  // cuBLASLt's handle, made on first use as cublas() is; its products use cuBLAS's workspace
  // (one stream runs one at a time).
  cublasLtHandle_t cublas_lt();
  void* cublas_workspace() const { return cublas_workspace_.get(); }
  size_t cublas_workspace_bytes() const { return cublas_workspace_.bytes(); }
  int index() const { return index_; }

  // Grow-only: called while planning, before any capture, so pointers stay fixed afterwards.
  void reserve_workspace(size_t bytes);
  void reserve_scratch(size_t bytes);
  void* workspace() const { return workspace_.get(); }
  size_t workspace_bytes() const { return workspace_.bytes(); }
  void* scratch() const { return scratch_.get(); }
  size_t scratch_bytes() const { return scratch_.bytes(); }
  // How many times the workspace or the scratch arena has moved (grown) so far.
  uint64_t moves() const { return moves_; }

 private:
  int device_;
  int index_;
  cudaStream_t stream_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  cublasLtHandle_t cublas_lt_ = nullptr;
  DeviceBuffer cublas_workspace_;
  DeviceBuffer workspace_;
  DeviceBuffer scratch_;
  uint64_t moves_ = 0;
};


// Device time of `work` (enqueued on `stream`): the fastest of three runs after a warm-up, in
// milliseconds, each queued behind a kernel that holds the stream until the host has queued it,
// so that the host's time to submit it does not count. For choosing between implementations
// while planning, never inside a pass. A warm-up that takes longer than `give_up_ms` is the
// answer itself (a candidate far slower than the best so far is not run three times more).
double time_on_stream(cudaStream_t stream, const std::function<void()>& work, double give_up_ms = INFINITY);

// A choice between two implementations, `decide` (which times both), made once per device and
// key in this process and remembered: a pool's cuDNN or hios kernel, a global pool in parts or
// whole, a resize's image kernel or general walk. The key names the problem fully.
bool measured_once(int device, const std::string& key, const std::function<bool()>& decide);

// Host fp32 values into device storage of type `elem`, and back; both have landed when they
// return. Uploads of 16-bit storage are converted on the device through a staging buffer (fast
// for weights); downloads copy the stored bytes and widen them on the host, which is exact and
// allocates no device memory: cudaFree waits for the whole device, and hios serve reads every
// answer while other models' passes run.
enum class Elem : int;
void upload_as(void* dst, Elem elem, const float* src, size_t count, cudaStream_t stream);
std::vector<float> download_as(const void* src, Elem elem, size_t count, cudaStream_t stream);
// The same conversions on the host: to `elem` rounding to nearest even, as the device's cast
// does, and back (exact).
void encode_on_host(const float* src, Elem elem, size_t count, void* dst);
void decode_on_host(const void* src, Elem elem, size_t count, float* dst);

// Host -> device copy that has landed when it returns. A plain cudaMemcpy from pageable memory
// may return before its DMA finishes, and our streams do not wait for the legacy stream it
// runs on, so the next kernel could read a half-written tensor.
void upload(void* dst, const void* src, size_t bytes, cudaStream_t stream);

}  // namespace hios::cuda
