#include "executor/session.hpp"

#include <cstring>

#include <algorithm>
#include <chrono>
#include <exception>
#include <map>

#include "executor/memory_plan.hpp"
#include "executor/registry.hpp"
#include "executor/tensor_layout.hpp"
#include "executor/weights.hpp"
#include "scheduler/cost_model.hpp"
#include "graph/elements.hpp"
#include "graph/error.hpp"
#include "graph/stats.hpp"

namespace hios::exec {


RankSession::RankSession(const Graph& g, const SessionOptions& opt, Comm& comm) : g_(&g), comm_(comm), opt_(opt) {
  const BackendEntry& be = find_backend(opt.backend);
  transport_name_ = opt.transport.empty() ? be.default_transport : opt.transport;
  // A one-rank session moves nothing, so it needs no transport (and works in builds without MPI).
  if (comm.size() > 1 || !opt.transport.empty()) find_transport(transport_name_);
  cfg_.math = opt.math.empty() ? be.default_math : opt.math;
  cfg_.seed = opt.seed;
  cfg_.threads = opt.threads;
  cfg_.memory_limit = opt.memory_limit;
  cfg_.conv_impl = opt.conv_impl;
  HIOS_CHECK(opt.conv_search == "quick" || opt.conv_search == "wide", "--conv-search must be quick or wide, not '%s'",
             opt.conv_search.c_str());
  cfg_.conv_search = opt.conv_search;
  HIOS_CHECK(opt.comm_priority == "high" || opt.comm_priority == "normal",
             "--comm-priority must be high or normal, not '%s'", opt.comm_priority.c_str());
  cfg_.comm_priority = opt.comm_priority;
  HIOS_CHECK(opt.compute_priority == "high" || opt.compute_priority == "normal",
             "the compute stream priority must be high or normal, not '%s'", opt.compute_priority.c_str());
  cfg_.compute_priority = opt.compute_priority;
  cfg_.layout = opt.layout.empty() ? default_layout(be, g) : opt.layout;
  cfg_.fold_relu = opt.fold_relu;
  (void)parse_layout(cfg_.layout);  // one line naming a bad value, before any backend exists
  const int rank = comm.rank();
  if (be.device_count) {
    const int visible = be.device_count();
    const int local = comm.local_rank();
    if (opt.device >= 0) {
      HIOS_CHECK(opt.device < visible, "GPU %d was asked for, but host %s has %d visible", opt.device,
                 comm.hostname().c_str(), visible);
      cfg_.device = opt.device;
    } else if (opt.devices.empty()) {
      HIOS_CHECK(local < visible,
                 "%d rank(s) on host %s but only %d GPU(s) visible: rank %d (local rank %d) has no GPU; use fewer "
                 "ranks per host or --devices",
                 comm.local_size(), comm.hostname().c_str(), visible, rank, local);
      cfg_.device = local;
    } else {
      HIOS_CHECK(local < static_cast<int>(opt.devices.size()),
                 "--devices lists %zu device(s) but host %s runs %d rank(s); local rank %d has none",
                 opt.devices.size(), comm.hostname().c_str(), comm.local_size(), local);
      cfg_.device = opt.devices[static_cast<size_t>(local)];
      HIOS_CHECK(cfg_.device >= 0 && cfg_.device < visible, "--devices names GPU %d but host %s has %d visible",
                 cfg_.device, comm.hostname().c_str(), visible);
    }
  } else {
    HIOS_CHECK(opt.devices.empty(), "--devices applies to GPU backends; the %s backend has no devices",
               opt.backend.c_str());
  }
  if (opt.transport.empty() && comm.size() > 1 && !be.one_host_transport.empty()) {
    transport_name_ = transport_for_placement(be);
  }
  backend_ = make_backend(opt.backend, cfg_);
}

// The backend's default transport for where the ranks are (registry.hpp, default_transport):
// every rank's host and device, gathered, so that all ranks take the same one.
std::string RankSession::transport_for_placement(const BackendEntry& be) {
  const std::vector<std::string> all = comm_.allgather(std::to_string(cfg_.device) + " " + comm_.hostname());
  std::vector<std::string> hosts;
  std::vector<int> devices;
  for (const std::string& e : all) {
    const size_t space = e.find(' ');
    devices.push_back(std::stoi(e.substr(0, space)));
    hosts.push_back(e.substr(space + 1));
  }
  return default_transport(be, hosts, devices);
}

RankSession::~RankSession() {
  // A captured pass holds references to the NCCL communicators it used, and ncclCommDestroy
  // waits for such graphs: drop the capture before the transport (the other order hung every
  // captured multi-GPU run at exit).
  // Unwinding from an error: skip that (it synchronises the device, which waits for ever behind
  // a kernel that hung); the transport aborts its communicators instead, and the error ends the job.
  if (backend_ && std::uncaught_exceptions() == 0) backend_->release_capture();
  transport_.reset();
}

bool RankSession::can_capture() const {
  if (!backend_->can_capture()) return false;
  if (comm_.size() == 1) return true;
  // Before the first load there is no transport object to ask: its registry entry answers.
  return transport_ ? transport_->capturable() : find_transport(transport_name_).capturable;
}

void RankSession::load(RankProgram p) {
  HIOS_CHECK(p.rank == comm_.rank() && p.num_ranks == comm_.size(),
             "internal error: rank %d of %d given the program of rank %d of %d", comm_.rank(), comm_.size(), p.rank,
             p.num_ranks);
  // Lowered in float32 bytes; a backend storing 16-bit elements gets its sizes.
  program_ = with_element_bytes(*g_, std::move(p), backend_->element_bytes());
  captured_ = false;
  eager_passes_ = 0;
  backend_->prepare(*g_, program_);
  if (comm_.size() > 1) {
    if (!transport_) transport_ = make_transport(transport_name_, comm_, *backend_);
    transport_->prepare(*g_, program_);
    if (backend_->loads_code_at_first_launch()) launch_kernels_locally();
  }
  loaded_ = true;
  ++loads_;
}

// The loaded program once without its transfers, before any pass with them: the first launch
// of a kernel loads its code, and loading may wait for every kernel running on the device. In a
// pass with transfers one of them can be a transfer kernel spinning until a peer sends, while
// the peer waits for this rank, and both hang (a two-GPU re-tune did, in its first pass on the
// second GPU, which had launched none of the graph's kernels before). Every load does it, not
// only the first: which kernels a node takes (fused or not, and so on) can depend on the
// schedule. The outputs are garbage, overwritten by the next pass; it costs one pass of compute
// per load.
void RankSession::launch_kernels_locally() {
  const bool transfers = std::any_of(program_.instrs.begin(), program_.instrs.end(), [](const Instr& in) {
    return in.kind == InstrKind::Send || in.kind == InstrKind::Recv;
  });
  if (!transfers) return;  // nothing here waits for a peer
  Backend& b = *backend_;
  for (const Instr& in : program_.instrs) {
    switch (in.kind) {
      case InstrKind::Launch: b.launch(in.node, in.stream); break;
      case InstrKind::Record: b.record(in.event, in.stream); break;
      case InstrKind::Wait: b.wait(in.event, in.stream); break;
      default: break;  // no transfer; allocations were made in prepare; gather is the host's
    }
  }
  b.synchronize();
}

void RankSession::load_shape(const Graph& g, RankProgram p) {
  if (&g != g_) {
    const std::string problem = shape_variant_problem(*g_, g);
    HIOS_CHECK(problem.empty(), "%s", problem.c_str());
    g_ = &g;
  }
  load(std::move(p));
}

void RankSession::load_schedule(const Schedule& s, bool shared_memory, const LaunchOrder& order) {
  HIOS_CHECK(comm_.size() == s.meta.num_gpus,
             "schedule '%s' is for %d GPU(s) but the job has %d rank(s); start it with mpirun -np %d",
             s.meta.algorithm.c_str(), s.meta.num_gpus, comm_.size(), s.meta.num_gpus);
  RankProgram p = lower(*g_, s, comm_.rank(), order);
  if (shared_memory) plan_and_check_shared_buffers(*g_, p, memory_plan_options(backend_->layout(), *g_));
  load(std::move(p));
}

void RankSession::issue(const std::vector<Instr>& instrs) { issue(instrs, true); }

void RankSession::issue(const std::vector<Instr>& instrs, bool observed) {
  HIOS_CHECK(loaded_, "internal error: a pass before any program was loaded");
  // Observers stay out of a capture: markers and host callbacks cannot be recorded there.
  static const std::vector<PassObserver*> none;
  const std::vector<PassObserver*>& observers = observed ? observers_ : none;
  Backend& b = *backend_;
  Transport* t = transport_.get();
  // Send fences: an event recorded on a send stream after its n-th send, and a compute stream
  // waiting for it, mean that the transport must have completed those n sends (on the host,
  // for MPI) before the tensors' memory is reused. Sends to a peer are counted over all its
  // lanes: they are issued in the pair's send order, so completing the first n of them covers
  // the fenced one whichever lane it took.
  std::map<int, int> sends_to;                      // peer -> sends issued so far
  std::map<int, std::pair<int, int>> sends_before;  // event -> (peer, sends before its record)
  for (const Instr& in : instrs) {
    for (PassObserver* o : observers) o->before(*this, in);
    switch (in.kind) {
      case InstrKind::Alloc: break;  // done once, in prepare
      case InstrKind::Launch: b.launch(in.node, in.stream); break;
      case InstrKind::Record:
        if (program_.streams[size_t(in.stream)].kind == StreamKind::Send) {
          const int peer = program_.streams[size_t(in.stream)].peer;
          sends_before[in.event] = {peer, sends_to[peer]};
        }
        b.record(in.event, in.stream);
        break;
      case InstrKind::Wait: {
        auto fenced = sends_before.find(in.event);
        if (fenced != sends_before.end() && t != nullptr) t->complete_sends(fenced->second.first, fenced->second.second);
        b.wait(in.event, in.stream);
        break;
      }
      case InstrKind::Send:
        HIOS_CHECK(t != nullptr, "internal error: a send in a one-rank program");
        t->send(in.node, in.peer, in.stream, program_.streams[size_t(in.stream)].lane);
        ++sends_to[in.peer];
        break;
      case InstrKind::Recv:
        HIOS_CHECK(t != nullptr, "internal error: a receive in a one-rank program");
        t->recv(in.node, in.peer, in.stream, program_.streams[size_t(in.stream)].lane);
        break;
      case InstrKind::Gather: break;  // output-ready: the host synchronises after the pass
    }
    for (PassObserver* o : observers) o->after(*this, in);
  }
}

void RankSession::capture() {
  HIOS_CHECK(can_capture(), "--cuda-graph on: the %s backend with the %s transport cannot capture a pass",
             backend_->name().c_str(), comm_.size() > 1 ? transport_name_.c_str() : "(no)");
  if (eager_passes_ == 0) pass();
  backend_->begin_capture();
  try {
    issue(program_.instrs, false);
  } catch (...) {
    try {
      backend_->end_capture();
    } catch (...) {
    }
    backend_->release_capture();
    throw;
  }
  backend_->end_capture();
  captured_ = true;
}

void RankSession::enqueue_pass(bool eager) {
  const bool replay = captured_ && !eager;
  for (PassObserver* o : observers_) o->pass_begin(*this, replay);
  if (replay) {
    backend_->replay();
  } else {
    issue(program_.instrs);
    ++eager_passes_;
  }
  if (transport_) transport_->end_pass();
}

void RankSession::finish_pass() {
  backend_->synchronize();
  for (PassObserver* o : observers_) o->pass_end(*this);
}

void RankSession::pass(bool eager) {
  enqueue_pass(eager);
  finish_pass();
}

std::vector<double> RankSession::timed_passes(int count, PassClock clock) {
  using Clock = std::chrono::steady_clock;
  std::vector<double> ms;
  if (clock == PassClock::Device && pass_markers_ < 0) pass_markers_ = reserve_markers(2);
  for (int i = 0; i < count; ++i) {
    comm_.barrier();
    if (clock == PassClock::Device) {
      // Every pass starts and ends on stream 0 (program.hpp), so markers there bracket it; the
      // second is enqueued before the host waits, so the wait is not in the time.
      backend_->mark(pass_markers_, 0);
      enqueue_pass();
      backend_->mark(pass_markers_ + 1, 0);
      finish_pass();
      ms.push_back(backend_->marker_ms(pass_markers_, pass_markers_ + 1));
    } else {
      const auto t0 = Clock::now();
      pass();
      ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
  }
  return ms;
}

void RankSession::warm_up(int count, bool graph) {
  for (int i = 0; i < count; ++i) {
    comm_.barrier();
    if (i == 1 && graph) capture();
    pass();
  }
  if (graph && !captured_) {
    comm_.barrier();
    capture();  // issues the eager first pass itself when there was none
  }
}

int RankSession::reserve_markers(int n) {
  HIOS_CHECK(n >= 0, "internal error: reserving %d markers", n);
  const int first = markers_;
  markers_ += n;
  backend_->reserve_markers(markers_);
  return first;
}

void RankSession::add_observer(PassObserver* o) { observers_.push_back(o); }

void RankSession::remove_observer(PassObserver* o) {
  observers_.erase(std::remove(observers_.begin(), observers_.end(), o), observers_.end());
}

LaunchMarks::LaunchMarks(RankSession& s, std::function<void(int, bool)> around)
    : around_(std::move(around)), slot_(size_t(s.graph().size()), -1) {
  for (const Instr& in : s.program().instrs) {
    if (in.kind != InstrKind::Launch) continue;
    HIOS_CHECK(slot_[size_t(in.node)] < 0, "internal error: node %d launched twice in one pass", in.node);
    slot_[size_t(in.node)] = int(nodes_.size());
    nodes_.push_back(in.node);
  }
  first_ = s.reserve_markers(2 * int(nodes_.size()));
}

void LaunchMarks::before(RankSession& s, const Instr& in) {
  if (in.kind != InstrKind::Launch || slot_[size_t(in.node)] < 0) return;
  s.backend().mark(first_ + 2 * slot_[size_t(in.node)], in.stream);
  if (around_) around_(in.node, true);
}

void LaunchMarks::after(RankSession& s, const Instr& in) {
  if (in.kind != InstrKind::Launch || slot_[size_t(in.node)] < 0) return;
  if (around_) around_(in.node, false);
  s.backend().mark(first_ + 2 * slot_[size_t(in.node)] + 1, in.stream);
}

double LaunchMarks::ms(RankSession& s, int node) const {
  const int k = slot_.at(size_t(node));
  HIOS_CHECK(k >= 0, "internal error: node %d is not launched by the program", node);
  return s.backend().marker_ms(first_ + 2 * k, first_ + 2 * k + 1);
}

double LaunchMarks::ms_since_previous(RankSession& s, int node) const {
  const int k = slot_.at(size_t(node));
  HIOS_CHECK(k >= 0, "internal error: node %d is not launched by the program", node);
  const int from = k == 0 ? first_ : first_ + 2 * (k - 1) + 1;
  return s.backend().marker_ms(from, first_ + 2 * k + 1);
}

std::vector<double> measure_node_times(const Graph& g, const SessionOptions& opt, Comm& self) {
  HIOS_CHECK(self.size() == 1, "internal error: node times are measured on one rank");
  RankSession s(g, opt, self);
  s.load(lower(g, sequential_schedule(g), 0));
  s.backend().set_input(make_input(g, opt.seed));
  s.pass();  // libraries choose algorithms and allocate on first use
  LaunchMarks marks(s);
  {
    ScopedObserver observing(s, marks);
    s.pass(true);
  }
  std::vector<double> ms(size_t(g.size()), 0.0);
  for (int v : marks.nodes()) ms[size_t(v)] = marks.ms(s, v);
  return ms;
}

LaunchOrder make_launch_order(const std::string& name, const Graph& g, const SessionOptions& opt, Comm& comm) {
  const LaunchOrderKind kind = parse_launch_order(name);
  if (kind == LaunchOrderKind::Topo) return {};
  if (kind == LaunchOrderKind::Opara) return opara_order(g);
  std::string classes;
  if (comm.rank() == 0) {
    std::unique_ptr<Comm> self = make_self_comm();
    const std::vector<double> ms = measure_node_times(g, opt, *self);
    const LaunchOrder o =
        measured_order(g, ms, find_device_preset("h200"), math_stores_16_bit(opt.math));
    for (uint8_t m : o.memory_bound) classes += m ? '1' : '0';
  }
  // Every rank lowers with rank 0's classes.
  const std::string mine = comm.size() > 1 ? comm.allgather(classes).front() : classes;
  LaunchOrder o;
  o.kind = LaunchOrderKind::Measured;
  for (char c : mine) o.memory_bound.push_back(c == '1' ? 1 : 0);
  return o;
}

GraphInputs make_inputs(const Graph& g, uint64_t seed) {
  GraphInputs out;
  for (int v : g.inputs()) {
    const Node& nd = g.nodes[size_t(v)];
    if (!nd.op.tensor_input()) {
      const std::vector<float> image = make_input(g, seed);
      const auto* p = reinterpret_cast<const uint8_t*>(image.data());
      out.emplace_back(p, p + image.size() * sizeof(float));
      continue;
    }
    const int64_t n = nd.shape.numel();
    const DType held = is_float(nd.dtype) ? DType::F32 : nd.dtype;
    std::vector<uint8_t> bytes(size_t(n) * dtype_size(held));
    const uint64_t key = init::tensor_key(seed, nd.name + ".value");
    for (int64_t i = 0; i < n; ++i) {
      const float u = init::uniform(key, uint64_t(i));  // in [-1, 1)
      if (is_float(nd.dtype)) {
        store_double(bytes.data(), held, i, double(u) * init::kInputBound);
      } else {
        store_int(bytes.data(), held, i, u >= 0 ? 1 : 0);
      }
    }
    out.push_back(std::move(bytes));
  }
  return out;
}

GraphInputs image_inputs(const std::vector<float>& image) {
  const auto* p = reinterpret_cast<const uint8_t*>(image.data());
  return {std::vector<uint8_t>(p, p + image.size() * sizeof(float))};
}

void set_inputs(Backend& backend, const Graph& g, const GraphInputs& in) {
  HIOS_CHECK(in.size() == g.inputs().size(), "internal error: %zu input values for %zu graph inputs", in.size(),
             g.inputs().size());
  for (size_t k = 0; k < in.size(); ++k) {
    const int v = g.inputs()[k];
    if (!g.nodes[size_t(v)].op.tensor_input()) {
      std::vector<float> image(in[k].size() / sizeof(float));
      std::memcpy(image.data(), in[k].data(), image.size() * sizeof(float));
      backend.set_input(image);
      continue;
    }
    const Node& nd = g.nodes[size_t(v)];
    if (is_float(nd.dtype)) {
      // Float values are held as float32 (GraphInputs): the backend stores them in its own
      // layout and element type (channels-last images, 16-bit storage).
      HIOS_CHECK(in[k].size() == size_t(nd.shape.numel()) * sizeof(float),
                 "input '%s': %zu bytes of values for a tensor of %lld floats", nd.name.c_str(), in[k].size(),
                 (long long)nd.shape.numel());
      std::vector<float> values(in[k].size() / sizeof(float));
      std::memcpy(values.data(), in[k].data(), in[k].size());
      backend.write_tensor(v, values);
      continue;
    }
    const TensorView t = backend.tensor(v);
    HIOS_CHECK(t.bytes == in[k].size(), "input '%s': %zu bytes of values for a tensor of %zu",
               g.nodes[size_t(v)].name.c_str(), in[k].size(), t.bytes);
    HostBuffer staging = backend.alloc_host(t.bytes);
    std::memcpy(staging.get(), in[k].data(), t.bytes);
    backend.copy_from_host(v, staging.get(), 0);
    backend.sync_stream(0);
  }
}

std::vector<uint8_t> read_bytes(Backend& backend, const Graph& g, int v) {
  const Node& nd = g.nodes[size_t(v)];
  if (is_float(nd.dtype)) {
    const std::vector<float> f = backend.read_tensor(v);
    const auto* p = reinterpret_cast<const uint8_t*>(f.data());
    return std::vector<uint8_t>(p, p + size_t(nd.shape.numel()) * sizeof(float));
  }
  const TensorView t = backend.tensor(v);
  HostBuffer staging = backend.alloc_host(t.bytes);
  backend.copy_to_host(v, staging.get(), 0);
  backend.sync_stream(0);
  const auto* p = static_cast<const uint8_t*>(staging.get());
  return std::vector<uint8_t>(p, p + size_t(nd.shape.numel()) * dtype_size(nd.dtype));
}

std::vector<float> read_values(Backend& backend, const Graph& g, int v) {
  const Node& nd = g.nodes[size_t(v)];
  if (is_float(nd.dtype)) return backend.read_tensor(v);
  const std::vector<uint8_t> b = read_bytes(backend, g, v);
  return to_floats(b.data(), nd.dtype, nd.shape.numel());
}

std::unique_ptr<RankSession> run_reference(const Graph& g, const SessionOptions& opt, Comm& self,
                                           const GraphInputs& inputs) {
  HIOS_CHECK(self.size() == 1, "internal error: the reference runs on one rank");
  auto s = std::make_unique<RankSession>(g, opt, self);
  s->load(lower(g, sequential_schedule(g), 0));
  set_inputs(s->backend(), g, inputs);
  s->pass();
  return s;
}

std::unique_ptr<RankSession> run_reference(const Graph& g, const SessionOptions& opt, Comm& self,
                                           const std::vector<float>& input) {
  HIOS_CHECK(self.size() == 1, "internal error: the reference runs on one rank");
  auto s = std::make_unique<RankSession>(g, opt, self);
  s->load(lower(g, sequential_schedule(g), 0));
  s->backend().set_input(input);
  s->pass();
  return s;
}

}  // namespace hios::exec
