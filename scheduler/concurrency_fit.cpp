// Fitting the stage model's alpha and stage overhead to measured stages (concurrency_fit.hpp).
#include "scheduler/concurrency_fit.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <tuple>
#include <utility>

#include "graph/error.hpp"

namespace hios {

namespace {

constexpr int kMinObservations = 3;  // two parameters: fewer points fit noise exactly
constexpr double kMaxOverheadMs = 1.0;  // 1000 us: far above any event pair, so only a sanity cap

// An observation reduced to what the fit needs. Taking `serial` and `contended` from
// combine_stage_ms itself (alpha 1 and alpha 0, no overhead) rather than recomputing them keeps
// one definition of the stage model: the fit cannot drift from what the cost model predicts.
struct Point {
  const StageObservation* obs;
  double serial;     // Σ groups, ms
  double contended;  // max(longest group, Σ sm, Σ memory, Σ launch), ms
};

bool all_finite(const StageItem& it) {
  return std::isfinite(it.ms) && std::isfinite(it.sm_ms) && std::isfinite(it.memory_ms) && std::isfinite(it.launch_ms);
}

std::vector<Point> usable_points(const DevicePreset& preset, const std::vector<StageObservation>& obs) {
  DevicePreset serial_p = preset, contended_p = preset;
  serial_p.alpha = 1;
  serial_p.stage_overhead_us = 0;
  serial_p.short_node_us = 0;
  contended_p.alpha = 0;
  contended_p.stage_overhead_us = 0;
  contended_p.short_node_us = 0;
  std::vector<Point> pts;
  for (const StageObservation& o : obs) {
    if (!std::isfinite(o.measured_ms) || o.measured_ms <= 0) continue;
    int busy = 0;
    bool finite = true;
    for (const auto& gr : o.groups) {
      if (!gr.empty()) ++busy;
      for (const StageItem& it : gr) finite = finite && all_finite(it);
    }
    // A one-group stage does not use alpha or the overhead at all, so it says nothing about them.
    if (busy < 2 || !finite) continue;
    pts.push_back({&o, combine_stage_ms(serial_p, o.groups), combine_stage_ms(contended_p, o.groups)});
  }
  return pts;
}

// The relative residual of a point is linear in the parameters:
//   (a·S + (1−a)·C + o − m) / m = a·u + o·v − t,   u = (S−C)/m, v = 1/m, t = (m−C)/m
// (o in ms). Dividing by m weights each squared miss by 1/m²: a 2 µs miss on a 20 µs stage matters
// as much as a 20 µs miss on a 200 µs one, which is what ranking schedules needs.
struct Residual {
  double u, v, t;
};

Residual residual_terms(const Point& p) {
  double m = p.obs->measured_ms;
  return {(p.serial - p.contended) / m, 1 / m, (m - p.contended) / m};
}

double objective(const std::vector<Residual>& rs, double a, double o) {
  double f = 0;
  for (const Residual& r : rs) {
    double e = a * r.u + o * r.v - r.t;
    f += e * e;
  }
  return f;
}

// The objective is a convex quadratic in (a, o) over a box, so it is minimised exactly rather
// than by searching alpha on a grid: the unconstrained minimum when it lies inside the box, else
// the best of the four edges' minima (each a 1-D quadratic, solved in closed form and clamped).
// That is the constrained minimum, because a convex function whose minimum lies outside a convex
// set takes its least value on that set's boundary. `preferred_alpha` settles the ties that arise
// when the data cannot separate alpha from the overhead: the preset's value is kept then.
std::pair<double, double> solve(const std::vector<Residual>& rs, double preferred_alpha) {
  double uu = 0, uv = 0, vv = 0, ut = 0, vt = 0;
  for (const Residual& r : rs) {
    uu += r.u * r.u;
    uv += r.u * r.v;
    vv += r.v * r.v;
    ut += r.u * r.t;
    vt += r.v * r.t;
  }
  // det >= 0 by Cauchy-Schwarz; relative to uu·vv it is 1 − cos²(u, v), 0 when every stage has
  // the same S − C and alpha only trades off against the overhead.
  double det = uu * vv - uv * uv;
  if (det > 1e-10 * uu * vv) {
    double a = (ut * vv - vt * uv) / det;
    double o = (uu * vt - uv * ut) / det;
    if (a >= 0 && a <= 1 && o >= 0 && o <= kMaxOverheadMs) return {a, o};
  }
  double a_pref = std::clamp(preferred_alpha, 0.0, 1.0);
  auto best_o = [&](double a) { return std::clamp((vt - a * uv) / vv, 0.0, kMaxOverheadMs); };
  auto best_a = [&](double o) { return uu > 0 ? std::clamp((ut - o * uv) / uu, 0.0, 1.0) : a_pref; };
  // The preferred point first: a later candidate replaces it only when clearly better, so ties
  // (the degenerate case above) keep the preset's alpha. "Clearly" is an RMS relative error
  // 1e-6 lower: far below measurement noise, far above the rounding that decides exact ties.
  const std::pair<double, double> candidates[] = {
      {a_pref, best_o(a_pref)}, {0.0, best_o(0.0)}, {1.0, best_o(1.0)},
      {best_a(0.0), 0.0},       {best_a(kMaxOverheadMs), kMaxOverheadMs},
  };
  const double tie = 1e-12 * static_cast<double>(rs.size());
  std::pair<double, double> best = candidates[0];
  double best_f = objective(rs, best.first, best.second);
  for (const auto& c : candidates) {
    double f = objective(rs, c.first, c.second);
    if (f < best_f - tie) {
      best = c;
      best_f = f;
    }
  }
  return best;
}

// Mean and worst |predicted/measured − 1|, predicted by combine_stage_ms itself.
std::pair<double, double> relative_errors(const DevicePreset& p, const std::vector<Point>& pts) {
  if (pts.empty()) return {0, 0};
  double sum = 0, worst = 0;
  for (const Point& pt : pts) {
    double e = std::fabs(combine_stage_ms(p, pt.obs->groups) / pt.obs->measured_ms - 1);
    sum += e;
    worst = std::max(worst, e);
  }
  return {sum / static_cast<double>(pts.size()), worst};
}

}  // namespace

ConcurrencyFit fit_concurrency(const DevicePreset& preset, const std::vector<StageObservation>& obs) {
  std::vector<Point> pts = usable_points(preset, obs);
  ConcurrencyFit fit;
  fit.stages = static_cast<int>(pts.size());
  std::tie(fit.error_before, fit.worst_before) = relative_errors(preset, pts);
  if (fit.stages < kMinObservations) {
    fit.alpha = preset.alpha;
    fit.stage_overhead_us = preset.stage_overhead_us;
    fit.error_after = fit.error_before;
    fit.worst_after = fit.worst_before;
    return fit;
  }
  std::vector<Residual> rs;
  rs.reserve(pts.size());
  for (const Point& p : pts) rs.push_back(residual_terms(p));
  auto [a, o] = solve(rs, preset.alpha);
  fit.alpha = a;
  fit.stage_overhead_us = o * 1e3;
  std::tie(fit.error_after, fit.worst_after) = relative_errors(apply_concurrency_fit(preset, fit), pts);
  return fit;
}

DevicePreset apply_concurrency_fit(DevicePreset preset, const ConcurrencyFit& fit) {
  preset.alpha = fit.alpha;
  preset.stage_overhead_us = fit.stage_overhead_us;
  preset.short_node_us = 0;  // the fitted alpha is what this GPU did on these stages, short or not
  return preset;
}

double fitted_stage_ms(const DevicePreset& preset, const ConcurrencyFit& fit,
                       const std::vector<std::vector<StageItem>>& groups) {
  return combine_stage_ms(apply_concurrency_fit(preset, fit), groups);
}

json concurrency_fit_to_json(const ConcurrencyFit& f) {
  return json{{"alpha", f.alpha},
              {"stage_overhead_us", f.stage_overhead_us},
              {"stages", f.stages},
              {"error_before", f.error_before},
              {"error_after", f.error_after},
              {"worst_before", f.worst_before},
              {"worst_after", f.worst_after}};
}

ConcurrencyFit concurrency_fit_from_json(const json& j, const std::string& path) {
  JsonObject o(j, path);
  ConcurrencyFit f;
  // Written as !(in range) so that a NaN, which every comparison rejects, is refused too.
  f.alpha = o.get_number("alpha");
  HIOS_CHECK(f.alpha >= 0 && f.alpha <= 1, "%s: must be in [0, 1] (got %g)", o.child_path("alpha").c_str(), f.alpha);
  f.stage_overhead_us = o.get_number("stage_overhead_us");
  HIOS_CHECK(f.stage_overhead_us >= 0 && f.stage_overhead_us <= kMaxOverheadMs * 1e3,
             "%s: must be in [0, 1000] (got %g)", o.child_path("stage_overhead_us").c_str(), f.stage_overhead_us);
  int64_t stages = o.get_int("stages", 0);
  HIOS_CHECK(stages >= 0 && stages <= INT_MAX, "%s: must be a non-negative count (got %lld)",
             o.child_path("stages").c_str(), static_cast<long long>(stages));
  f.stages = static_cast<int>(stages);
  auto error = [&](const char* key) {
    double v = o.get_number(key, 0.0);
    HIOS_CHECK(v >= 0 && std::isfinite(v), "%s: must be a finite non-negative number (got %g)",
               o.child_path(key).c_str(), v);
    return v;
  };
  f.error_before = error("error_before");
  f.error_after = error("error_after");
  f.worst_before = error("worst_before");
  f.worst_after = error("worst_after");
  o.finish();
  return f;
}

}  // namespace hios
