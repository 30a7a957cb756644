// The third consumer of the lowering: the rank programs replayed under a cost model, so the
// latency the scheduler predicts can be set beside the latency of exactly what the executor
// issues (stream by stream, event by event, message by message).
//
// Model. Every stream runs its instructions in order. A Launch takes the node's share of its
// stage: CostModel::stage_ms of the schedule's stage, split over each group's nodes in
// proportion to node_ms and stretched so the slowest group ends with the stage (as the
// simulator lays nodes out). A Record marks its event complete when the stream reaches it; a
// Wait holds the stream until then. A Send and its matching Recv (per pair, in order) form one
// rendezvous, like ncclSend/ncclRecv: the transfer starts when both streams have reached it
// and lasts CostModel::transfer_ms; both streams are busy until it ends. Host issue costs are
// not modelled. The latency is when rank 0's stream 0 reaches the Gather.
//
// Differences from simulate() are real differences of the executor: a stage's streams wait for
// received tensors only right before the node that reads them (the simulator starts a stage
// only when all its inputs have arrived), and a transfer waits for the receiver to post it.
#pragma once

#include <vector>

#include "executor/program.hpp"
#include "graph/graph.hpp"
#include "scheduler/cost_model.hpp"
#include "scheduler/schedule.hpp"

namespace hios::exec {

struct ReplayResult {
  double latency_ms = 0;
  std::vector<double> rank_end_ms;  // when each rank's stream 0 finishes its pass
  std::vector<double> node_start_ms, node_end_ms;  // per node (-1 when not launched)
};

// Throws hios::Error naming a stuck instruction if the programs deadlock (never for programs
// lowered from a schedule that passes check_schedule).
ReplayResult replay_programs(const Graph& g, const Schedule& s, const std::vector<RankProgram>& programs,
                             const CostModel& cost);

}  // namespace hios::exec
