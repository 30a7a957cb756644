// Layout conversions between the user's NCHW values and a backend's channels-last storage, and
// the CPU backend's refusal of a layout it does not store.
#include <numeric>

#include "executor/registry.hpp"
#include "executor/tensor_layout.hpp"
#include "executor/weights.hpp"
#include "graph/error.hpp"
#include "graph/graph.hpp"
#include "tests/catch.hpp"

using namespace hios;
using namespace hios::exec;

TEST_CASE("layout: NCHW to NHWC puts channels innermost, and back is the identity") {
  const Shape s{2, 3, 2, 4};  // batch 2, 3 channels, 2x4 pixels, all different sizes
  std::vector<float> nchw(size_t(s.numel()));
  std::iota(nchw.begin(), nchw.end(), 0.0f);
  const std::vector<float> nhwc = nchw_to_nhwc(nchw, s);
  // Element (n, c, h, w) of NCHW lands at ((n * H + h) * W + w) * C + c.
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t c = 0; c < s.c; ++c)
      for (int64_t h = 0; h < s.h; ++h)
        for (int64_t w = 0; w < s.w; ++w) {
          const float want = nchw[size_t(((n * s.c + c) * s.h + h) * s.w + w)];
          CHECK(nhwc[size_t(((n * s.h + h) * s.w + w) * s.c + c)] == want);
        }
  CHECK(nhwc != nchw);
  CHECK(nhwc_to_nchw(nhwc, s) == nchw);
  CHECK(to_layout(nchw, s, Layout::Nchw) == nchw);
  CHECK(from_layout(to_layout(nchw, s, Layout::Nhwc), s, Layout::Nhwc) == nchw);
  // One channel or one pixel: the two layouts hold the same order.
  const Shape one_pixel{1, 5, 1, 1};
  const std::vector<float> v{1, 2, 3, 4, 5};
  CHECK(nchw_to_nhwc(v, one_pixel) == v);
}

TEST_CASE("layout: names parse, bad names and sizes are one-line errors") {
  CHECK(parse_layout("nhwc") == Layout::Nhwc);
  CHECK(std::string(layout_name(parse_layout("nchw"))) == "nchw");
  CHECK_THROWS_WITH(parse_layout("chwn"), "unknown layout 'chwn' (nchw or nhwc)");
  CHECK_THROWS_AS(nchw_to_nhwc(std::vector<float>(5), Shape{1, 2, 2, 2}), Error);
}

TEST_CASE("layout: the cpu backend stores NCHW and refuses NHWC by name") {
  BackendConfig cfg;
  cfg.layout = "nhwc";
  CHECK_THROWS_WITH(make_backend("cpu", cfg),
                    "the cpu backend stores activations NCHW; --layout nhwc needs the cuda backend");
  cfg.layout = "nchw";
  CHECK(make_backend("cpu", cfg)->layout() == "nchw");
}

TEST_CASE("layout: NHWC weights are the NCHW values reordered as channels-last kernels read them") {
  GraphBuilder b("weights", 1, 6, 5);
  Value x = b.input(3);
  b.begin_block("b");
  Value c = b.conv("c", {x}, 4, 3, 1, 1);
  Value fc = b.linear("fc", c, 2);
  b.end_block(fc);
  const Graph g = b.finish();
  // Convolution: [out][in][kh][kw] -> [out][kh][kw][in]; biases untouched.
  const int conv = g.find("c");
  const OpParams nchw = make_node_params(g, conv).at(0), nhwc = make_node_params(g, conv, 7, Layout::Nhwc).at(0);
  const OpParams nchw7 = make_node_params(g, conv, 7).at(0);
  REQUIRE(nhwc.weight.size() == nchw7.weight.size());
  CHECK(nhwc.bias == nchw7.bias);
  for (int64_t o = 0; o < 4; ++o)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t t = 0; t < 9; ++t) {
        CHECK(nhwc.weight[size_t((o * 9 + t) * 3 + i)] == nchw7.weight[size_t((o * 3 + i) * 9 + t)]);
      }
  CHECK(nchw.weight != nchw7.weight);  // the seed matters, so the comparison above is not vacuous
  // Linear over 4 channels of 6x5 pixels: feature (c, p) moves to (p, c).
  const int lin = g.find("fc");
  const OpParams l0 = make_node_params(g, lin).at(0);
  const OpParams l1 = make_node_params(g, lin, init::kDefaultSeed, Layout::Nhwc).at(0);
  const int64_t hw = 30, in = 4 * hw;
  for (int64_t o = 0; o < 2; ++o)
    for (int64_t ch = 0; ch < 4; ++ch)
      for (int64_t p = 0; p < hw; ++p) {
        CHECK(l1.weight[size_t(o * in + p * 4 + ch)] == l0.weight[size_t(o * in + ch * hw + p)]);
      }
}
