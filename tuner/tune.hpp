// hios tune: the fastest schedule for this machine, chosen by measurement, in one MPI job.
//
// Under `mpirun -np N hios tune ...` every rank makes one RankSession (executor/session.hpp)
// and keeps it for the whole job. Rank 0 leads: it decides what to measure next and
// broadcasts each collective step as a small JSON command; the other ranks follow those
// commands in the same order (there is one code path per step, run by every rank). HIOS
// spawns a new mpirun per measurement; here nothing is reloaded between measurements.
//
// The job runs as named phases (class Tuner in tune_internal.hpp, one method each, in this order;
// progress on stderr: phase, item k of n, elapsed seconds):
//  1. open the database: the device, driver, runtime, cuDNN and NCCL versions, backend, math
//     and the graph's digest; a --profile-db from elsewhere is refused naming what differs,
//     unless the mismatch policy says remeasure;
//  2. reference: one sequential run on rank 0's device, which every candidate must match;
//  3. links: every ordered GPU pair through the session's transport, at the sizes the graph's
//     edges carry (skipped when the database has them);
//  4. nodes: every node alone, as CUDA Graph replays where the backend captures (skipped when
//     the database has every node signature of the graph);
//  5. searches: hios-lp, hios-mr and heft on N GPUs and IOS and hios-lp on one, with a few
//     stream and window settings, on the measured costs. Every concurrent stage a search
//     weighs is measured on rank 0's device the first time its stage key is seen, as IOS
//     does, and cached in the database (until the stage budget is spent; after it the fitted
//     concurrency model predicts);
//  6. fit: the concurrency model over the measured stages;
//  7. row splits (N > 1): every one-region split of 2 to N parts, any region, every mode, is
//     ranked under costs derived from the measured nodes; the best few are searched (hios-lp
//     on those costs), the best of those have their parts measured and are searched again on
//     measured nodes (stages from the fitted model), and become candidates like any other
//     (scheduler/spatial.hpp);
//  8. quick round: every distinct candidate, split or not, run on all ranks as `hios run` runs
//     it (CUDA Graphs where the transport allows) and checked against the reference;
//  9. receive leads: the fastest multi-GPU candidate with its receives posted 0 and 2 stages
//     ahead (meta.recv_lead);
// 10. calibration and round 2: a launch gap and a per-transfer cost fitted to the timed
//     candidates; the multi-GPU searches again with that transfer cost;
// 11. finals: the candidates near the fastest timed again in full;
// 12. launch order: the fastest one again in each launch order;
// 13. choose and write: the fastest verified candidate, meta.tune listing them all, and the
//     database (measurements, algorithm choices, the searches' candidates).
// A re-tune that measures nothing new adopts the algorithm choices on every rank and takes the
// candidates from the database instead of searching (phases 3-7 find nothing to do).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "executor/comm.hpp"
#include "executor/session.hpp"
#include "graph/graph.hpp"
#include "scheduler/cost_model.hpp"
#include "scheduler/schedule.hpp"

namespace hios::tune {

struct TuneOptions {
  int gpus = 1;                 // must equal the job's rank count
  exec::SessionOptions session; // backend, transport, math, devices, seed, threads
  std::string device;           // preset for the stage shares; empty: from the GPU's name (cpu: h200)
  std::string profile_db;       // read when the file exists, extended, written back; empty: none
  std::string mismatch = "refuse";  // a database from another device or graph: refuse | remeasure
  int max_streams = 4;
  int link_lanes = 1;           // transfers a GPU pair carries at once in the multi-GPU searches
  int node_warmup = 2, node_iters = 10;
  int stage_warmup = 2, stage_iters = 5;
  int link_warmup = 3, link_iters = 10;
  int warmup = 3, passes = 20;  // per candidate: untimed passes, then timed ones (the median counts)
  // Every candidate is first timed over passes / 4 (at least 5) passes; those within
  // finalist_margin of the fastest are timed again over `passes`.
  double finalist_margin = 0.05;
  // A re-tune keeps the last tune's measurement of candidates slower than this many times the
  // fastest of them instead of timing them again.
  double retime_margin = 1.10;
  double stage_budget_s = 40;   // wall time for measuring stages during the searches
  // Row-split candidates (phase 6): "off", "auto" (2 to N parts) or a part count P; the modes
  // tried ("halo", "recompute", "mixed" or "auto").
  std::string spatial = "auto";
  std::string spatial_mode = "auto";
  int split_shortlist = 8;      // plans searched under the derived costs
  int split_finalists = 2;      // of those, the plans whose parts are measured and timed
  double split_budget_s = 20;   // wall time for ranking and searching the plans (measuring excluded)
  double timeout_s = 0;         // watchdog over the whole job; 0: none
  bool progress = true;         // lines on stderr
};

struct Candidate {
  std::string label;     // e.g. "hios-lp 2 GPUs, 4 streams, window 4 (measured)"
  int variant = 0;       // the graph it schedules: 0 the tuned graph, k > 0 the k-th row split of it
  std::string split;     // that split, e.g. "Conv2d_1a_3x3..head 2 ways mixed/2"; empty: none
  std::string algorithm, cost;  // cost: "measured" or "analytic"
  // A receive-lead variant (meta.recv_lead >= 0): the label of the candidate whose schedule it
  // posts differently. Empty for a searched candidate.
  std::string posting_of;
  int gpus = 1, streams = 1, window = 0;
  Schedule schedule;     // widened to the job's GPU count
  double predicted_ms = 0;  // simulate() under the measured costs, plus the pass overhead
  // predicted_ms is calibrated: it adds launch_extra_ms after every launch and
  // transfer_extra_ms to every transfer, both fitted to the *other* candidates' measurements
  // (tune_timing.cpp, phase 10). predicted_uncalibrated_ms is the prediction from the isolated
  // measurements alone (stages on one GPU, links between idle GPUs).
  double predicted_uncalibrated_ms = 0;
  double launch_extra_ms = 0, transfer_extra_ms = 0;
  double measured_ms = 0;   // median over the timed passes (rank 0, barrier to output-ready)
  int passes = 0;           // how many passes that median is of (finalists get TuneOptions::passes);
                            // 0: kept from the database (a re-tune does not time it again)
  double stored_ms = 0, stored_max_rel = 0;  // re-tune: what the last tune measured (0: none)
  // Re-tune: the fastest the last tune measured this schedule with any receive posting (itself
  // or one of its receive-lead variants; 0: none). It decides what is timed again.
  double stored_fastest_ms = 0;
  // Re-tune: the receive posting that was fastest (meta.recv_lead: -1 the schedule as searched,
  // k >= 0 its variant posting k stages ahead); kLeadsNotTimed where the last tune timed none.
  static constexpr int kLeadsNotTimed = -2;
  int stored_fastest_lead = kLeadsNotTimed;
  double max_rel = 0;       // output against the sequential run
  bool ok = false;          // verified within tolerance
};

struct TuneResult {
  Schedule chosen;                  // the fastest verified candidate, meta.tune filled in
  Graph graph;                      // the graph `chosen` schedules: the tuned one, or its row split
                                    // (then chosen.meta.spatial names the split, for hios run)
  std::vector<Candidate> candidates;
  ProfileDb db;                     // what was measured or reused
  int stages_measured = 0, stages_reused = 0, stages_predicted = 0;
  bool nodes_measured = false, links_measured = false;
  double seconds = 0;
};

// Every rank calls it; the result is complete on rank 0. Throws hios::Error (the CLI then
// aborts the whole job).
TuneResult tune(const Graph& g, const TuneOptions& opt, exec::Comm& comm);
// The option and job-size checks tune() makes first, on their own: every rank meets their errors
// alike, so the command has rank 0 say them once.
void check_tune_options(const TuneOptions& opt, const exec::Comm& comm);

// The table `hios tune` prints: candidates with predicted, measured, error and the choice.
std::string tune_report(const TuneResult& r);

// A schedule for fewer GPUs run by more ranks: the extra GPUs get no stages.
Schedule widen_schedule(const Schedule& s, int gpus);
// The inverse: a widened schedule whose GPUs from `gpus` on have no stages, as a schedule for
// `gpus` GPUs (for `mpirun -np gpus`). Throws when a dropped GPU has stages.
Schedule narrow_schedule(const Schedule& s, int gpus);

// The candidate a tune writes: the fastest verified one, except that among those measured within
// kTieMargin of it (timing noise) the one on the fewest GPUs wins, then the one labelled
// `last_choice` (a re-tune's last choice: a re-tune does not move between equals), then the one
// whose fullest rank needs the least tensor memory (`tensor_memory`). Null when none verified.
constexpr double kTieMargin = 0.01;
const Candidate* choose_candidate(const std::vector<Candidate>& candidates,
                                  const std::function<int64_t(const Candidate&)>& tensor_memory,
                                  const std::string& last_choice = "");

// The fastest verified one-GPU candidate (the best one-GPU run the tune measured), or null.
const Candidate* best_one_gpu(const TuneResult& r);

}  // namespace hios::tune
