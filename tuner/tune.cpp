#include "tuner/tune.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <deque>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <unordered_map>

#include "executor/memory_plan.hpp"
#include "executor/verify.hpp"
#include "executor/watchdog.hpp"
#include "executor/weights.hpp"
#include "graph/error.hpp"
#include "graph/stats.hpp"
#include "graph/json_codec.hpp"
#include "graph/row_split.hpp"
#include "profiler/profile_builder.hpp"
#include "profiler/session_profiler.hpp"
#include "scheduler/algorithms.hpp"
#include "scheduler/concurrency_fit.hpp"
#include "scheduler/simulator.hpp"
#include "scheduler/spatial.hpp"
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

Schedule narrow_schedule(const Schedule& s, int gpus) {
  HIOS_CHECK(gpus >= 1 && gpus <= s.meta.num_gpus, "internal error: narrowing a %d-GPU schedule to %d GPUs",
             s.meta.num_gpus, gpus);
  Schedule n = s;
  for (auto& block : n.blocks) {
    for (size_t gpu = size_t(gpus); gpu < block.size(); ++gpu) {
      HIOS_CHECK(block[gpu].empty(), "internal error: narrowing drops the stages of GPU %zu", gpu);
    }
    block.resize(size_t(gpus));
  }
  for (const Transfer& t : n.transfers) {
    HIOS_CHECK(t.src < gpus && t.dst < gpus, "internal error: narrowing drops a transfer to GPU %d", t.dst);
  }
  n.meta.num_gpus = gpus;
  return n;
}

// A second GPU must pay for itself by more than the noise: a tie once went to a two-GPU split for
// its smaller arena per rank, and the main job then ran 0.5% behind the one-GPU schedule. Among
// equals, a receive lead's variant, whose fenced sends share memory, usually needs far less
// memory at the same speed (docs/executor.md, "Memory").
const Candidate* choose_candidate(const std::vector<Candidate>& candidates,
                                  const std::function<int64_t(const Candidate&)>& tensor_memory) {
  const Candidate* best = nullptr;
  for (const Candidate& c : candidates) {
    if (c.ok && (!best || c.measured_ms < best->measured_ms)) best = &c;
  }
  if (!best) return nullptr;
  const Candidate* chosen = best;
  std::pair<int, int64_t> least{best->gpus, tensor_memory(*best)};
  for (const Candidate& c : candidates) {
    if (!c.ok || &c == best || c.measured_ms > best->measured_ms * (1 + kTieMargin)) continue;
    const std::pair<int, int64_t> key{c.gpus, tensor_memory(c)};
    if (key < least) {
      least = key;
      chosen = &c;
    }
  }
  return chosen;
}

const Candidate* best_one_gpu(const TuneResult& r) {
  const Candidate* best = nullptr;
  for (const Candidate& c : r.candidates) {
    if (c.gpus == 1 && c.ok && c.variant == 0 && (!best || c.measured_ms < best->measured_ms)) best = &c;
  }
  return best;
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
// or when nothing can be measured. Stages are measured only for the graph whose measuring
// program is loaded (attach); the tuner detaches it before it loads anything else.
class MeasuringCostModel final : public CostModel {
 public:
  MeasuringCostModel(ProfileDb& db, const DevicePreset& preset, const TuneOptions& o, const Progress& progress)
      : db_(db), preset_(preset), opt_(o), progress_(progress), budget_s_(o.stage_budget_s) {
    refresh_nodes();
    for (const ProfileStage& st : db.stages) cache_.emplace(st.key.dump(), st.ms);
  }
  std::string name() const override { return "measured"; }
  std::string device() const override { return db_.device; }
  double node_ms(const Graph& g, int node, int gpu) const override {
    auto it = kept_.find(&g);
    if (it == kept_.end()) return base_->node_ms(g, node, gpu);
    // The database's node times do not depend on the GPU (one entry per signature).
    std::vector<double>& ms = it->second.ms;
    if (ms.empty()) ms.assign(size_t(g.size()), std::numeric_limits<double>::quiet_NaN());
    if (std::isnan(ms.at(size_t(node)))) ms[size_t(node)] = base_->node_ms(g, node, gpu);
    return ms[size_t(node)];
  }
  double transfer_ms(double bytes, int src, int dst) const override {
    return base_->transfer_ms(bytes, src, dst) + transfer_extra_ms;
  }

  // A graph that outlives this model (the tuned graph, the job's row splits): its nodes'
  // signatures and times are kept. Making them anew for every stage a search asks about was
  // most of a search on measured costs (20 s of 21 for a split inception_v3 on an H100 host).
  void keep_graph(const Graph& g) { kept_.emplace(&g, Kept{}); }

  // The node and link measurements again, after the database gained some (a split's parts).
  void refresh_nodes() {
    ProfileDb nodes_only;
    nodes_only.device = db_.device;
    nodes_only.entries = db_.entries;
    nodes_only.links = db_.links;
    base_ = make_profile_cost_model(std::move(nodes_only), "measured", preset_);
    for (auto& [graph, kept] : kept_) kept = Kept{std::move(kept.signature), {}, {}, {}};  // measured since: anew
  }
  void attach(prof::StageTimer* timer, const Graph* g) {
    timer_ = timer;
    timer_graph_ = g;
  }
  void detach() { attach(nullptr, nullptr); }
  // More wall time for measuring stages (a split graph's searches get their own share).
  void extend_budget(double seconds) { budget_s_ = measuring_s_ + seconds; }

  double stage_ms(const Graph& g, const Stage& stage, int gpu) const override {
    Stage busy;
    for (const Group& gr : stage.groups) {
      if (!gr.nodes.empty()) busy.groups.push_back(gr);
    }
    // One stream: the sum of its nodes (as the database's own model gives it).
    if (busy.groups.size() <= 1) return combine_stage_ms(preset_, items_of(g, busy, gpu));
    const std::string key = key_of(g, busy);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      if (!fresh_.count(key) && used_.insert(key).second) ++reused;
      return it->second;
    }
    // Wider stages than any search may build (the lower bound asks for every node at once) are
    // questions for the model, not for the device.
    if (timer_ && &g == timer_graph_ && int(busy.groups.size()) <= timer_->streams() && measuring_s_ < budget_s_) {
      const auto t0 = Clock::now();
      const double guess = combine_stage_ms(fitted_, items_of(g, busy, gpu));
      const double ms = timer_->stage_ms(busy, opt_.stage_warmup, opt_.stage_iters, guess);
      measuring_s_ += seconds_since(t0);
      cache_.emplace(key, ms);
      fresh_.insert(key);
      db_.stages.push_back(ProfileStage{stage_key(g, busy), ms, opt_.stage_iters});
      observations.push_back({items_of(g, busy, gpu), ms});
      ++measured;
      if (measured % 200 == 0) {
        progress_.line("stages", strprintf("%d measured, %d reused (%.1f s of the %.0f s budget)", measured, reused,
                                           measuring_s_, budget_s_));
      }
      return ms;
    }
    // Not measured: the database's fitted model (or the preset's) over measured node times.
    ++predicted;
    const double ms = combine_stage_ms(fitted_, items_of(g, busy, gpu));
    cache_.emplace(key, ms);
    return ms;
  }

  // From now on unmeasured stages use this concurrency model.
  void use_fit(const DevicePreset& fitted) { fitted_ = fitted; }
  const DevicePreset& fitted() const { return fitted_; }

  mutable int measured = 0, reused = 0, predicted = 0;
  mutable std::vector<StageObservation> observations;
  // Calibrated cost of a transfer inside a pass beyond the link measured between idle GPUs
  // (the calibration phase); 0 until the candidates are timed.
  double transfer_extra_ms = 0;

 private:
  ProfileDb& db_;
  DevicePreset preset_;
  DevicePreset fitted_ = preset_;
  const TuneOptions& opt_;
  const Progress& progress_;
  prof::StageTimer* timer_ = nullptr;
  const Graph* timer_graph_ = nullptr;
  std::unique_ptr<CostModel> base_;
  mutable std::unordered_map<std::string, double> cache_;
  struct Kept {
    std::vector<std::string> signature;
    std::vector<double> ms;
    std::vector<StageItem> item;
    std::vector<char> has_item;
  };
  mutable std::unordered_map<const Graph*, Kept> kept_;

  std::string key_of(const Graph& g, const Stage& st) const {
    auto it = kept_.find(&g);
    if (it == kept_.end()) return stage_key(g, st).dump();
    std::vector<std::string>& sig = it->second.signature;
    if (sig.empty()) sig.resize(size_t(g.size()));
    return stage_key_text(st, [&](int v) -> const std::string& {
      std::string& s = sig.at(size_t(v));
      if (s.empty()) s = node_signature(g, v);
      return s;
    });
  }
  // measured_stage_items over the database's node times, each node's item made once.
  std::vector<std::vector<StageItem>> items_of(const Graph& g, const Stage& st, int gpu) const {
    auto it = kept_.find(&g);
    if (it == kept_.end()) return measured_stage_items(g, st, *base_, preset_, gpu);
    Kept& k = it->second;
    if (k.item.empty()) {
      k.item.resize(size_t(g.size()));
      k.has_item.assign(size_t(g.size()), 0);
    }
    std::vector<std::vector<StageItem>> groups;
    for (const Group& gr : st.groups) {
      std::vector<StageItem> items;
      for (int v : gr.nodes) {
        if (!k.has_item.at(size_t(v))) {
          k.item[size_t(v)] = measured_stage_items(g, Stage{{Group{{v}}}}, *this, preset_, gpu).at(0).at(0);
          k.has_item[size_t(v)] = 1;
        }
        items.push_back(k.item[size_t(v)]);
      }
      groups.push_back(std::move(items));
    }
    return groups;
  }
  mutable std::set<std::string> fresh_, used_;
  mutable double measuring_s_ = 0;
  double budget_s_;
};

// ---------------------------------------------------------------------------------------------
// The job: rank 0 leads, every other rank follows its commands. Graph 0 is the tuned graph;
// a "split" command makes every rank build the same row split of it, graph 1, 2, ...

class Job {
 public:
  Job(const Graph& g, const TuneOptions& o, exec::RankSession& s) : o_(o), s_(s), comm_(s.comm()) {
    graphs_.push_back(&g);
  }

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

  const Graph& graph(int i) const { return *graphs_.at(size_t(i)); }
  std::string layout() const { return s_.backend().layout(); }
  int graphs() const { return int(graphs_.size()); }

  std::vector<float> output;  // rank 0: the graph output after the last timed candidate
  std::vector<prof::LinkMeasurement> links;

 private:
  json execute(const json& cmd) {
    const std::string op = cmd.at("op").get<std::string>();
    const int rank = comm_.rank(), n = comm_.size();
    const int gi = cmd.value("graph", 0);
    HIOS_CHECK(gi >= 0 && gi < int(graphs_.size()), "internal error: tune command for graph %d of %zu", gi,
               graphs_.size());
    const Graph& g = *graphs_[size_t(gi)];
    if (op == "quit") return json();
    if (op == "split") {
      owned_.push_back(apply_spatial(graph(0), spatial_from_json(cmd.at("plan"), "split")));
      graphs_.push_back(&owned_.back());
      return json(int(graphs_.size()) - 1);
    }
    if (op == "adopt") {
      // Algorithm choices to rebuild instead of timing (rank 0's, or the database's).
      s_.backend().adopt_algorithm_choices(cmd.at("choices"));
      return json();
    }
    s_.use_graph(g);  // every command below loads a program of g
    if (op == "load-empty") {
      s_.load(prof::empty_program(g, rank, n));
      return json();
    }
    if (op == "links") {
      links = prof::measure_links(s_, cmd.at("nodes").get<std::vector<int>>(), o_.link_warmup, o_.link_iters);
      return json();
    }
    if (op == "measure-load") {
      s_.load(prof::measurement_program(g, rank, n, cmd.at("streams").get<int>()));
      if (rank == 0) {
        s_.backend().set_input(exec::make_input(g, o_.session.seed));
        s_.pass(true);  // every tensor now holds real data for the stages to read
      }
      return json();
    }
    if (op == "overhead") {
      // The fixed cost of a pass (barrier release, launch, the host's wait), which a
      // simulation of the stages does not contain: passes of a program with no work.
      s_.load(prof::empty_program(g, rank, n));
      for (int i = 0; i < o_.warmup; ++i) s_.pass();
      return json(median(s_.timed_passes(cmd.at("passes").get<int>())));
    }
    if (op == "time") {
      const Schedule sched = schedule_from_json(g, cmd.at("schedule"), "candidate");
      exec::LaunchOrder order;
      if (cmd.contains("launch_order")) {
        exec::SessionOptions measuring = o_.session;
        measuring.device = s_.backend_config().device;
        order = exec::make_launch_order(cmd.at("launch_order").get<std::string>(), g, measuring, s_.comm());
      }
      s_.load_schedule(sched, true, order);
      if (rank == 0) s_.backend().set_input(exec::make_input(g, o_.session.seed));
      // Exactly as `hios run` warms up and times a schedule.
      s_.warm_up(cmd.at("warmup").get<int>(), cmd.at("capture").get<bool>() && s_.can_capture());
      const double ms = median(s_.timed_passes(cmd.at("passes").get<int>()));
      if (rank == 0) output = s_.backend().read_tensor(g.output());
      return json(ms);
    }
    throw_error("internal error: unknown tune command '%s'", op.c_str());
  }

  const TuneOptions& o_;
  exec::RankSession& s_;
  exec::Comm& comm_;
  std::vector<const Graph*> graphs_;
  std::deque<Graph> owned_;  // the row splits (a deque: graphs_ points into it)
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


std::string label_of(const Config& c, const std::string& split = "") {
  std::string s = strprintf("%s %d GPU%s, %d stream%s", c.algorithm.c_str(), c.gpus, c.gpus == 1 ? "" : "s", c.streams,
                            c.streams == 1 ? "" : "s");
  if (c.window > 1 && c.algorithm.rfind("hios", 0) == 0) s += strprintf(", window %d", c.window);
  if (!split.empty()) s += ", rows " + split;
  return s + " (" + c.cost + ")";
}

// What names a candidate, in the database's list (gpus_key "gpus") and in meta.tune
// ("gpus_used").
json candidate_head(const Candidate& c, const char* gpus_key) {
  json j = json{{"label", c.label}, {"algorithm", c.algorithm}, {"cost", c.cost}, {gpus_key, c.gpus},
                {"streams", c.streams}, {"window", c.window}};
  if (!c.split.empty()) j["split"] = c.split;
  return j;
}

// The canonical text of a schedule's stages and transfers: two searches that agree give one
// candidate. Schedules of different graphs (a split and another) never agree.
std::string structure_key(const Graph& g, const Schedule& s, int variant) {
  json j = schedule_to_json(g, s);
  j.erase("meta");
  return std::to_string(variant) + ":" + j.dump();
}

// A row split the tune times candidates of (graph `variant` of the job).
struct SplitVariant {
  SpatialPlan plan;
  std::string label;  // "Conv2d_1a_3x3..head 2 ways, mixed/2"
};

std::string split_label(const SpatialPlan& plan, const SplitStyle& style) {
  const SplitRegion& r = plan.regions.front();
  std::string blocks = r.first_block == r.last_block ? r.first_block : r.first_block + ".." + r.last_block;
  return strprintf("%s %d ways, %s", blocks.c_str(), r.parts, split_style_name(style).c_str());
}

// A split candidate on the CPU backend differs from the unsplit run only where partial global
// pools are summed in another order (docs/row-splits.md, "Correctness"): at most this much of
// the output's largest magnitude.
constexpr double kSplitSumTolerance = 1e-6;

// What calibration fitted: a launch gap (one-GPU schedules) and a per-transfer cost
// (multi-GPU schedules), and on how many schedules.
struct Calibration {
  double launch_ms = 0, transfer_ms = 0;
  size_t one_gpu = 0, multi_gpu = 0;
};

// ---------------------------------------------------------------------------------------------
// The tune, phase by phase: run() calls them in order (tune.hpp lists what each does). Rank 0
// runs the phases; every other rank follows rank 0's commands (Job).

class Tuner {
 public:
  Tuner(const Graph& g, const TuneOptions& o, exec::Comm& comm, Clock::time_point t0)
      : g_(g), o_(o), N_(o.gpus), S_(o.max_streams), progress_(o.progress && comm.rank() == 0, t0), t0_(t0),
        session_(g, o.session, comm), job_(g, o, session_) {}

  TuneResult run() {
    if (session_.comm().rank() != 0) {
      job_.follow();
      return TuneResult{};
    }
    open_database();
    take_reference();
    const auto t_measure = Clock::now();
    measure_links();
    measure_nodes();
    measure_s_ = seconds_since(t_measure);
    const auto t_search = Clock::now();
    make_cost_models();
    search_whole_graph();
    fit_concurrency();
    search_row_splits();
    search_s_ = seconds_since(t_search);
    const auto t_time = Clock::now();
    time_quick_round();
    time_receive_leads();
    calibrate_and_search_again();
    time_finalists();
    choose_launch_order();
    record_searches();
    job_.lead({{"op", "quit"}});
    time_s_ = seconds_since(t_time);
    return choose_and_write();
  }

 private:
  // ---- phase 1: the database, and the identity it must match
  void open_database() {
    job_.lead({{"op", "load-empty"}});  // makes the transport, whose version is part of the identity
    here_ = identity_here(session_, g_);
    if (!o_.profile_db.empty() && std::filesystem::exists(o_.profile_db)) {
      db_ = load_profile_db(o_.profile_db);
      std::string diff = profile_identity_difference(db_.identity, here_);
      if (db_.identity.empty()) diff = "it records no identity (written by hios profile, not hios tune)";
      if (diff.empty()) {
        from_file_ = true;
        progress_.line("database", strprintf("%s: %zu node entries, %zu links, %zu stages reused", o_.profile_db.c_str(),
                                             db_.entries.size(), db_.links.size(), db_.stages.size()));
      } else {
        HIOS_CHECK(o_.mismatch == "remeasure",
                   "--profile-db %s does not match this run: %s; pass --profile-db-mismatch remeasure to measure "
                   "again and replace it",
                   o_.profile_db.c_str(), diff.c_str());
        progress_.line("database", "does not match (" + diff + "): measuring again");
        db_ = ProfileDb{};
      }
    }
    if (!o_.device.empty()) {
      db_.device = o_.device;
    } else if (db_.device.empty()) {
      db_.device = prof::preset_for_gpu_name(session_.backend().device_name());
      // The cpu backend has no preset; the stage shares only seed the fitted concurrency model.
      if (db_.device.empty()) db_.device = "h200";
    }
    preset_ = find_device_preset(db_.device);
    db_.identity = here_;
    if (from_file_ && !db_.choices.empty()) {
      job_.lead({{"op", "adopt"}, {"choices", db_.choices}});
      progress_.line("database", strprintf("%zu algorithm choices adopted on every rank", db_.choices.size()));
    }
  }

  // ---- phase 2: the sequential run every candidate is checked against, before anything large
  // is loaded
  void take_reference() {
    exec::SessionOptions ro = o_.session;
    ro.device = session_.backend_config().device;
    ro.devices.clear();
    ro.transport.clear();
    std::unique_ptr<exec::Comm> self = exec::make_self_comm();
    reference_ =
        exec::run_reference(g_, ro, *self, exec::make_input(g_, o_.session.seed))->backend().read_tensor(g_.output());
    if (N_ > 1) {
      // The reference run chose an algorithm for every node on this device; the other ranks,
      // on devices of the same kind, rebuild those choices instead of timing them again.
      const json mine = session_.backend().algorithm_choices();
      if (!mine.empty()) job_.lead({{"op", "adopt"}, {"choices", mine}});
    }
    const bool cpu = session_.backend().name() == "cpu";
    tolerance_ = cpu ? 0.0 : exec::tolerance(session_.backend().math());
    split_tolerance_ = cpu ? kSplitSumTolerance : tolerance_;
  }

  // ---- phase 3: every ordered GPU pair, at the sizes the graph's edges carry
  void measure_links() {
    if (N_ < 2 || has_every_link(db_, N_)) return;
    const std::vector<int> probes = prof::link_probe_nodes(g_);
    progress_.line("links", strprintf("%d ordered GPU pairs x %zu sizes the graph's edges carry", N_ * (N_ - 1),
                                      probes.size()));
    job_.lead({{"op", "links"}, {"nodes", probes}});
    db_.links.clear();
    for (const prof::LinkMeasurement& m : job_.links) {
      db_.links.push_back(m.link);
      progress_.line("links", strprintf("GPU %d -> GPU %d: %.1f us + bytes / %.1f GB/s%s", m.link.src, m.link.dst,
                                        m.link.latency_us, m.link.bandwidth_gbs,
                                        m.fit_note.empty() ? "" : (" (constant: " + m.fit_note + ")").c_str()));
    }
    res_.links_measured = true;
  }

  // ---- phase 4: every node, and the program stages are measured on
  void measure_nodes() {
    const bool need_nodes = !has_every_node(g_, db_);
    if (!need_nodes && from_file_) return;
    load_measuring_program(0);
    if (need_nodes) {
      measure_nodes_of(0);
      res_.nodes_measured = true;
    }
  }

  // Loads graph `variant`'s measuring program on every rank; stages of that graph are measured
  // on it from now on.
  void load_measuring_program(int variant) {
    const int streams = std::max(o_.max_streams, 4);  // the analytic candidates use 4
    progress_.line("nodes", strprintf("loading the measuring program of %s (%d nodes, %d streams)",
                                      variant == 0 ? "the graph" : ("split " + splits_.at(variant - 1).label).c_str(),
                                      job_.graph(variant).size() - 1, streams));
    job_.lead({{"op", "measure-load"}, {"streams", streams}, {"graph", variant}});
    timer_ = std::make_unique<prof::StageTimer>(session_);
    if (cost_) cost_->attach(timer_.get(), &job_.graph(variant));
  }

  // Times every node of the loaded measuring program (graph `variant`) into the database.
  void measure_nodes_of(int variant) {
    const Graph& g = job_.graph(variant);
    std::vector<prof::NodeSamples> samples = timer_->nodes(o_.node_warmup, o_.node_iters);
    if (session_.backend().can_capture()) {
      // Candidates replay CUDA Graphs: time every node that way too, each alone in a graph,
      // with the eager time as the guess that sets how often it repeats there.
      for (prof::NodeSamples& ns : samples) {
        if (ns.wall_ms.empty()) continue;
        Stage one;
        one.groups.push_back(Group{{ns.node}});
        ns.wall_ms = timer_->samples(one, 1, o_.node_iters, prof::median(ns.wall_ms));
      }
    }
    merge_entries(db_, prof::pool_by_signature(g, samples, &preset_, o_.session.math == "fp16" || o_.session.math == "bf16"));
    double sum = 0;
    for (const prof::NodeSamples& ns : samples) sum += ns.wall_ms.empty() ? 0 : prof::median(ns.wall_ms);
    progress_.line("nodes", strprintf("%d nodes x %d runs (%s): %.3f ms in nodes", g.size() - 1, o_.node_iters,
                                      session_.backend().can_capture() ? "CUDA Graph replays" : "eager", sum));
  }

  void make_cost_models() {
    cost_ = std::make_unique<MeasuringCostModel>(db_, preset_, o_, progress_);
    cost_->keep_graph(g_);
    for (int v = 1; v < job_.graphs(); ++v) cost_->keep_graph(job_.graph(v));
    if (timer_) cost_->attach(timer_.get(), &g_);
    if (!db_.concurrency.is_null()) {
      cost_->use_fit(
          apply_concurrency_fit(preset_, concurrency_fit_from_json(db_.concurrency, o_.profile_db + ": concurrency")));
    }
    analytic_ = make_analytic_cost_model(preset_);
  }

  // ---- phase 5: the searches on the measured costs (or, in a re-tune that measured nothing
  // new, their candidates from the database)
  void search_whole_graph() {
    // Reused only when the database searched this very setting; a damaged section (a key of
    // another type) is searched again rather than read.
    const json& sd = db_.searched;
    auto is = [&](const char* key, const json& want) { return sd.contains(key) && sd[key] == want; };
    reuse_searches_ = from_file_ && !res_.nodes_measured && !res_.links_measured && sd.is_object() &&
                      is("gpus", json(N_)) && is("streams", json(S_)) && is("spatial", json(spatial_setting())) &&
                      sd.contains("candidates") && sd["candidates"].is_array() && !sd["candidates"].empty();
    if (reuse_searches_) {
      candidates_from_database();
      return;
    }
    std::vector<Config> configs = {{"sequential", "measured", 1, 1, 0},
                                   {"ios", "measured", 1, S_, 0},
                                   {"hios-lp", "measured", 1, S_, 4},
                                   {"hios-lp", "analytic", 1, 4, 4}};
    if (N_ > 1) {
      for (const Config& c : std::vector<Config>{{"hios-lp", "measured", N_, S_, 4},
                                                 {"hios-lp", "measured", N_, std::min(S_, 2), 2},
                                                 {"hios-mr", "measured", N_, S_, 4},
                                                 {"heft", "measured", N_, S_, 4},
                                                 {"hios-lp", "analytic", N_, 4, 4}}) {
        configs.push_back(c);
      }
    }
    search(configs, "");
    note_stage_counts();
    progress_.line("search", strprintf("%zu distinct candidates; stages: %d measured, %d reused, %d predicted",
                                       res_.candidates.size(), cost_->measured, cost_->reused, cost_->predicted));
  }

  // The candidates a tune of this database searched, each checked against its graph again.
  void candidates_from_database() {
    const json& list = db_.searched["candidates"];
    std::map<std::string, int> variant_of_plan;
    for (size_t k = 0; k < list.size(); ++k) {
      const std::string where = o_.profile_db + ": searched.candidates[" + std::to_string(k) + "]";
      JsonObject c(list[k], where);
      Candidate cand;
      cand.label = c.get_string("label");
      cand.algorithm = c.get_string("algorithm");
      cand.cost = c.get_string("cost");
      cand.gpus = int(c.get_int_in("gpus", 1, N_));
      cand.streams = int(c.get_int_in("streams", 1, 16));
      cand.window = int(c.get_int_in("window", 0, 1 << 20));
      cand.predicted_ms = c.get_number("predicted_ms");
      if (c.has("measured_ms")) {
        cand.stored_ms = c.get_number("measured_ms");
        cand.stored_max_rel = c.get_number("max_rel", 0.0);
        cand.ok = c.get_bool("verified", false);
      }
      if (c.has("split")) {
        cand.split = c.get_string("split");
        const json& plan = c.get_object("plan");
        const std::string text = plan.dump();
        auto it = variant_of_plan.find(text);
        if (it == variant_of_plan.end()) {
          SplitVariant sv{spatial_from_json(plan, where + ".plan"), cand.split};
          const int vi = job_.lead({{"op", "split"}, {"plan", plan}}).get<int>();
          splits_.push_back(std::move(sv));
          it = variant_of_plan.emplace(text, vi).first;
        }
        cand.variant = it->second;
      }
      cand.schedule = schedule_from_json(job_.graph(cand.variant), c.get_object("schedule"), where + ".schedule");
      c.finish();
      HIOS_CHECK(cand.schedule.meta.num_gpus == N_, "%s: a %d-GPU schedule in a %d-GPU tune", where.c_str(),
                 cand.schedule.meta.num_gpus, N_);
      seen_.emplace(structure_key(job_.graph(cand.variant), cand.schedule, cand.variant), res_.candidates.size());
      res_.candidates.push_back(std::move(cand));
    }
    if (db_.searched.contains("duplicates") && db_.searched["duplicates"].is_array()) duplicates_ = db_.searched["duplicates"];
    progress_.line("search", strprintf("%zu candidates from the database's searches (nothing new was measured)",
                                       res_.candidates.size()));
  }

  // Runs each configuration on the whole graph and adds what it finds as a candidate.
  void search(const std::vector<Config>& list, const std::string& round) {
    for (size_t k = 0; k < list.size(); ++k) {
      const Config& c = list[k];
      progress_.line("search", strprintf("%s%zu of %zu: %s", round.c_str(), k + 1, list.size(), label_of(c).c_str()));
      SchedulerOptions so;
      so.num_gpus = c.gpus;
      so.max_streams = c.streams;
      so.window = c.window;
      // Today's analytic schedule as `hios schedule` makes it; the measured searches leave the
      // one-GPU alternative to the one-GPU candidates.
      so.single_gpu_fallback = c.cost == "analytic";
      Schedule s = run_algorithm(c.algorithm, g_, c.cost == "analytic" ? *analytic_ : static_cast<const CostModel&>(*cost_), so);
      Candidate cand;
      cand.label = label_of(c);
      cand.algorithm = c.algorithm;
      cand.cost = c.cost;
      cand.gpus = s.meta.num_gpus;
      cand.streams = c.streams;
      cand.window = c.window;
      cand.predicted_ms = idle_prediction(g_, s);
      cand.schedule = widen_schedule(s, N_);
      add_candidate(std::move(cand));
    }
  }

  // The prediction from the isolated measurements (links between idle GPUs): calibration comes
  // after timing. Measures the stages it has not seen.
  double idle_prediction(const Graph& g, const Schedule& s) {
    const double extra = cost_->transfer_extra_ms;
    cost_->transfer_extra_ms = 0;
    const double predicted = simulate(g, s, *cost_).latency_ms;
    cost_->transfer_extra_ms = extra;
    return predicted;
  }

  // Adds a candidate unless one with the same stages and transfers is there (then it is listed
  // as a duplicate of that one).
  bool add_candidate(Candidate cand) {
    const std::string key = structure_key(job_.graph(cand.variant), cand.schedule, cand.variant);
    auto [it, fresh] = seen_.emplace(key, res_.candidates.size());
    if (!fresh) {
      duplicates_.push_back(json{{"label", cand.label}, {"same_as", res_.candidates[it->second].label}});
      return false;
    }
    res_.candidates.push_back(std::move(cand));
    return true;
  }

  void note_stage_counts() {
    res_.stages_measured = cost_->measured;
    res_.stages_reused = cost_->reused;
    res_.stages_predicted = cost_->predicted;
  }

  std::string spatial_setting() const { return N_ < 2 ? "off" : o_.spatial + "/" + o_.spatial_mode; }

  // ---- phase 7: row splits, pruned by the measured costs
  // Every one-region plan of 2 to N parts (any region, every mode) is ranked by a quick estimate
  // under costs derived from the measured nodes (scheduler/spatial.hpp); the best
  // `split_shortlist` are searched with hios-lp under those costs; the best `split_finalists`
  // of those, unless predicted far slower than the whole graph's best, get their own graph on
  // every rank, their parts measured, a search on measured costs, and become candidates.
  void search_row_splits() {
    if (N_ < 2 || o_.spatial == "off" || reuse_searches_) return;
    const auto t0 = Clock::now();
    std::vector<int> part_counts;
    if (o_.spatial == "auto") {
      for (int p = 2; p <= N_; ++p) part_counts.push_back(p);
    } else {
      part_counts.push_back(std::stoi(o_.spatial));
    }
    struct Ranked {
      SpatialPlan plan;
      int parts = 2;
      SplitStyle style;
      double ms = 0;
    };
    std::vector<Ranked> ranked;
    size_t total = 0;
    for (int parts : part_counts) {
      for (const auto& mode : split_modes(o_.spatial_mode)) {
        for (SpatialPlan& plan : region_plans(g_, parts, {mode})) {
          ++total;
          if (seconds_since(t0) > o_.split_budget_s / 2) continue;  // longest regions were ranked first
          const Graph sg = apply_spatial(g_, plan);
          const auto derived = make_split_cost_model(g_, sg, *cost_, cost_->fitted());
          ranked.push_back({std::move(plan), parts, mode, split_quick_estimate_ms(sg, *derived, parts)});
        }
      }
    }
    if (ranked.empty()) {
      progress_.line("splits", total == 0 ? "no run of blocks can be split by rows" : "no plan ranked within the budget");
      return;
    }
    std::stable_sort(ranked.begin(), ranked.end(), [](const Ranked& a, const Ranked& b) { return a.ms < b.ms; });
    progress_.line("splits", strprintf("%zu of %zu plans ranked under the measured nodes (%.1f s); best estimate "
                                       "%.3f ms (%s)",
                                       ranked.size(), total, seconds_since(t0), ranked.front().ms,
                                       split_label(ranked.front().plan, ranked.front().style).c_str()));
    // The shortlist: the best-ranked plan of every mode first (the quick estimate runs one stream
    // per GPU, which favours some modes over others), then the best-ranked of the rest.
    {
      std::vector<Ranked> shortlist, rest;
      std::set<SplitStyle> modes_in;
      for (Ranked& r : ranked) {
        if (modes_in.insert(r.style).second && shortlist.size() < size_t(o_.split_shortlist)) {
          shortlist.push_back(std::move(r));
        } else {
          rest.push_back(std::move(r));
        }
      }
      for (Ranked& r : rest) {
        if (shortlist.size() == size_t(o_.split_shortlist)) break;
        shortlist.push_back(std::move(r));
      }
      ranked = std::move(shortlist);
    }
    // The shortlist, searched under the derived costs.
    for (size_t k = 0; k < ranked.size(); ++k) {
      Ranked& r = ranked[k];
      if (seconds_since(t0) > o_.split_budget_s) {
        ranked.resize(k);
        break;
      }
      const Graph sg = apply_spatial(g_, r.plan);
      const auto derived = make_split_cost_model(g_, sg, *cost_, cost_->fitted());
      SchedulerOptions so = split_search_options(sg, r.parts);
      so.time_budget_s = std::max(1.0, o_.split_budget_s - seconds_since(t0));
      r.ms = run_algorithm("hios-lp", sg, *derived, so).meta.predicted_ms;
      progress_.line("splits", strprintf("shortlist %zu of %zu: %-44s predicted %8.3f ms", k + 1, ranked.size(),
                                         split_label(r.plan, r.style).c_str(), r.ms));
    }
    std::stable_sort(ranked.begin(), ranked.end(), [](const Ranked& a, const Ranked& b) { return a.ms < b.ms; });
    double best_whole = 0;
    for (const Candidate& c : res_.candidates) {
      if (c.cost == "measured" && (best_whole == 0 || c.predicted_ms < best_whole)) best_whole = c.predicted_ms;
    }
    // Splits predicted this much slower than the whole graph's best cannot win: not measured.
    constexpr double kHopeless = 1.5;
    // The finalists: the best predicted, one per mode while other modes remain (a prediction on
    // derived costs may err for a whole mode; measuring two modes hedges that).
    std::vector<const Ranked*> order;
    std::set<SplitStyle> modes_taken;
    for (const Ranked& r : ranked) {
      if (modes_taken.insert(r.style).second) order.push_back(&r);
    }
    for (const Ranked& r : ranked) {
      if (std::find(order.begin(), order.end(), &r) == order.end()) order.push_back(&r);
    }
    int finalists = 0;
    for (const Ranked* rp : order) {
      const Ranked& r = *rp;
      if (finalists == o_.split_finalists) break;
      // A finalist costs a measuring program, its nodes and a search (on nasnet_large at 2048, a
      // minute): past twice the budget only the first is measured.
      if (finalists > 0 && seconds_since(t0) > 2 * o_.split_budget_s) {
        progress_.line("splits", strprintf("%.0f s spent on splits (twice --split-budget): no more finalists",
                                           seconds_since(t0)));
        break;
      }
      if (best_whole > 0 && r.ms > kHopeless * best_whole) {
        progress_.line("splits", strprintf("%s: predicted %.3f ms, over %.1fx the best whole-graph schedule; "
                                           "not measured",
                                           split_label(r.plan, r.style).c_str(), r.ms, kHopeless));
        continue;
      }
      ++finalists;
      add_split_candidate(r.plan, r.parts, split_label(r.plan, r.style));
    }
    note_stage_counts();
  }

  // hios-lp on a split graph: on `parts` GPUs, with the suggested part-per-GPU mapping as one
  // more candidate mapping (a longest-path mapping does not find it by itself).
  SchedulerOptions split_search_options(const Graph& sg, int parts) const {
    SchedulerOptions so;
    so.num_gpus = parts;
    so.max_streams = S_;
    so.window = 4;
    so.single_gpu_fallback = false;  // the one-GPU candidates are the whole graph's
    so.gpu_hint = suggested_part_gpus(sg);
    return so;
  }

  // A split finalist: every rank builds its graph; its parts are measured, then hios-lp
  // searches it on measured costs (its stages measured in a budget of their own).
  void add_split_candidate(const SpatialPlan& plan, int parts, const std::string& label) {
    const int vi = job_.lead({{"op", "split"}, {"plan", spatial_to_json(plan)}}).get<int>();
    splits_.push_back(SplitVariant{plan, label});
    const Graph& sg = job_.graph(vi);
    cost_->keep_graph(sg);  // the job holds it until the tune ends
    const auto t0 = Clock::now();
    if (!has_every_node(sg, db_)) {
      load_measuring_program(vi);
      measure_nodes_of(vi);
      res_.nodes_measured = true;
    }
    cost_->refresh_nodes();
    // Its stages are predicted by the concurrency model fitted to the whole graph's measured
    // stages, not measured: a split graph's one big block asks IOS for thousands of distinct
    // stages (on inception_v3 at 2048, 40 s of measuring for a 3% better prediction).
    cost_->detach();
    SchedulerOptions so = split_search_options(sg, parts);
    so.time_budget_s = std::max(1.0, o_.split_budget_s);  // a split graph's one big block can take IOS long
    Schedule s = run_algorithm("hios-lp", sg, *cost_, so);
    s.meta.spatial = json{{"graph_digest", graph_digest(g_)}, {"regions", spatial_to_json(plan)["regions"]}};
    Candidate cand;
    cand.label = label_of(Config{"hios-lp", "measured", parts, S_, 4}, label);
    cand.variant = vi;
    cand.split = label;
    cand.algorithm = "hios-lp";
    cand.cost = "measured";
    cand.gpus = parts;
    cand.streams = S_;
    cand.window = 4;
    cand.predicted_ms = idle_prediction(sg, s);
    cand.schedule = widen_schedule(s, N_);
    progress_.line("splits", strprintf("%s: predicted %.3f ms on measured parts (%.1f s)", cand.label.c_str(),
                                       cand.predicted_ms, seconds_since(t0)));
    add_candidate(std::move(cand));
  }

  // ---- phase 6: the concurrency model, fitted to every stage measured in this job
  void fit_concurrency() {
    fit_json_ = db_.concurrency;
    if (cost_->observations.size() < 3) return;
    const ConcurrencyFit fit = hios::fit_concurrency(preset_, cost_->observations);
    db_.concurrency = concurrency_fit_to_json(fit);
    fit_json_ = db_.concurrency;
    cost_->use_fit(apply_concurrency_fit(preset_, fit));  // for the stages not measured (row splits)
    progress_.line("fit", strprintf("concurrency over %d stages: alpha %.3f, overhead %.1f us; mean error %.1f%% -> %.1f%%",
                                    fit.stages, fit.alpha, fit.stage_overhead_us, 100 * fit.error_before,
                                    100 * fit.error_after));
  }

  // ---- phase 8: every candidate on the real devices, quickly
  // Two rounds: a quick one over every candidate, then the full count of passes for those that
  // can still win. A quick round alone would let noise pick; a full round for all costs most
  // of a re-tune.
  int quick_passes() const { return o_.passes <= 5 ? o_.passes : std::max(5, o_.passes / 4); }

  void time_quick_round() {
    cost_->detach();  // candidates replace the measuring program
    db_.pass_overhead_ms = job_.lead({{"op", "overhead"}, {"passes", o_.passes}}).get<double>();
    for (Candidate& c : res_.candidates) c.predicted_ms += db_.pass_overhead_ms;
    // A re-tune does not time again what the last tune measured far from the fastest: it keeps
    // that measurement (passes 0 in the report).
    double stored_best = 0;
    for (const Candidate& c : res_.candidates) {
      if (c.ok && c.stored_ms > 0 && (stored_best == 0 || c.stored_ms < stored_best)) stored_best = c.stored_ms;
    }
    for (size_t k = 0; k < res_.candidates.size(); ++k) {
      Candidate& c = res_.candidates[k];
      if (stored_best > 0 && c.stored_ms > o_.retime_margin * stored_best) {
        c.measured_ms = c.stored_ms;
        c.max_rel = c.stored_max_rel;
        c.passes = 0;
        progress_.line("timing", strprintf("kept %zu of %zu: %-58s measured %8.3f ms by the last tune (over %.2fx the "
                                           "fastest)",
                                           k + 1, res_.candidates.size(), c.label.c_str(), c.measured_ms,
                                           o_.retime_margin));
        continue;
      }
      time_one(c, quick_passes(), "quick", k + 1, res_.candidates.size());
    }
  }

  // Times one candidate on every rank and checks its output against the reference.
  void time_one(Candidate& c, int passes, const char* round, size_t k, size_t n) {
    // The quick round warms up once after the capture (the graph is uploaded already); the
    // finalists as `hios run` does.
    const int warmup = passes < o_.passes ? std::min(o_.warmup, 1) : o_.warmup;
    const Graph& g = job_.graph(c.variant);
    c.measured_ms = job_.lead({{"op", "time"},
                               {"graph", c.variant},
                               {"schedule", schedule_to_json(g, c.schedule)},
                               {"capture", true},
                               {"warmup", warmup},
                               {"passes", passes}})
                        .get<double>();
    c.passes = passes;
    const exec::Diff d = exec::compare(job_.output, reference_);
    c.max_rel = d.max_rel;
    c.ok = d.max_rel <= tolerance_of(c);
    progress_.line("timing", strprintf("%s %zu of %zu: %-58s predicted %8.3f ms, measured %8.3f ms (%d passes), "
                                       "max_rel %.1e%s",
                                       round, k, n, c.label.c_str(), c.predicted_ms, c.measured_ms, passes, c.max_rel,
                                       c.ok ? "" : "  FAILED verification"));
  }
  double tolerance_of(const Candidate& c) const { return c.variant == 0 ? tolerance_ : split_tolerance_; }

  // ---- phase 9: receives posted later
  // NCCL's receive kernel waits on the consumer's GPU, holding SMs, from the moment it is
  // posted. How much later pays depends on the stages, so it is measured on the fastest
  // multi-GPU candidate (docs/executor.md, "When receives are posted").
  void time_receive_leads() {
    const Candidate* base = nullptr;
    for (const Candidate& c : res_.candidates) {
      if (c.ok && c.gpus > 1 && c.schedule.meta.recv_lead < 0 && (!base || c.measured_ms < base->measured_ms)) base = &c;
    }
    if (!base) return;
    const Candidate from = *base;
    for (int lead : {0, 2}) {
      Candidate v = from;
      v.schedule.meta.recv_lead = lead;
      v.label = from.label + strprintf(", receives %d stage%s ahead", lead, lead == 1 ? "" : "s");
      res_.candidates.push_back(std::move(v));
      time_one(res_.candidates.back(), quick_passes(), "quick", res_.candidates.size(), res_.candidates.size());
    }
  }

  // ---- phase 10: calibration, and the multi-GPU searches again with it
  // A gap after every launch, fitted to the one-GPU candidates, and a cost per transfer, fitted
  // to the multi-GPU ones with that gap. Every candidate's prediction uses the costs fitted to
  // the *other* schedules (leave its structure out), so no prediction is fitted to its own
  // measurement; one-GPU candidates calibrate the multi-GPU ones and never the reverse.
  void calibrate_and_search_again() {
    for (Candidate& c : res_.candidates) c.predicted_uncalibrated_ms = c.predicted_ms;
    calibration_ = calibrate(false);
    progress_.line("calibrate", strprintf("inside a pass: +%.2f us after every launch (%zu one-GPU schedules), +%.1f us "
                                          "on every transfer (%zu multi-GPU schedules)",
                                          1e3 * calibration_.launch_ms, calibration_.one_gpu,
                                          1e3 * calibration_.transfer_ms, calibration_.multi_gpu));
    if (N_ > 1 && !reuse_searches_ && calibration_.transfer_ms > 0) {
      if (timer_) load_measuring_program(0);  // new stages are measured
      cost_->transfer_extra_ms = calibration_.transfer_ms;
      const size_t before = res_.candidates.size();
      search({{"hios-lp", "calibrated", N_, S_, 4},
              {"hios-lp", "calibrated", N_, std::min(S_, 2), 2},
              {"hios-mr", "calibrated", N_, S_, 4},
              {"heft", "calibrated", N_, S_, 4}},
             "round 2, ");
      cost_->transfer_extra_ms = 0;
      cost_->detach();
      for (size_t k = before; k < res_.candidates.size(); ++k) {
        Candidate& c = res_.candidates[k];
        c.predicted_ms += db_.pass_overhead_ms;
        c.predicted_uncalibrated_ms = c.predicted_ms;
        time_one(c, quick_passes(), "quick", k + 1, res_.candidates.size());
      }
    }
    calibration_ = calibrate(true);
    note_stage_counts();  // round 2 may have measured more
  }

  Calibration calibrate(bool predict) {
    static const std::vector<double> kLaunchGrid = {0, 0.002};  // one GPU: exactly linear in the gap
    static const std::vector<double> kTransferGrid = {0, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.4};
    CalibratedCost cal(*cost_);
    const size_t n = res_.candidates.size();
    std::vector<std::string> keys(n);
    std::vector<Curve> curves(n);
    auto curve = [&](const Candidate& c, const std::vector<double>& grid, double& knob) {
      Curve cv;
      for (double x : grid) {
        knob = x;
        cv.x.push_back(x);
        cv.y.push_back(simulate(job_.graph(c.variant), c.schedule, cal).latency_ms);
      }
      knob = 0;
      return cv;
    };
    auto fits = [&](const Candidate& c) { return c.ok && c.schedule.meta.recv_lead < 0; };
    for (size_t i = 0; i < n; ++i) {
      const Candidate& c = res_.candidates[i];
      keys[i] = structure_key(job_.graph(c.variant), c.schedule, c.variant);
      if (c.gpus == 1) curves[i] = curve(c, kLaunchGrid, cal.extra_launch_ms);
    }
    auto points = [&](bool multi, const std::string& except) {
      std::vector<std::pair<const Curve*, double>> pts;
      for (size_t j = 0; j < n; ++j) {
        const Candidate& c = res_.candidates[j];
        if (fits(c) && (c.gpus > 1) == multi && keys[j] != except) pts.push_back({&curves[j], c.measured_ms});
      }
      return pts;
    };
    Calibration all;
    all.launch_ms = fit_extra(points(false, ""), db_.pass_overhead_ms);
    all.one_gpu = points(false, "").size();
    cal.extra_launch_ms = all.launch_ms;
    for (size_t i = 0; i < n; ++i) {
      if (res_.candidates[i].gpus > 1) curves[i] = curve(res_.candidates[i], kTransferGrid, cal.extra_transfer_ms);
    }
    all.transfer_ms = fit_extra(points(true, ""), db_.pass_overhead_ms);
    all.multi_gpu = points(true, "").size();
    if (!predict) return all;
    for (size_t i = 0; i < n; ++i) {
      Candidate& c = res_.candidates[i];
      const bool multi = c.gpus > 1;
      const auto others = points(multi, keys[i]);
      if (others.empty()) continue;  // nothing else to calibrate on: the uncalibrated prediction stays
      if (multi) {
        cal.extra_launch_ms = all.launch_ms;
        cal.extra_transfer_ms = fit_extra(others, db_.pass_overhead_ms);
      } else {
        cal.extra_launch_ms = fit_extra(others, db_.pass_overhead_ms);
        cal.extra_transfer_ms = 0;
      }
      c.launch_extra_ms = cal.extra_launch_ms;
      c.transfer_extra_ms = cal.extra_transfer_ms;
      c.predicted_ms = simulate(job_.graph(c.variant), c.schedule, cal).latency_ms + db_.pass_overhead_ms;
    }
    return all;
  }

  // ---- phase 11: the candidates that can still win, timed as `hios run` times them
  void time_finalists() {
    if (quick_passes() >= o_.passes) return;
    double fastest = 0;
    for (const Candidate& c : res_.candidates) {
      if (c.ok && (fastest == 0 || c.measured_ms < fastest)) fastest = c.measured_ms;
    }
    std::vector<Candidate*> finalists;
    for (Candidate& c : res_.candidates) {
      if (c.ok && c.measured_ms <= fastest * (1 + o_.finalist_margin)) finalists.push_back(&c);
    }
    for (size_t k = 0; k < finalists.size(); ++k) time_one(*finalists[k], o_.passes, "final", k + 1, finalists.size());
  }

  // ---- phase 12: the launch order (executor/launch_order.hpp) of the fastest verified
  // candidate, each order timed over the full passes; `hios run` uses the fastest unless told
  // otherwise
  void choose_launch_order() {
    Candidate* lead = choice();
    if (!lead) return;
    chosen_ = static_cast<int>(lead - res_.candidates.data());
    if (reuse_searches_ && adopt_stored_launch_order(*lead)) return;
    const Graph& g = job_.graph(lead->variant);
    double best_ms = lead->passes == o_.passes ? lead->measured_ms : 0;
    for (const char* name : {"topo", "opara", "measured"}) {
      if (std::string(name) == "topo" && best_ms > 0) {
        launch_orders_[name] = best_ms;
        continue;
      }
      const double ms = job_.lead({{"op", "time"},
                                   {"graph", lead->variant},
                                   {"schedule", schedule_to_json(g, lead->schedule)},
                                   {"launch_order", name},
                                   {"capture", true},
                                   {"warmup", o_.warmup},
                                   {"passes", o_.passes}})
                            .get<double>();
      const exec::Diff d = exec::compare(job_.output, reference_);
      const bool ok = d.max_rel <= tolerance_of(*lead);
      progress_.line("timing", strprintf("launch order %-8s %-58s measured %8.3f ms, max_rel %.1e%s", name,
                                         lead->label.c_str(), ms, d.max_rel, ok ? "" : "  FAILED"));
      if (!ok) continue;
      launch_orders_[name] = ms;
      if (std::string(name) == "topo") {
        lead->measured_ms = ms;
        best_ms = ms;
      } else if (ms < best_ms) {
        best_ms = ms;
        launch_order_ = name;
      }
    }
  }

  // A re-tune whose choice is the last tune's keeps the launch orders that tune timed for it
  // (`searched.launch_order` in the database) rather than timing them again.
  bool adopt_stored_launch_order(const Candidate& lead) {
    if (!db_.searched.is_object() || !db_.searched.contains("launch_order")) return false;
    const json& stored = db_.searched["launch_order"];
    if (!stored.is_object() || !stored.contains("candidate") || !stored["candidate"].is_string() ||
        stored["candidate"].get<std::string>() != lead.label || !stored.contains("chosen") ||
        !stored["chosen"].is_string() || !stored.contains("measured_ms") || !stored["measured_ms"].is_object()) {
      return false;
    }
    const std::string chosen = stored["chosen"].get<std::string>();
    json measured = json::object();
    for (const char* name : {"topo", "opara", "measured"}) {
      if (!stored["measured_ms"].contains(name)) continue;
      const json& ms = stored["measured_ms"][name];
      if (!ms.is_number() || !(ms.get<double>() > 0) || !std::isfinite(ms.get<double>())) return false;
      measured[name] = ms;
    }
    if (!measured.contains(chosen)) return false;
    launch_order_ = chosen;
    launch_orders_ = measured;
    launch_orders_["topo"] = lead.measured_ms;  // timed again in this re-tune's finals
    progress_.line("timing", strprintf("launch order %s, kept: the last tune timed the launch orders of %s", chosen.c_str(),
                                       lead.label.c_str()));
    return true;
  }

  // The candidate to write (choose_candidate), its memory from the lowered programs.
  Candidate* choice() {
    const Candidate* c =
        choose_candidate(res_.candidates, [this](const Candidate& x) { return tensor_memory(x); });
    return c ? &res_.candidates[size_t(c - res_.candidates.data())] : nullptr;
  }

  // The shared arena of the candidate's fullest rank, in float32 bytes (cached per candidate).
  int64_t tensor_memory(const Candidate& c) {
    const std::string key = c.label;
    auto it = tensor_memory_.find(key);
    if (it != tensor_memory_.end()) return it->second;
    int64_t most = 0;
    const Graph& g = job_.graph(c.variant);
    for (exec::RankProgram& p : exec::lower_all(g, c.schedule)) {
      exec::share_buffers(g, p, exec::memory_plan_options(job_.layout(), g));
      most = std::max(most, p.tensor_memory());
    }
    return tensor_memory_[key] = most;
  }

  // The searches' candidates and what they measured, for a re-tune.
  void record_searches() {
    json list = json::array();
    for (const Candidate& c : res_.candidates) {
      if (c.schedule.meta.recv_lead >= 0) continue;  // timed variants, not searched
      json entry = candidate_head(c, "gpus");
      if (c.variant > 0) entry["plan"] = spatial_to_json(splits_.at(size_t(c.variant - 1)).plan);
      entry.update(json{{"predicted_ms", c.predicted_uncalibrated_ms - db_.pass_overhead_ms},
                        {"measured_ms", c.measured_ms},
                        {"max_rel", c.max_rel},
                        {"verified", c.ok},
                        {"schedule", schedule_to_json(job_.graph(c.variant), c.schedule)}});
      list.push_back(std::move(entry));
    }
    json orders = json::object();
    if (chosen_ >= 0) {
      orders = json{{"candidate", res_.candidates[size_t(chosen_)].label},
                    {"chosen", launch_order_},
                    {"measured_ms", launch_orders_}};
    }
    db_.searched = json{{"gpus", N_},           {"streams", S_},           {"spatial", spatial_setting()},
                        {"candidates", list},   {"duplicates", duplicates_}, {"launch_order", orders}};
  }

  // ---- phase 13: the fastest verified candidate, its metadata, the database
  TuneResult choose_and_write() {
    // The candidate whose launch orders were timed (a re-measured time must not move the choice).
    const Candidate* best = chosen_ >= 0 ? &res_.candidates[size_t(chosen_)] : choice();
    HIOS_CHECK(best != nullptr, "hios tune: no candidate matched the sequential run (tolerance %.1e); see the lines above",
               tolerance_);
    db_.choices = session_.backend().algorithm_choices();
    db_.meta["date"] = json(today_utc());
    db_.meta["written_by"] = "hios tune";
    db_.meta["gpus"] = std::max(o_.gpus, db_.meta.value("gpus", 1));
    if (!o_.profile_db.empty()) {
      std::filesystem::path parent = std::filesystem::path(o_.profile_db).parent_path();
      if (!parent.empty()) std::filesystem::create_directories(parent);
      save_profile_db(db_, o_.profile_db);
    }
    res_.chosen = best->schedule;
    res_.graph = job_.graph(best->variant);
    ScheduleMeta& m = res_.chosen.meta;
    m.predicted_ms = best->predicted_ms;
    m.cost_model = o_.profile_db.empty() ? "measured (hios tune)" : "measured (hios tune, " + o_.profile_db + ")";
    m.device = db_.device;
    m.profiling_seconds = measure_s_;
    m.search_seconds = search_s_;
    json cands = json::array();
    for (const Candidate& c : res_.candidates) {
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
      // Where the choice compared memory (candidates within 1% of the fastest): the fullest rank's arena.
      auto mem = tensor_memory_.find(c.label);
      if (mem != tensor_memory_.end()) entry["tensor_mb"] = double(mem->second) / 1e6;
      cands.push_back(std::move(entry));
    }
    res_.seconds = seconds_since(t0_);
    m.tune = json{{"chosen", best->label},
                  {"launch_order", {{"chosen", launch_order_}, {"measured_ms", launch_orders_}}},
                  {"candidates", cands},
                  {"duplicates", duplicates_},
                  {"measured_ms", best->measured_ms},
                  {"passes", o_.passes},
                  {"pass_overhead_ms", db_.pass_overhead_ms},
                  {"calibration", {{"launch_gap_us", 1e3 * calibration_.launch_ms},
                                   {"transfer_extra_us", 1e3 * calibration_.transfer_ms},
                                   {"one_gpu_schedules", calibration_.one_gpu},
                                   {"multi_gpu_schedules", calibration_.multi_gpu}}},
                  {"stages", {{"measured", res_.stages_measured}, {"reused", res_.stages_reused},
                              {"predicted", res_.stages_predicted}}},
                  {"nodes_measured", res_.nodes_measured},
                  {"searches_reused", reuse_searches_},
                  {"links_measured", res_.links_measured},
                  {"spatial", spatial_setting()},
                  {"concurrency", fit_json_},
                  {"profile_db", o_.profile_db},
                  {"identity", here_},
                  {"seconds", {{"measure", measure_s_}, {"search", search_s_}, {"time", time_s_}, {"total", res_.seconds}}}};
    res_.db = std::move(db_);
    progress_.line("done", strprintf("%s: %.3f ms measured (predicted %.3f ms) in %.1f s", best->label.c_str(),
                                     best->measured_ms, best->predicted_ms, res_.seconds));
    return std::move(res_);
  }

  const Graph& g_;
  const TuneOptions& o_;
  const int N_, S_;  // GPUs, most streams per stage
  Progress progress_;
  Clock::time_point t0_;
  exec::RankSession session_;
  Job job_;
  TuneResult res_;
  ProfileDb db_;
  bool from_file_ = false, reuse_searches_ = false;
  json here_;
  DevicePreset preset_;
  std::vector<float> reference_;
  double tolerance_ = 0, split_tolerance_ = 0;
  std::unique_ptr<prof::StageTimer> timer_;
  std::unique_ptr<MeasuringCostModel> cost_;
  std::unique_ptr<CostModel> analytic_;
  std::vector<SplitVariant> splits_;  // graph k of the job is splits_[k - 1]
  std::map<std::string, size_t> seen_;  // structure -> candidate index
  json duplicates_ = json::array();
  json fit_json_;
  Calibration calibration_;
  json launch_orders_ = json::object();
  int chosen_ = -1;                                    // index of the chosen candidate, once known
  std::map<std::string, int64_t> tensor_memory_;      // candidate label -> fullest rank's arena
  std::string launch_order_ = "topo";
  double measure_s_ = 0, search_s_ = 0, time_s_ = 0;
};

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
  HIOS_CHECK(std::isfinite(o.split_budget_s) && o.split_budget_s >= 0 && o.split_budget_s <= 86400,
             "hios tune: --split-budget must be 0 to 86400 seconds (got %g)", o.split_budget_s);
  HIOS_CHECK(o.split_shortlist >= 1 && o.split_finalists >= 0 && o.split_finalists <= o.split_shortlist,
             "hios tune: split finalists must be 0 to the shortlist's %d (got %d)", o.split_shortlist,
             o.split_finalists);
  check_spatial_options(SpatialOptions{o.spatial, o.spatial_mode});
  if (o.spatial != "off" && o.spatial != "auto") {
    HIOS_CHECK(std::stoi(o.spatial) <= o.gpus, "hios tune: --spatial %s splits rows across more GPUs than --gpus %d",
               o.spatial.c_str(), o.gpus);
  }
  exec::Watchdog watchdog(o.timeout_s, [&] {
    std::fprintf(stderr, "hios: error: %s: hios tune timed out after %g s (--timeout); aborting the job\n",
                 comm.where().c_str(), o.timeout_s);
    std::fflush(stderr);
    exec::print_main_thread_stack();
    comm.abort(2);
  });
  exec::PeerWatch peers(comm, [] { return "hios tune"; });  // a peer that dies is named
  Tuner tuner(g, o, comm, t0);
  return tuner.run();
}

std::string tune_report(const TuneResult& r) {
  int width = 58;
  for (const Candidate& c : r.candidates) width = std::max(width, int(c.label.size()));
  std::string out = strprintf("# %-*s %9s %9s %6s %7s %9s %s\n", width, "candidate", "pred ms", "meas ms", "passes",
                              "error", "max_rel", "");
  for (const Candidate& c : r.candidates) {
    const bool chosen = c.label == r.chosen.meta.tune.value("chosen", std::string());
    out += strprintf("  %-*s %9.3f %9.3f %6d %+6.1f%% %9.1e %s\n", width, c.label.c_str(), c.predicted_ms,
                     c.measured_ms, c.passes, c.measured_ms > 0 ? 100 * (c.predicted_ms / c.measured_ms - 1) : 0.0,
                     c.max_rel, chosen ? "<- chosen" : (c.ok ? "" : "FAILED verification"));
  }
  out += strprintf("# stages: %d measured, %d reused, %d predicted; nodes %s, links %s; %.1f s\n", r.stages_measured,
                   r.stages_reused, r.stages_predicted, r.nodes_measured ? "measured" : "from the database",
                   r.links_measured ? "measured" : "from the database (or one GPU)", r.seconds);
  return out;
}

}  // namespace hios::tune
