#include "graph/validate.hpp"

#include <set>

#include "graph/error.hpp"
#include "graph/json_codec.hpp"

namespace hios {

namespace {

template <typename F>
void collect(std::vector<std::string>& problems, F&& f) {
  try {
    f();
  } catch (const Error& e) {
    problems.emplace_back(e.what());
  }
}

// Checks one node object in isolation: keys, types, op attributes, input term syntax. Names
// referenced by its inputs are appended to refs with their paths.
void check_node(const json& nj, const std::string& path, std::vector<std::pair<std::string, std::string>>& refs) {
  JsonObject o(nj, path);
  o.get_string("name");
  Op op = read_op(o);
  if (op.kind != OpKind::Input) {
    const json& inputs = o.get_array("inputs");
    for (size_t ti = 0; ti < inputs.size(); ++ti) {
      std::string tp = o.child_path("inputs") + strprintf("[%zu]", ti);
      const json& term = json_array(inputs[ti], tp);
      HIOS_CHECK(!term.empty(), "%s: empty term", tp.c_str());
      for (size_t vi = 0; vi < term.size(); ++vi) {
        std::string vp = tp + strprintf("[%zu]", vi);
        if (term[vi].is_string()) {
          refs.emplace_back(term[vi].get<std::string>(), vp);
        } else {
          JsonObject vo(term[vi], vp);
          refs.emplace_back(vo.get_string("node"), vp);
          vo.get_int("begin");
          vo.get_int("end");
          vo.finish();
        }
      }
    }
  }
  if (o.has("shape")) o.accept("shape");
  o.finish();
}

}  // namespace

std::vector<std::string> validate_graph_json(const json& j) {
  std::vector<std::string> problems;
  try {
    graph_from_json(j, "$");
    return problems;
  } catch (const Error& e) {
    // Fall through to the structural pass; keep the message in case it finds nothing else.
    problems.emplace_back(e.what());
  }
  std::string semantic = problems.front();
  problems.clear();
  if (!j.is_object()) return {semantic};

  std::set<std::string> names;
  std::vector<std::pair<std::string, std::string>> refs;
  auto note_name = [&](const json& nj, const std::string& path) {
    if (!nj.is_object() || !nj.contains("name") || !nj["name"].is_string()) return;
    std::string nm = nj["name"].get<std::string>();
    if (!names.insert(nm).second) problems.push_back(strprintf("%s.name: duplicate node name '%s'", path.c_str(), nm.c_str()));
  };
  for (const char* key : {"format", "version", "name", "batch", "height", "width", "input", "blocks"}) {
    if (!j.contains(key)) problems.push_back(strprintf("$.%s: missing", key));
  }
  for (auto it = j.begin(); it != j.end(); ++it) {
    static const std::set<std::string> known = {"format", "version", "name", "batch", "height", "width",
                                                "dtype",  "input",   "blocks"};
    if (!known.count(it.key())) problems.push_back(strprintf("$.%s: unknown key", it.key().c_str()));
  }
  if (j.contains("input")) {
    note_name(j["input"], "$.input");
    collect(problems, [&] { check_node(j["input"], "$.input", refs); });
  }
  if (j.contains("blocks") && j["blocks"].is_array()) {
    const json& blocks = j["blocks"];
    std::vector<std::pair<std::string, std::string>> exits;
    for (size_t bi = 0; bi < blocks.size(); ++bi) {
      std::string bp = strprintf("$.blocks[%zu]", bi);
      collect(problems, [&] {
        JsonObject bo(blocks[bi], bp);
        bo.get_string("name");
        exits.emplace_back(bo.get_string("exit"), bo.child_path("exit"));
        const json& nodes = bo.get_array("nodes");
        bo.finish();
        for (size_t ni = 0; ni < nodes.size(); ++ni) {
          std::string np = bp + strprintf(".nodes[%zu]", ni);
          note_name(nodes[ni], np);
          collect(problems, [&] { check_node(nodes[ni], np, refs); });
        }
      });
    }
    for (auto& e : exits) refs.push_back(e);
  }
  for (const auto& [name, path] : refs) {
    if (!names.count(name)) problems.push_back(strprintf("%s: refers to unknown node '%s'", path.c_str(), name.c_str()));
  }
  if (problems.empty()) problems.push_back(semantic);
  return problems;
}

std::vector<std::string> validate_graph_file(const std::string& file) {
  json j;
  try {
    j = read_json_file(file);
  } catch (const Error& e) {
    return {e.what()};
  }
  std::vector<std::string> problems = validate_graph_json(j);
  for (std::string& p : problems) p = file + ": " + p;
  return problems;
}

}  // namespace hios
