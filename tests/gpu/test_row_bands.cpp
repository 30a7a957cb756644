// Row splits on the CUDA backend: bands of convolutions, pools and sequential ops
// (RowWindow), and the rows op, each against the CPU reference kernels (executor/cpu, the
// oracle), with every convolution family forced in turn; then split graphs run whole on one
// GPU, captured in a CUDA Graph, against the unsplit graph (a U-Net's transposed convolutions and
// resizes among them). Skipped on machines without a GPU.
#include <algorithm>
#include <random>

#include "executor/cpu/kernels.hpp"
#include "graph/error.hpp"
#include "graph/json_codec.hpp"
#include "graph/row_split.hpp"
#include "models/models.hpp"
#include "tests/catch.hpp"
#include "tests/gpu/gpu_util.hpp"

using namespace hios;
using cuda::MathMode;
using gputest::check_op;
using gputest::kImpls;
using gputest::kModes;
using gputest::make_op_graph;
using gputest::op_tolerance;

namespace {

// `whole` computing output rows `out` of an input in_full rows high, from an input that holds
// the rows the band reads plus up to extra_top rows above them and extra_bottom below (rows a
// band does not read, as when a tensor also feeds a wider window).
struct Band {
  Op op;
  int64_t in_first = 0;  // whole-tensor row of the input's first row
  int64_t held = 0;      // rows the input holds
};
Band band_of(const Op& whole, int64_t in_full, RowRange out, int64_t extra_top = 0, int64_t extra_bottom = 0) {
  const RowRange need = input_rows_op(whole, out, in_full);
  Band b;
  b.in_first = std::max<int64_t>(0, need.begin - extra_top);
  b.held = std::min(in_full, need.end + extra_bottom) - b.in_first;
  b.op = band_op(whole, out, in_full, b.in_first);
  return b;
}

// A graph whose node under test reads one producer holding the band's input rows: a whole
// value, or (slice) channels 2.. of a wider producer, the strided case at batch > 1.
gputest::OpGraph band_graph(const Band& band, int64_t n, int64_t c, int64_t w, bool slice) {
  return make_op_graph(n, band.held, w, {slice ? c + 3 : c}, [&](GraphBuilder& b, const std::vector<Value>& p) {
    return b.node("band", band.op, {Term{slice ? GraphBuilder::slice(p[0], 2, 2 + c) : p[0]}});
  });
}

std::string rows_str(RowRange r) { return strprintf("rows %lld-%lld", (long long)r.begin, (long long)r.end); }

struct ConvCase {
  const char* what;
  int64_t n, c, out_c, groups;
  std::array<int, 2> k, s, p, d;
  int64_t in_full, w;
  RowRange out;
  int64_t extra_top, extra_bottom;
  bool slice;
  Activation act;
};

// Every case is checked in both math modes with each convolution family forced in turn: the
// legacy API declines unequal paddings (the graph API takes them), hios's depthwise kernel reads
// around unread rows, and the others get those rows cut off first.
const ConvCase kConvCases[] = {
    {"3x3/1 pad 1, top band", 1, 8, 12, 1, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 20, 13, {0, 7}, 0, 0, false, Activation::Relu},
    {"3x3/1 pad 1, middle band", 1, 8, 12, 1, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 20, 13, {7, 14}, 0, 0, false,
     Activation::Relu},
    {"3x3/1 pad 1, bottom band", 1, 8, 12, 1, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 20, 13, {14, 20}, 0, 0, false,
     Activation::None},
    {"3x3/1 pad 1, middle band of a channel slice, batch 2", 2, 8, 12, 1, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 20, 13,
     {6, 13}, 0, 0, true, Activation::Relu},
    {"3x3/1 pad 1, top band with unread rows below", 2, 5, 7, 1, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 20, 12, {0, 6}, 0, 3,
     true, Activation::Relu},
    {"3x3/2 pad 0, band straddling rows", 1, 6, 10, 1, {3, 3}, {2, 2}, {0, 0}, {1, 1}, 21, 15, {3, 7}, 0, 0, false,
     Activation::Relu},
    {"3x3/2 pad 0, unread rows above and below", 1, 6, 10, 1, {3, 3}, {2, 2}, {0, 0}, {1, 1}, 21, 15, {3, 7}, 1, 3,
     false, Activation::Relu},
    {"3x3/2 pad 1, top band", 1, 6, 9, 1, {3, 3}, {2, 2}, {1, 1}, {1, 1}, 19, 11, {0, 5}, 0, 0, false,
     Activation::None},
    {"3x3/2 pad 1, bottom band of an odd height", 1, 6, 9, 1, {3, 3}, {2, 2}, {1, 1}, {1, 1}, 19, 11, {5, 10}, 0, 0,
     false, Activation::Relu},
    {"1x1/2 (a shortcut) reading a taller band", 2, 16, 8, 1, {1, 1}, {2, 2}, {0, 0}, {1, 1}, 16, 8, {4, 8}, 1, 1,
     false, Activation::None},
    {"3x3 dilation 2 pad 2, top band", 1, 5, 7, 1, {3, 3}, {1, 1}, {2, 2}, {2, 2}, 14, 10, {0, 5}, 0, 0, false,
     Activation::Relu},
    {"7x1 pad 3,0, middle band", 1, 6, 6, 1, {7, 1}, {1, 1}, {3, 0}, {1, 1}, 18, 9, {6, 12}, 0, 0, false,
     Activation::Relu},
    {"depthwise 3x3/1 pad 1, top band", 1, 16, 16, 16, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 18, 20, {0, 6}, 0, 0, false,
     Activation::None},
    {"depthwise 3x3/1 pad 1, middle band with unread rows", 1, 16, 16, 16, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 18, 20,
     {6, 12}, 2, 2, false, Activation::Relu},
    {"depthwise 3x3/1 pad 1, bottom band", 2, 16, 16, 16, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 18, 20, {12, 18}, 0, 0, true,
     Activation::None},
    {"depthwise 5x5/2 pad 2, unread rows", 1, 12, 12, 12, {5, 5}, {2, 2}, {2, 2}, {1, 1}, 23, 17, {4, 9}, 1, 3, false,
     Activation::None},
    {"depthwise 5x5/2 pad 2, bottom band", 1, 12, 12, 12, {5, 5}, {2, 2}, {2, 2}, {1, 1}, 23, 17, {8, 12}, 0, 0, false,
     Activation::Relu},
    {"one plane 3x3/1 pad 1 with unread rows (an offset, no copy)", 1, 1, 1, 1, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 15, 9,
     {4, 9}, 2, 2, false, Activation::None},
    {"grouped 3x3/1 pad 1 (multiplier 2), top band", 1, 6, 12, 6, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 16, 10, {0, 5}, 0, 0,
     false, Activation::Relu},
};

struct PoolCase {
  const char* what;
  int64_t n, c;
  PoolKind kind;
  int k, s, p;
  bool ceil_mode, include_pad;
  int64_t in_full, w;
  RowRange out;
  int64_t extra_top, extra_bottom;
  bool slice;
};

const PoolCase kPoolCases[] = {
    {"max 3x3/2 ceil_mode, top band", 1, 7, PoolKind::Max, 3, 2, 0, true, true, 20, 20, {0, 4}, 0, 0, false},
    {"max 3x3/2 ceil_mode, bottom band (a window past the input)", 1, 7, PoolKind::Max, 3, 2, 0, true, true, 20, 20,
     {6, 10}, 0, 0, false},
    {"max 3x3/2 ceil_mode, middle band with unread rows", 1, 7, PoolKind::Max, 3, 2, 0, true, true, 20, 20, {3, 7}, 2,
     2, false},
    {"avg 3x3/1 pad 1 excluding padding, top band", 1, 5, PoolKind::Avg, 3, 1, 1, false, false, 15, 11, {0, 5}, 0, 0,
     false},
    {"avg 3x3/1 pad 1 excluding padding, middle band", 1, 5, PoolKind::Avg, 3, 1, 1, false, false, 15, 11, {5, 10}, 0,
     0, false},
    {"avg 3x3/1 pad 1 excluding padding, bottom band", 1, 5, PoolKind::Avg, 3, 1, 1, false, false, 15, 11, {10, 15}, 0,
     0, false},
    {"avg 3x3/1 pad 1 including padding, top band", 1, 5, PoolKind::Avg, 3, 1, 1, false, true, 15, 11, {0, 5}, 0, 0,
     false},
    {"avg 3x3/1 pad 1 including padding, middle band", 1, 5, PoolKind::Avg, 3, 1, 1, false, true, 15, 11, {5, 10}, 0,
     0, false},
    {"avg 3x3/1 pad 1 including padding, bottom band", 1, 5, PoolKind::Avg, 3, 1, 1, false, true, 15, 11, {10, 15}, 0,
     0, false},
    {"avg 3x3/1 pad 1 excluding padding, unread rows above", 2, 5, PoolKind::Avg, 3, 1, 1, false, false, 15, 11,
     {5, 10}, 3, 0, true},
    {"avg 3x3/2 pad 1 ceil_mode including padding, bottom band", 1, 4, PoolKind::Avg, 3, 2, 1, true, true, 16, 16,
     {5, 9}, 0, 0, false},
    {"avg 3x3/2 pad 1 ceil_mode excluding padding, bottom band", 1, 4, PoolKind::Avg, 3, 2, 1, true, false, 16, 16,
     {5, 9}, 0, 0, false},
    {"max 2x2/2 of a channel slice, batch 2", 2, 6, PoolKind::Max, 2, 2, 0, false, true, 14, 10, {2, 5}, 0, 0, true},
    {"max 3x3/3 pad 1 (the untiled kernel)", 1, 3, PoolKind::Max, 3, 3, 1, false, true, 20, 14, {2, 5}, 0, 0, false},
};

// The rows op: producer k is a band of a 1x1 convolution holding rows [held, held + rows) of a
// tensor `full` rows high (so operands of several heights come straight from the graph).
struct Producer {
  int64_t held, rows, channels;
};
gputest::OpGraph rows_graph(int64_t n, int64_t full, int64_t w, const std::vector<Producer>& ps,
                            const std::function<Value(GraphBuilder&, const std::vector<Value>&)>& body) {
  GraphBuilder b("rows_test", n, full, w);
  Value x = b.input(3);
  b.begin_block("b");
  std::vector<Value> prods;
  for (size_t i = 0; i < ps.size(); ++i) {
    const Op whole = conv_op(ps[i].channels, {1, 1}, {1, 1}, {0, 0}, Activation::None);
    prods.push_back(b.node(strprintf("p%zu", i), band_op(whole, {ps[i].held, ps[i].held + ps[i].rows}, full, 0),
                           {Term{x}}));
  }
  Value out = body(b, prods);
  b.end_block(out);
  gputest::OpGraph og;
  og.g = b.finish();
  og.node = og.g.find(og.g.nodes[size_t(out.node)].name);
  for (size_t i = 0; i < ps.size(); ++i) og.producers.push_back(og.g.find(strprintf("p%zu", i)));
  return og;
}

Op rows_op(int64_t first, int64_t count, int64_t full, std::vector<int64_t> held) {
  Op op = make_op(OpKind::Rows);
  op.attrs = RowsAttrs{first, count, full, std::move(held)};
  return op;
}

// The CPU reference k_rows on operands assembled here, each at its own height (a sum of values
// added in value order from zero, as the CUDA assembly does, so the result is exact).
std::vector<float> cpu_rows(const Graph& g, int v, const std::vector<std::vector<float>>& values) {
  const Node& nd = g.nodes[size_t(v)];
  std::vector<std::vector<float>> operands;
  std::vector<Shape> shapes;
  for (const Term& t : nd.inputs) {
    const Shape s = g.value_shape(t.at(0));
    const int64_t hw = s.h * s.w;
    std::vector<float> buf(size_t(s.numel()), 0.f);
    for (const Value& val : t) {
      const std::vector<float>& src = values[size_t(val.node)];
      const int64_t src_c = g.nodes[size_t(val.node)].shape.c, begin = g.value_begin(val);
      for (int64_t n = 0; n < s.n; ++n) {
        for (int64_t c = 0; c < s.c; ++c) {
          for (int64_t i = 0; i < hw; ++i) {
            buf[size_t((n * s.c + c) * hw + i)] += src[size_t((n * src_c + begin + c) * hw + i)];
          }
        }
      }
    }
    operands.push_back(std::move(buf));
    shapes.push_back(s);
  }
  std::vector<const float*> ptrs;
  for (const auto& o : operands) ptrs.push_back(o.data());
  std::vector<float> y(size_t(nd.shape.numel()));
  exec::cpu::Scratch scratch;
  exec::cpu::run_op(nd.op, ptrs, shapes, nd.shape, y.data(), {}, scratch);
  return y;
}

void check_rows(const gputest::OpGraph& og, std::mt19937& rng, const std::string& what) {
  std::vector<std::vector<float>> values(size_t(og.g.size()));
  for (int p : og.producers) values[size_t(p)] = gputest::random_values(og.g.nodes[size_t(p)].shape.numel(), rng);
  const std::vector<float> ref = cpu_rows(og.g, og.node, values);
  for (exec::Layout l : gputest::kLayouts) {
    cuda::SingleGpuOptions opts;
    opts.math = MathMode::Fp32;
    opts.layout = l;
    const std::vector<float> gpu = cuda::run_single_node(og.g, og.node, values, opts);
    INFO(what << " [" << exec::layout_name(l) << "]: " << gputest::compare(gpu, ref).str());
    CHECK(gpu == ref);  // a copy: bit for bit
  }
}

}  // namespace

TEST_CASE("banded convolutions match the CPU reference with every implementation", "[gpu][ops][rows]") {
  REQUIRE_GPU();
  std::mt19937 rng(2024);
  for (const ConvCase& cc : kConvCases) {
    const Op whole = conv_op(cc.out_c, cc.k, cc.s, cc.p, cc.act, cc.groups, true, cc.d);
    const Band band = band_of(whole, cc.in_full, cc.out, cc.extra_top, cc.extra_bottom);
    const gputest::OpGraph og = band_graph(band, cc.n, cc.c, cc.w, cc.slice);
    REQUIRE(og.g.nodes[size_t(og.node)].shape.h == cc.out.size());
    for (MathMode m : kModes) {
      for (cuda::ConvImpl impl : kImpls) {
        const gputest::OpCheck r = check_op(og, m, rng, impl);
        INFO(cc.what << ", " << rows_str(cc.out) << " of an input of " << cc.in_full << " rows holding "
                     << band.held << " from row " << band.in_first << " [" << cuda::math_mode_name(m) << ", impl "
                     << cuda::conv_impl_name(impl) << "]: " << r.str());
        CHECK(r.err.within(op_tolerance(OpKind::Conv, m)));
      }
    }
  }
}

TEST_CASE("banded pools (max, avg with and without padding, ceil_mode) match the CPU reference", "[gpu][ops][rows]") {
  REQUIRE_GPU();
  std::mt19937 rng(77);
  for (const PoolCase& pc : kPoolCases) {
    const Op whole = pool_op(pc.kind, pc.k, pc.s, pc.p, pc.ceil_mode, pc.include_pad);
    const Band band = band_of(whole, pc.in_full, pc.out, pc.extra_top, pc.extra_bottom);
    const gputest::OpGraph og = band_graph(band, pc.n, pc.c, pc.w, pc.slice);
    REQUIRE(og.g.nodes[size_t(og.node)].shape.h == pc.out.size());
    for (MathMode m : gputest::kStorageModes) {
      const gputest::OpCheck r = check_op(og, m, rng);
      INFO(pc.what << ", " << rows_str(pc.out) << " of an input of " << pc.in_full << " rows holding " << band.held
                   << " from row " << band.in_first << " [" << cuda::math_mode_name(m) << "]: " << r.str());
      CHECK(r.err.within(op_tolerance(OpKind::Pool, m)));
    }
  }
}

TEST_CASE("banded sequential ops (separable convolutions, conv-sigmoid-pool) match the CPU reference",
          "[gpu][ops][rows]") {
  REQUIRE_GPU();
  std::mt19937 rng(31);
  const int64_t c = 12;
  struct SeqCase {
    const char* what;
    std::vector<Op> steps;
    int64_t in_full;
    std::vector<RowRange> bands;
  };
  const std::vector<SeqCase> cases = {
      {"separable 5x5/1 (relu, depthwise, pointwise, twice)",
       {activation_op(Activation::Relu), conv_op(c, {5, 5}, {1, 1}, {2, 2}, Activation::None, c, false),
        conv_op(c, {1, 1}, {1, 1}, {0, 0}, Activation::None, 1, true), activation_op(Activation::Relu),
        conv_op(c, {5, 5}, {1, 1}, {2, 2}, Activation::None, c, false),
        conv_op(20, {1, 1}, {1, 1}, {0, 0}, Activation::None, 1, true)},
       17,
       {{0, 6}, {5, 11}, {11, 17}}},
      {"separable 3x3/2 (relu, depthwise, pointwise)",
       {activation_op(Activation::Relu), conv_op(c, {3, 3}, {2, 2}, {1, 1}, Activation::None, c, false),
        conv_op(16, {1, 1}, {1, 1}, {0, 0}, Activation::None, 1, true)},
       19,
       {{0, 4}, {4, 7}, {7, 10}}},
      {"conv 3x3, sigmoid, ceil_mode avg pool",
       {conv_op(8, {3, 3}, {1, 1}, {1, 1}, Activation::None, 1, true), activation_op(Activation::Sigmoid),
        pool_op(PoolKind::Avg, 3, 2, 1, true, false)},
       10,
       {{0, 2}, {2, 4}, {3, 6}}},
  };
  for (const SeqCase& sc : cases) {
    const Op whole = sequential_op(sc.steps);
    for (RowRange out : sc.bands) {
      const Band band = band_of(whole, sc.in_full, out);
      const gputest::OpGraph og = band_graph(band, 1, c, 15, false);
      REQUIRE(og.g.nodes[size_t(og.node)].shape.h == out.size());
      for (MathMode m : kModes) {
        for (cuda::ConvImpl impl : kImpls) {
          const gputest::OpCheck r = check_op(og, m, rng, impl);
          INFO(sc.what << ", " << rows_str(out) << " [" << cuda::math_mode_name(m) << ", impl "
                       << cuda::conv_impl_name(impl) << "]: " << r.str());
          CHECK(r.err.within(op_tolerance(OpKind::Sequential, m)));
        }
      }
    }
  }
}

TEST_CASE("the rows op matches the CPU reference: overlaps, slices, sums, many operands", "[gpu][ops][rows]") {
  REQUIRE_GPU();
  std::mt19937 rng(8);
  // Two operands overlapping in rows 5-6, which come from the first (16-byte copies: W = 8).
  check_rows(rows_graph(1, 12, 8, {{0, 7, 6}, {5, 7, 6}},
                        [](GraphBuilder& b, const std::vector<Value>& p) {
                          return b.node("rows", rows_op(0, 12, 12, {0, 5}), {Term{p[0]}, Term{p[1]}});
                        }),
             rng, "two overlapping operands");
  // Three operands, the output starting inside the second: rows 2-3 from operand 1, 4-7 from
  // operand 0 (which operand 1 also holds), 8-9 from operand 2 (scalar copies: W = 7).
  check_rows(rows_graph(1, 12, 7, {{4, 4, 5}, {0, 6, 5}, {6, 6, 5}},
                        [](GraphBuilder& b, const std::vector<Value>& p) {
                          return b.node("rows", rows_op(2, 8, 12, {4, 0, 6}), {Term{p[0]}, Term{p[1]}, Term{p[2]}});
                        }),
             rng, "three operands, first wins");
  // Batch 2: a channel slice of a wider tensor (strided) and a sum of two values (assembled).
  check_rows(rows_graph(2, 10, 8, {{0, 6, 9}, {4, 6, 5}, {4, 6, 5}},
                        [](GraphBuilder& b, const std::vector<Value>& p) {
                          return b.node("rows", rows_op(1, 9, 10, {0, 4}),
                                        {Term{GraphBuilder::slice(p[0], 2, 7)}, Term{p[1], p[2]}});
                        }),
             rng, "slice and sum operands, batch 2");
  // A halo cut: two rows out of one operand's band.
  check_rows(rows_graph(2, 14, 5, {{3, 6, 4}},
                        [](GraphBuilder& b, const std::vector<Value>& p) {
                          return b.node("rows", rows_op(7, 2, 14, {3}), {Term{p[0]}});
                        }),
             rng, "halo cut");
  // A gather of 20 one-row operands: more segments than one launch takes.
  std::vector<Producer> ones;
  std::vector<int64_t> held;
  for (int64_t r = 0; r < 20; ++r) {
    ones.push_back({r, 1, 3});
    held.push_back(r);
  }
  check_rows(rows_graph(1, 20, 4, ones,
                        [&](GraphBuilder& b, const std::vector<Value>& p) {
                          std::vector<Term> terms;
                          for (const Value& v : p) terms.push_back(Term{v});
                          return b.node("rows", rows_op(0, 20, 20, held), terms);
                        }),
             rng, "gather of 20 operands");
}

TEST_CASE("row-split graphs on one GPU, captured, match the unsplit graph", "[gpu][rows]") {
  REQUIRE_GPU();
  // Convolutions with and without padding and stride, a ceil_mode max pool, an avg pool without
  // the padding in its divisor, a 7x1 conv, a separable conv of a channel slice, an add, a
  // 1x1/2 shortcut beside a 3x3/2 conv (so a tensor feeds windows of two heights), then a
  // global pool and a linear layer. Split up to "down" (gathered), or through the head's pool
  // (partial pools summed, the linear layer whole).
  GraphBuilder b("bands", 1, 41, 33);
  Value x = b.input(3);
  b.begin_block("stem");
  Value c1 = b.conv("c1", {x}, 8, 3, 2, 0);
  b.end_block(c1);
  b.begin_block("pool");
  Value p1 = b.pool("p1", c1, PoolKind::Max, 3, 2, 0, true);
  b.end_block(p1);
  b.begin_block("mixed");
  Value m1 = b.conv("m1", {p1}, 4, 1, 1, 0);
  Value m3 = b.conv("m3", {p1}, 6, 3, 1, 1);
  Value m7 = b.conv("m7", {m3}, 6, {7, 1}, {1, 1}, {3, 0});
  Value ma = b.pool("ma", p1, PoolKind::Avg, 3, 1, 1, false, false);
  Value cat = b.concat("cat", {m1, m7, ma});
  b.end_block(cat);
  b.begin_block("sep");
  Value s1 = b.sequential("s1", {GraphBuilder::slice(cat, 3, 11)},
                          {activation_op(Activation::Relu),
                           conv_op(8, {3, 3}, {1, 1}, {1, 1}, Activation::None, 8, false),
                           conv_op(8, {1, 1}, {1, 1}, {0, 0}, Activation::None, 1, true)});
  Value sa = b.pool("sa", s1, PoolKind::Avg, 3, 1, 1, false, true);
  Value sum = b.add("sum", {s1, sa});
  b.end_block(sum);
  b.begin_block("down");
  Value d3 = b.conv("d3", {sum}, 8, 3, 2, 1);
  Value d1 = b.conv("d1", {sum}, 8, 1, 2, 0, Activation::None);
  Value dsum = b.add("dsum", {d3, d1});
  b.end_block(dsum);
  b.begin_block("head");
  Value gp = b.pool("gp", dsum, PoolKind::GlobalAvg);
  Value fc = b.linear("fc", gp, 5);
  b.end_block(fc);
  const Graph g = b.finish();

  cuda::SingleGpuOptions opts;
  opts.math = MathMode::Fp32;
  opts.reuse_memory = false;
  cuda::SingleGpuRunner whole(g, opts);
  whole.run();
  const std::vector<float> ref_out = whole.output();
  const std::vector<float> ref_dsum = whole.value(g.find("dsum"));
  const std::vector<std::vector<float>> cpu = gputest::cpu_forward(g);
  CHECK(gputest::compare(ref_out, cpu[size_t(g.output())]).within(1e-4));

  int down = -1;
  for (size_t b = 0; b < g.blocks.size(); ++b) {
    if (g.blocks[b].name == "down") down = int(b);
  }
  REQUIRE(down >= 0);
  for (int parts : {2, 3}) {
    for (SplitMode mode : {SplitMode::Halo, SplitMode::Recompute}) {
      for (exec::Layout layout : gputest::kLayouts) {
        for (bool to_head : {false, true}) {
          SpatialPlan plan;
          for (const auto& run : splittable_runs(g, parts)) {
            const int last = to_head ? run.second : std::min(run.second, down);
            plan.regions.push_back(plan_region(g, run.first, last, parts, mode));
          }
          REQUIRE(!plan.empty());
          const Graph sg = apply_spatial(g, plan);
          INFO(parts << " parts, " << split_mode_name(mode) << ", " << exec::layout_name(layout) << ": "
                     << describe_spatial(g, plan));
          cuda::SingleGpuOptions so = opts;
          so.cuda_graph = true;
          so.layout = layout;
          cuda::SingleGpuRunner split(sg, so);
          split.run();  // captured and replayed
          const std::vector<float> replayed = split.output();
          const gputest::Error e = gputest::compare(replayed, ref_out);
          INFO("output vs unsplit: " << e.str());
          CHECK(e.within(1e-4));
          const int gathered = sg.find("dsum");
          REQUIRE((gathered >= 0) == !to_head);  // through the head, dsum stays in parts
          if (!to_head) {
            const gputest::Error ed = gputest::compare(split.value(gathered), ref_dsum);
            INFO("dsum (gathered from its parts) vs unsplit: " << ed.str());
            CHECK(ed.within(1e-4));
          }
          // The same plans issued eagerly give the replay's result bit for bit.
          split.run_eager();
          CHECK(split.output() == replayed);
          split.run();
          CHECK(split.output() == replayed);
          // With one shared arena the bands sit in place (NHWC): the rows copies become no-ops.
          cuda::SingleGpuOptions shared_opts = so;
          shared_opts.reuse_memory = true;
          cuda::SingleGpuRunner in_place(sg, shared_opts);
          in_place.run();
          INFO(in_place.summary());
          CHECK(gputest::compare(in_place.output(), ref_out).within(1e-4));
        }
      }
    }
  }
  // 16-bit storage through a split ending in partial pools, against the unsplit graph in the
  // same storage: the bands, row copies and partial pools of every type.
  for (MathMode m : {MathMode::Fp16, MathMode::Bf16}) {
    for (exec::Layout layout : gputest::kLayouts) {
      cuda::SingleGpuOptions ho = opts;
      ho.math = m;
      ho.layout = layout;
      cuda::SingleGpuRunner unsplit(g, ho);
      unsplit.run();
      SpatialPlan plan;
      for (const auto& run : splittable_runs(g, 2)) plan.regions.push_back(plan_region(g, run.first, run.second, 2, SplitMode::Halo));
      const Graph sg = apply_spatial(g, plan);
      cuda::SingleGpuRunner split(sg, ho);
      split.run();
      const gputest::Error e = gputest::compare(split.output(), unsplit.output());
      INFO(cuda::math_mode_name(m) << ", " << exec::layout_name(layout) << ": split vs unsplit " << e.str()
                                   << "; vs CPU " << gputest::compare(split.output(), cpu[size_t(g.output())]).str());
      CHECK(e.within(op_tolerance(OpKind::Conv, m)));
      CHECK(gputest::compare(split.output(), cpu[size_t(g.output())]).within(op_tolerance(OpKind::Conv, m) * 2));
    }
  }
}

TEST_CASE("row-split models on one GPU match the unsplit CPU reference", "[gpu][rows][models]") {
  REQUIRE_GPU();
  struct ModelCase {
    const char* name;
    int64_t size;
  };
  // NASNet's separable convolutions (fused ReLU, depthwise bands), Inception's asymmetric
  // kernels and ceil-free pools, ResNet's strided shortcuts, SqueezeNet's ceil_mode pools.
  for (const ModelCase mc : {ModelCase{"inception_v3", 75}, ModelCase{"nasnet_large", 40}, ModelCase{"resnet50", 64},
                             ModelCase{"squeezenet", 64}}) {
    const Graph g = build_model(mc.name, ModelParams{1, mc.size, mc.size});
    const std::vector<std::vector<float>> ref = gputest::cpu_forward(g);
    // The logits: a softmax output saturates.
    int checked = g.output();
    if (g.nodes[size_t(checked)].op.kind == OpKind::Softmax) checked = g.nodes[size_t(checked)].inputs[0][0].node;
    const std::string checked_name = g.nodes[size_t(checked)].name;
    for (int parts : {2, 3}) {
      for (SplitMode mode : {SplitMode::Halo, SplitMode::Recompute}) {
        SpatialPlan plan;
        for (const auto& run : splittable_runs(g, parts)) {
          plan.regions.push_back(plan_region(g, run.first, run.second, parts, mode));
        }
        if (plan.empty()) continue;
        const Graph sg = apply_spatial(g, plan);
        cuda::SingleGpuOptions o;
        o.math = MathMode::Fp32;
        o.reuse_memory = false;
        // Both layouts, one per split mode (each mode's parts read bands of their inputs).
        o.layout = mode == SplitMode::Halo ? exec::Layout::Nhwc : exec::Layout::Nchw;
        cuda::SingleGpuRunner r(sg, o);
        r.run();
        const int node = sg.find(checked_name);
        REQUIRE(node >= 0);
        const gputest::Error e = gputest::compare(r.value(node), ref[size_t(checked)]);
        INFO(mc.name << " @" << mc.size << ", " << parts << " parts, " << split_mode_name(mode) << ", "
                     << exec::layout_name(o.layout) << ": " << e.str());
        CHECK(e.within(1e-4));
      }
    }
  }
}

TEST_CASE("a row-split U-Net (transposed convs, resizes) on one GPU matches the unsplit graph", "[gpu][rows]") {
  REQUIRE_GPU();
  // Bands of transposed convolutions whose pads cuDNN cannot write (cropped from the unpadded
  // result) and of resizes at scales that are not whole numbers (tests/data/row-split-unet.json).
  const Graph g = load_graph(std::string(HIOS_SOURCE_DIR) + "/tests/data/row-split-unet.json");
  const std::vector<std::vector<float>> cpu = gputest::cpu_forward(g);
  for (exec::Layout layout : gputest::kLayouts) {
    cuda::SingleGpuOptions o;
    o.math = MathMode::Fp32;
    o.layout = layout;
    cuda::SingleGpuRunner whole(g, o);
    whole.run();
    CHECK(gputest::compare(whole.output(), cpu[size_t(g.output())]).within(1e-4));
    for (int parts : {2, 3}) {
      for (SplitMode mode : {SplitMode::Halo, SplitMode::Recompute}) {
        const Graph sg = apply_spatial(g, {{plan_region(g, 0, int(g.blocks.size()) - 1, parts, mode)}});
        cuda::SingleGpuOptions so = o;
        so.cuda_graph = true;
        cuda::SingleGpuRunner split(sg, so);
        split.run();
        const gputest::Error e = gputest::compare(split.output(), whole.output());
        INFO(parts << " parts, " << split_mode_name(mode) << ", " << exec::layout_name(layout) << ": " << e.str());
        CHECK(e.within(1e-4));
      }
    }
  }
}
