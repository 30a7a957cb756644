// Calibration of hios tune's predictions on the timed candidates (docs/tuner.md,
// "Calibration"): a cost model that replays a candidate with a launch gap and a per-transfer
// cost added, a candidate's latency as a curve of one such cost, and the fit of that cost to
// measured candidates.
#pragma once

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "graph/row_split.hpp"
#include "scheduler/cost_model.hpp"

namespace hios::tune {

// A candidate's simulation again with two calibrated costs that an isolated measurement does
// not see: `extra_launch_ms` after every launch in a stream (in a pass, a kernel waits for its
// predecessor's completion to be noticed, which timing one stage alone hides) and
// `extra_transfer_ms` on every transfer (inside a pass a transfer shares the SMs with the stages and
// waits for the block scheduler; a link measured between idle GPUs sees neither). The transfer
// cost may be negative, down to minus the link's fixed latency: a pass can also hide part of
// what a link measured alone pays per message (a transfer posted ahead, or a halo exchanged
// while the interior rows compute, is then off the critical path). A transfer never costs
// less than nothing. Stage times
// are asked of the measured model once per stage and remembered by the stage's address, so a
// calibration can simulate a candidate many times: the candidates must not move meanwhile.
class CalibratedCost final : public CostModel {
 public:
  explicit CalibratedCost(const CostModel& base) : base_(base) {}
  std::string name() const override { return base_.name(); }
  std::string device() const override { return base_.device(); }
  double node_ms(const Graph& g, int node, int gpu) const override { return base_.node_ms(g, node, gpu); }
  double transfer_ms(double bytes, int src, int dst) const override {
    return std::max(0.0, base_.transfer_ms(bytes, src, dst) + extra_transfer_ms);
  }
  double stage_ms(const Graph& g, const Stage& stage, int gpu) const override {
    auto [it, fresh] = memo_.try_emplace({&stage, gpu}, std::pair<double, size_t>{0.0, 0});
    if (fresh) {
      it->second.first = base_.stage_ms(g, stage, gpu);
      for (const Group& gr : stage.groups) it->second.second = std::max(it->second.second, gr.nodes.size());
    }
    return it->second.first + extra_launch_ms * double(it->second.second);
  }
  double extra_launch_ms = 0, extra_transfer_ms = 0;

 private:
  const CostModel& base_;
  mutable std::map<std::pair<const Stage*, int>, std::pair<double, size_t>> memo_;
};

// A prediction as a function of one calibrated cost x: simulated at a few values, linear in
// between and beyond the last (the latency is piecewise linear in x, non-decreasing).
struct Curve {
  std::vector<double> x, y;
  double at(double v) const {
    size_t i = 1;
    while (i + 1 < x.size() && v > x[i]) ++i;
    return y[i - 1] + (y[i] - y[i - 1]) * (v - x[i - 1]) / (x[i] - x[i - 1]);
  }
};

// What a schedule's transfers are, which decides what a transfer costs inside its pass: an
// unsplit schedule sends a few whole tensors; a row split exchanging halos (halo or mixed mode)
// sends many small halo messages, which can hide behind the interior rows; a split by
// recompute alone exchanges no halo (only the region's input rows and its output bands move).
enum class CalibrationKind { Unsplit, HaloSplit, RecomputeSplit };
// The kind of a row split (an empty plan: Unsplit).
CalibrationKind calibration_kind(const SpatialPlan& plan);

// What choosing a candidate's calibration needs to know of every candidate.
struct CalibrationPeer {
  bool ok = false;     // timed and verified
  bool multi = false;  // uses more than one GPU
  CalibrationKind kind = CalibrationKind::Unsplit;
  // Its meta.recv_lead: -1 receives posted at once, k >= 0 posted k stages ahead, which the
  // simulator does not model: on two H100s a lead of 2 made a mixed split 8% faster, and on
  // two H200s a lead of 0 made nasnet_large 512 40% slower while 2 and 8 cost under 1%.
  int lead = -1;
  std::string key;     // its structure: schedules with the same stages and transfers share it
};

// The candidates whose measurements calibrate candidate i: verified ones that use one GPU if
// i does and more if i does, of another structure than i's, taken from the first tier that
// has any: (1) the same kind as i (CalibrationKind) and the same receive lead; (2) the
// same kind, receives posted at once. Leads are told apart by their value: calibrated on the
// lead-0 variants too, whose consumers wait for whole transfers, nasnet_large 512's lead-2
// variant was predicted 10.3% above its measurement (two H200s). Never another kind: fitted
// to unsplit schedules, whose few transfers are whole tensors, the cost per transfer put a
// split's prediction 15% above its measurement (nasnet_large 2048, two H100s; 8.8%
// uncalibrated); fitted to a mixed split whose halos hide behind its interior rows (a
// transfer 9.7 us below the link's 13.7 us), it put a recompute split of randwire 512 13.5%
// below (uncalibrated: -0.1%). Empty: i keeps its uncalibrated prediction.
std::vector<size_t> calibration_peers(const std::vector<CalibrationPeer>& peers, size_t i);

// The x in [lowest, the slowest measured pass] (no single launch or transfer can cost more)
// that minimises the sum of log((curve(x) + overhead) / measured)^2 over the points
// (golden-section search; 0 when no other x does better). `lowest` is 0 for a launch gap and
// minus the fastest link's fixed latency for a transfer (CalibratedCost); the curves must
// reach down to it.
double fit_extra(const std::vector<std::pair<const Curve*, double>>& points, double overhead_ms,
                 double lowest = 0);
// That sum at x.
double fit_loss(const std::vector<std::pair<const Curve*, double>>& points, double x, double overhead_ms);

}  // namespace hios::tune
