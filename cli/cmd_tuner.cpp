// `hios tune`: the fastest schedule for this machine, chosen by measurement in one MPI job
// (tuner/tune.hpp has the method).
#include <cstdio>
#include <memory>

#include "cli/commands.hpp"
#include "executor/comm.hpp"
#include "graph/error.hpp"
#include "graph/json_codec.hpp"
#include "scheduler/cost_model.hpp"
#include "scheduler/schedule.hpp"
#include "scheduler/spatial.hpp"
#include "tuner/tune.hpp"

namespace hios::cli {

namespace {

struct TuneCliOptions {
  std::string graph, output, devices, one_gpu_output;
  tune::TuneOptions tune;
  bool quiet = false;
};

}  // namespace

void add_tuner_commands(CLI::App& app) {
  auto o = std::make_shared<TuneCliOptions>();
  CLI::App* cmd = app.add_subcommand("tune", "Choose the fastest schedule by measuring it on this machine (run under mpirun)");
  cmd->add_option("--graph,-g", o->graph, "Graph JSON")->required();
  cmd->add_option("--gpus", o->tune.gpus, "GPUs, one MPI rank each (= mpirun -np), 1 to 1024")->required()->check(CLI::Range(1, 1024));
  cmd->add_option("--output,-o", o->output, "Schedule JSON to write (atomically), the fastest measured candidate")
      ->required();
  cmd->add_option("--backend", o->tune.session.backend, "cpu or cuda (default cpu)");
  cmd->add_option("--transport", o->tune.session.transport, "nccl, cuda-ipc, mpi-host or mpi-cuda-aware (default: on cuda, cuda-ipc where all ranks share one host and their GPUs reach each other, nccl otherwise; mpi-host on cpu)");
  cmd->add_option("--math", o->tune.session.math, "tf32, fp32, fp16 or bf16 (16-bit storage; cuda only) (default: tf32 on cuda, fp32 on cpu)");
  cmd->add_option("--layout", o->tune.session.layout, "nchw or nhwc: how activations are stored (default: nhwc on cuda, nchw on cpu; docs/benchmarks.md compares)")
      ->check(CLI::IsMember({"nchw", "nhwc"}));
  cmd->add_option("--conv-search", o->tune.session.conv_search,
                  "quick or wide: how many cuDNN engine configurations each convolution times (cuda only; wide times every one, tile variants of one engine included: more planning time, 3% faster ResNet segmentation networks in TF32) (default quick)")
      ->check(CLI::IsMember({"quick", "wide"}));
  cmd->add_option("--comm-priority", o->tune.session.comm_priority,
                  "high or normal: CUDA priority of the send and receive streams (default high)")
      ->check(CLI::IsMember({"high", "normal"}));
  cmd->add_option("--devices", o->devices, "GPU per node-local rank, e.g. 0,1 (default: the local rank)");
  cmd->add_option("--threads", o->tune.session.threads, "OpenMP threads per rank for the cpu backend, 0 to 1024")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--seed", o->tune.session.seed, "Seed of the deterministic weights and input");
  cmd->add_option("--device", o->tune.device,
                  "Device preset whose SM and bandwidth shares seed the stage model (default: from the GPU's name)");
  cmd->add_option("--profile-db", o->tune.profile_db,
                  "Profile database: reused when it exists and matches, extended, written back (atomically)");
  cmd->add_option("--profile-db-mismatch", o->tune.mismatch,
                  "A database from another device, driver, library or graph: refuse (default) or remeasure")
      ->check(CLI::IsMember({"refuse", "remeasure"}));
  cmd->add_option("--streams", o->tune.max_streams, "Most concurrent groups per stage in the searches (default 4)")
      ->check(CLI::Range(1, 16));
  cmd->add_option("--lanes", o->tune.link_lanes,
                  "Transfers one GPU pair carries at once in the multi-GPU searches: each lane is an NCCL "
                  "communicator on its own streams (default 1)")
      ->check(CLI::Range(1, kMaxLinkLanes));
  cmd->add_option("--warmup", o->tune.warmup, "Untimed passes per candidate (default 3)")->check(CLI::Range(0, 1000));
  cmd->add_option("--passes", o->tune.passes, "Timed passes per candidate, the median counts (default 20)")
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--node-iters", o->tune.node_iters, "Passes timing every node (default 10)")->check(CLI::Range(1, 10000));
  cmd->add_option("--stage-iters", o->tune.stage_iters, "Timed runs per stage measured (default 5)")
      ->check(CLI::Range(1, 10000));
  cmd->add_option("--link-iters", o->tune.link_iters, "Timed transfers per size and GPU pair (default 10)")
      ->check(CLI::Range(1, 10000));
  cmd->add_option("--stage-budget", o->tune.stage_budget_s,
                  "Seconds for measuring the stages the searches propose; past it the fitted model predicts "
                  "(default 40)")
      ->check(finite_range(0.0, 86400.0));
  cmd->add_option("--timeout", o->tune.timeout_s, "Abort the whole job after this many seconds (default: none)")
      ->check(finite_range(0.0, 1e7));
  cmd->add_option("--spatial", o->tune.spatial,
                  "Row splits across GPUs (docs/row-splits.md): auto (default: 2 to --gpus parts, any region), "
                  "a number of parts P, or off; split candidates are measured and timed beside the others")
      ->capture_default_str();
  cmd->add_option("--spatial-mode", o->tune.spatial_mode, "halo, halo-overlap, recompute, mixed, mixed-cost or auto (all but halo-overlap tried)")
      ->capture_default_str();
  cmd->add_option("--split-budget", o->tune.split_budget_s,
                  "Seconds for ranking and searching row-split plans, measuring excluded (default 20)")
      ->check(finite_range(0.0, 86400.0));
  cmd->add_option("--split-shortlist", o->tune.split_shortlist,
                  "Row-split plans searched under costs derived from the measured nodes (default 8)")
      ->check(CLI::Range(1, 64));
  cmd->add_option("--split-finalists", o->tune.split_finalists,
                  "Row-split plans whose parts are measured and timed (default 2)")
      ->check(CLI::Range(0, 8));
  cmd->add_option("--one-gpu-output", o->one_gpu_output,
                  "Also write the fastest verified one-GPU candidate here, as a one-GPU schedule (the baseline "
                  "`make run` compares with)");
  cmd->add_flag("--quiet,-q", o->quiet, "No progress lines on stderr");
  cmd->footer(
      "Measures links, nodes and every concurrent stage the searches propose, runs hios-lp, hios-mr,\n"
      "heft and IOS on the measured costs, ranks row splits of 2 to N parts under the measured nodes\n"
      "and measures the best ones, then times every distinct candidate (the best one-GPU schedule,\n"
      "today's analytic hios-lp and the splits included) on the GPUs and writes the fastest.\n"
      "meta.tune lists every candidate's predicted and measured latency. docs/tuner.md has the method.\n\n"
      "Examples:\n"
      "  mpirun -np 2 hios tune --graph inception.json --gpus 2 --backend cuda --profile-db inc.db.json -o s.json\n"
      "  mpirun -np 2 hios tune --graph demo.json --gpus 2 --backend cpu -o demo.tuned.json\n"
      "  mpirun -np 2 hios tune --graph inception.json --gpus 2 --backend cuda --spatial off -o nosplit.json\n");
  cmd->callback([o] {
    tune::TuneOptions opt = o->tune;
    opt.session.devices = parse_devices(o->devices);
    opt.progress = !o->quiet;
    std::unique_ptr<exec::Comm> comm = exec::make_world_comm();
    bool loaded = true;  // the graph and the options, alike on every rank
    run_job(*comm, [&] {
      Graph g;
      loaded = shared_step(*comm, [&] {
        g = load_graph(o->graph);
        tune::check_tune_options(opt, *comm);
      });
      if (!loaded) return;
      tune::TuneResult r = tune::tune(g, opt, *comm);
      if (comm->rank() != 0) return;
      const std::string split = r.chosen.meta.spatial.is_null()
                                    ? std::string("# spatial: the fastest schedule splits no rows\n")
                                    : "# spatial: " + describe_spatial(g, spatial_from_json(
                                                                         json{{"regions", r.chosen.meta.spatial["regions"]}},
                                                                         "meta.spatial"));
      const std::string table = tune::tune_report(r) + split;
      std::FILE* report = is_stdout(o->output) ? stderr : stdout;  // -o -: the schedule is standard output
      std::fwrite(table.data(), 1, table.size(), report);
      std::fflush(report);
      write_output(o->output, schedule_to_json(r.graph, r.chosen).dump(2) + "\n");
      if (!is_stdout(o->output)) std::printf("wrote %s\n", o->output.c_str());
      if (!o->one_gpu_output.empty()) {
        const tune::Candidate* one = tune::best_one_gpu(r);
        HIOS_CHECK(one != nullptr, "--one-gpu-output: no one-GPU candidate was verified");
        Schedule s = tune::narrow_schedule(one->schedule, 1);
        s.meta.predicted_ms = one->predicted_ms;
        s.meta.cost_model = "measured (hios tune: " + one->label + ", " + strprintf("%.3f ms", one->measured_ms) + ")";
        write_output(o->one_gpu_output, schedule_to_json(g, s).dump(2) + "\n");
        std::printf("wrote %s (%s)\n", o->one_gpu_output.c_str(), one->label.c_str());
      }
      std::fflush(stdout);
    });
    if (!loaded) {
      comm.reset();  // MPI_Finalize on every rank, then exit 2: rank 0 said why
      throw SilentExit{2};
    }
  });
}

}  // namespace hios::cli
