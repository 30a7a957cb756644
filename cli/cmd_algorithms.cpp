// Scheduling subcommands: schedule (run one algorithm on a graph file) and simulate-random (the
// HIOS random-DAG study).
#include <chrono>
#include <cstdio>
#include <memory>

#include "cli/commands.hpp"
#include "graph/error.hpp"
#include "graph/json_codec.hpp"
#include "scheduler/algorithms.hpp"
#include "scheduler/cost_model.hpp"
#include "scheduler/random_dag.hpp"
#include "scheduler/schedule.hpp"
#include "scheduler/spatial.hpp"

namespace hios::cli {

namespace {

struct ScheduleCmd {
  std::string graph, algo = "hios-lp", cost = "analytic", device, devices, output;
  SchedulerOptions opt;
  SpatialOptions spatial;
};

struct RandomCmd {
  RandomDagParams p;
  int seeds = 10;
  std::vector<int> gpus{2, 4, 8};
  std::string csv;
  SchedulerOptions opt;
};

void add_search_options(CLI::App* cmd, SchedulerOptions& opt) {
  cmd->add_option("--window", opt.window, "Sliding-window size w of the intra-GPU pass (hios-lp, hios-mr; 0 to 16; 0 or 1: off)")
      ->capture_default_str();
  cmd->add_option("--streams", opt.max_streams, "Most concurrent groups (streams) k in one stage")->capture_default_str();
  cmd->add_option("--ios-r", opt.ios_max_group, "IOS pruning r: most nodes in one group")->capture_default_str();
  cmd->add_option("--ios-s", opt.ios_max_groups, "IOS pruning s: most groups in one stage")->capture_default_str();
  cmd->add_option("--ios-max-states", opt.ios_max_states,
                  "IOS work cap (DP states) per block part; beyond it the part is solved in halves")
      ->capture_default_str();
  cmd->add_option("--lanes", opt.link_lanes,
                  "Transfers one GPU pair carries at once: each lane is an NCCL communicator on its own streams, "
                  "and a pair's transfers take the lanes in turn (1 to 8)")
      ->check(CLI::Range(1, kMaxLinkLanes))
      ->capture_default_str();
  // Both extra steps are on by default; turning them off gives HIOS's algorithms as published
  // (tests use this to force a multi-GPU placement on graphs too small to need one).
  cmd->add_flag("!--no-intra-ios", opt.intra_ios,
                "Skip the IOS re-packing of each GPU's stages after the mapping (hios-lp, hios-mr, heft)");
  cmd->add_flag("!--no-single-gpu-fallback", opt.single_gpu_fallback,
                "Keep the multi-GPU mapping even when all-on-GPU-0 is predicted faster");
}

}  // namespace

void add_algorithm_commands(CLI::App& app) {
  // schedule
  auto so = std::make_shared<ScheduleCmd>();
  std::string algos;
  for (const std::string& n : algorithm_names()) algos += (algos.empty() ? "" : ", ") + n;
  CLI::App* sched = app.add_subcommand("schedule", "Schedule a graph across GPUs and streams with one algorithm");
  sched->add_option("--graph,-g", so->graph, "Graph JSON (from 'hios graph')")->required();
  sched->add_option("--algo,-a", so->algo, "Algorithm: " + algos)->capture_default_str();
  sched->add_option("--gpus", so->opt.num_gpus, "Number of GPUs")->capture_default_str();
  sched->add_option("--cost", so->cost, "'analytic' or a profile database JSON")->capture_default_str();
  sched->add_option("--device", so->device, "Device preset of the analytic model (default h200)");
  sched->add_option("--devices", so->devices, "Device presets file (default: the built-in schedules/devices.json)");
  add_search_options(sched, so->opt);
  so->opt.time_budget_s = 60;
  sched->add_option("--time-budget", so->opt.time_budget_s,
                    "Seconds the search may take, 0 to 1e6 (0: no limit); past it every phase keeps what it has "
                    "(meta.params.budget says which were cut)")
      ->check(finite_range(0, 1e6))
      ->capture_default_str();
  sched->add_option("--spatial", so->spatial.spatial,
                    "Row splits across GPUs (docs/row-splits.md): off, auto (split a region's rows when that is "
                    "predicted faster), or a number of parts P (split every region that can be split P ways)")
      ->capture_default_str();
  sched->add_option("--spatial-mode", so->spatial.mode,
                    "How a split part gets its neighbours' boundary rows: halo (sent), halo-overlap (sent, each part's middle rows computed while its halos move), recompute "
                    "(computed again), mixed (computed again between sync points, sent at them: every 1, 2 or 4 blocks, and where the halo is cheapest), mixed-cost (only the last), or auto (all but halo-overlap tried)")
      ->capture_default_str();
  sched->add_option("--output,-o", so->output, "Schedule JSON to write (default: stdout, summary on stderr)");
  sched->footer(
      "Example:\n"
      "  hios graph --model inception_v3 --height 1024 --width 1024 -o inception.json\n"
      "  hios schedule --graph inception.json --algo hios-lp --gpus 2 --cost analytic --device h200 -o s.json\n"
      "  hios schedule --graph inception.json --algo hios-lp --gpus 2 --spatial auto -o split.json\n");
  sched->callback([so] {
    // Long phases report once a second on stderr (big graphs); a model's search is silent.
    so->opt.progress = [](const std::string& line) {
      std::fprintf(stderr, "hios schedule: %s\n", line.c_str());
      std::fflush(stderr);
    };
    check_spatial_options(so->spatial);
    const Graph source = load_graph(so->graph);
    std::unique_ptr<CostModel> cost = make_cost_model(so->cost, so->device, so->devices);
    // With --spatial the schedule may be for a split graph (its parts are nodes); the summary
    // and the sequential baseline stay those of the graph the user passed.
    SpatialSchedule split = schedule_spatial(so->algo, source, *cost, so->opt, so->spatial);
    const Graph& g = split.graph;
    const Schedule& s = split.schedule;
    // The baseline every speed-up is quoted against: one GPU, one stream.
    Schedule seq = schedule_sequential(source, *cost, so->opt);
    std::string summary = strprintf(
        "%s on %s (batch %lld, %lldx%lld), %d GPU%s, %s %s\n"
        "  predicted latency  %10.4f ms\n"
        "  lower bound        %10.4f ms\n"
        "  sequential         %10.4f ms  (speed-up %.3fx)\n"
        "  search time        %10.4f s\n"
        "  stages %d, transfers %zu\n",
        s.meta.algorithm.c_str(), g.name.c_str(), (long long)g.batch, (long long)g.height, (long long)g.width,
        so->opt.num_gpus, so->opt.num_gpus == 1 ? "" : "s", cost->name().c_str(), cost->device().c_str(),
        s.meta.predicted_ms, s.meta.lower_bound_ms, seq.meta.predicted_ms,
        s.meta.predicted_ms > 0 ? seq.meta.predicted_ms / s.meta.predicted_ms : 0.0, s.meta.search_seconds,
        s.num_stages(), s.transfers.size());
    if (s.meta.link_lanes > 1 && !s.transfers.empty()) {
      summary += strprintf("  link lanes %d (a GPU pair carries %d transfers at once)\n", s.meta.link_lanes,
                           s.meta.link_lanes);
    }
    if (so->spatial.spatial != "off") summary += "  spatial: " + split.summary + "\n";
    if (s.meta.params.contains("capped_parts") && s.meta.params["capped_parts"].get<int>() > 0) {
      summary += strprintf("  ios hit its state cap on %d part(s), split in halves (%d) or greedy (%d): %s\n",
                           s.meta.params["capped_parts"].get<int>(), s.meta.params["split_parts"].get<int>(),
                           s.meta.params["greedy_parts"].get<int>(), s.meta.params["fallback"].dump().c_str());
    }
    if (s.meta.params.contains("budget")) {
      summary += strprintf("  the %g s time budget ran out; cut short: %s (meta.params.budget)\n",
                           so->opt.time_budget_s, s.meta.params["budget"]["cut"].dump().c_str());
    }
    if (so->output.empty() || so->output == "-") {
      write_output("", schedule_to_text(g, s));
      std::fputs(summary.c_str(), stderr);
    } else {
      save_schedule(g, s, so->output);
      std::fputs(summary.c_str(), stdout);
      std::printf("wrote %s\n", so->output.c_str());
    }
  });

  // simulate-random
  auto ro = std::make_shared<RandomCmd>();
  CLI::App* sim = app.add_subcommand(
      "simulate-random", "HIOS's random-DAG study: mean simulated latency of every algorithm over random layered DAGs");
  sim->add_option("--nodes", ro->p.nodes, "Nodes per DAG")->capture_default_str();
  sim->add_option("--edges", ro->p.edges, "Edges per DAG")->capture_default_str();
  sim->add_option("--layers", ro->p.layers, "Layers (edges go to later layers only)")->capture_default_str();
  sim->add_option("--min-weight", ro->p.min_weight, "Smallest node time, ms")->capture_default_str();
  sim->add_option("--max-weight", ro->p.max_weight, "Largest node time, ms")->capture_default_str();
  sim->add_option("--ccr", ro->p.ccr, "Communication-to-computation ratio")->capture_default_str();
  sim->add_option("--alpha", ro->p.alpha, "Stage model: alpha * sum + (1 - alpha) * contended")->capture_default_str();
  sim->add_option("--seeds", ro->seeds, "Number of DAGs (seeds seed, seed+1, ...) to average over")
      ->capture_default_str();
  sim->add_option("--seed", ro->p.seed, "First seed")->capture_default_str();
  sim->add_option("--gpus", ro->gpus, "GPU counts, comma separated")->delimiter(',')->capture_default_str();
  add_search_options(sim, ro->opt);
  sim->add_option("--csv", ro->csv, "Also write the rows as CSV to this file");
  sim->footer("Example:\n  hios simulate-random --nodes 200 --edges 400 --layers 8 --ccr 0.5 --seeds 10 --gpus 2,4,8 "
              "--csv random.csv\n");
  sim->callback([ro] {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<RandomDagRow> rows = run_random_dag_experiment(ro->p, ro->seeds, ro->gpus, ro->opt, [&](int k, int n) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::fprintf(stderr, "hios simulate-random: [%7.1f s] DAG %d of %d done, about %.0f s left\n", s, k, n,
                   s / k * (n - k));
      std::fflush(stderr);
    });
    std::printf("random layered DAGs: %d nodes, %d edges, %d layers, weights U[%g, %g] ms, CCR %g, alpha %g\n",
                ro->p.nodes, ro->p.edges, ro->p.layers, ro->p.min_weight, ro->p.max_weight, ro->p.ccr, ro->p.alpha);
    std::printf("mean simulated latency in ms over %d seeds (%llu..%llu); window %d, streams %d\n", ro->seeds,
                (unsigned long long)ro->p.seed, (unsigned long long)(ro->p.seed + ro->seeds - 1), ro->opt.window,
                ro->opt.max_streams);
    std::fputs(random_dag_table(rows).c_str(), stdout);
    if (!ro->csv.empty()) {
      write_output(ro->csv, random_dag_csv(rows));
      std::printf("wrote %s\n", ro->csv.c_str());
    }
  });
}

}  // namespace hios::cli
