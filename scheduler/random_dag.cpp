#include "scheduler/random_dag.hpp"

#include <algorithm>
#include <cmath>
#include <set>

#include "graph/error.hpp"

namespace hios {

// ---------------------------------------------------------------------------------------------
// Generator

uint64_t SplitMix64::next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double SplitMix64::uniform() { return double(next() >> 11) * 0x1.0p-53; }

double SplitMix64::uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }

uint64_t SplitMix64::below(uint64_t n) {
  // Reject the top sliver of the 64-bit range that would make some residues more likely.
  const uint64_t limit = ~uint64_t(0) - (~uint64_t(0) % n);
  uint64_t x;
  do {
    x = next();
  } while (x >= limit);
  return x % n;
}

RandomDag generate_random_dag(const RandomDagParams& p) {
  // The bound is what the schedulers search in reasonable time; 2^31 nodes would only exhaust memory.
  HIOS_CHECK(p.nodes >= 1 && p.nodes <= 100000, "random DAG: --nodes must be from 1 to 100000 (got %d)", p.nodes);
  HIOS_CHECK(p.layers >= 1 && p.layers <= p.nodes, "random DAG: --layers must be in [1, nodes=%d] (got %d)", p.nodes,
             p.layers);
  HIOS_CHECK(p.min_weight >= 0 && p.max_weight >= p.min_weight,
             "random DAG: weights need 0 <= --min-weight <= --max-weight (got %g and %g)", p.min_weight, p.max_weight);
  HIOS_CHECK(p.ccr >= 0 && std::isfinite(p.ccr), "random DAG: --ccr must be a finite number >= 0 (got %g)", p.ccr);
  HIOS_CHECK(p.alpha >= 0 && p.alpha <= 1, "random DAG: alpha must be in [0, 1] (got %g)", p.alpha);
  SplitMix64 rng(p.seed);

  // Layer sizes: an even split, the remainder to random layers.
  std::vector<int> size(p.layers, p.nodes / p.layers);
  for (int r = 0; r < p.nodes % p.layers; ++r) ++size[rng.below(p.layers)];
  std::vector<int> first(p.layers + 1, 0), layer_of(p.nodes);
  for (int l = 0; l < p.layers; ++l) first[l + 1] = first[l] + size[l];
  for (int l = 0; l < p.layers; ++l) {
    for (int i = first[l]; i < first[l + 1]; ++i) layer_of[i] = l;
  }

  // Edges only go to later layers. Every node past the first layer gets one producer in the
  // layer just above (so the layers are real), then random extra edges fill up the count.
  const int needed = p.nodes - size[0];
  int64_t possible = 0;
  for (int l = 0; l < p.layers; ++l) possible += int64_t(size[l]) * (p.nodes - first[l + 1]);
  HIOS_CHECK(p.edges >= needed, "random DAG: --edges must be at least %d to connect %d layers of %d nodes (got %d)",
             needed, p.layers, p.nodes, p.edges);
  HIOS_CHECK(p.edges <= possible, "random DAG: --edges must be at most %lld for %d layers of %d nodes (got %d)",
             (long long)possible, p.layers, p.nodes, p.edges);
  std::set<std::pair<int, int>> edges;
  for (int v = first[1 < p.layers ? 1 : 0]; v < p.nodes && p.layers > 1; ++v) {
    int l = layer_of[v];
    int u = first[l - 1] + static_cast<int>(rng.below(size[l - 1]));
    edges.insert({u, v});
  }
  const int extra = p.edges - static_cast<int>(edges.size());
  if (possible <= 4'000'000) {
    // Draw without replacement from the pairs still free (a partial Fisher-Yates shuffle).
    std::vector<std::pair<int, int>> free_pairs;
    for (int u = 0; u < p.nodes; ++u) {
      for (int v = first[layer_of[u] + 1]; v < p.nodes; ++v) {
        if (!edges.count({u, v})) free_pairs.push_back({u, v});
      }
    }
    for (int i = 0; i < extra; ++i) {
      size_t j = i + rng.below(free_pairs.size() - i);
      std::swap(free_pairs[i], free_pairs[j]);
      edges.insert(free_pairs[i]);
    }
  } else {
    const int last_start = first[p.layers - 1];  // nodes below this have a later layer
    while (static_cast<int>(edges.size()) < p.edges) {
      int u = static_cast<int>(rng.below(last_start));
      int lo = first[layer_of[u] + 1];
      int v = lo + static_cast<int>(rng.below(p.nodes - lo));
      edges.insert({u, v});
    }
  }
  std::vector<std::vector<int>> preds(p.nodes);
  std::vector<char> has_succ(p.nodes, 0);
  for (auto [u, v] : edges) {
    preds[v].push_back(u);
    has_succ[u] = 1;
  }

  std::vector<double> w(p.nodes), c(p.nodes), util(p.nodes);
  for (int v = 0; v < p.nodes; ++v) {
    w[v] = rng.uniform(p.min_weight, p.max_weight);
    c[v] = p.ccr * rng.uniform(p.min_weight, p.max_weight);
    util[v] = rng.uniform(0.2, 1.0);
  }

  // The Graph: channels encode transfer times, so every node is a 1x1 conv with its own width.
  auto channels = [](double comm) { return int64_t(1) + int64_t(std::llround(comm / kRandomDagCommQuantumMs)); };
  GraphBuilder b("random-dag-" + std::to_string(p.seed), 1, 1, 1);
  Value x = b.input(1);
  b.begin_block("dag");
  std::vector<Value> val(p.nodes);
  for (int v = 0; v < p.nodes; ++v) {
    Term in;
    if (preds[v].empty()) {
      in.push_back(x);
    } else {
      for (int u : preds[v]) in.push_back(val[u]);
    }
    val[v] = b.conv("n" + std::to_string(v), in, channels(c[v]), 1, 1, 0, Activation::None);
  }
  Term sinks;
  for (int v = 0; v < p.nodes; ++v) {
    if (!has_succ[v]) sinks.push_back(val[v]);
  }
  Value exit = b.conv("exit", sinks, 1, 1, 1, 0, Activation::None);
  b.end_block(exit);

  RandomDag dag;
  dag.graph = b.finish();
  dag.alpha = p.alpha;
  const int n = dag.graph.size();
  dag.node_ms.assign(n, 0.0);
  dag.comm_ms.assign(n, 0.0);
  dag.utilization.assign(n, 0.0);
  dag.layer.assign(n, -1);
  for (int v = 0; v < p.nodes; ++v) {
    int i = dag.graph.find("n" + std::to_string(v));
    HIOS_CHECK(i > 0, "random DAG: node n%d missing after finalize", v);
    dag.node_ms[i] = w[v];
    // The decoded value, so that the table and the cost model agree exactly.
    dag.comm_ms[i] = double(channels(c[v]) - 1) * kRandomDagCommQuantumMs;
    dag.utilization[i] = util[v];
    dag.layer[i] = layer_of[v];
  }
  return dag;
}

// ---------------------------------------------------------------------------------------------
// Cost model

namespace {

class RandomDagCostModel : public CostModel {
 public:
  explicit RandomDagCostModel(const RandomDag& d)
      : name_(d.graph.name), n_(d.graph.size()), ms_(d.node_ms), util_(d.utilization), alpha_(d.alpha) {}
  std::string name() const override { return "random-dag"; }
  std::string device() const override { return "synthetic"; }
  double node_ms(const Graph& g, int node, int) const override {
    check(g);
    return ms_.at(node);
  }
  double transfer_ms(double bytes, int src, int dst) const override {
    if (src == dst) return 0;
    double channels = std::round(bytes / 4.0);
    return std::max(0.0, channels - 1) * kRandomDagCommQuantumMs;
  }
  double stage_ms(const Graph& g, const Stage& stage, int) const override {
    check(g);
    double sum = 0, longest = 0, busy = 0;
    int groups = 0;
    for (const Group& gr : stage.groups) {
      double t = 0;
      for (int v : gr.nodes) {
        t += ms_.at(v);
        busy += util_.at(v) * ms_.at(v);
      }
      sum += t;
      longest = std::max(longest, t);
      if (!gr.nodes.empty()) ++groups;
    }
    if (groups <= 1) return sum;
    return alpha_ * sum + (1 - alpha_) * std::max(longest, busy);
  }

 private:
  void check(const Graph& g) const {
    HIOS_CHECK(g.size() == n_ && g.name == name_, "random-DAG cost model of '%s' asked about graph '%s'", name_.c_str(),
               g.name.c_str());
  }
  std::string name_;
  int n_;
  std::vector<double> ms_, util_;
  double alpha_;
};

}  // namespace

std::unique_ptr<CostModel> make_random_dag_cost_model(const RandomDag& dag) {
  return std::make_unique<RandomDagCostModel>(dag);
}

// ---------------------------------------------------------------------------------------------
// Experiment

std::vector<RandomDagRow> run_random_dag_experiment(const RandomDagParams& p, int seeds, const std::vector<int>& gpus,
                                                   const SchedulerOptions& opt,
                                                   const std::function<void(int, int)>& progress) {
  HIOS_CHECK(seeds >= 1 && seeds <= 100000, "random DAG: --seeds must be from 1 to 100000 (got %d)", seeds);
  HIOS_CHECK(!gpus.empty(), "random DAG: --gpus lists no GPU count");
  for (int G : gpus) HIOS_CHECK(G >= 1 && G <= 64, "random DAG: GPU counts must be in [1, 64] (got %d)", G);
  std::vector<RandomDagRow> rows(gpus.size());
  for (size_t i = 0; i < gpus.size(); ++i) {
    rows[i].gpus = gpus[i];
    rows[i].seeds = seeds;
  }
  for (int k = 0; k < seeds; ++k) {
    RandomDagParams q = p;
    q.seed = p.seed + static_cast<uint64_t>(k);
    RandomDag dag = generate_random_dag(q);
    std::unique_ptr<CostModel> cost = make_random_dag_cost_model(dag);
    SchedulerOptions one = opt;
    one.num_gpus = 1;
    const double ios = schedule_ios(dag.graph, *cost, one).meta.predicted_ms;
    for (size_t i = 0; i < gpus.size(); ++i) {
      SchedulerOptions o = opt;
      o.num_gpus = gpus[i];
      RandomDagRow& r = rows[i];
      r.seq += schedule_sequential(dag.graph, *cost, o).meta.predicted_ms;
      r.ios += ios;
      r.hios_lp += schedule_hios(dag.graph, *cost, o, false, false).meta.predicted_ms;
      r.hios_lp_window += schedule_hios(dag.graph, *cost, o, false, true).meta.predicted_ms;
      r.hios_mr += schedule_hios(dag.graph, *cost, o, true, false).meta.predicted_ms;
      r.hios_mr_window += schedule_hios(dag.graph, *cost, o, true, true).meta.predicted_ms;
      r.heft += schedule_heft(dag.graph, *cost, o).meta.predicted_ms;
      r.lower_bound += lower_bound_ms(dag.graph, *cost, gpus[i]);
    }
    if (progress) progress(k + 1, seeds);
  }
  for (RandomDagRow& r : rows) {
    for (double* x : {&r.seq, &r.ios, &r.hios_lp, &r.hios_lp_window, &r.hios_mr, &r.hios_mr_window, &r.heft,
                      &r.lower_bound}) {
      *x /= seeds;
    }
  }
  return rows;
}

namespace {

const char* kColumns[] = {"gpus",    "seq",            "ios",  "hios-lp",    "hios-lp+window",
                          "hios-mr", "hios-mr+window", "heft", "lower_bound"};

std::vector<double> values(const RandomDagRow& r) {
  return {r.seq, r.ios, r.hios_lp, r.hios_lp_window, r.hios_mr, r.hios_mr_window, r.heft, r.lower_bound};
}

}  // namespace

std::string random_dag_table(const std::vector<RandomDagRow>& rows) {
  std::string out;
  for (const char* c : kColumns) out += strprintf("%*s", c == kColumns[0] ? 4 : 16, c);
  out += "\n";
  for (const RandomDagRow& r : rows) {
    out += strprintf("%4d", r.gpus);
    for (double v : values(r)) out += strprintf("%16.3f", v);
    out += "\n";
  }
  return out;
}

std::string random_dag_csv(const std::vector<RandomDagRow>& rows) {
  std::string out;
  for (size_t i = 0; i < std::size(kColumns); ++i) out += std::string(i ? "," : "") + kColumns[i];
  out += "\n";
  for (const RandomDagRow& r : rows) {
    out += std::to_string(r.gpus);
    for (double v : values(r)) out += strprintf(",%.6f", v);
    out += "\n";
  }
  return out;
}

}  // namespace hios
