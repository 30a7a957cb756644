// hios tune's row splits, phase 7 (tune_internal.hpp): every one-region split ranked under
// costs derived from the measured nodes, a shortlist searched, and the finalists built on every
// rank, measured and searched again as candidates. Apart from the whole graph's searches
// (tune_search.cpp) because it has budgets, graphs and a pruning of its own.
#include <algorithm>
#include <set>

#include "graph/error.hpp"
#include "graph/json_codec.hpp"
#include "graph/row_split.hpp"
#include "scheduler/simulator.hpp"
#include "tuner/tune_internal.hpp"

namespace hios::tune::detail {

namespace {

std::string split_label(const SpatialPlan& plan, const SplitStyle& style) {
  const SplitRegion& r = plan.regions.front();
  std::string blocks = r.first_block == r.last_block ? r.first_block : r.first_block + ".." + r.last_block;
  return strprintf("%s %d ways, %s", blocks.c_str(), r.parts, split_style_name(style).c_str());
}

}  // namespace

// ---- phase 7: row splits, pruned by the measured costs
// Every one-region plan of 2 to N parts (any region, every mode) is ranked by a quick estimate
// under costs derived from the measured nodes (scheduler/spatial.hpp); the best
// `split_shortlist` are searched with hios-lp under those costs; the best `split_finalists`
// of those, unless predicted far slower than the whole graph's best, get their own graph on
// every rank, their parts measured, a search on measured costs, and become candidates.
void Tuner::search_row_splits() {
  if (N_ < 2 || o_.spatial == "off" || reuse_searches_) return;
  const auto t0 = Clock::now();
  std::vector<RankedSplit> ranked = rank_split_plans(t0);
  if (ranked.empty()) return;
  ranked = split_shortlist(std::move(ranked));
  search_split_shortlist(ranked, t0);
  const std::vector<const RankedSplit*> finalists = split_finalists(ranked, t0);
  // Every rank builds each finalist's graph; their nodes are measured side by side, one per GPU;
  // then each is searched on measured costs, the best predicted first. A search of a split
  // nasnet_large at 2048 takes about 15 s: past twice the budget, the finalists left are not
  // searched.
  std::vector<int> variants;
  for (const RankedSplit* r : finalists) variants.push_back(add_split_variant(r->plan, split_label(r->plan, r->style)));
  measure_split_parts(variants);
  for (size_t k = 0; k < finalists.size(); ++k) {
    if (k > 0 && seconds_since(t0) > 2 * o_.split_budget_s) {
      progress_.line("splits", strprintf("%.0f s spent on splits (twice --split-budget): %zu finalist(s) not searched",
                                         seconds_since(t0), finalists.size() - k));
      break;
    }
    add_split_candidate(variants[k], finalists[k]->parts);
  }
  note_stage_counts();
}

// Every one-region plan of the part counts --spatial allows, in every mode, ranked by the quick
// estimate (one stream per GPU) under costs derived from the measured nodes, within half the
// split budget (the longest regions come first). Empty, with a line saying why, when none is.
std::vector<Tuner::RankedSplit> Tuner::rank_split_plans(Clock::time_point t0) {
  std::vector<int> part_counts;
  if (o_.spatial == "auto") {
    for (int p = 2; p <= N_; ++p) part_counts.push_back(p);
  } else {
    part_counts.push_back(std::stoi(o_.spatial));
  }
  std::vector<RankedSplit> ranked;
  size_t total = 0;
  for (int parts : part_counts) {
    for (const auto& mode : split_modes(o_.spatial_mode)) {
      for (SpatialPlan& plan : region_plans(g_, parts, {mode}, cost_.get())) {
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
    return ranked;
  }
  std::stable_sort(ranked.begin(), ranked.end(), [](const RankedSplit& a, const RankedSplit& b) { return a.ms < b.ms; });
  progress_.line("splits", strprintf("%zu of %zu plans ranked under the measured nodes (%.1f s); best estimate "
                                     "%.3f ms (%s)",
                                     ranked.size(), total, seconds_since(t0), ranked.front().ms,
                                     split_label(ranked.front().plan, ranked.front().style).c_str()));
  return ranked;
}

// The shortlist: the best-ranked plan of every mode first (the quick estimate runs one stream
// per GPU, which favours some modes over others), then the best-ranked of the rest.
std::vector<Tuner::RankedSplit> Tuner::split_shortlist(std::vector<RankedSplit> ranked) const {
  std::vector<RankedSplit> shortlist, rest;
  std::set<SplitStyle> modes_in;
  for (RankedSplit& r : ranked) {
    if (modes_in.insert(r.style).second && shortlist.size() < size_t(o_.split_shortlist)) {
      shortlist.push_back(std::move(r));
    } else {
      rest.push_back(std::move(r));
    }
  }
  for (RankedSplit& r : rest) {
    if (shortlist.size() == size_t(o_.split_shortlist)) break;
    shortlist.push_back(std::move(r));
  }
  return shortlist;
}

// hios-lp on each shortlisted plan under the derived costs, within the split budget (the plans
// left when it runs out are dropped), then sorted by that prediction.
void Tuner::search_split_shortlist(std::vector<RankedSplit>& shortlist, Clock::time_point t0) {
  for (size_t k = 0; k < shortlist.size(); ++k) {
    RankedSplit& r = shortlist[k];
    if (seconds_since(t0) > o_.split_budget_s) {
      shortlist.resize(k);
      break;
    }
    const Graph sg = apply_spatial(g_, r.plan);
    const auto derived = make_split_cost_model(g_, sg, *cost_, cost_->fitted());
    SchedulerOptions so = split_search_options(sg, r.parts);
    so.time_budget_s = std::max(1.0, o_.split_budget_s - seconds_since(t0));
    r.ms = run_algorithm("hios-lp", sg, *derived, so).meta.predicted_ms;
    progress_.line("splits", strprintf("shortlist %zu of %zu: %-44s predicted %8.3f ms", k + 1, shortlist.size(),
                                       split_label(r.plan, r.style).c_str(), r.ms));
  }
  std::stable_sort(shortlist.begin(), shortlist.end(),
                   [](const RankedSplit& a, const RankedSplit& b) { return a.ms < b.ms; });
}

// The finalists: the best predicted, one per mode while other modes remain (a prediction on
// derived costs may err for a whole mode; measuring two modes hedges that), at most
// `split_finalists`, none predicted over 1.5x the whole graph's best measured-cost candidate.
std::vector<const Tuner::RankedSplit*> Tuner::split_finalists(const std::vector<RankedSplit>& searched,
                                                             Clock::time_point t0) {
  double best_whole = 0;
  for (const Candidate& c : res_.candidates) {
    if (c.cost == "measured" && (best_whole == 0 || c.predicted_ms < best_whole)) best_whole = c.predicted_ms;
  }
  // Splits predicted this much slower than the whole graph's best cannot win: not measured.
  constexpr double kHopeless = 1.5;
  std::vector<const RankedSplit*> order;
  std::set<SplitStyle> modes_taken;
  for (const RankedSplit& r : searched) {
    if (modes_taken.insert(r.style).second) order.push_back(&r);
  }
  for (const RankedSplit& r : searched) {
    if (std::find(order.begin(), order.end(), &r) == order.end()) order.push_back(&r);
  }
  std::vector<const RankedSplit*> finalists;
  for (const RankedSplit* rp : order) {
    const RankedSplit& r = *rp;
    if (int(finalists.size()) == o_.split_finalists) break;
    // A finalist costs a measuring program, its nodes and a search (on nasnet_large at 2048,
    // about 30 s): past twice the budget only the first is measured.
    if (!finalists.empty() && seconds_since(t0) > 2 * o_.split_budget_s) {
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
    finalists.push_back(rp);
  }
  return finalists;
}

// hios-lp on a split graph: on `parts` GPUs, with the suggested part-per-GPU mapping as one
// more candidate mapping (a longest-path mapping does not find it by itself).
SchedulerOptions Tuner::split_search_options(const Graph& sg, int parts) const {
  SchedulerOptions so;
  so.num_gpus = parts;
  so.max_streams = S_;
  so.window = 4;
  so.link_lanes = o_.link_lanes;
  so.single_gpu_fallback = false;  // the one-GPU candidates are the whole graph's
  so.gpu_hint = suggested_part_gpus(sg);
  return so;
}

// A split finalist's graph, built on every rank: graph `variant` of the job.
int Tuner::add_split_variant(const SpatialPlan& plan, const std::string& label) {
  const int vi = job_.lead({{"op", "split"}, {"plan", spatial_to_json(plan)}}).get<int>();
  splits_.push_back(SplitVariant{plan, label});
  cost_->keep_graph(job_.graph(vi));  // the job holds it until the tune ends
  return vi;
}

// A split finalist whose parts are measured (measure_split_parts): hios-lp searches it on
// measured costs, and it becomes a candidate.
void Tuner::add_split_candidate(int vi, int parts) {
  const Graph& sg = job_.graph(vi);
  const SpatialPlan& plan = splits_.at(size_t(vi - 1)).plan;
  const std::string& label = splits_.at(size_t(vi - 1)).label;
  const auto t0 = Clock::now();
  cost_->refresh_nodes();
  // Its stages are predicted by the concurrency model fitted to the whole graph's measured
  // stages, not measured: a split graph's one big block asks IOS for thousands of distinct
  // stages (on inception_v3 at 2048, 40 s of measuring for a 3% better prediction).
  cost_->detach();
  SchedulerOptions so = split_search_options(sg, parts);
  so.time_budget_s = std::max(1.0, o_.split_budget_s);  // a split graph's one big block can take IOS long
  Schedule s = run_algorithm("hios-lp", sg, *cost_, so);
  if (hoist_halo_edges(sg, s) > 0) s.meta.predicted_ms = simulate(sg, s, *cost_).latency_ms;
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

}  // namespace hios::tune::detail
