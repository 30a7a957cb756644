// SingleGpuRunner: the sequential executor on one GPU, driven from this process.
#include <algorithm>

#include "executor/memory_plan.hpp"
#include "executor/program.hpp"
#include "executor/session.hpp"
#include "executor/weights.hpp"
#include "graph/error.hpp"
#include "graph/stats.hpp"
#include "inprocess/inprocess.hpp"

namespace hios::cuda {

// The sequential executor is a rank session of one rank over the sequential schedule: the
// same backend, kernels and host loop as `hios run`, only driven from here.
struct SingleGpuRunner::Impl {
  const Graph& g;
  SingleGpuOptions opts;
  std::unique_ptr<exec::Comm> self = exec::make_self_comm();
  std::unique_ptr<exec::RankSession> session;
  size_t peak = 0;
  int launches = 0;  // nodes issued per pass

  Impl(const Graph& graph_, const SingleGpuOptions& o) : g(graph_), opts(o) {
    exec::SessionOptions so;
    so.backend = "cuda";
    so.device = o.device;
    so.math = math_mode_name(o.math);
    so.seed = o.seed;
    so.conv_impl = conv_impl_name(o.conv_impl);
    so.layout = exec::layout_name(o.layout);
    so.fold_relu = o.fold_relu;
    session = std::make_unique<exec::RankSession>(g, so, *self);
    exec::RankProgram p = exec::lower(g, exec::sequential_schedule(g), 0);
    if (o.reuse_memory) {
      exec::plan_and_check_shared_buffers(g, p, exec::memory_plan_options(session->backend().layout(), g));
    }
    for (const exec::Instr& in : p.instrs) launches += in.kind == exec::InstrKind::Launch;
    session->load(std::move(p));
    session->backend().set_input(exec::make_input(g, o.seed));
    session->pass();  // eager: loads every kernel module, so nothing loads under capture
    if (o.cuda_graph) session->capture();
    peak = session->backend().peak_memory_bytes();
  }

  void eager_pass() {
    session->issue(session->program().instrs);
    session->backend().synchronize();
  }
};

SingleGpuRunner::SingleGpuRunner(const Graph& g, const SingleGpuOptions& opts) : impl_(std::make_unique<Impl>(g, opts)) {}

SingleGpuRunner::~SingleGpuRunner() = default;

void SingleGpuRunner::run() { impl_->session->pass(); }

void SingleGpuRunner::run_eager() { impl_->eager_pass(); }

TimingResult SingleGpuRunner::time(int warmup, int iters) {
  HIOS_CHECK(iters > 0, "timing needs at least one iteration");
  for (int i = 0; i < warmup; ++i) impl_->session->pass();
  TimingResult r = summarise_ms(impl_->session->timed_passes(iters, exec::PassClock::Device));
  impl_->peak = std::max(impl_->peak, impl_->session->backend().peak_memory_bytes());
  return r;
}

std::vector<double> SingleGpuRunner::node_times_ms(int iters, const std::function<void(int, bool)>& around) {
  exec::RankSession& s = *impl_->session;
  exec::LaunchMarks marks(s, around);
  exec::ScopedObserver marking(s, marks);
  std::vector<double> t(size_t(impl_->g.size()), 0.0);
  for (int it = 0; it < iters; ++it) {
    impl_->eager_pass();
    for (int node : marks.nodes()) t[size_t(node)] += marks.ms(s, node) / iters;
  }
  return t;
}

std::vector<float> SingleGpuRunner::output() const { return value(impl_->g.output()); }

std::vector<float> SingleGpuRunner::value(int node) const {
  HIOS_CHECK(!impl_->opts.reuse_memory || node == impl_->g.output() || node == impl_->g.input(),
             "node %d's buffer is shared with later values (reuse_memory is on)", node);
  return impl_->session->backend().read_tensor(node);
}

size_t SingleGpuRunner::peak_bytes() const { return impl_->peak; }

std::string SingleGpuRunner::summary() const {
  const exec::RankProgram& p = impl_->session->program();
  const std::string rows = exec::rows_copies_summary(impl_->g, p);
  return strprintf("%s: %d nodes, activations %s (%s), peak %s, %s%s%s\n", impl_->g.name.c_str(), impl_->launches,
                   format_bytes(size_t(p.tensor_memory())).c_str(), p.arena_bytes > 0 ? "one shared arena" : "a buffer each",
                   format_bytes(impl_->peak).c_str(), math_mode_name(impl_->opts.math),
                   impl_->session->captured() ? ", CUDA graph" : ", eager", rows.empty() ? "" : (", " + rows).c_str()) +
         impl_->session->backend().plan_report();
}

TimingResult summarise_ms(const std::vector<double>& samples) {
  TimingResult r;
  r.samples_ms = samples;
  if (samples.empty()) return r;
  r.min_ms = *std::min_element(samples.begin(), samples.end());
  r.max_ms = *std::max_element(samples.begin(), samples.end());
  r.median_ms = median(samples);
  return r;
}

}  // namespace hios::cuda
