// Schedule JSON (round trip, strict loading) and check_schedule (every kind of violation).
#include <algorithm>
#include <fstream>
#include <string>

#include "graph/error.hpp"
#include "graph/json_codec.hpp"
#include "models/models.hpp"
#include "scheduler/schedule.hpp"
#include "tests/catch.hpp"
#include "tests/scheduler/helpers.hpp"

#include <sstream>

using namespace hios;
using test::grp;

namespace {

Graph demo() { return build_model("demo", ModelParams{}); }

// Two GPUs: conv3 of each block on GPU 1, everything else on GPU 0 with conv1 and conv2 on two
// streams. It needs the input on GPU 1, both conv3 outputs back on GPU 0 and b1.out on GPU 1.
Schedule two_gpu(const Graph& g) {
  Schedule s = make_schedule_skeleton(g, 2);
  s.meta.algorithm = "hand";
  s.meta.max_streams = 2;
  s.meta.params = json{{"note", "built by a test"}};
  s.meta.device = "h200";
  s.meta.cost_model = "analytic";
  s.meta.predicted_ms = 0.125;
  s.meta.lower_bound_ms = 0.0625;
  s.meta.search_seconds = 0.001;
  for (int b = 0; b < 2; ++b) {
    std::string p = "b" + std::to_string(b + 1) + ".";
    Stage s0;
    s0.groups = {grp(g, {(p + "conv1").c_str()}), grp(g, {(p + "conv2").c_str()})};
    Stage s1;
    s1.groups = {grp(g, {(p + "out").c_str()})};
    Stage r0;
    r0.groups = {grp(g, {(p + "conv3").c_str()})};
    s.blocks[b][0] = {s0, s1};
    s.blocks[b][1] = {r0};
  }
  s.derive_transfers(g);
  return s;
}

bool has_problem(const std::vector<std::string>& problems, const std::string& prefix, const std::string& word = "") {
  return std::any_of(problems.begin(), problems.end(), [&](const std::string& p) {
    return p.rfind(prefix, 0) == 0 && (word.empty() || p.find(word) != std::string::npos);
  });
}

std::string load_error(const Graph& g, const json& j) {
  try {
    schedule_from_json(g, j);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("derive_transfers lists each (tensor, destination) once, plus the output gather") {
  Graph g = demo();
  Schedule s = two_gpu(g);
  std::vector<Transfer> want = {{g.input(), 0, 1}, {g.find("b1.conv3"), 1, 0}, {g.find("b1.out"), 0, 1},
                                {g.find("b2.conv3"), 1, 0}};
  std::sort(want.begin(), want.end(), [](const Transfer& a, const Transfer& b) { return a.node < b.node; });
  CHECK(s.transfers == want);
  CHECK(s.gpu_of(g)[g.find("b2.conv3")] == 1);
  CHECK(s.gpu_of(g)[g.find("b2.out")] == 0);
  CHECK(s.num_stages() == 6);
  CHECK(check_schedule(g, s).empty());

  // Moving the last node to GPU 1 makes the output travel home.
  Schedule t = s;
  t.blocks[1][0].pop_back();
  t.blocks[1][1].push_back(Stage{{grp(g, {"b2.out"})}});
  t.derive_transfers(g);
  CHECK(std::count(t.transfers.begin(), t.transfers.end(), Transfer{g.find("b2.out"), 1, 0}) == 1);
  CHECK(check_schedule(g, t).empty());
}

TEST_CASE("schedule text round-trips byte for byte") {
  Graph g = demo();
  Schedule s = two_gpu(g);
  std::string text = schedule_to_text(g, s);
  Schedule back = schedule_from_json(g, parse_json_text(text, "test"));
  CHECK(schedule_to_text(g, back) == text);
  CHECK(back.transfers == s.transfers);
  CHECK(back.meta.params == s.meta.params);
  CHECK(back.meta.predicted_ms == s.meta.predicted_ms);
  CHECK(back.meta.graph_digest == graph_digest(g));
  // One stage per line, nodes by name.
  CHECK(text.find("        [[\"b1.conv1\"], [\"b1.conv2\"]],\n") != std::string::npos);

  SECTION("through a file") {
    std::string file = std::string(HIOS_BINARY_DIR) + "/test_schedule_roundtrip.json";
    save_schedule(g, s, file);
    Schedule f = load_schedule(g, file);
    CHECK(schedule_to_text(g, f) == text);
    std::remove(file.c_str());
  }
  SECTION("an empty single-GPU skeleton") {
    Schedule e = make_schedule_skeleton(g, 1);
    std::string et = schedule_to_text(g, e);
    CHECK(schedule_to_text(g, schedule_from_json(g, parse_json_text(et, "t"))) == et);
  }
}

TEST_CASE("loading names the JSON path of what is wrong") {
  Graph g = demo();
  json j = schedule_to_json(g, two_gpu(g));

  SECTION("unknown node") {
    j["blocks"][0]["gpus"][1][0][0][0] = "b1.conv9";
    std::string e = load_error(g, j);
    CHECK(e.find("$.blocks[0].gpus[1][0][0][0]") != std::string::npos);
    CHECK(e.find("unknown node 'b1.conv9'") != std::string::npos);
  }
  SECTION("unknown key") {
    j["meta"]["gpu_count"] = 2;
    CHECK(load_error(g, j) == "$.meta.gpu_count: unknown key");
    json k = schedule_to_json(g, two_gpu(g));
    k["transfers"][0]["bytes"] = 4;
    CHECK(load_error(g, k) == "$.transfers[0].bytes: unknown key");
  }
  SECTION("wrong type") {
    j["meta"]["gpus"] = "2";
    CHECK(load_error(g, j) == "$.meta.gpus: expected an integer, got string");
    json k = schedule_to_json(g, two_gpu(g));
    k["blocks"][1]["gpus"][0][0] = "b2.conv1";
    CHECK(load_error(g, k) == "$.blocks[1].gpus[0][0]: expected an array, got string");
  }
  SECTION("digest of another graph") {
    Graph other = build_model("demo", ModelParams{2, 0, 0});
    std::string e = load_error(other, j);
    CHECK(e.find("schedule was made for graph 'demo' (digest " + graph_digest(g) + ") but this graph is 'demo' (digest " +
                  graph_digest(other) + ")") != std::string::npos);
  }
  SECTION("block list that does not match the graph") {
    j["blocks"].erase(1);
    CHECK(load_error(g, j).find("$.blocks: has 1 blocks but graph 'demo' has 2") != std::string::npos);
    json k = schedule_to_json(g, two_gpu(g));
    k["blocks"][1]["name"] = "block7";
    CHECK(load_error(g, k).find("$.blocks[1].name: is 'block7'") != std::string::npos);
  }
  SECTION("format and version") {
    j["format"] = "hios-graph";
    CHECK(load_error(g, j).find("$.format") != std::string::npos);
    json k = schedule_to_json(g, two_gpu(g));
    k["version"] = 2;
    CHECK(load_error(g, k).find("$.version: unsupported version 2") != std::string::npos);
  }
  SECTION("malformed JSON") {
    std::string file = std::string(HIOS_BINARY_DIR) + "/test_schedule_malformed.json";
    {
      std::ofstream out(file);
      out << "{\"format\": \"hios-schedule\", \"version\": 1,";
    }
    std::string e;
    try {
      load_schedule(g, file);
    } catch (const Error& err) {
      e = err.what();
    }
    CHECK(e.find("test_schedule_malformed.json: malformed JSON at byte") != std::string::npos);
    std::remove(file.c_str());
  }
}

TEST_CASE("check_schedule names each kind of violation") {
  Graph g = demo();
  Schedule s = two_gpu(g);
  REQUIRE(check_schedule(g, s).empty());
  const int conv1 = g.find("b1.conv1"), conv3 = g.find("b1.conv3"), out1 = g.find("b1.out");

  SECTION("missing node") {
    s.blocks[0][0][0].groups.pop_back();  // drop b1.conv2
    auto p = check_schedule(g, s);
    CHECK(has_problem(p, "missing node:", "'b1.conv2'"));
  }
  SECTION("node scheduled twice") {
    s.blocks[0][0][0].groups[1].nodes.push_back(conv1);
    auto p = check_schedule(g, s);
    CHECK(has_problem(p, "duplicate node:", "'b1.conv1' is scheduled twice"));
  }
  SECTION("consumer in an earlier stage than its producer") {
    std::swap(s.blocks[0][0][0], s.blocks[0][0][1]);
    auto p = check_schedule(g, s);
    CHECK(has_problem(p, "dependency order:", "which runs in a later stage"));
  }
  SECTION("consumer in the same stage on another stream") {
    s.blocks[0][0][0].groups.push_back(s.blocks[0][0][1].groups[0]);
    s.blocks[0][0].pop_back();
    s.meta.max_streams = 3;
    auto p = check_schedule(g, s);
    CHECK(has_problem(p, "dependency order:", "runs concurrently in the same stage"));
  }
  SECTION("consumer before its producer in one group") {
    s.blocks[0][0][0].groups[0].nodes.insert(s.blocks[0][0][0].groups[0].nodes.begin(), out1);
    s.blocks[0][0].pop_back();
    auto p = check_schedule(g, s);
    CHECK(has_problem(p, "dependency order:", "comes after it in the same group"));
  }
  SECTION("cross-GPU deadlock") {
    // Two chains x->a->c and x->b->d. GPU 0 runs d then a; GPU 1 runs c then b. Each GPU's
    // first stage waits for the other GPU's second stage.
    GraphBuilder gb("cross", 1, 8, 8);
    Value x = gb.input(4);
    gb.begin_block("blk");
    Value a = gb.conv("a", {x}, 4, 3, 1, 1);
    Value bb = gb.conv("b", {x}, 4, 3, 1, 1);
    Value c = gb.conv("c", {a}, 4, 3, 1, 1);
    Value d = gb.conv("d", {bb}, 4, 3, 1, 1);
    gb.end_block(gb.concat("out", {c, d}));
    Graph cg = gb.finish();
    Schedule t = make_schedule_skeleton(cg, 2);
    t.blocks[0][0] = {Stage{{grp(cg, {"d"})}}, Stage{{grp(cg, {"a"})}}, Stage{{grp(cg, {"out"})}}};
    t.blocks[0][1] = {Stage{{grp(cg, {"c"})}}, Stage{{grp(cg, {"b"})}}};
    t.derive_transfers(cg);
    auto p = check_schedule(cg, t);
    REQUIRE(p.size() == 1);
    CHECK(has_problem(p, "deadlock:", "GPU 0 [blk stage 0] --(stream order)--> GPU 0 [blk stage 1] --'a'--> "
                                      "GPU 1 [blk stage 0] --(stream order)--> GPU 1 [blk stage 1] --'b'--> "
                                      "GPU 0 [blk stage 0]"));
    // Swapping GPU 1's stages unties it.
    std::swap(t.blocks[0][1][0], t.blocks[0][1][1]);
    CHECK(check_schedule(cg, t).empty());
  }
  SECTION("GPU out of range") {
    s.meta.num_gpus = 1;
    auto p = check_schedule(g, s);
    CHECK(has_problem(p, "gpu out of range:", "block 'block1' has stages on GPU 1"));
    CHECK(has_problem(p, "gpu out of range:", "transfers["));
  }
  SECTION("transfer to a GPU out of range") {
    s.transfers.push_back({conv1, 0, 5});
    auto p = check_schedule(g, s);
    CHECK(has_problem(p, "gpu out of range:", "dst GPU 5"));
  }
  SECTION("too many streams") {
    s.meta.max_streams = 1;
    auto p = check_schedule(g, s);
    CHECK(has_problem(p, "too many streams:", "has 2 groups but meta.max_streams is 1"));
  }
  SECTION("node in the wrong block") {
    // b1.conv3 scheduled in block2's part of GPU 1.
    s.blocks[1][1].insert(s.blocks[1][1].begin(), s.blocks[0][1][0]);
    s.blocks[0][1].clear();
    auto p = check_schedule(g, s);
    CHECK(has_problem(p, "wrong block:", "'b1.conv3' belongs to block 'block1'"));
  }
  SECTION("missing transfer") {
    s.transfers.erase(std::find(s.transfers.begin(), s.transfers.end(), Transfer{conv3, 1, 0}));
    auto p = check_schedule(g, s);
    CHECK(has_problem(p, "missing transfer:", "'b1.conv3' is produced on GPU 1 and read by 'b1.out' on GPU 0"));
  }
  SECTION("transfer that is not needed") {
    s.transfers.push_back({conv1, 0, 1});
    auto p = check_schedule(g, s);
    CHECK(has_problem(p, "superfluous transfer:", "'b1.conv1' to GPU 1"));
  }
  SECTION("transfer from the wrong GPU") {
    for (Transfer& t : s.transfers) {
      if (t.node == conv3) t.src = 0, t.dst = 1;
    }
    auto p = check_schedule(g, s);
    CHECK(has_problem(p, "wrong transfer source:", "'b1.conv3' from GPU 0 but it is produced on GPU 1"));
  }
  SECTION("output left on another GPU") {
    s.blocks[1][0].pop_back();
    s.blocks[1][1].push_back(Stage{{grp(g, {"b2.out"})}});
    s.derive_transfers(g);
    s.transfers.erase(std::find(s.transfers.begin(), s.transfers.end(), Transfer{g.output(), 1, 0}));
    auto p = check_schedule(g, s);
    CHECK(has_problem(p, "output not on GPU 0:", "'b2.out'"));
  }
  SECTION("empty stages and groups, and the input in a stage") {
    s.blocks[0][1].push_back(Stage{});
    s.blocks[0][0][0].groups.push_back(Group{});
    s.blocks[1][1][0].groups[0].nodes.push_back(g.input());
    s.meta.max_streams = 3;
    auto p = check_schedule(g, s);
    CHECK(has_problem(p, "empty stage:", "GPU 1 [block1 stage 1]"));
    CHECK(has_problem(p, "empty group:", "block 'block1' GPU 0 stage 0 group 2"));
    CHECK(has_problem(p, "input scheduled:", "'input'"));
    CHECK(p.size() == 3);
  }
  SECTION("every violation is reported, not just the first") {
    s.meta.max_streams = 1;
    s.blocks[0][0][0].groups.pop_back();
    s.transfers.push_back({conv1, 0, 1});
    auto p = check_schedule(g, s);
    // block1's first stage now has one group; block2's still has two.
    CHECK(!has_problem(p, "too many streams:", "block1"));
    CHECK(has_problem(p, "too many streams:", "block2"));
    CHECK(has_problem(p, "missing node:"));
    CHECK(has_problem(p, "superfluous transfer:"));
    CHECK(p.size() == 3);
    std::string e;
    try {
      require_valid_schedule(g, s);
    } catch (const Error& err) {
      e = err.what();
    }
    CHECK(e.find("invalid schedule: ") == 0);
    CHECK(e.find("(and 2 more problems;") != std::string::npos);
  }
}

TEST_CASE("schedules/schema.json describes the keys the writer writes") {
  json schema = read_json_file(std::string(HIOS_SOURCE_DIR) + "/schedules/schema.json");
  Graph g = demo();
  Schedule s = two_gpu(g);
  s.meta.tune = json{{"chosen", "x"}};  // optional: only hios tune writes it
  s.meta.recv_lead = 2;                  // optional: written only when set
  s.meta.link_lanes = 2;                 // optional: written only when not 1
  s.meta.spatial = json{{"graph_digest", "x"}, {"regions", json::array()}};  // optional: row splits only
  json j = schedule_to_json(g, s);
  CHECK(schedule_from_json(g, j).meta.spatial == s.meta.spatial);
  CHECK(schedule_from_json(g, j).meta.tune == s.meta.tune);
  CHECK(schedule_from_json(g, j).meta.recv_lead == 2);
  CHECK(schedule_from_json(g, j).meta.link_lanes == 2);
  auto keys = [](const json& o) {
    std::vector<std::string> k;
    for (auto it = o.begin(); it != o.end(); ++it) k.push_back(it.key());
    std::sort(k.begin(), k.end());
    return k;
  };
  CHECK(keys(schema["properties"]) == keys(j));
  CHECK(keys(schema["$defs"]["meta"]["properties"]) == keys(j["meta"]));
  CHECK(keys(schema["$defs"]["meta"]["properties"]["graph"]["properties"]) == keys(j["meta"]["graph"]));
  CHECK(keys(schema["$defs"]["meta"]["properties"]["optimisation_cost"]["properties"]) ==
        keys(j["meta"]["optimisation_cost"]));
  CHECK(keys(schema["$defs"]["block"]["properties"]) == keys(j["blocks"][0]));
  CHECK(keys(schema["$defs"]["transfer"]["properties"]) == keys(j["transfers"][0]));
  CHECK(schema["properties"]["format"]["const"] == j["format"]);
  CHECK(schema["properties"]["version"]["const"] == j["version"]);
}

TEST_CASE("the example in docs/schedule-format.md is a valid, canonical schedule of the demo graph") {
  std::ifstream in(std::string(HIOS_SOURCE_DIR) + "/docs/schedule-format.md");
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  std::string doc = ss.str();
  size_t begin = doc.find("```json\n");
  REQUIRE(begin != std::string::npos);
  begin += 8;
  size_t end = doc.find("```", begin);
  REQUIRE(end != std::string::npos);
  std::string example = doc.substr(begin, end - begin);
  Graph g = demo();
  Schedule s = schedule_from_json(g, parse_json_text(example, "docs/schedule-format.md"));
  CHECK(check_schedule(g, s).empty());
  CHECK(schedule_to_text(g, s) == example);
}
