// The attention op on the CPU backend against a direct double computation: a scale and a mask
// broadcast along heads and queries, a causal mask, NaN carried as the softmax it stands for
// carries it, and the shapes it refuses, naming the node.
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

// Q is the image (1 x 2 heads x 6 queries x 5), K = tanh(image) (6 keys), V a constant of
// 6 keys x 3 per head; attention node 'att' takes `fields` (scale, causal, mask and the mask's
// constant as operand 3).
Graph attention_graph(const std::string& fields, const std::vector<float>& v, const std::string& k_shape = "[1, 2, 6, 5]") {
  std::string values;
  for (size_t i = 0; i < v.size(); ++i) values += (i ? "," : "") + std::to_string(v[i]);
  const std::string text = R"({"format": "hios-graph", "version": 1, "name": "attention", "batch": 1, "height": 6,
    "width": 5, "dtype": "float32", "input": {"name": "image", "op": "input", "channels": 2, "shape": [1, 2, 6, 5]},
    "outputs": ["att"], "blocks": [{"name": "b", "exit": "att", "nodes": [
      {"name": "k", "op": "activation", "activation": "tanh", "inputs": [["image"]], "shape": [1, 2, 6, 5]},
      {"name": "kr", "op": "reshape", "dims": )" + k_shape + R"(, "inputs": [["k"]], "shape": )" + k_shape + R"(},
      {"name": "att", "op": "attention", )" + fields + R"(, "inputs": [["image"], ["kr"]],
       "constants": [{"operand": 2, "dims": [1, 2, 6, 3], "dtype": "float32", "values": [)" + values + R"(]})" +
                           (fields.find("\"mask\"") != std::string::npos ? R"(,
         {"operand": 3, "dims": [1, 6], "dtype": "float32", "values": [0, -1e30, 0.5, 0, -2, -1e30]})" : "") + R"(],
       "shape": [1, 2, 6, 3]}]}]})";
  return graph_from_json(json::parse(text));
}

std::vector<float> run_attention_cpu(const Graph& g, const std::vector<float>& image) {
  auto self = exec::make_self_comm();
  exec::SessionOptions cpu;
  cpu.backend = "cpu";
  auto r = exec::run_reference(g, cpu, *self, exec::image_inputs(image));
  return exec::read_values(r->backend(), g, g.find("att"));
}

// softmax(scale * q k^T + mask) v per head, in double; causal drops key j > query i.
std::vector<double> direct_attention(const std::vector<float>& x, const std::vector<float>& v, double scale,
                                     const double* mask, bool causal) {
  std::vector<double> out(2 * 6 * 3);
  for (int h = 0; h < 2; ++h) {
    for (int i = 0; i < 6; ++i) {
      double s[6], most = -INFINITY, sum = 0;
      for (int j = 0; j < 6; ++j) {
        double dot = 0;
        for (int e = 0; e < 5; ++e) dot += double(x[size_t((h * 6 + i) * 5 + e)]) * std::tanh(double(x[size_t((h * 6 + j) * 5 + e)]));
        s[j] = scale * dot + (mask ? mask[j] : 0.0);
        if (causal && j > i) s[j] = -INFINITY;
        most = std::max(most, s[j]);
      }
      for (int j = 0; j < 6; ++j) sum += std::exp(s[j] - most);
      for (int e = 0; e < 3; ++e) {
        double acc = 0;
        for (int j = 0; j < 6; ++j) acc += std::exp(s[j] - most) / sum * v[size_t((h * 6 + j) * 3 + e)];
        out[size_t((h * 6 + i) * 3 + e)] = acc;
      }
    }
  }
  return out;
}

}  // namespace

TEST_CASE("attention: scaled, masked and causal attention match a direct computation") {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(60), v(36);
  for (float& e : x) e = nd(rng);
  for (float& e : v) e = nd(rng);
  SECTION("a scale and a mask of one row, broadcast along heads and queries") {
    // The mask's -1e30 entries drop keys 1 and 5 (float's -1e30 stays finite).
    const double mask[6] = {0, double(-1e30f), 0.5, 0, -2, double(-1e30f)};
    const Graph g = attention_graph(R"("scale": 0.4, "mask": true)", v);
    CHECK(test::relative_error(run_attention_cpu(g, x), direct_attention(x, v, 0.4, mask, false)) < 1e-6);
  }
  SECTION("causal, no mask") {
    const Graph g = attention_graph(R"("scale": 0.7, "causal": true)", v);
    CHECK(test::relative_error(run_attention_cpu(g, x), direct_attention(x, v, 0.7, nullptr, true)) < 1e-6);
  }
  SECTION("a NaN score makes its query's result NaN, as the softmax it stands for gives") {
    // Causal: query 0 sees key 0 alone, and every query of head 0 sees key 0 = tanh(NaN).
    const Graph g = attention_graph(R"("scale": 0.5, "causal": true)", v);
    std::vector<float> big = x;
    big[0] = NAN;  // head 0, query 0, element 0
    const std::vector<float> got = run_attention_cpu(g, big);
    CHECK(std::isnan(got[0]));
    CHECK(std::isnan(got[2]));
    CHECK(std::isfinite(got[size_t(6 * 3)]));  // head 1 reads no NaN
  }
}

TEST_CASE("attention: operands of other ranks, head sizes or key counts are refused by node") {
  std::vector<float> v(36, 0.5f);
  auto refused = [&](const std::string& fields, const std::string& k_shape, const std::string& what) {
    const std::string err = test::error_of([&] { attention_graph(fields, v, k_shape); });
    INFO(fields << " " << k_shape << " -> " << err);
    CHECK(err.find("node 'att'") != std::string::npos);
    CHECK(err.find(what) != std::string::npos);
  };
  refused(R"("scale": 1)", "[1, 2, 5, 6]", "has not the head size");
  refused(R"("scale": 1)", "[2, 6, 5]", "not of one rank");
  refused(R"("scale": 1)", "[1, 2, 3, 10]", "has not the head size");
  refused(R"("scale": 1)", "[2, 1, 6, 5]", "differ in leading dim 0");
}

// Token-major attention (AttentionAttrs::token_major): Q, K and V [1, 6 tokens, 2 heads, D], the
// result [1, 6, 2, 3], each head's attention the head-major one's, mask and causal included.
TEST_CASE("attention: token-major operands give the head-major result transposed") {
  std::mt19937 rng(13);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(60), v(36);
  for (float& e : x) e = nd(rng);
  for (float& e : v) e = nd(rng);
  // v as the token-major constant: [token][head][3] from [head][token][3].
  std::vector<float> vt(36);
  for (int h = 0; h < 2; ++h) {
    for (int j = 0; j < 6; ++j) {
      for (int e = 0; e < 3; ++e) vt[size_t((j * 2 + h) * 3 + e)] = v[size_t((h * 6 + j) * 3 + e)];
    }
  }
  std::string values;
  for (size_t i = 0; i < vt.size(); ++i) values += (i ? "," : "") + std::to_string(vt[i]);
  auto graph = [&](const std::string& fields, bool masked) {
    const std::string text = R"({"format": "hios-graph", "version": 1, "name": "attention", "batch": 1, "height": 6,
      "width": 5, "dtype": "float32", "input": {"name": "image", "op": "input", "channels": 2, "shape": [1, 2, 6, 5]},
      "outputs": ["att"], "blocks": [{"name": "b", "exit": "att", "nodes": [
        {"name": "q", "op": "transpose", "perm": [0, 2, 1, 3], "inputs": [["image"]], "shape": [1, 6, 2, 5]},
        {"name": "k", "op": "activation", "activation": "tanh", "inputs": [["q"]], "shape": [1, 6, 2, 5]},
        {"name": "att", "op": "attention", "token_major": true, )" + fields + R"(, "inputs": [["q"], ["k"]],
         "constants": [{"operand": 2, "dims": [1, 6, 2, 3], "dtype": "float32", "values": [)" + values + R"(]})" +
                             (masked ? R"(,
           {"operand": 3, "dims": [1, 6], "dtype": "float32", "values": [0, -1e30, 0.5, 0, -2, -1e30]})" : "") + R"(],
         "shape": [1, 6, 2, 3]}]}]})";
    return graph_from_json(json::parse(text));
  };
  auto transposed = [](const std::vector<double>& head_major) {
    std::vector<double> out(head_major.size());
    for (int h = 0; h < 2; ++h) {
      for (int i = 0; i < 6; ++i) {
        for (int e = 0; e < 3; ++e) out[size_t((i * 2 + h) * 3 + e)] = head_major[size_t((h * 6 + i) * 3 + e)];
      }
    }
    return out;
  };
  const double mask[6] = {0, double(-1e30f), 0.5, 0, -2, double(-1e30f)};
  CHECK(test::relative_error(run_attention_cpu(graph(R"("scale": 0.4, "mask": true)", true), x),
                             transposed(direct_attention(x, v, 0.4, mask, false))) < 1e-6);
  CHECK(test::relative_error(run_attention_cpu(graph(R"("scale": 0.7, "causal": true)", false), x),
                             transposed(direct_attention(x, v, 0.7, nullptr, true))) < 1e-6);
  // Token-major operands need a heads dim: rank 2 is refused, naming the node.
  const std::string err = test::error_of([&] {
    const std::string text = R"({"format": "hios-graph", "version": 1, "name": "a", "batch": 1, "height": 6, "width": 5,
      "dtype": "float32", "input": {"name": "image", "op": "input", "channels": 2, "shape": [1, 2, 6, 5]},
      "outputs": ["att"], "blocks": [{"name": "b", "exit": "att", "nodes": [
        {"name": "flat", "op": "reshape", "dims": [12, 5], "inputs": [["image"]], "shape": [12, 5]},
        {"name": "att", "op": "attention", "token_major": true, "scale": 1, "inputs": [["flat"], ["flat"], ["flat"]],
         "shape": [12, 5]}]}]})";
    (void)graph_from_json(json::parse(text));
  });
  INFO(err);
  CHECK(err.find("node 'att'") != std::string::npos);
  CHECK(err.find("not of rank 3 or more") != std::string::npos);
}
