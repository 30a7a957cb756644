// Backend: runs one rank's program on one device. Small on purpose (the ggml lesson): the host
// loop in executor/runner.cpp turns each instruction of a RankProgram into one call here, so a
// backend never sees a schedule, a peer or MPI.
//
// Contract:
//  * prepare() is called before any pass. It allocates every tensor the program Allocs
//    exactly once (no allocation ever happens during a pass), builds the weights of every node
//    the program launches through executor/weights.hpp (so every backend and rank holds the
//    same values), and creates program.streams.size() streams and program.num_events events.
//    Out of memory is an hios::Error naming the tensor and its size.
//  * prepare() may be called again with another program of the same graph (a rank session
//    runs many schedules, executor/session.hpp): tensors, events and launch plans are made anew
//    for it, and a captured pass is dropped, but weights already built and algorithm choices
//    are kept, because building them is the expensive part and they depend on the node only.
//  * A node may be launched on any stream the program launches it on, in its pass or in its
//    `standby` list (measurement programs issue stages of their own choosing).
//  * Markers time the device: mark(m, s) records marker m when stream s reaches it, and
//    marker_ms(a, b) is the time between two recorded markers once the host has synchronised.
//  * launch/record/wait only enqueue (asynchronous backends) or run immediately (the CPU
//    backend, whose "streams" are the host thread in program order). They throw hios::Error.
//  * set_input / read_output / read_tensor are synchronous and happen outside timed regions.
//  * Stream and event ids are the program's; tensor ids are node indices.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "executor/init.hpp"
#include "executor/program.hpp"
#include "graph/graph.hpp"
#include "graph/json_reader.hpp"

namespace hios::exec {

enum class MemoryKind : uint8_t { Host, Device };

// A resident tensor as a transport sees it: where its bytes are. Device pointers are opaque
// here; only code built against the same backend may dereference them.
struct TensorView {
  void* data = nullptr;
  size_t bytes = 0;
  MemoryKind memory = MemoryKind::Host;
};

// What a kept captured pass consists of (CUDA Graph nodes by kind), and how many of its copies
// read a given tensor: 0 for the input is the proof that a shape set's caller's input is not
// copied into a placeholder before the pass reads it.
struct PassContents {
  int kernels = 0, copies = 0, memsets = 0, other = 0;
  int copies_reading = 0;
};

// Host memory owned by the backend (page-locked for GPU backends so copies are asynchronous).
using HostBuffer = std::shared_ptr<void>;

struct BackendConfig {
  int device = -1;      // device index on this host chosen by the runner; -1 for the CPU backend
  std::string math = "fp32";  // "fp32", "tf32", "fp16" or "bf16"; a backend rejects modes it does not support
  uint64_t seed = init::kDefaultSeed;
  int threads = 0;      // CPU backend: OpenMP threads (0 = the OpenMP default)
  // 0: no limit. Otherwise the backend fails as out of memory, naming the tensor and its size,
  // when its allocations would pass this many bytes (tests the OOM path on any machine).
  size_t memory_limit = 0;
  // CUDA backend: which convolution family may run (auto | graph | legacy | hios; tests force
  // each one to check it against the CPU). Other backends ignore it.
  std::string conv_impl = "auto";
  // CUDA backend: how many cuDNN engine configurations each convolution times. "quick" takes
  // the first few distinct engines of cuDNN's heuristics; "wide" times every configuration of
  // them (the same engine with other tile sizes too, and more of the fallback list), which
  // costs planning time and found 3% on the ResNet segmentation networks in TF32.
  std::string conv_search = "quick";
  // CUDA backend: priority of the send and receive streams. "high" lets NCCL's kernels take SMs
  // as soon as any free up, instead of queueing behind a wave of the other streams' kernels;
  // "normal" gives them the compute streams' priority. Other backends ignore it.
  std::string comm_priority = "high";
  // CUDA backend: priority of the compute streams. "high" lets this backend's kernels take SMs
  // ahead of other work on the device as they free up (hios serve gives it to the model whose
  // passes are longest, so that the others' kernels do not stretch its tail); other backends
  // ignore it.
  std::string compute_priority = "normal";
  // How activations are stored (executor/tensor_layout.hpp): "nchw", or "nhwc" on the CUDA
  // backend. Values handed in and read back are NCHW whatever the layout.
  std::string layout = "nchw";
  // Nodes whose every reader starts with a ReLU store relu(value) and those readers skip their
  // ReLU (graph/relu_fold.hpp). Every backend honours it, so values compare node by node; off
  // stores every value as the graph defines it (hios-gpu-bench --relu-fold measures both).
  bool fold_relu = true;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string name() const = 0;         // "cpu", "cuda"
  virtual std::string device_name() const = 0;  // "cpu (2 threads)", "NVIDIA H200 (bus 0000:19:00.0)"
  virtual std::string versions() const = 0;     // e.g. "CUDA 13.0, cuDNN 9.10" for the report preamble
  virtual std::string math() const = 0;         // the math mode actually in effect
  virtual std::string layout() const { return "nchw"; }  // BackendConfig::layout in effect
  // How the backend times the implementations it chooses between while planning, "" where it
  // chooses none. Its choices, and so the node times measured with them, depend on it: the
  // tuner's database identity names it.
  virtual std::string choice_timing() const { return ""; }
  // Bytes per stored tensor element: 4 (float32), or 2 where the math mode stores 16-bit
  // floats (CUDA --math fp16|bf16). Programs are lowered in float32 bytes; RankSession::load
  // rescales them to this before prepare(), so Allocs, arenas and messages match the storage.
  virtual size_t element_bytes() const { return 4; }
  // `count` float32 values, already in the backend's layout, written to `dst` as the elements
  // tensors are stored in (element_bytes() each), rounded as set_input rounds them. For callers
  // that stage inputs in host memory themselves and upload them with copy_from_host (hios
  // serve's arrival ring), so that a 16-bit pass can take its rows without a device-side cast.
  virtual void encode_host(const float* src, size_t count, void* dst) const;

  virtual void prepare(const Graph& g, const RankProgram& p) = 0;

  // Algorithm choices made so far in this process (CUDA: the convolution implementation of
  // every problem signature), as an object of signature -> recipe that a profile database keeps.
  // Adopting recipes makes later prepares rebuild those choices instead of timing every
  // implementation; a recipe that no longer builds is ignored and timed afresh. Backends that
  // choose nothing return an empty object and ignore what they are given.
  virtual json algorithm_choices() const { return json::object(); }
  virtual void adopt_algorithm_choices(const json& /*recipes*/) {}

  // Makes the backend's device the calling thread's current one. A GPU backend selects its
  // device when it prepares, not in every per-pass call (copies, replays, waits), and a new host
  // thread starts on device 0: a thread that drives a backend on another device calls this
  // first (hios serve's workers). Backends without a device do nothing.
  virtual void make_current() {}

  virtual void launch(int node, int stream) = 0;
  virtual void record(int event, int stream) = 0;
  virtual void wait(int event, int stream) = 0;
  virtual void sync_stream(int stream) = 0;  // the host waits until `stream` is idle
  virtual void synchronize() = 0;            // the host waits until every stream is idle

  // Timing markers (0..n-1 after reserve_markers(n); reserving again keeps at least n). The
  // CPU backend reads the host clock, whose "streams" run as they are issued; the CUDA backend
  // records timing events. Never inside a capture.
  virtual void reserve_markers(int n) = 0;
  virtual void mark(int marker, int stream) = 0;
  virtual double marker_ms(int from, int to) = 0;

  // Resident tensors, for transports.
  virtual TensorView tensor(int node) = 0;
  virtual HostBuffer alloc_host(size_t bytes) = 0;
  // Enqueue a copy between a resident tensor and host memory on `stream`; the host must
  // sync_stream(stream) before reading dst (to_host) or reusing src (from_host).
  virtual void copy_to_host(int node, void* dst, int stream) = 0;
  virtual void copy_from_host(int node, const void* src, int stream) = 0;
  // The native stream handle (cudaStream_t for the CUDA backend, nullptr for the CPU one), for
  // transports built alongside the backend (NCCL). Never dereferenced outside such code.
  virtual void* native_stream(int /*stream*/) { return nullptr; }

  // Synchronous host access, outside timed regions: the graph input (rank 0), and any
  // resident tensor as N*C*H*W floats in NCHW order (for --verify and --verify-nodes).
  virtual void set_input(const std::vector<float>& values) = 0;
  virtual std::vector<float> read_tensor(int node) = 0;
  // A float tensor's values, N*C*H*W floats in NCHW order as read_tensor gives them, written
  // into the backend's layout and element type (graph inputs other than the image).
  virtual void write_tensor(int node, const std::vector<float>& values) = 0;

  // Device memory in use at its highest point since prepare (tensors, weights, workspaces).
  virtual size_t peak_memory_bytes() const = 0;

  // Free-form description of what prepare() chose (the CUDA backend: algorithm per
  // convolution signature, weight bytes), for benchmark reports. Empty by default.
  virtual std::string plan_report() const { return ""; }

  // Whether a kernel's code is loaded at its first launch (CUDA's lazy loading, its default since
  // 12.2), a load that may wait for every kernel running on the device. A multi-rank session then
  // launches a loaded program's kernels once before any of them can run beside a transfer kernel
  // waiting for a peer (RankSession::launch_kernels_locally).
  virtual bool loads_code_at_first_launch() const { return false; }

  // Whole-pass capture (CUDA Graphs). The runner calls begin_capture(), issues one pass, calls
  // end_capture(), and from then on replay() issues the pass. The default: not supported.
  virtual bool can_capture() const { return false; }
  virtual void begin_capture();
  virtual void end_capture();
  virtual void replay();
  // Drops a captured pass. A captured pass holds references to the NCCL communicators it
  // used, and destroying a communicator waits for them, so the runner calls this before the
  // transport goes away. Safe to call when nothing was captured.
  virtual void release_capture() {}

  // Shape sets (executor/shape_set.hpp): programs of shapes of one model (another image size
  // or batch; weights.hpp, shape_variant_problem) prepared in turn on one backend. prepare()
  // accepts such a graph after the first and keeps the weights, which are the same values.
  //
  // From reserve_arena(bytes) on, every shared-arena program uses one arena of at least `bytes`
  // kept across prepares (grown when a program needs more) instead of an arena of its own: the
  // shapes of a set cost the largest arena, not the sum. The default cannot.
  virtual void reserve_arena(size_t bytes);
  size_t reserved_arena() const { return reserved_arena_; }
  // keep(slot) keeps the current program's captured pass and its tensor bindings as `slot`,
  // which later prepares do not drop; switch_to(slot) makes a kept slot current again: replay,
  // tensor, set_input and read_tensor then act on it, and launch is refused until the next
  // prepare. A kept pass reads the arena, scratch arenas and workspaces where they were when it
  // was captured; resource_epoch() changes whenever one of them moves, and switch_to refuses a
  // slot kept in an older epoch (kept_current says so first, and the set captures it again).
  virtual bool can_keep() const { return false; }
  virtual void keep(int slot);
  virtual void switch_to(int slot);
  virtual bool kept_current(int /*slot*/) const { return false; }
  virtual uint64_t resource_epoch() const { return 0; }
  // The nodes of kept slot `slot`'s pass; copies_reading counts copies whose source overlaps
  // [data, data + bytes).
  virtual PassContents kept_contents(int slot, const void* data, size_t bytes) const;
  // What this backend holds now: the cuda backend, the device memory in use less what was in
  // use when it was made (weights, tensors, workspaces, library handles, captured graphs); the
  // cpu backend, the bytes it allocated.
  virtual size_t memory_in_use() const = 0;

 protected:
  size_t reserved_arena_ = 0;
};

}  // namespace hios::exec
