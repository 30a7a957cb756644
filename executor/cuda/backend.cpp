// exec::Backend on one GPU: the engine's plans driven by a rank program's instructions, with
// whole-pass CUDA Graph capture.
#include <algorithm>
#include <cstdlib>

#include "executor/cuda/check.hpp"
#include "executor/cuda/conv.hpp"
#include "executor/cuda/cuda_backend.hpp"
#include "executor/memory_plan.hpp"
#include "executor/registry.hpp"

namespace hios::cuda {

CudaBackend::CudaBackend(const exec::BackendConfig& cfg) : cfg_(cfg) {
  const int n = device_count();
  HIOS_CHECK(n > 0, "the cuda backend needs a GPU, and this process sees none");
  device_ = cfg.device < 0 ? 0 : cfg.device;
  HIOS_CHECK(device_ < n, "the cuda backend was given GPU %d, but this process sees %d GPU%s", device_, n,
             n == 1 ? "" : "s");
  math_ = parse_math_mode(cfg.math);
  layout_ = exec::parse_layout(cfg.layout);
  HIOS_CUDA_CHECK(cudaSetDevice(device_));
  set_memory_limit(device_, cfg.memory_limit);
  baseline_ = memory_stats(device_).current;
  size_t free = 0, total = 0;
  HIOS_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  used_at_start_ = total - free;
}

CudaBackend::~CudaBackend() {
  (void)cudaSetDevice(device_);
  (void)cudaDeviceSynchronize();
  if (exec_) (void)cudaGraphExecDestroy(exec_);
  if (graph_) (void)cudaGraphDestroy(graph_);
  for (auto& [slot, k] : kept_) destroy_kept(k);
  for (cudaEvent_t e : events_) (void)cudaEventDestroy(e);
  for (cudaEvent_t e : markers_) (void)cudaEventDestroy(e);
  // The engine and the tensors go after the events; their own destructors free them.
}

std::string CudaBackend::device_name() const {
  cudaDeviceProp p{};
  HIOS_CUDA_CHECK(cudaGetDeviceProperties(&p, device_));
  char bus[32] = {0};
  HIOS_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, device_));
  return strprintf("%s (bus %s)", p.name, bus);
}

std::string CudaBackend::versions() const {
  int driver = 0, runtime = 0;
  HIOS_CUDA_CHECK(cudaDriverGetVersion(&driver));
  HIOS_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  const size_t v = cudnnGetVersion();
  return strprintf("CUDA runtime %d.%d, driver %d.%d, cuDNN %zu.%zu.%zu", runtime / 1000, (runtime % 1000) / 10,
                   driver / 1000, (driver % 1000) / 10, v / 10000, (v % 10000) / 100, v % 100);
}

void CudaBackend::require_prepared(const char* what) const {
  HIOS_CHECK(eng_ != nullptr, "cuda backend: %s before prepare()", what);
}

void* CudaBackend::resident(int node, const char* what) {
  require_prepared(what);
  HIOS_CHECK(node >= 0 && node < g_->size() && tensors_[size_t(node)].data,
             "cuda backend: %s of node %d, which is not resident on this rank", what, node);
  return tensors_[size_t(node)].data;
}

json CudaBackend::algorithm_choices() const { return conv_choices(device_); }

void CudaBackend::adopt_algorithm_choices(const json& recipes) { adopt_conv_choices(device_, recipes); }

cudaStream_t CudaBackend::stream_handle(int stream) {
  require_prepared("stream access");
  HIOS_CHECK(stream >= 0 && stream < num_streams_, "cuda backend: stream %d out of range (%d streams)", stream,
             num_streams_);
  if (stream < num_compute_) return eng_->stream(stream).stream();
  return comm_streams_[size_t(stream - num_compute_)]->stream();
}

void CudaBackend::prepare(const Graph& g, const exec::RankProgram& p) {
  HIOS_CUDA_CHECK(cudaSetDevice(device_));
  current_kept_ = -1;
  if (eng_ && g_ != &g) {
    // Another graph of the same model (a shape set's shape, a row split in the tuner): the
    // engine keeps the weights, found again by their owner's name and counts.
    release_capture();
    eng_->retarget(g);
  }
  if (eng_) {
    // Another program of the same graph: drop everything tied to the last one. The engine
    // keeps the weights and the algorithm choices, which is the point of a rank session.
    release_capture();
    eng_->reset_plans();
    for (cudaEvent_t e : events_) (void)cudaEventDestroy(e);
    events_.clear();
    tensors_.clear();
    storage_.clear();
  } else {
    int least = 0, greatest = 0;
    HIOS_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    eng_ = std::make_unique<Engine>(g, Engine::Options{device_, math_, cfg_.seed, parse_conv_impl(cfg_.conv_impl), layout_,
                                                       cfg_.compute_priority == "high" ? greatest : 0, cfg_.fold_relu,
                                                       cfg_.conv_search == "wide"});
  }
  g_ = &g;
  // Lowering puts the compute streams first; the send and receive streams follow.
  num_compute_ = 0;
  while (num_compute_ < int(p.streams.size()) && p.streams[size_t(num_compute_)].kind == exec::StreamKind::Compute) {
    ++num_compute_;
  }
  for (size_t s = size_t(num_compute_); s < p.streams.size(); ++s) {
    HIOS_CHECK(p.streams[s].kind != exec::StreamKind::Compute,
               "cuda backend: compute stream %zu comes after a send or receive stream", s);
  }
  num_streams_ = int(p.streams.size());
  eng_->ensure_streams(std::max(num_compute_, 1));
  if (comm_streams_.size() < size_t(num_streams_ - num_compute_)) {
    int least = 0, greatest = 0;
    HIOS_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    const int priority = cfg_.comm_priority == "high" ? greatest : 0;
    while (comm_streams_.size() < size_t(num_streams_ - num_compute_)) {
      comm_streams_.push_back(std::make_unique<StreamResources>(device_, 1000 + int(comm_streams_.size()), priority));
    }
  }
  tensors_.assign(size_t(g.size()), Tensor{});
  launchable_.assign(size_t(g.size()), 0);
  // Bands of rows in place (RowGroup) need a layout where a band is one run of memory.
  HIOS_CHECK(p.row_groups.empty() || (layout_ == exec::Layout::Nhwc && g.batch == 1),
             "cuda backend: the memory plan holds bands of rows in place, which needs NHWC at batch 1; this backend "
             "stores %s at batch %lld", exec::layout_name(layout_), (long long)g.batch);
  void* arena = nullptr;
  if (p.arena_bytes > 0 && reserved_arena_ > 0) {
    if (size_t(p.arena_bytes) > arena_.bytes()) reserve_arena(size_t(p.arena_bytes));
    arena = arena_.get();
  } else if (p.arena_bytes > 0) {
    storage_.emplace_back(device_, size_t(p.arena_bytes), exec::arena_description(g, p));
    arena = storage_.front().get();
  }
  std::vector<std::pair<int, int>> plan;
  auto plan_on = [&](int node, int stream) {
    HIOS_CHECK(node >= 0 && node < g.size() && stream >= 0 && stream < int(p.streams.size()),
               "cuda backend: launch of node %d on stream %d is outside the program", node, stream);
    HIOS_CHECK(stream < 64, "cuda backend: node '%s' is launched on compute stream %d; at most 64 are supported",
               g.nodes[size_t(node)].name.c_str(), stream);
    const uint64_t bit = uint64_t(1) << stream;
    if (launchable_[size_t(node)] & bit) return;  // the pass and the standby list may both name it
    launchable_[size_t(node)] |= bit;
    plan.emplace_back(node, stream);
  };
  for (const exec::Instr& in : p.instrs) {
    if (in.kind == exec::InstrKind::Alloc) {
      const Node& nd = g.nodes.at(size_t(in.node));
      // Integer tensors: graph inputs (token ids, masks) held as they are given, which the
      // gathers and casts that read them take; 16-bit storage refuses them (program.cpp).
      HIOS_CHECK(is_float(nd.dtype) || (nd.dtype == DType::I64 && g.is_input(in.node)),
                 "node '%s' holds %s values: the cuda backend holds float tensors and int64 graph inputs only "
                 "(--backend cpu runs integer and bool tensors)", nd.name.c_str(), dtype_name(nd.dtype));
      // RankSession::load sized the program for this backend's element_bytes().
      const int64_t want = nd.shape.numel() * int64_t(is_float(nd.dtype) ? element_bytes() : dtype_size(nd.dtype));
      HIOS_CHECK(in.bytes == want, "cuda backend: Alloc of '%s' asks for %lld bytes, its shape %s holds %lld in %s",
                 nd.name.c_str(), (long long)in.bytes, nd.shape.str().c_str(), (long long)want, math_mode_name(math_));
      Tensor& t = tensors_[size_t(in.node)];
      t.bytes = size_t(in.bytes);
      // Outside the arena (offset -1): an integer graph input under 16-bit storage.
      if (p.arena_bytes > 0 && (in.offset >= 0 || is_float(nd.dtype))) {
        HIOS_CHECK(in.offset >= 0 && in.offset + in.bytes <= p.arena_bytes,
                   "cuda backend: tensor '%s' is planned at offset %lld, outside the %lld-byte arena", nd.name.c_str(),
                   (long long)in.offset, (long long)p.arena_bytes);
        t.data = static_cast<char*>(arena) + in.offset;
      } else {
        storage_.emplace_back(device_, size_t(in.bytes), "tensor '" + nd.name + "' (" + nd.shape.str() + ")");
        t.data = storage_.back().get();
      }
      eng_->bind_output(in.node, t.data);
    } else if (in.kind == exec::InstrKind::Launch) {
      plan_on(in.node, in.stream);
    }
  }
  for (const auto& [node, stream] : p.standby) plan_on(node, stream);
  eng_->plan(plan);
  events_.resize(size_t(p.num_events), nullptr);
  for (cudaEvent_t& e : events_) HIOS_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  // The peak that counts is the one of a pass: cudnnFind's trial workspace is gone by now.
  reset_peak_memory(device_);
}

void CudaBackend::launch(int node, int stream) {
  require_prepared("launch");
  HIOS_CHECK(current_kept_ < 0, "cuda backend: launch of node %d while kept slot %d is current (prepare it again)",
             node, current_kept_);
  HIOS_CHECK(node >= 0 && node < g_->size() && stream >= 0 && stream < 64 &&
                 (launchable_[size_t(node)] >> stream & 1),
             "cuda backend: node %d launched on stream %d, where the program never launches it", node, stream);
  eng_->launch(node, stream);
}

std::string CudaBackend::plan_report() const {
  if (!eng_) return "";
  return strprintf("weights %s\n", format_bytes(eng_->weight_bytes()).c_str()) + eng_->algorithm_report();
}

void CudaBackend::make_current() { HIOS_CUDA_CHECK(cudaSetDevice(device_)); }

void CudaBackend::reserve_markers(int n) {
  HIOS_CUDA_CHECK(cudaSetDevice(device_));
  while (int(markers_.size()) < n) {
    cudaEvent_t e = nullptr;
    HIOS_CUDA_CHECK(cudaEventCreate(&e));  // timing enabled: that is what markers are for
    markers_.push_back(e);
  }
}

void CudaBackend::mark(int marker, int stream) {
  HIOS_CHECK(marker >= 0 && marker < int(markers_.size()), "cuda backend: marker %d out of range (%zu reserved)",
             marker, markers_.size());
  HIOS_CHECK(!capturing_, "cuda backend: a timing marker inside a captured pass");
  HIOS_CUDA_CHECK(cudaEventRecord(markers_[size_t(marker)], stream_handle(stream)));
}

double CudaBackend::marker_ms(int from, int to) {
  HIOS_CHECK(from >= 0 && to >= 0 && from < int(markers_.size()) && to < int(markers_.size()),
             "cuda backend: markers %d, %d out of range (%zu reserved)", from, to, markers_.size());
  float ms = 0;
  HIOS_CUDA_CHECK(cudaEventElapsedTime(&ms, markers_[size_t(from)], markers_[size_t(to)]));
  return double(ms);
}

void CudaBackend::record(int event, int stream) {
  require_prepared("record");
  HIOS_CHECK(event >= 0 && event < int(events_.size()), "cuda backend: event %d out of range", event);
  HIOS_CUDA_CHECK(cudaEventRecord(events_[size_t(event)], stream_handle(stream)));
}

void CudaBackend::wait(int event, int stream) {
  require_prepared("wait");
  HIOS_CHECK(event >= 0 && event < int(events_.size()), "cuda backend: event %d out of range", event);
  HIOS_CUDA_CHECK(cudaStreamWaitEvent(stream_handle(stream), events_[size_t(event)], 0));
}

void CudaBackend::sync_stream(int stream) { HIOS_CUDA_CHECK(cudaStreamSynchronize(stream_handle(stream))); }

void CudaBackend::synchronize() {
  require_prepared("synchronize");
  for (int s = 0; s < eng_->num_streams(); ++s) HIOS_CUDA_CHECK(cudaStreamSynchronize(eng_->stream(s).stream()));
  for (const auto& c : comm_streams_) HIOS_CUDA_CHECK(cudaStreamSynchronize(c->stream()));
}

exec::TensorView CudaBackend::tensor(int node) {
  void* p = resident(node, "tensor access");
  return exec::TensorView{p, tensors_[size_t(node)].bytes, exec::MemoryKind::Device};
}

exec::HostBuffer CudaBackend::alloc_host(size_t bytes) {
  void* p = nullptr;
  HIOS_CUDA_CHECK(cudaMallocHost(&p, bytes == 0 ? 1 : bytes));
  return exec::HostBuffer(p, [](void* q) { (void)cudaFreeHost(q); });
}

void CudaBackend::copy_to_host(int node, void* dst, int stream) {
  void* p = resident(node, "copy to host");
  HIOS_CUDA_CHECK(cudaMemcpyAsync(dst, p, tensors_[size_t(node)].bytes, cudaMemcpyDeviceToHost, stream_handle(stream)));
}

void CudaBackend::copy_from_host(int node, const void* src, int stream) {
  void* p = resident(node, "copy from host");
  HIOS_CUDA_CHECK(cudaMemcpyAsync(p, src, tensors_[size_t(node)].bytes, cudaMemcpyHostToDevice, stream_handle(stream)));
}

void* CudaBackend::native_stream(int stream) { return static_cast<void*>(stream_handle(stream)); }

// Rounded on the host as the device-side cast that set_input uses rounds (to nearest even), so
// that a row encoded here and one uploaded through set_input agree bit for bit: hios serve's spot
// checks compare the two.
void CudaBackend::encode_host(const float* src, size_t count, void* dst) const {
  encode_on_host(src, storage_elem(math_), count, dst);
}

void CudaBackend::set_input(const std::vector<float>& values) {
  const int in = g_ ? g_->input() : 0;
  void* p = resident(in, "set_input");
  HIOS_CHECK(values.size() * element_bytes() == tensors_[size_t(in)].bytes,
             "cuda backend: set_input got %zu values, the input holds %zu", values.size(),
             tensors_[size_t(in)].bytes / element_bytes());
  synchronize();
  // The user's values are NCHW fp32; the buffer holds the backend's layout and element type.
  const std::vector<float> stored = exec::to_layout(values, g_->nodes[size_t(in)].shape, layout_);
  upload_as(p, storage_elem(math_), stored.data(), stored.size(), stream_handle(0));
}

void CudaBackend::write_tensor(int node, const std::vector<float>& values) {
  void* p = resident(node, "write_tensor");
  HIOS_CHECK(values.size() * element_bytes() == tensors_[size_t(node)].bytes,
             "cuda backend: write_tensor got %zu values for '%s', which holds %zu", values.size(),
             g_->nodes[size_t(node)].name.c_str(), tensors_[size_t(node)].bytes / element_bytes());
  synchronize();
  const std::vector<float> stored = exec::to_layout(values, g_->nodes[size_t(node)].shape, layout_);
  upload_as(p, storage_elem(math_), stored.data(), stored.size(), stream_handle(0));
}

std::vector<float> CudaBackend::read_tensor(int node) {
  void* p = resident(node, "read_tensor");
  synchronize();
  const std::vector<float> out =
      download_as(p, storage_elem(math_), tensors_[size_t(node)].bytes / element_bytes(), stream_handle(0));
  return exec::from_layout(out, g_->nodes[size_t(node)].shape, layout_);
}

size_t CudaBackend::peak_memory_bytes() const { return bytes_above(memory_stats(device_).peak, baseline_); }

// The pass starts and ends on stream 0 (program.hpp): every other stream forks from it and
// joins it through events, so capturing stream 0 captures the whole pass, NCCL calls included.
// Thread-local mode: NCCL's proxy thread keeps making CUDA calls that a global-mode capture
// would reject.
void CudaBackend::begin_capture() {
  require_prepared("begin_capture");
  HIOS_CHECK(!capturing_, "cuda backend: begin_capture() while already capturing");
  if (exec_) {
    (void)cudaGraphExecDestroy(exec_);
    exec_ = nullptr;
  }
  if (graph_) {
    (void)cudaGraphDestroy(graph_);
    graph_ = nullptr;
  }
  HIOS_CUDA_CHECK(cudaSetDevice(device_));
  HIOS_CUDA_CHECK(cudaStreamBeginCapture(stream_handle(0), cudaStreamCaptureModeThreadLocal));
  capturing_ = true;
}

void CudaBackend::end_capture() {
  HIOS_CHECK(capturing_, "cuda backend: end_capture() without begin_capture()");
  capturing_ = false;
  HIOS_CUDA_CHECK(cudaStreamEndCapture(stream_handle(0), &graph_));
  // Kernels captured from the high-priority send and receive streams keep that priority only
  // when the graph is instantiated to use per-node priorities.
  HIOS_CUDA_CHECK(cudaGraphInstantiate(&exec_, graph_, cudaGraphInstantiateFlagUseNodePriority));
  HIOS_CUDA_CHECK(cudaGraphUpload(exec_, stream_handle(0)));
  HIOS_CUDA_CHECK(cudaStreamSynchronize(stream_handle(0)));
}

void CudaBackend::release_capture() {
  (void)cudaSetDevice(device_);
  (void)cudaDeviceSynchronize();
  if (exec_) (void)cudaGraphExecDestroy(exec_);
  if (graph_) (void)cudaGraphDestroy(graph_);
  exec_ = nullptr;
  graph_ = nullptr;
}

void CudaBackend::replay() {
  if (current_kept_ >= 0) {
    HIOS_CUDA_CHECK(cudaGraphLaunch(kept_.at(current_kept_).exec, stream_handle(0)));
    return;
  }
  HIOS_CHECK(exec_ != nullptr, "cuda backend: replay() before a pass was captured");
  HIOS_CUDA_CHECK(cudaGraphLaunch(exec_, stream_handle(0)));
}

void CudaBackend::reserve_arena(size_t bytes) {
  HIOS_CHECK(!capturing_, "cuda backend: reserve_arena() during a capture");
  if (bytes <= arena_.bytes()) {
    reserved_arena_ = std::max(reserved_arena_, arena_.bytes());
    return;
  }
  HIOS_CUDA_CHECK(cudaSetDevice(device_));
  HIOS_CUDA_CHECK(cudaDeviceSynchronize());  // nothing in flight may still use the old arena
  arena_ = DeviceBuffer();  // free first: the old and the new need not coexist
  arena_ = DeviceBuffer(device_, bytes, strprintf("the kept tensor arena (%s)", format_bytes(bytes).c_str()));
  ++arena_moves_;
  reserved_arena_ = bytes;
  // Tensors bound into the old arena would dangle: the next prepare binds them afresh.
  if (current_kept_ < 0) std::fill(tensors_.begin(), tensors_.end(), Tensor{});
}

void CudaBackend::destroy_kept(Kept& k) {
  if (k.exec) (void)cudaGraphExecDestroy(k.exec);
  if (k.graph) (void)cudaGraphDestroy(k.graph);
  k.exec = nullptr;
  k.graph = nullptr;
}

uint64_t CudaBackend::resource_epoch() const { return arena_moves_ + (eng_ ? eng_->resource_epoch() : 0); }

void CudaBackend::keep(int slot) {
  HIOS_CHECK(exec_ != nullptr && current_kept_ < 0, "cuda backend: keep(%d) without a freshly captured pass", slot);
  HIOS_CHECK(slot >= 0, "cuda backend: kept slot %d out of range", slot);
  auto it = kept_.find(slot);
  if (it != kept_.end()) {
    HIOS_CUDA_CHECK(cudaDeviceSynchronize());
    destroy_kept(it->second);
  }
  Kept& k = kept_[slot];
  k = Kept{g_, tensors_, graph_, exec_, resource_epoch()};
  graph_ = nullptr;
  exec_ = nullptr;
  current_kept_ = slot;  // what was just captured stays current
}

bool CudaBackend::kept_current(int slot) const {
  auto it = kept_.find(slot);
  return it != kept_.end() && it->second.epoch == resource_epoch();
}

void CudaBackend::switch_to(int slot) {
  auto it = kept_.find(slot);
  HIOS_CHECK(it != kept_.end(), "cuda backend: no pass was kept as slot %d", slot);
  HIOS_CHECK(it->second.epoch == resource_epoch(),
             "cuda backend: the pass kept as slot %d reads buffers that have moved since; capture it again", slot);
  if (current_kept_ == slot) return;
  g_ = it->second.g;
  tensors_ = it->second.tensors;
  current_kept_ = slot;
}

exec::PassContents CudaBackend::kept_contents(int slot, const void* data, size_t bytes) const {
  auto it = kept_.find(slot);
  HIOS_CHECK(it != kept_.end(), "cuda backend: no pass was kept as slot %d", slot);
  size_t n = 0;
  HIOS_CUDA_CHECK(cudaGraphGetNodes(it->second.graph, nullptr, &n));
  std::vector<cudaGraphNode_t> nodes(n);
  if (n > 0) HIOS_CUDA_CHECK(cudaGraphGetNodes(it->second.graph, nodes.data(), &n));
  exec::PassContents c;
  const auto lo = reinterpret_cast<uintptr_t>(data), hi = lo + bytes;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type{};
    HIOS_CUDA_CHECK(cudaGraphNodeGetType(node, &type));
    if (type == cudaGraphNodeTypeKernel) {
      ++c.kernels;
    } else if (type == cudaGraphNodeTypeMemcpy) {
      ++c.copies;
      cudaMemcpy3DParms mp{};
      if (cudaGraphMemcpyNodeGetParams(node, &mp) != cudaSuccess) {
        (void)cudaGetLastError();
        ++c.copies_reading;  // unknown source: counted against the claim, never for it
        continue;
      }
      // A copy reads from srcPtr (pitched) or from a CUDA array; only pointers can be the input.
      const auto src = reinterpret_cast<uintptr_t>(mp.srcPtr.ptr);
      const size_t extent = mp.srcPtr.pitch * std::max<size_t>(mp.srcPtr.ysize, 1) * std::max<size_t>(mp.extent.depth, 1);
      if (src != 0 && src < hi && src + std::max<size_t>(extent, mp.extent.width) > lo) ++c.copies_reading;
    } else if (type == cudaGraphNodeTypeMemset) {
      ++c.memsets;
    } else {
      ++c.other;
    }
  }
  return c;
}

size_t CudaBackend::memory_in_use() const {
  HIOS_CUDA_CHECK(cudaSetDevice(device_));
  size_t free = 0, total = 0;
  HIOS_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return bytes_above(total - free, used_at_start_);
}

}  // namespace hios::cuda

namespace hios::exec {

#ifdef HIOS_CUDA_WITH_NCCL
std::unique_ptr<Transport> make_nccl_transport(Comm& comm, Backend& backend);  // nccl_transport.cpp
#endif
std::unique_ptr<Transport> make_ipc_transport(Comm& comm, Backend& backend);  // ipc_transport.cpp

void register_cuda_components() {
  BackendEntry b;
  b.name = "cuda";
  b.description = "one GPU per rank: cuDNN and CUDA kernels on CUDA streams, CUDA Graph capture";
  b.default_math = "tf32";
  // Channels-last measured faster for every model and size in docs/benchmarks.md (cuDNN's
  // Hopper convolutions are NHWC-native; NCHW makes them transpose in and out).
  b.default_layout = "nhwc";
  // A transformer's tensors are [tokens, features] and [heads, tokens, dims]: stored
  // channels-last, every rank-4 one is strided and each reshape and transpose a gather. ViT-B/16
  // at 384 on an H200 ran 1.5x faster in NCHW (3.86 against 5.80 ms in TF32, 3.27 against 4.85
  // in bf16).
  b.default_layout_for_products = "nchw";
  b.make = [](const BackendConfig& cfg) -> std::unique_ptr<Backend> { return std::make_unique<cuda::CudaBackend>(cfg); };
  b.device_count = [] { return cuda::device_count(); };
#ifdef HIOS_CUDA_WITH_NCCL
  b.default_transport = "nccl";  // GPU tensors move GPU to GPU; mpi-host stays selectable
#endif
  // GPUs of one host that reach each other's memory: cuda-ipc's push kernel, measured faster
  // than NCCL per message (docs/executor.md, "The cuda-ipc transport").
  b.one_host_transport = "cuda-ipc";
  b.peer_access = [](int from, int to) {
    int can = 0;
    return cudaDeviceCanAccessPeer(&can, from, to) == cudaSuccess && can == 1;
  };
  register_backend(std::move(b));
#ifdef HIOS_CUDA_WITH_NCCL
  TransportEntry t;
  t.name = "nccl";
  t.description = "ncclSend/ncclRecv between GPUs on per-peer comm streams (capturable)";
  t.make = [](Comm& comm, Backend& backend) { return make_nccl_transport(comm, backend); };
  t.capturable = true;
  register_transport(std::move(t));
#endif
  TransportEntry ipc;
  ipc.name = "cuda-ipc";
  ipc.description = "GPUs of one host: a push kernel copies into the receiver's buffer and signals it by a flag (capturable)";
  ipc.make = [](Comm& comm, Backend& backend) { return make_ipc_transport(comm, backend); };
  ipc.capturable = true;
  register_transport(std::move(ipc));
}

}  // namespace hios::exec
