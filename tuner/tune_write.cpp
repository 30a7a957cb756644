// hios tune's last phase, 13 (tune_internal.hpp): the searches recorded for a re-tune, the
// fastest verified candidate chosen, its meta.tune filled in and the database written. Apart
// because it only reads what the phases before it measured and writes it down.
#include <algorithm>
#include <ctime>
#include <filesystem>
#include <map>
#include <set>

#include "graph/error.hpp"
#include "graph/row_split.hpp"
#include "tuner/tune_internal.hpp"

namespace hios::tune::detail {

namespace {

std::string today_utc() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", std::gmtime(&t));
  return buf;
}

// What names a candidate, in the database's list (gpus_key "gpus") and in meta.tune
// ("gpus_used").
json candidate_head(const Candidate& c, const char* gpus_key) {
  json j = json{{"label", c.label}, {"algorithm", c.algorithm}, {"cost", c.cost}, {gpus_key, c.gpus},
                {"streams", c.streams}, {"window", c.window}};
  if (!c.split.empty()) j["split"] = c.split;
  return j;
}

}  // namespace

// The searches' candidates and what they measured, for a re-tune.
void Tuner::record_searches() {
  // The fastest verified receive-lead variant of each searched candidate: a re-tune times again
  // what can still win with its best posting, not only with its receives posted at once.
  // Which variant that was (its recv_lead) is kept too: a re-tune times only that posting again.
  struct Posting {
    double ms;
    int lead;
  };
  std::map<std::string, Posting> fastest_variant;
  std::set<std::string> leads_timed;
  for (const Candidate& c : res_.candidates) {
    if (c.posting_of.empty() || c.passes == 0) continue;
    leads_timed.insert(c.posting_of);
    if (!c.ok) continue;
    auto it = fastest_variant.find(c.posting_of);
    if (it == fastest_variant.end() || c.measured_ms < it->second.ms) {
      fastest_variant[c.posting_of] = Posting{c.measured_ms, c.schedule.meta.recv_lead};
    }
  }
  json list = json::array();
  for (const Candidate& c : res_.candidates) {
    if (!c.posting_of.empty()) continue;  // timed variants, not searched
    json entry = candidate_head(c, "gpus");
    if (c.variant > 0) entry["plan"] = spatial_to_json(splits_.at(size_t(c.variant - 1)).plan);
    entry.update(json{{"predicted_ms", c.predicted_uncalibrated_ms - db_.pass_overhead_ms},
                      {"measured_ms", c.measured_ms},
                      {"max_rel", c.max_rel},
                      {"verified", c.ok},
                      {"schedule", schedule_to_json(job_.graph(c.variant), c.schedule)}});
    // A re-tune that kept a candidate keeps its variants' best too (they are not timed again).
    const bool kept = c.passes == 0 && c.stored_fastest_ms > 0;
    double fastest = kept ? c.stored_fastest_ms : c.measured_ms;
    // Timed here: the schedule as searched unless a variant beats it; else what the last tune
    // found (kLeadsNotTimed outside a re-tune).
    int lead = leads_timed.count(c.label) ? -1 : c.stored_fastest_lead;
    auto v = fastest_variant.find(c.label);
    if (v != fastest_variant.end() && v->second.ms < fastest) {
      fastest = v->second.ms;
      lead = v->second.lead;
    }
    if (fastest < c.measured_ms) entry["fastest_posting_ms"] = fastest;
    if (lead != Candidate::kLeadsNotTimed) entry["fastest_posting_lead"] = lead;
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
  const json reference = stored_reference();
  if (!reference.is_null()) db_.searched["reference"] = reference;
}

// ---- phase 13: the fastest verified candidate, its metadata, the database
TuneResult Tuner::choose_and_write() {
  // The candidate whose launch orders were timed (a re-measured time must not move the choice).
  const Candidate* best = chosen_ >= 0 ? &res_.candidates[size_t(chosen_)] : choice();
  HIOS_CHECK(best != nullptr, "hios tune: no candidate matched the sequential run (tolerance %.1e); see the lines above",
             tolerance_);
  db_.choices = session_.backend().algorithm_choices();
  db_.meta["date"] = json(today_utc());
  db_.meta["written_by"] = "hios tune";
  // meta is free-form provenance: a "gpus" that is not a count is replaced, not trusted.
  const json had = db_.meta.contains("gpus") ? db_.meta["gpus"] : json(1);
  db_.meta["gpus"] = std::max<int64_t>(o_.gpus, had.is_number_integer() ? had.get<int64_t>() : 1);
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
    if (!c.posting_of.empty()) entry["posting_of"] = c.posting_of;
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

}  // namespace hios::tune::detail
