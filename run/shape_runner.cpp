#include "run/shape_runner.hpp"

#include <chrono>
#include <cmath>
#include <limits>
#include <map>

#include "executor/weights.hpp"
#include "graph/error.hpp"
#include "graph/stats.hpp"

namespace hios::exec {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// JSON has no infinity: an infinite error is written as the largest double.
double finite_or_max(double v) { return std::isfinite(v) ? v : std::numeric_limits<double>::max(); }

}  // namespace

ShapeRunReport run_shape_set(const GraphMaker& make_graph, const ScheduleMaker& make_schedule,
                             const std::vector<ShapeKey>& keys, const ShapeRunOptions& opt, Comm& self) {
  HIOS_CHECK(!keys.empty(), "no shapes to run");
  HIOS_CHECK(opt.warmup >= 0 && opt.number >= 1, "internal error: warmup %d, number %d", opt.warmup, opt.number);
  ShapeRunReport rep;
  {
    ShapeSet set(make_graph, make_schedule, opt.set, self);
    const auto t0 = std::chrono::steady_clock::now();
    set.prepare(keys);
    rep.prepare_s = seconds_since(t0);
    Backend& be = set.session().backend();
    rep.model = set.graph(keys.front()).name;
    rep.backend = be.name();
    rep.device = be.device_name();
    rep.math = be.math();
    rep.layout = be.layout();
    rep.versions = be.versions();
    rep.captured = set.capturing();
    rep.set_mb = double(set.memory_in_use()) / kMiB;
    rep.arena_mb = double(set.kept_arena_bytes()) / kMiB;

    std::map<ShapeKey, size_t> row_of;
    for (const ShapeKey& k : keys) {
      ShapeRow row;
      row.key = k;
      row.arena_mb = double(set.arena_bytes(k)) / kMiB;
      // The caller's write: the input's values straight into the shape's input tensor.
      set.set_input(k, make_input(set.graph(k), opt.set.session.seed));
      for (int i = 0; i < opt.warmup; ++i) set.run(k);
      const std::vector<double> ms = set.timed_runs(k, opt.number);
      row.median_ms = median(ms);
      row.min_ms = *std::min_element(ms.begin(), ms.end());
      row.contents = set.pass_contents(k);
      row_of[k] = rep.rows.size();
      rep.rows.push_back(row);
    }
    // Switching: every pass follows a pass of another shape (with one shape, of the same).
    std::map<ShapeKey, std::vector<double>> after;
    for (int round = 0; round < opt.number; ++round) {
      for (const ShapeKey& k : keys) after[k].push_back(set.timed_runs(k, 1).front());
    }
    for (const ShapeKey& k : keys) rep.rows[row_of[k]].after_switch_ms = median(after[k]);

    if (opt.verify) {
      SessionOptions cpu;
      cpu.backend = "cpu";
      cpu.seed = opt.set.session.seed;
      cpu.threads = opt.set.session.threads;
      for (const ShapeKey& k : keys) {
        const Graph& g = set.graph(k);
        const std::vector<float> input = make_input(g, opt.set.session.seed);
        set.set_input(k, input);
        set.run(k);
        const std::vector<float> got = set.read_output(k);
        std::unique_ptr<RankSession> ref = run_reference(g, cpu, self, input);
        ShapeRow& row = rep.rows[row_of[k]];
        row.verified = true;
        row.verify.against = "cpu reference";
        // The CPU backend against itself must match exactly; a GPU within its math's tolerance.
        row.verify.tolerance = rep.backend == "cpu" ? 0.0 : tolerance(rep.math);
        row.verify.diff = compare(got, ref->backend().read_tensor(g.output()));
        row.verify.diff.where = g.nodes[size_t(g.output())].name;
        row.verify.ok = row.verify.diff.max_rel <= row.verify.tolerance;
        rep.ok = rep.ok && row.verify.ok;
      }
    }
    rep.captures = set.captures();
    rep.recaptures = set.recaptures();
    rep.switches = set.switches();
  }
  if (opt.compare_separate) {
    for (ShapeRow& row : rep.rows) {
      ShapeSet alone(make_graph, make_schedule, opt.set, self);
      alone.prepare({row.key});
      alone.set_input(row.key, make_input(alone.graph(row.key), opt.set.session.seed));
      alone.run(row.key);
      row.alone_mb = double(alone.memory_in_use()) / kMiB;
      rep.largest_alone_mb = std::max(rep.largest_alone_mb, row.alone_mb);
      rep.sum_alone_mb += row.alone_mb;
    }
  }
  return rep;
}

std::string shape_report_to_table(const ShapeRunReport& r) {
  std::string s = strprintf("# %s served at %zu shapes from one process: %s, %s, math %s, layout %s, %s\n",
                            r.model.c_str(), r.rows.size(), r.backend.c_str(), r.device.c_str(), r.math.c_str(),
                            r.layout.c_str(), r.captured ? "one CUDA Graph per shape" : "eager passes");
  s += "# " + r.versions + "\n";
  s += strprintf("# prepared in %.2f s: %d capture(s), %d recapture(s) after a buffer moved, %d program switch(es)\n",
                 r.prepare_s, r.captures, r.recaptures, r.switches);
  s += strprintf("# memory of the set: %.1f MiB in use, one arena of %.1f MiB", r.set_mb, r.arena_mb);
  if (r.largest_alone_mb > 0) {
    s += strprintf("; the largest shape alone %.1f MiB (set / largest %.2fx), every shape alone summed %.1f MiB "
                   "(set / sum %.2fx)",
                   r.largest_alone_mb, r.set_mb / r.largest_alone_mb, r.sum_alone_mb,
                   r.sum_alone_mb > 0 ? r.set_mb / r.sum_alone_mb : 0.0);
  }
  s += "\n";
  s += strprintf("%-16s %10s %10s %10s %12s %10s %8s %8s %10s  %s\n", "shape(NxHxW)", "arena_MiB", "median_ms",
                 "min_ms", "switched_ms", "alone_MiB", "kernels", "in_copy", "max_rel", "verify");
  for (const ShapeRow& row : r.rows) {
    s += strprintf("%-16s %10.1f %10.4f %10.4f %12.4f %10s %8d %8d %10s  %s\n", row.key.str().c_str(), row.arena_mb,
                   row.median_ms, row.min_ms, row.after_switch_ms,
                   row.alone_mb > 0 ? strprintf("%.1f", row.alone_mb).c_str() : "-", row.contents.kernels,
                   row.contents.copies_reading,
                   row.verified ? strprintf("%.2e", row.verify.diff.max_rel).c_str() : "-",
                   !row.verified ? "-" : row.verify.ok ? "ok" : "FAILED");
  }
  return s;
}

json shape_report_to_json(const ShapeRunReport& r) {
  json j;
  j["format"] = "hios-shapes";
  j["version"] = 1;
  j["model"] = r.model;
  j["config"] = {{"backend", r.backend}, {"device", r.device},     {"math", r.math},
                 {"layout", r.layout},   {"versions", r.versions}, {"cuda_graph", r.captured ? "on" : "off"}};
  j["prepare_s"] = r.prepare_s;
  j["captures"] = r.captures;
  j["recaptures"] = r.recaptures;
  j["switches"] = r.switches;
  j["memory_mb"] = {{"set", r.set_mb},
                    {"arena", r.arena_mb},
                    {"largest_alone", r.largest_alone_mb},
                    {"sum_alone", r.sum_alone_mb}};
  json rows = json::array();
  for (const ShapeRow& row : r.rows) {
    json x = {{"batch", row.key.batch},
              {"height", row.key.height},
              {"width", row.key.width},
              {"arena_mb", row.arena_mb},
              {"median_ms", row.median_ms},
              {"min_ms", row.min_ms},
              {"after_switch_ms", row.after_switch_ms},
              {"alone_mb", row.alone_mb},
              {"pass", {{"kernels", row.contents.kernels},
                        {"copies", row.contents.copies},
                        {"memsets", row.contents.memsets},
                        {"other", row.contents.other},
                        {"copies_reading_input", row.contents.copies_reading}}}};
    if (row.verified) {
      x["verify"] = {{"against", row.verify.against},
                     {"tolerance", row.verify.tolerance},
                     {"ok", row.verify.ok},
                     {"max_rel", finite_or_max(row.verify.diff.max_rel)},
                     {"max_abs", finite_or_max(row.verify.diff.max_abs)}};
    }
    rows.push_back(x);
  }
  j["shapes"] = rows;
  j["ok"] = r.ok;
  return j;
}

}  // namespace hios::exec
