// Schedule inspection subcommands: check, show, trace.
#include <cstdio>
#include <memory>

#include "cli/commands.hpp"
#include "graph/error.hpp"
#include "graph/json_codec.hpp"
#include "scheduler/cost_model.hpp"
#include "graph/row_split.hpp"
#include "scheduler/schedule.hpp"
#include "scheduler/simulator.hpp"

namespace hios::cli {

namespace {

struct ScheduleOptions {
  std::string graph;
  std::string schedule;
  std::string cost;  // empty: no simulation (show) or "analytic" (trace)
  std::string device;
  std::string devices;
  std::string output;
};

void add_cost_options(CLI::App* cmd, ScheduleOptions& o) {
  cmd->add_option("--device", o.device, "Device preset of the analytic model (h200, h100, a100, v100; default h200)");
  cmd->add_option("--devices", o.devices, "Device presets file replacing the built-in schedules/devices.json");
}

}  // namespace

void add_scheduler_commands(CLI::App& app) {
  // check
  auto copt = std::make_shared<ScheduleOptions>();
  CLI::App* check = app.add_subcommand("check", "Check a schedule against its graph and list every violation");
  check->add_option("--graph,-g", copt->graph, "Graph JSON the schedule was made for")->required();
  check->add_option("--schedule,-s", copt->schedule, "Schedule JSON")->required();
  check->footer(
      "Prints 'ok', or every violation on stdout (one per line) and exits with 2.\n\n"
      "Example:\n  hios check --graph inception.json --schedule inception.hios-lp.json\n");
  check->callback([copt] {
    const Graph source = load_graph(copt->graph);
    Graph g = source;
    Schedule s = load_schedule(g, copt->schedule);  // a row split's coverage and halos are checked here
    std::vector<std::string> problems = check_schedule(g, s);
    if (problems.empty()) {
      std::printf("%s: ok (%d nodes on %d GPU%s in %d stages, %zu transfers)\n", copt->schedule.c_str(), g.size() - 1,
                  s.meta.num_gpus, s.meta.num_gpus == 1 ? "" : "s", s.num_stages(), s.transfers.size());
      if (!s.meta.spatial.is_null()) {
        const SpatialPlan plan = spatial_from_json(json{{"regions", s.meta.spatial["regions"]}}, "meta.spatial");
        std::printf("%s%s\n", describe_spatial(source, plan).c_str(), split_graph_stats(g).c_str());
      }
      return;
    }
    for (const std::string& p : problems) std::printf("%s\n", p.c_str());
    std::fflush(stdout);
    throw Error(strprintf("%s: %zu violation%s (first: %s)", copt->schedule.c_str(), problems.size(),
                          problems.size() == 1 ? "" : "s", problems[0].c_str()));
  });

  // show
  auto sopt = std::make_shared<ScheduleOptions>();
  CLI::App* show = app.add_subcommand("show", "Print a schedule per block, GPU and stage (and simulated times)");
  show->add_option("schedule", sopt->schedule, "Schedule JSON")->required();
  show->add_option("--graph,-g", sopt->graph, "Graph JSON the schedule was made for")->required();
  show->add_option("--cost", sopt->cost,
                   "Also simulate: 'analytic' or a profile database JSON (then the schedule must be valid)");
  add_cost_options(show, *sopt);
  show->footer(
      "Example:\n  hios show inception.hios-lp.json --graph inception.json\n"
      "  hios show inception.hios-lp.json --graph inception.json --cost analytic --device h100\n");
  show->callback([sopt] {
    Graph g = load_graph(sopt->graph);
    Schedule s = load_schedule(g, sopt->schedule);
    if (sopt->cost.empty()) {
      HIOS_CHECK(sopt->device.empty() && sopt->devices.empty(), "--device and --devices need --cost");
      write_output("", schedule_to_pretty(g, s));
      return;
    }
    require_valid_schedule(g, s);
    auto cost = make_cost_model(sopt->cost, sopt->device, sopt->devices);
    std::string label = cost->name() + " (" + cost->device() + ")";
    write_output("", schedule_to_pretty(g, s, simulate(g, s, *cost), label));
  });

  // trace
  auto topt = std::make_shared<ScheduleOptions>();
  CLI::App* trace = app.add_subcommand("trace", "Simulate a schedule and write a Chrome trace (opens in Perfetto)");
  trace->add_option("--graph,-g", topt->graph, "Graph JSON the schedule was made for")->required();
  trace->add_option("--schedule,-s", topt->schedule, "Schedule JSON")->required();
  trace->add_option("--cost", topt->cost, "'analytic' (default) or a profile database JSON");
  add_cost_options(trace, *topt);
  trace->add_option("--output,-o", topt->output, "Output file (default: stdout)");
  trace->footer(
      "One process per GPU (a thread for the stages, one per stream) and one 'links' process with a\n"
      "thread per directed GPU pair. Open the file at https://ui.perfetto.dev.\n\n"
      "Example:\n  hios trace --graph inception.json --schedule inception.hios-lp.json --cost analytic --device h200 "
      "-o trace.json\n");
  trace->callback([topt] {
    Graph g = load_graph(topt->graph);
    Schedule s = load_schedule(g, topt->schedule);
    require_valid_schedule(g, s);
    auto cost = make_cost_model(topt->cost, topt->device, topt->devices);
    SimResult r = simulate(g, s, *cost);
    write_output(topt->output, sim_to_chrome_trace(g, s, r));
    if (!topt->output.empty() && topt->output != "-") {
      std::fprintf(stderr, "wrote %s: %zu nodes, %zu transfers, simulated latency %.4f ms under %s (%s)\n",
                   topt->output.c_str(), r.nodes.size(), r.transfers.size(), r.latency_ms, cost->name().c_str(),
                   cost->device().c_str());
    }
  });
}

}  // namespace hios::cli
