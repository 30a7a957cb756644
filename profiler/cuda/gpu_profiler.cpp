// The measuring side of the profiler (CUDA builds). See profiler/gpu_profiler.hpp.
#include "profiler/gpu_profiler.hpp"

#include <cuda_runtime.h>
#ifdef HIOS_PROFILER_WITH_NCCL
#include <nccl.h>
#endif

#include <algorithm>
#include <chrono>
#include <ctime>
#include <memory>

#include "executor/backend.hpp"
#include "executor/comm.hpp"
#include "executor/cuda/api.hpp"
#include "executor/program.hpp"
#include "executor/registry.hpp"
#include "executor/weights.hpp"
#include "graph/error.hpp"
#include "profiler/cuda/cupti_tracer.hpp"
#include "profiler/profile_builder.hpp"
#include "profiler/session_profiler.hpp"
#include "executor/session.hpp"

namespace hios::prof {

namespace {

#define HIOS_PROF_CUDA(call)                                                                   \
  do {                                                                                         \
    const cudaError_t e_ = (call);                                                             \
    if (e_ != cudaSuccess) ::hios::throw_error("%s failed: %s", #call, cudaGetErrorString(e_)); \
  } while (0)

// Timing events that clean up after themselves.
struct Events {
  std::vector<cudaEvent_t> ev;
  explicit Events(size_t n) : ev(n, nullptr) {
    for (cudaEvent_t& e : ev) HIOS_PROF_CUDA(cudaEventCreate(&e));
  }
  ~Events() {
    for (cudaEvent_t e : ev) (void)cudaEventDestroy(e);
  }
  float ms(size_t a, size_t b) const {
    float t = 0;
    HIOS_PROF_CUDA(cudaEventElapsedTime(&t, ev[a], ev[b]));
    return t;
  }
};

// ---- nodes and stages: a rank session of one rank on GPU 0 with the measuring program
// (profiler/session_profiler.hpp): every tensor its own buffer, filled by one pass, every node
// ready on every stream.
struct Measurer {
  std::unique_ptr<exec::Comm> self = exec::make_self_comm();
  std::unique_ptr<exec::RankSession> session;
  std::unique_ptr<StageTimer> timer;
  Measurer(const Graph& g, const ProfileOptions& opt, int streams) {
    exec::SessionOptions so;
    so.backend = "cuda";
    so.device = 0;
    so.math = opt.math;
    so.layout = opt.layout;
    so.conv_search = opt.conv_search;
    session = std::make_unique<exec::RankSession>(g, so, *self);
    session->load(measurement_program(g, 0, 1, streams));
    session->backend().set_input(exec::make_input(g));
    session->pass(true);
    timer = std::make_unique<StageTimer>(*session);
  }
};

// Every node alone on one stream of an eager sequential pass, markers around its launches;
// CUPTI in passes of its own (its bookkeeping would otherwise land in the wall times).
// `choices` gets the algorithm choices the pass made, each with every candidate it timed.
std::vector<NodeSamples> profile_nodes(const Graph& g, const ProfileOptions& opt, json* choices) {
  Measurer m(g, opt, 1);
  *choices = m.session->backend().algorithm_choices();
  std::vector<NodeSamples> out = m.timer->nodes(opt.warmup, opt.iters);
  if (opt.cupti) {
    CuptiTracer tracer;
    for (int it = 0; it < opt.iters; ++it) {
      m.timer->nodes(0, 1, [&](int node, bool begin) {
        if (begin) {
          tracer.push(uint64_t(node) + 1);  // 0 would read as "no tag"
        } else {
          tracer.pop();
        }
      });
      const std::map<uint64_t, BusyTime> busy = tracer.collect();
      for (int v = 0; v < g.size(); ++v) {
        if (v == g.input()) continue;
        auto b = busy.find(uint64_t(v) + 1);
        out[size_t(v)].kernel_ms.push_back(b == busy.end() ? 0.0 : b->second.ms);
        if (b != busy.end()) out[size_t(v)].kernels = b->second.records;
      }
    }
  }
  return out;
}

// ---- links: one transfer of `bytes` from GPU src to GPU dst, timed on dst's stream.
class LinkBench {
 public:
  explicit LinkBench(int gpus) : n_(gpus), streams_(size_t(gpus), nullptr), bufs_(size_t(gpus), nullptr) {
#ifdef HIOS_PROFILER_WITH_NCCL
    comms_.assign(size_t(n_), nullptr);
    std::vector<int> devs(static_cast<size_t>(n_), 0);
    for (int i = 0; i < n_; ++i) devs[size_t(i)] = i;
    const ncclResult_t r = ncclCommInitAll(comms_.data(), n_, devs.data());
    HIOS_CHECK(r == ncclSuccess, "profiler: ncclCommInitAll over %d GPUs failed: %s", n_, ncclGetErrorString(r));
#endif
  }
  ~LinkBench() {
    for (int i = 0; i < n_; ++i) {
      (void)cudaSetDevice(i);
      (void)cudaDeviceSynchronize();
      if (bufs_[size_t(i)]) (void)cudaFree(bufs_[size_t(i)]);
      if (streams_[size_t(i)]) (void)cudaStreamDestroy(streams_[size_t(i)]);
    }
#ifdef HIOS_PROFILER_WITH_NCCL
    for (ncclComm_t c : comms_) {
      if (c) (void)ncclCommDestroy(c);
    }
#endif
  }
  static const char* method() {
#ifdef HIOS_PROFILER_WITH_NCCL
    return "nccl send/recv";
#else
    return "cudaMemcpyPeerAsync";
#endif
  }
  void reserve(int64_t bytes) {
    for (int i = 0; i < n_; ++i) {
      HIOS_PROF_CUDA(cudaSetDevice(i));
      HIOS_PROF_CUDA(cudaStreamCreateWithFlags(&streams_[size_t(i)], cudaStreamNonBlocking));
      HIOS_PROF_CUDA(cudaMalloc(&bufs_[size_t(i)], size_t(bytes)));
      // Not zeros: a link moves whatever it is given, but nothing is timed on zeros here.
      HIOS_PROF_CUDA(cudaMemset(bufs_[size_t(i)], 0x5a, size_t(bytes)));
    }
    for (int i = 0; i < n_; ++i) {
      for (int j = 0; j < n_; ++j) {
        if (i == j) continue;
        HIOS_PROF_CUDA(cudaSetDevice(i));
        const cudaError_t e = cudaDeviceEnablePeerAccess(j, 0);
        if (e == cudaErrorPeerAccessAlreadyEnabled || e == cudaErrorPeerAccessUnsupported) (void)cudaGetLastError();
      }
    }
  }
  // Median milliseconds of `iters` transfers of `bytes` from src to dst.
  double time(int src, int dst, int64_t bytes, int warmup, int iters) {
    HIOS_PROF_CUDA(cudaSetDevice(dst));
    Events ev(2);
    std::vector<double> t;
    for (int it = -warmup; it < iters; ++it) {
      HIOS_PROF_CUDA(cudaSetDevice(dst));
      HIOS_PROF_CUDA(cudaEventRecord(ev.ev[0], streams_[size_t(dst)]));
      issue(src, dst, bytes);
      HIOS_PROF_CUDA(cudaSetDevice(dst));
      HIOS_PROF_CUDA(cudaEventRecord(ev.ev[1], streams_[size_t(dst)]));
      HIOS_PROF_CUDA(cudaEventSynchronize(ev.ev[1]));
      HIOS_PROF_CUDA(cudaSetDevice(src));
      HIOS_PROF_CUDA(cudaStreamSynchronize(streams_[size_t(src)]));
      if (it >= 0) t.push_back(ev.ms(0, 1));
    }
    return median(t);
  }

 private:
  void issue(int src, int dst, int64_t bytes) {
#ifdef HIOS_PROFILER_WITH_NCCL
    ncclResult_t r = ncclGroupStart();
    if (r == ncclSuccess) r = ncclSend(bufs_[size_t(src)], size_t(bytes), ncclChar, dst, comms_[size_t(src)], streams_[size_t(src)]);
    if (r == ncclSuccess) r = ncclRecv(bufs_[size_t(dst)], size_t(bytes), ncclChar, src, comms_[size_t(dst)], streams_[size_t(dst)]);
    const ncclResult_t end = ncclGroupEnd();
    if (r == ncclSuccess) r = end;
    HIOS_CHECK(r == ncclSuccess, "profiler: NCCL transfer GPU %d -> GPU %d of %lld bytes failed: %s", src, dst,
               (long long)bytes, ncclGetErrorString(r));
#else
    HIOS_PROF_CUDA(cudaMemcpyPeerAsync(bufs_[size_t(dst)], dst, bufs_[size_t(src)], src, size_t(bytes),
                                       streams_[size_t(dst)]));
#endif
  }

  int n_;
  std::vector<cudaStream_t> streams_;
  std::vector<void*> bufs_;
#ifdef HIOS_PROFILER_WITH_NCCL
  std::vector<ncclComm_t> comms_;
#endif
};

std::vector<ProfileLink> profile_links(const ProfileOptions& opt, ProfileReport* rep) {
  std::vector<ProfileLink> out;
  if (opt.gpus < 2) return out;
  HIOS_CHECK(!opt.link_bytes.empty(), "profiler: no transfer sizes to time");
  LinkBench bench(opt.gpus);
  bench.reserve(*std::max_element(opt.link_bytes.begin(), opt.link_bytes.end()));
  for (int s = 0; s < opt.gpus; ++s) {
    for (int d = 0; d < opt.gpus; ++d) {
      if (s == d) continue;
      std::vector<LinkSample> samples;
      for (int64_t b : opt.link_bytes) samples.push_back({b, bench.time(s, d, b, 3, opt.link_iters)});
      const LinkFit f = fit_link(samples);
      out.push_back(ProfileLink{s, d, f.latency_us, f.bandwidth_gbs});
      if (rep) rep->link_max_rel_residual.push_back(f.max_rel_residual);
    }
  }
  return out;
}

// ---- stages: every multi-group stage of a one-GPU schedule, alone, timed as the tuner times
// them (StageTimer: a CUDA Graph replay from fork to join).
std::vector<StageSamples> profile_stages(const Graph& g, const Schedule& s, const ProfileOptions& opt) {
  HIOS_CHECK(s.meta.num_gpus == 1, "profiler: --stages needs a one-GPU schedule (this one uses %d GPUs)",
             s.meta.num_gpus);
  int streams = 1;
  for (const auto& block : s.blocks) {
    for (const Stage& st : block.at(0)) streams = std::max(streams, int(st.groups.size()));
  }
  Measurer m(g, opt, streams);
  std::vector<StageSamples> out;
  for (const auto& block : s.blocks) {
    for (const Stage& st : block.at(0)) {
      if (st.groups.size() < 2) continue;
      StageSamples ss;
      ss.stage = st;
      ss.wall_ms = m.timer->samples(st, opt.warmup, opt.iters);
      out.push_back(std::move(ss));
    }
  }
  return out;
}

std::string today() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", std::gmtime(&t));
  return buf;
}

}  // namespace

bool gpu_profiler_built() { return true; }

ProfileDb profile_gpus(const Graph& g, const ProfileOptions& opt, ProfileReport* report) {
  const int visible = cuda::device_count();
  HIOS_CHECK(visible > 0, "hios profile needs a GPU, and this process sees none");
  HIOS_CHECK(opt.gpus >= 1 && opt.gpus <= visible, "hios profile: --gpus %d, but this process sees %d GPU%s",
             opt.gpus, visible, visible == 1 ? "" : "s");
  HIOS_CHECK(opt.iters >= 1 && opt.warmup >= 0, "hios profile: --iters must be at least 1 and --warmup at least 0");
  ProfileReport rep;
  rep.gpu = cuda::device_description(0);
  ProfileDb db;
  db.device = opt.device.empty() ? preset_for_gpu_name(rep.gpu) : opt.device;
  HIOS_CHECK(!db.device.empty(), "hios profile: no device preset matches '%s'; name one with --device (h200, h100, ...)",
             rep.gpu.c_str());
  (void)find_device_preset(db.device);  // an unknown name fails here, before any measuring

  const std::vector<NodeSamples> nodes = profile_nodes(g, opt, &db.choices);
  const DevicePreset peaks = find_device_preset(db.device);
  db.entries = pool_by_signature(g, nodes, &peaks, math_stores_16_bit(opt.math));
  for (const NodeSamples& ns : nodes) {
    if (ns.wall_ms.empty()) continue;
    rep.sequential_sum_ms += median(ns.wall_ms);
    if (!ns.kernel_ms.empty()) {
      rep.kernel_sum_ms = std::max(rep.kernel_sum_ms, 0.0) + median(ns.kernel_ms);
      rep.kernels_per_pass = std::max<int64_t>(rep.kernels_per_pass, 0) + ns.kernels;
    }
  }
  db.links = profile_links(opt, &rep);
  if (opt.stages) {
    db.stages = pool_stages(g, profile_stages(g, *opt.stages, opt));
    rep.stages_measured = int(db.stages.size());
  }
  db.meta = json{{"gpu", rep.gpu},
                 {"gpus", opt.gpus},
                 {"math", opt.math},
                 {"layout", opt.layout},
                 {"conv_search", opt.conv_search},
                 {"graph", g.name},
                 {"date", today()},
                 {"node_timing", "CUDA events around each node alone on one stream, sequential eager pass"},
                 {"kernel_timing", opt.cupti ? "CUPTI activity (kernels, copies, memsets) per node" : "off"},
                 {"link_timing", opt.gpus > 1 ? LinkBench::method() : "none (one GPU)"},
                 {"iters", opt.iters},
                 {"warmup", opt.warmup}};
  if (report) *report = rep;
  return db;
}

}  // namespace hios::prof
