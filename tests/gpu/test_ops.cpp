// Every CUDA op against the CPU reference (executor/cpu), on random shapes and fresh random
// inputs, in both math modes. Skipped on machines without a GPU.
#include <array>
#include <random>

#include "executor/cuda/conv.hpp"
#include "executor/cuda/kernels.hpp"
#include "graph/error.hpp"

#include "tests/catch.hpp"
#include "tests/gpu/gpu_util.hpp"

using namespace hios;
using gputest::check_op;
using gputest::kImpls;
using gputest::kModes;
using gputest::make_op_graph;
using gputest::op_tolerance;
using cuda::MathMode;

namespace {

int pick(std::mt19937& rng, int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }

template <class T>
T pick_of(std::mt19937& rng, std::initializer_list<T> xs) {
  auto it = xs.begin();
  std::advance(it, pick(rng, 0, int(xs.size()) - 1));
  return *it;
}

void expect_close(const gputest::OpCheck& c, OpKind kind, MathMode m, const std::string& what) {
  INFO(what << " [" << cuda::math_mode_name(m) << "]: " << c.str());
  CHECK(c.err.within(op_tolerance(kind, m)));
}

// Ops without tensor-core math: checked in each storage type (fp32, fp16, bf16).
void expect_close_stored(const gputest::OpGraph& og, OpKind kind, std::mt19937& rng, const std::string& what) {
  for (MathMode m : gputest::kStorageModes) expect_close(gputest::check_op(og, m, rng), kind, m, what);
}

}  // namespace

TEST_CASE("conv matches the CPU reference on random shapes", "[gpu][ops]") {
  REQUIRE_GPU();
  std::mt19937 rng(1234);
  for (MathMode m : kModes) {
    for (int it = 0; it < 14; ++it) {
      const int64_t n = pick_of(rng, {1, 1, 2});
      const int64_t c = pick(rng, 1, 40);
      const std::array<int, 2> k = pick_of<std::array<int, 2>>(rng, {{1, 1}, {3, 3}, {5, 5}, {1, 7}, {7, 1}, {3, 3}});
      const int s = pick(rng, 1, 2);
      const int d = k[0] == 3 && k[1] == 3 ? pick_of(rng, {1, 1, 2}) : 1;
      const std::array<int, 2> pad{pick(rng, 0, k[0] / 2), pick(rng, 0, k[1] / 2)};
      const int64_t h = pick(rng, d * (k[0] - 1) + 1, 23), w = pick(rng, d * (k[1] - 1) + 1, 23);
      // The input is a whole value, a concat of two values, or a channel slice.
      int input_kind = pick(rng, 0, 2);
      if (input_kind == 1 && c < 2) input_kind = 0;
      const int64_t split = input_kind == 1 ? pick(rng, 1, int(c) - 1) : 0;
      const std::vector<int64_t> prods = input_kind == 0   ? std::vector<int64_t>{c}
                                         : input_kind == 1 ? std::vector<int64_t>{split, c - split}
                                                           : std::vector<int64_t>{c + 3};
      const int groups_kind = pick(rng, 0, 2);  // 0: dense, 1: depthwise, 2: two groups
      int64_t groups = 1, out = pick(rng, 1, 48);
      if (groups_kind == 1) {
        groups = c;
        out = c * pick(rng, 1, 2);
      } else if (groups_kind == 2 && c % 2 == 0) {
        groups = 2;
        out = 2 * pick(rng, 1, 20);
      }
      const bool bias = pick(rng, 0, 3) != 0;
      const Activation act = pick_of(rng, {Activation::None, Activation::Relu, Activation::Relu, Activation::Sigmoid,
                                           Activation::Tanh, Activation::HardSwish});
      const int64_t cin = c;
      auto og = make_op_graph(n, h, w, prods, [&](GraphBuilder& b, const std::vector<Value>& p) {
        std::vector<Term> terms;
        if (input_kind == 1) {
          terms = {Term{p[0]}, Term{p[1]}};
        } else if (input_kind == 2) {
          terms = {Term{GraphBuilder::slice(p[0], 2, 2 + c)}};
        } else {
          terms = {Term{p[0]}};
        }
        return b.node("conv", conv_op(out, k, {s, s}, pad, act, groups, bias, {d, d}), terms);
      });
      for (cuda::ConvImpl impl : kImpls) {
        auto r = check_op(og, m, rng, impl);
        expect_close(r, OpKind::Conv, m,
                     strprintf("conv n%lld c%lld %lldx%lld k%dx%d s%d p%d,%d d%d g%lld out%lld bias%d act %s input %d "
                               "impl %s",
                               (long long)n, (long long)cin, (long long)h, (long long)w, k[0], k[1], s, pad[0], pad[1],
                               d, (long long)groups, (long long)out, int(bias), activation_name(act), input_kind,
                               cuda::conv_impl_name(impl)));
      }
    }
  }
}

// A skip connection in the convolution's epilogue (ConvAttrs::residual): act(conv + bias + z),
// dense and depthwise, z a whole value or a channel slice, through every implementation.
TEST_CASE("residual convolutions match the CPU reference", "[gpu][ops]") {
  REQUIRE_GPU();
  std::mt19937 rng(4321);
  for (MathMode m : kModes) {
    for (int it = 0; it < 8; ++it) {
      const int64_t c = pick(rng, 2, 40), h = pick(rng, 3, 21), w = pick(rng, 3, 21);
      const int k = pick_of(rng, {1, 3}), d = k == 3 ? pick(rng, 1, 2) : 1;
      const bool depthwise = it % 4 == 3, sliced = it % 3 == 1, bias = pick(rng, 0, 3) != 0;
      const int64_t out = depthwise ? c : pick(rng, 1, 48);
      const Activation act =
          pick_of(rng, {Activation::None, Activation::Relu, Activation::Relu, Activation::Sigmoid, Activation::HardSwish});
      // The residual is a second producer (of the output's shape: the padding keeps the size),
      // or a channel slice of a wider one.
      auto og = make_op_graph(1, h, w, {c, sliced ? out + 5 : out}, [&](GraphBuilder& b, const std::vector<Value>& p) {
        Op op = conv_op(out, {k, k}, {1, 1}, {d * (k / 2), d * (k / 2)}, act, depthwise ? c : 1, bias, {d, d});
        std::get<ConvAttrs>(op.attrs).residual = true;
        return b.node("conv", op, {Term{p[0]}, Term{sliced ? GraphBuilder::slice(p[1], 3, 3 + out) : p[1]}});
      });
      for (cuda::ConvImpl impl : kImpls) {
        expect_close(check_op(og, m, rng, impl), OpKind::Conv, m,
                     strprintf("residual conv c%lld %lldx%lld k%d d%d out%lld depthwise%d sliced%d bias%d act %s impl %s",
                               (long long)c, (long long)h, (long long)w, k, d, (long long)out, int(depthwise),
                               int(sliced), int(bias), activation_name(act), cuda::conv_impl_name(impl)));
      }
    }
  }
}

// hios's NHWC depthwise kernels for every fixed window (3, 5, 7 at stride 1 and 2), with C
// chosen so each channel-vector path runs: 4 per thread (C = 96), 2 (C = 42, NASNet's first
// cells) and 1 (C = 13); the ReLU before the depthwise (a separable chain's) is fused into it.
TEST_CASE("NHWC depthwise kernels (4, 2 and 1 channels per thread) match the CPU reference", "[gpu][ops]") {
  REQUIRE_GPU();
  std::mt19937 rng(21);
  for (int k : {3, 5, 7}) {
    for (int s : {1, 2}) {
      for (int64_t c : {96, 42, 13}) {
        const int64_t h = pick(rng, k, 19), w = pick(rng, k, 37);
        const bool bias = pick(rng, 0, 1) == 1;
        auto og = make_op_graph(pick(rng, 1, 2), h, w, {c}, [&](GraphBuilder& b, const std::vector<Value>& v) {
          std::vector<Op> steps = {activation_op(Activation::Relu),
                                   conv_op(c, {k, k}, {s, s}, {k / 2, k / 2}, Activation::None, c, bias)};
          return b.sequential("sep", {v[0]}, steps);
        });
        for (MathMode m : gputest::kStorageModes) {
          expect_close(check_op(og, m, rng, cuda::ConvImpl::Hios), OpKind::Sequential, m,
                       strprintf("depthwise %dx%d/%d c%lld %lldx%lld bias%d", k, k, s, (long long)c, (long long)h,
                                 (long long)w, int(bias)));
        }
      }
    }
  }
}

// Dilated depthwise windows (DeepLab's and LR-ASPP's atrous MobileNet blocks) on hios's generic
// NHWC kernel, padded to keep the size and not, at stride 1 and 2.
TEST_CASE("dilated depthwise convolutions match the CPU reference", "[gpu][ops]") {
  REQUIRE_GPU();
  std::mt19937 rng(23);
  for (int k : {3, 5}) {
    for (int d : {2, 3}) {
      for (int s : {1, 2}) {
        const int64_t c = pick_of(rng, {13, 96}), h = pick(rng, 1 + (k - 1) * d, 29), w = pick(rng, 1 + (k - 1) * d, 33);
        const int pad = pick(rng, 0, 1) == 1 ? (k / 2) * d : 0;
        auto og = make_op_graph(1, h, w, {c}, [&](GraphBuilder& b, const std::vector<Value>& v) {
          return b.sequential("dw", {v[0]}, {conv_op(c, {k, k}, {s, s}, {pad, pad}, Activation::Relu, c, true, {d, d})});
        });
        for (MathMode m : gputest::kStorageModes) {
          expect_close(check_op(og, m, rng, cuda::ConvImpl::Hios), OpKind::Sequential, m,
                       strprintf("depthwise %dx%d/%d dilation %d pad %d c%lld %lldx%lld", k, k, s, d, pad, (long long)c,
                                 (long long)h, (long long)w));
        }
      }
    }
  }
}

// Over the convolution choices made so far: every signature forced to a candidate (its key
// holds `always`) chose `impl`, and none where it was forbidden (`never`). Returns how many
// were forced.
namespace {
int forced_choices_kept(const std::string& impl, const std::string& always, const std::string& never) {
  int forced = 0;
  const json choices = cuda::conv_choices(0);
  for (const auto& [key, recipe] : choices.items()) {
    const bool kept = recipe.value("impl", std::string()) == impl;
    INFO(key << ": " << recipe.dump());
    if (key.find(always) != std::string::npos) {
      ++forced;
      CHECK(kept);
    }
    if (key.find(never) != std::string::npos) CHECK_FALSE(kept);
  }
  return forced;
}
}  // namespace

// Dense dilated convolutions that keep the size (DeepLab's atrous backbone and ASPP) computed
// directly and through the phase split (conv.hpp), sizes not multiples of the dilation
// included: both against the CPU, and the split really chosen where it was forced.
TEST_CASE("dilated convolutions through the phase split match the CPU reference", "[gpu][ops]") {
  REQUIRE_GPU();
  std::mt19937 rng(61);
  struct Case {
    int k, d;
  };
  for (const Case& cs : {Case{3, 2}, Case{3, 3}, Case{3, 12}, Case{5, 2}, Case{1, 4}}) {
    const int64_t n = pick_of(rng, {1, 2}), c = pick_of(rng, {8, 33}), oc = pick_of(rng, {16, 24});
    const int64_t h = pick(rng, 2 * cs.d + 1, 41), w = pick(rng, cs.d + 1, 37);
    const int pad = cs.d * (cs.k / 2);
    auto og = make_op_graph(n, h, w, {c}, [&](GraphBuilder& b, const std::vector<Value>& v) {
      return b.sequential("atrous", {v[0]},
                          {conv_op(oc, {cs.k, cs.k}, {1, 1}, {pad, pad}, Activation::Relu, 1, true, {cs.d, cs.d})});
    });
    for (MathMode m : kModes) {
      for (cuda::PhaseSplit ps : {cuda::PhaseSplit::Always, cuda::PhaseSplit::Never}) {
        expect_close(check_op(og, m, rng, cuda::ConvImpl::Auto, ps), OpKind::Sequential, m,
                     strprintf("%dx%d dilation %d, %lld x %lld x %lld x %lld to %lld, phase split %s", cs.k, cs.k, cs.d,
                               (long long)n, (long long)c, (long long)h, (long long)w, (long long)oc,
                               ps == cuda::PhaseSplit::Always ? "forced" : "off"));
      }
    }
  }
  // Every forced problem (the NHWC runs) chose the split, and none where it was off.
  CHECK(forced_choices_kept("phase-split", " phases always", " phases never") >= 5);
}

// Convolutions of images with fewer channels than a 16-byte pixel (an RGB stem) computed
// directly and through the channel pad (conv.hpp): both against the CPU, and the pad really
// chosen where it was forced.
TEST_CASE("convolutions of few-channel images through the channel pad match the CPU reference", "[gpu][ops]") {
  REQUIRE_GPU();
  std::mt19937 rng(67);
  struct Case {
    int64_t c;
    int k, s;
  };
  for (const Case& cs : {Case{3, 7, 2}, Case{1, 3, 1}, Case{5, 3, 2}, Case{3, 1, 1}}) {
    const int64_t h = pick(rng, cs.k, 45), w = pick(rng, cs.k, 39), oc = pick_of(rng, {16, 24});
    const int pad = cs.k / 2;
    auto og = make_op_graph(pick_of(rng, {1, 2}), h, w, {cs.c}, [&](GraphBuilder& b, const std::vector<Value>& v) {
      return b.sequential("stem", {v[0]}, {conv_op(oc, {cs.k, cs.k}, {cs.s, cs.s}, {pad, pad}, Activation::Relu)});
    });
    for (MathMode m : kModes) {
      for (cuda::ChannelPad cp : {cuda::ChannelPad::Always, cuda::ChannelPad::Never}) {
        expect_close(check_op(og, m, rng, cuda::ConvImpl::Auto, cuda::PhaseSplit::Timed, cp), OpKind::Sequential, m,
                     strprintf("%dx%d/%d on %lld channels, %lld x %lld, to %lld, channel pad %s", cs.k, cs.k, cs.s,
                               (long long)cs.c, (long long)h, (long long)w, (long long)oc,
                               cp == cuda::ChannelPad::Always ? "forced" : "off"));
      }
    }
  }
  // Every forced problem (the NHWC runs) chose the pad, and none where it was off.
  CHECK(forced_choices_kept("channel-pad", " pad always", " pad never") >= 6);
}

TEST_CASE("pooling matches the CPU reference, ceil_mode and padding included", "[gpu][ops]") {
  REQUIRE_GPU();
  std::mt19937 rng(99);
  for (int it = 0; it < 24; ++it) {
    const PoolKind kind = pick_of(rng, {PoolKind::Max, PoolKind::Avg, PoolKind::Max, PoolKind::Avg, PoolKind::GlobalAvg,
                                        PoolKind::GlobalMax});
    const int k = pick(rng, 1, 4), s = pick(rng, 1, 3), p = pick(rng, 0, k / 2);
    const bool ceil_mode = pick(rng, 0, 1) == 1, include_pad = pick(rng, 0, 1) == 1;
    const int64_t n = pick_of(rng, {1, 2}), c = pick(rng, 1, 20), h = pick(rng, k, 30), w = pick(rng, k, 30);
    auto og = make_op_graph(n, h, w, {c}, [&](GraphBuilder& b, const std::vector<Value>& v) {
      return b.pool("pool", v[0], kind, k, s, p, ceil_mode, include_pad);
    });
    expect_close_stored(og, OpKind::Pool, rng,
                 strprintf("pool %s k%d s%d p%d ceil%d incl%d on %s", pool_kind_name(kind), k, s, p, int(ceil_mode),
                           int(include_pad), og.g.nodes[size_t(og.producers[0])].shape.str().c_str()));
  }
  // The 3x3 windows at stride 1 and 2 have a kernel of their own in NHWC (it slides down the
  // rows): every channel-vector width (C = 12, 42, 13), padding, ceil_mode and divisors.
  for (int s : {1, 2}) {
    for (int64_t c : {12, 42, 13}) {
      for (const PoolKind kind : {PoolKind::Max, PoolKind::Avg}) {
        const int p = pick(rng, 0, 1);
        const bool ceil_mode = pick(rng, 0, 1) == 1, include_pad = pick(rng, 0, 1) == 1;
        const int64_t h = pick(rng, 3, 29), w = pick(rng, 3, 29);
        auto og3 = make_op_graph(pick(rng, 1, 2), h, w, {c}, [&](GraphBuilder& b, const std::vector<Value>& v) {
          return b.pool("pool", v[0], kind, 3, s, p, ceil_mode, include_pad);
        });
        expect_close_stored(og3, OpKind::Pool, rng,
                            strprintf("pool %s 3x3/%d p%d ceil%d incl%d c%lld %lldx%lld", pool_kind_name(kind), s, p,
                                      int(ceil_mode), int(include_pad), (long long)c, (long long)h, (long long)w));
      }
    }
  }
  // SqueezeNet's case: 3x3/2 ceil_mode windows hanging past the input.
  auto og = make_op_graph(1, 55, 55, {16}, [&](GraphBuilder& b, const std::vector<Value>& v) {
    return b.pool("pool", v[0], PoolKind::Max, 3, 2, 0, true);
  });
  expect_close_stored(og, OpKind::Pool, rng, "squeezenet max pool");
  // Global pools of maps large enough to be split in parts (kernels.hpp, global_pool_splits),
  // a part count that does not divide the pixels included.
  for (const auto& [c, h, w] : {std::array<int64_t, 3>{70, 40, 37}, std::array<int64_t, 3>{33, 128, 96}}) {
    REQUIRE(cuda::global_pool_splits(1, c, h * w) > 1);
    for (const PoolKind kind : {PoolKind::GlobalAvg, PoolKind::GlobalMax}) {
      auto og_global = make_op_graph(2, h, w, {c}, [&](GraphBuilder& b, const std::vector<Value>& v) {
        return b.pool("pool", v[0], kind, 1, 1, 0, false, true);
      });
      expect_close_stored(og_global, OpKind::Pool, rng,
                          strprintf("split %s c%lld %lldx%lld", pool_kind_name(kind), (long long)c, (long long)h, (long long)w));
    }
  }
}

TEST_CASE("activations, softmax and linear match the CPU reference", "[gpu][ops]") {
  REQUIRE_GPU();
  std::mt19937 rng(7);
  for (Activation a : {Activation::Relu, Activation::Sigmoid, Activation::Tanh}) {
    auto og = make_op_graph(2, 9, 11, {13}, [&](GraphBuilder& b, const std::vector<Value>& v) {
      return b.activation("act", v[0], a);
    });
    expect_close_stored(og, OpKind::Activation, rng, activation_name(a));
    // Sliced input of a batched tensor: the strided path.
    auto sl = make_op_graph(2, 5, 7, {13}, [&](GraphBuilder& b, const std::vector<Value>& v) {
      return b.node("act", activation_op(a), {Term{GraphBuilder::slice(v[0], 3, 9)}});
    });
    expect_close_stored(sl, OpKind::Activation, rng,
                 std::string("sliced ") + activation_name(a));
  }
  for (int64_t n : {1, 3}) {
    auto sm = make_op_graph(n, 4, 3, {10}, [&](GraphBuilder& b, const std::vector<Value>& v) {
      return b.softmax("softmax", v[0]);
    });
    expect_close_stored(sm, OpKind::Softmax, rng, "softmax");
  }
  for (MathMode m : kModes) {
    // Batch 1: the matrix-vector kernel; batch 3: one cuBLAS product of the rows.
    for (int64_t n : {int64_t(1), int64_t(3)}) {
    for (bool bias : {true, false}) {
      auto lin = make_op_graph(n, 3, 5, {7, 4}, [&](GraphBuilder& b, const std::vector<Value>& v) {
        return b.node("fc", [&] {
          Op op = make_op(OpKind::Linear);
          LinearAttrs a;
          a.out_features = 37;
          a.bias = bias;
          op.attrs = a;
          return op;
        }(), {Term{v[0]}, Term{v[1]}});
      });
      expect_close(check_op(lin, m, rng), OpKind::Linear, m,
                   strprintf("linear%s, batch %lld", bias ? "" : " without bias", (long long)n));
    }
    }
  }
}

TEST_CASE("add and mul match the CPU reference", "[gpu][ops]") {
  REQUIRE_GPU();
  std::mt19937 rng(5);
  for (OpKind kind : {OpKind::Add, OpKind::Mul}) {
    for (int operands : {2, 3, 5}) {
      for (int64_t n : {1, 2}) {
        // The three-operand case reads one more producer: its last operand sums two values.
        auto og = make_op_graph(n, 6, 7, std::vector<int64_t>(size_t(operands) + (operands == 3), 12),
                                [&](GraphBuilder& b, const std::vector<Value>& v) {
                                  std::vector<Term> terms;
                                  for (int i = 0; i < operands; ++i) terms.push_back(Term{v[size_t(i)]});
                                  // One operand that is a sum of two sliced values.
                                  if (operands == 3) {
                                    terms[2] = Term{GraphBuilder::slice(v[2], 0, 12), GraphBuilder::slice(v[3], 0, 12)};
                                  }
                                  return b.node("op", make_op(kind), terms);
                                });
        expect_close_stored(og, kind, rng,
                     strprintf("%s of %d operands, batch %lld", op_def(kind).name, operands, (long long)n));
      }
    }
  }
}

TEST_CASE("term assembly (sums, concats, slices) matches the CPU reference", "[gpu][ops]") {
  REQUIRE_GPU();
  std::mt19937 rng(11);
  for (int64_t n : {1, 2}) {
    for (int64_t hw : {5, 8}) {  // odd planes take the scalar path, planes of 64 the 16-byte one
      // NASNet-style exit: six terms, each a sum of two values, one of them sliced.
      auto og = make_op_graph(n, hw, hw, {8, 8, 8, 8, 12}, [&](GraphBuilder& b, const std::vector<Value>& v) {
        return b.node("out", make_op(OpKind::Identity),
                      {Term{v[0]}, Term{v[1], v[2]}, Term{v[2], v[3]}, Term{GraphBuilder::slice(v[4], 2, 10), v[0]},
                       Term{v[3]}, Term{GraphBuilder::slice(v[4], 4, 12)}});
      });
      expect_close_stored(og, OpKind::Identity, rng, "six-term exit");
    }
  }
  // More values than one launch takes: 30 in one term, and 17 terms.
  auto many = make_op_graph(1, 3, 3, std::vector<int64_t>(30, 4), [&](GraphBuilder& b, const std::vector<Value>& v) {
    return b.node("sum", make_op(OpKind::Identity), {Term(v.begin(), v.end())});
  });
  expect_close_stored(many, OpKind::Identity, rng, "sum of 30 values");
  auto wide = make_op_graph(2, 4, 4, std::vector<int64_t>(17, 3), [&](GraphBuilder& b, const std::vector<Value>& v) {
    std::vector<Term> terms;
    for (const Value& x : v) terms.push_back(Term{x});
    return b.node("cat", make_op(OpKind::Identity), terms);
  });
  expect_close_stored(wide, OpKind::Identity, rng, "concat of 17 terms");
  // Even channel counts that are not multiples of 4 (NASNet's stem: 42): two elements per access.
  auto even = make_op_graph(2, 5, 7, {6, 10, 6}, [&](GraphBuilder& b, const std::vector<Value>& v) {
    return b.node("cat", make_op(OpKind::Identity), {Term{v[0], v[2]}, Term{v[1]}, Term{v[2]}});
  });
  expect_close_stored(even, OpKind::Identity, rng, "concat of 6- and 10-channel terms");
  // The same narrow terms filling a row of 32 channels: the row-at-a-time kernel (16-byte rows
  // gathered from 4-byte pieces), with sums and a term of three values; and one of 3- and
  // 5-channel terms (24 channels: single elements gathered).
  auto rows = make_op_graph(2, 5, 7, {6, 10, 6, 10}, [&](GraphBuilder& b, const std::vector<Value>& v) {
    return b.node("cat", make_op(OpKind::Identity), {Term{v[0], v[2]}, Term{v[1], v[3], v[1]}, Term{v[2]}, Term{v[3]}});
  });
  expect_close_stored(rows, OpKind::Identity, rng, "concat of narrow terms filling 32 channels");
  auto odd = make_op_graph(1, 4, 9, {3, 5, 3, 5, 3, 5}, [&](GraphBuilder& b, const std::vector<Value>& v) {
    return b.node("cat", make_op(OpKind::Identity),
                  {Term{v[0], v[2]}, Term{v[1]}, Term{v[2]}, Term{v[3], v[5]}, Term{v[4]}, Term{v[5]}});
  });
  expect_close_stored(odd, OpKind::Identity, rng, "concat of 3- and 5-channel terms filling 24 channels");
  // A single sliced value: copied, not assembled.
  auto one = make_op_graph(2, 4, 6, {9}, [&](GraphBuilder& b, const std::vector<Value>& v) {
    return b.node("copy", make_op(OpKind::Identity), {Term{GraphBuilder::slice(v[0], 1, 7)}});
  });
  expect_close_stored(one, OpKind::Identity, rng, "sliced copy");
}

TEST_CASE("sequential nodes (NASNet separable and squeeze chains) match the CPU reference", "[gpu][ops]") {
  REQUIRE_GPU();
  std::mt19937 rng(3);
  for (MathMode m : kModes) {
    for (int stride : {1, 2}) {
      const int64_t c = 12;
      auto og = make_op_graph(1, 17, 17, {c, c}, [&](GraphBuilder& b, const std::vector<Value>& v) {
        std::vector<Op> steps = {activation_op(Activation::Relu),
                                 conv_op(c, {5, 5}, {stride, stride}, {2, 2}, Activation::None, c, false),
                                 conv_op(c, {1, 1}, {1, 1}, {0, 0}, Activation::None, 1, true),
                                 activation_op(Activation::Relu),
                                 conv_op(c, {5, 5}, {1, 1}, {2, 2}, Activation::None, c, false),
                                 conv_op(20, {1, 1}, {1, 1}, {0, 0}, Activation::None, 1, true)};
        return b.sequential("sep", {v[0], v[1]}, steps);  // a sum of two values as its input
      });
      for (cuda::ConvImpl impl : kImpls) {
        expect_close(check_op(og, m, rng, impl), OpKind::Sequential, m,
                     strprintf("separable stride %d impl %s", stride, cuda::conv_impl_name(impl)));
      }
    }
    // A conv followed by a non-ReLU activation and a pool: fusion and non-conv steps.
    auto og = make_op_graph(2, 10, 10, {6}, [&](GraphBuilder& b, const std::vector<Value>& v) {
      std::vector<Op> steps = {conv_op(8, {3, 3}, {1, 1}, {1, 1}, Activation::None, 1, true),
                               activation_op(Activation::Sigmoid), pool_op(PoolKind::Avg, 3, 2, 1, true, false)};
      return b.sequential("chain", {v[0]}, steps);
    });
    expect_close(check_op(og, m, rng), OpKind::Sequential, m, "conv, sigmoid, ceil-mode avg pool");
  }
}
