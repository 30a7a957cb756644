// The sequential single-GPU executor and the small helpers of api.hpp.
#include <algorithm>
#include <map>

#include "executor/cuda/api.hpp"
#include "executor/cuda/check.hpp"
#include "executor/cuda/engine.hpp"

namespace hios::cuda {

const char* math_mode_name(MathMode m) { return m == MathMode::Tf32 ? "tf32" : "fp32"; }

const char* conv_impl_name(ConvImpl c) {
  switch (c) {
    case ConvImpl::Auto: return "auto";
    case ConvImpl::Graph: return "graph";
    case ConvImpl::Legacy: return "legacy";
    case ConvImpl::Hios: return "hios";
  }
  return "auto";
}

MathMode parse_math_mode(const std::string& s) {
  if (s == "tf32") return MathMode::Tf32;
  if (s == "fp32") return MathMode::Fp32;
  throw_error("unknown math mode '%s' (expected tf32 or fp32)", s.c_str());
}

int device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver or no device: not an error for the caller
    return 0;
  }
  return n;
}

std::string device_description(int device) {
  cudaDeviceProp p{};
  HIOS_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  int driver = 0, runtime = 0;
  HIOS_CUDA_CHECK(cudaDriverGetVersion(&driver));
  HIOS_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  const size_t cudnn = cudnnGetVersion();
  return strprintf("GPU %d: %s, %d SMs, %s, cc %d.%d, driver %d.%d, runtime %d.%d, cuDNN %zu.%zu.%zu", device, p.name,
                   p.multiProcessorCount, format_bytes(p.totalGlobalMem).c_str(), p.major, p.minor, driver / 1000,
                   (driver % 1000) / 10, runtime / 1000, (runtime % 1000) / 10, cudnn / 10000, (cudnn % 10000) / 100,
                   cudnn % 100);
}

// ---------------------------------------------------------------------------------------------

struct SingleGpuRunner::Impl {
  const Graph& g;
  SingleGpuOptions opts;
  Engine eng;
  std::vector<DeviceBuffer> buffers;
  std::vector<int> forward;  // nodes of one forward pass, in order
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  size_t peak = 0;
  size_t launches = 0;
  // What other owners on this device held when this runner began: the peak reported is its own.
  size_t baseline = 0;

  static size_t held(int device) {
    HIOS_CUDA_CHECK(cudaSetDevice(device));
    return memory_stats(device).current;
  }

  Impl(const Graph& graph_, const SingleGpuOptions& o)
      : g(graph_), opts(o), eng(graph_, Engine::Options{o.device, o.math, o.seed, o.conv_impl}), baseline(held(o.device)) {}

  ~Impl() {
    (void)cudaSetDevice(opts.device);
    if (exec) (void)cudaGraphExecDestroy(exec);
    if (graph) (void)cudaGraphDestroy(graph);
    if (start) (void)cudaEventDestroy(start);
    if (stop) (void)cudaEventDestroy(stop);
  }

  // One buffer per node, or, with reuse, buffers handed from values that are dead to later
  // ones (best fit by size). Nodes run in index order, which is topological.
  void allocate() {
    const int n = g.size();
    std::vector<int> last_use(size_t(n), -1);
    for (int i = 0; i < n; ++i) {
      for (int p : g.predecessors(i)) last_use[size_t(p)] = std::max(last_use[size_t(p)], i);
    }
    last_use[size_t(g.input())] = n;  // the input is written once and read by every pass
    last_use[size_t(g.output())] = n;
    std::multimap<size_t, int> free_bufs;  // bytes -> buffer index
    std::vector<int> buf_of(size_t(n), -1);
    for (int i = 0; i < n; ++i) {
      const Node& nd = g.nodes[size_t(i)];
      const size_t bytes = size_t(nd.shape.numel()) * sizeof(float);
      int b = -1;
      if (opts.reuse_memory) {
        auto it = free_bufs.lower_bound(bytes);
        if (it != free_bufs.end()) {
          b = it->second;
          free_bufs.erase(it);
        }
      }
      if (b < 0) {
        buffers.emplace_back(opts.device, bytes, strprintf("the output of node '%s' (%s)", nd.name.c_str(),
                                                           nd.shape.str().c_str()));
        b = int(buffers.size()) - 1;
      }
      buf_of[size_t(i)] = b;
      eng.bind_output(i, buffers[size_t(b)].f32());
      if (!opts.reuse_memory) continue;
      for (int p : g.predecessors(i)) {
        if (last_use[size_t(p)] == i) free_bufs.emplace(buffers[size_t(buf_of[size_t(p)])].bytes(), buf_of[size_t(p)]);
      }
    }
  }

  void enqueue_forward() {
    for (int node : forward) eng.launch(node);
  }

  void setup() {
    HIOS_CUDA_CHECK(cudaSetDevice(opts.device));
    allocate();
    std::vector<std::pair<int, int>> plan;
    for (int i = 0; i < g.size(); ++i) plan.emplace_back(i, 0);
    eng.plan(plan);
    for (int i = 0; i < g.size(); ++i) {
      launches += eng.launch_count(i);
      if (i != g.input()) forward.push_back(i);
    }
    cudaStream_t st = eng.stream(0).stream();
    eng.launch(g.input());  // the input is materialised once, outside the timed passes
    // One eager pass first: it loads every kernel module, so nothing loads under capture.
    enqueue_forward();
    HIOS_CUDA_CHECK(cudaStreamSynchronize(st));
    if (opts.cuda_graph) {
      HIOS_CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
      try {
        enqueue_forward();
      } catch (...) {
        cudaGraph_t broken = nullptr;
        (void)cudaStreamEndCapture(st, &broken);
        if (broken) (void)cudaGraphDestroy(broken);
        throw;
      }
      HIOS_CUDA_CHECK(cudaStreamEndCapture(st, &graph));
      HIOS_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
      HIOS_CUDA_CHECK(cudaGraphUpload(exec, st));
    }
    HIOS_CUDA_CHECK(cudaEventCreate(&start));
    HIOS_CUDA_CHECK(cudaEventCreate(&stop));
    HIOS_CUDA_CHECK(cudaStreamSynchronize(st));
    reset_peak_memory(opts.device);
    peak = bytes_above(memory_stats(opts.device).peak, baseline);
  }

  void enqueue_pass() {
    if (exec) {
      HIOS_CUDA_CHECK(cudaGraphLaunch(exec, eng.stream(0).stream()));
    } else {
      enqueue_forward();
    }
  }
};

SingleGpuRunner::SingleGpuRunner(const Graph& g, const SingleGpuOptions& opts) : impl_(std::make_unique<Impl>(g, opts)) {
  impl_->setup();
}

SingleGpuRunner::~SingleGpuRunner() = default;

void SingleGpuRunner::run() {
  HIOS_CUDA_CHECK(cudaSetDevice(impl_->opts.device));
  impl_->enqueue_pass();
  HIOS_CUDA_CHECK(cudaStreamSynchronize(impl_->eng.stream(0).stream()));
}

void SingleGpuRunner::run_eager() {
  HIOS_CUDA_CHECK(cudaSetDevice(impl_->opts.device));
  impl_->enqueue_forward();
  HIOS_CUDA_CHECK(cudaStreamSynchronize(impl_->eng.stream(0).stream()));
}

TimingResult SingleGpuRunner::time(int warmup, int iters) {
  HIOS_CUDA_CHECK(cudaSetDevice(impl_->opts.device));
  HIOS_CHECK(iters > 0, "timing needs at least one iteration");
  cudaStream_t st = impl_->eng.stream(0).stream();
  for (int i = 0; i < warmup; ++i) impl_->enqueue_pass();
  HIOS_CUDA_CHECK(cudaStreamSynchronize(st));
  TimingResult r;
  for (int i = 0; i < iters; ++i) {
    HIOS_CUDA_CHECK(cudaEventRecord(impl_->start, st));
    impl_->enqueue_pass();
    HIOS_CUDA_CHECK(cudaEventRecord(impl_->stop, st));
    HIOS_CUDA_CHECK(cudaEventSynchronize(impl_->stop));
    float ms = 0;
    HIOS_CUDA_CHECK(cudaEventElapsedTime(&ms, impl_->start, impl_->stop));
    r.samples_ms.push_back(double(ms));
  }
  std::vector<double> s = r.samples_ms;
  std::sort(s.begin(), s.end());
  r.min_ms = s.front();
  r.max_ms = s.back();
  r.median_ms = s.size() % 2 ? s[s.size() / 2] : 0.5 * (s[s.size() / 2 - 1] + s[s.size() / 2]);
  impl_->peak = std::max(impl_->peak, bytes_above(memory_stats(impl_->opts.device).peak, impl_->baseline));
  return r;
}

std::vector<double> SingleGpuRunner::node_times_ms(int iters, const std::function<void(int, bool)>& around) {
  HIOS_CUDA_CHECK(cudaSetDevice(impl_->opts.device));
  const std::vector<int>& order = impl_->forward;
  std::vector<cudaEvent_t> ev(order.size() + 1, nullptr);
  for (cudaEvent_t& e : ev) HIOS_CUDA_CHECK(cudaEventCreate(&e));
  std::vector<double> t(size_t(impl_->g.size()), 0.0);
  cudaStream_t st = impl_->eng.stream(0).stream();
  for (int it = 0; it < iters; ++it) {
    HIOS_CUDA_CHECK(cudaEventRecord(ev[0], st));
    for (size_t k = 0; k < order.size(); ++k) {
      if (around) around(order[k], true);
      impl_->eng.launch(order[k]);
      if (around) around(order[k], false);
      HIOS_CUDA_CHECK(cudaEventRecord(ev[k + 1], st));
    }
    HIOS_CUDA_CHECK(cudaStreamSynchronize(st));
    for (size_t k = 0; k < order.size(); ++k) {
      float ms = 0;
      HIOS_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[k], ev[k + 1]));
      t[size_t(order[k])] += double(ms) / iters;
    }
  }
  for (cudaEvent_t e : ev) (void)cudaEventDestroy(e);
  return t;
}

static std::vector<float> download(const float* p, int64_t count) {
  std::vector<float> out(static_cast<size_t>(count));
  HIOS_CUDA_CHECK(cudaMemcpy(out.data(), p, out.size() * sizeof(float), cudaMemcpyDeviceToHost));
  return out;
}

std::vector<float> SingleGpuRunner::output() const { return value(impl_->g.output()); }

std::vector<float> SingleGpuRunner::value(int node) const {
  HIOS_CHECK(!impl_->opts.reuse_memory || node == impl_->g.output() || node == impl_->g.input(),
             "node %d's buffer is shared with later values (reuse_memory is on)", node);
  HIOS_CUDA_CHECK(cudaSetDevice(impl_->opts.device));
  HIOS_CUDA_CHECK(cudaStreamSynchronize(impl_->eng.stream(0).stream()));
  return download(impl_->eng.output_ptr(node), impl_->g.nodes.at(size_t(node)).shape.numel());
}

size_t SingleGpuRunner::peak_bytes() const { return impl_->peak; }

std::string SingleGpuRunner::summary() const {
  size_t act = 0;
  for (const DeviceBuffer& b : impl_->buffers) act += b.bytes();
  return strprintf("%s: %d nodes, %zu launches per pass, weights %s, activations %s in %zu buffers, peak %s, %s%s\n",
                   impl_->g.name.c_str(), impl_->g.size() - 1, impl_->launches,
                   format_bytes(impl_->eng.weight_bytes()).c_str(), format_bytes(act).c_str(), impl_->buffers.size(),
                   format_bytes(impl_->peak).c_str(), math_mode_name(impl_->opts.math),
                   impl_->exec ? ", CUDA graph" : ", eager") +
         impl_->eng.algorithm_report();
}

// ---------------------------------------------------------------------------------------------

std::vector<float> run_single_node(const Graph& g, int node, const std::vector<std::vector<float>>& values,
                                   const SingleGpuOptions& opts) {
  HIOS_CUDA_CHECK(cudaSetDevice(opts.device));
  Engine eng(g, Engine::Options{opts.device, opts.math, opts.seed, opts.conv_impl});
  std::vector<DeviceBuffer> bufs;
  for (int p : g.predecessors(node)) {
    const Node& pn = g.nodes.at(size_t(p));
    const std::vector<float>& host = values.at(size_t(p));
    HIOS_CHECK(int64_t(host.size()) == pn.shape.numel(), "run_single_node: value of '%s' has %zu elements, expected %lld",
               pn.name.c_str(), host.size(), (long long)pn.shape.numel());
    bufs.emplace_back(opts.device, host.size() * sizeof(float), "test input '" + pn.name + "'");
    upload(bufs.back().get(), host.data(), host.size() * sizeof(float), eng.stream(0).stream());
    eng.bind_output(p, bufs.back().f32());
  }
  const Node& nd = g.nodes.at(size_t(node));
  DeviceBuffer out(opts.device, size_t(nd.shape.numel()) * sizeof(float), "the output of '" + nd.name + "'");
  // Poison the output so an element the op forgets to write cannot pass as a right answer.
  cudaStream_t st = eng.stream(0).stream();
  HIOS_CUDA_CHECK(cudaMemsetAsync(out.get(), 0xff, out.bytes(), st));
  eng.bind_output(node, out.f32());
  eng.plan({{node, 0}});
  // Planning timed candidate kernels on the output buffer: poison it again, on the same stream
  // as the launch so that the order is certain.
  HIOS_CUDA_CHECK(cudaMemsetAsync(out.get(), 0xff, out.bytes(), st));
  eng.launch(node);
  HIOS_CUDA_CHECK(cudaStreamSynchronize(st));
  return download(out.f32(), nd.shape.numel());
}

}  // namespace hios::cuda
