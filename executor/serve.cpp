#include "executor/serve.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "executor/runner.hpp"
#include "executor/tensor_layout.hpp"
#include "executor/weights.hpp"
#include "graph/error.hpp"
#include "graph/stats.hpp"

namespace hios::exec {

// ---------------------------------------------------------------------------------------------
// Traces.

std::vector<Request> make_trace(const ArrivalSpec& spec, const std::vector<std::string>& models) {
  std::vector<Request> out;
  if (spec.kind == "file") {
    std::ifstream in(spec.file);
    HIOS_CHECK(in.good(), "--trace: cannot open '%s'", spec.file.c_str());
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

BatchController::BatchController(Policy p, std::vector<int> batches, int static_batch, double static_wait_s)
    : p_(p), batches_(std::move(batches)), static_batch_(static_batch), static_wait_s_(static_wait_s) {
  std::sort(batches_.begin(), batches_.end());
  HIOS_CHECK(!batches_.empty() && batches_.front() == 1, "the served batch sizes must include 1");
  HIOS_CHECK(std::find(batches_.begin(), batches_.end(), static_batch_) != batches_.end(),
             "--static-batch %d is not one of the served batch sizes", static_batch_);
}

int BatchController::batch_for(int n) const {
  for (int b : batches_) {
    if (b >= n) return b;
  }
  return batches_.back();
}

int BatchController::take(int waiting, double oldest_wait_s, bool stopping) {
  if (waiting <= 0) return 0;
  switch (p_) {
    case Policy::Fifo: return 1;
    case Policy::Static:
      // A full batch at once; a partial one once the oldest has waited long enough, or when no
      // more requests will come.
      if (waiting >= static_batch_) return static_batch_;
      return oldest_wait_s >= static_wait_s_ || stopping ? waiting : 0;
    case Policy::Adaptive: return std::min(waiting, std::min(limit_, batches_.back()));
  }
  return 0;
}

void BatchController::after_take(int still_waiting) {
  if (p_ != Policy::Adaptive) return;
  if (still_waiting > 0) {
    limit_ = std::min(limit_ * 2, batches_.back());  // a backlog: larger batches serve it faster
    empties_ = 0;
  } else if (++empties_ >= 2) {
    limit_ = std::max(limit_ / 2, 1);  // keeping up: smaller batches answer sooner
    empties_ = 0;
  }
}

// ---------------------------------------------------------------------------------------------
// The server.

struct Server::Model {
  std::string name;
  std::unique_ptr<Comm> self;
  std::unique_ptr<ShapeSet> set;
  std::map<int, ShapeKey> key;        // by batch
  std::map<int, HostBuffer> staging;  // by batch: the whole input, pinned on GPU backends
  int64_t item_elems = 0;             // one image, stored
  std::vector<float> base;            // one image in the backend's layout (every request's input)
  int64_t out_item = 0;               // output elements per image
};

Server::Server(const std::vector<std::string>& models, int64_t size, const ServeOptions& opt,
               const ModelMaker& make_model, const ScheduleMaker& make_schedule)
    : names_(models), size_(size), opt_(opt) {
  HIOS_CHECK(!models.empty(), "no models to serve");
  HIOS_CHECK(opt.queue_limit >= 1 && opt.queue_limit <= 1000000, "--queue-limit must be from 1 to 1e6");
  for (const std::string& name : opt.high_priority) {
    HIOS_CHECK(std::count(models.begin(), models.end(), name) == 1, "--high-priority names '%s', which is not served",
               name.c_str());
  }
  for (const std::string& name : models) {
    HIOS_CHECK(std::count(models.begin(), models.end(), name) == 1, "model '%s' is listed twice", name.c_str());
    auto m = std::make_unique<Model>();
    m->name = name;
    m->self = make_self_comm();
    ShapeSetOptions set = opt.set;
    if (std::count(opt.high_priority.begin(), opt.high_priority.end(), name)) set.session.compute_priority = "high";
    m->set = std::make_unique<ShapeSet>([make_model, name](const ShapeKey& k) { return make_model(name, k); },
                                        make_schedule, set, *m->self);
    std::vector<ShapeKey> keys;
    for (int b : opt.batches) {
      HIOS_CHECK(b >= 1 && b <= 4096, "batch size %d is outside 1 to 4096", b);
      m->key[b] = ShapeKey{b, size, size};
      keys.push_back(m->key[b]);
    }
    m->set->prepare(keys);
    Backend& be = m->set->session().backend();
    HIOS_CHECK(be.element_bytes() == 4, "hios serve stages fp32 inputs; --math %s stores 16-bit tensors (use tf32 or fp32)",
               be.math().c_str());
    const Graph& g1 = m->set->graph(m->key.at(1));
    m->item_elems = g1.nodes[size_t(g1.input())].shape.numel();
    m->out_item = g1.nodes[size_t(g1.output())].shape.numel();
    m->base = to_layout(make_input(g1, opt.set.session.seed), g1.nodes[size_t(g1.input())].shape, parse_layout(be.layout()));
    for (int b : opt.batches) m->staging[b] = be.alloc_host(size_t(m->item_elems) * size_t(b) * sizeof(float));
    models_.push_back(std::move(m));
  }
}

Server::~Server() = default;

std::string Server::device() const { return models_.front()->set->session().backend().device_name(); }

std::vector<double> Server::single_request_ms(int passes) {
  std::vector<double> out;
  for (auto& m : models_) {
    const ShapeKey k = m->key.at(1);
    m->set->set_input(k, make_input(m->set->graph(k), opt_.set.session.seed));
    m->set->run(k);
    out.push_back(median(m->set->timed_runs(k, passes)));
  }
  return out;
}

namespace {

using Clock = std::chrono::steady_clock;

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = size_t(std::ceil(q * double(v.size()))) - 1;
  return v[std::min(i, v.size() - 1)];
}

}  // namespace

ServeResult Server::run(const std::vector<Request>& trace, Policy policy) {
  ServeResult res;
  res.policy = policy;
  res.requests.resize(trace.size());
  for (size_t i = 0; i < trace.size(); ++i) {
    HIOS_CHECK(trace[i].id == int64_t(i) && trace[i].model >= 0 && trace[i].model < int(models_.size()),
               "internal error: trace request %zu is malformed", i);
    res.requests[i].id = trace[i].id;
    res.requests[i].model = trace[i].model;
    res.requests[i].arrival_s = trace[i].arrival_s;
  }
  const size_t nq = policy == Policy::Fifo ? 1 : models_.size();
  std::vector<std::deque<int64_t>> queues(nq);
  std::mutex mu;
  std::condition_variable cv;
  bool dispatch_done = false;
  std::vector<std::pair<double, double>> busy;  // pass intervals, guarded by mu
  std::vector<std::pair<int64_t, std::vector<float>>> verify;  // request, its output (under mu)
  const auto t0 = Clock::now();
  auto now_s = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  auto stopping = [&] { return opt_.stop && opt_.stop->load(); };
  auto sample = [&](size_t q) {  // under mu
    res.queue.push_back({now_s(), double(policy == Policy::Fifo ? -1 : int(q)), double(queues[q].size())});
  };
  std::string worker_error;

  auto worker = [&](size_t q) {
    BatchController ctl(policy, opt_.batches, opt_.static_batch, opt_.static_wait_s);
    try {
      for (;;) {
        std::vector<int64_t> batch;
        {
          std::unique_lock<std::mutex> lk(mu);
          for (;;) {
            if (stopping() || !worker_error.empty()) {
              for (int64_t id : queues[q]) res.requests[size_t(id)].rejected = "server stopped while it waited";
              queues[q].clear();
              sample(q);
              return;
            }
            const int waiting = int(queues[q].size());
            const double oldest = waiting ? now_s() - trace[size_t(queues[q].front())].arrival_s : 0;
            const int n = ctl.take(waiting, oldest, dispatch_done);
            if (n > 0) {
              // fifo takes one; the others take a run of one model's requests.
              for (int i = 0; i < n; ++i) {
                batch.push_back(queues[q].front());
                queues[q].pop_front();
              }
              ctl.after_take(int(queues[q].size()));
              sample(q);
              break;
            }
            if (dispatch_done && waiting == 0) return;
            if (policy == Policy::Static && waiting > 0) {
              cv.wait_for(lk, std::chrono::duration<double>(std::max(opt_.static_wait_s - oldest, 1e-5)));
            } else {
              cv.wait(lk);
            }
          }
        }
        Model& m = *models_[size_t(trace[size_t(batch.front())].model)];
        const int b = ctl.batch_for(int(batch.size()));
        const ShapeKey key = m.key.at(b);
        float* staged = static_cast<float*>(m.staging.at(b).get());
        for (size_t i = 0; i < size_t(b); ++i) {
          float* slot = staged + int64_t(i) * m.item_elems;
          if (i >= batch.size()) {
            std::memset(slot, 0, size_t(m.item_elems) * sizeof(float));  // padding
          } else if (opt_.verify_every > 0 && batch[i] % opt_.verify_every == 0) {
            const Graph& g1 = m.set->graph(m.key.at(1));
            const std::vector<float> own = to_layout(make_input(g1, opt_.set.session.seed + 1 + uint64_t(batch[i])),
                                                     g1.nodes[size_t(g1.input())].shape,
                                                     parse_layout(m.set->session().backend().layout()));
            std::memcpy(slot, own.data(), own.size() * sizeof(float));
          } else {
            std::memcpy(slot, m.base.data(), m.base.size() * sizeof(float));
          }
        }
        const double start = now_s();
        // The caller's write: the staged batch straight into the graph's input tensor.
        const int input = m.set->graph(key).input();
        (void)m.set->input(key);
        m.set->session().backend().copy_from_host(input, staged, 0);
        m.set->session().backend().sync_stream(0);
        m.set->run(key);
        const std::vector<float> out = m.set->read_output(key);
        const double done = now_s();
        std::lock_guard<std::mutex> lk(mu);
        busy.emplace_back(start, done);
        for (size_t i = 0; i < batch.size(); ++i) {
          RequestOutcome& o = res.requests[size_t(batch[i])];
          o.start_s = start;
          o.done_s = done;
          o.batch = b;
          if (opt_.verify_every > 0 && batch[i] % opt_.verify_every == 0) {
            verify.emplace_back(batch[i], std::vector<float>(out.begin() + int64_t(i) * m.out_item,
                                                             out.begin() + int64_t(i + 1) * m.out_item));
          }
        }
      }
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lk(mu);
      if (worker_error.empty()) worker_error = e.what();
      cv.notify_all();
    }
  };

  std::vector<std::thread> workers;
  for (size_t q = 0; q < nq; ++q) workers.emplace_back(worker, q);
  size_t next = 0;
  for (; next < trace.size(); ++next) {
    // In slices, so that a stop is seen within 20 ms however far the next arrival is.
    const auto due = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(trace[next].arrival_s));
    while (!stopping() && Clock::now() < due) {
      std::this_thread::sleep_until(std::min(due, Clock::now() + std::chrono::milliseconds(20)));
    }
    if (stopping()) break;
    std::lock_guard<std::mutex> lk(mu);
    if (!worker_error.empty()) break;
    const size_t q = policy == Policy::Fifo ? 0 : size_t(trace[next].model);
    if (int(queues[q].size()) >= opt_.queue_limit) {
      res.requests[next].rejected = strprintf("queue full (%d waiting)", opt_.queue_limit);
    } else {
      queues[q].push_back(int64_t(next));
      sample(q);
    }
    cv.notify_all();
  }
  res.stopped = stopping();
  res.not_sent = int64_t(trace.size() - next);
  for (size_t i = next; i < trace.size(); ++i) res.requests[i].rejected = "not sent: the server stopped first";
  {
    std::lock_guard<std::mutex> lk(mu);
    dispatch_done = true;
  }
  cv.notify_all();
  for (std::thread& t : workers) t.join();
  HIOS_CHECK(worker_error.empty(), "hios serve: %s", worker_error.c_str());
  res.wall_s = now_s();

  // Verified requests: the same input alone, at batch 1, on the same model's set.
  for (const auto& [id, got] : verify) {
    Model& m = *models_[size_t(trace[size_t(id)].model)];
    const ShapeKey k1 = m.key.at(1);
    m.set->set_input(k1, make_input(m.set->graph(k1), opt_.set.session.seed + 1 + uint64_t(id)));
    m.set->run(k1);
    const Diff d = compare(got, m.set->read_output(k1));
    res.requests[size_t(id)].max_rel = d.max_rel;
    res.worst_verify_rel = std::max(res.worst_verify_rel, d.max_rel);
  }

  // Statistics, per model and over all.
  std::sort(busy.begin(), busy.end());
  double covered = 0, until = 0;
  for (const auto& [a, b] : busy) {
    if (b <= until) continue;
    covered += b - std::max(a, until);
    until = b;
  }
  res.busy_fraction = res.wall_s > 0 ? covered / res.wall_s : 0;
  double span = 0;
  for (const Request& r : trace) span = std::max(span, r.arrival_s);
  res.offered_rps = span > 0 ? double(trace.size()) / span : 0;
  // One row per model, then "all" (m == -1) last.
  for (int k = 0; k <= int(models_.size()); ++k) {
    const int m = k < int(models_.size()) ? k : -1;
    ModelStats st;
    st.name = m < 0 ? "all" : models_[size_t(m)]->name;
    std::vector<double> lat;
    double batches = 0;
    for (const RequestOutcome& o : res.requests) {
      if (m >= 0 && o.model != m) continue;
      ++st.offered;
      if (!o.rejected.empty()) {
        ++st.rejected;
        continue;
      }
      ++st.answered;
      lat.push_back(1e3 * (o.done_s - o.arrival_s));
      batches += o.batch;
    }
    st.throughput_rps = res.wall_s > 0 ? double(st.answered) / res.wall_s : 0;
    st.p50_ms = percentile(lat, 0.50);
    st.p95_ms = percentile(lat, 0.95);
    st.p99_ms = percentile(lat, 0.99);
    st.mean_batch = st.answered ? batches / double(st.answered) : 0;
    for (const auto& s : res.queue) {
      if (m < 0 || int(s[1]) == m || s[1] < 0) st.max_queue = std::max(st.max_queue, int(s[2]));
    }
    res.models.push_back(st);
  }
  return res;
}

json serve_result_to_json(const ServeResult& r, const std::vector<std::string>& models) {
  json j;
  j["policy"] = policy_name(r.policy);
  j["offered_rps"] = r.offered_rps;
  j["wall_s"] = r.wall_s;
  j["busy_fraction"] = r.busy_fraction;
  j["stopped"] = r.stopped;
  j["not_sent"] = r.not_sent;
  j["worst_verify_max_rel"] = r.worst_verify_rel;
  json stats = json::array();
  for (const ModelStats& s : r.models) {
    stats.push_back({{"model", s.name},         {"offered", s.offered},   {"answered", s.answered},
                     {"rejected", s.rejected},  {"throughput_rps", s.throughput_rps},
                     {"p50_ms", s.p50_ms},      {"p95_ms", s.p95_ms},     {"p99_ms", s.p99_ms},
                     {"mean_batch", s.mean_batch}, {"max_queue", s.max_queue}});
  }
  j["models"] = stats;
  json q = json::array();
  for (const auto& s : r.queue) {
    q.push_back({s[0], s[1] < 0 ? std::string("all") : models.at(size_t(s[1])), int(s[2])});
  }
  j["queue"] = q;
  std::map<std::string, int64_t> reasons;
  for (const RequestOutcome& o : r.requests) {
    if (!o.rejected.empty()) ++reasons[o.rejected];
  }
  j["rejections"] = reasons;
  return j;
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

}  // namespace hios::exec
