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
#include <fstream>

#include "executor/cuda/api.hpp"
#include "graph/error.hpp"
#include "graph/json_reader.hpp"
#include "models/models.hpp"
#include "scheduler/algorithms.hpp"
#include "scheduler/cost_model.hpp"

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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Time one model on this machine's GPUs (hios sequential, one-GPU and two-GPU schedules)"};
  std::string model = "inception_v3", math = "tf32", algo = "hios-lp", json_file, graph_mode = "on";
  int size = 0, warmup = 10, iters = 30, gpus = 2, streams = 4;
  bool summary = false;
  app.add_option("--model", model, "model name (hios models)");
  app.add_option("--size", size, "square input resolution (0: the model's default)");
  app.add_option("--math", math, "tf32 or fp32")->check(CLI::IsMember({"tf32", "fp32"}));
  app.add_option("--cuda-graph", graph_mode, "on: capture and replay; off: issue every pass; both")
      ->check(CLI::IsMember({"on", "off", "both"}));
  app.add_option("--warmup", warmup, "untimed passes");
  app.add_option("--iters", iters, "timed passes (the median is reported)");
  app.add_option("--algo", algo, "schedule for the multi-stream and multi-GPU rows ('' for none)");
  app.add_option("--gpus", gpus, "most GPUs for the schedule rows (1 or 2)");
  app.add_option("--streams", streams, "most concurrent streams per GPU for the schedule");
  app.add_option("--json", json_file, "append one JSON object per row to this file");
  app.add_flag("--summary", summary, "print the chosen cuDNN algorithms and memory");
  CLI11_PARSE(app, argc, argv);

  try {
    HIOS_CHECK(cuda::device_count() > 0, "no CUDA device visible");
    const Graph g = build_model(model, ModelParams{1, size, size});
    const int64_t res = g.height;
    std::ofstream jout;
    if (!json_file.empty()) jout.open(json_file, std::ios::app);
    auto emit = [&](const std::string& variant, int ngpus, bool graph, const cuda::TimingResult& t, double peak_mib,
                    double err, int nstreams, int transfers) {
      std::printf("%-14s %-22s %5lld  %d  %-4s %-5s %9.3f %9.3f %9.3f %10.1f  %-9s %3d %5d\n", model.c_str(),
                  variant.c_str(), (long long)res, ngpus, math.c_str(), graph ? "graph" : "eager", t.median_ms,
                  t.min_ms, t.max_ms, peak_mib, std::isnan(err) ? "n/a" : strprintf("%.2e", err).c_str(), nstreams,
                  transfers);
      std::fflush(stdout);
      if (!jout.is_open()) return;
      json j = {{"impl", "hios"},       {"variant", variant},    {"model", model},          {"size", res},
                {"gpus", ngpus},        {"math", math},          {"cuda_graph", graph},     {"median_ms", t.median_ms},
                {"min_ms", t.min_ms},   {"max_ms", t.max_ms},    {"peak_mib", peak_mib},    {"streams", nstreams},
                {"transfers", transfers}, {"iters", int(t.samples_ms.size())},
                {"device", cuda::device_description(0)}};
      if (!std::isnan(err)) j["rel_err_vs_sequential"] = err;
      jout << j.dump() << "\n";
      jout.flush();
    };

    std::vector<bool> modes;
    if (graph_mode != "off") modes.push_back(true);
    if (graph_mode != "on") modes.push_back(false);
    std::vector<float> ref;
    for (bool graph : modes) {
      cuda::SingleGpuOptions o;
      o.math = cuda::parse_math_mode(math);
      o.cuda_graph = graph;
      cuda::SingleGpuRunner r(g, o);
      const cuda::TimingResult t = r.time(warmup, iters);
      if (ref.empty()) ref = r.output();
      if (summary) std::fputs(r.summary().c_str(), stderr);
      emit("sequential", 1, graph, t, double(r.peak_bytes()) / (1 << 20), NAN, 1, 0);
    }
    if (!algo.empty()) {
      auto cost = make_analytic_cost_model(find_device_preset("h200"));
      for (int n = 1; n <= std::min(gpus, cuda::device_count()); ++n) {
        SchedulerOptions so;
        so.num_gpus = n;
        so.max_streams = streams;
        const Schedule s = run_algorithm(algo, g, *cost, so);
        for (bool graph : modes) {
          cuda::InProcessOptions io;
          io.math = math;
          io.cuda_graph = graph;
          io.warmup = warmup;
          io.iters = iters;
          const cuda::InProcessResult r = cuda::run_schedule_in_process(g, s, io);
          size_t peak = 0;
          for (size_t b : r.peak_bytes) peak = std::max(peak, b);
          emit(strprintf("%s-%dgpu", algo.c_str(), n), n, graph, r.timing, double(peak) / (1 << 20),
               rel_error(r.output, ref), r.compute_streams, r.transfers);
        }
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hios-gpu-bench: error: %s\n", e.what());
    return 2;
  }
  return 0;
}
