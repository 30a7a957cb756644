// The pieces of `hios tune` shared by its source files: the progress lines, the measuring cost
// model, the job of rank commands and the Tuner whose phases are defined across tune.cpp
// (public functions, the job, phases 1-4), tune_search.cpp (phases 5-6), tune_splits.cpp
// (phase 7), tune_timing.cpp (phases 8-12) and tune_write.cpp (phase 13). Internal: only
// tuner/ includes it; tune.hpp stays the interface.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "profiler/session_profiler.hpp"
#include "scheduler/algorithms.hpp"
#include "scheduler/concurrency_fit.hpp"
#include "scheduler/spatial.hpp"
#include "tuner/tune.hpp"

namespace hios::tune {

using Clock = std::chrono::steady_clock;

namespace detail {

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
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
// (measuring_cost_model.cpp)
class MeasuringCostModel final : public CostModel {
 public:
  MeasuringCostModel(ProfileDb& db, const DevicePreset& preset, const TuneOptions& o, const Progress& progress);
  std::string name() const override { return "measured"; }
  std::string device() const override { return db_.device; }
  double node_ms(const Graph& g, int node, int gpu) const override;
  double transfer_ms(double bytes, int src, int dst) const override {
    return base_->transfer_ms(bytes, src, dst) + transfer_extra_ms;
  }

  // A graph that outlives this model (the tuned graph, the job's row splits): its nodes'
  // signatures and times are kept. Making them anew for every stage a search asks about was
  // most of a search on measured costs (20 s of 21 for a split inception_v3 on an H100 host).
  void keep_graph(const Graph& g) { kept_.emplace(&g, Kept{}); }

  // The node and link measurements again, after the database gained some (a split's parts).
  void refresh_nodes();
  void attach(prof::StageTimer* timer, const Graph* g) {
    timer_ = timer;
    timer_graph_ = g;
  }
  void detach() { attach(nullptr, nullptr); }
  // More wall time for measuring stages (a split graph's searches get their own share).
  void extend_budget(double seconds) { budget_s_ = measuring_s_ + seconds; }

  double stage_ms(const Graph& g, const Stage& stage, int gpu) const override;

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

  std::string key_of(const Graph& g, const Stage& st) const;
  // measured_stage_items over the database's node times, each node's item made once.
  std::vector<std::vector<StageItem>> items_of(const Graph& g, const Stage& st, int gpu) const;
  mutable std::set<std::string> fresh_, used_;
  mutable double measuring_s_ = 0;
  double budget_s_;
};

// ---------------------------------------------------------------------------------------------
// The job: rank 0 leads, every other rank follows its commands. Graph 0 is the tuned graph;
// a "split" command makes every rank build the same row split of it, graph 1, 2, ...
// (tune.cpp)

class Job {
 public:
  Job(const Graph& g, const TuneOptions& o, exec::RankSession& s) : o_(o), s_(s), comm_(s.comm()) {
    graphs_.push_back(&g);
  }

  // Rank 0: sends the command to every rank, then runs it itself.
  json lead(const json& cmd);
  // Other ranks: run commands until "quit".
  void follow();

  const Graph& graph(int i) const { return *graphs_.at(size_t(i)); }
  std::string layout() const { return s_.backend().layout(); }
  int graphs() const { return int(graphs_.size()); }

  std::vector<float> output;  // rank 0: the graph output after the last timed candidate
  std::vector<prof::LinkMeasurement> links;
  // Rank 0, after "measure-parts": every node's samples of each graph measured, by graph.
  std::map<int, std::vector<prof::NodeSamples>> part_samples;

 private:
  json execute(const json& cmd);
  json measure_parts(const json& cmd);
  void load_measuring(const Graph& g, int streams, int measuring_rank);

  const TuneOptions& o_;
  exec::RankSession& s_;
  exec::Comm& comm_;
  std::vector<const Graph*> graphs_;
  std::deque<Graph> owned_;  // the row splits (a deque: graphs_ points into it)
};

// Whether the database has a time for every node signature of g (tune.cpp).
bool has_every_node(const Graph& g, const ProfileDb& db);

// Every node of the measuring program this rank loaded, `iters` eager passes after `warmup`;
// where the backend captures, each node is then timed again alone in a CUDA Graph, as the
// candidates replay graphs, with the eager time as the guess that sets how often it repeats
// there (tune.cpp).
std::vector<prof::NodeSamples> time_every_node(prof::StageTimer& timer, bool capture, int warmup, int iters);

// One search setting: the algorithm, the costs it searches on, and its GPUs, streams and window.
struct Config {
  std::string algorithm, cost;
  int gpus, streams, window;
};

// The candidate's label, e.g. "hios-lp 2 GPUs, 4 streams, window 4 (measured)" (tune_search.cpp).
std::string label_of(const Config& c, const std::string& split = "");

// The canonical text of a schedule's stages and transfers: two searches that agree give one
// candidate. Schedules of different graphs (a split and another) never agree. (tune_search.cpp)
std::string structure_key(const Graph& g, const Schedule& s, int variant);

// A row split the tune times candidates of (graph `variant` of the job).
struct SplitVariant {
  SpatialPlan plan;
  std::string label;  // "Conv2d_1a_3x3..head 2 ways, mixed/2"
};

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

  TuneResult run();

 private:
  // ---- phases 1-4, the database and the measurements (tune.cpp)
  void open_database();
  void take_reference();
  json reference_key() const;
  bool adopt_stored_reference();
  json stored_reference() const;
  // Outputs up to this many values are kept in the database (a classifier's logits at batch 64).
  static constexpr int64_t kStoredReferenceMax = 64000;
  void measure_links();
  void measure_nodes();
  void share_algorithm_choices();
  void load_measuring_program(int variant);
  void measure_nodes_of(int variant);
  void keep_node_samples(int variant, const std::vector<prof::NodeSamples>& samples);
  void measure_split_parts(const std::vector<int>& variants);
  void make_cost_models();

  // ---- phases 5-6, the searches and the concurrency fit (tune_search.cpp)
  void search_whole_graph();
  void candidates_from_database();
  void search(const std::vector<Config>& list, const std::string& round);
  double idle_prediction(const Graph& g, const Schedule& s);
  bool add_candidate(Candidate cand);
  void note_stage_counts();
  void fit_concurrency();
  std::string spatial_setting() const { return N_ < 2 ? "off" : o_.spatial + "/" + o_.spatial_mode; }

  // ---- phase 7, row splits (tune_splits.cpp)
  // A row-split plan as the phase ranks it: its parts, mode and latest estimate.
  struct RankedSplit {
    SpatialPlan plan;
    int parts = 2;
    SplitStyle style;
    double ms = 0;
  };
  void search_row_splits();
  std::vector<RankedSplit> rank_split_plans(Clock::time_point t0);
  std::vector<RankedSplit> split_shortlist(std::vector<RankedSplit> ranked) const;
  void search_split_shortlist(std::vector<RankedSplit>& shortlist, Clock::time_point t0);
  std::vector<const RankedSplit*> split_finalists(const std::vector<RankedSplit>& searched, Clock::time_point t0);
  SchedulerOptions split_search_options(const Graph& sg, int parts) const;
  int add_split_variant(const SpatialPlan& plan, const std::string& label);
  void add_split_candidate(int variant, int parts);

  // ---- phases 8-12, timing, calibration and the launch order (tune_timing.cpp)
  // The quick round's passes: a quarter of the full count, at least 5 (all of them up to 5).
  int quick_passes() const { return o_.passes <= 5 ? o_.passes : std::max(5, o_.passes / 4); }
  void time_quick_round();
  void time_one(Candidate& c, int passes, const char* round, size_t k, size_t n);
  double tolerance_of(const Candidate& c) const { return c.variant == 0 ? tolerance_ : split_tolerance_; }
  void time_receive_leads();
  std::vector<int> leads_to_time(const Candidate& base);
  static std::string lead_label(const std::string& base, int lead);
  int last_choice_base() const;
  int last_chosen_lead(const std::string& base) const;
  static const std::vector<int>& leads_tried();
  void calibrate_and_search_again();
  Calibration calibrate(bool predict);
  double fastest_link_latency_ms() const;
  void time_finalists();
  void choose_launch_order();
  void refit_predictions();
  bool adopt_stored_launch_order(const Candidate& lead);
  std::string last_choice() const;
  Candidate* choice();
  int64_t tensor_memory(const Candidate& c);

  // ---- phase 13, the choice and the database written (tune_write.cpp)
  void record_searches();
  TuneResult choose_and_write();

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

}  // namespace detail

}  // namespace hios::tune
