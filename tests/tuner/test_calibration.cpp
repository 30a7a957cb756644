// hios tune's calibration: the curves, the fit, and the cost model that replays a candidate.
#include <cmath>
#include <map>

#include "models/models.hpp"
#include "scheduler/algorithms.hpp"
#include "scheduler/cost_model.hpp"
#include "scheduler/simulator.hpp"
#include "tests/catch.hpp"
#include "tuner/calibration.hpp"
#include "tuner/tune.hpp"

using namespace hios;
using namespace hios::tune;

TEST_CASE("calibration: a curve is linear between its samples and beyond the last") {
  Curve c{{0, 1, 3}, {10, 12, 13}};
  CHECK(c.at(0) == 10);
  CHECK(c.at(0.5) == Approx(11));
  CHECK(c.at(2) == Approx(12.5));
  CHECK(c.at(5) == Approx(14));  // the last segment's slope
}

TEST_CASE("calibration: the fit finds the cost that explains the measurements, and 0 when none does") {
  // Three schedules whose latency grows by 4, 10 and 1 ms per ms of extra cost; measured with
  // an extra of 0.25 ms on top of a 0.5 ms pass overhead.
  Curve a{{0, 1}, {20, 24}}, b{{0, 1}, {30, 40}}, c{{0, 1}, {15, 16}};
  const double truth = 0.25, overhead = 0.5;
  std::vector<std::pair<const Curve*, double>> pts = {
      {&a, a.at(truth) + overhead}, {&b, b.at(truth) + overhead}, {&c, c.at(truth) + overhead}};
  CHECK(fit_extra(pts, overhead) == Approx(truth).margin(1e-6));
  // Its loss is 0 at the truth and grows away from it: what picks between two calibrations
  // (with the one-GPU launch gap or without) for a multi-GPU candidate.
  CHECK(fit_loss(pts, truth, overhead) == Approx(0).margin(1e-12));
  CHECK(fit_loss(pts, 0, overhead) > fit_loss(pts, truth / 2, overhead));
  // Curves 10% above every measurement at 0 (a launch gap that overstates them): no transfer
  // cost can bring them down, so the fit without that gap has the smaller loss.
  Curve a_gap{{0, 1}, {22, 26}}, b_gap{{0, 1}, {33, 43}};
  std::vector<std::pair<const Curve*, double>> gapped = {{&a_gap, a.at(truth) + overhead},
                                                         {&b_gap, b.at(truth) + overhead}};
  std::vector<std::pair<const Curve*, double>> plain = {pts[0], pts[1]};
  CHECK(fit_extra(gapped, overhead) == 0.0);
  CHECK(fit_loss(plain, fit_extra(plain, overhead), overhead) <
        fit_loss(gapped, fit_extra(gapped, overhead), overhead));
  // Measured faster than even no extra cost explains: nothing positive helps.
  std::vector<std::pair<const Curve*, double>> fast = {{&a, 18.0}, {&b, 29.0}};
  CHECK(fit_extra(fast, overhead) == 0.0);
  CHECK(fit_extra({}, overhead) == 0.0);
}

TEST_CASE("calibration: a transfer may cost less in a pass than alone, down to minus the link's latency, never below nothing") {
  // Curves sampled below 0 as the tune samples them, to minus a 0.014 ms link latency: measured
  // 0.004 ms per transfer below what the isolated link predicts (inception_v3 512 over cuda-ipc
  // on two H100s: every unsplit two-GPU schedule 8-18% above its measurement at 0).
  Curve a{{-0.014, 0, 1}, {20 - 0.014 * 4, 20, 24}}, b{{-0.014, 0, 1}, {30 - 0.014 * 10, 30, 40}};
  const double truth = -0.004, overhead = 0.5, latency = 0.014;
  std::vector<std::pair<const Curve*, double>> pts = {{&a, a.at(truth) + overhead}, {&b, b.at(truth) + overhead}};
  CHECK(fit_extra(pts, overhead) == 0.0);  // a launch gap: never below 0
  CHECK(fit_extra(pts, overhead, -latency) == Approx(truth).margin(1e-6));
  // Faster than even a free transfer explains: the fit stops at minus the latency.
  std::vector<std::pair<const Curve*, double>> fast = {{&a, 18.0}, {&b, 29.0}};
  CHECK(fit_extra(fast, overhead, -latency) == Approx(-latency).margin(1e-6));
  // The replaying cost model never makes a transfer cost less than nothing.
  auto base = make_analytic_cost_model(find_device_preset("h200"));
  CalibratedCost cal(*base);
  const double alone = base->transfer_ms(0, 0, 1);
  REQUIRE(alone > 0);
  cal.extra_transfer_ms = -alone / 2;
  CHECK(cal.transfer_ms(0, 0, 1) == Approx(alone / 2));
  CHECK(cal.transfer_ms(1e6, 0, 1) == Approx(base->transfer_ms(1e6, 0, 1) - alone / 2));
  cal.extra_transfer_ms = -2 * alone;
  CHECK(cal.transfer_ms(0, 0, 1) == 0.0);
}

TEST_CASE("calibration: a candidate is calibrated on other structures of its kind, never on another kind") {
  using V = std::vector<size_t>;
  const auto unsplit = CalibrationKind::Unsplit, halo = CalibrationKind::HaloSplit,
             recompute = CalibrationKind::RecomputeSplit;
  // ok, multi, kind, lead, key
  std::vector<CalibrationPeer> peers = {
      {true, false, unsplit, -1, "seq"},      // 0: one GPU
      {true, false, unsplit, -1, "ios"},      // 1: one GPU
      {true, true, unsplit, -1, "lp2"},       // 2: two GPUs, unsplit
      {true, true, unsplit, -1, "mr2"},       // 3: two GPUs, unsplit
      {true, true, halo, -1, "split-a"},      // 4: a row split exchanging halos
      {true, true, halo, -1, "split-b"},      // 5: another one
      {true, true, halo, 2, "split-a"},       // 6: split-a, receives posted 2 stages ahead
      {true, true, halo, 2, "split-b"},       // 7: split-b, receives posted 2 stages ahead
      {false, true, unsplit, -1, "heft"},     // 8: failed verification
      {true, true, recompute, -1, "split-r"}, // 9: a row split by recompute alone
      {true, true, recompute, 2, "split-r"},  // 10: split-r, receives posted 2 stages ahead
  };
  CHECK(calibration_peers(peers, 0) == V{1});     // one GPU: the other one-GPU schedules only
  CHECK(calibration_peers(peers, 2) == V{3});     // unsplit: the other unsplit
  CHECK(calibration_peers(peers, 4) == V{5});     // a split: the other split of its kind only
  CHECK(calibration_peers(peers, 6) == V{7});     // a lead variant: the other split's lead variant
  CHECK(calibration_peers(peers, 8) == V{2, 3});  // one that failed is still predicted
  // A recompute split exchanges no halo: neither the halo splits nor the unsplit schedules
  // calibrate it, and it calibrates neither.
  CHECK(calibration_peers(peers, 9).empty());
  CHECK(calibration_peers(peers, 10).empty());
  peers.push_back({true, true, recompute, -1, "split-s"});  // 11: another recompute split
  CHECK(calibration_peers(peers, 10) == V{11});
  CHECK(calibration_peers(peers, 9) == V{11});
  // Leads are told apart by their value: split-b posting 0 stages ahead (its consumers wait
  // for whole transfers) does not calibrate split-a posting 2 ahead, nor the other way round.
  peers.push_back({true, true, halo, 0, "split-b"});  // 12
  CHECK(calibration_peers(peers, 6) == V{7});
  CHECK(calibration_peers(peers, 12) == V{4});  // no other lead 0: split-a as timed at once
  // No other split posts its receives later: the other split as timed at once, never the
  // variant's own structure.
  peers[7].ok = false;
  CHECK(calibration_peers(peers, 6) == V{5});
  // The only split of its structure: the unsplit schedules do not calibrate it (their
  // transfers are whole tensors, not halos), so it keeps its uncalibrated prediction; nor does
  // a split calibrate an unsplit schedule.
  peers[5].ok = false;
  CHECK(calibration_peers(peers, 4).empty());
  CHECK(calibration_peers(peers, 6).empty());
  peers[3].ok = false;
  CHECK(calibration_peers(peers, 2).empty());
  // Nothing else on one GPU: it keeps its uncalibrated prediction.
  peers[1].ok = false;
  CHECK(calibration_peers(peers, 0).empty());
}

TEST_CASE("calibration: a split's kind is halo unless every region is split by recompute alone") {
  SplitRegion recompute_region, mixed_region;
  recompute_region.mode = SplitMode::Recompute;
  mixed_region.mode = SplitMode::Mixed;
  SpatialPlan plan;
  CHECK(calibration_kind(plan) == CalibrationKind::Unsplit);
  plan.regions = {recompute_region};
  CHECK(calibration_kind(plan) == CalibrationKind::RecomputeSplit);
  plan.regions = {recompute_region, mixed_region};
  CHECK(calibration_kind(plan) == CalibrationKind::HaloSplit);
  plan.regions = {SplitRegion{}};  // halo mode
  CHECK(calibration_kind(plan) == CalibrationKind::HaloSplit);
}

TEST_CASE("calibration: the replaying cost model adds a gap per launch of the longest group and a cost per transfer") {
  Graph g = build_model("randwire_small", {1, 64, 64});
  auto base = make_analytic_cost_model(find_device_preset("h200"));
  SchedulerOptions opt;
  opt.num_gpus = 2;
  opt.single_gpu_fallback = false;
  Schedule s = run_algorithm("hios-lp", g, *base, opt);
  REQUIRE(!s.transfers.empty());
  CalibratedCost cal(*base);
  const double plain = simulate(g, s, cal).latency_ms;
  CHECK(plain == Approx(simulate(g, s, *base).latency_ms));
  cal.extra_transfer_ms = 0.05;
  const double with_transfers = simulate(g, s, cal).latency_ms;
  CHECK(with_transfers >= plain);
  cal.extra_transfer_ms = 0;
  cal.extra_launch_ms = 0.01;
  const double with_gaps = simulate(g, s, cal).latency_ms;
  CHECK(with_gaps > plain);
  // One GPU, one stream: every node is a launch on the critical path.
  Schedule seq = run_algorithm("sequential", g, *base, SchedulerOptions{});
  CalibratedCost one(*base);
  const double seq_plain = simulate(g, seq, one).latency_ms;
  one.extra_launch_ms = 0.01;
  CHECK(simulate(g, seq, one).latency_ms == Approx(seq_plain + 0.01 * (g.size() - 1)));
}

// A timed candidate as the choice sees it: its label, GPUs, measurement and verification.
static tune::Candidate cand(const std::string& label, int gpus, double ms, bool ok = true) {
  tune::Candidate c;
  c.label = label;
  c.gpus = gpus;
  c.measured_ms = ms;
  c.ok = ok;
  return c;
}

TEST_CASE("tune: within the noise margin, fewer GPUs win, then less memory") {
  std::map<std::string, int64_t> memory{{"split", 60}, {"ios", 110}, {"lp1", 100}, {"lp2", 50}, {"bad", 1}};
  auto mem = [&](const tune::Candidate& c) { return memory.at(c.label); };
  // The split is fastest by 0.3%: within the margin, one GPU wins, and of the one-GPU candidates
  // within it the one needing less memory.
  std::vector<tune::Candidate> tie = {cand("ios", 1, 1.605), cand("split", 2, 1.600), cand("lp1", 1, 1.609),
                                      cand("bad", 1, 1.0, false)};
  REQUIRE(tune::choose_candidate(tie, mem) != nullptr);
  CHECK(tune::choose_candidate(tie, mem)->label == "lp1");
  // Faster by more than the margin, the two-GPU split wins whatever its memory.
  std::vector<tune::Candidate> clear = {cand("ios", 1, 1.650), cand("split", 2, 1.600)};
  CHECK(tune::choose_candidate(clear, mem)->label == "split");
  // Among two-GPU candidates within the margin, the one needing less memory.
  std::vector<tune::Candidate> two = {cand("split", 2, 1.600), cand("lp2", 2, 1.610), cand("ios", 1, 1.700)};
  CHECK(tune::choose_candidate(two, mem)->label == "lp2");
  // Nothing verified: nothing chosen.
  CHECK(tune::choose_candidate({cand("bad", 1, 1.0, false)}, mem) == nullptr);
}

TEST_CASE("tune: a re-tune keeps its last choice among equals of the fewest GPUs") {
  std::map<std::string, int64_t> memory{{"split", 60}, {"ios", 110}, {"lp1", 100}, {"lp2", 50}};
  auto mem = [&](const tune::Candidate& c) { return memory.at(c.label); };
  // Within the margin the last choice beats a smaller arena on as many GPUs...
  std::vector<tune::Candidate> two = {cand("split", 2, 1.600), cand("lp2", 2, 1.610), cand("ios", 1, 1.700)};
  CHECK(tune::choose_candidate(two, mem, "split")->label == "split");
  CHECK(tune::choose_candidate(two, mem, "")->label == "lp2");
  CHECK(tune::choose_candidate(two, mem, "gone")->label == "lp2");
  // ...and a faster equal, but not a candidate on fewer GPUs...
  std::vector<tune::Candidate> tie = {cand("ios", 1, 1.605), cand("split", 2, 1.600), cand("lp1", 1, 1.609)};
  CHECK(tune::choose_candidate(tie, mem, "split")->label == "lp1");
  CHECK(tune::choose_candidate(tie, mem, "ios")->label == "ios");
  // ...nor one measurably faster.
  std::vector<tune::Candidate> clear = {cand("ios", 1, 1.650), cand("split", 2, 1.600)};
  CHECK(tune::choose_candidate(clear, mem, "ios")->label == "split");
}
