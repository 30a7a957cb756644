#include "graph/analysis.hpp"

#include <algorithm>

#include "graph/dag.hpp"
#include "graph/error.hpp"
#include "graph/json_codec.hpp"

namespace hios {

GraphSummary summarize(const Graph& g) {
  GraphSummary s;
  s.name = g.name;
  s.batch = g.batch;
  s.height = g.height;
  s.width = g.width;
  s.nodes = g.size();
  s.blocks = static_cast<int>(g.blocks.size());
  s.edges = g.edge_count();
  s.total = g.total_cost();
  for (const Node& n : g.nodes) s.activation_bytes += double(n.shape.numel()) * dtype_size(g.dtype);
  Dag d = Dag::from_graph(g);
  // Width needs the reachability relation, n^2 bits: past kWidthNodeLimit nodes it is not
  // computed (-1) rather than run out of memory. Everything else here is linear.
  s.dag_width = g.size() <= kWidthNodeLimit ? dag_width(d) : -1;
  std::vector<int> local(size_t(g.size()), -1);  // one index map for every block, reset after each
  for (const Block& b : g.blocks) {
    // A block's width: the induced sub-DAG of its nodes.
    if (int(b.nodes.size()) > kWidthNodeLimit) {
      s.max_block_width = -1;
      continue;
    }
    for (size_t i = 0; i < b.nodes.size(); ++i) local[b.nodes[i]] = static_cast<int>(i);
    Dag sub(static_cast<int>(b.nodes.size()));
    for (int v : b.nodes) {
      for (int p : d.pred[v]) {
        if (local[p] >= 0) sub.add_edge(local[p], local[v]);
      }
    }
    for (int v : b.nodes) local[v] = -1;
    if (s.max_block_width >= 0) s.max_block_width = std::max(s.max_block_width, dag_width(sub));
  }
  PathResult lp = longest_path(d, [&](int v) { return g.nodes[v].cost.flops; });
  s.longest_path_flops = lp.length;
  s.longest_path = lp.nodes;
  s.digest = graph_digest(g);
  return s;
}

json summary_to_json(const Graph& g, const GraphSummary& s) {
  json j;
  j["name"] = s.name;
  j["batch"] = s.batch;
  j["height"] = s.height;
  j["width"] = s.width;
  j["nodes"] = s.nodes;
  j["blocks"] = s.blocks;
  j["edges"] = s.edges;
  j["flops"] = s.total.flops;
  j["macs"] = s.total.macs;
  j["params"] = s.total.params;
  j["bytes_read"] = s.total.bytes_read;
  j["bytes_written"] = s.total.bytes_written;
  j["activation_bytes"] = s.activation_bytes;
  j["dag_width"] = s.dag_width;
  j["max_block_width"] = s.max_block_width;
  j["longest_path_flops"] = s.longest_path_flops;
  json path = json::array();
  for (int v : s.longest_path) path.push_back(g.nodes[v].name);
  j["longest_path"] = path;
  j["digest"] = s.digest;
  return j;
}

std::string summary_to_text(const Graph& g, const GraphSummary& s) {
  std::string out;
  out += strprintf("graph        %s  (batch %lld, %lldx%lld, %s)\n", s.name.c_str(), (long long)s.batch,
                   (long long)s.height, (long long)s.width, dtype_name(g.dtype));
  // A graph of tensor inputs (an imported transformer's ids and mask, say): the header's batch
  // and image size say little, so each input and result is listed with its type and dims.
  bool tensors = false;
  for (int v : g.inputs()) tensors = tensors || g.nodes[size_t(v)].op.tensor_input();
  if (tensors) {
    auto list = [&](const std::vector<int>& vs) {
      std::string l;
      for (int v : vs) {
        const Node& nd = g.nodes[size_t(v)];
        l += strprintf("%s%s %s %s", l.empty() ? "" : ", ", printable(nd.name).c_str(), dtype_name(nd.dtype),
                       nd.shape.str().c_str());
      }
      return l;
    };
    out += "inputs       " + list(g.inputs()) + "\n";
    out += "results      " + list(g.results()) + "\n";
  }
  out += strprintf("nodes        %d in %d blocks, %lld edges\n", s.nodes, s.blocks, (long long)s.edges);
  out += strprintf("compute      %.3f GFLOPs  (%.3f GMACs; 1 MAC = 2 FLOPs)\n", s.total.flops / 1e9,
                   s.total.macs / 1e9);
  out += strprintf("parameters   %.3f M\n", s.total.params / 1e6);
  out += strprintf("activations  %.1f MiB (all node outputs)\n", s.activation_bytes / (1024.0 * 1024.0));
  out += strprintf("traffic      %.1f MiB read, %.1f MiB written\n", s.total.bytes_read / (1024.0 * 1024.0),
                   s.total.bytes_written / (1024.0 * 1024.0));
  auto width_text = [](int w) {
    return w >= 0 ? std::to_string(w) : strprintf("not computed (over %d nodes)", kWidthNodeLimit);
  };
  out += strprintf("width        %s (whole graph), %s (widest block)\n", width_text(s.dag_width).c_str(),
                   width_text(s.max_block_width).c_str());
  out += strprintf("longest path %.3f GFLOPs over %zu nodes (%.1f%% of all FLOPs)\n", s.longest_path_flops / 1e9,
                   s.longest_path.size(), s.total.flops > 0 ? 100.0 * s.longest_path_flops / s.total.flops : 0.0);
  out += strprintf("digest       %s\n", s.digest.c_str());
  return out;
}

static std::string dot_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}

std::string graph_to_dot(const Graph& g) {
  std::string out = "digraph \"" + dot_escape(g.name) + "\" {\n  rankdir=TB;\n  node [shape=box, fontsize=10];\n";
  auto node_line = [&](int i) {
    const Node& n = g.nodes[i];
    return strprintf("\"%s\" [label=\"%s\\n%s\\n%s\"];\n", dot_escape(n.name).c_str(), dot_escape(n.name).c_str(),
                     dot_escape(describe_op(n.op)).c_str(), n.shape.str().c_str());
  };
  out += "  " + node_line(g.input());
  for (size_t bi = 0; bi < g.blocks.size(); ++bi) {
    const Block& b = g.blocks[bi];
    out += strprintf("  subgraph \"cluster_%zu\" {\n    label=\"%s\";\n    style=rounded;\n", bi,
                     dot_escape(b.name).c_str());
    for (int i : b.nodes) out += "    " + node_line(i);
    out += "  }\n";
  }
  for (int i = 0; i < g.size(); ++i) {
    const Node& n = g.nodes[i];
    for (size_t ti = 0; ti < n.inputs.size(); ++ti) {
      for (const Value& v : n.inputs[ti]) {
        std::string label;
        if (v.begin != 0 || g.value_end(v) != g.nodes[v.node].shape.c) {
          label = strprintf(" [label=\"[%lld:%lld]\"]", (long long)v.begin, (long long)g.value_end(v));
        }
        out += strprintf("  \"%s\" -> \"%s\"%s;\n", dot_escape(g.nodes[v.node].name).c_str(),
                         dot_escape(n.name).c_str(), label.c_str());
      }
    }
  }
  out += "}\n";
  return out;
}

}  // namespace hios
