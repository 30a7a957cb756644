// The parts of hios serve that decide without threads or clocks, so that they can be tested
// alone (serve/batching.cpp): the trace of requests (Poisson, on/off bursts or a file), the
// launch policies and the launcher's batching decision (BatchController). serve/serve.hpp is
// the server that runs them.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace hios::exec {

struct Request {
  int64_t id = 0;
  int model = 0;         // index into the served models
  double arrival_s = 0;  // from the start of the run
};

struct ArrivalSpec {
  std::string kind = "poisson";  // poisson | bursty | file
  std::vector<double> rates;     // requests/s per model (bursty: while on)
  double duration_s = 5;
  double on_s = 0.5, off_s = 0.5;  // bursty
  uint64_t seed = 1;
  std::string file;  // kind file: lines "time_s,model_name" (a '#' starts a comment)
};
// Sorted by arrival; ids 0..n-1 in that order. Deterministic for a seed.
std::vector<Request> make_trace(const ArrivalSpec& spec, const std::vector<std::string>& models);

enum class Policy : uint8_t { Fifo, Static, Adaptive };
Policy parse_policy(const std::string& s);  // fifo | static | adaptive
const char* policy_name(Policy p);

// Static waits for --static-batch requests, so that batch must be among the prepared ones. The
// one check, called by BatchController for static and by hios serve before the slow
// preparation (only the CLI knows then whether static will run).
void check_static_batch(const std::vector<int>& batches, int static_batch);

// The launcher's decision, free of threads and clocks so that it can be tested: how many
// waiting requests a free worker takes now (0: wait). The worker then runs them in
// batch_for(taken) and reports the pass's measured time with observe().
//
// The adaptive launcher's two rules:
//  * Batch size: within the latency budget, everything that waits, in the largest batch whose
//    predicted pass still answers the oldest request in time; past it, the batch that answers
//    the most requests per second among those whose pass is at most a batch-1 pass plus the
//    expected gap to the next arrival (drain).
//  * Dequeue rate (the hold): a model whose requests arrive fast enough waits for one more
//    when that answers the oldest within hold_share x the budget, counting the expected gap to
//    the next arrival and the larger pass. Several models share a device, so every pass of a
//    short model also delays the long one's kernels: fewer, larger passes of the short models
//    leave the long one more of the device. The rest of the budget is margin for that sharing.
//    At light load the next arrival is too far off, so nothing waits.
class BatchController {
 public:
  // pass_s: measured seconds of one pass per prepared batch (adaptive: the seeds of its
  // estimates; a batch left out is estimated from the nearest measured one). budget_s: the
  // latency the adaptive launcher keeps each request within, queueing included; fifo and
  // static ignore both. hold_share: of the budget, what a hold may reach (0: never hold).
  // bounded_drain: the drain's bound by pass time (false: the most requests per second alone,
  // the earlier rule, kept for comparison runs).
  BatchController(Policy p, std::vector<int> batches, int static_batch, double static_wait_s, double budget_s = 0,
                  std::map<int, double> pass_s = {}, double hold_share = 0, bool bounded_drain = true);
  // arrival_gap_s: the model's expected seconds between arrivals (its recent mean; 0: not
  // known yet, so no hold).
  int take(int waiting, double oldest_wait_s, bool stopping, double arrival_gap_s = 0);
  // After an adaptive take() of 0 with requests waiting: how long the worker may wait for an
  // arrival before asking again (the hold's end).
  double hold_s() const { return hold_s_; }
  // A pass of `batch` took `pass_s` seconds, start to answer.
  void observe(int batch, double pass_s);
  // The expected seconds of one pass of a prepared batch.
  double predicted_s(int batch) const;
  // Whether the last take() had to give up on the budget and drained (adaptive).
  bool drained() const { return drained_; }
  // The smallest prepared batch holding n requests.
  int batch_for(int n) const;
  // Weight of a new measurement in the estimate: recent enough to follow the other models'
  // load on the device within a few passes, smooth enough that one slow pass does not make
  // the launcher abandon a batch size.
  static constexpr double kEwma = 0.25;

 private:
  int adaptive_take(int waiting, double oldest_wait_s, bool stopping, double arrival_gap_s);
  Policy p_;
  std::vector<int> batches_;
  int static_batch_;
  double static_wait_s_;
  double budget_s_;
  double hold_share_;
  bool bounded_drain_;
  double hold_s_ = 0;
  std::map<int, double> pass_s_;  // by prepared batch: the estimate
  bool drained_ = false;
};

// Automatic placement: the device of each model, longest-processing-time-first. Models are
// taken heaviest first (ties: the earlier model) and each goes to the device with the least
// weight so far (ties: the one with fewer models, then the earlier in `devices`, so that models
// of weight 0 still spread). Pure and deterministic. `devices` must not be empty.
std::vector<int> balance_placement(const std::vector<double>& weight_ms, const std::vector<int>& devices);
// The same greedy over replicas: model m's replicas are replicas[m] items of weight
// weight_ms[m] / replicas[m] each (its requests are shared between them), taken in model order,
// then replica order, where weights tie. The device of each replica of each model.
std::vector<std::vector<int>> balance_replicas(const std::vector<double>& weight_ms, const std::vector<int>& replicas,
                                               const std::vector<int>& devices);
// The most replicas a model may have.
constexpr int kMaxReplicas = 8;
// --replicas auto: how many replicas each model gets from its measured batch-1 pass (ms per
// request, each model served at the same rate). Every model has one; the server has one worker
// more than models per device, and each extra one goes to the model with the most measured time
// per worker (ties: the earlier model), up to kMaxReplicas each. A second worker on a device lets
// its passes overlap another worker's host work (staging, bookkeeping) and the heaviest model's
// backlog drain on two replicas at once: on one device with inception_v3, nasnet_large and
// randwire this gives nasnet_large=2, the configuration that met the one-GPU serving target
// (docs/benchmarks.md, serving). Pure and deterministic.
std::vector<int> auto_replica_counts(const std::vector<double>& request_ms, int devices);
// Where the replicas beyond each model's first go, given where the first ones are: longest
// first (each a share request_ms[m] / counts[m] of its model's work), each to the device with
// the least work so far, counting the first replicas' shares (ties: the earlier in `devices`).
// The device of each replica of each model, the first ones as given.
std::vector<std::vector<int>> place_extra_replicas(const std::vector<double>& request_ms, const std::vector<int>& counts,
                                                   const std::vector<int>& first_device, const std::vector<int>& devices);
// "a=1,b=2" as (name, value) in the order given, each value an integer from lo to hi: the form
// of --placement (model=device) and --replicas (model=count). One-line errors start with
// `option` and name the item: an empty item, no "name=", or a value that is not
// `value_is` ("a device id", "a replica count") from lo to hi.
std::vector<std::pair<std::string, int>> parse_name_values(const std::string& s, const char* option, const char* value_name,
                                                           const char* value_is, int lo, int hi);
// "nasnet_large=2,randwire=3": (model, replicas) in the order given; one-line errors naming the
// item (its form, or a count outside 1 to kMaxReplicas). Models are checked by replica_counts.
std::vector<std::pair<std::string, int>> parse_replicas(const std::string& s);
// The replicas of each served model (1 where not given); a model not served, given twice, or a
// count outside 1 to kMaxReplicas is an error naming it.
std::vector<int> replica_counts(const std::vector<std::string>& models,
                                const std::vector<std::pair<std::string, int>>& replicas);
// `devices` checked: each id from 0 to 1023, none twice. With `visible` >= 0 (a GPU backend's
// device count), each id must also be below it. One-line errors naming the id.
void check_devices(const std::vector<int>& devices, int visible = -1);
// An explicit placement checked against the served models and the devices, as the device of
// each replica of each model (in the order its entries are given): every model named once per
// replica (replicas[m] times; replicas empty: once each), each on one of `devices`.
std::vector<std::vector<int>> explicit_placement(const std::vector<std::string>& models,
                                                 const std::vector<int>& devices,
                                                 const std::vector<std::pair<std::string, int>>& placement,
                                                 const std::vector<int>& replicas = {});

}  // namespace hios::exec
