// Pooling: NHWC and NCHW windows (general, 3x3 row-sliding and shared-memory tiles), tiled
// pools, and global average and max pools.
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
      for (int xx = w.x0; xx < w.x1; ++xx) out = max_keep_nan(out, load(yy, xx));
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
            acc[j][k] = p.is_max ? max_keep_nan(acc[j][k], e) : acc[j][k] + e;
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
      hr[j][v] = MAX ? max_keep_nan(max_keep_nan(a, b), c) : (a + b) + c;
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
          for (int v = 0; v < V; ++v) o[v] = max_keep_nan(max_keep_nan(h0[j][v], h1[j][v]), h2[j][v]);
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
    for (int k = 0; k < V; ++k) h[k] = MAX ? max_keep_nan(max_keep_nan(a[k], bb[k]), c[k]) : (a[k] + bb[k]) + c[k];
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
      for (int k = 0; k < V; ++k) o[k] = max_keep_nan(max_keep_nan(h0[k], h1[k]), h2[k]);
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

// Global pools. NHWC: a block covers 32 channels (one per lane) of one item, its warps take
// every 32nd pixel each and meet in shared memory, so loads along channels are contiguous and
// a 2048-channel map keeps 64 blocks of 1024 threads busy. NCHW: a warp per plane.
constexpr int kGlobalPoolWarps = 32;
template <class T>
__global__ void __launch_bounds__(32 * kGlobalPoolWarps) global_pool_nhwc_kernel(const __grid_constant__ GlobalPoolParams p) {
  __shared__ float part[kGlobalPoolWarps][33];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int ch = blockIdx.x * 32 + lane, b = blockIdx.y;
  // Part blockIdx.z of the pixels (all of them when there is one part).
  const int64_t per_part = (p.hw + p.splits - 1) / p.splits;
  const int64_t first = int64_t(blockIdx.z) * per_part, end = first + per_part < p.hw ? first + per_part : p.hw;
  float acc = p.is_max ? -INFINITY : 0.f;
  if (ch < p.c) {
    const T* x = static_cast<const T*>(p.x) + int64_t(b) * p.x_batch_stride + ch;
    for (int64_t px = first + warp; px < end; px += kGlobalPoolWarps) {
      const float v = ld(x + px * p.x_pixel_stride);
      acc = p.is_max ? max_keep_nan(acc, v) : acc + v;
    }
  }
  part[warp][lane] = acc;
  __syncthreads();
  if (warp != 0 || ch >= p.c) return;
  float r = part[0][lane];
  for (int k = 1; k < kGlobalPoolWarps; ++k) r = p.is_max ? max_keep_nan(r, part[k][lane]) : r + part[k][lane];
  if (p.splits > 1) {
    p.partial[(int64_t(b) * p.splits + blockIdx.z) * p.c + ch] = r;
  } else {
    st(static_cast<T*>(p.y) + int64_t(b) * p.c + ch, p.is_max ? r : r / p.divisor);
  }
}

// The parts of a split NHWC global pool, reduced in part order: one thread per item and channel.
template <class T>
__global__ void global_pool_parts_kernel(const __grid_constant__ GlobalPoolParams p) {
  const int64_t total = int64_t(p.n) * p.c;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = i / p.c, ch = i - b * p.c;
    const float* part = p.partial + b * p.splits * p.c + ch;
    float r = part[0];
    for (int s = 1; s < p.splits; ++s) r = p.is_max ? max_keep_nan(r, part[s * p.c]) : r + part[s * p.c];
    st(static_cast<T*>(p.y) + i, p.is_max ? r : r / p.divisor);
  }
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
    acc = p.is_max ? max_keep_nan(acc, v) : acc + v;
  }
  for (int off = 16; off > 0; off /= 2) {
    const float o = __shfl_down_sync(0xffffffffu, acc, off);
    acc = p.is_max ? max_keep_nan(acc, o) : acc + o;
  }
  if (lane == 0) st(static_cast<T*>(p.y) + plane, p.is_max ? acc : acc / p.divisor);
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

int global_pool_splits(int64_t n, int64_t c, int64_t hw) {
  const int64_t blocks = std::max<int64_t>(1, n * ((c + 31) / 32));
  const int64_t want = (4 * 132 + blocks - 1) / blocks;
  return int(std::clamp<int64_t>(std::min(want, hw / 512), 1, 64));
}

void launch_global_pool(const GlobalPoolParams& p, cudaStream_t stream) {
  if (int64_t(p.n) * p.c <= 0) return;
  with_elem(p.elem, [&](auto tag) {
    using T = decltype(tag);
    if (p.nhwc) {
      const int splits = p.partial ? std::max(1, p.splits) : 1;
      GlobalPoolParams q = p;
      q.splits = splits;
      global_pool_nhwc_kernel<T>
          <<<dim3(unsigned((p.c + 31) / 32), unsigned(p.n), unsigned(splits)), 32 * kGlobalPoolWarps, 0, stream>>>(q);
      if (splits > 1) global_pool_parts_kernel<T><<<grid_for(int64_t(p.n) * p.c), kThreads, 0, stream>>>(q);
    } else {
      const int warps = kThreads / 32;
      global_pool_nchw_kernel<T><<<unsigned((int64_t(p.n) * p.c + warps - 1) / warps), kThreads, 0, stream>>>(p);
    }
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
