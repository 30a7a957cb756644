// The graph JSON codec: canonical round trip, strictness, and the digest.
#include <fstream>
#include <functional>
#include <sstream>

#include "graph/error.hpp"
#include "graph/json_codec.hpp"
#include "graph/validate.hpp"
#include "models/models.hpp"
#include "tests/catch.hpp"
#include "tests/test_util.hpp"

using namespace hios;
using test::contains;
using test::error_of;

namespace {

std::string data_file(const std::string& name) { return std::string(HIOS_SOURCE_DIR) + "/tests/data/graphs/" + name; }

std::string load_error(const std::string& file) {
  return error_of([&] { load_graph(data_file(file)); });
}

}  // namespace

TEST_CASE("graph JSON round trip is byte-identical", "[graph][json]") {
  Graph g = load_graph(data_file("tiny.json"));
  std::string once = graph_to_text(g);
  Graph again = graph_from_json(parse_json_text(once, "once"));
  CHECK(graph_to_text(again) == once);
  CHECK(graph_digest(again) == graph_digest(g));
  Graph demo = build_demo({1, 15, 15});
  std::string text = graph_to_text(demo);
  CHECK(graph_to_text(graph_from_json(parse_json_text(text, "demo"))) == text);
}

TEST_CASE("channel slices survive the round trip", "[graph][json]") {
  GraphBuilder b("slices", 1, 8, 8);
  Value x = b.input(4);
  b.begin_block("b");
  Value a = b.conv("a", {x}, 16, 1, 1, 0);
  Value o = b.node("o", make_op(OpKind::Identity), {Term{GraphBuilder::slice(a, 4, 12)}, Term{x}});
  b.end_block(o);
  Graph g = b.finish();
  std::string text = graph_to_text(g);
  CHECK(contains(text, "\"begin\":4"));
  Graph back = graph_from_json(parse_json_text(text, "s"));
  CHECK(back.nodes[back.find("o")].shape.c == 8 + 4);
  CHECK(graph_to_text(back) == text);
}

TEST_CASE("the digest changes with the graph", "[graph][json]") {
  CHECK(graph_digest(build_demo({1, 15, 15})) != graph_digest(build_demo({1, 16, 16})));
  CHECK(graph_digest(build_demo({1, 15, 15})) == graph_digest(build_demo({1, 15, 15})));
}

TEST_CASE("each bad file gives its own clear error", "[graph][json]") {
  CHECK(contains(load_error("malformed.json"), "malformed JSON at byte"));
  CHECK(contains(load_error("cycle.json"), "cycle through"));
  CHECK(contains(load_error("unknown_op.json"), "$.blocks[0].nodes[1].op: unknown op 'convolution'"));
  CHECK(contains(load_error("channel_mismatch.json"), "node 'out': channel mismatch inside a sum"));
  CHECK(contains(load_error("spatial_mismatch.json"), "node 'out': spatial mismatch in a concat"));
  CHECK(contains(load_error("dangling.json"), "$.blocks[0].nodes[1].inputs[0][0]: refers to unknown node 'c9'"));
  CHECK(contains(load_error("duplicate.json"), "duplicate node name 'c1'"));
  CHECK(contains(load_error("nonpositive.json"), "node 'c1'"));
  CHECK(contains(load_error("unknown_key.json"), "$.blocks[0].nodes[0].kernal: unknown key"));
  CHECK(contains(load_error("wrong_type.json"), "$.blocks[0].nodes[0].out_channels: expected an integer, got string"));
  CHECK(load_error("tiny.json").empty());
}

TEST_CASE("a declared shape must agree with inference", "[graph][json]") {
  json j = graph_to_json(load_graph(data_file("tiny.json")));
  j["blocks"][0]["nodes"][0]["shape"] = json::array({1, 9, 8, 8});
  try {
    graph_from_json(j);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(contains(e.what(), "declared 1x9x8x8 but inference gives 1x8x8x8"));
  }
}

TEST_CASE("params_from names a node with the same parameters, or the operator of a split part", "[graph][json]") {
  json base = graph_to_json(build_model("demo", ModelParams{}));
  json& nodes = base["blocks"][0]["nodes"];
  REQUIRE(nodes[0]["name"] == "b1.conv1");
  REQUIRE(nodes[1]["name"] == "b1.conv2");
  auto with = [&](const std::string& from) {
    json j = base;
    j["blocks"][0]["nodes"][1]["params_from"] = from;
    return error_of([&] { graph_from_json(j); });
  };
  CHECK(with("b1.conv1").empty());  // same op, same weights
  CHECK(with("nope") == "node 'b1.conv2': params_from 'nope' names no node of graph 'demo'");
  CHECK(with("input") == "node 'b1.conv2': params_from 'input' names the graph input");
  CHECK(with("b1.conv2") == "node 'b1.conv2': params_from names the node itself");
  CHECK(contains(with("b1.out"), "node 'b1.conv2': params_from 'b1.out' names a node with other parameters"));
  // The parts of a row split take their operator's weights by its name.
  json j = base;
  j["blocks"][0]["nodes"][1]["name"] = "b1.gone@1";
  j["blocks"][0]["nodes"][1]["params_from"] = "b1.gone";
  for (json& n : j["blocks"][0]["nodes"]) {
    for (json& term : n["inputs"]) {
      for (json& v : term) {
        if (v.is_string() && v == "b1.conv2") v = "b1.gone@1";
        if (v.is_object() && v["node"] == "b1.conv2") v["node"] = "b1.gone@1";
      }
    }
  }
  CHECK(error_of([&] { graph_from_json(j); }).empty());
}

TEST_CASE("validate reports every independent problem", "[graph][json]") {
  std::vector<std::string> p = validate_graph_file(data_file("many_problems.json"));
  REQUIRE(p.size() == 3);
  std::string all = p[0] + p[1] + p[2];
  CHECK(contains(all, "kernal: unknown key"));
  CHECK(contains(all, "unknown op 'convolution'"));
  CHECK(contains(all, "unknown node 'c9'"));
  CHECK(validate_graph_file(data_file("tiny.json")).empty());
}

TEST_CASE("names with control characters are refused, the message escaping them", "[graph][json]") {
  const json good = graph_to_json(load_graph(data_file("tiny.json")));
  auto error_with = [&](const std::function<void(json&)>& edit) {
    json j = good;
    edit(j);
    return error_of([&] { graph_from_json(j); });
  };
  const std::string node = error_with([](json& j) { j["blocks"][0]["nodes"][0]["name"] = std::string("c\x1b[31m\0x", 8); });
  INFO(node);
  CHECK(contains(node, "$.blocks[0].nodes[0].name: node name 'c\\x1b[31m\\x00x' holds a control character (byte "
                       "0x1b at offset 1)"));
  CHECK(node.find('\x1b') == std::string::npos);
  CHECK(node.find('\0') == std::string::npos);
  CHECK(contains(error_with([](json& j) { j["blocks"][0]["name"] = "b\nx"; }), "block name 'b\\x0ax'"));
  CHECK(contains(error_with([](json& j) { j["name"] = "g\x7f"; }), "graph name 'g\\x7f'"));
  // A reference to a name that is not there prints it escaped too.
  const std::string ref = error_with([](json& j) { j["blocks"][0]["nodes"][0]["inputs"][0][0] = "in\x1b"; });
  CHECK(contains(ref, "refers to unknown node 'in\\x1b'"));
}
