// The small helpers of api.hpp, and run_single_node for the per-op tests.
#include <algorithm>
#include <map>

#include "executor/cuda/api.hpp"
#include "executor/cuda/check.hpp"
#include "executor/cuda/engine.hpp"
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

std::vector<float> run_single_node(const Graph& g, int node, const std::vector<std::vector<float>>& values,
                                   const SingleGpuOptions& opts) {
  HIOS_CUDA_CHECK(cudaSetDevice(opts.device));
  // The producers' values come from the caller as the graph defines them: no ReLU folding.
  Engine::Options eo{opts.device, opts.math, opts.seed, opts.conv_impl, opts.layout, 0, false};
  eo.phase_split = opts.phase_split;
  eo.channel_pad = opts.channel_pad;
  Engine eng(g, eo);
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
