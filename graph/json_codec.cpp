#include "graph/json_codec.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <unordered_map>

#include "graph/elements.hpp"
#include "graph/error.hpp"

namespace hios {

static constexpr const char* kFormat = "hios-graph";
static constexpr int kVersion = 1;

static json shape_json(const Shape& s) { return s.dims(); }

// A constant's values as JSON numbers (integers exactly, floats as doubles, bools as 0 and 1).
static json constant_json(const Constant& c) {
  json j;
  j["operand"] = c.operand;
  j["dims"] = c.shape.dims();
  j["dtype"] = dtype_name(c.dtype);
  if (!c.data.empty()) {
    json v = json::array();
    for (int64_t i = 0; i < c.shape.numel(); ++i) {
      if (is_float(c.dtype)) {
        const double x = load_double(c.data.data(), c.dtype, i);
        // JSON has no NaN or infinity: those travel as strings.
        if (std::isfinite(x)) v.push_back(x);
        else v.push_back(std::isnan(x) ? "nan" : x > 0 ? "inf" : "-inf");
      } else if (c.dtype == DType::U64) {
        v.push_back(uint64_t(load_int(c.data.data(), c.dtype, i)));
      } else {
        v.push_back(load_int(c.data.data(), c.dtype, i));
      }
    }
    j["values"] = std::move(v);
  }
  return j;
}

static json value_json(const Graph& g, const Value& v) {
  const Node& src = g.nodes[v.node];
  if (v.begin == 0 && g.value_end(v) == src.shape.c) return src.name;
  json o;
  o["node"] = src.name;
  o["begin"] = v.begin;
  o["end"] = g.value_end(v);
  return o;
}

static json node_json(const Graph& g, const Node& n) {
  json j;
  j["name"] = n.name;
  write_op(n.op, j);
  if (!n.params_from.empty()) j["params_from"] = n.params_from;
  if (n.op.kind != OpKind::Input) {
    json inputs = json::array();
    for (const Term& t : n.inputs) {
      json term = json::array();
      for (const Value& v : t) term.push_back(value_json(g, v));
      inputs.push_back(std::move(term));
    }
    j["inputs"] = std::move(inputs);
  }
  if (!n.constants.empty()) {
    json cs = json::array();
    for (const Constant& c : n.constants) cs.push_back(constant_json(c));
    j["constants"] = std::move(cs);
  }
  j["shape"] = shape_json(n.shape);
  if (n.dtype != DType::F32 && n.op.kind != OpKind::Input) j["dtype"] = dtype_name(n.dtype);
  return j;
}

json graph_to_json(const Graph& g) {
  json j;
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["name"] = g.name;
  j["batch"] = g.batch;
  j["height"] = g.height;
  j["width"] = g.width;
  j["dtype"] = dtype_name(g.dtype);
  if (!g.weights.empty()) j["weights"] = g.weights;
  j["input"] = node_json(g, g.nodes[g.input()]);
  // Further inputs and several results only where a graph has them: a convolution network's
  // JSON is what it always was.
  if (g.inputs().size() > 1) {
    json more = json::array();
    for (size_t k = 1; k < g.inputs().size(); ++k) more.push_back(node_json(g, g.nodes[size_t(g.inputs()[k])]));
    j["more_inputs"] = std::move(more);
  }
  if (!g.outputs.empty()) {
    json outs = json::array();
    for (int o : g.outputs) outs.push_back(g.nodes[size_t(o)].name);
    j["outputs"] = std::move(outs);
  }
  json blocks = json::array();
  for (const Block& b : g.blocks) {
    json bj;
    bj["name"] = b.name;
    bj["exit"] = g.nodes[b.exit].name;
    json nodes = json::array();
    for (int i : b.nodes) nodes.push_back(node_json(g, g.nodes[i]));
    bj["nodes"] = std::move(nodes);
    blocks.push_back(std::move(bj));
  }
  j["blocks"] = std::move(blocks);
  return j;
}

std::string graph_to_text(const Graph& g) {
  // Hand-laid-out so a node stays on one line: graphs have thousands of nodes and a diff
  // should show one line per changed node.
  json j = graph_to_json(g);
  std::string out = "{\n";
  bool first = true;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!first) out += ",\n";
    first = false;
    out += "  " + json(it.key()).dump() + ": ";
    if (it.key() != "blocks") {
      out += it.value().dump();
      continue;
    }
    out += "[\n";
    for (size_t bi = 0; bi < it.value().size(); ++bi) {
      const json& b = it.value()[bi];
      out += "    {\"name\": " + b["name"].dump() + ", \"exit\": " + b["exit"].dump() + ", \"nodes\": [\n";
      const json& nodes = b["nodes"];
      for (size_t ni = 0; ni < nodes.size(); ++ni) {
        out += "      " + nodes[ni].dump() + (ni + 1 < nodes.size() ? ",\n" : "\n");
      }
      out += std::string("    ]}") + (bi + 1 < it.value().size() ? ",\n" : "\n");
    }
    out += "  ]";
  }
  out += "\n}\n";
  return out;
}

namespace {

struct PendingNode {
  const json* j;
  std::string path;
};

// Names end up in messages, listings, DOT files and file names: no control characters.
void check_name(const std::string& name, const std::string& path, const char* what) {
  for (size_t i = 0; i < name.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(name[i]);
    HIOS_CHECK(c >= 0x20 && c != 0x7f, "%s: %s '%s' holds a control character (byte 0x%02x at offset %zu)",
               path.c_str(), what, printable(name).c_str(), c, i);
  }
}

Value read_value(const json& v, const std::string& path, const std::unordered_map<std::string, int>& index) {
  std::string name;
  Value out;
  if (v.is_string()) {
    name = v.get<std::string>();
  } else {
    JsonObject o(v, path);
    name = o.get_string("node");
    out.begin = o.get_int("begin");
    out.end = o.get_int("end");
    o.finish();
    HIOS_CHECK(out.begin >= 0 && out.end > out.begin, "%s: slice [%lld, %lld) is empty or negative", path.c_str(),
               (long long)out.begin, (long long)out.end);
  }
  auto it = index.find(name);
  HIOS_CHECK(it != index.end(), "%s: refers to unknown node '%s'", path.c_str(), printable(name).c_str());
  out.node = it->second;
  return out;
}

Constant read_constant(const json& j, const std::string& path) {
  JsonObject o(j, path);
  Constant c;
  c.operand = int(o.get_int_in("operand", 0, 1 << 20));
  const json& dims = o.get_array("dims");
  HIOS_CHECK(dims.size() <= size_t(kMaxRank), "%s.dims: rank %zu (at most %d)", path.c_str(), dims.size(), kMaxRank);
  std::vector<int64_t> d;
  for (size_t k = 0; k < dims.size(); ++k) {
    d.push_back(json_int(dims[k], o.child_path("dims") + strprintf("[%zu]", k)));
    HIOS_CHECK(d.back() > 0 && d.back() < (int64_t(1) << 31), "%s.dims[%zu]: %lld is out of range", path.c_str(), k,
               (long long)d.back());
  }
  c.shape = Shape::of(d);
  const std::string dt = o.get_string("dtype");
  HIOS_CHECK(parse_dtype(dt, &c.dtype), "%s.dtype: unknown element type '%s'", path.c_str(), printable(dt).c_str());
  if (o.has("values")) {
    const json& v = o.get_array("values");
    HIOS_CHECK(int64_t(v.size()) == c.shape.numel(), "%s.values: %zu values for %lld elements", path.c_str(), v.size(),
               (long long)c.shape.numel());
    c.data.resize(v.size() * dtype_size(c.dtype));
    for (size_t k = 0; k < v.size(); ++k) {
      const std::string vp = o.child_path("values") + strprintf("[%zu]", k);
      if (v[k].is_number_unsigned() && c.dtype == DType::U64) {
        store_int(c.data.data(), c.dtype, int64_t(k), int64_t(v[k].get<uint64_t>()));
      } else if (v[k].is_number_integer()) {
        store_int(c.data.data(), c.dtype, int64_t(k), v[k].get<int64_t>());
      } else if (v[k].is_string() && is_float(c.dtype)) {
        const std::string w = v[k].get<std::string>();
        HIOS_CHECK(w == "nan" || w == "inf" || w == "-inf", "%s: expected a number, \"nan\", \"inf\" or \"-inf\"",
                   vp.c_str());
        store_double(c.data.data(), c.dtype, int64_t(k),
                     w == "nan" ? std::nan("") : w == "inf" ? HUGE_VAL : -HUGE_VAL);
      } else {
        HIOS_CHECK(v[k].is_number() && is_float(c.dtype), "%s: expected %s", vp.c_str(),
                   is_float(c.dtype) ? "a number" : "an integer");
        store_double(c.data.data(), c.dtype, int64_t(k), v[k].get<double>());
      }
    }
  }
  o.finish();
  return c;
}

}  // namespace

Graph graph_from_json(const json& j, const std::string& source) {
  JsonObject root(j, source);
  root.expect_header(kFormat, kVersion);
  Graph g;
  g.name = root.get_string("name");
  check_name(g.name, root.child_path("name"), "graph name");
  g.batch = root.get_int("batch");
  g.height = root.get_int("height");
  g.width = root.get_int("width");
  std::string dt = root.get_string("dtype", "float32");
  HIOS_CHECK(dt == "float32", "%s: unsupported dtype '%s' (the graph's float type is float32; nodes may say others)",
             root.child_path("dtype").c_str(), printable(dt).c_str());
  if (root.has("weights")) {
    g.weights = root.get_string("weights");
    HIOS_CHECK(!g.weights.empty(), "%s: an empty path (leave the key out for the seeded weights)",
               root.child_path("weights").c_str());
  }

  // Pass 1: collect node names so that inputs may refer forward (a cycle is then reported as
  // a cycle, not as a dangling name).
  std::vector<PendingNode> pending;
  std::unordered_map<std::string, int> index;
  auto collect = [&](const json& nj, const std::string& path, int block) {
    JsonObject o(nj, path);
    std::string name = o.get_string("name");
    HIOS_CHECK(!name.empty(), "%s: empty node name", o.child_path("name").c_str());
    check_name(name, o.child_path("name"), "node name");
    HIOS_CHECK(index.emplace(name, static_cast<int>(pending.size())).second, "%s: duplicate node name '%s'",
               o.child_path("name").c_str(), name.c_str());
    pending.push_back({&nj, path});
    Node n;
    n.name = name;
    n.block = block;
    g.nodes.push_back(std::move(n));
  };
  collect(root.get_object("input"), root.child_path("input"), -1);
  if (root.has("more_inputs")) {
    const json& more = root.get_array("more_inputs");
    for (size_t k = 0; k < more.size(); ++k) collect(more[k], root.child_path("more_inputs") + strprintf("[%zu]", k), -1);
  }
  std::vector<std::string> outputs;
  if (root.has("outputs")) {
    const json& outs = root.get_array("outputs");
    HIOS_CHECK(!outs.empty(), "%s: an empty list (leave the key out for one result)", root.child_path("outputs").c_str());
    for (size_t k = 0; k < outs.size(); ++k) {
      outputs.push_back(json_string(outs[k], root.child_path("outputs") + strprintf("[%zu]", k)));
    }
  }
  const json& blocks = root.get_array("blocks");
  std::vector<std::string> exits;
  for (size_t bi = 0; bi < blocks.size(); ++bi) {
    std::string bpath = root.child_path("blocks") + strprintf("[%zu]", bi);
    JsonObject bo(blocks[bi], bpath);
    Block b;
    b.name = bo.get_string("name");
    check_name(b.name, bo.child_path("name"), "block name");
    exits.push_back(bo.get_string("exit"));
    const json& nodes = bo.get_array("nodes");
    for (size_t ni = 0; ni < nodes.size(); ++ni) {
      collect(nodes[ni], bo.child_path("nodes") + strprintf("[%zu]", ni), static_cast<int>(bi));
    }
    bo.finish();
    g.blocks.push_back(std::move(b));
  }
  root.finish();
  for (size_t bi = 0; bi < exits.size(); ++bi) {
    auto it = index.find(exits[bi]);
    HIOS_CHECK(it != index.end(), "%s.blocks[%zu].exit: refers to unknown node '%s'", source.c_str(), bi,
               exits[bi].c_str());
    g.blocks[bi].exit = it->second;
  }
  for (size_t k = 0; k < outputs.size(); ++k) {
    auto it = index.find(outputs[k]);
    HIOS_CHECK(it != index.end(), "%s.outputs[%zu]: refers to unknown node '%s'", source.c_str(), k,
               printable(outputs[k]).c_str());
    g.outputs.push_back(it->second);
  }

  // Pass 2: ops and inputs.
  std::vector<json> declared_shapes(pending.size());
  std::vector<std::string> declared_dtypes(pending.size());
  for (size_t i = 0; i < pending.size(); ++i) {
    JsonObject o(*pending[i].j, pending[i].path);
    o.accept("name");
    Node& n = g.nodes[i];
    n.op = read_op(o);
    if (o.has("params_from")) n.params_from = o.get_string("params_from");
    HIOS_CHECK((n.op.kind == OpKind::Input) == (n.block < 0), "%s.op: %s", o.path().c_str(),
               n.block < 0 ? "the graph input must be an input op" : "an input op can only be the graph input");
    if (n.op.kind != OpKind::Input) {
      const json& inputs = o.get_array("inputs");
      for (size_t ti = 0; ti < inputs.size(); ++ti) {
        std::string tpath = o.child_path("inputs") + strprintf("[%zu]", ti);
        const json& term = json_array(inputs[ti], tpath);
        HIOS_CHECK(!term.empty(), "%s: empty term", tpath.c_str());
        Term t;
        for (size_t vi = 0; vi < term.size(); ++vi) {
          t.push_back(read_value(term[vi], tpath + strprintf("[%zu]", vi), index));
        }
        n.inputs.push_back(std::move(t));
      }
    }
    if (o.has("constants")) {
      const json& cs = o.get_array("constants");
      for (size_t k = 0; k < cs.size(); ++k) n.constants.push_back(read_constant(cs[k], o.child_path("constants") + strprintf("[%zu]", k)));
    }
    if (o.has("shape")) declared_shapes[i] = o.at("shape");
    if (n.op.kind != OpKind::Input && o.has("dtype")) {
      declared_dtypes[i] = o.get_string("dtype");
    }
    o.finish();
  }

  g.finalize();

  // A shape written in the file is a claim; it must agree with inference.
  for (size_t i = 0; i < pending.size(); ++i) {
    if (declared_shapes[i].is_null()) continue;
    const Node& n = g.nodes[g.find(pending[i].j->at("name").get<std::string>())];
    std::string p = pending[i].path + ".shape";
    const json& s = declared_shapes[i];
    HIOS_CHECK(s.is_array() && s.size() <= size_t(kMaxRank), "%s: expected the dims, [n, c, h, w] for an image", p.c_str());
    std::vector<int64_t> dims;
    for (size_t k = 0; k < s.size(); ++k) dims.push_back(json_int(s[k], p + strprintf("[%zu]", k)));
    const Shape d = Shape::of(dims);
    HIOS_CHECK(d == n.shape, "%s: node '%s' is declared %s but inference gives %s", p.c_str(), n.name.c_str(),
               d.str().c_str(), n.shape.str().c_str());
  }
  for (size_t i = 0; i < pending.size(); ++i) {
    const Node& n = g.nodes[g.find(pending[i].j->at("name").get<std::string>())];
    if (n.op.kind == OpKind::Input) continue;
    const std::string want = declared_dtypes[i].empty() ? "float32" : declared_dtypes[i];
    HIOS_CHECK(want == dtype_name(n.dtype), "%s.dtype: node '%s' is declared %s but inference gives %s",
               pending[i].path.c_str(), n.name.c_str(), printable(want).c_str(), dtype_name(n.dtype));
  }
  return g;
}

Graph load_graph(const std::string& file) {
  json j = read_json_file(file);
  Graph g;
  try {
    g = graph_from_json(j, "$");
  } catch (const Error& e) {
    throw Error(file + ": " + e.what());
  }
  // The weights file sits beside the graph: a relative path is the graph file's folder's.
  if (!g.weights.empty() && std::filesystem::path(g.weights).is_relative()) {
    g.weights = (std::filesystem::path(file).parent_path() / g.weights).lexically_normal().string();
  }
  return g;
}

void save_graph(const Graph& g, const std::string& file) { write_file_atomic(file, graph_to_text(g)); }

std::string graph_digest(const Graph& g) {
  json j = graph_to_json(g);
  j.erase("weights");  // the same graph and schedules whatever the parameters' values
  std::string text = j.dump();
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "fnv1a64:%016llx", (unsigned long long)h);
  return buf;
}

}  // namespace hios
