// The random-DAG experiment of the HIOS paper's simulation study: layered random DAGs with
// node weights drawn uniformly and communication costs scaled by a communication-to-computation
// ratio (CCR), scheduled by every algorithm and compared by simulated latency.
//
// A generated DAG becomes an ordinary Graph (one block; each node a 1x1 conv reading its
// producers concatenated; a zero-cost "exit" reads every sink) plus a small CostModel whose
// node_ms and transfer_ms come from the generated weights, so the real algorithms, check_schedule
// and simulate() run on it unchanged. The transfer time of a node's output is encoded in its
// channel count: transfer_ms(bytes) = (bytes / 4 - 1) * kRandomDagCommQuantumMs.
//
// Everything is deterministic for a seed: a splitmix64 generator and our own integer and real
// draws (std::uniform_*_distribution differs between standard libraries).
#pragma once

#include <cstdint>
#include <memory>
#include <functional>
#include <string>
#include <vector>

#include "graph/graph.hpp"
#include "scheduler/algorithms.hpp"
#include "scheduler/cost_model.hpp"

namespace hios {

// splitmix64 (Steele, Lea, Flood 2014): tiny, fast, and the same on every platform.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next();
  double uniform();                          // [0, 1) with 53 random bits
  double uniform(double lo, double hi);      // [lo, hi)
  uint64_t below(uint64_t n);                // [0, n), unbiased (rejection); n > 0

 private:
  uint64_t state_;
};

constexpr double kRandomDagCommQuantumMs = 1e-4;  // resolution of encoded transfer times

struct RandomDagParams {
  int nodes = 200;
  int edges = 400;
  int layers = 8;
  double min_weight = 0.1;  // ms
  double max_weight = 4.0;  // ms
  double ccr = 0.5;         // mean transfer time / mean node time
  double alpha = 0.5;       // stage model: alpha * sum + (1 - alpha) * contended
  uint64_t seed = 1;
};

struct RandomDag {
  Graph graph;
  std::vector<double> node_ms;      // per graph node; 0 for the input and the exit
  std::vector<double> comm_ms;      // per graph node: transfer time of its output between GPUs
  std::vector<double> utilization;  // per graph node: share of the GPU it keeps busy alone
  std::vector<int> layer;           // per graph node; -1 for the input and the exit
  double alpha = 0.5;
};

// Throws hios::Error naming the parameter when the request is impossible (fewer edges than
// needed to connect the layers, more than the layers allow, weights out of order, ...).
RandomDag generate_random_dag(const RandomDagParams& p);

// Node times from the table; transfers decoded from the tensor size; a stage of one group is
// the sum of its nodes, of several groups alpha * sum + (1 - alpha) * max(longest group, sum of
// utilization * node time), HIOS's stage formula. Bound to dag.graph (checks the node count).
std::unique_ptr<CostModel> make_random_dag_cost_model(const RandomDag& dag);

// The columns of the experiment's table, each the mean simulated latency over the seeds.
struct RandomDagRow {
  int gpus = 0;
  int seeds = 0;
  double seq = 0, ios = 0, hios_lp = 0, hios_lp_window = 0, hios_mr = 0, hios_mr_window = 0, heft = 0;
  double lower_bound = 0;
};

// For every GPU count, every seed in [p.seed, p.seed + seeds): generate, schedule with every
// algorithm (window and streams from opt), average. IOS runs on one GPU whatever the count, so
// it is computed once per seed.
// `progress(k, seeds)` is called after each DAG (seed k of seeds) is done: the study can run
// for minutes, and the CLI shows where it is on stderr.
std::vector<RandomDagRow> run_random_dag_experiment(const RandomDagParams& p, int seeds, const std::vector<int>& gpus,
                                                   const SchedulerOptions& opt,
                                                   const std::function<void(int, int)>& progress = nullptr);
std::string random_dag_table(const std::vector<RandomDagRow>& rows);  // aligned text
std::string random_dag_csv(const std::vector<RandomDagRow>& rows);    // header + one line per row

}  // namespace hios
