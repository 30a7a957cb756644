// The CPU reference backend. Its streams are the host thread: instructions run in program
// order as they are issued, so record/wait only check that the program is well formed and
// sync_stream/synchronize have nothing to wait for.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "executor/backend.hpp"
#include "executor/cpu/kernels.hpp"
#include "executor/cpu/tensor_kernels.hpp"
#include "executor/memory_plan.hpp"
#include "executor/registry.hpp"
#include "executor/weights.hpp"
#include "graph/error.hpp"
#include "graph/relu_fold.hpp"

namespace hios::exec {

namespace {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const BackendConfig& cfg) : cfg_(cfg) {
    cpu::check_kernel_table();
    HIOS_CHECK(cfg.math == "fp32", "the cpu backend computes in fp32 with double accumulation; --math %s needs a GPU backend",
               cfg.math.c_str());
    HIOS_CHECK(cfg.layout == "nchw", "the cpu backend stores activations NCHW; --layout %s needs the cuda backend",
               cfg.layout.c_str());
    HIOS_CHECK(cfg.conv_search == "quick",
               "the cpu backend has one convolution kernel and nothing to search; --conv-search %s needs the cuda backend",
               cfg.conv_search.c_str());
#ifdef _OPENMP
    if (cfg.threads > 0) omp_set_num_threads(cfg.threads);
    threads_ = omp_get_max_threads();
#else
    threads_ = 1;
#endif
  }

  std::string name() const override { return "cpu"; }
  std::string device_name() const override { return strprintf("cpu (%d thread%s)", threads_, threads_ == 1 ? "" : "s"); }
  std::string versions() const override {
#ifdef _OPENMP
    return strprintf("cpu reference (OpenMP %d)", _OPENMP);
#else
    return "cpu reference (no OpenMP)";
#endif
  }
  std::string math() const override { return "fp32"; }

  void prepare(const Graph& g, const RankProgram& p) override {
    // Parameters are kept by node. Another shape of the same model (a shape set) has the same
    // nodes, whose values depend only on their name and counts, which the check compares; any
    // other graph of the model (a row split, in the tuner) builds its own afresh.
    if (!prepared_ || (g_ != &g && !shape_variant_problem(*g_, g).empty())) {
      params_.assign(g.nodes.size(), {});
      constants_.assign(g.nodes.size(), {});
      views_.assign(g.nodes.size(), {});
      built_.assign(g.nodes.size(), false);
      weight_bytes_ = 0;
    }
    g_ = &g;
    stores_relu_ = nodes_storing_relu(g, cfg_.fold_relu);
    // A new program: its tensors replace the last one's; weights stay (their bytes stay counted).
    tensors_.assign(g.nodes.size(), {});
    storage_.clear();
    reserved_ = weight_bytes_ + int64_t(arena_.size() * sizeof(float));
    // Bands of rows in place (RowGroup) need a layout where a band is one run of memory.
    HIOS_CHECK(p.row_groups.empty(), "cpu backend: the memory plan holds bands of rows in place, which needs NHWC "
                                     "storage; the cpu backend stores NCHW");
    float* arena = nullptr;
    if (p.arena_bytes > 0 && reserved_arena_ > 0) {
      // The kept arena (reserve_arena): grown when this program needs more.
      if (size_t(p.arena_bytes) > reserved_arena_) reserve_arena(size_t(p.arena_bytes));
      arena = arena_.data();
    } else if (p.arena_bytes > 0) {
      // One arena, tensors at their planned offsets (a multiple of kArenaAlignment, so of 4).
      reserve(p.arena_bytes, arena_description(g, p));
      storage_.push_back(allocate(static_cast<size_t>(p.arena_bytes) / sizeof(float), "tensor arena"));
      arena = storage_[0].data();
    }
    for (const Instr& in : p.instrs) {
      if (in.kind != InstrKind::Alloc) continue;
      const Node& nd = g.nodes[in.node];
      // Floats of every float type are held as float32, integers and bools in their own width.
      const size_t bytes = size_t(g.tensor_bytes(in.node));
      HIOS_CHECK(int64_t(bytes) <= in.bytes, "cpu backend: tensor '%s' needs %zu bytes but the program allocates %lld",
                 nd.name.c_str(), bytes, (long long)in.bytes);
      const size_t elems = (bytes + sizeof(float) - 1) / sizeof(float);
      if (p.arena_bytes > 0) {
        HIOS_CHECK(in.offset >= 0 && in.offset % int64_t(sizeof(float)) == 0 && in.offset + in.bytes <= p.arena_bytes,
                   "cpu backend: tensor '%s' is planned at offset %lld, outside the %lld-byte arena", nd.name.c_str(),
                   (long long)in.offset, (long long)p.arena_bytes);
        tensors_[in.node] = {arena + in.offset / int64_t(sizeof(float)), bytes};
      } else {
        reserve(in.bytes, "tensor '" + nd.name + "' (" + nd.shape.str() + ")");
        storage_.push_back(allocate(elems, nd.name));
        tensors_[in.node] = {storage_.back().data(), bytes};
      }
    }
    std::vector<int> nodes = p.launched;
    for (const auto& [v, stream] : p.standby) nodes.push_back(v);
    int64_t assembly = 0, scratch = 0;
    for (int v : nodes) {
      const Node& nd = g.nodes[v];
      if (!built_[v]) {
        built_[v] = true;
        for (OpParams& op : make_node_params(g, v, cfg_.seed)) {
          const int64_t bytes = int64_t(op.weight.size() + op.bias.size()) * 4;
          reserve(bytes, "weights of '" + nd.name + "'");
          weight_bytes_ += bytes;
          params_[v].push_back(std::move(op));
        }
        for (const OpParams& op : params_[v]) {
          views_[v].push_back(
              {op.weight.empty() ? nullptr : op.weight.data(), op.bias.empty() ? nullptr : op.bias.data()});
        }
        constants_[v] = make_node_constants(g, v, cfg_.seed);
        for (const auto& c : constants_[v]) {
          reserve(int64_t(c.size()), "constants of '" + nd.name + "'");
          weight_bytes_ += int64_t(c.size());
        }
      }
      if (op_def(nd.op.kind).general) continue;  // reads its operands where they are
      Shape in = assembled_input_shape(g, v);
      if (!cpu::reads_one_whole_tensor(g, v)) {
        int64_t elems = in.numel();
        if (op_def(nd.op.kind).terms_are_operands) {
          elems = 0;  // one buffer per operand, each of its own shape (a rows op's operands differ in H)
          for (const Term& t : nd.inputs) elems += g.value_shape(t[0]).numel();
        } else if (const Term* r = nd.residual_term()) {
          elems += g.value_shape(r->at(0)).numel();
        }
        assembly = std::max(assembly, elems);
      }
      scratch = std::max(scratch, cpu::scratch_elems(nd.op, in));
    }
    // Sized once here so that a pass never allocates (assemble_terms and the sequential kernel
    // keep the capacity).
    reserve((assembly + 2 * scratch) * 4, "scratch buffers");
    try {
      assembly_.assign(1, std::vector<float>(static_cast<size_t>(assembly)));
      scratch_.a.resize(static_cast<size_t>(scratch));
      scratch_.b.resize(static_cast<size_t>(scratch));
    } catch (const std::bad_alloc&) {
      throw_error("out of host memory allocating %lld bytes of scratch buffers on the cpu backend",
                  (long long)((assembly + 2 * scratch) * 4));
    }
    num_streams_ = static_cast<int>(p.streams.size());
    recorded_.assign(static_cast<size_t>(p.num_events), false);
    prepared_ = true;
  }

  // The host thread is every stream, so a marker is the moment it is issued.
  void reserve_markers(int n) override {
    if (n > int(marks_.size())) marks_.resize(size_t(n));
  }
  void mark(int marker, int stream) override {
    check_stream(stream);
    HIOS_CHECK(marker >= 0 && marker < int(marks_.size()), "cpu backend: marker %d out of range (%zu reserved)",
               marker, marks_.size());
    marks_[size_t(marker)] = std::chrono::steady_clock::now();
  }
  double marker_ms(int from, int to) override {
    HIOS_CHECK(from >= 0 && to >= 0 && from < int(marks_.size()) && to < int(marks_.size()),
               "cpu backend: markers %d, %d out of range (%zu reserved)", from, to, marks_.size());
    return std::chrono::duration<double, std::milli>(marks_[size_t(to)] - marks_[size_t(from)]).count();
  }

  void launch(int node, int stream) override {
    check_stream(stream);
    const Graph& g = *g_;
    const Node& nd = g.nodes[node];
    HIOS_CHECK(tensors_[node].data, "cpu backend: '%s' launched without a tensor", nd.name.c_str());
    HIOS_CHECK(built_[node], "cpu backend: '%s' launched, but the program neither launches it nor holds it on standby",
               nd.name.c_str());
    if (typed_launch(g, node)) {
      launch_typed(g, node);
      return;
    }
    std::vector<const float*> in;
    std::vector<Shape> shapes;
    if (cpu::reads_one_whole_tensor(g, node)) {
      int u = nd.inputs[0][0].node;
      in.push_back(resident(u, nd.name));
      shapes.push_back(g.nodes[u].shape);
    } else {
      std::vector<const float*> producers;
      for (const Term& t : nd.inputs) {
        for (const Value& val : t) producers.push_back(resident(val.node, nd.name));
      }
      cpu::assemble_terms(g, node, producers, assembly_);
      const bool operands = op_def(nd.op.kind).terms_are_operands;
      Shape s = assembled_input_shape(g, node);
      for (size_t t = 0; t < assembly_.size(); ++t) {
        in.push_back(assembly_[t].data());
        // A residual convolution's second buffer is its residual, of the output's shape.
        shapes.push_back(operands ? g.value_shape(nd.inputs[t][0]) : t == 0 ? s : nd.shape);
      }
    }
    cpu::run_op(nd.op, in, shapes, nd.shape, tensors_[node].data, views_[node], scratch_);
    if (stores_relu_[size_t(node)]) {
      // graph/relu_fold.hpp: the node stores relu(value), as the CUDA backend does.
      float* y = tensors_[node].data;
      const int64_t count = nd.shape.numel();
      for (int64_t i = 0; i < count; ++i) y[i] = std::max(y[i], 0.f);
    }
    cpu::round_to_type(tensors_[node].data, nd.shape.numel(), nd.dtype);
  }

  // General ops, and element-wise or softmax ops on tensors that are not float or not images,
  // run through the typed kernels: operands where they are, constants where prepare built them.
  static bool typed_launch(const Graph& g, int node) {
    const Node& nd = g.nodes[size_t(node)];
    if (op_def(nd.op.kind).general) return true;
    if (nd.op.kind != OpKind::Activation && nd.op.kind != OpKind::Softmax) return false;
    if (!cpu::reads_one_whole_tensor(g, node)) return false;
    const Node& src = g.nodes[size_t(nd.inputs[0][0].node)];
    return !is_float(src.dtype) || !is_float(nd.dtype) || src.shape.rank != 4;
  }
  void launch_typed(const Graph& g, int node) {
    const Node& nd = g.nodes[size_t(node)];
    std::vector<cpu::TensorArg> args;
    size_t term = 0, constant = 0;
    for (int k = 0; k < nd.operands(); ++k) {
      if (const Constant* c = nd.constant(k)) {
        args.push_back({constants_[size_t(node)][constant++].data(), c->shape, cpu::storage_type(c->dtype)});
      } else {
        const Node& src = g.nodes[size_t(nd.inputs[term++][0].node)];
        args.push_back({resident(nd.inputs[term - 1][0].node, nd.name), src.shape, cpu::storage_type(src.dtype)});
      }
    }
    try {
      cpu::run_tensor_op(nd.op, args, {tensors_[node].data, nd.shape, cpu::storage_type(nd.dtype)});
    } catch (const Error& e) {
      // An index out of range in a computed tensor, say: the message names the node.
      std::string why = e.what();
      if (why.rfind("cpu kernel: ", 0) == 0) why = why.substr(12);
      throw_error("node '%s': %s", nd.name.c_str(), why.c_str());
    }
    if (is_float(nd.dtype)) cpu::round_to_type(tensors_[node].data, nd.shape.numel(), nd.dtype);
  }

  void record(int event, int stream) override {
    check_stream(stream);
    check_event(event);
    recorded_[event] = true;
  }
  void wait(int event, int stream) override {
    check_stream(stream);
    check_event(event);
    HIOS_CHECK(recorded_[event], "cpu backend: stream %d waits on event %d, which was never recorded", stream, event);
  }
  void sync_stream(int stream) override { check_stream(stream); }
  void synchronize() override {}

  TensorView tensor(int node) override {
    check_node(node);
    const Tensor& t = tensors_[node];
    HIOS_CHECK(t.data, "cpu backend: '%s' is not resident on this rank", g_->nodes[node].name.c_str());
    return {t.data, t.bytes, MemoryKind::Host};
  }
  HostBuffer alloc_host(size_t bytes) override {
    void* p = std::malloc(bytes ? bytes : 1);
    HIOS_CHECK(p != nullptr, "out of host memory allocating a %zu-byte staging buffer", bytes);
    return HostBuffer(p, std::free);
  }
  void copy_to_host(int node, void* dst, int stream) override {
    check_stream(stream);
    TensorView t = tensor(node);
    std::memcpy(dst, t.data, t.bytes);
  }
  void copy_from_host(int node, const void* src, int stream) override {
    check_stream(stream);
    TensorView t = tensor(node);
    std::memcpy(t.data, src, t.bytes);
  }

  void set_input(const std::vector<float>& values) override {
    TensorView t = tensor(g_->input());
    HIOS_CHECK(values.size() * sizeof(float) == t.bytes, "cpu backend: input has %zu values, expected %zu",
               values.size(), t.bytes / sizeof(float));
    std::memcpy(t.data, values.data(), t.bytes);
  }
  void write_tensor(int node, const std::vector<float>& values) override {
    TensorView t = tensor(node);
    HIOS_CHECK(values.size() * sizeof(float) == t.bytes, "cpu backend: %zu values for '%s', which holds %zu",
               values.size(), g_->nodes[size_t(node)].name.c_str(), t.bytes / sizeof(float));
    std::memcpy(t.data, values.data(), t.bytes);
  }
  std::vector<float> read_tensor(int node) override {
    TensorView t = tensor(node);
    const float* p = static_cast<const float*>(t.data);
    return std::vector<float>(p, p + t.bytes / sizeof(float));
  }

  size_t peak_memory_bytes() const override { return static_cast<size_t>(reserved_); }
  size_t memory_in_use() const override { return static_cast<size_t>(reserved_); }

  // The host has no captured passes to keep, so a shape set prepares a shape again to switch
  // to it; the kept arena is what makes that cheap and keeps the input where the caller wrote it.
  void reserve_arena(size_t bytes) override {
    if (bytes <= reserved_arena_) return;
    const size_t elems = (bytes + sizeof(float) - 1) / sizeof(float);
    reserve(int64_t(elems - arena_.size()) * int64_t(sizeof(float)), "the kept tensor arena");
    // Tensors bound into the old arena would dangle: the next prepare binds them afresh.
    std::fill(tensors_.begin(), tensors_.end(), Tensor{});
    arena_ = allocate(elems, "kept tensor arena");
    reserved_arena_ = elems * sizeof(float);
  }

 private:
  // Counts bytes against BackendConfig::memory_limit before allocating, so that the out-of-
  // memory path names the tensor exactly as a GPU backend would.
  void reserve(int64_t bytes, const std::string& what) {
    if (cfg_.memory_limit > 0 && reserved_ + bytes > static_cast<int64_t>(cfg_.memory_limit)) {
      throw_error("out of memory on the cpu backend allocating %s: %lld bytes, %lld of the %lld-byte limit in use",
                  what.c_str(), (long long)bytes, (long long)reserved_, (long long)cfg_.memory_limit);
    }
    reserved_ += bytes;
  }
  std::vector<float> allocate(size_t elems, const std::string& name) {
    try {
      return std::vector<float>(elems);
    } catch (const std::bad_alloc&) {
      throw_error("out of host memory allocating tensor '%s' (%zu bytes) on the cpu backend", name.c_str(),
                  elems * sizeof(float));
    }
  }
  const float* resident(int u, const std::string& reader) const {
    HIOS_CHECK(tensors_[u].data, "cpu backend: '%s' reads '%s', which is not resident on this rank",
               reader.c_str(), g_->nodes[u].name.c_str());
    return tensors_[u].data;
  }
  void check_stream(int s) const {
    HIOS_CHECK(prepared_, "cpu backend: used before prepare()");
    HIOS_CHECK(s >= 0 && s < num_streams_, "cpu backend: stream %d out of range (%d streams)", s, num_streams_);
  }
  void check_event(int e) const {
    HIOS_CHECK(e >= 0 && e < static_cast<int>(recorded_.size()), "cpu backend: event %d out of range", e);
  }
  void check_node(int v) const {
    HIOS_CHECK(prepared_ && v >= 0 && v < g_->size(), "cpu backend: tensor #%d out of range", v);
  }

  BackendConfig cfg_;
  int threads_ = 1;
  bool prepared_ = false;
  const Graph* g_ = nullptr;
  // Where each node's tensor lives (null: not resident) and how many floats it holds; the
  // memory is in storage_: one vector per tensor, or one arena shared by all (share_buffers).
  struct Tensor {
    float* data = nullptr;  // float32 values, or the bytes of an integer or bool tensor
    size_t bytes = 0;
  };
  std::vector<Tensor> tensors_;
  std::vector<std::vector<float>> storage_;
  std::vector<float> arena_;  // reserve_arena's, kept across programs
  std::vector<std::vector<OpParams>> params_;
  std::vector<std::vector<std::vector<uint8_t>>> constants_;  // per node, per constant (make_node_constants)
  std::vector<std::vector<cpu::OpParamsView>> views_;
  std::vector<bool> stores_relu_;  // graph/relu_fold.hpp
  std::vector<std::vector<float>> assembly_;
  cpu::Scratch scratch_;
  int num_streams_ = 0;
  std::vector<bool> recorded_;
  int64_t reserved_ = 0;
  std::vector<bool> built_;   // index: node; its weights exist (kept across programs)
  int64_t weight_bytes_ = 0;  // counted in reserved_ whatever program is loaded
  std::vector<std::chrono::steady_clock::time_point> marks_;
};

}  // namespace

void register_cpu_backend() {
  BackendEntry e;
  e.name = "cpu";
  e.description = "reference kernels on the host (OpenMP), the correctness oracle";
  e.make = [](const BackendConfig& cfg) -> std::unique_ptr<Backend> { return std::make_unique<CpuBackend>(cfg); };
  register_backend(std::move(e));
}

}  // namespace hios::exec
