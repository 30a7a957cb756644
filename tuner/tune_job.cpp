// hios tune's job of rank commands (tune_internal.hpp, Job): rank 0 leads with small JSON
// commands, every other rank follows and executes them on its own session (loading measuring
// programs, timing nodes and stages, the parts of row splits).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <set>

#include "executor/verify.hpp"
#include "executor/weights.hpp"
#include "graph/error.hpp"
#include "graph/json_codec.hpp"
#include "graph/row_split.hpp"
#include "profiler/profile_builder.hpp"
#include "profiler/session_profiler.hpp"
#include "scheduler/spatial.hpp"
#include "tuner/tune_internal.hpp"

namespace hios::tune::detail {
// ---------------------------------------------------------------------------------------------
// The job's commands (tune_internal.hpp): rank 0 leads, every other rank follows.

json Job::lead(const json& cmd) {
  std::string text = cmd.dump();
  uint64_t n = text.size();
  comm_.broadcast(&n, sizeof n, 0);
  comm_.broadcast(text.data(), text.size(), 0);
  return execute(cmd);
}

void Job::follow() {
  for (;;) {
    uint64_t n = 0;
    comm_.broadcast(&n, sizeof n, 0);
    HIOS_CHECK(n < (uint64_t(1) << 32), "internal error: a tune command of %llu bytes", (unsigned long long)n);
    std::string text(size_t(n), '\0');
    comm_.broadcast(text.data(), text.size(), 0);
    const json cmd = json::parse(text);
    if (cmd.at("op") == "quit") return;
    execute(cmd);
  }
}

json Job::execute(const json& cmd) {
  const std::string op = cmd.at("op").get<std::string>();
  const int rank = comm_.rank(), n = comm_.size();
  const int gi = cmd.value("graph", 0);
  HIOS_CHECK(gi >= 0 && gi < int(graphs_.size()), "internal error: tune command for graph %d of %zu", gi,
             graphs_.size());
  const Graph& g = *graphs_[size_t(gi)];
  if (op == "quit") return json();
  if (op == "split") {
    owned_.push_back(apply_spatial(graph(0), spatial_from_json(cmd.at("plan"), "split")));
    graphs_.push_back(&owned_.back());
    return json(int(graphs_.size()) - 1);
  }
  if (op == "adopt") {
    // Algorithm choices to rebuild instead of timing (rank 0's, or the database's).
    s_.backend().adopt_algorithm_choices(cmd.at("choices"));
    return json();
  }
  if (op == "measure-parts") return measure_parts(cmd);
  if (op == "devices") {
    // Which ranks share a device: the host and the backend's device (a GPU's bus, or the CPU).
    const std::vector<std::string> all = comm_.allgather(comm_.hostname() + " " + s_.backend().device_name());
    return json(std::set<std::string>(all.begin(), all.end()).size());
  }
  s_.use_graph(g);  // every command below loads a program of g
  if (op == "load-empty") {
    s_.load(prof::empty_program(g, rank, n));
    return json();
  }
  if (op == "links") {
    links = prof::measure_links(s_, cmd.at("nodes").get<std::vector<int>>(), o_.link_warmup, o_.link_iters);
    return json();
  }
  if (op == "measure-load") {
    load_measuring(g, cmd.at("streams").get<int>(), 0);
    return json();
  }
  if (op == "overhead") {
    // The fixed cost of a pass (barrier release, launch, the host's wait), which a
    // simulation of the stages does not contain: passes of a program with no work.
    s_.load(prof::empty_program(g, rank, n));
    for (int i = 0; i < o_.warmup; ++i) s_.pass();
    return json(median(s_.timed_passes(cmd.at("passes").get<int>())));
  }
  if (op == "time") {
    const Schedule sched = schedule_from_json(g, cmd.at("schedule"), "candidate");
    exec::LaunchOrder order;
    if (cmd.contains("launch_order")) {
      exec::SessionOptions measuring = o_.session;
      measuring.device = s_.backend_config().device;
      order = exec::make_launch_order(cmd.at("launch_order").get<std::string>(), g, measuring, s_.comm());
    }
    s_.load_schedule(sched, true, order);
    if (rank == 0) s_.backend().set_input(exec::make_input(g, o_.session.seed));
    // Exactly as `hios run` warms up and times a schedule.
    s_.warm_up(cmd.at("warmup").get<int>(), cmd.at("capture").get<bool>() && s_.can_capture());
    const double ms = median(s_.timed_passes(cmd.at("passes").get<int>()));
    if (rank == 0) output = s_.backend().read_tensor(g.output());
    return json(ms);
  }
  throw_error("internal error: unknown tune command '%s'", op.c_str());
}

// Loads g's measuring program, whose nodes `measuring_rank` times (the others load an empty
// one: loading is collective); the measuring rank runs one pass, so that every tensor holds
// real data for the nodes and stages to read.
void Job::load_measuring(const Graph& g, int streams, int measuring_rank) {
  const int rank = comm_.rank();
  s_.load(prof::measurement_program(g, rank, comm_.size(), streams, measuring_rank));
  if (rank != measuring_rank) return;
  s_.backend().set_input(exec::make_input(g, o_.session.seed));
  s_.pass(true);
}

// Up to one graph per rank, measured side by side: rank r loads the measuring program of
// graph cmd.graphs[r] and times its every node (ranks past the list load an empty program, as
// loading is collective). Then every rank adopts the algorithm choices the others made for
// their graphs' shapes, and rank 0 keeps every rank's samples in part_samples.
json Job::measure_parts(const json& cmd) {
  const int rank = comm_.rank(), n = comm_.size();
  const std::vector<int> graphs = cmd.at("graphs").get<std::vector<int>>();
  HIOS_CHECK(!graphs.empty() && int(graphs.size()) <= n, "internal error: %zu graphs measured on %d ranks",
             graphs.size(), n);
  json mine = json::object();
  if (rank < int(graphs.size())) {
    const Graph& g = graph(graphs[size_t(rank)]);
    s_.use_graph(g);
    load_measuring(g, cmd.at("streams").get<int>(), rank);
    prof::StageTimer timer(s_);
    json nodes = json::array();
    for (const prof::NodeSamples& ns : time_every_node(timer, s_.backend().can_capture(), o_.node_warmup, o_.node_iters)) {
      if (!ns.wall_ms.empty()) nodes.push_back(json{ns.node, ns.wall_ms});
    }
    mine["nodes"] = std::move(nodes);
  } else {
    s_.use_graph(graph(0));
    s_.load(prof::empty_program(graph(0), rank, n));
  }
  mine["choices"] = s_.backend().algorithm_choices();
  const std::vector<std::string> all = comm_.allgather(mine.dump());
  for (int r = 0; r < n; ++r) {
    const json theirs = json::parse(all[size_t(r)]);
    if (r != rank && !theirs.at("choices").empty()) s_.backend().adopt_algorithm_choices(theirs.at("choices"));
    if (rank != 0 || r >= int(graphs.size())) continue;
    std::vector<prof::NodeSamples>& out = part_samples[graphs[size_t(r)]];
    out.clear();
    for (const json& e : theirs.at("nodes")) {
      prof::NodeSamples ns;
      ns.node = e.at(0).get<int>();
      ns.wall_ms = e.at(1).get<std::vector<double>>();
      out.push_back(std::move(ns));
    }
  }
  return json();
}

}  // namespace hios::tune::detail
