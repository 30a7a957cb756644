// The general tensor ops on the GPU against the CPU reference: one imported model
// (tests/data/general-ops/, made by its make_model.py) that reaches resize, a layer norm, broadcasting
// binaries, reductions, transposes, reshapes between layouts, softmax on the last axis, slices,
// concats, gathers, casts and the extended activations, with three results; then the norm and
// attention ops on graphs written here. Run in every math mode and both layouts; skipped on
// machines without a GPU.
#include <cmath>
#include <functional>

#include "executor/comm.hpp"
#include "executor/session.hpp"
#include "graph/json_codec.hpp"
#include "tests/catch.hpp"
#include "tests/gpu/gpu_util.hpp"

using namespace hios;

namespace {

// Runs g on the CPU and then on the GPU in every math mode and both layouts, and checks each of
// `results` against the CPU's within tolerance(math).
void expect_gpu_matches_cpu(const Graph& g, const exec::GraphInputs& inputs, const std::vector<int>& results,
                            const std::function<double(const std::string&)>& tolerance) {
  auto self = exec::make_self_comm();
  exec::SessionOptions cpu;
  cpu.backend = "cpu";
  auto ref = exec::run_reference(g, cpu, *self, inputs);
  for (const char* math : {"fp32", "tf32", "bf16", "fp16"}) {
    for (const char* layout : {"nchw", "nhwc"}) {
      exec::SessionOptions gpu;
      gpu.backend = "cuda";
      gpu.math = math;
      gpu.layout = layout;
      gpu.device = 0;
      auto got = exec::run_reference(g, gpu, *self, inputs);
      for (int v : results) {
        const gputest::Error e =
            gputest::compare(exec::read_values(got->backend(), g, v), exec::read_values(ref->backend(), g, v));
        INFO(g.nodes[size_t(v)].name << " [" << math << ", " << layout << "]: " << e.str());
        CHECK(e.within(tolerance(math)));
      }
    }
  }
}

}  // namespace

TEST_CASE("general tensor ops on the GPU match the CPU reference, every math mode and layout", "[gpu][ops][general]") {
  REQUIRE_GPU();
  const Graph g = load_graph(std::string(HIOS_SOURCE_DIR) + "/tests/data/general-ops/general-ops.json");
  REQUIRE(g.results().size() == 3);
  // 16-bit storage rounds every one of the ~40 tensors on the way (bf16 keeps 8 bits, fp16 11),
  // and the layer norm and the power amplify what came before: measured on one H200, the
  // deepest result is 5.0e-2 off in bf16 and 5.7e-3 in fp16. fp32 and TF32 differ from the
  // host's functions by ulps (the convolutions in TF32 by their rounded operands). An indexing
  // error is off by the values themselves (norm-wise about 1).
  expect_gpu_matches_cpu(g, exec::make_inputs(g, 7), g.results(), [](const std::string& math) {
    return math == "bf16" ? 8e-2 : math == "fp16" ? 1e-2 : 2e-3;
  });
}

// The norm op's walks: a layer norm over an image's C, H and W with a residual sum (in NHWC its
// normalised dims are not one run of memory), and an RMS norm over W alone, against the CPU in
// every math mode and both layouts.
TEST_CASE("norm on the GPU matches the CPU reference: residual sums, NHWC walks, layer and RMS", "[gpu][ops][general]") {
  REQUIRE_GPU();
  const json j = json::parse(R"({
    "format": "hios-graph", "version": 1, "name": "norms", "batch": 1, "height": 6, "width": 5, "dtype": "float32",
    "input": {"name": "image", "op": "input", "channels": 4, "shape": [1, 4, 6, 5]},
    "outputs": ["sum"],
    "blocks": [{"name": "b", "exit": "sum", "nodes": [
      {"name": "a", "op": "conv", "out_channels": 8, "kernel": [3, 3], "stride": [1, 1], "padding": [1, 1],
       "dilation": [1, 1], "groups": 1, "bias": true, "activation": "none", "inputs": [["image"]], "shape": [1, 8, 6, 5]},
      {"name": "r", "op": "conv", "out_channels": 8, "kernel": [1, 1], "stride": [1, 1], "padding": [0, 0],
       "dilation": [1, 1], "groups": 1, "bias": true, "activation": "none", "inputs": [["image"]], "shape": [1, 8, 6, 5]},
      {"name": "ln", "op": "norm", "fn": "layer", "axis": 1, "epsilon": 1e-5, "residual": true,
       "inputs": [["a"], ["r"]], "constants": [{"operand": 2, "dims": [1], "dtype": "float32", "values": [1.25]}],
       "shape": [1, 8, 6, 5]},
      {"name": "rms", "op": "norm", "fn": "rms", "axis": 3, "epsilon": 1e-6, "inputs": [["a"]],
       "constants": [{"operand": 1, "dims": [5], "dtype": "float32", "values": [0.5, 1.0, 1.5, 2.0, 2.5]},
                     {"operand": 2, "dims": [5], "dtype": "float32", "values": [0.1, -0.1, 0.2, -0.2, 0.0]}],
       "shape": [1, 8, 6, 5]},
      {"name": "sum", "op": "add", "inputs": [["ln"], ["rms"]], "shape": [1, 8, 6, 5]}
    ]}]})");
  const Graph g = graph_from_json(j);
  // The convolutions before the norms round their operands in TF32 and 16-bit storage; the
  // norms themselves compute in fp32 and keep the scale of their inputs.
  expect_gpu_matches_cpu(g, exec::make_inputs(g, 3), {g.find("sum")}, [](const std::string& math) {
    return math == "bf16" ? 5e-2 : math == "fp16" ? 1e-2 : 2e-3;
  });
}

// Rows as long as a transformer's hidden size: a layer norm with a residual sum over W (600
// elements, contiguous in NCHW, so held in registers) and an RMS norm over H and W (1,800, past
// the register path's 1,024), against the CPU in every math mode and both layouts.
TEST_CASE("norm on the GPU matches the CPU reference: long rows", "[gpu][ops][general]") {
  REQUIRE_GPU();
  const json j = json::parse(R"({
    "format": "hios-graph", "version": 1, "name": "long-norms", "batch": 1, "height": 3, "width": 600, "dtype": "float32",
    "input": {"name": "image", "op": "input", "channels": 2, "shape": [1, 2, 3, 600]},
    "outputs": ["sum"],
    "blocks": [{"name": "b", "exit": "sum", "nodes": [
      {"name": "r", "op": "conv", "out_channels": 2, "kernel": [1, 1], "stride": [1, 1], "padding": [0, 0],
       "dilation": [1, 1], "groups": 1, "bias": true, "activation": "none", "inputs": [["image"]], "shape": [1, 2, 3, 600]},
      {"name": "ln", "op": "norm", "fn": "layer", "axis": 3, "epsilon": 1e-5, "residual": true,
       "inputs": [["image"], ["r"]], "constants": [{"operand": 2, "dims": [1], "dtype": "float32", "values": [0.75]},
                                                 {"operand": 3, "dims": [1], "dtype": "float32", "values": [0.125]}],
       "shape": [1, 2, 3, 600]},
      {"name": "rms", "op": "norm", "fn": "rms", "axis": 2, "epsilon": 1e-6, "inputs": [["r"]],
       "constants": [{"operand": 1, "dims": [1], "dtype": "float32", "values": [1.5]}],
       "shape": [1, 2, 3, 600]},
      {"name": "sum", "op": "add", "inputs": [["ln"], ["rms"]], "shape": [1, 2, 3, 600]}
    ]}]})");
  const Graph g = graph_from_json(j);
  expect_gpu_matches_cpu(g, exec::make_inputs(g, 5), {g.find("sum")}, [](const std::string& math) {
    return math == "bf16" ? 5e-2 : math == "fp16" ? 1e-2 : 2e-3;
  });
}

// The attention op: Q the image (4 heads of 8 queries by 16), K a convolution of it and V its
// tanh (in NHWC neither is row-major, so both are gathered first), once with a mask broadcast
// along heads and queries and once causal, against the CPU in every math mode and both layouts.
TEST_CASE("attention on the GPU matches the CPU reference: masked and causal, both layouts", "[gpu][ops][general]") {
  REQUIRE_GPU();
  const json j = json::parse(R"({
    "format": "hios-graph", "version": 1, "name": "attention", "batch": 1, "height": 8, "width": 16, "dtype": "float32",
    "input": {"name": "image", "op": "input", "channels": 4, "shape": [1, 4, 8, 16]},
    "outputs": ["sum"],
    "blocks": [{"name": "b", "exit": "sum", "nodes": [
      {"name": "k", "op": "conv", "out_channels": 4, "kernel": [1, 1], "stride": [1, 1], "padding": [0, 0],
       "dilation": [1, 1], "groups": 1, "bias": true, "activation": "none", "inputs": [["image"]], "shape": [1, 4, 8, 16]},
      {"name": "v", "op": "activation", "activation": "tanh", "inputs": [["image"]], "shape": [1, 4, 8, 16]},
      {"name": "masked", "op": "attention", "scale": 0.25, "mask": true, "inputs": [["image"], ["k"], ["v"]],
       "constants": [{"operand": 3, "dims": [1, 8], "dtype": "float32", "values": [0, -1e30, 0.5, 0, -2, 0, 1, -1e30]}],
       "shape": [1, 4, 8, 16]},
      {"name": "causal", "op": "attention", "scale": 0.25, "causal": true, "inputs": [["image"], ["k"], ["v"]],
       "shape": [1, 4, 8, 16]},
      {"name": "sum", "op": "add", "inputs": [["masked"], ["causal"]], "shape": [1, 4, 8, 16]}
    ]}]})");
  const Graph g = graph_from_json(j);
  // The scores round to the storage type before the softmax, as the chain of nodes the op
  // replaces stores them; fp32 and TF32 keep the convolution's rounding alone.
  expect_gpu_matches_cpu(g, exec::make_inputs(g, 5), {g.find("sum")}, [](const std::string& math) {
    return math == "bf16" ? 5e-2 : math == "fp16" ? 1e-2 : math == "tf32" ? 5e-3 : 2e-3;
  });
}

// Attention of head size 64, where the fused kernel applies (timed against the chain, so either
// may run): token-major (16 tokens x 2 heads x 64, read in place or copied head-major), masked
// and causal, and head-major through explicit transposes; against the CPU in every math mode
// and both layouts.
TEST_CASE("attention on the GPU matches the CPU reference: head size 64, token-major and head-major",
          "[gpu][ops][general]") {
  REQUIRE_GPU();
  const json j = json::parse(R"({
    "format": "hios-graph", "version": 1, "name": "attention64", "batch": 1, "height": 2, "width": 64, "dtype": "float32",
    "input": {"name": "image", "op": "input", "channels": 16, "shape": [1, 16, 2, 64]},
    "outputs": ["sum"],
    "blocks": [{"name": "b", "exit": "sum", "nodes": [
      {"name": "k", "op": "activation", "activation": "tanh", "inputs": [["image"]], "shape": [1, 16, 2, 64]},
      {"name": "v", "op": "activation", "activation": "sigmoid", "inputs": [["image"]], "shape": [1, 16, 2, 64]},
      {"name": "masked", "op": "attention", "scale": 0.125, "mask": true, "token_major": true,
       "inputs": [["image"], ["k"], ["v"]],
       "constants": [{"operand": 3, "dims": [1, 16], "dtype": "float32",
                      "values": [0, -1e30, 0.5, 0, -2, 0, 1, -1e30, 0, 0, 0.25, 0, 0, -1, 0, 0]}],
       "shape": [1, 16, 2, 64]},
      {"name": "causal", "op": "attention", "scale": 0.125, "causal": true, "token_major": true,
       "inputs": [["image"], ["k"], ["v"]], "shape": [1, 16, 2, 64]},
      {"name": "qh", "op": "transpose", "perm": [0, 2, 1, 3], "inputs": [["image"]], "shape": [1, 2, 16, 64]},
      {"name": "kh", "op": "transpose", "perm": [0, 2, 1, 3], "inputs": [["k"]], "shape": [1, 2, 16, 64]},
      {"name": "vh", "op": "transpose", "perm": [0, 2, 1, 3], "inputs": [["v"]], "shape": [1, 2, 16, 64]},
      {"name": "heads", "op": "attention", "scale": 0.125, "inputs": [["qh"], ["kh"], ["vh"]], "shape": [1, 2, 16, 64]},
      {"name": "back", "op": "transpose", "perm": [0, 2, 1, 3], "inputs": [["heads"]], "shape": [1, 16, 2, 64]},
      {"name": "both", "op": "add", "inputs": [["masked"], ["causal"]], "shape": [1, 16, 2, 64]},
      {"name": "sum", "op": "add", "inputs": [["both"], ["back"]], "shape": [1, 16, 2, 64]}
    ]}]})");
  const Graph g = graph_from_json(j);
  // Sums of 64 products per score: TF32's and 16-bit storage's rounding of the operands, and
  // in 16-bit storage the chain's scores rounded to it as well.
  expect_gpu_matches_cpu(g, exec::make_inputs(g, 6), {g.find("sum")}, [](const std::string& math) {
    return math == "bf16" ? 5e-2 : math == "fp16" ? 1e-2 : math == "tf32" ? 5e-3 : 2e-3;
  });
}

// Token ids and a padding mask as int64 graph inputs (a transformer's embedding lookup): a
// gather of a constant table by the ids and a cast of the mask, against the CPU in every math
// mode (under 16-bit storage the inputs keep their 8 bytes, outside the arena) and both layouts.
TEST_CASE("int64 token ids and masks on the GPU: gather and cast match the CPU reference", "[gpu][ops][general]") {
  REQUIRE_GPU();
  json j = json::parse(R"({
    "format": "hios-graph", "version": 1, "name": "embedding", "batch": 1, "height": 1, "width": 1, "dtype": "float32",
    "input": {"name": "ids", "op": "input", "dims": [1, 16], "dtype": "int64", "shape": [1, 16]},
    "more_inputs": [{"name": "mask", "op": "input", "dims": [1, 16], "dtype": "int64", "shape": [1, 16]}],
    "outputs": ["out"],
    "blocks": [{"name": "b", "exit": "out", "nodes": [
      {"name": "tok", "op": "gather", "axis": 0, "inputs": [["ids"]], "shape": [1, 16, 64]},
      {"name": "mf", "op": "cast", "to": "float32", "inputs": [["mask"]], "shape": [1, 16]},
      {"name": "mr", "op": "reshape", "dims": [1, 16, 1], "inputs": [["mf"]], "shape": [1, 16, 1]},
      {"name": "out", "op": "binary", "fn": "mul", "inputs": [["tok"], ["mr"]], "shape": [1, 16, 64]}
    ]}]})");
  std::vector<double> table(10 * 64);
  for (size_t k = 0; k < table.size(); ++k) table[k] = 0.01 * double(int(k * 13 % 97) - 48);
  j["blocks"][0]["nodes"][0]["constants"] =
      json::array({{{"operand", 0}, {"dims", {10, 64}}, {"dtype", "float32"}, {"values", table}}});
  const Graph g = graph_from_json(j);
  // Ids 0 to 9 (and -1, the last row, as ONNX allows), a mask of zeros and ones.
  exec::GraphInputs inputs(2);
  for (int64_t i = 0; i < 16; ++i) {
    const int64_t id = i == 3 ? -1 : i % 10, m = i % 3 == 0 ? 0 : 1;
    for (int k = 0; k < 8; ++k) inputs[0].push_back(uint8_t(uint64_t(id) >> (8 * k)));
    for (int k = 0; k < 8; ++k) inputs[1].push_back(uint8_t(uint64_t(m) >> (8 * k)));
  }
  // A gather and a cast are exact; 16-bit storage rounds the table's values once.
  expect_gpu_matches_cpu(g, inputs, {g.find("out")}, [](const std::string& math) {
    return math == "bf16" ? 1e-2 : math == "fp16" ? 1e-3 : 1e-7;
  });
}

// A projection of every token by one weight matrix (a transformer's Q/K/V and MLP products):
// A [1, 4, 8, 16] (4 x 8 rows) times a constant B [16, 12], which the CUDA path runs as one
// product of 32 rows, plus a transposed-B Gemm; each with a bias per output feature as its
// addend (cuBLASLt's bias epilogue where it takes them); both layouts, every math mode.
TEST_CASE("matmul by one weight matrix on the GPU matches the CPU reference: batch rows folded into one product",
          "[gpu][ops][general]") {
  REQUIRE_GPU();
  json j = json::parse(R"({
    "format": "hios-graph", "version": 1, "name": "projection", "batch": 1, "height": 8, "width": 16, "dtype": "float32",
    "input": {"name": "image", "op": "input", "channels": 4, "shape": [1, 4, 8, 16]},
    "outputs": ["sum"],
    "blocks": [{"name": "b", "exit": "sum", "nodes": [
      {"name": "proj", "op": "matmul", "trans_a": false, "trans_b": false, "alpha": 1.0, "beta": 1.0,
       "inputs": [["image"]], "shape": [1, 4, 8, 12]},
      {"name": "gemm", "op": "matmul", "trans_a": false, "trans_b": true, "alpha": 0.5, "beta": 1.0,
       "inputs": [["image"]], "shape": [1, 4, 8, 12]},
      {"name": "sum", "op": "add", "inputs": [["proj"], ["gemm"]], "shape": [1, 4, 8, 12]}
    ]}]})");
  std::vector<double> w(16 * 12), wt(12 * 16), addend(12);
  for (size_t k = 0; k < w.size(); ++k) w[k] = 0.1 * double(int(k * 7 % 13) - 6);
  for (size_t k = 0; k < wt.size(); ++k) wt[k] = 0.05 * double(int(k * 5 % 11) - 5);
  for (size_t k = 0; k < addend.size(); ++k) addend[k] = 0.25 * double(k) - 1;
  json& nodes = j["blocks"][0]["nodes"];
  std::vector<double> bias(12);
  for (size_t k = 0; k < bias.size(); ++k) bias[k] = 0.5 - 0.125 * double(k);
  nodes[0]["constants"] = json::array({{{"operand", 1}, {"dims", {16, 12}}, {"dtype", "float32"}, {"values", w}},
                                       {{"operand", 2}, {"dims", {1, 12}}, {"dtype", "float32"}, {"values", bias}}});
  nodes[1]["constants"] = json::array({{{"operand", 1}, {"dims", {12, 16}}, {"dtype", "float32"}, {"values", wt}},
                                       {{"operand", 2}, {"dims", {12}}, {"dtype", "float32"}, {"values", addend}}});
  const Graph g = graph_from_json(j);
  // Sums of 16 products: TF32's and 16-bit storage's rounding of the operands alone.
  expect_gpu_matches_cpu(g, exec::make_inputs(g, 9), {g.find("sum")}, [](const std::string& math) {
    return math == "bf16" ? 5e-2 : math == "fp16" ? 1e-2 : math == "tf32" ? 5e-3 : 2e-3;
  });
}
