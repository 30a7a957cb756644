#include "executor/cuda/kernels.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_pipeline.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "executor/cuda/check.hpp"

namespace hios::cuda {

namespace {

constexpr int kThreads = 256;

// Loads and stores of one storage type, converting to and from the fp32 the kernels compute
// in; ld4/st4 move 4 neighbouring elements in one access (16 bytes, or 8 in 16-bit types).
// Vector stores go through __stwb (an ordinary write-back store to global memory, which is
// where every kernel's output is): with a plain assignment nvcc split the 16-byte store of
// pool3_tile_kernel into four 4-byte stores, and __stwb always emits the one vector store.
template <class T>
struct Io;
template <>
struct Io<float> {
  __device__ static float ld(const float* p) { return *p; }
  __device__ static void st(float* p, float v) { *p = v; }
  __device__ static void ld4(const float* p, float (&v)[4]) {
    const float4 q = *reinterpret_cast<const float4*>(p);
    v[0] = q.x;
    v[1] = q.y;
    v[2] = q.z;
    v[3] = q.w;
  }
  __device__ static void st4(float* p, const float (&v)[4]) {
    __stwb(reinterpret_cast<float4*>(p), make_float4(v[0], v[1], v[2], v[3]));
  }
  __device__ static void ld2(const float* p, float (&v)[2]) {
    const float2 q = *reinterpret_cast<const float2*>(p);
    v[0] = q.x;
    v[1] = q.y;
  }
  __device__ static void st2(float* p, const float (&v)[2]) { *reinterpret_cast<float2*>(p) = make_float2(v[0], v[1]); }
};
// The two 16-bit types differ only in their conversion intrinsics: these overloads name them,
// and one template (Io16) does the rest for both.
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float2 to_f2(__half2 v) { return __half22float2(v); }
__device__ __forceinline__ float2 to_f2(__nv_bfloat162 v) { return __bfloat1622float2(v); }
__device__ __forceinline__ void from_f(float v, __half* out) { *out = __float2half_rn(v); }
__device__ __forceinline__ void from_f(float v, __nv_bfloat16* out) { *out = __float2bfloat16_rn(v); }
__device__ __forceinline__ __half2 pair_of(float a, float b, __half2*) { return __floats2half2_rn(a, b); }
__device__ __forceinline__ __nv_bfloat162 pair_of(float a, float b, __nv_bfloat162*) {
  return __floats2bfloat162_rn(a, b);
}
// A pair of 16-bit values as the 32-bit word that holds it, element 0 in the low half, and
// back. Vector accesses go through whole words (uint2, uint4): a struct of pairs made nvcc split
// a 16-byte access into two 8-byte loads of four u16 registers, and a store into four 4-byte
// stores (PTX of pool3_tile_kernel), which left the bf16 tile kernel issue-bound (Nsight Compute:
// 3.4 instructions per cycle, ALU the busiest pipe, DRAM at 32%).
__device__ __forceinline__ float2 word_to_f2(uint32_t w, __nv_bfloat162*) {
  // bf16 is the high half of an fp32: widening is a shift, exactly what __bfloat1622float2 gives.
  return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
}
__device__ __forceinline__ float2 word_to_f2(uint32_t w, __half2*) {
  __half2 h;
  __builtin_memcpy(&h, &w, sizeof(w));
  return __half22float2(h);
}
template <class T2>
__device__ __forceinline__ uint32_t word_of(float a, float b) {
  const T2 pair = pair_of(a, b, static_cast<T2*>(nullptr));
  uint32_t w;
  __builtin_memcpy(&w, &pair, sizeof(w));
  return w;
}
template <class T, class T2>
struct Io16 {
  __device__ static float ld(const T* p) { return to_f(*p); }
  __device__ static void st(T* p, float v) { from_f(v, p); }
  template <int N>
  __device__ static void unpack(const uint32_t (&w)[N], float (&v)[2 * N]) {
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const float2 f = word_to_f2(w[k], static_cast<T2*>(nullptr));
      v[2 * k] = f.x;
      v[2 * k + 1] = f.y;
    }
  }
  __device__ static void ld4(const T* p, float (&v)[4]) {
    const uint2 q = *reinterpret_cast<const uint2*>(p);
    unpack<2>({q.x, q.y}, v);
  }
  __device__ static void st4(T* p, const float (&v)[4]) {
    __stwb(reinterpret_cast<uint2*>(p), make_uint2(word_of<T2>(v[0], v[1]), word_of<T2>(v[2], v[3])));
  }
  // 8 elements, 16 bytes: the width at which a 16-bit stream reaches the bandwidth fp32's
  // float4 does (term assembly in bf16 ran at 1.9x its copy time with 8-byte accesses).
  __device__ static void ld8(const T* p, float (&v)[8]) {
    const uint4 q = *reinterpret_cast<const uint4*>(p);
    unpack<4>({q.x, q.y, q.z, q.w}, v);
  }
  __device__ static void st8(T* p, const float (&v)[8]) {
    __stwb(reinterpret_cast<uint4*>(p),
           make_uint4(word_of<T2>(v[0], v[1]), word_of<T2>(v[2], v[3]), word_of<T2>(v[4], v[5]), word_of<T2>(v[6], v[7])));
  }
  __device__ static void ld2(const T* p, float (&v)[2]) {
    const float2 a = to_f2(*reinterpret_cast<const T2*>(p));
    v[0] = a.x;
    v[1] = a.y;
  }
  __device__ static void st2(T* p, const float (&v)[2]) {
    *reinterpret_cast<T2*>(p) = pair_of(v[0], v[1], static_cast<T2*>(nullptr));
  }
};
template <>
struct Io<__half> : Io16<__half, __half2> {};
template <>
struct Io<__nv_bfloat16> : Io16<__nv_bfloat16, __nv_bfloat162> {};
template <class T>
__device__ __forceinline__ float ld(const T* p) {
  return Io<T>::ld(p);
}
template <class T>
__device__ __forceinline__ void st(T* p, float v) {
  Io<T>::st(p, v);
}
// V neighbouring elements (V = 1, 2 or 4; 8 in 16-bit types) in one access; p aligned to V
// elements.
template <int V, class T>
__device__ __forceinline__ void ldv(const T* p, float (&v)[V]) {
  if constexpr (V == 8) {
    Io<T>::ld8(p, v);
  } else if constexpr (V == 4) {
    Io<T>::ld4(p, v);
  } else if constexpr (V == 2) {
    Io<T>::ld2(p, v);
  } else {
    v[0] = Io<T>::ld(p);
  }
}
template <int V, class T>
__device__ __forceinline__ void stv(T* p, const float (&v)[V]) {
  if constexpr (V == 8) {
    Io<T>::st8(p, v);
  } else if constexpr (V == 4) {
    Io<T>::st4(p, v);
  } else if constexpr (V == 2) {
    Io<T>::st2(p, v);
  } else {
    Io<T>::st(p, v[0]);
  }
}
// An optional operand (bias): 0 when absent.
template <class T>
__device__ __forceinline__ float ld_or0(const T* p, int64_t i) {
  return p ? Io<T>::ld(p + i) : 0.f;
}

// Calls f(T{}) for the storage type e: launchers instantiate their kernel per type with it.
template <class F>
void with_elem(Elem e, F&& f) {
  switch (e) {
    case Elem::F32: f(float{}); return;
    case Elem::F16: f(__half{}); return;
    case Elem::BF16: f(__nv_bfloat16{}); return;
  }
}

// Enough blocks to fill an H100/H200 several times over; the loops stride over the rest.
int grid_for(int64_t work, int per_thread = 1) {
  int64_t blocks = (work + int64_t(kThreads) * per_thread - 1) / (int64_t(kThreads) * per_thread);
  return int(std::max<int64_t>(1, std::min<int64_t>(blocks, 132 * 16)));
}

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

// The window of output (oy, ox) clipped to the input, and an average's divisor by PyTorch's
// rules: the window clipped to the padded input, or to the input itself without
// count_include_pad. A max ignores padding. Rows are clipped in the whole tensor's rows (a band
// computes exactly what the whole op computes there) and returned as rows of x (minus i0); the
// graph guarantees that x holds every row a band's windows keep.
struct PoolWindow {
  int y0, x0, y1, x1;
  float divisor;
};

// The divisor is the product of the window's extents along each axis: a window starting at
// `start` (k wide, over an input n long, padded by pad) counts min(start + k, n + pad) - start
// cells of the padded input, or those clipped to the input itself.
__device__ __forceinline__ int pool_extent(int start, int k, int n, int pad, bool padded) {
  const int end = min(start + k, n + pad);
  return padded ? end - start : min(end, n) - max(start, 0);
}

__device__ __forceinline__ PoolWindow pool_window(const PoolParams& p, int oy, int ox) {
  const int y0 = (oy + p.r0) * p.sh - p.ph, x0 = ox * p.sw - p.pw;
  const int y1 = min(y0 + p.kh, p.full_h + p.ph), x1 = min(x0 + p.kw, p.w + p.pw);
  const float divisor = float(pool_extent(y0, p.kh, p.full_h, p.ph, p.count_include_pad) *
                              pool_extent(x0, p.kw, p.w, p.pw, p.count_include_pad));
  return {max(y0, 0) - p.i0, max(x0, 0), min(y1, p.full_h) - p.i0, min(x1, p.w), divisor};
}

// load(yy, xx) reads input row yy, column xx (from global memory or a shared-memory tile).
template <class Load>
__device__ __forceinline__ float pool_reduce(const PoolParams& p, const PoolWindow& w, Load load) {
  if (p.is_max) {
    float out = -INFINITY;
    for (int yy = w.y0; yy < w.y1; ++yy)
      for (int xx = w.x0; xx < w.x1; ++xx) out = fmaxf(out, load(yy, xx));
    return out;
  }
  float sum = 0.f;
  for (int yy = w.y0; yy < w.y1; ++yy)
    for (int xx = w.x0; xx < w.x1; ++xx) sum += load(yy, xx);
  return sum / w.divisor;
}

// NHWC pooling. A thread computes kPoolRun neighbouring outputs of one output row for V
// channels (V = 4: float4 accesses), so each input cell of the run's windows is loaded once
// (a 3x3/1 window: 18 loads for 4 outputs instead of 36); threads run along channels, so a
// warp's loads are contiguous. gridDim.y strides over (batch item, output row), and all index
// arithmetic but the final offsets is 32-bit (64-bit divisions cost more than the loads).
// Sums go over rows, then columns, as pool_reduce does, so both layouts round alike.
constexpr int kPoolRun = 4;
template <class T, int V>
__global__ void pool_nhwc_kernel(const __grid_constant__ PoolParams p) {
  const int groups = p.c / V;
  const int runs = (p.ow + kPoolRun - 1) / kPoolRun;
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= groups * runs) return;
  const int g = t % groups, ox0 = (t / groups) * kPoolRun;
  const int nrun = min(kPoolRun, p.ow - ox0);
  for (int row = blockIdx.y; row < p.n * p.oh; row += gridDim.y) {
    const int oy = row % p.oh, b = row / p.oh;
    float acc[kPoolRun][V];
    PoolWindow win[kPoolRun];
#pragma unroll
    for (int j = 0; j < kPoolRun; ++j) {
      win[j] = pool_window(p, oy, ox0 + min(j, nrun - 1));
#pragma unroll
      for (int k = 0; k < V; ++k) acc[j][k] = p.is_max ? -INFINITY : 0.f;
    }
    const T* xb = static_cast<const T*>(p.x) + int64_t(b) * p.x_batch_stride + g * V;
    for (int yy = win[0].y0; yy < win[0].y1; ++yy) {
      const T* xr = xb + int64_t(yy) * p.w * p.x_pixel_stride;
      for (int xx = win[0].x0; xx < win[nrun - 1].x1; ++xx) {
        float v[V];
        ldv<V>(xr + int64_t(xx) * p.x_pixel_stride, v);
#pragma unroll
        for (int j = 0; j < kPoolRun; ++j) {
          if (j >= nrun || xx < win[j].x0 || xx >= win[j].x1) continue;
#pragma unroll
          for (int k = 0; k < V; ++k) {
            const float e = v[k];
            acc[j][k] = p.is_max ? fmaxf(acc[j][k], e) : acc[j][k] + e;
          }
        }
      }
    }
    T* yr = static_cast<T*>(p.y) + (int64_t(row) * p.ow + ox0) * p.c + g * V;
#pragma unroll
    for (int j = 0; j < kPoolRun; ++j) {
      if (j >= nrun) break;
      if (!p.is_max) {
#pragma unroll
        for (int k = 0; k < V; ++k) acc[j][k] /= win[j].divisor;
      }
      stv<V>(yr + int64_t(j) * p.c, acc[j]);
    }
  }
}

// NHWC 3x3 pooling at stride S (1 or 2), the windows of NASNet's and Inception's pools. A
// thread owns V channels of RUN neighbouring outputs in a row and walks down rows_per_thread
// output rows. Each input row is reduced across its columns once (hr: one value per output of
// the run) and kept while later output rows still need it, so a stride-1 output row costs one
// new input row instead of three: the general kernel above re-reads every row of every window
// and ran at 6x the copy time (nasnet_large at 2048, bf16). Output = rows combined in row order
// over the per-row column reductions, the same for every output wherever its thread starts, so
// a band computes the bits the whole tensor does.
//
// MAX (the pool's kind) is a template argument: as a run-time choice nvcc computed both the max
// and the sum of every element under a predicate, and both took issue slots.
template <class T, int V, int S, int RUN, bool MAX>
__device__ __forceinline__ void pool3_row(const PoolParams& p, const T* xb, int gy, int ix0, float (&hr)[RUN][V]) {
  constexpr int kCols = (RUN - 1) * S + 3;
  const float none = MAX ? -INFINITY : 0.f;  // what a row or column outside the input adds
  if (gy < 0 || gy >= p.full_h) {
#pragma unroll
    for (int j = 0; j < RUN; ++j) {
#pragma unroll
      for (int v = 0; v < V; ++v) hr[j][v] = none;
    }
    return;
  }
  const T* xr = xb + int64_t(gy - p.i0) * p.w * p.x_pixel_stride;
  float xv[kCols][V];
#pragma unroll
  for (int q = 0; q < kCols; ++q) {
    const int xx = ix0 + q;
    if (xx >= 0 && xx < p.w) {
      ldv<V>(xr + int64_t(xx) * p.x_pixel_stride, xv[q]);
    } else {
#pragma unroll
      for (int v = 0; v < V; ++v) xv[q][v] = none;
    }
  }
#pragma unroll
  for (int j = 0; j < RUN; ++j) {
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const float a = xv[j * S][v], b = xv[j * S + 1][v], c = xv[j * S + 2][v];
      hr[j][v] = MAX ? fmaxf(fmaxf(a, b), c) : (a + b) + c;
    }
  }
}

template <class T, int V, int S, int RUN, bool MAX>
__global__ void pool3_nhwc_kernel(const __grid_constant__ PoolParams p, int rows_per_thread) {
  const int groups = p.c / V;
  const int runs = (p.ow + RUN - 1) / RUN;
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= groups * runs) return;
  const int g = t % groups, ox0 = (t / groups) * RUN;
  const int ix0 = ox0 * S - p.pw;
  const int segs = (p.oh + rows_per_thread - 1) / rows_per_thread;
  for (int seg = blockIdx.y; seg < p.n * segs; seg += gridDim.y) {
    const int b = seg / segs, oy0 = (seg % segs) * rows_per_thread;
    const int oy1 = min(p.oh, oy0 + rows_per_thread);
    const T* xb = static_cast<const T*>(p.x) + int64_t(b) * p.x_batch_stride + g * V;
    float h0[RUN][V], h1[RUN][V], h2[RUN][V];
    const int gy0 = (oy0 + p.r0) * S - p.ph;  // global input row of the first window's top
    pool3_row<T, V, S, RUN, MAX>(p, xb, gy0, ix0, h0);
    pool3_row<T, V, S, RUN, MAX>(p, xb, gy0 + 1, ix0, h1);
    pool3_row<T, V, S, RUN, MAX>(p, xb, gy0 + 2, ix0, h2);
    for (int oy = oy0;;) {
      T* yr = static_cast<T*>(p.y) + ((int64_t(b) * p.oh + oy) * p.ow + ox0) * p.c + g * V;
#pragma unroll
      for (int j = 0; j < RUN; ++j) {
        if (ox0 + j >= p.ow) break;
        float o[V];
        if constexpr (MAX) {
#pragma unroll
          for (int v = 0; v < V; ++v) o[v] = fmaxf(fmaxf(h0[j][v], h1[j][v]), h2[j][v]);
        } else {
          // One division per output, then a multiply per channel: V IEEE divisions made the
          // 16-bit tile kernel instruction-bound (Nsight Compute: 70% SM throughput, 26% DRAM).
          const float inv = 1.f / pool_window(p, oy, ox0 + j).divisor;
#pragma unroll
          for (int v = 0; v < V; ++v) o[v] = ((h0[j][v] + h1[j][v]) + h2[j][v]) * inv;
        }
        stv<V>(yr + int64_t(j) * p.c, o);
      }
      if (++oy >= oy1) break;
      const int top = (oy + p.r0) * S - p.ph;
#pragma unroll
      for (int j = 0; j < RUN; ++j) {
#pragma unroll
        for (int v = 0; v < V; ++v) {
          if constexpr (S == 1) {
            h0[j][v] = h1[j][v];
            h1[j][v] = h2[j][v];
          } else {
            h0[j][v] = h2[j][v];
          }
        }
      }
      if constexpr (S == 2) pool3_row<T, V, S, RUN, MAX>(p, xb, top + 1, ix0, h1);
      pool3_row<T, V, S, RUN, MAX>(p, xb, top + 2, ix0, h2);
    }
  }
}

// NHWC 3x3 pooling at stride S through a shared-memory tile. A block covers TH x TW outputs of
// CV 16-byte channel vectors (CV 4: 32 channels in 16-bit storage, 16 in fp32): it stages
// the input patch those windows cover once, with 16-byte loads, then each thread slides down
// RPT output rows of one column, one new input row (stride 1) per output row. The row kernel
// above reaches the same arithmetic through L1, but with one output row per thread on small
// maps (it needs the threads) each input row is fetched three times, and its 8-byte accesses
// in bf16 leave it bound by load instructions: bf16 took as long as fp32 for half the bytes.
// Each output is ((row sums) combined in row order) * (1 / divisor), exactly as pool3_nhwc_kernel
// computes it, so the two give the same bits and a band gives the whole tensor's bits.
constexpr int kPoolTileThreads = 256, kPoolTileRowGroups = 4;
//
// The patch is staged with cp.async: every 16-byte cell of a thread is in flight at once,
// straight into shared memory (a plain loop held one load per thread in flight, each store to
// the tile waiting for its load). MAX as in pool3_row.
template <class T, int S, int RPT, int CV, bool MAX>
__global__ void __launch_bounds__(kPoolTileThreads) pool3_tile_kernel(const __grid_constant__ PoolParams p) {
  constexpr int V = 16 / sizeof(T);  // elements per 16-byte vector
  constexpr int TH = RPT * kPoolTileRowGroups, TW = kPoolTileThreads / kPoolTileRowGroups / CV;
  constexpr int IH = (TH - 1) * S + 3, IW = (TW - 1) * S + 3;
  constexpr int kThreadsPerBlock = CV * TW * kPoolTileRowGroups;
  __shared__ uint4 tile[IH * IW * CV];
  const int oy0 = blockIdx.y * TH, ox0 = blockIdx.x * TW;
  const int vecs = p.c / V, chunks = (vecs + CV - 1) / CV;
  const int b = blockIdx.z / chunks, v0 = (blockIdx.z % chunks) * CV;
  const T* xb = static_cast<const T*>(p.x) + int64_t(b) * p.x_batch_stride;
  const int gy0 = (oy0 + p.r0) * S - p.ph, gx0 = ox0 * S - p.pw;  // the patch's top left, whole-tensor rows
  // What a cell outside the input (or past the channels) holds: nothing a sum or max notices.
  uint4 none;
  {
    T e[V];
#pragma unroll
    for (int k = 0; k < V; ++k) st(&e[k], MAX ? -INFINITY : 0.f);
    __builtin_memcpy(&none, e, sizeof(none));
  }
  // A thread stages cells of one channel vector (the block is a whole number of CV-groups), so
  // the vector's offset and check are made once; a cell's offset is the patch origin's plus a
  // small patch-relative one, one 64-bit multiply per cell (the index arithmetic, not the
  // loads, had made this loop a quarter of the kernel's instructions).
  static_assert(kThreadsPerBlock % CV == 0, "a thread's cells share one channel vector");
  {
    const int cv = threadIdx.x % CV;
    const bool vec_ok = v0 + cv < vecs;
    // The patch origin's offset (outside the input where the patch hangs over its edge).
    const int64_t origin = (int64_t(gy0 - p.i0) * p.w + gx0) * p.x_pixel_stride + int64_t(v0 + cv) * V;
    for (int cell = threadIdx.x / CV; cell < IH * IW; cell += kThreadsPerBlock / CV) {
      const int iy = cell / IW, ix = cell - iy * IW;
      const int gy = gy0 + iy, gx = gx0 + ix;
      uint4* dst = &tile[cell * CV + cv];
      // Rows x holds only: the last row group's patch reaches past a band's last output row,
      // and x may end there (an allocation of exactly those rows), though the tensor does not.
      if (vec_ok && gy >= p.i0 && gy < p.i0 + p.h && gy < p.full_h && gx >= 0 && gx < p.w) {
        __pipeline_memcpy_async(dst, xb + origin + int64_t(iy * p.w + ix) * p.x_pixel_stride, sizeof(uint4));
      } else {
        *dst = none;
      }
    }
  }
  __pipeline_commit();
  __pipeline_wait_prior(0);
  __syncthreads();
  const int cv = threadIdx.x % CV, tx = (threadIdx.x / CV) % TW, rg = threadIdx.x / (CV * TW);
  const int ox = ox0 + tx, vec = v0 + cv;
  if (ox >= p.ow || vec >= vecs) return;
  // The horizontal reduction of patch row r for this thread's column.
  auto row = [&](int r, float (&h)[V]) {
    float a[V], bb[V], c[V];
    const uint4* base = tile + (r * IW + tx * S) * CV + cv;
    ldv<V>(reinterpret_cast<const T*>(base), a);
    ldv<V>(reinterpret_cast<const T*>(base + CV), bb);
    ldv<V>(reinterpret_cast<const T*>(base + 2 * CV), c);
#pragma unroll
    for (int k = 0; k < V; ++k) h[k] = MAX ? fmaxf(fmaxf(a[k], bb[k]), c[k]) : (a[k] + bb[k]) + c[k];
  };
  const int ty0 = rg * RPT;
  // An average's divisor is a row factor times a column factor (pool_window: the window's
  // extent, clipped or padded, in each direction). The column's is fixed for the thread and a
  // 3-row window's row factor is 1, 2 or 3, so the three reciprocals are taken once: the same
  // 1 / divisor as pool_window's, without its arithmetic and a division per output.
  float inv1 = 0.f, inv2 = 0.f, inv3 = 0.f;
  if constexpr (!MAX) {
    const int cols = pool_extent(ox * S - p.pw, 3, p.w, p.pw, p.count_include_pad);
    inv1 = 1.f / float(cols);
    inv2 = 1.f / float(2 * cols);
    inv3 = 1.f / float(3 * cols);
  }
  float h0[V], h1[V], h2[V];
  row(ty0 * S, h0);
  row(ty0 * S + 1, h1);
  row(ty0 * S + 2, h2);
  T* yb = static_cast<T*>(p.y) + int64_t(b) * p.oh * p.ow * p.c + int64_t(vec) * V;
#pragma unroll
  for (int j = 0; j < RPT; ++j) {
    const int oy = oy0 + ty0 + j;
    if (oy >= p.oh) break;
    float o[V];
    if constexpr (MAX) {
#pragma unroll
      for (int k = 0; k < V; ++k) o[k] = fmaxf(fmaxf(h0[k], h1[k]), h2[k]);
    } else {
      const int rows = pool_extent((oy + p.r0) * S - p.ph, 3, p.full_h, p.ph, p.count_include_pad);
      const float inv = rows == 3 ? inv3 : rows == 2 ? inv2 : inv1;  // as the row kernel: same bits
#pragma unroll
      for (int k = 0; k < V; ++k) o[k] = ((h0[k] + h1[k]) + h2[k]) * inv;
    }
    stv<V>(yb + (int64_t(oy) * p.ow + ox) * p.c, o);
    if (j + 1 < RPT) {
      const int top = (ty0 + j + 1) * S;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        if constexpr (S == 1) {
          h0[k] = h1[k];
          h1[k] = h2[k];
        } else {
          h0[k] = h2[k];
        }
      }
      if constexpr (S == 2) row(top + 1, h1);
      row(top + 2, h2);
    }
  }
}

template <class T>
__global__ void pool_kernel(const __grid_constant__ PoolParams p) {
  const int64_t total = int64_t(p.n) * p.c * p.oh * p.ow;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int ox = int(i % p.ow);
    const int oy = int((i / p.ow) % p.oh);
    const int64_t nc = i / (int64_t(p.ow) * p.oh);
    const int ch = int(nc % p.c);
    const int64_t b = nc / p.c;
    const T* x = static_cast<const T*>(p.x) + b * p.x_batch_stride + int64_t(ch) * p.h * p.w;
    st(static_cast<T*>(p.y) + i, pool_reduce(p, pool_window(p, oy, ox), [&](int yy, int xx) { return ld(x + yy * p.w + xx); }));
  }
}

__device__ __forceinline__ float activate(float v, int act) {
  switch (act) {
    case 1: return fmaxf(v, 0.f);
    case 2: return 1.f / (1.f + expf(-v));
    case 3: return tanhf(v);
    case 4: return fminf(fmaxf(v, 0.f), 6.f);  // Relu6
    default: return v;
  }
}

// V elements per access (launch_bias_act picks 8 in 16-bit storage, 4 in fp32, where the
// tensor's size, the pointers and the bias's period allow): the V elements of one access share
// a bias row (NCHW: one plane) or take V consecutive channels (NHWC).
template <class T, int V>
__global__ void bias_act_kernel(const T* x, T* y, const T* bias, int act, int64_t c, int64_t hw, int nhwc,
                                int64_t total) {
  const int64_t accesses = total / V;
  for (int64_t a = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; a < accesses; a += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = a * V;
    float v[V];
    ldv<V>(x + i, v);
    if (bias) {
      if (nhwc) {
        const int64_t ch = i % c;
#pragma unroll
        for (int k = 0; k < V; ++k) v[k] += ld(bias + ch + k);
      } else {
        const float b = ld(bias + (i / hw) % c);
#pragma unroll
        for (int k = 0; k < V; ++k) v[k] += b;
      }
    }
#pragma unroll
    for (int k = 0; k < V; ++k) v[k] = activate(v[k], act);
    stv<V>(y + i, v);
  }
}

// Global pools. NHWC: a block covers 32 channels (one per lane) of one item, its warps take
// every 32nd pixel each and meet in shared memory, so loads along channels are contiguous and
// a 2048-channel map keeps 64 blocks of 1024 threads busy. NCHW: a warp per plane.
constexpr int kGlobalPoolWarps = 32;
template <class T>
__global__ void __launch_bounds__(32 * kGlobalPoolWarps) global_pool_nhwc_kernel(const __grid_constant__ GlobalPoolParams p) {
  __shared__ float part[kGlobalPoolWarps][33];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int ch = blockIdx.x * 32 + lane, b = blockIdx.y;
  float acc = p.is_max ? -INFINITY : 0.f;
  if (ch < p.c) {
    const T* x = static_cast<const T*>(p.x) + int64_t(b) * p.x_batch_stride + ch;
    for (int64_t px = warp; px < p.hw; px += kGlobalPoolWarps) {
      const float v = ld(x + px * p.x_pixel_stride);
      acc = p.is_max ? fmaxf(acc, v) : acc + v;
    }
  }
  part[warp][lane] = acc;
  __syncthreads();
  if (warp != 0 || ch >= p.c) return;
  float r = part[0][lane];
  for (int k = 1; k < kGlobalPoolWarps; ++k) r = p.is_max ? fmaxf(r, part[k][lane]) : r + part[k][lane];
  st(static_cast<T*>(p.y) + int64_t(b) * p.c + ch, p.is_max ? r : r / p.divisor);
}

template <class T>
__global__ void global_pool_nchw_kernel(const __grid_constant__ GlobalPoolParams p) {
  const int lane = threadIdx.x % 32;
  const int64_t plane = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32;
  if (plane >= int64_t(p.n) * p.c) return;
  const int64_t b = plane / p.c, ch = plane - b * p.c;
  const T* x = static_cast<const T*>(p.x) + b * p.x_batch_stride + ch * p.hw;
  float acc = p.is_max ? -INFINITY : 0.f;
  for (int64_t i = lane; i < p.hw; i += 32) {
    const float v = ld(x + i);
    acc = p.is_max ? fmaxf(acc, v) : acc + v;
  }
  for (int off = 16; off > 0; off /= 2) {
    const float o = __shfl_down_sync(0xffffffffu, acc, off);
    acc = p.is_max ? fmaxf(acc, o) : acc + o;
  }
  if (lane == 0) st(static_cast<T*>(p.y) + plane, p.is_max ? acc : acc / p.divisor);
}

// A warp per pixel: the channel maximum, then the sum of exponentials, then the outputs.
template <class T>
__global__ void softmax_kernel(const T* x, T* y, int64_t n, int64_t c, int64_t hw, int nhwc) {
  const int lane = threadIdx.x % 32;
  const int64_t pix = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32;
  if (pix >= n * hw) return;
  const int64_t b = pix / hw, q = pix - b * hw;
  // Element k of this pixel: channel-strided in NCHW, contiguous in NHWC.
  const int64_t base = nhwc ? pix * c : b * c * hw + q, step = nhwc ? 1 : hw;
  float m = -INFINITY;
  for (int64_t k = lane; k < c; k += 32) m = fmaxf(m, ld(x + base + k * step));
  for (int off = 16; off > 0; off /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
  float sum = 0.f;
  for (int64_t k = lane; k < c; k += 32) sum += expf(ld(x + base + k * step) - m);
  for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  for (int64_t k = lane; k < c; k += 32) st(y + base + k * step, expf(ld(x + base + k * step) - m) / sum);
}

template <class S, class D>
__global__ void cast_kernel(const S* src, D* dst, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    st(dst + i, ld(src + i));
  }
}

// One block of kBlockThreads computes a kTileW x kTileH patch of one channel of one item, each
// thread kTileH / kRowsPerPass outputs down a column; the input patch (halo included, ReLU
// applied when asked) is staged in shared memory once and read k*k times. Several outputs per
// thread keep loads in flight: with one, a 5x5 depthwise layer on a 256x256x168 map ran at a
// tenth of the memory bandwidth, waiting on latency wave after wave.
constexpr int kTileW = 32, kTileH = 32, kRowsPerPass = 8, kBlockThreads = kTileW * kRowsPerPass;
template <class T>
__global__ void __launch_bounds__(kBlockThreads) depthwise_kernel(const __grid_constant__ DepthwiseParams p) {
  extern __shared__ float smem[];
  const int tiles_w = (p.ow + kTileW - 1) / kTileW;
  const int ox0 = (blockIdx.x % tiles_w) * kTileW, oy0 = (blockIdx.x / tiles_w) * kTileH;
  const int ch = blockIdx.y, b = blockIdx.z;
  const int ih = (kTileH - 1) * p.sh + p.kh, iw = (kTileW - 1) * p.sw + p.kw;
  float* tile = smem;
  float* wk = smem + ih * iw;
  const T* x = static_cast<const T*>(p.x) + (int64_t(b) * p.c + ch) * p.h * p.w_in;
  const int iy0 = oy0 * p.sh - p.ph, ix0 = ox0 * p.sw - p.pw;
  for (int i = threadIdx.x; i < ih * iw; i += blockDim.x) {
    const int r = i / iw, q = i - r * iw;
    const int yy = iy0 + r, xx = ix0 + q;
    float v = 0.f;
    if (yy >= 0 && yy < p.h && xx >= 0 && xx < p.w_in) {
      v = ld(x + yy * p.w_in + xx);
      if (p.input_relu) v = fmaxf(v, 0.f);
    }
    tile[i] = v;
  }
  for (int i = threadIdx.x; i < p.kh * p.kw; i += blockDim.x) wk[i] = ld(static_cast<const T*>(p.w) + ch * p.kh * p.kw + i);
  __syncthreads();
  const int tx = threadIdx.x % kTileW;
  const int ox = ox0 + tx;
  if (ox >= p.ow) return;
  const float bias = ld_or0(static_cast<const T*>(p.b), ch);
  T* y = static_cast<T*>(p.y) + (int64_t(b) * p.c + ch) * p.oh * p.ow;
  for (int ty = threadIdx.x / kTileW; ty < kTileH; ty += kRowsPerPass) {
    const int oy = oy0 + ty;
    if (oy >= p.oh) break;
    float acc = 0.f;
    const float* base = tile + (ty * p.sh) * iw + tx * p.sw;
    for (int r = 0; r < p.kh; ++r) {
      for (int q = 0; q < p.kw; ++q) acc = fmaf(base[r * iw + q], wk[r * p.kw + q], acc);
    }
    st(y + int64_t(oy) * p.ow + ox, activate(acc + bias, p.act));
  }
}

// NHWC depthwise: a thread computes kDwRun neighbouring outputs of a row for one channel, so a
// window row's input columns are loaded once for all of them; threads run along channels, so
// a warp's loads of one input pixel are contiguous. Weights [c][kh][kw].
constexpr int kDwRun = 4;
template <class T>
__global__ void depthwise_nhwc_kernel(const __grid_constant__ DepthwiseParams p) {
  const int runs = (p.ow + kDwRun - 1) / kDwRun;
  const int64_t total = int64_t(p.n) * p.oh * runs * p.c;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int ch = int(i % p.c);
    int64_t rest = i / p.c;
    const int ox0 = int(rest % runs) * kDwRun;
    rest /= runs;
    const int oy = int(rest % p.oh);
    const int64_t b = rest / p.oh;
    const T* x = static_cast<const T*>(p.x) + b * p.h * int64_t(p.w_in) * p.c + ch;
    const T* wk = static_cast<const T*>(p.w) + int64_t(ch) * p.kh * p.kw;
    float acc[kDwRun] = {0.f, 0.f, 0.f, 0.f};
    const int ix0 = ox0 * p.sw - p.pw;
    for (int r = 0; r < p.kh; ++r) {
      const int yy = oy * p.sh - p.ph + r;
      if (yy < 0 || yy >= p.h) continue;
      const T* xr = x + int64_t(yy) * p.w_in * p.c;
      // Columns ix0 .. ix0 + (kDwRun - 1) * sw + kw - 1 of this row feed the run.
      for (int q = 0; q < p.kw; ++q) {
        const float wv = ld(wk + r * p.kw + q);
#pragma unroll
        for (int j = 0; j < kDwRun; ++j) {
          const int xx = ix0 + j * p.sw + q;
          float v = (xx >= 0 && xx < p.w_in) ? ld(xr + int64_t(xx) * p.c) : 0.f;
          if (p.input_relu) v = fmaxf(v, 0.f);
          acc[j] = fmaf(v, wv, acc[j]);
        }
      }
    }
    const float bias = ld_or0(static_cast<const T*>(p.b), ch);
    T* y = static_cast<T*>(p.y) + ((b * p.oh + oy) * p.ow) * int64_t(p.c) + ch;
#pragma unroll
    for (int j = 0; j < kDwRun; ++j) {
      if (ox0 + j < p.ow) st(y + int64_t(ox0 + j) * p.c, activate(acc[j] + bias, p.act));
    }
  }
}

// The same for a square K x K window and stride S known at compile time: each window row's
// input columns are loaded once into registers (K + (RUN - 1) * S loads for RUN outputs, not
// K * RUN), and the weights live in registers. Accumulation order (rows, then columns) is the
// generic kernel's, so both give the same bits.
template <class T, int K, int S, int RUN>
__global__ void depthwise_nhwc_fixed_kernel(const __grid_constant__ DepthwiseParams p) {
  constexpr int kCols = K + (RUN - 1) * S;
  const int runs = (p.ow + RUN - 1) / RUN;
  const int64_t total = int64_t(p.n) * p.oh * runs * p.c;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int ch = int(i % p.c);
    const int rest = int(i / p.c);  // total / c fits: oh * runs * n is far below 2^31
    const int ox0 = (rest % runs) * RUN;
    const int oy = (rest / runs) % p.oh;
    const int b = rest / (runs * p.oh);
    const T* x = static_cast<const T*>(p.x) + int64_t(b) * p.h * p.w_in * p.c + ch;
    float wk[K * K];
#pragma unroll
    for (int t = 0; t < K * K; ++t) wk[t] = ld(static_cast<const T*>(p.w) + int64_t(ch) * K * K + t);
    float acc[RUN];
#pragma unroll
    for (int j = 0; j < RUN; ++j) acc[j] = 0.f;
    const int ix0 = ox0 * S - p.pw;
#pragma unroll
    for (int r = 0; r < K; ++r) {
      const int yy = oy * S - p.ph + r;
      if (yy < 0 || yy >= p.h) continue;
      const T* xr = x + int64_t(yy) * p.w_in * p.c;
      float xv[kCols];
#pragma unroll
      for (int q = 0; q < kCols; ++q) {
        const int xx = ix0 + q;
        float v = (xx >= 0 && xx < p.w_in) ? ld(xr + int64_t(xx) * p.c) : 0.f;
        xv[q] = p.input_relu ? fmaxf(v, 0.f) : v;
      }
#pragma unroll
      for (int q = 0; q < K; ++q) {
#pragma unroll
        for (int j = 0; j < RUN; ++j) acc[j] = fmaf(xv[j * S + q], wk[r * K + q], acc[j]);
      }
    }
    const float bias = ld_or0(static_cast<const T*>(p.b), ch);
    T* y = static_cast<T*>(p.y) + ((int64_t(b) * p.oh + oy) * p.ow) * p.c + ch;
#pragma unroll
    for (int j = 0; j < RUN; ++j) {
      if (ox0 + j < p.ow) st(y + int64_t(ox0 + j) * p.c, activate(acc[j] + bias, p.act));
    }
  }
}

// The same windows with a tile of ROWS x RUN outputs per thread. Input rows stream through
// once and each adds its products to every output row of the tile whose window holds it, so a
// stride-2 7x7 tile of 4 x 4 outputs loads 13 rows of 13 columns (10.6 loads an output) where
// a row of 4 loads 7 rows of 13 (22.8). The one-row kernel above issued about 2200
// instructions per 4 outputs under Nsight Compute (25% occupancy, 51% issue, 0.89 ms for
// NASNet's 7x7/2 on 96x1023x1023 in bf16, where its bytes take 0.05 ms): per-load
// bounds checks, 64-bit addressing and reloaded weights. Here the columns are checked once per
// tile when the tile is inside the row, and offsets within a row are 32-bit. Each output
// still sums rows, then columns, in order, so the bits are the other kernels'.
// Its bf16 7x7 build takes 144 registers (12% occupancy; 0.98 ms on that layer against 0.37 in
// fp32). A 128-register bound fixed it (0.54 ms), but any bound on the 5x5 builds, or the body
// moved into a __device__ function under two kernels, slowed the others by 15-100%, and
// nasnet_large at 2048 measured best as it is (docs/benchmarks.md, "Depthwise and pool kernels").
template <class T, int K, int S, int RUN, int ROWS>
__global__ void depthwise_nhwc_tile_kernel(const __grid_constant__ DepthwiseParams p) {
  constexpr int kCols = K + (RUN - 1) * S;
  constexpr int kInRows = K + (ROWS - 1) * S;
  const int runs = (p.ow + RUN - 1) / RUN, bands = (p.oh + ROWS - 1) / ROWS;
  const int64_t total = int64_t(p.n) * bands * runs * p.c;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int ch = int(i % p.c);
    const int rest = int(i / p.c);  // n * bands * runs is far below 2^31 (the launcher checks n * oh * ow)
    const int ox0 = (rest % runs) * RUN;
    const int oy0 = ((rest / runs) % bands) * ROWS;
    const int b = rest / (runs * bands);
    float wk[K * K];
#pragma unroll
    for (int t = 0; t < K * K; ++t) wk[t] = ld(static_cast<const T*>(p.w) + int64_t(ch) * K * K + t);
    float acc[ROWS][RUN];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
#pragma unroll
      for (int j = 0; j < RUN; ++j) acc[r][j] = 0.f;
    }
    const int ix0 = ox0 * S - p.pw, iy0 = oy0 * S - p.ph;
    const bool inside = ix0 >= 0 && ix0 + kCols <= p.w_in;
    const T* x = static_cast<const T*>(p.x) + int64_t(b) * p.h * p.w_in * p.c + ch;
#pragma unroll
    for (int t = 0; t < kInRows; ++t) {
      const int yy = iy0 + t;
      if (yy < 0 || yy >= p.h) continue;
      const T* xr = x + (int64_t(yy) * p.w_in + ix0) * p.c;  // column ix0 (may be before the row)
      float xv[kCols];
#pragma unroll
      for (int q = 0; q < kCols; ++q) {
        float v = 0.f;
        if (inside || (ix0 + q >= 0 && ix0 + q < p.w_in)) v = ld(xr + q * p.c);
        xv[q] = p.input_relu ? fmaxf(v, 0.f) : v;
      }
#pragma unroll
      for (int rr = 0; rr < ROWS; ++rr) {
        const int r = t - rr * S;  // this input row's place in output row rr's window
        if (r < 0 || r >= K) continue;
#pragma unroll
        for (int q = 0; q < K; ++q) {
#pragma unroll
          for (int j = 0; j < RUN; ++j) acc[rr][j] = fmaf(xv[j * S + q], wk[r * K + q], acc[rr][j]);
        }
      }
    }
    const float bias = ld_or0(static_cast<const T*>(p.b), ch);
#pragma unroll
    for (int rr = 0; rr < ROWS; ++rr) {
      const int oy = oy0 + rr;
      if (oy >= p.oh) break;
      T* y = static_cast<T*>(p.y) + ((int64_t(b) * p.oh + oy) * p.ow) * p.c + ch;
#pragma unroll
      for (int j = 0; j < RUN; ++j) {
        if (ox0 + j < p.ow) st(y + int64_t(ox0 + j) * p.c, activate(acc[rr][j] + bias, p.act));
      }
    }
  }
}

// Any convolution, one thread per output, in either layout: NCHW threads run along columns,
// NHWC threads along output channels (so neighbouring threads read neighbouring memory);
// weights [oc][c/g][kh][kw] (NCHW) or [oc][kh][kw][c/g] (NHWC). Only the index arithmetic
// depends on the layout; both sum over (kernel row, kernel column, input channel).
template <class T, bool kNhwc>
__global__ void conv_direct_kernel(const __grid_constant__ DirectConvParams p) {
  const T* const xp = static_cast<const T*>(p.x);
  const T* const wp = static_cast<const T*>(p.w);
  const int64_t total = int64_t(p.n) * p.oc * p.oh * p.ow;
  const int cin_g = p.c / p.groups, cout_g = p.oc / p.groups;
  const int64_t plane = int64_t(p.h) * p.w_in;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    int o, ox, oy;
    int64_t b;
    if (kNhwc) {
      o = int(i % p.oc);
      const int64_t pix = i / p.oc;
      ox = int(pix % p.ow);
      oy = int((pix / p.ow) % p.oh);
      b = pix / (int64_t(p.ow) * p.oh);
    } else {
      ox = int(i % p.ow);
      oy = int((i / p.ow) % p.oh);
      const int64_t no = i / (int64_t(p.ow) * p.oh);
      o = int(no % p.oc);
      b = no / p.oc;
    }
    const int64_t c0 = int64_t(o / cout_g) * cin_g;  // the group's first input channel
    float acc = 0.f;
    for (int r = 0; r < p.kh; ++r) {
      const int yy = oy * p.sh - p.ph + r * p.dh;
      if (yy < 0 || yy >= p.h) continue;
      for (int q = 0; q < p.kw; ++q) {
        const int xx = ox * p.sw - p.pw + q * p.dw;
        if (xx < 0 || xx >= p.w_in) continue;
        for (int ic = 0; ic < cin_g; ++ic) {
          const int64_t pixel = int64_t(yy) * p.w_in + xx;
          float v = ld(xp + (kNhwc ? (b * plane + pixel) * p.c + c0 + ic : (b * p.c + c0 + ic) * plane + pixel));
          if (p.input_relu) v = fmaxf(v, 0.f);
          const float wv = ld(wp + (kNhwc ? ((int64_t(o) * p.kh + r) * p.kw + q) * cin_g + ic
                                          : ((int64_t(o) * cin_g + ic) * p.kh + r) * p.kw + q));
          acc = fmaf(v, wv, acc);
        }
      }
    }
    st(static_cast<T*>(p.y) + i, activate(acc + ld_or0(static_cast<const T*>(p.b), o), p.act));
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

// One warp per output feature; lanes stride over the input features, then reduce.
template <class T>
__global__ void linear_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                              T* __restrict__ y, int64_t n, int64_t in, int64_t out, int vec4) {
  const int lane = threadIdx.x % 32;
  const int64_t o = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32;
  if (o >= out) return;
  const T* wr = w + o * in;
  for (int64_t k = 0; k < n; ++k) {
    const T* xr = x + k * in;
    float acc = 0.f;
    if (vec4) {
      for (int64_t i = lane; i < in / 4; i += 32) {
        float a[4], v[4];
        Io<T>::ld4(wr + 4 * i, a);
        Io<T>::ld4(xr + 4 * i, v);
#pragma unroll
        for (int j = 0; j < 4; ++j) acc = fmaf(a[j], v[j], acc);
      }
    } else {
      for (int64_t i = lane; i < in; i += 32) acc = fmaf(ld(wr + i), ld(xr + i), acc);
    }
    for (int off = 16; off > 0; off /= 2) acc += __shfl_down_sync(0xffffffffu, acc, off);
    if (lane == 0) st(y + k * out + o, acc + ld_or0(b, o));
  }
}

template <class T>
__global__ void __launch_bounds__(kBlockThreads) pool_tiled_kernel(const __grid_constant__ PoolParams p) {
  extern __shared__ float smem[];
  const int tiles_w = (p.ow + kTileW - 1) / kTileW;
  const int ox0 = (blockIdx.x % tiles_w) * kTileW, oy0 = (blockIdx.x / tiles_w) * kTileH;
  const int ch = blockIdx.y, b = blockIdx.z;
  const int ih = (kTileH - 1) * p.sh + p.kh, iw = (kTileW - 1) * p.sw + p.kw;
  const T* x = static_cast<const T*>(p.x) + int64_t(b) * p.x_batch_stride + int64_t(ch) * p.h * p.w;
  // The tile's first row, as a row of x (a band's windows start at whole-tensor rows).
  const int iy0 = (oy0 + p.r0) * p.sh - p.ph - p.i0, ix0 = ox0 * p.sw - p.pw;
  for (int i = threadIdx.x; i < ih * iw; i += blockDim.x) {
    const int r = i / iw, q = i - r * iw;
    const int yy = iy0 + r, xx = ix0 + q;
    // Cells outside the input are never read: windows are clipped below.
    smem[i] = (yy >= 0 && yy < p.h && xx >= 0 && xx < p.w) ? ld(x + yy * p.w + xx) : 0.f;
  }
  __syncthreads();
  const int ox = ox0 + threadIdx.x % kTileW;
  if (ox >= p.ow) return;
  T* yc = static_cast<T*>(p.y) + (int64_t(b) * p.c + ch) * p.oh * p.ow;
  for (int ty = threadIdx.x / kTileW; ty < kTileH; ty += kRowsPerPass) {
    const int oy = oy0 + ty;
    if (oy >= p.oh) break;
    st(yc + int64_t(oy) * p.ow + ox, pool_reduce(p, pool_window(p, oy, ox), [&](int yy, int xx) {
      return smem[(yy - iy0) * iw + (xx - ix0)];
    }));
  }
}

}  // namespace

void launch_pool_tiled(const PoolParams& p, cudaStream_t stream) {
  const int tiles = ((p.ow + kTileW - 1) / kTileW) * ((p.oh + kTileH - 1) / kTileH);
  const int ih = (kTileH - 1) * p.sh + p.kh, iw = (kTileW - 1) * p.sw + p.kw;
  with_elem(p.elem, [&](auto tag) {
    using T = decltype(tag);
    pool_tiled_kernel<T><<<dim3(unsigned(tiles), unsigned(p.c), unsigned(p.n)), kBlockThreads,
                           size_t(ih * iw) * sizeof(float), stream>>>(p);
  });
  HIOS_CUDA_CHECK_LAUNCH();
}

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

void launch_bias_act(const void* x, void* y, const void* bias, int act, int64_t n, int64_t c, int64_t hw, int nhwc,
                     Elem elem, cudaStream_t stream) {
  const int64_t total = n * c * hw;
  if (total <= 0 || (!bias && act == 0 && x == y)) return;
  with_elem(elem, [&](auto tag) {
    using T = decltype(tag);
    // The widest access whose V elements stay within one bias period and whose addresses align.
    auto fits = [&](int64_t v) {
      const uintptr_t align = uintptr_t(v) * sizeof(T);
      return total % v == 0 && reinterpret_cast<uintptr_t>(x) % align == 0 &&
             reinterpret_cast<uintptr_t>(y) % align == 0 && (!bias || (nhwc ? c : hw) % v == 0);
    };
    auto go = [&](auto kernel, int64_t v) {
      kernel<<<grid_for(total / v), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y),
                                                           static_cast<const T*>(bias), act, c, hw, nhwc, total);
    };
    if constexpr (sizeof(T) == 2) {
      if (fits(8)) return go(bias_act_kernel<T, 8>, 8);
    }
    if (fits(4)) return go(bias_act_kernel<T, 4>, 4);
    go(bias_act_kernel<T, 1>, 1);
  });
  HIOS_CUDA_CHECK_LAUNCH();
}

void launch_global_pool(const GlobalPoolParams& p, cudaStream_t stream) {
  if (int64_t(p.n) * p.c <= 0) return;
  with_elem(p.elem, [&](auto tag) {
    using T = decltype(tag);
    if (p.nhwc) {
      global_pool_nhwc_kernel<T><<<dim3(unsigned((p.c + 31) / 32), unsigned(p.n)), 32 * kGlobalPoolWarps, 0, stream>>>(p);
    } else {
      const int warps = kThreads / 32;
      global_pool_nchw_kernel<T><<<unsigned((int64_t(p.n) * p.c + warps - 1) / warps), kThreads, 0, stream>>>(p);
    }
  });
  HIOS_CUDA_CHECK_LAUNCH();
}

void launch_softmax(const void* x, void* y, int64_t n, int64_t c, int64_t hw, int nhwc, Elem elem,
                    cudaStream_t stream) {
  const int64_t pixels = n * hw;
  if (pixels <= 0 || c <= 0) return;
  const int warps = kThreads / 32;
  with_elem(elem, [&](auto tag) {
    using T = decltype(tag);
    softmax_kernel<T><<<unsigned((pixels + warps - 1) / warps), kThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(y), n, c, hw, nhwc);
  });
  HIOS_CUDA_CHECK_LAUNCH();
}

void launch_cast(const void* src, Elem src_elem, void* dst, Elem dst_elem, int64_t count, cudaStream_t stream) {
  if (count <= 0) return;
  with_elem(src_elem, [&](auto s_tag) {
    using S = decltype(s_tag);
    with_elem(dst_elem, [&](auto d_tag) {
      using D = decltype(d_tag);
      cast_kernel<S, D><<<grid_for(count), kThreads, 0, stream>>>(static_cast<const S*>(src), static_cast<D*>(dst), count);
    });
  });
  HIOS_CUDA_CHECK_LAUNCH();
}

void launch_depthwise(const DepthwiseParams& p, cudaStream_t stream) {
  with_elem(p.elem, [&](auto tag) {
    using T = decltype(tag);
    if (p.nhwc) {
      // Square windows of NASNet's and MobileNet's sizes get the register-cached kernels: 4 x 4
      // output tiles, or (variant 1) runs of one row.
      auto fixed = [&](auto row_kernel, int run, auto tile_kernel) {
        if (p.variant == 1) {
          const int64_t total = int64_t(p.n) * p.oh * ((p.ow + run - 1) / run) * p.c;
          if (total > 0) row_kernel<<<grid_for(total), kThreads, 0, stream>>>(p);
        } else {
          const int64_t total = int64_t(p.n) * ((p.oh + 3) / 4) * ((p.ow + 3) / 4) * p.c;
          if (total > 0) tile_kernel<<<grid_for(total), kThreads, 0, stream>>>(p);
        }
      };
      // (The fixed kernels index (item, row, run) in 32 bits.)
      const bool small = int64_t(p.n) * p.oh * p.ow <= int64_t(INT32_MAX);
      const int k = small && p.kh == p.kw && p.sh == p.sw ? p.kh * 10 + p.sh : 0;
      switch (k) {
        case 31:
          fixed(depthwise_nhwc_fixed_kernel<T, 3, 1, 8>, 8, depthwise_nhwc_tile_kernel<T, 3, 1, 4, 4>);
          break;
        case 32:
          fixed(depthwise_nhwc_fixed_kernel<T, 3, 2, 4>, 4, depthwise_nhwc_tile_kernel<T, 3, 2, 4, 4>);
          break;
        case 51:
          fixed(depthwise_nhwc_fixed_kernel<T, 5, 1, 8>, 8, depthwise_nhwc_tile_kernel<T, 5, 1, 4, 4>);
          break;
        case 52:
          fixed(depthwise_nhwc_fixed_kernel<T, 5, 2, 4>, 4, depthwise_nhwc_tile_kernel<T, 5, 2, 4, 4>);
          break;
        case 71:
          fixed(depthwise_nhwc_fixed_kernel<T, 7, 1, 8>, 8, depthwise_nhwc_tile_kernel<T, 7, 1, 4, 4>);
          break;
        case 72:
          fixed(depthwise_nhwc_fixed_kernel<T, 7, 2, 4>, 4, depthwise_nhwc_tile_kernel<T, 7, 2, 4, 4>);
          break;
        default: {
          const int64_t total = int64_t(p.n) * p.oh * ((p.ow + kDwRun - 1) / kDwRun) * p.c;
          if (total > 0) depthwise_nhwc_kernel<T><<<grid_for(total), kThreads, 0, stream>>>(p);
        }
      }
      return;
    }
    const int tiles = ((p.ow + kTileW - 1) / kTileW) * ((p.oh + kTileH - 1) / kTileH);
    const int ih = (kTileH - 1) * p.sh + p.kh, iw = (kTileW - 1) * p.sw + p.kw;
    const size_t smem = size_t(ih * iw + p.kh * p.kw) * sizeof(float);
    depthwise_kernel<T><<<dim3(unsigned(tiles), unsigned(p.c), unsigned(p.n)), kBlockThreads, smem, stream>>>(p);
  });
  HIOS_CUDA_CHECK_LAUNCH();
}

void launch_linear(const void* x, const void* w, const void* b, void* y, int64_t n, int64_t in, int64_t out, Elem elem,
                   cudaStream_t stream) {
  const int warps = 8;
  const int vec4 = in % 4 == 0 && vec4_aligned(x, elem) && vec4_aligned(w, elem);
  with_elem(elem, [&](auto tag) {
    using T = decltype(tag);
    linear_kernel<T><<<unsigned((out + warps - 1) / warps), warps * 32, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(b), static_cast<T*>(y), n, in, out,
        vec4);
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

void launch_conv_direct(const DirectConvParams& p, cudaStream_t stream) {
  const int64_t total = int64_t(p.n) * p.oc * p.oh * p.ow;
  if (total <= 0) return;
  with_elem(p.elem, [&](auto tag) {
    using T = decltype(tag);
    if (p.nhwc) {
      conv_direct_kernel<T, true><<<grid_for(total), kThreads, 0, stream>>>(p);
    } else {
      conv_direct_kernel<T, false><<<grid_for(total), kThreads, 0, stream>>>(p);
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

// The 3x3 kernel's launch: V = 4, 2 or 1 channels per thread as C, the strides and the
// pointers allow; rows per thread as many as keep about 2048 threads per SM busy, at most 8.
template <class T, bool MAX>
void launch_pool3_nhwc(const PoolParams& p, cudaStream_t stream) {
  int v = 1;
  for (int cand : {4, 2}) {
    const uintptr_t mask = uintptr_t(cand) * elem_bytes(p.elem) - 1;
    if (p.c % cand == 0 && p.x_pixel_stride % cand == 0 && p.x_batch_stride % cand == 0 &&
        (reinterpret_cast<uintptr_t>(p.x) & mask) == 0 && (reinterpret_cast<uintptr_t>(p.y) & mask) == 0) {
      v = cand;
      break;
    }
  }
  const int run = p.sh == 1 ? 4 : 2;
  const int64_t per_row = int64_t(p.c / v) * ((p.ow + run - 1) / run);
  const int64_t rows = int64_t(p.n) * p.oh;
  const int rows_per_thread = int(std::clamp<int64_t>(per_row * rows / (132 * 2048), 1, 8));
  const dim3 grid(unsigned((per_row + kThreads - 1) / kThreads),
                  unsigned(std::min<int64_t>((rows + rows_per_thread - 1) / rows_per_thread, 65535)));
  auto go = [&](auto kernel) { kernel<<<grid, kThreads, 0, stream>>>(p, rows_per_thread); };
  if (p.sh == 1) {
    if (v == 4) go(pool3_nhwc_kernel<T, 4, 1, 4, MAX>);
    else if (v == 2) go(pool3_nhwc_kernel<T, 2, 1, 4, MAX>);
    else go(pool3_nhwc_kernel<T, 1, 1, 4, MAX>);
  } else {
    if (v == 4) go(pool3_nhwc_kernel<T, 4, 2, 2, MAX>);
    else if (v == 2) go(pool3_nhwc_kernel<T, 2, 2, 2, MAX>);
    else go(pool3_nhwc_kernel<T, 1, 2, 2, MAX>);
  }
}

// The tile kernel needs whole 16-byte vectors: C, the strides and both pointers in multiples of
// one. Rows per thread: 4 (stride 2: 2) where that still gives about four blocks per SM, fewer
// on small maps.
template <class T>
bool pool3_tiles_fit(const PoolParams& p) {
  constexpr int V = 16 / sizeof(T);
  return p.c % V == 0 && p.x_pixel_stride % V == 0 && p.x_batch_stride % V == 0 &&
         (reinterpret_cast<uintptr_t>(p.x) & 15) == 0 && (reinterpret_cast<uintptr_t>(p.y) & 15) == 0;
}
template <class T, int CV, bool MAX>
void launch_pool3_tiles(const PoolParams& p, cudaStream_t stream) {
  constexpr int V = 16 / sizeof(T), TW = kPoolTileThreads / kPoolTileRowGroups / CV;
  const int64_t chunks = (p.c / V + CV - 1) / CV;
  const int64_t cols = (p.ow + TW - 1) / TW;
  auto rows = [&](int rpt) { return (p.oh + rpt * kPoolTileRowGroups - 1) / (rpt * kPoolTileRowGroups); };
  // Stride 2 at 4 rows would stage up to 33 x 33 cells: 70 KB, past the 48 KB of static shared
  // memory.
  int rpt = p.sh == 1 ? 4 : 2;
  while (rpt > 1 && cols * rows(rpt) * chunks * p.n < 4 * 132) rpt /= 2;
  HIOS_CHECK(int64_t(p.n) * chunks <= 65535, "pool: %d items x %lld channel chunks exceed the grid", p.n, (long long)chunks);
  const dim3 grid(unsigned(cols), unsigned(rows(rpt)), unsigned(int64_t(p.n) * chunks));
  auto go = [&](auto kernel) { kernel<<<grid, kPoolTileThreads, 0, stream>>>(p); };
  if (p.sh == 1) {
    if (rpt == 4) go(pool3_tile_kernel<T, 1, 4, CV, MAX>);
    else if (rpt == 2) go(pool3_tile_kernel<T, 1, 2, CV, MAX>);
    else go(pool3_tile_kernel<T, 1, 1, CV, MAX>);
  } else {
    if (rpt == 2) go(pool3_tile_kernel<T, 2, 2, CV, MAX>);
    else go(pool3_tile_kernel<T, 2, 1, CV, MAX>);
  }
}

void launch_pool(const PoolParams& p, cudaStream_t stream) {
  const int64_t total = int64_t(p.n) * p.c * p.oh * p.ow;
  if (total <= 0) return;
  with_elem(p.elem, [&](auto tag) {
    using T = decltype(tag);
    const bool window3 = p.kh == 3 && p.kw == 3 && p.sh == p.sw && (p.sh == 1 || p.sh == 2);
    if (p.nhwc && window3 && p.kernel != PoolKernel::General) {
      // Auto, from what hios-kernel-bench and the models' profiles measured on an H200
      // (docs/benchmarks.md, "The memory-bound kernels within 1.5x of copy time", calls 7 and 9): tiles of 8 vectors per pixel at
      // stride 1 (1.1-1.6x faster than the row kernel in both storage types; as fast where C
      // leaves no 16-byte vectors, which take the row kernel anyway) and at stride 2 on outputs
      // of up to 256 rows (Inception's max pools: 1.30x against 1.44x of copy time in bf16,
      // 1.15x against 1.23x in fp32); the row kernel on larger stride-2 outputs (as fast, or
      // within 5%).
      PoolKernel k = p.kernel;
      if (k == PoolKernel::Auto) {
        const bool tiles = p.sh == 1 || p.oh <= 256;
        k = tiles ? PoolKernel::Tiles3x3Wide : PoolKernel::Rows3x3;
      }
      const bool fit = pool3_tiles_fit<T>(p);
      auto launch = [&](auto max_tag) {
        constexpr bool MAX = decltype(max_tag)::value;
        if (k == PoolKernel::Tiles3x3Wide && fit) {
          launch_pool3_tiles<T, 8, MAX>(p, stream);
        } else if (k == PoolKernel::Tiles3x3 && fit) {
          launch_pool3_tiles<T, 4, MAX>(p, stream);
        } else {
          launch_pool3_nhwc<T, MAX>(p, stream);
        }
      };
      if (p.is_max) {
        launch(std::true_type{});
      } else {
        launch(std::false_type{});
      }
      return;
    }
    if (p.nhwc) {
      const bool vec4 = p.c % 4 == 0 && p.x_pixel_stride % 4 == 0 && p.x_batch_stride % 4 == 0 &&
                        vec4_aligned(p.x, p.elem) && vec4_aligned(p.y, p.elem);
      const int64_t threads = int64_t(vec4 ? p.c / 4 : p.c) * ((p.ow + kPoolRun - 1) / kPoolRun);
      const dim3 grid(unsigned((threads + kThreads - 1) / kThreads),
                      unsigned(std::min<int64_t>(int64_t(p.n) * p.oh, 65535)));
      if (vec4) {
        pool_nhwc_kernel<T, 4><<<grid, kThreads, 0, stream>>>(p);
      } else {
        pool_nhwc_kernel<T, 1><<<grid, kThreads, 0, stream>>>(p);
      }
      return;
    }
    pool_kernel<T><<<grid_for(total), kThreads, 0, stream>>>(p);
  });
  HIOS_CUDA_CHECK_LAUNCH();
}

}  // namespace hios::cuda
