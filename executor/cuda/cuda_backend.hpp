// The CUDA backend class, visible to the NCCL transport beside it. Internal to executor/cuda:
// everything outside reaches it through the executor's registry as an exec::Backend.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "executor/backend.hpp"
#include "executor/cuda/api.hpp"
#include "executor/cuda/device.hpp"
#include "executor/cuda/engine.hpp"

namespace hios::cuda {

class CudaBackend final : public exec::Backend {
 public:
  explicit CudaBackend(const exec::BackendConfig& cfg);
  ~CudaBackend() override;

  std::string name() const override { return "cuda"; }
  void make_current() override;
  std::string device_name() const override;
  std::string versions() const override;
  std::string choice_timing() const override { return "gpu time, stream held while queued"; }
  std::string math() const override { return math_mode_name(math_); }
  size_t element_bytes() const override { return math_element_bytes(math_); }
  void encode_host(const float* src, size_t count, void* dst) const override;
  std::string layout() const override { return exec::layout_name(layout_); }

  void prepare(const Graph& g, const exec::RankProgram& p) override;
  void launch(int node, int stream) override;
  void record(int event, int stream) override;
  void wait(int event, int stream) override;
  void sync_stream(int stream) override;
  void synchronize() override;
  void reserve_markers(int n) override;
  void mark(int marker, int stream) override;
  double marker_ms(int from, int to) override;

  exec::TensorView tensor(int node) override;
  exec::HostBuffer alloc_host(size_t bytes) override;
  void copy_to_host(int node, void* dst, int stream) override;
  void copy_from_host(int node, const void* src, int stream) override;
  void* native_stream(int stream) override;

  void set_input(const std::vector<float>& values) override;
  std::vector<float> read_tensor(int node) override;
  void write_tensor(int node, const std::vector<float>& values) override;
  size_t peak_memory_bytes() const override;
  std::string plan_report() const override;

  json algorithm_choices() const override;
  void adopt_algorithm_choices(const json& recipes) override;

  bool can_capture() const override { return true; }
  bool loads_code_at_first_launch() const override { return true; }
  void begin_capture() override;
  void end_capture() override;
  void replay() override;
  void release_capture() override;

  void reserve_arena(size_t bytes) override;
  bool can_keep() const override { return true; }
  void keep(int slot) override;
  void switch_to(int slot) override;
  bool kept_current(int slot) const override;
  uint64_t resource_epoch() const override;
  exec::PassContents kept_contents(int slot, const void* data, size_t bytes) const override;
  size_t memory_in_use() const override;

  int device() const { return device_; }
  cudaStream_t stream_handle(int stream);

 private:
  void require_prepared(const char* what) const;
  void* resident(int node, const char* what);

  exec::BackendConfig cfg_;
  int device_ = 0;
  MathMode math_ = MathMode::Tf32;
  exec::Layout layout_ = exec::Layout::Nchw;
  const Graph* g_ = nullptr;
  std::unique_ptr<Engine> eng_;
  // Where each node's tensor lives (index: node; null when not resident here). The memory is
  // in storage_: one buffer per tensor, or one arena the program's plan shares out.
  struct Tensor {
    void* data = nullptr;
    size_t bytes = 0;
  };
  std::vector<Tensor> tensors_;
  std::vector<DeviceBuffer> storage_;
  // Index: node; bit s set when the program launches the node on stream s (the engine planned
  // it there). Launches on streams past 63 are refused.
  std::vector<uint64_t> launchable_;
  std::vector<cudaEvent_t> events_;
  std::vector<cudaEvent_t> markers_;  // timing events, kept across programs
  // The program's send and receive streams are not engine streams (they launch no node): they
  // come from this pool, made at cfg_.comm_priority and kept across programs. A program's
  // stream s < num_compute_ is engine stream s; stream num_compute_ + i is comm_streams_[i].
  std::vector<std::unique_ptr<StreamResources>> comm_streams_;
  int num_compute_ = 0;
  int num_streams_ = 0;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  bool capturing_ = false;
  size_t baseline_ = 0;  // device memory other owners held when this backend was made
  size_t used_at_start_ = 0;  // the device's used bytes (cudaMemGetInfo) then
  // reserve_arena's arena, kept across programs; arena_moves_ counts its reallocations.
  DeviceBuffer arena_;
  uint64_t arena_moves_ = 0;
  // Kept captured passes (a shape set), by slot, and the slot current since switch_to (-1: the
  // last prepared program, which launch() drives).
  struct Kept {
    const Graph* g = nullptr;
    std::vector<Tensor> tensors;
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    uint64_t epoch = 0;
  };
  std::map<int, Kept> kept_;
  int current_kept_ = -1;
  void destroy_kept(Kept& k);
};

}  // namespace hios::cuda
