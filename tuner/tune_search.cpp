// hios tune's searches, phases 5 and 6 (tune_internal.hpp): the algorithms run over the whole
// graph on the measured costs (or their candidates read back from the database), and the
// concurrency model fitted to the stages those searches measured. Apart from the measuring
// phases (tune.cpp) and the timing (tune_timing.cpp) because they only ask the cost model and
// add candidates; nothing here runs on the devices but the stages the cost model measures.
#include <algorithm>
#include <map>

#include "graph/error.hpp"
#include "graph/json_reader.hpp"
#include "graph/row_split.hpp"
#include "scheduler/simulator.hpp"
#include "tuner/tune_internal.hpp"

namespace hios::tune::detail {

std::string label_of(const Config& c, const std::string& split) {
  std::string s = strprintf("%s %d GPU%s, %d stream%s", c.algorithm.c_str(), c.gpus, c.gpus == 1 ? "" : "s", c.streams,
                            c.streams == 1 ? "" : "s");
  if (c.window > 1 && c.algorithm.rfind("hios", 0) == 0) s += strprintf(", window %d", c.window);
  if (!split.empty()) s += ", rows " + split;
  return s + " (" + c.cost + ")";
}

std::string structure_key(const Graph& g, const Schedule& s, int variant) {
  json j = schedule_to_json(g, s);
  j.erase("meta");
  return std::to_string(variant) + ":" + j.dump();
}

// ---- phase 5: the searches on the measured costs (or, in a re-tune that measured nothing
// new, their candidates from the database)
void Tuner::search_whole_graph() {
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
void Tuner::candidates_from_database() {
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
      cand.stored_fastest_ms = std::min(cand.stored_ms, c.get_number("fastest_posting_ms", cand.stored_ms));
      if (c.has("fastest_posting_lead")) cand.stored_fastest_lead = int(c.get_int_in("fastest_posting_lead", -1, 1 << 20));
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
void Tuner::search(const std::vector<Config>& list, const std::string& round) {
  for (size_t k = 0; k < list.size(); ++k) {
    const Config& c = list[k];
    progress_.line("search", strprintf("%s%zu of %zu: %s", round.c_str(), k + 1, list.size(), label_of(c).c_str()));
    SchedulerOptions so;
    so.num_gpus = c.gpus;
    so.max_streams = c.streams;
    so.window = c.window;
    so.link_lanes = o_.link_lanes;
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
double Tuner::idle_prediction(const Graph& g, const Schedule& s) {
  const double extra = cost_->transfer_extra_ms;
  cost_->transfer_extra_ms = 0;
  const double predicted = simulate(g, s, *cost_).latency_ms;
  cost_->transfer_extra_ms = extra;
  return predicted;
}

// Adds a candidate unless one with the same stages and transfers is there (then it is listed
// as a duplicate of that one).
bool Tuner::add_candidate(Candidate cand) {
  const std::string key = structure_key(job_.graph(cand.variant), cand.schedule, cand.variant);
  auto [it, fresh] = seen_.emplace(key, res_.candidates.size());
  if (!fresh) {
    duplicates_.push_back(json{{"label", cand.label}, {"same_as", res_.candidates[it->second].label}});
    return false;
  }
  res_.candidates.push_back(std::move(cand));
  return true;
}

void Tuner::note_stage_counts() {
  res_.stages_measured = cost_->measured;
  res_.stages_reused = cost_->reused;
  res_.stages_predicted = cost_->predicted;
}

// ---- phase 6: the concurrency model, fitted to every stage measured in this job
void Tuner::fit_concurrency() {
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

}  // namespace hios::tune::detail
