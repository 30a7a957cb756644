#include "executor/cuda/kernels.hpp"

#include <algorithm>

#include "executor/cuda/check.hpp"

namespace hios::cuda {

namespace {

constexpr int kThreads = 256;

// Enough blocks to fill an H100/H200 several times over; the loops stride over the rest.
int grid_for(int64_t work, int per_thread = 1) {
  int64_t blocks = (work + int64_t(kThreads) * per_thread - 1) / (int64_t(kThreads) * per_thread);
  return int(std::max<int64_t>(1, std::min<int64_t>(blocks, 132 * 16)));
}

// blockIdx.y picks the term, so no thread searches for the range its element falls in.
__global__ void combine_sum_kernel(const __grid_constant__ CombineParams p) {
  const CombineTerm& t = p.terms[blockIdx.y];
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  if (t.vec4) {
    const int64_t len4 = t.len / 4;
    const int64_t total = len4 * p.batch;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += stride) {
      const int64_t n = i / len4, r = (i - n * len4) * 4;
      float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
      for (int s = t.first; s < t.first + t.count; ++s) {
        const float4 v = *reinterpret_cast<const float4*>(p.srcs[s].ptr + n * p.srcs[s].batch_stride + r);
        acc.x += v.x;
        acc.y += v.y;
        acc.z += v.z;
        acc.w += v.w;
      }
      float4* d = reinterpret_cast<float4*>(p.dst + n * p.dst_batch_stride + t.dst_offset + r);
      if (p.accumulate) {
        const float4 o = *d;
        acc.x += o.x;
        acc.y += o.y;
        acc.z += o.z;
        acc.w += o.w;
      }
      *d = acc;
    }
    return;
  }
  const int64_t total = t.len * p.batch;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += stride) {
    const int64_t n = i / t.len, r = i - n * t.len;
    float acc = 0.f;
    for (int s = t.first; s < t.first + t.count; ++s) acc += p.srcs[s].ptr[n * p.srcs[s].batch_stride + r];
    float* d = p.dst + n * p.dst_batch_stride + t.dst_offset + r;
    *d = p.accumulate ? *d + acc : acc;
  }
}

// Every term covers the same range; the result is the product of the terms' sums.
__global__ void combine_product_kernel(const __grid_constant__ CombineParams p) {
  const int64_t len = p.terms[0].len;
  const int64_t total = len * p.batch;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / len, r = i - n * len;
    float prod = 1.f;
    for (int t = 0; t < p.num_terms; ++t) {
      float sum = 0.f;
      for (int s = p.terms[t].first; s < p.terms[t].first + p.terms[t].count; ++s) {
        sum += p.srcs[s].ptr[n * p.srcs[s].batch_stride + r];
      }
      prod *= sum;
    }
    float* d = p.dst + n * p.dst_batch_stride + p.terms[0].dst_offset + r;
    *d = p.accumulate ? *d * prod : prod;
  }
}

// PyTorch's rules: an average's divisor counts the window clipped to the padded input (or to
// the input itself without count_include_pad); a max ignores padding.
__global__ void pool_kernel(const __grid_constant__ PoolParams p) {
  const int64_t total = int64_t(p.n) * p.c * p.oh * p.ow;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int ox = int(i % p.ow);
    const int oy = int((i / p.ow) % p.oh);
    const int64_t nc = i / (int64_t(p.ow) * p.oh);
    const int ch = int(nc % p.c);
    const int64_t b = nc / p.c;
    const float* x = p.x + b * p.x_batch_stride + int64_t(ch) * p.h * p.w;
    int y0 = oy * p.sh - p.ph, x0 = ox * p.sw - p.pw;
    int y1 = min(y0 + p.kh, p.h + p.ph), x1 = min(x0 + p.kw, p.w + p.pw);
    const int padded_area = (y1 - y0) * (x1 - x0);
    y0 = max(y0, 0);
    x0 = max(x0, 0);
    y1 = min(y1, p.h);
    x1 = min(x1, p.w);
    float out;
    if (p.is_max) {
      out = -INFINITY;
      for (int yy = y0; yy < y1; ++yy)
        for (int xx = x0; xx < x1; ++xx) out = fmaxf(out, x[yy * p.w + xx]);
    } else {
      float s = 0.f;
      for (int yy = y0; yy < y1; ++yy)
        for (int xx = x0; xx < x1; ++xx) s += x[yy * p.w + xx];
      const int area = p.count_include_pad ? padded_area : (y1 - y0) * (x1 - x0);
      out = s / float(area);
    }
    p.y[i] = out;
  }
}

}  // namespace

void launch_combine(const CombineParams& p, cudaStream_t stream) {
  if (p.num_terms <= 0) return;
  if (p.mode == CombineMode::Product) {
    combine_product_kernel<<<grid_for(p.terms[0].len * p.batch), kThreads, 0, stream>>>(p);
  } else {
    int64_t most = 0;
    for (int t = 0; t < p.num_terms; ++t) most = std::max(most, p.terms[t].len * p.batch / (p.terms[t].vec4 ? 4 : 1));
    dim3 grid(grid_for(most), p.num_terms);
    combine_sum_kernel<<<grid, kThreads, 0, stream>>>(p);
  }
  HIOS_CUDA_CHECK_LAUNCH();
}

void launch_pool(const PoolParams& p, cudaStream_t stream) {
  const int64_t total = int64_t(p.n) * p.c * p.oh * p.ow;
  if (total <= 0) return;
  pool_kernel<<<grid_for(total), kThreads, 0, stream>>>(p);
  HIOS_CUDA_CHECK_LAUNCH();
}

}  // namespace hios::cuda
