// Each layer registers its subcommands on the one `hios` binary. A subcommand reports bad
// input by throwing hios::Error; main() prints it as one line on stderr and exits with 2.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace hios::cli {

void add_graph_commands(CLI::App& app);      // models, graph, info, dot, validate
void add_import_commands(CLI::App& app);     // import (cli/cmd_import.cpp)
void add_scheduler_commands(CLI::App& app);  // check, show, trace (cli/cmd_scheduler.cpp)
void add_algorithm_commands(CLI::App& app);  // schedule, simulate-random (cli/cmd_algorithms.cpp)
void add_executor_commands(CLI::App& app);   // lower, run
void add_serve_commands(CLI::App& app);      // serve (cli/cmd_serve.cpp)
void add_profiler_commands(CLI::App& app);   // profile
void add_tuner_commands(CLI::App& app);      // tune (cli/cmd_tuner.cpp)

// Thrown by the ranks of an MPI job whose rank 0 already printed the error they share: main()
// exits with `code` and prints nothing more, so the user reads the error once.
struct SilentExit {
  int code = 2;
};

// Writes text to a file atomically, or to stdout when file is empty or "-".
void write_output(const std::string& file, const std::string& text);  // "" or "-": standard output
// Whether an -o value means standard output ("-"): the command's own report then goes to stderr.
inline bool is_stdout(const std::string& file) { return file == "-"; }
// Refuses a results file with a NumPy name (results are JSON; --save-output writes .npy files).
void check_results_name(const std::string& file);

// A CLI11 check for a floating-point option: finite and within [lo, hi] ((lo, hi] with
// above_lo, for values where lo itself means nothing, like a latency budget of 0). CLI::Range
// alone lets NaN through (every comparison with NaN is false) and accepts inf as "above".
inline CLI::Validator finite_range(double lo, double hi, bool above_lo = false) {
  return CLI::Validator(
      [lo, hi, above_lo](std::string& text) -> std::string {
        double v = 0;
        try {
          size_t used = 0;
          v = std::stod(text, &used);
          if (used != text.size()) return "'" + text + "' is not a number";
        } catch (...) {
          return "'" + text + "' is not a number";
        }
        if (above_lo && !(v > lo && v <= hi)) {
          return "'" + text + "' is not above " + std::to_string(lo) + " and at most " + std::to_string(hi);
        }
        if (!(v >= lo && v <= hi)) return "'" + text + "' is outside " + std::to_string(lo) + " to " + std::to_string(hi);
        return "";
      },
      std::string("finite, ") + (above_lo ? "above " : "") + std::to_string(lo) + " to " + std::to_string(hi));
}

}  // namespace hios::cli

#ifdef HIOS_WITH_EXECUTOR
#include <functional>
#include <vector>

#include "executor/comm.hpp"

namespace hios::cli {

// "0,1" -> {0, 1} (--devices); "" -> {}.
std::vector<int> parse_devices(const std::string& s);
// Under MPI every message names rank and host (a message that already does is kept as is).
std::string with_where(const exec::Comm& comm, const std::string& msg);
// s made one visible line: line breaks become spaces and every other control byte \xNN, whether
// it came from a file or from an option value that a message (CLI11's or hios's) repeats.
void one_line(std::string& s);
// Runs an MPI job's body: any error becomes one line naming rank and host, and in a job of
// several ranks the whole job is aborted (peers blocked in a receive would wait forever).
void run_job(exec::Comm& comm, const std::function<void()>& body);
// Runs `step` on every rank, where an error is one every rank meets alike (each reads the same
// files): rank 0 prints it once, with the other ranks' reasons where they differ, and every rank
// returns false, to end without aborting the job. One rank alone throws as usual.
bool shared_step(exec::Comm& comm, const std::function<void()>& step);

}  // namespace hios::cli
#endif
