// `hios serve`: several models served on one device or several from request streams
// (serve/serve.hpp), every launcher on the same traces, at loads given as fractions of the
// fifo launcher's capacity.
#ifdef HIOS_WITH_EXECUTOR
#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>

#include "cli/commands.hpp"
#include "serve/serve.hpp"
#include "graph/error.hpp"
#include "graph/json_codec.hpp"
#include "models/models.hpp"
#include "scheduler/algorithms.hpp"
#include "scheduler/cost_model.hpp"

namespace hios::cli {

namespace {

std::atomic<bool> g_stop{false};
extern "C" void on_sigint(int) { g_stop.store(true); }

struct ServeCli {
  std::string models = "inception_v3,nasnet_large,randwire", backend = "cpu", math, layout, policy = "all";
  std::string conv_search = "quick";
  std::string drain = "bounded";
  std::string loads = "0.5,0.8,1.0", arrivals = "poisson", trace, batches = "1,2,4,8", output, algo = "hios-lp";
  int64_t size = 331;
  double duration_s = 5, rate = 0, burst_on_s = 0.5, burst_off_s = 0.5, static_wait_ms = 2;
  double latency_budget_ms = 0;  // 0: not given
  double budget_duration_s = 0;  // 0: --duration
  double hold_share = exec::ServeOptions{}.hold_share;
  int static_batch = 4, queue_limit = 64, verify_every = 0, threads = 0;
  std::string high_priority, devices, placement, replicas;
  uint64_t seed = 1;
};

std::vector<std::string> split(const std::string& s, const char* what) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) {
    HIOS_CHECK(!item.empty(), "%s: empty item in '%s'", what, s.c_str());
    out.push_back(item);
  }
  HIOS_CHECK(!out.empty(), "%s: nothing given", what);
  return out;
}

double parse_fraction(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  HIOS_CHECK(end && *end == '\0' && std::isfinite(v) && v > 0 && v <= 100, "--loads: '%s' is not a load from 0 to 100",
             s.c_str());
  return v;
}

// "fifo,adaptive" or "all": the launchers, always run fifo first, then static, then adaptive, so
// that fifo's measured tail is known when the adaptive launcher needs its budget.
std::vector<exec::Policy> parse_policies(const std::string& s) {
  std::vector<exec::Policy> out;
  for (const std::string& item : split(s, "--policy")) {
    if (item == "all") {
      out.insert(out.end(), {exec::Policy::Fifo, exec::Policy::Static, exec::Policy::Adaptive});
    } else {
      out.push_back(exec::parse_policy(item));
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// "inception_v3=0,nasnet_large=1": the checks against the models and devices are
// exec::explicit_placement's.
std::vector<std::pair<std::string, int>> parse_placement(const std::string& s) {
  return exec::parse_name_values(s, "--placement", "device", "a device id", 0, 1023);
}

// The options, by what they set: the models and how they run, the launchers, the arrivals, the
// devices.
void add_model_options(CLI::App* cmd, ServeCli* o) {
  cmd->add_option("--models", o->models,
                  "Models served, comma-separated: built-in names or graph files (.json, e.g. from hios import) "
                  "(default inception_v3,nasnet_large,randwire)");
  cmd->add_option("--size", o->size, "Image size of every request, 1 to 65536 (default 331)")->check(CLI::Range(1, 65536));
  cmd->add_option("--backend", o->backend, "cpu or cuda (default cpu)");
  cmd->add_option("--math", o->math, "tf32, fp32, fp16 or bf16 (16-bit storage; cuda only). Requests are staged as stored, 16-bit ones converted on arrival (default: tf32 on cuda, fp32 on cpu)");
  cmd->add_option("--layout", o->layout, "nchw or nhwc (default: the backend's)")->check(CLI::IsMember({"nchw", "nhwc"}));
  cmd->add_option("--conv-search", o->conv_search, "quick or wide, as hios run --conv-search (default quick)")
      ->check(CLI::IsMember({"quick", "wide"}));
  cmd->add_option("--batches", o->batches, "Batch sizes prepared per model, comma-separated, 1 included (default 1,2,4,8)");
  cmd->add_option("--algo", o->algo, "One-GPU schedule of every model and batch (default hios-lp, analytic h200 costs)");
  cmd->add_option("--threads", o->threads, "cpu backend: OpenMP threads per pass, 0 to 1024")->check(CLI::Range(0, 1024));
}

void add_launcher_options(CLI::App* cmd, ServeCli* o) {
  cmd->add_option("--policy", o->policy,
                  "fifo, static, adaptive, a comma-separated list of them, or all (default all: every launcher on the "
                  "same traces; fifo runs first)");
  cmd->add_option("--latency-budget-ms", o->latency_budget_ms,
                  "adaptive: the latency, queueing included, it keeps each request within, above 0 to 60000 ms "
                  "(default: fifo's p99 at the lowest load when fifo runs too, else 4x the slowest model's batch-1 pass)")
      ->check(finite_range(0, 60000, /*above_lo=*/true));
  cmd->add_option("--budget-duration", o->budget_duration_s,
                  "Seconds of arrivals in fifo's run at the lowest load, whose p99 becomes the budget when none is "
                  "given, 0.01 to 1e5 (default: --duration). A longer run makes that tail, the bar every launcher is "
                  "held to, steadier; the other runs keep --duration")
      ->check(finite_range(0.01, 1e5));
  cmd->add_option("--hold-share", o->hold_share,
                  "adaptive: a model whose requests arrive fast enough waits for one more while the oldest is still "
                  "answered within this share of the latency budget, 0 to 1 (0: never wait; default 0.85)")
      ->check(finite_range(0, 1));
  cmd->add_option("--drain", o->drain,
                  "adaptive, once a request cannot be answered within the budget: bounded (default; the batch "
                  "answering the most requests per second among those whose pass is at most a batch-1 pass plus the "
                  "gap between arrivals) or max (that batch among all)")
      ->check(CLI::IsMember({"bounded", "max"}));
  cmd->add_option("--static-batch", o->static_batch, "static: the batch it waits for (default 4)")->check(CLI::Range(1, 4096));
  cmd->add_option("--static-wait-ms", o->static_wait_ms, "static: how long the oldest request waits for a full batch (default 2)")
      ->check(finite_range(0, 1e6));
  cmd->add_option("--queue-limit", o->queue_limit, "Waiting requests per queue before new ones are rejected (default 64)")
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--verify-every", o->verify_every,
                  "Give every k-th request its own input and compare its answer with that input alone at batch 1 (0: none)")
      ->check(CLI::Range(0, 1000000));
}

void add_arrival_options(CLI::App* cmd, ServeCli* o) {
  cmd->add_option("--loads", o->loads,
                  "Offered loads as fractions of the fifo launcher's capacity (the mix's batch-1 times), "
                  "comma-separated (default 0.5,0.8,1.0)");
  cmd->add_option("--rate", o->rate, "Instead of --loads: total requests per second, split evenly over the models")
      ->check(finite_range(0, 1e6));
  cmd->add_option("--arrivals", o->arrivals, "poisson (default) or bursty (Poisson while on, silent while off)")
      ->check(CLI::IsMember({"poisson", "bursty"}));
  cmd->add_option("--burst-on", o->burst_on_s, "bursty: seconds on (default 0.5)")->check(finite_range(1e-3, 1e4));
  cmd->add_option("--burst-off", o->burst_off_s, "bursty: seconds off (default 0.5)")->check(finite_range(0, 1e4));
  cmd->add_option("--trace", o->trace, "Arrivals from a file of 'time_s,model' lines instead (one run per launcher)");
  cmd->add_option("--duration", o->duration_s, "Seconds of arrivals per run (default 5)")->check(finite_range(0.01, 1e5));
  cmd->add_option("--seed", o->seed, "Seed of the arrivals and the inputs (default 1)");
}

void add_device_options(CLI::App* cmd, ServeCli* o) {
  cmd->add_option("--high-priority", o->high_priority,
                  "Models whose CUDA streams get the highest priority, comma-separated (e.g. the one with the longest "
                  "passes, so that the others do not stretch its tail)");
  cmd->add_option("--devices", o->devices,
                  "Devices to spread the models over, comma-separated ids (e.g. 0,1; default: the one default device). "
                  "The cpu backend takes them as labels");
  cmd->add_option("--placement", o->placement,
                  "With --devices: the device of every served model, as model=device,..., a model named once per "
                  "replica (default: balanced by each model's predicted batch-1 latency over its replicas, longest "
                  "first)");
  cmd->add_option("--replicas", o->replicas,
                  "Replicas of a model for static and adaptive, as model=k,... with k from 1 to 8 (default 1 each): k "
                  "workers with their own prepared copy of the model, taking from its one queue. fifo runs each "
                  "request on the model's first replica. 'auto': one worker more than models per device, the extra "
                  "ones to the models with the most measured batch-1 time per worker, placed where the least work is");
}

// One `hios serve` invocation as named phases: read the models and the options, prepare the
// server, print where everything runs, choose the latency budget, run every launcher at every
// load, then report what each sustains within the budget and write the JSON.
class ServeRun {
 public:
  explicit ServeRun(const ServeCli& o) : o_(o), report_(is_stdout(o.output) ? stderr : stdout) {
    check_results_name(o.output);
  }

  void run() {
    g_stop.store(false);
    std::signal(SIGINT, on_sigint);
    read_models();
    read_options();  // before the models are prepared, which takes a while
    prepare_server();
    print_header();
    choose_budget();
    run_loads();
    print_within_budget();
    write_results();
  }

 private:
  // A model is a built-in's name or a graph file (`hios graph`, `hios import`), rebuilt at every
  // batch size from the file's nodes and weights.
  void read_models() {
    models_ = split(o_.models, "--models");
    for (const std::string& m : models_) {
      if (m.size() > 5 && m.compare(m.size() - 5, 5, ".json") == 0) {
        (*files_)[m] = load_graph(m);
        continue;
      }
      HIOS_CHECK(find_model(m) != nullptr, "--models: unknown model '%s' (see hios models, or give a graph file)", m.c_str());
    }
  }

  void read_options() {
    policies_ = parse_policies(o_.policy);
    with_fifo_ = policies_.front() == exec::Policy::Fifo;
    // It lengthens the one run whose tail becomes the budget; anything else it would silently
    // not do.
    HIOS_CHECK(o_.budget_duration_s <= 0 || (with_fifo_ && o_.latency_budget_ms <= 0 && o_.trace.empty()),
               "--budget-duration: the budget comes from fifo's generated run only (not with --latency-budget-ms, "
               "--trace, or a --policy without fifo)");
    if (!o_.trace.empty() || o_.rate > 0) {
      loads_ = {0};
      // A trace file is read (bounded) and checked here, so that a bad one fails at once, not
      // after the models were prepared; every load replays it.
      if (!o_.trace.empty()) {
        exec::ArrivalSpec spec;
        spec.kind = "file";
        spec.file = o_.trace;
        file_trace_ = exec::make_trace(spec, models_);
      }
    } else {
      for (const std::string& l : split(o_.loads, "--loads")) loads_.push_back(parse_fraction(l));
    }
    so_.set.session.backend = o_.backend;
    so_.set.session.math = o_.math;
    so_.set.session.layout = o_.layout;
    so_.set.session.conv_search = o_.conv_search;
    so_.set.session.seed = o_.seed;
    so_.set.session.threads = o_.threads;
    so_.batches.clear();
    for (const std::string& b : split(o_.batches, "--batches")) {
      char* end = nullptr;
      const long v = std::strtol(b.c_str(), &end, 10);
      HIOS_CHECK(end && *end == '\0' && v >= 1 && v <= 4096, "--batches: '%s' is not a batch size from 1 to 4096", b.c_str());
      so_.batches.push_back(int(v));
    }
    so_.static_batch = o_.static_batch;
    // Only static reads it.
    if (std::find(policies_.begin(), policies_.end(), exec::Policy::Static) != policies_.end()) {
      exec::check_static_batch(so_.batches, so_.static_batch);
    }
    so_.static_wait_s = o_.static_wait_ms / 1e3;
    so_.hold_share = o_.hold_share;
    so_.bounded_drain = o_.drain == "bounded";
    so_.queue_limit = o_.queue_limit;
    so_.verify_every = o_.verify_every;
    so_.stop = &g_stop;
    if (!o_.high_priority.empty()) so_.high_priority = split(o_.high_priority, "--high-priority");
    // Ids from 0 to 1023, none twice, here; below the visible count on GPU backends, in Server.
    if (!o_.devices.empty()) {
      so_.devices = parse_devices(o_.devices);
      exec::check_devices(so_.devices);
    }
    if (!o_.placement.empty()) so_.placement = parse_placement(o_.placement);
    // Counts from 1 to 8 here; the models, in Server, before anything is built.
    if (o_.replicas == "auto") {
      so_.auto_replicas = true;
    } else if (!o_.replicas.empty()) {
      so_.replicas = exec::parse_replicas(o_.replicas);
    }
  }

  void prepare_server() {
    const std::string algo = o_.algo;
    auto cost = std::shared_ptr<CostModel>(make_analytic_cost_model(find_device_preset("h200")));
    auto files = files_;
    server_ = std::make_unique<exec::Server>(
        models_, o_.size, so_,
        [files](const std::string& name, const exec::ShapeKey& k) {
          auto it = files->find(name);
          if (it != files->end()) return graph_at_shape(it->second, k.batch, k.height, k.width);
          return build_model(name, ModelParams{k.batch, k.height, k.width});
        },
        [algo, cost](const Graph& g) {
          SchedulerOptions opt;
          opt.num_gpus = 1;
          return run_algorithm(algo, g, *cost, opt);
        });
    single_ = server_->single_request_ms();
    double sum_s = 0;
    for (double ms : single_) sum_s += ms / 1e3;
    capacity_ = double(models_.size()) / sum_s;  // requests/s of one-at-a-time, even mix
  }

  // The header: the models' batch-1 times, where each model runs (so that every report says
  // it), and the adaptive launcher's seeds (a serving pass per prepared batch, each model alone).
  void print_header() {
    exec::Server& server = *server_;
    std::fprintf(report_, "# hios serve: %s at %lldx%lld on %s, math %s; batches %s; fifo capacity %.1f requests/s (batch-1 ms:",
                o_.models.c_str(), (long long)o_.size, (long long)o_.size, server.device().c_str(), server.math().c_str(),
                o_.batches.c_str(), capacity_);
    for (size_t m = 0; m < models_.size(); ++m) std::fprintf(report_, " %s %.3f", models_[m].c_str(), single_[m]);
    std::fprintf(report_, ")");
    bool any_replicas = false;
    for (const std::vector<int>& devs : server.replica_devices()) any_replicas |= devs.size() > 1;
    placement_rule_ = so_.devices.empty()         ? "one device"
                      : !so_.placement.empty()    ? "given"
                      : so_.devices.size() == 1   ? "one device"
                      : so_.auto_replicas ? "first replicas balanced by predicted batch-1 ms, the others by measured"
                      : any_replicas ? "balanced by predicted batch-1 ms over each model's replicas, longest first"
                                     : "balanced by predicted batch-1 ms, longest first";
    // A model's replicas, each on a device: model@0,1 for two replicas.
    if (!so_.devices.empty()) {
      std::fprintf(report_, "; placement (%s):", placement_rule_.c_str());
      for (size_t m = 0; m < models_.size(); ++m) {
        std::fprintf(report_, " %s@", models_[m].c_str());
        const std::vector<int>& devs = server.replica_devices()[m];
        for (size_t k = 0; k < devs.size(); ++k) std::fprintf(report_, "%s%d", k ? "," : "", devs[k]);
      }
    }
    if (any_replicas) {
      std::fprintf(report_, "; replicas (%sstatic and adaptive; fifo uses the first):",
                  so_.auto_replicas ? "auto, by measured batch-1 ms; " : "");
      for (size_t m = 0; m < models_.size(); ++m) {
        std::fprintf(report_, " %s=%zu", models_[m].c_str(), server.replica_devices()[m].size());
      }
    }
    for (size_t m = 0; m < models_.size(); ++m) {
      placement_json_[models_[m]] = server.placement()[m];
      replicas_json_[models_[m]] = int(server.replica_devices()[m].size());
      replica_devices_json_[models_[m]] = server.replica_devices()[m];
    }
    std::fprintf(report_, "\n");
    std::fprintf(report_, "# serving pass ms by batch:");
    for (size_t m = 0; m < models_.size(); ++m) {
      std::fprintf(report_, " %s", models_[m].c_str());
      json per = json::object();
      for (const auto& [b, ms] : server.batch_pass_ms()[m]) {
        std::fprintf(report_, " %d:%.3f", b, ms);
        per[std::to_string(b)] = ms;
      }
      pass_json_[models_[m]] = per;
    }
    std::fprintf(report_, "\n");
  }

  // The budget: the one given; else the tail fifo keeps at the lowest load of this run, which
  // is the latency the other launchers are held to (fifo runs first at each load, and the
  // lowest load is moved first so that fifo has run there before any adaptive run); else, with
  // no fifo run to measure, Server's default.
  void choose_budget() {
    budget_from_fifo_ = o_.latency_budget_ms <= 0 && with_fifo_;
    if (o_.latency_budget_ms > 0) {
      server_->set_latency_budget_ms(o_.latency_budget_ms);
      budget_source_ = "--latency-budget-ms";
    } else if (budget_from_fifo_) {
      const auto lowest = std::min_element(loads_.begin(), loads_.end());
      std::rotate(loads_.begin(), lowest, lowest + 1);  // the others keep their order
    } else {
      budget_source_ = strprintf("default: %gx the slowest batch-1 serving pass", exec::Server::kDefaultBudgetPasses);
    }
    if (!budget_from_fifo_) print_budget();
    std::fprintf(report_, "%-9s %9s  %-14s %8s %8s %8s %10s %9s %9s %9s %6s %6s %7s\n", "# launcher", "offered/s", "model", "offered",
                "answered", "rejected", "answered/s", "p50_ms", "p95_ms", "p99_ms", "batch", "queue", "busy");
  }

  void print_budget() const {
    std::fprintf(report_, "# latency budget %.3f ms (%s); adaptive hold up to %g of it, drain %s\n", server_->latency_budget_ms(),
                budget_source_.c_str(), o_.hold_share, o_.drain.c_str());
  }

  void run_loads() {
    for (double load : loads_) {
      exec::ArrivalSpec spec;
      spec.kind = o_.trace.empty() ? o_.arrivals : "file";
      spec.file = o_.trace;
      spec.duration_s = o_.duration_s;
      spec.on_s = o_.burst_on_s;
      spec.off_s = o_.burst_off_s;
      spec.seed = o_.seed;
      const double total = o_.rate > 0 ? o_.rate : load * capacity_;
      spec.rates.assign(models_.size(), total / double(models_.size()));
      const std::vector<exec::Request> trace = o_.trace.empty() ? exec::make_trace(spec, models_) : file_trace_;
      for (exec::Policy p : policies_) {
        run_one(load, spec, trace, p);
        if (stopped_) break;
      }
      if (stopped_) break;
    }
    if (stopped_) std::fprintf(report_, "# stopped by SIGINT: the run in progress answered what it had taken, rejected what waited\n");
  }

  // One launcher on one load's trace; the first run, fifo's at the lowest load, may set the
  // budget, on a trace of its own when --budget-duration makes it longer.
  void run_one(double load, const exec::ArrivalSpec& spec, const std::vector<exec::Request>& trace, exec::Policy p) {
    const bool sets_budget = budget_from_fifo_ && budget_source_.empty();
    std::vector<exec::Request> bar_trace;
    if (sets_budget && o_.budget_duration_s > 0) {  // never with --trace (checked in read_options)
      exec::ArrivalSpec bar = spec;
      bar.duration_s = o_.budget_duration_s;
      bar_trace = exec::make_trace(bar, models_);
    }
    const std::vector<exec::Request>& run_trace = bar_trace.empty() ? trace : bar_trace;
    const exec::ServeResult r = server_->run(run_trace, p);
    std::fputs(exec::serve_result_line(r).c_str(), report_);
    std::fputs(exec::serve_device_lines(r).c_str(), report_);
    if (sets_budget) set_budget_from(r, load);
    std::fflush(report_);
    json j = exec::serve_result_to_json(r, models_);
    j["load"] = load;
    j["requests"] = int64_t(run_trace.size());
    if (o_.trace.empty()) j["duration_s"] = bar_trace.empty() ? spec.duration_s : o_.budget_duration_s;
    runs_.push_back(j);
    // Per launcher: the most answered/s of a run that kept up (nothing rejected, not stopped)
    // within the budget, and fifo's most answered/s at any load (what it sustains).
    const exec::ModelStats& a = r.models.back();
    if (p == exec::Policy::Fifo) fifo_most_ = std::max(fifo_most_, a.throughput_rps);
    if (!r.stopped && a.rejected == 0 && a.answered > 0 && a.p99_ms <= server_->latency_budget_ms()) {
      if (!best_.count(p) || a.throughput_rps > best_[p]["answered_rps"].get<double>()) {
        best_[p] = {{"answered_rps", a.throughput_rps}, {"load", load}, {"p99_ms", a.p99_ms}};
      }
    }
    stopped_ = r.stopped;
  }

  // A trace with nothing answered (too short, or stopped at once) has no tail to keep to: the
  // default then.
  void set_budget_from(const exec::ServeResult& r, double load) {
    const exec::ModelStats& a = r.models.back();
    if (a.answered > 0 && a.p99_ms > 0) {
      server_->set_latency_budget_ms(std::min(a.p99_ms, 60000.0));
      budget_source_ = o_.trace.empty() && o_.rate <= 0 ? strprintf("fifo's p99 at load %g", load)
                                                        : std::string("fifo's p99 on this trace");
    } else {
      budget_source_ = strprintf("default: %gx the slowest batch-1 serving pass (fifo answered nothing to measure)",
                                 exec::Server::kDefaultBudgetPasses);
    }
    print_budget();
  }

  // The measure: throughput sustained within the budget, against what fifo sustains.
  void print_within_budget() {
    std::fprintf(report_, "# within the budget (p99 <= %.3f ms, nothing rejected):", server_->latency_budget_ms());
    if (best_.empty()) std::fprintf(report_, " no run");
    for (const auto& [p, row] : best_) {
      std::fprintf(report_, " %s %.1f/s at load %g", exec::policy_name(p), row["answered_rps"].get<double>(),
                  row["load"].get<double>());
      if (fifo_most_ > 0) std::fprintf(report_, " (%.2fx fifo's most)", row["answered_rps"].get<double>() / fifo_most_);
      std::fprintf(report_, ";");
      within_[exec::policy_name(p)] = row;
    }
    if (fifo_most_ > 0) std::fprintf(report_, " fifo's most answered/s at any load %.1f", fifo_most_);
    std::fprintf(report_, "\n");
    std::fprintf(report_, "# summary: %zu run(s), every request answered or rejected with a reason (see 'rejections' in the JSON)\n",
                runs_.size());
  }

  void write_results() {
    const std::string output = o_.output.empty() ? "output/serve-" + o_.backend + ".json" : o_.output;
    if (output == "none") return;
    exec::Server& server = *server_;
    json all = {{"format", "hios-serve"},
                {"version", 1},
                {"models", models_},
                {"size", o_.size},
                {"math", server.math()},
                {"batches", so_.batches},
                {"device", server.device()},
                {"devices", so_.devices},
                {"placement", placement_json_},
                {"replicas", replicas_json_},
                {"replicas_rule", so_.auto_replicas ? "auto" : o_.replicas.empty() ? "one each" : "given"},
                {"replica_weight_ms", server.replica_weight_ms()},
                {"replica_devices", replica_devices_json_},
                {"placement_rule", placement_rule_},
                {"placement_weight_ms", server.placement_weight_ms()},
                {"fifo_capacity_rps", capacity_},
                {"single_request_ms", single_},
                {"pass_ms", pass_json_},
                {"latency_budget_ms", server.latency_budget_ms()},
                {"latency_budget_source", budget_source_},
                {"hold_share", o_.hold_share},
                {"drain", o_.drain},
                {"budget_duration_s", budget_from_fifo_ && o_.trace.empty()
                                          ? json(o_.budget_duration_s > 0 ? o_.budget_duration_s : o_.duration_s)
                                          : json(nullptr)},
                {"within_budget", within_},
                {"fifo_most_answered_rps", fifo_most_},
                {"runs", runs_},
                {"stopped", stopped_}};
    if (is_stdout(output)) return write_output(output, all.dump(1) + "\n");
    std::filesystem::path parent = std::filesystem::path(output).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent);
    write_file_atomic(output, all.dump(1) + "\n");
  }

  const ServeCli& o_;
  std::FILE* report_;  // the report's lines: standard output, or stderr when the JSON is (-o -)
  std::vector<std::string> models_;
  std::shared_ptr<std::map<std::string, Graph>> files_ = std::make_shared<std::map<std::string, Graph>>();
  std::vector<exec::Policy> policies_;
  bool with_fifo_ = false;
  std::vector<double> loads_;
  std::vector<exec::Request> file_trace_;  // --trace, read once by read_options
  exec::ServeOptions so_;
  std::unique_ptr<exec::Server> server_;
  std::vector<double> single_;
  double capacity_ = 0;
  std::string placement_rule_;
  json placement_json_ = json::object(), replicas_json_ = json::object(), replica_devices_json_ = json::object();
  json pass_json_ = json::object();
  bool budget_from_fifo_ = false;
  std::string budget_source_;
  json runs_ = json::array();
  bool stopped_ = false;
  std::map<exec::Policy, json> best_;
  double fifo_most_ = 0;
  json within_ = json::object();
};

}  // namespace

void add_serve_commands(CLI::App& app) {
  auto o = std::make_shared<ServeCli>();
  CLI::App* cmd = app.add_subcommand("serve", "Serve several models from request streams on one device or several (fifo, static and adaptive batching)");
  add_model_options(cmd, o.get());
  add_launcher_options(cmd, o.get());
  add_arrival_options(cmd, o.get());
  add_device_options(cmd, o.get());
  cmd->add_option("--output,-o", o->output, "Results JSON (default output/serve-<backend>.json; 'none' for no file; '-' standard output, the report then on stderr)");
  cmd->footer(
      "Every launcher runs on the same trace at each load, in one process. Ctrl-C stops the current run:\n"
      "waiting requests are rejected with a reason, the summary and the JSON are still written.\n\n"
      "Examples:\n"
      "  hios serve --backend cuda --models inception_v3,nasnet_large,randwire --size 331 --loads 0.5,0.8,1,1.5,2\n"
      "  hios serve --backend cuda --devices 0,1 --models inception_v3,nasnet_large,randwire --size 331 --loads 0.5,0.8,1,1.5,2\n"
      "  hios serve --backend cuda --replicas nasnet_large=2 --size 331 --loads 0.5,1,1.5  # two nasnet workers\n"
      "  hios serve --models demo,squeezenet --size 32 --duration 2 --loads 0.5,1   # anywhere (cpu)\n");
  cmd->callback([o] { ServeRun(*o).run(); });
}

}  // namespace hios::cli
#endif
