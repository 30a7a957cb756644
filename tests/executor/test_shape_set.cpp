// Shape sets (executor/shape_set.hpp) on the CPU backend: the shape list, one arena sized to the
// largest shape, inputs written straight into the set's input tensor, equality with separate
// runs, and refusing (or preparing on demand) a shape that was not prepared.
#include <cstring>

#include "executor/comm.hpp"
#include "executor/session.hpp"
#include "run/shape_runner.hpp"
#include "executor/shape_set.hpp"
#include "executor/weights.hpp"
#include "graph/error.hpp"
#include "models/models.hpp"
#include "scheduler/algorithms.hpp"
#include "scheduler/cost_model.hpp"
#include "tests/catch.hpp"

using namespace hios;
using exec::ShapeKey;

namespace {

exec::GraphMaker model_maker(const std::string& name) {
  return [name](const ShapeKey& k) { return build_model(name, ModelParams{k.batch, k.height, k.width}); };
}

exec::ScheduleMaker one_gpu(const std::string& algo) {
  return [algo](const Graph& g) {
    auto cost = make_analytic_cost_model(find_device_preset("h200"));
    SchedulerOptions o;
    o.num_gpus = 1;
    return run_algorithm(algo, g, *cost, o);
  };
}

exec::ShapeSetOptions cpu_options() {
  exec::ShapeSetOptions o;
  o.session.backend = "cpu";
  return o;
}

// The output of one separate sequential CPU run of the model at `k` on `input`.
std::vector<float> separate_run(const ShapeKey& k, const std::vector<float>& input) {
  const Graph g = model_maker("squeezenet")(k);
  auto self = exec::make_self_comm();
  exec::SessionOptions so;
  so.backend = "cpu";
  auto ref = exec::run_reference(g, so, *self, input);
  return ref->backend().read_tensor(g.output());
}

}  // namespace

TEST_CASE("shape lists: sizes times batches, in order, checked", "[executor][shapes]") {
  const auto keys = exec::parse_shape_list("331,512x600", "1,4");
  REQUIRE(keys.size() == 4);
  CHECK(keys[0] == ShapeKey{1, 331, 331});
  CHECK(keys[1] == ShapeKey{4, 331, 331});
  CHECK(keys[3] == ShapeKey{4, 512, 600});
  CHECK(keys[3].str() == "4x512x600");
  CHECK(exec::parse_shape_list("64,64", "2,2").size() == 1);  // duplicates once
  for (const char* bad : {"", "0", "abc", "331,", "65537", "12x", "x12", "-5", "3.5"}) {
    INFO(bad);
    CHECK_THROWS_AS(exec::parse_shape_list(bad, "1"), Error);
  }
  CHECK_THROWS_WITH(exec::parse_shape_list("64", "1,5000"), Catch::Contains("--batches: '5000'"));
}

TEST_CASE("shape variants: same model at another size or batch, not another model", "[executor][shapes]") {
  const Graph a = build_model("squeezenet", ModelParams{1, 64, 64});
  const Graph b = build_model("squeezenet", ModelParams{2, 96, 80});
  CHECK(exec::shape_variant_problem(a, b).empty());
  const Graph other = build_model("demo", ModelParams{1, 64, 64});
  CHECK_THAT(exec::shape_variant_problem(a, other), Catch::Contains("not the same model"));
  // The counts the check compares are those of the values every backend builds.
  for (const Graph* g : {&a, &other}) {
    for (int v = 0; v < g->size(); ++v) {
      const auto counts = exec::node_param_counts(*g, v);
      const auto made = exec::make_node_params(*g, v);
      REQUIRE(counts.size() == made.size());
      for (size_t i = 0; i < made.size(); ++i) {
        CHECK(counts[i].first == int64_t(made[i].weight.size()));
        CHECK(counts[i].second == int64_t(made[i].bias.size()));
      }
    }
  }
}

TEST_CASE("shape sets: one arena of the largest shape, outputs equal to separate runs", "[executor][shapes]") {
  auto self = exec::make_self_comm();
  exec::ShapeSet set(model_maker("squeezenet"), one_gpu("hios-lp"), cpu_options(), *self);
  const std::vector<ShapeKey> keys = exec::parse_shape_list("48,64", "1,2");
  set.prepare(keys);
  REQUIRE(set.shapes().size() == 4);
  CHECK_FALSE(set.capturing());  // the CPU backend keeps no captured passes
  int64_t largest = 0, sum = 0;
  for (const ShapeKey& k : keys) {
    largest = std::max(largest, set.arena_bytes(k));
    sum += set.arena_bytes(k);
  }
  CHECK(int64_t(set.kept_arena_bytes()) == largest);
  CHECK(largest < sum);

  // Every shape, in an order that switches each time, against a separate run of its own.
  for (const ShapeKey& k : {keys[3], keys[0], keys[2], keys[1], keys[3]}) {
    const std::vector<float> input = exec::make_input(set.graph(k));
    set.set_input(k, input);
    set.run(k);
    INFO(k.str());
    CHECK(set.read_output(k) == separate_run(k, input));
  }
  CHECK(set.switches() >= 4);

  // The set holds one copy of the weights and the largest arena: less than the shapes apart.
  size_t apart = 0;
  for (const ShapeKey& k : keys) {
    exec::ShapeSet alone(model_maker("squeezenet"), one_gpu("hios-lp"), cpu_options(), *self);
    alone.prepare({k});
    apart += alone.memory_in_use();
  }
  CHECK(set.memory_in_use() * 3 < apart);
}

TEST_CASE("shape sets: the caller writes the input in place and the pass reads it there", "[executor][shapes]") {
  auto self = exec::make_self_comm();
  exec::ShapeSet set(model_maker("squeezenet"), one_gpu("sequential"), cpu_options(), *self);
  const ShapeKey small{1, 48, 48}, large{2, 64, 64};
  set.prepare({small, large});
  const exec::TensorView in = set.input(small);
  REQUIRE(in.memory == exec::MemoryKind::Host);
  REQUIRE(in.bytes == size_t(set.graph(small).nodes[0].shape.numel()) * sizeof(float));
  // Values of the caller's own, written straight into the tensor the pass reads.
  std::vector<float> mine = exec::make_input(set.graph(small), 99);
  for (float& x : mine) x *= 0.5f;
  std::memcpy(in.data, mine.data(), in.bytes);
  set.run(small);
  CHECK(set.read_output(small) == separate_run(small, mine));
  // Another shape runs in between; the small shape's input tensor is at the same place again
  // (the kept arena and a deterministic plan), so a caller may keep writing there.
  set.set_input(large, exec::make_input(set.graph(large)));
  set.run(large);
  CHECK(set.input(small).data == in.data);
  CHECK(set.output(small).data != in.data);
}

TEST_CASE("shape sets: a shape that was not prepared is refused, or prepared on demand", "[executor][shapes]") {
  auto self = exec::make_self_comm();
  {
    exec::ShapeSet set(model_maker("squeezenet"), one_gpu("hios-lp"), cpu_options(), *self);
    set.prepare({{1, 48, 48}});
    CHECK_THROWS_WITH(set.run({1, 64, 64}),
                      Catch::Contains("shape 1x64x64") && Catch::Contains("was not prepared (prepared: 1x48x48)"));
    CHECK_THROWS_AS(set.input({2, 48, 48}), Error);
  }
  exec::ShapeSetOptions o = cpu_options();
  o.prepare_on_demand = true;
  exec::ShapeSet set(model_maker("squeezenet"), one_gpu("hios-lp"), o, *self);
  set.prepare({{1, 48, 48}});
  const size_t before = set.kept_arena_bytes();
  const ShapeKey bigger{2, 64, 64};
  const std::vector<float> input = exec::make_input(build_model("squeezenet", ModelParams{2, 64, 64}));
  set.set_input(bigger, input);  // prepared here, and the kept arena grows to fit it
  set.run(bigger);
  CHECK(set.prepared(bigger));
  CHECK(set.kept_arena_bytes() > before);
  CHECK(set.read_output(bigger) == separate_run(bigger, input));
}

TEST_CASE("shape sets: bad sets are one-line errors", "[executor][shapes]") {
  auto self = exec::make_self_comm();
  exec::ShapeSetOptions on = cpu_options();
  on.cuda_graph = "on";
  exec::ShapeSet set(model_maker("squeezenet"), one_gpu("hios-lp"), on, *self);
  CHECK_THROWS_WITH(set.prepare({{1, 48, 48}}), Catch::Contains("cannot keep a captured pass per shape"));
  // A maker that returns another model for one of the shapes.
  auto mixed = [](const ShapeKey& k) {
    return build_model(k.height == 48 ? "squeezenet" : "demo", ModelParams{k.batch, k.height, k.width});
  };
  exec::ShapeSet bad(mixed, one_gpu("hios-lp"), cpu_options(), *self);
  CHECK_THROWS_WITH(bad.prepare({{1, 48, 48}, {1, 64, 64}}), Catch::Contains("not the same model at another shape"));
}

TEST_CASE("shape runs: every shape timed and verified against the CPU reference", "[executor][shapes]") {
  auto self = exec::make_self_comm();
  exec::ShapeRunOptions o;
  o.set = cpu_options();
  o.warmup = 0;
  o.number = 2;
  o.verify = true;
  o.compare_separate = true;
  const auto keys = exec::parse_shape_list("40,56", "1,2");
  const exec::ShapeRunReport r = exec::run_shape_set(model_maker("squeezenet"), one_gpu("hios-lp"), keys, o, *self);
  REQUIRE(r.rows.size() == 4);
  CHECK(r.ok);
  for (const exec::ShapeRow& row : r.rows) {
    CHECK(row.verified);
    CHECK(row.verify.diff.max_rel == 0.0);  // the CPU backend against itself: exact
    CHECK(row.median_ms > 0);
    CHECK(row.alone_mb > 0);
  }
  CHECK(r.set_mb < r.sum_alone_mb);
  CHECK(r.set_mb <= 1.3 * r.largest_alone_mb);
  const json j = exec::shape_report_to_json(r);
  CHECK(j["shapes"].size() == 4);
  CHECK(j["memory_mb"]["largest_alone"].get<double>() > 0);
  CHECK(exec::shape_report_to_table(r).find("2x56x56") != std::string::npos);
}
