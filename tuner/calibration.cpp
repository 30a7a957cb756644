#include "tuner/calibration.hpp"

#include <algorithm>
#include <cmath>

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
  const double phi = (std::sqrt(5.0) - 1) / 2;
  double lo = 0;
  double a = hi - phi * (hi - lo), b = lo + phi * (hi - lo);
  double fa = loss(a), fb = loss(b);
  for (int i = 0; i < 60; ++i) {
    if (fa <= fb) {
      hi = b;
      b = a;
      fb = fa;
      a = hi - phi * (hi - lo);
      fa = loss(a);
    } else {
      lo = a;
      a = b;
      fa = fb;
      b = lo + phi * (hi - lo);
      fb = loss(b);
    }
  }
  const double best = (lo + hi) / 2;
  return loss(0) <= loss(best) ? 0.0 : best;
}

}  // namespace hios::tune
