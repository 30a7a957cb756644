#include "tuner/tune.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <unordered_map>

#include "executor/memory_plan.hpp"
#include "executor/runner.hpp"
#include "executor/watchdog.hpp"
#include "executor/weights.hpp"
#include "graph/error.hpp"
#include "graph/stats.hpp"
#include "graph/json_codec.hpp"
#include "profiler/profile_builder.hpp"
#include "profiler/session_profiler.hpp"
#include "scheduler/algorithms.hpp"
#include "scheduler/concurrency_fit.hpp"
#include "scheduler/simulator.hpp"
#include "tuner/calibration.hpp"

namespace hios::tune {

using Clock = std::chrono::steady_clock;

Schedule widen_schedule(const Schedule& s, int gpus) {
  HIOS_CHECK(gpus >= s.meta.num_gpus, "internal error: widening a %d-GPU schedule to %d GPUs", s.meta.num_gpus, gpus);
  Schedule w = s;
  w.meta.num_gpus = gpus;
  for (auto& block : w.blocks) block.resize(size_t(gpus));
  return w;
}

namespace {

std::string today_utc() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", std::gmtime(&t));
  return buf;
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// "NVIDIA H200 (bus 0000:19:00.0)" -> "NVIDIA H200": which GPU of a model does not matter.
std::string device_model(const std::string& name) {
  const size_t bus = name.find(" (bus ");
  return bus == std::string::npos ? name : name.substr(0, bus);
}

// Progress lines on stderr, rank 0 only: phase, item k of n, seconds since the start.
class Progress {
 public:
  Progress(bool on, Clock::time_point t0) : on_(on), t0_(t0) {}
  void line(const char* phase, const std::string& what) const {
    if (!on_) return;
    std::fprintf(stderr, "hios tune: [%7.1f s] %-10s %s\n", seconds_since(t0_), phase, what.c_str());
    std::fflush(stderr);
  }
  double elapsed() const { return seconds_since(t0_); }

 private:
  bool on_;
  Clock::time_point t0_;
};

// Node and link costs from the database; stages measured on first sight (rank 0's device),
// cached by stage key, and predicted by the fitted concurrency model once the budget is spent
// or when nothing can be measured.
class MeasuringCostModel final : public CostModel {
 public:
  MeasuringCostModel(ProfileDb& db, const DevicePreset& preset, prof::StageTimer* timer, const TuneOptions& o,
                     const Progress& progress)
      : db_(db), preset_(preset), timer_(timer), opt_(o), progress_(progress) {
    ProfileDb nodes_only = db;
    nodes_only.stages.clear();
    base_ = make_profile_cost_model(nodes_only, "measured", preset);
    for (const ProfileStage& st : db.stages) cache_.emplace(st.key.dump(), st.ms);
  }
  std::string name() const override { return "measured"; }
  std::string device() const override { return db_.device; }
  double node_ms(const Graph& g, int node, int gpu) const override { return base_->node_ms(g, node, gpu); }
  double transfer_ms(double bytes, int src, int dst) const override {
    return base_->transfer_ms(bytes, src, dst) + transfer_extra_ms;
  }

  double stage_ms(const Graph& g, const Stage& stage, int gpu) const override {
    Stage busy;
    for (const Group& gr : stage.groups) {
      if (!gr.nodes.empty()) busy.groups.push_back(gr);
    }
    if (busy.groups.size() <= 1) return base_->stage_ms(g, busy, gpu);  // one stream: the sum of its nodes
    const std::string key = stage_key(g, busy).dump();
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      if (!fresh_.count(key) && used_.insert(key).second) ++reused;
      return it->second;
    }
    // Wider stages than any search may build (the lower bound asks for every node at once) are
    // questions for the model, not for the device.
    if (timer_ && int(busy.groups.size()) <= timer_->streams() && measuring_s_ < opt_.stage_budget_s) {
      const auto t0 = Clock::now();
      const double guess = combine_stage_ms(fitted_, measured_stage_items(g, busy, *base_, preset_, gpu));
      const double ms = timer_->stage_ms(busy, opt_.stage_warmup, opt_.stage_iters, guess);
      measuring_s_ += seconds_since(t0);
      cache_.emplace(key, ms);
      fresh_.insert(key);
      db_.stages.push_back(ProfileStage{stage_key(g, busy), ms, opt_.stage_iters});
      observations.push_back({measured_stage_items(g, busy, *base_, preset_, gpu), ms});
      ++measured;
      if (measured % 200 == 0) {
        progress_.line("stages", strprintf("%d measured, %d reused (%.1f s of the %.0f s budget)", measured, reused,
                                           measuring_s_, opt_.stage_budget_s));
      }
      return ms;
    }
    // Not measured: the database's fitted model (or the preset's) over measured node times.
    ++predicted;
    const double ms = combine_stage_ms(fitted_, measured_stage_items(g, busy, *base_, preset_, gpu));
    cache_.emplace(key, ms);
    return ms;
  }

  // From now on unmeasured stages use this concurrency model.
  void use_fit(const DevicePreset& fitted) { fitted_ = fitted; }

  mutable int measured = 0, reused = 0, predicted = 0;
  mutable std::vector<StageObservation> observations;
  // Calibrated cost of a transfer inside a pass beyond the link measured between idle GPUs
  // (the calibration in tune()); 0 until the candidates are timed.
  double transfer_extra_ms = 0;

 private:
  ProfileDb& db_;
  DevicePreset preset_;
  DevicePreset fitted_ = preset_;
  prof::StageTimer* timer_;
  const TuneOptions& opt_;
  const Progress& progress_;
  std::unique_ptr<CostModel> base_;
  mutable std::unordered_map<std::string, double> cache_;
  mutable std::set<std::string> fresh_, used_;
  mutable double measuring_s_ = 0;
};

// ---------------------------------------------------------------------------------------------
// The job: rank 0 leads, every other rank follows its commands.

class Job {
 public:
  Job(const Graph& g, const TuneOptions& o, exec::RankSession& s) : g_(g), o_(o), s_(s), comm_(s.comm()) {}

  // Rank 0: sends the command to every rank, then runs it itself.
  json lead(const json& cmd) {
    std::string text = cmd.dump();
    uint64_t n = text.size();
    comm_.broadcast(&n, sizeof n, 0);
    comm_.broadcast(text.data(), text.size(), 0);
    return execute(cmd);
  }
  // Other ranks: run commands until "quit".
  void follow() {
    for (;;) {
      uint64_t n = 0;
      comm_.broadcast(&n, sizeof n, 0);
      HIOS_CHECK(n < (uint64_t(1) << 32), "internal error: a tune command of %llu bytes", (unsigned long long)n);
      std::string text(size_t(n), '\0');
      comm_.broadcast(text.data(), text.size(), 0);
      const json cmd = json::parse(text);
      if (cmd.at("op") == "quit") return;
      execute(cmd);
    }
  }

  std::vector<float> output;  // rank 0: the graph output after the last timed candidate
  std::vector<prof::LinkMeasurement> links;

 private:
  json execute(const json& cmd) {
    const std::string op = cmd.at("op").get<std::string>();
    const int rank = comm_.rank(), n = comm_.size();
    if (op == "quit") return json();
    if (op == "adopt") {
      // Algorithm choices to rebuild instead of timing (rank 0's, or the database's).
      s_.backend().adopt_algorithm_choices(cmd.at("choices"));
      return json();
    }
    if (op == "load-empty") {
      s_.load(prof::empty_program(g_, rank, n));
      return json();
    }
    if (op == "links") {
      links = prof::measure_links(s_, cmd.at("nodes").get<std::vector<int>>(), o_.link_warmup, o_.link_iters);
      return json();
    }
    if (op == "measure-load") {
      s_.load(prof::measurement_program(g_, rank, n, cmd.at("streams").get<int>()));
      if (rank == 0) {
        s_.backend().set_input(exec::make_input(g_, o_.session.seed));
        s_.pass(true);  // every tensor now holds real data for the stages to read
      }
      return json();
    }
    if (op == "overhead") {
      // The fixed cost of a pass (barrier release, launch, the host's wait), which a
      // simulation of the stages does not contain: passes of a program with no work.
      s_.load(prof::empty_program(g_, rank, n));
      for (int i = 0; i < o_.warmup; ++i) s_.pass();
      return json(median(s_.timed_passes(cmd.at("passes").get<int>())));
    }
    if (op == "time") {
      const Schedule sched = schedule_from_json(g_, cmd.at("schedule"), "candidate");
      exec::LaunchOrder order;
      if (cmd.contains("launch_order")) {
        exec::SessionOptions measuring = o_.session;
        measuring.device = s_.backend_config().device;
        order = exec::make_launch_order(cmd.at("launch_order").get<std::string>(), g_, measuring, s_.comm());
      }
      s_.load_schedule(sched, true, order);
      if (rank == 0) s_.backend().set_input(exec::make_input(g_, o_.session.seed));
      // Exactly as `hios run` warms up and times a schedule.
      s_.warm_up(cmd.at("warmup").get<int>(), cmd.at("capture").get<bool>() && s_.can_capture());
      const double ms = median(s_.timed_passes(cmd.at("passes").get<int>()));
      if (rank == 0) output = s_.backend().read_tensor(g_.output());
      return json(ms);
    }
    throw_error("internal error: unknown tune command '%s'", op.c_str());
  }

  const Graph& g_;
  const TuneOptions& o_;
  exec::RankSession& s_;
  exec::Comm& comm_;
};

json identity_here(exec::RankSession& s, const Graph& g) {
  json id = json::object();
  id["backend"] = s.backend().name();
  id["device"] = device_model(s.backend().device_name());
  id["versions"] = s.backend().versions();
  id["transport"] = s.transport() ? s.transport()->name() + (s.transport()->versions().empty() ? "" : " " + s.transport()->versions())
                                  : std::string("none (one rank)");
  id["math"] = s.backend().math();
  // Node times depend on the layout; NCHW databases written before layouts existed stay valid.
  if (s.backend().layout() != "nchw") id["layout"] = s.backend().layout();
  id["graph"] = g.name;
  id["graph_digest"] = graph_digest(g);
  return id;
}

bool has_every_node(const Graph& g, const ProfileDb& db) {
  std::set<std::string> keys;
  for (const ProfileEntry& e : db.entries) keys.insert(e.key);
  for (int v = 0; v < g.size(); ++v) {
    if (v != g.input() && !keys.count(node_signature(g, v))) return false;
  }
  return true;
}

bool has_every_link(const ProfileDb& db, int gpus) {
  for (int a = 0; a < gpus; ++a) {
    for (int b = 0; b < gpus; ++b) {
      if (a == b) continue;
      bool found = false;
      for (const ProfileLink& l : db.links) found = found || (l.src == a && l.dst == b);
      if (!found) return false;
    }
  }
  return true;
}

// Replaces entries with the same key by the new ones, keeps the rest: a database grows.
void merge_entries(ProfileDb& db, std::vector<ProfileEntry> fresh) {
  std::map<std::string, size_t> at;
  for (size_t i = 0; i < db.entries.size(); ++i) at[db.entries[i].key] = i;
  for (ProfileEntry& e : fresh) {
    auto it = at.find(e.key);
    if (it != at.end()) {
      db.entries[it->second] = std::move(e);
    } else {
      at[e.key] = db.entries.size();
      db.entries.push_back(std::move(e));
    }
  }
}

struct Config {
  std::string algorithm, cost;
  int gpus, streams, window;
};

std::string label_of(const Config& c) {
  std::string s = strprintf("%s %d GPU%s, %d stream%s", c.algorithm.c_str(), c.gpus, c.gpus == 1 ? "" : "s", c.streams,
                            c.streams == 1 ? "" : "s");
  if (c.window > 1 && c.algorithm.rfind("hios", 0) == 0) s += strprintf(", window %d", c.window);
  return s + " (" + c.cost + ")";
}

// What names a candidate, in the database's list (gpus_key "gpus") and in meta.tune
// ("gpus_used").
json candidate_head(const Candidate& c, const char* gpus_key) {
  return json{{"label", c.label}, {"algorithm", c.algorithm}, {"cost", c.cost}, {gpus_key, c.gpus},
              {"streams", c.streams}, {"window", c.window}};
}

// The canonical text of a schedule's stages and transfers: two searches that agree give one
// candidate.
std::string structure_key(const Graph& g, const Schedule& s) {
  json j = schedule_to_json(g, s);
  j.erase("meta");
  return j.dump();
}

}  // namespace

// ---------------------------------------------------------------------------------------------

TuneResult tune(const Graph& g, const TuneOptions& o, exec::Comm& comm) {
  const auto t0 = Clock::now();
  HIOS_CHECK(o.gpus >= 1, "hios tune: --gpus must be at least 1 (got %d)", o.gpus);
  HIOS_CHECK(comm.size() == o.gpus, "hios tune: --gpus %d but the job has %d rank(s); start it with mpirun -np %d",
             o.gpus, comm.size(), o.gpus);
  HIOS_CHECK(o.mismatch == "refuse" || o.mismatch == "remeasure",
             "--profile-db-mismatch must be refuse or remeasure (got '%s')", o.mismatch.c_str());
  HIOS_CHECK(o.max_streams >= 1 && o.max_streams <= 16, "hios tune: --streams must be 1 to 16 (got %d)", o.max_streams);
  HIOS_CHECK(o.passes >= 1 && o.warmup >= 0 && o.node_iters >= 1 && o.stage_iters >= 1 && o.link_iters >= 1,
             "hios tune: passes and iterations must be at least 1, warm-ups at least 0");
  HIOS_CHECK(std::isfinite(o.stage_budget_s) && o.stage_budget_s >= 0 && o.stage_budget_s <= 86400,
             "hios tune: --stage-budget must be 0 to 86400 seconds (got %g)", o.stage_budget_s);
  const int rank = comm.rank();
  Progress progress(o.progress && rank == 0, t0);
  exec::Watchdog watchdog(o.timeout_s, [&] {
    std::fprintf(stderr, "hios: error: %s: hios tune timed out after %g s (--timeout); aborting the job\n",
                 comm.where().c_str(), o.timeout_s);
    std::fflush(stderr);
    comm.abort(2);
  });

  exec::PeerWatch peers(comm, [] { return "hios tune"; });  // a peer that dies is named
  exec::RankSession session(g, o.session, comm);
  Job job(g, o, session);
  if (rank != 0) {
    job.follow();
    return TuneResult{};
  }

  // ---- identity and the database
  TuneResult res;
  job.lead({{"op", "load-empty"}});  // makes the transport, whose version is part of the identity
  const json here = identity_here(session, g);
  ProfileDb db;
  bool from_file = false;
  if (!o.profile_db.empty() && std::filesystem::exists(o.profile_db)) {
    db = load_profile_db(o.profile_db);
    std::string diff = profile_identity_difference(db.identity, here);
    if (db.identity.empty()) diff = "it records no identity (written by hios profile, not hios tune)";
    if (diff.empty()) {
      from_file = true;
      progress.line("database", strprintf("%s: %zu node entries, %zu links, %zu stages reused", o.profile_db.c_str(),
                                          db.entries.size(), db.links.size(), db.stages.size()));
    } else {
      HIOS_CHECK(o.mismatch == "remeasure",
                 "--profile-db %s does not match this run: %s; pass --profile-db-mismatch remeasure to measure again "
                 "and replace it",
                 o.profile_db.c_str(), diff.c_str());
      progress.line("database", "does not match (" + diff + "): measuring again");
      db = ProfileDb{};
    }
  }
  if (!o.device.empty()) {
    db.device = o.device;
  } else if (db.device.empty()) {
    db.device = prof::preset_for_gpu_name(session.backend().device_name());
    // The cpu backend has no preset; the stage shares only seed the fitted concurrency model.
    if (db.device.empty()) db.device = "h200";
  }
  const DevicePreset preset = find_device_preset(db.device);
  db.identity = here;
  if (from_file && !db.choices.empty()) {
    job.lead({{"op", "adopt"}, {"choices", db.choices}});
    progress.line("database", strprintf("%zu algorithm choices adopted on every rank", db.choices.size()));
  }

  // The sequential run every candidate is checked against, before anything large is loaded.
  std::vector<float> reference;
  {
    exec::SessionOptions ro = o.session;
    ro.device = session.backend_config().device;
    ro.devices.clear();
    ro.transport.clear();
    std::unique_ptr<exec::Comm> self = exec::make_self_comm();
    reference = exec::run_reference(g, ro, *self, exec::make_input(g, o.session.seed))->backend().read_tensor(g.output());
  }
  if (o.gpus > 1) {
    // The reference run chose an algorithm for every node on this device; the other ranks,
    // on devices of the same kind, rebuild those choices instead of timing them again.
    const json mine = session.backend().algorithm_choices();
    if (!mine.empty()) job.lead({{"op", "adopt"}, {"choices", mine}});
  }
  const double tolerance = session.backend().name() == "cpu" ? 0.0 : exec::tolerance(session.backend().math());

  // ---- links
  const auto t_measure = Clock::now();
  if (o.gpus > 1 && !has_every_link(db, o.gpus)) {
    const std::vector<int> probes = prof::link_probe_nodes(g);
    progress.line("links", strprintf("%d ordered GPU pairs x %zu sizes the graph's edges carry", o.gpus * (o.gpus - 1),
                                     probes.size()));
    job.lead({{"op", "links"}, {"nodes", probes}});
    db.links.clear();
    for (const prof::LinkMeasurement& m : job.links) {
      db.links.push_back(m.link);
      progress.line("links", strprintf("GPU %d -> GPU %d: %.1f us + bytes / %.1f GB/s%s", m.link.src, m.link.dst,
                                       m.link.latency_us, m.link.bandwidth_gbs,
                                       m.fit_note.empty() ? "" : (" (constant: " + m.fit_note + ")").c_str()));
    }
    res.links_measured = true;
  }

  // ---- nodes, and the program stages are measured on
  const bool need_nodes = !has_every_node(g, db);
  std::unique_ptr<prof::StageTimer> timer;
  if (need_nodes || !from_file) {
    const int streams = std::max(o.max_streams, 4);  // the analytic candidates use 4
    progress.line("nodes", strprintf("loading the measuring program (%d nodes, %d streams)", g.size() - 1, streams));
    job.lead({{"op", "measure-load"}, {"streams", streams}});
    timer = std::make_unique<prof::StageTimer>(session);
    if (need_nodes) {
      std::vector<prof::NodeSamples> samples = timer->nodes(o.node_warmup, o.node_iters);
      if (session.backend().can_capture()) {
        // Candidates replay CUDA Graphs: time every node that way too, each alone in a graph,
        // with the eager time as the guess that sets how often it repeats there.
        for (prof::NodeSamples& ns : samples) {
          if (ns.wall_ms.empty()) continue;
          Stage one;
          one.groups.push_back(Group{{ns.node}});
          ns.wall_ms = timer->samples(one, 1, o.node_iters, prof::median(ns.wall_ms));
        }
      }
      merge_entries(db, prof::pool_by_signature(g, samples, &preset,
                                                o.session.math == "fp16" || o.session.math == "bf16"));
      double sum = 0;
      for (const prof::NodeSamples& ns : samples) sum += ns.wall_ms.empty() ? 0 : prof::median(ns.wall_ms);
      progress.line("nodes", strprintf("%d nodes x %d runs (%s): %.3f ms in nodes", g.size() - 1, o.node_iters,
                                       session.backend().can_capture() ? "CUDA Graph replays" : "eager", sum));
      res.nodes_measured = true;
    }
  }
  const double measure_s = seconds_since(t_measure);

  // ---- searches on the measured costs
  const auto t_search = Clock::now();
  MeasuringCostModel cost(db, preset, timer.get(), o, progress);
  if (!db.concurrency.is_null()) {
    cost.use_fit(apply_concurrency_fit(preset, concurrency_fit_from_json(db.concurrency, o.profile_db + ": concurrency")));
  }
  std::unique_ptr<CostModel> analytic = make_analytic_cost_model(preset);
  const int S = o.max_streams, N = o.gpus;
  std::vector<Config> configs = {{"sequential", "measured", 1, 1, 0},
                                 {"ios", "measured", 1, S, 0},
                                 {"hios-lp", "measured", 1, S, 4},
                                 {"hios-lp", "analytic", 1, 4, 4}};
  if (N > 1) {
    for (const Config& c : std::vector<Config>{{"hios-lp", "measured", N, S, 4},
                                               {"hios-lp", "measured", N, std::min(S, 2), 2},
                                               {"hios-mr", "measured", N, S, 4},
                                               {"heft", "measured", N, S, 4},
                                               {"hios-lp", "analytic", N, 4, 4}}) {
      configs.push_back(c);
    }
  }
  std::map<std::string, size_t> seen;  // structure -> candidate index
  json duplicates = json::array();
  // A re-tune that measured nothing new would search the same costs to the same schedules.
  const bool reuse_searches = from_file && !res.nodes_measured && !res.links_measured && db.searched.is_object() &&
                              db.searched.value("gpus", 0) == N && db.searched.value("streams", 0) == S &&
                              db.searched.contains("candidates") && db.searched["candidates"].is_array() &&
                              !db.searched["candidates"].empty();
  if (reuse_searches) {
    const json& list = db.searched["candidates"];
    for (size_t k = 0; k < list.size(); ++k) {
      const std::string where = o.profile_db + ": searched.candidates[" + std::to_string(k) + "]";
      JsonObject c(list[k], where);
      Candidate cand;
      cand.label = c.get_string("label");
      cand.algorithm = c.get_string("algorithm");
      cand.cost = c.get_string("cost");
      cand.gpus = int(c.get_int_in("gpus", 1, N));
      cand.streams = int(c.get_int_in("streams", 1, 16));
      cand.window = int(c.get_int_in("window", 0, 1 << 20));
      cand.predicted_ms = c.get_number("predicted_ms");
      if (c.has("measured_ms")) {
        cand.stored_ms = c.get_number("measured_ms");
        cand.stored_max_rel = c.get_number("max_rel", 0.0);
        cand.ok = c.get_bool("verified", false);
      }
      cand.schedule = schedule_from_json(g, c.get_object("schedule"), where + ".schedule");
      c.finish();
      HIOS_CHECK(cand.schedule.meta.num_gpus == N, "%s: a %d-GPU schedule in a %d-GPU tune", where.c_str(),
                 cand.schedule.meta.num_gpus, N);
      seen.emplace(structure_key(g, cand.schedule), res.candidates.size());
      res.candidates.push_back(std::move(cand));
    }
    if (db.searched.contains("duplicates")) duplicates = db.searched["duplicates"];
    progress.line("search", strprintf("%zu candidates from the database's searches (nothing new was measured)",
                                      res.candidates.size()));
  }
  auto search = [&](const std::vector<Config>& list, const std::string& round) {
    for (size_t k = 0; k < list.size(); ++k) {
      const Config& c = list[k];
      progress.line("search", strprintf("%s%zu of %zu: %s", round.c_str(), k + 1, list.size(), label_of(c).c_str()));
      SchedulerOptions so;
      so.num_gpus = c.gpus;
      so.max_streams = c.streams;
      so.window = c.window;
      // Today's analytic schedule as `hios schedule` makes it; the measured searches leave the
      // one-GPU alternative to the one-GPU candidates.
      so.single_gpu_fallback = c.cost == "analytic";
      Schedule s = run_algorithm(c.algorithm, g, c.cost == "analytic" ? *analytic : static_cast<const CostModel&>(cost), so);
      const double extra = cost.transfer_extra_ms;
      cost.transfer_extra_ms = 0;  // predictions start from the idle links; calibration comes after timing
      const double predicted = simulate(g, s, cost).latency_ms;  // measures what it has not seen
      cost.transfer_extra_ms = extra;
      const std::string key = structure_key(g, widen_schedule(s, N));
      auto [it, fresh] = seen.emplace(key, res.candidates.size());
      if (!fresh) {
        duplicates.push_back(json{{"label", label_of(c)}, {"same_as", res.candidates[it->second].label}});
        continue;
      }
      Candidate cand;
      cand.label = label_of(c);
      cand.algorithm = c.algorithm;
      cand.cost = c.cost;
      cand.gpus = s.meta.num_gpus;
      cand.streams = c.streams;
      cand.window = c.window;
      cand.predicted_ms = predicted;
      cand.schedule = widen_schedule(s, N);
      res.candidates.push_back(std::move(cand));
    }
  };
  if (!reuse_searches) search(configs, "");
  res.stages_measured = cost.measured;
  res.stages_reused = cost.reused;
  res.stages_predicted = cost.predicted;
  progress.line("search", strprintf("%zu distinct candidates; stages: %d measured, %d reused, %d predicted",
                                    res.candidates.size(), cost.measured, cost.reused, cost.predicted));

  // ---- the concurrency model, fitted to every stage measured in this job
  json fit_json = db.concurrency;
  if (cost.observations.size() >= 3) {
    const ConcurrencyFit fit = fit_concurrency(preset, cost.observations);
    db.concurrency = concurrency_fit_to_json(fit);
    fit_json = db.concurrency;
    progress.line("fit", strprintf("concurrency over %d stages: alpha %.3f, overhead %.1f us; mean error %.1f%% -> %.1f%%",
                                   fit.stages, fit.alpha, fit.stage_overhead_us, 100 * fit.error_before,
                                   100 * fit.error_after));
  }
  const double search_s = seconds_since(t_search);

  // ---- candidates on the real devices
  const auto t_time = Clock::now();
  db.pass_overhead_ms = job.lead({{"op", "overhead"}, {"passes", o.passes}}).get<double>();
  for (Candidate& c : res.candidates) c.predicted_ms += db.pass_overhead_ms;
  // Two rounds: a quick one over every candidate, then the full count of passes for those that
  // can still win. A quick round alone would let noise pick; a full round for all costs most
  // of a re-tune.
  const int quick = o.passes <= 5 ? o.passes : std::max(5, o.passes / 4);
  auto time_one = [&](Candidate& c, int passes, const char* round, size_t k, size_t n) {
    // The quick round warms up once after the capture (the graph is uploaded already); the
    // finalists as `hios run` does.
    const int warmup = passes < o.passes ? std::min(o.warmup, 1) : o.warmup;
    c.measured_ms = job.lead({{"op", "time"},
                              {"schedule", schedule_to_json(g, c.schedule)},
                              {"capture", true},
                              {"warmup", warmup},
                              {"passes", passes}})
                        .get<double>();
    c.passes = passes;
    const exec::Diff d = exec::compare(job.output, reference);
    c.max_rel = d.max_rel;
    c.ok = d.max_rel <= tolerance;
    progress.line("timing", strprintf("%s %zu of %zu: %-58s predicted %8.3f ms, measured %8.3f ms (%d passes), max_rel %.1e%s",
                                      round, k, n, c.label.c_str(), c.predicted_ms, c.measured_ms, passes, c.max_rel,
                                      c.ok ? "" : "  FAILED verification"));
  };
  // A re-tune does not time again what the last tune measured far from the fastest: it keeps
  // that measurement (passes 0 in the report).
  double stored_best = 0;
  for (const Candidate& c : res.candidates) {
    if (c.ok && c.stored_ms > 0 && (stored_best == 0 || c.stored_ms < stored_best)) stored_best = c.stored_ms;
  }
  for (size_t k = 0; k < res.candidates.size(); ++k) {
    Candidate& c = res.candidates[k];
    if (stored_best > 0 && c.stored_ms > o.retime_margin * stored_best) {
      c.measured_ms = c.stored_ms;
      c.max_rel = c.stored_max_rel;
      c.passes = 0;
      progress.line("timing", strprintf("kept %zu of %zu: %-58s measured %8.3f ms by the last tune (over %.2fx the fastest)",
                                        k + 1, res.candidates.size(), c.label.c_str(), c.measured_ms, o.retime_margin));
      continue;
    }
    time_one(c, quick, "quick", k + 1, res.candidates.size());
  }
  // Receives posted later: NCCL's receive kernel waits on the consumer's GPU, holding SMs, from
  // the moment it is posted. How much later pays depends on the stages, so it is measured on
  // the fastest multi-GPU candidate (docs/executor.md, "When receives are posted").
  {
    const Candidate* base = nullptr;
    for (const Candidate& c : res.candidates) {
      if (c.ok && c.gpus > 1 && c.schedule.meta.recv_lead < 0 && (!base || c.measured_ms < base->measured_ms)) base = &c;
    }
    if (base) {
      const Candidate from = *base;
      for (int lead : {0, 2}) {
        Candidate v = from;
        v.schedule.meta.recv_lead = lead;
        v.label = from.label + strprintf(", receives %d stage%s ahead", lead, lead == 1 ? "" : "s");
        res.candidates.push_back(std::move(v));
        time_one(res.candidates.back(), quick, "quick", res.candidates.size(), res.candidates.size());
      }
    }
  }
  // ---- calibration: what timing a stage or an idle link alone cannot see
  // A gap after every launch, fitted to the one-GPU candidates, and a cost per transfer, fitted
  // to the multi-GPU ones with that gap. Every candidate's prediction uses the costs fitted to
  // the *other* schedules (leave its structure out), so no prediction is fitted to its own
  // measurement; one-GPU candidates calibrate the multi-GPU ones and never the reverse.
  // Round 2 searches again with the per-transfer cost fitted to every multi-GPU candidate.
  struct Calibration {
    double launch_ms = 0, transfer_ms = 0;
    size_t one_gpu = 0, multi_gpu = 0;  // schedules fitted
  };
  auto calibrate = [&](bool predict) {
    static const std::vector<double> kLaunchGrid = {0, 0.002};  // one GPU: exactly linear in the gap
    static const std::vector<double> kTransferGrid = {0, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.4};
    CalibratedCost cal(cost);
    const size_t n = res.candidates.size();
    std::vector<std::string> keys(n);
    std::vector<Curve> curves(n);
    auto curve = [&](const Schedule& s, const std::vector<double>& grid, double& knob) {
      Curve c;
      for (double x : grid) {
        knob = x;
        c.x.push_back(x);
        c.y.push_back(simulate(g, s, cal).latency_ms);
      }
      knob = 0;
      return c;
    };
    auto fits = [&](const Candidate& c) { return c.ok && c.schedule.meta.recv_lead < 0; };
    for (size_t i = 0; i < n; ++i) {
      keys[i] = structure_key(g, res.candidates[i].schedule);
      if (res.candidates[i].gpus == 1) curves[i] = curve(res.candidates[i].schedule, kLaunchGrid, cal.extra_launch_ms);
    }
    auto points = [&](bool multi, const std::string& except) {
      std::vector<std::pair<const Curve*, double>> pts;
      for (size_t j = 0; j < n; ++j) {
        const Candidate& c = res.candidates[j];
        if (fits(c) && (c.gpus > 1) == multi && keys[j] != except) pts.push_back({&curves[j], c.measured_ms});
      }
      return pts;
    };
    Calibration all;
    all.launch_ms = fit_extra(points(false, ""), db.pass_overhead_ms);
    all.one_gpu = points(false, "").size();
    cal.extra_launch_ms = all.launch_ms;
    for (size_t i = 0; i < n; ++i) {
      if (res.candidates[i].gpus > 1) curves[i] = curve(res.candidates[i].schedule, kTransferGrid, cal.extra_transfer_ms);
    }
    all.transfer_ms = fit_extra(points(true, ""), db.pass_overhead_ms);
    all.multi_gpu = points(true, "").size();
    if (!predict) return all;
    for (size_t i = 0; i < n; ++i) {
      Candidate& c = res.candidates[i];
      const bool multi = c.gpus > 1;
      const auto others = points(multi, keys[i]);
      if (others.empty()) continue;  // nothing else to calibrate on: the uncalibrated prediction stays
      if (multi) {
        cal.extra_launch_ms = all.launch_ms;
        cal.extra_transfer_ms = fit_extra(others, db.pass_overhead_ms);
      } else {
        cal.extra_launch_ms = fit_extra(others, db.pass_overhead_ms);
        cal.extra_transfer_ms = 0;
      }
      c.launch_extra_ms = cal.extra_launch_ms;
      c.transfer_extra_ms = cal.extra_transfer_ms;
      c.predicted_ms = simulate(g, c.schedule, cal).latency_ms + db.pass_overhead_ms;
    }
    return all;
  };
  for (Candidate& c : res.candidates) c.predicted_uncalibrated_ms = c.predicted_ms;
  Calibration calibration = calibrate(false);
  progress.line("calibrate", strprintf("inside a pass: +%.2f us after every launch (%zu one-GPU schedules), +%.1f us "
                                       "on every transfer (%zu multi-GPU schedules)",
                                       1e3 * calibration.launch_ms, calibration.one_gpu, 1e3 * calibration.transfer_ms,
                                       calibration.multi_gpu));
  if (N > 1 && !reuse_searches && calibration.transfer_ms > 0) {
    if (timer) job.lead({{"op", "measure-load"}, {"streams", std::max(o.max_streams, 4)}});  // new stages are measured
    cost.transfer_extra_ms = calibration.transfer_ms;
    const size_t before = res.candidates.size();
    search({{"hios-lp", "calibrated", N, S, 4},
            {"hios-lp", "calibrated", N, std::min(S, 2), 2},
            {"hios-mr", "calibrated", N, S, 4},
            {"heft", "calibrated", N, S, 4}},
           "round 2, ");
    cost.transfer_extra_ms = 0;
    for (size_t k = before; k < res.candidates.size(); ++k) {
      Candidate& c = res.candidates[k];
      c.predicted_ms += db.pass_overhead_ms;
      c.predicted_uncalibrated_ms = c.predicted_ms;
      time_one(c, quick, "quick", k + 1, res.candidates.size());
    }
  }
  calibration = calibrate(true);
  res.stages_measured = cost.measured;  // round 2 may have measured more
  res.stages_reused = cost.reused;
  res.stages_predicted = cost.predicted;
  if (quick < o.passes) {
    double fastest = 0;
    for (const Candidate& c : res.candidates) {
      if (c.ok && (fastest == 0 || c.measured_ms < fastest)) fastest = c.measured_ms;
    }
    std::vector<Candidate*> finalists;
    for (Candidate& c : res.candidates) {
      if (c.ok && c.measured_ms <= fastest * (1 + o.finalist_margin)) finalists.push_back(&c);
    }
    for (size_t k = 0; k < finalists.size(); ++k) time_one(*finalists[k], o.passes, "final", k + 1, finalists.size());
  }
  // The launch order (executor/launch_order.hpp) of the fastest verified candidate: each order
  // timed over the full passes, the fastest kept; `hios run` uses it unless told otherwise.
  json launch_orders = json::object();
  std::string launch_order = "topo";
  {
    Candidate* lead = nullptr;
    for (Candidate& c : res.candidates) {
      if (c.ok && (!lead || c.measured_ms < lead->measured_ms)) lead = &c;
    }
    if (lead) {
      double best_ms = lead->passes == o.passes ? lead->measured_ms : 0;
      for (const char* name : {"topo", "opara", "measured"}) {
        if (std::string(name) == "topo" && best_ms > 0) {
          launch_orders[name] = best_ms;
          continue;
        }
        const double ms = job.lead({{"op", "time"},
                                    {"schedule", schedule_to_json(g, lead->schedule)},
                                    {"launch_order", name},
                                    {"capture", true},
                                    {"warmup", o.warmup},
                                    {"passes", o.passes}})
                              .get<double>();
        const exec::Diff d = exec::compare(job.output, reference);
        progress.line("timing", strprintf("launch order %-8s %-58s measured %8.3f ms, max_rel %.1e%s", name,
                                          lead->label.c_str(), ms, d.max_rel, d.max_rel <= tolerance ? "" : "  FAILED"));
        if (d.max_rel > tolerance) continue;
        launch_orders[name] = ms;
        if (std::string(name) == "topo") {
          lead->measured_ms = ms;
          best_ms = ms;
        } else if (ms < best_ms) {
          best_ms = ms;
          launch_order = name;
        }
      }
    }
  }
  // The searches' candidates and what they measured, for a re-tune.
  {
    json list = json::array();
    for (const Candidate& c : res.candidates) {
      if (c.schedule.meta.recv_lead >= 0) continue;  // timed variants, not searched
      json entry = candidate_head(c, "gpus");
      entry.update(json{{"predicted_ms", c.predicted_uncalibrated_ms - db.pass_overhead_ms},
                          {"measured_ms", c.measured_ms},
                          {"max_rel", c.max_rel},
                          {"verified", c.ok},
                          {"schedule", schedule_to_json(g, c.schedule)}});
      list.push_back(std::move(entry));
    }
    db.searched = json{{"gpus", N}, {"streams", S}, {"candidates", list}, {"duplicates", duplicates}};
  }

  job.lead({{"op", "quit"}});
  const double time_s = seconds_since(t_time);

  const Candidate* best = nullptr;
  for (const Candidate& c : res.candidates) {
    if (c.ok && (!best || c.measured_ms < best->measured_ms)) best = &c;
  }
  HIOS_CHECK(best != nullptr, "hios tune: no candidate matched the sequential run (tolerance %.1e); see the lines above",
             tolerance);

  // ---- the database and the report
  db.choices = session.backend().algorithm_choices();
  db.meta["date"] = json(today_utc());
  db.meta["written_by"] = "hios tune";
  db.meta["gpus"] = std::max(o.gpus, db.meta.value("gpus", 1));
  if (!o.profile_db.empty()) {
    std::filesystem::path parent = std::filesystem::path(o.profile_db).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent);
    save_profile_db(db, o.profile_db);
  }
  res.chosen = best->schedule;
  ScheduleMeta& m = res.chosen.meta;
  m.predicted_ms = best->predicted_ms;
  m.cost_model = o.profile_db.empty() ? "measured (hios tune)" : "measured (hios tune, " + o.profile_db + ")";
  m.device = db.device;
  m.profiling_seconds = measure_s;
  m.search_seconds = search_s;
  json cands = json::array();
  for (const Candidate& c : res.candidates) {
    json entry = candidate_head(c, "gpus_used");
    entry.update(json{{"predicted_ms", c.predicted_ms},
                         {"predicted_uncalibrated_ms", c.predicted_uncalibrated_ms},
                         {"launch_gap_us", 1e3 * c.launch_extra_ms},
                         {"transfer_extra_us", 1e3 * c.transfer_extra_ms},
                         {"measured_ms", c.measured_ms},
                         {"passes", c.passes},
                         {"recv_lead", c.schedule.meta.recv_lead},
                         {"error", c.measured_ms > 0 ? c.predicted_ms / c.measured_ms - 1 : 0.0},
                         {"max_rel", c.max_rel},
                         {"verified", c.ok},
                         {"chosen", &c == best}});
    cands.push_back(std::move(entry));
  }
  res.seconds = seconds_since(t0);
  m.tune = json{{"chosen", best->label},
                {"launch_order", {{"chosen", launch_order}, {"measured_ms", launch_orders}}},
                {"candidates", cands},
                {"duplicates", duplicates},
                {"measured_ms", best->measured_ms},
                {"passes", o.passes},
                {"pass_overhead_ms", db.pass_overhead_ms},
                {"calibration", {{"launch_gap_us", 1e3 * calibration.launch_ms},
                                 {"transfer_extra_us", 1e3 * calibration.transfer_ms},
                                 {"one_gpu_schedules", calibration.one_gpu},
                                 {"multi_gpu_schedules", calibration.multi_gpu}}},
                {"stages", {{"measured", res.stages_measured}, {"reused", res.stages_reused}, {"predicted", res.stages_predicted}}},
                {"nodes_measured", res.nodes_measured},
                {"searches_reused", reuse_searches},
                {"links_measured", res.links_measured},
                {"concurrency", fit_json},
                {"profile_db", o.profile_db},
                {"identity", here},
                {"seconds", {{"measure", measure_s}, {"search", search_s}, {"time", time_s}, {"total", res.seconds}}}};
  res.db = std::move(db);
  progress.line("done", strprintf("%s: %.3f ms measured (predicted %.3f ms) in %.1f s", best->label.c_str(),
                                  best->measured_ms, best->predicted_ms, res.seconds));
  return res;
}

std::string tune_report(const TuneResult& r) {
  std::string out = strprintf("# %-74s %9s %9s %6s %7s %9s %s\n", "candidate", "pred ms", "meas ms", "passes", "error",
                              "max_rel", "");
  for (const Candidate& c : r.candidates) {
    const bool chosen = c.label == r.chosen.meta.tune.value("chosen", std::string());
    out += strprintf("  %-74s %9.3f %9.3f %6d %+6.1f%% %9.1e %s\n", c.label.c_str(), c.predicted_ms, c.measured_ms,
                     c.passes, c.measured_ms > 0 ? 100 * (c.predicted_ms / c.measured_ms - 1) : 0.0, c.max_rel,
                     chosen ? "<- chosen" : (c.ok ? "" : "FAILED verification"));
  }
  out += strprintf("# stages: %d measured, %d reused, %d predicted; nodes %s, links %s; %.1f s\n", r.stages_measured,
                   r.stages_reused, r.stages_predicted, r.nodes_measured ? "measured" : "from the database",
                   r.links_measured ? "measured" : "from the database (or one GPU)", r.seconds);
  return out;
}

}  // namespace hios::tune
