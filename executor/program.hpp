// RankProgram: what one rank (one GPU) does during one inference pass, as a flat list of
// instructions lowered from a Schedule. Backends, transports and the host loop only ever see
// programs, never schedules, so the executor has exactly one place (lower()) that interprets
// the schedule semantics of scheduler/schedule.hpp.
//
// Streams. Every rank has compute streams 0..num_compute_streams-1 (group i of a stage runs on
// compute stream i), then one send stream per peer it sends to and one receive stream per
// peer it receives from. Stream 0 is the origin: the pass starts there (the other streams fork
// from it through an event) and ends there (every other stream joins back through an event),
// which is exactly what CUDA stream capture needs to turn one pass into one CUDA Graph.
//
// Events. Every Record names a fresh event id (0..num_events-1, each recorded once per pass);
// a Wait always names an event recorded earlier in program order. Stage barriers are events:
// each group's stream records one at the end of its stage and every stream of the next stage
// waits on all of them. Nothing ever synchronises a whole device.
//
// Transfers. A tensor is sent on the send stream for its destination right after its producer
// is launched (Record on the producer's stream, Wait on the send stream, Send). With
// meta.link_lanes = L > 1 a pair has L send streams (and L receive streams on the other side),
// one per lane: the i-th tensor of the pair's send order goes on lane i mod L, so a small
// message need not wait behind a large one; each lane is its own ordered channel (one NCCL
// communicator), and every rule below holds per lane. The receiver
// posts its Recvs from a peer in exactly that peer's Send order (NCCL and MPI both match
// point-to-point messages in order): when a consumer needs tensor Y from peer p, the lowering
// emits every not-yet-posted Recv from p up to and including Y, each followed by a Record on
// the receive stream, and the consumer's stream waits on Y's event. All ranks are lowered
// from the same schedule by the same deterministic walk, so the two sides always agree.
//
// Replay. Executing the instructions in order on the host, with non-blocking sends and
// blocking receives (the CPU backend with mpi-host does exactly that), cannot deadlock for a
// schedule that passes check_schedule: a rank blocks on a Recv only for a tensor whose
// producing stage does not depend on anything this rank has not yet sent, because the
// stage-level graph across GPUs is acyclic.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "executor/launch_order.hpp"
#include "graph/graph.hpp"
#include "scheduler/schedule.hpp"

namespace hios::exec {

enum class InstrKind : uint8_t {
  Alloc,   // tensor `node` (its whole output, `bytes`) lives on this rank; done once in prepare
  Launch,  // run node `node` on compute stream `stream`
  Record,  // record event `event` on `stream`
  Wait,    // `stream` waits for event `event`
  Send,    // send tensor `node` (`bytes`) to rank `peer` on comm stream `stream`
  Recv,    // receive tensor `node` (`bytes`) from rank `peer` on comm stream `stream`
  Gather,  // rank 0 only, last: tensor `node` is the graph output, complete on stream `stream`
};
const char* instr_kind_name(InstrKind k);

struct Instr {
  InstrKind kind = InstrKind::Launch;
  int node = -1;    // the node launched, or the tensor (a node's whole output)
  int stream = -1;  // Launch, Record, Wait, Send, Recv, Gather
  int event = -1;   // Record, Wait
  int peer = -1;    // Send, Recv
  int64_t bytes = 0;  // Alloc, Send, Recv
  int64_t offset = -1;  // Alloc in a shared arena (share_buffers): where the tensor starts
  // Where the instruction comes from, for listings and error messages (-1 when not tied to
  // a stage: fork, join, transfers of the graph input).
  int block = -1, stage = -1;
};

enum class StreamKind : uint8_t { Compute, Send, Recv };

struct StreamDesc {
  StreamKind kind = StreamKind::Compute;
  int peer = -1;  // Send: destination rank; Recv: source rank
  int lane = 0;   // Send, Recv: which of the pair's lanes (ScheduleMeta::link_lanes) it carries
};

// Tensors that are bands of rows of one tensor, held in one run of memory at the addresses of
// their rows (MemoryPlanOptions::rows_in_place): a member's Alloc offset is the group's origin
// plus first_row * row_bytes. Only with a shared arena, and only for a backend whose bands of
// rows are contiguous (NHWC at batch 1).
struct RowGroup {
  int64_t row_bytes = 0;
  std::vector<std::pair<int, int64_t>> members;  // {node, the global row its tensor starts at}
};

// A reshape's tensor at its input's address, or one index of a gather along a leading axis at
// that index's bytes in its input: `node`'s tensor lies `offset` bytes into `of`'s.
struct ArenaView {
  int node = -1, of = -1;
  int64_t offset = 0;  // bytes, as Alloc sizes count them
  bool operator==(const ArenaView& o) const { return node == o.node && of == o.of && offset == o.offset; }
  bool operator<(const ArenaView& o) const { return node < o.node; }
};

struct RankProgram {
  int rank = 0;
  int num_ranks = 1;
  std::string graph_name, graph_digest, algorithm;
  std::string launch_order = "topo";  // launch_order_summary of the order lowered with
  int num_compute_streams = 1;
  std::vector<StreamDesc> streams;  // [0, num_compute_streams) are Compute, then Send, then Recv
  int num_events = 0;
  std::vector<Instr> instrs;  // Allocs first, then the pass
  std::vector<int> launched;  // nodes this rank launches, in launch order
  int output = -1;            // the graph output node (gathered on rank 0)
  // 0: every Alloc is its own allocation. Otherwise one arena of this many bytes holds every
  // tensor at its Alloc's offset, shared between tensors whose lives cannot overlap
  // (executor/memory_plan.hpp).
  int64_t arena_bytes = 0;
  std::vector<RowGroup> row_groups;  // empty unless the plan put bands in place
  // Tensors the plan put inside the tensor they are computed from, so that their node copies
  // nothing (executor/memory_plan.hpp, MemoryPlanOptions::views).
  std::vector<ArenaView> views;
  // Launches the backend must be ready for besides the pass's own ({node, stream}, in any
  // order): a measurement program issues stages of its own choosing, with a node on whichever
  // stream its group gets (executor/session.hpp, RankSession::issue).
  std::vector<std::pair<int, int>> standby;

  int send_stream(int peer, int lane = 0) const;  // -1 when this rank sends nothing to peer on that lane
  int recv_stream(int peer, int lane = 0) const;  // -1 when this rank receives nothing from peer on it
  bool resident(int node) const;    // an Alloc for node exists
  int64_t bytes_allocated() const;  // sum over Allocs
  int64_t tensor_memory() const;    // what the tensors occupy: the arena, or bytes_allocated()
};

// Lowers rank `rank`'s part of the schedule. Throws hios::Error when the schedule does not
// pass check_schedule (first violation named) or rank is out of range. Deterministic: the
// same (graph, schedule, rank) gives the same program, byte for byte in program_to_text.
// `order` interleaves the launches of each stage's groups (executor/launch_order.hpp); every
// rank of a job must be lowered with the same one.
RankProgram lower(const Graph& g, const Schedule& s, int rank, const LaunchOrder& order = {});
// Every rank's program (index = rank).
std::vector<RankProgram> lower_all(const Graph& g, const Schedule& s, const LaunchOrder& order = {});

// The program for a backend storing `element_bytes` per element instead of the graph's float32:
// every Alloc, Send and Recv size, arena offset and the arena scale by element_bytes / 4. A
// shared arena stays valid (the map is linear, so disjoint ranges stay disjoint) and offsets
// keep element_bytes / 4 of their alignment. Throws on a size that is not whole elements.
RankProgram with_element_bytes(RankProgram p, size_t element_bytes);
// The same for graph g. Integer graph inputs (token ids, masks) keep their own sizes: under
// 16-bit storage their Allocs leave the shared arena (offset -1: a buffer of their own) and
// their Sends and Recvs keep their bytes. Any other integer or bool tensor is refused when
// element_bytes is not 4 (its size does not scale with the float storage), naming the first.
RankProgram with_element_bytes(const Graph& g, RankProgram p, size_t element_bytes);

// The order in which rank src sends tensors to rank dst (what dst's Recvs must follow).
std::vector<int> send_order(const Graph& g, const Schedule& s, int src, int dst, const LaunchOrder& order = {});

// With a receive lead (meta.recv_lead >= 0), sends are fenced: (tensor, destination) -> the
// index of `rank`'s stage (in its block-by-block stage list) at whose start every compute stream
// waits for that Send, placed where the receiver has provably consumed the tensor already, so
// the wait is free and cannot deadlock (program.cpp explains). The memory plan then reuses the
// tensor's memory from that stage on. Sends without such a stage are absent (live to the end).
std::map<std::pair<int, int>, int> send_fence_stages(const Graph& g, const Schedule& s, int rank,
                                                     const LaunchOrder& order = {});

// A schedule running every node on GPU 0, block by block, one single-group stage per block in
// the block's topological order: the reference that --verify compares against.
Schedule sequential_schedule(const Graph& g);

// `hios lower` output: a header naming graph, schedule, rank and streams, then one
// instruction per line with node names, e.g. "launch  b1.conv1  s0  [block 0 stage 1]".
std::string program_to_text(const Graph& g, const RankProgram& p);

// Structural checks over a whole job's programs, one line per violation (empty when fine):
// every non-input node launched exactly once across ranks; every launched node's inputs
// resident before its launch; per (src, dst) pair the Recvs on dst list exactly the Sends on
// src in the same order with the same sizes and lanes; every Wait names an event recorded earlier on
// the same rank; streams and events in range; rank 0 ends with the Gather of the output.
// The tests use it, and the runner calls it before running in debug checks.
std::vector<std::string> check_programs(const Graph& g, const std::vector<RankProgram>& programs);

}  // namespace hios::exec
