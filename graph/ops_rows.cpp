// Row dependence of the op table's convolution-network ops (graph/ops.hpp, OpDef::input_rows
// and output_rows): which input rows a band of output rows reads, and the band ops a row split
// runs (band_op, partial_pool_op). The table in graph/ops.cpp names these functions per op.
#include <algorithm>
#include <vector>

#include "graph/error.hpp"
#include "graph/ops_tensor.hpp"

namespace hios {

static RowRange clip_rows(int64_t begin, int64_t end, int64_t in_h) {
  RowRange r{std::max<int64_t>(begin, 0), std::min<int64_t>(end, in_h)};
  return r.empty() ? RowRange{} : r;
}
// Output row o's window starts at o * stride - pad and spans dilation * (kernel - 1) + 1 rows;
// a ceil_mode window past the input is clipped like the padding.
static RowRange window_rows(RowRange out, int k, int s, int p, int d, int64_t in_h) {
  if (out.empty()) return {};
  return clip_rows(out.begin * s - p, (out.end - 1) * s - p + int64_t(d) * (k - 1) + 1, in_h);
}
RowRange rows_none(const Op&, RowRange, int64_t) { return {}; }
RowRange rows_same(const Op&, RowRange out, int64_t in_h) { return clip_rows(out.begin, out.end, in_h); }
RowRange rows_all(const Op&, RowRange out, int64_t in_h) {
  return out.empty() ? RowRange{} : RowRange{0, in_h};
}
// Output row o of a pad is input row o - top (or padding).
RowRange rows_pad(const Op& op, RowRange out, int64_t in_h) {
  return out.empty() ? RowRange{} : clip_rows(out.begin - op.pad().pads[0], out.end - op.pad().pads[0], in_h);
}
int64_t out_rows_pad(const Op& op, int64_t in_h) { return in_h + op.pad().pads[0] + op.pad().pads[2]; }
RowRange rows_conv(const Op& op, RowRange out, int64_t in_h) {
  const ConvAttrs& a = op.conv();
  return window_rows(out, a.kernel[0], a.stride[0], a.padding[0], a.dilation[0], in_h);
}
RowRange rows_pool(const Op& op, RowRange out, int64_t in_h) {
  const PoolAttrs& a = op.pool();
  if (is_global(a.kind)) return rows_all(op, out, in_h);
  return window_rows(out, a.kernel[0], a.stride[0], a.padding[0], 1, in_h);
}
RowRange window_input_rows(const Op& op, RowRange out, int64_t in_h) {
  return op.kind == OpKind::Conv ? rows_conv(op, out, in_h) : rows_pool(op, out, in_h);
}
int64_t out_rows_same(const Op&, int64_t in_h) { return in_h; }
int64_t out_rows_one(const Op&, int64_t) { return 1; }
int64_t out_rows_conv(const Op& op, int64_t in_h) {
  const ConvAttrs& a = op.conv();
  return window_out(in_h, a.kernel[0], a.stride[0], a.padding[0], a.dilation[0], false);
}
int64_t out_rows_pool(const Op& op, int64_t in_h) {
  const PoolAttrs& a = op.pool();
  return is_global(a.kind) ? 1 : window_out(in_h, a.kernel[0], a.stride[0], a.padding[0], 1, a.ceil_mode);
}
int64_t out_rows_sequential(const Op& op, int64_t in_h) {
  for (const Op& step : op.sequential().steps) in_h = op_def(step.kind).output_rows(step, in_h);
  return in_h;
}
// Backwards through the steps, each reading the rows its successor needs.
RowRange rows_sequential(const Op& op, RowRange out, int64_t in_h) {
  const std::vector<Op>& steps = op.sequential().steps;
  std::vector<int64_t> h{in_h};
  for (const Op& step : steps) h.push_back(op_def(step.kind).output_rows(step, h.back()));
  RowRange r = out;
  for (size_t i = steps.size(); i-- > 0;) r = op_def(steps[i].kind).input_rows(steps[i], r, h[i]);
  return r;
}

RowRange input_rows_op(const Op& op, RowRange out, int64_t in_h) { return op_def(op.kind).input_rows(op, out, in_h); }

const RowWindow& row_window(const Op& op) {
  static const RowWindow kNone;
  if (op.kind == OpKind::Conv) return op.conv().rows;
  if (op.kind == OpKind::Pool) return op.pool().rows;
  if (op.kind == OpKind::Resize) return op.as<ResizeAttrs>().rows;
  return kNone;
}

Op band_op(const Op& op, RowRange out, int64_t in_full, int64_t in_first, RowRange* needed) {
  Op b = op;
  RowRange need = input_rows_op(op, out, in_full);
  if (op.kind == OpKind::Conv || op.kind == OpKind::Pool) {
    RowWindow w{out.begin, out.size(), in_first, in_full};
    if (op.kind == OpKind::Conv) {
      std::get<ConvAttrs>(b.attrs).rows = w;
    } else {
      std::get<PoolAttrs>(b.attrs).rows = w;
    }
  } else if (op.kind == OpKind::Resize) {
    std::get<ResizeAttrs>(b.attrs).rows = RowWindow{out.begin, out.size(), in_first, in_full};
  } else if (op.kind == OpKind::ConvTranspose) {
    // Its input holds exactly the rows it needs (row_split.cpp gives a band of a taller input
    // only to convolutions and pools).
    b = conv_transpose_band(op, out, in_first, need.end - in_first);
  } else if (op.kind == OpKind::Sequential) {
    // Step i reads what step i+1 needs; its input holds exactly those rows, except the first
    // step's, which holds what the node was given.
    std::vector<Op>& steps = std::get<SequentialAttrs>(b.attrs).steps;
    std::vector<int64_t> h{in_full};
    for (const Op& step : steps) h.push_back(op_def(step.kind).output_rows(step, h.back()));
    std::vector<RowRange> want(steps.size() + 1);
    want[steps.size()] = out;
    for (size_t i = steps.size(); i-- > 0;) want[i] = input_rows_op(steps[i], want[i + 1], h[i]);
    for (size_t i = 0; i < steps.size(); ++i) {
      steps[i] = band_op(steps[i], want[i + 1], h[i], i == 0 ? in_first : want[i].begin);
    }
  }
  if (needed) *needed = need;
  return b;
}

Op partial_pool_op(const Op& op, RowRange in_rows, int64_t in_full) {
  HIOS_CHECK(op.kind == OpKind::Pool && op.pool().kind == PoolKind::GlobalAvg,
             "partial_pool_op: '%s' is not a global average pool", describe_op(op).c_str());
  Op b = op;
  std::get<PoolAttrs>(b.attrs).rows = RowWindow{0, 1, in_rows.begin, in_full};
  return b;
}

bool row_local_op(const Op& op) {
  if (op.kind == OpKind::Pool) return !is_global(op.pool().kind);
  if (op.kind == OpKind::Sequential) {
    for (const Op& step : op.sequential().steps) {
      if (!row_local_op(step)) return false;
    }
    return true;
  }
  return op_def(op.kind).row_local;
}

std::vector<RowRange> split_rows(int64_t rows, int parts) {
  HIOS_CHECK(parts >= 1 && rows >= 0, "split_rows: %lld rows into %d parts", (long long)rows, parts);
  std::vector<RowRange> out;
  int64_t at = 0;
  for (int i = 0; i < parts; ++i) {
    const int64_t n = rows / parts + (i < rows % parts ? 1 : 0);
    out.push_back({at, at + n});
    at += n;
  }
  return out;
}

}  // namespace hios
