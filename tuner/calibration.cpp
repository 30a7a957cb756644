#include "tuner/calibration.hpp"

#include <algorithm>
#include <cmath>

#include "scheduler/golden_section.hpp"

namespace hios::tune {

double fit_loss(const std::vector<std::pair<const Curve*, double>>& points, double x, double overhead_ms) {
  double l = 0;
  for (const auto& [curve, measured] : points) {
    const double r = std::log((curve->at(x) + overhead_ms) / measured);
    l += r * r;
  }
  return l;
}

double fit_extra(const std::vector<std::pair<const Curve*, double>>& points, double overhead_ms, double lowest) {
  if (points.empty()) return 0;
  double hi = 0;
  for (const auto& p : points) hi = std::max(hi, p.second);
  auto loss = [&](double x) { return fit_loss(points, x, overhead_ms); };
  const double best = golden_section_min(loss, std::min(lowest, 0.0), hi, 60);
  return loss(0) <= loss(best) ? 0.0 : best;
}

CalibrationKind calibration_kind(const SpatialPlan& plan) {
  if (plan.empty()) return CalibrationKind::Unsplit;
  for (const SplitRegion& r : plan.regions) {
    if (r.mode != SplitMode::Recompute) return CalibrationKind::HaloSplit;
  }
  return CalibrationKind::RecomputeSplit;
}

std::vector<size_t> calibration_peers(const std::vector<CalibrationPeer>& peers, size_t i) {
  const CalibrationPeer& me = peers[i];
  auto collect = [&](bool same_kind, bool same_lead) {
    std::vector<size_t> out;
    for (size_t j = 0; j < peers.size(); ++j) {
      const CalibrationPeer& p = peers[j];
      if (!p.ok || p.multi != me.multi || p.key == me.key) continue;
      if (same_kind && p.kind != me.kind) continue;
      if (same_lead ? p.lead != me.lead : p.lead >= 0) continue;
      out.push_back(j);
    }
    return out;
  };
  if (!me.multi) return collect(false, false);  // one GPU: no receives, no kinds
  for (bool same_lead : {true, false}) {  // its kind: with its receive posting, then posted at once
    std::vector<size_t> tier = collect(true, same_lead);
    if (!tier.empty()) return tier;
  }
  return {};  // never another kind: its transfers are not the same messages
}

}  // namespace hios::tune
