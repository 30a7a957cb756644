// The norm op on the CPU backend against a direct double computation: layer norm with a
// residual sum, RMS norm over the last dim with a scale and bias per element, and the shapes of
// scale and bias it refuses, naming the node.
#include <cmath>
#include <random>
#include <vector>

#include "executor/comm.hpp"
#include "executor/session.hpp"
#include "graph/error.hpp"
#include "graph/json_codec.hpp"
#include "tests/catch.hpp"
#include "tests/test_util.hpp"

using namespace hios;

namespace {

// Image x (1 x 4 x 6 x 5) into norm node 'n' with `norm_fields`; "shifted" (exp of the image)
// is there for a residual to read when the fields name it.
Graph norm_graph(const std::string& norm_fields) {
  const bool shifted = norm_fields.find("shifted") != std::string::npos;
  const std::string text = R"({"format": "hios-graph", "version": 1, "name": "norm", "batch": 1, "height": 6,
    "width": 5, "dtype": "float32", "input": {"name": "image", "op": "input", "channels": 4, "shape": [1, 4, 6, 5]},
    "outputs": ["n"], "blocks": [{"name": "b", "exit": "n", "nodes": [
      )" + std::string(shifted ? R"({"name": "shifted", "op": "activation", "activation": "exp", "inputs": [["image"]],
       "shape": [1, 4, 6, 5]},)" : "") + R"(
      {"name": "n", "op": "norm", )" + norm_fields + R"(, "shape": [1, 4, 6, 5]}]}]})";
  return graph_from_json(json::parse(text));
}

std::vector<float> run_cpu(const Graph& g, const std::vector<float>& image) {
  auto self = exec::make_self_comm();
  exec::SessionOptions cpu;
  cpu.backend = "cpu";
  auto r = exec::run_reference(g, cpu, *self, exec::image_inputs(image));
  return exec::read_values(r->backend(), g, g.find("n"));
}

}  // namespace

TEST_CASE("norm: layer norm of a residual sum over C, H and W, and RMS norm over W, match a direct computation") {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(120);
  for (float& v : x) v = nd(rng);
  const int64_t rows = 4 * 6, len = 5;
  SECTION("layer norm of image + exp(image) over dims 1..3, scale one value, no bias") {
    const Graph g = norm_graph(R"("fn": "layer", "axis": 1, "epsilon": 1e-5, "residual": true,
      "inputs": [["image"], ["shifted"]], "constants": [{"operand": 2, "dims": [1], "dtype": "float32", "values": [1.5]}])");
    std::vector<double> s(120), want(120);
    double mean = 0, var = 0;
    for (size_t i = 0; i < 120; ++i) mean += s[i] = double(float(double(x[i]) + double(std::exp(x[i]))));
    mean /= 120;
    for (double v : s) var += (v - mean) * (v - mean);
    var /= 120;
    for (size_t i = 0; i < 120; ++i) want[i] = (s[i] - mean) / std::sqrt(var + 1e-5) * 1.5;
    CHECK(test::relative_error(run_cpu(g, x), want) < 1e-6);
  }
  SECTION("RMS norm over W, a scale and a bias per element") {
    const Graph g = norm_graph(R"("fn": "rms", "axis": 3, "epsilon": 1e-6, "inputs": [["image"]],
      "constants": [{"operand": 1, "dims": [5], "dtype": "float32", "values": [0.5, 1.0, 1.5, 2.0, 2.5]},
                    {"operand": 2, "dims": [1, 5], "dtype": "float32", "values": [0.1, -0.1, 0.2, -0.2, 0.0]}])");
    const double scale[5] = {0.5, 1.0, 1.5, 2.0, 2.5}, bias[5] = {0.1, -0.1, 0.2, -0.2, 0.0};
    std::vector<double> want(120);
    for (int64_t r = 0; r < rows; ++r) {
      double ms = 0;
      for (int64_t k = 0; k < len; ++k) ms += double(x[size_t(r * len + k)]) * x[size_t(r * len + k)];
      const double inv = 1 / std::sqrt(ms / len + 1e-6);
      for (int64_t k = 0; k < len; ++k) want[size_t(r * len + k)] = x[size_t(r * len + k)] * inv * scale[k] + bias[k];
    }
    CHECK(test::relative_error(run_cpu(g, x), want) < 1e-6);
  }
}

TEST_CASE("norm: a scale or bias of another shape, a residual of another shape and a bad axis are refused by node") {
  auto refused = [](const std::string& fields, const std::string& what) {
    const std::string err = test::error_of([&] { norm_graph(fields); });
    INFO(fields << " -> " << err);
    CHECK(err.find("node 'n'") != std::string::npos);
    CHECK(err.find(what) != std::string::npos);
  };
  refused(R"("fn": "layer", "axis": 2, "inputs": [["image"]],
    "constants": [{"operand": 1, "dims": [1, 5], "dtype": "float32", "values": [1, 1, 1, 1, 1]}])", "norm scale 1x5");
  refused(R"("fn": "layer", "axis": 4, "inputs": [["image"]],
    "constants": [{"operand": 1, "dims": [1], "dtype": "float32", "values": [1]}])", "norm axis 4");
  refused(R"("fn": "rms", "axis": 3, "residual": true, "inputs": [["image"]],
    "constants": [{"operand": 1, "dims": [1], "dtype": "float32", "values": [1]},
                  {"operand": 2, "dims": [1], "dtype": "float32", "values": [1]}])", "residual");
}
