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
static std::string one_line(const char* what) {
  std::string s = what;
  hios::cli::one_line(s);
  return s;
}

// CLI11 reads an empty value as 0 and "-1" into an unsigned option as its largest value. Every
// numeric option of every command (each element of a list) must be a number, and a
// non-negative one where the option is unsigned: one check for all of them.
static void refuse_non_numbers(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    for (CLI::Option* opt : sub->get_options([](CLI::Option*) { return true; })) {
      const std::string type = opt->get_type_name();
      const bool is_unsigned = type == "UINT";
      if (type != "INT" && type != "UINT" && type != "FLOAT") continue;
      opt->check(CLI::Validator(
          [is_unsigned](std::string& v) -> std::string {
            const size_t b = v.find_first_not_of(" \t");
            if (b == std::string::npos) return "an empty value is not a number";
            if (is_unsigned && v[b] == '-') return "'" + v + "' is negative";
            return "";
          },
          "", "number"));
    }
    refuse_non_numbers(*sub);
  }
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
  app.set_version_flag("--version", std::string("hios ") + HIOS_VERSION);
  refuse_non_numbers(app);
  // CLI11 answers an unknown first word or option with "A subcommand is required", which hides
  // the typo: name it, and the commands there are.
  if (argc >= 2 && argv[1][0] == '-') {
    const std::string first = argv[1];
    if (first != "-h" && first != "--help" && first != "--version") {
      std::fprintf(stderr, "hios: unknown option '%s' before the command (see 'hios --help')\n",
                   hios::printable(first).c_str());
      return 2;
    }
  }
  // CLI11 drops the empty elements of a comma-separated list ("2,,4" becomes 2 and 4): refuse a
  // number list with one, which is a typo more often than not.
  for (int i = 1; i < argc; ++i) {
    std::string v = argv[i];
    if (v.rfind("--", 0) == 0 && v.find('=') != std::string::npos) v = v.substr(v.find('=') + 1);
    const bool number_list = !v.empty() && v.find(',') != std::string::npos &&
                             v.find_first_not_of("0123456789.eE+-,") == std::string::npos;
    if (number_list && (v.find(",,") != std::string::npos || v.front() == ',' || v.back() == ',')) {
      std::fprintf(stderr, "hios: '%s': an empty element in a comma-separated list (see 'hios --help')\n", v.c_str());
      return 2;
    }
  }
  if (argc >= 2 && argv[1][0] != '-') {
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) known = known || sub->check_name(argv[1]);
    if (!known) {
      std::string names;
      for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) names += (names.empty() ? "" : ", ") + sub->get_name();
      std::fprintf(stderr, "hios: unknown command '%s' (commands: %s)\n", hios::printable(argv[1]).c_str(), names.c_str());
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
