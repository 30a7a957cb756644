// Node signatures, the profile database format, and the profile cost model: hits, misses with
// a readable error, measured and fallback stages, links.
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <string>

#include "graph/error.hpp"
#include "graph/row_split.hpp"
#include "models/models.hpp"
#include "scheduler/cost_model.hpp"
#include "tests/catch.hpp"
#include "tests/test_util.hpp"

using namespace hios;
using test::contains;
using test::error_of;

namespace {

// Every kernel of g (the demo, or a split of it) measured except the one of node `skip` (the
// demo's b1.out and b2.out share theirs); times are distinct so a wrong lookup shows.
ProfileDb demo_db(const Graph& g, const std::string& skip = "") {
  std::string skip_key = skip.empty() ? "" : node_signature(g, g.find(skip));
  ProfileDb db;
  db.device = "h200";
  db.meta = json{{"gpu", "test"}};
  double ms = 0.01;
  for (int v = 1; v < g.size(); ++v) {
    std::string key = node_signature(g, v);
    bool dup = false;
    for (const ProfileEntry& e : db.entries) dup = dup || e.key == key;
    if (dup || key == skip_key) continue;
    db.entries.push_back({key, ms, 50, ms / 10, g.nodes[v].name});
    ms += 0.01;
  }
  db.links.push_back({0, 1, 12.0, 300.0});
  return db;
}

double entry_ms(const ProfileDb& db, const std::string& key) {
  for (const ProfileEntry& e : db.entries) {
    if (e.key == key) return e.ms;
  }
  return -1;
}

}  // namespace

TEST_CASE("node signatures identify the kernel, not the node") {
  Graph g = build_model("demo", ModelParams{});
  std::string c1 = node_signature(g, g.find("b1.conv1"));
  CHECK(c1 == node_signature(g, g.find("b1.conv2")));     // same op, same input: one entry serves both
  CHECK(c1 != node_signature(g, g.find("b2.conv1")));     // reads 96 channels, not 375
  CHECK(c1.find("b1.conv1") == std::string::npos);
  CHECK(c1.rfind("{\"op\":\"conv\",", 0) == 0);
  CHECK(c1.find(" in=[1x375x15x15] out=1x48x15x15 float32") != std::string::npos);
  // The sum-then-concat assembly of b1.out is part of its key.
  CHECK(node_signature(g, g.find("b1.out")).find("in=[1x48x15x15+1x48x15x15, 1x48x15x15]") != std::string::npos);
  Graph g2 = build_model("demo", ModelParams{2, 0, 0});
  CHECK(node_signature(g2, g2.find("b1.conv1")) != c1);  // batch is in the shapes

  Stage a{{Group{{g.find("b1.conv1")}}, Group{{g.find("b1.conv3"), g.find("b1.out")}}}};
  Stage b{{Group{{g.find("b1.conv3"), g.find("b1.out")}}, Group{{g.find("b1.conv2")}}}};
  CHECK(stage_key(g, a) == stage_key(g, b));  // groups sorted; conv1 and conv2 share a key
  Stage c{{Group{{g.find("b1.conv1"), g.find("b1.conv3")}}, Group{{g.find("b1.out")}}}};
  CHECK(stage_key(g, a) != stage_key(g, c));
  // The text form a search builds from kept signatures is the JSON key's dump, byte for byte.
  std::map<int, std::string> kept;
  auto sig = [&](int v) -> const std::string& { return kept.emplace(v, node_signature(g, v)).first->second; };
  for (const Stage* st : {&a, &b, &c}) CHECK(stage_key_text(*st, sig) == stage_key(g, *st).dump());
}

TEST_CASE("profile database: text round trip and strict reading") {
  Graph g = build_model("demo", ModelParams{});
  ProfileDb db = demo_db(g);
  db.stages.push_back({stage_key(g, Stage{{Group{{g.find("b1.conv1")}}, Group{{g.find("b1.conv2")}}}}), 0.123, 20});
  // hios tune's additions: the backend's algorithm choices and the searches' candidates.
  db.choices = json{{"x1x3x15x15 w16x3x3x3 impl auto", json{{"impl", "graph"}, {"config", 2}, {"ms", 0.01}}}};
  db.searched = json{{"gpus", 2}, {"streams", 4}, {"candidates", json::array()}};
  std::string text = profile_db_to_text(db);
  CHECK(profile_db_to_text(profile_db_from_json(parse_json_text(text, "t"))) == text);
  CHECK(profile_db_from_json(parse_json_text(text, "t")).choices == db.choices);
  CHECK(profile_db_from_json(parse_json_text(text, "t")).searched == db.searched);

  std::string file = std::string(HIOS_BINARY_DIR) + "/test_profile_roundtrip.json";
  save_profile_db(db, file);
  ProfileDb back = load_profile_db(file);
  CHECK(back.entries.size() == db.entries.size());
  CHECK(back.meta == db.meta);
  auto cost = load_profile_cost_model(file);
  CHECK(cost->name() == file);
  CHECK(cost->device() == "h200");
  CHECK(make_cost_model(file, "", "")->name() == file);
  CHECK(error_of([&] { make_cost_model(file, "a100", ""); }).find("was measured on 'h200'") != std::string::npos);
  std::remove(file.c_str());

  json j = parse_json_text(text, "t");
  SECTION("unknown key") {
    j["entries"][0]["mean_ms"] = 1;
    CHECK(error_of([&] { profile_db_from_json(j); }) == "$.entries[0].mean_ms: unknown key");
  }
  SECTION("duplicate key") {
    j["entries"].push_back(j["entries"][0]);
    CHECK(error_of([&] { profile_db_from_json(j); }).find("duplicate key (also entries[0])") != std::string::npos);
  }
  SECTION("negative time") {
    j["entries"][1]["ms"] = -0.5;
    CHECK(error_of([&] { profile_db_from_json(j); }).find("$.entries[1].ms: must be a non-negative number") == 0);
  }
  SECTION("numbers out of range, never narrowed") {
    j["links"] = json::array({json{{"src", 4294967296LL}, {"dst", 1}, {"latency_us", 10}, {"bandwidth_gbs", 300}}});
    CHECK(error_of([&] { profile_db_from_json(j); }) == "$.links[0].src: 4294967296 is out of range (0 to 1023)");
    j.erase("links");
    j["entries"][0]["samples"] = -1;
    CHECK(error_of([&] { profile_db_from_json(j); }) == "$.entries[0].samples: -1 is out of range (0 to 2147483647)");
    j["entries"][0]["samples"] = 1.5;
    CHECK(error_of([&] { profile_db_from_json(j); }).find("$.entries[0].samples: expected an integer") == 0);
    j["entries"][0]["samples"] = 5;
    j["entries"][0]["ms"] = 1e308;  // a schedule's predicted sum would overflow to infinity
    CHECK(error_of([&] { profile_db_from_json(j); }) == "$.entries[0].ms: 1e+308 is more than 1e9");
  }
  SECTION("a choice that is not an object") {
    j["choices"]["x1x3x15x15 w16x3x3x3 impl auto"] = "graph 2";
    CHECK(error_of([&] { profile_db_from_json(j); }) ==
          "$.choices.x1x3x15x15 w16x3x3x3 impl auto: expected an object, got string");
  }
  SECTION("a phase split's inner recipe of the wrong types, or nested twice") {
    const std::string key = "x1x8x15x15 w8x8x3x3 d12,12 impl auto";
    j["choices"][key] = json{{"impl", "phase-split"}, {"inner", json{{"impl", "graph"}, {"config", "two"}}}};
    CHECK(error_of([&] { profile_db_from_json(j); }).find("$.choices." + key + ".inner.config: expected an integer") == 0);
    j["choices"][key] = json{{"impl", "phase-split"}, {"inner", json{{"impl", "phase-split"}, {"inner", json{{"impl", "graph"}}}}}};
    CHECK(error_of([&] { profile_db_from_json(j); }) ==
          "$.choices." + key + ".inner.inner: an inner recipe holds no inner recipe of its own");
    j["choices"][key] = json{{"impl", "phase-split"}, {"inner", json{{"impl", "graph"}, {"config", 3}, {"ms", 0.5}}}};
    CHECK_NOTHROW(profile_db_from_json(j));
  }
  SECTION("malformed stage key") {
    j["stages"][0]["key"] = json::array({"not a group"});
    CHECK(error_of([&] { profile_db_from_json(j); }) == "$.stages[0].key[0]: expected an array, got string");
  }
}

TEST_CASE("profile cost model: lookups, misses, stages and links") {
  Graph g = build_model("demo", ModelParams{});
  DevicePreset h200 = find_device_preset("h200");
  ProfileDb db = demo_db(g, "b2.out");
  const int conv1 = g.find("b1.conv1"), conv2 = g.find("b1.conv2"), conv3 = g.find("b1.conv3");
  Stage pair{{Group{{conv1}}, Group{{conv3}}}};
  db.stages.push_back({stage_key(g, pair), 0.0425, 10});
  auto cost = make_profile_cost_model(db, "db.json", h200);

  SECTION("hit") {
    CHECK(cost->node_ms(g, conv1, 0) == Approx(entry_ms(db, node_signature(g, conv1))));
    CHECK(cost->node_ms(g, conv2, 0) == cost->node_ms(g, conv1, 0));
    CHECK(cost->node_ms(g, g.input(), 0) == 0);
  }
  SECTION("miss names the node, the op and the device") {
    std::string e = error_of([&] { cost->node_ms(g, g.find("b2.out"), 0); });
    CHECK(e.find("profile db.json has no entry for node 'b2.out' (identity, in [1x48x15x15+1x48x15x15, 1x48x15x15], "
                 "out 1x96x15x15, float32, device h200); missing key: ") == 0);
    CHECK(e.find(node_signature(g, g.find("b2.out"))) != std::string::npos);
  }
  SECTION("a measured stage is used as is, whatever the group order") {
    CHECK(cost->stage_ms(g, pair, 0) == Approx(0.0425));
    CHECK(cost->stage_ms(g, Stage{{Group{{conv3}}, Group{{conv2}}}}, 0) == Approx(0.0425));
  }
  SECTION("a stage not measured combines measured node times") {
    int a = g.find("b2.conv1"), b = g.find("b2.conv3");
    double ta = cost->node_ms(g, a, 0), tb = cost->node_ms(g, b, 0);
    double st = cost->stage_ms(g, Stage{{Group{{a}}, Group{{b}}}}, 0);
    CHECK(st >= std::max(ta, tb));
    CHECK(st <= ta + tb + h200.stage_overhead_us * 1e-3);
    // One group is the sum of its measured nodes.
    CHECK(cost->stage_ms(g, Stage{{Group{{a, b}}}}, 0) == Approx(ta + tb));
  }
  SECTION("links") {
    CHECK(cost->transfer_ms(3e6, 0, 1) == Approx(12e-3 + 3e6 / 300e6));
    CHECK(cost->transfer_ms(3e6, 1, 1) == 0);
    CHECK(error_of([&] { cost->transfer_ms(1, 1, 0); }) == "profile db.json has no link entry for GPU 1 -> GPU 0 (device h200)");
  }
  SECTION("links timed in 16-bit math move half the graph's float32 bytes") {
    // hios tune times its links on the bytes the executor sends, 2 per element under bf16 and
    // fp16; the schedulers count a tensor at 4 bytes per element. The latency is per message.
    for (const char* math : {"bf16", "fp16"}) {
      ProfileDb half = db;
      half.identity = json{{"math", math}, {"layout", "nhwc"}};
      auto c = make_profile_cost_model(half, "half.json", h200);
      CHECK(c->transfer_ms(3e6, 0, 1) == Approx(12e-3 + 1.5e6 / 300e6));
      CHECK(c->transfer_ms(0, 0, 1) == Approx(12e-3));
      CHECK(profile_link_bytes_per_graph_byte(half) == 0.5);
    }
    ProfileDb profiled = db;  // hios profile writes the math into its provenance instead
    profiled.meta = json{{"math", "bf16"}};
    CHECK(profile_link_bytes_per_graph_byte(profiled) == 0.5);
    profiled.meta = json{{"math", "tf32"}};
    CHECK(profile_link_bytes_per_graph_byte(profiled) == 1.0);
    CHECK(make_profile_cost_model(profiled, "tf32.json", h200)->transfer_ms(3e6, 0, 1) == Approx(12e-3 + 3e6 / 300e6));
  }
}

TEST_CASE("profile cost model: a row split's band copies held in place cost nothing in NHWC") {
  // demo split 2 ways by halo over both blocks: each part's input is assembled by `rows` nodes,
  // and at batch 1 most of them only re-address bands of one tensor (rows_copy_is_view).
  const Graph g = build_model("demo", ModelParams{1, 32, 32});
  const Graph sg = apply_spatial(g, SpatialPlan{{plan_region(g, 0, 1, 2, SplitMode::Halo)}});
  ProfileDb db = demo_db(sg);  // every kernel of the split graph, each its own time
  const DevicePreset h200 = find_device_preset("h200");
  db.identity = json{{"layout", "nhwc"}};
  auto nhwc = make_profile_cost_model(db, "nhwc.json", h200);
  db.identity = json{{"layout", "nchw"}};
  auto nchw = make_profile_cost_model(db, "nchw.json", h200);
  db.identity = json::object();
  db.meta = json{{"layout", "nhwc"}};  // written by hios profile: the layout in its provenance
  auto profiled = make_profile_cost_model(db, "profiled.json", h200);
  db.meta = json::object();  // no layout recorded anywhere (databases from before layouts)
  auto unknown = make_profile_cost_model(db, "profile.json", h200);
  int views = 0, copies = 0;
  for (int v = 1; v < sg.size(); ++v) {
    INFO(sg.nodes[size_t(v)].name);
    const double measured = entry_ms(db, node_signature(sg, v));
    REQUIRE(measured > 0);
    if (rows_copy_is_view(sg, v)) {
      ++views;
      CHECK(nhwc->node_ms(sg, v, 0) == 0);  // held in place: no kernel in a pass
      CHECK(profiled->node_ms(sg, v, 0) == 0);
      CHECK(nchw->node_ms(sg, v, 0) == Approx(measured));  // a band is not one run of memory
      CHECK(unknown->node_ms(sg, v, 0) == Approx(measured));
    } else {
      copies += sg.nodes[size_t(v)].op.kind == OpKind::Rows;
      CHECK(nhwc->node_ms(sg, v, 0) == Approx(measured));  // convolutions, cuts, the input's bands
      CHECK(profiled->node_ms(sg, v, 0) == Approx(measured));
    }
  }
  CHECK(views > 0);
  CHECK(copies > 0);  // the parts' bands of the graph input are copies
  // At batch 2 a band is not one run of memory even in NHWC.
  const Graph g2 = build_model("demo", ModelParams{2, 32, 32});
  const Graph sg2 = apply_spatial(g2, SpatialPlan{{plan_region(g2, 0, 1, 2, SplitMode::Halo)}});
  for (int v = 1; v < sg2.size(); ++v) CHECK_FALSE(rows_copy_is_view(sg2, v));
}
