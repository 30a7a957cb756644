// Schedule inspection subcommands: check, show, trace.
#include <cstdio>
#include <memory>
#include <vector>

#include "cli/commands.hpp"
#include "graph/error.hpp"
#include "graph/json_codec.hpp"
#include "scheduler/concurrency_fit.hpp"
#include "scheduler/cost_model.hpp"
#include "scheduler/preset_fit.hpp"
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

namespace {

struct FitPresetOptions {
  std::vector<std::string> graphs, dbs;
  std::string base = "h200", name, description, devices, output, report, node_time = "auto";
  double peak_tflops = 0, mem_bandwidth_gbs = 0;
};

// Which time of `db` a fit uses: --node-time, where "auto" takes the kernel busy times when the
// database has them (hios profile's CUPTI pass) and the wall times otherwise (hios tune).
NodeTime node_time_of(const std::string& choice, const ProfileDb& db, const std::string& path) {
  bool has_kernels = false;
  for (const ProfileEntry& e : db.entries) has_kernels = has_kernels || e.kernel_ms > 0;
  if (choice == "wall" || (choice == "auto" && !has_kernels)) return NodeTime::Wall;
  HIOS_CHECK(has_kernels, "fit-preset: %s has no kernel busy times (measured without CUPTI); pass --node-time wall",
             path.c_str());
  return NodeTime::Kernels;
}

// `hios fit-preset`: the analytic model's numbers for this device, from what hios profile or
// hios tune measured on it (scheduler/preset_fit.hpp).
void add_fit_preset_command(CLI::App& app) {
  auto o = std::make_shared<FitPresetOptions>();
  CLI::App* cmd = app.add_subcommand(
      "fit-preset", "Fit a device preset of the analytic model to measured node times (profile databases)");
  cmd->add_option("--graph,-g", o->graphs, "Graph JSON, once per --profile-db, in the same order")->required();
  cmd->add_option("--profile-db", o->dbs, "Profile database (hios profile or hios tune) measured on the device")
      ->required();
  cmd->add_option("--base", o->base, "Preset whose rates and SM count it starts from (default h200)");
  cmd->add_option("--devices", o->devices, "Device presets file to find --base in (default: the built-in one)");
  cmd->add_option("--name", o->name, "Name of the fitted preset (default: --base)");
  cmd->add_option("--description", o->description, "Its description (default: what it was fitted to)");
  cmd->add_option("--peak-tflops", o->peak_tflops, "Override the convolutions' peak rate, e.g. 989 for bf16")
      ->check(finite_range(0.0, 1e6, true));
  cmd->add_option("--mem-bandwidth-gbs", o->mem_bandwidth_gbs,
                  "Override the memory bandwidth; for 16-bit storage twice the device's, since byte counts are fp32")
      ->check(finite_range(0.0, 1e7, true));
  cmd->add_option("--output,-o", o->output, "Devices file to write (atomically), for --devices")->required();
  cmd->add_option("--node-time", o->node_time,
                  "kernels: fit to each node's CUPTI kernel busy time, what it costs inside a CUDA Graph (the CUDA "
                  "backend's default); wall: to the event-timed eager node, launches included; auto: kernels where "
                  "a database measured them (hios profile), wall otherwise (default auto)")
      ->check(CLI::IsMember({"auto", "kernels", "wall"}));
  cmd->add_option("--report", o->report,
                  "Also write every measured node's time beside the base and fitted estimates (TSV), to see where the model misses");
  cmd->footer(
      "Fits conv, depthwise, gemm and memory efficiencies and the launch overhead to every node the\n"
      "databases measured; takes the links and the fitted stage concurrency from them too.\n"
      "docs/cost-model.md, \"Fitting a preset\", has the method.\n\n"
      "Example:\n"
      "  hios fit-preset --graph inc.json --profile-db inc.db.json --base h100 --name h100-mine -o mine.json\n"
      "  hios schedule --graph inc.json --gpus 2 --device h100-mine --devices mine.json -o s.json\n");
  cmd->callback([o] {
    HIOS_CHECK(o->graphs.size() == o->dbs.size(), "fit-preset: %zu --graph but %zu --profile-db; give one graph per database",
               o->graphs.size(), o->dbs.size());
    DevicePreset base = find_device_preset(o->base, o->devices);
    if (o->peak_tflops > 0) base.peak_tflops = o->peak_tflops;
    if (o->mem_bandwidth_gbs > 0) base.mem_bandwidth_gbs = o->mem_bandwidth_gbs;
    std::vector<Graph> graphs;
    graphs.reserve(o->graphs.size());  // samples point into it
    std::vector<PresetSample> samples;
    std::vector<ProfileDb> dbs;  // their links
    json concurrency = nullptr;
    std::string concurrency_from;
    for (size_t i = 0; i < o->graphs.size(); ++i) {
      graphs.push_back(load_graph(o->graphs[i]));
      ProfileDb db = load_profile_db(o->dbs[i]);
      const std::vector<PresetSample> s = preset_samples(graphs.back(), db, node_time_of(o->node_time, db, o->dbs[i]));
      HIOS_CHECK(!s.empty(), "fit-preset: %s measured no node of %s (another graph's database?)", o->dbs[i].c_str(),
                 o->graphs[i].c_str());
      samples.insert(samples.end(), s.begin(), s.end());
      if (concurrency.is_null() && !db.concurrency.is_null()) {
        concurrency = db.concurrency;
        concurrency_from = o->dbs[i];
      }
      dbs.push_back(std::move(db));
    }
    PresetFit fit = fit_device_preset(base, samples);
    DevicePreset& p = fit.preset;
    p.name = o->name.empty() ? o->base : o->name;
    p = with_measured_links(p, dbs);
    if (!concurrency.is_null()) p = apply_concurrency_fit(p, concurrency_fit_from_json(concurrency, concurrency_from + ": concurrency"));
    p.description = o->description.empty()
                        ? strprintf("fitted by hios fit-preset from %d measured nodes (base %s)", fit.samples, o->base.c_str())
                        : o->description;
    const json file = json{{"format", "hios-devices"}, {"version", 1}, {"devices", json::array({device_preset_to_json(p)})}};
    (void)device_presets_from_json(file, "fitted preset");  // what --devices will read back
    write_output(o->output, file.dump(2) + "\n");
    std::FILE* report = is_stdout(o->output) ? stderr : stdout;  // -o -: the file is standard output
    std::fprintf(report, "fitted %s to %d nodes: weighted mean node error %.1f%% -> %.1f%%\n", p.name.c_str(), fit.samples,
                100 * fit.error_before, 100 * fit.error_after);
    std::fprintf(report, "  conv %.3f (wider filters %.3f), depthwise %.3f, gemm %.3f, memory %.3f, launch %.2f us; links %.1f us + bytes / %.1f GB/s; "
                "alpha %.3f, stage overhead %.2f us\n",
                p.conv_efficiency, spatial_conv_efficiency(p), p.depthwise_efficiency, p.gemm_efficiency, p.memory_efficiency, p.launch_overhead_us,
                p.link_latency_us, p.link_bandwidth_gbs, p.alpha, p.stage_overhead_us);
    if (!is_stdout(o->output)) std::printf("wrote %s\n", o->output.c_str());
    if (!o->report.empty()) {
      write_output(o->report, preset_fit_report(base, p, samples));
      std::printf("wrote %s\n", o->report.c_str());
    }
  });
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

  add_fit_preset_command(app);
}

}  // namespace hios::cli
