// A run of `hios serve` over a trace: the dispatcher that stages and queues each request, the
// workers that take batches and run them on their replica's device, and the summary. The
// other parts of the server live in batching.cpp (traces, the batching decision),
// placement.cpp, server_setup.cpp (preparing the models) and report.cpp (the JSON and the
// table).
#include "serve/serve.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "executor/verify.hpp"
#include "executor/weights.hpp"
#include "graph/error.hpp"
#include "serve/serve_internal.hpp"

namespace hios::exec {

namespace {

// Seconds covered by the union of [start, end) intervals.
double covered_s(std::vector<std::pair<double, double>> iv) {
  std::sort(iv.begin(), iv.end());
  double covered = 0, until = 0;
  for (const auto& [a, b] : iv) {
    if (b <= until) continue;
    covered += b - std::max(a, until);
    until = b;
  }
  return covered;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = size_t(std::ceil(q * double(v.size()))) - 1;
  return v[std::min(i, v.size() - 1)];
}

}  // namespace


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
        const double sent_from = now_s();
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
          // with ring_slots = queue_limit + (replicas + 1) x the largest batch, the slot and a
          // largest batch of rows after it (a padded batch's padding) are free.
          HIOS_CHECK(r.next + s_.max_batch_ <= r.head + m.ring_slots, "internal error: the arrival ring of '%s' is full",
                     m.name.c_str());
          pos = r.next++;
          r.staging = true;
        }
        // The copies run outside the lock, so that workers take and release batches meanwhile;
        // none of them reads these slots until the request is queued.
        auto mine = own_.find(int64_t(next));
        m.put(pos, mine != own_.end() ? mine->second.data() : m.base.data());
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
          dispatch_late_ms_.push_back(1e3 * std::max(0.0, t - trace[next].arrival_s));
        }
        cv_.notify_all();
        dispatch_host_s_ += now_s() - sent_from;
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

  // Each device's workers (fifo: its one worker, on every device it ran a model on), the share
  // of the wall its pass phases cover, the dispatcher's time and lateness, and host time per
  // request.
  void summarise_device_time() {
    ServeResult& res = res_;
    for (const std::vector<int>& devs : res.replica_devices) {
      for (int d : devs) {
        ServeResult::DeviceTime& t = res.device_time[d];
        t.workers = policy_ == Policy::Fifo ? 1 : t.workers + 1;
      }
    }
    const size_t sent = dispatch_late_ms_.size();
    res.dispatch_ms_per_request = sent ? 1e3 * dispatch_host_s_ / double(sent) : 0;
    res.dispatch_late_p99_ms = percentile(dispatch_late_ms_, 0.99);
    for (auto& [d, t] : res.device_time) {
      auto iv = pass_iv_.find(d);
      t.pass_fraction = iv != pass_iv_.end() && res.wall_s > 0 ? covered_s(iv->second) / res.wall_s : 0;
      t.host_ms_per_request = t.requests ? (t.stage_ms + t.book_ms) / double(t.requests) + res.dispatch_ms_per_request : 0;
    }
  }

  ServeResult summarise() {
    ServeResult& res = res_;
    const std::vector<Request>& trace = trace_;
    std::map<int, std::vector<std::pair<double, double>>>& busy = busy_;
    // Statistics, per model and over all.
    // The busy share is the union of pass intervals (covered_s): over every device (some device
    // busy), and per device.
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
    summarise_device_time();
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
  // never pads otherwise), so the rows after it are free, and the worker reserves them by moving
  // `next` past them. Padding rows hold whatever the ring holds there (zeros from the run's
  // start, or an earlier request's image): every operator works on each image alone, so they
  // change no other row, and their answers are dropped. Not zeroing them halves the
  // dispatcher's copying, the one host thread every device's requests go through.
  //
  // Several replicas of a model take from its one queue, so several windows may be taken and
  // not yet staged at once. They are consecutive, in arrival order (each starts where the last
  // taken one ended, `taken`), and a replica may finish staging a later window before another
  // stages an earlier one. A slot returns to the ring only when every window up to it has been
  // staged: `head` is the start of the oldest unstaged window, or `taken` when none is
  // outstanding. All of it is under mu_.
  struct RingState {
    int64_t head = 0, taken = 0, next = 0;
    bool staging = false;  // the dispatcher is writing at or after `next`
    std::deque<std::pair<int64_t, bool>> windows;  // taken, oldest first: (start, staged)
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

  // A batch a worker took from its queue: the requests, their model and first staged slot, the
  // rows it runs (padding included), and when it was taken.
  struct TakenBatch {
    std::vector<int64_t> ids;
    size_t model = 0;
    int64_t first = 0;
    int rows = 0;
    bool drained = false;  // the batch controller's drain state when it was taken
    double start = 0;
  };

  // Under mu_: moves the first n requests of queue q into `t` and takes their ring window (with
  // its padding rows), checking that the staged slots are in order.
  void take_window(size_t q, int n, TakenBatch& t) {
    const std::vector<Request>& trace = trace_;
    RingState& r = rings_[t.model];
    for (int i = 0; i < n; ++i) {  // fifo takes one; the others take a run of one model's requests
      t.ids.push_back(queues_[q].front());
      queues_[q].pop_front();
    }
    t.first = slot_of_[size_t(t.ids.front())];
    for (int i = 0; i < n; ++i) {
      HIOS_CHECK(slot_of_[size_t(t.ids[size_t(i)])] == t.first + i && trace[size_t(t.ids[size_t(i)])].model == int(t.model),
                 "internal error: request %lld is not staged after the one before it", (long long)t.ids[size_t(i)]);
    }
    // Windows are taken in arrival order, each where the last one (padding included) ended, and
    // at most one per worker is outstanding.
    HIOS_CHECK(t.first == r.taken && r.head <= r.taken, "internal error: '%s' staged slots are taken out of order",
               s_.models_[t.model]->name.c_str());
    if (t.rows > n) {
      HIOS_CHECK(queues_[q].empty() && r.next == t.first + n,
                 "internal error: a padded batch of '%s' left requests behind", s_.models_[t.model]->name.c_str());
      r.next = t.first + t.rows;
    }
    r.windows.emplace_back(t.first, false);
    r.taken = t.first + t.rows;
    HIOS_CHECK(r.windows.size() <= s_.models_[t.model]->reps.size() && r.taken <= r.next,
               "internal error: '%s' has %zu windows taken and not staged", s_.models_[t.model]->name.c_str(),
               r.windows.size());
  }

  // Waits until the batch controller lets this worker take a batch of queue q, and takes it.
  // False when the queue is done or the run stops (what was still waiting is then rejected).
  bool wait_for_batch(size_t q, BatchController& ctl, TakenBatch& t) {
    const std::vector<Request>& trace = trace_;
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
      if (stopping() || !worker_error_.empty()) {
        for (int64_t id : queues_[q]) res_.requests[size_t(id)].rejected = "server stopped while it waited";
        queues_[q].clear();
        sample(q);
        return false;
      }
      const int waiting = int(queues_[q].size());
      const double oldest = waiting ? now_s() - trace[size_t(queues_[q].front())].arrival_s : 0;
      const int n = ctl.take(waiting, oldest, dispatch_done_,
                             waiting ? arrival_gap_s_[size_t(trace[size_t(queues_[q].front())].model)] : 0);
      if (n > 0) {
        t.model = size_t(trace[size_t(queues_[q].front())].model);
        t.rows = ctl.batch_for(n);
        // Padding rows are the slots after the last waiting request, and the dispatcher is
        // writing one of them now: it is a request arriving this instant, so wait for it (and
        // perhaps take it too) rather than pad over it.
        if (t.rows > n && rings_[t.model].staging) {
          cv_.wait(lk);
          continue;
        }
        t.drained = ctl.drained();
        take_window(q, n, t);
        t.start = now_s();
        sample(q);
        return true;
      }
      if (dispatch_done_ && waiting == 0) return false;
      if (policy_ == Policy::Static && waiting > 0) {
        cv_.wait_for(lk, std::chrono::duration<double>(std::max(s_.opt_.static_wait_s - oldest, 1e-5)));
      } else if (policy_ == Policy::Adaptive && waiting > 0) {
        cv_.wait_for(lk, std::chrono::duration<double>(std::max(ctl.hold_s(), 1e-5)));
      } else {
        cv_.wait(lk);
      }
    }
  }

  // Staged: the window's slots return to the ring with every staged window before them.
  void release_window(size_t model, int64_t first) {
    std::lock_guard<std::mutex> lk(mu_);
    RingState& r = rings_[model];
    auto w = std::find(r.windows.begin(), r.windows.end(), std::make_pair(first, false));
    HIOS_CHECK(w != r.windows.end(), "internal error: a staged window of '%s' was not taken",
               s_.models_[model]->name.c_str());
    w->second = true;
    while (!r.windows.empty() && r.windows.front().second) r.windows.pop_front();
    r.head = r.windows.empty() ? r.taken : r.windows.front().first;
  }

  // A worker's time by device, added to the run's when the worker ends.
  void merge_device_time(const std::map<int, ServeResult::DeviceTime>& spent) {
    std::lock_guard<std::mutex> lk(mu_);
    for (const auto& [d, t] : spent) {
      ServeResult::DeviceTime& all = res_.device_time[d];
      all.passes += t.passes;
      all.requests += t.requests;
      all.wait_ms += t.wait_ms;
      all.stage_ms += t.stage_ms;
      all.pass_ms += t.pass_ms;
      all.book_ms += t.book_ms;
    }
  }

  // One worker's loop over its queue; returns when the queue is done or the run stops. `rep`:
  // the replica it runs its batches on (fifo: 0, of whichever model the request is for).
  void serve_queue(size_t q, size_t rep, BatchController& ctl) {
    bool bound = false;
    int bound_device = -1;  // the device this thread last made current (see Replica::bind)
    std::map<int, ServeResult::DeviceTime> spent;  // this worker's time by device, merged at the end
    for (;;) {
      const double wait_from = now_s();
      TakenBatch t;
      if (!wait_for_batch(q, ctl, t)) break;
      Model& m = *s_.models_[t.model];
      Model::Replica& rp = *m.reps.at(rep);
      if (!bound || bound_device != rp.device) {
        rp.bind();
        bound = true;
        bound_device = rp.device;
      }
      const ShapeKey& key = m.key.at(t.rows);
      rp.stage(key, m.window(t.first));
      release_window(t.model, t.first);
      const double staged = now_s();
      const std::vector<float> out = rp.answer(key);
      const double done = now_s();
      ctl.observe(t.rows, done - t.start);
      {
        std::lock_guard<std::mutex> lk(mu_);
        busy_[rp.device].emplace_back(t.start, done);
        pass_iv_[rp.device].emplace_back(staged, done);
        record_answers(t.ids, out, m, t.start, done, t.rows, rep, t.drained);
      }
      ServeResult::DeviceTime& d = spent[rp.device];
      ++d.passes;
      d.requests += int64_t(t.ids.size());
      d.wait_ms += 1e3 * (t.start - wait_from);
      d.stage_ms += 1e3 * (staged - t.start);
      d.pass_ms += 1e3 * (done - staged);
      d.book_ms += 1e3 * (now_s() - done);
    }
    merge_device_time(spent);
  }

  // A finished pass's requests: their times, batch and replica, and the verified ones' answers
  // (under mu_).
  void record_answers(const std::vector<int64_t>& batch, const std::vector<float>& out, const Model& m, double start,
                      double done, int b, size_t rep, bool drained) {
    for (size_t i = 0; i < batch.size(); ++i) {
      RequestOutcome& o = res_.requests[size_t(batch[i])];
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
  std::map<int, std::vector<std::pair<double, double>>> pass_iv_;  // the same without the staging
  double dispatch_host_s_ = 0;            // the dispatcher's own time per request, summed (its thread only)
  std::vector<double> dispatch_late_ms_;  // per queued request: sent this late after its arrival (under mu_)
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

}  // namespace hios::exec
