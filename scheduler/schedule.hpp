// The Schedule: where and when every node runs. Format documented in docs/schedule-format.md,
// JSON Schema in schedules/schema.json.
//
// Semantics (fixed; the simulator, `hios check` and the executor all follow them):
//  * blocks[b][g] is the ordered list of stages GPU g runs for block b. Each GPU runs its
//    stages block by block, in order: all of block 0's stages, then block 1's, ...
//  * A stage is a set of groups that run concurrently, one CUDA stream each. A group is a list
//    of nodes run in order on its stream. A stage ends when all its groups are done; only then
//    does that GPU's next stage start.
//  * A tensor needed on another GPU is listed once per destination in `transfers` and is sent
//    as soon as its producer finishes. The graph input is resident on GPU 0; the graph output
//    (the last block's exit) must end up on GPU 0, through a transfer if produced elsewhere.
//  * Every non-input node appears exactly once. The input placeholder never appears in a stage.
#pragma once

#include <string>
#include <vector>

#include "graph/graph.hpp"
#include "graph/json_reader.hpp"

namespace hios {

struct Group {
  std::vector<int> nodes;  // graph node indices, run in order on one stream
};

struct Stage {
  std::vector<Group> groups;  // concurrent, one stream each
};

struct Transfer {
  int node = -1;  // the tensor: this node's whole output
  int src = 0;    // GPU that produced it
  int dst = 0;    // GPU that needs it
  bool operator==(const Transfer& o) const { return node == o.node && src == o.src && dst == o.dst; }
};

// Most GPUs a schedule may use (as hios tune's --gpus): a lowering is per rank, so a schedule
// for 2^31 GPUs would pass every other check and then never finish.
constexpr int64_t kMaxScheduleGpus = 1024;

// Most lanes a GPU pair may use (ScheduleMeta::link_lanes): each is an NCCL communicator.
inline constexpr int kMaxLinkLanes = 8;

struct ScheduleMeta {
  std::string algorithm;         // "sequential", "greedy", "ios", "hios-lp", "hios-mr", "heft"
  json params = json::object();  // the algorithm's parameters (window, streams, r, s, ...)
  int num_gpus = 1;
  int max_streams = 1;           // most groups allowed in one stage
  // How many stages ahead of its first consumer's stage a GPU posts a receive; -1 posts every
  // receive as early as the send order allows. A posted receive is an NCCL kernel that holds
  // SMs while it waits for its sender, so posting late leaves the consumer's GPU to its own
  // stages (docs/executor.md, "When receives are posted").
  int recv_lead = -1;
  // How many transfers each ordered GPU pair carries at once. Lane l of a pair is its own NCCL
  // communicator on its own send and receive streams; a pair's transfers take the lanes in
  // turn, in send order. One lane serialises every message of a pair behind the one before it,
  // each paying NCCL's fixed cost of some 15 us on NVLink; with two, a small message no longer
  // waits behind a large one (docs/executor.md, "Link lanes").
  int link_lanes = 1;
  int64_t batch = 1, height = 0, width = 0;
  std::string device;            // cost model device, e.g. "h200"
  std::string cost_model;        // "analytic" or the profile database file
  std::string graph_name;
  std::string graph_digest;      // graph_digest(g); a schedule never runs against another graph
  double predicted_ms = 0;       // simulated latency under the cost model
  double lower_bound_ms = 0;
  double profiling_seconds = 0;  // optimisation cost, split in two
  double search_seconds = 0;
  // hios tune's report (null for other schedules): every candidate's predicted and measured
  // latency, the phases and their seconds, what the profile database held (docs/tuner.md).
  json tune = nullptr;
  // A row split (docs/row-splits.md): {"graph_digest": the digest of the graph the user passes,
  // "regions": the SpatialPlan}. The schedule's node names and meta.graph are those of the split
  // graph that apply_spatial makes from it (graph/row_split.hpp). Null: no split.
  json spatial = nullptr;
};

struct Schedule {
  ScheduleMeta meta;
  std::vector<std::vector<std::vector<Stage>>> blocks;  // [block][gpu][stage]
  std::vector<Transfer> transfers;

  // GPU of every node (the input is on GPU 0; -1 for nodes not scheduled).
  std::vector<int> gpu_of(const Graph& g) const;
  // Fills `transfers` from placement: one per (producer, destination GPU) pair where a
  // consumer sits on another GPU, plus the output gather to GPU 0. Deterministic order.
  void derive_transfers(const Graph& g);
  int num_stages() const;  // over every block and GPU
};

// An empty schedule (no stages) with metadata copied from the graph.
Schedule make_schedule_skeleton(const Graph& g, int num_gpus);

json schedule_to_json(const Graph& g, const Schedule& s);
std::string schedule_to_text(const Graph& g, const Schedule& s);  // canonical, ends in newline
// Strict: unknown keys, wrong types, unknown node names and a digest that does not match g are
// errors naming the JSON path. Does NOT run the semantic checks of check_schedule.
Schedule schedule_from_json(const Graph& g, const json& j, const std::string& source = "$");
// When the schedule splits rows (meta.spatial), g must be the graph the split was made from; it
// is replaced by the split graph, whose node names the schedule uses. A bad split (rows
// computed twice or never, a halo too small) is refused here, naming the node and the rows.
Schedule load_schedule(Graph& g, const std::string& file);
// The same for a schedule already parsed.
Schedule schedule_from_json_split(Graph& g, const json& j, const std::string& source = "$");
void save_schedule(const Graph& g, const Schedule& s, const std::string& file);  // atomic

// Every violation found, each one line naming its culprit: a node missing or scheduled twice,
// an order on a GPU that breaks a dependency, a cross-GPU deadlock (the stage-level graph
// across GPUs must be acyclic), a GPU id out of range, more streams than allowed, a missing or
// superfluous transfer. Empty when the schedule is valid. Each message starts with its kind
// ("missing node:", "duplicate node:", "dependency order:", "deadlock:", "gpu out of range:",
// "too many streams:", "wrong block:", "missing transfer:", "superfluous transfer:",
// "wrong transfer source:", "duplicate transfer:", "output not on GPU 0:", ...) so tools and
// tests can tell them apart.
std::vector<std::string> check_schedule(const Graph& g, const Schedule& s);
// Throws hios::Error with the first violation (and the count) when check_schedule finds any.
void require_valid_schedule(const Graph& g, const Schedule& s);

// Readable per-GPU, per-stage view for `hios show`.
std::string schedule_to_pretty(const Graph& g, const Schedule& s);
// The same with times next to each stage and transfer (the simulator's overload fills these in).
struct StageTime {
  int block = 0, gpu = 0, stage = 0;
  double start_ms = 0, end_ms = 0;
};
struct TransferTime {
  int node = -1, src = 0, dst = 0;
  double start_ms = 0, end_ms = 0;
};
std::string schedule_to_pretty_timed(const Graph& g, const Schedule& s, const std::vector<StageTime>& stage_times,
                                     const std::vector<TransferTime>& transfer_times, double latency_ms,
                                     const std::string& cost_label = "");

}  // namespace hios
