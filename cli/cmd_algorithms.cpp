// Scheduling subcommands: schedule, simulate-random. (Being written.)
#include "cli/commands.hpp"

namespace hios::cli {

void add_algorithm_commands(CLI::App& app) {}

}  // namespace hios::cli
