// hios-kernel-bench: times hios's own NHWC depthwise and pooling kernels on NASNet-Large's
// shapes at 2048x2048 (or --scale of them), each variant of a kernel against the others and
// against the time a device-to-device copy of the same bytes takes. Every variant's output is
// compared with the first variant's, so a faster variant that computes something else shows.
//
//   hios-kernel-bench [--math bf16|fp16|fp32] [--iters 50]
//
// A development tool for the kernels in executor/cuda/*.cu (the goal: within 1.5x of memory time);
// the model-level numbers come from hios-gpu-bench.
#include <CLI/CLI.hpp>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "executor/cuda/kernels.hpp"
#include "bench/copy_bandwidth.hpp"
#include "graph/error.hpp"

using namespace hios::cuda;

namespace {

#define CK(call)                                                                                 \
  do {                                                                                           \
    cudaError_t e_ = (call);                                                                     \
    if (e_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "hios-kernel-bench: %s: %s\n", #call, cudaGetErrorString(e_));        \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

// Device buffer of `count` elements of `elem` holding values in [-1, 1) (converted on the
// host through fp32, so each storage type holds what the kernels would see).
struct Buffer {
  void* p = nullptr;
  size_t bytes = 0;
  Buffer(int64_t count, Elem elem, unsigned seed) : bytes(size_t(count) * elem_bytes(elem)) {
    CK(cudaMalloc(&p, bytes));
    std::vector<float> host(static_cast<size_t>(count));
    for (size_t i = 0; i < host.size(); ++i) {
      seed = seed * 1664525u + 1013904223u;
      host[i] = float(seed >> 8) / float(1u << 24) * 2.f - 1.f;
    }
    void* tmp = nullptr;
    CK(cudaMalloc(&tmp, host.size() * sizeof(float)));
    CK(cudaMemcpy(tmp, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
    launch_cast(tmp, Elem::F32, p, elem, count, nullptr);
    CK(cudaDeviceSynchronize());
    CK(cudaFree(tmp));
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { cudaFree(p); }
  std::vector<float> read(Elem elem) const {
    const int64_t count = int64_t(bytes / elem_bytes(elem));
    void* tmp = nullptr;
    CK(cudaMalloc(&tmp, size_t(count) * sizeof(float)));
    launch_cast(p, elem, tmp, Elem::F32, count, nullptr);
    std::vector<float> out(static_cast<size_t>(count));
    CK(cudaMemcpy(out.data(), tmp, out.size() * sizeof(float), cudaMemcpyDeviceToHost));
    CK(cudaFree(tmp));
    return out;
  }
};

// Two timings of one kernel launch (after 3 untimed ones):
//   single: the median of `iters` launches with events around each, on an idle GPU: what an
//           eager pass with an event per node sees, launch latency included;
//   graph:  one CUDA graph of 20 back-to-back launches, replayed `iters` times, per launch:
//           what the kernel costs inside a captured model, where launches do not wait on the host.
struct Timing {
  double single_ms = 0, graph_ms = 0;
};
Timing time_ms(const std::function<void(cudaStream_t)>& launch, int iters) {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) launch(s);
  std::vector<float> t;
  for (int i = 0; i < iters; ++i) {
    CK(cudaEventRecord(a, s));
    launch(s);
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  Timing r;
  r.single_ms = t[t.size() / 2];
  constexpr int kPerGraph = 20;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kPerGraph; ++i) launch(s);
  CK(cudaStreamEndCapture(s, &graph));
  CK(cudaGraphInstantiate(&exec, graph, 0));
  CK(cudaGraphLaunch(exec, s));  // warm-up
  t.clear();
  for (int i = 0; i < iters; ++i) {
    CK(cudaEventRecord(a, s));
    CK(cudaGraphLaunch(exec, s));
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms / kPerGraph);
  }
  std::sort(t.begin(), t.end());
  r.graph_ms = t[t.size() / 2];
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  CK(cudaStreamDestroy(s));
  return r;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, double(std::fabs(a[i] - b[i])));
  return m;
}

struct Shape {
  const char* what;
  int c, h, k, s;  // channels, input height = width, window, stride
};

}  // namespace

namespace {

struct KernelBenchOptions {
  std::string math = "bf16", only, variant;
  int iters = 50;
  double scale = 1.0;
  Elem elem = Elem::BF16;
  double copy_gbs = 0;  // the copy bandwidth (read + written bytes) every kernel is held against
  int size(int h) const { return std::max(8, int(std::lround(h * scale))); }
  bool shape_wanted(const char* what) const { return std::string(what).find(only) != std::string::npos; }
  bool variant_wanted(const char* name) const { return std::string(name).find(variant) != std::string::npos; }
};

void print_row(const char* shape, const char* variant, const Timing& ms, double copy_ms, const std::string& diff) {
  std::printf("  %-34s %-16s %9.4f %9.4f %9.4f %7.2f %7.2f %10s\n", shape, variant, ms.single_ms, ms.graph_ms, copy_ms,
              ms.single_ms / copy_ms, ms.graph_ms / copy_ms, diff.c_str());
}

// NASNet-Large at 2048: the stem's separable convolutions, then a normal cell's and a reduction
// cell's; each depthwise variant against the first.
void bench_depthwise(const KernelBenchOptions& o) {
  const Shape dw_shapes[] = {{"dw 7x7/2 c96 1023", 96, 1023, 7, 2}, {"dw 5x5/2 c96 1023", 96, 1023, 5, 2},
                             {"dw 5x5/2 c42 1023", 42, 1023, 5, 2}, {"dw 7x7/1 c42 512", 42, 512, 7, 1},
                             {"dw 5x5/1 c168 256", 168, 256, 5, 1}, {"dw 3x3/1 c168 256", 168, 256, 3, 1},
                             {"dw 7x7/2 c336 256", 336, 256, 7, 2}, {"dw 3x3/1 c672 64", 672, 64, 3, 1}};
  for (const Shape& sh : dw_shapes) {
    if (!o.shape_wanted(sh.what)) continue;
    const Elem elem = o.elem;
    const int h = o.size(sh.h), pad = sh.k / 2, oh = (h + 2 * pad - sh.k) / sh.s + 1;
    Buffer x(int64_t(h) * h * sh.c, elem, 3), w(int64_t(sh.c) * sh.k * sh.k, elem, 4), b(sh.c, elem, 5);
    Buffer y(int64_t(oh) * oh * sh.c, elem, 6);
    DepthwiseParams p;
    p.x = x.p;
    p.w = w.p;
    p.b = b.p;
    p.y = y.p;
    p.elem = elem;
    p.n = 1;
    p.c = sh.c;
    p.h = p.w_in = h;
    p.oh = p.ow = oh;
    p.kh = p.kw = sh.k;
    p.sh = p.sw = sh.s;
    p.ph = p.pw = pad;
    p.input_relu = 1;
    p.nhwc = 1;
    const double copy_ms = double(x.bytes + y.bytes) / (o.copy_gbs * 1e6);
    std::vector<float> first;
    for (int v : {1, 0}) {
      const char* name = v == 1 ? "row runs" : "4x4 tiles";
      if (!o.variant_wanted(name)) continue;
      p.variant = v;
      const Timing ms = time_ms([&](cudaStream_t s) { launch_depthwise(p, s); }, o.iters);
      const std::vector<float> out = y.read(elem);
      if (first.empty()) first = out;
      print_row(sh.what, name, ms, copy_ms, hios::strprintf("%.2e", max_abs_diff(out, first)));
    }
  }
}

// What a device-to-device copy of `bytes` (half read, half written) takes: the bandwidth of a
// 256 MB copy is out of reach of a kernel this small, and this says how far.
void bench_copy_of(const KernelBenchOptions& o, const char* shape, size_t bytes, double copy_ms) {
  const size_t half = bytes / 2;
  void *from = nullptr, *to = nullptr;
  CK(cudaMalloc(&from, half));
  CK(cudaMalloc(&to, half));
  const Timing ms =
      time_ms([&](cudaStream_t s) { CK(cudaMemcpyAsync(to, from, half, cudaMemcpyDeviceToDevice, s)); }, o.iters);
  print_row(shape, "d2d copy", ms, copy_ms, "-");
  CK(cudaFree(from));
  CK(cudaFree(to));
}

// NASNet's (and one Inception) 3x3 pools: every pooling kernel against the first.
void bench_pools(const KernelBenchOptions& o) {
  const struct {
    const char* what;
    int c, h, s, is_max;
  } pool_shapes[] = {{"avg 3x3/1 c42 512", 42, 512, 1, 0},   {"avg 3x3/1 c168 256", 168, 256, 1, 0},
                     {"avg 3x3/1 c336 128", 336, 128, 1, 0}, {"avg 3x3/1 c672 64", 672, 64, 1, 0},
                     {"max 3x3/2 c96 1023", 96, 1023, 2, 1}, {"max 3x3/2 c336 256", 336, 256, 2, 1},
                     {"avg 3x3/2 c84 512", 84, 512, 2, 0},   {"avg 3x3/1 c288 253 (incep)", 288, 253, 1, 0}};
  for (const auto& sh : pool_shapes) {
    if (!o.shape_wanted(sh.what)) continue;
    const Elem elem = o.elem;
    const int h = o.size(sh.h), pad = 1, oh = (h + 2 * pad - 3) / sh.s + 1;
    Buffer x(int64_t(h) * h * sh.c, elem, 7), y(int64_t(oh) * oh * sh.c, elem, 8);
    PoolParams p;
    p.x = x.p;
    p.y = y.p;
    p.elem = elem;
    p.n = 1;
    p.c = sh.c;
    p.h = p.w = p.full_h = h;
    p.oh = p.ow = oh;
    p.kh = p.kw = 3;
    p.sh = p.sw = sh.s;
    p.ph = p.pw = pad;
    p.is_max = sh.is_max;
    p.count_include_pad = 0;
    p.nhwc = 1;
    p.x_pixel_stride = sh.c;
    p.x_batch_stride = int64_t(h) * h * sh.c;
    const double copy_ms = double(x.bytes + y.bytes) / (o.copy_gbs * 1e6);
    std::vector<float> first;
    const std::pair<PoolKernel, const char*> kernels[] = {
        {PoolKernel::General, "general"}, {PoolKernel::Rows3x3, "3x3 rows"}, {PoolKernel::Tiles3x3, "3x3 tiles"},
        {PoolKernel::Tiles3x3Wide, "3x3 tiles c8"}, {PoolKernel::Auto, "auto"}};
    for (const auto& [kernel, name] : kernels) {
      if (!o.variant_wanted(name)) continue;
      p.kernel = kernel;
      const Timing ms = time_ms([&](cudaStream_t s) { launch_pool(p, s); }, o.iters);
      const std::vector<float> out = y.read(elem);
      if (first.empty()) first = out;
      print_row(sh.what, name, ms, copy_ms, hios::strprintf("%.2e", max_abs_diff(out, first)));
    }
    if (o.variant_wanted("d2d copy")) bench_copy_of(o, sh.what, x.bytes + y.bytes, copy_ms);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Time hios's NHWC depthwise and pooling kernels, variant against variant and against a copy"};
  KernelBenchOptions o;
  app.add_option("--math", o.math, "Storage type: bf16, fp16 or fp32 (default bf16)");
  app.add_option("--iters", o.iters, "Timed launches per variant, 1 to 10000 (default 50)")->check(CLI::Range(1, 10000));
  app.add_option("--scale", o.scale, "Input sizes as a share of NASNet's at 2048, 0.01 to 1 (default 1)")
      ->check(CLI::Range(0.01, 1.0));
  app.add_option("--only", o.only, "Only the shapes whose name contains this text");
  app.add_option("--variant", o.variant, "Only the variants whose name contains this text (e.g. async; for ncu)");
  CLI11_PARSE(app, argc, argv);
  o.elem = o.math == "bf16" ? Elem::BF16 : o.math == "fp16" ? Elem::F16 : o.math == "fp32" ? Elem::F32 : Elem(-1);
  if (int(o.elem) < 0) {
    std::fprintf(stderr, "hios-kernel-bench: --math '%s': expected bf16, fp16 or fp32\n", o.math.c_str());
    return 2;
  }
  o.copy_gbs = copy_bandwidth_gbs(size_t(256) << 20, o.iters);
  std::printf("# %s, copy bandwidth %.0f GB/s (read + written)\n", o.math.c_str(), o.copy_gbs);
  std::printf("# single: one launch between events; graph: per launch, 20 back to back in a CUDA graph\n");
  std::printf("# %-34s %-16s %9s %9s %9s %7s %7s %10s\n", "shape", "variant", "single ms", "graph ms", "copy ms",
              "x copy", "graph x", "max |diff|");
  bench_depthwise(o);
  bench_pools(o);
  CK(cudaDeviceSynchronize());
  return 0;
}
