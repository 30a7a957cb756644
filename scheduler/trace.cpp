// Chrome trace export of a simulation (the JSON Array/Object format that Perfetto and
// chrome://tracing load).
#include <algorithm>
#include <map>

#include "graph/error.hpp"
#include "scheduler/simulator.hpp"

namespace hios {

namespace {

json meta_event(const char* what, int pid, int tid, const json& args) {
  json e;
  e["name"] = what;
  e["ph"] = "M";
  e["pid"] = pid;
  if (tid >= 0) e["tid"] = tid;
  e["args"] = args;
  return e;
}

json span(const std::string& name, const char* cat, int pid, int tid, double start_ms, double end_ms, json args) {
  json e;
  e["name"] = name;
  e["cat"] = cat;
  e["ph"] = "X";
  e["pid"] = pid;
  e["tid"] = tid;
  e["ts"] = start_ms * 1000.0;  // trace time is in microseconds
  e["dur"] = std::max(0.0, end_ms - start_ms) * 1000.0;
  e["args"] = std::move(args);
  return e;
}

}  // namespace

std::string sim_to_chrome_trace(const Graph& g, const Schedule& s, const SimResult& r) {
  int gpus = std::max(1, s.meta.num_gpus);
  for (const SimNode& n : r.nodes) gpus = std::max(gpus, n.gpu + 1);
  for (const SimTransfer& t : r.transfers) gpus = std::max({gpus, t.src + 1, t.dst + 1});
  auto block_name = [&](int b) { return b >= 0 && b < static_cast<int>(g.blocks.size()) ? g.blocks[b].name : "?"; };

  // Thread 0 of each GPU shows the stages (the synchronisation points); stream q is thread q+1.
  std::vector<json> events;
  std::vector<int> streams(gpus, 0);
  for (const SimNode& n : r.nodes) streams[n.gpu] = std::max(streams[n.gpu], n.stream + 1);
  for (int d = 0; d < gpus; ++d) {
    events.push_back(meta_event("process_name", d, -1, json{{"name", strprintf("GPU %d", d)}}));
    events.push_back(meta_event("process_sort_index", d, -1, json{{"sort_index", d}}));
    events.push_back(meta_event("thread_name", d, 0, json{{"name", "stages"}}));
    for (int q = 0; q < streams[d]; ++q) {
      events.push_back(meta_event("thread_name", d, q + 1, json{{"name", strprintf("stream %d", q)}}));
    }
  }
  const int links_pid = gpus;
  std::map<std::pair<int, int>, int> link_tid;
  for (const SimTransfer& t : r.transfers) link_tid.emplace(std::pair{t.src, t.dst}, 0);
  if (!link_tid.empty()) {
    events.push_back(meta_event("process_name", links_pid, -1, json{{"name", "links"}}));
    events.push_back(meta_event("process_sort_index", links_pid, -1, json{{"sort_index", links_pid}}));
    int tid = 0;
    for (auto& [pair, id] : link_tid) {
      id = tid++;
      events.push_back(
          meta_event("thread_name", links_pid, id, json{{"name", strprintf("GPU %d -> GPU %d", pair.first, pair.second)}}));
    }
  }

  for (const SimStage& st : r.stages) {
    events.push_back(span(strprintf("%s stage %d", block_name(st.block).c_str(), st.stage), "stage", st.gpu, 0,
                          st.start_ms, st.end_ms, json{{"block", block_name(st.block)}, {"stage", st.stage}}));
  }
  for (const SimNode& n : r.nodes) {
    const Node& nd = g.nodes[n.node];
    events.push_back(span(nd.name, "node", n.gpu, n.stream + 1, n.start_ms, n.end_ms,
                          json{{"op", describe_op(nd.op)},
                               {"shape", nd.shape.str()},
                               {"block", block_name(n.block)},
                               {"stage", n.stage},
                               {"ms", n.end_ms - n.start_ms}}));
  }
  for (const SimTransfer& t : r.transfers) {
    events.push_back(span(g.nodes[t.node].name, "transfer", links_pid, link_tid.at({t.src, t.dst}), t.start_ms, t.end_ms,
                          json{{"src", t.src}, {"dst", t.dst}, {"bytes", t.bytes}, {"ms", t.end_ms - t.start_ms}}));
  }

  json other;
  other["graph"] = g.name;
  other["algorithm"] = s.meta.algorithm;
  other["gpus"] = s.meta.num_gpus;
  other["latency_ms"] = r.latency_ms;
  // One event per line: traces of big graphs stay greppable and diffable.
  std::string out = "{\"displayTimeUnit\": \"ms\", \"otherData\": " + other.dump() + ",\n\"traceEvents\": [\n";
  for (size_t i = 0; i < events.size(); ++i) out += events[i].dump() + (i + 1 < events.size() ? ",\n" : "\n");
  out += "]}\n";
  return out;
}

}  // namespace hios
