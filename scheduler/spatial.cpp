#include "scheduler/spatial.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>

#include "graph/error.hpp"
#include "graph/json_codec.hpp"
#include "scheduler/simulator.hpp"

namespace hios {

namespace {

int parse_parts(const std::string& s) {
  char* end = nullptr;
  const long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || v < 2 || v > 64) return -1;
  return int(v);
}

// At most `most` of the values, evenly spread, always keeping the last.
std::vector<int> spread(const std::vector<int>& v, size_t most) {
  if (v.size() <= most) return v;
  std::vector<int> out;
  for (size_t i = 1; i <= most; ++i) out.push_back(v[(i * v.size()) / most - 1]);
  return out;
}

std::string region_label(const SplitRegion& r) {
  return (r.first_block == r.last_block ? r.first_block : r.first_block + ".." + r.last_block);
}

}  // namespace

void check_spatial_options(const SpatialOptions& sp) {
  HIOS_CHECK(sp.spatial == "off" || sp.spatial == "auto" || parse_parts(sp.spatial) > 0,
             "--spatial: '%s' is not off, auto or a number of parts from 2 to 64", sp.spatial.c_str());
  HIOS_CHECK(sp.mode == "halo" || sp.mode == "halo-overlap" || sp.mode == "recompute" || sp.mode == "mixed" ||
                 sp.mode == "mixed-cost" || sp.mode == "auto",
             "--spatial-mode: '%s' is not halo, halo-overlap, recompute, mixed, mixed-cost or auto", sp.mode.c_str());
}

constexpr int kSplitRecvLead = 2;

std::string split_style_name(const SplitStyle& s) {
  std::string name = split_mode_name(s.mode);
  if (s.mode == SplitMode::Mixed) name += s.sync_by_cost ? std::string("/cost") : strprintf("/%d", s.sync_every);
  if (s.overlap) name += "+overlap";
  return name;
}

std::vector<int> sync_blocks_by_cost(const Graph& g, int first, int last, int parts, const CostModel& cost) {
  SyncCosts costs;
  costs.node_ms = [&](int v) { return cost.node_ms(g, v, 0); };
  costs.transfer_ms = [&](double bytes) { return cost.transfer_ms(bytes, 0, 1); };
  return sync_blocks_by_cost(g, first, last, parts, costs);
}

namespace {

// The blocks a style syncs at in a mixed split of [first, last].
std::vector<int> style_sync_blocks(const Graph& g, int first, int last, int parts, const SplitStyle& style,
                                   const CostModel* cost) {
  if (!style.sync_by_cost) return sync_blocks_every(first, last, style.sync_every);
  HIOS_CHECK(cost != nullptr, "split style %s needs a cost model", split_style_name(style).c_str());
  return sync_blocks_by_cost(g, first, last, parts, *cost);
}

// Every node's rows of a region plan, as one string to compare plans by.
std::string rows_key(const SplitRegion& r) {
  std::string key;
  for (const auto& [name, ranges] : r.rows) {
    key += name;
    for (const RowRange& rr : ranges) key += strprintf(" %lld-%lld", (long long)rr.begin, (long long)rr.end);
    key += ';';
  }
  return key;
}

}  // namespace

SplitRegion plan_region(const Graph& g, int first, int last, int parts, const SplitStyle& style,
                        const CostModel* cost) {
  SplitRegion r = style.mode == SplitMode::Mixed
                      ? plan_region_synced(g, first, last, parts, style_sync_blocks(g, first, last, parts, style, cost))
                      : plan_region(g, first, last, parts, style.mode);
  r.overlap = style.overlap;
  return r;
}

std::vector<SplitStyle> split_modes(const std::string& mode) {
  const SplitStyle halo{SplitMode::Halo, 1, false}, overlap{SplitMode::Halo, 1, true};
  const SplitStyle recompute{SplitMode::Recompute, 1, false};
  const std::vector<SplitStyle> mixed = {{SplitMode::Mixed, 1, false},
                                         {SplitMode::Mixed, 2, false},
                                         {SplitMode::Mixed, 4, false},
                                         {SplitMode::Mixed, 1, false, true}};
  // Overlap only when asked for: its edges cost more kernels than the halo latency they hide
  // (inception_v3 at 2048 on two H100s, docs/row-splits.md), and every style tried costs a tune
  // a search.
  if (mode == "halo") return {halo};
  if (mode == "halo-overlap") return {overlap};
  if (mode == "recompute") return {recompute};
  if (mode == "mixed") return mixed;
  if (mode == "mixed-cost") return {mixed.back()};
  std::vector<SplitStyle> all = {halo, recompute};
  all.insert(all.end(), mixed.begin(), mixed.end());
  return all;
}

std::vector<SpatialPlan> region_plans(const Graph& g, int parts, const std::vector<SplitStyle>& modes,
                                      const CostModel* cost) {
  std::vector<std::pair<int, int>> regions;
  for (const auto& run : splittable_runs(g, parts)) {
    for (int first = run.first; first <= run.second; ++first) {
      for (int last = first; last <= run.second; ++last) {
        if (region_legal(g, first, last, parts)) regions.push_back({first, last});
      }
    }
  }
  std::stable_sort(regions.begin(), regions.end(),
                   [](const auto& a, const auto& b) { return a.second - a.first > b.second - b.first; });
  std::vector<SpatialPlan> plans;
  for (const auto& [first, last] : regions) {
    // The rows of the recompute and mixed plans of this region so far: two sync sets can give
    // the same rows (a block exit read only by a partial pool needs no overlap either way).
    std::set<std::string> rows_seen;
    for (const SplitStyle& m : modes) {
      SplitRegion r = plan_region(g, first, last, parts, m, cost);
      if (m.mode != SplitMode::Halo && !rows_seen.insert(rows_key(r)).second) continue;
      plans.push_back(SpatialPlan{{std::move(r)}});
    }
  }
  return plans;
}

// Part k of a split on GPU k (mod G): "X@k" and its input assembly "X@k:a-b" with part k, a
// halo cut "X@j>k:a-b" with the part it is cut from (so only the halo moves), a cut of the
// graph input on GPU 0, and any other node of a split (a cut of the region's input) with the
// first part that reads it.
std::vector<int> suggested_part_gpus(const Graph& sg) {
  std::vector<int> hint(size_t(sg.size()), -1);
  for (int v = 0; v < sg.size(); ++v) {
    const SplitName sn = parse_split_name(sg.nodes[size_t(v)].name);
    if (sn.of_part()) hint[size_t(v)] = sn.part;
  }
  const auto succ = sg.successors();
  for (int v = sg.size() - 1; v >= 0; --v) {
    if (hint[size_t(v)] >= 0 || sg.nodes[size_t(v)].op.kind != OpKind::Rows) continue;
    // A cut of the graph input runs where the input is (GPU 0), so that only its rows move.
    if (sg.nodes[size_t(v)].inputs.size() == 1 && sg.nodes[size_t(v)].inputs[0].at(0).node == sg.input()) {
      hint[size_t(v)] = 0;
      continue;
    }
    for (int c : succ[size_t(v)]) {
      if (hint[size_t(c)] >= 0) {
        hint[size_t(v)] = hint[size_t(c)];
        break;
      }
    }
  }
  return hint;
}

namespace {

// The role of a node of a split graph in an overlapping part, and the part ("X@k") it belongs to.
enum class PieceRole { None, Middle, Edge, HaloCut };

PieceRole piece_role(const std::string& name, std::string& part) {
  const SplitName sn = parse_split_name(name);
  if (sn.kind == SplitName::Kind::Piece) {
    part = sn.part_name();
    return sn.piece == "/mid" ? PieceRole::Middle : PieceRole::Edge;
  }
  if (sn.kind == SplitName::Kind::HaloCut) {
    part = sn.part_name();
    return PieceRole::HaloCut;
  }
  return PieceRole::None;
}

// Where each node sits in one GPU's stages of one block: its stage index, -1 elsewhere.
std::vector<int> stage_positions(const Graph& g, const std::vector<Stage>& stages) {
  std::vector<int> pos(size_t(g.size()), -1);
  for (size_t i = 0; i < stages.size(); ++i) {
    for (const Group& gr : stages[i].groups) {
      for (int v : gr.nodes) pos[size_t(v)] = int(i);
    }
  }
  return pos;
}

}  // namespace

int hoist_halo_edges(const Graph& split, Schedule& s) {
  std::vector<bool> sends_halo(size_t(split.size()), false);  // an edge piece or a halo cut
  bool any = false;
  for (int v = 0; v < split.size(); ++v) {
    std::string part;
    const PieceRole r = piece_role(split.nodes[size_t(v)].name, part);
    sends_halo[size_t(v)] = r == PieceRole::Edge || r == PieceRole::HaloCut;
    any = any || r == PieceRole::Middle;
  }
  if (!any) return 0;  // no overlapping part: nothing to hoist
  // The block of every node, to tell producers of an earlier block (done before it starts).
  std::vector<int> block_of(size_t(split.size()), -1);
  for (size_t b = 0; b < s.blocks.size(); ++b) {
    for (const auto& stages : s.blocks[b]) {
      for (const Stage& st : stages) {
        for (const Group& gr : st.groups) {
          for (int v : gr.nodes) block_of[size_t(v)] = int(b);
        }
      }
    }
  }
  int moved = 0;
  for (size_t b = 0; b < s.blocks.size(); ++b) {
    for (std::vector<Stage>& stages : s.blocks[b]) {
      for (size_t j = 1; j < stages.size(); ++j) {
        bool hoist = false, legal = true;
        int earliest = 0;  // just after the last stage holding a producer
        const std::vector<int> pos = stage_positions(split, stages);
        for (const Group& gr : stages[j].groups) {
          for (int v : gr.nodes) {
            hoist = hoist || sends_halo[size_t(v)];
            for (const Term& t : split.nodes[size_t(v)].inputs) {
              for (const Value& in : t) {
                if (in.node == split.input() || block_of[size_t(in.node)] != int(b)) continue;
                const int p = pos[size_t(in.node)];
                legal = legal && p >= 0;  // a producer on another GPU of this block: left in place
                earliest = std::max(earliest, p + 1);
              }
            }
          }
        }
        if (!hoist || !legal || earliest >= int(j)) continue;
        Stage st = std::move(stages[j]);
        stages.erase(stages.begin() + std::ptrdiff_t(j));
        stages.insert(stages.begin() + earliest, std::move(st));
        ++moved;
      }
    }
  }
  return moved;
}

namespace {

// The node of g a node of the split graph stands for, and the share of its rows it computes:
// a part "X@k" (or a piece of it, "X@k/mid") is X at (its rows / X's rows); a node outside
// every region is itself at 1.
// Rows nodes and a sum of partial pools (which keep a name of g but not its op) stand for none.
class SplitCostModel final : public CostModel {
 public:
  SplitCostModel(const Graph& g, const Graph& split, const CostModel& unsplit, const DevicePreset& preset)
      : g_(g), split_(split), unsplit_(unsplit), preset_(preset), analytic_(make_analytic_cost_model(preset)) {
    std::map<std::string, int> by_name;
    for (int v = 0; v < g.size(); ++v) by_name[g.nodes[size_t(v)].name] = v;
    origin_.assign(size_t(split.size()), {-1, 1.0});
    for (int v = 0; v < split.size(); ++v) {
      const Node& nd = split.nodes[size_t(v)];
      if (nd.op.kind == OpKind::Rows) continue;
      // A part "X@k", or a piece of one ("X@k/top", "X@k/mid", "X@k/bottom"), stands for X.
      const SplitName sn = parse_split_name(nd.name);
      const bool part = sn.kind == SplitName::Kind::Part || sn.kind == SplitName::Kind::Piece;
      const std::string name = part ? sn.base : nd.name;
      auto it = by_name.find(name);
      if (it == by_name.end()) continue;
      const Node& whole = g.nodes[size_t(it->second)];
      if (whole.op.kind != nd.op.kind) continue;  // the sum of partial pools keeps the pool's name
      double share = 1.0;
      if (part) {
        const bool partial_pool = nd.op.kind == OpKind::Pool && nd.shape.h == whole.shape.h && !nd.inputs.empty();
        share = partial_pool ? double(split.value_shape(nd.inputs[0][0]).h) / double(g.value_shape(whole.inputs[0][0]).h)
                             : double(nd.shape.h) / double(std::max<int64_t>(1, whole.shape.h));
      }
      origin_[size_t(v)] = {it->second, share};
    }
    memo_.assign(origin_.size(), -1.0);
  }
  std::string name() const override { return unsplit_.name() + " (scaled to row splits)"; }
  std::string device() const override { return unsplit_.device(); }
  double node_ms(const Graph& g, int node, int gpu) const override {
    if (&g != &split_) return unsplit_.node_ms(g, node, gpu);
    // Searches ask for the same nodes many times, and a profile model's lookup builds the
    // node's signature each time: remembered per node (the GPUs of a host are alike).
    double& ms = memo_.at(size_t(node));
    if (ms < 0) {
      const auto& [u, share] = origin_.at(size_t(node));
      ms = u >= 0 ? share * unsplit_.node_ms(g_, u, gpu) : analytic_->node_ms(g, node, gpu);
    }
    return ms;
  }
  double transfer_ms(double bytes, int src, int dst) const override { return unsplit_.transfer_ms(bytes, src, dst); }
  double stage_ms(const Graph& g, const Stage& stage, int gpu) const override {
    size_t busy = 0;
    double sum = 0;
    for (const Group& gr : stage.groups) {
      if (gr.nodes.empty()) continue;
      ++busy;
      for (int v : gr.nodes) sum += node_ms(g, v, gpu);
    }
    if (busy <= 1) return sum;
    return combine_stage_ms(preset_, measured_stage_items(g, stage, *this, preset_, gpu));
  }
  double stage_floor_ms(const Graph& g, const Stage& stage, int gpu) const override {
    return measured_stage_floor_ms(g, stage, *this, preset_, gpu);
  }

 private:
  const Graph& g_;
  const Graph& split_;
  const CostModel& unsplit_;
  DevicePreset preset_;
  std::unique_ptr<CostModel> analytic_;
  std::vector<std::pair<int, double>> origin_;
  mutable std::vector<double> memo_;
};

}  // namespace

std::unique_ptr<CostModel> make_split_cost_model(const Graph& g, const Graph& split, const CostModel& unsplit,
                                                 const DevicePreset& preset) {
  return std::make_unique<SplitCostModel>(g, split, unsplit, preset);
}

double split_quick_estimate_ms(const Graph& split, const CostModel& cost, int gpus) {
  std::vector<int> gpu_of = suggested_part_gpus(split);
  std::vector<int> order;
  for (int v = 0; v < split.size(); ++v) {
    if (v == split.input()) continue;
    gpu_of[size_t(v)] = std::max(0, gpu_of[size_t(v)]) % gpus;
    order.push_back(v);
  }
  Schedule s = plan_to_schedule(split, plan_from_order(split, gpu_of, order, gpus));
  s.derive_transfers(split);
  return simulate(split, s, cost).latency_ms;
}

namespace {

// --spatial auto: one region each, 2, 4, ... parts up to the GPUs (and the GPU count itself),
// up to six region ends per splittable run, in every mode allowed. Most parts and longest
// regions first: when the time budget runs out on many GPUs, what is left untried is the
// variants least likely to win there.
std::vector<SpatialPlan> auto_split_candidates(const Graph& g, const CostModel& cost, int num_gpus,
                                               const std::vector<SplitStyle>& modes) {
  std::vector<int> part_counts;
  for (int p = 2; p <= std::min(num_gpus, 64); p *= 2) part_counts.push_back(p);
  if (num_gpus >= 2 &&
      std::find(part_counts.begin(), part_counts.end(), std::min(num_gpus, 64)) == part_counts.end()) {
    part_counts.push_back(std::min(num_gpus, 64));
  }
  std::sort(part_counts.rbegin(), part_counts.rend());
  std::vector<SpatialPlan> candidates;
  for (int parts : part_counts) {
    for (const auto& run : splittable_runs(g, parts)) {
      std::vector<int> ends;
      for (int e = run.first; e <= run.second; ++e) {
        if (region_legal(g, run.first, e, parts)) ends.push_back(e);
      }
      std::vector<int> picked = spread(ends, 6);
      std::reverse(picked.begin(), picked.end());
      for (int e : picked) {
        for (const SplitStyle& m : modes) {
          candidates.push_back(SpatialPlan{{plan_region(g, run.first, e, parts, m, &cost)}});
        }
      }
    }
  }
  return candidates;
}

// A forced --spatial P: every splittable run of blocks split P ways, one plan per mode.
std::vector<SpatialPlan> forced_split_candidates(const Graph& g, const CostModel& cost, int parts,
                                                 const std::vector<SplitStyle>& modes) {
  const auto runs = splittable_runs(g, parts);
  std::vector<SpatialPlan> candidates;
  for (const SplitStyle& m : modes) {
    SpatialPlan plan;
    for (const auto& run : runs) plan.regions.push_back(plan_region(g, run.first, run.second, parts, m, &cost));
    if (!plan.empty()) candidates.push_back(std::move(plan));
  }
  return candidates;
}

// One candidate as the schedule's meta.params.spatial.tried lists it.
json tried_row(const SpatialPlan& plan, double predicted_ms) {
  json row = json{{"regions", json::array()}, {"predicted_ms", predicted_ms}};
  for (const SplitRegion& r : plan.regions) {
    row["regions"].push_back(json{{"blocks", region_label(r)}, {"parts", r.parts}, {"mode", split_mode_name(r.mode)}});
  }
  return row;
}

void report_candidate(const SchedulerOptions& opt, int index, size_t count, const SpatialPlan& plan, double predicted_ms) {
  if (!opt.progress) return;
  const SplitRegion& r0 = plan.regions.front();
  opt.progress(strprintf("spatial: candidate %d of %zu (%s, %d ways, %s%s): predicted %.4f ms", index, count,
                         region_label(r0).c_str(), r0.parts, split_mode_name(r0.mode),
                         plan.regions.size() > 1 ? strprintf(", %zu regions", plan.regions.size()).c_str() : "",
                         predicted_ms));
}

// The chosen split's one-line summary and its record in the schedule's meta.
void describe_chosen_split(const Graph& g, SpatialSchedule& best) {
  best.summary = describe_spatial(g, best.plan);
  if (!best.summary.empty() && best.summary.back() == '\n') best.summary.pop_back();
  for (size_t i = 0; (i = best.summary.find('\n', i)) != std::string::npos;) best.summary.replace(i, 1, "; ");
  json regions = spatial_to_json(best.plan)["regions"];
  best.schedule.meta.spatial = json{{"graph_digest", graph_digest(g)}, {"regions", std::move(regions)}};
  // A split moves many small tensors (halos, cuts of the region's input, the parts to the
  // gather). Posted at the start of the pass, their receives would pin the received bands, and
  // the bands held in place with them, for the whole pass; a lead of two stages gates them and
  // fences the sends, so the memory plan shares that memory. On two H100s it was also the
  // fastest of -1, 0 and 2 for inception_v3's splits at 2048 (docs/row-splits.md).
  if (best.schedule.meta.recv_lead < 0) best.schedule.meta.recv_lead = kSplitRecvLead;
}

}  // namespace

SpatialSchedule schedule_spatial(const std::string& algo, const Graph& g, const CostModel& cost,
                                 const SchedulerOptions& opt, const SpatialOptions& sp) {
  check_spatial_options(sp);
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };

  SpatialSchedule best{g, run_algorithm(algo, g, cost, opt), {}, "no row split"};
  json tried = json::array();
  tried.push_back(json{{"split", "none"}, {"predicted_ms", best.schedule.meta.predicted_ms}});

  std::vector<SpatialPlan> candidates;
  const std::vector<SplitStyle> modes = split_modes(sp.mode);
  if (sp.spatial == "auto") {
    if (opt.num_gpus < 2) best.summary = "no row split: one GPU";
    candidates = auto_split_candidates(g, cost, opt.num_gpus, modes);
  } else if (sp.spatial != "off") {
    const int parts = parse_parts(sp.spatial);
    candidates = forced_split_candidates(g, cost, parts, modes);
    if (candidates.empty()) best.summary = strprintf("no row split: no run of blocks can be split %d ways", parts);
  }

  // Each candidate scheduled by the same algorithm within what is left of the time budget. A
  // forced split is kept even when slower (that is what forcing means); auto keeps the fastest.
  const bool forced = sp.spatial != "off" && sp.spatial != "auto";
  bool have_split = false;
  int skipped = 0, index = 0;
  for (const SpatialPlan& plan : candidates) {
    ++index;
    SchedulerOptions o = opt;
    o.progress = nullptr;  // one line per candidate below instead of each search's own
    if (opt.time_budget_s > 0) {
      const double left = opt.time_budget_s - elapsed();
      if (left <= 0) {
        ++skipped;
        continue;
      }
      o.time_budget_s = left;
    }
    Graph sg = apply_spatial(g, plan);
    o.gpu_hint = suggested_part_gpus(sg);
    Schedule s = run_algorithm(algo, sg, cost, o);
    if (hoist_halo_edges(sg, s) > 0) s.meta.predicted_ms = simulate(sg, s, cost).latency_ms;
    report_candidate(opt, index, candidates.size(), plan, s.meta.predicted_ms);
    tried.push_back(tried_row(plan, s.meta.predicted_ms));
    const bool better = s.meta.predicted_ms < best.schedule.meta.predicted_ms;
    if ((forced && (!have_split || better)) || (!forced && better)) {
      best = SpatialSchedule{std::move(sg), std::move(s), plan, ""};
      have_split = true;
    }
  }
  if (have_split) {
    describe_chosen_split(g, best);
  } else if (sp.spatial == "auto" && opt.num_gpus >= 2) {
    best.summary = candidates.empty() ? "no row split: no run of blocks can be split by rows"
                                      : "no row split: none is predicted faster";
  }
  if (sp.spatial != "off") {
    json info = json{{"setting", sp.spatial}, {"mode", sp.mode}, {"tried", std::move(tried)}};
    if (skipped > 0) info["skipped_for_budget"] = skipped;
    best.schedule.meta.params["spatial"] = std::move(info);
  }
  return best;
}

}  // namespace hios
