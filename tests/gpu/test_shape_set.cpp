// Shape sets on the cuda backend (executor/shape_set.hpp): several shapes captured into their own
// CUDA Graphs over one kept arena, replayed in any order, equal bit for bit to each shape run in
// a set of its own; inputs written straight into the input tensor with no copy in the pass; a
// shape prepared on demand that grows the arena makes the others be captured again.
#include <cuda_runtime.h>

#include "executor/comm.hpp"
#include "executor/shape_set.hpp"
#include "executor/tensor_layout.hpp"
#include "executor/weights.hpp"
#include "graph/error.hpp"
#include "models/models.hpp"
#include "scheduler/algorithms.hpp"
#include "scheduler/cost_model.hpp"
#include "tests/catch.hpp"
#include "tests/gpu/gpu_util.hpp"

using namespace hios;
using exec::ShapeKey;

namespace {

exec::GraphMaker inception() {
  return [](const ShapeKey& k) { return build_model("inception_v3", ModelParams{k.batch, k.height, k.width}); };
}

exec::ScheduleMaker hios_lp() {
  return [](const Graph& g) {
    auto cost = make_analytic_cost_model(find_device_preset("h200"));
    SchedulerOptions o;
    o.num_gpus = 1;
    return run_algorithm("hios-lp", g, *cost, o);
  };
}

exec::ShapeSetOptions cuda_options(const std::string& math) {
  exec::ShapeSetOptions o;
  o.session.backend = "cuda";
  o.session.device = 0;
  o.session.math = math;
  o.cuda_graph = "on";
  return o;
}

std::vector<float> run_alone(const ShapeKey& k, const std::string& math, exec::Comm& self) {
  exec::ShapeSet alone(inception(), hios_lp(), cuda_options(math), self);
  alone.prepare({k});
  alone.set_input(k, exec::make_input(alone.graph(k)));
  alone.run(k);
  return alone.read_output(k);
}

}  // namespace

TEST_CASE("shape sets on the GPU: captured shapes in one arena equal separate runs bit for bit", "[gpu][shapes]") {
  REQUIRE_GPU();
  auto self = exec::make_self_comm();
  for (const std::string math : {"tf32", "bf16"}) {
    exec::ShapeSet set(inception(), hios_lp(), cuda_options(math), *self);
    const std::vector<ShapeKey> keys = exec::parse_shape_list("75,107", "1,2");
    set.prepare(keys);
    REQUIRE(set.capturing());
    int64_t largest = 0;
    for (const ShapeKey& k : keys) largest = std::max(largest, set.arena_bytes(k));
    CHECK(int64_t(set.kept_arena_bytes()) == largest);
    // Each shape after another one, twice round: a replay reads its own shape's buffers.
    std::map<ShapeKey, std::vector<float>> first;
    for (int round = 0; round < 2; ++round) {
      for (const ShapeKey& k : {keys[3], keys[0], keys[2], keys[1]}) {
        set.set_input(k, exec::make_input(set.graph(k)));
        set.run(k);
        const std::vector<float> out = set.read_output(k);
        if (round == 0) first[k] = out;
        INFO(math << " " << k.str() << " round " << round);
        CHECK(out == first[k]);
        const exec::PassContents c = set.pass_contents(k);
        CHECK(c.kernels > 0);
        CHECK(c.copies_reading == 0);  // nothing copies the input into a placeholder
      }
    }
    for (const ShapeKey& k : keys) {
      INFO(math << " " << k.str() << " against a set of its own");
      CHECK(first[k] == run_alone(k, math, *self));
    }
  }
}

TEST_CASE("shape sets on the GPU: the input written in place, and a larger shape on demand", "[gpu][shapes]") {
  REQUIRE_GPU();
  auto self = exec::make_self_comm();
  exec::ShapeSetOptions o = cuda_options("fp32");
  o.prepare_on_demand = true;
  exec::ShapeSet set(inception(), hios_lp(), o, *self);
  const ShapeKey small{1, 75, 75};
  set.prepare({small, {2, 75, 75}});
  // The caller's own write: fp32 values in the backend's layout, copied by the caller straight
  // into the tensor the captured graph reads.
  const Graph& g = set.graph(small);
  const std::vector<float> input = exec::make_input(g, 7);
  const std::vector<float> stored = exec::to_layout(input, g.nodes[0].shape, exec::parse_layout(set.session().backend().layout()));
  const exec::TensorView in = set.input(small);
  REQUIRE(in.memory == exec::MemoryKind::Device);
  REQUIRE(in.bytes == stored.size() * sizeof(float));
  REQUIRE(cudaMemcpy(in.data, stored.data(), in.bytes, cudaMemcpyHostToDevice) == cudaSuccess);
  // A cudaMemcpy from pageable memory may return before its DMA lands, and the backend's
  // streams do not wait for the legacy default stream: the write must be complete first.
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  set.run(small);
  const std::vector<float> direct = set.read_output(small);
  set.set_input(small, input);  // the same values through the backend's upload
  set.run(small);
  CHECK(set.read_output(small) == direct);

  // A larger shape prepared on first use grows the arena; the shapes captured before are
  // captured again and still give the same bits.
  const int before = set.recaptures();
  const ShapeKey large{2, 107, 107};
  set.set_input(large, exec::make_input(build_model("inception_v3", ModelParams{2, 107, 107})));
  set.run(large);
  CHECK(set.prepared(large));
  CHECK(set.recaptures() > before);
  set.set_input(small, input);
  set.run(small);
  CHECK(set.read_output(small) == direct);
  CHECK_THROWS_AS(exec::ShapeSet(inception(), hios_lp(), cuda_options("fp32"), *self).run({1, 75, 75}), Error);
}
