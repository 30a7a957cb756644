// Buffer sharing (executor/memory_plan.hpp): every plan passes the independent check, saves
// memory, keeps the input and output to themselves, and gives the same output as separate
// buffers under any interleaving of the streams that the program's events allow.
#include <algorithm>
#include <string>

#include "executor/backend.hpp"
#include "executor/memory_plan.hpp"
#include "executor/program.hpp"
#include "executor/registry.hpp"
#include "executor/weights.hpp"
#include "graph/json_codec.hpp"
#include "helpers.hpp"
#include "models/models.hpp"
#include "tests/catch.hpp"

using namespace hios;
using namespace hios::exec;

namespace {

Schedule one_gpu(const std::string& algo, const Graph& g, int streams) {
  auto cost = make_analytic_cost_model(test::test_device_preset());
  SchedulerOptions opt;
  opt.num_gpus = 1;
  opt.max_streams = streams;
  return run_algorithm(algo, g, *cost, opt);
}

// Runs one rank's single-GPU program on the CPU backend, picking at every step a random stream
// whose next instruction may start (a Wait only once its event is recorded): one of the orders
// a GPU could run the streams in. Returns the output.
std::vector<float> run_interleaved(const Graph& g, const RankProgram& p, uint32_t seed) {
  REQUIRE(p.num_ranks == 1);
  std::unique_ptr<Backend> b = make_backend("cpu", BackendConfig{});
  b->prepare(g, p);
  b->set_input(make_input(g));
  const bool finished = test::interleave(p, seed, [&](const Instr& in) {
    switch (in.kind) {
      case InstrKind::Launch: b->launch(in.node, in.stream); break;
      case InstrKind::Record: b->record(in.event, in.stream); break;
      case InstrKind::Wait: b->wait(in.event, in.stream); break;
      default: break;
    }
    return true;
  });
  REQUIRE(finished);
  return b->read_tensor(g.output());
}

}  // namespace

TEST_CASE("memory plan: every schedule's shared plan is sound and smaller than separate buffers") {
  struct Case {
    const char* model;
    int64_t size;
  };
  for (const Case& c : {Case{"demo", 15}, Case{"inception_v3", 75}, Case{"randwire_small", 64},
                        Case{"nasnet_large", 96}}) {
    const Graph g = build_model(c.model, ModelParams{1, c.size, c.size});
    std::vector<std::pair<std::string, Schedule>> schedules = {
        {"sequential", sequential_schedule(g)},
        {"hios-lp 1 GPU 4 streams", one_gpu("hios-lp", g, 4)},
        {"ios 1 GPU", one_gpu("ios", g, 4)},
        {"hios-lp 2 GPUs", test::schedule_with("hios-lp", g, 2)},
        {"heft 3 GPUs", test::schedule_with("heft", g, 3)},
    };
    for (const auto& [label, s] : schedules) {
      for (RankProgram p : lower_all(g, s)) {
        INFO(c.model << " " << label << " rank " << p.rank);
        const int64_t separate = p.bytes_allocated();
        share_buffers(g, p);
        CHECK(check_shared_buffers(g, p).empty());
        CHECK((p.arena_bytes > 0) == (separate > 0));  // a rank the schedule leaves idle needs none
        CHECK(p.arena_bytes <= separate + 256 * int64_t(p.instrs.size()));  // alignment padding at most
        // Deterministic, and planning again changes nothing.
        RankProgram again = p;
        share_buffers(g, again);
        CHECK(again.arena_bytes == p.arena_bytes);
        for (size_t i = 0; i < p.instrs.size(); ++i) CHECK(again.instrs[i].offset == p.instrs[i].offset);
        // One GPU running the whole graph of a real model must at least halve its memory.
        if (std::string(c.model) != "demo" && s.meta.num_gpus == 1) CHECK(p.arena_bytes * 2 < separate);
      }
    }
  }
}

// Token ids under 16-bit storage: the int64 graph input keeps its 8-byte elements in a buffer of
// its own (offset -1), every float tensor halves; an integer tensor that is not a graph input is
// refused, naming it.
TEST_CASE("memory plan: a 16-bit program keeps an int64 graph input's size, outside the arena") {
  auto graph = [](bool computed_int) {
    std::string text = R"({"format": "hios-graph", "version": 1, "name": "ids", "batch": 1, "height": 1, "width": 1,
      "dtype": "float32", "input": {"name": "ids", "op": "input", "dims": [1, 16], "dtype": "int64", "shape": [1, 16]},
      "outputs": ["out"], "blocks": [{"name": "b", "exit": "out", "nodes": [
        {"name": "tok", "op": "gather", "axis": 0, "inputs": [["ids"]],
         "constants": [{"operand": 0, "dims": [10, 8], "dtype": "float32"}], "shape": [1, 16, 8]},)";
    text += computed_int ? R"(
        {"name": "again", "op": "cast", "to": "int64", "inputs": [["tok"]], "shape": [1, 16, 8], "dtype": "int64"},
        {"name": "out", "op": "cast", "to": "float32", "inputs": [["again"]], "shape": [1, 16, 8]}]}]})"
                         : R"(
        {"name": "out", "op": "activation", "activation": "tanh", "inputs": [["tok"]], "shape": [1, 16, 8]}]}]})";
    return graph_from_json(json::parse(text));
  };
  const Graph g = graph(false);
  for (RankProgram p : lower_all(g, test::schedule_with("sequential", g, 1))) {
    share_buffers(g, p);
    const RankProgram h = with_element_bytes(g, p, 2);
    REQUIRE(h.instrs.size() == p.instrs.size());
    int ints = 0;
    for (size_t i = 0; i < p.instrs.size(); ++i) {
      if (p.instrs[i].kind != InstrKind::Alloc) continue;
      const bool id = g.nodes[size_t(p.instrs[i].node)].dtype == DType::I64;
      ints += id;
      CHECK(h.instrs[i].bytes == (id ? p.instrs[i].bytes : p.instrs[i].bytes / 2));
      if (id) CHECK(h.instrs[i].offset == -1);
    }
    CHECK(ints == 1);
  }
  const Graph bad = graph(true);
  for (RankProgram p : lower_all(bad, test::schedule_with("sequential", bad, 1))) {
    const std::string err = test::error_of([&] { (void)with_element_bytes(bad, p, 2); });
    INFO(err);
    CHECK(err.find("node 'again'") != std::string::npos);
    CHECK(err.find("int64") != std::string::npos);
  }
}

TEST_CASE("memory plan: a 16-bit program halves every size and keeps the shared plan's overlaps") {
  const Graph g = build_model("inception_v3", ModelParams{1, 75, 75});
  for (RankProgram p : lower_all(g, test::schedule_with("hios-lp", g, 2))) {
    share_buffers(g, p);
    const RankProgram h = with_element_bytes(p, 2);
    CHECK(with_element_bytes(p, 4).arena_bytes == p.arena_bytes);  // float32 storage: unchanged
    REQUIRE(h.instrs.size() == p.instrs.size());
    CHECK(h.arena_bytes * 2 == p.arena_bytes);
    int sends = 0;
    for (size_t i = 0; i < p.instrs.size(); ++i) {
      const Instr& a = p.instrs[i];
      const Instr& b = h.instrs[i];
      if (a.kind != InstrKind::Alloc && a.kind != InstrKind::Send && a.kind != InstrKind::Recv) {
        CHECK(b.bytes == a.bytes);
        continue;
      }
      sends += a.kind != InstrKind::Alloc;
      CHECK(b.bytes * 2 == a.bytes);
      CHECK(b.bytes == g.nodes[size_t(a.node)].shape.numel() * 2);
      if (a.kind == InstrKind::Alloc) {
        CHECK(b.offset * 2 == a.offset);
        CHECK(b.offset % 16 == 0);  // vector and cuDNN accesses stay aligned
        CHECK(b.offset + b.bytes <= h.arena_bytes);
      }
    }
    CHECK(sends > 0);  // the two-GPU schedule moves tensors, and their messages shrink too
    // Two tensors share bytes in the 16-bit plan exactly when they did in the float32 one.
    for (size_t i = 0; i < p.instrs.size(); ++i) {
      for (size_t j = i + 1; j < p.instrs.size(); ++j) {
        const Instr &a = p.instrs[i], &b = p.instrs[j], &ha = h.instrs[i], &hb = h.instrs[j];
        if (a.kind != InstrKind::Alloc || b.kind != InstrKind::Alloc) continue;
        const bool overlap = a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
        const bool half_overlap = ha.offset < hb.offset + hb.bytes && hb.offset < ha.offset + ha.bytes;
        CHECK(overlap == half_overlap);
      }
    }
  }
}

TEST_CASE("memory plan: the graph input and output never share their memory") {
  const Graph g = build_model("inception_v3", ModelParams{1, 75, 75});
  RankProgram p = lower(g, one_gpu("hios-lp", g, 4), 0);
  share_buffers(g, p);
  auto range = [&](int node) {
    for (const Instr& in : p.instrs) {
      if (in.kind == InstrKind::Alloc && in.node == node) return std::make_pair(in.offset, in.offset + in.bytes);
    }
    FAIL("no Alloc for node " << node);
    return std::make_pair(int64_t(0), int64_t(0));
  };
  for (int pinned : {g.input(), g.output()}) {
    const auto [b0, e0] = range(pinned);
    for (const Instr& in : p.instrs) {
      if (in.kind != InstrKind::Alloc || in.node == pinned) continue;
      INFO(g.nodes[size_t(pinned)].name << " vs " << g.nodes[size_t(in.node)].name);
      CHECK((in.offset + in.bytes <= b0 || e0 <= in.offset));
    }
  }
}

TEST_CASE("memory plan: the check catches an unsound plan") {
  const Graph g = build_model("inception_v3", ModelParams{1, 75, 75});
  RankProgram p = lower(g, one_gpu("hios-lp", g, 4), 0);
  share_buffers(g, p);
  REQUIRE(check_shared_buffers(g, p).empty());
  // Two tensors of parallel branches of the first inception block that its concat reads, so
  // live at once whatever the schedule: put the second over the first.
  RankProgram bad = p;
  int a = -1, b = -1;
  for (Instr& in : bad.instrs) {
    if (in.kind != InstrKind::Alloc) continue;
    if (g.nodes[size_t(in.node)].name == "Mixed_5b.branch1x1") a = int(&in - bad.instrs.data());
    if (g.nodes[size_t(in.node)].name == "Mixed_5b.branch_pool") b = int(&in - bad.instrs.data());
  }
  REQUIRE(a >= 0);
  REQUIRE(b >= 0);
  bad.instrs[size_t(b)].offset = bad.instrs[size_t(a)].offset;
  const std::vector<std::string> errs = check_shared_buffers(g, bad);
  REQUIRE_FALSE(errs.empty());
  CHECK(errs[0].find("overlap in memory") != std::string::npos);
  // Run, the unsound plan computes something else (the second branch overwrites the first).
  const std::vector<float> ref = run_interleaved(g, p, 0);
  CHECK(run_interleaved(g, bad, 0) != ref);
  // And an offset past the arena's end.
  RankProgram outside = p;
  outside.instrs[size_t(a)].offset = outside.arena_bytes;
  CHECK_FALSE(check_shared_buffers(g, outside).empty());
}

TEST_CASE("memory plan: shared buffers give the separate buffers' output under any stream interleaving") {
  for (const auto& [model, size] : {std::pair<const char*, int64_t>{"inception_v3", 75}, {"randwire_small", 64},
                                     {"nasnet_large", 64}}) {
    const Graph g = build_model(model, ModelParams{1, size, size});
    const RankProgram separate = lower(g, one_gpu("hios-lp", g, 4), 0);
    REQUIRE(separate.num_compute_streams > 1);
    RankProgram shared = separate;
    share_buffers(g, shared);
    const std::vector<float> ref = run_interleaved(g, separate, 0);
    for (uint32_t seed = 1; seed <= 3; ++seed) {
      INFO(model << " interleaving seed " << seed);
      CHECK(run_interleaved(g, shared, seed) == ref);
    }
  }
}

// Two branches of one image, each reshaped (one twice, then transposed) and summed: in NCHW
// storage the three reshapes are views of their inputs (one address, no copy) and the result
// is the separate buffers' under any interleaving; in NHWC the image's reshapes are not views
// (its elements are not in row-major order there); the check catches a view moved away.
TEST_CASE("memory plan: reshapes of row-major tensors are views of their inputs, and change no result") {
  const Graph g = graph_from_json(nlohmann::json::parse(R"({
    "format": "hios-graph", "version": 1, "name": "views", "batch": 1, "height": 8, "width": 16, "dtype": "float32",
    "input": {"name": "image", "op": "input", "channels": 4, "shape": [1, 4, 8, 16]},
    "outputs": ["sum"],
    "blocks": [{"name": "b", "exit": "sum", "nodes": [
      {"name": "a", "op": "activation", "activation": "relu", "inputs": [["image"]], "shape": [1, 4, 8, 16]},
      {"name": "r1", "op": "reshape", "dims": [4, 8, 16], "inputs": [["a"]], "shape": [4, 8, 16]},
      {"name": "r2", "op": "reshape", "dims": [32, 16], "inputs": [["r1"]], "shape": [32, 16]},
      {"name": "t", "op": "transpose", "perm": [1, 0], "inputs": [["r2"]], "shape": [16, 32]},
      {"name": "b", "op": "activation", "activation": "tanh", "inputs": [["image"]], "shape": [1, 4, 8, 16]},
      {"name": "rb", "op": "reshape", "dims": [16, 32], "inputs": [["b"]], "shape": [16, 32]},
      {"name": "sum", "op": "add", "inputs": [["t"], ["rb"]], "shape": [16, 32]}
    ]}]})"));
  const RankProgram separate = lower(g, one_gpu("hios-lp", g, 4), 0);
  RankProgram shared = separate;
  share_buffers(g, shared, memory_plan_options("nchw", g));
  REQUIRE(check_shared_buffers(g, shared).empty());
  std::vector<ArenaView> want{{g.find("r1"), g.find("a"), 0}, {g.find("r2"), g.find("r1"), 0},
                               {g.find("rb"), g.find("b"), 0}};
  std::vector<ArenaView> got = shared.views;
  std::sort(want.begin(), want.end());
  std::sort(got.begin(), got.end());
  CHECK(got == want);
  CHECK(program_to_text(g, shared).find("# tensor views: 3") != std::string::npos);
  const std::vector<float> ref = run_interleaved(g, separate, 0);
  for (uint32_t seed = 0; seed <= 3; ++seed) {
    INFO("interleaving seed " << seed);
    CHECK(run_interleaved(g, shared, seed) == ref);
  }
  // NHWC: a and b are channels-last images; r2 is a view of r1 still.
  RankProgram nhwc = separate;
  share_buffers(g, nhwc, memory_plan_options("nhwc", g));
  REQUIRE(check_shared_buffers(g, nhwc).empty());
  CHECK(nhwc.views == std::vector<ArenaView>{{g.find("r2"), g.find("r1"), 0}});
  // A view away from its input's address.
  RankProgram moved = shared;
  for (Instr& in : moved.instrs) {
    if (in.kind == InstrKind::Alloc && in.node == g.find("rb")) in.offset = moved.arena_bytes;
  }
  moved.arena_bytes += 4096;
  const std::vector<std::string> errs = check_shared_buffers(g, moved);
  REQUIRE_FALSE(errs.empty());
  CHECK(errs[0].find("not at its offset from its input's address") != std::string::npos);
}

// A transformer's packed projection: [3, 8, 16] computed, then Q, K and V gathered as indices
// 0, 1 and 2 of its leading axis. Each is a view at its index's bytes (8 x 16 floats: 512
// bytes apart); a gather along the second axis, whose rows are not one run, copies. The result
// is the separate buffers' under any interleaving, and the check catches a wrong offset.
TEST_CASE("memory plan: a gather of one index along a leading axis is a view at that index's bytes") {
  nlohmann::json j = nlohmann::json::parse(R"({
    "format": "hios-graph", "version": 1, "name": "qkv", "batch": 1, "height": 8, "width": 16, "dtype": "float32",
    "input": {"name": "image", "op": "input", "channels": 3, "shape": [1, 3, 8, 16]},
    "outputs": ["sum"],
    "blocks": [{"name": "b", "exit": "sum", "nodes": [
      {"name": "a", "op": "activation", "activation": "tanh", "inputs": [["image"]], "shape": [1, 3, 8, 16]},
      {"name": "packed", "op": "reshape", "dims": [3, 8, 16], "inputs": [["a"]], "shape": [3, 8, 16]},
      {"name": "q", "op": "gather", "axis": 0, "inputs": [["packed"]], "shape": [8, 16]},
      {"name": "k", "op": "gather", "axis": 0, "inputs": [["packed"]], "shape": [8, 16]},
      {"name": "v", "op": "gather", "axis": 0, "inputs": [["packed"]], "shape": [8, 16]},
      {"name": "row", "op": "gather", "axis": 1, "inputs": [["packed"]], "shape": [3, 16]},
      {"name": "qk", "op": "add", "inputs": [["q"], ["k"]], "shape": [8, 16]},
      {"name": "qkv", "op": "add", "inputs": [["qk"], ["v"]], "shape": [8, 16]},
      {"name": "rows", "op": "reduce", "fn": "sum", "axes": [0], "keepdims": false, "inputs": [["row"]], "shape": [16]},
      {"name": "sum", "op": "binary", "fn": "add", "inputs": [["qkv"], ["rows"]], "shape": [8, 16]}
    ]}]})");
  nlohmann::json& nodes = j["blocks"][0]["nodes"];
  const std::vector<std::pair<int, int>> index{{2, 0}, {3, 1}, {4, -1}, {5, 5}};  // v's -1 is index 2
  for (const auto& [at, i] : index) {
    nodes[size_t(at)]["constants"] =
        nlohmann::json::array({{{"operand", 1}, {"dims", nlohmann::json::array()}, {"dtype", "int64"}, {"values", {i}}}});
  }
  const Graph g = graph_from_json(j);
  const RankProgram separate = lower(g, one_gpu("hios-lp", g, 4), 0);
  RankProgram shared = separate;
  share_buffers(g, shared, memory_plan_options("nchw", g));
  REQUIRE(check_shared_buffers(g, shared).empty());
  std::vector<ArenaView> want{{g.find("packed"), g.find("a"), 0}, {g.find("q"), g.find("packed"), 0},
                               {g.find("k"), g.find("packed"), 512}, {g.find("v"), g.find("packed"), 1024}};
  std::vector<ArenaView> got = shared.views;
  std::sort(want.begin(), want.end());
  std::sort(got.begin(), got.end());
  CHECK(got == want);
  const std::vector<float> ref = run_interleaved(g, separate, 0);
  for (uint32_t seed = 0; seed <= 3; ++seed) {
    INFO("interleaving seed " << seed);
    CHECK(run_interleaved(g, shared, seed) == ref);
  }
  // In 16-bit storage the offsets halve with the sizes and stay 256-byte aligned.
  const RankProgram half = with_element_bytes(shared, 2);
  REQUIRE(half.views.size() == 4);
  for (const ArenaView& v : half.views) CHECK(v.offset % 256 == 0);
  // k recorded at v's offset.
  RankProgram wrong = shared;
  for (ArenaView& v : wrong.views) {
    if (v.node == g.find("k")) v.offset = 1024;
  }
  const std::vector<std::string> errs = check_shared_buffers(g, wrong);
  REQUIRE_FALSE(errs.empty());
  CHECK(errs[0].find("not a view of that tensor at offset 1024") != std::string::npos);
}
