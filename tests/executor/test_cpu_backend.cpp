// The CPU backend: parameters and term assembly wired to the right nodes, memory accounting,
// and misuse reported by name.
#include <string>

#include "executor/backend.hpp"
#include "executor/cpu/kernels.hpp"
#include "executor/program.hpp"
#include "executor/registry.hpp"
#include "run/runner.hpp"
#include "executor/weights.hpp"
#include "graph/json_codec.hpp"
#include "graph/error.hpp"
#include "helpers.hpp"
#include "models/models.hpp"
#include "tests/catch.hpp"

using namespace hios;
using namespace hios::exec;

namespace {

std::unique_ptr<Backend> prepared(const Graph& g, const RankProgram& p, BackendConfig cfg = {}) {
  std::unique_ptr<Backend> b = make_backend("cpu", cfg);
  b->prepare(g, p);
  return b;
}

}  // namespace

TEST_CASE("cpu backend: the demo block equals concat(conv1 + conv2, conv3) computed from the kernels") {
  Graph g = build_model("demo", {1, 5, 5});
  RankProgram p = lower(g, sequential_schedule(g), 0);
  auto b = prepared(g, p);
  std::vector<float> input = make_input(g);
  b->set_input(input);
  for (const Instr& in : p.instrs) {
    if (in.kind == InstrKind::Launch) b->launch(in.node, in.stream);
    if (in.kind == InstrKind::Record) b->record(in.event, in.stream);
    if (in.kind == InstrKind::Wait) b->wait(in.event, in.stream);
  }
  b->synchronize();
  Shape in = g.nodes[0].shape;
  std::vector<std::vector<float>> conv;
  for (const char* name : {"b1.conv1", "b1.conv2", "b1.conv3"}) {
    int v = g.find(name);
    std::vector<OpParams> params = make_node_params(g, v);
    REQUIRE(params.size() == 1);
    Shape out = g.nodes[v].shape;
    std::vector<float> y(static_cast<size_t>(out.numel()));
    cpu::conv2d(g.nodes[v].op.conv(), in, input.data(), out, y.data(), params[0].weight.data(),
                params[0].bias.data());
    CHECK(b->read_tensor(v) == y);
    conv.push_back(y);
  }
  std::vector<float> out = b->read_tensor(g.find("b1.out"));
  size_t plane = conv[0].size();
  REQUIRE(out.size() == 2 * plane);
  for (size_t i = 0; i < plane; ++i) {
    CHECK(out[i] == float(double(conv[0][i]) + double(conv[1][i])));
    CHECK(out[plane + i] == conv[2][i]);
  }
}

namespace {

// Every launch of the sequential schedule, then node `name`'s value.
std::vector<float> run_sequentially(const Graph& g, const std::string& name) {
  RankProgram p = lower(g, sequential_schedule(g), 0);
  auto b = prepared(g, p);
  b->set_input(make_input(g));
  for (const Instr& in : p.instrs) {
    if (in.kind == InstrKind::Launch) b->launch(in.node, in.stream);
    if (in.kind == InstrKind::Record) b->record(in.event, in.stream);
    if (in.kind == InstrKind::Wait) b->wait(in.event, in.stream);
  }
  b->synchronize();
  return b->read_tensor(g.find(name));
}

// x -> conv "a" -> conv "b", and relu(b + a) as a node of its own or in b's epilogue.
Graph skip_connection(bool fused, Activation act) {
  GraphBuilder gb(fused ? "fused" : "unfused", 1, 9, 7);
  const Value x = gb.input(3);
  gb.begin_block("block");
  const Value a = gb.conv("a", {x}, 6, 3, 1, 1, Activation::Relu);
  Op op = conv_op(6, {3, 3}, {1, 1}, {1, 1}, fused ? act : Activation::None);
  Value out;
  if (fused) {
    std::get<ConvAttrs>(op.attrs).residual = true;
    out = gb.node("b", op, {Term{a}, Term{a}});
  } else {
    const Value b = gb.node("b", op, {Term{a}});
    out = act == Activation::None ? gb.node("out", make_op(OpKind::Identity), {Term{b, a}})
                                  : gb.node("out", activation_op(act), {Term{b, a}});
  }
  gb.end_block(out);
  return gb.finish();
}

}  // namespace

TEST_CASE("cpu backend: a residual convolution is bit for bit the convolution, the sum and the activation apart") {
  for (Activation act : {Activation::Relu, Activation::None, Activation::Sigmoid}) {
    INFO(activation_name(act));
    const std::vector<float> apart = run_sequentially(skip_connection(false, act), "out");
    const std::vector<float> fused = run_sequentially(skip_connection(true, act), "b");
    REQUIRE(apart.size() == fused.size());
    CHECK(apart == fused);
  }
}

TEST_CASE("a residual convolution names what is wrong with its operands") {
  GraphBuilder gb("bad", 1, 8, 8);
  const Value x = gb.input(3);
  gb.begin_block("block");
  const Value a = gb.conv("a", {x}, 6, 3, 1, 1);
  Op op = conv_op(4, {3, 3}, {1, 1}, {1, 1});
  std::get<ConvAttrs>(op.attrs).residual = true;
  CHECK_THROWS_WITH(gb.node("b", op, {Term{a}, Term{a}}),
                    Catch::Contains("node 'b': the residual is 1x6x8x8 but the conv gives 1x4x8x8"));
  CHECK_THROWS_WITH(gb.node("c", op, {Term{a}}),
                    Catch::Contains("node 'c': a residual conv takes an input and a residual, got 1"));
}

TEST_CASE("cpu backend: weights are deterministic, seeded, bounded and named per node") {
  Graph g = build_model("demo", {1, 5, 5});
  int v = g.find("b1.conv1");
  std::vector<OpParams> a = make_node_params(g, v), b = make_node_params(g, v);
  CHECK(a[0].weight == b[0].weight);
  CHECK(a[0].bias == b[0].bias);
  CHECK(a[0].weight.size() == size_t(48 * 375 * 9));
  std::vector<OpParams> other = make_node_params(g, g.find("b1.conv2"));
  CHECK(other[0].weight != a[0].weight);
  std::vector<OpParams> seeded = make_node_params(g, v, 1);
  CHECK(seeded[0].weight != a[0].weight);
  float bound = init::weight_bound(375.0 * 9);
  for (float w : a[0].weight) CHECK(std::abs(w) <= bound);
  CHECK(make_input(g) == make_input(g));
}

TEST_CASE("cpu backend: the memory limit names the tensor that does not fit") {
  Graph g = build_model("demo", {1, 15, 15});
  RankProgram p = lower(g, sequential_schedule(g), 0);
  BackendConfig cfg;
  cfg.memory_limit = 100000;  // the 337500-byte input does not fit
  try {
    prepared(g, p, cfg);
    FAIL("no out-of-memory error");
  } catch (const Error& e) {
    std::string msg = e.what();
    CHECK(msg.find("out of memory") != std::string::npos);
    CHECK(msg.find("'input'") != std::string::npos);
    CHECK(msg.find("337500 bytes") != std::string::npos);
  }
  cfg.memory_limit = 0;
  auto b = prepared(g, p, cfg);
  CHECK(b->peak_memory_bytes() >= size_t(p.bytes_allocated()));
}

TEST_CASE("transports: a multi-rank session that names none takes the one-host transport only where every GPU reaches every other") {
  BackendEntry be;
  be.default_transport = "across-hosts";
  be.one_host_transport = "one-host";
  // Devices 0, 1 and 2 reach each other; 3 reaches no one, and no one reaches it.
  be.peer_access = [](int from, int to) { return from != 3 && to != 3; };
  CHECK(default_transport(be, {"h", "h"}, {0, 1}) == "one-host");
  CHECK(default_transport(be, {"h", "h", "h"}, {0, 1, 2}) == "one-host");
  CHECK(default_transport(be, {"h", "h"}, {0, 0}) == "one-host");  // one device, two ranks: no peer needed
  CHECK(default_transport(be, {"h", "g"}, {0, 1}) == "across-hosts");
  CHECK(default_transport(be, {"h", "h", "g"}, {0, 1, 2}) == "across-hosts");
  CHECK(default_transport(be, {"h", "h"}, {0, 3}) == "across-hosts");
  CHECK(default_transport(be, {"h", "h"}, {3, 0}) == "across-hosts");
  be.peer_access = [](int from, int to) { return from < to; };  // one way only
  CHECK(default_transport(be, {"h", "h"}, {0, 1}) == "across-hosts");
  be.peer_access = nullptr;  // a backend that cannot say
  CHECK(default_transport(be, {"h", "h"}, {0, 1}) == "across-hosts");
  be.peer_access = [](int, int) { return true; };
  be.one_host_transport.clear();  // a backend without one (the cpu backend)
  CHECK(default_transport(be, {"h", "h"}, {0, 1}) == "across-hosts");
  CHECK(find_backend("cpu").one_host_transport.empty());
}

TEST_CASE("cpu backend: misuse is an error, never a crash") {
  Graph g = build_model("demo", {1, 5, 5});
  RankProgram p = lower(g, sequential_schedule(g), 0);
  auto b = prepared(g, p);
  CHECK_THROWS_AS(b->launch(g.find("b1.conv1"), 5), Error);  // no stream 5
  CHECK_THROWS_AS(b->wait(0, 0), Error);                     // the program has no events at all
  CHECK_THROWS_AS(b->set_input(std::vector<float>(3)), Error);
  CHECK_THROWS_AS(make_backend("cpu", BackendConfig{-1, "tf32"}), Error);
  CHECK_THROWS_AS(make_backend("no-such-backend", BackendConfig{}), Error);
  try {
    make_backend("cuda", BackendConfig{});
  } catch (const Error& e) {
    // Without CUDA the name is still recognised and the message says why it is missing.
    CHECK(std::string(e.what()).find("cuda") != std::string::npos);
  }
}

TEST_CASE("cpu backend: comparisons and tolerances") {
  Diff same = compare({1, -2, 3}, {1, -2, 3});
  CHECK(same.max_abs == 0);
  CHECK(same.max_rel == 0);
  Diff d = compare({1, -2, 3.5f}, {1, -2, 4});
  CHECK(d.max_abs == Approx(0.5));
  CHECK(d.max_rel == Approx(0.125));
  Diff nan = compare({std::nanf("")}, {1});
  CHECK(nan.max_rel > 1e30);
  CHECK_THROWS_AS(compare({1}, {1, 2}), Error);
  CHECK(tolerance("fp32") < tolerance("tf32"));
  CHECK(tolerance("tf32") < tolerance("bf16"));  // bf16 keeps 7 mantissa bits, fp16 and TF32 10
  CHECK(tolerance("fp16") < tolerance("bf16"));
  CHECK_THROWS_AS(tolerance("int8"), Error);
}

TEST_CASE("cpu backend: a one-rank run through the runner verifies exactly") {
  Graph g = build_model("squeezenet", {1, 32, 32});
  Schedule s = test::schedule_with("hios-lp", g, 1);
  RunOptions opt;
  opt.warmup = 1;
  opt.number = 1;
  opt.repeat = 2;
  opt.verify = true;
  opt.verify_nodes = true;
  auto comm = make_self_comm();
  RunReport r = run_schedule(g, s, opt, *comm);
  CHECK(r.ok);
  REQUIRE(r.verify.size() == 2);
  CHECK(r.verify[0].diff.max_abs == 0);
  int64_t elements = 0;  // every node but the input is compared once
  for (int v = 1; v < g.size(); ++v) elements += g.nodes[v].shape.numel();
  CHECK(r.verify[1].diff.count == elements);
  CHECK(r.repeats_ms.size() == 2);
  CHECK(r.ranks.size() == 1);
  std::string table = report_to_table(r);
  CHECK(table.find("# correctness: OK") != std::string::npos);
  CHECK(table.find("share GPU") == std::string::npos);  // CPU ranks have no device index
  SECTION("ranks that share a GPU are named in the table, ranks on GPUs of their own are not") {
    RunReport shared = r;
    shared.ranks.assign(3, r.ranks[0]);
    for (int k = 0; k < 3; ++k) {
      shared.ranks[size_t(k)].rank = k;
      shared.ranks[size_t(k)].host = "node1";
      shared.ranks[size_t(k)].device_index = k;
    }
    CHECK(report_to_table(shared).find("share GPU") == std::string::npos);
    shared.ranks[2].device_index = 0;
    const std::string t = report_to_table(shared);
    CHECK(t.find("# note: ranks 0 and 2 share GPU 0 on host node1") != std::string::npos);
    shared.ranks[2].host = "node2";  // the same index on another host is another GPU
    CHECK(report_to_table(shared).find("share GPU") == std::string::npos);
  }
  CHECK(report_to_json(r)["ok"].get<bool>());
  SECTION("a tuned schedule runs over the transport its tune measured, unless told otherwise") {
    std::string other;  // a transport of this build that is not the cpu backend's default
    for (const std::string& t : transport_names()) {
      if (t != "mpi-host") other = t;
    }
    if (other.empty()) HIOS_SKIP("this build has no transport but mpi-host");
    Schedule tuned = s;
    tuned.meta.tune = json{{"identity", {{"backend", "cpu"}, {"transport", other + " 1.2.3"}}}};
    CHECK(run_schedule(g, tuned, opt, *comm).transport == other + " (unused: one rank)");
    RunOptions told = opt;
    told.transport = "mpi-host";
    CHECK(run_schedule(g, tuned, told, *comm).transport == "mpi-host (unused: one rank)");
    tuned.meta.tune["identity"]["backend"] = "cuda";  // tuned for another backend: its default
    CHECK(run_schedule(g, tuned, opt, *comm).transport == "mpi-host (unused: one rank)");
    tuned.meta.tune["identity"]["transport"] = "none (one rank)";
    tuned.meta.tune["identity"]["backend"] = "cpu";
    CHECK(run_schedule(g, tuned, opt, *comm).transport == "mpi-host (unused: one rank)");
  }
  SECTION("the job size must match the schedule") {
    Schedule s2 = test::schedule_with("hios-lp", g, 2);
    CHECK_THROWS_AS(run_schedule(g, s2, opt, *comm), Error);
  }
  SECTION("injected failures throw on the named rank") {
    opt.inject_failure = "0:prepare";
    CHECK_THROWS_AS(run_schedule(g, s, opt, *comm), Error);
    opt.inject_failure = "0:nowhere";
    CHECK_THROWS_AS(run_schedule(g, s, opt, *comm), Error);
  }
}

// Without --layout, a backend with a layout for products stores a graph in it where matmul and
// attention do most of the arithmetic (a transformer), and keeps its image layout for a CNN.
TEST_CASE("a backend's default layout: the one for products where matmul and attention do most of the work") {
  BackendEntry be;
  be.default_layout = "nhwc";
  be.default_layout_for_products = "nchw";
  CHECK(default_layout(be, build_model("inception_v3", {1, 299, 299})) == "nhwc");
  const Graph attention = graph_from_json(nlohmann::json::parse(R"({
    "format": "hios-graph", "version": 1, "name": "attention", "batch": 1, "height": 8, "width": 16, "dtype": "float32",
    "input": {"name": "image", "op": "input", "channels": 4, "shape": [1, 4, 8, 16]},
    "outputs": ["att"],
    "blocks": [{"name": "b", "exit": "att", "nodes": [
      {"name": "k", "op": "conv", "out_channels": 4, "kernel": [1, 1], "stride": [1, 1], "padding": [0, 0],
       "dilation": [1, 1], "groups": 1, "bias": true, "activation": "none", "inputs": [["image"]], "shape": [1, 4, 8, 16]},
      {"name": "att", "op": "attention", "scale": 0.25, "inputs": [["image"], ["k"], ["image"]], "shape": [1, 4, 8, 16]}
    ]}]})"));
  CHECK(default_layout(be, attention) == "nchw");
  be.default_layout_for_products.clear();
  CHECK(default_layout(be, attention) == "nhwc");
}
