// Row splits on the CPU reference backend: a split graph run over several ranks must
// equal the unsplit graph bit for bit (every output element is accumulated in the same order)
// unless the region ends in partial global pools (then within kSumTolerance, as the partial
// means are added in another order), and bad splits must be refused naming the node and the
// rows.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "executor/weights.hpp"
#include "graph/json_codec.hpp"
#include "graph/row_split.hpp"
#include "helpers.hpp"
#include "scheduler/spatial.hpp"
#include "tests/catch.hpp"
#include "tests/test_util.hpp"

using namespace hios;

namespace {

// Every shape a band can trip over: odd heights (uneven bands), a stride-2 conv without
// padding and a ceil_mode pool whose windows straddle band edges, an Inception-like block
// (1x1, 3x3 then 5x1, avg pool without the padding in the divisor, concat), a separable conv reading a
// channel slice, an add, then parallel blocks after the region and a global pool + linear (or
// `head` instead of the average pool).
Graph straddle_graph(int64_t h = 37, int64_t w = 29, PoolKind head = PoolKind::GlobalAvg) {
  GraphBuilder b("straddle", 1, h, w);
  Value x = b.input(3);
  b.begin_block("stem");
  Value c1 = b.conv("c1", {x}, 8, 3, 2, 0);
  b.end_block(c1);
  b.begin_block("pool");
  Value p1 = b.pool("p1", c1, PoolKind::Max, 3, 2, 0, /*ceil_mode=*/true);
  b.end_block(p1);
  b.begin_block("mixed");
  Value m1 = b.conv("mixed.1x1", {p1}, 4, 1, 1, 0);
  Value m3 = b.conv("mixed.3x3", {p1}, 6, 3, 1, 1);
  Value m33 = b.conv("mixed.3x3b", {m3}, 6, {5, 1}, {1, 1}, {2, 0});
  Value ma = b.pool("mixed.avg", p1, PoolKind::Avg, 3, 1, 1, false, /*count_include_pad=*/false);
  Value mcat = b.concat("mixed.cat", {m1, m33, ma});
  b.end_block(mcat);
  b.begin_block("sep");
  Op relu = make_op(OpKind::Activation);
  Op dw = make_op(OpKind::Conv);
  {
    ConvAttrs& a = std::get<ConvAttrs>(dw.attrs);
    a.out_channels = 8;
    a.kernel = {3, 3};
    a.padding = {1, 1};
    a.groups = 8;
  }
  Op pw = make_op(OpKind::Conv);
  std::get<ConvAttrs>(pw.attrs).out_channels = 8;
  Value s1 = b.sequential("sep.seq", {GraphBuilder::slice(mcat, 2, 10)}, {relu, dw, pw});
  Value avg = b.pool("sep.avg", s1, PoolKind::Avg, 3, 1, 1, false, true);
  Value sum = b.add("sep.add", {s1, avg});
  b.end_block(sum);
  b.begin_block("after");  // inter-operator parallel after the region
  Value a1 = b.conv("after.a", {sum}, 4, 1, 1, 0);
  Value a2 = b.conv("after.b", {sum}, 4, 3, 1, 1);
  Value acat = b.concat("after.cat", {a1, a2, sum});  // the region's last node feeds a concat
  b.end_block(acat);
  b.begin_block("head");
  Value gp = b.pool("head.pool", acat, head);
  Value fc = b.linear("head.fc", gp, 5);
  b.end_block(fc);
  return b.finish();
}

std::vector<float> run_job(const Graph& g, const Schedule& s) {
  test::LocalJob job(g, s);
  job.run(exec::make_input(g, 0));
  return job.backends[0]->read_tensor(g.output());
}

// The analytic model of the test preset: what the styles that choose their sync points by cost
// weigh.
const CostModel& analytic_cost() {
  static const auto cost = make_analytic_cost_model(test::test_device_preset());
  return *cost;
}

// Every split style, overlap included (auto leaves it out).
std::vector<SplitStyle> every_style() {
  std::vector<SplitStyle> all = split_modes("auto");
  for (const SplitStyle& s : split_modes("halo-overlap")) all.push_back(s);
  return all;
}

std::vector<float> run_sequential(const Graph& g) {
  return run_job(g, test::schedule_with("sequential", g, 1));
}

bool has_global_pool(const Graph& g, int block) {
  for (int v : g.blocks[size_t(block)].nodes) {
    const Op& op = g.nodes[size_t(v)].op;
    if (op.kind == OpKind::Pool && (op.pool().kind == PoolKind::GlobalAvg || op.pool().kind == PoolKind::GlobalMax)) {
      return true;
    }
  }
  return false;
}

// Every splittable run, split whole. Without `to_pool`, a run that reaches a global pool stops
// at the block before it, so the region ends in a gather and the split is bit for bit exact.
SpatialPlan plan_all(const Graph& g, int parts, SplitMode mode, bool to_pool = false) {
  SpatialPlan plan;
  for (const auto& run : splittable_runs(g, parts)) {
    const int last = !to_pool && has_global_pool(g, run.second) ? run.second - 1 : run.second;
    if (last >= run.first) plan.regions.push_back(plan_region(g, run.first, last, parts, mode));
  }
  return plan;
}

// The partial pools of a region that reaches a global average pool are added in part order
// after each was rounded to fp32, where the unsplit pool divides one double sum: the results
// differ in the last bits: 5e-8 to 7e-8 of the output's largest magnitude on these graphs.
constexpr double kSumTolerance = 1e-6;

double max_rel_diff(const std::vector<float>& a, const std::vector<float>& ref) {
  REQUIRE(a.size() == ref.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(double(a[i]) - double(ref[i])));
    scale = std::max(scale, std::abs(double(ref[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

bool mentions(const std::vector<std::string>& errs, const std::string& what) {
  for (const std::string& e : errs) {
    if (e.find(what) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("row split: the splittable run reaches the global average pool, not a global max pool") {
  Graph g = straddle_graph();
  auto runs = splittable_runs(g, 2);
  REQUIRE(runs.size() == 1);
  CHECK(g.blocks[size_t(runs[0].first)].name == "stem");
  CHECK(g.blocks[size_t(runs[0].second)].name == "head");
  CHECK(region_legal(g, 0, 4, 2));  // ending before the head is still legal
  // The pool's plan rows are its input's, partitioned; the linear after it has none.
  const SplitRegion r = plan_region(g, 0, 5, 2, SplitMode::Recompute);
  const int64_t pooled = g.nodes[size_t(g.find("after.cat"))].shape.h;
  CHECK(r.rows.at("head.pool") == split_rows(pooled, 2));
  CHECK(r.rows.count("head.fc") == 0);

  Graph gm = straddle_graph(37, 29, PoolKind::GlobalMax);
  runs = splittable_runs(gm, 2);
  REQUIRE(runs.size() == 1);
  CHECK(gm.blocks[size_t(runs[0].second)].name == "after");
  std::string why;
  CHECK_FALSE(region_legal(gm, 0, 5, 2, &why));
  CHECK(why.find("node 'head.pool' is a global max pool") != std::string::npos);
}

TEST_CASE("row split: a region ending in partial global pools equals unsplit within the tolerance") {
  // Pooled heights 9 and 10 (after.cat): uneven bands for 2 and for 3 parts.
  for (auto [h, parts] : {std::pair<int64_t, int>{37, 2}, std::pair<int64_t, int>{41, 3}}) {
    Graph g = straddle_graph(h, 29);
    const int64_t pooled = g.nodes[size_t(g.find("after.cat"))].shape.h;
    REQUIRE(pooled % parts != 0);
    const std::vector<float> ref = run_sequential(g);
    for (const SplitStyle& style : every_style()) {
      SpatialPlan plan{{plan_region(g, 0, 5, parts, style, &analytic_cost())}};
      REQUIRE(check_spatial(g, plan).empty());
      Graph sg = apply_spatial(g, plan);
      // The pool keeps its name as the sum of the parts' partial pools; the linear reads it.
      const Node& sum = sg.nodes[size_t(sg.find("head.pool"))];
      REQUIRE(sum.op.kind == OpKind::Add);
      REQUIRE(int(sum.inputs.size()) == parts);
      for (int k = 0; k < parts; ++k) {
        const Node& part = sg.nodes[size_t(sum.inputs[size_t(k)].at(0).node)];
        CHECK(part.name == "head.pool@" + std::to_string(k));
        const RowWindow& w = part.op.pool().rows;
        CHECK(w.in_first == split_rows(pooled, parts)[size_t(k)].begin);
        CHECK(w.in_full == pooled);
        CHECK(sg.value_shape(part.inputs[0][0]).h == split_rows(pooled, parts)[size_t(k)].size());
      }
      CHECK(sg.nodes[size_t(sg.find("head.fc"))].inputs[0][0].node == sg.find("head.pool"));
      CHECK(sg.find("after.cat") < 0);  // no gather: only its parts
      CHECK(split_graph_stats(sg).find("1 sums of partial pools") != std::string::npos);
      for (int gpus : {1, 2, 3}) {
        for (const char* algo : {"hios-lp", "heft", "sequential"}) {
          if (std::string(algo) == "sequential" && gpus > 1) continue;
          INFO(parts << " parts, " << split_style_name(style) << ", " << gpus << " ranks, " << algo);
          Schedule s = test::schedule_with(algo, sg, gpus);
          REQUIRE(check_schedule(sg, s).empty());
          const std::vector<float> out = run_job(sg, s);
          CHECK(max_rel_diff(out, ref) <= kSumTolerance);
          // Every schedule of one split graph adds the partial pools in the same order.
          if (gpus > 1) CHECK(same_bits(out, run_job(sg, test::schedule_with("sequential", sg, 1))));
        }
      }
    }
  }
}

TEST_CASE("row split: partial pools whose rows overlap or miss rows are refused naming node and rows") {
  Graph g = straddle_graph();
  const SpatialPlan good = plan_all(g, 2, SplitMode::Halo, /*to_pool=*/true);
  REQUIRE(check_spatial(g, good).empty());
  const std::vector<RowRange> rows = good.regions[0].rows.at("head.pool");  // 0-5, 5-9

  SpatialPlan overlap = good;
  overlap.regions[0].rows["head.pool"][1].begin -= 1;
  auto errs = check_spatial(g, overlap);
  REQUIRE(errs.size() == 1);
  CHECK(errs[0] == "spatial region 0: rows 4-5 of the input of node 'head.pool' are summed by parts 0 and 1");
  CHECK(test::contains(test::error_of([&] { (void)apply_spatial(g, overlap); }), "'head.pool' are summed"));

  SpatialPlan gap = good;
  gap.regions[0].rows["head.pool"][0].end -= 1;
  errs = check_spatial(g, gap);
  REQUIRE(errs.size() == 1);
  CHECK(errs[0] == "spatial region 0: rows 4-5 of the input of node 'head.pool' are summed by no part");
  SpatialPlan short_end = good;
  short_end.regions[0].rows["head.pool"][1].end -= 1;
  CHECK(mentions(check_spatial(g, short_end), "rows 8-9 of the input of node 'head.pool' are summed by no part"));
  SpatialPlan outside = good;
  outside.regions[0].rows["head.pool"][1].end = rows[1].end + 1;
  CHECK(mentions(check_spatial(g, outside), "part 1 sums rows 5-10, not a non-empty band of its input's 9 rows"));

  // The linear after the pool is whole: rows for it are refused.
  SpatialPlan tail = good;
  tail.regions[0].rows["head.fc"] = {{0, 1}, {0, 1}};
  CHECK(mentions(check_spatial(g, tail), "node 'head.fc' reads the sum of the partial pools of 'head.pool'"));

  // Recompute: the pool's input must hold the rows each partial pool sums.
  SpatialPlan small = plan_all(g, 2, SplitMode::Recompute, true);
  REQUIRE(check_spatial(g, small).empty());
  small.regions[0].rows["after.cat"][1].begin += 1;
  CHECK(mentions(check_spatial(g, small), "part 1 of node 'head.pool' reads rows 5-9 of 'after.cat', but that part "
                                          "computes rows 6-9 (halo too small)"));

  // A global max pool cannot end a region.
  Graph gm = straddle_graph(37, 29, PoolKind::GlobalMax);
  SpatialPlan max_plan = plan_all(gm, 2, SplitMode::Halo);
  max_plan.regions[0].last_block = "head";
  CHECK(mentions(check_spatial(gm, max_plan), "'head.pool' is a global max pool"));
}

TEST_CASE("row split: split equals unsplit bit for bit, 2 and 3 parts, halo and recompute, on 1 to 3 ranks") {
  Graph g = straddle_graph();
  const std::vector<float> ref = run_sequential(g);
  for (int parts : {2, 3}) {
    for (const SplitStyle& style : every_style()) {
      // Only the stem..sep blocks, so the parallel block after the region is scheduled as usual.
      SpatialPlan plan{{plan_region(g, 0, 3, parts, style, &analytic_cost())}};
      REQUIRE(check_spatial(g, plan).empty());
      Graph sg = apply_spatial(g, plan);
      // With overlap, parts whose windows read a halo come in pieces: edges and a middle.
      int middles = 0;
      for (const Node& nd : sg.nodes) middles += nd.name.find("/mid") != std::string::npos;
      CHECK((middles > 0) == style.overlap);
      for (int gpus : {1, 2, 3}) {
        INFO(parts << " parts, " << split_style_name(style) << ", " << gpus << " ranks");
        for (const char* algo : {"hios-lp", "heft", "sequential"}) {
          if (std::string(algo) == "sequential" && gpus > 1) continue;
          Schedule s = test::schedule_with(algo, sg, gpus);
          REQUIRE(check_schedule(sg, s).empty());
          CHECK(same_bits(run_job(sg, s), ref));
        }
      }
    }
  }
}

TEST_CASE("row split: uneven bands, borders and straddling windows have the rows the windows read") {
  Graph g = straddle_graph(23, 17);
  SpatialPlan plan = plan_all(g, 3, SplitMode::Halo);
  const SplitRegion& r = plan.regions.at(0);
  // c1 is 11 rows: 4, 4, 3.
  CHECK(r.rows.at("c1")[0] == RowRange{0, 4});
  CHECK(r.rows.at("c1")[2] == RowRange{8, 11});
  Graph sg = apply_spatial(g, plan);
  // p1 (3x3/2, ceil_mode) band 0 is rows 0-2 of 5, reading c1 rows 0-5: c1@0 holds 0-4, so a
  // halo of row 4 comes from part 1.
  CHECK(sg.find("c1@1>0:4-5") >= 0);
  CHECK(sg.find("p1") < 0);         // inside the region only parts remain
  CHECK(sg.find("after.cat") >= 0);  // the last node of the region keeps its name (the gather)
  CHECK(sg.nodes[size_t(sg.find("after.cat"))].op.kind == OpKind::Rows);
  CHECK(same_bits(run_job(sg, test::schedule_with("hios-lp", sg, 3)), run_sequential(g)));
  // The bottom band of the 3x3 pad-1 conv reads past the image: clipped, no halo below.
  const int bottom = sg.find("mixed.3x3@2");
  const RowWindow& w = sg.nodes[size_t(bottom)].op.conv().rows;
  CHECK(w.in_full == g.nodes[size_t(g.find("p1"))].shape.h);
  CHECK(w.out_first + w.out_count == w.in_full);  // 3x3/1 pad 1 keeps H: the last band ends at the bottom
  CHECK(w.in_first + sg.value_shape(sg.nodes[size_t(bottom)].inputs[0][0]).h == w.in_full);  // nothing past it
  // In recompute mode nothing moves inside the region: no halo cuts at all.
  Graph rg = apply_spatial(g, plan_all(g, 3, SplitMode::Recompute));
  for (const Node& nd : rg.nodes) CHECK(nd.name.find('>') == std::string::npos);
  CHECK(same_bits(run_job(rg, test::schedule_with("hios-lp", rg, 3)), run_sequential(g)));
}

TEST_CASE("row split: inception_v3 split 2 and 3 ways equals the unsplit run") {
  // 107 is about the smallest size whose last Inception blocks have two rows, so that a 2-way
  // split reaches the global pool.
  Graph g = build_model("inception_v3", ModelParams{1, 107, 107});
  const std::vector<float> ref = run_sequential(g);
  for (int parts : {2, 3}) {
    SpatialPlan plan = plan_all(g, parts, SplitMode::Halo);
    REQUIRE(!plan.empty());
    Graph sg = apply_spatial(g, plan);
    INFO(parts << " parts: " << describe_spatial(g, plan));
    CHECK(same_bits(run_job(sg, test::schedule_with("hios-lp", sg, parts)), ref));
  }
  // The whole network, the global pool included, as `--spatial 2` splits it.
  SpatialPlan plan = plan_all(g, 2, SplitMode::Recompute, /*to_pool=*/true);
  REQUIRE(plan.regions.size() == 1);
  CHECK(plan.regions[0].last_block == "head");
  CHECK(describe_spatial(g, plan).find("summing partial pools at avgpool") != std::string::npos);
  Graph sg = apply_spatial(g, plan);
  CHECK(max_rel_diff(run_job(sg, test::schedule_with("hios-lp", sg, 2)), ref) <= kSumTolerance);
}

TEST_CASE("row split: parallel branches reading one tensor share one halo message per part") {
  // In mixed mode an Inception block's branches recompute different depths of overlap, so they
  // read different bands of the sync point before them; each part receives the hull once.
  Graph g = build_model("inception_v3", ModelParams{1, 299, 299});
  const std::vector<float> ref = run_sequential(g);
  SpatialPlan plan = plan_all(g, 2, SplitMode::Mixed, /*to_pool=*/true);
  REQUIRE(plan.regions.size() == 1);
  Graph sg = apply_spatial(g, plan);
  std::map<std::string, std::vector<std::string>> cuts;  // "X@j>k[slice]" -> its cuts' names
  int readers_of_many = 0;
  for (size_t v = 0; v < sg.nodes.size(); ++v) {
    const std::string& name = sg.nodes[v].name;
    if (parse_split_name(name).kind != SplitName::Kind::HaloCut) continue;
    cuts[name.substr(0, name.rfind(':'))].push_back(name);
    // Several assemblies read this cut: branches with different windows share it.
    int readers = 0;
    for (const Node& nd : sg.nodes) {
      for (const Term& t : nd.inputs) {
        for (const Value& val : t) readers += val.node == int(v);
      }
    }
    readers_of_many += readers > 1;
  }
  REQUIRE(!cuts.empty());
  for (const auto& [key, names] : cuts) {
    INFO(key);
    CHECK(names.size() == 1);
  }
  CHECK(readers_of_many > 0);
  CHECK(max_rel_diff(run_job(sg, test::schedule_with("hios-lp", sg, 2)), ref) <= kSumTolerance);
}

TEST_CASE("row split: nasnet_large splits to its global pool in every mode") {
  // The head is relu, global pool, linear: the relu is split, the linear stays whole.
  Graph g = build_model("nasnet_large", ModelParams{1, 64, 64});
  const auto runs = splittable_runs(g, 2);
  REQUIRE(runs.size() == 1);
  CHECK(g.blocks[size_t(runs[0].first)].name == "stem");
  CHECK(g.blocks[size_t(runs[0].second)].name == "head");
  for (const SplitStyle& style : {SplitStyle{SplitMode::Halo, 1, false}, SplitStyle{SplitMode::Halo, 1, true},
                                  SplitStyle{SplitMode::Recompute, 1, false}, SplitStyle{SplitMode::Mixed, 2, false},
                                  SplitStyle{SplitMode::Mixed, 1, false, true}}) {
    SpatialPlan plan{{plan_region(g, runs[0].first, runs[0].second, 2, style, &analytic_cost())}};
    INFO(split_style_name(style));
    REQUIRE(check_spatial(g, plan).empty());
    CHECK(plan.regions[0].rows.count("relu") == 1);
    CHECK(plan.regions[0].rows.count("last_linear") == 0);
    Graph sg = apply_spatial(g, plan);
    CHECK(sg.nodes[size_t(sg.find("global_pool"))].op.kind == OpKind::Add);
    CHECK(sg.nodes[size_t(sg.output())].name == "last_linear");
    CHECK(sg.total_cost().params == g.total_cost().params);
  }
}

TEST_CASE("row split: rows computed twice or never, and a halo too small, are refused naming node and rows") {
  Graph g = straddle_graph();
  SpatialPlan good = plan_all(g, 2, SplitMode::Halo);
  CHECK(check_spatial(g, good).empty());

  SpatialPlan overlap = good;
  overlap.regions[0].rows["mixed.3x3"][1].begin -= 1;
  auto errs = check_spatial(g, overlap);
  REQUIRE(errs.size() == 1);
  CHECK(errs[0].find("of node 'mixed.3x3' are computed by parts 0 and 1") != std::string::npos);
  CHECK(test::contains(test::error_of([&] { (void)apply_spatial(g, overlap); }), "mixed.3x3"));

  SpatialPlan gap = good;
  gap.regions[0].rows["c1"][0].end -= 2;
  CHECK(mentions(check_spatial(g, gap), "of node 'c1' are computed by no part"));

  SpatialPlan small = plan_all(g, 2, SplitMode::Recompute);
  CHECK(check_spatial(g, small).empty());
  small.regions[0].rows["p1"][1].begin += 1;  // part 1 of p1 no longer computes what mixed.3x3@1 reads
  errs = check_spatial(g, small);
  CHECK(mentions(errs, "of 'p1', but that part computes rows"));
  CHECK(mentions(errs, "(halo too small)"));

  // Mixed: a partitioned node lends halos; an overlapping one must cover its consumers alone.
  SpatialPlan mixed{{plan_region(g, 0, 3, 2, SplitMode::Mixed, 2)}};
  CHECK(check_spatial(g, mixed).empty());
  // Sync points every 2 blocks from the last (sep, pool): p1 is partitioned, c1 overlaps.
  CHECK(mixed.regions[0].rows.at("p1") == split_rows(g.nodes[size_t(g.find("p1"))].shape.h, 2));
  CHECK(mixed.regions[0].rows.at("c1")[0].end > mixed.regions[0].rows.at("c1")[1].begin);
  mixed.regions[0].rows["mixed.3x3"][1].begin += 1;
  CHECK(mentions(check_spatial(g, mixed), "(halo too small)"));

  SpatialPlan missing = good;
  missing.regions[0].rows.erase("sep.avg");
  CHECK(mentions(check_spatial(g, missing), "node 'sep.avg' has no rows"));
  SpatialPlan foreign = good;
  foreign.regions[0].rows["head.fc"] = {{0, 1}, {0, 1}};
  CHECK(mentions(check_spatial(g, foreign), "node 'head.fc' is not in blocks"));
  SpatialPlan outside = good;
  outside.regions[0].rows["c1"][1].end = 999;
  CHECK(mentions(check_spatial(g, outside), "not a non-empty band"));
  // A linear layer that does not read a global pool's sum reads every row: no region holds it.
  GraphBuilder lb("linear_inside", 1, 37, 29);
  Value x = lb.input(3);
  lb.begin_block("stem");
  Value c = lb.conv("c", {x}, 4, 3, 1, 1);
  lb.end_block(c);
  lb.begin_block("fc");
  Value fc = lb.linear("fc.linear", c, 5);
  lb.end_block(fc);
  const Graph linear_inside = lb.finish();
  SpatialPlan with_linear{{SplitRegion{"stem", "fc", 2, SplitMode::Halo, {}}}};
  CHECK(mentions(check_spatial(linear_inside, with_linear), "node 'fc.linear' (linear 5) reads every row"));
  SpatialPlan twice = good;
  twice.regions.push_back(good.regions[0]);
  CHECK(mentions(check_spatial(g, twice), "is already in region 0"));
}

TEST_CASE("row split: the plan and the split graph round-trip through JSON") {
  Graph g = straddle_graph();
  SpatialPlan plan = plan_all(g, 3, SplitMode::Recompute);
  json j = spatial_to_json(plan);
  SpatialPlan back = spatial_from_json(j, "$");
  CHECK(spatial_to_json(back) == j);
  Graph sg = apply_spatial(g, plan);
  Graph reread = graph_from_json(graph_to_json(sg), "split");
  CHECK(graph_digest(reread) == graph_digest(sg));
  // The parts share their operator's weights: hios info counts them once.
  CHECK(sg.total_cost().params == g.total_cost().params);
  CHECK(sg.total_cost().macs >= g.total_cost().macs);  // recompute repeats the overlap
  // A region reaching the pool: the partial pools' windows travel under "rows" too.
  Graph pg = apply_spatial(g, plan_all(g, 3, SplitMode::Halo, /*to_pool=*/true));
  const json pj = graph_to_json(pg);
  Graph pback = graph_from_json(pj, "split");
  CHECK(graph_digest(pback) == graph_digest(pg));
  CHECK(graph_to_json(pback) == pj);
  const int part = pback.find("head.pool@2");
  REQUIRE(part >= 0);
  CHECK(row_window(pback.nodes[size_t(part)].op) == row_window(pg.nodes[size_t(pg.find("head.pool@2"))].op));
  CHECK(row_window(pback.nodes[size_t(part)].op).in_first == 6);  // 9 pooled rows: 0-3, 3-6, 6-9
  CHECK(test::contains(test::error_of([&] { (void)spatial_from_json(json::parse(R"({"regions": [{"blocks": ["stem", "sep"], "parts": 1,
      "mode": "halo", "rows": {}}]})"), "$"); }), "parts"));
  CHECK(test::contains(test::error_of([&] { (void)spatial_from_json(json::parse(R"({"regions": [{"blocks": ["stem", "sep"], "parts": 2,
      "mode": "sideways", "rows": {}}]})"), "$"); }), "unknown mode 'sideways'"));
}

TEST_CASE("row split: the names of a split graph's nodes read back as what they are") {
  using K = SplitName::Kind;
  const SplitName part = parse_split_name("a@b.conv@12");
  CHECK((part.kind == K::Part && part.base == "a@b.conv" && part.part == 12 && part.part_name() == "a@b.conv@12"));
  const SplitName mid = parse_split_name("c@1/mid");
  CHECK((mid.kind == K::Piece && mid.base == "c" && mid.part == 1 && mid.piece == "/mid"));
  const SplitName cut = parse_split_name("c@0>1[c0-64]:12-14");
  CHECK((cut.kind == K::HaloCut && cut.base == "c" && cut.part == 0));
  const SplitName in = parse_split_name("c@2[c0-8]:3-9");
  CHECK((in.kind == K::Assembly && in.part == 2));
  for (const char* other : {"c", "c@", "c@x", "c@1/side", "c@1>2", "c:3-9"}) {
    INFO(other);
    CHECK(parse_split_name(other).kind == K::Other);
  }
  // Every node apply_spatial makes in a region is read as part of the node it stands for.
  Graph g = straddle_graph();
  for (SplitMode mode : {SplitMode::Halo, SplitMode::Recompute}) {
    Graph sg = apply_spatial(g, plan_all(g, 3, mode));
    int parts = 0, cuts = 0;
    for (const Node& nd : sg.nodes) {
      const SplitName sn = parse_split_name(nd.name);
      if (!sn.of_part()) continue;
      INFO(nd.name);
      CHECK(g.find(sn.base) >= 0);
      CHECK((sn.part >= 0 && sn.part < 3));
      parts += sn.kind == K::Part || sn.kind == K::Piece;
      cuts += sn.kind == K::HaloCut;
      CHECK((nd.op.kind == OpKind::Rows) == (sn.kind == K::HaloCut || sn.kind == K::Assembly));
    }
    CHECK(parts > 0);
    CHECK((mode == SplitMode::Halo) == (cuts > 0));
  }
}

TEST_CASE("row split: the scheduler's --spatial settings") {
  Graph g = straddle_graph(61, 31);
  auto cost = make_analytic_cost_model(test::test_device_preset());
  SchedulerOptions opt;
  opt.num_gpus = 2;
  SpatialSchedule off = schedule_spatial("hios-lp", g, *cost, opt, SpatialOptions{"off", "auto"});
  CHECK(off.plan.empty());
  CHECK(off.schedule.meta.spatial.is_null());
  SpatialSchedule forced = schedule_spatial("hios-lp", g, *cost, opt, SpatialOptions{"2", "halo"});
  REQUIRE(forced.plan.regions.size() == 1);
  CHECK(forced.schedule.meta.spatial["graph_digest"] == graph_digest(g));
  CHECK(check_schedule(forced.graph, forced.schedule).empty());
  CHECK(forced.summary.find("split 2 ways, summing partial pools at head.pool") != std::string::npos);
  // auto never returns something predicted slower than not splitting.
  SpatialSchedule automatic = schedule_spatial("hios-lp", g, *cost, opt, SpatialOptions{"auto", "auto"});
  CHECK(automatic.schedule.meta.predicted_ms <= off.schedule.meta.predicted_ms + 1e-12);
  CHECK(automatic.schedule.meta.params["spatial"]["tried"].size() > 1);
  // The schedule written for a split graph loads against the original graph and splits it.
  Graph loaded = g;
  Schedule s = schedule_from_json_split(loaded, schedule_to_json(forced.graph, forced.schedule));
  CHECK(graph_digest(loaded) == graph_digest(forced.graph));
  CHECK(s.meta.num_gpus == 2);
  CHECK(test::contains(test::error_of([&] { (void)check_spatial_options(SpatialOptions{"1", "halo"}); }), "--spatial"));
  CHECK(test::contains(test::error_of([&] { (void)check_spatial_options(SpatialOptions{"2", "diagonal"}); }), "--spatial-mode"));
}

TEST_CASE("row split: every region a tune may try, and the costs derived for its parts") {
  const Graph g = straddle_graph();
  // Every legal region of every run, longest first, in each mode; a mixed plan syncing where
  // another style of the same region does (an interval at least the region's length is
  // recompute) is not listed again.
  const std::vector<SpatialPlan> plans = region_plans(g, 2, split_modes("auto"), &analytic_cost());
  CHECK_THROWS_WITH(region_plans(g, 2, split_modes("mixed")), Catch::Contains("mixed/cost needs a cost model"));
  std::set<std::string> distinct;
  for (const SpatialPlan& plan : plans) {
    INFO(spatial_to_json(plan).dump());
    CHECK(distinct.insert(spatial_to_json(plan).dump()).second);
  }
  REQUIRE(!plans.empty());
  int one_block = 0;
  for (size_t i = 0; i < plans.size(); ++i) {
    REQUIRE(plans[i].regions.size() == 1);
    const SplitRegion& r = plans[i].regions[0];
    CHECK(check_spatial(g, plans[i]).empty());
    one_block += r.first_block == r.last_block ? 1 : 0;
  }
  CHECK(one_block > 0);  // regions start and end at any block, not only at a run's ends
  CHECK(plans.front().regions[0].first_block == "stem");

  // A part costs its operator's time scaled by its rows; nodes outside the region cost what
  // they cost unsplit; assemblies and sums come from the analytic model.
  const DevicePreset preset = test::test_device_preset();
  const auto unsplit = make_analytic_cost_model(preset);
  for (const SpatialPlan& plan : {plans.front(), plans.back()}) {
    const Graph sg = apply_spatial(g, plan);
    const auto derived = make_split_cost_model(g, sg, *unsplit, preset);
    const auto analytic = make_analytic_cost_model(preset);
    int parts = 0;
    for (int v = 0; v < sg.size(); ++v) {
      if (v == sg.input()) continue;
      const Node& nd = sg.nodes[size_t(v)];
      const size_t at = nd.name.rfind('@');
      const double ms = derived->node_ms(sg, v, 0);
      if (nd.op.kind == OpKind::Rows || at == std::string::npos) {
        const int u = g.find(nd.name);
        if (nd.op.kind != OpKind::Rows && u >= 0 && g.nodes[size_t(u)].op.kind == nd.op.kind) {
          CHECK(ms == Approx(unsplit->node_ms(g, u, 0)));
        } else {
          CHECK(ms == Approx(analytic->node_ms(sg, v, 0)));
        }
        continue;
      }
      if (nd.name.find_first_not_of("0123456789", at + 1) != std::string::npos) continue;  // a cut, not a part
      ++parts;
      const int u = g.find(nd.name.substr(0, at));
      REQUIRE(u >= 0);
      const Node& whole = g.nodes[size_t(u)];
      const bool partial_pool = nd.op.kind == OpKind::Pool && whole.shape.h == 1;
      const double share = partial_pool ? double(sg.value_shape(nd.inputs[0][0]).h) / g.value_shape(whole.inputs[0][0]).h
                                        : double(nd.shape.h) / whole.shape.h;
      CHECK(ms == Approx(share * unsplit->node_ms(g, u, 0)));
    }
    CHECK(parts > 0);
    // The quick estimate ranks a plan: a finite latency at least its longest chain of parts.
    const double estimate = split_quick_estimate_ms(sg, *derived, 2);
    CHECK(std::isfinite(estimate));
    CHECK(estimate > 0);
  }
}

namespace {

// A chain of 3x3 conv blocks whose exits are wide (32 channels) but for one narrow exit (1
// channel, block "narrow"), with a last block to gather.
Graph sync_chain() {
  GraphBuilder b("sync_chain", 1, 48, 24);
  Value x = b.input(3);
  const std::vector<std::pair<const char*, int64_t>> blocks = {
      {"wide0", 32}, {"wide1", 32}, {"narrow", 1}, {"wide2", 32}, {"wide3", 32}, {"last", 8}};
  for (const auto& [name, channels] : blocks) {
    b.begin_block(name);
    x = b.conv(std::string(name) + ".conv", {x}, channels, 3, 1, 1);
    b.end_block(x);
  }
  return b.finish();
}

std::string block_names(const Graph& g, const std::vector<int>& blocks) {
  std::string names;
  for (int b : blocks) names += (names.empty() ? "" : ",") + g.blocks[size_t(b)].name;
  return names;
}

}  // namespace

TEST_CASE("row split: mixed sync points go where the halo is cheapest") {
  const Graph g = sync_chain();
  const int first = 0, last = int(g.blocks.size()) - 1;
  REQUIRE(region_legal(g, first, last, 2));
  // Each layer costs 1 ms; a message costs its bytes at 1 ms per 10 KB and no latency. A 32-channel
  // halo row is 3 KB (0.3 ms), a 1-channel one 96 bytes; an overlap row recomputed costs 1/24 ms
  // per layer it crosses.
  SyncCosts costs;
  costs.node_ms = [](int) { return 1.0; };
  costs.transfer_ms = [](double bytes) { return bytes / 1e4; };
  const std::vector<int> chosen = sync_blocks_by_cost(g, first, last, 2, costs);
  INFO("chosen: " << block_names(g, chosen));
  CHECK(chosen.back() == last);
  CHECK(std::is_sorted(chosen.begin(), chosen.end()));
  const int narrow = 2;
  CHECK(std::find(chosen.begin(), chosen.end(), narrow) != chosen.end());  // its halo is nearly free
  CHECK(int(chosen.size()) < last - first + 1);                           // some wide one is dropped
  const double est = mixed_split_estimate_ms(g, first, last, 2, chosen, costs);
  CHECK(est <= mixed_split_estimate_ms(g, first, last, 2, sync_blocks_every(first, last, 1), costs));
  CHECK(est < mixed_split_estimate_ms(g, first, last, 2, {last}, costs));

  // Free messages: every sync point stays (recomputing only adds rows). Costly ones: none but
  // the last (nothing inside the region moves, as in recompute mode).
  costs.transfer_ms = [](double) { return 0.0; };
  CHECK(sync_blocks_by_cost(g, first, last, 2, costs) == sync_blocks_every(first, last, 1));
  costs.transfer_ms = [](double) { return 1e6; };
  CHECK(sync_blocks_by_cost(g, first, last, 2, costs) == std::vector<int>{last});

  // The plan of the chosen points: halos only at them, partitioned there, overlapping between.
  costs.transfer_ms = [](double bytes) { return bytes / 1e4; };
  const SplitRegion r = plan_region_synced(g, first, last, 2, chosen);
  CHECK(r.mode == SplitMode::Mixed);
  REQUIRE(check_spatial(g, SpatialPlan{{r}}).empty());
  for (int b = first; b <= last; ++b) {
    const std::vector<RowRange>& rows = r.rows.at(g.nodes[size_t(g.blocks[size_t(b)].exit)].name);
    const bool synced = std::find(chosen.begin(), chosen.end(), b) != chosen.end();
    INFO("block " << g.blocks[size_t(b)].name);
    CHECK((rows[0].end == rows[1].begin) == synced);  // partitioned exactly where it syncs
  }
  CHECK_THROWS_WITH(plan_region_synced(g, 1, last, 2, {0, last}), Catch::Contains("outside blocks"));
}

TEST_CASE("row split: a mixed split with cost-chosen sync points equals the unsplit run bit for bit") {
  const Graph g = sync_chain();
  const std::vector<float> ref = run_sequential(g);
  const SplitStyle by_cost{SplitMode::Mixed, 1, false, true};
  CHECK(split_style_name(by_cost) == "mixed/cost");
  REQUIRE(split_modes("mixed-cost").size() == 1);
  CHECK(split_modes("mixed-cost")[0].sync_by_cost);
  CHECK_NOTHROW(check_spatial_options(SpatialOptions{"2", "mixed-cost"}));
  for (int parts : {2, 3}) {
    SpatialPlan plan{{plan_region(g, 0, int(g.blocks.size()) - 1, parts, by_cost, &analytic_cost())}};
    REQUIRE(check_spatial(g, plan).empty());
    const Graph sg = apply_spatial(g, plan);
    for (int gpus : {1, parts}) {
      INFO(parts << " parts, " << gpus << " ranks");
      const std::vector<float> out = run_job(sg, test::schedule_with("hios-lp", sg, gpus));
      REQUIRE(out.size() == ref.size());
      CHECK(std::memcmp(out.data(), ref.data(), ref.size() * sizeof(float)) == 0);
    }
  }
}
