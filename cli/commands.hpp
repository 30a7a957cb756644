// Each layer registers its subcommands on the one `hios` binary. A subcommand reports bad
// input by throwing hios::Error; main() prints it as one line on stderr and exits with 2.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace hios::cli {

void add_graph_commands(CLI::App& app);      // models, graph, info, dot, validate
void add_scheduler_commands(CLI::App& app);  // check, show, trace (cli/cmd_scheduler.cpp)
void add_algorithm_commands(CLI::App& app);  // schedule, simulate-random (cli/cmd_algorithms.cpp)
void add_executor_commands(CLI::App& app);   // lower, run
void add_profiler_commands(CLI::App& app);   // profile

// Writes text to a file atomically, or to stdout when file is empty or "-".
void write_output(const std::string& file, const std::string& text);

}  // namespace hios::cli
