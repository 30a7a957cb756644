#include "tuner/calibration.hpp"

#include <algorithm>
#include <cmath>

#include "scheduler/golden_section.hpp"

namespace hios::tune {

double fit_extra(const std::vector<std::pair<const Curve*, double>>& points, double overhead_ms) {
  if (points.empty()) return 0;
  double hi = 0;
  for (const auto& p : points) hi = std::max(hi, p.second);
  auto loss = [&](double x) {
    double l = 0;
    for (const auto& [curve, measured] : points) {
      const double r = std::log((curve->at(x) + overhead_ms) / measured);
      l += r * r;
    }
    return l;
  };
  const double best = golden_section_min(loss, 0.0, hi, 60);
  return loss(0) <= loss(best) ? 0.0 : best;
}

}  // namespace hios::tune
