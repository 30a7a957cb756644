// The host side of `hios run`: lowers this rank's program, prepares a backend and a transport,
// runs warm-up and timed passes, verifies, and reports (nccl-tests-style table + JSON).
//
// Timing (as HIOS measures): before every timed pass all ranks meet at a barrier; rank 0
// measures from input-ready (the barrier returned, the input is resident) to output-ready (the
// output is complete on rank 0 and the host knows it). A repeat is the mean of `number` such
// passes; the report gives mean, median, min, max and standard deviation over the repeats.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "executor/comm.hpp"
#include "executor/init.hpp"
#include "executor/verify.hpp"
#include "graph/graph.hpp"
#include "graph/json_reader.hpp"
#include "scheduler/schedule.hpp"

namespace hios::exec {

struct RunOptions {
  std::string backend = "cpu";
  std::string transport;         // empty: the one hios tune measured the schedule with, else the session's default (SessionOptions::transport)
  std::string cuda_graph = "auto";  // on | off | auto (on when backend and transport can capture)
  std::string math;              // empty: the backend's default ("tf32" on cuda, "fp32" on cpu)
  std::string comm_priority = "high";  // SessionOptions::comm_priority
  std::string layout;                  // SessionOptions::layout (empty: the backend's default)
  // SessionOptions::conv_search: quick | wide; empty: the one hios tune measured the schedule
  // with (meta.tune.identity), else quick.
  std::string conv_search;
  int warmup = 2, number = 6, repeat = 6;
  bool verify = false;
  bool verify_nodes = false;     // also compare every node's output (implies verify)
  // Non-empty: the CPU reference's output is read from this folder when an earlier run of the
  // same graph and seed left it there, and left there otherwise (run/reference_cache.hpp).
  // --verify-nodes needs every node of the reference, so it never reads the cache.
  std::string reference_cache;
  // At batch > 1: the CPU reference runs the batch's first image alone (the batch-1 graph, whose
  // weights are the same: they are keyed by node name and seed) and the output's first image is
  // compared with it; the whole batch is still compared with the sequential run. 1/batch of
  // the reference's cost, cached as the batch-1 graph's (first_image_reference). Not with
  // --verify-nodes.
  bool reference_first_image = false;
  // "shared": tensors whose lives cannot overlap share memory (executor/memory_plan.hpp);
  // "separate": every tensor has its own buffer. --verify-nodes reads every tensor after the
  // pass, so it always runs separate.
  std::string memory = "shared";
  // "on": a row split's bands share memory at the addresses of their rows where the backend's
  // storage allows (exec::MemoryPlanOptions); "off": every rows node copies (for comparison).
  std::string rows_in_place = "on";
  // How each stage's launches interleave across its streams: topo | opara | measured
  // (executor/launch_order.hpp); empty: the one `hios tune` chose for the schedule
  // (meta.tune.launch_order.chosen), else topo.
  std::string launch_order;
  std::vector<int> devices;      // device per node-local rank; empty: the local rank
  double timeout_s = 0;          // watchdog over the whole run; 0: none
  // While passes run (warm-up, timed, traced), a rank that finishes no pass for this long
  // aborts the whole job naming itself, the phase and a stopped peer: a stopped or hung peer
  // otherwise leaves it waiting forever. 0: off; < 0 (default): automatic, 300 s until a pass
  // time is known, then max(10 s, 50x the slowest pass) (executor/watchdog.hpp).
  double stall_timeout_s = -1;
  uint64_t seed = init::kDefaultSeed;
  int threads = 0;               // CPU backend OpenMP threads; 0: default
  size_t memory_limit = 0;       // BackendConfig::memory_limit (testing the out-of-memory path)
  // Testing only: "RANK:PHASE" makes that rank fail (throw) or, for PHASE "hang", block
  // forever, at PHASE in {prepare, warmup, run, verify, hang}. Also read from the environment
  // variable HIOS_INJECT_FAILURE when empty.
  std::string inject_failure;
  // Non-empty: after the timed passes, one more pass is traced (executor/trace_pass.hpp) and
  // RunReport::trace holds its Chrome trace on rank 0; the CLI writes it to this file.
  std::string trace_file;
  // Non-empty: the graph's input is read from this NumPy .npy file (graph/npy.hpp), shaped as
  // the input (N, C, H, W; or C, H, W at batch 1), instead of the seeded one.
  std::string input_file;
  // Non-empty: after the timed passes rank 0 writes the graph's output to this .npy file,
  // shaped (N, C, H, W), or (N, C) where H and W are 1 (a classifier's logits).
  std::string output_file;
  // Inputs by name, "NAME=FILE.npy" each (--input repeated), for graphs of several inputs;
  // a tensor input's file must hold its dtype and shape.
  std::vector<std::string> named_inputs;
  // Results to save (--save-output repeated): "DIR" writes every result as DIR/<name>.npy,
  // "NAME=FILE.npy" one result. output_file is the one-result form.
  std::vector<std::string> saves;
};

struct VerifyResult {
  std::string against;   // "sequential (cpu)", "cpu reference", ...
  Diff diff;
  double tolerance = 0;  // on diff.max_rel
  bool ok = false;
};

struct RankInfo {
  int rank = 0;
  std::string host, device;
  int device_index = -1;
  int launched = 0;     // nodes
  int sends = 0, recvs = 0;
  double memory_mb = 0;  // peak
  double tensors_mb = 0;  // what the program's tensors occupy (the shared arena, or their sum)
  // Row splits: the `rows` nodes the rank launches, and how many of them the memory plan made
  // no-ops by holding their operands in place (exec::rows_copies).
  int rows_launched = 0, rows_in_place = 0;
};

struct RunReport {
  std::string graph_name, graph_digest, algorithm;
  int64_t batch = 1, height = 0, width = 0;
  int num_ranks = 1;
  std::string backend, transport, math, cuda_graph;  // cuda_graph: "on" or "off" as run
  std::string layout = "nchw";                        // how the backend stored activations
  std::string conv_search = "quick";                  // BackendConfig::conv_search
  std::string memory;    // "shared" or "separate", as run
  std::string launch_order = "topo";  // launch_order_summary of the order run
  std::string versions;  // backend, transport and MPI library versions
  int warmup = 0, number = 0, repeat = 0;
  double predicted_ms = 0;          // the schedule's simulated latency
  std::vector<double> repeats_ms;   // rank 0, one per repeat (the mean of its `number` runs)
  std::vector<double> runs_ms;      // rank 0, every timed pass
  double mean_ms = 0, median_ms = 0, min_ms = 0, max_ms = 0, std_ms = 0;
  std::vector<RankInfo> ranks;
  std::vector<VerifyResult> verify;  // empty without --verify
  bool ok = true;                    // every verification passed
  std::string trace;                 // rank 0, with RunOptions::trace_file: the traced pass
};

// Runs on every rank of comm; the report is complete on rank 0 (other ranks get theirs with
// only their own details). Throws hios::Error prefixed with comm.where() on failure; the CLI
// then aborts the job. Verification failures do not throw: report.ok is false.
RunReport run_schedule(const Graph& g, const Schedule& s, const RunOptions& opt, Comm& comm);
// The checks of the job's shape and options that run_schedule makes first (rank count, modes,
// failure injection), on their own: every rank meets their errors alike, so a caller can have
// rank 0 say them once (cli's shared_step).
void check_run_options(const Schedule& s, const RunOptions& opt, const Comm& comm);

// nccl-tests-style: '#' preamble (configuration, versions, one line per rank with host and
// device), a header with units, one row per repeat plus summary rows, a correctness column.
std::string report_to_table(const RunReport& r);
json report_to_json(const RunReport& r);

}  // namespace hios::exec
