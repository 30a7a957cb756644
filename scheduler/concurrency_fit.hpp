// The stage model's concurrency parameters fitted to measured stages.
//
// combine_stage_ms predicts a stage of several groups as
//   alpha * Σ groups + (1 - alpha) * contended + stage_overhead_us * 1e-3
// with alpha and stage_overhead_us fixed per device preset. Those two numbers are guesses about
// how well real kernels overlap; once the tuner has measured the stages its searches proposed,
// they can be read off the measurements instead, so that the stages never measured (most of
// those a search meets) are predicted with what this GPU actually does. The model and the fit
// are described in docs/cost-model.md ("Fitted concurrency").
#pragma once

#include <string>
#include <vector>

#include "scheduler/cost_model.hpp"

namespace hios {

// One measured stage: the demands of its nodes as the cost model sees them (StageItem, with
// `ms` measured where a profile has it) and what the whole stage measured.
struct StageObservation {
  std::vector<std::vector<StageItem>> groups;  // at least two non-empty groups
  double measured_ms = 0;                       // measured latency of the stage
};

// The fitted parameters and how well they explain the observations. Only alpha and
// stage_overhead_us are fitted: the model is then still combine_stage_ms, so every property the
// tests check on the stage model (max group <= stage <= Σ groups + overhead) holds for a fitted
// preset too. A further term (e.g. a scale on `contended`) would break the lower bound when
// below 1 and has not been shown to reduce held-out error on measured stages; add it only with
// that evidence.
struct ConcurrencyFit {
  double alpha = 0;              // in [0, 1]
  double stage_overhead_us = 0;  // in [0, 1000]
  int stages = 0;                // observations used
  double error_before = 0;       // mean |predicted/measured - 1| with the preset's own parameters
  double error_after = 0;        // the same with the fitted parameters
  double worst_before = 0;       // max |predicted/measured - 1| with the preset's parameters
  double worst_after = 0;        // max |predicted/measured - 1| after the fit
};

// Least-squares fit of the relative error (predicted/measured - 1) over the observations, with
// alpha kept in [0, 1] and stage_overhead_us in [0, 1000]. Deterministic: the result depends on
// the observations' order only through floating-point summation. With fewer than 3 usable
// observations it returns the preset's alpha and overhead (stages = that count, errors computed
// with them). Observations whose measured_ms is not finite or <= 0, that have fewer than two
// non-empty groups, or that hold a non-finite demand are skipped. When the observations cannot
// tell alpha from the overhead (every stage has the same Σ groups - contended), the preset's
// alpha is kept and only the overhead is fitted.
ConcurrencyFit fit_concurrency(const DevicePreset& preset, const std::vector<StageObservation>& obs);

// The preset with the fitted parameters in place (what a cost model uses for unmeasured stages).
// The fit's values are copied as they are: a fit of too few observations already holds the
// preset's own.
DevicePreset apply_concurrency_fit(DevicePreset preset, const ConcurrencyFit& fit);

// Predicted latency of a stage under a fit: combine_stage_ms(apply_concurrency_fit(p, f), groups).
double fitted_stage_ms(const DevicePreset& preset, const ConcurrencyFit& fit,
                       const std::vector<std::vector<StageItem>>& groups);

// {"alpha": ..., "stage_overhead_us": ..., "stages": ..., "error_before": ..., "error_after": ...,
//  "worst_before": ..., "worst_after": ...}; the profile database keeps it under "concurrency".
json concurrency_fit_to_json(const ConcurrencyFit& f);

// Strict reader of the above. alpha and stage_overhead_us are required, the rest optional
// (default 0). Ranges: alpha in [0, 1], stage_overhead_us in [0, 1000], stages >= 0, errors
// finite and >= 0. Unknown keys, wrong types and values out of range are hios::Errors naming the
// JSON path below `path` (e.g. "$.concurrency.alpha: must be in [0, 1] (got 1.5)").
ConcurrencyFit concurrency_fit_from_json(const json& j, const std::string& path);

}  // namespace hios
