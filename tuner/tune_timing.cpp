// hios tune's timing, phases 8 to 12 (tune_internal.hpp): every candidate run on all ranks and
// checked against the reference, the receive leads, the calibration of the predictions and the
// second round of searches it allows, the finalists, and the launch order of the fastest.
// Apart from the searches because everything here runs on the devices, through the job.
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "executor/memory_plan.hpp"
#include "executor/verify.hpp"
#include "graph/error.hpp"
#include "scheduler/simulator.hpp"
#include "tuner/calibration.hpp"
#include "tuner/tune_internal.hpp"

namespace hios::tune::detail {

// ---- phase 8: every candidate on the real devices, quickly
// Two rounds: a quick one over every candidate, then the full count of passes for those that
// can still win. A quick round alone would let noise pick; a full round for all costs most
// of a re-tune.
void Tuner::time_quick_round() {
  cost_->detach();  // candidates replace the measuring program
  db_.pass_overhead_ms = job_.lead({{"op", "overhead"}, {"passes", o_.passes}}).get<double>();
  for (Candidate& c : res_.candidates) c.predicted_ms += db_.pass_overhead_ms;
  // A re-tune does not time again what the last tune measured far from the fastest: it keeps
  // that measurement (passes 0 in the report). Both sides count each schedule at its fastest
  // receive posting, so a split whose leads made it the fastest is timed again, and an unsplit
  // schedule it left behind is not.
  double stored_best = 0;
  for (const Candidate& c : res_.candidates) {
    if (c.ok && c.stored_fastest_ms > 0 && (stored_best == 0 || c.stored_fastest_ms < stored_best)) {
      stored_best = c.stored_fastest_ms;
    }
  }
  for (size_t k = 0; k < res_.candidates.size(); ++k) {
    Candidate& c = res_.candidates[k];
    if (stored_best > 0 && c.stored_fastest_ms > o_.retime_margin * stored_best) {
      c.measured_ms = c.stored_ms;
      c.max_rel = c.stored_max_rel;
      c.passes = 0;
      progress_.line("timing", strprintf("kept %zu of %zu: %-58s measured %8.3f ms by the last tune (over %.2fx the "
                                         "fastest)",
                                         k + 1, res_.candidates.size(), c.label.c_str(), c.measured_ms,
                                         o_.retime_margin));
      continue;
    }
    time_one(c, quick_passes(), "quick", k + 1, res_.candidates.size());
  }
}

// Times one candidate on every rank and checks its output against the reference.
void Tuner::time_one(Candidate& c, int passes, const char* round, size_t k, size_t n) {
  // The quick round warms up once after the capture (the graph is uploaded already); the
  // finalists as `hios run` does.
  const int warmup = passes < o_.passes ? std::min(o_.warmup, 1) : o_.warmup;
  const Graph& g = job_.graph(c.variant);
  c.measured_ms = job_.lead({{"op", "time"},
                             {"graph", c.variant},
                             {"schedule", schedule_to_json(g, c.schedule)},
                             {"capture", true},
                             {"warmup", warmup},
                             {"passes", passes}})
                      .get<double>();
  c.passes = passes;
  const exec::Diff d = exec::compare(job_.output, reference_);
  c.max_rel = d.max_rel;
  c.ok = d.max_rel <= tolerance_of(c);
  progress_.line("timing", strprintf("%s %zu of %zu: %-58s predicted %8.3f ms, measured %8.3f ms (%d passes), "
                                     "max_rel %.1e%s",
                                     round, k, n, c.label.c_str(), c.predicted_ms, c.measured_ms, passes, c.max_rel,
                                     c.ok ? "" : "  FAILED verification"));
}

// ---- phase 9: receives posted later
// NCCL's receive kernel waits on the consumer's GPU, holding SMs, from the moment it is
// posted. How much later pays depends on the stages (docs/executor.md, "When receives are
// posted"), so it is measured: on the fastest unsplit multi-GPU candidate, and on every row
// split that can still win. On two H100s (inception_v3 2048, bf16) it made the mixed split 8%
// faster and the recompute split no faster, so that the split a noisy quick round put first
// would not have been the right one to try. Called again after the second round of searches,
// whose fastest unsplit candidate may be a new one.
void Tuner::time_receive_leads() {
  // A candidate this far behind the fastest cannot catch up by its leads (8% was the most they
  // gained), so it is not timed again: a re-tune stays short.
  constexpr double kLeadsCanCatchUp = 1.15;
  double fastest = 0;
  for (const Candidate& c : res_.candidates) {
    if (c.ok && (fastest == 0 || c.measured_ms < fastest)) fastest = c.measured_ms;
  }
  std::set<std::string> have_leads;
  for (const Candidate& c : res_.candidates) {
    if (!c.posting_of.empty()) have_leads.insert(c.posting_of);
  }
  std::vector<size_t> bases;
  int fastest_unsplit = -1;
  for (size_t i = 0; i < res_.candidates.size(); ++i) {
    const Candidate& c = res_.candidates[i];
    if (!c.ok || c.gpus < 2 || c.schedule.meta.recv_lead >= 0 || c.measured_ms > kLeadsCanCatchUp * fastest) continue;
    if (c.passes == 0) continue;  // kept from the last tune, far from its fastest: a re-tune skips it
    if (c.variant > 0) {
      if (!have_leads.count(c.label)) bases.push_back(i);
    } else if (fastest_unsplit < 0 || c.measured_ms < res_.candidates[size_t(fastest_unsplit)].measured_ms) {
      fastest_unsplit = int(i);
    }
  }
  if (fastest_unsplit >= 0 && !have_leads.count(res_.candidates[size_t(fastest_unsplit)].label)) {
    bases.insert(bases.begin(), size_t(fastest_unsplit));
  }
  // A re-tune also re-posts the unsplit schedule whose lead variant the last tune chose, even
  // where another unsplit schedule measured faster this time: otherwise the last choice would
  // not be timed, and the choice among equals would move for no gain.
  const int last_base = last_choice_base();
  if (last_base >= 0 && !have_leads.count(res_.candidates[size_t(last_base)].label) &&
      std::find(bases.begin(), bases.end(), size_t(last_base)) == bases.end()) {
    bases.push_back(size_t(last_base));
  }
  for (size_t i : bases) {
    const Candidate from = res_.candidates[i];  // a copy: the list grows below
    for (int lead : leads_to_time(from)) {
      Candidate v = from;
      v.schedule.meta.recv_lead = lead;
      v.label = lead_label(from.label, lead);
      v.posting_of = from.label;
      res_.candidates.push_back(std::move(v));
      time_one(res_.candidates.back(), quick_passes(), "quick", res_.candidates.size(), res_.candidates.size());
    }
  }
}

// In a re-tune, the verified searched candidate whose receive-lead variant the last tune chose;
// -1 where the last choice was no lead variant, or outside a re-tune.
int Tuner::last_choice_base() const {
  for (size_t i = 0; i < res_.candidates.size(); ++i) {
    const Candidate& c = res_.candidates[i];
    if (c.ok && c.gpus > 1 && c.schedule.meta.recv_lead < 0 && last_chosen_lead(c.label) >= 0) return int(i);
  }
  return -1;
}

// The lead of the last tune's choice where that was a receive posting of `base`; -1 otherwise.
int Tuner::last_chosen_lead(const std::string& base) const {
  const std::string last = last_choice();
  for (int lead : leads_tried()) {
    if (!last.empty() && last == lead_label(base, lead)) return lead;
  }
  return -1;
}

// The label of `base` posting its receives `lead` stages ahead.
std::string Tuner::lead_label(const std::string& base, int lead) {
  return base + strprintf(", receives %d stage%s ahead", lead, lead == 1 ? "" : "s");
}

// The leads timed: 0 (the consumer waits a whole transfer, which paid on inception_v3 2048
// in bf16), 2, and 8 (two blocks of a four-stream hios-lp schedule: receives posted nearly as
// early as at once, yet gated, so that received tensors share the arena and sends are fenced;
// docs/executor.md, "Shared memory"). Where the speeds tie, the choice takes the smaller arena.
const std::vector<int>& Tuner::leads_tried() {
  static const std::vector<int> kLeads = {0, 2, 8};
  return kLeads;
}

// The leads to time for `base`: every lead of leads_tried(), unless a re-tune knows which
// posting of this schedule the last tune measured fastest; then only that one is timed again
// (none when it was the schedule as searched, which the quick round has just timed), and the
// last tune's choice if it was another posting of this schedule (chosen among equals for its
// memory), as the launch orders are kept (adopt_stored_launch_order).
std::vector<int> Tuner::leads_to_time(const Candidate& base) {
  if (!reuse_searches_ || base.stored_fastest_lead == Candidate::kLeadsNotTimed) return leads_tried();
  progress_.line("timing", base.stored_fastest_lead < 0
                               ? strprintf("receive leads of %s: the last tune measured it fastest as searched; not "
                                           "timed again",
                                           base.label.c_str())
                               : strprintf("receive leads of %s: the last tune measured it fastest posting %d stages "
                                           "ahead; only that lead is timed again",
                                           base.label.c_str(), base.stored_fastest_lead));
  std::vector<int> leads;
  if (base.stored_fastest_lead >= 0) leads.push_back(base.stored_fastest_lead);
  const int chosen = last_chosen_lead(base.label);
  if (chosen >= 0 && chosen != base.stored_fastest_lead) {
    progress_.line("timing", strprintf("receive leads of %s: the last tune chose it posting %d stages ahead; "
                                       "that lead is timed again too",
                                       base.label.c_str(), chosen));
    leads.push_back(chosen);
  }
  return leads;
}

// ---- phase 10: calibration, and the multi-GPU searches again with it
// A gap after every launch, fitted to the one-GPU candidates, and a cost per transfer, fitted
// to the multi-GPU ones with that gap. Every candidate's prediction uses the costs fitted to
// the *other* schedules (leave its structure out), so no prediction is fitted to its own
// measurement; one-GPU candidates calibrate the multi-GPU ones and never the reverse.
void Tuner::calibrate_and_search_again() {
  for (Candidate& c : res_.candidates) c.predicted_uncalibrated_ms = c.predicted_ms;
  calibration_ = calibrate(false);
  progress_.line("calibrate", strprintf("inside a pass: +%.2f us after every launch (%zu one-GPU schedules), %+.1f us "
                                        "on every transfer (%zu multi-GPU schedules)",
                                        1e3 * calibration_.launch_ms, calibration_.one_gpu,
                                        1e3 * calibration_.transfer_ms, calibration_.multi_gpu));
  if (N_ > 1 && !reuse_searches_ && calibration_.transfer_ms > 0) {
    if (timer_) load_measuring_program(0);  // new stages are measured
    cost_->transfer_extra_ms = calibration_.transfer_ms;
    const size_t before = res_.candidates.size();
    search({{"hios-lp", "calibrated", N_, S_, 4},
            {"hios-lp", "calibrated", N_, std::min(S_, 2), 2},
            {"hios-mr", "calibrated", N_, S_, 4},
            {"heft", "calibrated", N_, S_, 4}},
           "round 2, ");
    cost_->transfer_extra_ms = 0;
    cost_->detach();
    for (size_t k = before; k < res_.candidates.size(); ++k) {
      Candidate& c = res_.candidates[k];
      c.predicted_ms += db_.pass_overhead_ms;
      c.predicted_uncalibrated_ms = c.predicted_ms;
      time_one(c, quick_passes(), "quick", k + 1, res_.candidates.size());
    }
  }
  calibration_ = calibrate(true);
  note_stage_counts();  // round 2 may have measured more
}

// The smallest fixed cost of one message between two of the job's GPUs, as measured (a link's
// latency: its cost at zero bytes); 0 on one GPU.
double Tuner::fastest_link_latency_ms() const {
  double fastest = std::numeric_limits<double>::infinity();
  for (int a = 0; a < N_; ++a) {
    for (int b = 0; b < N_; ++b) {
      if (a != b) fastest = std::min(fastest, cost_->transfer_ms(0, a, b) - cost_->transfer_extra_ms);
    }
  }
  return std::isfinite(fastest) ? std::max(0.0, fastest) : 0.0;
}

Calibration Tuner::calibrate(bool predict) {
  static const std::vector<double> kLaunchGrid = {0, 0.002};  // one GPU: exactly linear in the gap
  // A transfer's cost in a pass may be below the link's measured one by up to its fixed latency
  // (calibration.hpp): the curves reach down to minus the fastest link's latency.
  const double lowest = -fastest_link_latency_ms();
  std::vector<double> transfer_grid = {0, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.4};
  if (lowest < 0) transfer_grid.insert(transfer_grid.begin(), {lowest, 0.75 * lowest, 0.5 * lowest, 0.25 * lowest});
  CalibratedCost cal(*cost_);
  const size_t n = res_.candidates.size();
  std::vector<Curve> curves(n);
  auto curve = [&](const Candidate& c, const std::vector<double>& grid, double& knob) {
    Curve cv;
    for (double x : grid) {
      knob = x;
      cv.x.push_back(x);
      cv.y.push_back(simulate(job_.graph(c.variant), c.schedule, cal).latency_ms);
    }
    knob = 0;
    return cv;
  };
  std::vector<CalibrationPeer> peers(n);
  for (size_t i = 0; i < n; ++i) {
    const Candidate& c = res_.candidates[i];
    peers[i] = {c.ok, c.gpus > 1, c.variant > 0 ? calibration_kind(splits_[c.variant - 1].plan) : CalibrationKind::Unsplit,
                c.schedule.meta.recv_lead,
                structure_key(job_.graph(c.variant), c.schedule, c.variant)};
    if (c.gpus == 1) curves[i] = curve(c, kLaunchGrid, cal.extra_launch_ms);
  }
  // Multi-GPU candidates also as curves without the launch gap (gapless), see below.
  std::vector<Curve> gapless(n);
  auto points_of = [&](const std::vector<size_t>& which, const std::vector<Curve>& of) {
    std::vector<std::pair<const Curve*, double>> pts;
    for (size_t j : which) pts.push_back({&of[j], res_.candidates[j].measured_ms});
    return pts;
  };
  auto points = [&](bool multi) {  // every verified one with receives posted at once, on one GPU or more
    std::vector<size_t> which;
    for (size_t j = 0; j < n; ++j) {
      if (peers[j].ok && peers[j].lead < 0 && peers[j].multi == multi) which.push_back(j);
    }
    return points_of(which, curves);
  };
  Calibration all;
  all.launch_ms = fit_extra(points(false), db_.pass_overhead_ms);
  all.one_gpu = points(false).size();
  for (size_t i = 0; i < n; ++i) {
    if (res_.candidates[i].gpus == 1) continue;
    cal.extra_launch_ms = all.launch_ms;
    curves[i] = curve(res_.candidates[i], transfer_grid, cal.extra_transfer_ms);
    if (!predict) continue;
    cal.extra_launch_ms = 0;
    gapless[i] = curve(res_.candidates[i], transfer_grid, cal.extra_transfer_ms);
  }
  cal.extra_launch_ms = all.launch_ms;
  all.transfer_ms = fit_extra(points(true), db_.pass_overhead_ms, lowest);
  all.multi_gpu = points(true).size();
  if (!predict) return all;
  for (size_t i = 0; i < n; ++i) {
    Candidate& c = res_.candidates[i];
    const bool multi = c.gpus > 1;
    const std::vector<size_t> peer_set = calibration_peers(peers, i);
    const auto others = points_of(peer_set, curves);
    if (others.empty()) continue;  // nothing else to calibrate on: the uncalibrated prediction stays
    if (multi) {
      // The one-GPU launch gap, or none, whichever fits the peers better with their fitted
      // transfer cost: the gap fitted to whole-graph schedules on one GPU overstated row splits
      // (inception_v3 2048 bf16 on two H100s: +10.0% with it, +6.7% without).
      const auto others_gapless = points_of(peer_set, gapless);
      const double with_gap = fit_extra(others, db_.pass_overhead_ms, lowest);
      const double without_gap = fit_extra(others_gapless, db_.pass_overhead_ms, lowest);
      const bool gap = fit_loss(others, with_gap, db_.pass_overhead_ms) <=
                       fit_loss(others_gapless, without_gap, db_.pass_overhead_ms);
      cal.extra_launch_ms = gap ? all.launch_ms : 0;
      cal.extra_transfer_ms = gap ? with_gap : without_gap;
    } else {
      cal.extra_launch_ms = fit_extra(others, db_.pass_overhead_ms);
      cal.extra_transfer_ms = 0;
    }
    c.launch_extra_ms = cal.extra_launch_ms;
    c.transfer_extra_ms = cal.extra_transfer_ms;
    c.predicted_ms = simulate(job_.graph(c.variant), c.schedule, cal).latency_ms + db_.pass_overhead_ms;
  }
  return all;
}

// ---- phase 11: the candidates that can still win, timed as `hios run` times them
void Tuner::time_finalists() {
  if (quick_passes() >= o_.passes) return;
  double fastest = 0;
  for (const Candidate& c : res_.candidates) {
    if (c.ok && (fastest == 0 || c.measured_ms < fastest)) fastest = c.measured_ms;
  }
  std::vector<Candidate*> finalists;
  for (Candidate& c : res_.candidates) {
    if (c.ok && c.measured_ms <= fastest * (1 + o_.finalist_margin)) finalists.push_back(&c);
  }
  for (size_t k = 0; k < finalists.size(); ++k) time_one(*finalists[k], o_.passes, "final", k + 1, finalists.size());
}

// ---- phase 12: the launch order (executor/launch_order.hpp) of the fastest verified
// candidate, each order timed over the full passes; `hios run` uses the fastest unless told
// otherwise
void Tuner::choose_launch_order() {
  Candidate* lead = choice();
  if (!lead) return;
  chosen_ = static_cast<int>(lead - res_.candidates.data());
  if (reuse_searches_ && adopt_stored_launch_order(*lead)) return;
  const Graph& g = job_.graph(lead->variant);
  double best_ms = lead->passes == o_.passes ? lead->measured_ms : 0;
  for (const char* name : {"topo", "opara", "measured"}) {
    if (std::string(name) == "topo" && best_ms > 0) {
      launch_orders_[name] = best_ms;
      continue;
    }
    const double ms = job_.lead({{"op", "time"},
                                 {"graph", lead->variant},
                                 {"schedule", schedule_to_json(g, lead->schedule)},
                                 {"launch_order", name},
                                 {"capture", true},
                                 {"warmup", o_.warmup},
                                 {"passes", o_.passes}})
                          .get<double>();
    const exec::Diff d = exec::compare(job_.output, reference_);
    const bool ok = d.max_rel <= tolerance_of(*lead);
    progress_.line("timing", strprintf("launch order %-8s %-58s measured %8.3f ms, max_rel %.1e%s", name,
                                       lead->label.c_str(), ms, d.max_rel, ok ? "" : "  FAILED"));
    if (!ok) continue;
    launch_orders_[name] = ms;
    if (std::string(name) == "topo") {
      lead->measured_ms = ms;
      best_ms = ms;
    } else if (ms < best_ms) {
      best_ms = ms;
      launch_order_ = name;
    }
  }
}

// ---- after phase 12: the predictions fitted again, now that the finalists and the chosen
// candidate have their full-pass timings (more warm-ups and passes than the quick round's);
// the choice does not depend on predictions.
void Tuner::refit_predictions() { calibration_ = calibrate(true); }

// A re-tune whose choice is the last tune's keeps the launch orders that tune timed for it
// (`searched.launch_order` in the database) rather than timing them again.
bool Tuner::adopt_stored_launch_order(const Candidate& lead) {
  if (last_choice() != lead.label) return false;  // also "" where nothing is stored
  const json& stored = db_.searched["launch_order"];
  if (!stored.contains("chosen") || !stored["chosen"].is_string() || !stored.contains("measured_ms") ||
      !stored["measured_ms"].is_object()) {
    return false;
  }
  const std::string chosen = stored["chosen"].get<std::string>();
  json measured = json::object();
  for (const char* name : {"topo", "opara", "measured"}) {
    if (!stored["measured_ms"].contains(name)) continue;
    const json& ms = stored["measured_ms"][name];
    if (!ms.is_number() || !(ms.get<double>() > 0) || !std::isfinite(ms.get<double>())) return false;
    measured[name] = ms;
  }
  if (!measured.contains(chosen)) return false;
  launch_order_ = chosen;
  launch_orders_ = measured;
  launch_orders_["topo"] = lead.measured_ms;  // timed again in this re-tune's finals
  progress_.line("timing", strprintf("launch order %s, kept: the last tune timed the launch orders of %s", chosen.c_str(),
                                     lead.label.c_str()));
  return true;
}

// The candidate to write (choose_candidate), its memory from the lowered programs.
Candidate* Tuner::choice() {
  const Candidate* c = choose_candidate(
      res_.candidates, [this](const Candidate& x) { return tensor_memory(x); }, last_choice());
  return c ? &res_.candidates[size_t(c - res_.candidates.data())] : nullptr;
}

// A re-tune's last choice: the candidate whose launch orders the database stores ("" in a tune
// that searched afresh, whose candidates may differ from the last tune's under the same labels).
std::string Tuner::last_choice() const {
  if (!reuse_searches_ || !db_.searched.is_object() || !db_.searched.contains("launch_order")) return "";
  const json& stored = db_.searched["launch_order"];
  if (!stored.is_object() || !stored.contains("candidate") || !stored["candidate"].is_string()) return "";
  return stored["candidate"].get<std::string>();
}

// The shared arena of the candidate's fullest rank, in float32 bytes (cached per candidate).
int64_t Tuner::tensor_memory(const Candidate& c) {
  const std::string key = c.label;
  auto it = tensor_memory_.find(key);
  if (it != tensor_memory_.end()) return it->second;
  int64_t most = 0;
  const Graph& g = job_.graph(c.variant);
  for (exec::RankProgram& p : exec::lower_all(g, c.schedule)) {
    exec::share_buffers(g, p, exec::memory_plan_options(job_.layout(), g));
    most = std::max(most, p.tensor_memory());
  }
  return tensor_memory_[key] = most;
}

}  // namespace hios::tune::detail
