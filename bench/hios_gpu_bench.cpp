// hios-gpu-bench: times one model at one resolution on the GPU(s) of this machine, in-process.
// Rows (JSON lines with --json, and a readable line each on stdout):
//   sequential   the sequential single-GPU executor (SingleGpuRunner), CUDA Graph or eager
//   <algo>-1gpu  the schedule of --algo on one GPU (several streams), through the backend
//   <algo>-2gpu  the same algorithm on two GPUs with NCCL transfers (when two are visible)
// The multi-GPU rows carry their output's error against the sequential run as the correctness
// column. scripts/bench-gpu.sh drives it beside scripts/bench_pytorch.py.
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <tuple>

#include <cuda_runtime.h>

#include "inprocess/inprocess.hpp"
#include "bench/copy_bandwidth.hpp"
#ifdef HIOS_BENCH_WITH_CUPTI
#include "profiler/cuda/cupti_tracer.hpp"
#endif
#include "graph/error.hpp"
#include "graph/json_reader.hpp"
#include "models/models.hpp"
#include "scheduler/algorithms.hpp"
#include "scheduler/cost_model.hpp"
#include "scheduler/simulator.hpp"

using namespace hios;

namespace {

double rel_error(const std::vector<float>& got, const std::vector<float>& ref) {
  if (got.size() != ref.size() || got.empty()) return INFINITY;
  double d2 = 0, r2 = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = double(got[i]) - double(ref[i]);
    d2 += d * d;
    r2 += double(ref[i]) * ref[i];
  }
  return r2 > 0 ? std::sqrt(d2 / r2) : std::sqrt(d2);
}

// Memory-bound nodes (pools, activations, add, mul, concats and sums, softmax) against the
// time their bytes take at the copy bandwidth: the goal is within 1.5x. `elem_scale`
// turns the graph's fp32 byte counts into the stored type's (0.5 in fp16/bf16). `what` names
// where the node times come from: events around each node's launches (launch gaps included) or
// CUPTI's kernel records (the time the GPU ran the node's kernels).
void print_memory_bound(const Graph& g, const std::vector<double>& t, double elem_scale, double gbs, const char* what) {
  if (!(gbs > 0)) return;
  std::map<std::string, std::pair<double, double>> by_kind;  // measured, memory time
  std::vector<std::tuple<double, double, int>> worst;         // ratio, ms, node
  for (int v = 1; v < g.size(); ++v) {
    const Node& nd = g.nodes[size_t(v)];
    const OpKind k = nd.op.kind;
    if (k != OpKind::Pool && k != OpKind::Activation && k != OpKind::Add && k != OpKind::Mul &&
        k != OpKind::Identity && k != OpKind::Softmax)
      continue;
    const double mem_ms = (nd.cost.bytes_read + nd.cost.bytes_written) * elem_scale / (gbs * 1e6);
    std::string key = op_def(k).name;
    if (k == OpKind::Pool) key += std::string(" ") + pool_kind_name(nd.op.pool().kind);
    by_kind[key].first += t[size_t(v)];
    by_kind[key].second += mem_ms;
    if (mem_ms > 0) worst.emplace_back(t[size_t(v)] / mem_ms, t[size_t(v)], v);
  }
  std::fprintf(stderr, "# memory-bound nodes against a %.0f GB/s copy (%s / memory time):\n", gbs, what);
  double all_t = 0, all_m = 0;
  for (const auto& [k, tm] : by_kind) {
    std::fprintf(stderr, "#   %-16s %8.3f ms against %8.3f ms: %.2fx\n", k.c_str(), tm.first, tm.second,
                 tm.second > 0 ? tm.first / tm.second : NAN);
    all_t += tm.first;
    all_m += tm.second;
  }
  std::fprintf(stderr, "#   %-16s %8.3f ms against %8.3f ms: %.2fx\n", "all", all_t, all_m, all_m > 0 ? all_t / all_m : NAN);
  std::sort(worst.rbegin(), worst.rend());
  int shown = 0;
  for (const auto& [ratio, ms, v] : worst) {
    if (ms < 0.005) continue;  // launch-bound slivers say nothing about bandwidth
    const Node& nd = g.nodes[size_t(v)];
    std::fprintf(stderr, "#   worst %5.2fx %8.3f ms  %-45s %-30s out %s\n", ratio, ms, nd.name.c_str(),
                 describe_op(nd.op).substr(0, 30).c_str(), nd.shape.str().c_str());
    if (++shown == 8) break;
  }
}

// Time per op kind (sequential steps split by what they start with) and the slowest nodes.
void print_profile(const Graph& g, const std::vector<double>& t) {
  std::map<std::string, std::pair<double, int>> by_kind;
  double total = 0;
  for (int v = 1; v < g.size(); ++v) {
    const Node& nd = g.nodes[size_t(v)];
    std::string k = describe_op(nd.op);
    if (nd.op.kind == OpKind::Sequential) k = "seq(" + std::to_string(nd.op.sequential().steps.size()) + " steps)";
    if (nd.op.kind == OpKind::Identity) {
      k = strprintf("identity %zu terms%s", nd.inputs.size(), nd.inputs.size() == 1 && nd.inputs[0].size() == 1 ? " copy" : "");
    }
    by_kind[k].first += t[size_t(v)];
    by_kind[k].second += 1;
    total += t[size_t(v)];
  }
  std::vector<std::pair<double, std::string>> rows;
  for (auto& [k, v] : by_kind) rows.emplace_back(v.first, strprintf("%-40s x%-4d", k.c_str(), v.second));
  std::sort(rows.rbegin(), rows.rend());
  std::fprintf(stderr, "# profile %s %lldx%lld: %.3f ms in nodes (eager, event per node)\n", g.name.c_str(),
               (long long)g.height, (long long)g.width, total);
  for (size_t i = 0; i < rows.size() && i < 25; ++i) {
    std::fprintf(stderr, "#   %8.3f ms %5.1f%%  %s\n", rows[i].first, 100 * rows[i].first / total, rows[i].second.c_str());
  }
  std::vector<std::pair<double, int>> nodes;
  for (int v = 1; v < g.size(); ++v) nodes.emplace_back(t[size_t(v)], v);
  std::sort(nodes.rbegin(), nodes.rend());
  for (size_t i = 0; i < nodes.size() && i < 12; ++i) {
    const Node& nd = g.nodes[size_t(nodes[i].second)];
    std::fprintf(stderr, "#   slowest %8.3f ms  %-45s %-40s out %s\n", nodes[i].first, nd.name.c_str(),
                 describe_op(nd.op).substr(0, 40).c_str(), nd.shape.str().c_str());
  }
}

}  // namespace

// GPUs that run at least one stage.
static int gpus_used(const Schedule& s) {
  std::vector<bool> used(size_t(s.meta.num_gpus), false);
  for (const auto& block : s.blocks) {
    for (size_t gpu = 0; gpu < block.size() && gpu < used.size(); ++gpu) used[gpu] = used[gpu] || !block[gpu].empty();
  }
  return int(std::count(used.begin(), used.end(), true));
}

namespace {

struct BenchOptions {
  std::string model = "inception_v3", maths = "tf32", algo = "hios-lp", json_file, graph_mode = "on";
  std::string cost_name = "analytic", layouts = "nhwc", launch_orders = "topo", relu_fold = "on";
  int size = 0, batch = 1, warmup = 10, iters = 30, gpus = 2, streams = 4;
  bool summary = false;
  int profile = 0;
};

void add_bench_options(CLI::App& app, BenchOptions& o) {
  app.add_option("--model", o.model, "model name (hios models)");
  app.add_option("--cost", o.cost_name,
                 "cost model the schedules are made with: analytic (H200 preset) or a profile database "
                 "(hios profile) of this model at this size");
  app.add_option("--size", o.size, "square input resolution (0: the model's default)");
  app.add_option("--batch", o.batch, "batch size, 1 to 4096")->check(CLI::Range(1, 4096));
  app.add_option("--launch-order", o.launch_orders,
                 "topo, opara, measured, or a comma-separated list: the schedule rows in each (executor/launch_order.hpp)");
  app.add_option("--math", o.maths,
                 "tf32, fp32, fp16 or bf16, or a comma-separated list of them (every row in each, in order)");
  app.add_option("--layout", o.layouts, "nchw, nhwc or both: how activations are stored (both: every row in each)")
      ->check(CLI::IsMember({"nchw", "nhwc", "both"}));
  app.add_option("--relu-fold", o.relu_fold,
                 "on: nodes whose readers all start with a ReLU store relu(value) and the readers skip it "
                 "(graph/relu_fold.hpp); off: no folding; both: every row each way (off rows end in -unfolded)")
      ->check(CLI::IsMember({"on", "off", "both"}));
  app.add_option("--cuda-graph", o.graph_mode, "on: capture and replay; off: issue every pass; both")
      ->check(CLI::IsMember({"on", "off", "both"}));
  app.add_option("--warmup", o.warmup, "untimed passes");
  app.add_option("--iters", o.iters, "timed passes (the median is reported)");
  app.add_option("--algo", o.algo, "schedule for the multi-stream and multi-GPU rows ('' for none)");
  app.add_option("--gpus", o.gpus, "most GPUs for the schedule rows (1 or 2)");
  app.add_option("--streams", o.streams, "most concurrent streams per GPU for the schedule");
  app.add_option("--json", o.json_file, "append one JSON object per row to this file");
  app.add_flag("--summary", o.summary, "print the chosen cuDNN algorithms and memory");
  app.add_option("--profile", o.profile, "print where a sequential eager pass spends its time (N passes)");
}

std::vector<std::string> comma_list(const std::string& s) {
  std::vector<std::string> items;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) items.push_back(item);
  return items;
}

// The settings one set of rows is timed in: every combination of --math, --layout and --relu-fold.
struct RowSetting {
  std::string math, layout;
  bool fold = true;
  std::string suffix() const { return fold ? "" : "-unfolded"; }
};

// One timed row: a readable line on stdout and, with --json, one JSON object per line.
struct Row {
  std::string variant;
  int gpus = 1;
  bool cuda_graph = true;
  cuda::TimingResult timing;
  double peak_mib = 0;
  double err = NAN;        // against the first sequential run
  int streams = 1, transfers = 0;
  double predicted = NAN;  // the schedule's simulated latency, for rows that ran a schedule
};

class RowWriter {
 public:
  RowWriter(const BenchOptions& o, int64_t resolution) : o_(o), resolution_(resolution) {
    if (!o.json_file.empty()) json_.open(o.json_file, std::ios::app);
  }

  void write(const RowSetting& set, const Row& r) {
    const cuda::TimingResult& t = r.timing;
    std::printf("%-14s %-22s %5lld  %d  %-4s %-4s %-5s %9.3f %9.3f %9.3f %10.1f  %-9s %3d %5d\n", o_.model.c_str(),
                r.variant.c_str(), (long long)resolution_, r.gpus, set.math.c_str(), set.layout.c_str(),
                r.cuda_graph ? "graph" : "eager", t.median_ms, t.min_ms, t.max_ms, r.peak_mib,
                std::isnan(r.err) ? "n/a" : strprintf("%.2e", r.err).c_str(), r.streams, r.transfers);
    std::fflush(stdout);
    if (!json_.is_open()) return;
    json j = {{"impl", "hios"},         {"variant", r.variant},     {"model", o_.model},     {"size", resolution_},
              {"batch", o_.batch},      {"gpus", r.gpus},           {"math", set.math},      {"layout", set.layout},
              {"cuda_graph", r.cuda_graph}, {"median_ms", t.median_ms}, {"min_ms", t.min_ms}, {"max_ms", t.max_ms},
              {"peak_mib", r.peak_mib}, {"streams", r.streams},     {"transfers", r.transfers},
              {"iters", int(t.samples_ms.size())}, {"device", cuda::device_description(0)}};
    if (!std::isnan(r.err)) j["rel_err_vs_sequential"] = r.err;
    if (!std::isnan(r.predicted)) {
      j["predicted_ms"] = r.predicted;
      j["cost"] = o_.cost_name;
    }
    json_ << j.dump() << "\n";
    json_.flush();
  }

 private:
  const BenchOptions& o_;
  int64_t resolution_;
  std::ofstream json_;
};

// --profile: where an eager sequential pass spends its time, by events and (with CUPTI) by
// kernel records; `node_ms` are the event times already taken.
void print_sequential_profile(const Graph& g, cuda::SingleGpuRunner& r, const std::vector<double>& node_ms, int passes,
                              const std::string& math) {
  print_profile(g, node_ms);
  const double elem_scale = math_stores_16_bit(math) ? 0.5 : 1.0;
  const double gbs = cuda::copy_bandwidth_gbs();
  print_memory_bound(g, node_ms, elem_scale, gbs, "event time");
#ifdef HIOS_BENCH_WITH_CUPTI
  // CUPTI in passes of its own: its bookkeeping would otherwise land in the event times.
  std::vector<double> kernel_ms(size_t(g.size()), 0.0);
  prof::CuptiTracer tracer;
  for (int it = 0; it < passes; ++it) {
    r.node_times_ms(1, [&](int node, bool begin) {
      if (begin) {
        tracer.push(uint64_t(node) + 1);  // 0 would read as "no tag"
      } else {
        tracer.pop();
      }
    });
    for (const auto& [tag, busy] : tracer.collect()) kernel_ms[size_t(tag - 1)] += busy.ms / passes;
  }
  print_memory_bound(g, kernel_ms, elem_scale, gbs, "kernel time (CUPTI)");
#else
  (void)r;
  (void)passes;
#endif
}

// The sequential rows, one per CUDA Graph mode. The first one run anywhere becomes `ref`, the
// output every later row is compared with. Returns the sequential pass's node times when
// `want_node_times` (the measured launch order) or --profile asks for them.
std::vector<double> time_sequential_rows(const Graph& g, const BenchOptions& o, const RowSetting& set,
                                         const std::vector<bool>& modes, bool want_node_times, std::vector<float>& ref,
                                         RowWriter& rows) {
  std::vector<double> node_ms;
  for (bool graph : modes) {
    cuda::SingleGpuOptions so;
    so.math = cuda::parse_math_mode(set.math);
    so.cuda_graph = graph;
    so.layout = exec::parse_layout(set.layout);
    so.fold_relu = set.fold;
    cuda::SingleGpuRunner r(g, so);
    Row row;
    row.variant = "sequential" + set.suffix();
    row.cuda_graph = graph;
    row.timing = r.time(o.warmup, o.iters);
    const std::vector<float> out = r.output();
    if (ref.empty()) {
      ref = out;
    } else {
      row.err = rel_error(out, ref);
    }
    if (o.summary) std::fputs(r.summary().c_str(), stderr);
    if ((o.profile > 0 || want_node_times) && graph == modes.front()) {
      const int passes = std::max(o.profile, 3);
      node_ms = r.node_times_ms(passes);
      if (o.profile > 0) print_sequential_profile(g, r, node_ms, passes, set.math);
    }
    row.peak_mib = double(r.peak_bytes()) / (1 << 20);
    rows.write(set, row);
  }
  return node_ms;
}

// The schedules of --algo on 1 to --gpus GPUs. Where the scheduler keeps everything on one GPU
// (it predicts the transfers cost more than they save), also the algorithm's own n-GPU
// mapping, so the table shows what spreading would have measured.
std::vector<std::pair<std::string, Schedule>> bench_schedules(const Graph& g, const BenchOptions& o, const CostModel& cost,
                                                              int n) {
  SchedulerOptions so;
  so.num_gpus = n;
  so.max_streams = o.streams;
  std::vector<std::pair<std::string, Schedule>> runs = {
      {strprintf("%s-%dgpu", o.algo.c_str(), n), run_algorithm(o.algo, g, cost, so)}};
  if (n > 1 && gpus_used(runs[0].second) < n) {
    so.single_gpu_fallback = false;
    runs.emplace_back(strprintf("%s-%dgpu-spread", o.algo.c_str(), n), run_algorithm(o.algo, g, cost, so));
  }
  return runs;
}

// Every schedule row: each schedule in each launch order and CUDA Graph mode, in process.
void time_schedule_rows(const Graph& g, const BenchOptions& o, const RowSetting& set, const std::vector<bool>& modes,
                        const std::vector<std::string>& orders, const std::vector<double>& node_ms,
                        const std::vector<float>& ref, RowWriter& rows) {
  auto cost = o.cost_name == "analytic" ? make_analytic_cost_model(find_device_preset("h200"))
                                        : load_profile_cost_model(o.cost_name);
  for (int n = 1; n <= std::min(o.gpus, cuda::device_count()); ++n) {
    for (const auto& [name, s] : bench_schedules(g, o, *cost, n)) {
      const double predicted = simulate(g, s, *cost).latency_ms;
      for (const std::string& order_name : orders) {
        const std::string variant = (order_name == "topo" ? name : name + "-" + order_name) + set.suffix();
        exec::LaunchOrder order;
        if (order_name == "opara") order = exec::opara_order(g);
        if (order_name == "measured") {
          order = exec::measured_order(g, node_ms, find_device_preset("h200"), math_stores_16_bit(set.math));
          std::fprintf(stderr, "# %s: %s\n", variant.c_str(), exec::launch_order_summary(order).c_str());
        }
        for (bool graph : modes) {
          cuda::InProcessOptions io;
          io.launch_order = order;
          io.math = set.math;
          io.layout = set.layout;
          io.fold_relu = set.fold;
          io.cuda_graph = graph;
          io.warmup = o.warmup;
          io.iters = o.iters;
          const cuda::InProcessResult r = cuda::run_schedule_in_process(g, s, io);
          Row row;
          row.variant = variant;
          row.gpus = n;
          row.cuda_graph = graph;
          row.timing = r.timing;
          for (size_t b : r.peak_bytes) row.peak_mib = std::max(row.peak_mib, double(b) / (1 << 20));
          row.err = rel_error(r.output, ref);
          row.streams = r.compute_streams;
          row.transfers = r.transfers;
          row.predicted = predicted;
          rows.write(set, row);
        }
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Time one model on this machine's GPUs (hios sequential, one-GPU and two-GPU schedules)"};
  BenchOptions o;
  add_bench_options(app, o);
  CLI11_PARSE(app, argc, argv);

  try {
    HIOS_CHECK(cuda::device_count() > 0, "no CUDA device visible");
    // Every bad list item named in one line before anything runs.
    const std::vector<std::string> maths = comma_list(o.maths), orders = comma_list(o.launch_orders);
    HIOS_CHECK(!maths.empty(), "--math: no math mode given");
    for (const std::string& m : orders) (void)exec::parse_launch_order(m);
    for (const std::string& m : maths) (void)cuda::parse_math_mode(m);
    const bool want_node_times = std::find(orders.begin(), orders.end(), "measured") != orders.end();
    const std::vector<std::string> layouts =
        o.layouts == "both" ? std::vector<std::string>{"nchw", "nhwc"} : std::vector<std::string>{o.layouts};
    std::vector<bool> folds, modes;
    if (o.relu_fold != "off") folds.push_back(true);
    if (o.relu_fold != "on") folds.push_back(false);
    if (o.graph_mode != "off") modes.push_back(true);
    if (o.graph_mode != "on") modes.push_back(false);

    const Graph g = build_model(o.model, ModelParams{o.batch, o.size, o.size});
    RowWriter rows(o, g.height);
    // Every row's error is against the first sequential run (NCHW when both layouts run), so
    // the NHWC rows also show how far channels-last lands from channels-first.
    std::vector<float> ref;
    for (const std::string& math : maths) {
      for (const std::string& layout : layouts) {
        for (bool fold : folds) {
          const RowSetting set{math, layout, fold};
          const std::vector<double> node_ms = time_sequential_rows(g, o, set, modes, want_node_times, ref, rows);
          if (!o.algo.empty()) time_schedule_rows(g, o, set, modes, orders, node_ms, ref, rows);
        }
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hios-gpu-bench: error: %s\n", e.what());
    return 2;
  }
  return 0;
}
