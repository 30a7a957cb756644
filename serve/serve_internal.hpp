// What the files of `hios serve` share: a model as the server holds it (its replicas, batch
// keys and arrival ring), made by the server's preparation (server_setup.cpp) and used by a
// run's dispatcher and workers (serve.cpp). Internal: only serve/ includes it; serve.hpp stays
// the interface.
#pragma once

#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "executor/tensor_layout.hpp"
#include "serve/serve.hpp"

namespace hios::exec {

using Clock = std::chrono::steady_clock;

// Request rows as stored: the backend's layout and element type.
using Bytes = std::vector<unsigned char>;

struct Server::Model {
  // One prepared copy of the model: a worker of the static and adaptive launchers each (fifo
  // uses the first). Its own shape set, so its own arena, CUDA Graphs and weights (ShapeSet has
  // no way to share weights between sets; every replica makes the same weights from the same
  // seed, so their answers agree).
  struct Replica {
    int device = -1;  // placed on; -1: the session's default
    std::unique_ptr<Comm> self;
    std::unique_ptr<ShapeSet> set;

    // Makes this replica's device the calling thread's current one (Backend::make_current): a
    // worker for a replica on device 1, or fifo's worker moving between models on two devices.
    void bind() { set->session().backend().make_current(); }

    // A worker's two steps, shared by the start-up measurement so that the seeds time what the
    // launcher runs. Staging: the rows into the batch's input tensor, where the graph reads it;
    // the host waits for the copy, because its rows are reused once it returns, and run() needs
    // the write complete (ShapeSet::input).
    void stage(const ShapeKey& k, const void* rows) {
      Backend& be = set->session().backend();
      (void)set->input(k);  // makes k current, so that its input tensor is the one written
      be.copy_from_host(set->graph(k).input(), rows, 0);
      be.sync_stream(0);
    }
    std::vector<float> answer(const ShapeKey& k) {
      set->run(k);
      return set->read_output(k);
    }
  };

  std::string name;
  std::vector<std::unique_ptr<Replica>> reps;  // at least one
  std::map<int, ShapeKey> key;  // by batch
  int64_t item_elems = 0;       // one image's elements
  size_t item_bytes = 0;        // one image, stored (in the backend's element type)
  Bytes base;                   // one image as stored (every unverified request's input)
  int64_t out_item = 0;         // output elements per image
  // The arrival ring (see the header), shared by the replicas: ring_slots slots of one image
  // each, then ring_mirror more that repeat the first ones, so that a window of up to the
  // largest batch starting at any slot is one contiguous block, also where it wraps. Pinned on
  // GPU backends, so the worker's copy to the device is a DMA the host does not stage.
  HostBuffer ring;
  int64_t ring_slots = 0, ring_mirror = 0;

  Replica& first() { return *reps.front(); }
  unsigned char* slot(int64_t physical) { return static_cast<unsigned char*>(ring.get()) + size_t(physical) * item_bytes; }
  // Slot `pos` (a position in arrival order) of the ring, and its mirror, from `src`.
  void put(int64_t pos, const unsigned char* src) {
    const int64_t i = pos % ring_slots;
    std::memcpy(slot(i), src, item_bytes);
    if (i < ring_mirror) std::memcpy(slot(ring_slots + i), src, item_bytes);
  }
  const unsigned char* window(int64_t pos) { return slot(pos % ring_slots); }
  // One image's NCHW fp32 values as the ring stores them: the backend's layout and element type
  // (16-bit under --math bf16/fp16, rounded as the backend rounds its own uploads).
  Bytes encode(const std::vector<float>& nchw) {
    Backend& be = first().set->session().backend();
    const Graph& g1 = first().set->graph(key.at(1));
    const std::vector<float> stored = to_layout(nchw, g1.nodes[size_t(g1.input())].shape, parse_layout(be.layout()));
    Bytes out(item_bytes);
    be.encode_host(stored.data(), stored.size(), out.data());
    return out;
  }
};

}  // namespace hios::exec
