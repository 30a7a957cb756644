// ShapeSet: one model served at many input shapes (image sizes and batch sizes) from one
// process, one set of weights and one activation arena: Grape's idea (MICRO 2023) on hios's
// executor.
//
// Every (batch, height, width) is a bucket with its own graph, schedule and lowered program;
// the graphs are shape variants of one model (exec::shape_variant_problem), so the backend keeps
// one copy of the weights. Every bucket's tensors are planned into one arena of its own size
// (executor/memory_plan.hpp), and the backend holds one arena of the largest size, which all of
// them use in turn: memory is about the largest bucket, not the sum.
//
// On a backend that can keep captured passes (CUDA), each bucket's pass is captured into its own
// CUDA Graph once, and serving a request is a replay of that graph. The caller writes the input
// straight into the bucket's input tensor (input(key): its place in the arena, in the backend's
// layout and element type), so no copy into a placeholder is ever made: the graph reads the
// input where the caller put it. Buckets run one at a time; the input and output of a bucket
// stay valid until a pass of another bucket runs.
//
// Captured passes read the arena, scratch arenas and cuDNN workspaces where they were when they
// were captured. Buckets are prepared largest first, and any bucket captured before something
// moved (Backend::resource_epoch) is captured again, so the buffers never move under a kept
// graph. On a backend that cannot keep captures (the CPU reference), switching buckets prepares
// the bucket's program again; the kept arena keeps that cheap and the input in place.
//
// One rank only: the set runs on the session's device (`hios run --shapes`, and the serving
// mode of the TOP issue through this class).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "executor/backend.hpp"
#include "executor/comm.hpp"
#include "executor/session.hpp"
#include "graph/graph.hpp"
#include "scheduler/schedule.hpp"

namespace hios::exec {

struct ShapeKey {
  int64_t batch = 1, height = 0, width = 0;
  std::string str() const;  // "1x331x331" (batch x height x width)
  int64_t pixels() const { return batch * height * width; }
  bool operator<(const ShapeKey& o) const;
  bool operator==(const ShapeKey& o) const { return batch == o.batch && height == o.height && width == o.width; }
};

// "331,512x600" (a size is S or HxW) times "1,2,4": every combination, in the order given, no
// duplicates. Sizes 1 to 65536, batches 1 to 4096; one-line errors naming the bad item.
std::vector<ShapeKey> parse_shape_list(const std::string& sizes, const std::string& batches);

struct ShapeSetOptions {
  SessionOptions session;
  std::string cuda_graph = "auto";  // on | off | auto (on where the backend can keep captures)
  // A request for a shape that is not prepared prepares it then (capture included) instead of
  // being refused.
  bool prepare_on_demand = false;
};

// The model at one shape, and a one-GPU schedule for it.
using GraphMaker = std::function<Graph(const ShapeKey&)>;
using ScheduleMaker = std::function<Schedule(const Graph&)>;

class ShapeSet {
 public:
  ShapeSet(GraphMaker make_graph, ScheduleMaker make_schedule, const ShapeSetOptions& opt, Comm& self);
  ~ShapeSet();
  ShapeSet(const ShapeSet&) = delete;
  ShapeSet& operator=(const ShapeSet&) = delete;

  // Prepares these shapes (schedule, lowering, arena plan, launch plans and, when capturing, one
  // CUDA Graph each), largest first. Shapes already prepared are skipped.
  void prepare(const std::vector<ShapeKey>& keys);
  bool prepared(const ShapeKey& key) const { return buckets_.count(key) != 0; }
  std::vector<ShapeKey> shapes() const;
  bool capturing() const { return capture_; }

  const Graph& graph(const ShapeKey& key) const;
  const Schedule& schedule(const ShapeKey& key) const;
  // This bucket's own arena (its program's plan), in the backend's bytes.
  int64_t arena_bytes(const ShapeKey& key) const;

  // Where the caller writes the input of `key`: a device pointer on GPU backends, in the
  // backend's layout and element type (Backend::layout, element_bytes). Valid until a pass of
  // another shape runs. Makes `key` the current bucket. The write must be complete when run()
  // is called: the backend's streams are non-blocking, so they do not wait for the legacy
  // default stream, and a cudaMemcpy from pageable memory may return before its DMA lands
  // (follow it with cudaDeviceSynchronize, or copy on a stream and synchronise that).
  TensorView input(const ShapeKey& key);
  TensorView output(const ShapeKey& key);
  // The convenience path: NCHW fp32 values converted and uploaded into input(key).
  void set_input(const ShapeKey& key, const std::vector<float>& nchw);
  // One pass of `key` on whatever its input holds; the host waits for it. A shape that is not
  // prepared is an error naming the prepared ones (or prepared now with prepare_on_demand).
  void run(const ShapeKey& key);
  // The output of the last pass of `key`, NCHW fp32.
  std::vector<float> read_output(const ShapeKey& key);
  // Host-clock time of `count` passes of `key` (each: replay or eager pass plus the wait).
  std::vector<double> timed_runs(const ShapeKey& key, int count);

  // The captured pass of `key`'s nodes (zeros when not capturing).
  PassContents pass_contents(const ShapeKey& key);
  // Memory the backend holds now (Backend::memory_in_use) and the one arena it keeps.
  size_t memory_in_use() const;
  size_t kept_arena_bytes() const;
  int captures() const { return captures_; }      // every capture made, recaptures included
  int recaptures() const { return recaptures_; }  // of buckets whose buffers had moved
  int switches() const { return switches_; }      // eager backends: programs prepared again to switch

  RankSession& session() { return *session_; }

 private:
  struct Bucket {
    std::unique_ptr<Graph> g;
    Schedule schedule;
    RankProgram program;  // lowered, shared-arena plan, in float32 bytes
    int slot = 0;
    bool captured = false;
  };
  Bucket& bucket(const ShapeKey& key);     // prepared on demand or refused
  void make_current(const ShapeKey& key);  // what input(), run() and read need first
  void capture(const ShapeKey& key, Bucket& b);

  GraphMaker make_graph_;
  ScheduleMaker make_schedule_;
  ShapeSetOptions opt_;
  Comm& self_;
  // Declared before the session: the session refers to a bucket's graph while it lives.
  std::map<ShapeKey, Bucket> buckets_;
  std::unique_ptr<RankSession> session_;
  bool capture_ = false;
  bool have_current_ = false;
  ShapeKey current_;
  int next_slot_ = 0;
  int captures_ = 0, recaptures_ = 0, switches_ = 0;
};

}  // namespace hios::exec
