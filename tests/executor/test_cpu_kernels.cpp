// CPU reference kernels against hand-computed cases and an independent brute-force conv.
#include <cmath>
#include <numeric>

#include "executor/cpu/kernels.hpp"
#include "executor/init.hpp"
#include "graph/error.hpp"
#include "tests/catch.hpp"

using namespace hios;
using namespace hios::exec;

namespace {

std::vector<float> iota_values(int64_t n, float start = 1) {
  std::vector<float> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

// The graph's own op constructors, square windows, as attribute structs.
ConvAttrs conv_attrs(int64_t out, int k, int stride, int pad, int64_t groups = 1, int dilation = 1,
                     Activation act = Activation::None) {
  return conv_op(out, {k, k}, {stride, stride}, {pad, pad}, act, groups, true, {dilation, dilation}).conv();
}

// The output shape the graph infers for op applied to one input.
Shape out_shape(OpKind kind, const decltype(Op::attrs)& attrs, const Shape& in) {
  std::string name = "test";
  Op op = make_op(kind);
  op.attrs = attrs;
  return infer_op(op, {in}, InferContext{name, in.n, in.h, in.w});
}

Shape conv_out(const ConvAttrs& a, const Shape& in) { return out_shape(OpKind::Conv, a, in); }

PoolAttrs pool_attrs(PoolKind kind, int k, int stride, int pad, bool ceil_mode = false, bool include_pad = true) {
  return pool_op(kind, k, stride, pad, ceil_mode, include_pad).pool();
}

Shape pool_out(const PoolAttrs& a, const Shape& in) { return out_shape(OpKind::Pool, a, in); }

std::vector<float> run_conv(const ConvAttrs& a, const Shape& in, const std::vector<float>& x,
                            const std::vector<float>& w, const std::vector<float>* b, Shape* out_shape = nullptr) {
  Shape out = conv_out(a, in);
  if (out_shape) *out_shape = out;
  std::vector<float> y(static_cast<size_t>(out.numel()), -999.0f);
  cpu::conv2d(a, in, x.data(), out, y.data(), w.data(), b ? b->data() : nullptr);
  return y;
}

std::vector<float> run_pool(const PoolAttrs& a, const Shape& in, const std::vector<float>& x, Shape* out_shape) {
  Shape out = pool_out(a, in);
  *out_shape = out;
  std::vector<float> y(static_cast<size_t>(out.numel()), -999.0f);
  cpu::pool2d(a, in, x.data(), out, y.data());
  return y;
}

// Written independently of cpu::conv2d: one loop nest per output element, bounds checked per tap.
std::vector<double> brute_conv(const ConvAttrs& a, const Shape& in, const std::vector<float>& x,
                               const std::vector<float>& w, const std::vector<float>& b, const Shape& out) {
  std::vector<double> y(static_cast<size_t>(out.numel()));
  int64_t icg = in.c / a.groups, ocg = out.c / a.groups;
  for (int64_t n = 0; n < out.n; ++n)
    for (int64_t oc = 0; oc < out.c; ++oc)
      for (int64_t oh = 0; oh < out.h; ++oh)
        for (int64_t ow = 0; ow < out.w; ++ow) {
          double s = b.empty() ? 0 : b[oc];
          for (int64_t ic = 0; ic < icg; ++ic)
            for (int kh = 0; kh < a.kernel[0]; ++kh)
              for (int kw = 0; kw < a.kernel[1]; ++kw) {
                int64_t ih = oh * a.stride[0] - a.padding[0] + kh * a.dilation[0];
                int64_t iw = ow * a.stride[1] - a.padding[1] + kw * a.dilation[1];
                if (ih < 0 || ih >= in.h || iw < 0 || iw >= in.w) continue;
                int64_t c = (oc / ocg) * icg + ic;
                s += double(x[((n * in.c + c) * in.h + ih) * in.w + iw]) *
                     double(w[((oc * icg + ic) * a.kernel[0] + kh) * a.kernel[1] + kw]);
              }
          y[((n * out.c + oc) * out.h + oh) * out.w + ow] = s;
        }
  return y;
}

}  // namespace

TEST_CASE("cpu kernels: the kernel table covers every op kind") { CHECK_NOTHROW(cpu::check_kernel_table()); }

TEST_CASE("cpu kernels: conv with padding and stride, by hand") {
  Shape in{1, 1, 3, 3};
  std::vector<float> x = iota_values(9), w(9, 1.0f);
  SECTION("3x3, padding 1, stride 1") {
    Shape out;
    std::vector<float> y = run_conv(conv_attrs(1, 3, 1, 1), in, x, w, nullptr, &out);
    CHECK(out == Shape{1, 1, 3, 3});
    CHECK(y == std::vector<float>{12, 21, 16, 27, 45, 33, 24, 39, 28});
  }
  SECTION("3x3, padding 1, stride 2") {
    Shape out;
    std::vector<float> y = run_conv(conv_attrs(1, 3, 2, 1), in, x, w, nullptr, &out);
    CHECK(out == Shape{1, 1, 2, 2});
    CHECK(y == std::vector<float>{12, 16, 24, 28});
  }
  SECTION("bias and fused activations") {
    std::vector<float> neg(9, -1.0f), bias{0.5f};
    std::vector<float> relu = run_conv(conv_attrs(1, 3, 1, 1, 1, 1, Activation::Relu), in, x, neg, &bias);
    for (float v : relu) CHECK(v == 0.0f);
    std::vector<float> zero(9, 0.0f);
    std::vector<float> sig = run_conv(conv_attrs(1, 3, 1, 1, 1, 1, Activation::Sigmoid), in, x, zero, &bias);
    for (float v : sig) CHECK(v == Approx(1.0 / (1.0 + std::exp(-0.5))));
    std::vector<float> none = run_conv(conv_attrs(1, 3, 1, 1), in, x, w, &bias);
    CHECK(none[4] == 45.5f);
  }
}

TEST_CASE("cpu kernels: grouped conv keeps groups apart") {
  Shape in{1, 4, 1, 1};
  std::vector<float> x{1, 2, 3, 4};
  // [out][in/groups][1][1]: output 0 reads channels 0-1, output 1 reads channels 2-3.
  std::vector<float> w{1, 10, 100, 1000}, b{0.5f, -0.5f};
  std::vector<float> y = run_conv(conv_attrs(2, 1, 1, 0, 2), in, x, w, &b);
  CHECK(y == std::vector<float>{21.5f, 4299.5f});
  SECTION("depthwise") {
    std::vector<float> dw{2, 3, 4, 5};
    std::vector<float> yd = run_conv(conv_attrs(4, 1, 1, 0, 4), in, x, dw, nullptr);
    CHECK(yd == std::vector<float>{2, 6, 12, 20});
  }
}

TEST_CASE("cpu kernels: dilated conv, by hand") {
  Shape in{1, 1, 5, 5};
  std::vector<float> x = iota_values(25), w = iota_values(9);
  SECTION("no padding: one output from taps two apart") {
    Shape out;
    std::vector<float> y = run_conv(conv_attrs(1, 3, 1, 0, 1, 2), in, x, w, nullptr, &out);
    CHECK(out == Shape{1, 1, 1, 1});
    CHECK(y[0] == 777.0f);  // 1*1 + 2*3 + 3*5 + 4*11 + 5*13 + 6*15 + 7*21 + 8*23 + 9*25
  }
  SECTION("padding 2 keeps the size; a corner sees four taps") {
    Shape out;
    std::vector<float> y = run_conv(conv_attrs(1, 3, 1, 2, 1, 2), in, x, w, nullptr, &out);
    CHECK(out == Shape{1, 1, 5, 5});
    CHECK(y[12] == 777.0f);
    CHECK(y[0] == 228.0f);  // 5*1 + 6*3 + 8*11 + 9*13
  }
}

TEST_CASE("cpu kernels: conv matches a brute-force loop over strides, paddings, groups and dilations") {
  uint64_t key = init::tensor_key(7, "conv-sweep");
  uint64_t k = 0;
  auto rnd = [&] { return init::uniform(key, k++); };
  struct Case {
    int64_t n, c, h, w, out;
    int kh, kw, sh, sw, ph, pw, dh, dw;
    int64_t groups;
  };
  const Case cases[] = {
      {1, 3, 7, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1},   {2, 4, 9, 9, 6, 3, 3, 2, 2, 1, 1, 1, 1, 2},
      {1, 6, 8, 7, 6, 3, 3, 1, 1, 2, 2, 2, 2, 6},   {1, 4, 10, 11, 8, 1, 7, 1, 1, 0, 3, 1, 1, 1},
      {1, 4, 11, 10, 4, 7, 1, 2, 1, 3, 0, 1, 1, 2}, {1, 2, 6, 6, 3, 5, 5, 3, 2, 2, 1, 1, 1, 1},
      {1, 8, 5, 5, 8, 3, 3, 1, 1, 1, 1, 1, 1, 4},   {1, 3, 9, 9, 2, 3, 3, 2, 2, 0, 0, 2, 1, 1},
  };
  for (const Case& c : cases) {
    ConvAttrs a;
    a.out_channels = c.out;
    a.kernel = {c.kh, c.kw};
    a.stride = {c.sh, c.sw};
    a.padding = {c.ph, c.pw};
    a.dilation = {c.dh, c.dw};
    a.groups = c.groups;
    Shape in{c.n, c.c, c.h, c.w};
    std::vector<float> x(static_cast<size_t>(in.numel())), w(static_cast<size_t>(c.out * (c.c / c.groups) * c.kh * c.kw)),
        b(static_cast<size_t>(c.out));
    for (float& v : x) v = rnd();
    for (float& v : w) v = rnd();
    for (float& v : b) v = rnd();
    Shape out;
    std::vector<float> y = run_conv(a, in, x, w, &b, &out);
    std::vector<double> ref = brute_conv(a, in, x, w, b, out);
    INFO("case in " << in.str() << " out " << out.str());
    REQUIRE(y.size() == ref.size());
    for (size_t i = 0; i < y.size(); ++i) CHECK(y[i] == Approx(ref[i]).margin(1e-6));
  }
}

TEST_CASE("cpu kernels: max pool ignores padding") {
  Shape in{1, 1, 4, 4}, out;
  std::vector<float> x = iota_values(16);
  CHECK(run_pool(pool_attrs(PoolKind::Max, 2, 2, 0), in, x, &out) == std::vector<float>{6, 8, 14, 16});
  std::vector<float> neg = x;
  for (float& v : neg) v = -v;
  // With all inputs negative, a zero from the padding would win if padding counted.
  std::vector<float> y = run_pool(pool_attrs(PoolKind::Max, 3, 2, 1), in, neg, &out);
  CHECK(out == Shape{1, 1, 2, 2});
  CHECK(y == std::vector<float>{-1, -2, -5, -6});
}

TEST_CASE("cpu kernels: avg pool follows PyTorch's ceil_mode and count_include_pad") {
  Shape out;
  SECTION("ceil_mode clips the last windows (5x5, k2 s2)") {
    std::vector<float> y = run_pool(pool_attrs(PoolKind::Avg, 2, 2, 0, true), Shape{1, 1, 5, 5}, iota_values(25), &out);
    CHECK(out == Shape{1, 1, 3, 3});
    CHECK(y == std::vector<float>{4, 6, 7.5f, 14, 16, 17.5f, 21.5f, 23.5f, 25});
  }
  SECTION("count_include_pad divides by the padded window, or not (4x4 ones, k3 s2 p1)") {
    std::vector<float> ones(16, 1.0f);
    std::vector<float> inc = run_pool(pool_attrs(PoolKind::Avg, 3, 2, 1, false, true), Shape{1, 1, 4, 4}, ones, &out);
    CHECK(out == Shape{1, 1, 2, 2});
    CHECK(inc[0] == Approx(4.0 / 9.0));
    CHECK(inc[1] == Approx(6.0 / 9.0));
    CHECK(inc[2] == Approx(6.0 / 9.0));
    CHECK(inc[3] == Approx(1.0));
    std::vector<float> exc = run_pool(pool_attrs(PoolKind::Avg, 3, 2, 1, false, false), Shape{1, 1, 4, 4}, ones, &out);
    for (float v : exc) CHECK(v == 1.0f);
  }
  SECTION("ceil_mode with padding: the last window runs past the padding and is clipped (6x6 ones, k3 s2 p1)") {
    std::vector<float> ones(36, 1.0f);
    std::vector<float> inc = run_pool(pool_attrs(PoolKind::Avg, 3, 2, 1, true, true), Shape{1, 1, 6, 6}, ones, &out);
    CHECK(out == Shape{1, 1, 4, 4});  // floor mode would give 3x3
    CHECK(inc[0] == Approx(4.0 / 9.0));
    CHECK(inc[15] == Approx(1.0 / 4.0));  // window rows 5..6 (6 is padding) clipped to the padded input
    CHECK(inc[3] == Approx(2.0 / 6.0));   // rows -1..1 (3, one padding), cols 5..6 (2): 2 valid of 6
    std::vector<float> exc = run_pool(pool_attrs(PoolKind::Avg, 3, 2, 1, true, false), Shape{1, 1, 6, 6}, ones, &out);
    for (float v : exc) CHECK(v == 1.0f);
  }
  SECTION("global pools") {
    std::vector<float> x = iota_values(8);  // 2 channels of 2x2
    std::vector<float> avg = run_pool(pool_attrs(PoolKind::GlobalAvg, 1, 1, 0), Shape{1, 2, 2, 2}, x, &out);
    CHECK(out == Shape{1, 2, 1, 1});
    CHECK(avg == std::vector<float>{2.5f, 6.5f});
    std::vector<float> mx = run_pool(pool_attrs(PoolKind::GlobalMax, 1, 1, 0), Shape{1, 2, 2, 2}, x, &out);
    CHECK(mx == std::vector<float>{4, 8});
  }
}

TEST_CASE("cpu kernels: linear over the flattened input, activations, softmax and element-wise ops") {
  SECTION("linear") {
    LinearAttrs a;
    a.out_features = 2;
    Shape in{2, 2, 1, 2}, out{2, 2, 1, 1};
    std::vector<float> x{1, 2, 3, 4, 0, 0, 0, 1};
    std::vector<float> w{1, -1, 2, 0.5f, 0, 0, 0, 1}, b{1, -1};
    std::vector<float> y(4);
    cpu::linear(a, in, x.data(), out, y.data(), w.data(), b.data());
    CHECK(y == std::vector<float>{8, 3, 1.5f, 0});
  }
  SECTION("softmax over channels, stable for large values") {
    Shape s{1, 2, 1, 2};
    std::vector<float> x{0, 1000, std::log(3.0f), 1000}, y(4);
    cpu::softmax_channels(s, x.data(), y.data());
    CHECK(y[0] == Approx(0.25));
    CHECK(y[2] == Approx(0.75));
    CHECK(y[1] == Approx(0.5));
    CHECK(y[3] == Approx(0.5));
  }
  SECTION("activations") {
    std::vector<float> x{-2, 0, 3}, y(3);
    cpu::activation(Activation::Relu, 3, x.data(), y.data());
    CHECK(y == std::vector<float>{0, 0, 3});
    cpu::activation(Activation::Tanh, 3, x.data(), y.data());
    CHECK(y[0] == Approx(std::tanh(-2.0)));
    cpu::activation(Activation::Sigmoid, 3, x.data(), y.data());
    CHECK(y[1] == 0.5f);
  }
  SECTION("add and mul") {
    std::vector<float> a{1, 2}, b{3, 4}, c{-1, 0.5f}, y(2);
    cpu::elementwise(OpKind::Add, {a.data(), b.data(), c.data()}, 2, y.data());
    CHECK(y == std::vector<float>{3, 6.5f});
    cpu::elementwise(OpKind::Mul, {a.data(), b.data(), c.data()}, 2, y.data());
    CHECK(y == std::vector<float>{-3, 4});
  }
}

TEST_CASE("cpu kernels: term assembly sums within terms, concatenates across them and honours slices") {
  GraphBuilder gb("assembly", 1, 2, 2);
  Value x = gb.input(4);
  gb.begin_block("b");
  Value a = gb.conv("a", {x}, 4, 1, 1, 0, Activation::None);
  Value c = gb.conv("c", {x}, 2, 1, 1, 0, Activation::None);
  // concat(a[0:2] + a[2:4], c, x[1:3])
  Value t = gb.node("t", make_op(OpKind::Identity),
                    {Term{GraphBuilder::slice(a, 0, 2), GraphBuilder::slice(a, 2, 4)}, Term{c},
                     Term{GraphBuilder::slice(x, 1, 3)}});
  Value m = gb.node("m", make_op(OpKind::Mul), {Term{GraphBuilder::slice(a, 0, 2)}, Term{c}});
  Value out = gb.concat("out", {t, m});
  gb.end_block(out);
  Graph g = gb.finish();
  int ia = g.find("a"), ic = g.find("c"), it = g.find("t"), im = g.find("m");
  REQUIRE(g.nodes[it].shape == Shape{1, 6, 2, 2});

  std::vector<float> av = iota_values(16, 100), cv = iota_values(8, 200), xv = iota_values(16, 300);
  std::vector<std::vector<float>> res;
  cpu::assemble_terms(g, it, {av.data(), av.data(), cv.data(), xv.data()}, res);
  REQUIRE(res.size() == 1);
  REQUIRE(res[0].size() == 24);
  for (int p = 0; p < 4; ++p) {
    CHECK(res[0][0 * 4 + p] == av[0 * 4 + p] + av[2 * 4 + p]);
    CHECK(res[0][1 * 4 + p] == av[1 * 4 + p] + av[3 * 4 + p]);
    CHECK(res[0][2 * 4 + p] == cv[0 * 4 + p]);
    CHECK(res[0][3 * 4 + p] == cv[1 * 4 + p]);
    CHECK(res[0][4 * 4 + p] == xv[1 * 4 + p]);
    CHECK(res[0][5 * 4 + p] == xv[2 * 4 + p]);
  }
  // Operand terms stay separate for mul.
  cpu::assemble_terms(g, im, {av.data(), cv.data()}, res);
  REQUIRE(res.size() == 2);
  CHECK(std::vector<float>(res[0].begin(), res[0].end()) == std::vector<float>(av.begin(), av.begin() + 8));
  CHECK(res[1] == cv);
  CHECK_FALSE(cpu::reads_one_whole_tensor(g, it));
  CHECK(cpu::reads_one_whole_tensor(g, ia));
  CHECK(cpu::reads_one_whole_tensor(g, ic));
}

TEST_CASE("cpu kernels: a sequential equals its steps run one by one") {
  Shape in{1, 2, 6, 6};
  ConvAttrs ca = conv_attrs(3, 3, 1, 1, 1, 1, Activation::Relu);
  PoolAttrs pa = pool_attrs(PoolKind::Max, 2, 2, 0);
  Op conv = make_op(OpKind::Conv);
  conv.attrs = ca;
  Op pool = make_op(OpKind::Pool);
  pool.attrs = pa;
  Op sig = activation_op(Activation::Sigmoid);
  Op seq = make_op(OpKind::Sequential);
  seq.attrs = SequentialAttrs{{conv, pool, sig}};
  std::string name = "seq";
  Shape out = infer_op(seq, {in}, InferContext{name, 1, 6, 6});
  REQUIRE(out == Shape{1, 3, 3, 3});

  uint64_t key = init::tensor_key(3, "seq");
  std::vector<float> x(72), w(3 * 2 * 9), b(3);
  for (size_t i = 0; i < x.size(); ++i) x[i] = init::uniform(key, i);
  for (size_t i = 0; i < w.size(); ++i) w[i] = init::uniform(key, 100 + i);
  for (size_t i = 0; i < b.size(); ++i) b[i] = init::uniform(key, 200 + i);

  cpu::Scratch scratch;
  std::vector<float> y(static_cast<size_t>(out.numel()));
  cpu::run_op(seq, {x.data()}, {in}, out, y.data(), {{w.data(), b.data()}, {}, {}}, scratch);

  Shape c_out = conv_out(ca, in), p_out;
  std::vector<float> y1(static_cast<size_t>(c_out.numel()));
  cpu::conv2d(ca, in, x.data(), c_out, y1.data(), w.data(), b.data());
  std::vector<float> y2 = run_pool(pa, c_out, y1, &p_out);
  std::vector<float> y3(y2.size());
  cpu::activation(Activation::Sigmoid, static_cast<int64_t>(y2.size()), y2.data(), y3.data());
  CHECK(y == y3);
  CHECK(cpu::scratch_elems(seq, in) == c_out.numel());
}
