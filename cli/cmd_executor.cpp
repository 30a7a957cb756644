// Executor subcommands: lower (print a rank's program) and run (the MPI launcher).
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <sstream>

#include "cli/commands.hpp"
#include "executor/comm.hpp"
#include "executor/memory_plan.hpp"
#include "executor/program.hpp"
#include "executor/registry.hpp"
#include "executor/replay.hpp"
#include "run/runner.hpp"
#include "run/shape_runner.hpp"
#include "graph/error.hpp"
#include "graph/json_codec.hpp"
#include "models/models.hpp"
#include "scheduler/algorithms.hpp"
#include "scheduler/cost_model.hpp"
#include "scheduler/schedule.hpp"
#include "scheduler/simulator.hpp"

namespace hios::cli {

namespace {

struct LowerOptions {
  std::string graph, schedule, output, cost, device, launch_order = "topo";
  std::string memory = "shared", layout = "nhwc";
  int rank = 0;
  bool all = false;
};

struct RunCliOptions {
  std::string graph, schedule, output, devices;
  exec::RunOptions run;
  // --shapes: a shape set (executor/shape_set.hpp) of the graph's model, scheduled here.
  std::string shapes, batches = "1", algo = "hios-lp", cost = "analytic", cost_device;
  bool prepare_on_demand = false, compare_separate = false;
  std::vector<std::string> inputs, saves;  // --input, --save-output as given (repeatable)
};

// --input FILE (the one input) or NAME=FILE (repeated); --save-output FILE, DIR or NAME=FILE.
void split_io_options(RunCliOptions& o) {
  for (const std::string& in : o.inputs) {
    HIOS_CHECK(!in.empty(), "--input: an empty value");
    if (in.find('=') == std::string::npos && o.run.input_file.empty() && o.inputs.size() == 1) {
      o.run.input_file = in;
      continue;
    }
    HIOS_CHECK(in.find('=') != std::string::npos && in.find('=') > 0 && in.find('=') + 1 < in.size(),
               "--input %s: give NAME=FILE.npy for each input when there are several", printable(in).c_str());
    o.run.named_inputs.push_back(in);
  }
  for (const std::string& out : o.saves) {
    HIOS_CHECK(!out.empty(), "--save-output: an empty value");
    if (o.run.output_file.empty() && out.find('=') == std::string::npos) {
      o.run.output_file = out;
    } else {
      o.run.saves.push_back(out);
    }
  }
}

// `hios run --shapes`: the graph's model rebuilt at every shape, each scheduled on one GPU with
// --algo under --cost, all served from one process (run/shape_runner.hpp).
void run_shapes(const RunCliOptions& o, exec::Comm& comm) {
  HIOS_CHECK(comm.size() == 1, "--shapes serves every shape from one process on one GPU; run it without mpirun -np %d",
             comm.size());
  const Graph source = load_graph(o.graph);
  HIOS_CHECK(find_model(source.name) != nullptr,
             "--shapes rebuilds the graph's model at each shape, and '%s' (from %s) is not a model hios can build "
             "(see hios models)",
             source.name.c_str(), o.graph.c_str());
  const std::vector<exec::ShapeKey> keys = exec::parse_shape_list(o.shapes, o.batches);
  std::shared_ptr<CostModel> cost = make_cost_model(o.cost, o.cost_device);
  const std::string model = source.name, algo = o.algo;
  exec::ShapeRunOptions sr;
  sr.set.session.backend = o.run.backend;
  sr.set.session.math = o.run.math;
  sr.set.session.layout = o.run.layout;
  sr.set.session.conv_search = o.run.conv_search.empty() ? "quick" : o.run.conv_search;
  sr.set.session.seed = o.run.seed;
  sr.set.session.threads = o.run.threads;
  sr.set.session.memory_limit = o.run.memory_limit;
  sr.set.session.devices = parse_devices(o.devices);
  sr.set.cuda_graph = o.run.cuda_graph;
  sr.set.prepare_on_demand = o.prepare_on_demand;
  sr.warmup = o.run.warmup;
  sr.number = o.run.number;
  sr.verify = o.run.verify;
  sr.compare_separate = o.compare_separate;
  auto make_graph = [model, weights = source.weights](const exec::ShapeKey& k) {
    Graph g = build_model(model, ModelParams{k.batch, k.height, k.width});
    g.weights = weights;  // every shape takes the graph's parameters
    return g;
  };
  auto make_schedule = [algo, cost](const Graph& g) {
    SchedulerOptions so;
    so.num_gpus = 1;
    return run_algorithm(algo, g, *cost, so);
  };
  const exec::ShapeRunReport rep = exec::run_shape_set(make_graph, make_schedule, keys, sr, comm);
  const std::string output = o.output.empty() ? strprintf("output/shapes-%s-%s.json", model.c_str(), rep.backend.c_str())
                                              : o.output;
  std::FILE* report = is_stdout(output) ? stderr : stdout;  // -o -: the JSON is standard output
  const std::string table = exec::shape_report_to_table(rep);
  std::fwrite(table.data(), 1, table.size(), report);
  std::fflush(report);
  if (is_stdout(output)) {
    write_output(output, exec::shape_report_to_json(rep).dump(2) + "\n");
  } else if (output != "none") {
    std::filesystem::path parent = std::filesystem::path(output).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent);
    write_file_atomic(output, exec::shape_report_to_json(rep).dump(2) + "\n");
  }
  for (const exec::ShapeRow& row : rep.rows) {
    HIOS_CHECK(!row.verified || row.verify.ok,
               "verification failed: shape %s differs from the %s by max_rel %.3e (max_abs %.3e), tolerance %.1e",
               row.key.str().c_str(), row.verify.against.c_str(), row.verify.diff.max_rel, row.verify.diff.max_abs,
               row.verify.tolerance);
  }
}

// A piece of a file name taken from input (a graph's name, a schedule's algorithm): letters,
// digits and . _ + - kept, anything else (a slash, a newline) becomes '_', at most 64 bytes, so
// the default result file always stays one plain name inside output/.
std::string file_name_part(const std::string& s) {
  std::string out;
  for (char c : s.substr(0, 64)) {
    const bool plain = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '+' || c == '-';
    out += plain ? c : '_';
  }
  return out.empty() ? "_" : out;
}

std::string default_output(const Graph& g, const Schedule& s, const exec::RunOptions& o) {
  return strprintf("output/run-%s-%lldx%lld-%s-%dgpu-%s.json", file_name_part(g.name).c_str(), (long long)g.height,
                   (long long)g.width, file_name_part(s.meta.algorithm).c_str(), s.meta.num_gpus,
                   file_name_part(o.backend).c_str());
}

}  // namespace

std::vector<int> parse_devices(const std::string& s) {
  std::vector<int> out;
  if (s.empty()) return out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    long v = std::strtol(item.c_str(), &end, 10);
    // The bound keeps the cast below exact: an index past INT_MAX would wrap and name another
    // device. Tighter limits (the devices present) are checked where devices are opened.
    HIOS_CHECK(!item.empty() && *end == '\0' && v >= 0 && v <= 1000000,
               "--devices: '%s' is not a device index (expected e.g. 0,1)", item.c_str());
    out.push_back(static_cast<int>(v));
  }
  return out;
}

// Under MPI every message names rank and host (a message that already does is kept as is); a
// plain one-process run has no rank to name.
std::string with_where(const exec::Comm& comm, const std::string& msg) {
  if (!comm.is_mpi() || msg.rfind("rank ", 0) == 0) return msg;
  return comm.where() + ": " + msg;
}

void one_line(std::string& s) {
  for (char& c : s) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  s = printable(s);
  // A word of more than 200 characters (a 10,000-digit value a message repeats) is named by its
  // start and its length, so the line stays one a terminal shows whole and the ranks' lines
  // reach mpirun's output unmixed.
  std::string out, word;
  auto flush = [&] {
    if (word.size() > 200) {
      const size_t quotes = size_t(std::count(word.begin(), word.end(), '\''));  // counted: the value
      word = word.substr(0, 60) + "... (" + std::to_string(word.size() - quotes) + " characters)";
    }
    out += word;
    word.clear();
  };
  for (char c : s) {
    if (c == ' ') {
      flush();
      out += c;
    } else {
      word += c;
    }
  }
  flush();
  s = std::move(out);
}

void run_job(exec::Comm& comm, const std::function<void()>& body) {
  try {
    body();
  } catch (const std::exception& e) {
    // One line naming rank and host, then the whole job ends: peers blocked in a receive
    // or barrier would otherwise wait forever.
    std::string msg = with_where(comm, e.what());
    one_line(msg);
    if (comm.size() > 1) {
      std::fprintf(stderr, "hios: error: %s\n", msg.c_str());
      std::fflush(stderr);
      comm.abort(2);
    }
    throw Error(msg);
  }
}

// Runs `step` on every rank, where an error is one every rank meets alike (each reads the same
// files): rank 0 prints it once, with the other ranks' reasons where they differ, and every rank
// returns false, to end without aborting the job (no rank is left waiting, and mpirun adds
// nothing). One rank alone throws as usual.
bool shared_step(exec::Comm& comm, const std::function<void()>& step) {
  std::string err;
  try {
    step();
  } catch (const std::exception& e) {
    if (comm.size() == 1) throw;
    err = e.what();
    one_line(err);
  }
  if (comm.size() == 1) return true;
  const std::vector<std::string> all = comm.allgather(err);
  std::string first, others;
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].empty() || all[r] == first) continue;
    if (first.empty()) {
      first = all[r];
    } else {
      others += strprintf("; rank %zu: %s", r, all[r].c_str());
    }
  }
  if (first.empty()) return true;
  if (comm.rank() == 0) {
    std::fprintf(stderr, "hios: error: %s%s\n", first.c_str(), others.c_str());
    std::fflush(stderr);
  }
  return false;
}

namespace {

// `hios lower`: one rank's instruction program, as `hios run` would run it.
void add_lower_command(CLI::App& app) {
  auto lopt = std::make_shared<LowerOptions>();
  CLI::App* lower_cmd = app.add_subcommand("lower", "Print the instruction program one rank runs for a schedule");
  lower_cmd->add_option("--graph,-g", lopt->graph, "Graph JSON")->required();
  lower_cmd->add_option("--schedule,-s", lopt->schedule, "Schedule JSON for that graph")->required();
  lower_cmd->add_option("--rank,-r", lopt->rank, "Rank (GPU) whose program to print (default 0)");
  lower_cmd->add_flag("--all", lopt->all, "Print every rank's program, one after the other");
  lower_cmd->add_option("--output,-o", lopt->output, "Write to this file instead of stdout");
  lower_cmd->add_option("--cost", lopt->cost,
                        "Also replay every rank's program under this cost model ('analytic' or a profile "
                        "database) and print its latency beside the simulator's");
  lower_cmd->add_option("--device", lopt->device, "Device preset of the analytic model (default h200)");
  lower_cmd->add_option("--launch-order", lopt->launch_order,
                        "topo (default) or opara: how each stage's launches interleave across its streams (measured "
                        "needs the device: hios run --launch-order measured)")
      ->check(CLI::IsMember({"topo", "opara", "measured"}));
  lower_cmd->add_option("--memory", lopt->memory,
                        "shared (default: tensors whose lives cannot overlap share memory, as hios run does) or "
                        "separate (one buffer per tensor)")
      ->check(CLI::IsMember({"shared", "separate"}));
  lower_cmd->add_option("--layout", lopt->layout,
                        "nhwc (default, the cuda backend's: bands of a row split share memory in place) or nchw (the "
                        "cpu backend's)")
      ->check(CLI::IsMember({"nhwc", "nchw"}));
  lower_cmd->footer(
      "Instructions: alloc, launch, record/wait (events), send/recv (on one stream per peer and\n"
      "direction), gather. docs/executor.md explains the lowering.\n\n"
      "Example:\n  hios lower --graph inception.json --schedule inception.hios-lp.json --rank 1\n");
  lower_cmd->callback([lopt] {
    Graph g = load_graph(lopt->graph);
    Schedule s = load_schedule(g, lopt->schedule);
    HIOS_CHECK(lopt->launch_order != "measured",
               "--launch-order measured classes nodes by timing them on a GPU; hios run --launch-order measured "
               "does that (hios lower shows topo and opara)");
    const exec::LaunchOrder order = lopt->launch_order == "opara" ? exec::opara_order(g) : exec::LaunchOrder{};
    std::vector<exec::RankProgram> all = exec::lower_all(g, s, order);
    std::vector<std::string> problems = exec::check_programs(g, all);
    HIOS_CHECK(problems.empty(), "internal error: the lowered programs fail their own check: %s",
               problems[0].c_str());
    if (lopt->memory == "shared") {
      for (exec::RankProgram& p : all) {
        exec::plan_and_check_shared_buffers(g, p, exec::memory_plan_options(lopt->layout, g));
      }
    }
    // The listing, with what the memory plan saved of the row split's copies.
    auto listing = [&](const exec::RankProgram& p) {
      const std::string rows = exec::rows_copies_summary(g, p);
      return exec::program_to_text(g, p) + (rows.empty() ? "" : "# " + rows + "\n");
    };
    std::string text;
    if (lopt->all) {
      for (const exec::RankProgram& p : all) text += listing(p);
    } else {
      HIOS_CHECK(lopt->rank >= 0 && lopt->rank < s.meta.num_gpus, "--rank %d is out of range: the schedule uses %d GPU(s)",
                 lopt->rank, s.meta.num_gpus);
      text = listing(all[static_cast<size_t>(lopt->rank)]);
    }
    if (!lopt->cost.empty()) {
      auto cost = make_cost_model(lopt->cost, lopt->device);
      exec::ReplayResult rr = exec::replay_programs(g, s, all, *cost);
      SimResult sim = simulate(g, s, *cost);
      text += strprintf("# replay of the programs under %s (%s): %.4f ms; simulate(): %.4f ms\n", cost->name().c_str(),
                        cost->device().c_str(), rr.latency_ms, sim.latency_ms);
    } else {
      HIOS_CHECK(lopt->device.empty(), "--device needs --cost");
    }
    write_output(lopt->output, text);
  });
}

// Whether rank 0 can write every non-empty path of `paths` (the results it writes after the
// run; the first is the result JSON, whose missing folders the run makes), decided before the
// job runs so that a bad path costs no run. Rank 0 prints why; every rank learns the answer,
// and the ranks then end together through MPI_Finalize instead of an abort that would kill the
// others mid-way.
bool result_paths_writable(exec::Comm& comm, const std::vector<std::string>& paths) {
  int failed = 0;
  if (comm.rank() == 0) {
    try {
      for (size_t i = 0; i < paths.size(); ++i) {
        if (!paths[i].empty()) check_writable(paths[i], i == 0);  // the first, the JSON, gets its folders made
      }
    } catch (const Error& e) {
      // Printed before the others learn of it: once a rank exits non-zero, mpirun may kill
      // rank 0 before it would have printed.
      std::string why = e.what();
      one_line(why);
      std::fprintf(stderr, "hios: error: %s\n", why.c_str());
      std::fflush(stderr);
      failed = 1;
    }
  }
  if (comm.size() > 1) comm.broadcast(&failed, sizeof failed, 0);
  return failed == 0;
}

// `hios run` of one schedule: the report table on rank 0, the JSON, the trace; a failed
// verification fails the job once every rank has finalised MPI.
void run_one_schedule(const RunCliOptions& ropt, exec::RunOptions opt) {
  std::unique_ptr<exec::Comm> comm = exec::make_world_comm();
  exec::RunReport rep;
  bool writable = true;  // every result path, as rank 0 found it before the run
  bool loaded = true;    // the graph and the schedule, read alike by every rank
  run_job(*comm, [&] {
    Graph g;
    Schedule s;
    loaded = shared_step(*comm, [&] {
      g = load_graph(ropt.graph);
      s = load_schedule(g, ropt.schedule);
      exec::check_run_options(s, opt, *comm);  // a schedule for another rank count, say
    });
    if (!loaded) return;
    const std::string output = ropt.output.empty() ? default_output(g, s, opt) : ropt.output;
    // A folder for --save-output takes one file per result; the files themselves are checked as they are written.
    const bool folder = !opt.output_file.empty() && std::filesystem::is_directory(opt.output_file);
    const bool no_file = output == "none" || is_stdout(output);
    writable = result_paths_writable(*comm, {no_file ? "" : output, opt.trace_file, folder ? "" : opt.output_file});
    if (!writable) return;
    rep = exec::run_schedule(g, s, opt, *comm);
    if (comm->rank() != 0) return;
    // With -o - the JSON is standard output, so the table goes to stderr.
    std::FILE* report = is_stdout(output) ? stderr : stdout;
    std::string table = exec::report_to_table(rep);
    std::fwrite(table.data(), 1, table.size(), report);
    std::fflush(report);
    if (is_stdout(output)) {
      write_output(output, report_to_json(rep).dump(2) + "\n");
    } else if (output != "none") {
      std::filesystem::path parent = std::filesystem::path(output).parent_path();
      if (!parent.empty()) std::filesystem::create_directories(parent);
      write_file_atomic(output, report_to_json(rep).dump(2) + "\n");
    }
    if (!opt.trace_file.empty()) write_file_atomic(opt.trace_file, rep.trace);
  });
  int rank = comm->rank();
  comm.reset();  // MPI_Finalize on every rank before rank 0 reports a failed verification
  if (!writable || !loaded) throw SilentExit{2};  // rank 0 said why
  if (rank == 0 && !rep.ok) {
    for (const exec::VerifyResult& v : rep.verify) {
      HIOS_CHECK(v.ok, "verification failed: output differs from the %s by max_rel %.3e (max_abs %.3e, worst '%s'), tolerance %.1e",
                 v.against.c_str(), v.diff.max_rel, v.diff.max_abs, v.diff.where.c_str(), v.tolerance);
    }
  }
}

// `hios run`: a schedule, or (--shapes) the model at many shapes, each scheduled here.
void add_run_command(CLI::App& app) {
  auto ropt = std::make_shared<RunCliOptions>();
  CLI::App* run = app.add_subcommand("run", "Run a schedule: one MPI rank per GPU, timed and optionally verified");
  run->add_option("--graph,-g", ropt->graph, "Graph JSON")->required();
  run->add_option("--schedule,-s", ropt->schedule,
                  "Schedule JSON for that graph (its GPU count = MPI ranks); required unless --shapes");
  run->add_option("--shapes", ropt->shapes,
                  "Serve the graph's model at these image sizes from one process, one set of weights and one "
                  "arena (S or HxW, comma-separated; docs/executor.md, shape sets): each shape scheduled here, "
                  "captured once and timed");
  run->add_option("--batches", ropt->batches, "With --shapes: batch sizes, comma-separated (default 1)");
  run->add_option("--algo", ropt->algo, "With --shapes: the one-GPU scheduling algorithm (default hios-lp)");
  run->add_option("--cost", ropt->cost, "With --shapes: 'analytic' (default) or a profile database JSON");
  run->add_option("--device", ropt->cost_device, "With --shapes: device preset of the analytic model (default h200)");
  run->add_flag("--prepare-on-demand", ropt->prepare_on_demand,
                "With --shapes: a shape that was not prepared is prepared (and captured) on first use instead of "
                "refused");
  run->add_flag("--compare-separate", ropt->compare_separate,
                "With --shapes: also prepare each shape alone and report the set's memory against the largest "
                "and the sum");
  run->add_option("--backend", ropt->run.backend, "cpu or cuda (default cpu)");
  run->add_option("--transport", ropt->run.transport,
                  "nccl, cuda-ipc, mpi-host or mpi-cuda-aware (default: the one hios tune measured the schedule with, else on cuda cuda-ipc where all ranks share one host and their GPUs reach each other, nccl otherwise; mpi-host on cpu)");
  run->add_option("--cuda-graph", ropt->run.cuda_graph,
                  "on, off or auto: capture each rank's pass into one CUDA Graph (default auto: when possible)");
  run->add_option("--math", ropt->run.math, "tf32, fp32, fp16 or bf16 (16-bit storage; cuda only) (default: tf32 on cuda, fp32 on cpu)");
  run->add_option("--layout", ropt->run.layout, "nchw or nhwc: how activations are stored (default: nhwc on cuda, nchw on cpu; docs/benchmarks.md compares)")
      ->check(CLI::IsMember({"nchw", "nhwc"}));
  run->add_option("--conv-search", ropt->run.conv_search,
                  "quick or wide: how many cuDNN engine configurations each convolution times (cuda only; wide times every one, tile variants of one engine included: more planning time, 3% faster ResNet segmentation networks in TF32) (default the search hios tune measured the schedule with, else quick)")
      ->check(CLI::IsMember({"quick", "wide"}));
  run->add_option("--comm-priority", ropt->run.comm_priority,
                  "high or normal: CUDA priority of the send and receive streams (default high)")
      ->check(CLI::IsMember({"high", "normal"}));
  run->add_option("--warmup", ropt->run.warmup, "Untimed passes first, 0 to 100000 (default 2)")->check(CLI::Range(0, 100000));
  run->add_option("--number", ropt->run.number, "Passes averaged into one repeat, 1 to 100000 (default 6)")
      ->check(CLI::Range(1, 100000));
  run->add_option("--repeat", ropt->run.repeat, "Repeats reported, 1 to 100000 (default 6)")->check(CLI::Range(1, 100000));
  run->add_flag("--verify", ropt->run.verify,
                "Compare the output with a sequential run (same backend) and the CPU reference");
  run->add_flag("--verify-nodes", ropt->run.verify_nodes,
                "Also compare every node's output (implies --verify and --memory separate)");
  run->add_option("--reference-cache", ropt->run.reference_cache,
                  "Folder keeping the CPU reference's output per graph and seed: --verify reads it there when an "
                  "earlier run left it, and leaves it there otherwise (not with --verify-nodes)");
  run->add_flag("--reference-first-image", ropt->run.reference_first_image,
                "At batch > 1, run the CPU reference on the batch's first image alone and compare the output's first "
                "image with it (the sequential run still checks the whole batch): 1/batch of the reference's cost, "
                "cached as the batch-1 graph's");
  run->add_option("--memory", ropt->run.memory,
                  "shared (default: tensors whose lives cannot overlap share one arena) or separate (one buffer "
                  "per tensor)")
      ->check(CLI::IsMember({"shared", "separate"}));
  run->add_option("--rows-in-place", ropt->run.rows_in_place,
                  "on (default: with --memory shared on NHWC storage at batch 1, a row split's parts, halos and "
                  "assemblies share memory at their rows, so its rows copies are no-ops) or off (every rows node "
                  "copies)")
      ->check(CLI::IsMember({"on", "off"}));
  run->add_option("--launch-order", ropt->run.launch_order,
                  "How each stage's launches interleave across its streams: topo (group after group), opara "
                  "(alternate memory- and compute-intensive ops by name), measured (the same with classes measured "
                  "on rank 0's device) (default: what hios tune chose for the schedule, else topo; docs/executor.md)")
      ->check(CLI::IsMember({"topo", "opara", "measured"}));
  run->add_option("--devices", ropt->devices, "GPU per node-local rank, e.g. 0,1 (default: the local rank)");
  run->add_option("--timeout", ropt->run.timeout_s, "Abort the whole job after this many seconds, 0 to 1e7 (default: none)")
      ->check(finite_range(0.0, 1e7));
  run->add_option("--stall-timeout", ropt->run.stall_timeout_s,
                  "While passes run, abort the job when a rank finishes no pass for this many seconds (a stopped "
                  "or hung peer); 0 turns it off (default: 300 s until a pass time is known, then max(10 s, 50x "
                  "the slowest pass))")
      ->check(finite_range(0.0, 1e7));
  run->add_option("--threads", ropt->run.threads, "OpenMP threads per rank for the cpu backend, 0 to 1024 (default: OpenMP's)")
      ->check(CLI::Range(0, 1024));
  run->add_option("--seed", ropt->run.seed, "Seed of the deterministic weights and input");
  run->add_option("--trace", ropt->run.trace_file,
                  "After the timed passes, trace one more (eager) pass with a marker around every launch and "
                  "transfer, and write it as a Chrome/Perfetto trace in the layout of 'hios trace'");
  run->add_option("--input", ropt->inputs,
                  "The graph's input as a NumPy .npy file (the image: float32 or float64, shaped N,C,H,W or C,H,W at "
                  "batch 1), or NAME=FILE.npy once per input of a graph of several (each of the input's dtype and "
                  "shape); default: seeded inputs");
  run->add_option("--save-output", ropt->saves,
                  "Write the results as NumPy .npy files: FILE.npy (the one result; N,C for a classifier's logits), "
                  "an existing folder DIR (every result as DIR/NAME.npy), or NAME=FILE.npy (repeatable)");
  run->add_option("--output,-o", ropt->output,
                  "Results JSON (default output/run-<graph>-<HxW>-<algo>-<N>gpu-<backend>.json; 'none' for no file; '-' standard output, the table then on stderr)");
  // Testing only, hidden from --help: make one rank fail, or cap backend memory.
  run->add_option("--inject-failure", ropt->run.inject_failure, "RANK:PHASE")->group("");
  run->add_option("--memory-limit", ropt->run.memory_limit, "bytes")->group("");
  run->footer(
      "Prints an nccl-tests-style table on rank 0 and writes the same results as JSON.\n"
      "Exits with 2 on any error (the whole job is aborted) or when verification fails.\n\n"
      "Examples:\n"
      "  mpirun -np 2 hios run --graph inception.json --schedule inception.hios-lp.json --backend cuda\n"
      "  mpirun -np 2 hios run -g demo.json -s demo.heft.json --backend cpu --verify\n"
      "  mpirun -np 2 hios run -g demo.json -s demo.heft.json --trace measured.json   # vs hios trace\n");
  run->callback([ropt, run] {
    split_io_options(*ropt);
    check_results_name(ropt->output);
    exec::RunOptions opt = ropt->run;
    opt.devices = parse_devices(ropt->devices);
    if (opt.verify_nodes) opt.verify = true;
    HIOS_CHECK(!opt.reference_first_image || (opt.verify && !opt.verify_nodes),
               "--reference-first-image needs --verify and not --verify-nodes (which compares every node of the whole batch)");
    if (!ropt->shapes.empty()) {
      HIOS_CHECK(ropt->schedule.empty(), "--shapes schedules every shape itself (--algo, --cost); drop --schedule");
      HIOS_CHECK(!opt.verify_nodes && opt.trace_file.empty() && opt.inject_failure.empty(),
                 "--shapes takes --verify, but not --verify-nodes, --trace or --inject-failure");
      HIOS_CHECK(opt.input_file.empty() && opt.output_file.empty() && opt.named_inputs.empty() && opt.saves.empty(),
                 "--shapes runs seeded inputs of many shapes: --input and --save-output go with --schedule");
      std::unique_ptr<exec::Comm> comm = exec::make_world_comm();
      run_job(*comm, [&] { run_shapes(*ropt, *comm); });
      return;
    }
    HIOS_CHECK(!ropt->schedule.empty(), "hios run needs --schedule (or --shapes to serve the model at many shapes)");
    for (const char* only : {"--batches", "--algo", "--cost", "--device", "--prepare-on-demand", "--compare-separate"}) {
      HIOS_CHECK(run->count(only) == 0, "%s goes with --shapes", only);
    }
    run_one_schedule(*ropt, opt);
  });
}

}  // namespace

void add_executor_commands(CLI::App& app) {
  add_lower_command(app);
  add_run_command(app);
}

}  // namespace hios::cli
