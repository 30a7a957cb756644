#include "executor/cuda/kernels.hpp"

#include <algorithm>
#include <cstdint>

#include "executor/cuda/check.hpp"

namespace hios::cuda {

namespace {

constexpr int kThreads = 256;

// Enough blocks to fill an H100/H200 several times over; the loops stride over the rest.
int grid_for(int64_t work, int per_thread = 1) {
  int64_t blocks = (work + int64_t(kThreads) * per_thread - 1) / (int64_t(kThreads) * per_thread);
  return int(std::max<int64_t>(1, std::min<int64_t>(blocks, 132 * 16)));
}

// blockIdx.y picks the term, so no thread searches for the range its element falls in. An
// element's place: batch item n, block r of the term, element e of the block.
__global__ void combine_sum_kernel(const __grid_constant__ CombineParams p) {
  const CombineTerm& t = p.terms[blockIdx.y];
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t width = t.vec4 ? t.len / 4 : t.len;  // per block, in accesses
  const int64_t item = width * t.rows;
  const int64_t total = item * p.batch;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += stride) {
    const int64_t n = i / item, rem = i - n * item;
    const int64_t r = rem / width, e = (rem - r * width) * (t.vec4 ? 4 : 1);
    const int64_t dst_at = n * p.dst_batch_stride + t.dst_offset + r * t.dst_row_stride + e;
    if (t.vec4) {
      float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
      for (int s = t.first; s < t.first + t.count; ++s) {
        const CombineSrc& src = p.srcs[s];
        const float4 v = *reinterpret_cast<const float4*>(src.ptr + n * src.batch_stride + r * src.row_stride + e);
        acc.x += v.x;
        acc.y += v.y;
        acc.z += v.z;
        acc.w += v.w;
      }
      float4* d = reinterpret_cast<float4*>(p.dst + dst_at);
      if (p.accumulate) {
        const float4 o = *d;
        acc.x += o.x;
        acc.y += o.y;
        acc.z += o.z;
        acc.w += o.w;
      }
      *d = acc;
    } else {
      float acc = 0.f;
      for (int s = t.first; s < t.first + t.count; ++s) {
        const CombineSrc& src = p.srcs[s];
        acc += src.ptr[n * src.batch_stride + r * src.row_stride + e];
      }
      float* d = p.dst + dst_at;
      *d = p.accumulate ? *d + acc : acc;
    }
  }
}

// Every term covers the same range; the result is the product of the terms' sums.
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
        sum += src.ptr[n * src.batch_stride + r * src.row_stride + e];
      }
      prod *= sum;
    }
    float* d = p.dst + n * p.dst_batch_stride + t0.dst_offset + r * t0.dst_row_stride + e;
    *d = p.accumulate ? *d * prod : prod;
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

__device__ __forceinline__ PoolWindow pool_window(const PoolParams& p, int oy, int ox) {
  int y0 = (oy + p.r0) * p.sh - p.ph, x0 = ox * p.sw - p.pw;
  int y1 = min(y0 + p.kh, p.full_h + p.ph), x1 = min(x0 + p.kw, p.w + p.pw);
  const int padded_area = (y1 - y0) * (x1 - x0);
  y0 = max(y0, 0);
  x0 = max(x0, 0);
  y1 = min(y1, p.full_h);
  x1 = min(x1, p.w);
  const float divisor = float(p.count_include_pad ? padded_area : (y1 - y0) * (x1 - x0));
  return {y0 - p.i0, x0, y1 - p.i0, x1, divisor};
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
template <int V>
struct Vec;
template <>
struct Vec<4> {
  using T = float4;
  __device__ static T load(const float* p) { return *reinterpret_cast<const float4*>(p); }
  __device__ static void store(float* p, const float (&v)[4]) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  }
  __device__ static float get(const T& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }
};
template <>
struct Vec<1> {
  using T = float;
  __device__ static T load(const float* p) { return *p; }
  __device__ static void store(float* p, const float (&v)[1]) { *p = v[0]; }
  __device__ static float get(const T& v, int) { return v; }
};

template <int V>
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
    const float* xb = p.x + int64_t(b) * p.x_batch_stride + g * V;
    for (int yy = win[0].y0; yy < win[0].y1; ++yy) {
      const float* xr = xb + int64_t(yy) * p.w * p.x_pixel_stride;
      for (int xx = win[0].x0; xx < win[nrun - 1].x1; ++xx) {
        const typename Vec<V>::T v = Vec<V>::load(xr + int64_t(xx) * p.x_pixel_stride);
#pragma unroll
        for (int j = 0; j < kPoolRun; ++j) {
          if (j >= nrun || xx < win[j].x0 || xx >= win[j].x1) continue;
#pragma unroll
          for (int k = 0; k < V; ++k) {
            const float e = Vec<V>::get(v, k);
            acc[j][k] = p.is_max ? fmaxf(acc[j][k], e) : acc[j][k] + e;
          }
        }
      }
    }
    float* yr = p.y + (int64_t(row) * p.ow + ox0) * p.c + g * V;
#pragma unroll
    for (int j = 0; j < kPoolRun; ++j) {
      if (j >= nrun) break;
      if (!p.is_max) {
#pragma unroll
        for (int k = 0; k < V; ++k) acc[j][k] /= win[j].divisor;
      }
      Vec<V>::store(yr + int64_t(j) * p.c, acc[j]);
    }
  }
}

__global__ void pool_kernel(const __grid_constant__ PoolParams p) {
  const int64_t total = int64_t(p.n) * p.c * p.oh * p.ow;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int ox = int(i % p.ow);
    const int oy = int((i / p.ow) % p.oh);
    const int64_t nc = i / (int64_t(p.ow) * p.oh);
    const int ch = int(nc % p.c);
    const int64_t b = nc / p.c;
    const float* x = p.x + b * p.x_batch_stride + int64_t(ch) * p.h * p.w;
    p.y[i] = pool_reduce(p, pool_window(p, oy, ox), [&](int yy, int xx) { return x[yy * p.w + xx]; });
  }
}

__device__ __forceinline__ float activate(float v, int act) {
  switch (act) {
    case 1: return fmaxf(v, 0.f);
    case 2: return 1.f / (1.f + expf(-v));
    case 3: return tanhf(v);
    default: return v;
  }
}

__global__ void bias_act_kernel(const float* x, float* y, const float* bias, int act, int64_t c, int64_t hw,
                                int nhwc, int64_t total) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    float v = x[i];
    if (bias) v += bias[nhwc ? i % c : (i / hw) % c];
    y[i] = activate(v, act);
  }
}

// One block of kBlockThreads computes a kTileW x kTileH patch of one channel of one item, each
// thread kTileH / kRowsPerPass outputs down a column; the input patch (halo included, ReLU
// applied when asked) is staged in shared memory once and read k*k times. Several outputs per
// thread keep loads in flight: with one, a 5x5 depthwise layer on a 256x256x168 map ran at a
// tenth of the memory bandwidth, waiting on latency wave after wave.
constexpr int kTileW = 32, kTileH = 32, kRowsPerPass = 8, kBlockThreads = kTileW * kRowsPerPass;
__global__ void __launch_bounds__(kBlockThreads) depthwise_kernel(const __grid_constant__ DepthwiseParams p) {
  extern __shared__ float smem[];
  const int tiles_w = (p.ow + kTileW - 1) / kTileW;
  const int ox0 = (blockIdx.x % tiles_w) * kTileW, oy0 = (blockIdx.x / tiles_w) * kTileH;
  const int ch = blockIdx.y, b = blockIdx.z;
  const int ih = (kTileH - 1) * p.sh + p.kh, iw = (kTileW - 1) * p.sw + p.kw;
  float* tile = smem;
  float* wk = smem + ih * iw;
  const float* x = p.x + (int64_t(b) * p.c + ch) * p.h * p.w_in;
  const int iy0 = oy0 * p.sh - p.ph, ix0 = ox0 * p.sw - p.pw;
  for (int i = threadIdx.x; i < ih * iw; i += blockDim.x) {
    const int r = i / iw, q = i - r * iw;
    const int yy = iy0 + r, xx = ix0 + q;
    float v = 0.f;
    if (yy >= 0 && yy < p.h && xx >= 0 && xx < p.w_in) {
      v = x[yy * p.w_in + xx];
      if (p.input_relu) v = fmaxf(v, 0.f);
    }
    tile[i] = v;
  }
  for (int i = threadIdx.x; i < p.kh * p.kw; i += blockDim.x) wk[i] = p.w[ch * p.kh * p.kw + i];
  __syncthreads();
  const int tx = threadIdx.x % kTileW;
  const int ox = ox0 + tx;
  if (ox >= p.ow) return;
  const float bias = p.b ? p.b[ch] : 0.f;
  float* y = p.y + (int64_t(b) * p.c + ch) * p.oh * p.ow;
  for (int ty = threadIdx.x / kTileW; ty < kTileH; ty += kRowsPerPass) {
    const int oy = oy0 + ty;
    if (oy >= p.oh) break;
    float acc = 0.f;
    const float* base = tile + (ty * p.sh) * iw + tx * p.sw;
    for (int r = 0; r < p.kh; ++r) {
      for (int q = 0; q < p.kw; ++q) acc = fmaf(base[r * iw + q], wk[r * p.kw + q], acc);
    }
    y[int64_t(oy) * p.ow + ox] = activate(acc + bias, p.act);
  }
}

// NHWC depthwise: a thread computes kDwRun neighbouring outputs of a row for one channel, so a
// window row's input columns are loaded once for all of them; threads run along channels, so
// a warp's loads of one input pixel are contiguous. Weights [c][kh][kw].
constexpr int kDwRun = 4;
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
    const float* x = p.x + b * p.h * int64_t(p.w_in) * p.c + ch;
    const float* wk = p.w + int64_t(ch) * p.kh * p.kw;
    float acc[kDwRun] = {0.f, 0.f, 0.f, 0.f};
    const int ix0 = ox0 * p.sw - p.pw;
    for (int r = 0; r < p.kh; ++r) {
      const int yy = oy * p.sh - p.ph + r;
      if (yy < 0 || yy >= p.h) continue;
      const float* xr = x + int64_t(yy) * p.w_in * p.c;
      // Columns ix0 .. ix0 + (kDwRun - 1) * sw + kw - 1 of this row feed the run.
      for (int q = 0; q < p.kw; ++q) {
        const float wv = wk[r * p.kw + q];
#pragma unroll
        for (int j = 0; j < kDwRun; ++j) {
          const int xx = ix0 + j * p.sw + q;
          float v = (xx >= 0 && xx < p.w_in) ? xr[int64_t(xx) * p.c] : 0.f;
          if (p.input_relu) v = fmaxf(v, 0.f);
          acc[j] = fmaf(v, wv, acc[j]);
        }
      }
    }
    const float bias = p.b ? p.b[ch] : 0.f;
    float* y = p.y + ((b * p.oh + oy) * p.ow) * int64_t(p.c) + ch;
#pragma unroll
    for (int j = 0; j < kDwRun; ++j) {
      if (ox0 + j < p.ow) y[int64_t(ox0 + j) * p.c] = activate(acc[j] + bias, p.act);
    }
  }
}

// The same for a square K x K window and stride S known at compile time: each window row's
// input columns are loaded once into registers (K + (RUN - 1) * S loads for RUN outputs, not
// K * RUN), and the weights live in registers. Accumulation order (rows, then columns) is the
// generic kernel's, so both give the same bits.
template <int K, int S, int RUN>
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
    const float* x = p.x + int64_t(b) * p.h * p.w_in * p.c + ch;
    float wk[K * K];
#pragma unroll
    for (int t = 0; t < K * K; ++t) wk[t] = p.w[int64_t(ch) * K * K + t];
    float acc[RUN];
#pragma unroll
    for (int j = 0; j < RUN; ++j) acc[j] = 0.f;
    const int ix0 = ox0 * S - p.pw;
#pragma unroll
    for (int r = 0; r < K; ++r) {
      const int yy = oy * S - p.ph + r;
      if (yy < 0 || yy >= p.h) continue;
      const float* xr = x + int64_t(yy) * p.w_in * p.c;
      float xv[kCols];
#pragma unroll
      for (int q = 0; q < kCols; ++q) {
        const int xx = ix0 + q;
        float v = (xx >= 0 && xx < p.w_in) ? xr[int64_t(xx) * p.c] : 0.f;
        xv[q] = p.input_relu ? fmaxf(v, 0.f) : v;
      }
#pragma unroll
      for (int q = 0; q < K; ++q) {
#pragma unroll
        for (int j = 0; j < RUN; ++j) acc[j] = fmaf(xv[j * S + q], wk[r * K + q], acc[j]);
      }
    }
    const float bias = p.b ? p.b[ch] : 0.f;
    float* y = p.y + ((int64_t(b) * p.oh + oy) * p.ow) * p.c + ch;
#pragma unroll
    for (int j = 0; j < RUN; ++j) {
      if (ox0 + j < p.ow) y[int64_t(ox0 + j) * p.c] = activate(acc[j] + bias, p.act);
    }
  }
}

// Any convolution, one thread per output, in either layout: NCHW threads run along columns,
// NHWC threads along output channels (so neighbouring threads read neighbouring memory);
// weights [oc][c/g][kh][kw] (NCHW) or [oc][kh][kw][c/g] (NHWC). Only the index arithmetic
// depends on the layout; both sum over (kernel row, kernel column, input channel).
template <bool kNhwc>
__global__ void conv_direct_kernel(const __grid_constant__ DirectConvParams p) {
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
          float v = kNhwc ? p.x[(b * plane + pixel) * p.c + c0 + ic] : p.x[(b * p.c + c0 + ic) * plane + pixel];
          if (p.input_relu) v = fmaxf(v, 0.f);
          const float wv = kNhwc ? p.w[((int64_t(o) * p.kh + r) * p.kw + q) * cin_g + ic]
                                 : p.w[((int64_t(o) * cin_g + ic) * p.kh + r) * p.kw + q];
          acc = fmaf(v, wv, acc);
        }
      }
    }
    p.y[i] = activate(acc + (p.b ? p.b[o] : 0.f), p.act);
  }
}

// blockIdx.y picks the segment.
__global__ void rows_kernel(const __grid_constant__ RowsParams p) {
  const RowSegment& s = p.segs[blockIdx.y];
  const int64_t planes = p.channels * p.batch;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  if (s.vec4) {
    const int64_t len4 = s.len / 4, total = len4 * planes;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += stride) {
      const int64_t plane = i / len4, r = (i - plane * len4) * 4;
      const int64_t n = plane / p.channels, c = plane - n * p.channels;
      const float4 v = *reinterpret_cast<const float4*>(s.src + n * s.src_batch_stride + c * s.src_plane + r);
      *reinterpret_cast<float4*>(p.dst + n * p.dst_batch_stride + c * p.dst_plane + s.dst_offset + r) = v;
    }
    return;
  }
  const int64_t total = s.len * planes;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += stride) {
    const int64_t plane = i / s.len, r = i - plane * s.len;
    const int64_t n = plane / p.channels, c = plane - n * p.channels;
    p.dst[n * p.dst_batch_stride + c * p.dst_plane + s.dst_offset + r] =
        s.src[n * s.src_batch_stride + c * s.src_plane + r];
  }
}

// One warp per output feature; lanes stride over the input features, then reduce.
__global__ void linear_kernel(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
                              float* __restrict__ y, int64_t n, int64_t in, int64_t out, int vec4) {
  const int lane = threadIdx.x % 32;
  const int64_t o = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32;
  if (o >= out) return;
  const float* wr = w + o * in;
  for (int64_t k = 0; k < n; ++k) {
    const float* xr = x + k * in;
    float acc = 0.f;
    if (vec4) {
      const float4* w4 = reinterpret_cast<const float4*>(wr);
      const float4* x4 = reinterpret_cast<const float4*>(xr);
      for (int64_t i = lane; i < in / 4; i += 32) {
        const float4 a = w4[i], v = x4[i];
        acc = fmaf(a.x, v.x, acc);
        acc = fmaf(a.y, v.y, acc);
        acc = fmaf(a.z, v.z, acc);
        acc = fmaf(a.w, v.w, acc);
      }
    } else {
      for (int64_t i = lane; i < in; i += 32) acc = fmaf(wr[i], xr[i], acc);
    }
    for (int off = 16; off > 0; off /= 2) acc += __shfl_down_sync(0xffffffffu, acc, off);
    if (lane == 0) y[k * out + o] = acc + (b ? b[o] : 0.f);
  }
}

__global__ void __launch_bounds__(kBlockThreads) pool_tiled_kernel(const __grid_constant__ PoolParams p) {
  extern __shared__ float smem[];
  const int tiles_w = (p.ow + kTileW - 1) / kTileW;
  const int ox0 = (blockIdx.x % tiles_w) * kTileW, oy0 = (blockIdx.x / tiles_w) * kTileH;
  const int ch = blockIdx.y, b = blockIdx.z;
  const int ih = (kTileH - 1) * p.sh + p.kh, iw = (kTileW - 1) * p.sw + p.kw;
  const float* x = p.x + int64_t(b) * p.x_batch_stride + int64_t(ch) * p.h * p.w;
  // The tile's first row, as a row of x (a band's windows start at whole-tensor rows).
  const int iy0 = (oy0 + p.r0) * p.sh - p.ph - p.i0, ix0 = ox0 * p.sw - p.pw;
  for (int i = threadIdx.x; i < ih * iw; i += blockDim.x) {
    const int r = i / iw, q = i - r * iw;
    const int yy = iy0 + r, xx = ix0 + q;
    // Cells outside the input are never read: windows are clipped below.
    smem[i] = (yy >= 0 && yy < p.h && xx >= 0 && xx < p.w) ? x[yy * p.w + xx] : 0.f;
  }
  __syncthreads();
  const int ox = ox0 + threadIdx.x % kTileW;
  if (ox >= p.ow) return;
  float* yc = p.y + (int64_t(b) * p.c + ch) * p.oh * p.ow;
  for (int ty = threadIdx.x / kTileW; ty < kTileH; ty += kRowsPerPass) {
    const int oy = oy0 + ty;
    if (oy >= p.oh) break;
    yc[int64_t(oy) * p.ow + ox] = pool_reduce(p, pool_window(p, oy, ox), [&](int yy, int xx) {
      return smem[(yy - iy0) * iw + (xx - ix0)];
    });
  }
}

}  // namespace

void launch_pool_tiled(const PoolParams& p, cudaStream_t stream) {
  const int tiles = ((p.ow + kTileW - 1) / kTileW) * ((p.oh + kTileH - 1) / kTileH);
  const int ih = (kTileH - 1) * p.sh + p.kh, iw = (kTileW - 1) * p.sw + p.kw;
  pool_tiled_kernel<<<dim3(unsigned(tiles), unsigned(p.c), unsigned(p.n)), kBlockThreads,
                      size_t(ih * iw) * sizeof(float), stream>>>(p);
  HIOS_CUDA_CHECK_LAUNCH();
}

void launch_bias_act(const float* x, float* y, const float* bias, int act, int64_t n, int64_t c, int64_t hw,
                     int nhwc, cudaStream_t stream) {
  const int64_t total = n * c * hw;
  if (total <= 0 || (!bias && act == 0 && x == y)) return;
  bias_act_kernel<<<grid_for(total), kThreads, 0, stream>>>(x, y, bias, act, c, hw, nhwc, total);
  HIOS_CUDA_CHECK_LAUNCH();
}

void launch_depthwise(const DepthwiseParams& p, cudaStream_t stream) {
  if (p.nhwc) {
    // Square windows of NASNet's and MobileNet's sizes get the register-cached kernel.
    auto fixed = [&](auto kernel, int run) {
      const int64_t total = int64_t(p.n) * p.oh * ((p.ow + run - 1) / run) * p.c;
      if (total > 0) kernel<<<grid_for(total), kThreads, 0, stream>>>(p);
    };
    // (The fixed kernels index (item, row, run) in 32 bits.)
    const bool small = int64_t(p.n) * p.oh * p.ow <= int64_t(INT32_MAX);
    const int k = small && p.kh == p.kw && p.sh == p.sw ? p.kh * 10 + p.sh : 0;
    switch (k) {
      case 31: fixed(depthwise_nhwc_fixed_kernel<3, 1, 8>, 8); break;
      case 32: fixed(depthwise_nhwc_fixed_kernel<3, 2, 4>, 4); break;
      case 51: fixed(depthwise_nhwc_fixed_kernel<5, 1, 8>, 8); break;
      case 52: fixed(depthwise_nhwc_fixed_kernel<5, 2, 4>, 4); break;
      case 71: fixed(depthwise_nhwc_fixed_kernel<7, 1, 8>, 8); break;
      case 72: fixed(depthwise_nhwc_fixed_kernel<7, 2, 4>, 4); break;
      default: {
        const int64_t total = int64_t(p.n) * p.oh * ((p.ow + kDwRun - 1) / kDwRun) * p.c;
        if (total > 0) depthwise_nhwc_kernel<<<grid_for(total), kThreads, 0, stream>>>(p);
      }
    }
    HIOS_CUDA_CHECK_LAUNCH();
    return;
  }
  const int tiles = ((p.ow + kTileW - 1) / kTileW) * ((p.oh + kTileH - 1) / kTileH);
  const int ih = (kTileH - 1) * p.sh + p.kh, iw = (kTileW - 1) * p.sw + p.kw;
  const size_t smem = size_t(ih * iw + p.kh * p.kw) * sizeof(float);
  depthwise_kernel<<<dim3(unsigned(tiles), unsigned(p.c), unsigned(p.n)), kBlockThreads, smem, stream>>>(p);
  HIOS_CUDA_CHECK_LAUNCH();
}

void launch_linear(const float* x, const float* w, const float* b, float* y, int64_t n, int64_t in, int64_t out,
                   cudaStream_t stream) {
  const int warps = 8;
  const int vec4 = in % 4 == 0 && (reinterpret_cast<uintptr_t>(x) & 15u) == 0 && (reinterpret_cast<uintptr_t>(w) & 15u) == 0;
  linear_kernel<<<unsigned((out + warps - 1) / warps), warps * 32, 0, stream>>>(x, w, b, y, n, in, out, vec4);
  HIOS_CUDA_CHECK_LAUNCH();
}

void launch_combine(const CombineParams& p, cudaStream_t stream) {
  if (p.num_terms <= 0) return;
  if (p.mode == CombineMode::Product) {
    combine_product_kernel<<<grid_for(p.terms[0].len * p.terms[0].rows * p.batch), kThreads, 0, stream>>>(p);
  } else {
    int64_t most = 0;
    for (int t = 0; t < p.num_terms; ++t) {
      most = std::max(most, p.terms[t].len * p.terms[t].rows * p.batch / (p.terms[t].vec4 ? 4 : 1));
    }
    dim3 grid(grid_for(most), p.num_terms);
    combine_sum_kernel<<<grid, kThreads, 0, stream>>>(p);
  }
  HIOS_CUDA_CHECK_LAUNCH();
}

void launch_conv_direct(const DirectConvParams& p, cudaStream_t stream) {
  const int64_t total = int64_t(p.n) * p.oc * p.oh * p.ow;
  if (total <= 0) return;
  if (p.nhwc) {
    conv_direct_kernel<true><<<grid_for(total), kThreads, 0, stream>>>(p);
  } else {
    conv_direct_kernel<false><<<grid_for(total), kThreads, 0, stream>>>(p);
  }
  HIOS_CUDA_CHECK_LAUNCH();
}

void launch_rows(const RowsParams& p, cudaStream_t stream) {
  if (p.num_segments <= 0) return;
  int64_t most = 0;
  for (int i = 0; i < p.num_segments; ++i) {
    most = std::max(most, p.segs[i].len * p.channels * p.batch / (p.segs[i].vec4 ? 4 : 1));
  }
  if (most <= 0) return;
  rows_kernel<<<dim3(unsigned(grid_for(most)), unsigned(p.num_segments)), kThreads, 0, stream>>>(p);
  HIOS_CUDA_CHECK_LAUNCH();
}

void launch_pool(const PoolParams& p, cudaStream_t stream) {
  const int64_t total = int64_t(p.n) * p.c * p.oh * p.ow;
  if (total <= 0) return;
  if (p.nhwc) {
    const bool vec4 = p.c % 4 == 0 && p.x_pixel_stride % 4 == 0 && p.x_batch_stride % 4 == 0 &&
                      (reinterpret_cast<uintptr_t>(p.x) & 15u) == 0 && (reinterpret_cast<uintptr_t>(p.y) & 15u) == 0;
    const int64_t threads = int64_t(vec4 ? p.c / 4 : p.c) * ((p.ow + kPoolRun - 1) / kPoolRun);
    const dim3 grid(unsigned((threads + kThreads - 1) / kThreads), unsigned(std::min<int64_t>(int64_t(p.n) * p.oh, 65535)));
    if (vec4) {
      pool_nhwc_kernel<4><<<grid, kThreads, 0, stream>>>(p);
    } else {
      pool_nhwc_kernel<1><<<grid, kThreads, 0, stream>>>(p);
    }
    HIOS_CUDA_CHECK_LAUNCH();
    return;
  }
  pool_kernel<<<grid_for(total), kThreads, 0, stream>>>(p);
  HIOS_CUDA_CHECK_LAUNCH();
}

}  // namespace hios::cuda
