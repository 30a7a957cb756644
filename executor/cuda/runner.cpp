// The sequential single-GPU executor and the small helpers of api.hpp.
#include <algorithm>
#include <map>

#include "executor/cuda/api.hpp"
#include "executor/cuda/check.hpp"
#include "executor/cuda/engine.hpp"
#include "executor/memory_plan.hpp"
#include "executor/program.hpp"
#include "executor/session.hpp"
#include "executor/weights.hpp"
#include "graph/stats.hpp"

namespace hios::cuda {

const char* math_mode_name(MathMode m) {
  switch (m) {
    case MathMode::Tf32: return "tf32";
    case MathMode::Fp32: return "fp32";
    case MathMode::Fp16: return "fp16";
    case MathMode::Bf16: return "bf16";
  }
  return "tf32";
}

size_t math_element_bytes(MathMode m) { return elem_bytes(storage_elem(m)); }

const char* conv_impl_name(ConvImpl c) {
  switch (c) {
    case ConvImpl::Auto: return "auto";
    case ConvImpl::Graph: return "graph";
    case ConvImpl::Legacy: return "legacy";
    case ConvImpl::Hios: return "hios";
  }
  return "auto";
}

ConvImpl parse_conv_impl(const std::string& s) {
  for (ConvImpl c : {ConvImpl::Auto, ConvImpl::Graph, ConvImpl::Legacy, ConvImpl::Hios}) {
    if (s == conv_impl_name(c)) return c;
  }
  throw_error("unknown convolution family '%s' (expected auto, graph, legacy or hios)", s.c_str());
}

MathMode parse_math_mode(const std::string& s) {
  for (MathMode m : {MathMode::Tf32, MathMode::Fp32, MathMode::Fp16, MathMode::Bf16}) {
    if (s == math_mode_name(m)) return m;
  }
  throw_error("unknown math mode '%s' (expected tf32, fp32, fp16 or bf16)", s.c_str());
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

// The sequential executor is a rank session of one rank over the sequential schedule: the
// same backend, kernels and host loop as `hios run`, only driven from here.
struct SingleGpuRunner::Impl {
  const Graph& g;
  SingleGpuOptions opts;
  std::unique_ptr<exec::Comm> self = exec::make_self_comm();
  std::unique_ptr<exec::RankSession> session;
  size_t peak = 0;
  int launches = 0;  // nodes issued per pass

  Impl(const Graph& graph_, const SingleGpuOptions& o) : g(graph_), opts(o) {
    exec::SessionOptions so;
    so.backend = "cuda";
    so.device = o.device;
    so.math = math_mode_name(o.math);
    so.seed = o.seed;
    so.conv_impl = conv_impl_name(o.conv_impl);
    so.layout = exec::layout_name(o.layout);
    so.fold_relu = o.fold_relu;
    session = std::make_unique<exec::RankSession>(g, so, *self);
    exec::RankProgram p = exec::lower(g, exec::sequential_schedule(g), 0);
    if (o.reuse_memory) {
      exec::plan_and_check_shared_buffers(g, p, exec::memory_plan_options(session->backend().layout(), g));
    }
    for (const exec::Instr& in : p.instrs) launches += in.kind == exec::InstrKind::Launch;
    session->load(std::move(p));
    session->backend().set_input(exec::make_input(g, o.seed));
    session->pass();  // eager: loads every kernel module, so nothing loads under capture
    if (o.cuda_graph) session->capture();
    peak = session->backend().peak_memory_bytes();
  }

  void eager_pass() {
    session->issue(session->program().instrs);
    session->backend().synchronize();
  }
};

SingleGpuRunner::SingleGpuRunner(const Graph& g, const SingleGpuOptions& opts) : impl_(std::make_unique<Impl>(g, opts)) {}

SingleGpuRunner::~SingleGpuRunner() = default;

void SingleGpuRunner::run() { impl_->session->pass(); }

void SingleGpuRunner::run_eager() { impl_->eager_pass(); }

TimingResult SingleGpuRunner::time(int warmup, int iters) {
  HIOS_CHECK(iters > 0, "timing needs at least one iteration");
  for (int i = 0; i < warmup; ++i) impl_->session->pass();
  TimingResult r = summarise_ms(impl_->session->timed_passes(iters, exec::PassClock::Device));
  impl_->peak = std::max(impl_->peak, impl_->session->backend().peak_memory_bytes());
  return r;
}

std::vector<double> SingleGpuRunner::node_times_ms(int iters, const std::function<void(int, bool)>& around) {
  exec::RankSession& s = *impl_->session;
  exec::LaunchMarks marks(s, around);
  exec::ScopedObserver marking(s, marks);
  std::vector<double> t(size_t(impl_->g.size()), 0.0);
  for (int it = 0; it < iters; ++it) {
    impl_->eager_pass();
    for (int node : marks.nodes()) t[size_t(node)] += marks.ms(s, node) / iters;
  }
  return t;
}

std::vector<float> SingleGpuRunner::output() const { return value(impl_->g.output()); }

std::vector<float> SingleGpuRunner::value(int node) const {
  HIOS_CHECK(!impl_->opts.reuse_memory || node == impl_->g.output() || node == impl_->g.input(),
             "node %d's buffer is shared with later values (reuse_memory is on)", node);
  return impl_->session->backend().read_tensor(node);
}

size_t SingleGpuRunner::peak_bytes() const { return impl_->peak; }

std::string SingleGpuRunner::summary() const {
  const exec::RankProgram& p = impl_->session->program();
  const std::string rows = exec::rows_copies_summary(impl_->g, p);
  return strprintf("%s: %d nodes, activations %s (%s), peak %s, %s%s%s\n", impl_->g.name.c_str(), impl_->launches,
                   format_bytes(size_t(p.tensor_memory())).c_str(), p.arena_bytes > 0 ? "one shared arena" : "a buffer each",
                   format_bytes(impl_->peak).c_str(), math_mode_name(impl_->opts.math),
                   impl_->session->captured() ? ", CUDA graph" : ", eager", rows.empty() ? "" : (", " + rows).c_str()) +
         impl_->session->backend().plan_report();
}

TimingResult summarise_ms(const std::vector<double>& samples) {
  TimingResult r;
  r.samples_ms = samples;
  if (samples.empty()) return r;
  r.min_ms = *std::min_element(samples.begin(), samples.end());
  r.max_ms = *std::max_element(samples.begin(), samples.end());
  r.median_ms = median(samples);
  return r;
}

// ---------------------------------------------------------------------------------------------

std::vector<float> run_single_node(const Graph& g, int node, const std::vector<std::vector<float>>& values,
                                   const SingleGpuOptions& opts) {
  HIOS_CUDA_CHECK(cudaSetDevice(opts.device));
  // The producers' values come from the caller as the graph defines them: no ReLU folding.
  Engine eng(g, Engine::Options{opts.device, opts.math, opts.seed, opts.conv_impl, opts.layout, 0, false});
  std::vector<DeviceBuffer> bufs;
  for (int p : g.predecessors(node)) {
    const Node& pn = g.nodes.at(size_t(p));
    HIOS_CHECK(int64_t(values.at(size_t(p)).size()) == pn.shape.numel(),
               "run_single_node: value of '%s' has %zu elements, expected %lld", pn.name.c_str(),
               values.at(size_t(p)).size(), (long long)pn.shape.numel());
    const std::vector<float> host = exec::to_layout(values[size_t(p)], pn.shape, opts.layout);
    bufs.emplace_back(opts.device, host.size() * elem_bytes(eng.elem()), "test input '" + pn.name + "'");
    upload_as(bufs.back().get(), eng.elem(), host.data(), host.size(), eng.stream(0).stream());
    eng.bind_output(p, bufs.back().get());
  }
  const Node& nd = g.nodes.at(size_t(node));
  DeviceBuffer out(opts.device, size_t(nd.shape.numel()) * elem_bytes(eng.elem()), "the output of '" + nd.name + "'");
  // Poison the output so an element the op forgets to write cannot pass as a right answer.
  cudaStream_t st = eng.stream(0).stream();
  HIOS_CUDA_CHECK(cudaMemsetAsync(out.get(), 0xff, out.bytes(), st));
  eng.bind_output(node, out.get());
  eng.plan({{node, 0}});
  // Planning timed candidate kernels on the output buffer: poison it again, on the same stream
  // as the launch so that the order is certain.
  HIOS_CUDA_CHECK(cudaMemsetAsync(out.get(), 0xff, out.bytes(), st));
  eng.launch(node);
  HIOS_CUDA_CHECK(cudaStreamSynchronize(st));
  return exec::from_layout(download_as(out.get(), eng.elem(), size_t(nd.shape.numel()), st), nd.shape, opts.layout);
}

}  // namespace hios::cuda
