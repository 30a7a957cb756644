// The server of `hios serve` made ready (serve.hpp): every model checked, placed and prepared
// per replica with its arrival ring, then its pass times measured and the latency budget set.
// Apart from the runs (serve.cpp) because it happens once, before any request arrives.
#include <algorithm>
#include <chrono>
#include <cmath>

#include "executor/registry.hpp"
#include "executor/weights.hpp"
#include "graph/error.hpp"
#include "graph/json_codec.hpp"
#include "graph/stats.hpp"
#include "serve/serve_internal.hpp"

namespace hios::exec {

namespace {

size_t checked_bytes(int64_t elems, size_t elem_bytes, const std::string& model) {
  size_t out = 0;
  HIOS_CHECK(elems >= 0 && !__builtin_mul_overflow(size_t(elems), elem_bytes, &out),
             "hios serve: one input of '%s' (%lld elements) does not fit in memory", model.c_str(), (long long)elems);
  return out;
}

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// "2,4,8", or "none".
std::string batch_list(const std::vector<int>& batches) {
  std::string s;
  for (int b : batches) s += (s.empty() ? "" : ",") + std::to_string(b);
  return s.empty() ? "none" : s;
}

}  // namespace

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
    HIOS_CHECK(b >= 1 && b <= 4096, "--batches: batch size %d is outside 1 to 4096", b);
    max_batch_ = std::max(max_batch_, b);
  }
  // Batch 1 is what every model is verified, warmed and placed at, and what a lone request runs.
  HIOS_CHECK(std::count(opt.batches.begin(), opt.batches.end(), 1) == 1,
             "--batches must list batch size 1 once (every model is verified and placed at batch 1), got %s",
             batch_list(opt.batches).c_str());
  for (const std::string& name : models) {
    HIOS_CHECK(std::count(models.begin(), models.end(), name) == 1, "model '%s' is listed twice", name.c_str());
  }
  // Replicas, devices and placement, checked before anything is built (preparing takes a while).
  HIOS_CHECK(!opt.auto_replicas || opt.replicas.empty(), "--replicas: 'auto' or model=count, not both");
  HIOS_CHECK(!opt.auto_replicas || opt.placement.empty(),
             "--replicas auto places the replicas it adds; with --placement, give --replicas as model=count");
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
  std::vector<ScheduleMaker> schedules;
  for (size_t i = 0; i < models.size(); ++i) {
    auto m = std::make_unique<Model>();
    m->name = models[i];
    // The replicas' shape sets schedule the same graphs: each schedule is made once per model
    // (the batch-1 one perhaps already, for placement) and handed to every replica.
    auto kept = std::make_shared<std::map<std::string, Schedule>>();
    if (first[i]) kept->emplace(first_digest[i], *first[i]);
    schedules.push_back([make_schedule, kept](const Graph& g) {
      const std::string digest = graph_digest(g);
      auto it = kept->find(digest);
      if (it == kept->end()) it = kept->emplace(digest, make_schedule(g)).first;
      return it->second;
    });
    for (int b : opt.batches) m->key[b] = ShapeKey{b, size, size};
    models_.push_back(std::move(m));
    for (int dev : replica_devices_[i]) add_replica(i, dev, make_model, schedules[i]);
    Model& mm = *models_.back();
    Backend& be = mm.first().set->session().backend();
    const Graph& g1 = mm.first().set->graph(mm.key.at(1));
    mm.item_elems = g1.nodes[size_t(g1.input())].shape.numel();
    mm.item_bytes = checked_bytes(mm.item_elems, be.element_bytes(), mm.name);
    mm.out_item = g1.nodes[size_t(g1.output())].shape.numel();
    mm.base = mm.encode(make_input(g1, opt.set.session.seed));
  }
  if (opt.auto_replicas) add_auto_replicas(make_model, schedules);
  for (size_t i = 0; i < models_.size(); ++i) make_ring(i);
}

// One more prepared copy of a model on `device` (-1: the session's default), at every batch.
void Server::add_replica(size_t model, int device, const ModelMaker& make_model, const ScheduleMaker& schedule) {
  Model& m = *models_[model];
  std::vector<ShapeKey> keys;
  for (const auto& [b, k] : m.key) keys.push_back(k);
  auto rep = std::make_unique<Model::Replica>();
  rep->device = device;
  rep->self = make_self_comm();
  ShapeSetOptions set = opt_.set;
  if (device >= 0) set.session.device = device;
  if (std::count(opt_.high_priority.begin(), opt_.high_priority.end(), m.name)) set.session.compute_priority = "high";
  const std::string name = m.name;
  rep->set = std::make_unique<ShapeSet>([make_model, name](const ShapeKey& k) { return make_model(name, k); }, schedule,
                                        set, *rep->self);
  rep->set->prepare(keys);
  m.reps.push_back(std::move(rep));
}

// --replicas auto: every model's first replica is prepared; its batch-1 pass, measured there
// with every other model idle, decides how many more it gets and where they go.
void Server::add_auto_replicas(const ModelMaker& make_model, const std::vector<ScheduleMaker>& schedules) {
  replica_weight_ms_ = single_request_ms(kAutoReplicaPasses);
  const std::vector<int> devices = opt_.devices.empty() ? std::vector<int>{placement_.front()} : opt_.devices;
  const std::vector<int> counts = auto_replica_counts(replica_weight_ms_, int(devices.size()));
  const std::vector<std::vector<int>> placed = place_extra_replicas(replica_weight_ms_, counts, placement_, devices);
  for (size_t i = 0; i < models_.size(); ++i) {
    for (size_t k = 1; k < placed[i].size(); ++k) add_replica(i, placed[i][k], make_model, schedules[i]);
  }
  replica_devices_ = placed;
}

// What waits (queue_limit), a window taken but not yet staged per replica, each with its
// padding (one largest batch each), and room for a padded batch's padding after the next
// arrival (one more): see run(). fifo has one window at most; the ring is sized for the
// launchers with a worker per replica.
void Server::make_ring(size_t model) {
  Model& m = *models_[model];
  m.ring_slots = int64_t(opt_.queue_limit) + int64_t(m.reps.size() + 1) * int64_t(max_batch_);
  m.ring_mirror = max_batch_ - 1;
  const double ring_bytes = double(m.ring_slots + m.ring_mirror) * double(m.item_bytes);
  // A queue limit of a million at 331x331 would ask for over a terabyte, which an
  // overcommitting host grants and then kills the process for on first touch.
  HIOS_CHECK(ring_bytes <= 64.0 * (1ull << 30),
             "hios serve stages every waiting request of '%s' in host memory: %lld slots of %.2f MB is %.1f GB; "
             "lower --queue-limit",
             m.name.c_str(), (long long)(m.ring_slots + m.ring_mirror), double(m.item_bytes) / 1e6, ring_bytes / 1e9);
  m.ring = m.first().set->session().backend().alloc_host(size_t(ring_bytes));
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

}  // namespace hios::exec
