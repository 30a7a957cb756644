// Serving several models on one device or several (after TOP): request streams,
// per-model queues, batching, and an adaptive launcher, measured by throughput and tail latency.
//
// Each model is a ShapeSet (executor/shape_set.hpp) prepared at one image size for the batch
// sizes the launcher may use (1, 2, 4, 8 by default): one set of weights, one arena and one CUDA
// Graph per batch size. Requests arrive on a trace (Poisson per model, on/off bursts, or a file)
// and are answered by one of three launchers:
//
//   fifo      one request at a time, all models in one queue in arrival order, batch 1: the
//             baseline of a server that runs each model's best single-request schedule.
//   static    a queue per model and a worker per replica of it (one by default); a worker runs a
//             fixed batch when that many are waiting, or a padded partial batch once the oldest
//             has waited `static_wait_s`.
//   adaptive  a queue per model and a worker per replica of it (models run concurrently, each on
//             its own streams);
//             a free worker takes what is waiting at once, in the largest batch whose answer
//             still meets the latency budget. It knows each batch size's pass time from
//             measurement: seeded by timed passes at start-up, then an EWMA of every pass it runs
//             (start to answer, under whatever the other models do to the device meanwhile). If
//             even one request cannot meet the budget any more, it drains the backlog with the
//             batch that answers the most requests per millisecond. A measured heuristic rather
//             than a learned policy: on one device its inputs (queue, oldest wait, measured pass
//             times) are all it needs, it costs no training, and its decisions can be tested.
//             It replaced a launcher whose batch limit followed the backlog alone (doubled while
//             requests waited, halved after two emptying dequeues): that one let nasnet_large's
//             batches grow to 8, whose passes alone outlast the tail fifo keeps at half load
//             (docs/benchmarks.md).
//
// On several devices (ServeOptions::devices) each model lives on one of them, whole: its shape
// set, weights and CUDA Graphs are made there. fifo stays one request at a time overall (one
// queue, one worker, each request run on its model's device), which is what the baseline means;
// static and adaptive keep a worker per model, so models on different devices run truly in
// parallel. Placement is given (ServeOptions::placement) or automatic (balance_placement): the
// longest-processing-time-first greedy, weighting each model by its batch-1 schedule's
// predicted latency. Predicted rather than measured, because the device must be chosen before
// anything is built on it (measuring first would mean preparing every model twice), and because
// a pure function of the schedules is deterministic and testable. The arrival rates are even
// across the models, so a device's work is about the sum of its models' pass times, which is
// what the greedy balances; the analytic model's ratios between models are what matters there.
//
// Replicas (ServeOptions::replicas, static and adaptive): a model may have k workers instead of
// one, each with its own prepared ShapeSet (its own arena and CUDA Graphs, and its own copy of
// the weights: ShapeSet cannot share weights between sets, so a model's device memory is k
// times one replica's), all taking from the model's one queue in arrival order. A free replica starts the oldest waiting requests at once while
// another replica's pass of the same model is still running, so a request arriving during a
// long pass need not wait for it. fifo stays one worker, running every request on its model's
// first replica: it is the one-at-a-time baseline. On several devices, automatic placement
// places replicas, each an item of weight predicted_ms / k (balance_replicas), and an explicit
// placement names a model once per replica.
//
// A batch is padded up to the smallest prepared batch that holds it (padding rows compute on
// whatever the ring holds there, zeros or an earlier image, and are dropped; the adaptive
// launcher pads only where that costs no throughput).
// Nothing is lost: a request is answered, or rejected with a reason (its model's queue was full,
// or the server was stopped while it waited), and the report's counts add up to the trace.
//
// Inputs are staged when a request arrives, not when its batch starts: the dispatcher copies it
// into its model's ring of host slots (pinned on GPU backends), in arrival order, so that a
// batch of one model's consecutive requests is already one contiguous block and its worker only
// copies that block to the device. The ring holds queue_limit + (replicas + 1) x the largest
// batch slots: what waits, one window taken but not yet staged per replica (each with its
// padding), and room for a padded batch's padding after the newest arrival. Replicas take
// consecutive windows;
// a slot returns to the ring only once every window before it has been staged.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "executor/shape_set.hpp"
#include "graph/json_reader.hpp"
#include "serve/batching.hpp"

namespace hios::exec {

struct ServeOptions {
  ShapeSetOptions set;
  // The devices the models are spread over (set.session.device is set per model). Empty: every
  // model on the session's default device, as on one GPU. The CPU backend takes the ids as
  // labels: its passes all run on the host.
  std::vector<int> devices;
  // (model, device) for every served model, once per replica; empty: balance_replicas. Needs
  // `devices`.
  std::vector<std::pair<std::string, int>> placement;
  // (model, k): k replicas of the model, 1 to kMaxReplicas, for static and adaptive (fifo runs
  // every request on a model's first replica). A model not named has 1.
  std::vector<std::pair<std::string, int>> replicas;
  // Instead of `replicas`: each model's first replica is prepared and its batch-1 pass measured,
  // then auto_replica_counts() and place_extra_replicas() add the others (not with `placement`).
  bool auto_replicas = false;
  std::vector<int> batches{1, 2, 4, 8};
  int static_batch = 4;
  double static_wait_s = 0.002;
  int queue_limit = 64;   // waiting requests per model (fifo: in the one queue) before rejecting
  int verify_every = 0;   // every k-th request gets its own input and is compared with a batch-1 run
  // adaptive: the latency, queueing included, a request should be answered within (ms, up to
  // 60000). 0: default_latency_budget_ms(). The CLI sets fifo's p99 at its lowest load instead
  // when it runs fifo (cli/cmd_serve.cpp).
  double latency_budget_ms = 0;
  // adaptive: the share of the budget a hold for one more arrival may reach (BatchController);
  // 0 to 1, 0: never hold. 0.85 from measurement (docs/benchmarks.md, serving: the adaptive
  // hold, and the bounded drain): at 0.5 the short models still ran at a mean batch near 1.6 at 1.5x fifo's
  // capacity and the p99 was 11% over fifo's half-load p99; at 1.0 they waited for batches of
  // 4 and their own tails reached the budget; with the same budget at 1.5x, 0.85 had the
  // lower p99 than 0.7 in both 20 s comparisons on one H200 (2026-11-24) (7.53 and 7.74 ms
  // against 8.06 and 8.01).
  double hold_share = 0.85;
  // adaptive: bound a drained pass by a batch-1 pass plus the arrival gap (BatchController);
  // false for the unbounded rule, to compare (hios serve --drain max).
  bool bounded_drain = true;
  // Models whose compute streams get the device's highest priority (BackendConfig::
  // compute_priority): the one with the longest passes, so that the others' kernels do not
  // stretch its tail.
  std::vector<std::string> high_priority;
  const std::atomic<bool>* stop = nullptr;  // set (by SIGINT): stop dispatching, reject what waits
};

struct RequestOutcome {
  int64_t id = 0;
  int model = 0;
  // start_s: when its batch was taken from the queue (under the queue's lock, so a model's
  // requests start in arrival order, also across replicas); done_s: when its answer was read.
  double arrival_s = 0, start_s = -1, done_s = -1;
  int replica = -1;  // the replica of its model that ran it (-1: not run)
  int batch = 0;  // prepared batch it ran in (0: not run)
  std::string rejected;  // the reason; empty when answered
  double max_rel = -1;   // verified requests: against the same input alone at batch 1
  bool drained = false;  // adaptive: its batch was chosen to drain a backlog past the budget
};

struct ModelStats {
  std::string name;
  int64_t offered = 0, answered = 0, rejected = 0;
  double throughput_rps = 0;
  double p50_ms = 0, p95_ms = 0, p99_ms = 0, mean_batch = 0;
  int max_queue = 0;
  int64_t drained = 0;  // answered in batches chosen to drain a backlog (adaptive)
};

struct ServeResult {
  Policy policy = Policy::Fifo;
  double offered_rps = 0;
  double wall_s = 0;
  std::vector<RequestOutcome> requests;  // one per trace request, in id order
  std::vector<ModelStats> models;        // per model, then "all" last
  std::vector<std::array<double, 3>> queue;  // (time_s, model, waiting) at every change
  // Of the wall time, some pass was running on some device (host-observed): on several devices,
  // the share with at least one busy, so 100% does not mean every device was.
  double busy_fraction = 0;
  std::map<int, double> device_busy;  // the same per device (-1: the session's default device)
  // Where each device's workers spent the run, by their own clocks: what limits a device that
  // is not busy (workers waiting for requests, or host work between its passes). Several
  // workers on one device each count their own time, so the phases add up to workers x wall.
  struct DeviceTime {
    int workers = 0;
    int64_t passes = 0, requests = 0;  // passes run on the device, and the requests they answered
    // Totals in ms, per phase of a worker's loop: waiting for requests to take (an empty queue,
    // a batching hold, the queue lock); staging (the batch's rows copied to the device, the host
    // waiting for the copy); the pass (launches, the device's work, the output read back); and
    // the bookkeeping after it (answers recorded under the queue lock).
    double wait_ms = 0, stage_ms = 0, pass_ms = 0, book_ms = 0;
    // The share of the wall time with at least one pass phase running on the device: busy_fraction
    // without the staging.
    double pass_fraction = 0;
    // Host time per answered request: its worker's staging and bookkeeping, shared over the
    // batch, and the dispatcher's staging of it into the arrival ring.
    double host_ms_per_request = 0;
  };
  std::map<int, DeviceTime> device_time;
  // The dispatcher (one thread for every device): its host time per request sent (the copy into
  // the arrival ring, the queue lock), and how late it sent requests after their arrival time
  // (p99): a dispatcher that falls behind shows here before anywhere else.
  double dispatch_ms_per_request = 0, dispatch_late_p99_ms = 0;
  std::vector<int> placement;         // the device of each model's first replica (-1: the session's default)
  // The device of each replica of each model that this run used (fifo: the first replica only).
  std::vector<std::vector<int>> replica_devices;
  int64_t not_sent = 0;      // trace requests after a stop (never arrived)
  bool stopped = false;
  double worst_verify_rel = -1;
  double latency_budget_ms = 0;  // what the adaptive launcher kept to
  // adaptive: each model's pass-time estimates (ms by batch) when the run ended, as measured
  // under this run's load (the mean over its replicas' launchers); the seeds are
  // Server::batch_pass_ms().
  std::vector<std::map<int, double>> pass_ms;
};

class Server {
 public:
  // The model `name` at one shape (the CLI builds it from the model zoo).
  using ModelMaker = std::function<Graph(const std::string& name, const ShapeKey& key)>;
  // Prepares every model at `size` for every batch in opt.batches. Inputs are staged as the
  // backend stores them (its layout and element type: 16-bit under --math bf16/fp16), encoded
  // on the host when a request arrives (Backend::encode_host).
  Server(const std::vector<std::string>& models, int64_t size, const ServeOptions& opt, const ModelMaker& make_model,
         const ScheduleMaker& make_schedule);
  ~Server();
  const std::vector<std::string>& models() const { return names_; }
  // Median time of one batch-1 pass per model (the fifo baseline's service time).
  std::vector<double> single_request_ms(int passes = 10);
  // Per model, the median time of one serving pass per prepared batch (ms by batch) as a worker
  // runs it: staged rows copied to the device, the pass, the output read back. Measured on the
  // first call (every model idle but the one measured), on the model's first replica, and kept:
  // the seeds of every replica's adaptive launcher.
  const std::vector<std::map<int, double>>& batch_pass_ms();
  // When neither the options nor set_latency_budget_ms give one: 4x the slowest model's
  // batch-1 serving pass, which leaves room for a request to wait behind about three passes of
  // its own model, or of the others sharing the device, and still be answered in time.
  double default_latency_budget_ms();
  static constexpr double kDefaultBudgetPasses = 4;
  // Batch-1 passes timed per model for --replicas auto (their median).
  static constexpr int kAutoReplicaPasses = 10;
  // The adaptive launcher's budget from now on: > 0 and <= 60000 ms.
  void set_latency_budget_ms(double ms);
  double latency_budget_ms();  // the one in effect
  ServeResult run(const std::vector<Request>& trace, Policy policy);
  // The device's name; on several devices, "id: name" of each used, in the order of --devices.
  std::string device() const;
  std::string math() const;  // the math mode in effect (Backend::math)
  // The device of each model's first replica (-1: the session's default, when
  // ServeOptions::devices is empty), and each model's batch-1 predicted ms that automatic
  // placement weighed (empty otherwise).
  const std::vector<int>& placement() const { return placement_; }
  const std::vector<double>& placement_weight_ms() const { return weight_ms_; }
  // The device of each replica of each model (its size: the model's replicas).
  const std::vector<std::vector<int>>& replica_devices() const { return replica_devices_; }
  // With ServeOptions::auto_replicas: each model's measured batch-1 ms that chose its replicas
  // (empty otherwise).
  const std::vector<double>& replica_weight_ms() const { return replica_weight_ms_; }

 private:
  struct Model;
  class Run;  // one run over a trace (serve.cpp)
  std::vector<std::string> names_;
  int64_t size_;
  ServeOptions opt_;
  std::vector<std::unique_ptr<Model>> models_;
  std::vector<std::map<int, double>> pass_ms_;  // batch_pass_ms(), once measured
  std::vector<int> placement_;
  std::vector<std::vector<int>> replica_devices_;
  std::vector<double> weight_ms_;
  std::vector<double> replica_weight_ms_;
  int max_batch_ = 1;
  // The constructor's phases after placement (server_setup.cpp).
  void add_replica(size_t model, int device, const ModelMaker& make_model, const ScheduleMaker& schedule);
  void add_auto_replicas(const ModelMaker& make_model, const std::vector<ScheduleMaker>& schedules);
  void make_ring(size_t model);
};

// The queue record as the JSON keeps it: every sample where a queue has at most
// max_points_per_queue of them; else, per queue, its run cut into max_points_per_queue / 2 equal
// spans of time, each kept as its lowest and highest sample in time order, so that a plot still
// shows every peak and trough. At 1.5x fifo's capacity a 30 s run records about 20,000 samples
// per model's queue (50,000 in fifo's one queue), which made a sweep's JSON over 16 MiB. Time
// order kept.
std::vector<std::array<double, 3>> thin_queue_record(const std::vector<std::array<double, 3>>& samples,
                                                     size_t max_points_per_queue);
constexpr size_t kQueuePointsInJson = 4000;
// The run as JSON; "queue" thinned by thin_queue_record(kQueuePointsInJson), "queue_samples" the
// count before thinning.
json serve_result_to_json(const ServeResult& r, const std::vector<std::string>& models);
std::string serve_result_line(const ServeResult& r);  // one row per model and "all"
// Comment lines ("#   device 0: ...") after a run's rows: each device's busy share and its
// workers' time by phase, then the dispatcher's time and lateness.
std::string serve_device_lines(const ServeResult& r);

}  // namespace hios::exec
