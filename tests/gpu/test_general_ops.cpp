// The general tensor ops on the GPU against the CPU reference: one imported model
// (tests/data/general-ops/, made by its make_model.py) that reaches resize, a layer norm, broadcasting
// binaries, reductions, transposes, reshapes between layouts, softmax on the last axis, slices,
// concats, gathers, casts and the extended activations, with three results. Run in every math
// mode and both layouts; skipped on machines without a GPU.
#include <cmath>

#include "executor/comm.hpp"
#include "executor/session.hpp"
#include "graph/json_codec.hpp"
#include "tests/catch.hpp"
#include "tests/gpu/gpu_util.hpp"

using namespace hios;

TEST_CASE("general tensor ops on the GPU match the CPU reference, every math mode and layout", "[gpu][ops][general]") {
  REQUIRE_GPU();
  const Graph g = load_graph(std::string(HIOS_SOURCE_DIR) + "/tests/data/general-ops/general-ops.json");
  auto self = exec::make_self_comm();
  const exec::GraphInputs inputs = exec::make_inputs(g, 7);
  exec::SessionOptions cpu;
  cpu.backend = "cpu";
  auto ref = exec::run_reference(g, cpu, *self, inputs);
  REQUIRE(g.results().size() == 3);
  for (const char* math : {"fp32", "tf32", "bf16", "fp16"}) {
    // 16-bit storage rounds every one of the ~40 tensors on the way (bf16 keeps 8 bits, fp16 11),
    // and the layer norm and the power amplify what came before: measured on one H200, the
    // deepest result is 5.0e-2 off in bf16 and 5.7e-3 in fp16. fp32 and TF32 differ from the
    // host's functions by ulps (the convolutions in TF32 by their rounded operands). An indexing
    // error is off by the values themselves (norm-wise about 1).
    const double tol = std::string(math) == "bf16" ? 8e-2 : std::string(math) == "fp16" ? 1e-2 : 2e-3;
    for (const char* layout : {"nchw", "nhwc"}) {
      exec::SessionOptions gpu;
      gpu.backend = "cuda";
      gpu.math = math;
      gpu.layout = layout;
      gpu.device = 0;
      auto got = exec::run_reference(g, gpu, *self, inputs);
      for (int v : g.results()) {
        const std::vector<float> want = exec::read_values(ref->backend(), g, v);
        const std::vector<float> have = exec::read_values(got->backend(), g, v);
        const gputest::Error e = gputest::compare(have, want);
        INFO(g.nodes[size_t(v)].name << " [" << math << ", " << layout << "]: " << e.str());
        CHECK(e.within(tol));
      }
    }
  }
}
