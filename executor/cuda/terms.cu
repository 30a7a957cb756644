// Term assembly: sums, concatenations and products of a node's input terms (combine), the
// rows op that assembles and gathers row bands of a split, and padding.
#include "executor/cuda/kernels.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_pipeline.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "executor/cuda/check.hpp"
#include "executor/cuda/kernel_util.cuh"

namespace hios::cuda {

namespace {

// blockIdx.y picks the term, so no thread searches for the range its element falls in. An
// element's place: batch item n, block r of the term, element e of the block; V elements move
// per access (the term's `vec`).
template <class T, int V>
__device__ __forceinline__ void combine_sum_term(const CombineParams& p, const CombineTerm& t) {
  T* const dst = static_cast<T*>(p.dst);
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t width = t.len / V;  // per block, in accesses
  const int64_t item = width * t.rows;
  const int64_t total = item * p.batch;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += stride) {
    const int64_t n = i / item, rem = i - n * item;
    const int64_t r = rem / width, e = (rem - r * width) * V;
    float acc[V];
#pragma unroll
    for (int k = 0; k < V; ++k) acc[k] = 0.f;
    for (int s = t.first; s < t.first + t.count; ++s) {
      const CombineSrc& src = p.srcs[s];
      float v[V];
      ldv<V>(static_cast<const T*>(src.ptr) + n * src.batch_stride + r * src.row_stride + e, v);
#pragma unroll
      for (int k = 0; k < V; ++k) acc[k] += v[k];
    }
    T* d = dst + n * p.dst_batch_stride + t.dst_offset + r * t.dst_row_stride + e;
    if (p.accumulate) {
      float o[V];
      ldv<V>(d, o);
#pragma unroll
      for (int k = 0; k < V; ++k) acc[k] += o[k];
    }
    if (t.relu) {
#pragma unroll
      for (int k = 0; k < V; ++k) acc[k] = fmaxf(acc[k], 0.f);
    }
    stv<V>(d, acc);
  }
}

template <class T>
__global__ void combine_sum_kernel(const __grid_constant__ CombineParams p) {
  const CombineTerm& t = p.terms[blockIdx.y];
  if constexpr (sizeof(T) == 2) {
    if (t.vec == 8) {
      combine_sum_term<T, 8>(p, t);
      return;
    }
  }
  if (t.vec == 4) {
    combine_sum_term<T, 4>(p, t);
  } else if (t.vec == 2) {
    combine_sum_term<T, 2>(p, t);
  } else {
    combine_sum_term<T, 1>(p, t);
  }
}

// Term assembly a destination row at a time, for NHWC concats whose terms are narrower than a
// wide access: NASNet's stem concatenates 42-channel terms (84 bytes per pixel), which the
// per-term kernel can only move 2 elements (4 bytes) at a time, its writes covering each pixel's
// row in pieces from different blocks (3.2x its copy time, cell_stem_0.out in bf16). Here a
// thread owns V consecutive elements of a destination row, gathers each P-element pair from the
// term that holds it, and writes the V at once. Used when the terms tile every row exactly
// (launch_combine checks); P = 2 needs every term's offset, length, source stride and pointer
// to be even, else 1.
template <class T, int V, int P>
__global__ void combine_rows_kernel(const __grid_constant__ CombineParams p) {
  // The terms in shared memory: threads of a warp look up different terms, which parameter
  // memory would serve one at a time.
  __shared__ CombineTerm terms[kMaxCombineTerms];
  __shared__ CombineSrc srcs[kMaxCombineSrcs];
  for (int i = threadIdx.x; i < p.num_terms; i += blockDim.x) terms[i] = p.terms[i];
  for (int i = threadIdx.x; i < kMaxCombineSrcs; i += blockDim.x) srcs[i] = p.srcs[i];
  __syncthreads();
  T* const dst = static_cast<T*>(p.dst);
  // A thread keeps one V-wide chunk of the row and walks down the rows (of every batch item),
  // so which term each of its pairs comes from is looked up once, not per access.
  const int64_t row_len = terms[0].dst_row_stride, rows = terms[0].rows * p.batch;
  const int64_t per_row = row_len / V;
  const int64_t threads = int64_t(gridDim.x) * blockDim.x, tid = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t row_step = threads / per_row;  // launch_combine_rows makes this at least 1
  if (tid >= row_step * per_row) return;
  const int64_t e0 = (tid % per_row) * V;
  int term_of[V / P];
  {
    int t = 0;
#pragma unroll
    for (int k = 0; k < V / P; ++k) {
      while (e0 + k * P >= terms[t].dst_offset + terms[t].len) ++t;
      term_of[k] = t;
    }
  }
  for (int64_t fr = tid / per_row; fr < rows; fr += row_step) {
    const int64_t n = p.batch == 1 ? 0 : fr / terms[0].rows, r = fr - n * terms[0].rows;
    float out[V];
#pragma unroll
    for (int k = 0; k < V / P; ++k) {
      const CombineTerm& term = terms[term_of[k]];
      const int64_t e = e0 + k * P - term.dst_offset;
      float acc[P];
#pragma unroll
      for (int q = 0; q < P; ++q) acc[q] = 0.f;
      for (int s = term.first; s < term.first + term.count; ++s) {
        float v[P];
        ldv<P>(static_cast<const T*>(srcs[s].ptr) + n * srcs[s].batch_stride + r * srcs[s].row_stride + e, v);
#pragma unroll
        for (int q = 0; q < P; ++q) acc[q] += v[q];
      }
#pragma unroll
      for (int q = 0; q < P; ++q) out[k * P + q] = term.relu ? fmaxf(acc[q], 0.f) : acc[q];
    }
    stv<V>(dst + n * p.dst_batch_stride + r * row_len + e0, out);
  }
}

// The row kernel's widths for p, or {0, 0} where it does not apply: Sum mode without
// accumulation, at least two terms of the same rows (> 1) and row stride, which tile [0, row)
// in order, and a row width V (8 in 16-bit types, 4, 2) that some term's own access width
// (CombineTerm::vec) is below, so that the per-term kernel would move narrower pieces.
std::pair<int, int> combine_rows_widths(const CombineParams& p) {
  if (p.mode != CombineMode::Sum || p.accumulate || p.num_terms < 2) return {0, 0};
  const CombineTerm& t0 = p.terms[0];
  if (t0.rows <= 1) return {0, 0};
  int64_t at = 0;
  int narrowest = 8;
  bool pairs = true;
  auto even = [](int64_t x) { return x % 2 == 0; };
  auto aligned = [&](const void* ptr, int elems) {
    return (reinterpret_cast<uintptr_t>(ptr) & (uintptr_t(elems) * elem_bytes(p.elem) - 1)) == 0;
  };
  for (int i = 0; i < p.num_terms; ++i) {
    const CombineTerm& t = p.terms[i];
    if (t.rows != t0.rows || t.dst_row_stride != t0.dst_row_stride || t.dst_offset != at || t.len <= 0) return {0, 0};
    at += t.len;
    narrowest = std::min(narrowest, t.vec);
    pairs = pairs && even(t.dst_offset) && even(t.len);
    for (int s = t.first; s < t.first + t.count; ++s) {
      pairs = pairs && even(p.srcs[s].row_stride) && (p.batch == 1 || even(p.srcs[s].batch_stride)) &&
              aligned(p.srcs[s].ptr, 2);
    }
  }
  if (at != t0.dst_row_stride) return {0, 0};
  int v = 0;
  for (int cand : {8, 4, 2}) {
    if (cand == 8 && p.elem == Elem::F32) continue;
    if (t0.dst_row_stride % cand == 0 && (p.batch == 1 || p.dst_batch_stride % cand == 0) && aligned(p.dst, cand)) {
      v = cand;
      break;
    }
  }
  if (v == 0 || v <= narrowest) return {0, 0};
  return {v, pairs ? 2 : 1};
}

template <class T>
void launch_combine_rows(const CombineParams& p, int v, int pair, cudaStream_t stream) {
  // At least one thread per chunk of a row (a row of up to 256 x v elements fits one block).
  const int64_t per_row = p.terms[0].dst_row_stride / v;
  const int64_t accesses = per_row * p.terms[0].rows * p.batch;
  const int blocks = std::max<int>(grid_for(accesses), int((per_row + kThreads - 1) / kThreads));
  auto go = [&](auto kernel) { kernel<<<blocks, kThreads, 0, stream>>>(p); };
  if constexpr (sizeof(T) == 2) {
    if (v == 8) {
      if (pair == 2) go(combine_rows_kernel<T, 8, 2>);
      else go(combine_rows_kernel<T, 8, 1>);
      return;
    }
  }
  if (v == 4) {
    if (pair == 2) go(combine_rows_kernel<T, 4, 2>);
    else go(combine_rows_kernel<T, 4, 1>);
  } else {
    if (pair == 2) go(combine_rows_kernel<T, 2, 2>);
    else go(combine_rows_kernel<T, 2, 1>);
  }
}

// Every term covers the same range; the result is the product of the terms' sums.
template <class T>
__global__ void combine_product_kernel(const __grid_constant__ CombineParams p) {
  const CombineTerm& t0 = p.terms[0];
  const int64_t item = t0.len * t0.rows;
  const int64_t total = item * p.batch;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / item, rem = i - n * item;
    const int64_t r = rem / t0.len, e = rem - r * t0.len;
    float prod = 1.f;
    for (int t = 0; t < p.num_terms; ++t) {
      float sum = 0.f;
      for (int s = p.terms[t].first; s < p.terms[t].first + p.terms[t].count; ++s) {
        const CombineSrc& src = p.srcs[s];
        sum += ld(static_cast<const T*>(src.ptr) + n * src.batch_stride + r * src.row_stride + e);
      }
      prod *= sum;
    }
    T* d = static_cast<T*>(p.dst) + n * p.dst_batch_stride + t0.dst_offset + r * t0.dst_row_stride + e;
    st(d, p.accumulate ? ld(d) * prod : prod);
  }
}

// blockIdx.y picks the segment. A copy: elements move as raw bits, 4 at a time where vec4.
template <class T>
__global__ void rows_kernel(const __grid_constant__ RowsParams p) {
  using Raw4 = std::conditional_t<sizeof(T) == 4, uint4, uint2>;
  const RowSegment& s = p.segs[blockIdx.y];
  const T* const src = static_cast<const T*>(s.src);
  T* const dst = static_cast<T*>(p.dst);
  const int64_t planes = p.channels * p.batch;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  if (s.vec4) {
    const int64_t len4 = s.len / 4, total = len4 * planes;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += stride) {
      const int64_t plane = i / len4, r = (i - plane * len4) * 4;
      const int64_t n = plane / p.channels, c = plane - n * p.channels;
      const Raw4 v = *reinterpret_cast<const Raw4*>(src + n * s.src_batch_stride + c * s.src_plane + r);
      *reinterpret_cast<Raw4*>(dst + n * p.dst_batch_stride + c * p.dst_plane + s.dst_offset + r) = v;
    }
    return;
  }
  const int64_t total = s.len * planes;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += stride) {
    const int64_t plane = i / s.len, r = i - plane * s.len;
    const int64_t n = plane / p.channels, c = plane - n * p.channels;
    dst[n * p.dst_batch_stride + c * p.dst_plane + s.dst_offset + r] = src[n * s.src_batch_stride + c * s.src_plane + r];
  }
}

}  // namespace

template <class T>
__global__ void pad_kernel(PadParams p, int64_t total) {
  const T* x = static_cast<const T*>(p.x);
  T* y = static_cast<T*>(p.y);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t n, ch, oy, ox, q;
    if (p.nhwc) {
      ch = i % p.c, q = i / p.c, ox = q % p.ow, q /= p.ow, oy = q % p.oh, n = q / p.oh;
    } else {
      ox = i % p.ow, q = i / p.ow, oy = q % p.oh, q /= p.oh, ch = q % p.c, n = q / p.c;
    }
    const int64_t iy = oy - p.top, ix = ox - p.left;
    float v = p.fill;
    if (iy >= 0 && iy < p.ih && ix >= 0 && ix < p.iw) {
      v = ld(x + (p.nhwc ? ((n * p.ih + iy) * p.iw + ix) * p.c + ch : ((n * p.c + ch) * p.ih + iy) * p.iw + ix));
    }
    st(y + n * p.y_batch_stride + (p.nhwc ? (oy * p.ow + ox) * p.y_pixel_stride + ch : (ch * p.oh + oy) * p.ow + ox), v);
  }
}

void launch_pad(const PadParams& p, cudaStream_t stream) {
  const int64_t total = p.n * p.c * p.oh * p.ow;
  if (total <= 0) return;
  with_elem(p.elem, [&](auto tag) {
    using T = decltype(tag);
    pad_kernel<T><<<grid_for(total), kThreads, 0, stream>>>(p, total);
  });
  HIOS_CUDA_CHECK_LAUNCH();
}

void launch_combine(const CombineParams& p, cudaStream_t stream) {
  if (p.num_terms <= 0) return;
  with_elem(p.elem, [&](auto tag) {
    using T = decltype(tag);
    if (p.mode == CombineMode::Product) {
      combine_product_kernel<T><<<grid_for(p.terms[0].len * p.terms[0].rows * p.batch), kThreads, 0, stream>>>(p);
    } else {
      int64_t most = 0;
      for (int t = 0; t < p.num_terms; ++t) {
        most = std::max(most, p.terms[t].len * p.terms[t].rows * p.batch / std::max(1, p.terms[t].vec));
      }
      const auto [v, pair] = combine_rows_widths(p);
      if (v > 0) {
        launch_combine_rows<T>(p, v, pair, stream);
      } else {
        dim3 grid(grid_for(most), p.num_terms);
        combine_sum_kernel<T><<<grid, kThreads, 0, stream>>>(p);
      }
    }
  });
  HIOS_CUDA_CHECK_LAUNCH();
}

void launch_rows(const RowsParams& p, cudaStream_t stream) {
  if (p.num_segments <= 0) return;
  int64_t most = 0;
  for (int i = 0; i < p.num_segments; ++i) {
    most = std::max(most, p.segs[i].len * p.channels * p.batch / (p.segs[i].vec4 ? 4 : 1));
  }
  if (most <= 0) return;
  with_elem(p.elem, [&](auto tag) {
    using T = decltype(tag);
    rows_kernel<T><<<dim3(unsigned(grid_for(most)), unsigned(p.num_segments)), kThreads, 0, stream>>>(p);
  });
  HIOS_CUDA_CHECK_LAUNCH();
}

}  // namespace hios::cuda
