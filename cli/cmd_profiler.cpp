// `hios profile`: measure a graph on this machine's GPUs and write the profile database that
// `hios schedule --cost FILE` reads.
#include <cstdio>
#include <memory>

#include "cli/commands.hpp"
#include "graph/error.hpp"
#include "graph/json_codec.hpp"
#include "profiler/gpu_profiler.hpp"
#include "profiler/profile_builder.hpp"
#include "scheduler/schedule.hpp"

namespace hios::cli {

namespace {

struct ProfileCliOptions {
  std::string graph, output, device, math = "tf32", layout = "nhwc", conv_search = "quick", stages;
  int gpus = 1, warmup = 3, iters = 20, link_iters = 20;
  bool no_cupti = false;
};

}  // namespace

void add_profiler_commands(CLI::App& app) {
  auto o = std::make_shared<ProfileCliOptions>();
  CLI::App* cmd = app.add_subcommand("profile", "Measure a graph's nodes, links and stages on this machine's GPUs");
  cmd->add_option("--graph,-g", o->graph, "Graph JSON")->required();
  cmd->add_option("--output,-o", o->output, "Profile database to write (atomically)")->required();
  cmd->add_option("--gpus", o->gpus, "GPUs whose links to time (nodes and stages run on GPU 0; default 1)");
  cmd->add_option("--device", o->device,
                  "Device preset the database belongs to (default: from the GPU's name, e.g. h200)");
  cmd->add_option("--math", o->math, "tf32, fp32, fp16 or bf16, as hios run --math (default tf32)")
      ->check(CLI::IsMember({"tf32", "fp32", "fp16", "bf16"}));
  cmd->add_option("--layout", o->layout, "nchw or nhwc, as hios run --layout (default nhwc)")
      ->check(CLI::IsMember({"nchw", "nhwc"}));
  cmd->add_option("--conv-search", o->conv_search, "quick or wide, as hios run --conv-search (default quick)")
      ->check(CLI::IsMember({"quick", "wide"}));
  cmd->add_option("--warmup", o->warmup, "Untimed passes first (default 3)");
  cmd->add_option("--iters", o->iters, "Timed passes per node and per stage (default 20)");
  cmd->add_option("--link-iters", o->link_iters, "Timed transfers per size and GPU pair (default 20)");
  cmd->add_option("--stages", o->stages, "Also time the multi-stream stages of this one-GPU schedule");
  cmd->add_flag("--no-cupti", o->no_cupti, "Skip the CUPTI pass (kernel busy times)");
  cmd->footer(
      "Nodes: each node alone on one stream in a sequential pass (CUDA events for wall time, CUPTI\n"
      "for kernel busy time), pooled by signature. Links: NCCL transfers of 4 KiB..64 MiB per GPU\n"
      "pair, fitted to latency + bytes/bandwidth. Stages: fork to join on concurrent streams.\n"
      "docs/profiler.md has the method; docs/cost-model.md the database format.\n\n"
      "Example:\n"
      "  hios profile --graph inception.json --gpus 2 -o inception.profile.json\n"
      "  hios schedule --graph inception.json --algo hios-lp --gpus 2 --cost inception.profile.json -o s.json\n");
  cmd->callback([o] {
    Graph g = load_graph(o->graph);  // replaced by the split graph when --stages splits rows
    std::unique_ptr<Schedule> stages;
    if (!o->stages.empty()) stages = std::make_unique<Schedule>(load_schedule(g, o->stages));
    prof::ProfileOptions opt;
    opt.gpus = o->gpus;
    opt.device = o->device;
    opt.math = o->math;
    opt.layout = o->layout;
    opt.conv_search = o->conv_search;
    opt.warmup = o->warmup;
    opt.iters = o->iters;
    opt.link_iters = o->link_iters;
    opt.cupti = !o->no_cupti;
    opt.stages = stages.get();
    prof::ProfileReport rep;
    const ProfileDb db = prof::profile_gpus(g, opt, &rep);
    if (is_stdout(o->output)) {
      write_output(o->output, profile_db_to_text(db));
    } else {
      save_profile_db(db, o->output);
    }
    std::FILE* report = is_stdout(o->output) ? stderr : stdout;  // -o -: the database is standard output
    std::fprintf(report, "profiled %s on %s\n", g.name.c_str(), rep.gpu.c_str());
    std::fprintf(report, "  device preset          %s (math %s)\n", db.device.c_str(), o->math.c_str());
    std::fprintf(report, "  node signatures        %zu (of %d nodes)\n", db.entries.size(), g.size() - 1);
    std::fprintf(report, "  sum of node times      %.4f ms (events)\n", rep.sequential_sum_ms);
    if (rep.kernel_sum_ms >= 0) std::fprintf(report, "  sum of kernel time     %.4f ms (CUPTI)\n", rep.kernel_sum_ms);
    // How many kernels a pass launches: what fusing epilogues into convolutions reduces.
    if (rep.kernels_per_pass >= 0) {
      std::fprintf(report, "  kernels per pass       %lld (CUPTI: kernels, copies, memsets)\n", (long long)rep.kernels_per_pass);
    }
    for (size_t i = 0; i < db.links.size(); ++i) {
      const ProfileLink& l = db.links[i];
      std::fprintf(report, "  link GPU %d -> GPU %d    %.1f us + bytes / %.1f GB/s (worst fit error %.0f%%)\n", l.src, l.dst,
                  l.latency_us, l.bandwidth_gbs, 100.0 * rep.link_max_rel_residual[i]);
    }
    if (opt.stages) std::fprintf(report, "  stages measured        %d\n", rep.stages_measured);
    if (!is_stdout(o->output)) std::printf("wrote %s\n", o->output.c_str());
  });
}

}  // namespace hios::cli
