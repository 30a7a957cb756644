// Row dependence for row splits (docs/row-splits.md): which input rows a band of output rows reads.
#include <algorithm>
#include <set>

#include "graph/error.hpp"
#include "graph/ops.hpp"
#include "tests/catch.hpp"
#include "tests/test_util.hpp"

using namespace hios;

namespace {

Op conv_op(int k, int s, int p, int d) {
  Op op = make_op(OpKind::Conv);
  ConvAttrs& a = std::get<ConvAttrs>(op.attrs);
  a.out_channels = 4;
  a.kernel = {k, k};
  a.stride = {s, s};
  a.padding = {p, p};
  a.dilation = {d, d};
  return op;
}

Op pool_op(int k, int s, int p, bool ceil_mode) {
  Op op = make_op(OpKind::Pool);
  PoolAttrs& a = std::get<PoolAttrs>(op.attrs);
  a.kind = PoolKind::Max;
  a.kernel = {k, k};
  a.stride = {s, s};
  a.padding = {p, p};
  a.ceil_mode = ceil_mode;
  return op;
}

int64_t out_rows(const Op& op, int64_t in_h) {
  InferContext ctx{"t", 1, in_h, in_h};
  return infer_op(op, {Shape{1, 4, in_h, in_h}}, ctx).h;
}

// Every window of every output row in the band, enumerated: the rows it really touches.
std::set<int64_t> touched(int64_t ob, int64_t oe, int k, int s, int p, int d, int64_t in_h) {
  std::set<int64_t> rows;
  for (int64_t o = ob; o < oe; ++o) {
    for (int j = 0; j < k; ++j) {
      const int64_t r = o * s - p + int64_t(d) * j;
      if (r >= 0 && r < in_h) rows.insert(r);
    }
  }
  return rows;
}

void check_band(const Op& op, int k, int s, int p, int d) {
  for (int64_t in_h = 1; in_h <= 13; ++in_h) {
    int64_t oh = 0;
    try {
      oh = out_rows(op, in_h);
    } catch (const Error&) {
      continue;  // too small for this window
    }
    CHECK(op_def(op.kind).output_rows(op, in_h) == oh);  // the table's height agrees with shape inference
    for (int64_t ob = 0; ob < oh; ++ob) {
      for (int64_t oe = ob + 1; oe <= oh; ++oe) {
        INFO("k " << k << " s " << s << " p " << p << " d " << d << " in_h " << in_h << " out [" << ob << ", " << oe
                  << ")");
        const RowRange r = input_rows_op(op, {ob, oe}, in_h);
        const std::set<int64_t> t = touched(ob, oe, k, s, p, d, in_h);
        REQUIRE(r.begin >= 0);
        REQUIRE(r.end <= in_h);
        for (int64_t row : t) REQUIRE((row >= r.begin && row < r.end));
        // Without dilation the windows are solid: the band is exactly what they touch.
        if (d == 1 && !t.empty()) {
          CHECK(r.begin == *t.begin());
          CHECK(r.end == *t.rbegin() + 1);
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("rows: a band of convolution outputs reads the rows under its windows", "[graph][rows]") {
  for (int k : {1, 2, 3, 5, 7}) {
    for (int s : {1, 2, 3}) {
      for (int p = 0; p <= k / 2; ++p) {
        for (int d : {1, 2}) check_band(conv_op(k, s, p, d), k, s, p, d);
      }
    }
  }
}

TEST_CASE("rows: pooling, ceil_mode windows straddling the edge included", "[graph][rows]") {
  for (int k : {2, 3}) {
    for (int s : {1, 2}) {
      for (int p = 0; 2 * p <= k; ++p) {
        for (bool ceil_mode : {false, true}) check_band(pool_op(k, s, p, ceil_mode), k, s, p, 1);
      }
    }
  }
  Op global = make_op(OpKind::Pool);
  std::get<PoolAttrs>(global.attrs).kind = PoolKind::GlobalAvg;
  CHECK(input_rows_op(global, {0, 1}, 17) == RowRange{0, 17});  // every row, and not row-local
  CHECK(!row_local_op(global));
}

TEST_CASE("rows: row-wise ops read their own rows, linear reads everything", "[graph][rows]") {
  for (OpKind k : {OpKind::Activation, OpKind::Add, OpKind::Mul, OpKind::Identity, OpKind::Softmax}) {
    CHECK(input_rows_op(make_op(k), {3, 7}, 10) == RowRange{3, 7});
    CHECK(row_local_op(make_op(k)));
  }
  Op lin = make_op(OpKind::Linear);
  CHECK(input_rows_op(lin, {0, 1}, 9) == RowRange{0, 9});
  CHECK(!row_local_op(lin));
  CHECK(input_rows_op(conv_op(3, 1, 1, 1), {5, 5}, 9).empty());  // an empty band reads nothing
}

TEST_CASE("rows: a sequential reads what its steps read, walked backwards", "[graph][rows]") {
  // Depthwise 3x3 stride 2 pad 1, then pointwise 1x1: output rows [2, 4) of a 16-row input.
  Op seq = make_op(OpKind::Sequential);
  std::get<SequentialAttrs>(seq.attrs).steps = {conv_op(3, 2, 1, 1), conv_op(1, 1, 0, 1)};
  CHECK(input_rows_op(seq, {2, 4}, 16) == RowRange{3, 8});  // rows 2..3 of the middle -> 3..7
  CHECK(row_local_op(seq));
  Op with_global = seq;
  Op g = make_op(OpKind::Pool);
  std::get<PoolAttrs>(g.attrs).kind = PoolKind::GlobalMax;
  std::get<SequentialAttrs>(with_global.attrs).steps.push_back(g);
  CHECK(!row_local_op(with_global));
}

TEST_CASE("rows: split_rows makes contiguous bands as even as possible", "[graph][rows]") {
  for (int64_t rows : {0, 1, 5, 17, 253, 2048}) {
    for (int parts : {1, 2, 3, 7, 8}) {
      const std::vector<RowRange> b = split_rows(rows, parts);
      REQUIRE(int(b.size()) == parts);
      int64_t at = 0, lo = rows, hi = 0;
      for (const RowRange& r : b) {
        CHECK(r.begin == at);
        at = std::max(at, r.end);
        lo = std::min(lo, r.size());
        hi = std::max(hi, r.size());
      }
      CHECK(at == rows);
      CHECK(hi - lo <= 1);
    }
  }
  CHECK(split_rows(5, 2) == std::vector<RowRange>{{0, 3}, {3, 5}});
}

TEST_CASE("rows: a partial global average pool holds a band of its input's rows", "[graph][rows]") {
  Op global = make_op(OpKind::Pool);
  std::get<PoolAttrs>(global.attrs).kind = PoolKind::GlobalAvg;
  const std::string name = "gp@1";
  const InferContext ctx{name, 1, 16, 16};
  // Rows 5..11 of a 12-row tensor: the output is still one value per channel.
  const Op part = partial_pool_op(global, {5, 12}, 12);
  CHECK(row_window(part) == RowWindow{0, 1, 5, 12});
  CHECK(infer_op(part, {Shape{1, 8, 7, 9}}, ctx) == Shape{1, 8, 1, 1});
  CHECK(describe_op(part) == "pool global_avg partial");
  // An input holding rows past the whole tensor, or a window that claims other output rows.
  CHECK(test::contains(test::error_of([&] { (void)infer_op(part, {Shape{1, 8, 8, 9}}, ctx); }),
                       "input rows 5-13 lie outside the whole input's 12 rows"));
  Op shifted = part;
  std::get<PoolAttrs>(shifted.attrs).rows.out_first = 1;
  CHECK(test::contains(test::error_of([&] { (void)infer_op(shifted, {Shape{1, 8, 7, 9}}, ctx); }),
                       "computes output row 0 only"));
  // A global max pool has no partial form: its partials would need an element-wise max.
  Op max_part = part;
  std::get<PoolAttrs>(max_part.attrs).kind = PoolKind::GlobalMax;
  CHECK(test::contains(test::error_of([&] { (void)infer_op(max_part, {Shape{1, 8, 7, 9}}, ctx); }),
                       "global max pool has no partial form"));
  CHECK(test::contains(test::error_of([&] { (void)partial_pool_op(max_part, {0, 3}, 12); }),
                       "not a global average pool"));
  // The window travels in the op's JSON under "rows", like a conv's band; a whole pool has none.
  json j;
  write_op(part, j);
  CHECK(j["rows"] == json{{"out_first", 0}, {"out_count", 1}, {"in_first", 5}, {"in_full", 12}});
  JsonObject o(j, "$");
  const Op back = read_op(o);
  o.finish();
  CHECK(row_window(back) == row_window(part));
  json whole;
  write_op(global, whole);
  CHECK(!whole.contains("rows"));
}
