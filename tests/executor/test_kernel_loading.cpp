// A multi-rank session on a backend that loads kernel code at a kernel's first launch (CUDA's
// lazy loading) launches every node of a loaded program once, without its transfers, before
// any pass that sends or receives; other backends do not. Two ranks as threads of this
// process, over a backend that wraps the cpu one and a transport of host queues, both logging.
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "executor/registry.hpp"
#include "executor/session.hpp"
#include "executor/weights.hpp"
#include "helpers.hpp"
#include "inprocess/thread_comm.hpp"
#include "models/models.hpp"
#include "tests/catch.hpp"

using namespace hios;
using namespace hios::exec;

namespace {

// What the ranks did, in order, per rank: "launch N", "send N", "recv N".
struct Log {
  std::mutex mu;
  std::map<int, std::vector<std::string>> events;
  void add(int rank, const std::string& e) {
    std::lock_guard<std::mutex> lock(mu);
    events[rank].push_back(e);
  }
};
Log g_log;
bool g_lazy = true;  // what the wrapping backend says of itself

class LoggingBackend final : public Backend {
 public:
  explicit LoggingBackend(const BackendConfig& cfg) : cpu_(make_backend("cpu", cfg)), rank_(cfg.device) {}
  std::string name() const override { return "lazy-test"; }
  std::string device_name() const override { return cpu_->device_name(); }
  std::string versions() const override { return cpu_->versions(); }
  std::string math() const override { return cpu_->math(); }
  void prepare(const Graph& g, const RankProgram& p) override { cpu_->prepare(g, p); }
  void launch(int node, int stream) override {
    g_log.add(rank_, "launch " + std::to_string(node));
    cpu_->launch(node, stream);
  }
  void record(int event, int stream) override { cpu_->record(event, stream); }
  void wait(int event, int stream) override { cpu_->wait(event, stream); }
  void sync_stream(int stream) override { cpu_->sync_stream(stream); }
  void synchronize() override { cpu_->synchronize(); }
  void reserve_markers(int n) override { cpu_->reserve_markers(n); }
  void mark(int marker, int stream) override { cpu_->mark(marker, stream); }
  double marker_ms(int from, int to) override { return cpu_->marker_ms(from, to); }
  TensorView tensor(int node) override { return cpu_->tensor(node); }
  HostBuffer alloc_host(size_t bytes) override { return cpu_->alloc_host(bytes); }
  void copy_to_host(int node, void* dst, int stream) override { cpu_->copy_to_host(node, dst, stream); }
  void copy_from_host(int node, const void* src, int stream) override { cpu_->copy_from_host(node, src, stream); }
  void set_input(const std::vector<float>& values) override { cpu_->set_input(values); }
  std::vector<float> read_tensor(int node) override { return cpu_->read_tensor(node); }
  void write_tensor(int node, const std::vector<float>& values) override { cpu_->write_tensor(node, values); }
  size_t peak_memory_bytes() const override { return cpu_->peak_memory_bytes(); }
  size_t memory_in_use() const override { return cpu_->memory_in_use(); }
  bool loads_code_at_first_launch() const override { return g_lazy; }

 private:
  std::unique_ptr<Backend> cpu_;
  int rank_;
};

// Host queues between the two ranks: a send copies the tensor out, a receive waits for it.
struct Queues {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::pair<int, int>, std::deque<std::vector<float>>> q;  // (from, to)
};
Queues g_queues;

class QueueTransport final : public Transport {
 public:
  QueueTransport(Comm& comm, Backend& b) : rank_(comm.rank()), b_(b) {}
  std::string name() const override { return "queue-test"; }
  void prepare(const Graph&, const RankProgram&) override {}
  void send(int node, int peer, int, int) override {
    g_log.add(rank_, "send " + std::to_string(node));
    std::vector<float> data = b_.read_tensor(node);
    std::lock_guard<std::mutex> lock(g_queues.mu);
    g_queues.q[{rank_, peer}].push_back(std::move(data));
    g_queues.cv.notify_all();
  }
  void recv(int node, int peer, int stream, int) override {
    g_log.add(rank_, "recv " + std::to_string(node));
    std::unique_lock<std::mutex> lock(g_queues.mu);
    auto& q = g_queues.q[{peer, rank_}];
    g_queues.cv.wait(lock, [&] { return !q.empty(); });
    b_.copy_from_host(node, q.front().data(), stream);
    q.pop_front();
  }

 private:
  int rank_;
  Backend& b_;
};

// Two ranks load `s` and run one pass; rank 0's output.
std::vector<float> run_two_ranks(const Graph& g, const Schedule& s) {
  g_log.events.clear();
  cuda::ThreadComm::Shared shared(2);
  std::vector<float> out;
  auto rank_main = [&](int r) {
    cuda::ThreadComm comm(shared, r);
    SessionOptions so;
    so.backend = "lazy-test";
    so.transport = "queue-test";
    so.device = r;  // the wrapper logs under it
    so.threads = 1;
    RankSession session(g, so, comm);
    session.load_schedule(s, false, LaunchOrder{});
    if (r == 0) session.backend().set_input(make_input(g, so.seed));
    session.pass();
    if (r == 0) out = session.backend().read_tensor(g.output());
  };
  std::thread other(rank_main, 1);
  rank_main(0);
  other.join();
  return out;
}

void register_fakes() {
  BackendEntry be;
  be.name = "lazy-test";
  be.description = "the cpu backend, logging its launches (tests)";
  be.make = [](const BackendConfig& cfg) -> std::unique_ptr<Backend> { return std::make_unique<LoggingBackend>(cfg); };
  be.device_count = [] { return 2; };
  register_backend(be);
  TransportEntry te;
  te.name = "queue-test";
  te.description = "host queues between threads (tests)";
  te.make = [](Comm& comm, Backend& b) -> std::unique_ptr<Transport> { return std::make_unique<QueueTransport>(comm, b); };
  register_transport(te);
}

// Per rank: the nodes launched before its first send or receive, and how often each node was
// launched in all.
struct RankLaunches {
  std::set<int> before_first_transfer;
  std::map<int, int> count;
  bool transfers = false;
};
RankLaunches launches_of(const std::vector<std::string>& events) {
  RankLaunches r;
  for (const std::string& e : events) {
    if (e.rfind("launch ", 0) == 0) {
      const int node = std::stoi(e.substr(7));
      ++r.count[node];
      if (!r.transfers) r.before_first_transfer.insert(node);
    } else {
      r.transfers = true;
    }
  }
  return r;
}

}  // namespace

TEST_CASE("sessions: on a backend that loads code at first launch, every kernel runs once before any pass waits on a peer",
          "[executor][session]") {
  register_fakes();
  const Graph g = build_model("demo", ModelParams{1, 32, 32});
  const Schedule two = test::schedule_with("hios-lp", g, 2);
  SessionOptions cpu;
  cpu.backend = "cpu";
  cpu.threads = 1;
  auto self = make_self_comm();
  const std::vector<float> want = run_reference(g, cpu, *self, make_input(g, cpu.seed))->backend().read_tensor(g.output());
  for (bool lazy : {true, false}) {
    g_lazy = lazy;
    INFO((lazy ? "loads code at first launch" : "loads code up front"));
    const std::vector<float> got = run_two_ranks(g, two);
    CHECK(got == want);  // the local pass's garbage is overwritten by the real one
    int ranks_with_transfers = 0;
    for (int r = 0; r < 2; ++r) {
      const RankLaunches l = launches_of(g_log.events[r]);
      ranks_with_transfers += l.transfers;
      for (const auto& [node, n] : l.count) {
        INFO("rank " << r << ", node " << node);
        CHECK(n == (lazy && l.transfers ? 2 : 1));  // the local pass, then the real one
        if (lazy && l.transfers) CHECK(l.before_first_transfer.count(node) == 1);
      }
    }
    CHECK(ranks_with_transfers == 2);  // the schedule uses both ranks, so the test means something
  }
  g_lazy = true;
}
