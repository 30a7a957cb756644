// Lowering a schedule to per-rank programs: barriers, transfers, receive order, launches.
#include <algorithm>
#include <map>
#include <set>

#include "executor/program.hpp"
#include "executor/weights.hpp"
#include "graph/error.hpp"
#include "helpers.hpp"
#include "tests/catch.hpp"

using namespace hios;
using namespace hios::exec;

namespace {

Graph demo() { return build_model("demo", {1, 15, 15}); }

int find_node(const Graph& g, const std::string& name) {
  int v = g.find(name);
  REQUIRE(v >= 0);
  return v;
}

// Index of the first instruction matching pred, or -1.
template <class Pred>
int index_of(const RankProgram& p, Pred pred) {
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    if (pred(p.instrs[i])) return static_cast<int>(i);
  }
  return -1;
}

// Demo block 1 as stage 0 = {conv1 | conv2 | conv3} (three streams), stage 1 = {out} on GPU 0;
// block 2 split: conv1 and conv2 on GPU 1, conv3 and out on GPU 0.
Schedule hand_schedule(const Graph& g) {
  Schedule s = make_schedule_skeleton(g, 2);
  s.meta.algorithm = "hand";
  s.meta.max_streams = 3;
  auto n = [&](const char* name) { return find_node(g, name); };
  Stage st0;
  st0.groups = {Group{{n("b1.conv1")}}, Group{{n("b1.conv2")}}, Group{{n("b1.conv3")}}};
  Stage st1;
  st1.groups = {Group{{n("b1.out")}}};
  s.blocks[0][0] = {st0, st1};
  Stage g1;
  g1.groups = {Group{{n("b2.conv1")}}, Group{{n("b2.conv2")}}};
  s.blocks[1][1] = {g1};
  Stage a;
  a.groups = {Group{{n("b2.conv3")}}};
  Stage b;
  b.groups = {Group{{n("b2.out")}}};
  s.blocks[1][0] = {a, b};
  s.derive_transfers(g);
  return s;
}

}  // namespace

TEST_CASE("lowering: stage barriers are events recorded by every group and waited by the next stage") {
  Graph g = demo();
  Schedule s = hand_schedule(g);
  REQUIRE(check_schedule(g, s).empty());
  RankProgram p = lower(g, s, 0);
  CHECK(p.num_compute_streams == 3);
  int out = find_node(g, "b1.out");
  int launch_out = index_of(p, [&](const Instr& in) { return in.kind == InstrKind::Launch && in.node == out; });
  REQUIRE(launch_out > 0);
  // Streams 1 and 2 ran conv2 and conv3; stream 0 must wait on an event each of them recorded
  // after its launch and before `out`.
  for (int stream : {1, 2}) {
    int conv = find_node(g, stream == 1 ? "b1.conv2" : "b1.conv3");
    int launch = index_of(p, [&](const Instr& in) { return in.kind == InstrKind::Launch && in.node == conv; });
    REQUIRE(launch >= 0);
    CHECK(p.instrs[launch].stream == stream);
    bool waited = false;
    for (int i = launch + 1; i < launch_out; ++i) {
      const Instr& rec = p.instrs[i];
      if (rec.kind != InstrKind::Record || rec.stream != stream) continue;
      for (int j = i + 1; j < launch_out; ++j) {
        const Instr& w = p.instrs[j];
        if (w.kind == InstrKind::Wait && w.stream == 0 && w.event == rec.event) waited = true;
      }
    }
    CHECK(waited);
  }
  // Every stream forks from stream 0 at the start and joins it at the end (for stream capture).
  int first_pass = index_of(p, [](const Instr& in) { return in.kind != InstrKind::Alloc; });
  CHECK(p.instrs[first_pass].kind == InstrKind::Record);
  CHECK(p.instrs[first_pass].stream == 0);
  for (size_t k = 1; k < p.streams.size(); ++k) {
    bool forked = index_of(p, [&](const Instr& in) {
                    return in.kind == InstrKind::Wait && in.stream == int(k) &&
                           in.event == p.instrs[first_pass].event;
                  }) >= 0;
    CHECK(forked);
  }
  CHECK(p.instrs.back().kind == InstrKind::Gather);
  CHECK(p.instrs.back().node == g.output());
}

TEST_CASE("lowering: a transfer is a send right after its producer and a receive before its consumer") {
  Graph g = demo();
  Schedule s = hand_schedule(g);
  std::vector<RankProgram> all = lower_all(g, s);
  REQUIRE(all.size() == 2);
  REQUIRE(check_programs(g, all).empty());
  for (const Transfer& t : s.transfers) {
    const RankProgram& src = all[t.src];
    const RankProgram& dst = all[t.dst];
    int send = index_of(src, [&](const Instr& in) {
      return in.kind == InstrKind::Send && in.node == t.node && in.peer == t.dst;
    });
    INFO("transfer of " << g.nodes[t.node].name << " " << t.src << "->" << t.dst);
    REQUIRE(send >= 0);
    CHECK(src.instrs[send].stream == src.send_stream(t.dst));
    CHECK(src.instrs[send].bytes == g.nodes[t.node].shape.numel() * 4);
    if (t.node != g.input()) {
      // launch, record on the producer's stream, wait on the send stream, send
      int launch = index_of(src, [&](const Instr& in) { return in.kind == InstrKind::Launch && in.node == t.node; });
      REQUIRE(launch >= 0);
      const Instr& rec = src.instrs[launch + 1];
      CHECK(rec.kind == InstrKind::Record);
      CHECK(rec.stream == src.instrs[launch].stream);
      bool waits = false;
      for (int i = launch + 2; i < send; ++i) {
        const Instr& w = src.instrs[i];
        waits = waits || (w.kind == InstrKind::Wait && w.event == rec.event && w.stream == src.instrs[send].stream);
      }
      CHECK(waits);
    }
    int recv = index_of(dst, [&](const Instr& in) { return in.kind == InstrKind::Recv && in.node == t.node; });
    REQUIRE(recv >= 0);
    CHECK(dst.instrs[recv].peer == t.src);
    CHECK(dst.instrs[recv].stream == dst.recv_stream(t.src));
    CHECK(dst.resident(t.node));
  }
  // The output (b2.out) is produced on GPU 0 here, so nothing is gathered over the wire.
  CHECK(all[0].instrs.back().kind == InstrKind::Gather);
}

TEST_CASE("lowering: receives follow the sender's send order and every node launches once, for real schedules") {
  struct Case {
    std::string model;
    int size;
  };
  for (const Case& c : {Case{"demo", 15}, Case{"inception_v3", 75}, Case{"randwire_small", 64}, Case{"squeezenet", 64}}) {
    Graph g = build_model(c.model, {1, c.size, c.size});
    for (const std::string algo : {"sequential", "greedy", "hios-lp", "hios-mr", "heft"}) {
      for (int gpus : {1, 2, 3}) {
        INFO(c.model << " " << algo << " on " << gpus << " GPU(s)");
        Schedule s = test::schedule_with(algo, g, gpus);
        std::vector<RankProgram> all = lower_all(g, s);
        std::vector<std::string> problems = check_programs(g, all);
        INFO((problems.empty() ? std::string() : problems[0]));
        CHECK(problems.empty());
        std::vector<int> launches(g.nodes.size(), 0);
        for (const RankProgram& p : all) {
          for (int v : p.launched) ++launches[v];
        }
        for (int v = 1; v < g.size(); ++v) CHECK(launches[v] == 1);
        for (int src = 0; src < gpus; ++src) {
          for (int dst = 0; dst < gpus; ++dst) {
            if (src == dst) continue;
            std::vector<int> sent, received;
            for (const Instr& in : all[src].instrs) {
              if (in.kind == InstrKind::Send && in.peer == dst) sent.push_back(in.node);
            }
            for (const Instr& in : all[dst].instrs) {
              if (in.kind == InstrKind::Recv && in.peer == src) received.push_back(in.node);
            }
            CHECK(sent == received);
            CHECK(sent == send_order(g, s, src, dst));
          }
        }
        int transfers = 0;
        for (const RankProgram& p : all) {
          for (const Instr& in : p.instrs) transfers += in.kind == InstrKind::Send;
        }
        CHECK(transfers == static_cast<int>(s.transfers.size()));
      }
    }
  }
}

TEST_CASE("lowering: host replay with blocking receives never deadlocks and matches the sequential run exactly") {
  // Small sizes: the point is the order of sends and receives, not the arithmetic.
  size_t transfers = 0;
  for (const auto& [model, size] : {std::pair<std::string, int>{"randwire_small", 32}, {"squeezenet", 32}}) {
    Graph g = build_model(model, {1, size, size});
    std::vector<float> input = make_input(g);
    test::LocalJob seq(g, sequential_schedule(g));
    seq.run(input);
    std::vector<float> ref = seq.backends[0]->read_tensor(g.output());
    for (const std::string algo : {"hios-lp", "heft"}) {
      for (int gpus : {2, 3}) {
        INFO(model << " " << algo << " on " << gpus << " GPUs");
        Schedule s = test::schedule_with(algo, g, gpus);
        test::LocalJob job(g, s);
        job.run(input);
        CHECK(job.backends[0]->read_tensor(g.output()) == ref);
        transfers += s.transfers.size();
      }
    }
  }
  CHECK(transfers > 10);  // the replays did move tensors between ranks
}

TEST_CASE("lowering: a receive lead gates each receive on its rank's stage and changes no result") {
  Graph g = build_model("randwire_small", {1, 32, 32});
  std::vector<float> input = make_input(g);
  test::LocalJob seq(g, sequential_schedule(g));
  seq.run(input);
  const std::vector<float> ref = seq.backends[0]->read_tensor(g.output());
  for (int lead : {-1, 0, 1, 2}) {
    INFO("recv_lead " << lead);
    Schedule s = test::schedule_with("hios-lp", g, 2);
    s.meta.recv_lead = lead;
    REQUIRE(!s.transfers.empty());
    std::vector<RankProgram> all = lower_all(g, s);
    std::vector<std::string> problems = check_programs(g, all);
    INFO((problems.empty() ? std::string() : problems[0]));
    CHECK(problems.empty());
    // Waits on a receive stream other than the fork's: the gates. Each waits on an event that
    // stream 0 recorded earlier (where a stage starts).
    int gates = 0;
    for (const RankProgram& p : all) {
      std::map<int, int> recorded_on;  // event -> stream
      for (size_t i = 0; i < p.instrs.size(); ++i) {
        const Instr& in = p.instrs[i];
        if (in.kind == InstrKind::Record) recorded_on[in.event] = in.stream;
        const bool on_recv = in.stream >= 0 && p.streams[size_t(in.stream)].kind == StreamKind::Recv;
        if (in.kind == InstrKind::Wait && on_recv && in.block >= 0) {
          ++gates;
          REQUIRE(recorded_on.count(in.event));
          CHECK(recorded_on[in.event] == 0);
        }
      }
    }
    if (lead < 0) {
      CHECK(gates == 0);
    } else {
      CHECK(gates > 0);
    }
    test::LocalJob job(g, s);
    job.run(input);
    CHECK(job.backends[0]->read_tensor(g.output()) == ref);
  }
}

TEST_CASE("lowering: send fences let sent tensors share memory, never deadlock and change no result") {
  // Host replay with rendezvous sends (data read from the sender's buffer only when received, a
  // fence blocking until its sends are taken) over shared memory plans: a fence placed too early
  // deadlocks, memory reused before its send completed corrupts the output.
  int fences = 0;
  for (const auto& [model, size] : std::vector<std::pair<std::string, int>>{{"randwire_small", 64}, {"nasnet_large", 64}}) {
    Graph g = build_model(model, {1, size, size});
    std::vector<float> input = make_input(g);
    test::LocalJob seq(g, sequential_schedule(g));
    seq.run(input);
    const std::vector<float> ref = seq.backends[0]->read_tensor(g.output());
    for (const auto& [algo, gpus] : std::vector<std::pair<std::string, int>>{{"hios-lp", 2}, {"heft", 3}}) {
      {
        Schedule s = test::schedule_with(algo, g, gpus);
        int64_t unfenced = 0, fenced = 0;
        for (int lead : {-1, 0}) {
          INFO(model << " " << algo << " on " << gpus << " GPUs, recv_lead " << lead);
          s.meta.recv_lead = lead;
          std::vector<RankProgram> all = lower_all(g, s);
          std::vector<std::string> problems = check_programs(g, all);
          INFO((problems.empty() ? std::string() : problems[0]));
          REQUIRE(problems.empty());
          for (int r = 0; r < gpus; ++r) {
            const auto stages = send_fence_stages(g, s, r);
            if (lead < 0) CHECK(stages.empty());
            if (lead == 0) fences += int(stages.size());
          }
          test::LocalJob job(g, s, exec::BackendConfig{}, /*shared=*/true, /*rendezvous_sends=*/true);
          job.run(input);
          CHECK(job.backends[0]->read_tensor(g.output()) == ref);
          int64_t arenas = 0;
          for (const RankProgram& p : job.programs) arenas += p.tensor_memory();
          (lead < 0 ? unfenced : fenced) = arenas;
        }
        CHECK(fenced <= unfenced);
      }
    }
  }
  CHECK(fences > 10);  // the schedules did fence sends
}

TEST_CASE("lowering: link lanes alternate a pair's transfers over streams of their own and change no result") {
  // Host replay with rendezvous sends over shared memory, as for send fences: lanes must not
  // deadlock a fence nor let memory be reused before its send completed.
  Graph g = build_model("nasnet_large", {1, 64, 64});
  std::vector<float> input = make_input(g);
  test::LocalJob seq(g, sequential_schedule(g));
  seq.run(input);
  const std::vector<float> ref = seq.backends[0]->read_tensor(g.output());
  for (const auto& [algo, gpus] : std::vector<std::pair<std::string, int>>{{"hios-lp", 2}, {"heft", 3}}) {
    for (int lanes : {2, 3}) {
      for (int lead : {-1, 0}) {
        INFO(algo << " on " << gpus << " GPUs, " << lanes << " lanes, recv_lead " << lead);
        Schedule s = test::schedule_with(algo, g, gpus);
        s.meta.link_lanes = lanes;
        s.meta.recv_lead = lead;
        std::vector<RankProgram> all = lower_all(g, s);
        std::vector<std::string> problems = check_programs(g, all);
        INFO((problems.empty() ? std::string() : problems[0]));
        REQUIRE(problems.empty());
        // The i-th send of a pair goes on the sender's lane i mod L, on a stream of its own.
        std::map<std::pair<int, int>, int> sent;
        std::set<std::pair<int, int>> used;  // (sender, lane) seen
        for (const RankProgram& p : all) {
          for (const Instr& in : p.instrs) {
            if (in.kind != InstrKind::Send) continue;
            const StreamDesc& sd = p.streams[size_t(in.stream)];
            CHECK(sd.kind == StreamKind::Send);
            CHECK(sd.peer == in.peer);
            CHECK(sd.lane == sent[{p.rank, in.peer}]++ % lanes);
            used.insert({p.rank, sd.lane});
          }
        }
        CHECK(used.size() >= 2);  // more than one lane carried tensors
        test::LocalJob job(g, s, exec::BackendConfig{}, /*shared=*/true, /*rendezvous_sends=*/true);
        job.run(input);
        CHECK(job.backends[0]->read_tensor(g.output()) == ref);
      }
    }
  }
  // The listing names the second lane's streams.
  Schedule s = test::schedule_with("hios-lp", g, 2);
  s.meta.link_lanes = 2;
  CHECK(program_to_text(g, lower(g, s, 0)).find("send->r1/1") != std::string::npos);
}

TEST_CASE("lowering: lowering is deterministic and the listing names nodes and streams") {
  Graph g = build_model("randwire_small", {1, 64, 64});
  Schedule s = test::schedule_with("hios-lp", g, 2);
  for (int r = 0; r < 2; ++r) {
    std::string a = program_to_text(g, lower(g, s, r)), b = program_to_text(g, lower(g, s, r));
    CHECK(a == b);
    CHECK(a.find("rank " + std::to_string(r) + " of 2") != std::string::npos);
    CHECK(a.find("launch ") != std::string::npos);
    CHECK(a.find(r == 0 ? "send->r1" : "send->r0") != std::string::npos);
  }
}

TEST_CASE("lowering: invalid schedules and ranks are rejected with a message naming the problem") {
  Graph g = demo();
  Schedule s = hand_schedule(g);
  SECTION("rank out of range") {
    try {
      lower(g, s, 2);
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(std::string(e.what()).find("rank 2 is out of range") != std::string::npos);
    }
  }
  SECTION("a node missing from the schedule") {
    s.blocks[1][0].pop_back();  // drops b2.out
    CHECK_THROWS_AS(lower(g, s, 0), Error);
  }
  SECTION("a missing transfer") {
    s.transfers.pop_back();
    CHECK_THROWS_AS(lower(g, s, 1), Error);
  }
}

TEST_CASE("lowering: check_programs catches reordered receives, double launches and early waits") {
  Graph g = demo();
  Schedule s = hand_schedule(g);
  std::vector<RankProgram> all = lower_all(g, s);
  REQUIRE(check_programs(g, all).empty());
  SECTION("two receives swapped") {
    // Rank 1 receives the input and b1.out... find two receives on one rank and swap them.
    RankProgram& p = all[1];
    std::vector<size_t> recvs;
    for (size_t i = 0; i < p.instrs.size(); ++i) {
      if (p.instrs[i].kind == InstrKind::Recv) recvs.push_back(i);
    }
    if (recvs.size() < 2) {
      RankProgram& q = all[0];
      recvs.clear();
      for (size_t i = 0; i < q.instrs.size(); ++i) {
        if (q.instrs[i].kind == InstrKind::Recv) recvs.push_back(i);
      }
      REQUIRE(recvs.size() >= 2);
      std::swap(q.instrs[recvs[0]].node, q.instrs[recvs[1]].node);
    } else {
      std::swap(p.instrs[recvs[0]].node, p.instrs[recvs[1]].node);
    }
    CHECK_FALSE(check_programs(g, all).empty());
  }
  SECTION("a node launched twice") {
    RankProgram& p = all[0];
    int launch = index_of(p, [](const Instr& in) { return in.kind == InstrKind::Launch; });
    p.instrs.insert(p.instrs.begin() + launch, p.instrs[launch]);
    CHECK_FALSE(check_programs(g, all).empty());
  }
  SECTION("a wait before its record") {
    RankProgram& p = all[0];
    int wait = index_of(p, [](const Instr& in) { return in.kind == InstrKind::Wait; });
    REQUIRE(wait > 0);
    Instr w = p.instrs[wait];
    p.instrs.erase(p.instrs.begin() + wait);
    int first = index_of(p, [](const Instr& in) { return in.kind != InstrKind::Alloc; });
    p.instrs.insert(p.instrs.begin() + first, w);
    CHECK_FALSE(check_programs(g, all).empty());
  }
}

TEST_CASE("lowering: the sequential reference schedule runs every node on rank 0 in block order") {
  Graph g = build_model("inception_v3", {1, 75, 75});
  Schedule s = sequential_schedule(g);
  REQUIRE(check_schedule(g, s).empty());
  RankProgram p = lower(g, s, 0);
  CHECK(p.launched.size() == static_cast<size_t>(g.size() - 1));
  CHECK(p.num_compute_streams == 1);
  CHECK(p.streams.size() == 1);
  for (const Instr& in : p.instrs) {
    CHECK(in.kind != InstrKind::Send);
    CHECK(in.kind != InstrKind::Recv);
  }
}
