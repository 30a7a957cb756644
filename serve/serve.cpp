#include "serve/serve.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "executor/registry.hpp"
#include "executor/verify.hpp"
#include "executor/tensor_layout.hpp"
#include "executor/weights.hpp"
#include "graph/error.hpp"
#include "graph/json_codec.hpp"
#include "graph/stats.hpp"

namespace hios::exec {

namespace {

// Request rows as stored: the backend's layout and element type.
using Bytes = std::vector<unsigned char>;

size_t checked_bytes(int64_t elems, size_t elem_bytes, const std::string& model) {
  size_t out = 0;
  HIOS_CHECK(elems >= 0 && !__builtin_mul_overflow(size_t(elems), elem_bytes, &out),
             "hios serve: one input of '%s' (%lld elements) does not fit in memory", model.c_str(), (long long)elems);
  return out;
}

}  // namespace

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

// ---------------------------------------------------------------------------------------------
// Placement.

std::vector<int> balance_placement(const std::vector<double>& weight_ms, const std::vector<int>& devices) {
  HIOS_CHECK(!devices.empty(), "internal error: no devices to place models on");
  std::vector<size_t> order(weight_ms.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return weight_ms[a] > weight_ms[b]; });
  std::vector<double> load(devices.size(), 0);
  std::vector<int> count(devices.size(), 0);
  std::vector<int> out(weight_ms.size(), -1);
  for (size_t m : order) {
    size_t best = 0;
    for (size_t d = 1; d < devices.size(); ++d) {
      if (load[d] < load[best] || (load[d] == load[best] && count[d] < count[best])) best = d;
    }
    load[best] += weight_ms[m];
    ++count[best];
    out[m] = devices[best];
  }
  return out;
}

std::vector<std::vector<int>> balance_replicas(const std::vector<double>& weight_ms, const std::vector<int>& replicas,
                                               const std::vector<int>& devices) {
  HIOS_CHECK(replicas.size() == weight_ms.size(), "internal error: %zu replica counts for %zu models", replicas.size(),
             weight_ms.size());
  // Every replica an item of the greedy, in model order then replica order, so that its stable
  // sort breaks ties as balance_placement's does for models.
  std::vector<double> item_ms;
  for (size_t m = 0; m < weight_ms.size(); ++m) {
    HIOS_CHECK(replicas[m] >= 1, "internal error: %d replicas of model %zu", replicas[m], m);
    for (int k = 0; k < replicas[m]; ++k) item_ms.push_back(weight_ms[m] / double(replicas[m]));
  }
  const std::vector<int> item_dev = balance_placement(item_ms, devices);
  std::vector<std::vector<int>> out(weight_ms.size());
  size_t i = 0;
  for (size_t m = 0; m < weight_ms.size(); ++m) {
    for (int k = 0; k < replicas[m]; ++k) out[m].push_back(item_dev[i++]);
  }
  return out;
}

std::vector<std::pair<std::string, int>> parse_name_values(const std::string& s, const char* option, const char* value_name,
                                                           const char* value_is, int lo, int hi) {
  std::vector<std::pair<std::string, int>> out;
  size_t from = 0;
  for (;;) {
    const size_t comma = s.find(',', from);
    const std::string item = s.substr(from, comma == std::string::npos ? std::string::npos : comma - from);
    HIOS_CHECK(!item.empty(), "%s: empty item in '%s'", option, s.c_str());
    const size_t eq = item.rfind('=');
    HIOS_CHECK(eq != std::string::npos && eq > 0, "%s: expected model=%s, got '%s'", option, value_name, item.c_str());
    const std::string value = item.substr(eq + 1);
    char* end = nullptr;
    const long v = std::strtol(value.c_str(), &end, 10);
    HIOS_CHECK(!value.empty() && end && *end == '\0' && v >= lo && v <= hi, "%s: '%s' is not %s from %d to %d (in '%s')",
               option, value.c_str(), value_is, lo, hi, item.c_str());
    out.emplace_back(item.substr(0, eq), int(v));
    if (comma == std::string::npos) break;
    from = comma + 1;
  }
  return out;
}

std::vector<std::pair<std::string, int>> parse_replicas(const std::string& s) {
  return parse_name_values(s, "--replicas", "count", "a replica count", 1, kMaxReplicas);
}

std::vector<int> replica_counts(const std::vector<std::string>& models,
                                const std::vector<std::pair<std::string, int>>& replicas) {
  std::vector<int> out(models.size(), 0);
  for (const auto& [name, k] : replicas) {
    auto it = std::find(models.begin(), models.end(), name);
    HIOS_CHECK(it != models.end(), "--replicas: model '%s' is not served", name.c_str());
    const size_t m = size_t(it - models.begin());
    HIOS_CHECK(out[m] == 0, "--replicas: model '%s' is given twice", name.c_str());
    HIOS_CHECK(k >= 1 && k <= kMaxReplicas, "--replicas: %d replicas of '%s' is outside 1 to %d", k, name.c_str(),
               kMaxReplicas);
    out[m] = k;
  }
  for (int& k : out) k = std::max(k, 1);
  return out;
}

void check_devices(const std::vector<int>& devices, int visible) {
  for (size_t i = 0; i < devices.size(); ++i) {
    const int d = devices[i];
    HIOS_CHECK(d >= 0 && d < 1024, "--devices: device %d is outside 0 to 1023", d);
    HIOS_CHECK(std::find(devices.begin(), devices.begin() + ptrdiff_t(i), d) == devices.begin() + ptrdiff_t(i),
               "--devices: device %d is listed twice", d);
    HIOS_CHECK(visible < 0 || d < visible, "--devices: device %d was asked for, but this process sees %d device(s)", d,
               visible);
  }
}

std::vector<std::vector<int>> explicit_placement(const std::vector<std::string>& models,
                                                 const std::vector<int>& devices,
                                                 const std::vector<std::pair<std::string, int>>& placement,
                                                 const std::vector<int>& replicas) {
  HIOS_CHECK(!devices.empty(), "--placement needs --devices (the devices it places models on)");
  HIOS_CHECK(replicas.empty() || replicas.size() == models.size(), "internal error: %zu replica counts for %zu models",
             replicas.size(), models.size());
  auto count = [&](size_t m) { return replicas.empty() ? 1 : replicas[m]; };
  std::vector<std::vector<int>> out(models.size());
  for (const auto& [name, dev] : placement) {
    auto it = std::find(models.begin(), models.end(), name);
    HIOS_CHECK(it != models.end(), "--placement: model '%s' is not served", name.c_str());
    const size_t m = size_t(it - models.begin());
    if (count(m) == 1) {
      HIOS_CHECK(out[m].empty(), "--placement: model '%s' is placed twice", name.c_str());
    } else {
      HIOS_CHECK(int(out[m].size()) < count(m),
                 "--placement: model '%s' is placed more than %d times, once per replica", name.c_str(), count(m));
    }
    HIOS_CHECK(std::count(devices.begin(), devices.end(), dev) == 1, "--placement: device %d of '%s' is not in --devices",
               dev, name.c_str());
    out[m].push_back(dev);
  }
  for (size_t m = 0; m < models.size(); ++m) {
    HIOS_CHECK(!out[m].empty(), "--placement: model '%s' is not placed (every served model must be)",
               models[m].c_str());
    HIOS_CHECK(int(out[m].size()) == count(m),
               "--placement: model '%s' is placed %zu time(s) but has %d replicas (--replicas): "
               "name it once per replica",
               models[m].c_str(), out[m].size(), count(m));
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// The server.

struct Server::Model {
  // One prepared copy of the model: a worker of the static and adaptive launchers each (fifo
  // uses the first). Its own shape set, so its own arena, CUDA Graphs and weights (ShapeSet has
  // no way to share weights between sets; every replica makes the same weights from the same
  // seed, so their answers agree).
  struct Replica {
    int device = -1;  // placed on; -1: the session's default
    std::unique_ptr<Comm> self;
    std::unique_ptr<ShapeSet> set;

    // Makes this replica's device the calling thread's current one (Backend::make_current): a
    // worker for a replica on device 1, or fifo's worker moving between models on two devices.
    void bind() { set->session().backend().make_current(); }

    // A worker's two steps, shared by the start-up measurement so that the seeds time what the
    // launcher runs. Staging: the rows into the batch's input tensor, where the graph reads it;
    // the host waits for the copy, because its rows are reused once it returns, and run() needs
    // the write complete (ShapeSet::input).
    void stage(const ShapeKey& k, const void* rows) {
      Backend& be = set->session().backend();
      (void)set->input(k);  // makes k current, so that its input tensor is the one written
      be.copy_from_host(set->graph(k).input(), rows, 0);
      be.sync_stream(0);
    }
    std::vector<float> answer(const ShapeKey& k) {
      set->run(k);
      return set->read_output(k);
    }
  };

  std::string name;
  std::vector<std::unique_ptr<Replica>> reps;  // at least one
  std::map<int, ShapeKey> key;  // by batch
  int64_t item_elems = 0;       // one image's elements
  size_t item_bytes = 0;        // one image, stored (in the backend's element type)
  Bytes base;                   // one image as stored (every unverified request's input)
  int64_t out_item = 0;         // output elements per image
  // The arrival ring (see the header), shared by the replicas: ring_slots slots of one image
  // each, then ring_mirror more that repeat the first ones, so that a window of up to the
  // largest batch starting at any slot is one contiguous block, also where it wraps. Pinned on
  // GPU backends, so the worker's copy to the device is a DMA the host does not stage.
  HostBuffer ring;
  int64_t ring_slots = 0, ring_mirror = 0;

  Replica& first() { return *reps.front(); }
  unsigned char* slot(int64_t physical) { return static_cast<unsigned char*>(ring.get()) + size_t(physical) * item_bytes; }
  // Slot `pos` (a position in arrival order) of the ring, and its mirror, from `src` or zeros.
  void put(int64_t pos, const unsigned char* src) {
    const int64_t i = pos % ring_slots;
    for (unsigned char* dst : {slot(i), i < ring_mirror ? slot(ring_slots + i) : nullptr}) {
      if (dst && src) std::memcpy(dst, src, item_bytes);
      if (dst && !src) std::memset(dst, 0, item_bytes);
    }
  }
  const unsigned char* window(int64_t pos) { return slot(pos % ring_slots); }
  // One image's NCHW fp32 values as the ring stores them: the backend's layout and element type
  // (16-bit under --math bf16/fp16, rounded as the backend rounds its own uploads).
  Bytes encode(const std::vector<float>& nchw) {
    Backend& be = first().set->session().backend();
    const Graph& g1 = first().set->graph(key.at(1));
    const std::vector<float> stored = to_layout(nchw, g1.nodes[size_t(g1.input())].shape, parse_layout(be.layout()));
    Bytes out(item_bytes);
    be.encode_host(stored.data(), stored.size(), out.data());
    return out;
  }
};

Server::Server(const std::vector<std::string>& models, int64_t size, const ServeOptions& opt,
               const ModelMaker& make_model, const ScheduleMaker& make_schedule)
    : names_(models), size_(size), opt_(opt) {
  HIOS_CHECK(!models.empty(), "no models to serve");
  HIOS_CHECK(opt.queue_limit >= 1 && opt.queue_limit <= 1000000, "--queue-limit must be from 1 to 1e6");
  if (opt.latency_budget_ms != 0) set_latency_budget_ms(opt.latency_budget_ms);
  for (const std::string& name : opt.high_priority) {
    HIOS_CHECK(std::count(models.begin(), models.end(), name) == 1, "--high-priority names '%s', which is not served",
               name.c_str());
  }
  for (int b : opt.batches) {
    HIOS_CHECK(b >= 1 && b <= 4096, "batch size %d is outside 1 to 4096", b);
    max_batch_ = std::max(max_batch_, b);
  }
  for (const std::string& name : models) {
    HIOS_CHECK(std::count(models.begin(), models.end(), name) == 1, "model '%s' is listed twice", name.c_str());
  }
  // Replicas, devices and placement, checked before anything is built (preparing takes a while).
  const std::vector<int> reps = replica_counts(models, opt.replicas);
  const BackendEntry& entry = find_backend(opt.set.session.backend);
  check_devices(opt.devices, entry.device_count && !opt.devices.empty() ? entry.device_count() : -1);
  // Automatic placement weighs each model by its batch-1 schedule, which the shape set would
  // make again: it is kept and handed back for the same graph (by digest), so nothing is
  // scheduled twice.
  std::vector<std::shared_ptr<const Schedule>> first(models.size());
  std::vector<std::string> first_digest(models.size());
  if (!opt.placement.empty()) {
    replica_devices_ = explicit_placement(models, opt.devices, opt.placement, reps);
  } else if (opt.devices.size() > 1) {
    for (size_t i = 0; i < models.size(); ++i) {
      const Graph g = make_model(models[i], ShapeKey{1, size, size});
      first_digest[i] = graph_digest(g);
      first[i] = std::make_shared<const Schedule>(make_schedule(g));
      weight_ms_.push_back(first[i]->meta.predicted_ms);
    }
    replica_devices_ = balance_replicas(weight_ms_, reps, opt.devices);
  } else {
    for (size_t i = 0; i < models.size(); ++i) {
      replica_devices_.emplace_back(size_t(reps[i]), opt.devices.empty() ? -1 : opt.devices.front());
    }
  }
  for (const std::vector<int>& devs : replica_devices_) placement_.push_back(devs.front());
  for (size_t i = 0; i < models.size(); ++i) {
    const std::string& name = models[i];
    auto m = std::make_unique<Model>();
    m->name = name;
    // The replicas' shape sets schedule the same graphs: each schedule is made once per model
    // (the batch-1 one perhaps already, for placement) and handed to every replica.
    auto kept = std::make_shared<std::map<std::string, Schedule>>();
    if (first[i]) kept->emplace(first_digest[i], *first[i]);
    const ScheduleMaker schedule = [make_schedule, kept](const Graph& g) {
      const std::string digest = graph_digest(g);
      auto it = kept->find(digest);
      if (it == kept->end()) it = kept->emplace(digest, make_schedule(g)).first;
      return it->second;
    };
    std::vector<ShapeKey> keys;
    for (int b : opt.batches) {
      m->key[b] = ShapeKey{b, size, size};
      keys.push_back(m->key[b]);
    }
    for (int dev : replica_devices_[i]) {
      auto rep = std::make_unique<Model::Replica>();
      rep->device = dev;
      rep->self = make_self_comm();
      ShapeSetOptions set = opt.set;
      if (dev >= 0) set.session.device = dev;
      if (std::count(opt.high_priority.begin(), opt.high_priority.end(), name)) set.session.compute_priority = "high";
      rep->set = std::make_unique<ShapeSet>([make_model, name](const ShapeKey& k) { return make_model(name, k); },
                                            schedule, set, *rep->self);
      rep->set->prepare(keys);
      m->reps.push_back(std::move(rep));
    }
    Backend& be = m->first().set->session().backend();
    const Graph& g1 = m->first().set->graph(m->key.at(1));
    m->item_elems = g1.nodes[size_t(g1.input())].shape.numel();
    m->item_bytes = checked_bytes(m->item_elems, be.element_bytes(), name);
    m->out_item = g1.nodes[size_t(g1.output())].shape.numel();
    m->base = m->encode(make_input(g1, opt.set.session.seed));
    // What waits (queue_limit), a window taken but not yet staged per replica, each with its
    // padding (one largest batch each), and the zeroed rows kept ahead of the next arrival for
    // padding (one more): see run(). fifo has one window at most; the ring is sized for the
    // launchers with a worker per replica.
    m->ring_slots = int64_t(opt.queue_limit) + int64_t(reps[i] + 1) * int64_t(max_batch_);
    m->ring_mirror = max_batch_ - 1;
    const double ring_bytes = double(m->ring_slots + m->ring_mirror) * double(m->item_bytes);
    // A queue limit of a million at 331x331 would ask for over a terabyte, which an
    // overcommitting host grants and then kills the process for on first touch.
    HIOS_CHECK(ring_bytes <= 64.0 * (1ull << 30),
               "hios serve stages every waiting request of '%s' in host memory: %lld slots of %.2f MB is %.1f GB; "
               "lower --queue-limit",
               name.c_str(), (long long)(m->ring_slots + m->ring_mirror), double(m->item_bytes) / 1e6, ring_bytes / 1e9);
    m->ring = be.alloc_host(size_t(ring_bytes));
    models_.push_back(std::move(m));
  }
}

Server::~Server() = default;

std::string Server::math() const { return models_.front()->first().set->session().backend().math(); }

std::string Server::device() const {
  if (opt_.devices.empty()) return models_.front()->first().set->session().backend().device_name();
  std::string out;
  for (int d : opt_.devices) {
    const Model::Replica* on = nullptr;
    for (const auto& m : models_) {
      for (const auto& r : m->reps) {
        if (!on && r->device == d) on = r.get();
      }
    }
    if (!on) continue;
    out += strprintf("%s%d: %s", out.empty() ? "" : ", ", d, on->set->session().backend().device_name().c_str());
  }
  return out;
}

std::vector<double> Server::single_request_ms(int passes) {
  std::vector<double> out;
  for (auto& m : models_) {
    Model::Replica& r = m->first();
    r.bind();
    const ShapeKey k = m->key.at(1);
    r.set->set_input(k, make_input(r.set->graph(k), opt_.set.session.seed));
    r.set->run(k);
    out.push_back(median(r.set->timed_runs(k, passes)));
  }
  return out;
}

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = size_t(std::ceil(q * double(v.size()))) - 1;
  return v[std::min(i, v.size() - 1)];
}

}  // namespace

const std::vector<std::map<int, double>>& Server::batch_pass_ms() {
  if (!pass_ms_.empty()) return pass_ms_;
  // Few: the seeds only start the estimates, which every pass of a run then refines.
  constexpr int kPasses = 3;
  for (auto& m : models_) {
    // On the first replica: the others are the same shape sets on the same kind of device.
    Model::Replica& r = m->first();
    r.bind();
    for (int64_t i = 0; i < max_batch_; ++i) m->put(i, m->base.data());
    std::map<int, double> per;
    for (const auto& [b, key] : m->key) {
      std::vector<double> t;
      for (int i = 0; i <= kPasses; ++i) {
        const auto t0 = Clock::now();
        r.stage(key, m->window(0));
        (void)r.answer(key);
        if (i > 0) t.push_back(ms_since(t0));  // the first pass switches to this batch's bucket
      }
      per[b] = median(t);
    }
    pass_ms_.push_back(per);
  }
  return pass_ms_;
}

double Server::default_latency_budget_ms() {
  double slowest = 0;
  for (const auto& per : batch_pass_ms()) slowest = std::max(slowest, per.at(1));
  // A pass that rounds to 0 ms (a tiny model on a fast host) still needs a budget above 0.
  return std::min(std::max(kDefaultBudgetPasses * slowest, 1e-3), 60000.0);
}

void Server::set_latency_budget_ms(double ms) {
  HIOS_CHECK(std::isfinite(ms) && ms > 0 && ms <= 60000, "--latency-budget-ms must be above 0 and at most 60000, not %g",
             ms);
  opt_.latency_budget_ms = ms;
}

double Server::latency_budget_ms() {
  return opt_.latency_budget_ms > 0 ? opt_.latency_budget_ms : default_latency_budget_ms();
}

// One run of the server over a trace: the state its dispatcher (the calling thread) and its
// workers (one per queue and replica) share, and the run's phases as methods, in order:
// prepare (in the constructor), start_workers, dispatch, finish, verify_answers, summarise.
class Server::Run {
 public:
  Run(Server& s, const std::vector<Request>& trace, Policy policy) : s_(s), trace_(trace), policy_(policy) {
    ServeResult& res = res_;
    res.policy = policy;
    // Only the adaptive launcher needs the budget (and, for its default, the measured passes).
    res.latency_budget_ms = policy == Policy::Adaptive ? s_.latency_budget_ms() : s_.opt_.latency_budget_ms;
    res.requests.resize(trace.size());
    for (size_t i = 0; i < trace.size(); ++i) {
      HIOS_CHECK(trace[i].id == int64_t(i) && trace[i].model >= 0 && trace[i].model < int(s_.models_.size()),
                 "internal error: trace request %zu is malformed", i);
      res.requests[i].id = trace[i].id;
      res.requests[i].model = trace[i].model;
      res.requests[i].arrival_s = trace[i].arrival_s;
    }
    seeds_ = policy == Policy::Adaptive ? s_.batch_pass_ms() : s_.pass_ms_;
    if (policy == Policy::Adaptive) res.pass_ms.resize(s_.models_.size());
    make_own_inputs();
    rings_.resize(s_.models_.size());
    for (size_t mi = 0; mi < s_.models_.size(); ++mi) {
      Model& m = *s_.models_[mi];
      std::memset(m.ring.get(), 0, size_t(m.ring_slots + m.ring_mirror) * m.item_bytes);
      rings_[mi].zero.assign(size_t(m.ring_slots), 1);
    }
    slot_of_.assign(trace.size(), -1);
    arrival_gap_s_.assign(s_.models_.size(), 0);
    last_arrival_s_.assign(s_.models_.size(), -1);
    nq_ = policy == Policy::Fifo ? 1 : s_.models_.size();
    // The replicas each run uses: fifo is one worker, on every model's first replica.
    res.replica_devices.resize(s_.models_.size());
    for (size_t mi = 0; mi < s_.models_.size(); ++mi) {
      for (const auto& r : s_.models_[mi]->reps) {
        res.replica_devices[mi].push_back(r->device);
        if (policy == Policy::Fifo) break;
      }
    }
    queues_.resize(nq_);
  }

  // One worker per queue and replica (fifo: one, on every model's first replica).
  void start_workers() {
    t0_ = Clock::now();
    for (size_t q = 0; q < nq_; ++q) {
      const size_t k = policy_ == Policy::Fifo ? 1 : s_.models_[q]->reps.size();
      for (size_t rep = 0; rep < k; ++rep) workers_.emplace_back(&Run::worker, this, q, rep);
    }
  }

  // Sends the trace's requests at their arrival times (the calling thread); returns how many
  // were sent before a stop. An internal error stops and joins the workers, then throws.
  size_t dispatch() {
    ServeResult& res = res_;
    const std::vector<Request>& trace = trace_;
    const Policy policy = policy_;
    size_t next = 0;
    try {
      for (; next < trace.size(); ++next) {
        // In slices, so that a stop is seen within 20 ms however far the next arrival is.
        const auto due = t0_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(trace[next].arrival_s));
        while (!stopping() && Clock::now() < due) {
          std::this_thread::sleep_until(std::min(due, Clock::now() + std::chrono::milliseconds(20)));
        }
        if (stopping()) break;
        const size_t mi = size_t(trace[next].model);
        Model& m = *s_.models_[mi];
        RingState& r = rings_[mi];
        const size_t q = policy == Policy::Fifo ? 0 : mi;
        int64_t pos = 0;
        {
          std::lock_guard<std::mutex> lk(mu_);
          if (!worker_error_.empty()) break;
          if (int(queues_[q].size()) >= s_.opt_.queue_limit) {
            res.requests[next].rejected = strprintf("queue full (%d waiting)", s_.opt_.queue_limit);
            continue;
          }
          // At most queue_limit - 1 wait (or the queue would be full), and at most one window per
          // replica is taken and not yet staged, each up to the largest batch with its padding:
          // with ring_slots = queue_limit + (replicas + 1) x the largest batch, the slot and the
          // zeroed rows after it are free.
          HIOS_CHECK(r.next + s_.max_batch_ <= r.head + m.ring_slots, "internal error: the arrival ring of '%s' is full",
                     m.name.c_str());
          pos = r.next++;
          r.staging = true;
        }
        // The copies run outside the lock, so that workers take and release batches meanwhile;
        // none of them reads these slots until the request is queued.
        auto mine = own_.find(int64_t(next));
        m.put(pos, mine != own_.end() ? mine->second.data() : m.base.data());
        r.zero[size_t(pos % m.ring_slots)] = 0;
        // Padding never exceeds the largest batch less 2 rows (one request runs at batch 1), so
        // zeroed rows up to a largest batch after the newest request cover any padded batch.
        for (int64_t p = pos + 1; p < pos + s_.max_batch_; ++p) {
          if (!r.zero[size_t(p % m.ring_slots)]) {
            m.put(p, nullptr);
            r.zero[size_t(p % m.ring_slots)] = 1;
          }
        }
        {
          std::lock_guard<std::mutex> lk(mu_);
          slot_of_[next] = pos;
          r.staging = false;
          queues_[q].push_back(int64_t(next));
          // Weighted as the pass estimates are: a change of rate shows within a few arrivals.
          const double t = now_s();
          if (last_arrival_s_[mi] >= 0) {
            const double gap = t - last_arrival_s_[mi];
            arrival_gap_s_[mi] = arrival_gap_s_[mi] > 0 ? arrival_gap_s_[mi] + BatchController::kEwma * (gap - arrival_gap_s_[mi]) : gap;
          }
          last_arrival_s_[mi] = t;
          sample(q);
        }
        cv_.notify_all();
      }
    } catch (...) {
      // An internal error in the dispatcher: the workers must still be stopped and joined.
      {
        std::lock_guard<std::mutex> lk(mu_);
        if (worker_error_.empty()) worker_error_ = "the dispatcher failed";
      }
      cv_.notify_all();
      for (std::thread& t : workers_) t.join();
      throw;
    }
    return next;
  }

  // Marks what was never sent, lets the workers drain their queues, and joins them.
  void finish(size_t next) {
    ServeResult& res = res_;
    res.stopped = stopping();
    res.not_sent = int64_t(trace_.size() - next);
    for (size_t i = next; i < trace_.size(); ++i) res.requests[i].rejected = "not sent: the server stopped first";
    {
      std::lock_guard<std::mutex> lk(mu_);
      dispatch_done_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : workers_) t.join();
    HIOS_CHECK(worker_error_.empty(), "hios serve: %s", worker_error_.c_str());
    res.wall_s = now_s();
  }

  void verify_answers() {
    ServeResult& res = res_;
    const std::vector<Request>& trace = trace_;
    std::vector<std::pair<int64_t, std::vector<float>>>& verify = verify_;
    // Verified requests: the same input alone, at batch 1, on the same model's set.
    for (const auto& [id, got] : verify) {
      // On the model's first replica, whichever ran it: a replica whose weights differed would show.
      Model& m = *s_.models_[size_t(trace[size_t(id)].model)];
      Model::Replica& r = m.first();
      r.bind();
      const ShapeKey k1 = m.key.at(1);
      r.set->set_input(k1, make_input(r.set->graph(k1), s_.opt_.set.session.seed + 1 + uint64_t(id)));
      r.set->run(k1);
      const Diff d = compare(got, r.set->read_output(k1));
      res.requests[size_t(id)].max_rel = d.max_rel;
      res.worst_verify_rel = std::max(res.worst_verify_rel, d.max_rel);
    }
  }

  ServeResult summarise() {
    ServeResult& res = res_;
    const std::vector<Request>& trace = trace_;
    std::map<int, std::vector<std::pair<double, double>>>& busy = busy_;
    // Statistics, per model and over all.
    // The busy share is the union of pass intervals: over every device (some device busy), and
    // per device.
    auto covered_s = [](std::vector<std::pair<double, double>> iv) {
      std::sort(iv.begin(), iv.end());
      double covered = 0, until = 0;
      for (const auto& [a, b] : iv) {
        if (b <= until) continue;
        covered += b - std::max(a, until);
        until = b;
      }
      return covered;
    };
    std::vector<std::pair<double, double>> any;
    // Every device a replica is placed on is listed (fifo leaves some idle), and every replica's
    // passes count on its device.
    for (const std::vector<int>& devs : s_.replica_devices_) {
      for (int d : devs) res.device_busy[d] = 0;
    }
    for (const auto& [d, iv] : busy) {
      any.insert(any.end(), iv.begin(), iv.end());
      res.device_busy[d] = res.wall_s > 0 ? covered_s(iv) / res.wall_s : 0;
    }
    res.busy_fraction = res.wall_s > 0 ? covered_s(any) / res.wall_s : 0;
    res.placement = s_.placement_;
    double span = 0;
    for (const Request& r : trace) span = std::max(span, r.arrival_s);
    res.offered_rps = span > 0 ? double(trace.size()) / span : 0;
    // One row per model, then "all" (m == -1) last.
    for (int k = 0; k <= int(s_.models_.size()); ++k) {
      const int m = k < int(s_.models_.size()) ? k : -1;
      ModelStats st;
      st.name = m < 0 ? "all" : s_.models_[size_t(m)]->name;
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
        st.drained += o.drained;
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
    return std::move(res_);
  }

 private:
  // Arrival staging, per model. Slots are handed out in arrival order at positions head..next
  // (counted from the run's start; the slot is position % ring_slots), and a model's requests
  // are taken in arrival order, so a batch is the window of positions [s, s + batch): its
  // requests, then its padding rows. A padded batch takes everything waiting (BatchController
  // never pads otherwise), so the rows after it are free: they are kept zero ahead of `next` by
  // the dispatcher, and the worker reserves them by moving `next` past them.
  //
  // Several replicas of a model take from its one queue, so several windows may be taken and
  // not yet staged at once. They are consecutive, in arrival order (each starts where the last
  // taken one ended, `taken`), and a replica may finish staging a later window before another
  // stages an earlier one. A slot returns to the ring only when every window up to it has been
  // staged: `head` is the start of the oldest unstaged window, or `taken` when none is
  // outstanding. `zero` (which slots hold zeros) is the dispatcher's alone; the rest is under mu_.
  struct RingState {
    int64_t head = 0, taken = 0, next = 0;
    bool staging = false;  // the dispatcher is writing at or after `next`
    std::deque<std::pair<int64_t, bool>> windows;  // taken, oldest first: (start, staged)
    std::vector<char> zero;
  };

  // Verified requests get inputs of their own. Made before the clock starts: a random image
  // costs milliseconds, which in the dispatcher would delay every request behind it.
  void make_own_inputs() {
    const std::vector<Request>& trace = trace_;
    std::map<int64_t, Bytes>& own = own_;
    if (s_.opt_.verify_every > 0) {
      double bytes = 0;
      for (const Request& r : trace) {
        if (r.id % s_.opt_.verify_every == 0) bytes += double(s_.models_[size_t(r.model)]->item_bytes);
      }
      HIOS_CHECK(bytes <= 8.0 * (1ull << 30),
                 "--verify-every %d would keep %.1f GB of inputs of their own for this trace; raise it", s_.opt_.verify_every,
                 bytes / 1e9);
      for (const Request& r : trace) {
        if (r.id % s_.opt_.verify_every != 0) continue;
        Model& m = *s_.models_[size_t(r.model)];
        own[r.id] = m.encode(make_input(m.first().set->graph(m.key.at(1)), s_.opt_.set.session.seed + 1 + uint64_t(r.id)));
      }
    }
  }

  double now_s() const { return std::chrono::duration<double>(Clock::now() - t0_).count(); }
  bool stopping() const { return s_.opt_.stop && s_.opt_.stop->load(); }
  void sample(size_t q) {  // under mu_
    res_.queue.push_back({now_s(), double(policy_ == Policy::Fifo ? -1 : int(q)), double(queues_[q].size())});
  }

  // One worker's loop over its queue; returns when the queue is done or the run stops. `rep`:
  // the replica it runs its batches on (fifo: 0, of whichever model the request is for).
  void serve_queue(size_t q, size_t rep, BatchController& ctl) {
    ServeResult& res = res_;
    const std::vector<Request>& trace = trace_;
    const Policy policy = policy_;
    bool bound = false;
    int bound_device = -1;  // the device this thread last made current (see Replica::bind)
    for (;;) {
      std::vector<int64_t> batch;
      size_t mi = 0;
      int64_t first = 0;
      int b = 0;
      bool drained = false;
      double start = 0;
      {
        std::unique_lock<std::mutex> lk(mu_);
        for (;;) {
          if (stopping() || !worker_error_.empty()) {
            for (int64_t id : queues_[q]) res.requests[size_t(id)].rejected = "server stopped while it waited";
            queues_[q].clear();
            sample(q);
            return;
          }
          const int waiting = int(queues_[q].size());
          const double oldest = waiting ? now_s() - trace[size_t(queues_[q].front())].arrival_s : 0;
          const int n = ctl.take(waiting, oldest, dispatch_done_,
                                 waiting ? arrival_gap_s_[size_t(trace[size_t(queues_[q].front())].model)] : 0);
          if (n > 0) {
            mi = size_t(trace[size_t(queues_[q].front())].model);
            b = ctl.batch_for(n);
            RingState& r = rings_[mi];
            // Padding rows are the slots after the last waiting request, and the dispatcher is
            // writing one of them now: it is a request arriving this instant, so wait for it
            // (and perhaps take it too) rather than pad over it.
            if (b > n && r.staging) {
              cv_.wait(lk);
              continue;
            }
            drained = ctl.drained();
            // fifo takes one; the others take a run of one model's requests.
            for (int i = 0; i < n; ++i) {
              batch.push_back(queues_[q].front());
              queues_[q].pop_front();
            }
            first = slot_of_[size_t(batch.front())];
            for (int i = 0; i < n; ++i) {
              HIOS_CHECK(slot_of_[size_t(batch[size_t(i)])] == first + i && trace[size_t(batch[size_t(i)])].model == int(mi),
                         "internal error: request %lld is not staged after the one before it",
                         (long long)batch[size_t(i)]);
            }
            // Windows are taken in arrival order, each where the last one (padding included)
            // ended, and at most one per worker is outstanding.
            HIOS_CHECK(first == r.taken && r.head <= r.taken,
                       "internal error: '%s' staged slots are taken out of order", s_.models_[mi]->name.c_str());
            if (b > n) {
              HIOS_CHECK(queues_[q].empty() && r.next == first + n,
                         "internal error: a padded batch of '%s' left requests behind", s_.models_[mi]->name.c_str());
              r.next = first + b;
            }
            r.windows.emplace_back(first, false);
            r.taken = first + b;
            HIOS_CHECK(r.windows.size() <= s_.models_[mi]->reps.size() && r.taken <= r.next,
                       "internal error: '%s' has %zu windows taken and not staged", s_.models_[mi]->name.c_str(),
                       r.windows.size());
            start = now_s();
            sample(q);
            break;
          }
          if (dispatch_done_ && waiting == 0) return;
          if (policy == Policy::Static && waiting > 0) {
            cv_.wait_for(lk, std::chrono::duration<double>(std::max(s_.opt_.static_wait_s - oldest, 1e-5)));
          } else if (policy == Policy::Adaptive && waiting > 0) {
            cv_.wait_for(lk, std::chrono::duration<double>(std::max(ctl.hold_s(), 1e-5)));
          } else {
            cv_.wait(lk);
          }
        }
      }
      Model& m = *s_.models_[mi];
      Model::Replica& rp = *m.reps.at(rep);
      if (!bound || bound_device != rp.device) {
        rp.bind();
        bound = true;
        bound_device = rp.device;
      }
      const ShapeKey& key = m.key.at(b);
      rp.stage(key, m.window(first));
      {
        // Staged: this window's slots return to the ring with every staged window before them.
        std::lock_guard<std::mutex> lk(mu_);
        RingState& r = rings_[mi];
        auto w = std::find(r.windows.begin(), r.windows.end(), std::make_pair(first, false));
        HIOS_CHECK(w != r.windows.end(), "internal error: a staged window of '%s' was not taken", m.name.c_str());
        w->second = true;
        while (!r.windows.empty() && r.windows.front().second) r.windows.pop_front();
        r.head = r.windows.empty() ? r.taken : r.windows.front().first;
      }
      const std::vector<float> out = rp.answer(key);
      const double done = now_s();
      ctl.observe(b, done - start);
      std::lock_guard<std::mutex> lk(mu_);
      busy_[rp.device].emplace_back(start, done);
      for (size_t i = 0; i < batch.size(); ++i) {
        RequestOutcome& o = res.requests[size_t(batch[i])];
        o.start_s = start;
        o.done_s = done;
        o.batch = b;
        o.replica = int(rep);
        o.drained = drained;
        if (own_.count(batch[i])) {
          verify_.emplace_back(batch[i], std::vector<float>(out.begin() + int64_t(i) * m.out_item,
                                                           out.begin() + int64_t(i + 1) * m.out_item));
        }
      }
    }
  }

  void worker(size_t q, size_t rep) {
    ServeResult& res = res_;
    const Policy policy = policy_;
    std::map<int, double> seed_s;
    if (policy == Policy::Adaptive) {
      for (const auto& [b, ms] : seeds_[q]) seed_s[b] = ms / 1e3;
    }
    try {
      // Each replica has a launcher of its own: its passes are measured on its own device. Made
      // here, inside the try, so that a bad setting is this run's error and not a thread's
      // uncaught exception.
      BatchController ctl(policy, s_.opt_.batches, s_.opt_.static_batch, s_.opt_.static_wait_s, res.latency_budget_ms / 1e3,
                          seed_s, s_.opt_.hold_share, s_.opt_.bounded_drain);
      serve_queue(q, rep, ctl);
      if (policy == Policy::Adaptive) {
        std::lock_guard<std::mutex> lk(mu_);
        const double k = double(s_.models_[q]->reps.size());
        for (int b : s_.opt_.batches) res.pass_ms[q][b] += 1e3 * ctl.predicted_s(b) / k;
      }
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lk(mu_);
      if (worker_error_.empty()) worker_error_ = e.what();
      cv_.notify_all();
    }
  }

  Server& s_;
  const std::vector<Request>& trace_;
  const Policy policy_;
  ServeResult res_;
  std::vector<std::map<int, double>> seeds_;
  std::map<int64_t, Bytes> own_;  // verified requests' own inputs
  std::vector<RingState> rings_;
  std::vector<int64_t> slot_of_;  // position in its model's ring (under mu_)
  // Each model's recent mean gap between arrivals (the adaptive hold's estimate of when the next
  // one comes; 0 until two have come), and its last arrival; under mu_.
  std::vector<double> arrival_gap_s_, last_arrival_s_;
  size_t nq_ = 1;
  std::vector<std::deque<int64_t>> queues_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool dispatch_done_ = false;
  std::map<int, std::vector<std::pair<double, double>>> busy_;  // pass intervals by device, under mu_
  std::vector<std::pair<int64_t, std::vector<float>>> verify_;   // request, its output (under mu_)
  std::string worker_error_;
  Clock::time_point t0_ = Clock::now();
  std::vector<std::thread> workers_;
};

ServeResult Server::run(const std::vector<Request>& trace, Policy policy) {
  Run run(*this, trace, policy);
  run.start_workers();
  run.finish(run.dispatch());
  run.verify_answers();
  return run.summarise();
}

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

}  // namespace hios::exec
