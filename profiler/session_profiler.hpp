// Measuring through a rank session, on any backend: the nodes, the concurrent stages and the
// links that the profiler and the tuner need. Everything here drives exec::RankSession, the
// same host loop, kernels and transport that `hios run` uses, so what is measured is what a
// run pays. CUDA-specific extras (CUPTI) hook in as pass observers.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "executor/session.hpp"
#include "graph/graph.hpp"
#include "profiler/profile_builder.hpp"
#include "scheduler/schedule.hpp"

namespace hios::prof {

// The program a measuring rank loads: every tensor in its own buffer (so a stage can be issued
// alone and read what the pass left there), a pass that runs every node in order on stream 0
// (it fills every tensor with real data), and every node on standby on streams 1..streams-1 so
// that a stage may put any node on any stream. Other ranks (rank != measuring_rank) get an empty
// program: loading is collective, measuring is not. Ranks may load the programs of different
// graphs at once, each measuring its own (the tuner measures row splits side by side).
exec::RankProgram measurement_program(const Graph& g, int rank, int num_ranks, int streams, int measuring_rank = 0);

// A program with no work: one compute stream, nothing resident. Loading it is how ranks with
// nothing to measure take part in a collective load, and its passes cost only the pass itself.
exec::RankProgram empty_program(const Graph& g, int rank, int num_ranks);

// The measuring rank of a session that loaded measurement_program. Not collective.
class StageTimer {
 public:
  explicit StageTimer(exec::RankSession& s);
  // Per node, its time in `iters` eager passes (warm-up first): markers after every launch on
  // stream 0, a node's time running from the end of the node before it, so that the host's
  // time to launch it counts, as it does on an eagerly issued stream. `around(node, begin)` is called around each node's launches
  // (the profiler tags them for CUPTI there).
  std::vector<NodeSamples> nodes(int warmup, int iters, const std::function<void(int, bool)>& around = nullptr);
  // One stage alone: a fork on stream 0, group j on stream j, a join, markers from fork to
  // join; `iters` runs after `warmup`. On a backend that captures (CUDA), the stage is timed
  // as a CUDA Graph replay, repeated inside the graph often enough (from `expected_ms`, a
  // model's guess) to hide the replay's launch latency; elsewhere it is issued eagerly.
  std::vector<double> samples(const Stage& st, int warmup, int iters, double expected_ms = 0);
  double stage_ms(const Stage& st, int warmup, int iters, double expected_ms = 0);  // the median
  static constexpr double kGraphTargetMs = 0.25;
  static constexpr int kMaxReps = 16;
  int streams() const { return s_.program().num_compute_streams; }  // most groups a stage may have

 private:
  exec::RankSession& s_;
  int marks_ = 0;
};

// Collective over every rank of the session. For every ordered pair of ranks, moves the
// output of each node in `nodes` (their sizes are the sizes measured) through the session's
// transport, `iters` times after `warmup`, timed on the receiver from posting the receive to
// the data being there; fits latency + bytes / bandwidth per pair (fit_link). Loads a small
// program per pair and size: call it before loading anything that must stay loaded.
struct LinkMeasurement {
  ProfileLink link;
  std::vector<LinkSample> samples;  // median per size
  double max_rel_residual = 0;
  std::string fit_note;  // non-empty: no line fitted (why), latency = median time, bandwidth unbounded
};
std::vector<LinkMeasurement> measure_links(exec::RankSession& s, const std::vector<int>& nodes, int warmup, int iters);

// Up to `most` nodes whose outputs span the sizes the graph's edges carry (smallest, largest,
// and evenly in log scale between), one per distinct size.
std::vector<int> link_probe_nodes(const Graph& g, int most = 6);

}  // namespace hios::prof
