#include "run/runner.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "executor/backend.hpp"
#include "executor/memory_plan.hpp"
#include "executor/program.hpp"
#include "run/reference_cache.hpp"
#include "executor/registry.hpp"
#include "executor/session.hpp"
#include "executor/trace_pass.hpp"
#include "executor/watchdog.hpp"
#include "executor/transport.hpp"
#include "executor/weights.hpp"
#include "graph/elements.hpp"
#include "graph/input_values.hpp"
#include "graph/error.hpp"
#include "graph/stats.hpp"
#include "graph/json_codec.hpp"
#include "graph/json_reader.hpp"
#include "graph/npy.hpp"

namespace hios::exec {

namespace {

using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------------------------------------
// Failure injection (testing only) and the timeout watchdog.

struct Injection {
  int rank = -1;
  std::string phase;
  bool at(int r, const char* p) const { return rank == r && phase == p; }
};

Injection parse_injection(const std::string& opt) {
  std::string spec = opt;
  if (spec.empty()) {
    const char* env = std::getenv("HIOS_INJECT_FAILURE");
    if (env) spec = env;
  }
  Injection inj;
  if (spec.empty()) return inj;
  size_t colon = spec.find(':');
  char* end = nullptr;
  long r = std::strtol(spec.c_str(), &end, 10);
  HIOS_CHECK(colon != std::string::npos && end == spec.c_str() + colon && r >= 0,
             "failure injection '%s': expected RANK:PHASE, e.g. 1:run", spec.c_str());
  inj.rank = static_cast<int>(r);
  inj.phase = spec.substr(colon + 1);
  static const char* phases[] = {"prepare", "warmup", "run", "verify", "hang"};
  bool known = std::find(std::begin(phases), std::end(phases), inj.phase) != std::end(phases);
  HIOS_CHECK(known, "failure injection '%s': unknown phase '%s' (expected prepare, warmup, run, verify or hang)",
             spec.c_str(), inj.phase.c_str());
  return inj;
}

[[noreturn]] void injected(const char* phase) {
  throw_error("injected failure during %s (HIOS_INJECT_FAILURE / --inject-failure)", phase);
}

// Failure injection through the host loop: a "run" failure throws right after the first
// launch of the first timed pass, in the middle of a pass (or, for a captured pass or a rank
// without launches, at its start or end).
class InjectedFailure final : public PassObserver {
 public:
  bool armed = false;
  void pass_begin(RankSession&, bool captured) override {
    if (armed && captured) fire();
  }
  void after(RankSession&, const Instr& in) override {
    if (armed && in.kind == InstrKind::Launch) fire();
  }
  void pass_end(RankSession&) override {
    if (armed) fire();
  }

 private:
  void fire() {
    armed = false;
    injected("a timed pass");
  }
};

json diff_json(const Diff& d) {
  json j;
  j["max_abs"] = d.max_abs;
  j["max_rel"] = d.max_rel;
  j["ref_max"] = d.ref_max;
  j["count"] = d.count;
  j["where"] = d.where;
  return j;
}

Diff diff_from_json(const json& j) {
  Diff d;
  d.max_abs = j.at("max_abs").get<double>();
  d.max_rel = j.at("max_rel").get<double>();
  d.ref_max = j.at("ref_max").get<double>();
  d.count = j.at("count").get<int64_t>();
  d.where = j.at("where").get<std::string>();
  return d;
}

// JSON cannot hold infinity; an infinite error is written as a huge number instead.
double finite(double v) { return std::isfinite(v) ? v : std::numeric_limits<double>::max(); }

// Worst of a over b by relative error (ties by absolute error); counts add up.
Diff worst(const Diff& a, const Diff& b) {
  Diff w = (b.max_rel > a.max_rel || (b.max_rel == a.max_rel && b.max_abs > a.max_abs)) ? b : a;
  w.count = a.count + b.count;
  w.ref_max = std::max(a.ref_max, b.ref_max);
  return w;
}

// Compares every node this rank launched with the same node of a reference backend.
Diff compare_nodes(const Graph& g, const RankProgram& p, Backend& got, Backend& ref) {
  Diff total;
  for (int v : p.launched) {
    Diff d = compare(got.read_tensor(v), ref.read_tensor(v));
    d.where = g.nodes[v].name;
    total = worst(total, d);
  }
  return total;
}

std::vector<float> input_from_npy(const Graph& g, const std::string& file);

std::string input_names(const Graph& g) {
  std::string s;
  for (int v : g.inputs()) s += (s.empty() ? "" : ", ") + g.nodes[size_t(v)].name;
  return s;
}
std::string result_names(const Graph& g) {
  std::string s;
  for (int v : g.results()) s += (s.empty() ? "" : ", ") + g.nodes[size_t(v)].name;
  return s;
}

// A tensor input's values from a .npy file holding exactly its dtype and dims.
std::vector<uint8_t> tensor_input_from_npy(const Graph& g, int v, const std::string& file) {
  const Node& nd = g.nodes[size_t(v)];
  NpyArray a = read_npy(file);
  HIOS_CHECK(a.shape == nd.shape.dims() && a.dtype == nd.dtype,
             "%s: input '%s' takes %s %s, the file holds %s %s", file.c_str(), nd.name.c_str(), dtype_name(nd.dtype),
             npy_shape_str(nd.shape.dims()).c_str(), dtype_name(a.dtype), npy_shape_str(a.shape).c_str());
  if (!is_float(nd.dtype)) {
    check_index_input(g, v, a.raw, file);  // token ids inside their table, before a kernel reads them
    return std::move(a.raw);
  }
  const auto* p = reinterpret_cast<const uint8_t*>(a.data.data());
  return std::vector<uint8_t>(p, p + a.data.size() * sizeof(float));
}

// Every input's values: seeded, then what --input names replaces them.
GraphInputs graph_inputs(const Graph& g, const RunOptions& opt) {
  GraphInputs in = make_inputs(g, opt.seed);
  if (!opt.input_file.empty()) {
    const int v = g.input();
    in[0] = g.nodes[size_t(v)].op.tensor_input() ? tensor_input_from_npy(g, v, opt.input_file)
                                                 : image_inputs(input_from_npy(g, opt.input_file))[0];
  }
  std::set<std::string> seen;
  for (const std::string& spec : opt.named_inputs) {
    const size_t eq = spec.find('=');
    const std::string name = spec.substr(0, eq), file = spec.substr(eq + 1);
    const int v = g.find(name);
    HIOS_CHECK(v >= 0 && g.is_input(v), "--input %s: graph '%s' has no input '%s' (its inputs: %s)", spec.c_str(),
               g.name.c_str(), printable(name).c_str(), input_names(g).c_str());
    HIOS_CHECK(seen.insert(name).second, "--input %s: input '%s' is given twice", spec.c_str(), name.c_str());
    const size_t k = size_t(std::find(g.inputs().begin(), g.inputs().end(), v) - g.inputs().begin());
    in[k] = g.nodes[size_t(v)].op.tensor_input() ? tensor_input_from_npy(g, v, file)
                                                 : image_inputs(input_from_npy(g, file))[0];
  }
  return in;
}

// The graph's input from a .npy file: the input's shape, or C, H, W at batch 1.
std::vector<float> input_from_npy(const Graph& g, const std::string& file) {
  NpyArray a = read_npy(file);
  HIOS_CHECK(a.dtype == DType::F32 || a.dtype == DType::F64, "%s: an array of %s, but graph '%s' takes a float32 image (float32 or float64)",
             file.c_str(), dtype_name(a.dtype), g.name.c_str());
  const Shape s = g.nodes[size_t(g.input())].shape;
  const std::vector<int64_t> want{s.n, s.c, s.h, s.w};
  const bool fits = a.shape == want || (s.n == 1 && a.shape == std::vector<int64_t>{s.c, s.h, s.w});
  HIOS_CHECK(fits, "%s: an array of shape %s, but graph '%s' takes an input of shape %s", file.c_str(),
             npy_shape_str(a.shape).c_str(), g.name.c_str(), npy_shape_str(want).c_str());
  return std::move(a.data);
}

// Result v into a .npy file: its dims and type (a float16 result as float16, bfloat16 as float32,
// which NumPy lacks), except a convolution network's linear logits, N x C x 1 x 1, which are (N, C).
void result_to_npy(const Graph& g, Backend& backend, int v, const std::string& file) {
  const Node& nd = g.nodes[size_t(v)];
  const Shape& s = nd.shape;
  std::vector<int64_t> shape = s.dims();
  if (s.rank == 4 && s.h == 1 && s.w == 1 && nd.op.kind == OpKind::Linear) shape.resize(2);
  const std::vector<uint8_t> held = read_bytes(backend, g, v);
  if (nd.dtype == DType::BF16) {  // NumPy has no bfloat16: its bits as uint16, as ONNX's own tools hold it
    std::vector<uint8_t> out(size_t(s.numel()) * 2);
    for (int64_t i = 0; i < s.numel(); ++i) {
      store_int(out.data(), DType::U16, i, float_to_bfloat16(float(load_double(held.data(), DType::F32, i))));
    }
    write_file_atomic(file, npy_bytes(shape, DType::U16, out));
    return;
  }
  if (!is_float(nd.dtype) || nd.dtype == DType::F32) {
    write_file_atomic(file, npy_bytes(shape, is_float(nd.dtype) ? DType::F32 : nd.dtype, held));
    return;
  }
  std::vector<uint8_t> out(size_t(s.numel()) * dtype_size(nd.dtype));
  convert_elements(held.data(), DType::F32, out.data(), nd.dtype, s.numel());
  write_file_atomic(file, npy_bytes(shape, nd.dtype, out));
}

// --save-output's names and counts, checked before the run: NAME=FILE names a result, and a
// file that is not a folder takes a graph of one result.
void check_saves(const Graph& g, const RunOptions& opt) {
  std::vector<std::string> specs = opt.saves;
  if (!opt.output_file.empty()) specs.push_back(opt.output_file);
  for (const std::string& spec : specs) {
    if (std::filesystem::is_directory(spec)) continue;
    const size_t eq = spec.find('=');
    if (eq == std::string::npos) {
      HIOS_CHECK(g.results().size() == 1, "--save-output %s: graph '%s' has %zu results: give a folder or NAME=FILE.npy",
                 spec.c_str(), g.name.c_str(), g.results().size());
      continue;
    }
    const int v = g.find(spec.substr(0, eq));
    HIOS_CHECK(v >= 0 && g.is_result(v), "--save-output %s: graph '%s' has no result '%s' (its results: %s)", spec.c_str(),
               g.name.c_str(), printable(spec.substr(0, eq)).c_str(), result_names(g).c_str());
  }
}

// --save-output: one file for a one-result graph, or every result into a folder, or NAME=FILE.
void save_results(const Graph& g, Backend& backend, const RunOptions& opt) {
  const std::vector<int> results = g.results();
  if (!opt.output_file.empty()) {
    HIOS_CHECK(results.size() == 1 || std::filesystem::is_directory(opt.output_file),
               "--save-output %s: graph '%s' has %zu results: give a folder or NAME=FILE.npy", opt.output_file.c_str(),
               g.name.c_str(), results.size());
  }
  std::vector<std::string> specs = opt.saves;
  if (!opt.output_file.empty()) specs.insert(specs.begin(), opt.output_file);
  for (const std::string& spec : specs) {
    const size_t eq = spec.find('=');
    if (std::filesystem::is_directory(spec)) {
      for (int v : results) result_to_npy(g, backend, v, (std::filesystem::path(spec) / (g.nodes[size_t(v)].name + ".npy")).string());
    } else if (eq != std::string::npos) {
      const std::string name = spec.substr(0, eq), file = spec.substr(eq + 1);
      const int v = g.find(name);
      HIOS_CHECK(v >= 0 && g.is_result(v), "--save-output %s: graph '%s' has no result '%s' (its results: %s)",
                 spec.c_str(), g.name.c_str(), printable(name).c_str(), result_names(g).c_str());
      result_to_npy(g, backend, v, file);
    } else {
      result_to_npy(g, backend, results[0], spec);
    }
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------

namespace {

// ---- verification: the output (with --verify-nodes, every node) against the sequential run
// on this backend and, off the CPU backend, the CPU reference; results on rank 0.
std::vector<VerifyResult> verify_against_references(const Graph& g, const RunOptions& opt, const SessionOptions& so,
                                                    const BackendConfig& cfg, RankSession& session,
                                                    const GraphInputs& input, Comm& comm) {
  const int rank = comm.rank();
  const bool cpu_is_backend = opt.backend == "cpu";
  const RankProgram& p = session.program();
  Backend& backend = session.backend();
  std::vector<VerifyResult> out;
  struct Ref {
    std::string label;
    SessionOptions opt;
    double tol;
    bool cacheable = false;  // the CPU reference: its output depends on the graph and seed alone
  };
  std::vector<Ref> refs;
  SessionOptions same = so;
  same.device = cfg.device;  // the reference shares this rank's device
  same.devices.clear();
  same.transport.clear();
  same.math = cfg.math;
  // On the CPU backend the sequential run is the CPU reference itself (cacheable alike).
  refs.push_back({"sequential " + opt.backend + " run", same, cpu_is_backend ? 0.0 : tolerance(cfg.math), cpu_is_backend});
  if (!cpu_is_backend) {
    SessionOptions cpu;
    cpu.backend = "cpu";
    cpu.seed = opt.seed;
    cpu.threads = opt.threads;
    refs.push_back({"cpu reference", cpu, tolerance(cfg.math), true});
  }
  std::unique_ptr<Comm> self = make_self_comm();
  for (const Ref& ref : refs) {
    VerifyResult vr;
    vr.against = ref.label;
    vr.tolerance = ref.tol;
    std::unique_ptr<RankSession> rb;
    // The cache is keyed by graph and seed: an input from a file is neither.
    const bool cached = ref.cacheable && !opt.reference_cache.empty() && !opt.verify_nodes && opt.input_file.empty() &&
                        opt.named_inputs.empty() && g.inputs().size() == 1 && g.results().size() == 1;
    const int64_t batch = g.nodes[size_t(g.input())].shape.n;
    if (rank == 0 && opt.reference_first_image && !cpu_is_backend && ref.cacheable && batch > 1) {
      // The CPU reference of the first image alone; the sequential run checks the whole batch.
      bool hit = false;
      std::vector<float> image(input[0].size() / sizeof(float));
      std::memcpy(image.data(), input[0].data(), input[0].size());
      const std::vector<float> want =
          first_image_reference(g, ref.opt, image, cached ? opt.reference_cache : std::string(), opt.seed, &hit);
      std::vector<float> got = backend.read_tensor(g.output());
      got.resize(want.size());
      vr.against += hit ? ", first image (cached)" : ", first image";
      vr.diff = compare(got, want);
      vr.diff.where = g.nodes[g.output()].name;
    } else if (rank == 0 && cached) {
      std::optional<std::vector<float>> want = load_reference(opt.reference_cache, g, opt.seed);
      if (want) {
        vr.against += " (cached)";
      } else {
        rb = run_reference(g, ref.opt, *self, input);
        want = rb->backend().read_tensor(g.output());
        store_reference(opt.reference_cache, g, opt.seed, *want);
      }
      vr.diff = compare(backend.read_tensor(g.output()), *want);
      vr.diff.where = g.nodes[g.output()].name;
    } else {
      if (rank == 0 || opt.verify_nodes) rb = run_reference(g, ref.opt, *self, input);
      if (rank == 0) {
        // Every result: the worst of them.
        for (int v : g.results()) {
          Diff d = compare(read_values(backend, g, v), read_values(rb->backend(), g, v));
          d.where = g.nodes[size_t(v)].name;
          vr.diff = worst(vr.diff, d);
        }
      }
    }
    if (opt.verify_nodes) {
      Diff mine = compare_nodes(g, p, backend, rb->backend());
      json mj = diff_json(mine);
      mj["max_abs"] = finite(mine.max_abs);
      mj["max_rel"] = finite(mine.max_rel);
      std::vector<std::string> all = comm.allgather(mj.dump());
      Diff nodes;
      for (const std::string& sj : all) nodes = worst(nodes, diff_from_json(json::parse(sj)));
      if (rank == 0) {
        VerifyResult nv;
        nv.against = ref.label + ", every node";
        nv.tolerance = ref.tol;
        nv.diff = nodes;
        nv.ok = nodes.max_rel <= ref.tol;
        vr.ok = vr.diff.max_rel <= ref.tol;
        out.push_back(vr);
        out.push_back(nv);
        continue;
      }
    }
    vr.ok = vr.diff.max_rel <= ref.tol;
    if (rank == 0) out.push_back(vr);
  }
  return out;
}

// ---- report: what each rank ran on and moved, gathered on every rank.
RankInfo this_rank_info(Comm& comm, Backend& backend, const BackendConfig& cfg, const Graph& g, const RankProgram& p,
                        size_t peak_bytes) {
  RankInfo mine;
  mine.rank = comm.rank();
  mine.host = comm.hostname();
  mine.device = backend.device_name();
  mine.device_index = cfg.device;
  mine.launched = static_cast<int>(p.launched.size());
  for (const Instr& in : p.instrs) {
    mine.sends += in.kind == InstrKind::Send;
    mine.recvs += in.kind == InstrKind::Recv;
  }
  mine.memory_mb = double(peak_bytes) / 1e6;
  mine.tensors_mb = double(p.tensor_memory()) / 1e6;
  const RowsCopies rows = rows_copies(g, p);
  mine.rows_launched = rows.launched;
  mine.rows_in_place = rows.in_place;
  return mine;
}

std::vector<RankInfo> gather_rank_infos(Comm& comm, const RankInfo& mine) {
  json mj;
  mj["rank"] = mine.rank;
  mj["host"] = mine.host;
  mj["device"] = mine.device;
  mj["device_index"] = mine.device_index;
  mj["launched"] = mine.launched;
  mj["sends"] = mine.sends;
  mj["recvs"] = mine.recvs;
  mj["memory_mb"] = mine.memory_mb;
  mj["tensors_mb"] = mine.tensors_mb;
  mj["rows_launched"] = mine.rows_launched;
  mj["rows_in_place"] = mine.rows_in_place;
  std::vector<RankInfo> out;
  for (const std::string& sj : comm.allgather(mj.dump())) {
    json j = json::parse(sj);
    RankInfo ri;
    ri.rank = j["rank"].get<int>();
    ri.host = j["host"].get<std::string>();
    ri.device = j["device"].get<std::string>();
    ri.device_index = j["device_index"].get<int>();
    ri.launched = j["launched"].get<int>();
    ri.sends = j["sends"].get<int>();
    ri.recvs = j["recvs"].get<int>();
    ri.memory_mb = j["memory_mb"].get<double>();
    ri.tensors_mb = j["tensors_mb"].get<double>();
    ri.rows_launched = j["rows_launched"].get<int>();
    ri.rows_in_place = j["rows_in_place"].get<int>();
    out.push_back(ri);
  }
  return out;
}

// ---- report: mean, median, extremes and standard deviation over the repeats.
void summarise_repeats(RunReport& rep) {
  const auto& v = rep.repeats_ms;
  rep.mean_ms = 0;
  for (double x : v) rep.mean_ms += x;
  rep.mean_ms /= double(v.size());
  rep.median_ms = median(v);
  rep.min_ms = *std::min_element(v.begin(), v.end());
  rep.max_ms = *std::max_element(v.begin(), v.end());
  double ss = 0;
  for (double x : v) ss += (x - rep.mean_ms) * (x - rep.mean_ms);
  rep.std_ms = v.size() > 1 ? std::sqrt(ss / double(v.size() - 1)) : 0.0;
}

// The options every session of this run starts from.
SessionOptions session_options(const RunOptions& opt) {
  SessionOptions so;
  so.backend = opt.backend;
  so.transport = opt.transport;
  so.math = opt.math;
  so.devices = opt.devices;
  so.seed = opt.seed;
  so.threads = opt.threads;
  so.memory_limit = opt.memory_limit;
  so.comm_priority = opt.comm_priority;
  so.layout = opt.layout;
  so.conv_search = opt.conv_search.empty() ? "quick" : opt.conv_search;
  return so;
}

// --launch-order, else the one `hios tune` chose for this schedule, else topo.
std::string chosen_launch_order(const RunOptions& opt, const Schedule& s) {
  if (!opt.launch_order.empty()) return opt.launch_order;
  if (s.meta.tune.is_object() && s.meta.tune.contains("launch_order")) {
    return s.meta.tune["launch_order"].value("chosen", std::string("topo"));
  }
  return "topo";
}

// --conv-search, else the search `hios tune` measured this schedule with when the run's backend
// is the tune's, else quick.
std::string chosen_conv_search(const RunOptions& opt, const Schedule& s) {
  if (!opt.conv_search.empty()) return opt.conv_search;
  if (s.meta.tune.is_object() && s.meta.tune.contains("identity") && s.meta.tune["identity"].is_object()) {
    const json& id = s.meta.tune["identity"];
    if (id.value("backend", std::string()) == opt.backend && id.contains("conv_search") && id["conv_search"] == "wide")
      return "wide";
  }
  return "quick";
}

// --transport, else the transport `hios tune` measured this schedule's links and passes with
// (meta.tune.identity), when the run's backend is the tune's and this build has it, else empty
// (the backend's default). A schedule tuned over cuda-ipc then runs over cuda-ipc.
std::string chosen_transport(const RunOptions& opt, const Schedule& s) {
  if (!opt.transport.empty()) return opt.transport;
  if (!s.meta.tune.is_object() || !s.meta.tune.contains("identity")) return "";
  const json& id = s.meta.tune["identity"];
  if (!id.is_object() || id.value("backend", std::string()) != opt.backend) return "";
  const std::string named = id.value("transport", std::string());
  const std::string name = named.substr(0, named.find(' '));  // "nccl NCCL 2.23.4" -> "nccl"
  const std::vector<std::string> known = transport_names();
  return std::find(known.begin(), known.end(), name) != known.end() ? name : "";
}

}  // namespace

namespace {

// The options and the job, checked before anything is built. Names first: a misspelt backend or
// transport is the same mistake whatever the job size. A one-rank job moves nothing, so it needs
// no transport (and runs in builds without MPI).
void check_run(const Schedule& s, const RunOptions& opt, const Comm& comm, const Injection& inj) {
  HIOS_CHECK(inj.rank < comm.size(), "failure injection names rank %d, but the job has %d rank(s)", inj.rank,
             comm.size());
  HIOS_CHECK(opt.warmup >= 0 && opt.number >= 1 && opt.repeat >= 1,
             "need --warmup >= 0, --number >= 1 and --repeat >= 1 (got %d, %d, %d)", opt.warmup, opt.number,
             opt.repeat);
  const BackendEntry& be = find_backend(opt.backend);
  if (comm.size() > 1 || !opt.transport.empty()) find_transport(opt.transport.empty() ? be.default_transport : opt.transport);
  HIOS_CHECK(comm.size() == s.meta.num_gpus,
             "schedule '%s' is for %d GPU(s) but the job has %d rank(s); start it with mpirun -np %d",
             s.meta.algorithm.c_str(), s.meta.num_gpus, comm.size(), s.meta.num_gpus);
  HIOS_CHECK(opt.cuda_graph == "on" || opt.cuda_graph == "off" || opt.cuda_graph == "auto",
             "--cuda-graph must be on, off or auto (got '%s')", opt.cuda_graph.c_str());
  tolerance(opt.math.empty() ? be.default_math : opt.math);  // rejects unknown modes before anything is built
  HIOS_CHECK(opt.memory == "shared" || opt.memory == "separate", "--memory must be shared or separate, not '%s'",
             opt.memory.c_str());
}

// This rank's program, its memory shared (unless separate buffers were asked for, or every node
// is verified), a row split's bands in place where the backend's storage allows.
RankProgram plan_program(const Graph& g, const Schedule& s, const RunOptions& opt, RankSession& session,
                         const LaunchOrder& order, int rank) {
  RankProgram prog = lower(g, s, rank, order);
  if (opt.memory == "shared" && !opt.verify_nodes) {
    MemoryPlanOptions plan = memory_plan_options(session.backend().layout(), g);
    plan.rows_in_place = plan.rows_in_place && opt.rows_in_place == "on";
    plan_and_check_shared_buffers(g, prog, plan);
  }
  return prog;
}

// Whether passes are captured into a CUDA Graph; --cuda-graph on refuses what cannot be.
bool use_cuda_graph(const RunOptions& opt, RankSession& session) {
  if (opt.cuda_graph == "on") {
    Transport* transport = session.transport();
    HIOS_CHECK(session.backend().can_capture(), "--cuda-graph on: the %s backend cannot capture a pass",
               session.backend().name().c_str());
    HIOS_CHECK(!transport || transport->capturable(),
               "--cuda-graph on: the %s transport cannot be captured (host-side MPI calls); use --transport nccl "
               "or --cuda-graph off",
               transport->name().c_str());
  }
  return opt.cuda_graph == "on" || (opt.cuda_graph == "auto" && session.can_capture());
}

// --repeat repeats of --number timed passes each: every pass's time (rank 0) and each repeat's
// mean into the report.
std::vector<double> timed_repeats(RankSession& session, const RunOptions& opt, RunReport& rep) {
  std::vector<double> run_ms;
  for (int r = 0; r < opt.repeat; ++r) {
    const std::vector<double> ms = session.timed_passes(opt.number);
    double total = 0;
    for (double x : ms) total += x;
    run_ms.insert(run_ms.end(), ms.begin(), ms.end());
    rep.repeats_ms.push_back(total / opt.number);
  }
  return run_ms;
}

// What the report says the job was: graph, schedule, backend, transport, settings, versions.
void describe_job(RunReport& rep, const Graph& g, const Schedule& s, const RunOptions& opt, const Comm& comm,
                  RankSession& session, const LaunchOrder& order, bool use_graph) {
  Backend& backend = session.backend();
  Transport* transport = session.transport();
  rep.graph_name = g.name;
  rep.graph_digest = graph_digest(g);
  rep.algorithm = s.meta.algorithm;
  rep.batch = g.batch;
  rep.height = g.height;
  rep.width = g.width;
  rep.num_ranks = comm.size();
  rep.backend = backend.name();
  rep.transport = transport ? transport->name() : session.transport_name() + " (unused: one rank)";
  rep.math = backend.math();
  rep.layout = backend.layout();
  rep.conv_search = session.backend_config().conv_search;
  rep.cuda_graph = use_graph ? "on" : "off";
  rep.memory = opt.memory == "shared" && !opt.verify_nodes ? "shared" : "separate";
  rep.launch_order = launch_order_summary(order);
  rep.versions = backend.versions();
  if (transport && !transport->versions().empty() && transport->versions() != comm.library()) {
    rep.versions += "; " + transport->versions();
  }
  rep.versions += "; MPI: " + comm.library();
  rep.warmup = opt.warmup;
  rep.number = opt.number;
  rep.repeat = opt.repeat;
  rep.predicted_ms = s.meta.predicted_ms;
}

// The watchdogs' ends: one line naming the rank, the phase and the rule, then the whole job down.
void abort_timed_out(Comm& comm, const RunOptions& opt, const char* phase) {
  abort_on_shared_timeout(comm, strprintf("timed out after %g s (--timeout) during %s", opt.timeout_s, phase));
}

void abort_stalled(Comm& comm, const RunOptions& opt, const char* phase, const PeerWatch* watch, double idle,
                   double limit) {
  std::fflush(stdout);
  const std::string stopped = watch ? watch->stopped_peers() : std::string();
  const std::string rule = opt.stall_timeout_s > 0 ? strprintf("--stall-timeout %g", opt.stall_timeout_s)
                                                   : strprintf("stall limit %.0f s", limit);
  std::fprintf(stderr, "hios: error: %s: no pass finished for %.0f s during %s (%s): %s; aborting the job\n",
               comm.where().c_str(), idle, phase, rule.c_str(),
               stopped.empty() ? "another rank is stopped or hung" : stopped.c_str());
  std::fflush(stderr);
  comm.abort(2);
}

// Every finished pass is progress, and its time sets the automatic stall limit.
struct Heartbeat final : PassObserver {
  StallWatchdog& w;
  explicit Heartbeat(StallWatchdog& w_) : w(w_) {}
  void pass_end(RankSession&) override { w.pass_done(); }
};

}  // namespace

void check_run_options(const Schedule& s, const RunOptions& opt, const Comm& comm) {
  check_run(s, opt, comm, parse_injection(opt.inject_failure));
}

RunReport run_schedule(const Graph& g, const Schedule& s, const RunOptions& asked, Comm& comm) {
  RunOptions opt = asked;
  opt.transport = chosen_transport(asked, s);
  opt.conv_search = chosen_conv_search(asked, s);
  std::atomic<const char*> phase{"setup"};
  Watchdog watchdog(opt.timeout_s, [&] { abort_timed_out(comm, opt, phase.load()); });
  std::atomic<const PeerWatch*> peer_watch{nullptr};  // while the ranks' pids are known
  StallWatchdog stall(opt.stall_timeout_s, [&](double idle, double limit) {
    abort_stalled(comm, opt, phase.load(), peer_watch.load(), idle, limit);
  });
  const int rank = comm.rank();
  Injection inj = parse_injection(opt.inject_failure);
  check_run(s, opt, comm, inj);
  if (rank == 0) check_saves(g, opt);  // rank 0 writes the results: it refuses a bad --save-output, before anything runs

  // From here every rank runs the same steps: a peer that dies is named by the survivors.
  PeerWatch peers(comm, [&] { return phase.load(); });
  peer_watch = &peers;
  struct Unpublish {  // destroyed before `peers`: the stall watchdog outlives it
    std::atomic<const PeerWatch*>& p;
    ~Unpublish() { p = nullptr; }
  } unpublish{peer_watch};
  const SessionOptions so = session_options(opt);
  RankSession session(g, so, comm);
  const BackendConfig& cfg = session.backend_config();

  phase = "launch order";
  SessionOptions measuring = so;
  measuring.device = cfg.device;
  const LaunchOrder order = make_launch_order(chosen_launch_order(opt, s), g, measuring, comm);
  phase = "lowering";
  RankProgram prog = plan_program(g, s, opt, session, order, rank);

  phase = "prepare";
  if (inj.at(rank, "prepare")) injected("prepare");
  session.load(std::move(prog));
  Backend& backend = session.backend();
  const bool use_graph = use_cuda_graph(opt, session);
  GraphInputs input;
  if (rank == 0 || opt.verify_nodes) input = graph_inputs(g, opt);
  if (rank == 0) set_inputs(backend, g, input);

  Heartbeat heartbeat(stall);
  ScopedObserver beating(session, heartbeat);
  // Armed before the barrier: a peer stopped while it was still preparing is caught there too.
  // Preparing is bounded per rank (the slowest, cudnnFind on a big model, takes seconds to a
  // minute), far below the default.
  stall.arm(true);
  comm.barrier();
  phase = "warm-up";
  if (inj.at(rank, "warmup")) injected("warm-up");
  session.warm_up(opt.warmup, use_graph);

  phase = "timed runs";
  if (inj.at(rank, "hang")) {
    // Testing the watchdog: this rank never reaches the barrier the others wait at.
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  RunReport rep;
  std::vector<double> run_ms;  // every timed pass, rank 0
  {
    InjectedFailure fail;
    fail.armed = inj.at(rank, "run");
    ScopedObserver failing(session, fail);
    run_ms = timed_repeats(session, opt, rep);
  }
  stall.arm(false);
  // Read before verification: its reference runs allocate on the same device and would count.
  const size_t peak_bytes = backend.peak_memory_bytes();

  // A traced pass (--trace): one more pass, eager, with a marker around every instruction.
  phase = "trace";
  if (!opt.trace_file.empty()) {
    stall.arm(true);
    rep.trace = trace_one_pass(session);
    stall.arm(false);
  }
  if (rank == 0 && (!opt.output_file.empty() || !opt.saves.empty())) save_results(g, backend, opt);

  phase = "verification";
  if (inj.at(rank, "verify")) injected("verification");
  if (opt.verify || opt.verify_nodes) {
    comm.barrier();
    rep.verify = verify_against_references(g, opt, so, cfg, session, input, comm);
  }

  phase = "report";
  rep.ranks = gather_rank_infos(comm, this_rank_info(comm, backend, cfg, g, session.program(), peak_bytes));
  describe_job(rep, g, s, opt, comm, session, order, use_graph);
  summarise_repeats(rep);
  rep.runs_ms = run_ms;
  rep.ok = true;
  for (const VerifyResult& vr : rep.verify) rep.ok = rep.ok && vr.ok;
  comm.barrier();
  phase = "finished";
  return rep;
}

// ---------------------------------------------------------------------------------------------
// Reports.

static std::string check_cell(const RunReport& r) {
  if (r.verify.empty()) return "-";
  return r.ok ? "OK" : "FAIL";
}

// Ranks on one GPU (e.g. --devices 0,0) run correctly, but their processes take turns on the
// GPU, and every transfer between them waits for the other's turn: the times say nothing of
// separate GPUs. A line per GPU shared, so nobody reads them as such.
static std::string shared_gpu_note(const RunReport& r) {
  std::map<std::pair<std::string, int>, std::vector<int>> by_gpu;
  for (const RankInfo& ri : r.ranks) {
    if (ri.device_index >= 0) by_gpu[{ri.host, ri.device_index}].push_back(ri.rank);
  }
  std::string out;
  for (const auto& [gpu, ranks] : by_gpu) {
    if (ranks.size() < 2) continue;
    std::string names;
    for (size_t i = 0; i < ranks.size(); ++i) {
      names += (i == 0 ? "" : i + 1 == ranks.size() ? " and " : ", ") + std::to_string(ranks[i]);
    }
    out += strprintf("# note: ranks %s share GPU %d on host %s: they take turns on it, so these times are not those "
                     "of separate GPUs\n",
                     names.c_str(), gpu.second, gpu.first.c_str());
  }
  return out;
}

std::string report_to_table(const RunReport& r) {
  std::string out;
  out += strprintf("# hios run: graph %s %lldx%lldx%lld (%s), schedule %s on %d GPU(s), predicted %.3f ms\n",
                   r.graph_name.c_str(), (long long)r.batch, (long long)r.height, (long long)r.width,
                   r.graph_digest.c_str(), r.algorithm.c_str(), r.num_ranks, r.predicted_ms);
  out += strprintf("# backend %s (math %s, layout %s%s), transport %s, cuda-graph %s, memory %s, launch order %s, "
                   "warmup %d, number %d, repeat %d\n",
                   r.backend.c_str(), r.math.c_str(), r.layout.c_str(),
                   r.conv_search == "wide" ? ", wide convolution search" : "", r.transport.c_str(), r.cuda_graph.c_str(),
                   r.memory.c_str(), r.launch_order.c_str(), r.warmup, r.number, r.repeat);
  out += "# versions: " + r.versions + "\n";
  for (const RankInfo& ri : r.ranks) {
    std::string index = ri.device_index < 0 ? "-" : std::to_string(ri.device_index);
    out += strprintf("#  Rank %2d  Host %-16s  Device %-2s %-30s  nodes %4d  sends %3d  recvs %3d  tensors %9.2f MB"
                     "  peak %9.2f MB",
                     ri.rank, ri.host.c_str(), index.c_str(), ri.device.c_str(), ri.launched, ri.sends, ri.recvs,
                     ri.tensors_mb, ri.memory_mb);
    if (ri.rows_launched > 0) out += strprintf("  rows in place %d/%d", ri.rows_in_place, ri.rows_launched);
    out += "\n";
  }
  out += shared_gpu_note(r);
  out += "#\n";
  out += strprintf("# %8s %6s %12s %12s %12s %8s\n", "repeat", "runs", "time", "min", "max", "check");
  out += strprintf("# %8s %6s %12s %12s %12s %8s\n", "", "", "(ms)", "(ms)", "(ms)", "");
  for (size_t i = 0; i < r.repeats_ms.size(); ++i) {
    double lo = std::numeric_limits<double>::infinity(), hi = 0;
    for (int k = 0; k < r.number; ++k) {
      size_t idx = i * static_cast<size_t>(r.number) + static_cast<size_t>(k);
      if (idx < r.runs_ms.size()) {
        lo = std::min(lo, r.runs_ms[idx]);
        hi = std::max(hi, r.runs_ms[idx]);
      }
    }
    out += strprintf("  %8zu %6d %12.4f %12.4f %12.4f %8s\n", i, r.number, r.repeats_ms[i], lo, hi,
                     check_cell(r).c_str());
  }
  out += "#\n";
  for (const VerifyResult& v : r.verify) {
    // Per-node comparisons name the worst node; output comparisons name the output node.
    bool per_node = v.against.find("every node") != std::string::npos;
    std::string where = v.diff.where.empty() ? "" : (per_node ? "  worst node: " : "  output: ") + v.diff.where;
    out += strprintf("# verify vs %-34s max_abs %.3e  max_rel %.3e  (tolerance %.1e)  %s%s\n", v.against.c_str(),
                     v.diff.max_abs, v.diff.max_rel, v.tolerance, v.ok ? "OK" : "FAIL", where.c_str());
  }
  out += strprintf("# latency (ms): mean %.4f  median %.4f  min %.4f  max %.4f  std %.4f  (predicted %.4f)\n",
                   r.mean_ms, r.median_ms, r.min_ms, r.max_ms, r.std_ms, r.predicted_ms);
  out += strprintf("# correctness: %s\n", r.verify.empty() ? "not checked (use --verify)" : (r.ok ? "OK" : "FAILED"));
  return out;
}

json report_to_json(const RunReport& r) {
  json j;
  j["format"] = "hios-run";
  j["version"] = 1;
  j["graph"] = {{"name", r.graph_name}, {"digest", r.graph_digest}, {"batch", r.batch}, {"height", r.height},
                {"width", r.width}};
  j["schedule"] = {{"algorithm", r.algorithm}, {"gpus", r.num_ranks}, {"predicted_ms", r.predicted_ms}};
  j["config"] = {{"backend", r.backend},   {"transport", r.transport}, {"math", r.math}, {"layout", r.layout},
                 {"conv_search", r.conv_search}, {"cuda_graph", r.cuda_graph}, {"memory", r.memory}, {"launch_order", r.launch_order},   {"warmup", r.warmup},   {"number", r.number},
                 {"repeat", r.repeat}};
  j["versions"] = r.versions;
  json ranks = json::array();
  for (const RankInfo& ri : r.ranks) {
    ranks.push_back({{"rank", ri.rank},         {"host", ri.host},   {"device", ri.device},
                     {"device_index", ri.device_index}, {"nodes", ri.launched}, {"sends", ri.sends},
                     {"recvs", ri.recvs},       {"tensor_memory_mb", ri.tensors_mb},
                     {"peak_memory_mb", ri.memory_mb},  {"rows_launched", ri.rows_launched},
                     {"rows_in_place", ri.rows_in_place}});
  }
  j["ranks"] = ranks;
  j["latency_ms"] = {{"mean", r.mean_ms}, {"median", r.median_ms}, {"min", r.min_ms},
                     {"max", r.max_ms},   {"std", r.std_ms},       {"repeats", r.repeats_ms},
                     {"runs", r.runs_ms}};
  json ver = json::array();
  for (const VerifyResult& v : r.verify) {
    json d = diff_json(v.diff);
    d["max_abs"] = finite(v.diff.max_abs);
    d["max_rel"] = finite(v.diff.max_rel);
    ver.push_back({{"against", v.against}, {"tolerance", v.tolerance}, {"ok", v.ok}, {"diff", d}});
  }
  j["verify"] = ver;
  j["ok"] = r.ok;
  return j;
}

}  // namespace hios::exec
