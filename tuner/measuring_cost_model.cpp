// The measuring cost model of `hios tune` (tune_internal.hpp): the database's node and link
// times, and stages measured on rank 0's device on first sight, then cached or predicted. Apart
// from the phases because every search of the tune asks it for costs, split or not.
#include <cmath>
#include <limits>

#include "graph/error.hpp"
#include "tuner/tune_internal.hpp"

namespace hios::tune::detail {

MeasuringCostModel::MeasuringCostModel(ProfileDb& db, const DevicePreset& preset, const TuneOptions& o,
                                       const Progress& progress)
    : db_(db), preset_(preset), opt_(o), progress_(progress), budget_s_(o.stage_budget_s) {
  refresh_nodes();
  for (const ProfileStage& st : db.stages) cache_.emplace(st.key.dump(), st.ms);
}

double MeasuringCostModel::node_ms(const Graph& g, int node, int gpu) const {
  auto it = kept_.find(&g);
  if (it == kept_.end()) return base_->node_ms(g, node, gpu);
  // The database's node times do not depend on the GPU (one entry per signature).
  std::vector<double>& ms = it->second.ms;
  if (ms.empty()) ms.assign(size_t(g.size()), std::numeric_limits<double>::quiet_NaN());
  if (std::isnan(ms.at(size_t(node)))) ms[size_t(node)] = base_->node_ms(g, node, gpu);
  return ms[size_t(node)];
}

void MeasuringCostModel::refresh_nodes() {
  ProfileDb nodes_only;
  nodes_only.device = db_.device;
  nodes_only.identity = db_.identity;  // its layout prices the rows nodes of row splits
  nodes_only.entries = db_.entries;
  nodes_only.links = db_.links;
  base_ = make_profile_cost_model(std::move(nodes_only), "measured", preset_);
  for (auto& [graph, kept] : kept_) kept = Kept{std::move(kept.signature), {}, {}, {}};  // measured since: anew
}

double MeasuringCostModel::stage_ms(const Graph& g, const Stage& stage, int gpu) const {
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

std::string MeasuringCostModel::key_of(const Graph& g, const Stage& st) const {
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

std::vector<std::vector<StageItem>> MeasuringCostModel::items_of(const Graph& g, const Stage& st, int gpu) const {
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

}  // namespace hios::tune::detail
