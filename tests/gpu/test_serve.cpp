// hios serve on the cuda backend (serve/serve.hpp): requests staged in the arrival ring as the
// backend stores them, 16-bit ones encoded on the host when they arrive. The encoding must equal
// the backend's own upload bit for bit, and batched answers must agree with the same input run
// alone, which a mis-encoded row (fp32 bytes read as bf16, a wrong layout) would not.
#include <cuda_runtime.h>

#include <cstring>

#include "executor/comm.hpp"
#include "serve/serve.hpp"
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
using exec::Policy;
using exec::ShapeKey;

namespace {

Schedule hios_lp(const Graph& g) {
  auto cost = make_analytic_cost_model(find_device_preset("h200"));
  SchedulerOptions o;
  o.num_gpus = 1;
  return run_algorithm("hios-lp", g, *cost, o);
}

Graph zoo(const std::string& name, const ShapeKey& k) { return build_model(name, ModelParams{k.batch, k.height, k.width}); }

}  // namespace

TEST_CASE("serving on the GPU: encode_host stores an input as set_input does, bit for bit", "[gpu][serve]") {
  REQUIRE_GPU();
  auto self = exec::make_self_comm();
  for (const std::string math : {"tf32", "bf16", "fp16"}) {
    INFO(math);
    exec::ShapeSetOptions o;
    o.session.backend = "cuda";
    o.session.device = 0;
    o.session.math = math;
    o.cuda_graph = "on";
    exec::ShapeSet set([](const ShapeKey& k) { return zoo("squeezenet", k); }, hios_lp, o, *self);
    const ShapeKey k{2, 40, 40};
    set.prepare({k});
    const Graph& g = set.graph(k);
    const Shape& in = g.nodes[size_t(g.input())].shape;
    const std::vector<float> nchw = exec::make_input(g, 7);
    exec::Backend& be = set.session().backend();
    set.set_input(k, nchw);
    const exec::TensorView dev = set.input(k);
    std::vector<unsigned char> uploaded(dev.bytes), encoded(dev.bytes);
    REQUIRE(cudaMemcpy(uploaded.data(), dev.data, dev.bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
    const std::vector<float> stored = exec::to_layout(nchw, in, exec::parse_layout(be.layout()));
    REQUIRE(stored.size() * be.element_bytes() == dev.bytes);
    be.encode_host(stored.data(), stored.size(), encoded.data());
    CHECK(std::memcmp(uploaded.data(), encoded.data(), dev.bytes) == 0);
  }
}

TEST_CASE("serving on the GPU: batched answers in bf16 and tf32 agree with each input alone", "[gpu][serve]") {
  REQUIRE_GPU();
  for (const std::string math : {"tf32", "bf16"}) {
    INFO(math);
    exec::ServeOptions o;
    o.set.session.backend = "cuda";
    o.set.session.device = 0;
    o.set.session.math = math;
    o.set.cuda_graph = "on";
    o.batches = {1, 2, 3, 4};
    o.static_batch = 3;
    o.static_wait_s = 0.003;
    o.verify_every = 1;  // every request its own input, every answer checked
    exec::Server server({"squeezenet", "demo"}, 48, o, zoo, hios_lp);
    exec::ArrivalSpec s;
    s.rates = {600, 600};  // faster than one at a time answers, so batches form
    s.duration_s = 0.25;
    s.seed = 3;
    const auto trace = exec::make_trace(s, server.models());
    REQUIRE(trace.size() > 100);
    for (Policy p : {Policy::Fifo, Policy::Static, Policy::Adaptive}) {
      INFO(exec::policy_name(p));
      const exec::ServeResult r = server.run(trace, p);
      CHECK(r.models.back().answered + r.models.back().rejected == int64_t(trace.size()));
      CHECK(r.models.back().answered > 0);
      if (p == Policy::Static) CHECK(r.models.back().mean_batch > 1.0);
      int64_t checked = 0;
      for (const exec::RequestOutcome& q : r.requests) {
        if (q.rejected.empty()) {
          CHECK(q.max_rel >= 0);
          ++checked;
        }
      }
      CHECK(checked == r.models.back().answered);
      // Another batch may take other convolution algorithms; in bf16 the two round differently,
      // but a row read from the wrong bytes would be off by far more.
      std::printf("hios-gpu-serve: %s %s worst max_rel %.3e, mean batch %.2f\n", math.c_str(), exec::policy_name(p),
                  r.worst_verify_rel, r.models.back().mean_batch);
      CHECK(r.worst_verify_rel <= (math == "bf16" ? 3e-2 : 2e-3));
    }
  }
}
