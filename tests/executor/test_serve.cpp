// Serving (executor/serve.hpp) on the CPU backend: traces, the launchers' decisions, and whole
// runs in which every request is answered once or rejected with a reason, in order per model.
#include <atomic>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "executor/comm.hpp"
#include "executor/serve.hpp"
#include "executor/session.hpp"
#include "graph/error.hpp"
#include "models/models.hpp"
#include "scheduler/algorithms.hpp"
#include "scheduler/cost_model.hpp"
#include "tests/catch.hpp"

using namespace hios;
using exec::Policy;

namespace {

exec::ServeOptions cpu_serve() {
  exec::ServeOptions o;
  o.set.session.backend = "cpu";
  o.batches = {1, 2, 4};
  o.static_batch = 2;
  o.static_wait_s = 0.005;
  return o;
}

std::unique_ptr<exec::Server> small_server(const exec::ServeOptions& o) {
  return std::make_unique<exec::Server>(
      std::vector<std::string>{"demo", "squeezenet"}, 24, o,
      [](const std::string& name, const exec::ShapeKey& k) { return build_model(name, ModelParams{k.batch, k.height, k.width}); },
      [](const Graph& g) {
        auto cost = make_analytic_cost_model(find_device_preset("h200"));
        SchedulerOptions s;
        s.num_gpus = 1;
        return run_algorithm("hios-lp", g, *cost, s);
      });
}

// Every request once: answered (times in order) or rejected with a reason; counts add up; a
// model's requests start in arrival order; a batch holds one model's requests only.
void check_accounting(const exec::ServeResult& r, const std::vector<exec::Request>& trace) {
  REQUIRE(r.requests.size() == trace.size());
  std::map<int, double> last_start;
  std::map<std::pair<double, int>, std::set<int>> batch_models;  // (start, batch) -> models
  int64_t answered = 0, rejected = 0;
  for (size_t i = 0; i < trace.size(); ++i) {
    const exec::RequestOutcome& o = r.requests[i];
    CHECK(o.id == int64_t(i));
    CHECK(o.model == trace[i].model);
    if (!o.rejected.empty()) {
      ++rejected;
      CHECK(o.batch == 0);
      continue;
    }
    ++answered;
    CHECK(o.start_s >= o.arrival_s - 1e-9);
    CHECK(o.done_s >= o.start_s);
    CHECK(o.batch >= 1);
    if (last_start.count(o.model)) CHECK(o.start_s >= last_start[o.model]);
    last_start[o.model] = o.start_s;
    batch_models[{o.start_s, o.batch}].insert(o.model);
  }
  for (const auto& [k, ms] : batch_models) CHECK(ms.size() == 1);
  const exec::ModelStats& all = r.models.back();
  CHECK(all.name == "all");
  CHECK(all.offered == int64_t(trace.size()));
  CHECK(all.answered == answered);
  CHECK(all.rejected == rejected);
  int64_t sum = 0;
  for (size_t m = 0; m + 1 < r.models.size(); ++m) {
    CHECK(r.models[m].offered == r.models[m].answered + r.models[m].rejected);
    sum += r.models[m].offered;
  }
  CHECK(sum == int64_t(trace.size()));
}

}  // namespace

TEST_CASE("serving: traces are deterministic, sorted and at their rate", "[executor][serve]") {
  exec::ArrivalSpec s;
  s.rates = {200, 100};
  s.duration_s = 10;
  s.seed = 3;
  const auto a = exec::make_trace(s, {"x", "y"}), b = exec::make_trace(s, {"x", "y"});
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].arrival_s == b[i].arrival_s);
    CHECK(a[i].id == int64_t(i));
    if (i) CHECK(a[i].arrival_s >= a[i - 1].arrival_s);
  }
  std::map<int, int> per;
  for (const auto& r : a) ++per[r.model];
  CHECK(per[0] == Approx(2000).epsilon(0.1));
  CHECK(per[1] == Approx(1000).epsilon(0.1));
  // Bursty: nothing arrives while off.
  s.kind = "bursty";
  s.on_s = 0.2;
  s.off_s = 0.3;
  for (const auto& r : exec::make_trace(s, {"x", "y"})) {
    const double phase = std::fmod(r.arrival_s, 0.5);
    CHECK(phase < 0.2 + 1e-9);
  }
  // A file: times and model names, comments, errors naming the line.
  const std::string path = "/tmp/hios-serve-trace.csv";
  std::ofstream(path) << "# time,model\n0.5, y\n0.1,x\n";
  exec::ArrivalSpec f;
  f.kind = "file";
  f.file = path;
  const auto t = exec::make_trace(f, {"x", "y"});
  REQUIRE(t.size() == 2);
  CHECK(t[0].model == 0);
  CHECK(t[1].arrival_s == 0.5);
  std::ofstream(path) << "0.1,z\n";
  CHECK_THROWS_WITH(exec::make_trace(f, {"x", "y"}), Catch::Contains(":1: model 'z' is not served"));
  std::ofstream(path) << "nan,x\n";
  CHECK_THROWS_WITH(exec::make_trace(f, {"x", "y"}), Catch::Contains("time 'nan'"));
  std::remove(path.c_str());
  CHECK_THROWS_AS(exec::parse_policy("lifo"), Error);
}

TEST_CASE("serving: the launchers' decisions", "[executor][serve]") {
  exec::BatchController fifo(Policy::Fifo, {1, 2, 4, 8}, 4, 0.01);
  CHECK(fifo.take(5, 1.0, false) == 1);
  CHECK(fifo.take(0, 0, true) == 0);

  exec::BatchController st(Policy::Static, {1, 2, 4, 8}, 4, 0.01);
  CHECK(st.take(3, 0.001, false) == 0);  // waits for a full batch
  CHECK(st.take(3, 0.02, false) == 3);   // unless the oldest waited long enough
  CHECK(st.take(9, 0.0, false) == 4);
  CHECK(st.take(2, 0.0, true) == 2);     // no more will come
  CHECK(st.batch_for(3) == 4);           // padded to a prepared batch
  CHECK(st.batch_for(9) == 8);

  exec::BatchController ad(Policy::Adaptive, {1, 2, 4, 8}, 4, 0.01);
  CHECK(ad.take(5, 0, false) == 1);  // starts at one request: lowest latency
  ad.after_take(4);                  // a backlog: the limit doubles
  CHECK(ad.limit() == 2);
  ad.after_take(3);
  ad.after_take(3);
  ad.after_take(3);
  CHECK(ad.limit() == 8);  // up to the largest prepared batch
  CHECK(ad.take(20, 0, false) == 8);
  ad.after_take(0);
  CHECK(ad.limit() == 8);  // one empty queue is not yet a trend
  ad.after_take(0);
  CHECK(ad.limit() == 4);  // two: halved
  CHECK_THROWS_WITH(exec::BatchController(Policy::Static, {1, 2}, 4, 0.01), Catch::Contains("--static-batch 4"));
}

TEST_CASE("serving: every launcher answers every request once, in order per model", "[executor][serve]") {
  exec::ServeOptions o = cpu_serve();
  o.verify_every = 5;
  auto server = small_server(o);
  const std::vector<double> single = server->single_request_ms(3);
  REQUIRE(single.size() == 2);
  exec::ArrivalSpec s;
  s.rates = {20, 40};
  s.duration_s = 0.6;
  s.seed = 11;
  const auto trace = exec::make_trace(s, server->models());
  REQUIRE(trace.size() > 10);
  for (Policy p : {Policy::Fifo, Policy::Static, Policy::Adaptive}) {
    INFO(exec::policy_name(p));
    const exec::ServeResult r = server->run(trace, p);
    check_accounting(r, trace);
    CHECK(r.models.back().rejected == 0);
    CHECK(r.worst_verify_rel == 0.0);  // the cpu backend: batched answers equal single ones exactly
    if (p == Policy::Fifo) CHECK(r.models.back().mean_batch == 1.0);
    const json j = exec::serve_result_to_json(r, server->models());
    CHECK(j["models"].size() == 3);
    CHECK(!exec::serve_result_line(r).empty());
  }
}

TEST_CASE("serving: a full queue rejects with a reason, and a stop rejects what waits", "[executor][serve]") {
  exec::ServeOptions o = cpu_serve();
  o.queue_limit = 2;
  std::atomic<bool> stop{false};
  o.stop = &stop;
  auto server = small_server(o);
  // A burst: 12 requests for one model at once.
  const std::string path = "/tmp/hios-serve-burst.csv";
  {
    std::ofstream f(path);
    for (int i = 0; i < 12; ++i) f << "0.0,demo\n";
  }
  exec::ArrivalSpec f;
  f.kind = "file";
  f.file = path;
  const auto burst = exec::make_trace(f, server->models());
  const exec::ServeResult full = server->run(burst, Policy::Fifo);
  check_accounting(full, burst);
  CHECK(full.models.back().rejected > 0);
  int queue_full = 0;
  for (const auto& rq : full.requests) queue_full += rq.rejected.rfind("queue full", 0) == 0;
  CHECK(queue_full == full.models.back().rejected);
  std::remove(path.c_str());

  // A long trace stopped after a moment: what waited is rejected, what never arrived is counted.
  exec::ArrivalSpec s;
  s.rates = {40, 40};
  s.duration_s = 20;
  const auto longer = exec::make_trace(s, server->models());
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    stop.store(true);
  });
  const exec::ServeResult r = server->run(longer, Policy::Adaptive);
  stopper.join();
  CHECK(r.stopped);
  CHECK(r.not_sent > 0);
  CHECK(r.wall_s < 10);
  check_accounting(r, longer);
}

TEST_CASE("serving: a high-priority model must be served; the cpu backend ignores the priority", "[executor][serve]") {
  exec::ServeOptions o = cpu_serve();
  o.high_priority = {"resnet50"};
  CHECK_THROWS_WITH(small_server(o), Catch::Contains("--high-priority names 'resnet50', which is not served"));
  o.high_priority = {"squeezenet"};
  CHECK_NOTHROW(small_server(o));
  exec::SessionOptions so;
  so.backend = "cpu";
  so.compute_priority = "urgent";
  const Graph g = build_model("demo", ModelParams{});
  auto self = exec::make_self_comm();
  CHECK_THROWS_WITH(exec::RankSession(g, so, *self), Catch::Contains("must be high or normal, not 'urgent'"));
}
