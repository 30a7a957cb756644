#include "executor/cuda/device.hpp"

#include <cublas_v2.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "executor/cuda/check.hpp"
#include "executor/cuda/cublas_lazy.hpp"
#include "executor/cuda/kernels.hpp"

namespace hios::cuda {

// ---------------------------------------------------------------------------------------------
// Error reporting

namespace {
// Per thread: in-process multi-GPU runs make each rank a thread.
std::string& location_storage() {
  thread_local std::string where;
  return where;
}
std::string suffix() {
  const std::string& w = location_storage();
  return w.empty() ? std::string() : " (" + w + ")";
}
}  // namespace

void set_error_location(const std::string& where) { location_storage() = where; }
const std::string& error_location() { return location_storage(); }

void fail_cuda(cudaError_t err, const char* call, const char* file, int line) {
  throw_error("CUDA error %s (%s) in %s at %s:%d%s", cudaGetErrorName(err), cudaGetErrorString(err), call, file,
              line, suffix().c_str());
}

void fail_cudnn(cudnnStatus_t st, const char* call, const char* file, int line) {
  throw_error("cuDNN error %s in %s at %s:%d%s", cudnnGetErrorString(st), call, file, line, suffix().c_str());
}

void fail_cublas(int status, const char* call, const char* file, int line) {
  throw_error("cuBLAS error %s in %s at %s:%d%s", cublas_api().status_string(cublasStatus_t(status)), call, file, line,
              suffix().c_str());
}

void fail_nccl(int result, const char* message, const char* call, const char* file, int line) {
  throw_error("NCCL error %d (%s) in %s at %s:%d%s", result, message, call, file, line, suffix().c_str());
}

std::string format_bytes(size_t bytes) {
  const double b = double(bytes);
  if (b >= 1024.0 * 1024 * 1024) return strprintf("%.2f GiB", b / (1024.0 * 1024 * 1024));
  if (b >= 1024.0 * 1024) return strprintf("%.1f MiB", b / (1024.0 * 1024));
  if (b >= 1024.0) return strprintf("%.1f KiB", b / 1024.0);
  return strprintf("%zu B", bytes);
}

namespace {

// Page-locked words mapped into the GPU's address space: [0] releases hold_kernel, [1] is set
// by it when it stopped waiting. One pair per thread, as in-process multi-GPU runs make each
// rank a thread; nullptr where the allocation failed (then nothing is held).
class HoldWords {
 public:
  HoldWords() {
    void* p = nullptr;
    if (cudaHostAlloc(&p, 2 * sizeof(unsigned int), cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
    void* d = nullptr;
    if (cudaHostGetDevicePointer(&d, p, 0) != cudaSuccess) {
      (void)cudaGetLastError();
      (void)cudaFreeHost(p);
      return;
    }
    host_ = static_cast<unsigned int*>(p);
    device_ = static_cast<unsigned int*>(d);
  }
  ~HoldWords() {
    if (host_ != nullptr) (void)cudaFreeHost(host_);
  }
  HoldWords(const HoldWords&) = delete;
  HoldWords& operator=(const HoldWords&) = delete;
  bool usable() const { return host_ != nullptr; }
  void arm() {
    release()[0] = 0u;
    release()[1] = 0u;
  }
  void let_go() { release()[0] = 1u; }
  bool timed_out() const { return static_cast<volatile const unsigned int*>(host_)[1] != 0u; }
  unsigned int* device() const { return device_; }

 private:
  volatile unsigned int* release() { return host_; }
  unsigned int* host_ = nullptr;
  unsigned int* device_ = nullptr;
};

HoldWords& hold_words() {
  thread_local HoldWords words;
  return words;
}

// Far longer than any submission. A work that waits for its own stream (held) costs this once;
// the runs after it are not held.
constexpr unsigned long long kHoldTimeoutNs = 20'000'000;

}  // namespace

bool measured_once(int device, const std::string& key, const std::function<bool()>& decide) {
  static std::mutex mu;
  static std::map<std::string, bool> decided;
  const std::string k = std::to_string(device) + ":" + key;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = decided.find(k);
    if (it != decided.end()) return it->second;
  }
  const bool yes = decide();
  std::lock_guard<std::mutex> lock(mu);
  decided.emplace(k, yes);
  return yes;
}

double time_on_stream(cudaStream_t stream, const std::function<void()>& work, double give_up_ms) {
  // Each run is queued behind a kernel that holds the stream until the host has queued the
  // whole run, so the events time the GPU alone. Unheld, the first event fires at once on an
  // idle GPU and the time includes the host's submission: a cuDNN graph's tens of us, or a
  // descheduled thread's milliseconds, which a CUDA Graph replay never pays. Two H100 tunes
  // chose the same convolution engine at 20 us in one and 134 us in the other that way.
  HoldWords& hold = hold_words();
  bool holding = hold.usable();
  cudaEvent_t a = nullptr, b = nullptr;
  HIOS_CUDA_CHECK(cudaEventCreate(&a));
  HIOS_CUDA_CHECK(cudaEventCreate(&b));
  double best = 1e300;
  float warm_ms = 0;
  try {
    HIOS_CUDA_CHECK(cudaEventRecord(a, stream));
    work();
    HIOS_CUDA_CHECK(cudaEventRecord(b, stream));
    HIOS_CUDA_CHECK(cudaEventSynchronize(b));
    HIOS_CUDA_CHECK(cudaEventElapsedTime(&warm_ms, a, b));
    for (int i = 0; i < 3 && !(warm_ms > give_up_ms); ++i) {
      const bool held = holding;
      if (held) {
        hold.arm();
        launch_hold(hold.device(), hold.device() + 1, kHoldTimeoutNs, stream);
        HIOS_CUDA_CHECK(cudaGetLastError());
      }
      {
        // Released however this scope ends: a throwing work must not leave the stream held.
        struct Release {
          HoldWords* w;
          ~Release() {
            if (w != nullptr) w->let_go();
          }
        } release{held ? &hold : nullptr};
        HIOS_CUDA_CHECK(cudaEventRecord(a, stream));
        work();
        HIOS_CUDA_CHECK(cudaEventRecord(b, stream));
      }
      HIOS_CUDA_CHECK(cudaEventSynchronize(b));
      if (held && hold.timed_out()) holding = false;
      float ms = 0;
      HIOS_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
      best = std::min(best, double(ms));
    }
  } catch (...) {
    (void)cudaStreamSynchronize(stream);  // the hold, if any, has been released and ends
    (void)cudaEventDestroy(a);
    (void)cudaEventDestroy(b);
    throw;
  }
  (void)cudaEventDestroy(a);
  (void)cudaEventDestroy(b);
  return best < 1e300 ? best : double(warm_ms);
}

void upload(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  HIOS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
  HIOS_CUDA_CHECK(cudaStreamSynchronize(stream));
}

namespace {
// fp32 staging for uploads into 16-bit storage. Outside the accounting on purpose: it lives only
// while a copy lands, never during a pass, and must not count as the framework's memory.
struct Staging {
  void* p = nullptr;
  explicit Staging(size_t bytes) {
    const cudaError_t e = cudaMalloc(&p, bytes == 0 ? 1 : bytes);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      throw_error("out of device memory staging %s for a conversion to or from 16-bit storage",
                  format_bytes(bytes).c_str());
    }
  }
  ~Staging() { (void)cudaFree(p); }
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
};
}  // namespace

void upload_as(void* dst, Elem elem, const float* src, size_t count, cudaStream_t stream) {
  if (elem == Elem::F32) return upload(dst, src, count * sizeof(float), stream);
  Staging tmp(count * sizeof(float));
  HIOS_CUDA_CHECK(cudaMemcpyAsync(tmp.p, src, count * sizeof(float), cudaMemcpyHostToDevice, stream));
  launch_cast(tmp.p, Elem::F32, dst, elem, int64_t(count), stream);
  HIOS_CUDA_CHECK(cudaStreamSynchronize(stream));
}

std::vector<float> download_as(const void* src, Elem elem, size_t count, cudaStream_t stream) {
  std::vector<float> out(count);
  if (elem == Elem::F32) {
    HIOS_CUDA_CHECK(cudaMemcpyAsync(out.data(), src, count * sizeof(float), cudaMemcpyDeviceToHost, stream));
    HIOS_CUDA_CHECK(cudaStreamSynchronize(stream));
    return out;
  }
  std::vector<uint16_t> stored(count);
  HIOS_CUDA_CHECK(cudaMemcpyAsync(stored.data(), src, count * sizeof(uint16_t), cudaMemcpyDeviceToHost, stream));
  HIOS_CUDA_CHECK(cudaStreamSynchronize(stream));
  decode_on_host(stored.data(), elem, count, out.data());
  return out;
}

void encode_on_host(const float* src, Elem elem, size_t count, void* dst) {
  switch (elem) {
    case Elem::F32:
      if (count) std::memcpy(dst, src, count * sizeof(float));
      return;
    case Elem::BF16: {
      auto* out = static_cast<__nv_bfloat16*>(dst);
      for (size_t i = 0; i < count; ++i) out[i] = __float2bfloat16_rn(src[i]);
      return;
    }
    case Elem::F16: {
      auto* out = static_cast<__half*>(dst);
      for (size_t i = 0; i < count; ++i) out[i] = __float2half_rn(src[i]);
      return;
    }
  }
  throw_error("encode_on_host: unknown element type %d", int(elem));
}

void decode_on_host(const void* src, Elem elem, size_t count, float* dst) {
  switch (elem) {
    case Elem::F32:
      if (count) std::memcpy(dst, src, count * sizeof(float));
      return;
    case Elem::BF16: {
      const auto* in = static_cast<const __nv_bfloat16*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = __bfloat162float(in[i]);
      return;
    }
    case Elem::F16: {
      const auto* in = static_cast<const __half*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = __half2float(in[i]);
      return;
    }
  }
  throw_error("decode_on_host: unknown element type %d", int(elem));
}

// ---------------------------------------------------------------------------------------------
// Memory accounting

namespace {
std::mutex g_mem_mutex;
std::unordered_map<int, MemoryStats>& mem_table() {
  static std::unordered_map<int, MemoryStats> t;
  return t;
}
std::unordered_map<int, size_t>& limit_table() {
  static std::unordered_map<int, size_t> t;
  return t;
}
}  // namespace

void set_memory_limit(int device, size_t bytes) {
  std::lock_guard<std::mutex> lock(g_mem_mutex);
  limit_table()[device] = bytes;
}

MemoryStats memory_stats(int device) {
  std::lock_guard<std::mutex> lock(g_mem_mutex);
  return mem_table()[device];
}

void reset_peak_memory(int device) {
  std::lock_guard<std::mutex> lock(g_mem_mutex);
  MemoryStats& s = mem_table()[device];
  s.peak = s.current;
}

DeviceBuffer::DeviceBuffer(int device, size_t bytes, const std::string& what) : device_(device) {
  if (bytes == 0) return;
  {
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    const size_t limit = limit_table()[device];
    const size_t held = mem_table()[device].current;
    if (limit != 0 && held + bytes > limit) {
      throw_error("out of device memory allocating %s (%s) on GPU %d: %s already held, limit %s%s", what.c_str(),
                  format_bytes(bytes).c_str(), device, format_bytes(held).c_str(), format_bytes(limit).c_str(),
                  suffix().c_str());
    }
  }
  HIOS_CUDA_CHECK(cudaSetDevice(device));
  cudaError_t err = cudaMalloc(&ptr_, bytes);
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // clear the sticky-free error so later calls are not blamed
    size_t free_b = 0, total_b = 0;
    (void)cudaMemGetInfo(&free_b, &total_b);
    throw_error("out of device memory allocating %s (%s) on GPU %d: %s free of %s%s", what.c_str(),
                format_bytes(bytes).c_str(), device, format_bytes(free_b).c_str(), format_bytes(total_b).c_str(),
                suffix().c_str());
  }
  if (err != cudaSuccess) fail_cuda(err, "cudaMalloc", __FILE__, __LINE__);
  bytes_ = bytes;
  std::lock_guard<std::mutex> lock(g_mem_mutex);
  MemoryStats& s = mem_table()[device];
  s.current += bytes;
  if (s.current > s.peak) s.peak = s.current;
}

void DeviceBuffer::reset() {
  if (ptr_) {
    // Destructors must not throw; a failing free at teardown leaves nothing to recover.
    (void)cudaSetDevice(device_);
    (void)cudaFree(ptr_);
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    mem_table()[device_].current -= bytes_;
  }
  ptr_ = nullptr;
  bytes_ = 0;
}

DeviceBuffer::~DeviceBuffer() { reset(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)), device_(o.device_) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    device_ = o.device_;
  }
  return *this;
}

// ---------------------------------------------------------------------------------------------
// Streams

StreamResources::StreamResources(int device, int index, int priority) : device_(device), index_(index) {
  HIOS_CUDA_CHECK(cudaSetDevice(device));
  HIOS_CUDA_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, priority));
  HIOS_CUDNN_CHECK(cudnnCreate(&cudnn_));
  HIOS_CUDNN_CHECK(cudnnSetStream(cudnn_, stream_));
}

StreamResources::~StreamResources() {
  (void)cudaSetDevice(device_);
  if (cublas_lt_) (void)cublas_lt_api().destroy(cublas_lt_);
  if (cublas_) (void)cublas_api().destroy(cublas_);
  if (cudnn_) (void)cudnnDestroy(cudnn_);
  if (stream_) (void)cudaStreamDestroy(stream_);
}

cublasHandle_t StreamResources::cublas() {
  if (cublas_) return cublas_;
  HIOS_CUDA_CHECK(cudaSetDevice(device_));
  HIOS_CUBLAS_CHECK(cublas_api().create(&cublas_));
  HIOS_CUBLAS_CHECK(cublas_api().set_stream(cublas_, stream_));
  // A workspace of its own, set once: cuBLAS then allocates nothing while a pass is captured.
  cublas_workspace_ = DeviceBuffer(device_, size_t(32) << 20, strprintf("the cuBLAS workspace of stream %d", index_));
  HIOS_CUBLAS_CHECK(cublas_api().set_workspace(cublas_, cublas_workspace_.get(), cublas_workspace_.bytes()));
  return cublas_;
}

cublasLtHandle_t StreamResources::cublas_lt() {
  (void)cublas();  // its workspace
  if (cublas_lt_) return cublas_lt_;
  HIOS_CUDA_CHECK(cudaSetDevice(device_));
  HIOS_CUBLAS_CHECK(cublas_lt_api().create(&cublas_lt_));
  return cublas_lt_;
}

void StreamResources::reserve_workspace(size_t bytes) {
  if (bytes <= workspace_.bytes()) return;
  workspace_ = DeviceBuffer();  // free first: the old and new need not coexist
  workspace_ = DeviceBuffer(device_, bytes, strprintf("the cuDNN workspace of stream %d", index_));
  ++moves_;
}

void StreamResources::reserve_scratch(size_t bytes) {
  if (bytes <= scratch_.bytes()) return;
  scratch_ = DeviceBuffer();
  scratch_ = DeviceBuffer(device_, bytes, strprintf("the scratch arena of stream %d", index_));
  ++moves_;
}

}  // namespace hios::cuda
