// hios: inter-operator scheduling for DAG-shaped DNNs across GPUs and streams.
#include <cstdio>
#include <exception>
#include <iostream>

#include "cli/commands.hpp"
#include "graph/error.hpp"
#include "graph/json_reader.hpp"
#ifdef HIOS_WITH_EXECUTOR
#include "executor/watchdog.hpp"
#endif

namespace hios::cli {

void write_output(const std::string& file, const std::string& text) {
  if (file.empty() || file == "-") {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    return;
  }
  write_file_atomic(file, text);
}

}  // namespace hios::cli

// One line, never a stack trace: users run hios inside shell sweeps and mpirun jobs.
static std::string one_line(std::string s) {
  for (char& c : s) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return s;
}

int main(int argc, char** argv) {
  // Line-buffered even into a pipe or file: when mpirun kills a rank, what it printed is out.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
#ifdef HIOS_WITH_EXECUTOR
  hios::exec::note_main_thread();  // a timed-out rank prints where this thread was
#endif
  CLI::App app{"hios: run independent DNN operators concurrently across GPUs and CUDA streams"};
  app.require_subcommand(1);
  app.footer("Run 'hios <command> --help' for a command's options and an example.");
  hios::cli::add_graph_commands(app);
  hios::cli::add_import_commands(app);
#ifdef HIOS_WITH_SCHEDULER
  hios::cli::add_scheduler_commands(app);
  hios::cli::add_algorithm_commands(app);
#endif
#ifdef HIOS_WITH_EXECUTOR
  hios::cli::add_executor_commands(app);
  hios::cli::add_serve_commands(app);
#endif
#ifdef HIOS_WITH_PROFILER
  hios::cli::add_profiler_commands(app);
#endif
#ifdef HIOS_WITH_TUNER
  hios::cli::add_tuner_commands(app);
#endif
  // CLI11 answers an unknown first word with "A subcommand is required", which hides the
  // typo: name it, and the commands there are.
  if (argc >= 2 && argv[1][0] != '-') {
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) known = known || sub->check_name(argv[1]);
    if (!known) {
      std::string names;
      for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) names += (names.empty() ? "" : ", ") + sub->get_name();
      std::fprintf(stderr, "hios: unknown command '%s' (commands: %s)\n", argv[1], names.c_str());
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::fprintf(stderr, "hios: %s (see 'hios --help')\n", one_line(e.what()).c_str());
    return 2;
  } catch (const hios::Error& e) {
    std::fprintf(stderr, "hios: error: %s\n", one_line(e.what()).c_str());
    return 2;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "hios: error: out of host memory\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hios: internal error: %s\n", one_line(e.what()).c_str());
    return 3;
  }
  return 0;
}
