#include "executor/cuda/engine.hpp"

#include <algorithm>
#include <mutex>
#include <string_view>

#include "executor/cuda/check.hpp"
#include "executor/cuda/kernels.hpp"
#include "executor/init.hpp"
#include "executor/weights.hpp"
#include "graph/elements.hpp"
#include "graph/relu_fold.hpp"

namespace hios::cuda {

namespace {

// The per-device algorithm cache, shared by every engine of the process. Entries are never
// erased, so references into the map stay valid.
struct ConvCache {
  std::mutex mu;
  std::map<std::string, ConvChoice> entries;
};
ConvCache& conv_cache(int device) {
  static std::mutex mu;
  static std::map<int, std::unique_ptr<ConvCache>> caches;
  std::lock_guard<std::mutex> lock(mu);
  std::unique_ptr<ConvCache>& c = caches[device];
  if (!c) c = std::make_unique<ConvCache>();
  return *c;
}

// cudnnFind may try algorithms that want large workspaces (FFT at 2048x2048 inputs); PyTorch's
// benchmark mode lets them have what is free, we cap it so that one convolution's search
// cannot take the memory the activations need.
constexpr size_t kFindWorkspaceCap = size_t(2) << 30;

}  // namespace

Engine::Engine(const Graph& g, const Options& opts)
    : g_(&g),
      opts_(opts),
      stores_relu_(nodes_storing_relu(g, opts.fold_relu)),
      outputs_(size_t(g.size()), nullptr),
      params_loaded_(size_t(g.size()), false) {
  HIOS_CUDA_CHECK(cudaSetDevice(opts.device));
  ensure_streams(1);
}

Engine::~Engine() {
  (void)cudaSetDevice(opts_.device);
  (void)cudaDeviceSynchronize();
}

void Engine::ensure_streams(int n) {
  while (int(streams_.size()) < n) {
    streams_.push_back(std::make_unique<StreamResources>(opts_.device, int(streams_.size()), opts_.stream_priority));
  }
}

void Engine::bind_output(int node, void* ptr) { outputs_.at(size_t(node)) = ptr; }

View Engine::node_view(int node) const {
  return whole_view(outputs_.at(size_t(node)), g_->nodes.at(size_t(node)).shape, opts_.layout, elem());
}

View Engine::value_view(const Value& v) const {
  const Shape& s = g_->nodes.at(size_t(v.node)).shape;
  const int64_t begin = g_->value_begin(v), end = g_->value_end(v);
  if (begin == 0 && end == s.c) return node_view(v.node);  // whole: any rank
  View out = whole_view(outputs_.at(size_t(v.node)), Shape{s.n, end - begin, s.h, s.w}, opts_.layout, elem());
  out.batch_stride = s.c * s.h * s.w;
  if (opts_.layout == Layout::Nhwc) {
    out.ptr = out.at(begin);  // channel `begin` of pixel 0
    out.pixel_stride = s.c;
  } else {
    out.ptr = out.at(begin * s.h * s.w);
  }
  return out;
}

void Engine::plan(const std::vector<std::pair<int, int>>& node_streams) {
  HIOS_CUDA_CHECK(cudaSetDevice(opts_.device));
  plans_.clear();  // launches hold pointers into the arenas this call may grow
  int most = 0;
  for (const auto& [node, st] : node_streams) {
    HIOS_CHECK(node >= 0 && node < g_->size(), "CUDA engine: node index %d out of range", node);
    HIOS_CHECK(st >= 0 && st < kStreamKeys, "CUDA engine: stream index %d out of range for node '%s'", st,
               g_->nodes[size_t(node)].name.c_str());
    for (const Term& t : g_->nodes[size_t(node)].inputs) {
      for (const Value& v : t) {
        HIOS_CHECK(outputs_[size_t(v.node)] != nullptr, "CUDA engine: node '%s' reads '%s', which has no device buffer",
                   g_->nodes[size_t(node)].name.c_str(), g_->nodes[size_t(v.node)].name.c_str());
      }
    }
    HIOS_CHECK(outputs_[size_t(node)] != nullptr, "CUDA engine: node '%s' has no output buffer",
               g_->nodes[size_t(node)].name.c_str());
    most = std::max(most, st + 1);
  }
  ensure_streams(most);

  // Pass 1: how much scratch each stream's arena needs.
  std::vector<size_t> scratch(streams_.size(), 0);
  for (const auto& [node, st] : node_streams) {
    PlanCtx c{*this, stream(st), true, g_->nodes[size_t(node)].name, nullptr};
    plan_node(c, node);
    scratch[size_t(st)] = std::max(scratch[size_t(st)], c.scratch_top);
  }
  for (size_t s = 0; s < streams_.size(); ++s) streams_[s]->reserve_scratch(scratch[s]);

  // Pass 2: weights, descriptors, algorithms, launches.
  std::vector<size_t> workspace(streams_.size(), 0);
  for (const auto& [node, st] : node_streams) {
    NodePlan np;
    np.stream = st;
    PlanCtx c{*this, stream(st), false, g_->nodes[size_t(node)].name, &np.launches};
    plan_node(c, node);
    workspace[size_t(st)] = std::max(workspace[size_t(st)], c.workspace_need);
    plans_[plan_key(node, st)] = std::move(np);
  }
  find_ws_.reset();
  for (size_t s = 0; s < streams_.size(); ++s) streams_[s]->reserve_workspace(workspace[s]);
  HIOS_CUDA_CHECK(cudaDeviceSynchronize());
}

void Engine::retarget(const Graph& g) {
  // Any graph of the model: another shape (a shape set) or a row split of it (the tuner). Its
  // nodes find their parameters by owner (load_params), so nothing uploaded is stale.
  reset_plans();
  g_ = &g;
  stores_relu_ = nodes_storing_relu(g, opts_.fold_relu);
  outputs_.assign(size_t(g.size()), nullptr);
  // Plans look parameters up by node; the uploads stay in owned_params_, found again by owner.
  params_loaded_.assign(size_t(g.size()), false);
  params_.clear();
}

uint64_t Engine::resource_epoch() const {
  uint64_t moves = 0;
  for (const auto& s : streams_) moves += s->moves();
  return moves;
}

void Engine::reset_plans() {
  HIOS_CUDA_CHECK(cudaSetDevice(opts_.device));
  HIOS_CUDA_CHECK(cudaDeviceSynchronize());  // nothing in flight may still use a plan's buffers
  plans_.clear();
  std::fill(outputs_.begin(), outputs_.end(), nullptr);
}

void Engine::launch(int node, int stream_index) {
  auto it = plans_.find(plan_key(node, stream_index));
  HIOS_CHECK(it != plans_.end(), "CUDA engine: node '%s' was not planned on stream %d of this device",
             g_->nodes.at(size_t(node)).name.c_str(), stream_index);
  StreamResources& r = stream(it->second.stream);
  for (const Launch& l : it->second.launches) l(r);
}

size_t Engine::launch_count(int node, int stream_index) const {
  auto it = plans_.find(plan_key(node, stream_index));
  return it == plans_.end() ? 0 : it->second.launches.size();
}

void Engine::load_params(int node) {
  if (params_loaded_.at(size_t(node))) return;
  params_loaded_[size_t(node)] = true;
  const Node& nd = g_->nodes[size_t(node)];
  const std::vector<std::pair<int64_t, int64_t>> counts = exec::node_param_counts(*g_, node);
  // Built only when some op's values are not on the device yet: another shape of the same
  // model (a shape set) finds them all uploaded.
  std::vector<exec::OpParams> ps;
  for (size_t i = 0; i < counts.size(); ++i) {
    const std::string steps = nd.op.kind == OpKind::Sequential ? strprintf(".steps[%zu]", i) : std::string();
    const std::string prefix = nd.name + steps;  // how plans look them up
    // Whose values they are: the parts of a row split carry their operator's parameters
    // (Node::params_from), so parts on one device share one upload.
    const std::string owner = strprintf("%s%s #%lld,%lld", nd.params_name().c_str(), steps.c_str(),
                                        (long long)counts[i].first, (long long)counts[i].second);
    auto shared = owned_params_.find(owner);
    if (shared != owned_params_.end()) {
      params_[prefix] = shared->second;
      continue;
    }
    // Ordered as this layout's kernels read them (KRSC convolutions in NHWC).
    if (ps.empty()) ps = exec::make_node_params(*g_, node, opts_.seed, opts_.layout);
    Params out;
    // Converted once here to the storage type (in half precision the weights take half the memory).
    auto to_device = [&](const std::vector<float>& host, const std::string& what) -> const void* {
      if (host.empty()) return nullptr;
      DeviceBuffer buf(opts_.device, host.size() * elem_bytes(elem()), what + " '" + prefix + "'");
      upload_as(buf.get(), elem(), host.data(), host.size(), streams_[0]->stream());
      weight_bytes_ += buf.bytes();
      const void* p = buf.get();
      weights_.emplace(owner + "." + what, std::move(buf));
      return p;
    };
    out.weight = to_device(ps[i].weight, "weight");
    out.bias = to_device(ps[i].bias, "bias");
    out.weight_count = int64_t(ps[i].weight.size());
    out.bias_count = int64_t(ps[i].bias.size());
    params_[prefix] = out;
    owned_params_[owner] = out;
  }
}

const void* Engine::node_constant(int node, size_t index) {
  const Node& nd = g_->nodes.at(size_t(node));
  const Constant& c = nd.constants.at(index);
  const std::string key = nd.params_name() + ".c" + std::to_string(c.operand) + (is_float(c.dtype) ? "" : ".i64");
  auto it = weights_.find(key);
  if (it != weights_.end()) return it->second.get();
  std::vector<std::vector<uint8_t>> bytes = exec::make_node_constants(*g_, node, opts_.seed);
  const int64_t count = c.shape.numel();
  DeviceBuffer buf(opts_.device, size_t(std::max<int64_t>(count, 1)) * 8, "constant '" + key + "'");
  if (is_float(c.dtype)) {  // make_node_constants gives float32
    upload_as(buf.get(), elem(), reinterpret_cast<const float*>(bytes.at(index).data()), size_t(count),
              streams_[0]->stream());
  } else {
    std::vector<int64_t> wide(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) wide[size_t(i)] = load_int(bytes.at(index).data(), c.dtype, i);
    upload(buf.get(), wide.data(), wide.size() * sizeof(int64_t), streams_[0]->stream());
  }
  weight_bytes_ += buf.bytes();
  const void* p = buf.get();
  weights_.emplace(key, std::move(buf));
  return p;
}

const void* Engine::table(const std::string& key, const void* src, size_t bytes) {
  // Keyed by the contents too, and never replaced: a kept pass of another shape (a shape set's
  // captured graph) may still read the table this node had there.
  const std::string full = strprintf("table %s #%zu:%zx", key.c_str(), bytes,
                                     std::hash<std::string_view>{}(std::string_view(static_cast<const char*>(src), bytes)));
  auto it = weights_.find(full);
  if (it != weights_.end()) return it->second.get();
  DeviceBuffer buf(opts_.device, std::max<size_t>(bytes, 1), "table '" + key + "'");
  upload(buf.get(), src, bytes, streams_[0]->stream());
  const void* p = buf.get();
  weights_.emplace(full, std::move(buf));
  return p;
}

const Engine::Params& Engine::params(const std::string& prefix) const {
  auto it = params_.find(prefix);
  HIOS_CHECK(it != params_.end(), "CUDA engine: no parameters were loaded for '%s'", prefix.c_str());
  return it->second;
}

void Engine::upload_input() {
  const int in = g_->input();
  HIOS_CHECK(outputs_[size_t(in)] != nullptr, "CUDA engine: the graph input has no device buffer");
  const std::vector<float> v =
      exec::to_layout(exec::make_input(*g_, opts_.seed), g_->nodes[size_t(in)].shape, opts_.layout);
  upload_as(outputs_[size_t(in)], elem(), v.data(), v.size(), streams_[0]->stream());
}

const void* Engine::padded_weights(const std::string& prefix, int64_t rows, int64_t channels, int64_t padded) {
  const std::string name = strprintf("<%s padded to %lld channels>", prefix.c_str(), (long long)padded);
  auto it = weights_.find(name);
  if (it != weights_.end()) return it->second.get();
  const Params& prm = params(prefix);
  const size_t eb = elem_bytes(elem());
  HIOS_CHECK(prm.weight_count == rows * channels && padded > channels,
             "CUDA engine: '%s' holds %lld weights, not %lld rows of %lld", prefix.c_str(), (long long)prm.weight_count,
             (long long)rows, (long long)channels);
  DeviceBuffer buf(opts_.device, size_t(rows * padded) * eb, "padded weights of '" + prefix + "'");
  const cudaStream_t st = streams_[0]->stream();
  // All-zero bits are zero in every storage type.
  HIOS_CUDA_CHECK(cudaMemsetAsync(buf.get(), 0, buf.bytes(), st));
  HIOS_CUDA_CHECK(cudaMemcpy2DAsync(buf.get(), size_t(padded) * eb, prm.weight, size_t(channels) * eb,
                                    size_t(channels) * eb, size_t(rows), cudaMemcpyDeviceToDevice, st));
  // Planning times candidates on other streams: the copy is done before any reads it.
  HIOS_CUDA_CHECK(cudaStreamSynchronize(st));
  const void* p = buf.get();
  weight_bytes_ += buf.bytes();
  weights_.emplace(name, std::move(buf));
  return p;
}

const void* Engine::zeros(int64_t count, cudaStream_t fill_stream) {
  const std::string name = strprintf("<zero bias x%lld>", (long long)count);
  auto it = weights_.find(name);
  if (it != weights_.end()) return it->second.get();
  // All-zero bits are zero in every storage type.
  DeviceBuffer buf(opts_.device, size_t(count) * elem_bytes(elem()), "a zero bias");
  HIOS_CUDA_CHECK(cudaMemsetAsync(buf.get(), 0, buf.bytes(), fill_stream));
  const void* p = buf.get();
  weights_.emplace(name, std::move(buf));
  return p;
}

void* Engine::find_workspace(size_t* bytes) {
  if (!find_ws_) {
    size_t free_b = 0, total_b = 0;
    HIOS_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    size_t want = std::min(kFindWorkspaceCap, free_b / 4);
    want = want / (1 << 20) * (1 << 20);
    find_ws_ = DeviceBuffer(opts_.device, std::max<size_t>(want, 1 << 20), "the cudnnFind workspace");
  }
  *bytes = find_ws_.bytes();
  return find_ws_.get();
}

ConvChoice& Engine::find_conv(const std::string& key, StreamResources& res, cudnnTensorDescriptor_t xd, const void* x,
                              cudnnFilterDescriptor_t wd, const void* w, cudnnConvolutionDescriptor_t cd,
                              cudnnTensorDescriptor_t yd, void* y, bool fp32_only) {
  ConvCache& cache = conv_cache(opts_.device);
  std::lock_guard<std::mutex> lock(cache.mu);
  auto it = cache.entries.find(key);
  if (it != cache.entries.end()) {
    ++it->second.uses;
    return it->second;
  }
  size_t ws_bytes = 0;
  void* ws = find_workspace(&ws_bytes);
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int returned = 0;
  HIOS_CUDA_CHECK(cudaStreamSynchronize(res.stream()));
  HIOS_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(res.cudnn(), xd, x, wd, w, cd, yd, y,
                                                          CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf, ws,
                                                          ws_bytes));
  // Results come fastest first. In fp32 mode take only algorithms that stay off the TF32 path.
  const cudnnConvolutionFwdAlgoPerf_t* best = nullptr;
  for (int i = 0; i < returned && !best; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
    if (fp32_only && perf[i].mathType != CUDNN_FMA_MATH) continue;
    if (!legacy_algo_keeps_nan(perf[i].algo)) continue;
    best = &perf[i];
  }
  HIOS_CHECK(best != nullptr, "cudnnFind found no usable %s algorithm for convolution %s (%d tried)",
             fp32_only ? "fp32" : "tf32", key.c_str(), returned);
  ConvChoice ch;
  ch.algo = best->algo;
  ch.math = best->mathType;
  ch.workspace = best->memory;
  ch.find_ms = best->time;
  ch.uses = 1;
  return cache.entries.emplace(key, ch).first->second;
}

void Engine::note_conv(const std::string& key, const std::string& what) {
  auto& n = conv_notes_[key];
  n.first = what;
  ++n.second;
}

std::string Engine::algorithm_report() const {
  std::string s;
  for (const auto& [key, note] : conv_notes_) {
    s += strprintf("  %-78s x%-3d %s\n", key.c_str(), note.second, note.first.c_str());
  }
  return s;
}

}  // namespace hios::cuda
