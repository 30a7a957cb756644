// `hios run --shapes S,... --batches N,...`: a ShapeSet (executor/shape_set.hpp) prepared for
// every listed shape, each timed, the cost of switching between shapes timed, the memory of the
// set reported against each shape alone, and with --verify every shape compared with the CPU
// reference.
#pragma once

#include <string>
#include <vector>

#include "run/runner.hpp"
#include "executor/shape_set.hpp"
#include "graph/json_reader.hpp"

namespace hios::exec {

struct ShapeRunOptions {
  ShapeSetOptions set;
  int warmup = 2;   // untimed passes per shape before its timed ones
  int number = 20;  // timed passes per shape, and rounds of the switching measurement
  bool verify = false;
  // Also prepare each shape alone in a set of its own (one after the other, after the main set
  // is gone) and report its memory: the naive baseline of one arena and one graph per shape.
  bool compare_separate = false;
};

struct ShapeRow {
  ShapeKey key;
  double arena_mb = 0;             // this shape's own arena plan
  double median_ms = 0, min_ms = 0;  // passes of this shape back to back
  double after_switch_ms = 0;      // median of passes that follow a pass of another shape
  PassContents contents;           // the captured pass (zeros when not capturing)
  double alone_mb = 0;             // compare_separate: memory of this shape alone
  bool verified = false;
  VerifyResult verify;
};

struct ShapeRunReport {
  std::string model, backend, device, math, layout, versions;
  bool captured = false;
  std::vector<ShapeRow> rows;
  double prepare_s = 0;
  double set_mb = 0;      // Backend::memory_in_use after preparing every shape
  double arena_mb = 0;    // the one arena the set keeps
  double largest_alone_mb = 0, sum_alone_mb = 0;  // compare_separate
  int captures = 0, recaptures = 0, switches = 0;
  bool ok = true;  // every verification passed
};

ShapeRunReport run_shape_set(const GraphMaker& make_graph, const ScheduleMaker& make_schedule,
                             const std::vector<ShapeKey>& keys, const ShapeRunOptions& opt, Comm& self);

std::string shape_report_to_table(const ShapeRunReport& r);
json shape_report_to_json(const ShapeRunReport& r);

}  // namespace hios::exec
