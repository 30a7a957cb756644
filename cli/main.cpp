// hios: inter-operator scheduling for DAG-shaped DNNs across GPUs and streams.
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <cstdlib>
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

void check_results_name(const std::string& file) {
  std::string ext = std::filesystem::path(file).extension().string();
  for (char& ch : ext) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  HIOS_CHECK(ext != ".npy" && ext != ".npz",
             "-o %s: the results file is JSON, not NumPy (--save-output writes the outputs as .npy files)",
             file.c_str());
}

}  // namespace hios::cli

// One line, never a stack trace: users run hios inside shell sweeps and mpirun jobs.
static std::string one_line(const char* what) {
  std::string s = what;
  hios::cli::one_line(s);
  return s;
}

// A value as a message repeats it; one_line cuts a very long one when the message is printed.
static std::string shown(const std::string& v) { return "'" + v + "'"; }

// Why `v` is not a number of this option's type ("" when it is): decimal digits only (CLI11
// would read 0x10 as 16 and 0b11 as 3), within 64 bits (CLI11 saturates past them), and a
// finite float.
static std::string number_problem(const std::string& v, const std::string& type) {
  if (v.find_first_not_of(" \t") == std::string::npos) return "an empty value is not a number";
  if (type == "UINT" && v[0] == '-') return shown(v) + " is negative";
  size_t i = (v[0] == '+' || v[0] == '-') ? 1 : 0;
  const size_t digits_from = i;
  while (i < v.size() && std::isdigit(static_cast<unsigned char>(v[i]))) ++i;
  const bool integral = i > digits_from && i == v.size();
  if (type != "FLOAT") {
    if (!integral) return shown(v) + " is not a decimal integer";
    const char* first = v.data() + (v[0] == '+' ? 1 : 0);
    std::from_chars_result r{};
    if (type == "UINT") {
      uint64_t x = 0;
      r = std::from_chars(first, v.data() + v.size(), x);
    } else {
      int64_t x = 0;
      r = std::from_chars(first, v.data() + v.size(), x);
    }
    if (r.ec == std::errc::result_out_of_range) return shown(v) + " is out of range";
    return "";
  }
  // A float: digits, at most one point, an optional exponent; no hex floats, inf or nan.
  size_t j = digits_from, mantissa = 0;
  while (j < v.size() && std::isdigit(static_cast<unsigned char>(v[j]))) ++j, ++mantissa;
  if (j < v.size() && v[j] == '.') {
    ++j;
    while (j < v.size() && std::isdigit(static_cast<unsigned char>(v[j]))) ++j, ++mantissa;
  }
  bool ok = mantissa > 0;
  if (ok && j < v.size() && (v[j] == 'e' || v[j] == 'E')) {
    ++j;
    if (j < v.size() && (v[j] == '+' || v[j] == '-')) ++j;
    const size_t exp_from = j;
    while (j < v.size() && std::isdigit(static_cast<unsigned char>(v[j]))) ++j;
    ok = j > exp_from;
  }
  if (!ok || j != v.size()) return shown(v) + " is not a decimal number";
  errno = 0;
  const double x = std::strtod(v.c_str(), nullptr);
  if (!std::isfinite(x) || (errno == ERANGE && x != 0)) return shown(v) + " is out of range";
  return "";
}

// One check for every option of every command, whatever CLI11 would let through: each number
// (each element of a list) is a decimal number of the option's type and range, and no value is
// empty (CLI11 reads '' as 0, or as an option not given).
static void check_every_value(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    for (CLI::Option* opt : sub->get_options([](CLI::Option*) { return true; })) {
      if (opt->get_type_size() == 0) continue;  // a flag
      // "FLOAT:finite, 0 to 10": CLI11 appends the descriptions of the checks added so far.
      const std::string full = opt->get_type_name();
      const std::string type = full.substr(0, full.find_first_of(":= "));
      const bool number = type == "INT" || type == "UINT" || type == "FLOAT";
      opt->check(CLI::Validator(
          [number, type](std::string& v) -> std::string {
            if (number) return number_problem(v, type);
            return v.empty() ? std::string("an empty value (leave the option out for its default)") : std::string();
          },
          "", "value"));
    }
    check_every_value(*sub);
  }
}

// Under mpirun every rank reads the same command line: an error in it is the same on every
// rank, and only rank 0 prints it.
static bool quiet_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"}) {
    const char* r = std::getenv(name);
    if (r != nullptr && *r != '\0') return std::string(r) != "0";
  }
  return false;
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
  check_every_value(app);
  const bool quiet = quiet_rank();
  // CLI11 answers an unknown first word or option with "A subcommand is required", which hides
  // the typo: name it, and the commands there are.
  if (argc >= 2 && argv[1][0] == '-') {
    const std::string first = argv[1];
    if (first != "-h" && first != "--help" && first != "--version") {
      if (!quiet) {
        std::fprintf(stderr, "hios: unknown option '%s' before the command (see 'hios --help')\n",
                     hios::printable(first).c_str());
      }
      return 2;
    }
  }
  // CLI11 drops the empty elements of a comma-separated list ("2,,4" becomes 2 and 4): refuse a
  // number list with one, which is a typo more often than not.
  for (int i = 1; i < argc; ++i) {
    std::string v = argv[i], option;
    if (v.rfind("--", 0) == 0 && v.find('=') != std::string::npos) {
      option = v.substr(0, v.find('='));
      v = v.substr(v.find('=') + 1);
    } else if (i > 1 && argv[i - 1][0] == '-') {
      option = argv[i - 1];  // the option this value is given to
    }
    const bool number_list = !v.empty() && v.find(',') != std::string::npos &&
                             v.find_first_not_of("0123456789.eE+-,") == std::string::npos;
    if (number_list && (v.find(",,") != std::string::npos || v.front() == ',' || v.back() == ',')) {
      if (!quiet) {
        const std::string what = option.empty() ? "'" + v + "'" : option + " '" + v + "'";
        std::fprintf(stderr, "hios: %s: an empty element in a comma-separated list (see 'hios --help')\n",
                     one_line(what.c_str()).c_str());
      }
      return 2;
    }
  }
  if (argc >= 2 && argv[1][0] != '-') {
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) known = known || sub->check_name(argv[1]);
    if (!known) {
      std::string names;
      for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) names += (names.empty() ? "" : ", ") + sub->get_name();
      if (!quiet) {
        std::fprintf(stderr, "hios: unknown command '%s' (commands: %s)\n", hios::printable(argv[1]).c_str(),
                     names.c_str());
      }
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::string why = e.what();
    // A decimal integer within 64 bits that this option's narrower type cannot hold: CLI11 says
    // "Could not convert: --edges = 99999999999"; the line names the option and the reason.
    const std::string lead = "Could not convert: ";
    const size_t eq = why.find(" = ");
    if (dynamic_cast<const CLI::ConversionError*>(&e) && why.rfind(lead, 0) == 0 && eq != std::string::npos) {
      why = why.substr(lead.size(), eq - lead.size()) + ": " + shown(why.substr(eq + 3)) +
            " is out of this option's range";
    }
    if (!quiet) std::fprintf(stderr, "hios: %s (see 'hios --help')\n", one_line(why.c_str()).c_str());
    return 2;
  } catch (const hios::cli::SilentExit& e) {
    return e.code;
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
