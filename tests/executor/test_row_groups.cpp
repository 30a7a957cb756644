// Bands of a row split held in place (executor/memory_plan.hpp, MemoryPlanOptions::rows_in_place):
// the planner puts the parts, halos and assemblies of one tensor at the addresses of their rows,
// so the `rows` copies become no-ops. The CPU backend stores NCHW, where a band is not one run of
// memory, so these tests replay each rank's program over an NHWC arena of their own: every read
// must see exactly the value a separate-buffer run computed, under random interleavings of the
// streams that the program's events allow, with `rows` nodes copying only the rows that are not
// in place, as the CUDA kernel does.
#include <cmath>
#include <map>
#include <string>

#include "executor/backend.hpp"
#include "executor/memory_plan.hpp"
#include "executor/program.hpp"
#include "executor/registry.hpp"
#include "executor/tensor_layout.hpp"
#include "executor/weights.hpp"
#include "graph/row_split.hpp"
#include "helpers.hpp"
#include "scheduler/spatial.hpp"
#include "models/models.hpp"
#include "tests/catch.hpp"

using namespace hios;
using namespace hios::exec;

namespace {

// Every node's value (NCHW), from a sequential run of g on one rank with a buffer per tensor.
std::map<int, std::vector<float>> every_value(const Graph& g) {
  const RankProgram p = lower(g, sequential_schedule(g), 0);
  std::unique_ptr<Backend> b = make_backend("cpu", BackendConfig{});
  b->prepare(g, p);
  b->set_input(make_input(g));
  for (const Instr& in : p.instrs) {
    if (in.kind == InstrKind::Launch) b->launch(in.node, in.stream);
  }
  b->synchronize();
  std::map<int, std::vector<float>> out;
  for (int v = 0; v < g.size(); ++v) out[v] = b->read_tensor(v);
  return out;
}

// Replays rank program p over one NHWC float arena. Kernels write their node's known value;
// a Recv writes the value it would receive; a `rows` node copies, row by row, from the first
// operand holding each row, skipping rows already at their place (what the CUDA kernel skips).
// Every Launch, Send and Gather first checks that its inputs hold their values. Returns the
// first mismatch ("" when none).
class NhwcReplay {
 public:
  NhwcReplay(const Graph& g, const RankProgram& p, const std::map<int, std::vector<float>>& values)
      : g_(g), p_(p), arena_(size_t(p.arena_bytes / 4), std::nanf("")) {
    REQUIRE(p.arena_bytes > 0);
    for (const Instr& in : p.instrs) {
      if (in.kind == InstrKind::Alloc) at_[in.node] = in.offset / 4;
    }
    for (const auto& [v, nchw] : values) nhwc_[v] = to_layout(nchw, g.nodes[size_t(v)].shape, Layout::Nhwc);
    const int input = g.input();
    if (at_.count(input)) put(input);  // written once, before any pass
  }

  std::string run(uint32_t seed) {
    std::string bad;
    const bool finished = test::interleave(p_, seed, [&](const Instr& in) {
      switch (in.kind) {
        case InstrKind::Recv: put(in.node); break;
        case InstrKind::Send:
        case InstrKind::Gather: bad = check(in.node, "sent or gathered"); break;
        case InstrKind::Launch: bad = launch(in.node); break;
        default: break;
      }
      return bad.empty();
    });
    if (!bad.empty()) return bad;
    return finished ? "" : "the replay stalled";
  }

 private:
  float* base(int v) { return arena_.data() + at_.at(v); }

  void put(int v) {
    const std::vector<float>& x = nhwc_.at(v);
    std::copy(x.begin(), x.end(), base(v));
  }

  std::string check(int v, const char* role) {
    const std::vector<float>& want = nhwc_.at(v);
    const float* got = base(v);
    for (size_t i = 0; i < want.size(); ++i) {
      if (!(got[i] == want[i])) {
        return "tensor '" + g_.nodes[size_t(v)].name + "' " + role + " does not hold its value at element " +
               std::to_string(i);
      }
    }
    return "";
  }

  std::string launch(int v) {
    const Node& nd = g_.nodes[size_t(v)];
    for (const Term& t : nd.inputs) {
      for (const Value& val : t) {
        if (!at_.count(val.node)) return "input '" + g_.nodes[size_t(val.node)].name + "' is not resident";
        std::string bad = check(val.node, ("read by '" + nd.name + "'").c_str());
        if (!bad.empty()) return bad;
      }
    }
    if (nd.op.kind != OpKind::Rows) {
      put(v);
      return "";
    }
    // The rows kernel: each row from the first operand holding it, a pixel's channels [begin,
    // end) of it; nothing to do where source and destination are one address.
    const RowsAttrs& a = nd.op.rows();
    const Shape& y = nd.shape;
    for (int64_t r = a.first; r < a.first + a.count; ++r) {
      size_t k = 0;
      while (k < nd.inputs.size() && !(a.held[k] <= r && r < a.held[k] + g_.value_shape(nd.inputs[k][0]).h)) ++k;
      if (k == nd.inputs.size()) return "no operand of '" + nd.name + "' holds a row";
      const Value& src = nd.inputs[k][0];
      const Shape& u = g_.nodes[size_t(src.node)].shape;
      const int64_t c0 = src.begin;
      float* to = base(v) + (r - a.first) * y.w * y.c;
      const float* from = base(src.node) + (r - a.held[k]) * u.w * u.c;
      if (to == from && u.c == y.c) continue;  // in place
      for (int64_t x = 0; x < y.w; ++x) {
        for (int64_t c = 0; c < y.c; ++c) to[x * y.c + c] = from[x * u.c + c0 + c];
      }
    }
    return check(v, "written by its rows copy");
  }

  const Graph& g_;
  const RankProgram& p_;
  std::vector<float> arena_;
  std::map<int, int64_t> at_;  // node -> its first float in the arena
  std::map<int, std::vector<float>> nhwc_;
};

MemoryPlanOptions in_place() {
  MemoryPlanOptions o;
  o.rows_in_place = true;
  return o;
}

Graph inception_split(int parts, const SplitStyle& style) {
  const Graph g = build_model("inception_v3", ModelParams{1, 75, 75});
  const auto runs = splittable_runs(g, parts);
  REQUIRE_FALSE(runs.empty());
  SpatialPlan plan{{plan_region(g, runs[0].first, runs[0].second, parts, style)}};
  return apply_spatial(g, plan);
}

}  // namespace

TEST_CASE("row groups: split programs hold their bands in place and every read sees its value") {
  for (const SplitStyle& style : {SplitStyle{SplitMode::Halo, 1, false}, SplitStyle{SplitMode::Halo, 1, true},
                                  SplitStyle{SplitMode::Mixed, 2, false}, SplitStyle{SplitMode::Recompute, 1, false}}) {
    const SplitMode mode = style.mode;
    const Graph sg = inception_split(2, style);
    const std::map<int, std::vector<float>> values = every_value(sg);
    for (int gpus : {1, 2}) {
      const Schedule s = test::schedule_with("heft", sg, gpus);
      int launched = 0, placed = 0;
      for (RankProgram& p : lower_all(sg, s)) {
        INFO(split_style_name(style) << ", " << gpus << " rank(s), rank " << p.rank);
        share_buffers(sg, p, in_place());
        REQUIRE(check_shared_buffers(sg, p).empty());
        const RowsCopies c = rows_copies(sg, p);
        launched += c.launched;
        placed += c.in_place;
        for (uint32_t seed = 0; seed < 2; ++seed) CHECK(NhwcReplay(sg, p, values).run(seed) == "");
      }
      INFO(split_style_name(style) << ", " << gpus << " rank(s): " << placed << " of " << launched << " in place");
      // Halo mode assembles every window's input from a part and its neighbours' halos: those
      // and the halo cuts are in place, but for the few assemblies on a rank that received both
      // a neighbour's whole part and its halo (at 75 pixels a 7x1 window's halo covers most of
      // a 2-row part): one row cannot sit in two received tensors, so those rows are copied.
      // Mixed mode does so at its sync points; in recompute mode the parts read their
      // producers' parts in place already (no rows nodes up to the global pool).
      if (mode == SplitMode::Halo) {
        CHECK(launched > 0);
        CHECK(placed * 10 >= launched * 9);
      }
      if (mode == SplitMode::Mixed) CHECK(placed > 0);
    }
  }
}

TEST_CASE("row groups: without in-place rows, or at batch 2, nothing is grouped") {
  const Graph sg = inception_split(2, SplitStyle{});
  RankProgram p = lower(sg, test::schedule_with("hios-lp", sg, 1), 0);
  share_buffers(sg, p);
  CHECK(p.row_groups.empty());
  CHECK(rows_copies(sg, p).in_place == 0);
  CHECK_FALSE(memory_plan_options("nchw", sg).rows_in_place);
  CHECK(memory_plan_options("nhwc", sg).rows_in_place);
  Graph batched = build_model("inception_v3", ModelParams{2, 107, 107});
  CHECK_FALSE(memory_plan_options("nhwc", batched).rows_in_place);
  // The CPU backend (NCHW) refuses a program that holds bands in place.
  share_buffers(sg, p, in_place());
  REQUIRE_FALSE(p.row_groups.empty());
  std::unique_ptr<Backend> b = make_backend("cpu", BackendConfig{});
  CHECK_THROWS_WITH(b->prepare(sg, p), Catch::Contains("needs NHWC storage"));
}

TEST_CASE("row groups: the check catches a band away from its rows, and the replay computes something else") {
  const Graph sg = inception_split(2, SplitStyle{});
  const std::map<int, std::vector<float>> values = every_value(sg);
  RankProgram p = lower(sg, test::schedule_with("hios-lp", sg, 1), 0);
  share_buffers(sg, p, in_place());
  REQUIRE(check_shared_buffers(sg, p).empty());
  REQUIRE(NhwcReplay(sg, p, values).run(0) == "");
  // Move one member of a group (a part a conv computes) one row down inside its group.
  RankProgram bad = p;
  int moved = -1;
  for (const RowGroup& grp : bad.row_groups) {
    for (const auto& [node, row] : grp.members) {
      if (sg.nodes[size_t(node)].op.kind != OpKind::Conv) continue;
      for (Instr& in : bad.instrs) {
        if (in.kind == InstrKind::Alloc && in.node == node) in.offset += grp.row_bytes;
      }
      moved = node;
      break;
    }
    if (moved >= 0) break;
  }
  REQUIRE(moved >= 0);
  const std::vector<std::string> errs = check_shared_buffers(sg, bad);
  REQUIRE_FALSE(errs.empty());
  CHECK_THAT(errs[0], Catch::Contains("is not at the address of its row"));
  CHECK(NhwcReplay(sg, bad, values).run(0) != "");
}
