// The report of a `hios serve` run (serve.hpp): the JSON written per run, the queue record
// thinned for it, and the table row per model. Apart from the run because it only reads a
// finished ServeResult.
#include <algorithm>
#include <map>

#include "graph/error.hpp"
#include "serve/serve.hpp"

namespace hios::exec {

json serve_result_to_json(const ServeResult& r, const std::vector<std::string>& models) {
  json j;
  j["policy"] = policy_name(r.policy);
  j["offered_rps"] = r.offered_rps;
  j["wall_s"] = r.wall_s;
  j["busy_fraction"] = r.busy_fraction;
  // Where each model ran (its first replica), its replicas in this run and their devices (fifo:
  // the first only), and each device's busy share (-1: the session's default device).
  json placed = json::object();
  for (size_t m = 0; m < r.placement.size() && m < models.size(); ++m) placed[models[m]] = r.placement[m];
  j["placement"] = placed;
  json reps = json::object(), rep_devs = json::object();
  for (size_t m = 0; m < r.replica_devices.size() && m < models.size(); ++m) {
    reps[models[m]] = int(r.replica_devices[m].size());
    rep_devs[models[m]] = r.replica_devices[m];
  }
  j["replicas"] = reps;
  j["replica_devices"] = rep_devs;
  json dev_busy = json::object();
  for (const auto& [d, f] : r.device_busy) dev_busy[std::to_string(d)] = f;
  j["device_busy_fraction"] = dev_busy;
  // Where each device's workers spent the run, and the dispatcher's share (serve.hpp,
  // ServeResult::DeviceTime): what limits a device that is not busy.
  json devs = json::object();
  for (const auto& [d, t] : r.device_time) {
    devs[std::to_string(d)] = {{"workers", t.workers},
                               {"passes", t.passes},
                               {"requests", t.requests},
                               {"busy_fraction", r.device_busy.count(d) ? r.device_busy.at(d) : 0.0},
                               {"pass_fraction", t.pass_fraction},
                               {"worker_ms", {{"wait", t.wait_ms}, {"stage", t.stage_ms}, {"pass", t.pass_ms}, {"book", t.book_ms}}},
                               {"host_ms_per_request", t.host_ms_per_request}};
  }
  j["devices"] = devs;
  j["dispatch_ms_per_request"] = r.dispatch_ms_per_request;
  j["dispatch_late_p99_ms"] = r.dispatch_late_p99_ms;
  j["stopped"] = r.stopped;
  j["not_sent"] = r.not_sent;
  j["worst_verify_max_rel"] = r.worst_verify_rel;
  json stats = json::array();
  for (const ModelStats& s : r.models) {
    stats.push_back({{"model", s.name},         {"offered", s.offered},   {"answered", s.answered},
                     {"rejected", s.rejected},  {"throughput_rps", s.throughput_rps},
                     {"p50_ms", s.p50_ms},      {"p95_ms", s.p95_ms},     {"p99_ms", s.p99_ms},
                     {"mean_batch", s.mean_batch}, {"max_queue", s.max_queue}, {"drained", s.drained}});
  }
  j["models"] = stats;
  if (r.policy == Policy::Adaptive) {
    // Only the adaptive launcher keeps to the budget; fifo and static ignore it.
    j["latency_budget_ms"] = r.latency_budget_ms;
    json est = json::object();
    for (size_t m = 0; m < r.pass_ms.size() && m < models.size(); ++m) {
      json per = json::object();
      for (const auto& [b, ms] : r.pass_ms[m]) per[std::to_string(b)] = ms;
      est[models[m]] = per;
    }
    j["pass_ms_at_end"] = est;
  }
  json q = json::array();
  for (const auto& s : thin_queue_record(r.queue, kQueuePointsInJson)) {
    q.push_back({s[0], s[1] < 0 ? std::string("all") : models.at(size_t(s[1])), int(s[2])});
  }
  j["queue"] = q;
  j["queue_samples"] = int64_t(r.queue.size());
  std::map<std::string, int64_t> reasons;
  for (const RequestOutcome& o : r.requests) {
    if (!o.rejected.empty()) ++reasons[o.rejected];
  }
  j["rejections"] = reasons;
  return j;
}

std::vector<std::array<double, 3>> thin_queue_record(const std::vector<std::array<double, 3>>& samples,
                                                     size_t max_points_per_queue) {
  HIOS_CHECK(max_points_per_queue >= 2, "internal error: a queue record thinned to %zu points", max_points_per_queue);
  std::map<double, std::vector<size_t>> by_queue;  // queue id -> its samples' positions, in time order
  for (size_t i = 0; i < samples.size(); ++i) by_queue[samples[i][1]].push_back(i);
  std::vector<char> keep(samples.size(), 0);
  for (const auto& [queue, idx] : by_queue) {
    if (idx.size() <= max_points_per_queue) {
      for (size_t i : idx) keep[i] = 1;
      continue;
    }
    const double t0 = samples[idx.front()][0], t1 = samples[idx.back()][0];
    const size_t spans = max_points_per_queue / 2;
    const double width = (t1 - t0) / double(spans);
    size_t lo = idx.front(), hi = idx.front();
    size_t span = 0;
    for (size_t i : idx) {
      // Samples arrive in time order, so spans are visited in order; the last sample's span is
      // clamped to the last one (t == t1).
      size_t s = width > 0 ? std::min(spans - 1, size_t((samples[i][0] - t0) / width)) : 0;
      if (s != span) {
        keep[lo] = keep[hi] = 1;
        span = s;
        lo = hi = i;
      }
      if (samples[i][2] < samples[lo][2]) lo = i;
      if (samples[i][2] > samples[hi][2]) hi = i;
    }
    keep[lo] = keep[hi] = 1;
  }
  std::vector<std::array<double, 3>> out;
  for (size_t i = 0; i < samples.size(); ++i) {
    if (keep[i]) out.push_back(samples[i]);
  }
  return out;
}

std::string serve_result_line(const ServeResult& r) {
  std::string s;
  for (const ModelStats& m : r.models) {
    s += strprintf("%-9s %9.1f  %-14s %8lld %8lld %8lld %10.1f %9.3f %9.3f %9.3f %6.2f %6d %6.1f%%\n",
                   policy_name(r.policy), r.offered_rps, m.name.c_str(), (long long)m.offered, (long long)m.answered,
                   (long long)m.rejected, m.throughput_rps, m.p50_ms, m.p95_ms, m.p99_ms, m.mean_batch, m.max_queue,
                   100 * r.busy_fraction);
  }
  return s;
}

std::string serve_device_lines(const ServeResult& r) {
  std::string s;
  for (const auto& [d, t] : r.device_time) {
    // Each worker's loop time, by phase: with k workers the phases share k x the wall time.
    const double total = t.wait_ms + t.stage_ms + t.pass_ms + t.book_ms;
    auto share = [&](double ms) { return total > 0 ? 100 * ms / total : 0.0; };
    s += strprintf("#   device %s: busy %.1f%% (passes alone %.1f%%); %d worker(s): wait %.0f%%, stage %.0f%%, pass %.0f%%, "
                   "bookkeeping %.0f%%; host %.3f ms per request\n",
                   d < 0 ? "default" : std::to_string(d).c_str(), 100 * (r.device_busy.count(d) ? r.device_busy.at(d) : 0.0),
                   100 * t.pass_fraction, t.workers, share(t.wait_ms), share(t.stage_ms), share(t.pass_ms), share(t.book_ms),
                   t.host_ms_per_request);
  }
  s += strprintf("#   dispatcher: %.3f ms per request, sent up to %.3f ms late (p99)\n", r.dispatch_ms_per_request,
                 r.dispatch_late_p99_ms);
  return s;
}

}  // namespace hios::exec
