// The request streams and the batching decision of `hios serve` (batching.hpp): traces of arrivals,
// the policy names, and BatchController, the launcher's choice of how many waiting requests to
// take. Apart from the server because all of it is free of threads, clocks and devices, so it
// is tested, and read, on its own.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <sstream>

#include "graph/error.hpp"
#include "graph/json_reader.hpp"
#include "serve/batching.hpp"

namespace hios::exec {

// ---------------------------------------------------------------------------------------------
// Traces.

std::vector<Request> make_trace(const ArrivalSpec& spec, const std::vector<std::string>& models) {
  std::vector<Request> out;
  if (spec.kind == "file") {
    // Read whole and bounded like every input file (/dev/zero or an endless pipe ends with an error).
    std::istringstream in(read_input_file(spec.file, "trace"));
    std::string line;
    int lineno = 0;
    while (std::getline(in, line)) {
      ++lineno;
      const size_t hash = line.find('#');
      if (hash != std::string::npos) line.resize(hash);
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const size_t comma = line.find(',');
      HIOS_CHECK(comma != std::string::npos, "%s:%d: expected 'time_s,model', got '%s'", spec.file.c_str(), lineno,
                 line.c_str());
      char* end = nullptr;
      const std::string t = line.substr(0, comma);
      const double at = std::strtod(t.c_str(), &end);
      HIOS_CHECK(end && *end == '\0' && std::isfinite(at) && at >= 0 && at <= 1e6,
                 "%s:%d: time '%s' is not a number of seconds from 0 to 1e6", spec.file.c_str(), lineno, t.c_str());
      std::string name = line.substr(comma + 1);
      name.erase(0, name.find_first_not_of(" \t"));
      name.erase(name.find_last_not_of(" \t\r") + 1);
      auto it = std::find(models.begin(), models.end(), name);
      HIOS_CHECK(it != models.end(), "%s:%d: model '%s' is not served", spec.file.c_str(), lineno, name.c_str());
      out.push_back(Request{0, int(it - models.begin()), at});
    }
    // An empty trace would serve nothing and report rates of 0/0.
    HIOS_CHECK(!out.empty(), "%s: no requests (expected 'time_s,model' lines)", spec.file.c_str());
  } else {
    HIOS_CHECK(spec.kind == "poisson" || spec.kind == "bursty", "--arrivals must be poisson, bursty or a trace file, not '%s'",
               spec.kind.c_str());
    HIOS_CHECK(spec.rates.size() == models.size(), "internal error: %zu rates for %zu models", spec.rates.size(),
               models.size());
    HIOS_CHECK(std::isfinite(spec.duration_s) && spec.duration_s > 0 && spec.duration_s <= 1e5,
               "--duration must be from 0 to 1e5 seconds");
    std::mt19937_64 rng(spec.seed);
    for (size_t m = 0; m < models.size(); ++m) {
      const double rate = spec.rates[m];
      HIOS_CHECK(std::isfinite(rate) && rate >= 0 && rate <= 1e6, "rate %g for model '%s' is outside 0 to 1e6 per second",
                 rate, models[m].c_str());
      if (rate == 0) continue;
      std::exponential_distribution<double> gap(rate);
      // Bursty: the Poisson clock runs only while "on"; on and off periods alternate from 0.
      double on_time = 0;
      for (;;) {
        on_time += gap(rng);
        double at = on_time;
        if (spec.kind == "bursty") {
          const double period = spec.on_s;
          HIOS_CHECK(spec.on_s > 0 && spec.off_s >= 0, "--burst on/off seconds must be positive");
          const double k = std::floor(on_time / period);
          at = k * (spec.on_s + spec.off_s) + (on_time - k * period);
        }
        if (at >= spec.duration_s) break;
        out.push_back(Request{0, int(m), at});
      }
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const Request& a, const Request& b) { return a.arrival_s < b.arrival_s; });
  for (size_t i = 0; i < out.size(); ++i) out[i].id = int64_t(i);
  return out;
}

Policy parse_policy(const std::string& s) {
  for (Policy p : {Policy::Fifo, Policy::Static, Policy::Adaptive}) {
    if (s == policy_name(p)) return p;
  }
  throw_error("--policy must be fifo, static, adaptive or all, not '%s'", s.c_str());
}

const char* policy_name(Policy p) {
  switch (p) {
    case Policy::Fifo: return "fifo";
    case Policy::Static: return "static";
    case Policy::Adaptive: return "adaptive";
  }
  return "?";
}

// ---------------------------------------------------------------------------------------------
// The launcher's decision.

void check_static_batch(const std::vector<int>& batches, int static_batch) {
  if (std::find(batches.begin(), batches.end(), static_batch) != batches.end()) return;
  std::string list;
  for (int b : batches) list += (list.empty() ? "" : ",") + std::to_string(b);
  throw_error("--static-batch %d is not one of --batches %s (static waits for a prepared batch)", static_batch,
              list.c_str());
}

BatchController::BatchController(Policy p, std::vector<int> batches, int static_batch, double static_wait_s,
                                 double budget_s, std::map<int, double> pass_s, double hold_share, bool bounded_drain)
    : p_(p),
      batches_(std::move(batches)),
      static_batch_(static_batch),
      static_wait_s_(static_wait_s),
      budget_s_(budget_s),
      hold_share_(hold_share),
      bounded_drain_(bounded_drain) {
  std::sort(batches_.begin(), batches_.end());
  batches_.erase(std::unique(batches_.begin(), batches_.end()), batches_.end());
  HIOS_CHECK(!batches_.empty() && batches_.front() == 1, "the served batch sizes must include 1");
  if (p_ == Policy::Static) check_static_batch(batches_, static_batch_);  // the others never read it
  if (p_ == Policy::Adaptive) {
    HIOS_CHECK(std::isfinite(budget_s_) && budget_s_ > 0, "the adaptive launcher needs a latency budget above 0, not %g s",
               budget_s_);
  }
  HIOS_CHECK(std::isfinite(hold_share_) && hold_share_ >= 0 && hold_share_ <= 1,
             "the adaptive hold share must be from 0 to 1, not %g", hold_share_);
  for (const auto& [b, s] : pass_s) {
    HIOS_CHECK(std::binary_search(batches_.begin(), batches_.end(), b), "a pass time for batch %d, which is not served", b);
    HIOS_CHECK(std::isfinite(s) && s >= 0, "the pass time of batch %d is %g s", b, s);
    pass_s_[b] = s;
  }
}

int BatchController::batch_for(int n) const {
  for (int b : batches_) {
    if (b >= n) return b;
  }
  return batches_.back();
}

double BatchController::predicted_s(int batch) const {
  auto it = pass_s_.find(batch);
  if (it != pass_s_.end()) return it->second;
  // Not measured: scale a measured batch in proportion, which is what a saturated device does.
  // The largest smaller one first: scaled up, a pass is predicted too long rather than too
  // short, which keeps the budget rather than risks it. Else the smallest larger one.
  auto from = pass_s_.lower_bound(batch);
  if (from != pass_s_.begin()) --from;
  // Nothing measured: nothing to keep to, so every batch fits (the controller then takes what
  // waits, as large as is prepared).
  return from == pass_s_.end() ? 0 : from->second * double(batch) / double(from->first);
}

void BatchController::observe(int batch, double pass_s) {
  if (!std::isfinite(pass_s) || pass_s < 0 || !std::binary_search(batches_.begin(), batches_.end(), batch)) return;
  auto it = pass_s_.find(batch);
  if (it == pass_s_.end()) {
    pass_s_[batch] = pass_s;
  } else {
    it->second += kEwma * (pass_s - it->second);
  }
}

int BatchController::take(int waiting, double oldest_wait_s, bool stopping, double arrival_gap_s) {
  drained_ = false;
  hold_s_ = 0;
  if (waiting <= 0) return 0;
  switch (p_) {
    case Policy::Fifo: return 1;
    case Policy::Static:
      // A full batch at once; a partial one once the oldest has waited long enough, or when no
      // more requests will come.
      if (waiting >= static_batch_) return static_batch_;
      return oldest_wait_s >= static_wait_s_ || stopping ? waiting : 0;
    case Policy::Adaptive: return adaptive_take(waiting, oldest_wait_s, stopping, arrival_gap_s);
  }
  return 0;
}

int BatchController::adaptive_take(int waiting, double oldest_wait_s, bool stopping, double arrival_gap_s) {
  // Candidates: every prepared batch up to the one that holds all that waits. A larger one
  // would only add padding rows, which take device time and answer nobody.
  const int top = batch_for(waiting);
  std::vector<int> cands;
  for (int b : batches_) {
    if (b <= top) cands.push_back(b);
  }
  // Requests answered per second by a pass of b, as a comparison without division (a pass
  // predicted at 0 s must compare too): rate(x) >= rate(y) <=> n_x * t_y >= n_y * t_x.
  auto served = [&](int b) { return double(std::min(waiting, b)); };
  auto at_least_as_fast = [&](int x, int y) { return served(x) * predicted_s(y) >= served(y) * predicted_s(x); };
  // The top candidate is padded when what waits is not itself a prepared batch. Padding is
  // kept only where it is free: where the padded pass answers requests at least as fast as the
  // next smaller, full batch. On a device with room to spare a larger batch costs little more
  // than a smaller one; on a saturated one (the CPU backend) it costs in proportion, and the
  // rest are better answered by the next pass.
  if (top > waiting && cands.size() >= 2 && !at_least_as_fast(top, cands[cands.size() - 2])) cands.pop_back();
  // Within the budget: the oldest request is answered when the pass ends, so the largest
  // batch whose pass ends in time answers the most requests without a late one.
  for (auto it = cands.rbegin(); it != cands.rend(); ++it) {
    if (oldest_wait_s + predicted_s(*it) > budget_s_) continue;
    const int n = std::min(waiting, *it);
    // The hold: only with everything that waits taken (so that one more joins this batch),
    // room for it in a prepared batch, more arrivals to come, and a gap known.
    if (n == waiting && n < batches_.back() && !stopping && arrival_gap_s > 0 && hold_share_ > 0) {
      const int now_b = batch_for(n), more_b = batch_for(n + 1);
      const double reach_s = hold_share_ * budget_s_ - predicted_s(more_b);
      // Worth it where one larger pass costs the device less than this one and a later pass of
      // the newcomer alone.
      const bool saves = predicted_s(more_b) < predicted_s(now_b) + predicted_s(1);
      if (saves && oldest_wait_s + arrival_gap_s <= reach_s) {
        hold_s_ = reach_s - oldest_wait_s;
        return 0;
      }
    }
    return n;
  }
  // Even one request alone would be late: the budget is lost for the oldest. What helps the
  // requests behind it is getting through the backlog fast, so take the batch that answers the
  // most requests per second (the smaller one on a tie: its answers come sooner)...
  // ...among those whose pass is no longer than a batch-1 pass plus the wait for the next
  // arrival. Every request in a pass waits for its end, and on a shared device a long pass
  // also slows every other model's passes, so the largest batch turns one late request into a
  // pass full of them. Passes within this bound keep up with arrivals while answering sooner.
  // Measured as a model first (scripts/serve_sim.py --budget-ms, docs/benchmarks.md, serving,
  // the bounded drain). With no gap known yet there is no bound.
  drained_ = true;
  const double bound_s = bounded_drain_ && arrival_gap_s > 0 ? predicted_s(1) + arrival_gap_s : std::numeric_limits<double>::infinity();
  int best = cands.front();
  for (int b : cands) {
    if (predicted_s(b) <= bound_s && !at_least_as_fast(best, b)) best = b;
  }
  return std::min(waiting, best);
}

}  // namespace hios::exec
