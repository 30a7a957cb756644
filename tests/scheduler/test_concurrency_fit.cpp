// The concurrency fit: parameters recovered from stages the stage model itself generated (exact
// and noisy), clamping, the degenerate case, skipped observations, the JSON format, and that a
// fitted preset predicts exactly what combine_stage_ms predicts with those parameters.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "graph/error.hpp"
#include "scheduler/concurrency_fit.hpp"
#include "scheduler/cost_model.hpp"
#include "tests/catch.hpp"
#include "tests/test_util.hpp"

using namespace hios;
using test::error_of;

namespace {

using Groups = std::vector<std::vector<StageItem>>;

// A fixed linear congruential generator, so every run sees the same stages and the same noise.
struct Lcg {
  uint64_t s;
  explicit Lcg(uint64_t seed) : s(seed) {}
  double next() {  // in [0, 1)
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(s >> 11) * (1.0 / 9007199254740992.0);
  }
  double in(double lo, double hi) { return lo + (hi - lo) * next(); }
};

// Stages shaped like what the searches propose: 2-4 groups of 1-3 nodes from 5 to 300 us, with
// SM shares from a sliver to the whole GPU, so some stages are bound by their longest group and
// others by SM or bandwidth capacity (which is what lets the fit tell alpha from the overhead).
std::vector<Groups> random_stages(int n, uint64_t seed) {
  Lcg r(seed);
  std::vector<Groups> out;
  for (int s = 0; s < n; ++s) {
    Groups gs(2 + static_cast<int>(r.in(0, 3)));
    for (auto& gr : gs) {
      int items = 1 + static_cast<int>(r.in(0, 3));
      for (int i = 0; i < items; ++i) {
        double ms = r.in(0.005, 0.3);
        gr.push_back({ms, ms * r.in(0.05, 1.0), ms * r.in(0.0, 0.8), std::min(ms, 0.004)});
      }
    }
    out.push_back(std::move(gs));
  }
  return out;
}

// h200's node rates with the plain blend of the stage model (alpha 0.1, 3 us per stage, no
// short-node term), the starting point these fits are checked from, whatever the shipped preset
// was refitted to.
DevicePreset stage_base() {
  DevicePreset p = find_device_preset("h200");
  p.alpha = 0.1;
  p.stage_overhead_us = 3.0;
  p.short_node_us = 0;
  return p;
}

DevicePreset with(DevicePreset p, double alpha, double overhead_us) {
  p.alpha = alpha;
  p.stage_overhead_us = overhead_us;
  return p;
}

// Each stage "measured" as the stage model with `truth`, times a factor in [1 - noise, 1 + noise].
std::vector<StageObservation> observe(const DevicePreset& truth, const std::vector<Groups>& stages,
                                      double noise = 0, uint64_t seed = 7) {
  Lcg r(seed);
  std::vector<StageObservation> obs;
  for (const Groups& gs : stages) obs.push_back({gs, combine_stage_ms(truth, gs) * r.in(1 - noise, 1 + noise)});
  return obs;
}

}  // namespace

TEST_CASE("concurrency fit recovers the parameters that generated the stages") {
  DevicePreset h200 = stage_base();
  REQUIRE(h200.alpha == Approx(0.1));
  std::vector<Groups> stages = random_stages(60, 1);

  SECTION("inside the box") {
    ConcurrencyFit f = fit_concurrency(h200, observe(with(h200, 0.35, 7.5), stages));
    CHECK(f.stages == 60);
    CHECK(std::fabs(f.alpha - 0.35) < 1e-3);
    CHECK(std::fabs(f.stage_overhead_us - 7.5) < 0.1);
    CHECK(f.error_before > 0.01);  // the preset's 0.1 / 3 us really is off for these stages
    CHECK(f.worst_before >= f.error_before);
    CHECK(f.error_after < 1e-9);
    CHECK(f.worst_after < 1e-9);
  }
  SECTION("on the box's corner") {
    ConcurrencyFit f = fit_concurrency(h200, observe(with(h200, 0.0, 0.0), stages));
    CHECK(std::fabs(f.alpha) < 1e-3);
    CHECK(std::fabs(f.stage_overhead_us) < 0.1);
    CHECK(f.error_after < 1e-9);
  }
  SECTION("fully serial stages give alpha 1") {
    ConcurrencyFit f = fit_concurrency(h200, observe(with(h200, 1.0, 20.0), stages));
    CHECK(std::fabs(f.alpha - 1.0) < 1e-3);
    CHECK(std::fabs(f.stage_overhead_us - 20.0) < 0.1);
  }
  SECTION("stages faster than the model's contended bound clamp alpha and the overhead at 0") {
    // The unconstrained optimum has alpha < 0; the fit must stay in range and still beat the preset.
    std::vector<StageObservation> obs = observe(with(h200, 0.0, 0.0), stages);
    for (StageObservation& o : obs) o.measured_ms *= 0.7;
    ConcurrencyFit f = fit_concurrency(h200, obs);
    CHECK(f.alpha == 0.0);
    CHECK(f.stage_overhead_us == 0.0);
    CHECK(f.error_after < f.error_before);
  }
  SECTION("absurdly slow stages clamp the overhead at 1000 us") {
    std::vector<StageObservation> obs = observe(with(h200, 0.2, 0.0), stages);
    for (StageObservation& o : obs) o.measured_ms += 5.0;
    ConcurrencyFit f = fit_concurrency(h200, obs);
    CHECK(f.stage_overhead_us == 1000.0);
    CHECK(f.alpha >= 0.0);
    CHECK(f.alpha <= 1.0);
    CHECK(f.error_after < f.error_before);
  }
}

TEST_CASE("concurrency fit with +-5% measurement noise") {
  DevicePreset h200 = stage_base();
  std::vector<Groups> stages = random_stages(300, 2);
  std::vector<StageObservation> obs = observe(with(h200, 0.35, 7.5), stages, 0.05, 11);
  ConcurrencyFit f = fit_concurrency(h200, obs);
  CHECK(f.stages == 300);
  CHECK(std::fabs(f.alpha - 0.35) < 0.03);
  CHECK(std::fabs(f.stage_overhead_us - 7.5) < 1.5);
  CHECK(f.error_after < f.error_before);
  CHECK(f.error_after < 0.035);  // uniform +-5% noise alone has a mean |error| of 2.5%
  CHECK(f.worst_after < 0.08);

  // It is the least-squares optimum of the relative error: no nearby parameters do better.
  auto squared = [&](double alpha, double overhead_us) {
    double s = 0;
    for (const StageObservation& o : obs) {
      double e = combine_stage_ms(with(h200, alpha, overhead_us), o.groups) / o.measured_ms - 1;
      s += e * e;
    }
    return s;
  };
  double best = squared(f.alpha, f.stage_overhead_us);
  for (double da : {-1e-3, 0.0, 1e-3}) {
    for (double dov : {-0.05, 0.0, 0.05}) {
      if (da != 0 || dov != 0) CHECK(squared(f.alpha + da, f.stage_overhead_us + dov) > best);
    }
  }

  // Deterministic, and the order of the observations does not matter beyond rounding.
  ConcurrencyFit again = fit_concurrency(h200, obs);
  CHECK(again.alpha == f.alpha);
  CHECK(again.stage_overhead_us == f.stage_overhead_us);
  std::vector<StageObservation> reversed(obs.rbegin(), obs.rend());
  ConcurrencyFit r = fit_concurrency(h200, reversed);
  CHECK(r.alpha == Approx(f.alpha).margin(1e-9));
  CHECK(r.stage_overhead_us == Approx(f.stage_overhead_us).margin(1e-6));

  // Held out: a fit on half the stages predicts the other half better than the preset does.
  std::vector<StageObservation> train(obs.begin(), obs.begin() + 150), test(obs.begin() + 150, obs.end());
  ConcurrencyFit half = fit_concurrency(h200, train);
  double err_preset = 0, err_fit = 0;
  for (const StageObservation& o : test) {
    err_preset += std::fabs(combine_stage_ms(h200, o.groups) / o.measured_ms - 1);
    err_fit += std::fabs(fitted_stage_ms(h200, half, o.groups) / o.measured_ms - 1);
  }
  CHECK(err_fit < 0.5 * err_preset);
}

TEST_CASE("concurrency fit skips unusable observations and needs three") {
  DevicePreset h200 = stage_base();
  DevicePreset truth = with(h200, 0.5, 10.0);
  std::vector<Groups> stages = random_stages(2, 3);
  std::vector<StageObservation> obs = observe(truth, stages);
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  std::vector<StageObservation> bad = {
      {stages[0], 0.0},
      {stages[0], -1.0},
      {stages[0], nan},
      {stages[0], inf},
      {Groups{stages[0][0]}, 0.1},      // one group
      {Groups{stages[0][0], {}}, 0.1},  // two groups, one of them empty
      {Groups{}, 0.1},
      {Groups{{{nan, 0, 0, 0}}, {{0.01, 0, 0, 0}}}, 0.1},  // a demand that is not a number
  };
  std::vector<StageObservation> mixed = obs;
  mixed.insert(mixed.begin() + 1, bad.begin(), bad.end());

  ConcurrencyFit f = fit_concurrency(h200, mixed);
  CHECK(f.stages == 2);
  CHECK(f.alpha == h200.alpha);
  CHECK(f.stage_overhead_us == h200.stage_overhead_us);
  CHECK(f.error_before > 0);
  CHECK(f.error_after == f.error_before);
  CHECK(f.worst_after == f.worst_before);
  double expect = 0;
  for (const StageObservation& o : obs) expect += std::fabs(combine_stage_ms(h200, o.groups) / o.measured_ms - 1);
  CHECK(f.error_before == Approx(expect / 2));

  ConcurrencyFit none = fit_concurrency(h200, bad);
  CHECK(none.stages == 0);
  CHECK(none.alpha == h200.alpha);
  CHECK(none.stage_overhead_us == h200.stage_overhead_us);
  CHECK(none.error_before == 0);
  CHECK(none.error_after == 0);

  // With enough good observations, the bad ones change nothing.
  std::vector<Groups> more = random_stages(40, 4);
  std::vector<StageObservation> good = observe(truth, more);
  std::vector<StageObservation> good_and_bad = good;
  good_and_bad.insert(good_and_bad.end(), bad.begin(), bad.end());
  ConcurrencyFit a = fit_concurrency(h200, good), b = fit_concurrency(h200, good_and_bad);
  CHECK(b.stages == 40);
  CHECK(b.alpha == a.alpha);
  CHECK(b.stage_overhead_us == a.stage_overhead_us);
  CHECK(std::fabs(b.alpha - 0.5) < 1e-3);
  CHECK(std::fabs(b.stage_overhead_us - 10.0) < 0.1);
}

TEST_CASE("concurrency fit keeps the preset's alpha when the stages cannot separate it from the overhead") {
  // Every stage is two nodes, a short one of 20 us beside a longer one, both using few SMs: Σ groups
  // - contended is 20 us everywhere, so alpha · 20 us and the overhead are interchangeable.
  DevicePreset h200 = stage_base();
  Lcg r(5);
  std::vector<Groups> stages;
  for (int i = 0; i < 20; ++i) {
    double longer = r.in(0.03, 0.3);
    stages.push_back(Groups{{{0.02, 0.001, 0.001, 0.004}}, {{longer, 0.001, 0.001, 0.004}}});
  }
  std::vector<StageObservation> obs = observe(with(h200, 0.4, 2.0), stages);
  ConcurrencyFit f = fit_concurrency(h200, obs);
  CHECK(f.alpha == Approx(h200.alpha).margin(1e-9));
  CHECK(f.stage_overhead_us == Approx(2.0 + (0.4 - h200.alpha) * 20.0).margin(1e-6));
  CHECK(f.error_after < 1e-9);
}

TEST_CASE("stage model: short nodes move a stage toward the serial sum, within the model's bounds") {
  DevicePreset p = stage_base();
  DevicePreset shortish = p;
  shortish.short_node_us = 13;
  // Two groups of one node each, at the same SM and bandwidth shares, long and then short.
  auto stage = [](double node_ms) {
    return Groups{{{node_ms, node_ms * 0.2, node_ms * 0.1, 0.002}}, {{node_ms, node_ms * 0.2, node_ms * 0.1, 0.002}}};
  };
  for (double ms : {0.005, 0.013, 0.05, 0.3}) {
    INFO(ms << " ms per node");
    const Groups gs = stage(ms);
    const double plain = combine_stage_ms(p, gs), with_short = combine_stage_ms(shortish, gs);
    CHECK(with_short >= plain);                      // never more overlap than without
    CHECK(combine_stage_floor_ms(shortish, gs) == Approx(plain));  // the floor leaves the term out
    CHECK(with_short >= ms);                         // at least the longest group
    CHECK(with_short <= 2 * ms + 3e-3 + 1e-12);      // at most the serial sum and the overhead
    // The share of the serial sum: alpha, plus (1 - alpha) * tau / (tau + mean node).
    const double a = 0.1 + 0.9 * 0.013 / (0.013 + ms);
    const double contended = std::max({ms, 0.4 * ms, 0.2 * ms, 0.004});
    CHECK(with_short == Approx(a * 2 * ms + (1 - a) * contended + 3e-3));
  }
  // Nodes of 13 us sit half-way between alpha and fully serial; long nodes barely move.
  CHECK(combine_stage_ms(shortish, stage(0.3)) / combine_stage_ms(p, stage(0.3)) < 1.05);
  // A fitted concurrency replaces it: the fit's alpha is what the GPU did, short nodes included.
  ConcurrencyFit f;
  f.alpha = 0.4;
  f.stage_overhead_us = 1;
  CHECK(apply_concurrency_fit(shortish, f).short_node_us == 0);
  // The devices file carries it; a negative one is refused naming the field.
  json doc = {{"format", "hios-devices"}, {"version", 1}, {"devices", json::array({device_preset_to_json(shortish)})}};
  CHECK(device_presets_from_json(doc).at(0).short_node_us == 13);
  doc["devices"][0]["short_node_us"] = -1;
  CHECK(error_of([&] { device_presets_from_json(doc); }) == "$.devices[0].short_node_us: must be non-negative (got -1)");
}

TEST_CASE("concurrency fit: a fitted preset predicts what combine_stage_ms predicts") {
  DevicePreset h200 = stage_base();
  ConcurrencyFit f;
  f.alpha = 0.27;
  f.stage_overhead_us = 6.5;
  DevicePreset p = apply_concurrency_fit(h200, f);
  CHECK(p.alpha == 0.27);
  CHECK(p.stage_overhead_us == 6.5);
  CHECK(p.name == h200.name);  // nothing else changes
  CHECK(p.peak_tflops == h200.peak_tflops);
  CHECK(p.launch_overhead_us == h200.launch_overhead_us);
  for (const Groups& gs : random_stages(20, 6)) {
    double expect = combine_stage_ms(with(h200, 0.27, 6.5), gs);
    CHECK(fitted_stage_ms(h200, f, gs) == expect);
    CHECK(combine_stage_ms(p, gs) == expect);
  }
  // A one-group stage has no concurrency to fit: still the plain sum.
  Groups one{{{0.01, 0.01, 0, 0.004}, {0.02, 0.01, 0, 0.004}}};
  CHECK(fitted_stage_ms(h200, f, one) == Approx(0.03));

  // The fit's reported errors are those of its own predictions.
  std::vector<StageObservation> obs = observe(with(h200, 0.3, 4.0), random_stages(30, 8), 0.05, 9);
  ConcurrencyFit g = fit_concurrency(h200, obs);
  double sum = 0, worst = 0;
  for (const StageObservation& o : obs) {
    double e = std::fabs(fitted_stage_ms(h200, g, o.groups) / o.measured_ms - 1);
    sum += e;
    worst = std::max(worst, e);
  }
  CHECK(g.error_after == Approx(sum / 30));
  CHECK(g.worst_after == Approx(worst));
}

TEST_CASE("concurrency fit: JSON round trip and strict reading") {
  DevicePreset h200 = stage_base();
  ConcurrencyFit f = fit_concurrency(h200, observe(with(h200, 0.3, 4.0), random_stages(30, 10), 0.05, 12));
  json j = concurrency_fit_to_json(f);
  CHECK(j.dump().rfind("{\"alpha\":", 0) == 0);
  ConcurrencyFit back = concurrency_fit_from_json(parse_json_text(j.dump(), "t"), "$.concurrency");
  CHECK(back.alpha == f.alpha);
  CHECK(back.stage_overhead_us == f.stage_overhead_us);
  CHECK(back.stages == f.stages);
  CHECK(back.error_before == f.error_before);
  CHECK(back.error_after == f.error_after);
  CHECK(back.worst_before == f.worst_before);
  CHECK(back.worst_after == f.worst_after);
  CHECK(concurrency_fit_to_json(back).dump() == j.dump());

  // Only the two parameters are required.
  ConcurrencyFit minimal =
      concurrency_fit_from_json(json{{"alpha", 0.2}, {"stage_overhead_us", 3}}, "$.concurrency");
  CHECK(minimal.alpha == 0.2);
  CHECK(minimal.stage_overhead_us == 3.0);
  CHECK(minimal.stages == 0);

  auto refused = [&](const std::string& key, const json& value) {
    json bad = j;
    bad[key] = value;
    return error_of([&] { concurrency_fit_from_json(bad, "$.concurrency"); });
  };
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  CHECK(refused("alpha", 1.5) == "$.concurrency.alpha: must be in [0, 1] (got 1.5)");
  CHECK(refused("alpha", -0.1) == "$.concurrency.alpha: must be in [0, 1] (got -0.1)");
  // Non-finite values only come from C++; the shared number reader refuses them first.
  CHECK(refused("alpha", nan) == "$.concurrency.alpha: nan is not a finite number");
  CHECK(refused("alpha", "0.2") == "$.concurrency.alpha: expected a number, got string");
  CHECK(refused("stage_overhead_us", -1) == "$.concurrency.stage_overhead_us: must be in [0, 1000] (got -1)");
  CHECK(refused("stage_overhead_us", 1000.5) == "$.concurrency.stage_overhead_us: must be in [0, 1000] (got 1000.5)");
  CHECK(refused("stage_overhead_us", inf) == "$.concurrency.stage_overhead_us: inf is not a finite number");
  CHECK(refused("stages", -1) == "$.concurrency.stages: must be a non-negative count (got -1)");
  CHECK(refused("stages", 2.5) == "$.concurrency.stages: expected an integer, got number");
  CHECK(refused("error_before", -0.5) == "$.concurrency.error_before: must be a finite non-negative number (got -0.5)");
  CHECK(refused("error_after", -1e-3) ==
        "$.concurrency.error_after: must be a finite non-negative number (got -0.001)");
  CHECK(refused("worst_after", true) == "$.concurrency.worst_after: expected a number, got boolean");
  CHECK(refused("worst_before", inf) == "$.concurrency.worst_before: inf is not a finite number");
  CHECK(refused("beta", 0.5) == "$.concurrency.beta: unknown key");

  json missing = j;
  missing.erase("alpha");
  CHECK(error_of([&] { concurrency_fit_from_json(missing, "$.concurrency"); }) == "$.concurrency.alpha: missing");
  CHECK(error_of([&] { concurrency_fit_from_json(json::array(), "$.concurrency"); }) ==
        "$.concurrency: expected an object, got array");
}
