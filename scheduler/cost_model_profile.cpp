// Node signatures, the profile database and the cost model that reads it.
#include <algorithm>
#include <climits>
#include <cmath>
#include <functional>
#include <map>
#include <unordered_map>

#include "graph/error.hpp"
#include "graph/row_split.hpp"
#include "scheduler/concurrency_fit.hpp"
#include "scheduler/cost_model.hpp"

namespace hios {

// "[a+b, c]": the values summed in each term, terms in order.
static std::string input_assembly(const Graph& g, const Node& nd) {
  std::string s = "[";
  for (size_t t = 0; t < nd.inputs.size(); ++t) {
    if (t) s += ", ";
    for (size_t v = 0; v < nd.inputs[t].size(); ++v) {
      if (v) s += "+";
      s += g.value_shape(nd.inputs[t][v]).str();
    }
  }
  return s + "]";
}

std::string node_signature(const Graph& g, int node) {
  HIOS_CHECK(node >= 0 && node < g.size(), "node_signature: node #%d is not in graph '%s'", node, g.name.c_str());
  const Node& nd = g.nodes[node];
  json op;
  write_op(nd.op, op);
  return op.dump() + " in=" + input_assembly(g, nd) + " out=" + nd.shape.str() + " " + dtype_name(g.dtype);
}

json stage_key(const Graph& g, const Stage& stage) {
  std::vector<json> groups;
  for (const Group& gr : stage.groups) {
    json sigs = json::array();
    for (int v : gr.nodes) sigs.push_back(node_signature(g, v));
    groups.push_back(std::move(sigs));
  }
  std::sort(groups.begin(), groups.end(), [](const json& a, const json& b) { return a.dump() < b.dump(); });
  json out = json::array();
  for (json& gj : groups) out.push_back(std::move(gj));
  return out;
}

std::string stage_key_text(const Stage& stage, const std::function<const std::string&(int)>& signature) {
  // What json::dump writes for stage_key: each group an array of strings, groups in the order
  // of their own dumps.
  std::vector<std::string> groups;
  groups.reserve(stage.groups.size());
  for (const Group& gr : stage.groups) {
    json sigs = json::array();
    for (int v : gr.nodes) sigs.push_back(signature(v));
    groups.push_back(sigs.dump());
  }
  std::sort(groups.begin(), groups.end());
  std::string out = "[";
  for (size_t i = 0; i < groups.size(); ++i) out += (i ? "," : "") + groups[i];
  return out + "]";
}

// ---------------------------------------------------------------------------------------------
// Database I/O

// Every time, rate and latency of a database: non-negative and at most 1e9 (in its unit), so that
// sums over a whole schedule stay finite and what hios writes from them it can read back.
// GPUs a link may name: as many as hios tune's --gpus allows.
constexpr int64_t kMaxProfileGpus = 1024;

static double non_negative(JsonObject& o, const char* key) {
  double v = o.get_number(key);
  HIOS_CHECK(v >= 0 && std::isfinite(v), "%s: must be a non-negative number (got %g)", o.child_path(key).c_str(), v);
  HIOS_CHECK(v <= 1e9, "%s: %g is more than 1e9", o.child_path(key).c_str(), v);
  return v;
}

// An optional count (samples, kernels): a non-negative integer that fits an int.
static int count_of(JsonObject& o, const char* key) {
  return o.has(key) ? static_cast<int>(o.get_int_in(key, 0, INT32_MAX)) : 0;
}

ProfileDb profile_db_from_json(const json& j, const std::string& source) {
  JsonObject root(j, source);
  root.expect_header("hios-profile", 1);
  ProfileDb db;
  db.device = root.get_string("device");
  if (root.has("meta")) {
    db.meta = root.get_object("meta");
    // Free-form but for the fields hios reads back: a wrong type is named here, not where it is read.
    JsonObject meta(db.meta, root.child_path("meta"));
    if (meta.has("gpus")) (void)meta.get_int_in("gpus", 1, 1024);
    for (const char* key : {"gpu", "math", "layout", "graph", "date", "written_by"}) {
      if (meta.has(key)) (void)meta.get_string(key);
    }
  }
  if (root.has("identity")) {
    db.identity = root.get_object("identity");
    for (const auto& [k, v] : db.identity.items()) json_string(v, root.child_path("identity") + "." + k);
  }
  if (root.has("concurrency")) {
    db.concurrency = root.get_object("concurrency");
    (void)concurrency_fit_from_json(db.concurrency, root.child_path("concurrency"));  // range-checked here
  }
  if (root.has("choices")) {
    // Each recipe's fields have the types the backend that adopts them reads (which of them a
    // backend uses, and whether a recipe still fits, is its business).
    db.choices = root.get_object("choices");
    // A phase split's recipe holds its inner convolution's recipe, of the same fields, once.
    const std::function<void(const json&, const std::string&, bool)> check_recipe = [&](const json& v,
                                                                                      const std::string& at,
                                                                                      bool inner_ok) {
      HIOS_CHECK(v.is_object(), "%s: expected an object, got %s", at.c_str(), json_type_name(v));
      HIOS_CHECK(v.contains("impl"), "%s: a recipe names its impl", at.c_str());
      for (const auto& [f, x] : v.items()) {
        if (f == "impl" || f == "tried") {
          (void)json_string(x, at + "." + f);
        } else if (f == "config" || f == "variant" || f == "algo" || f == "math") {
          (void)json_int(x, at + "." + f);
        } else if (f == "ms") {
          (void)json_number(x, at + "." + f);
        } else if (f == "fused") {
          HIOS_CHECK(x.is_boolean(), "%s.fused: expected a boolean, got %s", at.c_str(), json_type_name(x));
        } else if (f == "inner") {
          HIOS_CHECK(inner_ok, "%s.inner: an inner recipe holds no inner recipe of its own", at.c_str());
          check_recipe(x, at + ".inner", false);
        }
      }
    };
    for (const auto& [k, v] : db.choices.items()) check_recipe(v, root.child_path("choices") + "." + k, true);
  }
  if (root.has("searched")) db.searched = root.get_object("searched");
  if (root.has("pass_overhead_ms")) {
    db.pass_overhead_ms = non_negative(root, "pass_overhead_ms");
    HIOS_CHECK(db.pass_overhead_ms <= 1000, "%s: must be at most 1000 ms (got %g)",
               root.child_path("pass_overhead_ms").c_str(), db.pass_overhead_ms);
  }

  std::map<std::string, size_t> seen;
  const json& entries = root.get_array("entries");
  for (size_t i = 0; i < entries.size(); ++i) {
    JsonObject o(entries[i], root.child_path("entries") + strprintf("[%zu]", i));
    ProfileEntry e;
    e.key = o.get_string("key");
    e.ms = non_negative(o, "ms");
    e.samples = count_of(o, "samples");
    e.stddev_ms = o.has("stddev_ms") ? non_negative(o, "stddev_ms") : 0.0;
    e.example = o.get_string("example", "");
    e.kernel_ms = o.has("kernel_ms") ? non_negative(o, "kernel_ms") : -1.0;
    e.kernels = count_of(o, "kernels");
    e.achieved_tflops = o.has("achieved_tflops") ? non_negative(o, "achieved_tflops") : -1.0;
    e.achieved_gbs = o.has("achieved_gbs") ? non_negative(o, "achieved_gbs") : -1.0;
    if (o.has("bound")) {
      const std::string b = o.get_string("bound");
      HIOS_CHECK(b == "memory" || b == "compute", "%s: must be \"memory\" or \"compute\", not '%s'",
                 o.child_path("bound").c_str(), b.c_str());
      e.memory_bound = b == "memory" ? 1 : 0;
    }
    o.finish();
    auto [it, fresh] = seen.emplace(e.key, i);
    HIOS_CHECK(fresh, "%s: duplicate key (also entries[%zu])", o.child_path("key").c_str(), it->second);
    db.entries.push_back(std::move(e));
  }
  if (root.has("links")) {
    const json& links = root.get_array("links");
    for (size_t i = 0; i < links.size(); ++i) {
      JsonObject o(links[i], root.child_path("links") + strprintf("[%zu]", i));
      ProfileLink l;
      l.src = static_cast<int>(o.get_int_in("src", 0, kMaxProfileGpus - 1));
      l.dst = static_cast<int>(o.get_int_in("dst", 0, kMaxProfileGpus - 1));
      l.latency_us = non_negative(o, "latency_us");
      l.bandwidth_gbs = non_negative(o, "bandwidth_gbs");
      HIOS_CHECK(l.bandwidth_gbs > 0, "%s: must be positive (got %g)", o.child_path("bandwidth_gbs").c_str(),
                 l.bandwidth_gbs);
      HIOS_CHECK(l.src >= 0 && l.dst >= 0 && l.src != l.dst, "%s: a link joins two different GPUs (got %d -> %d)",
                 o.path().c_str(), l.src, l.dst);
      o.finish();
      for (const ProfileLink& q : db.links) {
        HIOS_CHECK(q.src != l.src || q.dst != l.dst, "%s: duplicate link %d -> %d", o.path().c_str(), l.src, l.dst);
      }
      db.links.push_back(l);
    }
  }
  if (root.has("stages")) {
    const json& stages = root.get_array("stages");
    std::map<std::string, size_t> seen_stage;
    for (size_t i = 0; i < stages.size(); ++i) {
      JsonObject o(stages[i], root.child_path("stages") + strprintf("[%zu]", i));
      ProfileStage st;
      st.key = o.get_array("key");
      std::string kp = o.child_path("key");
      for (size_t q = 0; q < st.key.size(); ++q) {
        // Checked, then read through the element itself: binding the checker's returned reference
        // made GCC 13 warn of a dangling temporary (the path string).
        const json& gr = st.key[q];
        json_array(gr, kp + strprintf("[%zu]", q));
        for (size_t v = 0; v < gr.size(); ++v) json_string(gr[v], kp + strprintf("[%zu][%zu]", q, v));
      }
      st.ms = non_negative(o, "ms");
      st.samples = count_of(o, "samples");
      o.finish();
      auto [it, fresh] = seen_stage.emplace(st.key.dump(), i);
      HIOS_CHECK(fresh, "%s: duplicate stage key (also stages[%zu])", kp.c_str(), it->second);
      db.stages.push_back(std::move(st));
    }
  }
  root.finish();
  return db;
}

std::string profile_identity_difference(const json& database, const json& here) {
  std::string out;
  auto text = [](const json& j, const std::string& k) {
    return j.contains(k) && j[k].is_string() ? "'" + j[k].get<std::string>() + "'" : std::string("nothing");
  };
  std::vector<std::string> keys;
  for (const auto& [k, v] : here.items()) keys.push_back(k);
  for (const auto& [k, v] : database.items()) {
    if (!here.contains(k)) keys.push_back(k);
  }
  for (const std::string& k : keys) {
    const std::string a = text(here, k), b = text(database, k);
    if (a == b) continue;
    if (!out.empty()) out += "; ";
    out += k + " " + a + " here, " + b + " in the database";
  }
  return out;
}

ProfileDb load_profile_db(const std::string& file) {
  json j = read_json_file(file);
  try {
    return profile_db_from_json(j);
  } catch (const Error& e) {
    throw Error(file + ": " + e.what());
  }
}

std::string profile_db_to_text(const ProfileDb& db) {
  // One entry per line: databases hold thousands of entries and get diffed between runs.
  std::string out = "{\n  \"format\": \"hios-profile\",\n  \"version\": 1,\n";
  out += "  \"device\": " + json(db.device).dump() + ",\n";
  out += "  \"meta\": " + (db.meta.is_null() ? json::object() : db.meta).dump() + ",\n";
  if (!db.identity.empty()) out += "  \"identity\": " + db.identity.dump() + ",\n";
  if (!db.concurrency.is_null()) out += "  \"concurrency\": " + db.concurrency.dump() + ",\n";
  if (db.pass_overhead_ms > 0) out += "  \"pass_overhead_ms\": " + json(db.pass_overhead_ms).dump() + ",\n";
  if (!db.choices.empty()) {
    out += "  \"choices\": {";
    bool first = true;
    for (const auto& [k, v] : db.choices.items()) {
      out += (first ? "\n    " : ",\n    ") + json(k).dump() + ": " + v.dump();
      first = false;
    }
    out += "\n  },\n";
  }
  if (!db.searched.is_null()) out += "  \"searched\": " + db.searched.dump() + ",\n";
  auto list = [&](const char* name, const std::vector<json>& items, bool last) {
    out += std::string("  \"") + name + "\": [";
    for (size_t i = 0; i < items.size(); ++i) out += (i ? ",\n    " : "\n    ") + items[i].dump();
    out += items.empty() ? "]" : "\n  ]";
    out += last ? "\n" : ",\n";
  };
  std::vector<json> entries, links, stages;
  for (const ProfileEntry& e : db.entries) {
    json j;
    j["key"] = e.key;
    j["ms"] = e.ms;
    j["samples"] = e.samples;
    j["stddev_ms"] = e.stddev_ms;
    if (!e.example.empty()) j["example"] = e.example;
    if (e.kernel_ms >= 0) j["kernel_ms"] = e.kernel_ms;
    if (e.kernels > 0) j["kernels"] = e.kernels;
    if (e.achieved_tflops >= 0) j["achieved_tflops"] = e.achieved_tflops;
    if (e.achieved_gbs >= 0) j["achieved_gbs"] = e.achieved_gbs;
    if (e.memory_bound >= 0) j["bound"] = e.memory_bound ? "memory" : "compute";
    entries.push_back(std::move(j));
  }
  for (const ProfileLink& l : db.links) {
    links.push_back(json{{"src", l.src}, {"dst", l.dst}, {"latency_us", l.latency_us}, {"bandwidth_gbs", l.bandwidth_gbs}});
  }
  for (const ProfileStage& s : db.stages) stages.push_back(json{{"key", s.key}, {"ms", s.ms}, {"samples", s.samples}});
  list("entries", entries, false);
  list("links", links, false);
  list("stages", stages, true);
  out += "}\n";
  return out;
}

void save_profile_db(const ProfileDb& db, const std::string& file) { write_file_atomic(file, profile_db_to_text(db)); }

std::string profile_measured(const ProfileDb& db, const std::string& key) {
  for (const json* where : {&db.identity, &db.meta}) {
    if (!where->is_object()) continue;
    const auto it = where->find(key);
    if (it != where->end() && it->is_string()) return it->get<std::string>();
  }
  return "";
}

double profile_link_bytes_per_graph_byte(const ProfileDb& db) {
  return math_stores_16_bit(profile_measured(db, "math")) ? 0.5 : 1.0;
}

// ---------------------------------------------------------------------------------------------
// The profile cost model

std::vector<std::vector<StageItem>> measured_stage_items(const Graph& g, const Stage& stage, const CostModel& nodes,
                                                         const DevicePreset& preset, int gpu) {
  std::vector<std::vector<StageItem>> groups;
  for (const Group& gr : stage.groups) {
    std::vector<StageItem> items;
    for (int v : gr.nodes) {
      const double ms = nodes.node_ms(g, v, gpu);
      const NodeEstimate e = analytic_node_estimate(preset, g, v);
      const double scale = e.ms > 0 ? ms / e.ms : 0;
      items.push_back({ms, e.sm_ms * scale, e.memory_ms * scale, std::min(e.launch_ms, ms)});
    }
    groups.push_back(std::move(items));
  }
  return groups;
}

double measured_stage_floor_ms(const Graph& g, const Stage& stage, const CostModel& nodes, const DevicePreset& preset,
                               int gpu) {
  return std::min(nodes.stage_ms(g, stage, gpu),
                  combine_stage_floor_ms(preset, measured_stage_items(g, stage, nodes, preset, gpu)));
}

namespace {

class ProfileCostModel : public CostModel {
 public:
  ProfileCostModel(ProfileDb db, std::string name, DevicePreset preset)
      : db_(std::move(db)), name_(std::move(name)), preset_(std::move(preset)) {
    // Unmeasured stages use the concurrency fitted to the measured ones, when there is one.
    if (!db_.concurrency.is_null()) {
      preset_ = apply_concurrency_fit(preset_, concurrency_fit_from_json(db_.concurrency, name_ + ": concurrency"));
    }
    for (const ProfileEntry& e : db_.entries) nodes_.emplace(e.key, e.ms);
    for (const ProfileStage& s : db_.stages) stages_.emplace(s.key.dump(), s.ms);
    nhwc_ = profile_measured(db_, "layout") == "nhwc";
    moved_per_graph_byte_ = profile_link_bytes_per_graph_byte(db_);
  }
  std::string name() const override { return name_; }
  std::string device() const override { return db_.device; }

  double node_ms(const Graph& g, int node, int) const override {
    HIOS_CHECK(node >= 0 && node < g.size(), "cost model: node #%d is not in graph '%s'", node, g.name.c_str());
    const Node& nd = g.nodes[node];
    if (nd.op.kind == OpKind::Input) return 0;
    // A band copy the memory plan holds in place issues no kernel (rows_copy_is_view), as in
    // the analytic model, where bands of rows are runs of memory: in NHWC, the layout the
    // database records. The database times the copy alone, which priced a row split of
    // randwire 2048 on two H200s 18% above its measurement (100 such nodes per rank).
    if (nhwc_ && rows_copy_is_view(g, node)) return 0;
    std::string key = node_signature(g, node);
    auto it = nodes_.find(key);
    if (it != nodes_.end()) return it->second;
    throw_error("profile %s has no entry for node '%s' (%s, in %s, out %s, %s, device %s); missing key: %s",
                name_.c_str(), nd.name.c_str(), describe_op(nd.op).c_str(), input_assembly(g, nd).c_str(), nd.shape.str().c_str(),
                dtype_name(g.dtype), db_.device.c_str(), key.c_str());
  }

  double transfer_ms(double bytes, int src, int dst) const override {
    if (src == dst) return 0;
    for (const ProfileLink& l : db_.links) {
      if (l.src == src && l.dst == dst) return l.latency_us * 1e-3 + bytes * moved_per_graph_byte_ / (l.bandwidth_gbs * 1e6);
    }
    throw_error("profile %s has no link entry for GPU %d -> GPU %d (device %s)", name_.c_str(), src, dst,
                db_.device.c_str());
  }

  double stage_ms(const Graph& g, const Stage& stage, int gpu) const override {
    int busy = 0;
    for (const Group& gr : stage.groups) busy += gr.nodes.empty() ? 0 : 1;
    if (busy > 1 && !stages_.empty()) {
      auto it = stages_.find(stage_key(g, stage).dump());
      if (it != stages_.end()) return it->second;
    }
    return combine_stage_ms(preset_, measured_stage_items(g, stage, *this, preset_, gpu));
  }
  double stage_floor_ms(const Graph& g, const Stage& stage, int gpu) const override {
    return measured_stage_floor_ms(g, stage, *this, preset_, gpu);
  }

 private:
  bool nhwc_ = false;  // measured in NHWC: bands of rows can be held in place
  double moved_per_graph_byte_ = 1;  // the links were timed on moved bytes: 0.5 in 16-bit math
  ProfileDb db_;
  std::string name_;
  DevicePreset preset_;
  std::unordered_map<std::string, double> nodes_;
  std::unordered_map<std::string, double> stages_;
};

}  // namespace

std::unique_ptr<CostModel> make_profile_cost_model(ProfileDb db, const std::string& name, const DevicePreset& preset) {
  return std::make_unique<ProfileCostModel>(std::move(db), name, preset);
}

std::unique_ptr<CostModel> load_profile_cost_model(const std::string& file) {
  ProfileDb db = load_profile_db(file);
  DevicePreset preset = find_device_preset(db.device);
  return make_profile_cost_model(std::move(db), file, preset);
}

// What the CLI's --cost names: the analytic model with a device preset, or a profile database
// (whose device must be --device's, when one is given).
std::unique_ptr<CostModel> make_cost_model(const std::string& cost, const std::string& device,
                                           const std::string& devices_file) {
  if (cost.empty() || cost == "analytic") {
    return make_analytic_cost_model(find_device_preset(device.empty() ? "h200" : device, devices_file));
  }
  ProfileDb db = load_profile_db(cost);
  HIOS_CHECK(device.empty() || device == db.device, "--device %s, but profile %s was measured on '%s'",
             device.c_str(), cost.c_str(), db.device.c_str());
  DevicePreset preset = find_device_preset(db.device, devices_file);
  return make_profile_cost_model(std::move(db), cost, preset);
}

}  // namespace hios
