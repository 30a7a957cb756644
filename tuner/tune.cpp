// hios tune (tune.hpp): the public functions and the Tuner's run() with its first phases, 1 to 4
// (the database, the reference run, the links and the nodes). The job of rank commands is in
// tune_job.cpp, the later phases in tune_search.cpp, tune_splits.cpp, tune_timing.cpp and
// tune_write.cpp, the measuring cost model in measuring_cost_model.cpp (tune_internal.hpp).
#include "tuner/tune.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <tuple>

#include "executor/verify.hpp"
#include "executor/watchdog.hpp"
#include "executor/weights.hpp"
#include "graph/error.hpp"
#include "graph/json_codec.hpp"
#include "graph/row_split.hpp"
#include "graph/stats.hpp"
#include "profiler/profile_builder.hpp"
#include "profiler/session_profiler.hpp"
#include "scheduler/concurrency_fit.hpp"
#include "scheduler/spatial.hpp"
#include "tuner/tune_internal.hpp"

namespace hios::tune {

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
// memory at the same speed (docs/executor.md, "Memory"). A re-tune keeps the last tune's choice
// among equals of its GPU count: moving between equals gains nothing, changes the schedule a user
// has, and costs the launch-order timings the last tune stored for its choice (nasnet_large
// 1024's re-tune took 10.6 s for such a move, to a schedule 0.7% slower for its smaller arena).
const Candidate* choose_candidate(const std::vector<Candidate>& candidates,
                                  const std::function<int64_t(const Candidate&)>& tensor_memory,
                                  const std::string& last_choice) {
  const Candidate* best = nullptr;
  for (const Candidate& c : candidates) {
    if (c.ok && (!best || c.measured_ms < best->measured_ms)) best = &c;
  }
  if (!best) return nullptr;
  // Ordered by GPUs, then whether it is a newcomer to the last tune's choice, then memory.
  auto key_of = [&](const Candidate& c) {
    return std::tuple<int, bool, int64_t>{c.gpus, c.label != last_choice, tensor_memory(c)};
  };
  const Candidate* chosen = best;
  std::tuple<int, bool, int64_t> least = key_of(*best);
  for (const Candidate& c : candidates) {
    if (!c.ok || &c == best || c.measured_ms > best->measured_ms * (1 + kTieMargin)) continue;
    const std::tuple<int, bool, int64_t> key = key_of(c);
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

namespace detail {

namespace {

// "NVIDIA H200 (bus 0000:19:00.0)" -> "NVIDIA H200": which GPU of a model does not matter.
std::string device_model(const std::string& name) {
  const size_t bus = name.find(" (bus ");
  return bus == std::string::npos ? name : name.substr(0, bus);
}

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
  // So are node times with the wide convolution search; `hios run` takes it from here.
  if (s.backend_config().conv_search == "wide") id["conv_search"] = "wide";
  // Choices timed another way (the host's submission counted, before the stream was held) are
  // not this run's: they and the node times measured with them are measured again.
  if (!s.backend().choice_timing().empty()) id["choice_timing"] = s.backend().choice_timing();
  id["graph"] = g.name;
  id["graph_digest"] = graph_digest(g);
  return id;
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

// A split candidate on the CPU backend differs from the unsplit run only where partial global
// pools are summed in another order (docs/row-splits.md, "Correctness"): at most this much of
// the output's largest magnitude.
constexpr double kSplitSumTolerance = 1e-6;

}  // namespace

std::vector<prof::NodeSamples> time_every_node(prof::StageTimer& timer, bool capture, int warmup, int iters) {
  std::vector<prof::NodeSamples> samples = timer.nodes(warmup, iters);
  if (!capture) return samples;
  for (prof::NodeSamples& ns : samples) {
    if (ns.wall_ms.empty()) continue;
    Stage one;
    one.groups.push_back(Group{{ns.node}});
    ns.wall_ms = timer.samples(one, 1, iters, prof::median(ns.wall_ms));
  }
  return samples;
}

bool has_every_node(const Graph& g, const ProfileDb& db) {
  std::set<std::string> keys;
  for (const ProfileEntry& e : db.entries) keys.insert(e.key);
  for (int v = 0; v < g.size(); ++v) {
    if (v != g.input() && !keys.count(node_signature(g, v))) return false;
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// The tune's phases in order; phases 1-4 follow here, the others in the files tune_internal.hpp
// names.

TuneResult Tuner::run() {
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
  time_receive_leads();  // the second round's fastest unsplit candidate, if it is new
  time_finalists();
  choose_launch_order();
  refit_predictions();
  record_searches();
  job_.lead({{"op", "quit"}});
  time_s_ = seconds_since(t_time);
  return choose_and_write();
}

// ---- phase 1: the database, and the identity it must match
void Tuner::open_database() {
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
void Tuner::take_reference() {
  const bool cpu = session_.backend().name() == "cpu";
  tolerance_ = cpu ? 0.0 : exec::tolerance(session_.backend().math());
  split_tolerance_ = cpu ? kSplitSumTolerance : tolerance_;
  if (adopt_stored_reference()) return;
  exec::SessionOptions ro = o_.session;
  ro.device = session_.backend_config().device;
  ro.devices.clear();
  ro.transport.clear();
  const auto t_reference = Clock::now();
  std::unique_ptr<exec::Comm> self = exec::make_self_comm();
  reference_ =
      exec::run_reference(g_, ro, *self, exec::make_input(g_, o_.session.seed))->backend().read_tensor(g_.output());
  progress_.line("reference", strprintf("the sequential run on rank 0's device: %.1f s (loading included)",
                                        seconds_since(t_reference)));
  // The reference run chose an algorithm for every node on this device.
  share_algorithm_choices();
}

// What the reference output depends on beyond the database's identity (graph, device, libraries,
// math, layout): the input and weights' seed and the options that change the arithmetic. Null
// where the output is not kept: weights from a file (the digest leaves their values out) or an
// output too large to keep in the database.
json Tuner::reference_key() const {
  if (!g_.weights.empty() || g_.nodes[size_t(g_.output())].shape.numel() > kStoredReferenceMax) return nullptr;
  const exec::SessionOptions& so = o_.session;
  return json{{"seed", so.seed}, {"threads", so.threads}, {"conv_impl", so.conv_impl},
              {"fold_relu", so.fold_relu}, {"values", g_.nodes[size_t(g_.output())].shape.numel()}};
}

// A tune on a database of the same identity takes the sequential run's output that the last
// tune stored with its searches (about 1-2 s of a re-tune: a separate one-rank run, its weights,
// one pass) when it was taken under the same key; the algorithm choices came from the database.
bool Tuner::adopt_stored_reference() {
  if (!from_file_ || !db_.searched.is_object() || !db_.searched.contains("reference")) return false;
  const json& stored = db_.searched["reference"];
  const json key = reference_key();
  if (key.is_null() || !stored.is_object() || stored.value("key", json()) != key || !stored.contains("output") ||
      !stored["output"].is_array() || stored["output"].size() != key["values"].get<size_t>()) {
    return false;
  }
  std::vector<float> out;
  out.reserve(stored["output"].size());
  for (const json& v : stored["output"]) {
    if (!v.is_number()) return false;
    out.push_back(v.get<float>());
    if (!std::isfinite(out.back())) return false;  // an edited database: take the reference again
  }
  reference_ = std::move(out);
  progress_.line("reference", strprintf("the sequential run's output from the database (%zu values)", reference_.size()));
  return true;
}

// The reference output as record_searches stores it; null where it is not kept.
json Tuner::stored_reference() const {
  json key = reference_key();
  if (key.is_null() || reference_.size() != key["values"].get<size_t>()) return nullptr;
  for (float v : reference_) {
    if (!std::isfinite(v)) return nullptr;  // JSON has no NaN: such an output is taken again
  }
  return json{{"key", std::move(key)}, {"output", reference_}};
}

// ---- phase 3: every ordered GPU pair, at the sizes the graph's edges carry
void Tuner::measure_links() {
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
void Tuner::measure_nodes() {
  const bool need_nodes = !has_every_node(g_, db_);
  if (!need_nodes && from_file_) return;
  load_measuring_program(0);
  if (need_nodes) {
    measure_nodes_of(0);
    res_.nodes_measured = true;
  }
}

// The other ranks, on devices of the same kind, rebuild rank 0's algorithm choices instead of
// timing them again when they load a candidate (about 5 s per split candidate on inception_v3
// at 2048, whose band shapes only rank 0's measuring program had met).
void Tuner::share_algorithm_choices() {
  if (N_ < 2) return;
  const json mine = session_.backend().algorithm_choices();
  if (!mine.empty()) job_.lead({{"op", "adopt"}, {"choices", mine}});
}

// Loads graph `variant`'s measuring program on every rank; stages of that graph are measured
// on it from now on.
void Tuner::load_measuring_program(int variant) {
  const int streams = std::max(o_.max_streams, 4);  // the analytic candidates use 4
  progress_.line("nodes", strprintf("loading the measuring program of %s (%d nodes, %d streams)",
                                    variant == 0 ? "the graph" : ("split " + splits_.at(variant - 1).label).c_str(),
                                    job_.graph(variant).size() - 1, streams));
  job_.lead({{"op", "measure-load"}, {"streams", streams}, {"graph", variant}});
  timer_ = std::make_unique<prof::StageTimer>(session_);
  if (cost_) cost_->attach(timer_.get(), &job_.graph(variant));
}

// Times every node of the loaded measuring program (graph `variant`) into the database.
void Tuner::measure_nodes_of(int variant) {
  const std::vector<prof::NodeSamples> samples =
      time_every_node(*timer_, session_.backend().can_capture(), o_.node_warmup, o_.node_iters);
  keep_node_samples(variant, samples);
}

// The samples of graph `variant`'s nodes, pooled by signature into the database.
void Tuner::keep_node_samples(int variant, const std::vector<prof::NodeSamples>& samples) {
  const Graph& g = job_.graph(variant);
  merge_entries(db_, prof::pool_by_signature(g, samples, &preset_, math_stores_16_bit(o_.session.math)));
  double sum = 0;
  for (const prof::NodeSamples& ns : samples) sum += ns.wall_ms.empty() ? 0 : prof::median(ns.wall_ms);
  progress_.line("nodes", strprintf("%s: %d nodes x %d runs (%s): %.3f ms in nodes",
                                    variant == 0 ? "the graph" : ("split " + splits_.at(variant - 1).label).c_str(),
                                    g.size() - 1, o_.node_iters,
                                    session_.backend().can_capture() ? "CUDA Graph replays" : "eager", sum));
}

// The nodes of row-split graphs new to the database, one graph per device at a time: a split's
// measuring program costs about 10 s on inception_v3 at 2048 (its bands' algorithms chosen,
// then every node timed), so two finalists on two GPUs cost one. Ranks that share a device (CPU
// ranks share the host's cores; several ranks may share one GPU) measure one graph at a time,
// as timing graphs side by side there would time the contention.
void Tuner::measure_split_parts(const std::vector<int>& variants) {
  std::vector<int> todo;
  for (int v : variants) {
    if (!has_every_node(job_.graph(v), db_)) todo.push_back(v);
  }
  if (todo.empty()) return;
  const size_t devices = job_.lead({{"op", "devices"}}).get<size_t>();
  const size_t width = devices == size_t(N_) ? size_t(N_) : 1;
  const int streams = std::max(o_.max_streams, 4);
  cost_->detach();  // rank 0's measuring program is replaced below
  for (size_t first = 0; first < todo.size(); first += width) {
    const std::vector<int> batch(todo.begin() + long(first), todo.begin() + long(std::min(todo.size(), first + width)));
    std::string names;
    for (int v : batch) names += (names.empty() ? "" : "; ") + splits_.at(v - 1).label;
    progress_.line("nodes", batch.size() == 1
                                ? strprintf("loading the measuring program of split %s", names.c_str())
                                : strprintf("loading the measuring programs of %zu splits, one per device: %s",
                                            batch.size(), names.c_str()));
    job_.lead({{"op", "measure-parts"}, {"graphs", batch}, {"streams", streams}});
    for (int v : batch) keep_node_samples(v, job_.part_samples.at(v));
  }
  // Rank 0 holds the first split's measuring program now; its stages are not measured (the
  // searches of split graphs predict them), and the whole graph's is loaded again before any.
  if (timer_) timer_ = std::make_unique<prof::StageTimer>(session_);
  res_.nodes_measured = true;
}

void Tuner::make_cost_models() {
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

}  // namespace detail

// ---------------------------------------------------------------------------------------------

void check_tune_options(const TuneOptions& o, const exec::Comm& comm) {
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
}

TuneResult tune(const Graph& g, const TuneOptions& o, exec::Comm& comm) {
  const auto t0 = Clock::now();
  check_tune_options(o, comm);
  exec::Watchdog watchdog(o.timeout_s, [&] {
    exec::abort_on_shared_timeout(comm, strprintf("hios tune timed out after %g s (--timeout)", o.timeout_s));
  });
  exec::PeerWatch peers(comm, [] { return "hios tune"; });  // a peer that dies is named
  detail::Tuner tuner(g, o, comm, t0);
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
