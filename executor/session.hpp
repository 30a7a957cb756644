// RankSession: one rank's executor, made once and driven by everyone who runs programs.
//
// `hios run` (run/runner.cpp), the in-process drivers of the bench tools and GPU tests
// (inprocess/), the server, the profiler and the tuner all issue passes through this one
// class. It owns the backend and the transport of a rank and keeps what is expensive to make
// across programs: weights, algorithm choices, NCCL communicators. Loading another schedule
// only lowers it, lays out its tensors and plans its launches, so a tuner can time dozens of
// candidate schedules in one job without reloading a model.
//
// Observers (the model is Taskflow's executor observer) see every instruction of an eager
// pass just before and just after it is issued. Per-launch timing (`hios run --trace`), CUPTI
// tagging (the profiler) and failure injection (tests) are observers; the host loop itself
// exists once, in RankSession::issue.
//
// Collective calls (load, capture, pass, timed_passes) must be made by every rank of the
// session's Comm in the same order, as under mpirun every rank runs the same driver code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "executor/backend.hpp"
#include "executor/comm.hpp"
#include "executor/init.hpp"
#include "executor/launch_order.hpp"
#include "executor/program.hpp"
#include "executor/transport.hpp"
#include "graph/graph.hpp"
#include "scheduler/schedule.hpp"

namespace hios::exec {

struct SessionOptions {
  std::string backend = "cpu";
  // Empty: the backend's default for where the ranks are (registry.hpp, default_transport): on
  // cuda, cuda-ipc when all ranks share one host and their GPUs have peer access, else nccl;
  // mpi-host on cpu.
  std::string transport;
  std::string math;             // empty: the backend's default ("tf32" on cuda, "fp32" on cpu)
  std::vector<int> devices;     // device per node-local rank; empty: the local rank
  int device = -1;              // >= 0: this device, whatever the rank (reference runs, in-process ranks)
  uint64_t seed = init::kDefaultSeed;
  int threads = 0;              // CPU backend OpenMP threads; 0: default
  size_t memory_limit = 0;      // BackendConfig::memory_limit
  std::string conv_impl = "auto";  // BackendConfig::conv_impl
  std::string conv_search = "quick";  // BackendConfig::conv_search: quick | wide
  std::string comm_priority = "high";  // BackendConfig::comm_priority: high | normal
  std::string compute_priority = "normal";  // BackendConfig::compute_priority: high | normal
  std::string layout;                  // BackendConfig::layout: nchw | nhwc; empty: the backend's default
  bool fold_relu = true;               // BackendConfig::fold_relu
};

class RankSession;
struct BackendEntry;  // executor/registry.hpp

// Sees the instructions of eager passes. A pass replayed from a CUDA Graph shows only
// pass_begin(captured = true) and pass_end: its instructions are not issued by the host.
class PassObserver {
 public:
  virtual ~PassObserver() = default;
  virtual void pass_begin(RankSession& /*s*/, bool /*captured*/) {}
  virtual void before(RankSession& /*s*/, const Instr& /*in*/) {}
  virtual void after(RankSession& /*s*/, const Instr& /*in*/) {}
  virtual void pass_end(RankSession& /*s*/) {}
};

// Which clock timed_passes() reads. Host: from the barrier's return to the host knowing the
// output is complete (HIOS's definition, what `hios run` reports). Device: markers on stream 0
// around the pass, without the host's synchronisation (the in-process bench).
enum class PassClock { Host, Device };

class RankSession {
 public:
  // Makes the backend on this rank's device (from opt.device, opt.devices or the local rank)
  // and checks the names and the device count, with one-line errors.
  RankSession(const Graph& g, const SessionOptions& opt, Comm& comm);
  ~RankSession();
  RankSession(const RankSession&) = delete;
  RankSession& operator=(const RankSession&) = delete;

  const Graph& graph() const { return *g_; }
  Comm& comm() { return comm_; }
  Backend& backend() { return *backend_; }
  Transport* transport() { return transport_.get(); }
  const BackendConfig& backend_config() const { return cfg_; }
  const std::string& transport_name() const { return transport_name_; }
  // Whether a pass of a program with transfers can be captured (backend and transport agree).
  bool can_capture() const;

  // Collective. Makes `p` (this rank's program) the one passes run: the backend lays out its
  // tensors and plans its launches, the transport connects what it needs. Drops a capture.
  void load(RankProgram p);
  // Collective. Lowers this rank's part of `s`, with tensors sharing one arena where their
  // lives cannot overlap (shared_memory) or each in its own buffer, and loads it.
  void load_schedule(const Schedule& s, bool shared_memory, const LaunchOrder& order = {});
  // Collective. Makes `g`, another shape of the session's model (an image size or batch;
  // exec::shape_variant_problem says why not), the session's graph and loads its program `p`;
  // the backend keeps the weights. How a shape set (executor/shape_set.hpp) serves shapes.
  void load_shape(const Graph& g, RankProgram p);
  // Makes `g`, another graph of the session's model (a shape variant, or a row split of it:
  // graph/row_split.hpp), the graph the next load lowers and prepares. Not collective by itself,
  // but every rank must switch before the same load. The backend keeps every parameter it has
  // built: parameters are found by their owner's name and counts, whose values depend only on
  // those and the seed (executor/weights.hpp), so the parts of a split find their operator's.
  void use_graph(const Graph& g) { g_ = &g; }
  const RankProgram& program() const { return program_; }
  int loads() const { return loads_; }

  // Collective. Captures one pass into a CUDA Graph; later passes replay it. A pass is issued
  // eagerly first if none has been since load(): GPU libraries pick algorithms and allocate
  // workspaces on first use, which must not land inside a graph.
  void capture();
  bool captured() const { return captured_; }
  // Collective. One pass: the replay or the eager instructions (always the instructions when
  // `eager`, as a traced pass needs), the transport's end of pass, and the host waits for
  // every stream.
  void pass(bool eager = false);
  // Collective. `count` passes, every rank released from a barrier before each; returns this
  // rank's time per pass in ms (rank 0's is the job's latency).
  std::vector<double> timed_passes(int count, PassClock clock = PassClock::Host);

  // Issues instructions of the loaded program eagerly, as a pass would, without the
  // transport's end of pass or a synchronisation: a measurement program's stages
  // (profiler/stage_timer) and one-off passes. Observers see them.
  void issue(const std::vector<Instr>& instrs);

  // `n` timing markers for the caller's own use; returns the first index. Markers are never
  // given out twice in a session.
  int reserve_markers(int n);

  void add_observer(PassObserver* o);
  void remove_observer(PassObserver* o);

  // Collective. `count` untimed passes, every rank released from a barrier before each; with
  // `capture`, the pass is captured into a CUDA Graph after the first one (which stays eager:
  // libraries pick algorithms and allocate on first use) and later passes replay it, even
  // when count is 0 or 1. `hios run` and the tuner's candidates warm up the same way.
  void warm_up(int count, bool capture);

 private:
  void issue(const std::vector<Instr>& instrs, bool observed);
  void enqueue_pass(bool eager = false);  // observers' pass_begin, the instructions or the replay, end of pass
  void finish_pass();   // the host waits for every stream; observers' pass_end
  void launch_kernels_locally();  // RankSession::load, multi-rank sessions
  std::string transport_for_placement(const BackendEntry& be);  // collective

  const Graph* g_;  // load_shape moves it to another shape of the model
  Comm& comm_;
  SessionOptions opt_;
  BackendConfig cfg_;
  std::string transport_name_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Transport> transport_;
  RankProgram program_;
  bool loaded_ = false;
  bool captured_ = false;
  int eager_passes_ = 0;  // since the last load
  int loads_ = 0;
  int markers_ = 0;       // markers handed out so far
  int pass_markers_ = -1; // two markers for PassClock::Device
  std::vector<PassObserver*> observers_;
};

// An observer attached for the life of this object (also when what it observes throws).
class ScopedObserver {
 public:
  ScopedObserver(RankSession& s, PassObserver& o) : s_(s), o_(o) { s_.add_observer(&o_); }
  ~ScopedObserver() { s_.remove_observer(&o_); }
  ScopedObserver(const ScopedObserver&) = delete;
  ScopedObserver& operator=(const ScopedObserver&) = delete;

 private:
  RankSession& s_;
  PassObserver& o_;
};

// Marks every launch of an eager pass on its own stream (a marker just before and just after
// its launches) and calls `around(node, begin)` around them: where a pass spends its time,
// node by node. ms(node) is valid after the host has synchronised with the pass.
class LaunchMarks final : public PassObserver {
 public:
  LaunchMarks(RankSession& s, std::function<void(int, bool)> around = nullptr);
  void before(RankSession& s, const Instr& in) override;
  void after(RankSession& s, const Instr& in) override;
  double ms(RankSession& s, int node) const;
  // From the end of the launch before it on the same stream (the pass's first marker for the
  // first) to its end: the node's interval including the host's time to launch it, which is
  // what a node costs an eagerly issued stream. Valid for programs whose launches share one
  // stream (the sequential and measuring programs).
  double ms_since_previous(RankSession& s, int node) const;
  const std::vector<int>& nodes() const { return nodes_; }  // the program's launches, in order

 private:
  std::function<void(int, bool)> around_;
  std::vector<int> slot_;   // index: node; its pair of markers, -1 when not launched
  std::vector<int> nodes_;
  int first_ = 0;
};

// Each node's device time in a sequential eager pass (every node on one stream, after one
// untimed pass) of a fresh one-rank session with `opt`: what the measured launch order
// classifies (index: node; 0 for the graph input).
std::vector<double> measure_node_times(const Graph& g, const SessionOptions& opt, Comm& self);

// The launch order `name` (topo | opara | measured) for g. Measured: rank 0 times the nodes on
// its device (measure_node_times with `opt`, whose device must be rank 0's) and classes them
// against the h200 preset's peaks (doubled compute for fp16/bf16, half the bytes); every rank
// gets rank 0's classes, since the send order follows the launch order. Collective.
LaunchOrder make_launch_order(const std::string& name, const Graph& g, const SessionOptions& opt, Comm& comm);

// The values of every graph input, in Graph::inputs() order: each as the bytes a host holds it in
// (float32 for every float type, integers and bools in their own width; C order, NCHW for the
// image input).
using GraphInputs = std::vector<std::vector<uint8_t>>;
// The seeded inputs: the image input's make_input values; a tensor input's floats uniform in
// [-kInputBound, kInputBound), its integers 0 or 1 and its bools true or false, drawn from the seed.
GraphInputs make_inputs(const Graph& g, uint64_t seed);
// A graph of one float image input: its values as GraphInputs.
GraphInputs image_inputs(const std::vector<float>& image);
// Writes every input into the backend's tensors (the image through set_input, which converts
// its layout; the others as they are held). Synchronous.
void set_inputs(Backend& backend, const Graph& g, const GraphInputs& in);
// Node v's values as floats, whatever its type (integers converted; exact up to 2^24).
std::vector<float> read_values(Backend& backend, const Graph& g, int v);
// Node v's values as the host holds them (GraphInputs' convention), for a .npy file.
std::vector<uint8_t> read_bytes(Backend& backend, const Graph& g, int v);

// The sequential one-rank reference: every node on one stream of a fresh session on `device`
// (the graph's topological order), run once on `input`. --verify compares against it.
std::unique_ptr<RankSession> run_reference(const Graph& g, const SessionOptions& opt, Comm& self,
                                           const std::vector<float>& input);
std::unique_ptr<RankSession> run_reference(const Graph& g, const SessionOptions& opt, Comm& self,
                                           const GraphInputs& inputs);


}  // namespace hios::exec
