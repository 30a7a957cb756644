// The convolutions cuDNN does not run well: depthwise (general, NHWC, fixed-size and tiled)
// and a direct convolution for small or odd shapes.
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
      if (p.input_relu) v = relu_keep_nan(v);
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
      const int yy = oy * p.sh - p.ph + r * p.dh;
      if (yy < 0 || yy >= p.h) continue;
      const T* xr = x + int64_t(yy) * p.w_in * p.c;
      // Columns ix0 .. ix0 + (kDwRun - 1) * sw + (kw - 1) * dw of this row feed the run.
      for (int q = 0; q < p.kw; ++q) {
        const float wv = ld(wk + r * p.kw + q);
#pragma unroll
        for (int j = 0; j < kDwRun; ++j) {
          const int xx = ix0 + j * p.sw + q * p.dw;
          float v = (xx >= 0 && xx < p.w_in) ? ld(xr + int64_t(xx) * p.c) : 0.f;
          if (p.input_relu) v = relu_keep_nan(v);
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
        xv[q] = p.input_relu ? relu_keep_nan(v) : v;
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
        xv[q] = p.input_relu ? relu_keep_nan(v) : v;
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
          if (p.input_relu) v = relu_keep_nan(v);
          const float wv = ld(wp + (kNhwc ? ((int64_t(o) * p.kh + r) * p.kw + q) * cin_g + ic
                                          : ((int64_t(o) * cin_g + ic) * p.kh + r) * p.kw + q));
          acc = fmaf(v, wv, acc);
        }
      }
    }
    st(static_cast<T*>(p.y) + i, activate(acc + ld_or0(static_cast<const T*>(p.b), o), p.act));
  }
}

}  // namespace

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
      const int k = small && p.kh == p.kw && p.sh == p.sw && p.dh == 1 && p.dw == 1 ? p.kh * 10 + p.sh : 0;
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

}  // namespace hios::cuda
