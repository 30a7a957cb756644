// Schedule inspection subcommands: check, show, trace. (Being written.)
#include "cli/commands.hpp"

namespace hios::cli {

void add_scheduler_commands(CLI::App& app) {}

}  // namespace hios::cli
