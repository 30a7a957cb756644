// The CPU reference of the attention op (graph/ops.hpp, AttentionAttrs): per query row, the
// scaled scores against every key plus the mask, a softmax over them and the weighted sum of the
// values, all in double. The softmax follows the softmax op's kernel (tensor_kernels.cpp): the
// largest finite score is subtracted, so a row masked to -infinity throughout gives NaN, and a
// NaN score makes its row NaN, as the chain of nodes it replaces gives. Token-major operands
// ([..., S, H, D]) are read where head h's rows lie in them: the same sums in the same order.
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "executor/cpu/tensor_kernels.hpp"
#include "graph/error.hpp"
#include "graph/ops_tensor.hpp"

namespace hios::exec::cpu {

void attention(const Op& op, const std::vector<TensorArg>& in, const TensorOut& out) {
  const AttentionAttrs& a = op.as<AttentionAttrs>();
  for (const TensorArg& t : in) HIOS_CHECK(t.dtype == DType::F32, "cpu backend: attention of a %s operand", dtype_name(t.dtype));
  HIOS_CHECK(out.dtype == DType::F32, "cpu backend: attention into a %s result", dtype_name(out.dtype));
  // In head-major terms: batch entries b (the leading dims, heads last), rows of each.
  auto head_major = [&](Shape s) {
    if (a.token_major) std::swap(s.dim(s.rank - 3), s.dim(s.rank - 2));
    return s;
  };
  const Shape qs = head_major(in[0].shape), ks = head_major(in[1].shape), vs = head_major(in[2].shape);
  const int r = qs.rank;
  const int64_t sq = qs.dim(r - 2), sk = ks.dim(r - 2), d = qs.dim(r - 1), dv = vs.dim(r - 1);
  const int64_t batch = qs.numel() / (sq * d);
  // Element offsets of batch entry b's row 0 and between rows, per operand of rows of `width`
  // and `rows` rows: head-major [b][row][width], or token-major [lead][row][head][width].
  const int64_t heads = a.token_major ? qs.dim(r - 3) : 1;
  auto base = [&](int64_t b, int64_t rows, int64_t width) {
    return a.token_major ? (b / heads) * rows * heads * width + (b % heads) * width : b * rows * width;
  };
  const int64_t row_step_d = a.token_major ? heads * d : d, row_step_dv = a.token_major ? heads * dv : dv;
  const float *q = static_cast<const float*>(in[0].data), *k = static_cast<const float*>(in[1].data);
  const float* v = static_cast<const float*>(in[2].data);
  float* y = static_cast<float*>(out.data);
  // The mask's element strides along the scores' dims [..., Sq, Sk] (0 where it broadcasts).
  std::vector<int64_t> mask_stride(size_t(r), 0);
  const float* mask = nullptr;
  if (a.mask) {
    mask = static_cast<const float*>(in[3].data);
    const Shape m = with_rank(in[3].shape, r);
    int64_t acc = 1;
    for (int dim = r - 1; dim >= 0; --dim) {
      if (m.dim(dim) != 1) mask_stride[size_t(dim)] = acc;
      acc *= m.dim(dim);
    }
  }
  // Query rows are independent and each one's sums run in a fixed order, so they are spread
  // over threads without changing a bit of the result.
#pragma omp parallel
  {
    std::vector<double> score(static_cast<size_t>(sk)), acc(static_cast<size_t>(dv));
#pragma omp for collapse(2) schedule(static)
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t i = 0; i < sq; ++i) {
        // The mask's offset of this batch entry: its leading index, dim by dim.
        int64_t mask_base = 0;
        for (int64_t rest = b, dim = r - 3; dim >= 0; --dim) {
          mask_base += (rest % qs.dim(int(dim))) * mask_stride[size_t(dim)];
          rest /= qs.dim(int(dim));
        }
        const float *qb = q + base(b, sq, d), *kb = k + base(b, sk, d), *vb = v + base(b, sk, dv);
        double most = -INFINITY;
        for (int64_t j = 0; j < sk; ++j) {
          double s = 0;
          for (int64_t e = 0; e < d; ++e) s += double(qb[i * row_step_d + e]) * double(kb[j * row_step_d + e]);
          s *= a.scale;
          if (mask) s += double(mask[mask_base + i * mask_stride[size_t(r - 2)] + j * mask_stride[size_t(r - 1)]]);
          if (a.causal && j > i) s = -INFINITY;
          score[size_t(j)] = s;
          if (s > most) most = s;
        }
        double sum = 0;
        for (int64_t j = 0; j < sk; ++j) sum += std::exp(score[size_t(j)] - most);
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j < sk; ++j) {
          const double p = std::exp(score[size_t(j)] - most) / sum;
          for (int64_t e = 0; e < dv; ++e) acc[size_t(e)] += p * double(vb[j * row_step_dv + e]);
        }
        float* yr = y + base(b, sq, dv) + i * row_step_dv;
        for (int64_t e = 0; e < dv; ++e) yr[e] = float(acc[size_t(e)]);
      }
    }
  }
}

}  // namespace hios::exec::cpu
