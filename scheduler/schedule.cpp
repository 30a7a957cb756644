#include "scheduler/schedule.hpp"

#include <algorithm>
#include <climits>
#include <map>
#include <set>
#include <tuple>

#include "graph/error.hpp"
#include "graph/row_split.hpp"
#include "graph/json_codec.hpp"

namespace hios {

static constexpr const char* kFormat = "hios-schedule";
static constexpr int kVersion = 1;

// ---------------------------------------------------------------------------------------------
// Placement helpers.

std::vector<int> Schedule::gpu_of(const Graph& g) const {
  std::vector<int> gpu(g.nodes.size(), -1);
  for (int in : g.inputs()) gpu[size_t(in)] = 0;
  for (const auto& per_gpu : blocks) {
    for (size_t d = 0; d < per_gpu.size(); ++d) {
      for (const Stage& st : per_gpu[d]) {
        for (const Group& gr : st.groups) {
          for (int v : gr.nodes) {
            // First placement wins so that a duplicate (reported by check_schedule) does not
            // make the answer depend on the scan order of later code.
            if (v > 0 && v < g.size() && gpu[v] < 0) gpu[v] = static_cast<int>(d);
          }
        }
      }
    }
  }
  return gpu;
}

// The transfers a placement needs, split into consumer-driven ones and the output gather so
// that check_schedule can word the two problems differently.
static std::set<std::pair<int, int>> needed_transfers(const Graph& g, const std::vector<int>& gpu,
                                                      bool include_output) {
  std::set<std::pair<int, int>> need;  // (node, dst); src is gpu[node]
  for (int v = g.first_computed(); v < g.size(); ++v) {
    if (gpu[v] < 0) continue;
    for (int u : g.predecessors(v)) {
      if (gpu[u] >= 0 && gpu[u] != gpu[v]) need.insert({u, gpu[v]});
    }
  }
  if (include_output) {
    for (int out : g.results()) {
      if (gpu[size_t(out)] > 0) need.insert({out, 0});
    }
  }
  return need;
}

void Schedule::derive_transfers(const Graph& g) {
  std::vector<int> gpu = gpu_of(g);
  transfers.clear();
  for (const auto& [node, dst] : needed_transfers(g, gpu, true)) transfers.push_back({node, gpu[node], dst});
}

int Schedule::num_stages() const {
  int n = 0;
  for (const auto& per_gpu : blocks) {
    for (const auto& stages : per_gpu) n += static_cast<int>(stages.size());
  }
  return n;
}

Schedule make_schedule_skeleton(const Graph& g, int num_gpus) {
  HIOS_CHECK(num_gpus >= 1, "a schedule needs at least one GPU (got %d)", num_gpus);
  Schedule s;
  s.meta.num_gpus = num_gpus;
  s.meta.batch = g.batch;
  s.meta.height = g.height;
  s.meta.width = g.width;
  s.meta.graph_name = g.name;
  s.meta.graph_digest = graph_digest(g);
  s.blocks.assign(g.blocks.size(), std::vector<std::vector<Stage>>(num_gpus));
  return s;
}

// ---------------------------------------------------------------------------------------------
// JSON

static const std::string& node_name(const Graph& g, int v, const char* what) {
  HIOS_CHECK(v >= 0 && v < g.size(), "schedule refers to %s #%d, which graph '%s' does not have", what, v,
             g.name.c_str());
  return g.nodes[v].name;
}

static json meta_json(const ScheduleMeta& m) {
  json j;
  j["algorithm"] = m.algorithm;
  j["params"] = m.params.is_null() ? json::object() : m.params;
  j["gpus"] = m.num_gpus;
  j["max_streams"] = m.max_streams;
  if (m.recv_lead >= 0) j["recv_lead"] = m.recv_lead;
  if (m.link_lanes != 1) j["link_lanes"] = m.link_lanes;
  j["batch"] = m.batch;
  j["height"] = m.height;
  j["width"] = m.width;
  j["device"] = m.device;
  j["cost_model"] = m.cost_model;
  j["graph"] = json{{"name", m.graph_name}, {"digest", m.graph_digest}};
  j["predicted_ms"] = m.predicted_ms;
  j["lower_bound_ms"] = m.lower_bound_ms;
  j["optimisation_cost"] = json{{"profiling_s", m.profiling_seconds}, {"search_s", m.search_seconds}};
  if (!m.tune.is_null()) j["tune"] = m.tune;
  if (!m.spatial.is_null()) j["spatial"] = m.spatial;
  return j;
}

static json stage_json(const Graph& g, const Stage& st) {
  json groups = json::array();
  for (const Group& gr : st.groups) {
    json names = json::array();
    for (int v : gr.nodes) names.push_back(node_name(g, v, "node"));
    groups.push_back(std::move(names));
  }
  return groups;
}

json schedule_to_json(const Graph& g, const Schedule& s) {
  json j;
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["meta"] = meta_json(s.meta);
  json blocks = json::array();
  for (size_t b = 0; b < s.blocks.size(); ++b) {
    json bj;
    bj["name"] = b < g.blocks.size() ? g.blocks[b].name : strprintf("block#%zu", b);
    json gpus = json::array();
    for (const auto& stages : s.blocks[b]) {
      json sj = json::array();
      for (const Stage& st : stages) sj.push_back(stage_json(g, st));
      gpus.push_back(std::move(sj));
    }
    bj["gpus"] = std::move(gpus);
    blocks.push_back(std::move(bj));
  }
  j["blocks"] = std::move(blocks);
  json transfers = json::array();
  for (const Transfer& t : s.transfers) {
    json tj;
    tj["tensor"] = node_name(g, t.node, "tensor");
    tj["src"] = t.src;
    tj["dst"] = t.dst;
    transfers.push_back(std::move(tj));
  }
  j["transfers"] = std::move(transfers);
  return j;
}

// One line with a space after every comma and colon, like the indented parts of the file
// (nlohmann's compact mode has no spaces at all).
static std::string compact(const json& j) {
  if (j.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < j.size(); ++i) out += (i ? ", " : "") + compact(j[i]);
    return out + "]";
  }
  if (j.is_object()) {
    std::string out = "{";
    bool first = true;
    for (auto it = j.begin(); it != j.end(); ++it) {
      out += (first ? "" : ", ") + json(it.key()).dump() + ": " + compact(it.value());
      first = false;
    }
    return out + "}";
  }
  return j.dump();
}

// Objects one key per line, arrays on one line: the meta block reads like a form.
static std::string expanded(const json& j, const std::string& indent) {
  if (!j.is_object() || j.empty()) return compact(j);
  std::string out = "{";
  bool first = true;
  for (auto it = j.begin(); it != j.end(); ++it) {
    out += (first ? "\n" : ",\n") + indent + "  " + json(it.key()).dump() + ": " + expanded(it.value(), indent + "  ");
    first = false;
  }
  return out + "\n" + indent + "}";
}

std::string schedule_to_text(const Graph& g, const Schedule& s) {
  // Laid out by hand so that one stage is one line: diffs between two schedules then read as
  // "this stage changed", and the file stays short for graphs with thousands of nodes.
  json j = schedule_to_json(g, s);
  std::string out = "{\n";
  out += "  \"format\": " + j["format"].dump() + ",\n";
  out += "  \"version\": " + j["version"].dump() + ",\n";
  out += "  \"meta\": " + expanded(j["meta"], "  ") + ",\n";
  const json& blocks = j["blocks"];
  out += "  \"blocks\": [";
  for (size_t b = 0; b < blocks.size(); ++b) {
    out += b == 0 ? "\n" : ",\n";
    out += "    {\"name\": " + blocks[b]["name"].dump() + ", \"gpus\": [";
    const json& gpus = blocks[b]["gpus"];
    for (size_t d = 0; d < gpus.size(); ++d) {
      out += d == 0 ? "\n" : ",\n";
      const json& stages = gpus[d];
      if (stages.empty()) {
        out += "      []";
        continue;
      }
      out += "      [\n";
      for (size_t k = 0; k < stages.size(); ++k) {
        out += "        " + compact(stages[k]) + (k + 1 < stages.size() ? ",\n" : "\n");
      }
      out += "      ]";
    }
    out += gpus.empty() ? "]}" : "\n    ]}";
  }
  out += blocks.empty() ? "],\n" : "\n  ],\n";
  const json& transfers = j["transfers"];
  out += "  \"transfers\": [";
  for (size_t t = 0; t < transfers.size(); ++t) {
    out += t == 0 ? "\n" : ",\n";
    out += "    " + compact(transfers[t]);
  }
  out += transfers.empty() ? "]\n" : "\n  ]\n";
  out += "}\n";
  return out;
}

namespace {

int to_int(int64_t v, const std::string& path) {
  HIOS_CHECK(v >= INT_MIN && v <= INT_MAX, "%s: %lld is out of range", path.c_str(), (long long)v);
  return static_cast<int>(v);
}

int resolve(const Graph& g, const json& v, const std::string& path) {
  std::string name = json_string(v, path);
  int i = g.find(name);
  HIOS_CHECK(i >= 0, "%s: unknown node '%s' (graph '%s' has no such node)", path.c_str(), name.c_str(),
             g.name.c_str());
  return i;
}

void read_meta(const Graph& g, JsonObject& mo, ScheduleMeta& m) {
  // The graph identity first: a schedule for another graph fails on its digest, which says
  // more than the first unknown node name would.
  JsonObject go(mo.get_object("graph"), mo.child_path("graph"));
  m.graph_name = go.get_string("name");
  m.graph_digest = go.get_string("digest");
  go.finish();
  std::string digest = graph_digest(g);
  HIOS_CHECK(m.graph_digest == digest,
             "%s: schedule was made for graph '%s' (digest %s) but this graph is '%s' (digest %s)",
             go.path().c_str(), m.graph_name.c_str(), m.graph_digest.c_str(), g.name.c_str(), digest.c_str());
  m.algorithm = mo.get_string("algorithm", "");
  if (mo.has("params")) m.params = mo.get_object("params");
  m.num_gpus = static_cast<int>(mo.get_int_in("gpus", 1, kMaxScheduleGpus));
  m.max_streams = to_int(mo.get_int("max_streams"), mo.child_path("max_streams"));
  m.recv_lead = static_cast<int>(mo.has("recv_lead") ? mo.get_int_in("recv_lead", -1, 1 << 20) : -1);
  m.link_lanes = static_cast<int>(mo.has("link_lanes") ? mo.get_int_in("link_lanes", 1, kMaxLinkLanes) : 1);
  m.batch = mo.get_int("batch", g.batch);
  m.height = mo.get_int("height", g.height);
  m.width = mo.get_int("width", g.width);
  HIOS_CHECK(m.batch == g.batch && m.height == g.height && m.width == g.width,
             "%s: schedule is for batch %lld at %lldx%lld but graph '%s' is batch %lld at %lldx%lld",
             mo.path().c_str(), (long long)m.batch, (long long)m.height, (long long)m.width, g.name.c_str(),
             (long long)g.batch, (long long)g.height, (long long)g.width);
  m.device = mo.get_string("device", "");
  m.cost_model = mo.get_string("cost_model", "");
  m.predicted_ms = mo.get_number("predicted_ms", 0.0);
  m.lower_bound_ms = mo.get_number("lower_bound_ms", 0.0);
  if (mo.has("optimisation_cost")) {
    JsonObject oc(mo.get_object("optimisation_cost"), mo.child_path("optimisation_cost"));
    m.profiling_seconds = oc.get_number("profiling_s", 0.0);
    m.search_seconds = oc.get_number("search_s", 0.0);
    oc.finish();
  }
  if (mo.has("tune")) {
    m.tune = mo.get_object("tune");
    // The one key of hios tune's report that hios run acts on: the launch order it chose.
    if (m.tune.contains("launch_order")) {
      const std::string at = mo.child_path("tune") + ".launch_order";
      JsonObject lo(m.tune["launch_order"], at);
      const std::string chosen = lo.get_string("chosen");
      HIOS_CHECK(chosen == "topo" || chosen == "opara" || chosen == "measured",
                 "%s.chosen: must be topo, opara or measured, not '%s'", at.c_str(), chosen.c_str());
    }
    // The identity the tune measured under: hios run takes its transport and convolution
    // search from it, so it is the flat strings the tune writes.
    if (m.tune.contains("identity")) {
      const std::string at = mo.child_path("tune") + ".identity";
      const json& id = m.tune["identity"];
      HIOS_CHECK(id.is_object(), "%s: expected an object, got %s", at.c_str(), json_type_name(id));
      for (const auto& [k, v] : id.items()) {
        const std::string text = json_string(v, at + "." + k);
        HIOS_CHECK(std::none_of(text.begin(), text.end(), [](char ch) { return (unsigned char)ch < 0x20; }),
                   "%s.%s: holds a control character", at.c_str(), printable(k).c_str());
      }
    }
  }
  if (mo.has("spatial")) m.spatial = mo.get_object("spatial");
  mo.finish();
}

}  // namespace

Schedule schedule_from_json(const Graph& g, const json& j, const std::string& source) {
  JsonObject root(j, source);
  root.expect_header(kFormat, kVersion);
  Schedule s;
  JsonObject mo(root.get_object("meta"), root.child_path("meta"));
  read_meta(g, mo, s.meta);

  const json& blocks = root.get_array("blocks");
  HIOS_CHECK(blocks.size() == g.blocks.size(), "%s: has %zu blocks but graph '%s' has %zu",
             root.child_path("blocks").c_str(), blocks.size(), g.name.c_str(), g.blocks.size());
  for (size_t b = 0; b < blocks.size(); ++b) {
    JsonObject bo(blocks[b], root.child_path("blocks") + strprintf("[%zu]", b));
    std::string name = bo.get_string("name");
    HIOS_CHECK(name == g.blocks[b].name, "%s: is '%s' but block %zu of graph '%s' is '%s'",
               bo.child_path("name").c_str(), name.c_str(), b, g.name.c_str(), g.blocks[b].name.c_str());
    const json& gpus = bo.get_array("gpus");
    // hios writes every GPU of every block, idle ones as []: a count that disagrees with
    // meta.gpus is a damaged or hand-edited file, not a schedule for a larger job.
    HIOS_CHECK(gpus.size() == size_t(s.meta.num_gpus), "%s: lists %zu GPU(s) but meta.gpus is %d",
               bo.child_path("gpus").c_str(), gpus.size(), s.meta.num_gpus);
    std::vector<std::vector<Stage>> per_gpu;
    for (size_t d = 0; d < gpus.size(); ++d) {
      std::string dpath = bo.child_path("gpus") + strprintf("[%zu]", d);
      const json& stages = json_array(gpus[d], dpath);
      std::vector<Stage> sv;
      for (size_t k = 0; k < stages.size(); ++k) {
        std::string kpath = dpath + strprintf("[%zu]", k);
        const json& groups = json_array(stages[k], kpath);
        Stage st;
        for (size_t q = 0; q < groups.size(); ++q) {
          std::string qpath = kpath + strprintf("[%zu]", q);
          const json& nodes = json_array(groups[q], qpath);
          Group gr;
          for (size_t i = 0; i < nodes.size(); ++i) gr.nodes.push_back(resolve(g, nodes[i], qpath + strprintf("[%zu]", i)));
          st.groups.push_back(std::move(gr));
        }
        sv.push_back(std::move(st));
      }
      per_gpu.push_back(std::move(sv));
    }
    bo.finish();
    s.blocks.push_back(std::move(per_gpu));
  }

  const json& transfers = root.get_array("transfers");
  for (size_t t = 0; t < transfers.size(); ++t) {
    JsonObject to(transfers[t], root.child_path("transfers") + strprintf("[%zu]", t));
    Transfer tr;
    tr.node = resolve(g, to.at("tensor"), to.child_path("tensor"));
    tr.src = to_int(to.get_int("src"), to.child_path("src"));
    tr.dst = to_int(to.get_int("dst"), to.child_path("dst"));
    to.finish();
    s.transfers.push_back(tr);
  }
  root.finish();
  return s;
}

Schedule schedule_from_json_split(Graph& g, const json& j, const std::string& source) {
  const json* spatial = nullptr;
  if (j.is_object() && j.contains("meta") && j["meta"].is_object() && j["meta"].contains("spatial")) {
    spatial = &j["meta"]["spatial"];
  }
  if (spatial) {
    const std::string path = source + ".meta.spatial";
    JsonObject so(*spatial, path);
    const std::string digest = so.get_string("graph_digest");
    const std::string mine = graph_digest(g);
    HIOS_CHECK(digest == mine, "%s.graph_digest: the split was made from a graph with digest %s but '%s' has %s",
               path.c_str(), digest.c_str(), g.name.c_str(), mine.c_str());
    so.accept("regions");
    so.finish();
    g = apply_spatial(g, spatial_from_json(json{{"regions", (*spatial)["regions"]}}, path));
  }
  return schedule_from_json(g, j, source);
}

Schedule load_schedule(Graph& g, const std::string& file) {
  json j = read_json_file(file);
  try {
    return schedule_from_json_split(g, j, "$");
  } catch (const Error& e) {
    throw Error(file + ": " + e.what());
  }
}

void save_schedule(const Graph& g, const Schedule& s, const std::string& file) {
  write_file_atomic(file, schedule_to_text(g, s));
}

// ---------------------------------------------------------------------------------------------
// check_schedule

namespace {

struct Place {
  int block = -1, gpu = -1, stage = -1, group = -1, index = -1;
  int seq = -1;  // position of the stage in the GPU's whole run (blocks concatenated)
  bool placed() const { return gpu >= 0; }
};

std::string where(const Graph& g, const Place& p) {
  std::string block = p.block < static_cast<int>(g.blocks.size()) ? g.blocks[p.block].name : "?";
  return strprintf("block '%s' GPU %d stage %d group %d", block.c_str(), p.gpu, p.stage, p.group);
}

std::string stage_label(const Graph& g, int gpu, int block, int stage) {
  std::string b = block < static_cast<int>(g.blocks.size()) ? g.blocks[block].name : "?";
  return strprintf("GPU %d [%s stage %d]", gpu, b.c_str(), stage);
}

// The stage-level wait graph across GPUs. An edge a -> b means stage b cannot start before
// stage a has ended (stream order on one GPU, or a tensor b reads from a's GPU).
struct StageGraph {
  struct V {
    int gpu, block, stage;
  };
  std::vector<V> verts;
  std::vector<std::vector<std::pair<int, int>>> succ;  // (target, tensor node or -1 for stream order)
};

// Reports one cycle per strongly connected component with more than one stage; every
// deadlock is a cycle in this graph and each component is a separate knot to untie.
void report_cycles(const Graph& g, const StageGraph& sg, std::vector<std::string>& out) {
  const int n = static_cast<int>(sg.verts.size());
  // Kosaraju, iteratively: schedules of big graphs can have thousands of stages per GPU.
  std::vector<std::vector<int>> pred(n);
  for (int u = 0; u < n; ++u) {
    for (auto [v, lab] : sg.succ[u]) pred[v].push_back(u);
  }
  std::vector<char> seen(n, 0);
  std::vector<int> order;
  for (int s = 0; s < n; ++s) {
    if (seen[s]) continue;
    std::vector<std::pair<int, size_t>> stack{{s, 0}};
    seen[s] = 1;
    while (!stack.empty()) {
      auto& [u, i] = stack.back();
      if (i < sg.succ[u].size()) {
        int v = sg.succ[u][i++].first;
        if (!seen[v]) {
          seen[v] = 1;
          stack.push_back({v, 0});
        }
      } else {
        order.push_back(u);
        stack.pop_back();
      }
    }
  }
  std::vector<int> comp(n, -1);
  int ncomp = 0;
  for (int k = n - 1; k >= 0; --k) {
    int s = order[k];
    if (comp[s] >= 0) continue;
    std::vector<int> work{s};
    comp[s] = ncomp;
    while (!work.empty()) {
      int u = work.back();
      work.pop_back();
      for (int p : pred[u]) {
        if (comp[p] < 0) {
          comp[p] = ncomp;
          work.push_back(p);
        }
      }
    }
    ++ncomp;
  }
  std::vector<int> size(ncomp, 0), first(ncomp, -1);
  for (int u = 0; u < n; ++u) {
    if (size[comp[u]]++ == 0) first[comp[u]] = u;
  }
  for (int c = 0; c < ncomp; ++c) {
    if (size[c] < 2) continue;
    // Shortest way round from the component's first stage back to itself, by BFS.
    int s = first[c];
    std::vector<int> parent(n, -2), label(n, -1);
    std::vector<int> queue{s};
    parent[s] = -1;
    int closing = -1, closing_label = -1;
    for (size_t qi = 0; qi < queue.size() && closing < 0; ++qi) {
      int u = queue[qi];
      for (auto [v, lab] : sg.succ[u]) {
        if (comp[v] != c) continue;
        if (v == s) {
          closing = u;
          closing_label = lab;
          break;
        }
        if (parent[v] == -2) {
          parent[v] = u;
          label[v] = lab;
          queue.push_back(v);
        }
      }
    }
    std::vector<int> path;
    for (int u = closing; u != -1; u = parent[u]) path.push_back(u);
    std::reverse(path.begin(), path.end());
    auto name = [&](int u) { return stage_label(g, sg.verts[u].gpu, sg.verts[u].block, sg.verts[u].stage); };
    auto edge = [&](int lab) {
      return lab < 0 ? std::string(" --(stream order)--> ") : " --'" + g.nodes[lab].name + "'--> ";
    };
    std::string text = name(path[0]);
    for (size_t k = 1; k < path.size(); ++k) text += edge(label[path[k]]) + name(path[k]);
    text += edge(closing_label) + name(s);
    out.push_back("deadlock: stages wait on each other across GPUs: " + text);
  }
}

}  // namespace

namespace {

// Where every node of a schedule is placed, and each GPU's stages in their run order.
struct Placement {
  std::vector<Place> place;                     // per node (unplaced: !placed())
  std::vector<std::vector<Place>> stage_of_seq;  // per GPU: seq -> (block, stage)
  int max_gpu = 0;
};

// GPU and stream counts, and one block list per graph block.
void check_meta(const Graph& g, const Schedule& s, std::vector<std::string>& out) {
  const ScheduleMeta& m = s.meta;
  if (m.num_gpus < 1) out.push_back(strprintf("gpu count: meta.gpus is %d; a schedule needs at least one GPU", m.num_gpus));
  if (m.max_streams < 1) {
    out.push_back(strprintf("too many streams: meta.max_streams is %d; it must be at least 1", m.max_streams));
  }
  if (s.blocks.size() != g.blocks.size()) {
    out.push_back(strprintf("block count: schedule has %zu blocks but graph '%s' has %zu", s.blocks.size(),
                            g.name.c_str(), g.blocks.size()));
  }
}

// Walks every placement once: membership, duplicates, ranges, stream counts, and every node
// placed.
Placement place_nodes(const Graph& g, const Schedule& s, std::vector<std::string>& out) {
  const ScheduleMeta& m = s.meta;
  Placement pl;
  std::vector<Place>& place = pl.place;
  place.assign(g.nodes.size(), Place{});
  int& max_gpu = pl.max_gpu;
  for (size_t b = 0; b < s.blocks.size(); ++b) max_gpu = std::max(max_gpu, static_cast<int>(s.blocks[b].size()));
  std::vector<int> seq_next(max_gpu, 0);
  std::vector<std::vector<Place>>& stage_of_seq = pl.stage_of_seq;
  stage_of_seq.assign(size_t(max_gpu), {});
  const int nblocks = static_cast<int>(s.blocks.size());
  for (int b = 0; b < nblocks; ++b) {
    const std::string bname = b < static_cast<int>(g.blocks.size()) ? g.blocks[b].name : strprintf("#%d", b);
    for (int d = 0; d < static_cast<int>(s.blocks[b].size()); ++d) {
      const auto& stages = s.blocks[b][d];
      if (d >= m.num_gpus && !stages.empty()) {
        out.push_back(strprintf("gpu out of range: block '%s' has stages on GPU %d but meta.gpus is %d",
                                bname.c_str(), d, m.num_gpus));
      }
      for (int k = 0; k < static_cast<int>(stages.size()); ++k) {
        const Stage& st = stages[k];
        Place sp{b, d, k, -1, -1, seq_next[d]++};
        stage_of_seq[d].push_back(sp);
        if (st.groups.empty()) out.push_back("empty stage: " + stage_label(g, d, b, k) + " has no groups");
        if (static_cast<int>(st.groups.size()) > m.max_streams) {
          out.push_back(strprintf("too many streams: %s has %zu groups but meta.max_streams is %d",
                                  stage_label(g, d, b, k).c_str(), st.groups.size(), m.max_streams));
        }
        for (int q = 0; q < static_cast<int>(st.groups.size()); ++q) {
          const Group& gr = st.groups[q];
          Place gp = sp;
          gp.group = q;
          if (gr.nodes.empty()) out.push_back("empty group: " + where(g, gp) + " has no nodes");
          for (int i = 0; i < static_cast<int>(gr.nodes.size()); ++i) {
            int v = gr.nodes[i];
            Place p = gp;
            p.index = i;
            if (v < 0 || v >= g.size()) {
              out.push_back(strprintf("unknown node: %s position %d holds node #%d, which graph '%s' does not have",
                                      where(g, p).c_str(), i, v, g.name.c_str()));
              continue;
            }
            const Node& nd = g.nodes[v];
            if (g.is_input(v)) {
              out.push_back(strprintf("input scheduled: the graph input '%s' is resident on GPU 0 and must not "
                                      "appear in a stage (found in %s)",
                                      nd.name.c_str(), where(g, p).c_str()));
              continue;
            }
            if (place[v].placed()) {
              out.push_back(strprintf("duplicate node: '%s' is scheduled twice, in %s and in %s", nd.name.c_str(),
                                      where(g, place[v]).c_str(), where(g, p).c_str()));
              continue;
            }
            place[v] = p;
            if (nd.block != b) {
              out.push_back(strprintf("wrong block: '%s' belongs to block '%s' but is placed in %s", nd.name.c_str(),
                                      g.blocks[nd.block].name.c_str(), where(g, p).c_str()));
            }
          }
        }
      }
    }
  }
  for (int v = g.first_computed(); v < g.size(); ++v) {
    if (!place[v].placed()) {
      out.push_back(strprintf("missing node: '%s' (block '%s') is not scheduled", g.nodes[v].name.c_str(),
                              g.blocks[g.nodes[v].block].name.c_str()));
    }
  }

  return pl;
}

// Order on one GPU (a node after what it reads), and no cycle through the GPUs' stages.
void check_order(const Graph& g, const Placement& pl, std::vector<std::string>& out) {
  const std::vector<Place>& place = pl.place;
  const std::vector<std::vector<Place>>& stage_of_seq = pl.stage_of_seq;
  const int max_gpu = pl.max_gpu;
  StageGraph sg;
  std::vector<int> base(max_gpu + 1, 0);
  for (int d = 0; d < max_gpu; ++d) base[d + 1] = base[d] + static_cast<int>(stage_of_seq[d].size());
  sg.succ.resize(base[max_gpu]);
  for (int d = 0; d < max_gpu; ++d) {
    for (const Place& p : stage_of_seq[d]) sg.verts.push_back({p.gpu, p.block, p.stage});
    for (int k = 0; k + 1 < static_cast<int>(stage_of_seq[d].size()); ++k) sg.succ[base[d] + k].push_back({base[d] + k + 1, -1});
  }
  for (int v = g.first_computed(); v < g.size(); ++v) {
    const Place& pv = place[v];
    if (!pv.placed()) continue;
    for (int u : g.predecessors(v)) {
      if (g.is_input(u)) continue;  // resident on GPU 0 before anything starts
      const Place& pu = place[u];
      if (!pu.placed()) continue;
      const std::string& vn = g.nodes[v].name;
      const std::string& un = g.nodes[u].name;
      if (pu.gpu != pv.gpu) {
        sg.succ[base[pu.gpu] + pu.seq].push_back({base[pv.gpu] + pv.seq, u});
        continue;
      }
      if (pu.seq < pv.seq) continue;
      if (pu.seq > pv.seq) {
        out.push_back(strprintf("dependency order: '%s' (%s) reads '%s', which runs in a later stage (%s)",
                                vn.c_str(), where(g, pv).c_str(), un.c_str(), where(g, pu).c_str()));
      } else if (pu.group != pv.group) {
        out.push_back(strprintf("dependency order: '%s' (%s) reads '%s', which runs concurrently in the same stage "
                                "on another stream (group %d)",
                                vn.c_str(), where(g, pv).c_str(), un.c_str(), pu.group));
      } else if (pu.index > pv.index) {
        out.push_back(strprintf("dependency order: '%s' (%s) reads '%s', which comes after it in the same group",
                                vn.c_str(), where(g, pv).c_str(), un.c_str()));
      }
    }
  }
  report_cycles(g, sg, out);

}

// Transfers against what the placement needs: each one needed, from its producer's GPU, once;
// none missing; every result brought to GPU 0 (the executor gathers them all there).
void check_transfers(const Graph& g, const Schedule& s, const Placement& pl, std::vector<std::string>& out) {
  const ScheduleMeta& m = s.meta;
  const std::vector<Place>& place = pl.place;
  std::vector<int> gpu(g.nodes.size(), -1);
  for (int v = 0; v < g.size(); ++v) gpu[v] = g.is_input(v) ? 0 : place[v].gpu;
  std::set<std::pair<int, int>> need = needed_transfers(g, gpu, false);
  std::set<int> gathered;  // the results computed off GPU 0
  for (int r : g.results()) {
    if (r >= 0 && r < g.size() && gpu[size_t(r)] > 0) gathered.insert(r);
  }
  std::set<std::pair<int, int>> listed;
  for (size_t t = 0; t < s.transfers.size(); ++t) {
    const Transfer& tr = s.transfers[t];
    if (tr.node < 0 || tr.node >= g.size()) {
      out.push_back(strprintf("unknown node: transfers[%zu] moves node #%d, which graph '%s' does not have", t,
                              tr.node, g.name.c_str()));
      continue;
    }
    const std::string& tn = g.nodes[tr.node].name;
    bool range_ok = true;
    for (auto [which, id] : {std::pair<const char*, int>{"src", tr.src}, {"dst", tr.dst}}) {
      if (id < 0 || id >= m.num_gpus) {
        out.push_back(strprintf("gpu out of range: transfers[%zu] of '%s' has %s GPU %d but meta.gpus is %d", t,
                                tn.c_str(), which, id, m.num_gpus));
        range_ok = false;
      }
    }
    if (!range_ok) continue;
    if (tr.src == tr.dst) {
      out.push_back(strprintf("superfluous transfer: transfers[%zu] moves '%s' from GPU %d to itself", t, tn.c_str(),
                              tr.src));
      continue;
    }
    if (gpu[tr.node] < 0) continue;  // already reported as a missing node
    if (tr.src != gpu[tr.node]) {
      out.push_back(strprintf("wrong transfer source: transfers[%zu] sends '%s' from GPU %d but it is produced on GPU %d",
                              t, tn.c_str(), tr.src, gpu[tr.node]));
      continue;
    }
    if (!listed.insert({tr.node, tr.dst}).second) {
      out.push_back(strprintf("duplicate transfer: transfers[%zu] sends '%s' to GPU %d a second time", t, tn.c_str(),
                              tr.dst));
      continue;
    }
    const bool is_gather = gathered.count(tr.node) && tr.dst == 0;
    if (!need.count({tr.node, tr.dst}) && !is_gather) {
      out.push_back(strprintf("superfluous transfer: transfers[%zu] sends '%s' to GPU %d but nothing there reads it",
                              t, tn.c_str(), tr.dst));
    }
  }
  auto succ = g.successors();
  for (const auto& [u, dst] : need) {
    if (listed.count({u, dst})) continue;
    std::string reader;
    for (int v : succ[u]) {
      if (gpu[v] == dst) {
        reader = g.nodes[v].name;
        break;
      }
    }
    out.push_back(strprintf("missing transfer: '%s' is produced on GPU %d and read by '%s' on GPU %d, but no transfer "
                            "sends it there",
                            g.nodes[u].name.c_str(), gpu[u], reader.c_str(), dst));
  }
  for (int r : gathered) {
    if (listed.count({r, 0})) continue;
    out.push_back(strprintf("output not on GPU 0: the graph output '%s' is produced on GPU %d and no transfer brings it "
                            "to GPU 0",
                            g.nodes[r].name.c_str(), gpu[r]));
  }
}

}  // namespace

std::vector<std::string> check_schedule(const Graph& g, const Schedule& s) {
  std::vector<std::string> out;
  check_meta(g, s, out);
  const Placement pl = place_nodes(g, s, out);
  check_order(g, pl, out);
  check_transfers(g, s, pl, out);
  return out;
}

void require_valid_schedule(const Graph& g, const Schedule& s) {
  std::vector<std::string> problems = check_schedule(g, s);
  if (problems.empty()) return;
  if (problems.size() == 1) throw Error("invalid schedule: " + problems[0]);
  throw Error(strprintf("invalid schedule: %s (and %zu more problem%s; 'hios check' lists them all)",
                        problems[0].c_str(), problems.size() - 1, problems.size() == 2 ? "" : "s"));
}

// ---------------------------------------------------------------------------------------------
// Pretty view

std::string schedule_to_pretty(const Graph& g, const Schedule& s) { return schedule_to_pretty_timed(g, s, {}, {}, 0, ""); }

std::string schedule_to_pretty_timed(const Graph& g, const Schedule& s, const std::vector<StageTime>& stage_times,
                                     const std::vector<TransferTime>& transfer_times, double latency_ms,
                                     const std::string& cost_label) {
  const ScheduleMeta& m = s.meta;
  std::string out = strprintf("schedule of graph '%s' (batch %lld, %lldx%lld): %d GPU%s, up to %d stream%s per stage",
                              m.graph_name.c_str(), (long long)m.batch, (long long)m.height, (long long)m.width,
                              m.num_gpus, m.num_gpus == 1 ? "" : "s", m.max_streams, m.max_streams == 1 ? "" : "s");
  if (!m.algorithm.empty()) out += ", algorithm " + m.algorithm;
  out += "\n";
  if (m.predicted_ms > 0) {
    out += strprintf("predicted %.4f ms (lower bound %.4f ms) under %s%s%s\n", m.predicted_ms, m.lower_bound_ms,
                     m.cost_model.empty() ? "an unnamed cost model" : m.cost_model.c_str(),
                     m.device.empty() ? "" : " on ", m.device.c_str());
  }
  if (latency_ms > 0) {
    out += strprintf("simulated %.4f ms%s%s\n", latency_ms, cost_label.empty() ? "" : " under ", cost_label.c_str());
  }
  std::map<std::tuple<int, int, int>, const StageTime*> when;
  for (const StageTime& t : stage_times) when[{t.block, t.gpu, t.stage}] = &t;
  for (size_t b = 0; b < s.blocks.size(); ++b) {
    out += strprintf("block '%s'\n", b < g.blocks.size() ? g.blocks[b].name.c_str() : "?");
    for (size_t d = 0; d < s.blocks[b].size(); ++d) {
      const auto& stages = s.blocks[b][d];
      if (stages.empty()) continue;
      out += strprintf("  GPU %zu\n", d);
      for (size_t k = 0; k < stages.size(); ++k) {
        out += strprintf("    stage %zu", k);
        auto it = when.find({int(b), int(d), int(k)});
        if (it != when.end()) out += strprintf(" [%.4f .. %.4f ms]", it->second->start_ms, it->second->end_ms);
        out += ":";
        for (size_t q = 0; q < stages[k].groups.size(); ++q) {
          out += q == 0 ? " [" : " | [";
          const auto& nodes = stages[k].groups[q].nodes;
          for (size_t i = 0; i < nodes.size(); ++i) {
            out += (i ? ", " : "") + (nodes[i] >= 0 && nodes[i] < g.size() ? g.nodes[nodes[i]].name : std::string("?"));
          }
          out += "]";
        }
        out += "\n";
      }
    }
  }
  if (!s.transfers.empty()) {
    out += "transfers\n";
    std::map<std::tuple<int, int, int>, const TransferTime*> sent;
    for (const TransferTime& t : transfer_times) sent[{t.node, t.src, t.dst}] = &t;
    for (const Transfer& t : s.transfers) {
      if (t.node < 0 || t.node >= g.size()) continue;
      const Node& nd = g.nodes[t.node];
      out += strprintf("  %s: GPU %d -> GPU %d (%s, %.1f KiB)", nd.name.c_str(), t.src, t.dst, nd.shape.str().c_str(),
                       double(nd.shape.numel()) * dtype_size(g.dtype) / 1024.0);
      auto it = sent.find({t.node, t.src, t.dst});
      if (it != sent.end()) out += strprintf(" [%.4f .. %.4f ms]", it->second->start_ms, it->second->end_ms);
      out += "\n";
    }
  }
  return out;
}

}  // namespace hios
