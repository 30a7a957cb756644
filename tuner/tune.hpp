// hios tune: the fastest schedule for this machine, chosen by measurement, in one MPI job.
//
// Under `mpirun -np N hios tune ...` every rank makes one RankSession (executor/session.hpp)
// and keeps it for the whole job. Rank 0 leads: it decides what to measure next and
// broadcasts each collective step as a small JSON command; the other ranks follow those
// commands in the same order (there is one code path per step, run by every rank). HIOS
// spawns a new mpirun per measurement; here nothing is reloaded between measurements.
//
// Phases (progress on stderr: phase, item k of n, elapsed seconds):
//  1. identity: the device, driver, runtime, cuDNN and NCCL versions, backend, math and the
//     graph's digest; a --profile-db from elsewhere is refused naming what differs, unless
//     the mismatch policy says remeasure;
//  2. links: every ordered GPU pair through the session's transport, at the sizes the graph's
//     edges carry (skipped when the database has them);
//  3. nodes: every node alone in an eager sequential pass, device markers around its launches
//     (skipped when the database has every node signature of the graph);
//  4. searches: hios-lp, hios-mr and heft on N GPUs and IOS and hios-lp on one, with a few
//     stream and window settings, on the measured costs. Every concurrent stage a search
//     weighs is measured on rank 0's device the first time its stage key is seen, as IOS
//     does, and cached in the database (until the stage budget is spent; after it, and in
//     a re-tune without a measuring program, the fitted concurrency model predicts);
//  5. fit: the concurrency model (scheduler/concurrency_fit.hpp) over the measured stages;
//  6. candidates: every distinct schedule, plus today's analytic hios-lp on one and on N
//     GPUs, run on all ranks (CUDA Graphs where the transport allows) and checked against
//     the sequential run. A quick round times each; the best multi-GPU one is also timed with
//     its receives posted 0 and 2 stages ahead (meta.recv_lead); the candidates near the
//     fastest are timed again in full. The fastest measured one is written, and meta.tune
//     lists them all.
// A database keeps the backend's algorithm choices and the searches' candidates, so a
// re-tune that measures nothing new adopts the choices on every rank and skips the searches.
#pragma once

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
  int node_warmup = 2, node_iters = 10;
  int stage_warmup = 2, stage_iters = 5;
  int link_warmup = 3, link_iters = 10;
  int warmup = 3, passes = 20;  // per candidate: untimed passes, then timed ones (the median counts)
  // Every candidate is first timed over passes / 4 (at least 5) passes; those within
  // finalist_margin of the fastest are timed again over `passes`.
  double finalist_margin = 0.05;
  // A re-tune keeps the last tune's measurement of candidates slower than this many times the
  // fastest of them instead of timing them again.
  double retime_margin = 1.25;
  double stage_budget_s = 40;   // wall time for measuring stages during the searches
  double timeout_s = 0;         // watchdog over the whole job; 0: none
  bool progress = true;         // lines on stderr
};

struct Candidate {
  std::string label;     // e.g. "hios-lp 2 GPUs, 4 streams, window 4 (measured)"
  std::string algorithm, cost;  // cost: "measured" or "analytic"
  int gpus = 1, streams = 1, window = 0;
  Schedule schedule;     // widened to the job's GPU count
  double predicted_ms = 0;  // simulate() under the measured costs, plus the pass overhead
  // predicted_ms is calibrated: it adds launch_extra_ms after every launch and
  // transfer_extra_ms to every transfer, both fitted to the *other* candidates' measurements
  // (tune.cpp, "calibration"). predicted_uncalibrated_ms is the prediction from the isolated
  // measurements alone (stages on one GPU, links between idle GPUs).
  double predicted_uncalibrated_ms = 0;
  double launch_extra_ms = 0, transfer_extra_ms = 0;
  double measured_ms = 0;   // median over the timed passes (rank 0, barrier to output-ready)
  int passes = 0;           // how many passes that median is of (finalists get TuneOptions::passes);
                            // 0: kept from the database (a re-tune does not time it again)
  double stored_ms = 0, stored_max_rel = 0;  // re-tune: what the last tune measured (0: none)
  double max_rel = 0;       // output against the sequential run
  bool ok = false;          // verified within tolerance
};

struct TuneResult {
  Schedule chosen;                  // the fastest verified candidate, meta.tune filled in
  std::vector<Candidate> candidates;
  ProfileDb db;                     // what was measured or reused
  int stages_measured = 0, stages_reused = 0, stages_predicted = 0;
  bool nodes_measured = false, links_measured = false;
  double seconds = 0;
};

// Every rank calls it; the result is complete on rank 0. Throws hios::Error (the CLI then
// aborts the whole job).
TuneResult tune(const Graph& g, const TuneOptions& opt, exec::Comm& comm);

// The table `hios tune` prints: candidates with predicted, measured, error and the choice.
std::string tune_report(const TuneResult& r);

// A schedule for fewer GPUs run by more ranks: the extra GPUs get no stages.
Schedule widen_schedule(const Schedule& s, int gpus);

}  // namespace hios::tune
