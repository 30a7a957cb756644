// Whole models on one GPU against the CPU reference, and CUDA Graph replay against eager
// replay. Skipped on machines without a GPU.
#include <algorithm>
#include <cmath>

#include "graph/relu_fold.hpp"
#include "models/models.hpp"
#include "tests/catch.hpp"
#include "tests/gpu/gpu_util.hpp"

using namespace hios;
using cuda::MathMode;

namespace {

struct ModelCase {
  const char* name;
  int64_t size;
};
// Small resolutions keep the double-accumulating CPU reference to seconds.
const ModelCase kModels[] = {{"demo", 15}, {"inception_v3", 75}, {"randwire_small", 64}, {"nasnet_large", 40}};

// Errors compound through a network's depth; these bound the norm-wise relative error of the
// output for He-initialised weights (measured values are printed with every run).
double model_tolerance(MathMode m) {
  switch (m) {
    case MathMode::Fp32: return 1e-4;
    case MathMode::Tf32: return 3e-2;
    case MathMode::Fp16: return 1e-2;  // measured up to 1.1e-3 (nasnet_large @40)
    case MathMode::Bf16: return 5e-2;  // measured up to 1.3e-2 (randwire_small @64)
  }
  return 0;
}

}  // namespace

TEST_CASE("whole models on one GPU match the CPU reference", "[gpu][models]") {
  if (cuda::device_count() < 1) HIOS_SKIP("no CUDA device visible");
  for (const ModelCase& mc : kModels) {
    const Graph g = build_model(mc.name, ModelParams{1, mc.size, mc.size});
    const std::vector<std::vector<float>> ref = gputest::cpu_forward(g);
    // A softmax output saturates (He-initialised logits are large), so compare the logits.
    int checked = g.output();
    if (g.nodes[size_t(checked)].op.kind == OpKind::Softmax) checked = g.nodes[size_t(checked)].inputs[0][0].node;
    // fp16's range ends at 65504: a model whose activations pass it (RandWire's unnormalised
    // sums reach 1e6) overflows to infinity in fp16 storage, as it would under PyTorch's
    // autocast. That is the format's limit, not a kernel's error; bf16 has fp32's range.
    float largest = 0;
    for (const std::vector<float>& v : ref) {
      for (float x : v) largest = std::max(largest, std::fabs(x));
    }
    for (MathMode m : gputest::kModes) {
      if (m == MathMode::Fp16 && largest > 65504.f) {
        WARN(mc.name << " @" << mc.size << ": fp16 not checked, activations reach " << largest);
        continue;
      }
      std::vector<float> nchw;  // the NCHW run's logits, which the NHWC run must agree with
      for (exec::Layout l : gputest::kLayouts) {
        cuda::SingleGpuOptions opts;
        opts.math = m;
        opts.layout = l;
        opts.reuse_memory = false;
        cuda::SingleGpuRunner runner(g, opts);
        runner.run();
        const std::vector<float> got = runner.value(checked);
        const gputest::Error e = gputest::compare(got, ref[size_t(checked)]);
        WARN(mc.name << " @" << mc.size << " [" << cuda::math_mode_name(m) << ", " << exec::layout_name(l) << "] '"
                     << g.nodes[size_t(checked)].name << "' vs CPU: " << e.str());
        CHECK(e.within(model_tolerance(m)));
        CHECK(gputest::compare(runner.output(), ref[size_t(g.output())]).within(model_tolerance(m)));
        if (l == exec::Layout::Nchw) {
          nchw = got;
        } else {
          const gputest::Error agree = gputest::compare(got, nchw);
          WARN(mc.name << " NHWC vs NCHW: " << agree.str());
          CHECK(agree.within(model_tolerance(m)));
        }
      }
    }
  }
}

TEST_CASE("CUDA Graph replay gives exactly the eager result", "[gpu][models]") {
  if (cuda::device_count() < 1) HIOS_SKIP("no CUDA device visible");
  for (const char* name : {"inception_v3", "nasnet_large"}) {
    const Graph g = build_model(name, ModelParams{1, 96, 96});
    cuda::SingleGpuOptions eager;
    eager.cuda_graph = false;
    eager.reuse_memory = false;
    cuda::SingleGpuRunner a(g, eager);
    a.run();
    // The graph replays the same plans (same algorithms, same buffers' contents), so every
    // node's output must agree bit for bit, several replays in a row.
    cuda::SingleGpuOptions graph = eager;
    graph.cuda_graph = true;
    cuda::SingleGpuRunner b(g, graph);
    for (int i = 0; i < 3; ++i) b.run();
    const std::vector<float> ea = a.output(), eb = b.output();
    const gputest::Error e = gputest::compare(eb, ea);
    INFO(name << ": graph vs eager " << e.str());
    // Different runners may pick different algorithms in cudnnFind, so compare each runner's
    // graph replay with its own eager pass as well.
    CHECK(e.within(1e-2));
  }
  // The same runner, captured and not: one set of plans, so bitwise identical.
  const Graph g = build_model("inception_v3", ModelParams{1, 96, 96});
  cuda::SingleGpuOptions o;
  o.reuse_memory = false;
  cuda::SingleGpuRunner r(g, o);
  r.run();
  const std::vector<float> replayed = r.output();
  r.run_eager();
  CHECK(r.output() == replayed);
  for (int v = 1; v < g.size(); v += 7) {
    const std::vector<float> node = r.value(v);
    r.run();
    CHECK(r.value(v) == node);
  }
}

TEST_CASE("activation buffers are shared without changing the result", "[gpu][models]") {
  if (cuda::device_count() < 1) HIOS_SKIP("no CUDA device visible");
  const Graph g = build_model("nasnet_large", ModelParams{1, 64, 64});
  // One runner at a time: each reports the peak of what it holds itself.
  auto run = [&](bool reuse, size_t* peak) {
    cuda::SingleGpuOptions o;
    o.reuse_memory = reuse;
    cuda::SingleGpuRunner r(g, o);
    r.run();
    *peak = r.peak_bytes();
    return r.output();
  };
  size_t own = 0, shared = 0;
  const std::vector<float> a = run(false, &own);
  const std::vector<float> b = run(true, &shared);
  const gputest::Error e = gputest::compare(b, a);
  WARN("nasnet_large @64 peak without reuse " << own / (1 << 20) << " MiB, with reuse " << shared / (1 << 20)
                                              << " MiB; " << e.str());
  CHECK(shared < own);
  CHECK(e.within(1e-2));
}

TEST_CASE("ReLU folding: folded nodes hold relu(value) and the output is unchanged", "[gpu][models][relu]") {
  if (cuda::device_count() < 1) HIOS_SKIP("no CUDA device visible");
  const Graph g = build_model("nasnet_large", ModelParams{1, 40, 40});
  const std::vector<bool> stored = nodes_storing_relu(g);
  std::vector<std::vector<float>> ref = gputest::cpu_forward(g);  // the values the graph defines
  for (int v = 0; v < g.size(); ++v) {
    if (!stored[size_t(v)]) continue;
    for (float& x : ref[size_t(v)]) x = std::max(x, 0.f);
  }
  for (MathMode m : {MathMode::Fp32, MathMode::Bf16}) {
    for (exec::Layout l : gputest::kLayouts) {
      cuda::SingleGpuOptions opts;
      opts.math = m;
      opts.layout = l;
      opts.reuse_memory = false;
      cuda::SingleGpuRunner folded(g, opts);
      folded.run();
      opts.fold_relu = false;
      cuda::SingleGpuRunner plain(g, opts);
      plain.run();
      INFO(cuda::math_mode_name(m) << ", " << exec::layout_name(l));
      const gputest::Error out = gputest::compare(folded.output(), plain.output());
      WARN("nasnet_large @40 [" << cuda::math_mode_name(m) << ", " << exec::layout_name(l)
                                << "] folded vs unfolded output: " << out.str());
      CHECK(out.within(m == MathMode::Fp32 ? 1e-5 : model_tolerance(m)));
      for (int v = 1; v < g.size(); ++v) {
        if (!stored[size_t(v)]) continue;
        INFO(g.nodes[size_t(v)].name);
        CHECK(gputest::compare(folded.value(v), ref[size_t(v)]).within(model_tolerance(m)));
      }
    }
  }
}
