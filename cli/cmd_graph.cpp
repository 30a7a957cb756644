// Graph-level subcommands: models, graph, info, dot, validate.
#include <cstdio>
#include <filesystem>

#include "cli/commands.hpp"
#include "graph/analysis.hpp"
#include "graph/error.hpp"
#include "graph/json_codec.hpp"
#include "graph/validate.hpp"
#include "models/models.hpp"
#include "scheduler/schedule.hpp"
#ifdef HIOS_WITH_EXECUTOR
#include "executor/safetensors.hpp"
#include "executor/weights.hpp"
#include "graph/json_reader.hpp"
#endif

namespace hios::cli {

namespace {

struct GraphOptions {
  std::string model;
  int64_t batch = 1, height = 0, width = 0;
  std::string output;
  std::string weights;  // --save-weights
};

// A schedule given to info or dot: its graph (the split graph of a row split) is what they show,
// and the schedule itself must be one `hios check` passes, split or not.
void load_checked_schedule(Graph& g, const std::string& file) {
  const Schedule s = load_schedule(g, file);
  try {
    require_valid_schedule(g, s);
  } catch (const Error& e) {
    throw Error(file + ": " + e.what());
  }
}

struct FileOptions {
  std::string file;
  std::string output;
  std::string schedule;  // info and dot: show the split graph of this schedule
  bool as_json = false;
};

}  // namespace

void add_graph_commands(CLI::App& app) {
  // models
  CLI::App* models = app.add_subcommand("models", "List the built-in models");
  models->footer("Example:\n  hios models\n");
  models->callback([] {
    for (const ModelInfo& m : model_registry()) {
      std::printf("%-18s %4lld  %s\n", m.name.c_str(), (long long)m.default_size, m.description.c_str());
    }
  });

  // graph
  auto gopt = std::make_shared<GraphOptions>();
  CLI::App* graph = app.add_subcommand("graph", "Build a model and write its graph JSON");
  graph->add_option("--model,-m", gopt->model, "Model name (see 'hios models')")->required();
  // 0 stands for "the model's standard size" inside, so the options themselves start at 1:
  // `--height 0` is a mistake, not a request for the default.
  graph->add_option("--batch,-b", gopt->batch, "Batch size (1 to 65536)")->capture_default_str()->check(CLI::Range(1, 65536));
  graph->add_option("--height", gopt->height, "Input height, 1 to 65536 (default: the model's standard size)")
      ->check(CLI::Range(1, 65536));
  graph->add_option("--width", gopt->width, "Input width, 1 to 65536 (default: the model's standard size)")
      ->check(CLI::Range(1, 65536));
  graph->add_option("--output,-o", gopt->output, "Output file (default: stdout)");
#ifdef HIOS_WITH_EXECUTOR
  graph->add_option("--save-weights", gopt->weights,
                    "Also write the model's seeded weights to this safetensors file and name it in the graph, "
                    "which then takes its parameters from it (edit them with Python's safetensors package)");
#endif
  graph->footer("Example:\n  hios graph --model inception_v3 --batch 1 --height 1024 --width 1024 -o inception.json\n");
  graph->callback([gopt] {
    Graph g = build_model(gopt->model, ModelParams{gopt->batch, gopt->height, gopt->width});
#ifdef HIOS_WITH_EXECUTOR
    if (!gopt->weights.empty()) {
      HIOS_CHECK(!gopt->output.empty() && gopt->output != "-",
                 "--save-weights needs -o: the graph names its weights file relative to its own folder");
      write_file_atomic(gopt->weights, exec::safetensors_bytes(exec::seeded_weight_tensors(g)));
      const std::filesystem::path folder = std::filesystem::absolute(gopt->output).parent_path();
      g.weights = std::filesystem::absolute(gopt->weights).lexically_relative(folder).string();
    }
#endif
    write_output(gopt->output, graph_to_text(g));
    if (!gopt->output.empty() && gopt->output != "-") {
      std::fprintf(stderr, "wrote %s: %d nodes in %zu blocks\n", gopt->output.c_str(), g.size(), g.blocks.size());
    }
  });

  // info
  auto iopt = std::make_shared<FileOptions>();
  CLI::App* info = app.add_subcommand("info", "Summarise a graph: counts, FLOPs, parameters, width, longest path");
  info->add_option("file", iopt->file, "Graph JSON")->required();
  info->add_flag("--json", iopt->as_json, "Print one JSON object instead of text");
  info->add_option("--schedule", iopt->schedule, "Summarise the split graph of a schedule that splits rows");
  info->footer("Example:\n  hios info inception.json --json\n");
  info->callback([iopt] {
    Graph g = load_graph(iopt->file);
    if (!iopt->schedule.empty()) load_checked_schedule(g, iopt->schedule);  // g becomes the split graph
    GraphSummary s = summarize(g);
    if (iopt->as_json) {
      std::printf("%s\n", summary_to_json(g, s).dump(2).c_str());
    } else {
      std::printf("%s", summary_to_text(g, s).c_str());
    }
  });

  // dot
  auto dopt = std::make_shared<FileOptions>();
  CLI::App* dot = app.add_subcommand("dot", "Write Graphviz DOT with one cluster per block");
  dot->add_option("file", dopt->file, "Graph JSON")->required();
  dot->add_option("--output,-o", dopt->output, "Output file (default: stdout)");
  dot->add_option("--schedule", dopt->schedule,
                  "Draw the split graph of a schedule that splits rows: parts, halos and gathers as nodes");
  dot->footer("Example:\n  hios dot inception.json -o inception.dot && dot -Tsvg inception.dot -o inception.svg\n"
              "  hios dot inception.json --schedule split.json -o split.dot\n");
  dot->callback([dopt] {
    Graph g = load_graph(dopt->file);
    if (!dopt->schedule.empty()) load_checked_schedule(g, dopt->schedule);
    write_output(dopt->output, graph_to_dot(g));
  });

  // validate
  auto vopt = std::make_shared<FileOptions>();
  CLI::App* validate = app.add_subcommand("validate", "Check a graph file and explain every problem found");
  validate->add_option("file", vopt->file, "Graph JSON")->required();
  validate->footer("Example:\n  hios validate my_model.json\n");
  validate->callback([vopt] {
    std::vector<std::string> problems = validate_graph_file(vopt->file);
    if (problems.empty()) {
      Graph g = load_graph(vopt->file);
      std::printf("%s: ok (%d nodes, %zu blocks)\n", vopt->file.c_str(), g.size(), g.blocks.size());
      return;
    }
    if (problems.size() == 1) throw Error(problems[0]);
    // Several independent problems: list them all, then fail with a count.
    for (const std::string& p : problems) std::fprintf(stderr, "hios: problem: %s\n", p.c_str());
    throw Error(strprintf("%s: %zu problems (listed above)", vopt->file.c_str(), problems.size()));
  });
}

}  // namespace hios::cli
