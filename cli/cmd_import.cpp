// import: an ONNX model as a hios graph and its weights (importer/onnx_import.hpp).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "cli/commands.hpp"
#include "graph/error.hpp"
#include "graph/json_codec.hpp"
#include "graph/json_reader.hpp"
#ifdef HIOS_WITH_IMPORTER
#include "executor/safetensors.hpp"
#include "importer/onnx_import.hpp"
#endif

namespace hios::cli {

namespace {

namespace fs = std::filesystem;

struct ImportOptions {
  std::string model;
  std::string output;
  std::string weights;
  std::string name;
  int64_t batch = 0, height = 0, width = 0;
  std::vector<std::string> freeze, dims;  // NAME=FILE.npy, NAME=V
};

// NAME=VALUE, both non-empty; the option names itself in the error.
std::pair<std::string, std::string> name_value(const std::string& spec, const char* option) {
  const size_t eq = spec.find('=');
  HIOS_CHECK(eq != std::string::npos && eq > 0 && eq + 1 < spec.size(), "%s %s: expected NAME=%s", option,
             printable(spec).c_str(), std::string(option) == "--dim" ? "V" : "FILE.npy");
  return {spec.substr(0, eq), spec.substr(eq + 1)};
}

// Where the graph goes must take a file before anything is written (a failed import writes nothing).
void check_writable(const fs::path& p, const char* what) {
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(p, ec);
  if (fs::exists(st)) {
    HIOS_CHECK(fs::is_regular_file(st), "%s %s: exists and is not a regular file", what, p.c_str());
    HIOS_CHECK(::access(p.c_str(), W_OK) == 0, "%s %s: not writable", what, p.c_str());
  }
  const fs::path folder = fs::absolute(p).parent_path();
  HIOS_CHECK(fs::is_directory(folder, ec) && ::access(folder.c_str(), W_OK) == 0, "%s %s: folder %s is not writable",
             what, p.c_str(), folder.c_str());
}

#ifdef HIOS_WITH_IMPORTER
void run_import(const ImportOptions& o) {
  importer::OnnxImportOptions io;
  io.model_file = o.model;
  io.batch = o.batch;
  io.height = o.height;
  io.width = o.width;
  io.name = o.name;
  for (const std::string& f : o.freeze) io.frozen.insert(name_value(f, "--freeze"));
  for (const std::string& d : o.dims) {
    const auto [name, value] = name_value(d, "--dim");
    char* end = nullptr;
    const long long v = std::strtoll(value.c_str(), &end, 10);
    HIOS_CHECK(end && *end == '\0' && v >= 1 && v <= (1LL << 31) - 1, "--dim %s: V must be an integer from 1 to 2^31 - 1",
               printable(d).c_str());
    io.dims[name] = v;
  }
  const fs::path weights = o.weights.empty() ? fs::path(o.output).replace_extension(".safetensors") : fs::path(o.weights);
  HIOS_CHECK(fs::absolute(weights) != fs::absolute(o.output), "--weights %s is the graph file itself", weights.c_str());
  // Never over the model it reads (nor its external data beside it, which has another name).
  std::error_code ec;
  HIOS_CHECK(!fs::equivalent(weights, o.model, ec), "--weights %s is the model file itself", weights.c_str());
  HIOS_CHECK(!fs::equivalent(fs::path(o.output), o.model, ec), "-o %s is the model file itself", o.output.c_str());
  check_writable(o.output, "-o");
  check_writable(weights, "--weights");
  importer::OnnxImport r = importer::import_onnx(io);
  // Weights first: a graph never names a file that is not there.
  write_file_atomic(weights.string(), exec::safetensors_bytes(r.weights));
  const fs::path folder = fs::absolute(o.output).parent_path();
  r.graph.weights = fs::absolute(weights).lexically_relative(folder).string();
  write_file_atomic(o.output, graph_to_text(r.graph));
  double params = 0;
  for (const auto& [name, t] : r.weights) params += double(t.values.size());
  std::string folded;
  for (const std::string& f : r.folded) folded += (folded.empty() ? "" : ", ") + f;
  std::fprintf(stderr, "imported %s (opset %d, %d ONNX nodes): %d hios nodes in %zu blocks, %.0f parameters\n",
               o.model.c_str(), r.opset, r.onnx_nodes, r.graph.size() - 1, r.graph.blocks.size(), params);
  if (!folded.empty()) std::fprintf(stderr, "folded: %s\n", folded.c_str());
  std::fprintf(stderr, "wrote %s and %s\n", o.output.c_str(), weights.c_str());
}
#endif

}  // namespace

void add_import_commands(CLI::App& app) {
  auto o = std::make_shared<ImportOptions>();
  CLI::App* cmd = app.add_subcommand("import", "Import an ONNX model as a hios graph with its trained weights");
  cmd->add_option("model", o->model, "The ONNX file (opsets 13 to 18; external data beside it)")->required();
  cmd->add_option("--output,-o", o->output, "The graph JSON to write")->required();
  cmd->add_option("--weights", o->weights,
                  "The safetensors file for the parameters (default: the graph's name with .safetensors)");
  cmd->add_option("--name", o->name, "The graph's name (default: the model's, else the file's stem)");
  cmd->add_option("--batch,-b", o->batch, "Batch size, where the model leaves it open or to change it (1 to 65536)")
      ->check(CLI::Range(1, 65536));
  cmd->add_option("--height", o->height, "Input height (default: the model's), 1 to 65536")->check(CLI::Range(1, 65536));
  cmd->add_option("--width", o->width, "Input width (default: the model's), 1 to 65536")->check(CLI::Range(1, 65536));
  cmd->add_option("--dim", o->dims, "NAME=V: a symbolic dim of the model's inputs bound to V (repeatable)");
  cmd->add_option("--freeze", o->freeze,
                  "NAME=FILE.npy: the model's input NAME fixed to these values, a constant of the graph (repeatable; "
                  "what must be known at import, such as a Reshape's target shape)");
  cmd->footer(
      "Folds batch norms, constants, Identity and Dropout, merges zero Pads into the next conv or pool,\n"
      "and finds the blocks. Anything it cannot import is listed in one error, every node named.\n"
      "Example:\n  hios import resnet50.onnx -o resnet50.json      # also writes resnet50.safetensors\n"
      "  hios run --graph resnet50.json --input x.npy --save-output y.npy\n");
  cmd->callback([o] {
    HIOS_CHECK(o->output != "-", "-o must name a file: the graph names its weights file relative to its own folder");
#ifdef HIOS_WITH_IMPORTER
    run_import(*o);
#else
    throw_error("this hios was built without ONNX support: install libonnx-dev and libprotobuf-dev "
                "(scripts/install-deps.sh does) and build again");
#endif
  });
}

}  // namespace hios::cli
